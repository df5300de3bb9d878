//! Bricks: the domain tiled in small boxes of cells, each classified by the work it needs
//! (the disaggregation of Meneghin & Mahmoud 2025). A GPU backend runs plain-fluid bricks through a lean kernel with
//! no flag reads, boundary bricks through the full kernel, and skips all-solid bricks; the viewer
//! draws the same classes as an overlay.

use crate::domain::{is_solid, Domain};
use rayon::prelude::*;

/// What a brick needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BrickClass {
    /// Every cell solid: skipped.
    Solid = 0,
    /// Every cell plain fluid: the lean kernel.
    Plain = 1,
    /// Anything else (walls, inlets, outlets, cells next to a solid): the boundary kernel.
    Boundary = 2,
}

impl BrickClass {
    /// Every class, in the order of their codes.
    pub const ALL: [BrickClass; 3] = [BrickClass::Solid, BrickClass::Plain, BrickClass::Boundary];

    /// Name for the UI.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            BrickClass::Solid => "all solid (skipped)",
            BrickClass::Plain => "plain fluid (lean kernel)",
            BrickClass::Boundary => "boundary",
        }
    }
}

/// Whether a cell is plain fluid: a fluid cell without the `NEAR` flag, i.e. not a wall, inlet or
/// outlet and with no solid cell among its neighbours along the lattice velocities (that is what
/// `NEAR` records, see [`Domain::mark_near`]). Such a cell streams and collides with no boundary
/// treatment, whatever its neighbours' other flags.
#[inline(always)]
#[must_use]
pub fn is_plain(flag: u8) -> bool {
    flag == 0
}

/// The bricks of a domain: their size and the class of each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrickMap {
    /// Cells per brick along x, y, z (bricks at the far edges may be partial).
    pub brick: [usize; 3],
    /// Bricks along x, y, z.
    pub count: [usize; 3],
    /// Class of each brick, index `bx + count[0] * (by + count[1] * bz)`.
    pub class: Vec<BrickClass>,
}

impl BrickMap {
    /// The brick the viewer and the default [`crate::Solver::bricks`] use: 8^3 cells (8x8 in 2D).
    #[must_use]
    pub fn default_brick(dims: usize) -> [usize; 3] {
        if dims == 2 {
            [8, 8, 1]
        } else {
            [8, 8, 8]
        }
    }

    /// Classify the bricks of `brick` cells (each extent at least 1) of a domain.
    #[must_use]
    pub fn classify(dom: &Domain, brick: [usize; 3]) -> BrickMap {
        let b = brick.map(|x| x.max(1));
        let n = dom.n;
        let count = [n[0].div_ceil(b[0]), n[1].div_ceil(b[1]), n[2].div_ceil(b[2])];
        let class = (0..count[0] * count[1] * count[2])
            .into_par_iter()
            .map(|id| {
                let bx = id % count[0];
                let by = (id / count[0]) % count[1];
                let bz = id / (count[0] * count[1]);
                let (mut all_solid, mut all_plain) = (true, true);
                for z in bz * b[2]..((bz + 1) * b[2]).min(n[2]) {
                    for y in by * b[1]..((by + 1) * b[1]).min(n[1]) {
                        let row = dom.index(0, y, z);
                        for &f in &dom.flags[row + bx * b[0]..row + ((bx + 1) * b[0]).min(n[0])] {
                            all_solid &= is_solid(f);
                            all_plain &= is_plain(f);
                        }
                    }
                }
                if all_plain {
                    BrickClass::Plain
                } else if all_solid {
                    BrickClass::Solid
                } else {
                    BrickClass::Boundary
                }
            })
            .collect();
        BrickMap { brick: b, count, class }
    }

    /// Number of bricks of a class.
    #[must_use]
    pub fn count_of(&self, c: BrickClass) -> usize {
        self.class.iter().filter(|&&k| k == c).count()
    }

    /// Brick coordinates of a brick index.
    #[must_use]
    pub fn coords(&self, id: usize) -> [usize; 3] {
        [id % self.count[0], (id / self.count[0]) % self.count[1], id / (self.count[0] * self.count[1])]
    }

    /// The class codes (`BrickClass as u8`), x fastest: what a renderer uploads as a texture.
    #[must_use]
    pub fn codes(&self) -> Vec<u8> {
        self.class.iter().map(|&c| c as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{kind, make_flag};
    use crate::lattice::Lattice;

    #[test]
    fn classes_of_a_channel_with_a_wall_and_an_obstacle() {
        // 32 x 16 (2D), 8 x 8 bricks: x < 8 solid wall, one solid cell at (20, 4), the rest fluid.
        let mut d = Domain::periodic(Lattice::D2Q9, [32, 16, 1]);
        for y in 0..16 {
            for x in 0..8 {
                let i = d.index(x, y, 0);
                d.flags[i] = make_flag(kind::SOLID, 0);
            }
        }
        let i = d.index(20, 4, 0);
        d.flags[i] = make_flag(kind::SOLID, 1);
        d.mark_near();
        let m = BrickMap::classify(&d, BrickMap::default_brick(2));
        assert_eq!(m.count, [4, 2, 1]);
        use BrickClass::{Boundary as B, Plain as P, Solid as S};
        // Row 0: wall | next to the wall (NEAR) | obstacle | next to the periodic wall at x = 0.
        // Row 1: wall | next to the wall | plain (the obstacle's neighbours end at y = 5) | wall neighbour.
        assert_eq!(m.class, vec![S, B, B, B, S, B, P, B]);
        assert_eq!((m.count_of(S), m.count_of(P), m.count_of(B)), (2, 1, 5));
        assert_eq!(m.coords(6), [2, 1, 0]);
        assert_eq!(m.codes()[6], 1);
    }

    #[test]
    fn partial_bricks_and_odd_sizes_cover_every_cell() {
        // 10^3 with 4^3 bricks: 3 per axis, the last ones 2 cells thick; an empty periodic box is
        // all plain; a solid cell in the last partial brick makes it boundary (and its neighbours'
        // bricks, through NEAR, wrapping periodically: D3Q27 reaches the corner diagonally).
        let mut d = Domain::periodic(Lattice::D3Q27, [10, 10, 10]);
        let m = BrickMap::classify(&d, [4, 4, 4]);
        assert_eq!(m.count, [3, 3, 3]);
        assert!(m.class.iter().all(|&c| c == BrickClass::Plain));
        let i = d.index(9, 9, 9);
        d.flags[i] = make_flag(kind::SOLID, 1);
        d.mark_near();
        let m = BrickMap::classify(&d, [4, 4, 4]);
        assert_eq!(m.class[26], BrickClass::Boundary);
        assert_eq!(m.class[0], BrickClass::Boundary, "cell (0,0,0) is a periodic neighbour of (9,9,9)");
        assert_eq!(m.class[13], BrickClass::Plain, "the middle brick is far from it");
        // A zero brick extent is taken as 1.
        assert_eq!(BrickMap::classify(&d, [0, 10, 10]).count, [10, 1, 1]);
    }
}
