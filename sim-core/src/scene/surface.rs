//! The exact shapes of obstacles (sphere, cylinder, box, STL mesh), in cell coordinates, and
//! where a lattice link from a cell crosses one: the wall fraction q of interpolated
//! bounce-back ([`crate::walls`]).

use super::{voxel, Obstacle};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The exact shape of an obstacle, in cell coordinates.
#[derive(Clone, Debug)]
pub enum Surface {
    /// A sphere (a disc in 2D).
    Sphere {
        /// Centre.
        c: [f64; 3],
        /// Radius.
        r: f64,
    },
    /// A cylinder along `axis`, finite when `half` (half the length) is given.
    Cylinder {
        /// A point on the axis.
        c: [f64; 3],
        /// Radius.
        r: f64,
        /// Axis index (2 in 2D: the disc).
        axis: usize,
        /// Half the length.
        half: Option<f64>,
    },
    /// An axis-aligned box.
    Box {
        /// Lower corner.
        lo: [f64; 3],
        /// Upper corner.
        hi: [f64; 3],
    },
    /// A triangle mesh, placed.
    Mesh(Arc<Mesh>),
}

/// A placed triangle mesh with its triangles binned by unit cells for link queries.
#[derive(Debug)]
pub struct Mesh {
    tris: Vec<[[f64; 3]; 3]>,
    bins: HashMap<[i32; 3], Vec<u32>>,
}

impl Mesh {
    fn new(tris: Vec<[[f64; 3]; 3]>) -> Mesh {
        let mut bins: HashMap<[i32; 3], Vec<u32>> = HashMap::new();
        for (k, t) in tris.iter().enumerate() {
            let lo: [i32; 3] = std::array::from_fn(|a| t.iter().map(|v| v[a]).fold(f64::MAX, f64::min).floor() as i32);
            let hi: [i32; 3] = std::array::from_fn(|a| t.iter().map(|v| v[a]).fold(f64::MIN, f64::max).floor() as i32);
            for z in lo[2]..=hi[2] {
                for y in lo[1]..=hi[1] {
                    for x in lo[0]..=hi[0] {
                        bins.entry([x, y, z]).or_default().push(k as u32);
                    }
                }
            }
        }
        Mesh { tris, bins }
    }

    /// Smallest t in [0, 1] where the segment p -> p + c crosses a triangle.
    fn first_hit(&self, p: [f64; 3], c: [f64; 3]) -> Option<f64> {
        let lo: [i32; 3] = std::array::from_fn(|a| p[a].min(p[a] + c[a]).floor() as i32);
        let hi: [i32; 3] = std::array::from_fn(|a| p[a].max(p[a] + c[a]).floor() as i32);
        let mut best: Option<f64> = None;
        for z in lo[2]..=hi[2] {
            for y in lo[1]..=hi[1] {
                for x in lo[0]..=hi[0] {
                    let Some(ks) = self.bins.get(&[x, y, z]) else { continue };
                    for &k in ks {
                        if let Some(t) = segment_triangle(p, c, &self.tris[k as usize]) {
                            best = Some(best.map_or(t, |b: f64| b.min(t)));
                        }
                    }
                }
            }
        }
        best
    }
}

