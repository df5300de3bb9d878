//! The dense CUDA solver: one grid on one GPU (or one slab of a multi-GPU run), with every
//! streaming scheme, lattice and precision; the DDFs stay on the device.

use super::*;
use crate::backend::cpu::{build_mirror, build_mirror_at, Mirror, Slab, SlotIo};
use crate::backend::ghost::GhostLayout;
use crate::bricks::BrickMap;
use crate::checkpoint::Checkpoint;
use crate::domain::{is_solid, kind, kind_of, Domain};
use crate::edit::{CellEdit, EditReport};
use crate::fields::FieldKind;
use crate::frame::{FrameLayout, FrameRanges, FrameRegion, FrameTarget, HostFrame};
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::scene::{LoadedScene, Profile};
use crate::schemes::Scheme;
use crate::solver::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use crate::walls::Links;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Where a [`CudaSolver`] runs: its device and, as one slab of a multi-GPU run
/// ([`crate::backend::cuda::multi`]), its halo axis and offset in the scene's grid.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Placement {
    /// CUDA device ordinal.
    pub ordinal: usize,
    /// 0, or 1 + the axis whose first and last layer are halo copies (not updated).
    pub halo: usize,
    /// Added to the scene's coordinates of inlet faces to get this grid's.
    pub shift: [i32; 3],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GpuInlet {
    axis: i32,
    inward: i32,
    profile: i32,
    u: [f32; 3],
    lo: [i32; 3],
    hi: [i32; 3],
    sponge: i32,
    layer: i32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GpuOutlet {
    axis: i32,
    inward: i32,
    density: f32,
    sponge: i32,
    layer: i32,
    inflow: i32,
}

struct Kernels {
    _module: Arc<CudaModule>,
    lean: CudaFunction,
    boundary: CudaFunction,
    fused: CudaFunction,
    rows: Option<CudaFunction>,
    /// LBM-Ghost: ghost refresh and the block kernel.
    ghost: Option<(CudaFunction, CudaFunction)>,
    swap: CudaFunction,
    fields: CudaFunction,
    fields_box: CudaFunction,
    fields_lattice: CudaFunction,
    derived: CudaFunction,
    frame: CudaFunction,
    frame_box: CudaFunction,
    frame_lattice: CudaFunction,
    stats: CudaFunction,
    gather: CudaFunction,
    scatter: CudaFunction,
    links_refresh: CudaFunction,
}

/// Registers per thread of the stream-collide kernels (lean, boundary, fused).
pub type Registers = (i32, i32, i32);

/// Field planes kept for display and stats: rho, ux, uy, uz and one derived field.
const PLANES: usize = 5;

/// The field planes, locked.
type PlanesGuard<'a> = std::sync::MutexGuard<'a, Option<CudaSlice<f32>>>;

/// The CUDA solver.
pub struct CudaSolver {
    mirror: Box<dyn Mirror>,
    dev: DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    cfg: KernelConfig,
    k: Kernels,
    f: Vec<CudaSlice<u8>>,
    cur: usize,
    t: u64,
    params: Params,
    flags: CudaSlice<u8>,
    /// The rows and bricks the step runs, in launch groups: one for a whole grid; for a
    /// multi-GPU slab, the layers next to the cut first, then the interior.
    lists: Vec<Lists>,
    dispatch: Dispatch,
    /// The device's ordinal.
    ordinal: usize,
    /// Where the grid's cells lie in the scene's grid, minus one on a halo axis (moves inlet
    /// faces into this grid's coordinates).
    shift: [i32; 3],
    walls: CudaSlice<f32>,
    inlets: CudaSlice<u8>,
    outlets: CudaSlice<u8>,
    forces: CudaSlice<f64>,
    planes: std::sync::Mutex<Option<CudaSlice<f32>>>,
    /// The time step whose fields the planes hold (`u64::MAX`: none, or the state changed).
    planes_at: std::sync::atomic::AtomicU64,
    /// Whether the planes' solid cells hold what the fields kernel writes there (the step
    /// kernels store fluid cells only).
    planes_solid_ok: std::sync::atomic::AtomicBool,
    /// The last step of every `step` call stores the fields it starts from (see
    /// [`Solver::fuse_frame_fields`]).
    fuse_fields: bool,
    /// A frame written for host memory passes through here (kept between frames).
    frame_dev: Option<CudaSlice<f32>>,
    /// The frame kernel's range keys and non-finite count.
    frame_range: Option<CudaSlice<u32>>,
    /// LBM-Ghost: per ghost cell, its slot and its source cell's slot (direction 0).
    ghost_dst: CudaSlice<u64>,
    ghost_src: CudaSlice<u64>,
    n_ghost: u32,
    bytes: u64,
    /// Interpolated wall links (host copy, [`crate::walls::Links`]), packed on the device, and
    /// each link's f*_k(x).
    links: Links,
    lk: CudaSlice<u32>,
    lsave: CudaSlice<f32>,
}

impl CudaSolver {
    /// Build the CUDA solver a scene describes.
    ///
    /// # Errors
    /// No device, NVRTC missing or failing, not enough GPU memory (the message says how much is
    /// needed and what to change), or a scheme the GPU does not run.
    pub fn from_scene(ls: &LoadedScene) -> Result<CudaSolver, SolverError> {
        let s = &ls.scene.solver;
        // Check memory before voxelising: a grid far too large must fail at once.
        let dev = probe().map_err(SolverError::Backend)?;
        check_memory(ls.derived.size, ls.derived.lattice, s.scheme, s.precision, s.ghost_block, &dev)?;
        let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
        let params = Params::from_scene(ls, &dom);
        CudaSolver::with_ghost_block(dom, s.scheme, s.precision, params, s.ghost_block, |p| crate::domain::initial_state(ls, p))
    }

    /// Build on a domain with an initial state.
    ///
    /// # Errors
    /// As [`CudaSolver::from_scene`].
    pub fn new(
        dom: Domain,
        scheme: Scheme,
        precision: Precision,
        params: Params,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<CudaSolver, SolverError> {
        CudaSolver::with_ghost_block(dom, scheme, precision, params, 16, init)
    }

    /// [`CudaSolver::new`] with the LBM-Ghost block edge (`solver.ghost_block`).
    ///
    /// # Errors
    /// As [`CudaSolver::from_scene`]; a ghost block over 32 cells (a CUDA block holds one
    /// thread per column of it).
    pub fn with_ghost_block(
        dom: Domain,
        scheme: Scheme,
        precision: Precision,
        params: Params,
        ghost_block: usize,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<CudaSolver, SolverError> {
        CudaSolver::on_device(dom, scheme, precision, params, ghost_block, Placement::default(), init)
    }

    /// [`CudaSolver::with_ghost_block`] on a chosen device, possibly as a multi-GPU slab.
    pub(crate) fn on_device(
        dom: Domain,
        scheme: Scheme,
        precision: Precision,
        params: Params,
        ghost_block: usize,
        place: Placement,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Result<CudaSolver, SolverError> {
        let ghost = scheme == Scheme::Ghost;
        if ghost && !(2..=32).contains(&ghost_block) {
            return Err(SolverError::Backend(format!(
                "solver.ghost_block = {ghost_block}: the CUDA backend runs LBM-Ghost blocks of 2 to 32 cells (one thread per column of a block); the default is 16"
            )));
        }
        // Each stage of the set-up is timed (ESOFLOW_LOG=sim_core=info prints them).
        let mut stage = Stages::new();
        probe().map_err(SolverError::Backend)?;
        let ctx = CudaContext::new(place.ordinal)
            .map_err(|e| SolverError::Backend(format!("CUDA error while opening device {}: {e:?}", place.ordinal)))?;
        let dev = device_info(&ctx).map_err(SolverError::Backend)?;
        let stream = ctx.default_stream();
        check_memory(dom.n, dom.lattice, scheme, precision, ghost_block, &dev)?;
        let cells = dom.cells();
        let copies = if scheme == Scheme::OneStepPull { 2 } else { 1 };
        // Whole plain-fluid rows go to the row kernel when they hold at least half the cells;
        // the other rows are cut into one-row bricks. Otherwise the cost model picks the bricks.
        let row_ids = if !ghost && rows_wanted() && rows_fit(dom.n, dom.lattice, precision) { plain_rows(&dom) } else { Vec::new() };
        let rows = !row_ids.is_empty() && 2 * row_ids.len() * dom.n[0] >= cells;
        stage.done("context, memory check, plain rows");
        let cfg = KernelConfig {
            lattice: dom.lattice,
            scheme,
            precision,
            collision: params.collide.kind,
            force: params.collide.has_force(),
            n: dom.n,
            brick: if rows { BRICK_SHAPES[0].0 } else { choose_brick(&dom) },
            rows,
            ghost_block,
            boxed: false,
            halo: place.halo,
            slip: dom.flags.iter().any(|&f| kind_of(f) == kind::SLIP),
        };
        stage.done("brick shape");
        // NVRTC compiles on a thread of its own while the host builds and uploads the initial
        // state (on a 512^3 grid each takes seconds).
        let compiling = {
            let (cfg, arch) = (cfg.clone(), arch_of(&dev));
            std::thread::spawn(move || compile(&cfg, &arch))
        };
        // LBM-Ghost runs its own kernels over its blocks, not the bricks.
        let groups = if ghost { Vec::new() } else { launch_groups(&dom, cfg.brick, rows, place.halo) };
        stage.done("launch lists");
        let (ghost_dst, ghost_src) =
            if ghost { GhostLayout::for_domain(&dom, ghost_block).device_pairs() } else { (Vec::new(), Vec::new()) };
        let ddf_bytes = cfg.slots() * precision.bytes();
        // The host mirror writes the initial state; a slab's inlet cells take their profile at
        // their place in the scene's grid.
        let slab = Slab { off: place.shift.map(|s| (-(s as isize)) as usize), halo: place.halo };
        let mut mirror = build_mirror_at(dom, scheme, precision, params.clone(), ghost_block, slab, init);
        stage.done("initial state (host)");
        let mut f = Vec::new();
        {
            let (bufs, _, _) = mirror.raw();
            for b in bufs {
                f.push(stream.clone_htod(&*b).map_err(derr("uploading the initial state"))?);
            }
        }
        mirror.release();
        stage.done("initial state upload");
        let ptx = compiling
            .join()
            .map_err(|_| SolverError::Backend("the kernel compile thread panicked".into()))?
            .map_err(SolverError::Backend)?;
        let k = kernels_of(&ctx, ptx, &cfg)?;
        stage.done("kernels (NVRTC, beside the initial state)");
        let d = mirror.domain();
        let flags = stream.clone_htod(&d.flags).map_err(derr("uploading flags"))?;
        let lists = groups.iter().map(|(r, l, b)| Lists::upload(&stream, r, l, b)).collect::<Result<Vec<_>, _>>()?;
        let n_ghost = ghost_dst.len();
        let ghost_dst =
            stream.clone_htod(&if ghost_dst.is_empty() { vec![0u64] } else { ghost_dst }).map_err(derr("uploading ghost pairs"))?;
        let ghost_src =
            stream.clone_htod(&if ghost_src.is_empty() { vec![0u64] } else { ghost_src }).map_err(derr("uploading ghost pairs"))?;
        let forces = stream.alloc_zeros::<f64>(48).map_err(derr("allocating forces"))?;
        let walls = stream.alloc_zeros::<f32>(3 * 16).map_err(derr("allocating tables"))?;
        let inlets = stream.alloc_zeros::<u8>(16 * std::mem::size_of::<GpuInlet>()).map_err(derr("allocating tables"))?;
        let outlets = stream.alloc_zeros::<u8>(16 * std::mem::size_of::<GpuOutlet>()).map_err(derr("allocating tables"))?;
        let lk = stream.clone_htod(&Links::default().packed()).map_err(derr("uploading wall links"))?;
        let lsave = stream.alloc_zeros::<f32>(1).map_err(derr("allocating wall links"))?;
        let mut s = CudaSolver {
            mirror,
            dev,
            ctx,
            stream,
            cfg,
            k,
            f,
            cur: 0,
            t: 0,
            params: params.clone(),
            flags,
            lists,
            dispatch: Dispatch::Fused,
            ordinal: place.ordinal,
            shift: place.shift,
            walls,
            inlets,
            outlets,
            forces,
            planes: std::sync::Mutex::new(None),
            planes_at: std::sync::atomic::AtomicU64::new(u64::MAX),
            planes_solid_ok: std::sync::atomic::AtomicBool::new(false),
            fuse_fields: false,
            frame_dev: None,
            frame_range: None,
            ghost_dst,
            ghost_src,
            n_ghost: n_ghost as u32,
            bytes: (ddf_bytes * copies + cells + 16 * n_ghost) as u64,
            links: Links::default(),
            lk,
            lsave,
        };
        s.upload_tables()?;
        s.relink()?;
        stage.done("flags, lists and tables upload");
        Ok(s)
    }

    /// Build the interpolated wall links of the grid's updated cells (a slab's halo layers are
    /// not), upload them and read every link's f*_k(x) from the state (after a start, a restore
    /// or an edit). LBM-Ghost keeps halfway walls.
    fn relink(&mut self) -> Result<(), SolverError> {
        self.links = if self.cfg.scheme == Scheme::Ghost { Links::default() } else { Links::of_grid(self.mirror.domain(), self.cfg.halo) };
        self.lk = self.stream.clone_htod(&self.links.packed()).map_err(derr("uploading wall links"))?;
        self.lsave = self.stream.alloc_zeros::<f32>(self.links.len().max(1)).map_err(derr("allocating wall links"))?;
        let cells = self.links.cells.len();
        if cells > 0 {
            let mut b = self.stream.launch_builder(&self.k.links_refresh);
            b.arg(&self.f[self.cur]).arg(&self.flags).arg(&self.lk).arg(&mut self.lsave).arg(&self.t);
            // SAFETY: arguments match links_refresh; one thread per cell with links.
            unsafe { b.launch(threads(cells)) }.map_err(derr("launching links_refresh"))?;
        }
        Ok(())
    }

    fn upload_tables(&mut self) -> Result<(), SolverError> {
        let d = self.mirror.domain();
        let mut walls = vec![0.0f32; 48];
        for (i, w) in self.params.walls.iter().enumerate().take(16) {
            walls[3 * i..3 * i + 3].copy_from_slice(w);
        }
        let inl = gpu_inlets(d, self.shift);
        let out = gpu_outlets(d, self.shift);
        self.stream.memcpy_htod(&walls, &mut self.walls).map_err(derr("uploading walls"))?;
        upload_pod(&self.stream, &inl, &mut self.inlets)?;
        upload_pod(&self.stream, &out, &mut self.outlets)
    }
}

/// The inlets of a domain as the kernels read them, their open faces moved by `shift` cells
/// (a subgrid's working box sees the grid shifted by `1 - origin`).
pub(crate) fn gpu_inlets(d: &Domain, shift: [i32; 3]) -> Vec<GpuInlet> {
    d.inlets
        .iter()
        .map(|b| GpuInlet {
            axis: b.axis as i32,
            inward: b.inward,
            profile: i32::from(b.profile == Profile::Parabolic),
            u: b.velocity,
            lo: [0, 1, 2].map(|a| b.open[a].0 as i32 + shift[a]),
            hi: [0, 1, 2].map(|a| b.open[a].1 as i32 + shift[a]),
            sponge: b.sponge as i32,
            layer: b.layer as i32 + shift[b.axis],
        })
        .collect()
}

/// The outlets of a domain as the kernels read them.
pub(crate) fn gpu_outlets(d: &Domain, shift: [i32; 3]) -> Vec<GpuOutlet> {
    d.outlets
        .iter()
        .map(|b| GpuOutlet {
            axis: b.axis as i32,
            inward: b.inward,
            density: b.density,
            sponge: b.sponge as i32,
            layer: b.layer as i32 + shift[b.axis],
            inflow: b.inflow.map_or(-1, |i| i as i32),
        })
        .collect()
}

impl CudaSolver {
    /// Registers per thread of the lean, boundary and fused kernels.
    #[must_use]
    pub fn registers(&self) -> Registers {
        use cudarc::driver::sys::CUfunction_attribute as A;
        let r = |f: &CudaFunction| f.get_attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS).unwrap_or(-1);
        (r(&self.k.lean), r(&self.k.boundary), r(&self.k.fused))
    }

    /// Choose how brick classes are dispatched (default [`Dispatch::Fused`], the fastest in
    /// the bench; the others are there to measure what disaggregation gains).
    pub fn set_dispatch(&mut self, d: Dispatch) {
        self.dispatch = d;
    }

    /// Rows run by the whole-row kernel.
    #[must_use]
    pub fn row_count(&self) -> u32 {
        self.lists.iter().map(|l| l.n_rows).sum()
    }

    /// The brick shape this solver runs (see [`choose_brick`]).
    #[must_use]
    pub fn brick(&self) -> [usize; 3] {
        self.cfg.brick
    }

    /// Bricks run by the lean and the boundary kernel.
    #[must_use]
    pub fn brick_counts(&self) -> (u32, u32) {
        (self.lists.iter().map(|l| l.n_lean).sum(), self.lists.iter().map(|l| l.n_boundary).sum())
    }

    /// One time step; with `fields`, the step kernels also store the fields of the state it
    /// starts from into the field planes (where this scheme's kernels can: not LBM-Ghost).
    fn one_step(&mut self, fields: bool) -> Result<(), SolverError> {
        let Some(mom) = self.begin_step(fields)? else { return Ok(()) };
        for g in 0..self.lists.len() {
            self.launch_group(g, mom)?;
        }
        self.end_step(mom != 0)
    }

    /// Start a step: clear the forces and, with `fields`, ready the field planes (returns their
    /// address, or 0). LBM-Ghost runs its whole step here (returns `None`).
    pub(crate) fn begin_step(&mut self, fields: bool) -> Result<Option<u64>, SolverError> {
        let t = self.t;
        let fields = fields && self.k.ghost.is_none();
        let mom: u64 = if fields { self.planes_for_step()? } else { 0 };
        let p = self.params.collide;
        let (fx, fy, fz) = (p.force[0], p.force[1], p.force[2]);
        if !self.mirror.domain().obstacles.is_empty() {
            self.stream.memset_zeros(&mut self.forces).map_err(derr("clearing forces"))?;
        }
        if let Some((refresh, blocks)) = &self.k.ghost {
            if self.n_ghost > 0 {
                let mut b = self.stream.launch_builder(refresh);
                b.arg(&self.f[0]).arg(&self.ghost_dst).arg(&self.ghost_src).arg(&self.n_ghost);
                // SAFETY: arguments match the kernel; the pair lists hold n_ghost entries.
                unsafe { b.launch(threads(self.n_ghost as usize)) }.map_err(derr("launching ghost_refresh"))?;
            }
            let (gb, nb, _, _) = self.cfg.ghost_geometry();
            let cfg = LaunchConfig {
                grid_dim: ((nb[0] * nb[1] * nb[2]) as u32, 1, 1),
                block_dim: ((gb[0] * gb[1]) as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(blocks);
            b.arg(&self.f[0]).arg(&self.flags).arg(&t).arg(&p.tau).arg(&p.cs).arg(&fx).arg(&fy).arg(&fz);
            b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.forces);
            // SAFETY: arguments match the kernel; the state buffer holds the padded blocks.
            unsafe { b.launch(cfg) }.map_err(derr("launching stream_collide_ghost"))?;
            self.t += 1;
            return Ok(None);
        }
        Ok(Some(mom))
    }

    /// Launch group `g` of this step's rows and bricks (see [`launch_groups`]).
    pub(crate) fn launch_group(&mut self, g: usize, mom: u64) -> Result<(), SolverError> {
        let t = self.t;
        let p = self.params.collide;
        let (fx, fy, fz) = (p.force[0], p.force[1], p.force[2]);
        let (src, dst) = if self.f.len() == 2 { (self.cur, 1 - self.cur) } else { (0, 0) };
        let l = &self.lists[g];
        let block = (self.cfg.brick.iter().product::<usize>() as u32, 1, 1);
        let grid = |n: u32| LaunchConfig { grid_dim: (n, 1, 1), block_dim: block, shared_mem_bytes: 0 };
        let (heavy, bricks, n_bricks) = match self.dispatch {
            Dispatch::Split => (&self.k.boundary, &l.boundary, l.n_boundary),
            Dispatch::Fused => (&self.k.fused, &l.all, l.n_all),
            Dispatch::BoundaryOnly => (&self.k.boundary, &l.all, l.n_all),
        };
        if l.n_rows > 0 {
            let per_thread = if row_pairs(&self.cfg) { 2 } else { 1 };
            let w = self.cfg.n[0].div_ceil(per_thread).div_ceil(32) as u32 * 32;
            let cfg = LaunchConfig { grid_dim: (l.n_rows, 1, 1), block_dim: (w, 1, 1), shared_mem_bytes: 0 };
            let rows = self.k.rows.as_ref().ok_or_else(|| SolverError::Backend("row kernel missing".into()))?;
            let mut b = self.stream.launch_builder(rows);
            b.arg(&self.f[src]).arg(&self.f[dst]).arg(&l.rows).arg(&t).arg(&p.tau).arg(&p.cs).arg(&fx).arg(&fy).arg(&fz).arg(&mom);
            // SAFETY: arguments match the kernel's signature; buffers are sized for the grid.
            unsafe { b.launch(cfg) }.map_err(derr("launching stream_collide_rows"))?;
        }
        if self.dispatch == Dispatch::Split && l.n_lean > 0 {
            let mut b = self.stream.launch_builder(&self.k.lean);
            b.arg(&self.f[src]).arg(&self.f[dst]).arg(&l.lean).arg(&t).arg(&p.tau).arg(&p.cs).arg(&fx).arg(&fy).arg(&fz).arg(&mom);
            // SAFETY: arguments match the kernel's signature; buffers are sized for the grid.
            unsafe { b.launch(grid(l.n_lean)) }.map_err(derr("launching stream_collide_lean"))?;
        }
        if n_bricks > 0 {
            let mut b = self.stream.launch_builder(heavy);
            b.arg(&self.f[src]).arg(&self.f[dst]).arg(bricks).arg(&self.flags).arg(&t).arg(&p.tau).arg(&p.cs).arg(&fx).arg(&fy).arg(&fz);
            b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.forces).arg(&self.lk).arg(&mut self.lsave).arg(&mom);
            // SAFETY: as above (`mom` is null or the field planes, 4 x cells floats).
            unsafe { b.launch(grid(n_bricks)) }.map_err(derr("launching stream_collide"))?;
        }
        Ok(())
    }

    /// Finish a step after its launch groups (`fields`: the planes now hold its start's fields).
    pub(crate) fn end_step(&mut self, fields: bool) -> Result<(), SolverError> {
        let t = self.t;
        if self.cfg.scheme == Scheme::Swap {
            let cells = self.mirror.domain().cells() as u32;
            let cfg = threads(cells as usize);
            let mut b = self.stream.launch_builder(&self.k.swap);
            b.arg(&self.f[0]).arg(&self.flags);
            // SAFETY: as above.
            unsafe { b.launch(cfg) }.map_err(derr("launching swap_stream"))?;
        }
        if self.f.len() == 2 {
            self.cur = 1 - self.cur;
        }
        if fields {
            self.planes_at.store(t, std::sync::atomic::Ordering::Relaxed);
        } else {
            self.planes_stale();
        }
        self.t += 1;
        Ok(())
    }

    /// The field planes' device address for a step that stores the fields, with solid cells
    /// filled first (by the fields kernel) where they are not yet.
    fn planes_for_step(&mut self) -> Result<u64, SolverError> {
        use cudarc::driver::DevicePtr;
        use std::sync::atomic::Ordering;
        if !self.planes_solid_ok.load(Ordering::Relaxed) {
            drop(self.run_fields()?);
            self.planes_solid_ok.store(true, Ordering::Relaxed);
        }
        let g = self.planes.lock().map_err(|_| SolverError::Backend("field buffer lock poisoned".into()))?;
        let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let (ptr, _sync) = planes.device_ptr(&self.stream);
        Ok(ptr)
    }

    /// The state changed without a step: the field planes no longer show it.
    fn planes_stale(&self) {
        self.planes_at.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
    }

    /// Field planes of the current state, or (with [`Solver::fuse_frame_fields`] on) of the
    /// state one step before, which the last step stored: the planes and how many steps they
    /// lag [`Solver::time_step`]. Runs the fields kernel only when the planes hold neither.
    fn current_planes(&self) -> Result<(PlanesGuard<'_>, u64), SolverError> {
        if let Some(ok) = self.fresh_planes()? {
            return Ok(ok);
        }
        Ok((self.run_fields()?, 0))
    }

    /// The field planes if they hold the current state (lag 0) or, with fused fields, the state
    /// one step before (lag 1).
    fn fresh_planes(&self) -> Result<Option<(PlanesGuard<'_>, u64)>, SolverError> {
        let at = self.planes_at.load(std::sync::atomic::Ordering::Relaxed);
        let lag = if at == self.t {
            Some(0)
        } else if self.fuse_fields && self.t > 0 && at == self.t - 1 {
            Some(1)
        } else {
            None
        };
        if let Some(lag) = lag {
            let g = self.planes.lock().map_err(|_| SolverError::Backend("field buffer lock poisoned".into()))?;
            if g.is_some() {
                return Ok(Some((g, lag)));
            }
        }
        Ok(None)
    }

    /// The field planes with density and velocity of the current state at the points of the
    /// lattice of every `stride`-th cell and their six neighbours, and in the slabs around
    /// `planes` (see [`CudaSolver::slab_planes`]); `planes_at` does not change.
    fn lattice_planes(&self, stride: usize, planes: [Option<usize>; 3]) -> Result<PlanesGuard<'_>, SolverError> {
        let g = self.slab_planes(planes)?;
        let out = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let (s, m) = lattice_dims(self.mirror.domain().n, stride);
        let p = self.params.collide;
        let mut b = self.stream.launch_builder(&self.k.fields_lattice);
        b.arg(&self.f[self.cur]).arg(&self.flags).arg(&self.t).arg(&p.force[0]).arg(&p.force[1]).arg(&p.force[2]);
        b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.lk).arg(&self.lsave).arg(out);
        b.arg(&s).arg(&m[0]).arg(&m[1]).arg(&m[2]);
        // SAFETY: arguments match fields_lattice; its cells lie in the grid (wrapped), the
        // planes hold PLANES x cells floats.
        unsafe { b.launch(threads(7 * m.iter().map(|&e| e as usize).product::<usize>())) }.map_err(derr("launching fields_lattice"))?;
        drop(b);
        Ok(g)
    }

    /// The field planes with density and velocity of the current state in the slabs three
    /// cells thick around `planes` (what the frame's cells on them and their derivatives
    /// read); the rest of the planes is left as it is, so `planes_at` does not change.
    fn slab_planes(&self, planes: [Option<usize>; 3]) -> Result<PlanesGuard<'_>, SolverError> {
        let d = self.mirror.domain();
        let n = d.n;
        let mut g = self.planes.lock().map_err(|_| SolverError::Backend("field buffer lock poisoned".into()))?;
        if g.is_none() {
            *g = Some(self.stream.alloc_zeros::<f32>(PLANES * d.cells()).map_err(derr("allocating field planes"))?);
        }
        let out = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let p = self.params.collide;
        for (a, i) in planes.iter().enumerate().filter_map(|(a, i)| i.map(|i| (a, i))) {
            let (origin, ext) = slab_box(n, a, i, 1);
            let mut b = self.stream.launch_builder(&self.k.fields_box);
            b.arg(&self.f[self.cur]).arg(&self.flags).arg(&self.t).arg(&p.force[0]).arg(&p.force[1]).arg(&p.force[2]);
            b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.lk).arg(&self.lsave).arg(out);
            b.arg(&origin[0]).arg(&origin[1]).arg(&origin[2]).arg(&ext[0]).arg(&ext[1]).arg(&ext[2]);
            // SAFETY: arguments match fields_box; the box lies in the grid (wrapped), the planes
            // hold PLANES x cells floats.
            unsafe { b.launch(threads(ext.iter().map(|&e| e as usize).product())) }.map_err(derr("launching fields_box"))?;
        }
        Ok(g)
    }

    /// Run the fields kernel into the field planes (rho, ux, uy, uz; a fifth for a derived
    /// field) and return them.
    fn run_fields(&self) -> Result<std::sync::MutexGuard<'_, Option<CudaSlice<f32>>>, SolverError> {
        let cells = self.mirror.domain().cells();
        let mut g = self.planes.lock().map_err(|_| SolverError::Backend("field buffer lock poisoned".into()))?;
        if g.is_none() {
            *g = Some(self.stream.alloc_zeros::<f32>(PLANES * cells).map_err(derr("allocating field planes"))?);
        }
        let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let p = self.params.collide;
        let cfg = threads(cells);
        let mut b = self.stream.launch_builder(&self.k.fields);
        b.arg(&self.f[self.cur]).arg(&self.flags).arg(&self.t).arg(&p.force[0]).arg(&p.force[1]).arg(&p.force[2]);
        b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.lk).arg(&self.lsave).arg(planes);
        // SAFETY: arguments match the kernel; planes hold PLANES x cells floats.
        unsafe { b.launch(cfg) }.map_err(derr("launching fields"))?;
        drop(b);
        self.planes_at.store(self.t, std::sync::atomic::Ordering::Relaxed);
        Ok(g)
    }

    fn stats_inner(&self) -> Result<Stats, SolverError> {
        let cells = self.mirror.domain().cells();
        let (g, lag) = self.current_planes()?;
        let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let mut mass = self.stream.alloc_zeros::<f64>(1).map_err(derr("allocating"))?;
        let mut maxu = self.stream.alloc_zeros::<u32>(1).map_err(derr("allocating"))?;
        let mut bad = self.stream.clone_htod(&[u64::MAX]).map_err(derr("allocating"))?;
        let mut rho = self.stream.clone_htod(&RHO_KEYS_START).map_err(derr("allocating"))?;
        let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(&self.k.stats);
        b.arg(planes).arg(&self.flags).arg(&mut mass).arg(&mut maxu).arg(&mut bad).arg(&mut rho);
        // SAFETY: arguments match the kernel.
        unsafe { b.launch(cfg) }.map_err(derr("launching stats"))?;
        let m = self.stream.clone_dtoh(&mass).map_err(derr("reading stats"))?[0];
        let u = f32::from_bits(self.stream.clone_dtoh(&maxu).map_err(derr("reading stats"))?[0]);
        let first_bad = self.stream.clone_dtoh(&bad).map_err(derr("reading stats"))?[0];
        let rho = rho_range_of_keys(&self.stream.clone_dtoh(&rho).map_err(derr("reading stats"))?);
        let fr = self.stream.clone_dtoh(&self.forces).map_err(derr("reading forces"))?;
        let nobs = self.mirror.domain().obstacles.len();
        let blown = first_bad != u64::MAX;
        Ok(Stats {
            step: self.t - lag,
            mass: if blown { f64::NAN } else { m },
            max_u: if blown { f64::NAN } else { f64::from(u) },
            rho_range: if blown { [f64::NAN; 2] } else { rho },
            forces: (1..=nobs).map(|k| [fr[3 * k], fr[3 * k + 1], fr[3 * k + 2]]).collect(),
            first_bad_cell: blown.then(|| self.mirror.domain().coords(first_bad as usize)),
        })
    }
}

