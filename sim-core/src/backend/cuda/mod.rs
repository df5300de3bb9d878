//! CUDA backend: the DDFs stay on the GPU; kernels are CUDA C from `kernels/`, compiled at run
//! time by NVRTC with a generated header of constants. cudarc loads libcuda and libnvrtc on
//! first use, so the binary builds and starts where there is no CUDA at all.
//!
//! Memory layout equals the CPU backend's, so a CPU solver (a [`Mirror`]) writes the initial
//! state and encodes/decodes checkpoints from bytes copied to and from the device.

pub mod amr;
pub mod codec;
pub mod interop;
pub mod multi;
pub mod subgrid;

use crate::backend::cpu::{build_mirror, build_mirror_at, Mirror, Slab, SlotIo};
use crate::backend::ghost::GhostLayout;
use crate::bricks::{BrickClass, BrickMap};
use crate::checkpoint::Checkpoint;
use crate::collision::Collision;
use crate::domain::{is_solid, Domain};
use crate::edit::{CellEdit, EditReport};
use crate::fields::FieldKind;
use crate::frame::{FrameLayout, FrameRanges, FrameRegion, FrameTarget, HostFloats, HostFrame};
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::scene::{LoadedScene, Profile};
use crate::schemes::Scheme;
use crate::solver::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use std::sync::Arc;

/// The shared header of device functions.
pub const COMMON_CUH: &str = include_str!("../../../../kernels/common.cuh");
/// The dense-grid kernels.
pub const STREAM_COLLIDE_CU: &str = include_str!("../../../../kernels/stream_collide.cu");
/// Kernels of the compressed-subgrid working box (with [`KernelConfig::boxed`]).
pub const SUBGRID_CU: &str = include_str!("../../../../kernels/subgrid.cu");

/// Launch shape for the per-cell kernels (fields, derived, swap): 256-thread blocks, which
/// every variant's register count allows (1024 does not for D3Q19/D3Q27).
pub(crate) fn threads(cells: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// Brick shapes the solver chooses between, with the MLUPS each class of brick ran at (H200,
/// D3Q19 Esoteric Pull FP32, 2026-11-22; docs/performance.md):
/// wide bricks (one CUDA block along a row) stream best on an open grid (88.8% of the copy
/// ceiling against 76.0% for 32x2x2: fewer partial 32-byte sectors at brick edges), compact
/// bricks sort cells into plain fluid and boundary more finely.
pub const BRICK_SHAPES: [([usize; 3], [usize; 3], f64, f64); 2] = [
    // (3D shape, 2D shape, plain-fluid MLUPS, boundary MLUPS)
    ([128, 1, 1], [128, 1, 1], 24_313.0, 18_860.0),
    ([32, 2, 2], [32, 4, 1], 20_802.0, 19_907.0),
];

/// The developer override `ESOFLOW_CUDA_BRICK=BXxBYxBZ` (e.g. `64x2x1`: 32 to 1024 cells, BX a
/// multiple of 32), if set and valid.
fn brick_override(dims: usize) -> Option<[usize; 3]> {
    let v = std::env::var("ESOFLOW_CUDA_BRICK").ok()?;
    let b: Vec<usize> = v.split('x').filter_map(|t| t.trim().parse().ok()).collect();
    if b.len() == 3 && b[0] % 32 == 0 && b[0] > 0 && b[1] > 0 && b[2] > 0 && b.iter().product::<usize>() <= 1024 && (dims == 3 || b[2] == 1)
    {
        return Some([b[0], b[1], b[2]]);
    }
    tracing::warn!("ESOFLOW_CUDA_BRICK={v} ignored: expected BXxBYxBZ with BX a multiple of 32 and at most 1024 cells");
    None
}

/// The brick shape for a domain: of [`BRICK_SHAPES`], the one whose bricks (idle threads of
/// partial bricks included) take the least time by the measured rates of plain-fluid and
/// boundary bricks.
#[must_use]
pub fn choose_brick(dom: &Domain) -> [usize; 3] {
    let dims = dom.lattice.dims();
    if let Some(b) = brick_override(dims) {
        return b;
    }
    let cost = |(s3, s2, lean_rate, boundary_rate): &([usize; 3], [usize; 3], f64, f64)| {
        let b = if dims == 3 { *s3 } else { *s2 };
        let (lean, bound) = classify(dom, b);
        let v = b.iter().product::<usize>() as f64;
        (v * lean.len() as f64 / lean_rate + v * bound.len() as f64 / boundary_rate, b)
    };
    BRICK_SHAPES.iter().map(cost).min_by(|a, b| a.0.total_cmp(&b.0)).map_or([32, 2, 2], |c| c.1)
}

/// How the stream-collide step runs the brick classes (the disaggregation of Meneghin & Mahmoud 2025).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Two launches: plain-fluid bricks through the lean kernel, the rest through the boundary kernel.
    Split,
    /// One launch over every brick in memory order; each block takes the lean or the boundary
    /// path by its brick's class.
    Fused,
    /// Every brick through the boundary kernel (the baseline the gain is measured against).
    BoundaryOnly,
}

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

