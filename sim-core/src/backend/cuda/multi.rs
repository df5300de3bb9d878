//! One grid over several GPUs (the multi-GPU design of Meneghin & Mahmoud 2025): slabs along the slowest axis of
//! the grid (z in 3D, y in 2D), halo layers exchanged through NCCL after every step.
//!
//! **Slabs.** GPU `k` holds the layers `lo..lo + len` of the cut axis plus one halo layer on
//! each side, copies of its neighbours' outer layers (the slabs form a ring, as the single grid
//! wraps periodically). Each GPU runs the ordinary dense kernels ([`CudaSolver`], compiled with
//! `DEF_HALO`), which update every cell but the halo layers.
//!
//! **What crosses, with Esoteric Pull.** In one step every DDF slot is read and written by
//! exactly one cell; a cell touches its own slots and, for each odd direction `i`, the slot
//! `i + 1` (odd steps) or `i` (even steps) of its neighbour along `c_i`. So after step `t` of
//! parity `p`, for the cut between GPU `k` and `k + 1`:
//! - the last own layer of `k` wrote, in `k`'s upper halo, the slots `p ? i + 1 : i` of the
//!   odd directions pointing up: they belong to the first own layer of `k + 1`;
//! - the first own layer of `k + 1` will read at step `t + 1` the slots `!p ? i + 1 : i` of the
//!   odd directions pointing down in its lower halo: the last own layer of `k` wrote them this
//!   step (they are its own slots at parity `p`);
//!
//! and the mirror image for the other direction. Nothing else of the halos is ever read. So
//! each GPU sends each neighbour one group of planes (D3Q19: 5 of the 19 DDF planes of one
//! layer) and receives one. With the SoA layout (`i * cells + x + nx (y + ny z)`) and the cut
//! on the slowest axis, each plane is one contiguous range: NCCL sends straight from the state
//! buffer, with no packing kernel.
//!
//! **Overlap (the disaggregation of Meneghin & Mahmoud 2025).** Each step first runs the rows and bricks that
//! touch the first or last own layer, then starts the exchange on a communication stream while
//! the interior runs. The interior touches none of the exchanged slots (they are the halo's and
//! the outer layers' slots of the other direction family), so the two run concurrently; the
//! next step waits for both.
//!
//! **One domain outside.** Fields, statistics and checkpoints are the whole grid's: fields are
//! gathered from the slabs' own layers, checkpoints are the dense format (a single-GPU or CPU
//! run resumes them and the other way round), edits are planned on the whole domain and read
//! and write the slots where they live (an owner and its halo copies).
//!
//! **Transport.** NCCL (`ncclSend`/`ncclRecv` in one group per step) where each slab has its own
//! GPU and `libnccl` loads; otherwise device-to-device copies (`cuMemcpyPeerAsync`), which
//! also lets several slabs share one GPU (`ESOFLOW_GPUS=0,0`, for tests).
//!
//! **One process per GPU.** Under a launcher (`mpirun`, `srun`, `torchrun`) each process holds
//! one slab ([`remote`]): rank 0 builds the solver the rest of the program sees, the others
//! serve its commands; the halos go through one NCCL communicator over all the processes.

use crate::backend::cpu::{build_mirror, Mirror, SlotIo};
use crate::backend::cuda::{derr, probe, CudaSolver, Placement};
use crate::checkpoint::Checkpoint;
use crate::domain::{is_solid, Domain};
use crate::edit::{CellEdit, EditReport};
use crate::precision::Precision;
use crate::scene::LoadedScene;
use crate::schemes::Scheme;
use crate::solver::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use cudarc::driver::{sys, CudaEvent, CudaStream};
use cudarc::nccl::sys as nccl;
use std::sync::Arc;

pub mod remote;

/// Fewest own layers per GPU.
pub const MIN_LAYERS: usize = 4;

/// One GPU's slab.
struct Part {
    s: CudaSolver,
    /// Which slab of the grid (0 at the lowest layers): its rank in the NCCL communicator.
    slab: usize,
    /// First own layer (scene coordinates) and how many.
    lo: usize,
    len: usize,
    /// Stream the exchange runs on.
    comm: Arc<CudaStream>,
    /// Recorded after the rows and bricks next to the cut, and after the exchange.
    edge_done: CudaEvent,
    comm_done: CudaEvent,
    /// Device address of the state buffer.
    ptr: u64,
}

/// NCCL communicators, one per GPU of this process (destroyed on drop).
struct Nccl(Vec<nccl::ncclComm_t>);

// SAFETY: NCCL communicators may be used from any thread, one call at a time (the solver is
// used by one thread at a time: `Send`, not `Sync`).
unsafe impl Send for Nccl {}

impl Drop for Nccl {
    fn drop(&mut self) {
        for &c in &self.0 {
            // SAFETY: each communicator was created by NCCL's init and is destroyed once.
            let _ = unsafe { cudarc::nccl::result::comm_destroy(c) };
        }
    }
}

impl Drop for MultiCudaSolver {
    fn drop(&mut self) {
        // A rank gone mid-run may leave exchanges that never complete: abort the communicator
        // (destroying it would wait for them).
        if self.remote.as_ref().is_some_and(remote::Followers::broken) {
            if let Some(n) = &mut self.nccl {
                for c in n.0.drain(..) {
                    // SAFETY: each communicator is aborted once and then forgotten.
                    let _ = unsafe { cudarc::nccl::result::comm_abort(c) };
                }
            }
        }
    }
}

/// One plane of an exchange: DDF slot index `d` of a layer, from one slab to the next.
#[derive(Clone, Copy, Debug)]
struct Plane {
    d: usize,
    /// Local layer in the sender and in the receiver.
    from: usize,
    to: usize,
}

