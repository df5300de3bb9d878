//! Transfers between levels of the block-forest LBM: quadratic interpolation into the ghost cells of a finer level and the restriction of its interface cells into their parents.

use super::{cell_index, AmrLbm, CellRef};
use crate::amr::forest::{block_mask, cell_coords, cell_mask, dir_index, Link, BLOCK};
use crate::collision::{equilibrium, moments};
use crate::lattice::{Lat, MAX_Q};
use rayon::prelude::*;

/// Per-axis interpolation taps, (offset, weight), and how many of the four are used.
pub(super) type Taps = ([[(i32, f32); 4]; 3], [usize; 3]);

/// Taps of the plain average of the two fine cells at offsets 0 and 1 on the first `dims`
/// axes.
pub(super) fn plain_taps(dims: usize) -> Taps {
    let mut t: Taps = ([[(0, 1.0), (0, 0.0), (0, 0.0), (0, 0.0)]; 3], [1; 3]);
    for a in 0..dims {
        t.0[a] = [(0, 0.5), (1, 0.5), (0, 0.0), (0, 0.0)];
        t.1[a] = 2;
    }
    t
}

/// The child (0..2^D) of a block that lies under its cell at coordinates `c`, and the
/// coordinates in that child of the lowest of the 2^D fine cells under the cell.
pub(super) fn children_of(c: [i32; 3], dims: usize) -> (u32, [i32; 3]) {
    let mut j = 0u32;
    let mut f0 = [0i32; 3];
    for a in 0..dims {
        j |= ((c[a] / 2) as u32) << a;
        f0[a] = 2 * (c[a] % 2);
    }
    (j, f0)
}

/// Block coordinates of the 2^D fine cells under a coarse cell, from the lowest one `f0`.
pub(super) fn children_offsets(dims: usize, f0: [i32; 3]) -> impl Iterator<Item = [i32; 3]> + Clone {
    (0..1usize << dims).map(move |sub| {
        let mut kk = f0;
        (0..dims).for_each(|a| kk[a] += ((sub >> a) & 1) as i32);
        kk
    })
}

impl<L: Lat> AmrLbm<L> {
    /// Pre-collision DDFs of a level-`l` cell at local coordinates `k` of block `p` (possibly
    /// one cell outside it, in a same-level neighbour), if that cell holds valid data.
    pub(super) fn coarse_cell(&self, p: u32, k: [i32; 3]) -> Option<[f32; MAX_Q]> {
        self.cell_at(p, k, true)
    }

    /// The same for the fine level after its two steps, when its ghost cells are stale.
    fn fine_cell(&self, p: u32, k: [i32; 3]) -> Option<[f32; MAX_Q]> {
        self.cell_at(p, k, false)
    }

    /// DDFs of the cell at local coordinates `k` of block `p` or of a same-level neighbour:
    /// fluid cells of leaves (their ghost cells only with `ghosts`) and the stepped or averaged
    /// fluid cells of non-leaves.
    fn cell_at(&self, p: u32, k: [i32; 3], ghosts: bool) -> Option<[f32; MAX_Q]> {
        let (n, cell) = self.locate(p, k)?;
        if self.solid[n as usize * self.forest.cells_per_block() + cell] {
            return None;
        }
        let m = self.forest.cell_masks(n)[cell];
        let ok = if self.forest.is_leaf(n) {
            ghosts || m != cell_mask::GHOST
        } else {
            m == cell_mask::PARENT_OF_GHOST || m == cell_mask::PARENT_OF_INTERFACE
        };
        ok.then(|| self.ddfs(CellRef { block: n, cell }))
    }

    /// The block (`p` or a same-level neighbour) and cell at local coordinates `k` of block
    /// `p`, at most one block outside it.
    pub(super) fn locate(&self, p: u32, k: [i32; 3]) -> Option<(u32, usize)> {
        let dims = L::D;
        let mut e = [0i32; 3];
        let mut s = [0i32; 3];
        for a in 0..dims {
            e[a] = k[a].div_euclid(BLOCK as i32);
            s[a] = k[a].rem_euclid(BLOCK as i32);
        }
        match self.forest.neighbour(p, dir_index(e, dims)) {
            Link::Same(n) => Some((n, cell_index(s))),
            _ => None,
        }
    }