/// What a kernel build depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelConfig {
    /// Velocity set.
    pub lattice: Lattice,
    /// Streaming scheme.
    pub scheme: Scheme,
    /// Storage precision.
    pub precision: Precision,
    /// Collision operator.
    pub collision: Collision,
    /// Whether a body force is applied.
    pub force: bool,
    /// Grid size.
    pub n: [usize; 3],
    /// Brick shape (see [`choose_brick`]).
    pub brick: [usize; 3],
    /// Whether rows of plain fluid run the whole-row kernel (see [`rows_fit`]).
    pub rows: bool,
    /// Block edge of LBM-Ghost (`solver.ghost_block`; other schemes ignore it).
    pub ghost_block: usize,
    /// A compressed subgrid's working box (`n` = subgrid + ghost frame): only cells inside the
    /// frame are updated, and the box kernels of `kernels/subgrid.cu` come along.
    pub boxed: bool,
    /// A multi-GPU slab ([`crate::backend::cuda::multi`]): 1 + the cut axis, whose first and last layer
    /// are halo copies of the neighbours' cells (not updated); 0 for a whole grid.
    pub halo: usize,
}

impl KernelConfig {
    /// LBM-Ghost block geometry as in backend/ghost.rs: block edge, blocks and padded edge per
    /// axis, padded block volume.
    #[must_use]
    pub fn ghost_geometry(&self) -> ([usize; 3], [usize; 3], [usize; 3], usize) {
        let (mut b, mut pd) = ([1usize; 3], [1usize; 3]);
        for a in 0..self.lattice.dims() {
            b[a] = self.ghost_block.max(1).min(self.n[a]);
            pd[a] = b[a] + 2;
        }
        let nb = [self.n[0].div_ceil(b[0]), self.n[1].div_ceil(b[1]), self.n[2].div_ceil(b[2])];
        (b, nb, pd, pd[0] * pd[1] * pd[2])
    }

    /// DDF slots of the state buffer.
    #[must_use]
    pub fn slots(&self) -> usize {
        let cells = self.n[0] * self.n[1] * self.n[2];
        if self.scheme == Scheme::Ghost {
            let (_, nb, _, pv) = self.ghost_geometry();
            nb[0] * nb[1] * nb[2] * self.lattice.q() * pv
        } else {
            self.lattice.q() * cells
        }
    }
}

