//! Velocity sets. Every set is ordered as rest velocity first, then opposite pairs:
//! `c[i + 1] == -c[i]` for odd `i`. The in-place streaming schemes rely on that order.

use serde::{Deserialize, Serialize};

/// Largest number of velocities of any supported set (D3Q27).
pub const MAX_Q: usize = 27;

/// A velocity set known at compile time. Solver loops are generic over it so the compiler
/// unrolls the direction loops.
pub trait Lat: Send + Sync + 'static {
    /// Spatial dimensions (2 or 3).
    const D: usize;
    /// Number of velocities.
    const Q: usize;
    /// Velocities (z = 0 for 2D sets).
    const C: &'static [[i32; 3]];
    /// Weights.
    const W: &'static [f32];
    /// The runtime tag of this set.
    const KIND: Lattice;
}

/// D2Q9.
pub struct D2Q9;
/// D3Q19.
pub struct D3Q19;
/// D3Q27.
pub struct D3Q27;

const W9: [f32; 9] = [4.0 / 9.0, 1.0 / 9.0, 1.0 / 9.0, 1.0 / 9.0, 1.0 / 9.0, 1.0 / 36.0, 1.0 / 36.0, 1.0 / 36.0, 1.0 / 36.0];
const C9: [[i32; 3]; 9] = [[0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [1, 1, 0], [-1, -1, 0], [1, -1, 0], [-1, 1, 0]];

const C19: [[i32; 3]; 19] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
    [1, 1, 0],
    [-1, -1, 0],
    [1, 0, 1],
    [-1, 0, -1],
    [0, 1, 1],
    [0, -1, -1],
    [1, -1, 0],
    [-1, 1, 0],
    [1, 0, -1],
    [-1, 0, 1],
    [0, 1, -1],
    [0, -1, 1],
];
const W19: [f32; 19] = [
    1.0 / 3.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 18.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
];

const C27: [[i32; 3]; 27] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
    [1, 1, 0],
    [-1, -1, 0],
    [1, 0, 1],
    [-1, 0, -1],
    [0, 1, 1],
    [0, -1, -1],
    [1, -1, 0],
    [-1, 1, 0],
    [1, 0, -1],
    [-1, 0, 1],
    [0, 1, -1],
    [0, -1, 1],
    [1, 1, 1],
    [-1, -1, -1],
    [1, 1, -1],
    [-1, -1, 1],
    [1, -1, 1],
    [-1, 1, -1],
    [-1, 1, 1],
    [1, -1, -1],
];
const W27: [f32; 27] = [
    8.0 / 27.0,
    2.0 / 27.0,
    2.0 / 27.0,
    2.0 / 27.0,
    2.0 / 27.0,
    2.0 / 27.0,
    2.0 / 27.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 54.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
    1.0 / 216.0,
];

impl Lat for D2Q9 {
    const D: usize = 2;
    const Q: usize = 9;
    const C: &'static [[i32; 3]] = &C9;
    const W: &'static [f32] = &W9;
    const KIND: Lattice = Lattice::D2Q9;
}
impl Lat for D3Q19 {
    const D: usize = 3;
    const Q: usize = 19;
    const C: &'static [[i32; 3]] = &C19;
    const W: &'static [f32] = &W19;
    const KIND: Lattice = Lattice::D3Q19;
}
impl Lat for D3Q27 {
    const D: usize = 3;
    const Q: usize = 27;
    const C: &'static [[i32; 3]] = &C27;
    const W: &'static [f32] = &W27;
    const KIND: Lattice = Lattice::D3Q27;
}

/// Runtime choice of velocity set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Lattice {
    /// Two dimensions, nine velocities.
    D2Q9,
    /// Three dimensions, nineteen velocities.
    D3Q19,
    /// Three dimensions, twenty-seven velocities.
    D3Q27,
}

impl Lattice {
    /// All supported sets.
    pub const ALL: [Lattice; 3] = [Lattice::D2Q9, Lattice::D3Q19, Lattice::D3Q27];

    /// Spatial dimensions.
    #[must_use]
    pub fn dims(self) -> usize {
        match self {
            Lattice::D2Q9 => 2,
            _ => 3,
        }
    }
    /// Number of velocities.
    #[must_use]
    pub fn q(self) -> usize {
        match self {
            Lattice::D2Q9 => 9,
            Lattice::D3Q19 => 19,
            Lattice::D3Q27 => 27,
        }
    }
    /// Velocities.
    #[must_use]
    pub fn velocities(self) -> &'static [[i32; 3]] {
        match self {
            Lattice::D2Q9 => D2Q9::C,
            Lattice::D3Q19 => D3Q19::C,
            Lattice::D3Q27 => D3Q27::C,
        }
    }
    /// Weights.
    #[must_use]
    pub fn weights(self) -> &'static [f32] {
        match self {
            Lattice::D2Q9 => D2Q9::W,
            Lattice::D3Q19 => D3Q19::W,
            Lattice::D3Q27 => D3Q27::W,
        }
    }
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Lattice::D2Q9 => "D2Q9",
            Lattice::D3Q19 => "D3Q19",
            Lattice::D3Q27 => "D3Q27",
        }
    }
}

impl std::fmt::Display for Lattice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Index of the velocity opposite to `i` (rest maps to itself).
#[inline(always)]
#[must_use]
pub const fn opposite(i: usize) -> usize {
    if i == 0 {
        0
    } else if i % 2 == 1 {
        i + 1
    } else {
        i - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(l: Lattice) {
        let c = l.velocities();
        let w = l.weights();
        assert_eq!(c.len(), l.q());
        assert_eq!(c[0], [0, 0, 0]);
        for i in (1..l.q()).step_by(2) {
            for a in 0..3 {
                assert_eq!(c[i + 1][a], -c[i][a], "{l}: pair {i}");
            }
            assert_eq!(w[i], w[i + 1]);
        }
        // Isotropy up to second order: sum w = 1, sum w c_a c_b = delta_ab / 3.
        let s: f64 = w.iter().map(|&x| f64::from(x)).sum();
        assert!((s - 1.0).abs() < 1e-6);
        for a in 0..l.dims() {
            for b in 0..l.dims() {
                let m: f64 = (0..l.q()).map(|i| f64::from(w[i]) * f64::from(c[i][a] * c[i][b])).sum();
                let want = if a == b { 1.0 / 3.0 } else { 0.0 };
                assert!((m - want).abs() < 1e-6, "{l}: second moment {a}{b} = {m}");
            }
        }
        // All velocities distinct.
        for i in 0..l.q() {
            for j in 0..i {
                assert_ne!(c[i], c[j]);
            }
        }
    }

    #[test]
    fn sets_are_ordered_in_opposite_pairs_and_isotropic() {
        for l in Lattice::ALL {
            check(l);
        }
    }
}