impl CudaSolver {
    /// The stream the solver's work runs on (tests and device-memory targets).
    #[must_use]
    pub fn stream(&self) -> Arc<CudaStream> {
        Arc::clone(&self.stream)
    }

    /// The frame kernel into `out` (device address of at least `layout.floats()` floats).
    /// With `sync`, the stream waits for the renderer before writing and signals it after.
    fn frame_into(
        &mut self,
        kinds: &[FieldKind],
        layout: &FrameLayout,
        out: u64,
        sync: Option<crate::frame::FrameSync<'_>>,
    ) -> Result<FrameRanges, SolverError> {
        if self.frame_range.is_none() {
            self.frame_range = Some(self.stream.alloc_zeros::<u32>(FRAME_RANGE_WORDS).map_err(derr("allocating frame ranges"))?);
        }
        let range = self.frame_range.as_mut().ok_or_else(|| SolverError::Backend("no frame range buffer".into()))?;
        self.stream.memcpy_htod(&FRAME_RANGE_INIT, range).map_err(derr("clearing frame ranges"))?;
        let mut range = self.frame_range.take().ok_or_else(|| SolverError::Backend("no frame range buffer".into()))?;
        let mut lag = 0;
        let launched = (|| {
            let (g, l) = match layout.region {
                FrameRegion::All => self.current_planes()?,
                FrameRegion::Planes(k) => match self.fresh_planes()? {
                    Some(ok) => ok,
                    None => (self.slab_planes(k)?, 0),
                },
                FrameRegion::Sampled { stride, planes } => match self.fresh_planes()? {
                    Some(ok) => ok,
                    None => (self.lattice_planes(stride, planes)?, 0),
                },
            };
            lag = l;
            let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
            if let Some(s) = sync {
                if s.read_value > 0 {
                    crate::backend::cuda::interop::SharedSemaphore::of(s.read)?.wait(&self.stream, s.read_value)?;
                }
            }
            let fk = FrameKernels { frame: &self.k.frame, frame_box: &self.k.frame_box, frame_lattice: &self.k.frame_lattice };
            launch_frame(&self.stream, &fk, planes, &self.flags, self.mirror.domain().n, kinds, layout, out, &mut range)?;
            if let Some(s) = sync {
                crate::backend::cuda::interop::SharedSemaphore::of(s.written)?.signal(&self.stream, s.written_value)?;
            }
            self.stream.clone_dtoh(&range).map_err(derr("reading frame ranges"))
        })();
        self.frame_range = Some(range);
        Ok(frame_ranges(&launched?, kinds.len(), lag))
    }