fn brace<T: std::fmt::Display>(v: impl Iterator<Item = T>) -> String {
    format!("{{{}}}", v.map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}

/// The generated header of constants for one configuration.
#[must_use]
pub fn defines(cfg: &KernelConfig) -> String {
    let l = cfg.lattice;
    let c = l.velocities();
    let w = l.weights();
    let scheme = match cfg.scheme {
        Scheme::OneStepPull => 0,
        Scheme::Aa => 1,
        Scheme::EsotericPull => 2,
        Scheme::EsotericPush => 3,
        Scheme::Swap => 4,
        Scheme::Ghost => 5,
    };
    let store = match cfg.precision {
        Precision::Fp32 => 0,
        Precision::Fp16s => 1,
        Precision::Fp16c => 2,
    };
    let coll = match cfg.collision {
        Collision::Bgk => 0,
        Collision::Trt => 1,
        Collision::Smagorinsky => 2,
    };
    let n = cfg.n;
    let b = cfg.brick;
    let (gb, gnb, gpd, gpv) = cfg.ghost_geometry();
    let ghost = format!(
        "#define DEF_SLOTS {}ull\n#define DEF_GB0 {}u\n#define DEF_GB1 {}u\n#define DEF_GB2 {}u\n#define DEF_GNB0 {}u\n#define DEF_GNB1 {}u\n#define DEF_GNB2 {}u\n#define DEF_GPD0 {}\n#define DEF_GPD1 {}\n#define DEF_GPD2 {}\n#define DEF_GPV {}u\n",
        cfg.slots(),
        gb[0],
        gb[1],
        gb[2],
        gnb[0],
        gnb[1],
        gnb[2],
        gpd[0],
        gpd[1],
        gpd[2],
        gpv
    );
    ghost
        + &format!(
        "// generated by sim-core/src/backend/cuda/mod.rs\n#define DEF_ROWS {}\n#define DEF_ROW_PAIRS {}\n#define DEF_BX {}\n#define DEF_BY {}\n#define DEF_BZ {}\n#define DEF_NX {}u\n#define DEF_NY {}u\n#define DEF_NZ {}u\n#define DEF_N {}ull\n#define DEF_D {}\n#define DEF_Q {}\n#define DEF_CX {}\n#define DEF_CY {}\n#define DEF_CZ {}\n#define DEF_W {}\n#define DEF_SCHEME {}\n#define DEF_STORE {}\n#define DEF_COLLISION {}\n#define DEF_FORCE {}\n#define DEF_BOX {}\n#define DEF_HALO {}\n",
        u8::from(cfg.rows),
        u8::from(row_pairs(cfg)),
        b[0],
        b[1],
        b[2],
        n[0],
        n[1],
        n[2],
        n[0] * n[1] * n[2],
        l.dims(),
        l.q(),
        brace(c.iter().map(|v| v[0])),
        brace(c.iter().map(|v| v[1])),
        brace(c.iter().map(|v| v[2])),
        brace(w.iter().map(|x| format!("{x:.9e}f"))),
        scheme,
        store,
        coll,
        u8::from(cfg.force),
        u8::from(cfg.boxed),
        cfg.halo,
    )
}

/// Full kernel source of one configuration.
#[must_use]
pub fn kernel_source(cfg: &KernelConfig) -> String {
    // Developer knob for kernel experiments: ESOFLOW_CUDA_DEFINES=NAME[=VALUE],... adds defines.
    let extra: String = std::env::var("ESOFLOW_CUDA_DEFINES")
        .unwrap_or_default()
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .map(|d| format!("#define {}\n", d.trim().replacen('=', " ", 1)))
        .collect();
    let boxed = if cfg.boxed { SUBGRID_CU } else { "" };
    format!("{}{extra}\n{}\n{}\n{boxed}", defines(cfg), COMMON_CUH, STREAM_COLLIDE_CU)
}

/// Compile a configuration with NVRTC for `arch` (e.g. "sm_90"). Returns PTX and the compile
/// log; any warning in the log is an error here, with the log and the kernel named.
///
/// # Errors
/// NVRTC missing, compile errors or warnings.
pub fn compile(cfg: &KernelConfig, arch: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    let what = format!(
        "kernels/stream_collide.cu for {} {} {} {} force={} on {arch}",
        cfg.lattice, cfg.scheme, cfg.precision, cfg.collision, cfg.force
    );
    compile_source(&kernel_source(cfg), &what, arch, true)
}

/// Compile CUDA source with NVRTC for `arch`; `what` names it in errors. Any warning in the log
/// is an error. `fmad: false` forbids fused multiply-adds (kernels that must give the CPU
/// reference's bits).
///
/// # Errors
/// NVRTC missing, compile errors or warnings.
pub fn compile_source(src: &str, what: &str, arch: &str, fmad: bool) -> Result<cudarc::nvrtc::Ptx, String> {
    if !nvrtc_present() {
        return Err(NVRTC_MISSING.into());
    }
    let opts = [format!("--gpu-architecture={arch}"), "--std=c++17".to_string(), format!("--fmad={fmad}")];
    let csrc = std::ffi::CString::new(src).map_err(|_| "kernel source contains a NUL byte".to_string())?;
    let prog = cudarc::nvrtc::result::create_program(&csrc, None).map_err(|e| format!("NVRTC could not create the program: {e:?}"))?;
    // SAFETY: the program handle is valid until destroyed below.
    let res = unsafe { cudarc::nvrtc::result::compile_program(prog, &opts) };
    let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
        .map(|v| String::from_utf8_lossy(&v.iter().map(|&c| c as u8).collect::<Vec<u8>>()).trim_end_matches('\0').trim().to_string())
        .unwrap_or_default();
    if res.is_err() {
        unsafe {
            let _ = cudarc::nvrtc::result::destroy_program(prog);
        }
        return Err(format!("NVRTC failed to compile {what}:\n{log}"));
    }
    if log.contains("warning") {
        unsafe {
            let _ = cudarc::nvrtc::result::destroy_program(prog);
        }
        return Err(format!("NVRTC warnings compiling {what}:\n{log}"));
    }
    let ptx = unsafe { cudarc::nvrtc::result::get_ptx(prog) }.map_err(|e| format!("NVRTC gave no PTX for {what}: {e:?}"))?;
    unsafe {
        let _ = cudarc::nvrtc::result::destroy_program(prog);
    }
    let ptx: Vec<u8> = ptx.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
    Ok(cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(&ptx).to_string()))
}

const NVRTC_MISSING: &str = "NVRTC (libnvrtc.so) was not found: install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc` and add its lib folder to LD_LIBRARY_PATH";

/// Whether libnvrtc can be loaded.
#[must_use]
pub fn nvrtc_present() -> bool {
    // SAFETY: only probes for the shared library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether the CUDA driver library can be loaded.
#[must_use]
pub fn cuda_present() -> bool {
    // SAFETY: only probes for the shared library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// A usable CUDA device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Free and total memory in bytes.
    pub mem: (usize, usize),
}

/// Probe for a usable CUDA device 0 (driver, NVRTC and a device).
///
/// # Errors
/// A sentence saying what is missing.
pub fn probe() -> Result<DeviceInfo, String> {
    // SAFETY: only probes for the shared library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so) on this machine".into());
    }
    if !nvrtc_present() {
        return Err(NVRTC_MISSING.into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e:?}"))?;
    device_info(&ctx)
}

/// Wall time of the stages of a set-up, logged as each ends.
struct Stages {
    t0: std::time::Instant,
    at: std::time::Instant,
}

impl Stages {
    fn new() -> Stages {
        let now = std::time::Instant::now();
        Stages { t0: now, at: now }
    }

    fn done(&mut self, what: &str) {
        let now = std::time::Instant::now();
        tracing::info!("set-up: {what} {:.3} s (total {:.3} s)", (now - self.at).as_secs_f64(), (now - self.t0).as_secs_f64());
        self.at = now;
    }
}

/// Free memory of device `ordinal` in bytes (`cuMemGetInfo`), for memory plans.
///
/// # Errors
/// No driver or no such device.
pub fn free_memory(ordinal: usize) -> Result<u64, String> {
    // SAFETY: only probes for the shared library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so) on this machine".into());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| format!("no usable CUDA device {ordinal}: {e:?}"))?;
    Ok(device_info(&ctx)?.mem.0 as u64)
}

pub(crate) fn device_info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, String> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let name = ctx.name().map_err(|e| format!("{e:?}"))?;
    let major = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(|e| format!("{e:?}"))?;
    let minor = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(|e| format!("{e:?}"))?;
    ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
    let mem = cudarc::driver::result::mem_get_info().map_err(|e| format!("{e:?}"))?;
    Ok(DeviceInfo { name, cc: (major, minor), mem })
}