/// The grid over several GPUs.
pub struct MultiCudaSolver {
    /// The whole domain (no DDFs on the host): plans edits, answers `domain()`.
    mirror: Box<dyn Mirror>,
    /// First: the other processes are told to stop before this one's communicator goes.
    remote: Option<remote::Followers>,
    /// Before `parts`: the communicators go before their devices' contexts.
    nccl: Option<Nccl>,
    /// This process's slabs.
    parts: Vec<Part>,
    /// Every slab of the grid (first own layer, own layers), in order along the cut axis.
    slabs: Vec<(usize, usize)>,
    axis: usize,
    t: u64,
    fuse_fields: bool,
    /// Odd directions pointing up and down the cut axis.
    up: Vec<usize>,
    down: Vec<usize>,
    /// How the exchange travels (for `info`).
    transport: &'static str,
    /// Whether the interior runs during the exchange (`ESOFLOW_MULTI_OVERLAP=0` runs it after,
    /// to measure what the overlap gains).
    overlap: bool,
}

/// The cut axis of a lattice: the slowest axis of the grid.
fn cut_axis(dom: &Domain) -> usize {
    dom.lattice.dims() - 1
}

/// Cells of one layer across the cut axis.
fn layer_cells(n: [usize; 3], axis: usize) -> usize {
    if axis == 2 {
        n[0] * n[1]
    } else {
        n[0]
    }
}

/// Size of a slab's grid with its two halo layers.
fn local_size(n: [usize; 3], axis: usize, len: usize) -> [usize; 3] {
    let mut m = n;
    m[axis] = len + 2;
    m
}

/// The slab of `dom` with own layers `lo..lo + len` and a halo layer on each side (wrapping).
/// Inlets and outlets keep the scene's coordinates (the GPU tables are shifted, see
/// [`Placement::shift`]).
fn slab_domain(dom: &Domain, axis: usize, lo: usize, len: usize) -> Domain {
    let n = dom.n;
    let m = local_size(n, axis, len);
    let lc = layer_cells(n, axis);
    let mut flags = Vec::with_capacity(lc * m[axis]);
    for l in 0..len + 2 {
        let g = (lo + n[axis] + l - 1) % n[axis];
        flags.extend_from_slice(&dom.flags[g * lc..(g + 1) * lc]);
    }
    Domain {
        lattice: dom.lattice,
        n: m,
        flags,
        walls: dom.walls.clone(),
        inlets: dom.inlets.clone(),
        outlets: dom.outlets.clone(),
        obstacles: dom.obstacles.clone(),
        surfaces: dom.surfaces.clone(),
        surfaces_at: std::array::from_fn(|a| if a == axis { lo as f64 - 1.0 } else { 0.0 }),
        rho0: dom.rho0,
    }
}

/// The planes a slab sends to the next slab (up) and to the previous one (down) after a step of
/// parity `odd`, in local layers (`len`: the sender's own layers, `len_to_down`: the previous
/// slab's); `up`/`down`: the odd directions pointing up and down the cut axis.
fn exchange_planes(up: &[usize], down: &[usize], odd: bool, len: usize, len_to_down: usize) -> (Vec<Plane>, Vec<Plane>) {
    let at = |i: usize, p: bool| if p { i + 1 } else { i };
    let mut to_up = Vec::new();
    // Written into the upper halo this step: the next slab's first own layer.
    to_up.extend(up.iter().map(|&i| Plane { d: at(i, odd), from: len + 1, to: 1 }));
    // Read from the next slab's lower halo next step: this slab's last own layer.
    to_up.extend(down.iter().map(|&i| Plane { d: at(i, !odd), from: len, to: 0 }));
    let mut to_down = Vec::new();
    to_down.extend(down.iter().map(|&i| Plane { d: at(i, odd), from: 0, to: len_to_down }));
    to_down.extend(up.iter().map(|&i| Plane { d: at(i, !odd), from: 1, to: len_to_down + 1 }));
    (to_up, to_down)
}

/// The odd directions pointing up and down the cut axis.
fn crossing(dom: &Domain, axis: usize) -> (Vec<usize>, Vec<usize>) {
    let c = dom.lattice.velocities();
    let q = dom.lattice.q();
    ((1..q).step_by(2).filter(|&i| c[i][axis] > 0).collect(), (1..q).step_by(2).filter(|&i| c[i][axis] < 0).collect())
}

/// The bytes of a slab checkpoint that belong to its own layers (checkpoints hold `q` values
/// per fluid cell in cell order, and the cut axis is the slowest).
fn own_data<'a>(c: &'a Checkpoint, local: &Domain, axis: usize, len: usize) -> &'a [u8] {
    let lc = layer_cells(local.n, axis);
    let per = c.data.len() / local.fluid_cells().max(1);
    let fluid = |r: std::ops::Range<usize>| local.flags[r].iter().filter(|&&f| !is_solid(f)).count();
    let start = fluid(0..lc) * per;
    &c.data[start..start + fluid(lc..lc * (len + 1)) * per]
}

/// Split `n` layers into `k` slabs as evenly as possible: (first layer, layers) each.
fn split(n: usize, k: usize) -> Vec<(usize, usize)> {
    let (base, extra) = (n / k, n % k);
    let mut lo = 0;
    (0..k)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = (lo, len);
            lo += len;
            r
        })
        .collect()
}