    /// The raw device address of the frame staging buffer, grown to `floats`.
    fn frame_staging(&mut self, floats: usize) -> Result<u64, SolverError> {
        use cudarc::driver::DevicePtr;
        if self.frame_dev.as_ref().is_none_or(|b| b.len() < floats) {
            self.frame_dev = None;
            self.frame_dev = Some(self.stream.alloc_zeros::<f32>(floats).map_err(derr("allocating the frame buffer"))?);
        }
        let b = self.frame_dev.as_ref().ok_or_else(|| SolverError::Backend("no frame buffer".into()))?;
        let (ptr, _sync) = b.device_ptr(&self.stream);
        Ok(ptr)
    }
}

/// Refuse a grid that does not fit in free GPU memory, saying how much it needs and what to change.
fn check_memory(
    n: [usize; 3],
    lattice: Lattice,
    scheme: Scheme,
    precision: Precision,
    ghost_block: usize,
    dev: &DeviceInfo,
) -> Result<(), SolverError> {
    let cells = n[0] * n[1] * n[2];
    // DDFs (every copy, ghost layers too), flags, field planes.
    let per = scheme.bytes_stored(lattice, precision, ghost_block) + 4.0 * PLANES as f64;
    let need = cells as f64 * per;
    if need > dev.mem.0 as f64 {
        return Err(SolverError::Backend(format!(
            "out of GPU memory: {cells} cells x {per:.0} B/cell = {:.2} GB needed, but {} has {:.2} GB free; solver.precision = \"fp16s\" (half the DDF memory), an in-place scheme or a smaller domain.size fits in less",
            need / 1e9,
            dev.name,
            dev.mem.0 as f64 / 1e9
        )));
    }
    Ok(())
}

