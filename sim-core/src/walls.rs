//! Curved walls: where each lattice link from a fluid cell into an obstacle crosses the
//! obstacle's true surface, for interpolated bounce-back (Bouzidi, Firdaouss and Lallemand
//! 2001, "Momentum transfer of a Boltzmann-lattice fluid with boundaries").
//!
//! A link runs from a fluid cell x along c_d to a solid cell x + c_d; q in (0, 1] is the
//! fraction of it in front of the wall. Voxelised obstacles put the wall half-way (q = 1/2) on
//! every link, a staircase that is first order in the geometry; with q from the exact shape the
//! wall sits where the scene says it is, and forces converge at second order.
//!
//! With q, the value entering x along c_k = -c_d after streaming is (f* post-collision)
//!
//! - q < 1/2: `2q f*_d(x) + (1 - 2q) f*_d(x - c_d)`,
//! - q >= 1/2: `f*_d(x) / (2q) + (2q - 1) / (2q) f*_k(x)`.
//!
//! f*_d(x) is the halfway bounce-back value every scheme already delivers, f*_d(x - c_d) the
//! plain incoming value along c_d; both are in the cell's own share of an in-place buffer.
//! f*_k(x) has streamed on to x + c_k, whose update may overwrite it in the same step, so each
//! link keeps a copy ([`Links`]'s `save`), written by its cell after the collision and
//! re-read from the buffer (the next step's load rule at x + c_k) whenever the state was set
//! from outside (start, restore, edits). Where x - c_d is solid too (a gap one cell wide) the
//! q < 1/2 rule has no upstream value and the link falls back to halfway bounce-back.
//!
//! The force is the momentum exchanged over the same links, `c_d (f*_d(x) + f_k(x))` with the
//! value that actually came back (Wen, Zhang, Tang, Wang and Fang 2014, "Galilean invariant
//! fluid-solid interfacial dynamics in lattice Boltzmann simulations", for walls at rest).

use crate::domain::{id_of, kind, kind_of, Domain};
use crate::lattice::{opposite, Lat, MAX_Q};
use rayon::prelude::*;

/// The boundary links of a grid, grouped by cell: every link from a non-solid cell into a solid
/// cell of an obstacle with an exact shape, with its wall fraction q.
///
/// Cells are listed in increasing index order, so a cell finds its links by binary search; a
/// cell's links are in increasing order of the direction d of the link (towards the solid).
#[derive(Clone, Debug, Default)]
pub struct Links {
    /// Cells with links, ascending (grid indices).
    pub cells: Vec<u32>,
    /// First link of each cell; `start[cells.len()]` is the number of links.
    pub start: Vec<u32>,
    /// Wall fraction of each link.
    pub q: Vec<f32>,
    /// Obstacle ids (bit k for id k) whose links are listed: the others keep halfway walls.
    pub mask: u16,
}

/// No links: every wall half-way.
pub static NO_LINKS: Links = Links { cells: Vec::new(), start: Vec::new(), q: Vec::new(), mask: 0 };

impl Links {
    /// Number of links.
    #[must_use]
    pub fn len(&self) -> usize {
        self.q.len()
    }
    /// Whether there is no link.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// First link of cell `n`, if it has links.
    #[inline]
    #[must_use]
    pub fn find(&self, n: usize) -> Option<usize> {
        let n = u32::try_from(n).ok()?;
        self.cells.binary_search(&n).ok().map(|k| self.start[k] as usize)
    }

    /// Whether a neighbour's flag makes its link an interpolated one.
    #[inline(always)]
    #[must_use]
    pub fn curved(mask: u16, flag: u8) -> bool {
        kind_of(flag) == kind::SOLID && (mask >> id_of(flag)) & 1 != 0
    }

    /// The links of a grid's updated cells: every cell, or for a multi-GPU slab with `halo` =
    /// 1 + its cut axis, all but the two halo layers on that axis.
    #[must_use]
    pub fn of_grid(dom: &Domain, halo: usize) -> Links {
        let n = dom.n;
        Links::of_cells(dom, &|p| halo == 0 || (p[halo - 1] != 0 && p[halo - 1] + 1 != n[halo - 1]))
    }

