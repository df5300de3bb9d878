//! The refinement criterion: a block-max of |vorticity| or Q mapped to a target level through
//! log2 with a user threshold, near-wall refinement, and the marks that move the forest
//! towards the targets.

use super::forest::{BlockForest, Mark, NONE};
use crate::domain::{id_of, is_solid, kind, kind_of, Domain};
use rayon::prelude::*;

/// Which field the per-block values come from (the values themselves are the caller's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Field {
    /// Block maximum of the vorticity magnitude.
    #[default]
    Vorticity,
    /// Block maximum of the Q criterion (non-positive values ask for no refinement).
    Q,
}

/// The user's criterion settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Criterion {
    /// The field the values come from.
    pub field: Field,
    /// Value that asks for level 1; each doubling asks for one level more.
    pub threshold: f32,
    /// Hysteresis, in (0, 1]: a block keeps a level while its value stays above `coarsen`
    /// times the value that asks for that level (1: it coarsens as soon as it would not be
    /// refined; 0.5: only once its value has halved). Without it, blocks whose value differs
    /// a little between the coarse and the fine grid refine and coarsen by turns.
    pub coarsen: f32,
    /// Finest level the criterion may ask for.
    pub max_level: u8,
    /// Adapt every this many coarse (level 0) steps; 0 = never.
    pub every: u64,
}

impl Criterion {
    /// Whether the mesh is adapted after coarse step `step` (counted from 1).
    #[must_use]
    pub fn due(&self, step: u64) -> bool {
        self.every > 0 && step > 0 && step % self.every == 0
    }
}

/// A leaf's target as [`BlockForest::targets`] gives it: the level it asks for (low 4 bits) and
/// the finest level it keeps (high 4 bits, at least the former; see [`Criterion::coarsen`]).
/// A plain level (high bits 0) asks for and keeps that level.
#[must_use]
pub fn target_pack(asks: u8, keeps: u8) -> u8 {
    asks.min(15) | keeps.max(asks).min(15) << 4
}

/// The finest level a packed target keeps ([`target_pack`]).
#[must_use]
pub fn target_kept(t: u8) -> u8 {
    (t & 15).max(t >> 4)
}

/// A solid query: whether any solid cell lies in the box `[lo, hi)` (cells of level 0).
pub type SolidQuery<'a> = &'a (dyn Fn([f64; 3], [f64; 3]) -> bool + Sync);

/// Near-wall refinement: blocks within `margin` cells of level `level` of a solid cell are
/// refined to at least `level`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NearWall {
    /// Level asked for near walls.
    pub level: u8,
    /// Distance in cells of `level`, the same for the blocks of every level: measured in
    /// cells of each block's own level, a coarse block found the wall within twice the
    /// distance its children did, refined, and its children coarsened again at the next
    /// adaptation, for ever (568 blocks each way every interval on the sphere).
    pub margin: f64,
}

/// Target level of a block-max value: `clamp(floor(log2(value / threshold)) + 1, 0, max)`.
/// Values below the threshold (and non-positive or NaN values) give level 0; `[t, 2t)` level 1,
/// `[2t, 4t)` level 2, and so on. This is the paper's Algorithm 3 with its start parameter
/// `-log2(threshold)` and increment 1 (the paper's formula itself did not survive in our copy).
#[must_use]
pub fn target_level(value: f32, threshold: f32, max_level: u8) -> u8 {
    if !(value > 0.0) || !(threshold > 0.0) {
        return 0;
    }
    let l = f64::from(value / threshold).log2().floor() + 1.0;
    if l <= 0.0 {
        0
    } else if l >= f64::from(max_level) {
        max_level
    } else {
        l as u8
    }
}

/// A solid query on a domain voxelised at the resolution of level `domain_level` (the domain
/// has `BLOCK * root * 2^domain_level` cells per axis): whether any solid cell lies in the box
/// `[lo, hi)` given in cells of level 0 (clamped to the domain).
pub fn domain_solid_query(dom: &Domain, domain_level: u8) -> impl Fn([f64; 3], [f64; 3]) -> bool + Sync + '_ {
    solid_query_where(dom, domain_level, is_solid)
}

/// [`domain_solid_query`] counting only obstacle cells (not the boundary layers of wall faces,
/// which an adaptive run does not have: its walls are the faces of the domain box).
pub fn domain_solid_query_obstacles(dom: &Domain, domain_level: u8) -> impl Fn([f64; 3], [f64; 3]) -> bool + Sync + '_ {
    solid_query_where(dom, domain_level, |f| kind_of(f) == kind::SOLID && id_of(f) > 0)
}