fn load_kernels(ctx: &Arc<CudaContext>, cfg: &KernelConfig, dev: &DeviceInfo) -> Result<Kernels, SolverError> {
    let ptx = compile(cfg, &arch_of(dev)).map_err(SolverError::Backend)?;
    kernels_of(ctx, ptx, cfg)
}

/// Load a compiled module and look up its kernels.
fn kernels_of(ctx: &Arc<CudaContext>, ptx: cudarc::nvrtc::Ptx, cfg: &KernelConfig) -> Result<Kernels, SolverError> {
    let module = Module::load(ctx, ptx, "the kernel module")?;
    let get = |n: &str| module.get(n);
    Ok(Kernels {
        lean: get("stream_collide_lean")?,
        boundary: get("stream_collide_boundary")?,
        fused: get("stream_collide_fused")?,
        rows: if cfg.rows { Some(get("stream_collide_rows")?) } else { None },
        ghost: if cfg.scheme == Scheme::Ghost { Some((get("ghost_refresh")?, get("stream_collide_ghost")?)) } else { None },
        swap: get("swap_stream")?,
        fields: get("fields")?,
        fields_box: get("fields_box")?,
        fields_lattice: get("fields_lattice")?,
        derived: get("derived")?,
        frame: get("frame_fields")?,
        frame_box: get("frame_box")?,
        frame_lattice: get("frame_lattice")?,
        stats: get("stats")?,
        gather: get("gather_slots")?,
        scatter: get("scatter_slots")?,
        links_refresh: get("links_refresh")?,
        _module: module.keep(),
    })
}

