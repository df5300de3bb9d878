//! Interpolated walls on the finest level of the block forest.
//!
//! The finest level's cells are the cells of the scene's finest grid (the grid the obstacles
//! are voxelised on), so its boundary links are the dense solver's ([`Links::of_grid`]): from a
//! fluid cell x along c_d into a solid cell of an obstacle with an exact shape, q in (0, 1]
//! the fraction of the link in front of the surface. Coarser levels keep half-way walls; the
//! near-wall refinement (`amr.near_wall`, on by default) puts every obstacle's surface on the
//! finest level.
//!
//! The block stream is a two-buffer pull, so Bouzidi, Firdaouss and Lallemand's (2001) rule
//! needs no value kept from the step before (unlike the in-place dense schemes, see
//! [`crate::walls`]): with f* the post-collision values of the step and k = opposite(d),
//!
//! - q >= 1/2: `f_k(x) = f*_d(x) / (2q) + (1 - 1/(2q)) f*_k(x)`, both values of the cell itself;
//! - q < 1/2: `f_k(x) = 2q f*_d(x) + (1 - 2q) f_d(x)`, where f_d(x) is the value that streamed
//!   into x along c_d in the same step (f*_d(x - c_d) where that is a fluid cell of the level).
//!
//! A link whose upstream cell x - c_d is solid or outside the finest grid (a gap one cell
//! wide, a wall next to the domain's face) has no upstream value: its q < 1/2 becomes 1/2
//! (half-way), as the dense solver's fallback. The GPU applies the q >= 1/2 rule where the
//! cell fills its bounce-back and the q < 1/2 rule in a pass after the step (it needs the
//! neighbour's push), on the stored values: this reference rounds the same values the same way.
//!
//! The force over these links is the momentum exchanged by the next step, computed from the
//! state without a kept post-collision copy: `c_d (f*_d(x) + f_k(x))` with f* from colliding
//! the cell (and, for q < 1/2, its upstream neighbour) now, Wen et al.'s (2014) form for walls
//! at rest. In a steady flow it is the last step's; it needs only the DDFs a checkpoint, a
//! restore or the device's copy carry.

use crate::domain::{is_solid, Domain};
use crate::lattice::{Lat, MAX_Q};
use crate::walls::Links;

/// The wall fraction q of every curved link of the finest level, per cell of the finest grid
/// that has such links.
#[derive(Clone, Debug, Default)]
pub struct CurvedWalls {
    /// The level the table is for (the forest's maximum level).
    pub level: u8,
    /// Size of the finest grid (cells per axis).
    pub n: [usize; 3],
    /// Number of directions of the lattice (values per row of `q`).
    pub dirs: usize,
    /// Finest-grid indices (`x + n0 (y + n1 z)`) of the cells with curved links, ascending.
    pub cells: Vec<u32>,
    /// Per listed cell, `dirs` values: q of the link along c_d, or 0 where c_d is no curved
    /// link (half-way, or no wall).
    pub q: Vec<f32>,
}

impl CurvedWalls {
    /// The curved links of the finest grid `dom` (the domain of an adaptive run, voxelised at
    /// level `level`); None where no obstacle has an exact shape.
    #[must_use]
    pub fn of_domain<L: Lat>(dom: &Domain, level: u8) -> Option<CurvedWalls> {
        let links = Links::of_grid(dom, 0);
        if links.is_empty() {
            return None;
        }
        let q = L::Q;
        let n = dom.n;
        let mut rows = vec![0.0f32; links.cells.len() * q];
        for (k, &cell) in links.cells.iter().enumerate() {
            let p = dom.coords(cell as usize);
            let row = &mut rows[k * q..(k + 1) * q];
            let nbr_flag = |d: usize| dom.flags[dom.neighbour(p, L::C[d])];
            Links::each::<L>(links.mask, links.start[k] as usize, &nbr_flag, |l, d| {
                let mut qd = links.q[l];
                // No upstream value: x - c_d is solid or off the grid.
                let up = (0..3).map(|a| p[a] as i64 - i64::from(L::C[d][a])).collect::<Vec<_>>();
                let off = (0..3).any(|a| up[a] < 0 || up[a] >= n[a] as i64);
                if qd < 0.5 && (off || is_solid(dom.flags[dom.index(up[0] as usize, up[1] as usize, up[2] as usize)])) {
                    qd = 0.5;
                }
                row[d] = qd;
            });
        }
        Some(CurvedWalls { level, n, dirs: q, cells: links.cells, q: rows })
    }

    /// Number of links (nonzero values).
    #[must_use]
    pub fn links(&self) -> usize {
        self.q.iter().filter(|&&q| q > 0.0).count()
    }

    /// The row of q values of the finest-grid cell at `g`, if it has curved links.
    #[inline]
    #[must_use]
    pub fn row(&self, g: [i32; 3]) -> Option<&[f32]> {
        if (0..3).any(|a| g[a] < 0 || g[a] as usize >= self.n[a]) {
            return None;
        }
        let at = g[0] as usize + self.n[0] * (g[1] as usize + self.n[1] * g[2] as usize);
        let k = self.cells.binary_search(&u32::try_from(at).ok()?).ok()?;
        Some(&self.q[k * self.dirs..(k + 1) * self.dirs])
    }

    /// The table packed for a device: `[cells, level, n0, n1, n2, cell indices, q as f32 bits
    /// (dirs per cell)]`.
    #[must_use]
    pub fn packed(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(5 + self.cells.len() + self.q.len());
        v.push(self.cells.len() as u32);
        v.push(u32::from(self.level));
        v.extend(self.n.iter().map(|&x| x as u32));
        v.extend_from_slice(&self.cells);
        v.extend(self.q.iter().map(|q| q.to_bits()));
        v
    }
}

/// Interpolated bounce-back of one link of the block stream: `qd` the link's q (nonzero),
/// `post_d` = f*_d(x), `post_k` = f*_k(x), `out_k` and `out_d` the stored values that streamed
/// into x (out_k the half-way one).
#[inline(always)]
#[must_use]
pub fn block_bouzidi(qd: f32, post_d: f32, post_k: f32, out_k: f32, out_d: f32) -> f32 {
    if qd >= 0.5 {
        let s = 0.5 / qd;
        s * post_d + (1.0 - s) * post_k
    } else {
        2.0 * qd * out_k + (1.0 - 2.0 * qd) * out_d
    }
}

/// The value the next step's curved link brings back, from the cell's post-collision values
/// `g` and, for q < 1/2, the upstream value `up` (None: no fluid cell of the level there, the
/// link falls back to half-way).
#[inline]
#[must_use]
pub fn next_back(qd: f32, d: usize, k: usize, g: &[f32; MAX_Q], up: Option<f32>) -> f32 {
    if qd >= 0.5 {
        let s = 0.5 / qd;
        s * g[d] + (1.0 - s) * g[k]
    } else {
        match up {
            Some(u) => 2.0 * qd * g[d] + (1.0 - 2.0 * qd) * u,
            None => g[d],
        }
    }
}