/// Device-to-device copy bandwidth of device 0 in GB/s, counting bytes read plus written
/// (1 GiB buffers, best of 20 copies).
///
/// # Errors
/// No device, or CUDA errors.
pub fn copy_bandwidth_gbs() -> Result<f64, String> {
    probe()?;
    let ctx = CudaContext::new(0).map_err(|e| format!("{e:?}"))?;
    let stream = ctx.default_stream();
    let n = 1usize << 30;
    let a = stream.alloc_zeros::<u8>(n).map_err(|e| format!("{e:?}"))?;
    let mut b = stream.alloc_zeros::<u8>(n).map_err(|e| format!("{e:?}"))?;
    let mut best = f64::MAX;
    for _ in 0..20 {
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        let t = std::time::Instant::now();
        stream.memcpy_dtod(&a, &mut b).map_err(|e| format!("{e:?}"))?;
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(2.0 * n as f64 / best / 1e9)
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
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GpuOutlet {
    axis: i32,
    inward: i32,
    density: f32,
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
}

/// Registers per thread of the stream-collide kernels (lean, boundary, fused).
pub type Registers = (i32, i32, i32);

/// Field planes kept for display and stats: rho, ux, uy, uz and one derived field.
const PLANES: usize = 5;

/// The field planes, locked.
type PlanesGuard<'a> = std::sync::MutexGuard<'a, Option<CudaSlice<f32>>>;

/// Class bit of a boundary brick in the list of all bricks (as in stream_collide.cu).
pub(crate) const BRICK_BOUNDARY: u32 = 0x8000_0000;

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
}

/// The rows and bricks of one launch group, on the device (never-empty buffers, with counts).
struct Lists {
    rows: CudaSlice<u32>,
    n_rows: u32,
    lean: CudaSlice<u32>,
    n_lean: u32,
    boundary: CudaSlice<u32>,
    n_boundary: u32,
    all: CudaSlice<u32>,
    n_all: u32,
}

impl Lists {
    /// Upload rows, plain-fluid bricks and bricks with boundaries (and every brick in memory
    /// order, boundary bricks carrying [`BRICK_BOUNDARY`], for the fused kernel).
    fn upload(stream: &Arc<CudaStream>, rows: &[u32], lean: &[u32], bound: &[u32]) -> Result<Lists, SolverError> {
        let mut all = lean.to_vec();
        all.extend(bound.iter().map(|&b| b | BRICK_BOUNDARY));
        all.sort_unstable_by_key(|&b| b & !BRICK_BOUNDARY);
        let up = |v: &[u32]| stream.clone_htod(if v.is_empty() { &[0u32][..] } else { v }).map_err(derr("uploading bricks"));
        Ok(Lists {
            rows: up(rows)?,
            n_rows: rows.len() as u32,
            lean: up(lean)?,
            n_lean: lean.len() as u32,
            boundary: up(bound)?,
            n_boundary: bound.len() as u32,
            all: up(&all)?,
            n_all: all.len() as u32,
        })
    }
}

/// Rows (`y + ny z`) and bricks of a grid in launch groups. A whole grid is one group. A
/// multi-GPU slab (`halo` = 1 + cut axis) drops what lies only in its two halo layers and
/// makes two groups: what touches the first or last own layer (whose DDFs the neighbours
/// exchange), then the interior, which can run while the exchange goes on.
fn launch_groups(dom: &Domain, brick: [usize; 3], rows: bool, halo: usize) -> Vec<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let row_ids = if rows { plain_rows(dom) } else { Vec::new() };
    let (lean, bound) = classify_except(dom, brick, &row_ids);
    if halo == 0 {
        return vec![(row_ids, lean, bound)];
    }
    let (a, n) = (halo - 1, dom.n);
    let last = n[a] - 2;
    // A range [lo, hi) of layers on the cut axis: 0 = only halo, 1 = next to the cut, 2 = interior.
    let class = |lo: usize, hi: usize| -> usize {
        let hi = hi.min(n[a]);
        if (lo..hi).all(|l| l == 0 || l == n[a] - 1) {
            0
        } else if (lo..hi).any(|l| l == 1 || l == last) {
            1
        } else {
            2
        }
    };
    let nb = [n[0].div_ceil(brick[0]), n[1].div_ceil(brick[1])];
    let brick_class = |id: u32| {
        let id = id as usize;
        let c = [id % nb[0], (id / nb[0]) % nb[1], id / (nb[0] * nb[1])];
        class(c[a] * brick[a], (c[a] + 1) * brick[a])
    };
    let row_class = |r: u32| {
        let c = [0, r as usize % n[1], r as usize / n[1]];
        class(c[a], c[a] + 1)
    };
    let mut groups = vec![(Vec::new(), Vec::new(), Vec::new()), (Vec::new(), Vec::new(), Vec::new())];
    for &r in &row_ids {
        match row_class(r) {
            0 => {}
            k => groups[k - 1].0.push(r),
        }
    }
    for (ids, pick) in [(&lean, 1usize), (&bound, 2)] {
        for &b in ids {
            match brick_class(b) {
                0 => {}
                k => {
                    let g = &mut groups[k - 1];
                    if pick == 1 {
                        g.1.push(b)
                    } else {
                        g.2.push(b)
                    }
                }
            }
        }
    }
    groups
}