    /// The weighted sum over the tensor product of `taps` around `origin` of the cells' DDFs
    /// from `get`, moved from force `f_src` to `f_dst` with non-equilibrium factor `r`
    /// ([`Self::rescale`], once on the sum: the weights sum to 1, and rescaling each tap would
    /// cost a moment and two equilibria per tap for a difference of the interpolation error's
    /// order); `None` if `get` has no data for one of them. Added up tap by tap, z outermost.
    pub(super) fn tensor_sum(
        taps: &Taps,
        origin: [i32; 3],
        get: impl Fn([i32; 3]) -> Option<[f32; MAX_Q]>,
        f_src: [f32; 3],
        f_dst: [f32; 3],
        r: f32,
    ) -> Option<[f32; MAX_Q]> {
        Self::tensor_sum_in_lanes(taps, origin, get, f_src, f_dst, r, 1)
    }

    /// Lanes of the GPU's restriction (kernels/amr.cu `amr_average`: a group of 4 threads a
    /// cell in 2D, 8 in 3D): [`Self::average`] adds its sums in their order.
    pub(super) const RESTRICTION_LANES: usize = if L::D == 3 { 8 } else { 4 };

    /// [`Self::tensor_sum`] over `lanes` (a power of two, at most 8) partial sums: rows
    /// `j = ty + 4 tz` of the taps (4 in 2D, 16 in 3D; rows beyond the taps add nothing) go to
    /// lane `j % lanes`, each lane adding its rows' taps in order; then the lanes' sums are
    /// added pairwise, lowest bit of the lane first. One lane is the plain tap-by-tap order.
    pub(super) fn tensor_sum_in_lanes(
        taps: &Taps,
        origin: [i32; 3],
        get: impl Fn([i32; 3]) -> Option<[f32; MAX_Q]>,
        f_src: [f32; 3],
        f_dst: [f32; 3],
        r: f32,
        lanes: usize,
    ) -> Option<[f32; MAX_Q]> {
        let (t, n) = taps;
        let rows = if L::D == 3 { 16 } else { 4 };
        let mut sums = [[0.0f32; MAX_Q]; 8];
        for j in 0..rows {
            let (ty, tz) = (j % 4, j / 4);
            if ty >= n[1] || tz >= n[2] {
                continue;
            }
            for tx in 0..n[0] {
                let (ox, wx) = t[0][tx];
                let (oy, wy) = t[1][ty];
                let (oz, wz) = t[2][tz];
                let g = get([origin[0] + ox, origin[1] + oy, origin[2] + oz])?;
                let w = wx * wy * wz;
                for i in 0..L::Q {
                    sums[j % lanes][i] += w * g[i];
                }
            }
        }
        let mut s = 1;
        while s < lanes {
            for j in (0..lanes).step_by(2 * s) {
                for i in 0..L::Q {
                    sums[j][i] += sums[j + s][i];
                }
            }
            s *= 2;
        }
        let mut acc = sums[0];
        Self::rescale(&mut acc, f_src, f_dst, r);
        Some(acc)
    }

    /// The mean of the cells at `cells` that `get` has data for, moved from force `f_src` to
    /// `f_dst` with non-equilibrium factor `r`; `None` if it has none.
    pub(super) fn mean_of_available(
        cells: impl Iterator<Item = [i32; 3]>,
        get: impl Fn([i32; 3]) -> Option<[f32; MAX_Q]>,
        f_src: [f32; 3],
        f_dst: [f32; 3],
        r: f32,
    ) -> Option<[f32; MAX_Q]> {
        let mut acc = [0.0f32; MAX_Q];
        let mut n = 0u32;
        for kk in cells {
            if let Some(g) = get(kk) {
                (0..L::Q).for_each(|i| acc[i] += g[i]);
                n += 1;
            }
        }
        (n > 0).then(|| {
            let mut mean = acc.map(|x| x / n as f32);
            Self::rescale(&mut mean, f_src, f_dst, r);
            mean
        })
    }

