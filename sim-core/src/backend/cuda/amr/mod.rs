//! Adaptive blocks on the CUDA backend (Jaber, Essel & Sullivan 2025): the time stepping of [`AmrLbm`] on the GPU,
//! `kernels/amr.cu`, with the collision and equilibria of `kernels/common.cuh` (the dense
//! kernels' device functions).
//!
//! The module moves the LBM on the forest to the GPU: ghost interpolation, collision, pull
//! streaming with bounce-back, moving walls and outflows, and restriction, launched level by
//! level in the recursive order of the CPU reference (level `l` runs `2^l` times per coarse
//! step). Interpolated walls on the finest level ([`crate::amr::lbm::walls`]) are compiled in
//! only for a run that has curved links (`AMR_CURVED`, [`AmrGpu::with_walls`]): their table
//! goes up with every upload of the mesh, and a pass (`amr_walls`) follows each step of their
//! level. The DDFs live on the device in `AmrLbm`'s layout, FP32, compiled without fused
//! multiply-adds so that the kernels follow the CPU's arithmetic.
//!
//! An adaptation stays on the device, mesh and data ([`AmrGpu::adapt_to_criterion`], the
//! `mesh` module and `kernels/amr_mesh.cu`): block maxima, targets, marks, balance, the new
//! forest's arrays, then the data's transfer (restriction into coarsened blocks, interpolation
//! into new children with the mass correction, refresh of exposed cells). A forest adapted on
//! the host ([`AmrLbm::adapt_mesh`], for obstacles given as a host closure) moves its data
//! with [`AmrGpu::transfer`] around an upload of the new mesh arrays.

use crate::amr::{AdaptReport, AmrLbm, BLOCK, MAX_LEVELS};
use crate::backend::cuda::{derr, device_info};
use crate::lattice::{Lat, Lattice};
use crate::precision::Precision;
use crate::solver::SolverError;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use std::sync::Arc;

mod frame;
mod mesh;
mod schedule;
mod source;
pub use source::*;
use source::{compile_amr_with, PRM};
mod step;
use schedule::{Op, OpKind, Part};
mod trace;
mod transfer;

/// Which launch lists a level has: all its active blocks, those next to a coarser level
/// (ghost interpolation), those whose cells feed a coarser leaf (restriction; the tail of `all`,
/// whose head is the blocks that feed none: `amr_mesh_lists`). The head starts with the `core`
/// leaves that have no non-leaf neighbour of their level.
#[derive(Clone, Copy, Default)]
struct Lists {
    all: (usize, usize),
    near_coarser: (usize, usize),
    feeds: (usize, usize),
    core: usize,
}

impl Lists {
    /// The blocks of a part of the level (a range of `all`).
    fn part(&self, p: Part) -> (usize, usize) {
        let far = self.all.1 - self.feeds.1;
        match p {
            Part::Far => (self.all.0, far),
            Part::Core => (self.all.0, self.core),
            Part::Rim => (self.all.0 + self.core, far - self.core),
            Part::Feed => self.feeds,
        }
    }
}

/// The streams and events a coarse step's launches run on (`schedule::assign`): per class
/// (low, high priority) its streams, an event per launch, the step's start.
struct Lanes {
    streams: [Vec<Arc<CudaStream>>; 2],
    events: Vec<CudaEvent>,
    start: CudaEvent,
    /// The priorities of the two classes.
    priority: [i32; 2],
}

/// A captured coarse step ([`AmrGpu::step`]): the graph last captured and its executable
/// instance. After the launch lists change, the next capture updates the instance in place
/// (`cuGraphExecUpdate`: same launches, new arguments and grid sizes) instead of instantiating a
/// new one; where the launches themselves changed it instantiates again.
struct StepGraph {
    graph: cudarc::driver::sys::CUgraph,
    exec: cudarc::driver::sys::CUgraphExec,
    /// The stream it was captured on and runs on (and keeps its context alive).
    stream: Arc<CudaStream>,
}

// SAFETY: CUDA graph handles may move between threads; what they must not be is used from two
// threads at once, and a StepGraph is only reached through its AmrGpu's `&mut self` (launched
// on the AmrGpu's own stream, which binds the context to the calling thread first).
unsafe impl Send for StepGraph {}

impl Drop for StepGraph {
    fn drop(&mut self) {
        use cudarc::driver::result::graph;
        // A failure here has nowhere to go.
        let _ = self.stream.context().bind_to_thread();
        // SAFETY: both handles are this StepGraph's own (made by StepGraph::capture), used
        // nowhere else; its stream keeps the context alive.
        unsafe {
            let _ = graph::exec_destroy(self.exec);
            let _ = graph::destroy(self.graph);
        }
    }
}

impl StepGraph {
    /// End the capture on `stream` and make it launchable: update `old`'s instance where the
    /// two graphs have the same launches, else instantiate. `None` if nothing was captured.
    fn capture(stream: &Arc<CudaStream>, old: Option<StepGraph>) -> Result<Option<StepGraph>, cudarc::driver::DriverError> {
        use cudarc::driver::{result, sys};
        // SAFETY: the stream is capturing (AmrGpu::step began it on this thread).
        let graph = unsafe { result::stream::end_capture(stream.cu_stream()) }?;
        if graph.is_null() {
            return Ok(None);
        }
        if let Some(mut g) = old {
            let mut info = std::mem::MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
            // SAFETY: g.exec is a live instance, graph a live graph; info is written by the call.
            let ok = unsafe { sys::cuGraphExecUpdate_v2(g.exec, graph, info.as_mut_ptr()) } == sys::CUresult::CUDA_SUCCESS;
            if ok {
                // SAFETY: the old graph is g's own and no longer needed (the instance now runs
                // the new one's launches). g takes the new graph either way, so that nothing is
                // destroyed twice; a failure here would only leak the old template.
                let _ = unsafe { result::graph::destroy(g.graph) };
                g.graph = graph;
                return Ok(Some(g));
            }
        }
        // Kernel nodes keep the priorities of the streams they were captured on.
        let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
        // SAFETY: graph is the live graph just captured; on failure it is destroyed here.
        match unsafe { result::graph::instantiate(graph, flags) } {
            Ok(exec) => Ok(Some(StepGraph { graph, exec, stream: stream.clone() })),
            Err(e) => {
                // SAFETY: as above, the graph is ours and was not instantiated.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(e)
            }
        }
    }

