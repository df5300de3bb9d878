//! Compressed subgrids on the CPU (seed 000): the reference of the GPU path.
//!
//! The grid is cut into subgrids. Each keeps its **core** (every cell but the outermost layer)
//! compressed, one [`CompressedField`] per DDF plane, and its **shell** (the outermost layer)
//! uncompressed: the shells are the interface buffers through which subgrids meet. A step goes
//! through the subgrids one after another: decompress the core into a working box, fill the
//! box's shell and its one-cell ghost frame from the shells (the ghost frame is the
//! neighbours' shells), run the ordinary Esoteric-Pull update on the subgrid's cells, write
//! the changed shell and ghost values back, and compress the core again.
//!
//! **Why this is exact.** Esoteric Pull is in place: in each step every DDF slot is read and
//! written by exactly one cell, a cell touches only slots of itself and its neighbours, and a
//! core cell's neighbours lie inside its own subgrid. So core slots belong to one subgrid, and
//! shell slots are shared only through the uncompressed shells, which a subgrid reads after its
//! neighbours wrote them. Without compression the result equals the dense solver bit for bit
//! (tested), whatever the order of subgrids.
//!
//! **Mass.** The wavelet keeps the sum of every block, and the shells are exact, so compression
//! changes no cell's share of mass in total: on a periodic box the mass drifts only by `f32`
//! rounding (tested).
//!
//! Only 3D lattices, Esoteric Pull and FP32 storage, the product's default. A ghost value is
//! written back only where the step changed its bits: with one subgrid across a periodic axis
//! the ghost frame and the shell are two copies of the same cells, and only the copy a cell
//! wrote carries news.

use super::cpu::{step_box, CpuSolver, Forces};
use crate::compress::{BlockShape, CompressedField, Thresholds};
use crate::domain::Domain;
use crate::lattice::Lat;
use crate::schemes::Scheme;
use crate::solver::{Params, Solver, SolverError};
use rayon::prelude::*;

/// How the cores are stored.
#[derive(Clone, Debug)]
enum Core {
    /// Plain `f32` planes (the "no compression" check, and the GPU path's staging).
    Raw(Vec<f32>),
    /// One compressed field per DDF plane.
    Compressed(Vec<CompressedField>),
}

/// One subgrid: where it lies, its core and its shell.
#[derive(Clone, Debug)]
struct Subgrid {
    origin: [usize; 3],
    size: [usize; 3],
    core: Core,
    /// Shell cells x q, plane-major (`i * shell_cells + k`).
    shell: Vec<f32>,
}

/// Cells of the outermost layer of a box.
fn shell_cells(s: [usize; 3]) -> usize {
    s[0] * s[1] * s[2] - (s[0] - 2) * (s[1] - 2) * (s[2] - 2)
}

/// Index of cell `u` of a box of size `s` among its shell cells, or `None` for core cells.
/// Order: the z = 0 face, the z = last face, then per inner z the y = 0 row, the y = last
/// row and the two x ends of the inner rows.
fn shell_index(u: [usize; 3], s: [usize; 3]) -> Option<usize> {
    let (a, b, c) = (s[0], s[1], s[2]);
    let face = a * b;
    if u[2] == 0 {
        return Some(u[0] + a * u[1]);
    }
    if u[2] == c - 1 {
        return Some(face + u[0] + a * u[1]);
    }
    let base = 2 * face + (u[2] - 1) * (2 * a + 2 * (b - 2));
    if u[1] == 0 {
        return Some(base + u[0]);
    }
    if u[1] == b - 1 {
        return Some(base + a + u[0]);
    }
    match u[0] {
        0 => Some(base + 2 * a + 2 * (u[1] - 1)),
        x if x == a - 1 => Some(base + 2 * a + 2 * (u[1] - 1) + 1),
        _ => None,
    }
}

/// Cut `n` cells into slabs of `g` (the last takes a remainder under 3 cells).
fn slabs(n: usize, g: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut start = 0;
    while start < n {
        let len = g.min(n - start);
        if len < 3 && !v.is_empty() {
            let last: &mut (usize, usize) = v.last_mut().expect("a slab");
            last.1 += len;
        } else {
            v.push((start, len));
        }
        start += len;
    }
    v
}