/// Prefix sums of a domain's obstacle cells (not the boundary layers of wall faces): whether a
/// box holds one is answered in constant time, the same answer as
/// [`domain_solid_query_obstacles`] (which scans the box). Built once per run: an adaptive run's
/// obstacles do not change, and near-wall refinement asks for every block at every adaptation.
pub struct ObstacleSums {
    n: [usize; 3],
    scale: f64,
    dims: usize,
    /// Obstacle cells in `[0, x) x [0, y) x [0, z)` at `x + (n0 + 1) (y + (n1 + 1) z)`.
    sums: Vec<u32>,
}

impl ObstacleSums {
    /// The sums of `dom`, voxelised at the resolution of level `domain_level`.
    #[must_use]
    pub fn new(dom: &Domain, domain_level: u8) -> ObstacleSums {
        let n = dom.n;
        let (sx, sy) = (n[0] + 1, n[1] + 1);
        let mut sums = vec![0u32; sx * sy * (n[2] + 1)];
        for z in 0..n[2] {
            for y in 0..n[1] {
                for x in 0..n[0] {
                    let fl = dom.flags[dom.index(x, y, z)];
                    let v = u32::from(kind_of(fl) == kind::SOLID && id_of(fl) > 0);
                    let at = |x: usize, y: usize, z: usize| x + sx * (y + sy * z);
                    sums[at(x + 1, y + 1, z + 1)] = v + sums[at(x, y + 1, z + 1)] + sums[at(x + 1, y, z + 1)] + sums[at(x + 1, y + 1, z)]
                        - sums[at(x, y, z + 1)]
                        - sums[at(x, y + 1, z)]
                        - sums[at(x + 1, y, z)]
                        + sums[at(x, y, z)];
                }
            }
        }
        ObstacleSums { n, scale: f64::from(1u32 << domain_level), dims: dom.lattice.dims(), sums }
    }

    /// The sums as stored (`(n0 + 1) (n1 + 1) (n2 + 1)` words) and the grid size `n`, for a
    /// device copy.
    #[must_use]
    pub fn raw(&self) -> (&[u32], [usize; 3]) {
        (&self.sums, self.n)
    }

    /// Obstacle cells in the box of cells `[a0, a1)`.
    #[must_use]
    pub fn count(&self, a0: [usize; 3], a1: [usize; 3]) -> u64 {
        let (sx, sy) = (self.n[0] + 1, self.n[1] + 1);
        let s = |x: usize, y: usize, z: usize| i64::from(self.sums[x + sx * (y + sy * z)]);
        let ([x0, y0, z0], [x1, y1, z1]) = (a0, a1);
        let c =
            s(x1, y1, z1) - s(x0, y1, z1) - s(x1, y0, z1) - s(x1, y1, z0) + s(x0, y0, z1) + s(x0, y1, z0) + s(x1, y0, z0) - s(x0, y0, z0);
        c as u64
    }

    /// Whether any obstacle cell lies in the box `[lo, hi)` given in cells of level 0 (clamped
    /// to the domain), as a [`SolidQuery`].
    #[must_use]
    pub fn any(&self, lo: [f64; 3], hi: [f64; 3]) -> bool {
        let mut a0 = [0usize; 3];
        let mut a1 = [1usize; 3];
        for a in 0..self.dims {
            let n = self.n[a] as f64;
            a0[a] = (lo[a] * self.scale).floor().clamp(0.0, n) as usize;
            a1[a] = (hi[a] * self.scale).ceil().clamp(0.0, n) as usize;
            if a0[a] >= a1[a] {
                return false;
            }
        }
        self.count(a0, a1) > 0
    }
}

fn solid_query_where<'a>(
    dom: &'a Domain,
    domain_level: u8,
    solid: impl Fn(u8) -> bool + Sync + 'a,
) -> impl Fn([f64; 3], [f64; 3]) -> bool + Sync + 'a {
    let s = f64::from(1u32 << domain_level);
    let dims = dom.lattice.dims();
    move |lo: [f64; 3], hi: [f64; 3]| {
        let mut a0 = [0usize; 3];
        let mut a1 = [1usize; 3];
        for a in 0..dims {
            let n = dom.n[a] as f64;
            a0[a] = (lo[a] * s).floor().clamp(0.0, n) as usize;
            a1[a] = (hi[a] * s).ceil().clamp(0.0, n) as usize;
            if a0[a] >= a1[a] {
                return false;
            }
        }
        for z in a0[2]..a1[2] {
            for y in a0[1]..a1[1] {
                for x in a0[0]..a1[0] {
                    if solid(dom.flags[dom.index(x, y, z)]) {
                        return true;
                    }
                }
            }
        }
        false
    }
}

