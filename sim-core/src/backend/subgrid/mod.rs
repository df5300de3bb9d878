//! Compressed subgrids on the CPU (Flint et al. 2024): the reference of the GPU path.
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
//! **As a [`Solver`].** Fields, statistics and checkpoints go through the reassembled dense
//! state ([`SubgridSolver::dense_state`]) and the dense solver's own code, so checkpoints are
//! the dense CPU solver's format (either solver resumes the other's). Each such call holds the
//! dense state for a moment: a viewer or a `--export` costs the uncompressed memory while it
//! reads. A cell edit reassembles the dense state, applies the dense solver's edit and splits
//! the result again (every core is recompressed). A rollback state ([`Solver::snapshot`]) is a
//! copy of the subgrids as stored: compressed, and exact. Scenes choose this solver with
//! `[compression] enabled = true` ([`from_scene`]).
//!
//! **Thresholds and memory.** Each subgrid has its own tau (all start at the scene's). With a
//! memory budget, a state that outgrows it after a step gets tau doubled for its largest
//! subgrids (a warning says which); the next step compresses them harder, and a raise that does
//! not make the core smaller is taken back ([`budget`]). The run never halts for memory: once no
//! raise pays it goes on over budget, with a warning.
//!
//! Only 3D lattices, Esoteric Pull and FP32 storage, the product's default. A ghost value is
//! written back only where the step changed its bits: with one subgrid across a periodic axis
//! the ghost frame and the shell are two copies of the same cells, and only the copy a cell
//! wrote carries news.

use super::cpu::{apply_params, step_box, CpuSolver, Forces};
use crate::checkpoint::{Checkpoint, Snapshot};
use crate::collision::equilibrium;
use crate::compress::{BlockShape, CompressedField, Thresholds};
use crate::domain::{is_solid, Domain};
use crate::edit::{CellEdit, EditReport};
use crate::lattice::{Lat, Lattice, D3Q19, D3Q27, MAX_Q};
use crate::precision::Precision;
use crate::scene::{LoadedScene, SceneError};
use crate::schemes::Scheme;
use crate::solver::{CompressionInfo, Fields, Params, Solver, SolverError, SolverInfo, Stats, SubgridStat};
use crate::units::human_bytes;
use rayon::prelude::*;

/// The largest tau a memory budget raises a subgrid to: far above every detail of the shifted
/// DDFs (|f_i - w_i| < 1), so a subgrid there keeps only its approximations.
pub const TAU_CAP: f32 = 1.0;

/// Where a memory budget starts a subgrid compressed at tau = 0.
pub(crate) const TAU_FLOOR: f32 = 1e-6;

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
    /// This subgrid's threshold (used when the solver compresses).
    tau: f32,
    /// What the memory budget remembers of its raises of tau.
    memo: budget::Memo,
}

impl Subgrid {
    /// Bytes of the core as stored.
    fn core_bytes(&self) -> usize {
        match &self.core {
            Core::Raw(v) => 4 * v.len(),
            Core::Compressed(c) => c.iter().map(CompressedField::bytes).sum(),
        }
    }
    /// Bytes of core and shell.
    fn bytes(&self) -> usize {
        4 * self.shell.len() + self.core_bytes()
    }
    /// Cells of the subgrid.
    fn cells(&self) -> usize {
        self.size.iter().product()
    }
}

