//! Compressed subgrids on the GPU (Flint et al. 2024): grids larger than the GPU's memory, on
//! one GPU or shared out over several ([`cuts`]: each GPU its own subgrids, ring and working
//! box, the planes at the cuts exchanged after every step).
//!
//! The same scheme as the CPU reference ([`crate::backend::subgrid`]), with the state on the device:
//!
//! - every subgrid's **shell** (its outermost cell layer) is kept exact in one device array,
//!   the interface buffers through which subgrids meet;
//! - every subgrid's **core** (the rest) is a compressed record (one per DDF plane and block of
//!   33x17x17, [`crate::compress`]) in a **circular buffer** of device memory: a step takes
//!   the oldest record from the head of the ring and appends the new one at its tail, so the
//!   records of one step follow those of the last without gaps or compaction;
//! - one **working box** (a subgrid plus a one-cell ghost frame) is decompressed at a time.
//!
//! A subgrid's step: copy its record out of the ring, decompress it into the box's core, gather
//! the box's flags, fill the box's two outer layers (its shell and the ghost frame, which is
//! the neighbours' shells) from the shells, run the dense solver's own stream-collide kernel
//! on the box (compiled for the box size; `DEF_BOX` keeps the frame from being updated), write
//! the shell and ghost values the step changed back to their owners, compress the core and put
//! the record at the ring's tail. A record that does not fit in the ring goes to host memory
//! (a warning says so) and the budget then raises tau for the largest subgrids, as on the CPU:
//! the run never halts for memory.
//!
//! Without compression (`tau = None`) the cores are stored raw and the result equals the dense
//! CUDA solver bit for bit (tested on the GPU host).
//!
//! Fields, checkpoints and cell edits go through the dense state reassembled on the host (as
//! the CPU subgrid solver does); statistics and probes run on the device, subgrid by subgrid
//! (probes only in the subgrids they lie in). A run's rollback state ([`Solver::snapshot`]) is
//! the shells and records copied to the host as they are stored, so `esoflow run` keeps one for
//! a grid whose dense DDFs are larger than the host's memory.

#![allow(clippy::redundant_closure, clippy::needless_range_loop, clippy::neg_cmp_op_on_partial_ord)]

mod cuts;
mod parts;
mod ring;

use crate::backend::cpu::{apply_params, CpuSolver, Forces};
use crate::backend::cuda::codec::GpuCodec;
use crate::backend::cuda::{derr, device_info, gpu_inlets, gpu_outlets, probe, upload_pod};
use crate::backend::subgrid::budget::{self, Memo};
use crate::backend::subgrid::{cells_of, shell_cells, slabs, SubgridSnapshot, TAU_CAP};
use crate::checkpoint::{Checkpoint, Snapshot};
use crate::compress::BlockShape;
use crate::domain::Domain;
use crate::edit::{CellEdit, EditReport};
use crate::lattice::{Lattice, D3Q19, D3Q27};
use crate::precision::Precision;
use crate::schemes::Scheme;
use crate::solver::{CompressionInfo, Fields, Params, Solver, SolverError, SolverInfo, Stats, SubgridStat};
use crate::units::human_bytes;
use cudarc::driver::CudaContext;
/// Working boxes a GPU fills on the host at once while the state is built.
use ring::*;
use std::sync::Arc;
use std::time::Instant;

/// Time of the parts of a step, summed over steps (milliseconds, from CUDA events), as in the
/// paper's Table 1.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Steps summed.
    pub steps: u64,
    /// Record out of the ring (or up from the host) and decompression.
    pub decompress: f64,
    /// Box flags, ghost frame and shell in, changed values out.
    pub interfaces: f64,
    /// The stream-collide kernel.
    pub lbm: f64,
    /// Compression.
    pub compress: f64,
    /// Record into the ring (or down to the host).
    pub store: f64,
    /// The busiest GPU's sum of the above (equal to it on one GPU): against the mean, how
    /// unevenly the work is shared.
    pub busiest: f64,
    /// Wall-clock time of the steps (host).
    pub wall: f64,
}

/// The compressed-subgrid solver on one GPU or several (the subgrids shared out in slabs,
/// [`cuts`]).
pub struct CudaSubgridSolver {
    dom: Domain,
    params: Params,
    t: u64,
    q: usize,
    slabs: [Vec<(usize, usize)>; 3],
    /// Whether cores are compressed (else stored raw: the exact mode).
    compress: bool,
    tau: f32,
    /// Device memory a GPU may take.
    budget: Option<u64>,
    budget_warned: bool,
    /// Before `parts`: the communicators go before their devices' contexts.
    comms: Option<cuts::Comms>,
    /// One share of the subgrids per GPU.
    parts: Vec<std::sync::Mutex<Dev>>,
    last_forces: Forces,
    timing: Option<PhaseTimes>,
}

