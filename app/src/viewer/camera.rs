//! The view camera: orbit, pan and zoom around the domain (3D), zoom and pan over the image (2D).

use glam::{Mat4, Vec3};

/// Orbit camera. World space is in cells; the domain is the box `[0, n]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Camera {
    /// Angle around the y axis (radians).
    pub yaw: f32,
    /// Angle above the x-z plane (radians).
    pub pitch: f32,
    /// Zoom factor (1 = the domain fits the view).
    pub zoom: f32,
    /// Pan offset of the look-at point, in units of the domain's size (so it survives a scene change).
    pub pan: [f32; 3],
}

impl Default for Camera {
    fn default() -> Camera {
        Camera { yaw: 0.6, pitch: 0.45, zoom: 1.0, pan: [0.0; 3] }
    }
}

impl Camera {
    /// Back to the default view.
    pub fn reset(&mut self) {
        *self = Camera::default();
    }

    /// Orbit by a mouse drag of (dx, dy) pixels.
    pub fn orbit(&mut self, dx: f32, dy: f32) {
        self.yaw -= dx * 0.008;
        self.pitch = (self.pitch + dy * 0.008).clamp(-1.55, 1.55);
    }

    /// Zoom by a scroll of `delta` points (positive: closer).
    pub fn zoom_by(&mut self, delta: f32) {
        self.zoom = (self.zoom * (delta * 0.002).exp()).clamp(0.05, 200.0);
    }

    /// Pan by a drag of (dx, dy) pixels in a view of `size` pixels: the point under the mouse
    /// stays under the mouse (in the plane through the look-at point).
    pub fn pan_by(&mut self, n: [usize; 3], dx: f32, dy: f32, size: [f32; 2], is_2d: bool) {
        let (w, h) = (size[0].max(1.0), size[1].max(1.0));
        let aspect = w / h;
        let nf = Vec3::new(n[0] as f32, n[1] as f32, n[2] as f32);
        if is_2d {
            let (_, view_h) = fit_2d(nf, aspect);
            let per_px = view_h / self.zoom / h;
            self.pan[0] -= dx * per_px / nf.x;
            self.pan[1] += dy * per_px / nf.y;
            return;
        }
        let (right, up, _) = self.basis();
        let per_px = 2.0 * self.distance(n, aspect) * (FOV * 0.5).tan() / h;
        let d = (-right * dx + up * dy) * per_px;
        for a in 0..3 {
            self.pan[a] += d[a] / nf[a].max(1.0);
        }
    }

    fn distance(&self, n: [usize; 3], aspect: f32) -> f32 {
        let radius = diag(n) * 0.5;
        // Distance at which the bounding sphere fits the smaller of the two view angles.
        let half_v = FOV * 0.5;
        let half_h = ((FOV * 0.5).tan() * aspect).atan();
        radius / half_v.min(half_h).sin() / self.zoom
    }

    fn basis(&self) -> (Vec3, Vec3, Vec3) {
        let back = Vec3::new(self.pitch.cos() * self.yaw.sin(), self.pitch.sin(), self.pitch.cos() * self.yaw.cos());
        let right = Vec3::Y.cross(back).normalize_or(Vec3::X);
        let up = back.cross(right);
        (right, up, back)
    }

    /// Clip space from world space for a domain of `n` cells in a view of `aspect` = width / height.
    #[must_use]
    pub fn clip_from_world(&self, n: [usize; 3], aspect: f32, is_2d: bool) -> Mat4 {
        let nf = Vec3::new(n[0] as f32, n[1] as f32, n[2] as f32);
        let target = nf * 0.5 + Vec3::from(self.pan) * nf;
        if is_2d {
            let (w, h) = fit_2d(nf, aspect);
            let (w, h) = (w / self.zoom, h / self.zoom);
            let view = Mat4::look_at_rh(Vec3::new(target.x, target.y, 10.0), Vec3::new(target.x, target.y, 0.0), Vec3::Y);
            let proj = Mat4::orthographic_rh(-w / 2.0, w / 2.0, -h / 2.0, h / 2.0, 0.1, 100.0);
            return proj * view;
        }
        let radius = diag(n) * 0.5;
        let dist = self.distance(n, aspect);
        let eye = self.eye(n, aspect);
        let view = Mat4::look_at_rh(eye, target, Vec3::Y);
        let proj = Mat4::perspective_rh(FOV, aspect, (dist - radius * 1.5).max(dist * 0.01), dist + radius * 2.0);
        proj * view
    }

