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
use crate::scene::{voxel, Obstacle};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// How obstacles meet the fluid (`solver.walls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WallMode {
    /// Interpolated bounce-back with the wall distance from the exact shape.
    #[default]
    Interpolated,
    /// Halfway bounce-back on the voxels (the wall half-way between a fluid and a solid cell).
    Staircase,
}

impl WallMode {
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            WallMode::Interpolated => "interpolated",
            WallMode::Staircase => "staircase",
        }
    }
}

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