pub(crate) fn derr(what: &str) -> impl Fn(cudarc::driver::DriverError) -> SolverError + '_ {
    move |e| SolverError::Backend(format!("CUDA error while {what}: {e:?}"))
}

/// Classify bricks: (plain fluid, with boundaries); all-solid bricks are dropped.
pub(crate) fn classify(dom: &Domain, b: [usize; 3]) -> (Vec<u32>, Vec<u32>) {
    classify_except(dom, b, &[])
}

/// Rows (index y + ny z) whose every cell is plain fluid.
fn plain_rows(dom: &Domain) -> Vec<u32> {
    let n = dom.n;
    (0..n[1] * n[2]).into_par_iter().filter(|&r| dom.flags[r * n[0]..(r + 1) * n[0]].iter().all(|&f| f == 0)).map(|r| r as u32).collect()
}

/// The whole-row kernel is on unless `ESOFLOW_CUDA_ROWS=0` (developer knob, to compare) or a
/// brick shape is forced with `ESOFLOW_CUDA_BRICK`.
fn rows_wanted() -> bool {
    std::env::var("ESOFLOW_CUDA_ROWS").as_deref() != Ok("0") && std::env::var("ESOFLOW_CUDA_BRICK").is_err()
}

/// Whether the whole-row kernel fits this grid: a row in one CUDA block (at most 1024 threads)
/// and its x-shifted DDFs in 48 KiB of shared memory.
#[must_use]
pub fn rows_fit(n: [usize; 3], lattice: Lattice, precision: Precision) -> bool {
    let w = n[0].div_ceil(32) * 32;
    let xdirs = lattice.velocities().iter().filter(|c| c[0] != 0).count();
    w <= 1024 && xdirs * w * precision.bytes() <= 48 * 1024
}

/// Whether the row kernel runs two cells per thread (aligned pair loads and stores): rows of an
/// even length, unless `ESOFLOW_CUDA_PAIRS=0` (developer knob, to compare).
#[must_use]
pub fn row_pairs(cfg: &KernelConfig) -> bool {
    cfg.rows && cfg.n[0] % 2 == 0 && std::env::var("ESOFLOW_CUDA_PAIRS").as_deref() != Ok("0")
}

/// Bricks of `b` (ids `bx + nbx (by + nby bz)`) as (plain fluid, with boundaries), all-solid
/// bricks dropped, leaving out the rows in `skip` (`b` must then be one row high). The classes
/// come from [`BrickMap::classify`], the one implementation the viewer's overlay shows too.
fn classify_except(dom: &Domain, b: [usize; 3], skip: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let skip: std::collections::HashSet<u32> = skip.iter().copied().collect();
    let n = dom.n;
    let map = BrickMap::classify(dom, b);
    let (mut lean, mut bound) = (Vec::new(), Vec::new());
    for (id, &c) in map.class.iter().enumerate() {
        let [_, by, bz] = map.coords(id);
        if skip.contains(&((by + n[1] * bz) as u32)) {
            continue;
        }
        match c {
            BrickClass::Plain => lean.push(id as u32),
            BrickClass::Boundary => bound.push(id as u32),
            BrickClass::Solid => {}
        }
    }
    (lean, bound)
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
        };
        s.upload_tables()?;
        stage.done("flags, lists and tables upload");
        Ok(s)
    }

    fn upload_tables(&mut self) -> Result<(), SolverError> {
        let d = self.mirror.domain();
        let mut walls = vec![0.0f32; 48];
        for (i, w) in self.params.walls.iter().enumerate().take(16) {
            walls[3 * i..3 * i + 3].copy_from_slice(w);
        }
        let inl = gpu_inlets(d, self.shift);
        let out = gpu_outlets(d);
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
        })
        .collect()
}