    /// The links of the cells of a domain where `updated(position)` holds (a multi-GPU slab
    /// leaves its halo layers out). The surfaces are in scene coordinates; the domain's cell
    /// (0, 0, 0) lies at `dom.surfaces_at` there.
    #[must_use]
    pub fn of_cells(dom: &Domain, updated: &(dyn Fn([usize; 3]) -> bool + Sync)) -> Links {
        let mut mask = 0u16;
        for (k, s) in dom.surfaces.iter().enumerate() {
            if s.is_some() && k + 1 < 16 {
                mask |= 1 << (k + 1);
            }
        }
        if mask == 0 {
            return Links::default();
        }
        let vel = dom.lattice.velocities();
        let n = dom.n;
        let at = dom.surfaces_at;
        let planes: Vec<Vec<(u32, Vec<f32>)>> = (0..n[2])
            .into_par_iter()
            .map(|z| {
                let mut out = Vec::new();
                for y in 0..n[1] {
                    for x in 0..n[0] {
                        let i = dom.index(x, y, z);
                        let f = dom.flags[i];
                        if crate::domain::is_solid(f) || f & crate::domain::NEAR == 0 || !updated([x, y, z]) {
                            continue;
                        }
                        let mut qs = Vec::new();
                        for c in vel.iter().skip(1) {
                            let nf = dom.flags[dom.neighbour([x, y, z], *c)];
                            if !Links::curved(mask, nf) {
                                continue;
                            }
                            let s = dom.surfaces[id_of(nf) - 1].as_ref().expect("mask follows surfaces");
                            let p = [x as f64 + at[0], y as f64 + at[1], z as f64 + at[2]];
                            let q = s.link_fraction(p, c.map(f64::from)).unwrap_or(0.5);
                            qs.push(q as f32);
                        }
                        if !qs.is_empty() {
                            out.push((u32::try_from(i).expect("grids with curved walls address cells in 32 bits"), qs));
                        }
                    }
                }
                out
            })
            .collect();
        let mut l = Links { mask, ..Links::default() };
        l.start.push(0);
        for (cell, qs) in planes.into_iter().flatten() {
            l.cells.push(cell);
            l.q.extend(qs);
            l.start.push(l.q.len() as u32);
        }
        l
    }

    /// The links packed for a device: `[cells, mask, cell indices, first links (cells + 1),
    /// q as f32 bits]`.
    #[must_use]
    pub fn packed(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(2 + self.cells.len() * 2 + 1 + self.q.len());
        v.push(self.cells.len() as u32);
        v.push(u32::from(self.mask));
        v.extend_from_slice(&self.cells);
        v.extend_from_slice(if self.start.is_empty() { &[0] } else { &self.start });
        v.extend(self.q.iter().map(|q| q.to_bits()));
        v
    }

    /// Call `g(l, d)` for each interpolated link of a cell, from its first link `l0`: link index
    /// and direction d towards the wall. `nbr_flag(i)` is the flag of the neighbour along c_i.
    #[inline(always)]
    pub(crate) fn each<L: Lat>(mask: u16, l0: usize, nbr_flag: &impl Fn(usize) -> u8, mut g: impl FnMut(usize, usize)) {
        let mut l = l0;
        for d in 1..L::Q {
            if Links::curved(mask, nbr_flag(d)) {
                g(l, d);
                l += 1;
            }
        }
    }

    /// The wall rule on a cell's incoming DDFs `f` (shifted; halfway bounce-back already
    /// applied) from its first link `l0`: replaces the values that came back from curved walls
    /// and, with `force`, adds the momentum exchanged over those links. `kept(l)` is f*_k(x) of
    /// the link's cell from the step before.
    #[inline(always)]
    pub(crate) fn apply<L: Lat>(
        &self,
        f: &mut [f32; MAX_Q],
        l0: usize,
        kept: &impl Fn(usize) -> f32,
        nbr_flag: &impl Fn(usize) -> u8,
        mut force: Option<&mut [[f64; 3]; 16]>,
    ) {
        Links::each::<L>(self.mask, l0, nbr_flag, |l, d| {
            let k = opposite(d);
            let a = f[k];
            let back = bouzidi(self.q[l], a, f[d], kept(l), crate::domain::is_solid(nbr_flag(k)));
            f[k] = back;
            if let Some(force) = force.as_deref_mut() {
                let v = f64::from(a + L::W[d]) + f64::from(back + L::W[k]);
                let c = L::C[d];
                let acc = &mut force[id_of(nbr_flag(d))];
                for ax in 0..3 {
                    acc[ax] += f64::from(c[ax]) * v;
                }
            }
        });
    }
}

/// Interpolated bounce-back of one link: `a` = f*_d(x) (the halfway value), `up` = f*_d(x - c_d)
/// (the plain incoming value along c_d), `kept` = f*_k(x); `thin` when x - c_d is solid.
#[inline(always)]
#[must_use]
pub fn bouzidi(q: f32, a: f32, up: f32, kept: f32, thin: bool) -> f32 {
    if q < 0.5 {
        if thin {
            a
        } else {
            2.0 * q * a + (1.0 - 2.0 * q) * up
        }
    } else {
        let s = 0.5 / q;
        s * a + (1.0 - s) * kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bouzidi_is_halfway_at_one_half_and_continuous() {
        for (a, up, kept) in [(0.3f32, -0.1f32, 0.7f32), (1.0, 2.0, -3.0)] {
            assert_eq!(bouzidi(0.5, a, up, kept, false), a);
            let lo = bouzidi(0.5 - 1e-6, a, up, kept, false);
            assert!((lo - a).abs() < 1e-4);
            assert_eq!(bouzidi(0.2, a, up, kept, true), a);
            // Weights sum to one: a constant stays constant.
            assert!((bouzidi(0.8, a, up, a, false) - a).abs() < 1e-6);
            assert!((bouzidi(0.2, a, a, kept, false) - a).abs() < 1e-6);
        }
    }
}