impl Solver for CudaSolver {
    fn info(&self) -> SolverInfo {
        let l = self.cfg.lattice;
        SolverInfo {
            backend: "cuda",
            device: format!("{} (sm_{}{}, {:.1} GB)", self.dev.name, self.dev.cc.0, self.dev.cc.1, self.dev.mem.1 as f64 / 1e9),
            lattice: l,
            scheme: self.cfg.scheme,
            precision: self.cfg.precision,
            size: self.cfg.n,
            bytes_per_cell: self.cfg.scheme.bytes_stored(l, self.cfg.precision, self.cfg.ghost_block),
            bytes_moved_per_cell: self.cfg.scheme.bytes_moved(l, self.cfg.precision, self.cfg.ghost_block),
            memory_bytes: self.bytes,
        }
    }
    fn domain(&self) -> &Domain {
        self.mirror.domain()
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        for i in 0..steps {
            self.one_step(self.fuse_fields && i + 1 == steps)?;
        }
        Ok(())
    }
    fn fuse_frame_fields(&mut self, on: bool) {
        self.fuse_fields = on;
    }
    fn fields(&self) -> Fields {
        let d = self.mirror.domain();
        let cells = d.cells();
        let mut out = Fields {
            size: d.n,
            rho: vec![f32::NAN; cells],
            u: vec![[f32::NAN; 3]; cells],
            solid: d.flags.iter().map(|&f| is_solid(f)).collect(),
        };
        let host = match self.run_fields().and_then(|g| {
            let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
            self.stream.clone_dtoh(&planes.slice(0..4 * cells)).map_err(derr("reading fields"))
        }) {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("error: {e}");
                return out;
            }
        };
        out.rho.copy_from_slice(&host[..cells]);
        for i in 0..cells {
            out.u[i] = [host[cells + i], host[2 * cells + i], host[3 * cells + i]];
        }
        out
    }
    fn probe(&self, cells: &[[usize; 3]]) -> Result<Vec<crate::probes::ProbeSample>, SolverError> {
        // The field planes of the current state are made on the device (one pass, no copy);
        // only the probed cells and the neighbours their vorticity reads come back, a few
        // floats each.
        let d = self.mirror.domain();
        let count = d.cells();
        crate::probes::sample_read(d.n, &d.flags, self.t, cells, |wanted| {
            let g = self.run_fields()?;
            let planes = g.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
            let mut got = Vec::with_capacity(wanted.len());
            for &i in wanted {
                let mut v = [0.0f32; 4];
                for (k, x) in v.iter_mut().enumerate() {
                    let at = k * count + i;
                    *x = self.stream.clone_dtoh(&planes.slice(at..at + 1)).map_err(derr("reading a probe"))?[0];
                }
                got.push(v);
            }
            Ok(got)
        })
    }
    fn scalar_field(&self, kind: FieldKind) -> Vec<f32> {
        // One plane comes back to the host (4 bytes per cell): density and velocity components
        // straight from the field planes, speed, vorticity and Q from the derived kernel.
        let cells = self.mirror.domain().cells();
        let Ok(mut g) = self.run_fields() else { return vec![f32::NAN; cells] };
        let Some(planes) = g.as_mut() else { return vec![f32::NAN; cells] };
        let plane = match kind {
            FieldKind::Density => Some(0),
            FieldKind::Ux => Some(1),
            FieldKind::Uy => Some(2),
            FieldKind::Uz => Some(3),
            FieldKind::Speed | FieldKind::Vorticity | FieldKind::Q => None,
        };
        if let Some(k) = plane {
            return self.stream.clone_dtoh(&planes.slice(k * cells..(k + 1) * cells)).unwrap_or_else(|_| vec![f32::NAN; cells]);
        }
        // The derived field goes into the fifth plane: no allocation per frame.
        let which: u32 = match kind {
            FieldKind::Vorticity => 0,
            FieldKind::Q => 1,
            _ => 2,
        };
        let cfg = threads(cells);
        let (mut velocity, mut out) = planes.split_at_mut(4 * cells);
        let mut b = self.stream.launch_builder(&self.k.derived);
        b.arg(&mut velocity).arg(&self.flags).arg(&which).arg(&mut out);
        // SAFETY: arguments match the kernel; `velocity` holds 4 planes and `out` one.
        if unsafe { b.launch(cfg) }.is_err() {
            return vec![f32::NAN; cells];
        }
        drop(b);
        self.stream.clone_dtoh(&out).unwrap_or_else(|_| vec![f32::NAN; cells])
    }
    fn bricks(&self) -> BrickMap {
        // The bricks this solver runs (LBM-Ghost: its blocks).
        let b = if self.cfg.scheme == Scheme::Ghost { self.cfg.ghost_geometry().0 } else { self.cfg.brick };
        BrickMap::classify(self.mirror.domain(), b)
    }
    fn synchronize(&self) -> Result<(), SolverError> {
        self.stream.synchronize().map_err(derr("waiting for the GPU"))
    }
    fn write_frame(&mut self, kinds: &[FieldKind], layout: &FrameLayout, target: FrameTarget<'_>) -> Result<FrameRanges, SolverError> {
        crate::frame::check_request(self.mirror.domain(), kinds, layout, target.floats())?;
        match target {
            FrameTarget::Device { ptr, sync, .. } => self.frame_into(kinds, layout, ptr, sync),
            FrameTarget::Host(out) => {
                let ptr = self.frame_staging(layout.floats())?;
                let ranges = self.frame_into(kinds, layout, ptr, None)?;
                let staging = self.frame_dev.as_ref().ok_or_else(|| SolverError::Backend("no frame buffer".into()))?;
                let n = layout.floats();
                self.stream.memcpy_dtoh(&staging.slice(..n), &mut out[..n]).map_err(derr("copying the frame to the host"))?;
                self.stream.synchronize().map_err(derr("waiting for the frame copy"))?;
                Ok(ranges)
            }
        }
    }
    fn host_frame(&self, floats: usize) -> HostFrame {
        // SAFETY: the pinned memory is only read after the copies into it are waited for.
        match unsafe { self.ctx.alloc_pinned::<f32>(floats) } {
            Ok(p) => HostFrame::new(Box::new(PinnedFloats(p))),
            Err(_) => HostFrame::vec(floats),
        }
    }
    fn shares_device_memory(&self) -> bool {
        true
    }
    fn stats(&self) -> Stats {
        self.stats_inner().unwrap_or_else(|e| {
            tracing::error!("{e}");
            eprintln!("error: {e}");
            Stats::unreadable(self.t)
        })
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        self.mirror.set_params(p.clone())?;
        self.planes_stale();
        let rebuild = p.collide.kind != self.cfg.collision || p.collide.has_force() != self.cfg.force;
        self.params = p;
        if rebuild {
            self.cfg.collision = self.params.collide.kind;
            self.cfg.force = self.params.collide.has_force();
            self.k = load_kernels(&self.ctx, &self.cfg, &self.dev)?;
        }
        self.upload_tables()
    }
    fn checkpoint(&self) -> Checkpoint {
        // The state is decoded by a fresh host mirror (checkpoint takes &self).
        CheckpointScratch(self).make()
    }
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        self.edit_on_device(edit)
    }
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        self.planes_stale();
        self.planes_solid_ok.store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = self.mirror.raw();
        self.mirror.restore(c)?;
        let (bufs, cur, t) = self.mirror.raw();
        for (host, dev) in bufs.iter().zip(self.f.iter_mut()) {
            self.stream.memcpy_htod(&**host, dev).map_err(derr("uploading the checkpoint"))?;
        }
        self.cur = *cur;
        self.t = *t;
        self.mirror.release();
        self.params = c.params.clone();
        self.set_params(c.params.clone())?;
        self.relink()
    }
}