    /// Launch the instance on the stream it was captured on.
    fn launch(&self) -> Result<(), cudarc::driver::DriverError> {
        self.stream.context().bind_to_thread()?;
        // SAFETY: a live instance, launched on a live stream of its context.
        unsafe { cudarc::driver::result::graph::launch(self.exec, self.stream.cu_stream()) }
    }
}

/// The interpolated walls on the device (`kernels/amr.cu`, "Interpolated walls";
/// [`crate::amr::lbm::walls`]).
struct Curved {
    /// `amr_walls`: the links with q < 1/2 after each step of the table's level.
    walls_k: CudaFunction,
    /// The solver's table ([`crate::amr::lbm::CurvedWalls::packed`]), or [`NO_WALLS`].
    table: CudaSlice<u32>,
    /// The table's level; None where the solver has no curved links.
    level: Option<usize>,
    /// The module of the curved kernels where they were compiled after the others (the first
    /// upload of a table, a drawn obstacle in a run that had none): kept loaded with them.
    _module: Option<Arc<CudaModule>>,
}

/// The walls' table of a solver without curved links: no cells, at a level no block has.
const NO_WALLS: [u32; 5] = [0, u32::MAX, 0, 0, 0];

/// The forest's LBM state on one GPU.
pub struct AmrGpu {
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The streams and events of a coarse step's launches (`schedule`), made on first use.
    /// Not used with the profile knob or `ESOFLOW_AMR_SERIAL=1`: everything on `stream`, in
    /// the recursion's order.
    lanes: Option<Lanes>,
    concurrent: bool,
    /// The restriction into level 0 is deferred into the next coarse step, where it runs beside
    /// level 0's far blocks (`schedule`; off with `ESOFLOW_AMR_PIPELINE=0` and without
    /// concurrency). Level 0's steps run on low-priority streams unless `ESOFLOW_AMR_PRIORITY=0`.
    pipeline: bool,
    priorities: bool,
    /// The deferred restriction (launched first by the next coarse step, or by [`Self::flush`]
    /// before anything reads the data or changes the parameters).
    pending: Option<schedule::Op>,
    /// A coarse step's launches captured as CUDA graphs, by the levels' parities at its start
    /// and whether a restriction was pending (a coarse step flips level 0's parity and leaves
    /// the finer levels', which step an even number of times: two or three graphs a mesh), with
    /// the parities and pending restriction it leaves. Replaying one costs a launch instead of
    /// every kernel's and the gaps between dependent kernels shrink. Set aside whenever the
    /// launch lists change (`build_lists`, into `stale_graphs`); not used with the profile knob
    /// (it waits inside the step) or `ESOFLOW_AMR_GRAPHS=0`.
    graphs: std::collections::HashMap<u32, (StepGraph, StepAfter)>,
    /// The graphs of the launch lists before the last change, by the same key: the next capture
    /// updates them instead of instantiating new ones.
    stale_graphs: std::collections::HashMap<u32, (StepGraph, StepAfter)>,
    use_graphs: bool,
    _module: Arc<CudaModule>,
    /// `amr_step` and `amr_stats` are the curved module's where `curved` is set.
    step_k: CudaFunction,
    /// Interpolated walls (`AMR_CURVED`): compiled in where the run has curved links (or once
    /// an upload brings a table); None: the kernels of half-way walls alone.
    curved: Option<Curved>,
    /// How the kernels were compiled (architecture, extra defines, fused multiply-adds): the
    /// curved ones compiled later follow it.
    build: (String, String, bool),
    codes_k: CudaFunction,
    /// Per cell: what `amr_step` does with each direction (`amr_codes`, after every mesh
    /// change): two planes of one 32-bit word a cell (`AMR_CODES_SPLIT` in kernels/amr.cu),
    /// `code_cells` words each.
    codes: CudaSlice<u32>,
    code_cells: u64,
    copy_k: CudaFunction,
    planes_k: CudaFunction,
    stats_k: CudaFunction,
    /// amr_stats' sums (mass, largest speed, not-finite flag, force).
    stat: CudaSlice<f64>,
    /// The lattice (for the frame kernels) and what frames need, made on the first one.
    lattice: Lattice,
    frame: Option<frame::FrameKit>,
    /// `amr_interpolate` (the stepping's ghosts) and `amr_interpolate_adapt` (an adaptation's
    /// new children and exposed cells).
    interpolate: CudaFunction,
    interpolate_adapt: CudaFunction,
    average: CudaFunction,
    block_max: CudaFunction,
    transfer_k: CudaFunction,
    mass_k: CudaFunction,
    /// `amr_edit`: cells a cell edit changed to the rest state ([`Self::edit_solids`]).
    edit_k: CudaFunction,
    mesh_k: CudaFunction,
    compact_k: CudaFunction,
    id_sets_k: CudaFunction,
    lists_k: CudaFunction,
    /// The launch lists over many blocks (`amr_mesh_lists_tiles`, `_offsets`, `_write`) for a
    /// capacity of [`LISTS_MANY_FROM`] blocks or more: the single-block `amr_mesh_lists` took
    /// 0.4 ms for the 110,000 blocks of the sphere in 8x the domain, 20 us over many.
    lists_many: Option<(CudaFunction, CudaFunction, CudaFunction)>,
    /// The ID sets over many blocks likewise (`amr_mesh_id_tiles`, `_offsets`, `_write`: 90 -> 6
    /// us an adaptation in the 8x sphere).
    id_sets_many: Option<(CudaFunction, CudaFunction, CudaFunction)>,
    /// Their per-tile counts: 2 words per (level, tile of 1024 IDs).
    list_tiles: CudaSlice<u32>,
    targets_k: CudaFunction,
    solids_k: CudaFunction,
    dirty_k: CudaFunction,
    gather_k: CudaFunction,
    device: String,
    capacity: usize,
    pos: CudaSlice<i32>,
    parent: CudaSlice<u32>,
    child: CudaSlice<u32>,
    nbr: CudaSlice<u32>,
    cmask: CudaSlice<u8>,
    solid: CudaSlice<u8>,
    level: CudaSlice<u8>,
    /// Per cell: holds current data (the refresh after an adaptation).
    valid: CudaSlice<u8>,
    /// Per block: refined by the adaptation under way.
    fresh: CudaSlice<u8>,
    /// Per block: the criterion's block maximum.
    values: CudaSlice<f32>,
    // The rest of the forest (kernels/amr_mesh.cu): states, neighbour-children, block masks,
    // ID sets, gap set, working marks and targets, the refined list, counters.
    state: CudaSlice<u8>,
    nbr_child: CudaSlice<u32>,
    bmask: CudaSlice<u8>,
    id_set: CudaSlice<u32>,
    gap: CudaSlice<u32>,
    mk: CudaSlice<u8>,
    aux: CudaSlice<u8>,
    rl: CudaSlice<u32>,
    ctr: CudaSlice<u32>,
    /// Page-locked host copy of `ctr`: the counters' round trip (one or more an adaptation)
    /// copies straight into it instead of through the driver's staging of pageable memory.
    ctr_host: PinnedHostSlice<u32>,
    /// The device forest's gap-set length, active blocks, level starts (as the host's).
    gap_len: usize,
    /// The lowest gap-set length since the host's copy last met the device's (the gap set
    /// changed above it).
    gap_lo: usize,
    /// Per block: its row changed since the host's copy last met the device's.
    dirty: CudaSlice<u8>,
    /// The number of the device's last adaptation (1 ..= 255, cycling; kernels: `M_EPOCH`).
    epoch: u8,
    gathered: mesh::Gathered,
    active: usize,
    level_start: Vec<u32>,
    /// The forest's frozen levels (bits), finest level allowed, dimensions.
    frozen: u32,
    max_level: u8,
    dims: usize,
    obstacles: Option<mesh::Obstacles>,
    /// The two DDF buffers (values in `precision`'s bytes): a level-step moves a level's data
    /// from one to the other (`amr_step`). At rest (after an upload, [`Self::settle`]) all of
    /// it is in `f`.
    f: CudaSlice<u8>,
    post: CudaSlice<u8>,
    precision: Precision,
    /// Per level: its data is in `post`, not `f` (it made an odd number of steps since the
    /// last settle; only level 0 can be at the end of a coarse step). With in-place storage,
    /// the level's parity.
    odd: [bool; MAX_LEVELS as usize + 1],
    /// In-place (Esoteric-Pull) storage (`ESOFLOW_AMR_INPLACE=1`): one DDF buffer `f` with the
    /// blocks' halo slots, each level in the arrangement of its parity while it steps; `post`
    /// is not used. Its kernels: `amr_ep_gather`, `amr_ep_local`.
    inplace: Option<(CudaFunction, CudaFunction)>,
    /// With in-place storage: every level's data is in the plain layout (after an upload or a
    /// settle); the next step first takes it up into the stepping arrangement.
    at_rest: bool,
    /// With in-place storage: the data is in the halo form of an adaptation
    /// ([`Self::settle_for_mesh`]); the next step first takes it up with the new links.
    halo: bool,
    prm: CudaSlice<f32>,
    prm_host: Vec<f32>,
    lists: CudaSlice<u32>,
    levels: Vec<Lists>,
    /// The lists of an adaptation's transfer: coarsened blocks, new children, refined blocks.
    xlists: CudaSlice<u32>,
    root: [i32; 3],
    /// Developer knob `ESOFLOW_AMR_PROFILE=1`: seconds and launches per kernel (step,
    /// interpolate, average, settle), each launch waited for; printed when dropped.
    profile: Option<[(f64, u64); 4]>,
    /// With the same knob: seconds of the adaptations' phases (criterion and marks, balance
    /// and lists, the new mesh, the data's transfer, the host copy's refresh).
    phases: Option<[f64; 5]>,
    /// With the same knob: host copy refreshes and the rows they read.
    refreshes: (u64, u64),
    /// `ESOFLOW_AMR_PROFILE=trace`: device time per operation of the adaptations.
    trace: Option<trace::Trace>,
    /// Adaptations read the refined and coarsened IDs back ([`Self::set_report_ids`]).
    report_ids: bool,
    /// The criterion's marks are queued behind the steps (`queue_criterion`):
    /// `adapt_to_criterion` goes on from them.
    marks_queued: bool,
    /// The device's high-water mark of IDs (its `M_HW`) as of the last counters read: passes
    /// over every block before an adaptation allocates stop there.
    high_water: usize,
}