/// The statistics of the whole grid, summed over the subgrids.
struct GridStats {
    mass: f64,
    max_u: f32,
    rho_range: [f64; 2],
    first_bad: Option<[usize; 3]>,
}

impl GridStats {
    fn join(self, o: GridStats) -> GridStats {
        GridStats {
            mass: self.mass + o.mass,
            max_u: self.max_u.max(o.max_u),
            rho_range: [self.rho_range[0].min(o.rho_range[0]), self.rho_range[1].max(o.rho_range[1])],
            first_bad: self.first_bad.or(o.first_bad),
        }
    }
}

/// What sizes the ring of compressed cores from a memory budget.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingSizing {
    /// Device bytes besides the ring (shells, working box, scratch, tables).
    fixed: u64,
    /// The smallest budget accepted: the fixed bytes and room for cores compressed 25x.
    least: u64,
    /// Ring words that hold every core raw or at its worst compressed size (more is useless).
    max_words: u64,
    /// Bytes of the shells (for the message of a budget too small).
    shell_bytes: u64,
}

impl RingSizing {
    /// Ring words for `budget` (`None`: 90 % of the `free` device bytes).
    fn words(&self, budget: Option<u64>, free: u64) -> Result<u64, SolverError> {
        let words = match budget {
            Some(b) => {
                if b < self.least {
                    return Err(SolverError::Backend(format!(
                        "a memory budget of {} is too small: the shells ({}), the working box and scratch take {} and the \
                         compressed cores need room too (at least {} in all); raise compression.memory_budget or use bigger \
                         compression.subgrid (fewer shells)",
                        human_bytes(b),
                        human_bytes(self.shell_bytes),
                        human_bytes(self.fixed),
                        human_bytes(self.least)
                    )));
                }
                (b - self.fixed) / 4
            }
            None => ((free as f64 * 0.9) as u64).saturating_sub(self.fixed) / 4,
        };
        Ok(words.min(self.max_words).max(1))
    }
}