/// [`SlotIo`] on the device buffer holding the current state.
struct DeviceIo<'a> {
    stream: &'a Arc<CudaStream>,
    f: &'a mut CudaSlice<u8>,
    gather: &'a CudaFunction,
    scatter: &'a CudaFunction,
    /// Bytes per stored DDF.
    es: usize,
}

impl SlotIo for DeviceIo<'_> {
    fn read(&mut self, slots: &[usize], out: &mut [u8]) -> Result<(), SolverError> {
        if slots.is_empty() {
            return Ok(());
        }
        let idx: Vec<u64> = slots.iter().map(|&s| s as u64).collect();
        let d_idx = self.stream.clone_htod(&idx).map_err(derr("uploading edit slots"))?;
        let mut d_out = self.stream.alloc_zeros::<u8>(slots.len() * self.es).map_err(derr("allocating edit buffers"))?;
        let count = slots.len() as u32;
        let mut b = self.stream.launch_builder(self.gather);
        b.arg(&*self.f).arg(&d_idx).arg(&mut d_out).arg(&count);
        // SAFETY: arguments match gather_slots; every slot lies inside the DDF buffer.
        unsafe { b.launch(threads(slots.len())) }.map_err(derr("launching gather_slots"))?;
        self.stream.memcpy_dtoh(&d_out, out).map_err(derr("reading edit slots"))?;
        self.stream.synchronize().map_err(derr("reading edit slots"))
    }
    fn write(&mut self, slots: &[usize], vals: &[u8]) -> Result<(), SolverError> {
        if slots.is_empty() {
            return Ok(());
        }
        let idx: Vec<u64> = slots.iter().map(|&s| s as u64).collect();
        let d_idx = self.stream.clone_htod(&idx).map_err(derr("uploading edit slots"))?;
        let d_vals = self.stream.clone_htod(vals).map_err(derr("uploading edit values"))?;
        let count = slots.len() as u32;
        let mut b = self.stream.launch_builder(self.scatter);
        b.arg(&mut *self.f).arg(&d_idx).arg(&d_vals).arg(&count);
        // SAFETY: arguments match scatter_slots; every slot lies inside the DDF buffer.
        unsafe { b.launch(threads(slots.len())) }.map_err(derr("launching scatter_slots"))?;
        Ok(())
    }
}