impl Drop for AmrGpu {
    fn drop(&mut self) {
        if let Some(p) = self.profile {
            let names = ["step", "interpolate", "average", "settle"];
            let total: f64 = p.iter().map(|x| x.0).sum();
            for (n, (t, c)) in names.iter().zip(p) {
                eprintln!("amr kernel {n:12} {:9.3} s {:5.1} % {c:8} launches", t, 100.0 * t / total.max(1e-12));
            }
        }
        if let Some(p) = self.phases {
            let names = ["criterion", "balance", "new mesh", "transfer", "host copy"];
            for (n, t) in names.iter().zip(p) {
                eprintln!("amr adaptation {n:10} {t:9.3} s");
            }
            eprintln!("amr host copy: {} refreshes, {} changed rows", self.refreshes.0, self.refreshes.1);
        }
        if let Some(t) = &self.trace {
            t.print();
        }
    }
}

impl AmrGpu {
    /// Open device 0, compile the kernels for `lattice` and allocate a forest of `capacity`
    /// blocks (all of it now: the mesh never reallocates).
    ///
    /// # Errors
    /// No CUDA device or NVRTC, compile errors, or a capacity the device memory cannot hold
    /// (the message gives the bytes needed and what to change).
    pub fn new(lattice: Lattice, precision: Precision, capacity: usize) -> Result<AmrGpu, SolverError> {
        Self::with_storage(lattice, precision, capacity, in_place_knob())
    }