/// The devices `--gpus N` runs on: `ESOFLOW_GPUS=0,1,...` (developer knob; a device may repeat,
/// several slabs then share it) or `0..N`.
///
/// # Errors
/// Fewer CUDA devices than asked for, or a bad `ESOFLOW_GPUS`.
pub fn devices_for(gpus: usize) -> Result<Vec<usize>, SolverError> {
    if let Ok(v) = std::env::var("ESOFLOW_GPUS") {
        let list: Result<Vec<usize>, _> = v.split(',').map(|s| s.trim().parse::<usize>()).collect();
        return match list {
            Ok(l) if l.len() == gpus => Ok(l),
            _ => Err(SolverError::Backend(format!("ESOFLOW_GPUS={v}: expected {gpus} device ordinals, e.g. 0,1"))),
        };
    }
    probe().map_err(SolverError::Backend)?;
    let count = cudarc::driver::CudaContext::device_count().map_err(derr("counting devices"))? as usize;
    if gpus > count {
        return Err(SolverError::Backend(format!(
            "{gpus} GPUs asked for, but this machine has {count} CUDA device{}",
            if count == 1 { "" } else { "s" }
        )));
    }
    Ok((0..gpus).collect())
}

/// Whether `libnccl` can be loaded.
fn nccl_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { nccl::is_culib_present() }
}

impl MultiCudaSolver {
    /// Build the multi-GPU solver of a scene on `gpus` GPUs (see [`devices_for`]).
    ///
    /// # Errors
    /// As [`MultiCudaSolver::new`]; voxelisation errors.
    pub fn from_scene(ls: &LoadedScene, gpus: usize) -> Result<MultiCudaSolver, SolverError> {
        MultiCudaSolver::from_scene_on(ls, &devices_for(gpus)?)
    }

    /// Build the multi-GPU solver of a scene with one slab on each of `devices` (a device may
    /// repeat: its slabs then exchange through copies).
    ///
    /// # Errors
    /// As [`MultiCudaSolver::new`]; voxelisation errors.
    pub fn from_scene_on(ls: &LoadedScene, devices: &[usize]) -> Result<MultiCudaSolver, SolverError> {
        let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
        let params = Params::from_scene(ls, &dom);
        let s = &ls.scene.solver;
        MultiCudaSolver::new(dom, s.scheme, s.precision, params, devices, |p| crate::domain::initial_state(ls, p))
    }