    /// The 3D camera's position in world space (cells) for a view of `aspect` = width / height.
    #[must_use]
    pub fn eye(&self, n: [usize; 3], aspect: f32) -> Vec3 {
        let nf = Vec3::new(n[0] as f32, n[1] as f32, n[2] as f32);
        let target = nf * 0.5 + Vec3::from(self.pan) * nf;
        let (_, _, back) = self.basis();
        target + back * self.distance(n, aspect)
    }

    /// The world-space ray through a point of the view: `ndc` in [-1, 1] (x right, y up) in a view
    /// of `aspect` = width / height. Returns (origin, unit direction).
    #[must_use]
    pub fn ray(&self, n: [usize; 3], aspect: f32, is_2d: bool, ndc: [f32; 2]) -> (Vec3, Vec3) {
        let inv = self.clip_from_world(n, aspect, is_2d).inverse();
        let at = |z: f32| {
            let p = inv * glam::Vec4::new(ndc[0], ndc[1], z, 1.0);
            p.truncate() / p.w
        };
        let (a, b) = (at(0.0), at(1.0));
        (a, (b - a).normalize_or(Vec3::NEG_Z))
    }

    /// Where the ray through `ndc` meets the plane `world[axis] = coord`, if it does (in front of
    /// the camera). In 2D the plane is the image itself (use axis 2).
    #[must_use]
    pub fn pick_plane(&self, n: [usize; 3], aspect: f32, is_2d: bool, ndc: [f32; 2], axis: usize, coord: f32) -> Option<Vec3> {
        let (o, d) = self.ray(n, aspect, is_2d, ndc);
        if d[axis].abs() < 1e-6 {
            return None;
        }
        let t = (coord - o[axis]) / d[axis];
        (t >= 0.0).then(|| {
            let mut p = o + d * t;
            p[axis] = coord;
            p
        })
    }

    /// Pixel position (x right, y down) of a world point in a view of `size` pixels, if in front.
    #[must_use]
    pub fn project(&self, n: [usize; 3], size: [u32; 2], is_2d: bool, p: [f32; 3]) -> Option<[f32; 2]> {
        let m = self.clip_from_world(n, size[0] as f32 / size[1] as f32, is_2d);
        let c = m * glam::Vec4::new(p[0], p[1], p[2], 1.0);
        if c.w <= 0.0 {
            return None;
        }
        let ndc = c / c.w;
        Some([(ndc.x + 1.0) * 0.5 * size[0] as f32, (1.0 - ndc.y) * 0.5 * size[1] as f32])
    }
}

/// Vertical field of view of the 3D camera.
const FOV: f32 = std::f32::consts::FRAC_PI_4;

/// World width and height a 2D view of `aspect` shows at zoom 1: the domain fits, aspect kept.
fn fit_2d(nf: Vec3, aspect: f32) -> (f32, f32) {
    if nf.x / nf.y > aspect {
        (nf.x, nf.x / aspect)
    } else {
        (nf.y * aspect, nf.y)
    }
}