/// The outlets of a domain as the kernels read them.
pub(crate) fn gpu_outlets(d: &Domain) -> Vec<GpuOutlet> {
    d.outlets.iter().map(|b| GpuOutlet { axis: b.axis as i32, inward: b.inward, density: b.density }).collect()
}

/// Copy plain structs into the start of a byte buffer (nothing for an empty list).
pub(crate) fn upload_pod<T: bytemuck::Pod>(stream: &Arc<CudaStream>, v: &[T], dst: &mut CudaSlice<u8>) -> Result<(), SolverError> {
    if v.is_empty() {
        return Ok(());
    }
    let bytes: &[u8] = bytemuck::cast_slice(v);
    let mut view = dst.slice_mut(0..bytes.len());
    stream.memcpy_htod(bytes, &mut view).map_err(derr("uploading boundary tables"))
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
            b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(&self.forces).arg(&mom);
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
        b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(out);
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
            b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(out);
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
        b.arg(&self.walls).arg(&self.inlets).arg(&self.outlets).arg(planes);
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
            self.frame_range = Some(self.stream.alloc_zeros::<u32>(9).map_err(derr("allocating frame ranges"))?);
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

/// The frame kernels of a compiled module (`frame_fields`, `frame_box`, `frame_lattice`).
pub(super) struct FrameKernels<'a> {
    pub frame: &'a CudaFunction,
    pub frame_box: &'a CudaFunction,
    pub frame_lattice: &'a CudaFunction,
}

/// The start of a frame's range buffer (9 words; see frame_cell in stream_collide.cu).
pub(super) const FRAME_RANGE_INIT: [u32; 9] = [u32::MAX, 0, u32::MAX, 0, u32::MAX, 0, u32::MAX, 0, 0];

/// Launch the frame kernels of a grid `n` for `kinds` from the field planes (rho, ux, uy, uz,
/// ... of every cell) into `out` (a device address) as `layout` says: every cell, the slice
/// planes, or the isosurface's lattice and the slices; the ranges into `range` (cleared with
/// [`FRAME_RANGE_INIT`] before).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_frame(
    stream: &Arc<CudaStream>,
    k: &FrameKernels<'_>,
    planes: &CudaSlice<f32>,
    flags: &CudaSlice<u8>,
    n: [usize; 3],
    kinds: &[FieldKind],
    layout: &FrameLayout,
    out: u64,
    range: &mut CudaSlice<u32>,
) -> Result<(), SolverError> {
    let codes = kinds.iter().enumerate().fold(0u32, |acc, (k, &kind)| acc | (frame_code(kind) << (4 * k)));
    let nk = kinds.len() as u32;
    let pitch = layout.row_pitch as u64;
    let plane = layout.plane_floats() as u64;
    match layout.region {
        FrameRegion::All => {
            let mut b = stream.launch_builder(k.frame);
            b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(range);
            // SAFETY: arguments match frame_fields; `out` holds the layout's floats (checked by
            // the caller), the planes hold 4 x cells floats at least, the range buffer 9 words.
            unsafe { b.launch(threads(n.iter().product())) }.map_err(derr("launching frame_fields"))?;
        }
        FrameRegion::Planes(_) | FrameRegion::Sampled { .. } => {
            if let FrameRegion::Sampled { stride, .. } = layout.region {
                let (s, m) = lattice_dims(n, stride);
                let mut b = stream.launch_builder(k.frame_lattice);
                b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(&mut *range);
                b.arg(&s).arg(&m[0]).arg(&m[1]).arg(&m[2]);
                // SAFETY: as frame_fields; the lattice's points lie in the grid.
                unsafe { b.launch(threads(m.iter().map(|&e| e as usize).product())) }.map_err(derr("launching frame_lattice"))?;
            }
            let planes_at = layout.region.planes().unwrap_or_default();
            for (a, i) in planes_at.iter().enumerate().filter_map(|(a, i)| i.map(|i| (a, i))) {
                let (origin, ext) = slab_box(n, a, i, 0);
                let mut b = stream.launch_builder(k.frame_box);
                b.arg(planes).arg(flags).arg(&codes).arg(&nk).arg(&pitch).arg(&plane).arg(&out).arg(&mut *range);
                b.arg(&origin[0]).arg(&origin[1]).arg(&origin[2]).arg(&ext[0]).arg(&ext[1]).arg(&ext[2]);
                // SAFETY: as frame_fields; the box is one plane of the grid.
                unsafe { b.launch(threads(ext.iter().map(|&e| e as usize).product())) }.map_err(derr("launching frame_box"))?;
            }
        }
    }
    Ok(())
}

/// A frame's ranges from its range buffer's words (`nk` fields).
pub(super) fn frame_ranges(keys: &[u32], nk: usize, lag: u64) -> FrameRanges {
    let min_max =
        (0..nk).map(|k| if keys[2 * k] == u32::MAX { (0.0, 0.0) } else { (key_float(keys[2 * k]), key_float(keys[2 * k + 1])) }).collect();
    FrameRanges { min_max, finite: keys[8] == 0, lag }
}