    /// Build on a domain with an initial state, one slab per entry of `devices`.
    ///
    /// # Errors
    /// Fewer than two devices, a scheme other than Esoteric Pull, compressed subgrids, slabs of
    /// fewer than [`MIN_LAYERS`] layers, and every error of [`CudaSolver::new`] per GPU.
    pub fn new(
        dom: Domain,
        scheme: Scheme,
        precision: Precision,
        params: Params,
        devices: &[usize],
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<MultiCudaSolver, SolverError> {
        let k = devices.len();
        if k < 2 {
            return Err(SolverError::Backend("a multi-GPU run needs at least 2 GPUs".into()));
        }
        let local: Vec<(usize, usize)> = devices.iter().copied().enumerate().collect();
        let mut m = MultiCudaSolver::assemble(dom, scheme, precision, params, k, &local, init)?;
        let distinct = {
            let mut d = devices.to_vec();
            d.sort_unstable();
            d.dedup();
            d.len() == k
        };
        if distinct && nccl_present() && std::env::var("ESOFLOW_NCCL").as_deref() != Ok("0") {
            let mut comms = vec![std::ptr::null_mut(); k];
            let ords: Vec<i32> = devices.iter().map(|&d| d as i32).collect();
            // SAFETY: `comms` has room for k communicators and `ords` lists k devices.
            unsafe { cudarc::nccl::result::comm_init_all(comms.as_mut_ptr(), k as i32, ords.as_ptr()) }
                .map_err(|e| SolverError::Backend(format!("NCCL could not set up {k} GPUs (ncclCommInitAll): {e:?}")))?;
            m.nccl = Some(Nccl(comms));
            m.transport = "NCCL";
        } else if distinct {
            tracing::warn!("libnccl not found: the halo exchange goes through device-to-device copies");
            eprintln!("note: libnccl not found (or ESOFLOW_NCCL=0); the halo exchange goes through device-to-device copies");
        }
        Ok(m)
    }

    /// The slabs `local` (slab index, device) of a grid cut into `k` slabs, without a
    /// communicator (device copies between them until one is set).
    ///
    /// # Errors
    /// As [`MultiCudaSolver::new`].
    fn assemble(
        dom: Domain,
        scheme: Scheme,
        precision: Precision,
        params: Params,
        k: usize,
        local: &[(usize, usize)],
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<MultiCudaSolver, SolverError> {
        if scheme != Scheme::EsotericPull {
            return Err(SolverError::Backend(format!(
                "several GPUs run solver.scheme = \"esoteric_pull\" (the default); this scene sets \"{}\"",
                scheme.name()
            )));
        }
        let axis = cut_axis(&dom);
        let n = dom.n;
        if n[axis] < k * MIN_LAYERS {
            return Err(SolverError::Backend(format!(
                "the grid has {} cells along {} and each of {k} GPUs needs at least {MIN_LAYERS}: at most {} GPUs, or a larger domain.size",
                n[axis],
                ["x", "y", "z"][axis],
                (n[axis] / MIN_LAYERS).max(1)
            )));
        }
        let (up, down) = crossing(&dom, axis);
        let comm_priority = std::env::var("ESOFLOW_COMM_PRIORITY").as_deref() != Ok("0");
        let slabs = split(n[axis], k);
        let mut parts = Vec::with_capacity(local.len());
        for &(slab, ordinal) in local {
            let (lo, len) = slabs[slab];
            let local = slab_domain(&dom, axis, lo, len);
            let mut shift = [0i32; 3];
            shift[axis] = 1 - lo as i32;
            let place = Placement { ordinal, halo: axis + 1, shift };
            let map = |p: [usize; 3]| {
                let mut g = p;
                g[axis] = (lo + n[axis] + p[axis] - 1) % n[axis];
                g
            };
            let s = CudaSolver::on_device(local, scheme, precision, params.clone(), 16, place, |p| init(map(p)))
                .map_err(|e| SolverError::Backend(format!("GPU {ordinal} (layers {lo}..{}): {e}", lo + len)))?;
            let ctx = s.context().clone();
            // The exchange runs beside the interior: at the highest priority its blocks are
            // scheduled as soon as the edge is done, not after the interior's blocks drain.
            let comm = if comm_priority {
                ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
                let (_, highest) = cudarc::driver::result::stream::get_priority_range().map_err(derr("reading stream priorities"))?;
                ctx.new_stream_with_priority(highest)
            } else {
                ctx.new_stream()
            }
            .map_err(derr("creating the exchange stream"))?;
            let edge_done = ctx.new_event(None).map_err(derr("creating events"))?;
            let comm_done = ctx.new_event(None).map_err(derr("creating events"))?;
            let ptr = s.state_ptr();
            parts.push(Part { s, slab, lo, len, comm, edge_done, comm_done, ptr });
        }
        let mirror = build_mirror(dom, scheme, precision, params, 16, |_| (1.0, [0.0; 3]));
        let overlap = std::env::var("ESOFLOW_MULTI_OVERLAP").as_deref() != Ok("0");
        let mut m = MultiCudaSolver {
            remote: None,
            mirror,
            parts,
            slabs,
            axis,
            nccl: None,
            t: 0,
            fuse_fields: false,
            up,
            down,
            transport: "device copies",
            overlap,
        };
        m.mirror.release();
        Ok(m)
    }

    /// GPUs in use (over all the processes of a launch).
    #[must_use]
    pub fn gpus(&self) -> usize {
        self.slabs.len()
    }

    /// How the halos travel: "NCCL" or "device copies".
    #[must_use]
    pub fn transport(&self) -> &'static str {
        self.transport
    }

    /// Own layers (first, count) and device of every slab of this process.
    #[must_use]
    pub fn slabs(&self) -> Vec<(usize, usize, usize)> {
        self.parts.iter().map(|p| (p.lo, p.len, p.s.ordinal())).collect()
    }

    /// Byte offset of a plane in slab `k`'s state buffer (`k`: this process's slabs).
    fn offset(&self, k: usize, d: usize, layer: usize) -> u64 {
        let p = &self.parts[k];
        let n = p.s.domain().n;
        let cells = n[0] * n[1] * n[2];
        ((d * cells + layer * layer_cells(n, self.axis)) * p.s.element_bytes()) as u64
    }

    /// Queue the halo exchange after a step of parity `odd` (every slab's edge group done).
    fn exchange(&self, odd: bool) -> Result<(), SolverError> {
        let k = self.parts.len();
        let bytes = layer_cells(self.mirror.domain().n, self.axis) * self.parts[0].s.element_bytes();
        // Each exchange stream waits for its own slab's edge group, and with copies (which write
        // into the neighbours' memory) for the neighbours' too.
        for (i, p) in self.parts.iter().enumerate() {
            p.comm.wait(&p.edge_done).map_err(derr("ordering the exchange"))?;
            if self.nccl.is_none() {
                for j in [(i + 1) % k, (i + k - 1) % k] {
                    p.comm.wait(&self.parts[j].edge_done).map_err(derr("ordering the exchange"))?;
                }
            }
        }
        // The planes slab `s` of the grid sends up and down.
        let n_slabs = self.slabs.len();
        let planes = |s: usize| {
            let pv = (s + n_slabs - 1) % n_slabs;
            exchange_planes(&self.up, &self.down, odd, self.slabs[s].1, self.slabs[pv].1)
        };
        match &self.nccl {
            Some(comms) => {
                let ty = nccl::ncclDataType_t::ncclUint8;
                let err = |e: cudarc::nccl::result::NcclError| SolverError::Backend(format!("NCCL error in the halo exchange: {e:?}"));
                cudarc::nccl::result::group_start().map_err(err)?;
                for (i, p) in self.parts.iter().enumerate() {
                    // Peers are slabs: a slab's rank in the communicator is its index.
                    let (nx, pv) = ((p.slab + 1) % n_slabs, (p.slab + n_slabs - 1) % n_slabs);
                    let st = p.comm.cu_stream() as nccl::cudaStream_t;
                    let (up, down) = planes(p.slab);
                    // Sends: up then down; receives: from below (its up) then from above (its down).
                    for pl in &up {
                        let src = p.ptr + self.offset(i, pl.d, pl.from);
                        // SAFETY: the range lies inside slab i's state buffer, alive while queued.
                        unsafe { cudarc::nccl::result::send(src as *const _, bytes, ty, nx as i32, comms.0[i], st) }.map_err(err)?;
                    }
                    for pl in &down {
                        let src = p.ptr + self.offset(i, pl.d, pl.from);
                        // SAFETY: as above.
                        unsafe { cudarc::nccl::result::send(src as *const _, bytes, ty, pv as i32, comms.0[i], st) }.map_err(err)?;
                    }
                    for pl in &planes(pv).0 {
                        let dst = p.ptr + self.offset(i, pl.d, pl.to);
                        // SAFETY: the range lies inside slab i's state buffer.
                        unsafe { cudarc::nccl::result::recv(dst as *mut _, bytes, ty, pv as i32, comms.0[i], st) }.map_err(err)?;
                    }
                    for pl in &planes(nx).1 {
                        let dst = p.ptr + self.offset(i, pl.d, pl.to);
                        // SAFETY: as above.
                        unsafe { cudarc::nccl::result::recv(dst as *mut _, bytes, ty, nx as i32, comms.0[i], st) }.map_err(err)?;
                    }
                }
                cudarc::nccl::result::group_end().map_err(err)?;
            }
            None => {
                // Every slab is in this process (the copies need both ends' memory).
                let msgs: Vec<(Vec<Plane>, Vec<Plane>)> = (0..k).map(planes).collect();
                for i in 0..k {
                    let (nx, pv) = ((i + 1) % k, (i + k - 1) % k);
                    let p = &self.parts[i];
                    p.s.context().bind_to_thread().map_err(derr("binding the CUDA context"))?;
                    let (up, down) = &msgs[i];
                    for (list, to) in [(up, nx), (down, pv)] {
                        let q = &self.parts[to];
                        for pl in list {
                            let src = p.ptr + self.offset(i, pl.d, pl.from);
                            let dst = q.ptr + self.offset(to, pl.d, pl.to);
                            // SAFETY: both ranges lie inside live state buffers; the stream
                            // belongs to the source's context.
                            unsafe {
                                sys::cuMemcpyPeerAsync(dst, q.s.context().cu_ctx(), src, p.s.context().cu_ctx(), bytes, p.comm.cu_stream())
                                    .result()
                            }
                            .map_err(derr("copying a halo plane"))?;
                        }
                    }
                }
            }
        }
        for p in &self.parts {
            p.comm_done.record(&p.comm).map_err(derr("recording the exchange"))?;
        }
        Ok(())
    }

    /// One step on every GPU, the exchange overlapping the interior.
    fn one_step(&mut self, fields: bool) -> Result<(), SolverError> {
        let odd = self.t % 2 == 1;
        let k = self.parts.len();
        let mut moms = Vec::with_capacity(k);
        for p in &mut self.parts {
            let mom = p.s.begin_step(fields)?.ok_or_else(|| SolverError::Backend("a slab ran a whole step by itself (a bug)".into()))?;
            p.s.launch_group(0, mom)?;
            p.edge_done.record(&p.s.stream()).map_err(derr("recording the edge step"))?;
            moms.push(mom);
        }
        self.exchange(odd)?;
        if self.overlap {
            for (p, &mom) in self.parts.iter_mut().zip(&moms) {
                p.s.launch_group(1, mom)?;
            }
        }
        for i in 0..k {
            let st = self.parts[i].s.stream();
            st.wait(&self.parts[i].comm_done).map_err(derr("ordering the next step"))?;
            if self.nccl.is_none() {
                for j in [(i + 1) % k, (i + k - 1) % k] {
                    st.wait(&self.parts[j].comm_done).map_err(derr("ordering the next step"))?;
                }
            }
        }
        for (p, &mom) in self.parts.iter_mut().zip(&moms) {
            if !self.overlap {
                p.s.launch_group(1, mom)?;
            }
            p.s.end_step(mom != 0)?;
        }
        self.t += 1;
        Ok(())
    }
}

impl MultiCudaSolver {
    /// `steps` steps of this process's slabs (the last computing the fields where `fuse`).
    fn local_steps(&mut self, steps: u64, fuse: bool) -> Result<(), SolverError> {
        for i in 0..steps {
            self.one_step(fuse && i + 1 == steps)?;
        }
        Ok(())
    }