impl BlockForest {
    /// Target of every leaf (indexed by ID; 0 for non-leaves and free IDs), packed by
    /// [`target_pack`]: the level it asks for and the finest it keeps under the hysteresis
    /// ([`Criterion::coarsen`]), from a block-max value per leaf and, optionally, near-wall
    /// refinement with a solid query in cells of level 0 (see [`domain_solid_query`]).
    pub fn targets(&self, value: impl Fn(u32) -> f32 + Sync, crit: &Criterion, wall: Option<(NearWall, SolidQuery<'_>)>) -> Vec<u8> {
        let max = crit.max_level.min(self.max_level());
        (0..self.capacity() as u32)
            .into_par_iter()
            .map(|b| {
                if !self.is_active(b) || !self.is_leaf(b) {
                    return 0;
                }
                let v = value(b);
                let mut t = target_level(v, crit.threshold, max);
                let mut keep = target_level(v, crit.threshold * crit.coarsen, max);
                if let Some((nw, solid)) = wall {
                    // Leaves on the near-wall level too: a fine block near a wall must keep
                    // its level, or its siblings coarsen and it comes back an interval later.
                    let l = self.level(b);
                    if l <= nw.level {
                        let (lo, size) = self.block_box(b);
                        let m = nw.margin / f64::from(1u32 << nw.level);
                        let mut a = lo;
                        let mut z = lo;
                        for ax in 0..self.dims() {
                            a[ax] = lo[ax] - m;
                            z[ax] = lo[ax] + size + m;
                        }
                        if solid(a, z) {
                            t = t.max(nw.level.min(self.max_level()));
                            keep = keep.max(t);
                        }
                    }
                }
                target_pack(t, keep)
            })
            .collect()
    }

    /// Mark the forest towards per-leaf targets (plain levels or [`target_pack`]ed ones): a leaf
    /// below the level it asks for refines; a block whose children are all leaves and all keep
    /// no finer level than the block's coarsens ([`target_kept`]). Returns
    /// the numbers of refine and coarsen marks set (before balancing).
    pub fn mark_to_targets(&mut self, target: &[u8]) -> (usize, usize) {
        let k = self.children_per_block() as u32;
        let marks: Vec<(u32, Mark)> = self
            .active_ids()
            .par_iter()
            .filter_map(|&b| {
                let c0 = self.first_child(b);
                if c0 == NONE {
                    (target[b as usize] & 15 > self.level(b)).then_some((b, Mark::Refine))
                } else {
                    let all_leaves = (c0..c0 + k).all(|c| self.is_leaf(c));
                    let content = (c0..c0 + k).all(|c| target_kept(target[c as usize]) <= self.level(b));
                    (all_leaves && content).then_some((b, Mark::Coarsen))
                }
            })
            .collect();
        let mut r = (0, 0);
        for (b, m) in marks {
            if m == Mark::Refine {
                r.0 += 1;
            } else {
                r.1 += 1;
            }
            // IDs come from the active set.
            let _ = self.set_mark(b, m);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_mapping() {
        assert_eq!(target_level(0.0, 1.0, 5), 0);
        assert_eq!(target_level(f32::NAN, 1.0, 5), 0);
        assert_eq!(target_level(-3.0, 1.0, 5), 0);
        assert_eq!(target_level(0.99, 1.0, 5), 0);
        assert_eq!(target_level(1.0, 1.0, 5), 1);
        assert_eq!(target_level(1.99, 1.0, 5), 1);
        assert_eq!(target_level(2.0, 1.0, 5), 2);
        assert_eq!(target_level(7.9, 1.0, 5), 3);
        assert_eq!(target_level(1e9, 1.0, 5), 5);
        assert_eq!(target_level(0.3, 0.1, 2), 2);
        let c = Criterion { field: Field::Q, threshold: 1.0, coarsen: 1.0, max_level: 2, every: 32 };
        assert!(!c.due(0) && !c.due(31) && c.due(32) && c.due(64));
    }
}