/// Compile the uniform-grid kernels of `lattice` for a grid `n` and take their frame kernels
/// (for a backend that fills field planes its own way: adaptive blocks fill the finest grid's).
///
/// # Errors
/// NVRTC or module errors.
pub(super) fn load_frame_module(
    ctx: &Arc<CudaContext>,
    lattice: Lattice,
    n: [usize; 3],
    dev: &DeviceInfo,
) -> Result<(Arc<CudaModule>, [CudaFunction; 3]), SolverError> {
    let brick = if lattice.dims() == 3 { BRICK_SHAPES[0].0 } else { BRICK_SHAPES[0].1 };
    let cfg = KernelConfig {
        lattice,
        scheme: Scheme::EsotericPull,
        precision: Precision::Fp32,
        collision: Collision::Bgk,
        force: false,
        n,
        brick,
        rows: false,
        ghost_block: 0,
        boxed: false,
        halo: 0,
    };
    let arch = format!("sm_{}{}", dev.cc.0, dev.cc.1);
    let ptx = compile(&cfg, &arch).map_err(SolverError::Backend)?;
    let module = ctx.load_module(ptx).map_err(derr("loading the frame kernels"))?;
    let get = |name: &str| module.load_function(name).map_err(|e| SolverError::Backend(format!("kernel {name} missing: {e:?}")));
    let f = [get("frame_fields")?, get("frame_box")?, get("frame_lattice")?];
    Ok((module, f))
}

/// The lattice of every `stride`-th cell of grid `n`: the stride and its points per axis.
fn lattice_dims(n: [usize; 3], stride: usize) -> (u32, [u32; 3]) {
    let s = stride.max(1);
    (s as u32, std::array::from_fn(|a| ((n[a] - 1) / s + 1) as u32))
}

/// The box of the cells within `half` cells of plane `i` along `axis` (all of the grid across
/// it): its corner, wrapped into the grid, and its extents (at most the grid's).
fn slab_box(n: [usize; 3], axis: usize, i: usize, half: usize) -> ([u32; 3], [u32; 3]) {
    let mut origin = [0u32; 3];
    let mut ext = [n[0] as u32, n[1] as u32, n[2] as u32];
    let thick = (2 * half + 1).min(n[axis]);
    origin[axis] = ((i + n[axis] - half.min(n[axis] - 1)) % n[axis]) as u32;
    ext[axis] = thick as u32;
    (origin, ext)
}

/// The frame kernel's code of a field.
fn frame_code(kind: FieldKind) -> u32 {
    match kind {
        FieldKind::Density => 0,
        FieldKind::Ux => 1,
        FieldKind::Uy => 2,
        FieldKind::Uz => 3,
        FieldKind::Speed => 4,
        FieldKind::Vorticity => 5,
        FieldKind::Q => 6,
    }
}

/// The float of an order key (the inverse of float_key in stream_collide.cu).
fn key_float(k: u32) -> f32 {
    f32::from_bits(if k & 0x8000_0000 != 0 { k & 0x7fff_ffff } else { !k })
}

/// Where the `stats` kernel's density range starts (no cell seen: min key all ones, max 0).
pub(crate) const RHO_KEYS_START: [u32; 2] = [u32::MAX, 0];

/// The density range of the `stats` kernel's keys; a grid without fluid cells reads [1, 1].
pub(crate) fn rho_range_of_keys(k: &[u32]) -> [f64; 2] {
    if k[0] > k[1] {
        return [1.0; 2];
    }
    [f64::from(key_float(k[0])), f64::from(key_float(k[1]))]
}

/// Page-locked host memory for frames: the GPU copies into it at full speed.
struct PinnedFloats(cudarc::driver::PinnedHostSlice<f32>);

impl HostFloats for PinnedFloats {
    fn floats(&self) -> &[f32] {
        self.0.as_slice().unwrap_or(&[])
    }
    fn floats_mut(&mut self) -> &mut [f32] {
        self.0.as_mut_slice().unwrap_or(&mut [])
    }
    fn pinned(&self) -> bool {
        true
    }
}

/// Memory another API exported on the solver's GPU (a Vulkan buffer shared with the renderer),
/// imported into CUDA: frames can be written straight into it with [`FrameTarget::Device`].
/// It lives in device 0's primary context, which every [`CudaSolver`] shares, so it outlives
/// solver rebuilds. Drop it before the exporting API frees the memory.
pub struct SharedImport {
    ctx: Arc<CudaContext>,
    ext: cudarc::driver::sys::CUexternalMemory,
    ptr: u64,
    bytes: u64,
}

// SAFETY: the handles are plain driver handles, usable from any thread once the context is
// bound (every use binds it first).
unsafe impl Send for SharedImport {}
// SAFETY: as above; no method mutates through &self.
unsafe impl Sync for SharedImport {}