/// Cells of the outermost layer of a box.
pub(crate) fn shell_cells(s: [usize; 3]) -> usize {
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
pub(crate) fn slabs(n: usize, g: usize) -> Vec<(usize, usize)> {
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
    /// Whether cores are compressed (else kept raw: the exact mode).
    compress: bool,
    /// The threshold every subgrid starts at (and [`SubgridSolver::set_tau`] sets).
    tau: f32,
    /// Most bytes the state may take.
    budget: Option<u64>,
    /// The "budget cannot be met" warning was given.
    budget_warned: bool,
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
        if dense.domain().surfaces.iter().any(Option::is_some) {
            return Err(SolverError::Backend(
                "compressed subgrids keep obstacle walls half-way (staircase): build the dense solver with solver.walls = \"staircase\""
                    .into(),
            ));
        }
        let dom = dense.domain().clone();
        let n = dom.n;
        if (0..3).any(|a| g[a] < 3 || n[a] < 3) {
            return Err(SolverError::Backend(format!("subgrids need at least 3 cells a side: subgrid {g:?}, grid {n:?}")));
        }
        let slabs = [0, 1, 2].map(|a| slabs(n[a], g[a]));
        let tau = thresholds.map_or(0.0, |t| t.tau);
        let mut s = SubgridSolver {
            params: dense.params(),
            t: dense.time_step(),
            dom,
            slabs,
            subs: Vec::new(),
            compress: thresholds.is_some(),
            tau,
            budget: None,
            budget_warned: false,
            last_forces: [[0.0; 3]; 16],
            _l: std::marker::PhantomData,
        };
        s.split(dense.state(), None);
        Ok(s)
    }

    /// Cut a dense state (`F[i * cells + n]`) into the subgrids, cores stored as the solver
    /// stores them. `taus` keeps per-subgrid thresholds (after a restore or an edit); `None`
    /// starts every subgrid at the solver's tau.
    fn split(&mut self, state: &[f32], taus: Option<Vec<f32>>) {
        let dom = &self.dom;
        let nn = dom.cells();
        let mut boxes = Vec::new();
        for &(z0, sz) in &self.slabs[2] {
            for &(y0, sy) in &self.slabs[1] {
                for &(x0, sx) in &self.slabs[0] {
                    boxes.push(([x0, y0, z0], [sx, sy, sz]));
                }
            }
        }
        let taus = taus.unwrap_or_else(|| vec![self.tau; boxes.len()]);
        let compress = self.compress;
        self.subs = boxes
            .into_iter()
            .zip(taus)
            .map(|((origin, size), tau)| {
                let [x0, y0, z0] = origin;
                let [sx, sy, sz] = size;
                let sc = shell_cells(size);
                let cs = [sx - 2, sy - 2, sz - 2];
                let core_cells = cs[0] * cs[1] * cs[2];
                let mut shell = vec![0.0f32; L::Q * sc];
                let mut core = vec![0.0f32; L::Q * core_cells];
                for uz in 0..sz {
                    for uy in 0..sy {
                        for ux in 0..sx {
                            let gcell = dom.index(x0 + ux, y0 + uy, z0 + uz);
                            match shell_index([ux, uy, uz], size) {
                                Some(k) => (0..L::Q).for_each(|i| shell[i * sc + k] = state[i * nn + gcell]),
                                None => {
                                    let c = (ux - 1) + cs[0] * ((uy - 1) + cs[1] * (uz - 1));
                                    (0..L::Q).for_each(|i| core[i * core_cells + c] = state[i * nn + gcell]);
                                }
                            }
                        }
                    }
                }
                let core = store_core(core, cs, compress.then_some(Thresholds { tau }));
                Subgrid { origin, size, core, shell, tau, memo: budget::Memo::default() }
            })
            .collect();
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
        self.subs.iter().map(Subgrid::bytes).sum()
    }

    /// Bytes the DDFs take uncompressed (FP32).
    #[must_use]
    pub fn dense_bytes(&self) -> usize {
        4 * L::Q * self.dom.cells()
    }

    /// The compression ratio: uncompressed bytes over [`Self::bytes`] (the same as
    /// [`Self::ratio`]).
    #[must_use]
    pub fn compression_ratio(&self) -> f64 {
        self.ratio()
    }

    /// Origin, size and compression ratio (uncompressed over stored bytes) of every subgrid,
    /// x fastest then y then z: what a viewer colours subgrid outlines by.
    #[must_use]
    pub fn subgrid_ratios(&self) -> Vec<([usize; 3], [usize; 3], f64)> {
        self.subs.iter().map(|s| (s.origin, s.size, (4 * L::Q * s.cells()) as f64 / s.bytes() as f64)).collect()
    }

    /// Place, memory, ratio and threshold of every subgrid, in the order of
    /// [`Self::subgrid_ratios`].
    #[must_use]
    pub fn subgrid_stats(&self) -> Vec<SubgridStat> {
        self.subs
            .iter()
            .map(|s| {
                let (bytes, dense) = (s.bytes() as u64, (4 * L::Q * s.cells()) as u64);
                SubgridStat { origin: s.origin, size: s.size, ratio: dense as f64 / bytes as f64, tau: s.tau, bytes, dense_bytes: dense }
            })
            .collect()
    }

    /// The memory budget, if any.
    #[must_use]
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// The threshold of every subgrid, in the order of [`Self::subgrid_ratios`].
    #[must_use]
    pub fn subgrid_taus(&self) -> Vec<f32> {
        self.subs.iter().map(|s| s.tau).collect()
    }

    /// Change the threshold of every subgrid (a budget's raises are dropped). It takes effect
    /// as each subgrid is next compressed, i.e. in the next step; a solver built without
    /// compression starts compressing.
    ///
    /// # Errors
    /// A negative or non-finite tau.
    pub fn set_tau(&mut self, tau: f32) -> Result<(), SolverError> {
        if !(tau >= 0.0) || !tau.is_finite() {
            return Err(SolverError::Param(format!("compression tau must be a finite number >= 0, got {tau}")));
        }
        self.tau = tau;
        self.compress = true;
        self.budget_warned = false;
        for s in &mut self.subs {
            s.tau = tau;
            s.memo = budget::Memo::default();
        }
        Ok(())
    }

    /// Limit the bytes the state takes (checked after every step; see the module notes).
    pub fn set_budget(&mut self, budget: Option<u64>) {
        self.budget = budget;
        self.budget_warned = false;
        self.subs.iter_mut().for_each(|s| s.memo = budget::Memo::default());
    }

    /// After a step: a state over the memory budget doubles tau for its largest subgrids,
    /// enough of them that halving their cores would cover the excess, and raises that did not
    /// shrink their cores are undone ([`budget`]).
    fn enforce_budget(&mut self) {
        let Some(budget) = self.budget else { return };
        if !self.compress {
            return;
        }
        let bytes = self.bytes() as u64;
        let mut taus: Vec<f32> = self.subs.iter().map(|s| s.tau).collect();
        let cores: Vec<u64> = self.subs.iter().map(|s| s.core_bytes() as u64).collect();
        let mut memos: Vec<budget::Memo> = self.subs.iter().map(|s| s.memo).collect();
        let out = budget::after_step(&mut taus, &cores, &mut memos, bytes.saturating_sub(budget));
        for ((s, tau), memo) in self.subs.iter_mut().zip(taus).zip(memos) {
            s.tau = tau;
            s.memo = memo;
        }
        if out.exhausted {
            if !self.budget_warned {
                tracing::warn!(
                    "step {}: the compressed state takes {} but the memory budget is {}, and a higher tau no longer makes any \
                     subgrid smaller (each is at the largest tau, {TAU_CAP}, or its last raise saved less than {:.0} %); running on \
                     over budget (raise compression.memory_budget or use a smaller grid)",
                    self.t,
                    human_bytes(bytes),
                    human_bytes(budget),
                    100.0 * budget::PAYS
                );
                self.budget_warned = true;
            }
            return;
        }
        if let Some(&(k, old, new)) = out.raised.first() {
            tracing::warn!(
                "step {}: the compressed state takes {}, over the memory budget of {}: raising tau for {} subgrid(s), \
                 the largest at {:?} from {:e} to {:e}; they compress harder from the next step",
                self.t,
                human_bytes(bytes),
                human_bytes(budget),
                out.raised.len(),
                self.subs[k].origin,
                old,
                new
            );
        }
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
            self.enforce_budget();
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
        let t = self.compress.then_some(Thresholds { tau: self.subs[id].tau });
        self.subs[id].core = store_core(core, cs, t);
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

impl<L: Lat> SubgridSolver<L> {
    /// A dense CPU solver holding the reassembled state: fields, statistics, checkpoints and
    /// edits run through its code. Costs the uncompressed state for as long as it lives.
    fn dense_view(&self) -> Result<CpuSolver<L, f32>, SolverError> {
        Ok(CpuSolver::with_state(self.dom.clone(), self.params.clone(), self.t, self.dense_state()?, self.last_forces))
    }

    /// Take back a dense view's domain, parameters and state (after a restore or an edit);
    /// every subgrid keeps its tau.
    fn take_view(&mut self, view: CpuSolver<L, f32>) {
        let (dom, params, state) = view.into_parts();
        self.dom = dom;
        self.params = params;
        let taus = self.subgrid_taus();
        self.split(&state, Some(taus));
    }

    /// Report a damaged record where the trait has no error to return. Cannot happen unless
    /// memory is corrupted; the NaNs it leads to make the run's blow-up check restore the last
    /// good state rather than go on with garbage.
    fn damaged(&self, e: &SolverError) {
        tracing::error!("compressed subgrids at step {}: {e}", self.t);
    }
}

impl<L: Lat> Solver for SubgridSolver<L> {
    fn compressed(&self) -> Option<&dyn crate::solver::Compressed> {
        Some(self)
    }
    fn compressed_mut(&mut self) -> Option<&mut dyn crate::solver::Compressed> {
        Some(self)
    }
    fn info(&self) -> SolverInfo {
        let cells = self.dom.cells() as f64;
        let bytes = self.bytes();
        SolverInfo {
            backend: "cpu-subgrid",
            device: format!("{} threads", rayon::current_num_threads()),
            lattice: L::KIND,
            scheme: Scheme::EsotericPull,
            precision: Precision::Fp32,
            size: self.dom.n,
            bytes_per_cell: bytes as f64 / cells,
            // Each step reads and writes every subgrid's stored state once (ideal model; the
            // ghost frame's shell reads are left out).
            bytes_moved_per_cell: 2.0 * bytes as f64 / cells,
            memory_bytes: bytes as u64,
        }
    }
    fn domain(&self) -> &Domain {
        &self.dom
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        SubgridSolver::step(self, steps)
    }
    fn fields(&self) -> Fields {
        match self.dense_view() {
            Ok(v) => v.fields(),
            Err(e) => {
                self.damaged(&e);
                let nn = self.dom.cells();
                Fields { size: self.dom.n, rho: vec![f32::NAN; nn], u: vec![[f32::NAN; 3]; nn], solid: vec![false; nn] }
            }
        }
    }
    fn stats(&self) -> Stats {
        match self.dense_view() {
            Ok(v) => v.stats(),
            Err(e) => {
                self.damaged(&e);
                Stats::unreadable(self.t)
            }
        }
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        apply_params(&mut self.dom, &self.params, &p)?;
        self.params = p;
        Ok(())
    }
    fn checkpoint(&self) -> Checkpoint {
        match self.dense_view() {
            Ok(v) => v.checkpoint(),
            Err(e) => {
                self.damaged(&e);
                let fluid = self.dom.fluid_cells();
                let data: Vec<f32> = vec![f32::NAN; fluid * L::Q];
                Checkpoint {
                    lattice: L::KIND,
                    precision: Precision::Fp32,
                    size: self.dom.n,
                    flags_crc: crc32fast::hash(&self.dom.flags),
                    step: self.t,
                    params: self.params.clone(),
                    data: bytemuck::cast_slice(&data).to_vec(),
                    probes: Vec::new(),
                }
            }
        }
    }
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        // The dense solver checks the checkpoint and lays it out; then split it again.
        let zeros = vec![0.0f32; L::Q * self.dom.cells()];
        let mut view = CpuSolver::<L, f32>::with_state(self.dom.clone(), self.params.clone(), self.t, zeros, [[0.0; 3]; 16]);
        view.restore(c)?;
        self.t = view.time_step();
        self.last_forces = [[0.0; 3]; 16];
        self.take_view(view);
        Ok(())
    }
    /// The subgrids as they are stored (compressed cores, shells, thresholds): no dense copy.
    fn snapshot(&self) -> Result<Snapshot, SolverError> {
        let bytes = self.subs.iter().map(|s| s.bytes() as u64).sum();
        let own = SubgridSnapshot {
            cells: cells_of(&self.dom, L::Q),
            t: self.t,
            params: self.params.clone(),
            tau: self.tau,
            compress: self.compress,
            last_forces: self.last_forces,
            data: self.subs.clone(),
        };
        Ok(Snapshot::own(self.t, bytes, own))
    }
    fn roll_back(&mut self, s: &Snapshot) -> Result<(), SolverError> {
        let Some(own) = s.own_ref::<SubgridSnapshot<Vec<Subgrid>>>() else { return crate::solver::restore_snapshot(self, s) };
        if own.cells != cells_of(&self.dom, L::Q) || own.data.len() != self.subs.len() {
            return Err(SolverError::Checkpoint("the saved state was taken on other cells (size or obstacles differ)".into()));
        }
        self.set_params(own.params.clone())?;
        self.subs.clone_from(&own.data);
        (self.t, self.tau, self.compress, self.last_forces, self.budget_warned) = (own.t, own.tau, own.compress, own.last_forces, false);
        Ok(())
    }
    /// Reassembles the dense state, applies the dense solver's edit and splits the result again:
    /// the uncompressed memory for a moment and a recompression of every core, whatever the
    /// size of the edit.
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        let mut view = self.dense_view()?;
        let report = view.edit_cells(edit)?;
        if !report.changed.is_empty() {
            self.take_view(view);
        }
        Ok(report)
    }
}