    /// Wait for this process's slabs and exchanges.
    fn local_sync(&self) -> Result<(), SolverError> {
        for p in &self.parts {
            p.s.synchronize()?;
            p.comm.synchronize().map_err(derr("waiting for the halo exchange"))?;
        }
        Ok(())
    }

    /// The fields of this process's slabs' own layers, by slab.
    fn own_fields(&self) -> Vec<(usize, Fields)> {
        self.parts.iter().map(|p| (p.slab, remote::layers(&p.s.fields(), self.axis, 1..p.len + 1))).collect()
    }

    /// The checkpoint data of this process's slabs' own layers, by slab, and the parameters.
    fn own_checkpoint_data(&self) -> (Vec<(usize, Vec<u8>)>, Params) {
        let mut params = None;
        let data = self
            .parts
            .iter()
            .map(|p| {
                let c = p.s.checkpoint();
                let own = own_data(&c, p.s.domain(), self.axis, p.len).to_vec();
                params.get_or_insert(c.params);
                (p.slab, own)
            })
            .collect();
        (data, params.unwrap_or_else(|| self.params()))
    }
}

/// Slab and local index of cell `n` of the whole grid (of size `size`): its owner, and the slabs
/// holding a halo copy of it with their local index.
fn locate(parts: &[Part], size: [usize; 3], axis: usize, n: usize) -> ((usize, usize), Vec<(usize, usize)>) {
    let lc = layer_cells(size, axis);
    let (g, rest) = (n / lc, n % lc);
    let k = parts.len();
    let owner = parts.iter().position(|p| g >= p.lo && g < p.lo + p.len).unwrap_or(0);
    let p = &parts[owner];
    let own = (owner, (g - p.lo + 1) * lc + rest);
    let mut copies = Vec::new();
    if g == p.lo {
        let pv = (owner + k - 1) % k;
        copies.push((pv, (parts[pv].len + 1) * lc + rest));
    }
    if g + 1 == p.lo + p.len {
        copies.push(((owner + 1) % k, rest));
    }
    (own, copies)
}

/// [`SlotIo`] of the whole grid's slots (Esoteric Pull layout, `i * cells + n`) over the slabs:
/// reads from the owner, writes to the owner and its halo copies.
struct MultiIo<'a> {
    parts: &'a mut [Part],
    size: [usize; 3],
    axis: usize,
}