impl SharedImport {
    /// Import `bytes` bytes (the exporter's allocation size) of memory exported as an opaque
    /// file descriptor; `dedicated` for a dedicated allocation. On success CUDA owns `fd`.
    ///
    /// # Errors
    /// No CUDA, or the driver refused the handle (other GPU, wrong size).
    #[cfg(unix)]
    pub fn import_fd(fd: std::os::fd::OwnedFd, bytes: u64, dedicated: bool) -> Result<SharedImport, SolverError> {
        use cudarc::driver::sys;
        use std::os::fd::{AsRawFd, IntoRawFd};
        if !cuda_present() {
            return Err(SolverError::Backend("no CUDA driver (libcuda) to import shared memory into".into()));
        }
        let ctx = CudaContext::new(0).map_err(derr("opening device 0"))?;
        ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        let mut desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            handle: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 { fd: fd.as_raw_fd() },
            size: bytes,
            flags: if dedicated { sys::CUDA_EXTERNAL_MEMORY_DEDICATED } else { 0 },
            reserved: [0; 16],
        };
        let mut ext = std::mem::MaybeUninit::uninit();
        // SAFETY: desc is fully initialised and describes an open fd; on success the driver owns it.
        unsafe { sys::cuImportExternalMemory(ext.as_mut_ptr(), &raw mut desc) }
            .result()
            .map_err(derr("importing shared memory (cuImportExternalMemory)"))?;
        // The descriptor is now the driver's.
        let _ = fd.into_raw_fd();
        // SAFETY: the call succeeded, so the handle is initialised.
        let ext = unsafe { ext.assume_init() };
        let mut bd = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC { offset: 0, size: bytes, flags: 0, reserved: [0; 16] };
        let mut ptr = 0;
        // SAFETY: ext is a live handle; the buffer covers the whole import.
        if let Err(e) = unsafe { sys::cuExternalMemoryGetMappedBuffer(&raw mut ptr, ext, &raw mut bd) }.result() {
            // SAFETY: ext is live and not mapped.
            unsafe { sys::cuDestroyExternalMemory(ext) };
            return Err(derr("mapping shared memory (cuExternalMemoryGetMappedBuffer)")(e));
        }
        Ok(SharedImport { ctx, ext, ptr, bytes })
    }

    /// Device address of the memory (for [`FrameTarget::Device`]).
    #[must_use]
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Fill the first `values.len()` floats from the host and wait (tests of the shared path).
    ///
    /// # Errors
    /// More floats than the memory holds, or a driver error.
    pub fn write_floats(&self, values: &[f32]) -> Result<(), SolverError> {
        use cudarc::driver::sys;
        if values.len() as u64 * 4 > self.bytes {
            return Err(SolverError::Backend(format!("{} floats do not fit {} bytes of shared memory", values.len(), self.bytes)));
        }
        self.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        // SAFETY: the destination holds at least that many bytes (checked above).
        unsafe { sys::cuMemcpyHtoD_v2(self.ptr, values.as_ptr().cast(), values.len() * 4) }
            .result()
            .map_err(derr("writing shared memory"))?;
        self.ctx.synchronize().map_err(derr("waiting for the GPU"))
    }
}

impl Drop for SharedImport {
    fn drop(&mut self) {
        use cudarc::driver::sys;
        let _ = self.ctx.synchronize();
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the pointer came from cuExternalMemoryGetMappedBuffer and is freed once, before
        // its external memory is destroyed.
        unsafe {
            let _ = sys::cuMemFree_v2(self.ptr);
            let _ = sys::cuDestroyExternalMemory(self.ext);
        }
    }
}

/// The UUID of CUDA device 0 (to check a renderer runs on the same GPU), if there is one.
#[must_use]
pub fn device_uuid() -> Option<[u8; 16]> {
    if !cuda_present() {
        return None;
    }
    let ctx = CudaContext::new(0).ok()?;
    let u = ctx.uuid().ok()?;
    Some(u.bytes.map(|b| b as u8))
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
            "out of GPU memory: {cells} cells x {per:.0} B/cell = {:.2} GB needed, but {} has {:.2} GB free; use --set solver.precision=fp16s (half the DDF memory), an in-place scheme, or a smaller grid",
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

/// The `--gpu-architecture` of a device.
fn arch_of(dev: &DeviceInfo) -> String {
    format!("sm_{}{}", dev.cc.0, dev.cc.1)
}

/// Load a compiled module and look up its kernels.
fn kernels_of(ctx: &Arc<CudaContext>, ptx: cudarc::nvrtc::Ptx, cfg: &KernelConfig) -> Result<Kernels, SolverError> {
    let module = ctx.load_module(ptx).map_err(derr("loading the kernel module"))?;
    let get = |n: &str| module.load_function(n).map_err(|e| SolverError::Backend(format!("kernel {n} missing: {e:?}")));
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
        _module: module,
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
        self.set_params(c.params.clone())
    }
}

// ---------------------------------------------------------------- cell edits
// The host mirror knows the layout: it plans the edit, computes the slots of the cells around
// it (old flags, then new) and moves their raw DDFs through `DeviceIo`; afterwards the flags
// go up again and bricks and rows are classified anew.

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
        self.reclassify()
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
                };
                let g = GhostLayout::for_domain(&dom, block);
                assert_eq!(cfg.ghost_geometry(), g.geometry(), "{lattice} {n:?} block {block}");
                assert_eq!(cfg.slots(), g.storage_len());
            }
        }
    }
}