impl CudaSubgridSolver {
    /// Build on a domain on device 0: subgrids of (at most) `g` cells a side, cores compressed
    /// with `tau` (or stored raw with `None`), at most `budget` bytes of device memory. The
    /// initial state is built subgrid by subgrid (never the whole grid at once).
    ///
    /// # Errors
    /// No device, NVRTC, a 2D lattice, a budget below what the shells and the working box need
    /// (the message says how much), not enough device memory.
    pub fn new(
        dom: Domain,
        params: Params,
        g: [usize; 3],
        tau: Option<f32>,
        budget: Option<u64>,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<CudaSubgridSolver, SolverError> {
        CudaSubgridSolver::new_on(dom, params, g, tau, budget, &[0], init)
    }

    /// As [`CudaSubgridSolver::new`], the subgrids shared out over `devices` (CUDA ordinals;
    /// one slab of subgrids each, see [`cuts`]); `budget` is each GPU's.
    ///
    /// # Errors
    /// As [`CudaSubgridSolver::new`], per GPU; fewer subgrids along every axis than GPUs.
    pub fn new_on(
        dom: Domain,
        params: Params,
        g: [usize; 3],
        tau: Option<f32>,
        budget: Option<u64>,
        devices: &[usize],
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<CudaSubgridSolver, SolverError> {
        if dom.lattice.dims() != 3 {
            return Err(SolverError::Backend("compressed subgrids need a 3D lattice (D3Q19 or D3Q27)".into()));
        }
        if dom.surfaces.iter().any(Option::is_some) {
            return Err(SolverError::Backend(
                "compressed subgrids keep obstacle walls half-way (staircase): build the domain with solver.walls = \"staircase\"".into(),
            ));
        }
        let n = dom.n;
        if n.iter().any(|&x| !(3..=0xffff).contains(&x)) {
            return Err(SolverError::Backend(format!("compressed subgrids need 3 to 65535 cells per axis, got {n:?}")));
        }
        if devices.is_empty() {
            return Err(SolverError::Backend("compressed subgrids need at least one GPU".into()));
        }
        probe().map_err(SolverError::Backend)?;
        let sl = [0, 1, 2].map(|a| slabs(n[a], g[a].max(3)));
        let share = cuts::share([0, 1, 2].map(|a| sl[a].len()), devices.len())?;
        let layout = parts::Layout::new(&dom, &sl, share);
        let mut built = Vec::with_capacity(devices.len());
        for (p, &ordinal) in devices.iter().enumerate() {
            let dev = layout.part(&dom, &params, p, ordinal, tau, budget).map_err(|e| match devices.len() {
                1 => e,
                _ => SolverError::Backend(format!("GPU {ordinal}: {e}")),
            })?;
            built.push(std::sync::Mutex::new(dev));
        }
        let comms = cuts::communicators(devices)?;
        let mut s = CudaSubgridSolver {
            dom,
            params,
            t: 0,
            q: layout.q,
            slabs: sl,
            compress: tau.is_some(),
            tau: tau.unwrap_or(0.0),
            budget,
            budget_warned: false,
            comms,
            parts: built,
            last_forces: [[0.0; 3]; 16],
            timing: None,
        };
        s.build_all(&|sub: &GSub, bn: [usize; 3], dom: &Domain, out: &mut [f32]| initial_box(dom, sub.origin, bn, &init, out))?;
        Ok(s)
    }

    /// Every GPU's share, to be used by one thread each.
    fn devs(&mut self) -> Result<Vec<&mut Dev>, SolverError> {
        self.parts.iter_mut().map(|m| m.get_mut().map_err(|_| Dev::lock_err())).collect()
    }

    /// Every GPU's share, locked, for `&self` methods.
    fn locked(&self) -> Result<Vec<std::sync::MutexGuard<'_, Dev>>, SolverError> {
        self.parts.iter().map(|m| m.lock().map_err(|_| Dev::lock_err())).collect()
    }

    /// Sum of `f` over the GPUs' shares (0 where one cannot be read).
    fn sum(&self, f: impl Fn(&Dev) -> u64) -> u64 {
        self.locked().map_or(0, |v| v.iter().map(|d| f(d)).sum())
    }

    /// Run `f` on every GPU's share at once (a thread each where there are several).
    fn each<R: Send>(devs: &mut [&mut Dev], f: impl Fn(&mut Dev) -> Result<R, SolverError> + Sync) -> Result<Vec<R>, SolverError> {
        if devs.len() == 1 {
            return Ok(vec![f(devs[0])?]);
        }
        let out: Vec<Result<R, SolverError>> = std::thread::scope(|s| {
            let f = &f;
            let hs: Vec<_> = devs.iter_mut().map(|d| s.spawn(move || f(d))).collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(SolverError::Backend("a GPU's worker thread panicked (a bug)".into()))))
                .collect()
        });
        out.into_iter().collect()
    }

    /// Fill every subgrid from `fill` on every GPU, then give each GPU the neighbours' planes
    /// at its cuts.
    fn build_all(&mut self, fill: &BoxFill<'_>) -> Result<(), SolverError> {
        let (dom, compress) = (self.dom.clone(), self.compress);
        let mut devs = self.parts.iter_mut().map(|m| m.get_mut().map_err(|_| Dev::lock_err())).collect::<Result<Vec<_>, _>>()?;
        Self::each(&mut devs, |d| d.build(&dom, compress, fill))?;
        cuts::settle(&mut devs, self.comms.as_ref(), 2)?;
        Self::each(&mut devs, |d| d.stream.synchronize().map_err(derr("exchanging the cut planes")))?;
        Ok(())
    }

    /// GPUs the subgrids are shared over.
    #[must_use]
    pub fn gpus(&self) -> usize {
        self.parts.len()
    }

    /// Time the parts of every following step (CUDA events; costs a little).
    pub fn enable_timing(&mut self) {
        self.timing = Some(PhaseTimes::default());
    }

    /// The summed phase times since [`Self::enable_timing`] (on several GPUs, their mean).
    #[must_use]
    pub fn timing(&self) -> Option<PhaseTimes> {
        self.timing
    }

    /// Set tau for every subgrid (it takes effect at the next compression; from the raw mode,
    /// compression starts).
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
        for d in self.devs()? {
            for s in &mut d.subs {
                s.tau = tau;
                s.memo = Memo::default();
            }
        }
        Ok(())
    }

    /// Bytes of device memory the state takes (shells, box, scratch, flags and the records in
    /// the ring, over all GPUs) plus records spilled to the host.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.sum(|d| d.fixed + 4 * d.ring_used + 4 * d.host_words())
    }

    /// Bytes of the whole state uncompressed (FP32 DDFs).
    #[must_use]
    pub fn dense_bytes(&self) -> u64 {
        (4 * self.q * self.dom.cells()) as u64
    }

    /// Bytes of records spilled to host memory.
    #[must_use]
    pub fn host_bytes(&self) -> u64 {
        self.sum(|d| 4 * d.host_words())
    }

    /// Capacity of the rings (bytes, over all GPUs).
    #[must_use]
    pub fn ring_bytes(&self) -> u64 {
        self.sum(|d| 4 * d.ring.len() as u64)
    }

    /// The uncompressed DDFs over the shells and records (what compression saves; the working
    /// box, scratch and the copies of shells across cuts are left out, they do not grow with
    /// the grid).
    #[must_use]
    pub fn ratio(&self) -> f64 {
        let stored = self.sum(|d| 4 * (d.own_shell_floats + d.ring_used + d.host_words()));
        self.dense_bytes() as f64 / stored as f64
    }

    /// Subgrids per axis.
    #[must_use]
    pub fn counts(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.slabs[a].len())
    }

    /// Per subgrid: origin, size, its uncompressed bytes over its stored bytes (shell and
    /// record), tau.
    #[must_use]
    pub fn subgrid_ratios(&self) -> Vec<([usize; 3], [usize; 3], f64, f32)> {
        self.subgrid_stats().iter().map(|s| (s.origin, s.size, s.ratio, s.tau)).collect()
    }

    /// Place, memory (shell and record, wherever the record lies), ratio and threshold of every
    /// subgrid, x fastest.
    #[must_use]
    pub fn subgrid_stats(&self) -> Vec<SubgridStat> {
        let q = self.q;
        let Ok(parts) = self.locked() else { return Vec::new() };
        let mut all: Vec<(usize, SubgridStat)> = parts
            .iter()
            .flat_map(|d| d.subs.iter())
            .map(|s| {
                let bytes = 4 * (q * shell_cells(s.size)) as u64 + 4 * s.record.words();
                let dense = 4 * (q * vol(s.size)) as u64;
                (
                    s.id,
                    SubgridStat {
                        origin: s.origin,
                        size: s.size,
                        ratio: dense as f64 / bytes as f64,
                        tau: s.tau,
                        bytes,
                        dense_bytes: dense,
                    },
                )
            })
            .collect();
        all.sort_by_key(|(id, _)| *id);
        all.into_iter().map(|(_, s)| s).collect()
    }

    /// Limit each GPU's device memory to `budget` bytes (`None`: 90 % of what is free): the
    /// ring of compressed cores is made again at the size that leaves, its records moved
    /// through host memory. A smaller ring that the records outgrow spills and raises tau at
    /// the next step, as at the start.
    ///
    /// # Errors
    /// A budget below what the shells and the working box need (the message says how much), a
    /// ring that could not be allocated (the old one is kept).
    pub fn set_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError> {
        let mut words = Vec::new();
        for d in self.devs()? {
            let free = match budget {
                Some(_) => 0,
                None => {
                    // The caller's thread may not have the context current (the viewer's worker).
                    d.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
                    let free = cudarc::driver::result::mem_get_info().map_err(derr("reading free device memory"))?.0 as u64;
                    free + 4 * d.ring.len() as u64
                }
            };
            words.push(d.sizing.words(budget, free)?);
        }
        for (d, w) in self.devs()?.into_iter().zip(words) {
            d.resize_ring(w)?;
            for s in &mut d.subs {
                s.memo = Memo::default();
            }
        }
        self.budget = budget;
        self.budget_warned = false;
        Ok(())
    }

    /// Run `steps` steps.
    ///
    /// # Errors
    /// CUDA errors, a damaged record.
    pub fn run(&mut self, steps: u64) -> Result<(), SolverError> {
        let wall = Instant::now();
        for _ in 0..steps {
            let (t, p, timing, compress) = (self.t, self.params.clone(), self.timing.is_some(), self.compress);
            let mut devs = self.parts.iter_mut().map(|m| m.get_mut().map_err(|_| Dev::lock_err())).collect::<Result<Vec<_>, _>>()?;
            let comms = self.comms.as_ref();
            // Each GPU's thread also reads its damage flag and forces after its step, so that
            // the GPUs' reads overlap.
            let stepped = Self::each(&mut devs, |d| {
                let times = d.step_all(t, &p, compress, timing, comms.map(|c| c.of(d.index)))?;
                d.check_damage()?;
                let forces = d.stream.clone_dtoh(&d.forces).map_err(derr("reading forces"))?;
                Ok((times, forces))
            })
            .inspect_err(|_| {
                if let Some(c) = comms {
                    c.1.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            })?;
            if comms.is_none() {
                cuts::settle(&mut devs, None, 1)?;
            }
            let mut forces = [[0.0f64; 3]; 16];
            for (_, fr) in &stepped {
                for (k, f) in forces.iter_mut().enumerate() {
                    for a in 0..3 {
                        f[a] += fr[3 * k + a];
                    }
                }
            }
            // The parts of the step before this one (read while this one ran).
            let times: Vec<[f64; 6]> = stepped.into_iter().filter_map(|(t, _)| t).collect();
            self.last_forces = forces;
            self.t += 1;
            self.add_times(&times);
            self.enforce_budget()?;
        }
        if self.timing.is_some() {
            let mut devs = self.devs()?;
            let last = Self::each(&mut devs, |d| d.read_unread())?;
            let times: Vec<[f64; 6]> = last.into_iter().flatten().collect();
            self.add_times(&times);
            if let Some(tm) = &mut self.timing {
                tm.wall += wall.elapsed().as_secs_f64() * 1e3;
            }
        }
        Ok(())
    }

    /// Add one timed step's parts, one entry per GPU (none where no step was timed).
    fn add_times(&mut self, times: &[[f64; 6]]) {
        let Some(tm) = &mut self.timing else { return };
        if times.is_empty() {
            return;
        }
        let k = times.len() as f64;
        let mean = |i: usize| times.iter().map(|x| x[i]).sum::<f64>() / k;
        tm.steps += 1;
        tm.decompress += mean(0);
        tm.interfaces += mean(1) + mean(3);
        tm.lbm += mean(2);
        tm.compress += mean(4);
        tm.store += mean(5);
        tm.busiest += times.iter().map(|x| x.iter().sum::<f64>()).fold(0.0, f64::max);
    }

    /// After a step with records in host memory: double tau for the largest subgrids of that
    /// GPU, enough of them that halving their records would bring the spill back into its ring;
    /// raises that did not make records smaller are undone ([`budget`]).
    fn enforce_budget(&mut self) -> Result<(), SolverError> {
        let (t, compress, several) = (self.t, self.compress, self.parts.len() > 1);
        let mut warned = self.budget_warned;
        for d in self.parts.iter_mut().map(|m| m.get_mut().map_err(|_| Dev::lock_err())) {
            let d = d?;
            if !compress {
                continue;
            }
            let spilled = 4 * d.host_words();
            let mut taus: Vec<f32> = d.subs.iter().map(|s| s.tau).collect();
            let bytes: Vec<u64> = d.subs.iter().map(|s| 4 * s.record.words()).collect();
            let mut memos: Vec<Memo> = d.subs.iter().map(|s| s.memo).collect();
            let out = budget::after_step(&mut taus, &bytes, &mut memos, spilled);
            for ((s, tau), memo) in d.subs.iter_mut().zip(taus).zip(memos) {
                s.tau = tau;
                s.memo = memo;
            }
            let gpu = if several { format!(" on GPU {}", d.ordinal) } else { String::new() };
            if out.exhausted {
                if !warned {
                    tracing::warn!(
                        "step {t}: {} of records{gpu} are in host memory, and a higher tau no longer makes any subgrid smaller \
                         (each is at the largest tau, {TAU_CAP}, or its raises saved less than {:.0} %); running on (raise \
                         compression.memory_budget or use a smaller grid)",
                        human_bytes(spilled),
                        100.0 * budget::PAYS
                    );
                    warned = true;
                }
                continue;
            }
            if let Some(&(k, old, new)) = out.raised.first() {
                tracing::warn!(
                    "step {t}: {} of records did not fit in the ring of {}{gpu}: raising tau for {} subgrid(s), the largest at \
                     {:?} from {old:e} to {new:e}; they compress harder from the next step",
                    human_bytes(spilled),
                    human_bytes(4 * d.ring.len() as u64),
                    out.raised.len(),
                    d.subs[k].origin,
                );
            }
        }
        self.budget_warned = warned;
        Ok(())
    }

    /// The state as the dense solver lays it out (`F[i * cells + n]`), reassembled on the host
    /// subgrid by subgrid.
    ///
    /// # Errors
    /// CUDA errors, a damaged record.
    pub fn dense_state(&self) -> Result<Vec<f32>, SolverError> {
        let mut out = vec![0.0f32; self.q * self.dom.cells()];
        for mut d in self.locked()? {
            d.dense_state(&self.dom, &mut out)?;
        }
        Ok(out)
    }

    /// Replace the state by a dense one (`F[i * cells + n]`), split into subgrids again.
    ///
    /// # Errors
    /// CUDA errors; a state of the wrong length.
    pub fn load_dense(&mut self, state: &[f32]) -> Result<(), SolverError> {
        let nn = self.dom.cells();
        let q = self.q;
        if state.len() != q * nn {
            return Err(SolverError::Backend(format!("a state of {} values for {nn} cells x {q}", state.len())));
        }
        self.build_all(&|sub: &GSub, bn: [usize; 3], dom: &Domain, out: &mut [f32]| {
            let nb = vol(bn);
            for uz in 0..sub.size[2] {
                for uy in 0..sub.size[1] {
                    for ux in 0..sub.size[0] {
                        let g = dom.index(sub.origin[0] + ux, sub.origin[1] + uy, sub.origin[2] + uz);
                        let b = (ux + 1) + bn[0] * ((uy + 1) + bn[1] * (uz + 1));
                        (0..q).for_each(|i| out[i * nb + b] = state[i * nn + g]);
                    }
                }
            }
        })
    }

    /// A dense CPU solver holding the reassembled state (fields, checkpoints and edits run
    /// through its code; it holds the uncompressed state while it lives).
    fn dense_view(&self) -> Result<Box<dyn Solver>, SolverError> {
        let state = self.dense_state()?;
        let (dom, p, t, f) = (self.dom.clone(), self.params.clone(), self.t, self.last_forces);
        Ok(match self.dom.lattice {
            Lattice::D3Q27 => Box::new(CpuSolver::<D3Q27, f32>::with_state(dom, p, t, state, f)),
            _ => Box::new(CpuSolver::<D3Q19, f32>::with_state(dom, p, t, state, f)),
        })
    }

    fn report(&self, e: &SolverError) {
        tracing::error!("compressed subgrids (GPU) at step {}: {e}", self.t);
        eprintln!("error: {e}");
    }

    fn upload_params(&mut self) -> Result<(), SolverError> {
        let mut walls = vec![0.0f32; 48];
        for (i, w) in self.params.walls.iter().enumerate().take(16) {
            walls[3 * i..3 * i + 3].copy_from_slice(w);
        }
        let dom = self.dom.clone();
        for d in self.devs()? {
            d.stream.memcpy_htod(&walls, &mut d.walls).map_err(derr("uploading walls"))?;
            for s in &mut d.subs {
                upload_pod(&d.stream, &gpu_inlets(&dom, s.origin.map(|o| 1 - o as i32)), &mut s.inlets)?;
            }
            upload_pod(&d.stream, &gpu_outlets(&dom, [0; 3]), &mut d.outlets)?;
        }
        Ok(())
    }
}