    /// Move pre-collision DDFs from a level with body force `f_src` to one with `f_dst`:
    /// the non-equilibrium part (taken about the equilibrium of the raw moments, so that it
    /// carries no mass and no momentum) is scaled by `r`, and the equilibrium is rebuilt with
    /// the raw momentum the destination level needs for the same physical velocity
    /// (`j = rho u - F / 2` differs between levels because `F` does).
    fn rescale(g: &mut [f32; MAX_Q], f_src: [f32; 3], f_dst: [f32; 3], r: f32) {
        let (rm1, u_raw) = moments::<L>(g, [0.0; 3]);
        let rho = rm1 + 1.0;
        let mut feq = [0.0f32; MAX_Q];
        equilibrium::<L>(rm1, u_raw, &mut feq);
        let mut u_dst = [0.0f32; 3];
        for a in 0..3 {
            u_dst[a] = u_raw[a] + 0.5 * (f_src[a] - f_dst[a]) / rho;
        }
        let mut feq_dst = [0.0f32; MAX_Q];
        equilibrium::<L>(rm1, u_dst, &mut feq_dst);
        for i in 0..L::Q {
            g[i] = feq_dst[i] + r * (g[i] - feq[i]);
        }
    }

    /// Fill the ghost cells of level `l` (>= 1) from level `l - 1`.
    pub(super) fn interpolate(&mut self, l: u8) {
        let b = self.forest.cells_per_block();
        let this = &*self;
        let ids: Vec<u32> =
            this.forest.level_ids(l).iter().copied().filter(|&id| this.forest.block_mask(id) & block_mask::NEAR_COARSER != 0).collect();
        let vals: Vec<(u32, usize, [f32; MAX_Q])> = ids
            .par_iter()
            .flat_map_iter(|&id| {
                let masks = this.forest.cell_masks(id);
                (0..b)
                    .filter(move |&cell| masks[cell] == cell_mask::GHOST && !this.solid[id as usize * b + cell])
                    .map(move |cell| (id, cell, this.prolong(id, cell, |p, k| this.coarse_cell(p, k))))
            })
            .collect();
        self.write_cells(vals);
    }

    /// The pre-collision DDFs of cell `cell` of block `id` (level `l` >= 1) from its parent's
    /// level, non-equilibrium rescaled by `tau_f / (2 tau_c)`. `coarse(p, k)` gives the parent
    /// level's cell at local coordinates `k` of the parent `p` (or one cell outside it) where it
    /// holds data. Per axis: quadratic through k-1, k, k+1 where both neighbours hold data
    /// (exact for the parabolic profiles linear interpolation gets wrong by 3/32 h^2 u'', an
    /// error that the ghost reset turns into a momentum sink), else linear towards the fine
    /// centre, else constant. Where the parent cell is solid (the fine cell is fluid), the mean
    /// of the fluid cells around it, or the rest state if there are none.
    pub(super) fn prolong(&self, id: u32, cell: usize, coarse: impl Fn(u32, [i32; 3]) -> Option<[f32; MAX_Q]>) -> [f32; MAX_Q] {
        let dims = L::D;
        let l = self.forest.level(id);
        let r = self.tau(l) / (2.0 * self.tau(l - 1));
        let (fc, ff) = (self.force(l - 1), self.force(l));
        let p = self.forest.parent(id);
        let cp = self.forest.pos(id);
        let c = cell_coords(cell, dims);
        // Containing parent cell and the side of the fine centre.
        let mut k = [0i32; 3];
        let mut side = [0i32; 3];
        for a in 0..dims {
            k[a] = 2 * (cp[a] & 1) + c[a] / 2;
            side[a] = if c[a] % 2 == 0 { -1 } else { 1 };
        }
        let Some(base) = coarse(p, k) else {
            let around = (0..3usize.pow(dims as u32)).map(|m| {
                let mut kk = k;
                (0..dims).for_each(|a| kk[a] += (m / 3usize.pow(a as u32) % 3) as i32 - 1);
                kk
            });
            return Self::mean_of_available(around, |kk| coarse(p, kk), fc, ff, r).unwrap_or([0.0; MAX_Q]);
        };
        let mut taps: Taps = ([[(0, 1.0), (0, 0.0), (0, 0.0), (0, 0.0)]; 3], [1; 3]);
        for a in 0..dims {
            let has = |o: i32| {
                let mut kk = k;
                kk[a] += o;
                coarse(p, kk).is_some()
            };
            let s = 0.25 * side[a] as f32;
            if has(-1) && has(1) {
                taps.0[a] = [(-1, s * (s - 1.0) / 2.0), (0, 1.0 - s * s), (1, s * (s + 1.0) / 2.0), (0, 0.0)];
                taps.1[a] = 3;
            } else if has(side[a]) {
                taps.0[a] = [(0, 0.75), (side[a], 0.25), (0, 0.0), (0, 0.0)];
                taps.1[a] = 2;
            }
        }
        Self::tensor_sum(&taps, k, |kk| Some(coarse(p, kk).unwrap_or(base)), fc, ff, r).expect("every tap has data")
    }

