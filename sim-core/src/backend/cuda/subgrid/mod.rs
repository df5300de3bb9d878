//! Compressed subgrids on the GPU (Flint et al. 2024): grids larger than the GPU's memory.
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
//! the CPU subgrid solver does); statistics run on the device, subgrid by subgrid.

#![allow(clippy::redundant_closure, clippy::needless_range_loop, clippy::neg_cmp_op_on_partial_ord)]

mod ring;

use crate::backend::cpu::{apply_params, CpuSolver, Forces};
use crate::backend::cuda::codec::GpuCodec;
use crate::backend::cuda::{derr, device_info, gpu_inlets, gpu_outlets, probe, upload_pod, DeviceInfo};
use crate::backend::subgrid::{shell_cells, slabs, TAU_CAP, TAU_FLOOR};
use crate::checkpoint::Checkpoint;
use crate::compress::BlockShape;
use crate::domain::Domain;
use crate::edit::{CellEdit, EditReport};
use crate::lattice::{Lattice, D3Q19, D3Q27};
use crate::precision::Precision;
use crate::scene::human_bytes;
use crate::schemes::Scheme;
use crate::solver::{CompressionInfo, Fields, Params, Solver, SolverError, SolverInfo, Stats, SubgridStat};
use cudarc::driver::CudaContext;
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
    /// Wall-clock time of the steps (host).
    pub wall: f64,
}

/// The compressed-subgrid solver on one GPU.
pub struct CudaSubgridSolver {
    dom: Domain,
    params: Params,
    t: u64,
    q: usize,
    slabs: [Vec<(usize, usize)>; 3],
    /// Whether cores are compressed (else stored raw: the exact mode).
    compress: bool,
    tau: f32,
    budget: Option<u64>,
    budget_warned: bool,
    dev_info: DeviceInfo,
    d: std::sync::Mutex<Dev>,
    last_forces: Forces,
    /// Bytes of device memory besides the ring.
    fixed_bytes: u64,
    /// How a budget sizes the ring.
    sizing: RingSizing,
    timing: Option<PhaseTimes>,
}

/// The statistics of the whole grid, summed over the subgrids.
struct GridStats {
    mass: f64,
    max_u: f32,
    rho_range: [f64; 2],
    first_bad: Option<[usize; 3]>,
}

