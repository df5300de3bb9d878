//! Derived fields computed from density and velocity: vorticity and the Q criterion, by
//! central differences (periodic wrap at the domain edges, zero velocity inside solids).

use rayon::prelude::*;

/// Density and velocity of every cell (solid cells: density 1, velocity 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields {
    /// Cells per axis.
    pub size: [usize; 3],
    /// Density.
    pub rho: Vec<f32>,
    /// Velocity, three components per cell.
    pub u: Vec<[f32; 3]>,
    /// Whether the cell is solid.
    pub solid: Vec<bool>,
}

/// A field a user can look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// Density.
    Density,
    /// Velocity magnitude.
    Speed,
    /// x velocity.
    Ux,
    /// y velocity.
    Uy,
    /// z velocity.
    Uz,
    /// Vorticity magnitude.
    Vorticity,
    /// Q criterion: (|Omega|^2 - |S|^2) / 2.
    Q,
}

impl FieldKind {
    /// Every field.
    pub const ALL: [FieldKind; 7] =
        [FieldKind::Speed, FieldKind::Ux, FieldKind::Uy, FieldKind::Uz, FieldKind::Density, FieldKind::Vorticity, FieldKind::Q];
    /// Short name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FieldKind::Density => "rho",
            FieldKind::Speed => "|u|",
            FieldKind::Ux => "ux",
            FieldKind::Uy => "uy",
            FieldKind::Uz => "uz",
            FieldKind::Vorticity => "|vorticity|",
            FieldKind::Q => "Q",
        }
    }
}

/// Velocity gradient tensor `g[a][b] = d u_a / d x_b` at every cell (see [`gradient_at`]).
fn gradients(f: &Fields) -> Vec<[[f32; 3]; 3]> {
    let n = f.size;
    let idx = |p: [usize; 3]| p[0] + n[0] * (p[1] + n[1] * p[2]);
    (0..f.u.len())
        .into_par_iter()
        .map(|i| {
            let p = [i % n[0], (i / n[0]) % n[1], i / (n[0] * n[1])];
            gradient_at(n, p, f.solid[i], |q| f.u[idx(q)])
        })
        .collect()
}

/// Velocity gradient tensor `g[a][b] = d u_a / d x_b` at cell `p` of a grid of `n` cells, by
/// central differences of the velocities `u_at` gives for the two neighbours along each axis:
/// indices wrap periodically at the domain edges, an axis of fewer than 3 cells (z in 2D) has
/// no gradient, and a solid cell (`solid`) has none at all. `u_at` must give zero velocity in
/// solid cells, as [`Fields`] stores them, so that a fluid cell next to an obstacle sees the
/// wall at rest. Every derived field ([`vorticity`], [`q_criterion`]) and the probes
/// ([`crate::probes`]) go through this one function, so they agree cell for cell.
pub fn gradient_at(n: [usize; 3], p: [usize; 3], solid: bool, u_at: impl Fn([usize; 3]) -> [f32; 3]) -> [[f32; 3]; 3] {
    let mut g = [[0.0f32; 3]; 3];
    if solid {
        return g;
    }
    for b in 0..3 {
        if n[b] < 3 {
            continue;
        }
        let mut hi = p;
        let mut lo = p;
        hi[b] = (p[b] + 1) % n[b];
        lo[b] = (p[b] + n[b] - 1) % n[b];
        let uh = u_at(hi);
        let ul = u_at(lo);
        for a in 0..3 {
            g[a][b] = 0.5 * (uh[a] - ul[a]);
        }
    }
    g
}

/// The vorticity vector (curl of the velocity) of one velocity gradient tensor
/// `g[a][b] = d u_a / d x_b`.
#[must_use]
pub fn curl_of_gradient(g: &[[f32; 3]; 3]) -> [f32; 3] {
    [g[2][1] - g[1][2], g[0][2] - g[2][0], g[1][0] - g[0][1]]
}

/// Vorticity vector at every cell.
#[must_use]
pub fn vorticity(f: &Fields) -> Vec<[f32; 3]> {
    gradients(f).iter().map(curl_of_gradient).collect()
}

/// Q criterion at every cell.
#[must_use]
pub fn q_criterion(f: &Fields) -> Vec<f32> {
    gradients(f).iter().map(q_of_gradient).collect()
}

/// The Q criterion `(|Omega|^2 - |S|^2) / 2` of one velocity gradient tensor (either index
/// order: Q does not change under transposition).
#[must_use]
pub fn q_of_gradient(g: &[[f32; 3]; 3]) -> f32 {
    let mut s2 = 0.0;
    let mut o2 = 0.0;
    for a in 0..3 {
        for b in 0..3 {
            let s = 0.5 * (g[a][b] + g[b][a]);
            let o = 0.5 * (g[a][b] - g[b][a]);
            s2 += s * s;
            o2 += o * o;
        }
    }
    0.5 * (o2 - s2)
}

/// One scalar field for display.
#[must_use]
pub fn scalar(f: &Fields, kind: FieldKind) -> Vec<f32> {
    match kind {
        FieldKind::Density => f.rho.clone(),
        FieldKind::Speed => f.u.iter().map(|u| (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt()).collect(),
        FieldKind::Ux => f.u.iter().map(|u| u[0]).collect(),
        FieldKind::Uy => f.u.iter().map(|u| u[1]).collect(),
        FieldKind::Uz => f.u.iter().map(|u| u[2]).collect(),
        FieldKind::Vorticity => vorticity(f).iter().map(|w| (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt()).collect(),
        FieldKind::Q => q_criterion(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solid_body_rotation_has_vorticity_two_omega_and_positive_q() {
        let n = [16, 16, 1];
        let mut f = Fields { size: n, rho: vec![1.0; 256], u: vec![[0.0; 3]; 256], solid: vec![false; 256] };
        let w = 0.01;
        for y in 0..16 {
            for x in 0..16 {
                f.u[x + 16 * y] = [-w * (y as f32 - 8.0), w * (x as f32 - 8.0), 0.0];
            }
        }
        let v = vorticity(&f);
        let q = q_criterion(&f);
        let c = 8 + 16 * 8;
        assert!((v[c][2] - 2.0 * w).abs() < 1e-6);
        assert!((q[c] - w * w).abs() < 1e-7);
    }
}