/// A compressed-subgrid solver's state as it stores it, for [`Solver::roll_back`] (the CPU
/// reference's and the GPU's): the run's own values and `data`, the subgrids as stored.
pub(crate) struct SubgridSnapshot<T> {
    /// The cells it was taken on ([`cells_of`]): it goes back only onto the same.
    pub(crate) cells: (usize, [usize; 3], u32),
    pub(crate) t: u64,
    pub(crate) params: Params,
    pub(crate) tau: f32,
    pub(crate) compress: bool,
    pub(crate) last_forces: Forces,
    pub(crate) data: T,
}

/// Values a cell, cells per axis and the CRC-32 of the flags of `dom`.
pub(crate) fn cells_of(dom: &Domain, q: usize) -> (usize, [usize; 3], u32) {
    (q, dom.n, crc32fast::hash(&dom.flags))
}

/// What a compressed-subgrid state of a scene is estimated to take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The uncompressed shells (exact).
    pub shell_bytes: u64,
    /// The compressed cores, estimated from the initial state.
    pub core_bytes: u64,
    /// The DDFs uncompressed.
    pub dense_bytes: u64,
}

impl Estimate {
    /// Shells and cores.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.shell_bytes + self.core_bytes
    }
}

/// Estimate the bytes of a compressed-subgrid state without building it: the shells exactly,
/// the cores by compressing the initial equilibrium of up to 16 subgrids spread over the grid
/// (each cell's DDFs in its own slots; solid cells 0) and scaling to all core cells. The
/// initial state is smoother than the flow will become, so the estimate is a lower bound.
#[must_use]
pub fn estimate<L: Lat>(dom: &Domain, g: [usize; 3], tau: f32, init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync) -> Estimate {
    let n = dom.n;
    let sl = [0, 1, 2].map(|a| slabs(n[a], g[a].max(3)));
    let mut boxes = Vec::new();
    for &(z0, sz) in &sl[2] {
        for &(y0, sy) in &sl[1] {
            for &(x0, sx) in &sl[0] {
                boxes.push(([x0, y0, z0], [sx, sy, sz]));
            }
        }
    }
    let q = L::Q;
    let shell_bytes: usize = boxes.iter().map(|&(_, s)| 4 * q * shell_cells(s)).sum();
    let core_cells_of = |s: [usize; 3]| (s[0] - 2) * (s[1] - 2) * (s[2] - 2);
    let all_core: usize = boxes.iter().map(|&(_, s)| core_cells_of(s)).sum();
    let stride = boxes.len().div_ceil(16).max(1);
    let sample: Vec<_> = boxes.iter().copied().step_by(stride).collect();
    let (bytes, cells) = sample
        .iter()
        .map(|&(o, s)| {
            let cs = [s[0] - 2, s[1] - 2, s[2] - 2];
            let cc = core_cells_of(s);
            let mut core = vec![0.0f32; q * cc];
            for z in 0..cs[2] {
                for y in 0..cs[1] {
                    for x in 0..cs[0] {
                        let p = [o[0] + 1 + x, o[1] + 1 + y, o[2] + 1 + z];
                        if is_solid(dom.flags[dom.index(p[0], p[1], p[2])]) {
                            continue;
                        }
                        let (rho, u) = init(p);
                        let mut feq = [0.0f32; MAX_Q];
                        equilibrium::<L>(rho - 1.0, u, &mut feq);
                        let c = x + cs[0] * (y + cs[1] * z);
                        (0..q).for_each(|i| core[i * cc + c] = feq[i]);
                    }
                }
            }
            let stored = match store_core(core, cs, Some(Thresholds { tau })) {
                Core::Raw(v) => 4 * v.len(),
                Core::Compressed(c) => c.iter().map(CompressedField::bytes).sum(),
            };
            (stored, cc)
        })
        .fold((0usize, 0usize), |a, b| (a.0 + b.0, a.1 + b.1));
    let core_bytes = if cells == 0 { 0.0 } else { bytes as f64 * all_core as f64 / cells as f64 };
    Estimate { shell_bytes: shell_bytes as u64, core_bytes: core_bytes.round() as u64, dense_bytes: (4 * q * dom.cells()) as u64 }
}