/// What sizes the ring of compressed cores from a memory budget.
#[derive(Clone, Copy, Debug)]
struct RingSizing {
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
    /// Build on a domain: subgrids of (at most) `g` cells a side, cores compressed with `tau`
    /// (or stored raw with `None`), at most `budget` bytes of device memory. The initial state
    /// is built subgrid by subgrid (never the whole grid at once).
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
        probe().map_err(SolverError::Backend)?;
        let ctx = CudaContext::new(0).map_err(derr("opening device 0"))?;
        let dev_info = device_info(&ctx).map_err(SolverError::Backend)?;
        let stream = ctx.default_stream();
        let q = dom.lattice.q();
        let sl = [0, 1, 2].map(|a| slabs(n[a], g[a].max(3)));
        let mut boxes = Vec::new();
        for &(z0, sz) in &sl[2] {
            for &(y0, sy) in &sl[1] {
                for &(x0, sx) in &sl[0] {
                    boxes.push(([x0, y0, z0], [sx, sy, sz]));
                }
            }
        }
        let shape = BlockShape::DEFAULT;
        let blocks_of = |s: [usize; 3]| crate::compress::field::block_counts(s.map(|x| x - 2), &shape).iter().product::<usize>();
        let max_nb = boxes.iter().map(|&(_, s)| vol(s.map(|x| x + 2))).max().unwrap_or(0);
        let max_core = boxes.iter().map(|&(_, s)| vol(s.map(|x| x - 2))).max().unwrap_or(0);
        let max_blocks = boxes.iter().map(|&(_, s)| blocks_of(s)).max().unwrap_or(0);
        let shell_floats: usize = boxes.iter().map(|&(_, s)| q * shell_cells(s)).sum();
        // Worst case of one record: every block dense, or the raw core.
        let scratch_words = (q * max_blocks * (1 + shape.samples())).max(q * max_core);
        // Grid flags; box flags, change marks, DDFs and field planes; shells; scratch; block
        // offsets; axis maps.
        let fixed = (dom.cells() + max_nb * (1 + 4 + 4 * q + 16) + 4 * shell_floats + 4 * scratch_words) as u64
            + 8 * (q * max_blocks * (boxes.len() + 1)) as u64
            + 4 * (n[0] + n[1] + n[2]) as u64;
        let raw_core_words: u64 = boxes.iter().map(|&(_, s)| (q * vol(s.map(|x| x - 2))) as u64).sum();
        let free = dev_info.mem.0 as u64;
        let sizing = RingSizing {
            fixed,
            least: fixed + raw_core_words / 25,
            max_words: raw_core_words + (q * max_blocks * boxes.len()) as u64,
            shell_bytes: 4 * shell_floats as u64,
        };
        let ring_words = sizing.words(budget, free)?;
        let need = fixed + 4 * ring_words;
        if need > free {
            return Err(SolverError::Backend(format!(
                "out of GPU memory: the compressed-subgrid state needs {} but {} has {} free; lower compression.memory_budget \
                 or use a smaller grid",
                human_bytes(need),
                dev_info.name,
                human_bytes(free)
            )));
        }
        let a = |e| derr("allocating the compressed-subgrid state")(e);
        let mut axis = Vec::with_capacity(n[0] + n[1] + n[2]);
        let mut lens = Vec::new();
        for s in &sl {
            for (k, &(_, len)) in s.iter().enumerate() {
                lens.push(len as u32);
                axis.extend((0..len).map(|u| ((k as u32) << 16) | u as u32));
            }
        }
        let mut offs = Vec::with_capacity(boxes.len());
        let mut acc = 0u64;
        for &(_, s) in &boxes {
            offs.push(acc);
            acc += (q * shell_cells(s)) as u64;
        }
        let codec = GpuCodec::new(Arc::clone(&stream))?;
        let mut kernels: Vec<([usize; 3], BoxKernels)> = Vec::new();
        let mut subs = Vec::with_capacity(boxes.len());
        for &(origin, size) in &boxes {
            let bn = size.map(|s| s + 2);
            let k = match kernels.iter().position(|(s, _)| *s == bn) {
                Some(k) => k,
                None => {
                    kernels.push((bn, load_box(&ctx, &box_config(&dom, &params, bn), &dev_info)?));
                    kernels.len() - 1
                }
            };
            let (bricks, n_bricks) = box_bricks(&dom, origin, bn);
            let mut inlets = stream.alloc_zeros::<u8>(16 * 64).map_err(a)?;
            upload_pod(&stream, &gpu_inlets(&dom, origin.map(|o| 1 - o as i32)), &mut inlets)?;
            subs.push(GSub {
                origin,
                size,
                tau: tau.unwrap_or(0.0),
                record: Record::None,
                raw: true,
                offsets: stream.alloc_zeros::<u64>((q * blocks_of(size)).max(1)).map_err(a)?,
                bricks: stream.clone_htod(&bricks).map_err(a)?,
                n_bricks,
                inlets,
                kernels: k,
            });
        }
        let mut walls = vec![0.0f32; 48];
        for (i, w) in params.walls.iter().enumerate().take(16) {
            walls[3 * i..3 * i + 3].copy_from_slice(w);
        }
        let mut outlets = stream.alloc_zeros::<u8>(16 * 64).map_err(a)?;
        upload_pod(&stream, &gpu_outlets(&dom, [0; 3]), &mut outlets)?;
        let d = Dev {
            q,
            n: n.map(|x| x as u32),
            counts: [sl[0].len() as u32, sl[1].len() as u32],
            subs,
            kernels,
            codec,
            gflags: stream.clone_htod(&dom.flags).map_err(a)?,
            bflags: stream.alloc_zeros::<u8>(max_nb).map_err(a)?,
            boxbuf: stream.alloc_zeros::<f32>(q * max_nb).map_err(a)?,
            changed: stream.alloc_zeros::<u32>(max_nb).map_err(a)?,
            shells: stream.alloc_zeros::<f32>(shell_floats.max(1)).map_err(a)?,
            shell_off: stream.clone_htod(&offs).map_err(a)?,
            axis_map: stream.clone_htod(&axis).map_err(a)?,
            slab_len: stream.clone_htod(&lens).map_err(a)?,
            scratch: stream.alloc_zeros::<u32>(scratch_words.max(1)).map_err(a)?,
            offs_scratch: stream.alloc_zeros::<u64>((q * max_blocks).max(1)).map_err(a)?,
            ring: stream.alloc_zeros::<u32>(ring_words as usize).map_err(a)?,
            ring_tail: 0,
            ring_used: 0,
            walls: stream.clone_htod(&walls).map_err(a)?,
            outlets,
            forces: stream.alloc_zeros::<f64>(48).map_err(a)?,
            no_links: stream.clone_htod(&crate::walls::Links::default().packed()).map_err(a)?,
            no_links_save: stream.alloc_zeros::<f32>(1).map_err(a)?,
            planes: None,
            spilled_warned: false,
            events: Vec::new(),
            ctx,
            stream,
        };
        let mut s = CudaSubgridSolver {
            dom,
            params,
            t: 0,
            q,
            slabs: sl,
            compress: tau.is_some(),
            tau: tau.unwrap_or(0.0),
            budget,
            budget_warned: false,
            dev_info,
            d: std::sync::Mutex::new(d),
            last_forces: [[0.0; 3]; 16],
            fixed_bytes: fixed,
            sizing,
            timing: None,
        };
        let taus = s.taus();
        let dom = s.dom.clone();
        s.dev()?.build(&dom, &taus, &|sub: &GSub, bn: [usize; 3], dom: &Domain, out: &mut [f32]| {
            initial_box(dom, sub.origin, bn, &init, out)
        })?;
        Ok(s)
    }

    fn dev(&mut self) -> Result<&mut Dev, SolverError> {
        self.d.get_mut().map_err(|_| Dev::lock_err())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Dev>, SolverError> {
        self.d.lock().map_err(|_| Dev::lock_err())
    }

    /// Each subgrid's threshold, `None` where cores are stored raw.
    fn taus(&self) -> Vec<Option<f32>> {
        let compress = self.compress;
        match self.d.lock() {
            Ok(d) => d.subs.iter().map(|s| compress.then_some(s.tau)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Time the parts of every following step (CUDA events; costs a little).
    pub fn enable_timing(&mut self) {
        self.timing = Some(PhaseTimes::default());
    }

    /// The summed phase times since [`Self::enable_timing`].
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
        for s in &mut self.dev()?.subs {
            s.tau = tau;
        }
        Ok(())
    }

    /// Bytes of device memory the state takes (shells, box, scratch, flags and the records in
    /// the ring) plus records spilled to the host.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.lock().map_or(0, |d| self.fixed_bytes + 4 * d.ring_used + 4 * d.host_words())
    }

    /// Bytes of the whole state uncompressed (FP32 DDFs).
    #[must_use]
    pub fn dense_bytes(&self) -> u64 {
        (4 * self.q * self.dom.cells()) as u64
    }

    /// Bytes of records spilled to host memory.
    #[must_use]
    pub fn host_bytes(&self) -> u64 {
        self.lock().map_or(0, |d| 4 * d.host_words())
    }

    /// Capacity of the ring (bytes).
    #[must_use]
    pub fn ring_bytes(&self) -> u64 {
        self.lock().map_or(0, |d| 4 * d.ring.len() as u64)
    }

    /// The uncompressed DDFs over the shells and records (what compression saves; the working
    /// box and scratch are left out, they do not grow with the grid).
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.lock().map_or(f64::NAN, |d| self.dense_bytes() as f64 / (4 * (d.shells.len() as u64 + d.ring_used + d.host_words())) as f64)
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
        self.lock().map_or(Vec::new(), |d| {
            d.subs
                .iter()
                .map(|s| {
                    let bytes = 4 * (q * shell_cells(s.size)) as u64 + 4 * s.record.words();
                    let dense = 4 * (q * vol(s.size)) as u64;
                    SubgridStat {
                        origin: s.origin,
                        size: s.size,
                        ratio: dense as f64 / bytes as f64,
                        tau: s.tau,
                        bytes,
                        dense_bytes: dense,
                    }
                })
                .collect()
        })
    }

    /// Limit the device memory to `budget` bytes (`None`: 90 % of what is free): the ring of
    /// compressed cores is made again at the size that leaves, its records moved through host
    /// memory. A smaller ring that the records outgrow spills and raises tau at the next step,
    /// as at the start.
    ///
    /// # Errors
    /// A budget below what the shells and the working box need (the message says how much), a
    /// ring that could not be allocated (the old one is kept).
    pub fn set_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError> {
        let free = match budget {
            Some(_) => 0,
            None => {
                // The caller's thread may not have the context current (the viewer's worker).
                let d = self.lock()?;
                d.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
                let free = cudarc::driver::result::mem_get_info().map_err(derr("reading free device memory"))?.0 as u64;
                free + 4 * d.ring.len() as u64
            }
        };
        let words = self.sizing.words(budget, free)?;
        self.dev()?.resize_ring(words)?;
        self.budget = budget;
        self.budget_warned = false;
        Ok(())
    }

    /// Run `steps` steps.
    ///
    /// # Errors
    /// CUDA errors, a damaged record.
    pub fn run(&mut self, steps: u64) -> Result<(), SolverError> {
        for _ in 0..steps {
            let wall = Instant::now();
            let (t, p, timing) = (self.t, self.params.clone(), self.timing.is_some());
            let taus = self.taus();
            let d = self.dev()?;
            d.stream.memset_zeros(&mut d.forces).map_err(derr("clearing forces"))?;
            // Seven events per subgrid, made once and read after the step, so that timing adds
            // no host wait between subgrids.
            let n = d.subs.len();
            let mut ev = std::mem::take(&mut d.events);
            if timing && ev.len() != 7 * n {
                let f = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
                ev = (0..7 * n).map(|_| d.ctx.new_event(f)).collect::<Result<Vec<_>, _>>().map_err(derr("creating events"))?;
            }
            let mut parts = [0.0f64; 6];
            let stepped = (0..n).try_for_each(|id| d.step_subgrid(id, t, &p, taus[id], timing.then(|| &ev[7 * id..7 * id + 7])));
            if stepped.is_ok() && timing {
                for e in ev.chunks(7) {
                    for k in 0..6 {
                        parts[k] += f64::from(e[k].elapsed_ms(&e[k + 1]).map_err(derr("reading an event"))?);
                    }
                }
            }
            d.events = ev;
            stepped?;
            d.check_damage()?;
            let fr = d.stream.clone_dtoh(&d.forces).map_err(derr("reading forces"))?;
            for (k, f) in self.last_forces.iter_mut().enumerate() {
                *f = [fr[3 * k], fr[3 * k + 1], fr[3 * k + 2]];
            }
            self.t += 1;
            if let Some(tm) = &mut self.timing {
                tm.steps += 1;
                tm.decompress += parts[0];
                tm.interfaces += parts[1] + parts[3];
                tm.lbm += parts[2];
                tm.compress += parts[4];
                tm.store += parts[5];
                tm.wall += wall.elapsed().as_secs_f64() * 1e3;
            }
            self.enforce_budget()?;
        }
        Ok(())
    }

    /// After a step with records in host memory: double tau for the largest subgrids, enough of
    /// them that halving their records would bring the spill back into the ring.
    fn enforce_budget(&mut self) -> Result<(), SolverError> {
        let (t, compress) = (self.t, self.compress);
        let d = self.d.get_mut().map_err(|_| Dev::lock_err())?;
        let spilled = d.host_words();
        if spilled == 0 || !compress {
            return Ok(());
        }
        let ring = 4 * d.ring.len() as u64;
        let mut order: Vec<usize> = (0..d.subs.len()).filter(|&k| d.subs[k].tau < TAU_CAP).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(d.subs[k].record.words()));
        if order.is_empty() {
            if !self.budget_warned {
                tracing::warn!(
                    "step {t}: {} of records are in host memory and every subgrid is at the largest tau ({TAU_CAP}); running on \
                     (raise compression.memory_budget or use a smaller grid)",
                    human_bytes(4 * spilled)
                );
                self.budget_warned = true;
            }
            return Ok(());
        }
        let mut covered = 0u64;
        let mut raised = Vec::new();
        for k in order {
            if covered >= spilled {
                break;
            }
            let s = &mut d.subs[k];
            let old = s.tau;
            s.tau = if old > 0.0 { (2.0 * old).min(TAU_CAP) } else { TAU_FLOOR };
            covered += s.record.words() / 2;
            raised.push((s.origin, old, s.tau));
        }
        let (origin, old, new) = raised[0];
        tracing::warn!(
            "step {t}: {} of records did not fit in the ring of {}: raising tau for {} subgrid(s), the largest at {origin:?} \
             from {old:e} to {new:e}; they compress harder from the next step",
            human_bytes(4 * spilled),
            human_bytes(ring),
            raised.len(),
        );
        Ok(())
    }

    /// The state as the dense solver lays it out (`F[i * cells + n]`), reassembled on the host
    /// subgrid by subgrid.
    ///
    /// # Errors
    /// CUDA errors, a damaged record.
    pub fn dense_state(&self) -> Result<Vec<f32>, SolverError> {
        self.lock()?.dense_state(&self.dom)
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
        let taus = self.taus();
        let dom = self.dom.clone();
        self.dev()?.build(&dom, &taus, &|sub: &GSub, bn: [usize; 3], dom: &Domain, out: &mut [f32]| {
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
        let d = self.dev()?;
        d.stream.memcpy_htod(&walls, &mut d.walls).map_err(derr("uploading walls"))?;
        for s in &mut d.subs {
            upload_pod(&d.stream, &gpu_inlets(&dom, s.origin.map(|o| 1 - o as i32)), &mut s.inlets)?;
        }
        upload_pod(&d.stream, &gpu_outlets(&dom, [0; 3]), &mut d.outlets)
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
        SolverInfo {
            backend: "cuda-subgrid",
            device: self.dev_info.name.clone(),
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
    fn stats(&self) -> Stats {
        let r = self.lock().and_then(|mut d| d.stats(self.t, &self.params));
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
        self.lock()?.stream.synchronize().map_err(derr("waiting for the GPU"))
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        apply_params(&mut self.dom, &self.params, &p)?;
        let rebuild = p.collide.kind != self.params.collide.kind || p.collide.has_force() != self.params.collide.has_force();
        self.params = p;
        if rebuild {
            let (dom, params, info) = (self.dom.clone(), self.params.clone(), self.dev_info.clone());
            let d = self.dev()?;
            for (bn, k) in &mut d.kernels {
                *k = load_box(&d.ctx, &box_config(&dom, &params, *bn), &info)?;
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
            let d = self.dev()?;
            d.stream.memcpy_htod(&dom.flags, &mut d.gflags).map_err(derr("uploading flags"))?;
            // The boxes' bricks follow the new flags.
            for s in &mut d.subs {
                let (bricks, count) = box_bricks(&dom, s.origin, s.box_size());
                s.bricks = d.stream.clone_htod(&bricks).map_err(derr("uploading bricks"))?;
                s.n_bricks = count;
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
    let c = &ls.scene.compression;
    let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
    let params = crate::solver::Params::from_scene(ls, &dom);
    CudaSubgridSolver::new(dom, params, c.subgrid_size(), Some(c.tau), c.memory_budget.map(|b| b.0), |p| {
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