impl CudaSolver {
    /// [`Solver::edit_cells`] on the GPU: the mirror plans the edit and moves the DDFs of the
    /// cells around it in device memory (slots of the current time step's parity), then the
    /// flags are uploaded and bricks and rows classified again.
    fn edit_on_device(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        let cur = self.cur;
        let mut io = DeviceIo {
            stream: &self.stream,
            f: &mut self.f[cur],
            gather: &self.k.gather,
            scatter: &self.k.scatter,
            es: self.cfg.precision.bytes(),
        };
        let report = self.mirror.edit_via_io(edit, self.t, &mut io)?;
        if !report.changed.is_empty() {
            self.reclassify()?;
            self.relink()?;
        }
        Ok(report)
    }

    /// Upload the flags and classify rows and bricks again (after the domain changed). The row
    /// mode and brick shape stay (they are compiled into the kernels); only the lists change.
    fn reclassify(&mut self) -> Result<(), SolverError> {
        self.planes_stale();
        self.planes_solid_ok.store(false, std::sync::atomic::Ordering::Relaxed);
        let d = self.mirror.domain();
        self.stream.memcpy_htod(&d.flags, &mut self.flags).map_err(derr("uploading flags"))?;
        if self.cfg.scheme == Scheme::Ghost {
            // LBM-Ghost runs its blocks, not bricks; its ghost copies leave out solid cells.
            let (dst, src) = GhostLayout::for_domain(d, self.cfg.ghost_block).device_pairs();
            self.n_ghost = dst.len() as u32;
            let up =
                |v: Vec<u64>| self.stream.clone_htod(&if v.is_empty() { vec![0u64] } else { v }).map_err(derr("uploading ghost pairs"));
            self.ghost_dst = up(dst)?;
            self.ghost_src = up(src)?;
            return Ok(());
        }
        let groups = launch_groups(d, self.cfg.brick, self.cfg.rows, self.cfg.halo);
        self.lists = groups.iter().map(|(r, l, b)| Lists::upload(&self.stream, r, l, b)).collect::<Result<Vec<_>, _>>()?;
        Ok(())
    }
}