impl MultiIo<'_> {
    /// Per slab: (position in the request, local slot).
    fn route(&self, slots: &[usize], copies: bool) -> Vec<Vec<(usize, usize)>> {
        let cells = self.size.iter().product::<usize>();
        let mut per = vec![Vec::new(); self.parts.len()];
        for (pos, &s) in slots.iter().enumerate() {
            let (i, n) = (s / cells, s % cells);
            let ((k, local), others) = locate(self.parts, self.size, self.axis, n);
            let lcells = |k: usize| self.parts[k].s.domain().cells();
            per[k].push((pos, i * lcells(k) + local));
            if copies {
                for (k2, l2) in others {
                    per[k2].push((pos, i * lcells(k2) + l2));
                }
            }
        }
        per
    }
}

impl SlotIo for MultiIo<'_> {
    fn read(&mut self, slots: &[usize], out: &mut [u8]) -> Result<(), SolverError> {
        let es = self.parts[0].s.element_bytes();
        for (k, list) in self.route(slots, false).into_iter().enumerate() {
            let local: Vec<usize> = list.iter().map(|&(_, l)| l).collect();
            let mut buf = vec![0u8; local.len() * es];
            self.parts[k].s.read_slots(&local, &mut buf)?;
            for (j, &(pos, _)) in list.iter().enumerate() {
                out[pos * es..(pos + 1) * es].copy_from_slice(&buf[j * es..(j + 1) * es]);
            }
        }
        Ok(())
    }
    fn write(&mut self, slots: &[usize], vals: &[u8]) -> Result<(), SolverError> {
        let es = self.parts[0].s.element_bytes();
        for (k, list) in self.route(slots, true).into_iter().enumerate() {
            let local: Vec<usize> = list.iter().map(|&(_, l)| l).collect();
            let mut buf = Vec::with_capacity(local.len() * es);
            for &(pos, _) in &list {
                buf.extend_from_slice(&vals[pos * es..(pos + 1) * es]);
            }
            self.parts[k].s.write_slots(&local, &buf)?;
        }
        Ok(())
    }
}