/// Build the compressed-subgrid solver a scene with `[compression] enabled = true` describes.
/// With a memory budget, the state is estimated first ([`estimate`]) and a scene that does not
/// fit is refused before anything is allocated. Building goes through the dense state once.
///
/// # Errors
/// Voxelisation errors; a 2D lattice, another scheme or precision (scene validation refuses
/// them first); an estimate over the memory budget.
pub fn from_scene(ls: &LoadedScene) -> Result<Box<dyn Solver>, SceneError> {
    match ls.derived.lattice {
        Lattice::D3Q19 => Ok(Box::new(build::<D3Q19>(ls)?)),
        Lattice::D3Q27 => Ok(Box::new(build::<D3Q27>(ls)?)),
        Lattice::D2Q9 => Err(compression_error(ls, "compression.enabled", "compressed subgrids need a 3D lattice (D3Q19 or D3Q27)".into())),
    }
}

fn compression_error(ls: &LoadedScene, key: &str, message: String) -> SceneError {
    SceneError { file: ls.origin.clone(), line: None, key: key.into(), message }
}

/// [`from_scene`] for one lattice.
///
/// # Errors
/// As [`from_scene`].
pub fn build<L: Lat>(ls: &LoadedScene) -> Result<SubgridSolver<L>, SceneError> {
    let c = &ls.scene.compression;
    let s = &ls.scene.solver;
    if s.scheme != Scheme::EsotericPull || s.precision != Precision::Fp32 {
        return Err(compression_error(
            ls,
            "compression.enabled",
            format!("compressed subgrids run esoteric_pull fp32, not {} {}", s.scheme.name(), s.precision),
        ));
    }
    let dom = Domain::from_scene(ls)?;
    let g = c.subgrid_size();
    let init = |p| crate::domain::initial_state(ls, p);
    if let Some(budget) = c.memory_budget {
        let e = estimate::<L>(&dom, g, c.tau, init);
        if e.total() > budget.0 {
            return Err(compression_error(
                ls,
                "compression.memory_budget",
                format!(
                    "the compressed state needs about {} ({} of subgrid shells, at least {} of compressed cores at tau = {:e}; \
                     {} uncompressed) but the budget is {}: raise compression.tau, use a smaller domain.size or bigger \
                     compression.subgrid (fewer shells), or raise compression.memory_budget",
                    human_bytes(e.total()),
                    human_bytes(e.shell_bytes),
                    human_bytes(e.core_bytes),
                    c.tau,
                    human_bytes(e.dense_bytes),
                    budget
                ),
            ));
        }
    }
    let params = Params::from_scene(ls, &dom);
    let dense = CpuSolver::<L, f32>::new(dom, Scheme::EsotericPull, params, s.ghost_block, init);
    let mut sub = SubgridSolver::from_dense(&dense, g, Some(Thresholds { tau: c.tau }))
        .map_err(|e| compression_error(ls, "compression.subgrid", e.to_string()))?;
    sub.set_budget(c.memory_budget.map(|b| b.0));
    Ok(sub)
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

pub(crate) mod budget;

#[cfg(test)]
mod tests;

impl<L: Lat> crate::solver::Compressed for SubgridSolver<L> {
    fn set_compression_tau(&mut self, tau: f32) -> Result<(), SolverError> {
        self.set_tau(tau)
    }
    fn compression(&self) -> CompressionInfo {
        let (lo, hi) = self.subs.iter().fold((f32::INFINITY, 0.0f32), |(lo, hi), s| (lo.min(s.tau), hi.max(s.tau)));
        CompressionInfo {
            ratio: self.ratio(),
            bytes: self.bytes() as u64,
            dense_bytes: self.dense_bytes() as u64,
            subgrids: self.subs.len(),
            tau: if self.compress { (lo, hi) } else { (0.0, 0.0) },
            budget: self.budget,
            per_subgrid: self.subgrid_stats(),
        }
    }
    fn set_compression_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError> {
        self.set_budget(budget);
        Ok(())
    }
}