impl Solver for CudaSubgridSolver {
    fn compressed(&self) -> Option<&dyn crate::solver::Compressed> {
        Some(self)
    }
    fn compressed_mut(&mut self) -> Option<&mut dyn crate::solver::Compressed> {
        Some(self)
    }
    fn info(&self) -> SolverInfo {
        let cells = self.dom.cells() as f64;
        let bytes = self.bytes();
        let name = self.locked().map_or_else(|_| String::new(), |v| v[0].info.name.clone());
        SolverInfo {
            backend: "cuda-subgrid",
            device: if self.parts.len() > 1 { format!("{} x {name}", self.parts.len()) } else { name },
            lattice: self.dom.lattice,
            scheme: Scheme::EsotericPull,
            precision: Precision::Fp32,
            size: self.dom.n,
            bytes_per_cell: bytes as f64 / cells,
            bytes_moved_per_cell: 2.0 * bytes as f64 / cells,
            memory_bytes: bytes,
        }
    }
    fn domain(&self) -> &Domain {
        &self.dom
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        self.run(steps)
    }
    fn fields(&self) -> Fields {
        match self.dense_view() {
            Ok(v) => v.fields(),
            Err(e) => {
                self.report(&e);
                let nn = self.dom.cells();
                Fields { size: self.dom.n, rho: vec![f32::NAN; nn], u: vec![[f32::NAN; 3]; nn], solid: vec![false; nn] }
            }
        }
    }
    fn probe(&self, cells: &[[usize; 3]]) -> Result<Vec<crate::probes::ProbeSample>, SolverError> {
        // The boxes of the probed subgrids only: no dense copy of the grid.
        let d = &self.dom;
        crate::probes::sample_read(d.n, &d.flags, self.t, cells, |wanted| {
            let mut got = std::collections::HashMap::with_capacity(wanted.len());
            for mut dev in self.locked()? {
                got.extend(dev.probe_cells(d, self.t, &self.params, wanted)?);
            }
            wanted
                .iter()
                .map(|i| got.get(i).copied().ok_or_else(|| SolverError::Backend(format!("no subgrid holds cell {i} (a bug)"))))
                .collect()
        })
    }
    fn stats(&self) -> Stats {
        let r = self.locked().and_then(|mut v| {
            let mut all: Option<GridStats> = None;
            for d in &mut v {
                let s = d.stats(self.t, &self.params)?;
                all = Some(match all {
                    Some(a) => a.join(s),
                    None => s,
                });
            }
            all.ok_or_else(|| SolverError::Backend("no GPU holds subgrids (a bug)".into()))
        });
        match r {
            Ok(GridStats { mass, max_u: u, rho_range: rho, first_bad }) => {
                let nobs = self.dom.obstacles.len();
                let blown = first_bad.is_some();
                Stats {
                    step: self.t,
                    mass: if blown { f64::NAN } else { mass },
                    max_u: if blown { f64::NAN } else { f64::from(u) },
                    rho_range: if blown { [f64::NAN; 2] } else { rho },
                    forces: (1..=nobs).map(|k| self.last_forces[k]).collect(),
                    first_bad_cell: first_bad,
                }
            }
            Err(e) => {
                self.report(&e);
                Stats::unreadable(self.t)
            }
        }
    }
    fn synchronize(&self) -> Result<(), SolverError> {
        for d in self.locked()? {
            d.stream.synchronize().map_err(derr("waiting for the GPU"))?;
        }
        Ok(())
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        apply_params(&mut self.dom, &self.params, &p)?;
        let rebuild = p.collide.kind != self.params.collide.kind || p.collide.has_force() != self.params.collide.has_force();
        self.params = p;
        if rebuild {
            let (dom, params) = (self.dom.clone(), self.params.clone());
            for d in self.devs()? {
                for (bn, k) in &mut d.kernels {
                    *k = load_box(&d.ctx, &box_config(&dom, &params, *bn), &d.info)?;
                }
            }
        }
        self.upload_params()
    }
    fn checkpoint(&self) -> Checkpoint {
        match self.dense_view() {
            Ok(v) => v.checkpoint(),
            Err(e) => {
                self.report(&e);
                let data = vec![f32::NAN; self.dom.fluid_cells() * self.q];
                Checkpoint {
                    lattice: self.dom.lattice,
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
        let zeros = vec![0.0f32; self.q * self.dom.cells()];
        let (dom, p) = (self.dom.clone(), self.params.clone());
        let (t, state) = match self.dom.lattice {
            Lattice::D3Q27 => {
                let mut v = CpuSolver::<D3Q27, f32>::with_state(dom, p, self.t, zeros, [[0.0; 3]; 16]);
                v.restore(c)?;
                (v.time_step(), v.into_parts().2)
            }
            _ => {
                let mut v = CpuSolver::<D3Q19, f32>::with_state(dom, p, self.t, zeros, [[0.0; 3]; 16]);
                v.restore(c)?;
                (v.time_step(), v.into_parts().2)
            }
        };
        self.t = t;
        self.last_forces = [[0.0; 3]; 16];
        self.load_dense(&state)?;
        self.set_params(c.params.clone())
    }
    /// The shells and records as they are stored, read from every GPU: a few per cent of the
    /// dense DDFs where the flow compresses well, and no dense copy on the host.
    fn snapshot(&self) -> Result<Snapshot, SolverError> {
        let mut devs = Vec::new();
        for mut d in self.locked()? {
            devs.push(d.snapshot()?);
        }
        let bytes = devs.iter().map(DevSnapshot::bytes).sum();
        let own = SubgridSnapshot {
            cells: cells_of(&self.dom, self.q),
            t: self.t,
            params: self.params.clone(),
            tau: self.tau,
            compress: self.compress,
            last_forces: self.last_forces,
            data: devs,
        };
        Ok(Snapshot::own(self.t, bytes, own))
    }
    fn roll_back(&mut self, s: &Snapshot) -> Result<(), SolverError> {
        // One share per GPU, in the solver's order.
        let Some(own) = s.own_ref::<SubgridSnapshot<Vec<DevSnapshot>>>() else { return crate::solver::restore_snapshot(self, s) };
        if own.cells != cells_of(&self.dom, self.q) || own.data.len() != self.parts.len() {
            return Err(SolverError::Checkpoint("the saved state was taken on other cells or GPUs".into()));
        }
        self.set_params(own.params.clone())?;
        let mut devs = self.parts.iter_mut().map(|m| m.get_mut().map_err(|_| Dev::lock_err())).collect::<Result<Vec<_>, _>>()?;
        Self::each(&mut devs, |d| d.roll_back(&own.data[d.index]))?;
        cuts::settle(&mut devs, self.comms.as_ref(), 2)?;
        Self::each(&mut devs, |d| d.stream.synchronize().map_err(derr("exchanging the cut planes")))?;
        (self.t, self.tau, self.compress, self.last_forces, self.budget_warned) = (own.t, own.tau, own.compress, own.last_forces, false);
        Ok(())
    }
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        let state = self.dense_state()?;
        let (dom, p, t) = (self.dom.clone(), self.params.clone(), self.t);
        let (report, dom, state) = match self.dom.lattice {
            Lattice::D3Q27 => {
                let mut v = CpuSolver::<D3Q27, f32>::with_state(dom, p, t, state, self.last_forces);
                let r = v.edit_cells(edit)?;
                (r, v.domain().clone(), v.into_parts().2)
            }
            _ => {
                let mut v = CpuSolver::<D3Q19, f32>::with_state(dom, p, t, state, self.last_forces);
                let r = v.edit_cells(edit)?;
                (r, v.domain().clone(), v.into_parts().2)
            }
        };
        if !report.changed.is_empty() {
            self.dom = dom;
            let dom = self.dom.clone();
            for d in self.devs()? {
                let flags = d.flag_slab(&dom);
                d.stream.memcpy_htod(&flags, &mut d.gflags).map_err(derr("uploading flags"))?;
                // The boxes' bricks follow the new flags.
                for s in &mut d.subs {
                    let (bricks, count) = box_bricks(&dom, s.origin, s.box_size());
                    s.bricks = d.stream.clone_htod(&bricks).map_err(derr("uploading bricks"))?;
                    s.n_bricks = count;
                }
            }
            self.load_dense(&state)?;
        }
        Ok(report)
    }
}

/// Build the GPU compressed-subgrid solver a scene with `[compression] enabled = true`
/// describes (subgrid size, tau, memory budget from the scene).
///
/// # Errors
/// As [`CudaSubgridSolver::new`]; voxelisation errors.
pub fn from_scene(ls: &crate::scene::LoadedScene) -> Result<CudaSubgridSolver, SolverError> {
    from_scene_on(ls, &[0])
}

/// As [`from_scene`], the subgrids shared out over `devices` (CUDA ordinals), the memory
/// budget each GPU's.
///
/// # Errors
/// As [`CudaSubgridSolver::new_on`]; voxelisation errors.
pub fn from_scene_on(ls: &crate::scene::LoadedScene, devices: &[usize]) -> Result<CudaSubgridSolver, SolverError> {
    let c = &ls.scene.compression;
    let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
    let params = crate::solver::Params::from_scene(ls, &dom);
    CudaSubgridSolver::new_on(dom, params, c.subgrid_size(), Some(c.tau), c.memory_budget.map(|b| b.0), devices, |p| {
        crate::domain::initial_state(ls, p)
    })
}

#[cfg(test)]
mod tests;

impl crate::solver::Compressed for CudaSubgridSolver {
    fn set_compression_tau(&mut self, tau: f32) -> Result<(), SolverError> {
        self.set_tau(tau)
    }
    fn compression(&self) -> CompressionInfo {
        let per_subgrid = self.subgrid_stats();
        let (lo, hi) = per_subgrid.iter().fold((f32::INFINITY, 0.0f32), |(lo, hi), s| (lo.min(s.tau), hi.max(s.tau)));
        CompressionInfo {
            ratio: self.ratio(),
            bytes: self.bytes(),
            dense_bytes: self.dense_bytes(),
            subgrids: per_subgrid.len(),
            tau: if self.compress { (lo, hi) } else { (0.0, 0.0) },
            budget: self.budget,
            per_subgrid,
        }
    }
    fn set_compression_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError> {
        self.set_budget(budget)
    }
}