impl Solver for MultiCudaSolver {
    fn info(&self) -> SolverInfo {
        let mut i = self.parts[0].s.info();
        let mut names: Vec<String> = self.parts.iter().map(|p| p.s.info().device).collect();
        i.memory_bytes = self.parts.iter().map(|p| p.s.info().memory_bytes).sum();
        let mut how = format!("{} halo exchange", self.transport);
        if let Some(r) = &self.remote {
            names.extend(r.devices().iter().cloned());
            i.memory_bytes += r.memory_bytes();
            how.push_str(&format!(", {} processes", self.slabs.len()));
        }
        let same = names.iter().all(|n| *n == names[0]);
        i.device = if same { format!("{} x {} ({how})", names.len(), names[0]) } else { format!("{} ({how})", names.join(" + ")) };
        i.size = self.mirror.domain().n;
        i
    }
    fn domain(&self) -> &Domain {
        self.mirror.domain()
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        // The other processes queue their steps beside this one's (each step's exchange pairs
        // with theirs), then say whether they could.
        if let Some(r) = &self.remote {
            r.failed()?;
            r.send_all(remote::STEP, &remote::step_message(steps, self.fuse_fields))?;
        }
        let mine = self.local_steps(steps, self.fuse_fields);
        if let Some(r) = &self.remote {
            r.replies()?;
        }
        mine
    }
    fn fuse_frame_fields(&mut self, on: bool) {
        self.fuse_fields = on;
    }
    fn fields(&self) -> Fields {
        let d = self.mirror.domain();
        let cells = d.cells();
        let mut out = Fields { size: d.n, rho: Vec::with_capacity(cells), u: Vec::with_capacity(cells), solid: Vec::with_capacity(cells) };
        let mut slabs = self.own_fields();
        if let Some(r) = &self.remote {
            slabs.extend(r.fields(&self.slabs, d.n, self.axis));
        }
        slabs.sort_by_key(|(slab, _)| *slab);
        for (_, f) in slabs {
            out.rho.extend_from_slice(&f.rho);
            out.u.extend_from_slice(&f.u);
            out.solid.extend_from_slice(&f.solid);
        }
        out
    }
    fn synchronize(&self) -> Result<(), SolverError> {
        if let Some(r) = &self.remote {
            r.failed()?;
            r.send_all(remote::SYNC, &[])?;
        }
        let mine = self.local_sync();
        if let Some(r) = &self.remote {
            r.replies()?;
        }
        mine
    }
    fn stats(&self) -> Stats {
        let mut all: Vec<(usize, Stats)> = self.parts.iter().map(|p| (p.slab, p.s.stats())).collect();
        if let Some(r) = &self.remote {
            all.extend(r.stats(self.t));
        }
        all.sort_by_key(|(slab, _)| *slab);
        let mut out = Stats { step: self.t, rho_range: [f64::INFINITY, f64::NEG_INFINITY], ..Stats::default() };
        for (slab, s) in all {
            let lo = self.slabs[slab].0;
            out.step = s.step;
            out.mass += s.mass;
            out.max_u = if s.max_u.is_nan() || out.max_u.is_nan() { f64::NAN } else { out.max_u.max(s.max_u) };
            let r = &mut out.rho_range;
            *r = if s.rho_range.iter().chain(r.iter()).any(|x| x.is_nan()) {
                [f64::NAN; 2]
            } else {
                [r[0].min(s.rho_range[0]), r[1].max(s.rho_range[1])]
            };
            if out.forces.len() < s.forces.len() {
                out.forces.resize(s.forces.len(), [0.0; 3]);
            }
            for (a, b) in out.forces.iter_mut().zip(&s.forces) {
                for c in 0..3 {
                    a[c] += b[c];
                }
            }
            if out.first_bad_cell.is_none() {
                out.first_bad_cell = s.first_bad_cell.map(|mut c| {
                    c[self.axis] = c[self.axis] + lo - 1;
                    c
                });
            }
        }
        out
    }
    fn params(&self) -> Params {
        self.parts[0].s.params()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        self.mirror.set_params(p.clone())?;
        if let Some(r) = &self.remote {
            r.call(remote::PARAMS, &remote::params_message(&p))?;
        }
        for part in &mut self.parts {
            part.s.set_params(p.clone())?;
        }
        Ok(())
    }
    fn checkpoint(&self) -> Checkpoint {
        let d = self.mirror.domain();
        let (mut slabs, params) = self.own_checkpoint_data();
        if let Some(r) = &self.remote {
            slabs.extend(r.checkpoint_data());
        }
        slabs.sort_by_key(|(slab, _)| *slab);
        let mut data = Vec::with_capacity(slabs.iter().map(|(_, b)| b.len()).sum());
        for (_, b) in slabs {
            data.extend_from_slice(&b);
        }
        let info = self.parts[0].s.info();
        Checkpoint {
            lattice: info.lattice,
            precision: info.precision,
            size: d.n,
            flags_crc: crc32fast::hash(&d.flags),
            step: self.t,
            params,
            data,
            probes: Vec::new(),
        }
    }
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        let d = self.mirror.domain();
        let bad = |m: String| Err(SolverError::Checkpoint(m));
        let info = self.parts[0].s.info();
        if c.lattice != info.lattice || c.precision != info.precision {
            return bad(format!("it holds {} {} but this solver is {} {}", c.lattice, c.precision, info.lattice, info.precision));
        }
        if c.size != d.n || c.flags_crc != crc32fast::hash(&d.flags) {
            return bad("it was made on a different domain (size or obstacles differ)".into());
        }
        let per = d.lattice.q() * info.precision.bytes();
        if c.data.len() != per * d.fluid_cells() {
            return bad("its data size does not match the domain".into());
        }
        // Where each layer's fluid cells start in the data.
        let lc = layer_cells(d.n, self.axis);
        let layers = d.n[self.axis];
        let mut start = vec![0usize; layers + 1];
        for g in 0..layers {
            start[g + 1] = start[g] + d.flags[g * lc..(g + 1) * lc].iter().filter(|&&f| !is_solid(f)).count() * per;
        }
        // Each slab's own layers and halos, as the checkpoint of its local grid.
        let slab_checkpoint = |lo: usize, len: usize, local: &Domain| {
            let mut data = Vec::new();
            for l in 0..len + 2 {
                let g = (lo + layers + l - 1) % layers;
                data.extend_from_slice(&c.data[start[g]..start[g + 1]]);
            }
            Checkpoint {
                lattice: c.lattice,
                precision: c.precision,
                size: local.n,
                flags_crc: crc32fast::hash(&local.flags),
                step: c.step,
                params: c.params.clone(),
                data,
                probes: Vec::new(),
            }
        };
        if let Some(r) = &self.remote {
            r.failed()?;
            for link in r.links() {
                let (lo, len) = self.slabs[link.peer];
                let local = slab_domain(d, self.axis, lo, len);
                r.send(link, remote::RESTORE, &slab_checkpoint(lo, len, &local).to_bytes())?;
            }
        }
        let mut mine = Ok(());
        for p in &mut self.parts {
            let local = slab_checkpoint(p.lo, p.len, p.s.domain());
            if let Err(e) = p.s.restore(&local) {
                mine = Err(e);
                break;
            }
        }
        if let Some(r) = &self.remote {
            r.replies()?;
        }
        mine?;
        self.mirror.set_params(c.params.clone())?;
        self.t = c.step;
        Ok(())
    }
    fn write_vti_pieces(&self, dir: &std::path::Path, stem: &str) -> Option<Result<Vec<std::path::PathBuf>, SolverError>> {
        let r = self.remote.as_ref()?;
        Some(remote::write_pieces(self, r, dir, stem))
    }
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        if self.remote.is_some() {
            return Err(SolverError::Backend(
                "cells cannot be edited in a launch of several processes; edit in the viewer (one process, --gpus N) and resume from its checkpoint".into(),
            ));
        }
        self.synchronize()?;
        let t = self.t;
        let (size, axis) = (self.mirror.domain().n, self.axis);
        let report = self.mirror.edit_via_io(edit, t, &mut MultiIo { parts: &mut self.parts, size, axis })?;
        if !report.changed.is_empty() {
            let d = self.mirror.domain().clone();
            for p in &mut self.parts {
                let local = slab_domain(&d, self.axis, p.lo, p.len);
                p.s.set_domain(local)?;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    //! The slab decomposition and its halo exchange on the CPU solver (same layout and slot
    //! rules as the GPU kernels): slabs stepped apart and joined by the planes of
    //! [`exchange_planes`] give the whole grid's state bit for bit. Runs without a GPU.
    use super::*;
    use crate::backend::cpu::{build_mirror_at, Slab};

    fn slabs_match_whole_grid(text: &str, ov: &[(&str, &str)], k: usize, steps: u64) {
        let ov: Vec<(String, String)> = ov.iter().map(|(a, b)| ((*a).to_string(), (*b).to_string())).collect();
        let ls = crate::scene::from_str(text, "test.toml", std::path::PathBuf::from("."), &ov).unwrap();
        let dom = Domain::from_scene(&ls).unwrap();
        let params = Params::from_scene(&ls, &dom);
        let prec = ls.scene.solver.precision;
        let init = |p: [usize; 3]| crate::domain::initial_state(&ls, p);
        let mut one = build_mirror(dom.clone(), Scheme::EsotericPull, prec, params.clone(), 16, init);
        let (axis, n) = (cut_axis(&dom), dom.n);
        let (up, down) = crossing(&dom, axis);
        let slabs = split(n[axis], k);
        let mut parts: Vec<Box<dyn Mirror>> = slabs
            .iter()
            .map(|&(lo, len)| {
                let mut off = [0usize; 3];
                off[axis] = lo.wrapping_sub(1);
                let map = move |p: [usize; 3]| {
                    let mut g = p;
                    g[axis] = (lo + n[axis] + p[axis] - 1) % n[axis];
                    g
                };
                let place = Slab { off, halo: axis + 1 };
                build_mirror_at(slab_domain(&dom, axis, lo, len), Scheme::EsotericPull, prec, params.clone(), 16, place, |p| init(map(p)))
            })
            .collect();
        let (es, lc) = (prec.bytes(), layer_cells(n, axis));
        let at = |m: &dyn Mirror, d: usize, layer: usize| (d * m.domain().cells() + layer * lc) * es;
        for t in 0..steps {
            one.step(1).unwrap();
            let mut msgs = Vec::new();
            for i in 0..k {
                parts[i].step(1).unwrap();
            }
            for i in 0..k {
                let (nx, pv) = ((i + 1) % k, (i + k - 1) % k);
                let (to_up, to_down) = exchange_planes(&up, &down, t % 2 == 1, slabs[i].1, slabs[pv].1);
                for (list, to) in [(to_up, nx), (to_down, pv)] {
                    for pl in list {
                        let src = at(parts[i].as_ref(), pl.d, pl.from);
                        let bytes = parts[i].raw().0[0][src..src + lc * es].to_vec();
                        msgs.push((to, at(parts[to].as_ref(), pl.d, pl.to), bytes));
                    }
                }
            }
            for (to, dst, bytes) in msgs {
                parts[to].raw().0[0][dst..dst + bytes.len()].copy_from_slice(&bytes);
            }
        }
        let whole = one.checkpoint().data;
        let mut joined = Vec::new();
        for (p, &(_, len)) in parts.iter().zip(&slabs) {
            joined.extend_from_slice(own_data(&p.checkpoint(), p.domain(), axis, len));
        }
        assert_eq!(whole.len(), joined.len(), "{ov:?} {k} slabs: data sizes");
        let bad = whole.iter().zip(&joined).filter(|(a, b)| a != b).count();
        assert_eq!(bad, 0, "{ov:?} {k} slabs: {bad} bytes differ after {steps} steps");
    }

    const CHANNEL_2D: &str = r#"
[domain]
size = [40, 26]
[boundaries]
x_min = { type = "inlet", velocity = [0.04, 0.0], profile = "parabolic" }
x_max = { type = "outlet", density = 1.0 }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.05, 0.0] }
[fluid]
tau = 0.62
[[obstacles]]
shape = "cylinder"
center = [14, 12]
radius = 4.5
"#;

    const CHANNEL_3D: &str = r#"