/// The compressed-subgrid solver on the CPU.
pub struct SubgridSolver<L: Lat> {
    dom: Domain,
    params: Params,
    t: u64,
    slabs: [Vec<(usize, usize)>; 3],
    subs: Vec<Subgrid>,
    thresholds: Option<Thresholds>,
    last_forces: Forces,
    _l: std::marker::PhantomData<L>,
}

impl<L: Lat> SubgridSolver<L> {
    /// Split a dense Esoteric-Pull FP32 solver's state into subgrids of (at most) `g` cells a
    /// side, the cores compressed with `thresholds` (or kept raw with `None`).
    ///
    /// # Errors
    /// A 2D lattice, another scheme, or subgrids under 3 cells a side.
    pub fn from_dense(dense: &CpuSolver<L, f32>, g: [usize; 3], thresholds: Option<Thresholds>) -> Result<Self, SolverError> {
        if L::D != 3 {
            return Err(SolverError::Backend("compressed subgrids need a 3D lattice (D3Q19 or D3Q27)".into()));
        }
        if dense.scheme() != Scheme::EsotericPull {
            return Err(SolverError::Backend(format!("compressed subgrids run Esoteric Pull, not {}", dense.scheme().name())));
        }
        let dom = dense.domain().clone();
        let n = dom.n;
        if (0..3).any(|a| g[a] < 3 || n[a] < 3) {
            return Err(SolverError::Backend(format!("subgrids need at least 3 cells a side: subgrid {g:?}, grid {n:?}")));
        }
        let slabs = [0, 1, 2].map(|a| slabs(n[a], g[a]));
        let state = dense.state();
        let nn = dom.cells();
        let mut subs = Vec::new();
        for &(z0, sz) in &slabs[2] {
            for &(y0, sy) in &slabs[1] {
                for &(x0, sx) in &slabs[0] {
                    let origin = [x0, y0, z0];
                    let size = [sx, sy, sz];
                    let sc = shell_cells(size);
                    let cs = [sx - 2, sy - 2, sz - 2];
                    let core_cells = cs[0] * cs[1] * cs[2];
                    let mut shell = vec![0.0f32; L::Q * sc];
                    let mut core = vec![0.0f32; L::Q * core_cells];
                    for uz in 0..sz {
                        for uy in 0..sy {
                            for ux in 0..sx {
                                let gcell = dom.index(x0 + ux, y0 + uy, z0 + uz);
                                let u = [ux, uy, uz];
                                match shell_index(u, size) {
                                    Some(k) => (0..L::Q).for_each(|i| shell[i * sc + k] = state[i * nn + gcell]),
                                    None => {
                                        let c = (ux - 1) + cs[0] * ((uy - 1) + cs[1] * (uz - 1));
                                        (0..L::Q).for_each(|i| core[i * core_cells + c] = state[i * nn + gcell]);
                                    }
                                }
                            }
                        }
                    }
                    let core = store_core(core, cs, thresholds);
                    subs.push(Subgrid { origin, size, core, shell });
                }
            }
        }
        Ok(SubgridSolver {
            params: dense.params(),
            t: dense.time_step(),
            dom,
            slabs,
            subs,
            thresholds,
            last_forces: [[0.0; 3]; 16],
            _l: std::marker::PhantomData,
        })
    }

    /// Steps done.
    #[must_use]
    pub fn time_step(&self) -> u64 {
        self.t
    }

    /// Forces on the obstacles in the last step (by obstacle id).
    #[must_use]
    pub fn last_forces(&self) -> &Forces {
        &self.last_forces
    }