/// Möller-Trumbore intersection of the segment p + t c (t in [0, 1], with a little slack for
/// links that end on the surface) with a triangle; edges count as hits so that a link through a
/// shared edge or a crack in a mesh that is not watertight is still found.
fn segment_triangle(p: [f64; 3], c: [f64; 3], t: &[[f64; 3]; 3]) -> Option<f64> {
    let sub = |a: [f64; 3], b: [f64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
    let cross = |a: [f64; 3], b: [f64; 3]| [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
    let dot = |a: [f64; 3], b: [f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let e1 = sub(t[1], t[0]);
    let e2 = sub(t[2], t[0]);
    let h = cross(c, e2);
    let det = dot(e1, h);
    if det.abs() < 1e-12 {
        return None;
    }
    let inv = 1.0 / det;
    let s = sub(p, t[0]);
    let u = inv * dot(s, h);
    const EDGE: f64 = 1e-9;
    if !(-EDGE..=1.0 + EDGE).contains(&u) {
        return None;
    }
    let qv = cross(s, e1);
    let v = inv * dot(c, qv);
    if v < -EDGE || u + v > 1.0 + EDGE {
        return None;
    }
    let tt = inv * dot(e2, qv);
    (-1e-6..=1.0 + 1e-6).contains(&tt).then_some(tt)
}

/// The parameter interval of the line p + t c inside `|x - centre|^2 <= r^2` over the axes
/// `axes`, or None when the line misses.
fn quadric(p: [f64; 3], c: [f64; 3], centre: [f64; 3], r: f64, axes: impl Iterator<Item = usize> + Clone) -> Option<(f64, f64)> {
    let a: f64 = axes.clone().map(|k| c[k] * c[k]).sum();
    let b: f64 = axes.clone().map(|k| (p[k] - centre[k]) * c[k]).sum();
    let k0: f64 = axes.map(|k| (p[k] - centre[k]).powi(2)).sum::<f64>() - r * r;
    if a == 0.0 {
        return (k0 <= 0.0).then_some((f64::NEG_INFINITY, f64::INFINITY));
    }
    let disc = b * b - a * k0;
    if disc < 0.0 {
        return None;
    }
    let s = disc.sqrt();
    Some(((-b - s) / a, (-b + s) / a))
}

/// The parameter interval of the line p + t c with lo <= x_axis <= hi.
fn slab(p: f64, c: f64, lo: f64, hi: f64) -> Option<(f64, f64)> {
    if c == 0.0 {
        return (lo <= p && p <= hi).then_some((f64::NEG_INFINITY, f64::INFINITY));
    }
    let (a, b) = ((lo - p) / c, (hi - p) / c);
    Some((a.min(b), a.max(b)))
}

fn meet(a: Option<(f64, f64)>, b: Option<(f64, f64)>) -> Option<(f64, f64)> {
    let (a, b) = (a?, b?);
    let r = (a.0.max(b.0), a.1.min(b.1));
    (r.0 <= r.1).then_some(r)
}

/// Smallest link fraction a wall may have: a fluid cell whose centre lies on the surface (to
/// rounding) still gets a well-defined interpolation.
const Q_MIN: f64 = 1e-3;

impl Surface {
    /// The exact shape of a scene obstacle in a domain of `dims` dimensions and `n` cells
    /// (`base`: the scene's folder, for STL files).
    ///
    /// # Errors
    /// An unreadable STL file.
    pub fn of(o: &Obstacle, dims: usize, base: &Path) -> Result<Surface, String> {
        let v = |a: [f32; 3]| -> [f64; 3] { std::array::from_fn(|k| if k < dims { f64::from(a[k]) } else { 0.0 }) };
        Ok(match o {
            Obstacle::Sphere { center, radius, .. } => Surface::Sphere { c: v(center.0), r: f64::from(*radius) },
            Obstacle::Cylinder { center, radius, axis, length, .. } => Surface::Cylinder {
                c: v(center.0),
                r: f64::from(*radius),
                axis: if dims == 2 { 2 } else { axis.index() },
                half: length.map(|l| 0.5 * f64::from(l)),
            },
            Obstacle::Box { min, max, .. } => {
                let (mut lo, mut hi) = (v(min.0), v(max.0));
                for a in dims..3 {
                    lo[a] = f64::NEG_INFINITY;
                    hi[a] = f64::INFINITY;
                }
                Surface::Box { lo, hi }
            }
            Obstacle::Stl { file, center, size, .. } => {
                let tris = voxel::read_stl(&base.join(file))?;
                let mut placed = voxel::place_mesh(&tris, center.0, *size)?;
                if dims == 2 {
                    // The 2D slice is taken at z = centre.z; links lie in that plane.
                    let z0 = f64::from(center.0[2]);
                    for t in &mut placed {
                        for p in t.iter_mut() {
                            p[2] -= z0;
                        }
                    }
                }
                Surface::Mesh(Arc::new(Mesh::new(placed)))
            }
        })
    }

    /// Fraction q in (0, 1] of the link from `p` along `c` in front of the surface, for a link
    /// that starts outside the shape and ends inside it; None where the link does not cross the
    /// surface (the wall then stays half-way).
    #[must_use]
    pub fn link_fraction(&self, p: [f64; 3], c: [f64; 3]) -> Option<f64> {
        let range = match self {
            Surface::Sphere { c: centre, r } => quadric(p, c, *centre, *r, 0..3),
            Surface::Cylinder { c: centre, r, axis, half } => {
                let ax = *axis;
                let disc = quadric(p, c, *centre, *r, (0..3).filter(move |&k| k != ax));
                match half {
                    Some(h) => meet(disc, slab(p[ax], c[ax], centre[ax] - h, centre[ax] + h)),
                    None => disc,
                }
            }
            Surface::Box { lo, hi } => {
                (0..3).try_fold((f64::NEG_INFINITY, f64::INFINITY), |r, a| meet(Some(r), slab(p[a], c[a], lo[a], hi[a])))
            }
            Surface::Mesh(m) => return m.first_hit(p, c).map(|t| t.clamp(Q_MIN, 1.0)),
        };
        let (t0, t1) = range?;
        // The link enters the shape at t0; a start inside the shape by more than rounding, or an
        // entry past the link's end, means the voxels and the shape disagree here.
        (t1 >= 0.0 && t0 > -1e-3 && t0 <= 1.0 + 1e-3).then(|| t0.clamp(Q_MIN, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sphere_link_fraction_is_exact() {
        let s = Surface::Sphere { c: [10.0, 10.0, 10.0], r: 3.5 };
        // From x = 6 along +x: the surface is at 6.5.
        assert!((s.link_fraction([6.0, 10.0, 10.0], [1.0, 0.0, 0.0]).unwrap() - 0.5).abs() < 1e-12);
        // Diagonal: |(6 + t, 10 + t) - (10, 10)| = 3.5.
        let q = s.link_fraction([6.0, 10.0, 10.0], [1.0, 1.0, 0.0]).unwrap();
        let p = [6.0 + q, 10.0 + q];
        assert!(((p[0] - 10.0f64).powi(2) + (p[1] - 10.0f64).powi(2) - 3.5 * 3.5).abs() < 1e-9);
        // A link that misses.
        assert!(s.link_fraction([0.0, 0.0, 0.0], [1.0, 0.0, 0.0]).is_none());
    }

    #[test]
    fn box_and_finite_cylinder_fractions() {
        let b = Surface::Box { lo: [2.25, 0.0, 0.0], hi: [5.0, 5.0, 5.0] };
        assert!((b.link_fraction([2.0, 1.0, 1.0], [1.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        let c = Surface::Cylinder { c: [0.0, 0.0, 0.0], r: 2.0, axis: 2, half: Some(1.5) };
        // Along the axis onto the cap at z = 1.5.
        assert!((c.link_fraction([0.0, 0.0, 2.0], [0.0, 0.0, -1.0]).unwrap() - 0.5).abs() < 1e-12);
        // Radially onto the side.
        assert!((c.link_fraction([2.0, 0.0, 0.0], [-1.0, 0.0, 0.0]).unwrap() - Q_MIN).abs() < 1e-12);
        assert!((c.link_fraction([3.0, 0.0, 0.0], [-1.0, 0.0, 0.0]).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_mesh_cube_gives_the_distance_to_its_faces_and_edges() {
        // A cube [1.3, 4.3]^3 from 12 triangles.
        let v = |i: usize| -> [f64; 3] { std::array::from_fn(|a| if i >> a & 1 != 0 { 4.3 } else { 1.3 }) };
        let quads = [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]];
        let tris: Vec<[[f64; 3]; 3]> = quads.iter().flat_map(|q| [[v(q[0]), v(q[1]), v(q[2])], [v(q[0]), v(q[2]), v(q[3])]]).collect();
        let m = Surface::Mesh(Arc::new(Mesh::new(tris)));
        assert!((m.link_fraction([1.0, 2.0, 2.0], [1.0, 0.0, 0.0]).unwrap() - 0.3).abs() < 1e-9);
        // Through the edge x = y = 1.3 diagonally.
        assert!((m.link_fraction([1.0, 1.0, 2.0], [1.0, 1.0, 0.0]).unwrap() - 0.3).abs() < 1e-9);
        assert!(m.link_fraction([0.0, 2.0, 2.0], [1.0, 0.0, 0.0]).is_none());
    }
}