    /// [`Self::new`] with the DDFs in two buffers (`in_place` false) or in one, in place
    /// (Esoteric Pull with halo slots: 0.59x the memory for D3Q19).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_storage(lattice: Lattice, precision: Precision, capacity: usize, inplace: bool) -> Result<AmrGpu, SolverError> {
        Self::with_walls(lattice, precision, capacity, inplace, false)
    }

    /// [`Self::with_storage`] with the interpolated walls' kernels compiled in (`curved`: the
    /// solver has curved links, [`AmrLbm::curved_walls`]). Without them an upload of a table
    /// compiles them then.
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_walls(lattice: Lattice, precision: Precision, capacity: usize, inplace: bool, curved: bool) -> Result<AmrGpu, SolverError> {
        crate::backend::cuda::probe().map_err(SolverError::Backend)?;
        let ctx = CudaContext::new(0).map_err(derr("opening device 0"))?;
        // SAFETY: the slices are made after this call; they are used on `stream` and, during
        // a coarse step, on the level streams, whose hand-overs step_level orders with events
        // itself (cudarc's tracking would order every launch after the last use of the DDF
        // buffers, which every level shares), and everything on a level stream is waited for
        // on `stream` before the step returns.
        unsafe { ctx.disable_event_tracking() };
        let dev = device_info(&ctx).map_err(SolverError::Backend)?;
        let need = device_bytes(lattice, precision, capacity, inplace);
        if need as f64 > dev.mem.0 as f64 * 0.95 {
            return Err(SolverError::Backend(format!(
                "out of GPU memory: adaptive blocks of {lattice} ({precision}) with amr.capacity = {capacity} blocks need {:.2} GB, but {} has {:.2} GB free; lower amr.capacity (or amr.max_level){}",
                need as f64 / 1e9,
                dev.name,
                dev.mem.0 as f64 / 1e9,
                if precision == Precision::Fp32 { ", or set solver.precision = \"fp16s\" (half the DDF memory)" } else { "" }
            )));
        }
        let arch = crate::backend::cuda::arch_of(&dev);
        // Developer knobs: ESOFLOW_AMR_DEFINES (e.g. `AMR_STEP_MINB=4 AMR_INTERP_MINB=3`:
        // `#define`s put before the source, for tuning launch bounds on a card), and
        // ESOFLOW_AMR_FMAD=1 (measurement only: NVRTC fuses multiply-adds, which the CPU
        // reference does not, so the results are no longer the CPU's bit for bit).
        let fmad = std::env::var("ESOFLOW_AMR_FMAD").as_deref() == Ok("1");
        let extra = std::env::var("ESOFLOW_AMR_DEFINES").unwrap_or_default();
        let ptx = compile_amr_with(lattice, precision, &arch, capacity, inplace, curved, &extra, fmad).map_err(SolverError::Backend)?;
        let module = crate::backend::cuda::Module::load(&ctx, ptx, "the block kernels")?;
        let get = |n: &str| module.get(n);
        let (step_k, copy_k, planes_k, stats_k) = (get("amr_step")?, get("amr_copy")?, get("amr_planes")?, get("amr_stats")?);
        let codes_k = get("amr_codes")?;
        let (interpolate, average) = (get("amr_interpolate")?, get("amr_average")?);
        let interpolate_adapt = get("amr_interpolate_adapt")?;
        let (block_max, transfer_k, mass_k) = (get("amr_block_max")?, get("amr_transfer")?, get("amr_mass_shift")?);
        let edit_k = get("amr_edit")?;
        let (mesh_k, compact_k, id_sets_k) = (get("amr_mesh")?, get("amr_mesh_compact")?, get("amr_mesh_id_sets")?);
        let (lists_k, targets_k, solids_k) = (get("amr_mesh_lists")?, get("amr_mesh_targets")?, get("amr_mesh_solids")?);
        // Many thread blocks for large forests; one (one launch instead of four) for small ones,
        // where the launches cost more than the scans (square cylinder, 5,120 blocks: 14.4 % in
        // refinement with one, 14.9 % with many). ESOFLOW_AMR_LISTS=1 or =many chooses.
        let many = match std::env::var("ESOFLOW_AMR_LISTS").as_deref() {
            Ok("1") => false,
            Ok("many") => true,
            _ => capacity >= LISTS_MANY_FROM,
        };
        let lists_many =
            if many { Some((get("amr_mesh_lists_tiles")?, get("amr_mesh_lists_offsets")?, get("amr_mesh_lists_write")?)) } else { None };
        let id_sets_many =
            if many { Some((get("amr_mesh_id_tiles")?, get("amr_mesh_id_offsets")?, get("amr_mesh_id_write")?)) } else { None };
        let (dirty_k, gather_k) = (get("amr_mesh_dirty")?, get("amr_mesh_gather")?);
        let inplace = if inplace { Some((get("amr_ep_gather")?, get("amr_ep_local")?)) } else { None };
        let walls_k = if curved { Some(get("amr_walls")?) } else { None };
        // A stream of its own, not the legacy default stream: a coarse step is captured on it
        // as a CUDA graph (AmrGpu::step), which the default stream does not allow.
        let stream = ctx.new_stream().map_err(derr("making the block solver's stream"))?;
        let d = lattice.dims();
        let b = BLOCK.pow(d as u32);
        let nd = 3usize.pow(d as u32);
        let q = lattice.q();
        let a = derr("allocating the block forest");
        let curved = match walls_k {
            Some(walls_k) => Some(Curved { walls_k, table: stream.clone_htod(&NO_WALLS).map_err(&a)?, level: None, _module: None }),
            None => None,
        };
        Ok(AmrGpu {
            curved,
            build: (arch, extra, fmad),
            pos: stream.alloc_zeros::<i32>(3 * capacity).map_err(&a)?,
            parent: stream.alloc_zeros::<u32>(capacity).map_err(&a)?,
            child: stream.alloc_zeros::<u32>(capacity).map_err(&a)?,
            nbr: stream.alloc_zeros::<u32>(nd * capacity).map_err(&a)?,
            cmask: stream.alloc_zeros::<u8>(b * capacity).map_err(&a)?,
            solid: stream.alloc_zeros::<u8>(b * capacity).map_err(&a)?,
            level: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            valid: stream.alloc_zeros::<u8>(b * capacity).map_err(&a)?,
            fresh: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            values: stream.alloc_zeros::<f32>(capacity).map_err(&a)?,
            f: stream.alloc_zeros::<u8>(ddf_values(lattice, capacity, inplace.is_some()) * precision.bytes()).map_err(&a)?,
            // In place: one value, never read.
            post: stream
                .alloc_zeros::<u8>(if inplace.is_some() { precision.bytes() } else { q * b * capacity * precision.bytes() })
                .map_err(&a)?,
            inplace,
            at_rest: true,
            halo: false,
            precision,
            codes: stream.alloc_zeros::<u32>(2 * b * capacity).map_err(&a)?,
            code_cells: (b * capacity) as u64,
            odd: [false; MAX_LEVELS as usize + 1],
            prm: stream.alloc_zeros::<f32>(PRM).map_err(&a)?,
            stat: stream.alloc_zeros::<f64>(8).map_err(&a)?,
            prm_host: Vec::new(),
            lists: stream.alloc_zeros::<u32>(3 * capacity).map_err(&a)?,
            list_tiles: stream.alloc_zeros::<u32>(mesh::list_tiles(capacity) * mesh::LIST_FLAGS * mesh::LIST_LEVELS).map_err(&a)?,
            xlists: stream.alloc_zeros::<u32>(3 * capacity).map_err(&a)?,
            state: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            nbr_child: stream.alloc_zeros::<u32>(nd * capacity).map_err(&a)?,
            bmask: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            id_set: stream.alloc_zeros::<u32>(capacity).map_err(&a)?,
            gap: stream.alloc_zeros::<u32>(capacity).map_err(&a)?,
            mk: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            aux: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            rl: stream.alloc_zeros::<u32>(capacity).map_err(&a)?,
            ctr: stream.alloc_zeros::<u32>(mesh::CTR).map_err(&a)?,
            // SAFETY: written by the device before it is read (AmrGpu::counters).
            ctr_host: unsafe { ctx.alloc_pinned_with_flags::<u32>(mesh::CTR, 0) }.map_err(&a)?,
            gap_len: 0,
            gap_lo: 0,
            dirty: stream.alloc_zeros::<u8>(capacity).map_err(&a)?,
            epoch: 0,
            gathered: mesh::Gathered::new(&stream, capacity, d).map_err(&a)?,
            active: 0,
            level_start: Vec::new(),
            frozen: 0,
            max_level: 0,
            dims: d,
            obstacles: None,
            levels: Vec::new(),
            root: [1; 3],
            profile: (std::env::var("ESOFLOW_AMR_PROFILE").as_deref() == Ok("1")).then_some([(0.0, 0); 4]),
            phases: (std::env::var("ESOFLOW_AMR_PROFILE").as_deref() == Ok("1")).then_some([0.0; 5]),
            refreshes: (0, 0),
            trace: trace::Trace::from_env(),
            report_ids: true,
            marks_queued: false,
            high_water: capacity,
            lanes: None,
            concurrent: std::env::var("ESOFLOW_AMR_PROFILE").as_deref() != Ok("1")
                && std::env::var("ESOFLOW_AMR_SERIAL").as_deref() != Ok("1"),
            pipeline: std::env::var("ESOFLOW_AMR_PIPELINE").as_deref() != Ok("0"),
            priorities: std::env::var("ESOFLOW_AMR_PRIORITY").as_deref() != Ok("0"),
            pending: None,
            graphs: std::collections::HashMap::new(),
            stale_graphs: std::collections::HashMap::new(),
            use_graphs: std::env::var("ESOFLOW_AMR_PROFILE").as_deref() != Ok("1")
                && std::env::var("ESOFLOW_AMR_GRAPHS").as_deref() != Ok("0"),
            _ctx: ctx,
            stream,
            _module: module.keep(),
            step_k,
            codes_k,
            copy_k,
            planes_k,
            stats_k,
            lattice,
            frame: None,
            interpolate,
            interpolate_adapt,
            average,
            block_max,
            transfer_k,
            mass_k,
            edit_k,
            mesh_k,
            compact_k,
            id_sets_k,
            lists_k,
            lists_many,
            id_sets_many,
            targets_k,
            solids_k,
            dirty_k,
            gather_k,
            device: dev.name,
            capacity,
        })
    }

    /// The device's name.
    #[must_use]
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Copy the forest (block arrays, links, masks, obstacles, launch lists) and the DDFs of a
    /// solver to the device.
    ///
    /// # Errors
    /// A forest of another capacity; CUDA errors.
    pub fn upload<L: Lat>(&mut self, lbm: &AmrLbm<L>) -> Result<(), SolverError> {
        // The host's data replaces the device's, a deferred restriction with it.
        self.pending = None;
        self.upload_mesh(lbm)?;
        if lbm.storage() != self.precision {
            return Err(SolverError::Backend(format!(
                "the solver stores its DDFs in {} but the device's kernels were built for {}",
                lbm.storage(),
                self.precision
            )));
        }
        let e = derr("uploading the DDFs");
        let n = lbm.raw_ddfs().len() * self.precision.bytes();
        // FP32 goes as it is; the 16-bit formats are encoded on the way.
        if self.precision == Precision::Fp32 {
            self.stream.memcpy_htod(bytemuck::cast_slice::<f32, u8>(lbm.raw_ddfs()), &mut self.f.slice_mut(0..n)).map_err(e)?;
        } else {
            self.stream.memcpy_htod(&self.precision.encode_all(lbm.raw_ddfs()), &mut self.f.slice_mut(0..n)).map_err(e)?;
        }
        self.odd = [false; MAX_LEVELS as usize + 1];
        self.at_rest = true;
        self.halo = false;
        Ok(())
    }

    /// Apply a cell edit that [`AmrLbm::change_solids`] made on the host's copy (`lbm`, its
    /// forest current, its DDFs maybe not): `cells` (`id * B + cell`, bit 63 where the cell
    /// turned solid) go to the rest state on the device too, after a settle, and the forest's
    /// obstacle flags, step codes and launch lists are uploaded again. Returns the mass the
    /// leaf cells that turned solid had on the device (density times the volume in cells of
    /// level 0).
    ///
    /// # Errors
    /// CUDA errors.
    pub fn edit_solids<L: Lat>(&mut self, lbm: &AmrLbm<L>, cells: &[u64]) -> Result<f64, SolverError> {
        self.settle()?;
        let mut removed = 0.0;
        if !cells.is_empty() {
            let e = derr("editing the cells");
            let list = self.stream.clone_htod(cells).map_err(&e)?;
            let mut out = self.stream.alloc_zeros::<f64>(1).map_err(&e)?;
            let n = cells.len() as u32;
            let cfg = LaunchConfig { grid_dim: (n.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let mut b = self.stream.launch_builder(&self.edit_k);
            b.arg(&list).arg(&n).arg(&self.level).arg(&self.child).arg(&mut self.f).arg(&mut out);
            // SAFETY: arguments as amr_edit declares them; every listed cell is a cell of an
            // active block below the capacity `f`, `level` and `child` hold; threads past n
            // return.
            unsafe { b.launch(cfg) }.map_err(&e)?;
            removed = self.stream.clone_dtoh(&out).map_err(&e)?[0];
        }
        self.upload_mesh(lbm)?;
        Ok(removed)
    }

    /// `odd` as bits (bit l: level l made an odd number of steps since the last settle), as
    /// the kernels and the graphs' keys take it.
    fn parity_bits(&self) -> u32 {
        self.odd.iter().enumerate().fold(0u32, |m, (l, &o)| m | (u32::from(o) << l))
    }

    /// Bring every level's DDFs into `f` (the buffer the criterion, the adaptation and the
    /// host's copy read): a level that made an odd number of steps since the last settle is
    /// copied back from `post` (at the end of a coarse step only level 0, so this costs one
    /// pass over level 0's blocks, once per adaptation or read, not per step).
    ///
    /// # Errors
    /// CUDA launch errors.
    pub fn settle(&mut self) -> Result<(), SolverError> {
        self.flush()?;
        if self.inplace.is_some() {
            return self.rearrange(false);
        }
        for l in 0..self.odd.len() {
            if !self.odd[l] {
                continue;
            }
            self.odd[l] = false;
            let Some(&(off, count)) = self.levels.get(l).map(|lv| &lv.all) else {
                continue;
            };
            if count == 0 {
                continue;
            }
            let n = count * self.lattice.q() * BLOCK.pow(self.dims as u32);
            let cfg = LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let ids = self.lists.slice(off..off + count);
            let count = count as u32;
            let t0 = self.profile_start()?;
            let mut b = self.stream.launch_builder(&self.copy_k);
            b.arg(&ids).arg(&count).arg(&self.post).arg(&mut self.f);
            // SAFETY: arguments as amr_copy declares them; the list holds IDs below the
            // capacity both buffers hold; threads past count * Q * B return.
            unsafe { b.launch(cfg) }.map_err(derr("launching a block kernel"))?;
            self.profile_end(Kernel::Settle, t0)?;
            self.tick("settle");
        }
        Ok(())
    }

    /// Before an adaptation moves the DDFs: with two buffers a settle; in place the halo form,
    /// [`amr_ep_gather`] alone: each level keeps the arrangement of its parity, and the values
    /// its cells keep in a same-level neighbour's slots move into their own block's halo slots,
    /// so that the transfer kernels read and write a block's cells without its links (which
    /// the adaptation changes). The next step takes it up with the new links (the gather
    /// back). Two passes over the blocks' faces instead of the settle's and the take-up's four
    /// over every DDF (`amr_ep_local` both ways). Already at rest, the data stays plain.
    ///
    /// # Errors
    /// CUDA launch errors.
    pub(super) fn settle_for_mesh(&mut self) -> Result<(), SolverError> {
        if self.inplace.is_none() {
            return self.settle();
        }
        self.flush()?;
        if self.at_rest || self.halo {
            return Ok(());
        }
        let t0 = self.profile_start()?;
        self.ep_pass(false, false)?;
        self.halo = true;
        self.profile_end(Kernel::Settle, t0)?;
        self.tick("settle");
        Ok(())
    }

    /// The layout an adaptation's transfer kernels find the data in (their `form`, kernels:
    /// `amr_form_q`): bit 31 at rest (the plain layout, also with two buffers), else the halo
    /// form at the levels' parities.
    fn form(&self) -> u32 {
        if self.halo {
            self.parity_bits()
        } else {
            1 << 31
        }
    }

    /// In-place storage: bring every level into the plain layout (`back` false: a settle, from
    /// the arrangement of each level's parity or from the halo form; parities reset) or into
    /// the stepping arrangement (`back` true: from the plain layout at parity 0, or from the
    /// halo form at the levels' parities with the links as they are now). `amr_ep_gather` moves
    /// the values between the neighbours' slots and the halo, `amr_ep_local` between the halo
    /// form and the plain layout within each block.
    fn rearrange(&mut self, back: bool) -> Result<(), SolverError> {
        if self.inplace.is_none() {
            return Ok(());
        }
        // Nothing to do: taking up data already stepping, settling data at rest.
        if (back && !self.at_rest && !self.halo) || (!back && self.at_rest) {
            return Ok(());
        }
        let t0 = self.profile_start()?;
        if back {
            if self.at_rest {
                self.ep_pass(true, true)?;
            }
            self.ep_pass(false, true)?;
        } else {
            if !self.halo {
                self.ep_pass(false, false)?;
            }
            self.ep_pass(true, false)?;
            self.odd = [false; MAX_LEVELS as usize + 1];
        }
        self.at_rest = !back;
        self.halo = false;
        self.profile_end(Kernel::Settle, t0)?;
        self.tick(if back { "take up" } else { "settle" });
        Ok(())
    }

    /// One launch over the active blocks at the levels' parities: `amr_ep_local` (`local`) or
    /// `amr_ep_gather`, either way (`back`).
    fn ep_pass(&mut self, local: bool, back: bool) -> Result<(), SolverError> {
        let Some((gather, local_k)) = self.inplace.clone() else {
            return Ok(());
        };
        let count = self.active;
        if count == 0 {
            return Ok(());
        }
        let par = self.parity_bits();
        let b = BLOCK.pow(self.dims as u32);
        let ids = self.id_set.slice(0..count);
        let (count32, back32) = (count as u32, u32::from(back));
        let e = derr("launching a block kernel");
        // SAFETY (both): arguments as amr_ep_gather and amr_ep_local declare them; the ID set
        // holds active IDs below the capacity `f` holds with its halo slots; gather's threads
        // past count * B return, local runs one thread block per ID.
        if local {
            let cfg = LaunchConfig { grid_dim: (count32, 1, 1), block_dim: (b as u32, 1, 1), shared_mem_bytes: 0 };
            let mut k = self.stream.launch_builder(&local_k);
            k.arg(&ids).arg(&self.level).arg(&par).arg(&back32).arg(&mut self.f);
            unsafe { k.launch(cfg) }.map_err(&e)?;
        } else {
            let cells = count * b;
            let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let mut k = self.stream.launch_builder(&gather);
            k.arg(&ids).arg(&count32).arg(&self.level).arg(&self.nbr).arg(&par).arg(&back32).arg(&mut self.f);
            unsafe { k.launch(cfg) }.map_err(&e)?;
        }
        Ok(())
    }

    /// Device bytes of this forest (its DDF buffers as allocated).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        device_bytes(self.lattice, self.precision, self.capacity, self.inplace.is_some())
    }

    /// Whether the DDFs are kept in place (one buffer, Esoteric Pull).
    #[must_use]
    pub fn in_place(&self) -> bool {
        self.inplace.is_some()
    }

    /// With the trace knob: the work launched since the last tick belongs to `op`.
    fn tick(&mut self, op: &'static str) {
        if let Some(t) = self.trace.as_mut() {
            t.tick(&self.stream, op);
        }
    }

    /// With the profile knob: wait for the device and start a kernel's clock.
    fn profile_start(&self) -> Result<Option<std::time::Instant>, SolverError> {
        if self.profile.is_none() {
            return Ok(None);
        }
        self.stream.synchronize().map_err(derr("running the block kernels"))?;
        Ok(Some(std::time::Instant::now()))
    }

    /// With the profile knob: wait for the kernel and add its time.
    fn profile_end(&mut self, k: Kernel, t0: Option<std::time::Instant>) -> Result<(), SolverError> {
        if let (Some(t0), Some(p)) = (t0, self.profile.as_mut()) {
            self.stream.synchronize().map_err(derr("running the block kernels"))?;
            p[k as usize].0 += t0.elapsed().as_secs_f64();
            p[k as usize].1 += 1;
        }
        Ok(())
    }

    /// Copy the forest of a solver (block arrays, links, masks, obstacles, launch lists) to the
    /// device, not its DDFs.
    fn upload_mesh<L: Lat>(&mut self, lbm: &AmrLbm<L>) -> Result<(), SolverError> {
        let forest = lbm.forest();
        let c = forest.capacity();
        if c != self.capacity {
            return Err(SolverError::Backend(format!("the forest holds {c} blocks, the device arrays {}", self.capacity)));
        }
        let solid: Vec<u8> = lbm.solid_flags().iter().map(|&s| u8::from(s)).collect();
        let r = forest.root();
        self.root = [r[0] as i32, r[1] as i32, r[2] as i32];
        let a = forest.arrays();
        self.gap_len = a.gap_len;
        self.active = forest.active();
        self.gap_lo = a.gap_len;
        self.level_start = a.level_start.to_vec();
        self.frozen = a.frozen_levels;
        self.max_level = forest.max_level();
        let s = &self.stream;
        let up = derr("uploading the block forest");
        s.memcpy_htod(bytemuck::cast_slice::<[i32; 3], i32>(a.pos), &mut self.pos).map_err(&up)?;
        s.memcpy_htod(a.parent, &mut self.parent).map_err(&up)?;
        s.memcpy_htod(a.child, &mut self.child).map_err(&up)?;
        s.memcpy_htod(a.nbr, &mut self.nbr).map_err(&up)?;
        s.memcpy_htod(a.cell_mask, &mut self.cmask).map_err(&up)?;
        s.memcpy_htod(&solid, &mut self.solid).map_err(&up)?;
        s.memcpy_htod(a.level, &mut self.level).map_err(&up)?;
        s.memcpy_htod(a.state, &mut self.state).map_err(&up)?;
        s.memcpy_htod(a.nbr_child, &mut self.nbr_child).map_err(&up)?;
        s.memcpy_htod(a.block_mask, &mut self.bmask).map_err(&up)?;
        s.memcpy_htod(a.id_set, &mut self.id_set).map_err(&up)?;
        s.memcpy_htod(a.gap, &mut self.gap).map_err(&up)?;
        s.memset_zeros(&mut self.dirty).map_err(&up)?;
        self.upload_walls(lbm)?;
        let high_water = forest.active_ids().iter().max().map_or(0, |&id| id + 1);
        self.lists_after_upload(high_water)
    }

    /// The solver's interpolated walls to the device (with every upload of the mesh: after an
    /// edit the table changes with the obstacles), compiling the curved kernels first where a
    /// table comes to a run built without them. The captured steps are set aside by the lists
    /// that follow (they hold the old table's address and maybe no walls' pass).
    fn upload_walls<L: Lat>(&mut self, lbm: &AmrLbm<L>) -> Result<(), SolverError> {
        let table = lbm.curved_walls().filter(|w| !w.cells.is_empty());
        if table.is_none() && self.curved.is_none() {
            return Ok(());
        }
        if self.curved.is_none() {
            self.build_curved()?;
        }
        let packed = table.map_or_else(|| NO_WALLS.to_vec(), crate::amr::lbm::CurvedWalls::packed);
        let slice = self.stream.clone_htod(&packed).map_err(derr("uploading the interpolated walls"))?;
        let c = self.curved.as_mut().expect("built above");
        c.table = slice;
        c.level = table.map(|w| usize::from(w.level));
        Ok(())
    }

    /// Compile and load the curved kernels (`AMR_CURVED`) as the others were built: `amr_step`
    /// and `amr_stats` come from them from now on, with `amr_walls`.
    fn build_curved(&mut self) -> Result<(), SolverError> {
        // The deferred restriction is launched with the kernels it was planned with.
        self.flush()?;
        let (arch, extra, fmad) = self.build.clone();
        let ptx = compile_amr_with(self.lattice, self.precision, &arch, self.capacity, self.inplace.is_some(), true, &extra, fmad)
            .map_err(SolverError::Backend)?;
        let module = crate::backend::cuda::Module::load(&self._ctx, ptx, "the block kernels with interpolated walls")?;
        let (step_k, stats_k, walls_k) = (module.get("amr_step")?, module.get("amr_stats")?, module.get("amr_walls")?);
        let table = self.stream.clone_htod(&NO_WALLS).map_err(derr("uploading the interpolated walls"))?;
        self.step_k = step_k;
        self.stats_k = stats_k;
        self.curved = Some(Curved { walls_k, table, level: None, _module: Some(module.keep()) });
        Ok(())
    }

    /// The level of the interpolated walls' pass (a level with curved links), if any.
    fn walls_level(&self) -> Option<usize> {
        self.curved.as_ref().and_then(|c| c.level)
    }

    /// Blocks per level (parents included) of the device's forest, from its ID sets: current
    /// after every upload and adaptation, without copying the mesh back.
    #[must_use]
    pub fn blocks_per_level(&self) -> Vec<usize> {
        self.level_start.windows(2).map(|w| (w[1] - w[0]) as usize).collect()
    }

    /// Statistics of the current state computed on the device (`amr_stats`, over every active
    /// block; no copy of the DDFs comes back): what the host's copy would give, the sums up
    /// to the order of their additions.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn stats(&mut self, forces: bool) -> Result<DeviceStats, SolverError> {
        self.flush()?;
        if self.halo {
            self.rearrange(true)?;
        }
        let e = derr("computing the statistics");
        self.stream.memset_zeros(&mut self.stat).map_err(&e)?;
        let count = self.active;
        if count > 0 {
            let cells = count * BLOCK.pow(self.dims as u32);
            let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // Bit 31: in place but at rest (the plain layout).
            let odd = self.parity_bits() | u32::from(self.inplace.is_some() && self.at_rest) << 31;
            let (count32, forces32) = (count as u32, u32::from(forces));
            let ids = self.id_set.slice(0..count);
            let mut b = self.stream.launch_builder(&self.stats_k);
            b.arg(&ids).arg(&count32).arg(&self.prm).arg(&self.level).arg(&self.child).arg(&self.nbr).arg(&self.cmask);
            b.arg(&self.solid).arg(&self.f).arg(&self.post).arg(&odd).arg(&forces32).arg(&mut self.stat);
            if let Some(c) = &self.curved {
                b.arg(&self.pos).arg(&c.table);
            }
            // SAFETY: arguments as amr_stats declares them (pos and the walls' table with
            // AMR_CURVED, which `curved` says); the ID set holds the active blocks' IDs (below
            // the capacity); threads past count * B only reduce zeros.
            unsafe { b.launch(cfg) }.map_err(&e)?;
        }
        let v = self.stream.clone_dtoh(&self.stat).map_err(&e)?;
        // out[6] holds the complement of the smallest density's order key, out[7] the largest's
        // (both start at 0: no fluid cell read [1, 1]).
        let (lo, hi) = (v[6].to_bits(), v[7].to_bits());
        let key = |k: u64| f64::from(f32::from_bits(if k & 0x8000_0000 != 0 { (k & 0x7fff_ffff) as u32 } else { !(k as u32) }));
        let rho_range = if hi == 0 { [1.0; 2] } else { [key(!lo & 0xffff_ffff), key(hi)] };
        Ok(DeviceStats { mass: v[0], max_u: v[1], rho_range, not_finite: v[2].to_bits() != 0, force: [v[3], v[4], v[5]] })
    }

    /// Blocks the device's arrays hold.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Wait for the launched steps.
    ///
    /// # Errors
    /// CUDA errors (a failed kernel shows here).
    pub fn synchronize(&self) -> Result<(), SolverError> {
        self.stream.synchronize().map_err(derr("running the block kernels"))
    }

    /// The parameter table of a solver's relaxation times, forces and boundaries.
    fn params_of<L: Lat>(lbm: &AmrLbm<L>) -> Vec<f32> {
        let mut p = vec![0.0f32; PRM];
        for l in 0..=MAX_LEVELS {
            p[4 * usize::from(l)] = lbm.tau(l);
            let f = lbm.force(l);
            p[4 * usize::from(l) + 1..4 * usize::from(l) + 4].copy_from_slice(&f);
        }
        let (walls, outflow) = lbm.boundaries();
        for (k, w) in walls.iter().enumerate() {
            p[64 + 3 * k..64 + 3 * k + 3].copy_from_slice(w);
        }
        for (k, o) in outflow.iter().enumerate() {
            p[82 + k] = o.unwrap_or(f32::NAN);
        }
        p
    }
}