    /// Bytes the state takes: compressed cores plus shells.
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.subs
            .iter()
            .map(|s| {
                4 * s.shell.len()
                    + match &s.core {
                        Core::Raw(v) => 4 * v.len(),
                        Core::Compressed(c) => c.iter().map(CompressedField::bytes).sum(),
                    }
            })
            .sum()
    }

    /// Uncompressed bytes over [`Self::bytes`].
    #[must_use]
    pub fn ratio(&self) -> f64 {
        (4 * L::Q * self.dom.cells()) as f64 / self.bytes() as f64
    }

    /// Number of subgrids per axis.
    #[must_use]
    pub fn counts(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.slabs[a].len())
    }

    /// Which subgrid holds coordinate `p` along axis `a`, and the coordinate inside it.
    fn locate(&self, a: usize, p: usize) -> (usize, usize) {
        let s = &self.slabs[a];
        let k = s.partition_point(|&(start, _)| start <= p) - 1;
        (k, p - s[k].0)
    }

    fn sub_id(&self, k: [usize; 3]) -> usize {
        let c = self.counts();
        k[0] + c[0] * (k[1] + c[1] * k[2])
    }

    /// Global cell of working-box cell `b` of subgrid `s` (box = subgrid + one ghost layer).
    fn global(&self, s: &Subgrid, b: [usize; 3]) -> [usize; 3] {
        let n = self.dom.n;
        [0, 1, 2].map(|a| (s.origin[a] + n[a] + b[a] - 1) % n[a])
    }

    /// Subgrid and shell index of a global cell that lies on a shell.
    fn shell_of(&self, g: [usize; 3]) -> Option<(usize, usize)> {
        let (kx, ux) = self.locate(0, g[0]);
        let (ky, uy) = self.locate(1, g[1]);
        let (kz, uz) = self.locate(2, g[2]);
        let id = self.sub_id([kx, ky, kz]);
        shell_index([ux, uy, uz], self.subs[id].size).map(|k| (id, k))
    }

    /// Run `steps` steps.
    ///
    /// # Errors
    /// A damaged record (a bug; reported rather than run on).
    pub fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        for _ in 0..steps {
            let mut forces: Forces = [[0.0; 3]; 16];
            for id in 0..self.subs.len() {
                let f = self.step_subgrid(id)?;
                for (a, b) in forces.iter_mut().zip(f.iter()) {
                    for k in 0..3 {
                        a[k] += b[k];
                    }
                }
            }
            self.last_forces = forces;
            self.t += 1;
        }
        Ok(())
    }

    fn step_subgrid(&mut self, id: usize) -> Result<Forces, SolverError> {
        let q = L::Q;
        let s = &self.subs[id];
        let size = s.size;
        let bn = [size[0] + 2, size[1] + 2, size[2] + 2];
        let nb = bn[0] * bn[1] * bn[2];
        let cs = [size[0] - 2, size[1] - 2, size[2] - 2];
        let core_cells = cs[0] * cs[1] * cs[2];
        let mut buf = vec![0.0f32; q * nb];
        let mut flags = vec![0u8; nb];
        let core = load_core(&s.core, cs)?;
        // Where each non-core box cell comes from: (box cell, owning subgrid, shell index).
        let mut outer = Vec::new();
        for bz in 0..bn[2] {
            for by in 0..bn[1] {
                for bx in 0..bn[0] {
                    let b = bx + bn[0] * (by + bn[1] * bz);
                    let g = self.global(s, [bx, by, bz]);
                    flags[b] = self.dom.flags[self.dom.index(g[0], g[1], g[2])];
                    let inner = (0..3).all(|a| [bx, by, bz][a] >= 2 && [bx, by, bz][a] < bn[a] - 2);
                    if inner {
                        let c = (bx - 2) + cs[0] * ((by - 2) + cs[1] * (bz - 2));
                        (0..q).for_each(|i| buf[i * nb + b] = core[i * core_cells + c]);
                    } else if let Some((owner, k)) = self.shell_of(g) {
                        let sh = &self.subs[owner].shell;
                        let sc = sh.len() / q;
                        (0..q).for_each(|i| buf[i * nb + b] = sh[i * sc + k]);
                        outer.push((b, owner, k));
                    }
                }
            }
        }
        let before: Vec<u32> =
            outer.iter().flat_map(|&(b, _, _)| (0..q).map(move |i| (i, b))).map(|(i, b)| buf[i * nb + b].to_bits()).collect();
        let forces = step_box::<L>(&mut buf, &flags, bn, s.origin, self.t % 2 == 1, &self.params, &self.dom);
        // Changed shell and ghost values go back to their owners' shells.
        for (j, &(b, owner, k)) in outer.iter().enumerate() {
            let sh = &mut self.subs[owner].shell;
            let sc = sh.len() / q;
            for i in 0..q {
                let v = buf[i * nb + b];
                if v.to_bits() != before[j * q + i] {
                    sh[i * sc + k] = v;
                }
            }
        }
        let mut core = vec![0.0f32; q * core_cells];
        for z in 0..cs[2] {
            for y in 0..cs[1] {
                for x in 0..cs[0] {
                    let b = (x + 2) + bn[0] * ((y + 2) + bn[1] * (z + 2));
                    let c = x + cs[0] * (y + cs[1] * z);
                    (0..q).for_each(|i| core[i * core_cells + c] = buf[i * nb + b]);
                }
            }
        }
        self.subs[id].core = store_core(core, cs, self.thresholds);
        Ok(forces)
    }

    /// The whole state as the dense solver lays it out (`F[i * cells + n]`).
    ///
    /// # Errors
    /// A damaged record.
    pub fn dense_state(&self) -> Result<Vec<f32>, SolverError> {
        let q = L::Q;
        let nn = self.dom.cells();
        let mut out = vec![0.0f32; q * nn];
        for s in &self.subs {
            let size = s.size;
            let cs = [size[0] - 2, size[1] - 2, size[2] - 2];
            let core_cells = cs[0] * cs[1] * cs[2];
            let sc = shell_cells(size);
            let core = load_core(&s.core, cs)?;
            for uz in 0..size[2] {
                for uy in 0..size[1] {
                    for ux in 0..size[0] {
                        let g = self.dom.index(s.origin[0] + ux, s.origin[1] + uy, s.origin[2] + uz);
                        match shell_index([ux, uy, uz], size) {
                            Some(k) => (0..q).for_each(|i| out[i * nn + g] = s.shell[i * sc + k]),
                            None => {
                                let c = (ux - 1) + cs[0] * ((uy - 1) + cs[1] * (uz - 1));
                                (0..q).for_each(|i| out[i * nn + g] = core[i * core_cells + c]);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Keep a core raw or compress each of its planes.
fn store_core(core: Vec<f32>, cs: [usize; 3], thresholds: Option<Thresholds>) -> Core {
    let cells = cs[0] * cs[1] * cs[2];
    match thresholds {
        None => Core::Raw(core),
        Some(t) if cells > 0 => {
            Core::Compressed(core.par_chunks(cells).map(|p| CompressedField::compress(p, cs, BlockShape::DEFAULT, t)).collect())
        }
        Some(_) => Core::Raw(core),
    }
}

/// A core's planes, decompressed where needed.
fn load_core(core: &Core, cs: [usize; 3]) -> Result<std::borrow::Cow<'_, [f32]>, SolverError> {
    match core {
        Core::Raw(v) => Ok(std::borrow::Cow::Borrowed(v)),
        Core::Compressed(planes) => {
            let cells = cs[0] * cs[1] * cs[2];
            let mut out = vec![0.0f32; planes.len() * cells];
            out.par_chunks_mut(cells)
                .zip(planes.par_iter())
                .try_for_each(|(o, p)| p.decompress(o))
                .map_err(|(b, e)| SolverError::Backend(format!("a compressed subgrid record is damaged (block {b}): {e}")))?;
            Ok(std::borrow::Cow::Owned(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_indices_cover_the_shell_once() {
        for s in [[3, 3, 3], [5, 4, 3], [7, 6, 9]] {
            let mut seen = vec![false; shell_cells(s)];
            let mut core = 0;
            for z in 0..s[2] {
                for y in 0..s[1] {
                    for x in 0..s[0] {
                        match shell_index([x, y, z], s) {
                            Some(k) => {
                                assert!(!seen[k], "{s:?} {x} {y} {z}");
                                seen[k] = true;
                            }
                            None => core += 1,
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&b| b));
            assert_eq!(core, (s[0] - 2) * (s[1] - 2) * (s[2] - 2));
        }
    }

    #[test]
    fn slabs_cover_the_axis() {
        assert_eq!(slabs(10, 4), vec![(0, 4), (4, 6)]);
        assert_eq!(slabs(12, 4), vec![(0, 4), (4, 4), (8, 4)]);
        assert_eq!(slabs(5, 8), vec![(0, 5)]);
    }

    use crate::backend::cpu::params_of;
    use crate::lattice::D3Q19;

    const DUCT: &str = r#"
[domain]
size = [40, 22, 20]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0, 0.0] }
x_max = { type = "outlet" }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.04, 0.0, 0.01] }
[fluid]
tau = 0.6
[[obstacles]]
shape = "sphere"
center = [14, 11, 9.5]
radius = 4.2
"#;

    const BOX: &str = r#"
[domain]
size = [68, 36, 36]
lattice = "D3Q19"
[fluid]
tau = 0.56
[initial]
velocity = [0.05, 0.02, 0.0]
"#;

    fn dense(text: &str) -> CpuSolver<D3Q19, f32> {
        let ls = crate::scene::from_str(text, "test", std::path::PathBuf::from("."), &[]).unwrap();
        let dom = Domain::from_scene(&ls).unwrap();
        let params = params_of(&ls, &dom);
        let n = dom.n;
        CpuSolver::<D3Q19, f32>::new(dom, Scheme::EsotericPull, params, 16, |p| {
            // A swirl on top of the scene's start, so the flow is not uniform.
            let (rho, u) = crate::domain::initial_state(&ls, p);
            let (x, y) = (p[0] as f32 / n[0] as f32, p[1] as f32 / n[1] as f32);
            let s = 0.02 * (std::f32::consts::TAU * x).sin() * (std::f32::consts::TAU * y).cos();
            (rho, [u[0] + s, u[1] - s, u[2]])
        })
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn uncompressed_subgrids_equal_the_dense_solver_bit_for_bit() {
        // Uneven subgrids, one subgrid across the periodic z axis, walls, inlet, outlet, a
        // moving wall and an obstacle; both step parities.
        for g in [[12, 8, 7], [9, 22, 20], [40, 5, 20]] {
            let mut d = dense(DUCT);
            d.step(3).unwrap();
            let mut s = SubgridSolver::from_dense(&d, g, None).unwrap();
            assert_eq!(bits(&s.dense_state().unwrap()), bits(d.state()), "{g:?}: split");
            for _ in 0..4 {
                d.step(5).unwrap();
                s.step(5).unwrap();
                let (a, b) = (s.dense_state().unwrap(), d.state().to_vec());
                let diff = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
                assert!(diff.is_none(), "{g:?} step {}: first differing slot {diff:?}", d.time_step());
            }
            assert_eq!(s.last_forces()[1], d.forces_ref()[1], "{g:?}: drag");
        }
    }

    #[test]
    fn compressed_subgrids_keep_mass_on_a_periodic_box_and_stay_close() {
        let mut d = dense(BOX);
        let mass0: f64 = d.state().iter().map(|&v| f64::from(v)).sum::<f64>();
        let mut s = SubgridSolver::from_dense(&d, [34, 36, 36], Some(Thresholds { tau: 1e-5 })).unwrap();
        d.step(40).unwrap();
        s.step(40).unwrap();
        let a = s.dense_state().unwrap();
        let mass: f64 = a.iter().map(|&v| f64::from(v)).sum();
        let dense_mass: f64 = d.state().iter().map(|&v| f64::from(v)).sum();
        let cells = d.domain().cells() as f64;
        // The summed DDFs drift only by f32 rounding, as in the dense run (density is about 1
        // per cell, so these are relative drifts).
        let (drift, dense_drift) = ((mass - mass0).abs() / cells, (dense_mass - mass0).abs() / cells);
        eprintln!("mass drift per cell over 40 steps: compressed subgrids {drift:.2e}, dense {dense_drift:.2e}");
        assert!(drift < 2e-8 && dense_drift < 2e-8, "mass drift per cell: compressed {drift:e}, dense {dense_drift:e}");
        let e = crate::compress::nmse(d.state(), &a);
        eprintln!("ratio {:.2}, NMSE of the DDFs against the dense run {e:.2e}", s.ratio());
        assert!(e < 0.05, "NMSE of the DDFs against the dense run: {e}");
        assert!(s.ratio() > 3.0, "ratio {}", s.ratio());
    }
}