fn diag(n: [usize; 3]) -> f32 {
    Vec3::new(n[0] as f32, n[1] as f32, n[2] as f32).length()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_d_view_fits_the_domain_and_keeps_its_aspect() {
        let c = Camera::default();
        let n = [400, 100, 1];
        // A wide view: the domain's height fills it; the centre maps to the centre.
        let p = c.project(n, [800, 200], true, [200.0, 50.0, 0.5]).unwrap();
        assert!((p[0] - 400.0).abs() < 1e-3 && (p[1] - 100.0).abs() < 1e-3);
        let corner = c.project(n, [800, 200], true, [0.0, 0.0, 0.5]).unwrap();
        assert!(corner[0].abs() < 1e-3 && (corner[1] - 200.0).abs() < 1e-3, "{corner:?}");
        // A square view: the width fills it; letterbox above and below.
        let corner = c.project(n, [400, 400], true, [0.0, 100.0, 0.5]).unwrap();
        assert!(corner[0].abs() < 1e-3 && (corner[1] - 150.0).abs() < 1e-3, "{corner:?}");
    }

    #[test]
    fn orbit_zoom_pan_and_reset() {
        let mut c = Camera::default();
        let n = [64, 32, 32];
        let before = c.project(n, [400, 300], false, [32.0, 16.0, 16.0]).unwrap();
        assert!((before[0] - 200.0).abs() < 1e-2 && (before[1] - 150.0).abs() < 1e-2);
        c.orbit(50.0, 20.0);
        c.zoom_by(100.0);
        assert!(c.zoom > 1.0);
        let centre = c.project(n, [400, 300], false, [32.0, 16.0, 16.0]).unwrap();
        c.pan_by(n, 40.0, -10.0, [400.0, 300.0], false);
        let after = c.project(n, [400, 300], false, [32.0, 16.0, 16.0]).unwrap();
        assert!((after[0] - centre[0] - 40.0).abs() < 0.5 && (after[1] - centre[1] + 10.0).abs() < 0.5, "{centre:?} -> {after:?}");
        let mut c2 = Camera::default();
        c2.pan_by([400, 100, 1], 30.0, 20.0, [800.0, 200.0], true);
        let p = c2.project([400, 100, 1], [800, 200], true, [200.0, 50.0, 0.5]).unwrap();
        assert!((p[0] - 430.0).abs() < 1e-2 && (p[1] - 120.0).abs() < 1e-2, "{p:?}");
        c.reset();
        assert_eq!(c, Camera::default());
    }

    #[test]
    fn picking_inverts_the_projection() {
        // 2D: the pixel of a cell centre picks that cell centre, panned and zoomed too.
        let mut c = Camera::default();
        c.zoom_by(150.0);
        c.pan_by([400, 100, 1], 30.0, 20.0, [800.0, 200.0], true);
        let size = [800u32, 200u32];
        let ndc = |px: [f32; 2], size: [u32; 2]| [px[0] / size[0] as f32 * 2.0 - 1.0, 1.0 - px[1] / size[1] as f32 * 2.0];
        for p in [[200.5f32, 50.5, 0.5], [180.5, 41.5, 0.5]] {
            let px = c.project([400, 100, 1], size, true, p).unwrap();
            let w = c.pick_plane([400, 100, 1], 4.0, true, ndc(px, size), 2, 0.5).unwrap();
            assert!((w.x - p[0]).abs() < 1e-2 && (w.y - p[1]).abs() < 1e-2, "{w} vs {p:?}");
        }
        // 3D: a point on a z slice plane is found again on that plane, after orbiting.
        let mut c = Camera::default();
        c.orbit(40.0, -25.0);
        let (n, size) = ([64, 32, 24], [400u32, 300u32]);
        let p = [20.25f32, 11.75, 9.5];
        let px = c.project(n, size, false, p).unwrap();
        let w = c.pick_plane(n, 400.0 / 300.0, false, ndc(px, size), 2, 9.5).unwrap();
        assert!((w - Vec3::from(p)).length() < 1e-2, "{w} vs {p:?}");
        // A ray parallel to the plane misses.
        let top = Camera { yaw: 0.0, pitch: 0.0, ..Camera::default() };
        assert!(top.pick_plane(n, 1.0, false, [0.0, 0.0], 1, 16.5).is_none());
    }
}