// ---------------------------------------------------------------- multi-GPU slab access
impl CudaSolver {
    /// The CUDA context of this solver's device.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Device address of the buffer holding the state (Esoteric Pull keeps one).
    pub(crate) fn state_ptr(&self) -> u64 {
        use cudarc::driver::DevicePtr;
        let (p, _sync) = self.f[self.cur].device_ptr(&self.stream);
        p
    }

    /// Bytes of one stored DDF.
    pub(crate) fn element_bytes(&self) -> usize {
        self.cfg.precision.bytes()
    }

    /// Read raw DDF slots of the current state (as [`SlotIo`]).
    pub(crate) fn read_slots(&mut self, slots: &[usize], out: &mut [u8]) -> Result<(), SolverError> {
        let es = self.cfg.precision.bytes();
        let cur = self.cur;
        DeviceIo { stream: &self.stream, f: &mut self.f[cur], gather: &self.k.gather, scatter: &self.k.scatter, es }.read(slots, out)
    }

    /// Write raw DDF slots of the current state (as [`SlotIo`]).
    pub(crate) fn write_slots(&mut self, slots: &[usize], vals: &[u8]) -> Result<(), SolverError> {
        let es = self.cfg.precision.bytes();
        let cur = self.cur;
        self.planes_stale();
        DeviceIo { stream: &self.stream, f: &mut self.f[cur], gather: &self.k.gather, scatter: &self.k.scatter, es }.write(slots, vals)
    }

    /// Replace the domain (same size, new flags or obstacles) and classify rows and bricks again.
    pub(crate) fn set_domain(&mut self, d: Domain) -> Result<(), SolverError> {
        self.mirror.set_domain(d);
        self.reclassify()?;
        self.relink()
    }
}

/// Helper to build a checkpoint from `&CudaSolver` (downloads into a fresh host mirror).
struct CheckpointScratch<'a>(&'a CudaSolver);

impl CheckpointScratch<'_> {
    fn make(&self) -> Checkpoint {
        let s = self.0;
        let d = s.mirror.domain().clone();
        let mut m = build_mirror(d, s.cfg.scheme, s.cfg.precision, s.params.clone(), s.cfg.ghost_block, |_| (1.0, [0.0; 3]));
        {
            let (mut bufs, cur, t) = m.raw();
            for (dev, host) in s.f.iter().zip(bufs.iter_mut()) {
                if let Err(e) = s.stream.memcpy_dtoh(dev, &mut **host) {
                    tracing::error!("CUDA error while downloading the state: {e:?}");
                }
            }
            *cur = s.cur;
            *t = s.t;
        }
        m.checkpoint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collision::Collision;

    /// The kernels' LBM-Ghost geometry (generated header) is the CPU layout's, whose storage the
    /// GPU state mirrors byte for byte.
    #[test]
    fn ghost_geometry_matches_the_cpu_layout() {
        for (lattice, n) in [(Lattice::D2Q9, [70, 40, 1]), (Lattice::D3Q19, [48, 22, 20]), (Lattice::D3Q27, [16, 33, 5])] {
            for block in [2, 7, 16, 32] {
                let dom = Domain::periodic(lattice, n);
                let cfg = KernelConfig {
                    lattice,
                    scheme: Scheme::Ghost,
                    precision: Precision::Fp32,
                    collision: Collision::Bgk,
                    force: false,
                    n,
                    brick: [32, 2, 2],
                    rows: false,
                    ghost_block: block,
                    boxed: false,
                    halo: 0,
                    slip: false,
                };
                let g = GhostLayout::for_domain(&dom, block);
                assert_eq!(cfg.ghost_geometry(), g.geometry(), "{lattice} {n:?} block {block}");
                assert_eq!(cfg.slots(), g.storage_len());
            }
        }
    }
}