[domain]
size = [24, 12, 16]
[boundaries]
x_min = { type = "inlet", velocity = [0.03, 0.0, 0.0], profile = "parabolic" }
x_max = { type = "outlet" }
z_min = "wall"
z_max = { type = "moving_wall", velocity = [0.04, 0.01, 0.0] }
[fluid]
tau = 0.65
[[obstacles]]
shape = "sphere"
center = [9, 6, 8]
radius = 3.2
"#;

    /// Every lattice and storage precision, 2 and 3 slabs, obstacles across the cuts, walls and
    /// a moving wall on the ring's seam, a parabolic inlet spanning every slab.
    #[test]
    fn slabs_joined_by_the_halo_planes_equal_the_whole_grid() {
        for k in [2, 3] {
            for p in ["fp32", "fp16s", "fp16c"] {
                slabs_match_whole_grid(CHANNEL_2D, &[("domain.lattice", "D2Q9"), ("solver.precision", p)], k, 60);
                slabs_match_whole_grid(CHANNEL_3D, &[("domain.lattice", "D3Q19"), ("solver.precision", p)], k, 40);
            }
            slabs_match_whole_grid(CHANNEL_3D, &[("domain.lattice", "D3Q27"), ("solver.precision", "fp32")], k, 40);
        }
    }

    /// Free-slip walls along the cut axis and across it: the reflected DDFs come from halo cells
    /// and from the slots the exchange carries, like any other DDF crossing a cut.
    #[test]
    fn free_slip_walls_cross_the_cuts() {
        for k in [2, 3] {
            slabs_match_whole_grid(CHANNEL_2D, &[("domain.lattice", "D2Q9"), ("boundaries.y_max.type", "slip_wall")], k, 60);
            for lattice in ["D3Q19", "D3Q27"] {
                let ov = [
                    ("domain.lattice", lattice),
                    ("boundaries.y_min.type", "slip_wall"),
                    ("boundaries.y_max.type", "slip_wall"),
                    ("boundaries.z_max.type", "slip_wall"),
                ];
                slabs_match_whole_grid(CHANNEL_3D, &ov, k, 40);
            }
        }
    }
}