/// [`AmrGpu::stats`]: the mass of the fluid leaf cells, their largest speed, whether a
/// density or speed is not finite (then the host's copy finds the cell), the obstacle force.
#[derive(Clone, Copy, Debug)]
pub struct DeviceStats {
    /// Mass of the fluid leaf cells (each weighted by its volume in cells of level 0).
    pub mass: f64,
    /// Largest speed of the fluid leaf cells.
    pub max_u: f64,
    /// Smallest and largest density of the fluid leaf cells.
    pub rho_range: [f64; 2],
    /// A density or speed is not finite.
    pub not_finite: bool,
    /// The momentum exchanged with obstacle cells per coarse step (lbm.rs obstacle_force).
    pub force: [f64; 3],
}

/// `amr_interpolate`'s modes (its `AMR_PROLONG_*`): ghost cells, new children, exposed cells.
const PROLONG_GHOSTS: u32 = 0;
const PROLONG_NEW: u32 = 1;
const PROLONG_EXPOSED: u32 = 2;

/// Operations of `amr_transfer` (its `XF_*`; `New` and `Leaf` run in `amr_interpolate`).
#[derive(Clone, Copy)]
enum Xf {
    Valid = 0,
    Coarsen = 1,
    New = 2,
    Mass = 3,
    Current = 4,
    Leaf = 5,
    LeafMark = 6,
    Parent = 7,
}

/// The operations' names in the trace, by `Xf` value.
const XF_NAMES: [&str; 8] =
    ["xfer valid", "xfer coarsen", "xfer new", "xfer mass", "xfer current", "xfer leaf", "xfer leaf mark", "xfer parent"];

/// Which device list a transfer operation runs over: the launch lists, the transfer's lists,
/// the ID set (every active block, by level).
#[derive(Clone, Copy)]
enum Src {
    Lists,
    X,
    Ids,
}

/// A plan's launches on streams: per launch its lane, per class the streams' last launches
/// (`schedule::assign`).
type Assigned = (Vec<schedule::Lane>, [Vec<Option<usize>>; 2]);

/// The parities and pending restriction a captured coarse step leaves.
#[derive(Clone, Copy)]
struct StepAfter {
    odd: [bool; MAX_LEVELS as usize + 1],
    pending: Option<Op>,
}

#[derive(Clone, Copy)]
enum Kernel {
    Step,
    Interpolate,
    Average,
    Settle,
}