    /// Restrict the interface cells of level `l` (>= 1) into their parents'
    /// parent-of-interface cells. Per axis the value at the coarse centre comes from the fine
    /// cells at -3/4, -1/4, 1/4, 3/4 coarse cells from it: weights (-1, 9, 9, -1)/16 where all
    /// four hold data, one-sided (3/8, 3/4, -1/8) through the three on the side away from the
    /// stale ghost cells, else the plain average. The plain average of a parabolic profile is
    /// off by h^2 u''/32, which the reset of these cells every coarse step turns into a
    /// momentum sink at the interface (the same mechanism as linear ghost interpolation).
    pub(super) fn average(&mut self, l: u8) {
        let dims = L::D;
        let b = self.forest.cells_per_block();
        let (tc, tf) = (self.tau(l - 1), self.tau(l));
        let r = 2.0 * tc / tf;
        let (force_c, force_f) = (self.force(l - 1), self.force(l));
        let this = &*self;
        let ids: Vec<u32> =
            this.forest.level_ids(l - 1).iter().copied().filter(|&id| this.forest.block_mask(id) & block_mask::FEEDS != 0).collect();
        let vals: Vec<(u32, usize, [f32; MAX_Q])> = ids
            .par_iter()
            .flat_map_iter(|&id| {
                let masks = this.forest.cell_masks(id);
                let c0 = this.forest.first_child(id);
                (0..b).filter(move |&cell| masks[cell] == cell_mask::PARENT_OF_INTERFACE && !this.solid[id as usize * b + cell]).filter_map(
                    move |cell| {
                        let (j, f0) = children_of(cell_coords(cell, dims), dims);
                        let child = c0 + j;
                        let mut taps: Taps = ([[(0, 1.0), (0, 0.0), (0, 0.0), (0, 0.0)]; 3], [1; 3]);
                        for a in 0..dims {
                            let has = |o: i32| {
                                let mut kk = f0;
                                kk[a] += o;
                                this.fine_cell(child, kk).is_some()
                            };
                            let (lo, hi) = (has(-1), has(2));
                            (taps.0[a], taps.1[a]) = if lo && hi {
                                ([(-1, -1.0 / 16.0), (0, 9.0 / 16.0), (1, 9.0 / 16.0), (2, -1.0 / 16.0)], 4)
                            } else if hi {
                                ([(0, 0.375), (1, 0.75), (2, -0.125), (0, 0.0)], 3)
                            } else if lo {
                                ([(-1, -0.125), (0, 0.75), (1, 0.375), (0, 0.0)], 3)
                            } else {
                                ([(0, 0.5), (1, 0.5), (0, 0.0), (0, 0.0)], 2)
                            };
                        }
                        // Where a corner of the tensor product holds no data (a ghost or solid cell),
                        // the plain average of the 2^D children, or the mean of the fluid ones.
                        let get = |kk: [i32; 3]| this.fine_cell(child, kk);
                        let lanes = Self::RESTRICTION_LANES;
                        let acc = Self::tensor_sum_in_lanes(&taps, f0, get, force_f, force_c, r, lanes)
                            .or_else(|| Self::tensor_sum_in_lanes(&plain_taps(dims), f0, get, force_f, force_c, r, lanes))
                            .or_else(|| Self::mean_of_available(children_offsets(dims, f0), get, force_f, force_c, r))?;
                        Some((id, cell, acc))
                    },
                )
            })
            .collect();
        self.write_cells(vals);
    }
}
