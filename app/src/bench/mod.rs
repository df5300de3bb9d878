//! `esoflow bench`: the machine's copy bandwidth, then MLUPS, bytes and bandwidth of every
//! lattice x scheme x precision on an empty periodic box with BGK.
//! The `--compress`, `--subgrids` and `--amr` benches live in `compress`, `subgrid` and `amr`;
//! `common` holds what their reports share.

mod amr;
mod common;
mod compress;
mod subgrid;

use crate::BackendChoice;
use anyhow::{bail, Context};
use clap::Args;
use common::date_utc;
use rayon::prelude::*;
use sim_core::backend::cpu;
use sim_core::collision::Collision;
use sim_core::domain::Domain;
use sim_core::lattice::Lattice;
use sim_core::memory::Place;
use sim_core::precision::Precision;
use sim_core::schemes::Scheme;
use sim_core::{Params, Solver};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Backend to measure.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: BackendChoice,
    /// Edge of the 3D box, 4 to 65536 (2D boxes get the same cell count).
    #[arg(long, default_value_t = 100, value_parser = box_edge)]
    pub size: usize,
    /// Only these lattices (comma separated: D2Q9,D3Q19,D3Q27).
    #[arg(long, value_delimiter = ',')]
    pub lattice: Vec<String>,
    /// Only these schemes (comma separated, scene names: esoteric_pull,one_step_pull,...).
    #[arg(long, value_delimiter = ',')]
    pub scheme: Vec<String>,
    /// Only these precisions (comma separated: fp32,fp16s,fp16c).
    #[arg(long, value_delimiter = ',')]
    pub precision: Vec<String>,
    /// Seconds to time each case (at least 3 steps), 0.01 to 86400.
    #[arg(long, default_value_t = 1.0, value_parser = bench_secs)]
    pub seconds: f64,
    /// Also write the table as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Compression bench instead: run this scene, then compress its DDFs at each --tau and
    /// report ratio, error (NMSE), mass drift and compress/decompress time against an LBM step.
    #[arg(long, value_name = "SCENE")]
    pub compress: Option<PathBuf>,
    /// Compressed-subgrid bench instead (GPU): run this scene on the compressed-subgrid solver at
    /// each --tau (and uncompressed with --raw); time split per step, ratio, memory, NMSE.
    #[arg(long, value_name = "SCENE", conflicts_with = "compress")]
    pub subgrids: Option<PathBuf>,
    /// Adaptive-blocks bench instead: run this scene (with `[amr]`) on --backend after --steps
    /// warm-up steps for --seconds; MLUPS counted as Jaber, Essel & Sullivan 2025 count them, time in refinement,
    /// leaves per level, updates against the uniform finest grid.
    #[arg(long, value_name = "SCENE", conflicts_with_all = ["compress", "subgrids"])]
    pub amr: Option<PathBuf>,
    /// With --subgrids: also run the uncompressed subgrid path (time baseline, NMSE reference).
    #[arg(long, requires = "subgrids")]
    pub raw: bool,
    /// Override a scene key for --compress / --subgrids / --amr, e.g. --set domain.size=[384,128,128].
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Steps to run the scene before compressing (--compress), 0 to 10^12.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=sim_core::scene::MAX_STEPS))]
    pub steps: u64,
    /// Thresholds to sweep with --compress / --subgrids (comma separated; default 0,1e-7,1e-6,3e-6,1e-5,3e-5,1e-4).
    #[arg(long, value_delimiter = ',')]
    pub tau: Vec<f32>,
    /// Multi-GPU bench (CUDA, Esoteric Pull): each case on one GPU and split over this many;
    /// reports MLUPS, MLUPS per GPU, speedup and scaling efficiency. With --subgrids: the
    /// subgrids shared out over this many GPUs (compression.memory_budget is each GPU's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub gpus: u32,
    /// With --gpus N: weak scaling, the N-GPU box N times the one-GPU box along the cut (each
    /// GPU keeps --size^3 cells); efficiency is MLUPS_N / (N MLUPS_1) as for strong scaling.
    #[arg(long)]
    pub weak: bool,
}

fn box_edge(s: &str) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|_| format!("expected a whole number from 4 to 65536, got \"{s}\""))?;
    if !(4..=65_536).contains(&n) {
        return Err(format!("{n} is out of range: give an edge from 4 to 65536 cells"));
    }
    Ok(n)
}

fn bench_secs(s: &str) -> Result<f64, String> {
    crate::parse_f64_in(s, 0.01, 86_400.0)
}

/// Measured copy bandwidth in GB/s, counting bytes read plus bytes written.
#[must_use]
pub fn copy_bandwidth_gbs() -> f64 {
    let n = 64usize << 20; // 64 Mi f32 = 256 MiB per buffer
    let src: Vec<f32> = (0..n).into_par_iter().map(|i| i as f32).collect();
    let mut dst = vec![0.0f32; n];
    let chunk = 1 << 16;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    2.0 * (n * 4) as f64 / best / 1e9
}

fn pick<T: Copy>(all: &[T], names: &[String], name: impl Fn(T) -> String, what: &str) -> anyhow::Result<Vec<T>> {
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    names
        .iter()
        .map(|n| {
            all.iter()
                .copied()
                .find(|&x| name(x).eq_ignore_ascii_case(n))
                .with_context(|| format!("unknown {what} {n}; valid: {}", all.iter().map(|&x| name(x)).collect::<Vec<_>>().join(", ")))
        })
        .collect()
}

/// One measured case.
struct Row {
    lattice: Lattice,
    scheme: Scheme,
    precision: Precision,
    size: [usize; 3],
    steps: u64,
    mlups: f64,
    stored: f64,
    moved: f64,
    setup: f64,
}

impl Row {
    /// The row of a box of `size` cells as measured.
    fn of(size: [usize; 3], m: &Measured) -> Row {
        Row {
            lattice: m.info.lattice,
            scheme: m.info.scheme,
            precision: m.info.precision,
            size,
            steps: m.steps,
            mlups: m.mlups,
            stored: m.info.bytes_per_cell,
            moved: m.info.bytes_moved_per_cell,
            setup: m.setup,
        }
    }

    /// The row as a line of the table, its bandwidth against `copy` GB/s.
    fn print(&self, copy: f64) {
        let gbs = self.mlups * self.moved / 1e3;
        println!(
            "{:<6} {:<14} {:<6} {:>9.2} {:>10.1} {:>10.1} {:>8.2} {:>6.1}% {:>8.2}",
            self.lattice.name(),
            self.scheme.name(),
            self.precision.name(),
            self.mlups,
            self.stored,
            self.moved,
            gbs,
            100.0 * gbs / copy,
            self.setup
        );
    }
}

/// The lines above the bench table: the device, its copy bandwidth (measured `how`), the box.
fn print_head(device: &str, copy: f64, how: &str, edge: usize) {
    println!("device: {device}");
    println!("copy bandwidth: {copy:.2} GB/s (read + write, {how})");
    println!("box: empty, periodic, BGK; {edge}^3 cells in 3D, the same count in 2D");
    println!();
    println!(
        "{:<6} {:<14} {:<6} {:>9} {:>10} {:>10} {:>8} {:>7} {:>8}",
        "lattice", "scheme", "prec", "MLUPS", "B/cell", "B/step", "GB/s", "% copy", "set-up s"
    );
}

pub fn bench(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(bad) = a.tau.iter().find(|t| !t.is_finite() || **t < 0.0) {
        bail!("--tau {bad}: thresholds must be finite and >= 0");
    }
    if let Some(scene) = &a.amr {
        if !a.tau.is_empty() {
            bail!("--tau goes with --compress SCENE or --subgrids SCENE, not --amr");
        }
        amr::bench_amr(scene, &a.set, a.backend, a.steps, a.seconds, a.csv.as_ref())?;
        return Ok(ExitCode::SUCCESS);
    }
    if (!a.set.is_empty() || !a.tau.is_empty()) && a.compress.is_none() && a.subgrids.is_none() {
        bail!("--set and --tau go with --compress SCENE, --subgrids SCENE or --amr SCENE");
    }
    if let Some(scene) = &a.subgrids {
        let taus = if a.tau.is_empty() && !a.raw { vec![1e-6] } else { a.tau.clone() };
        subgrid::bench_subgrids(scene, &a.set, a.steps, &taus, a.raw, a.gpus as usize, a.csv.as_ref())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(scene) = &a.compress {
        let taus = if a.tau.is_empty() { compress::DEFAULT_TAUS.to_vec() } else { a.tau.clone() };
        compress::bench_compress(scene, &a.set, a.backend, a.steps, &taus, a.csv.as_ref())?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.backend == BackendChoice::Wgpu {
        if a.gpus > 1 {
            bail!("--gpus {} measures the CUDA backend; the wgpu backend runs one GPU", a.gpus);
        }
        return bench_wgpu(a);
    }
    let cuda = match a.backend {
        BackendChoice::Cpu | BackendChoice::Wgpu => false,
        BackendChoice::Cuda => {
            if let Err(why) = sim_core::build::gpu_available() {
                bail!("--backend cuda: {why}");
            }
            true
        }
        BackendChoice::Auto => sim_core::build::gpu_available().is_ok(),
    };
    if a.weak && a.gpus < 2 {
        bail!("--weak scales the box with the GPUs: add --gpus N with N of 2 or more");
    }
    if a.gpus > 1 {
        if !cuda {
            bail!("--gpus {} measures the CUDA backend; add --backend cuda", a.gpus);
        }
        return bench_multi(a);
    }
    let lattices = pick(&Lattice::ALL, &a.lattice, |l| l.name().to_string(), "lattice")?;
    let schemes = pick(&Scheme::ALL, &a.scheme, |s| s.name().to_string(), "scheme")?;
    let precisions = pick(&Precision::ALL, &a.precision, |p| p.name().to_string(), "precision")?;
    // Every box's memory plan first: a box that cannot fit stops the bench before it starts.
    for &l in &lattices {
        for &s in &schemes {
            for &p in &precisions {
                box_fits(l, s, p, box_size(l, a.size), if cuda { Place::Gpus(1) } else { Place::Cpu })?;
            }
        }
    }
    let (device, copy) = if cuda {
        let d = sim_core::build::gpu_available().map_err(anyhow::Error::msg)?;
        eprintln!("measuring device-to-device copy bandwidth ...");
        (format!("{} (sm_{}{})", d.name, d.cc.0, d.cc.1), sim_core::backend::cuda::copy_bandwidth_gbs().map_err(anyhow::Error::msg)?)
    } else {
        eprintln!("measuring copy bandwidth ...");
        (format!("{} ({} threads)", crate::cpu_name(), rayon::current_num_threads()), copy_bandwidth_gbs())
    };
    let backend = if cuda { "cuda" } else { "cpu" };
    print_head(&device, copy, "best of several large copies", a.size);
    let mut rows = Vec::new();
    for &l in &lattices {
        let size = box_size(l, a.size);
        for &s in &schemes {
            for &p in &precisions {
                let case = BoxCase { lattice: l, scheme: s, precision: p, size, ghost_block: 16, collision: Collision::Bgk, cuda };
                let row = Row::of(size, &measure_box(&case, a.seconds, &NO_STOP)?);
                row.print(copy);
                rows.push(row);
            }
        }
    }
    if cuda {
        disaggregation_gain(a)?;
    }
    if let Some(path) = &a.csv {
        write_csv(path, backend, &device, copy, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The bench table as CSV, with the device, date, command and copy bandwidth as comments.
fn write_csv(path: &std::path::Path, backend: &str, device: &str, copy: f64, rows: &[Row]) -> anyhow::Result<()> {
    sim_core::atomic_file::write_atomic(path, |f| -> std::io::Result<()> {
        let date = date_utc();
        let cmd: Vec<String> = std::env::args().collect();
        writeln!(f, "# device: {device}")?;
        writeln!(f, "# date: {date}")?;
        writeln!(f, "# command: {}", cmd.join(" "))?;
        writeln!(f, "# copy_gbs: {copy:.3}")?;
        writeln!(
            f,
            "backend,device,lattice,scheme,precision,nx,ny,nz,steps,mlups,bytes_per_cell,bytes_moved_per_step,gbs,pct_copy,copy_gbs,setup_s"
        )?;
        for r in rows {
            let gbs = r.mlups * r.moved / 1e3;
            writeln!(
                f,
                "{backend},\"{device}\",{},{},{},{},{},{},{},{:.3},{:.1},{:.1},{:.3},{:.2},{:.3},{:.3}",
                r.lattice.name(),
                r.scheme.name(),
                r.precision.name(),
                r.size[0],
                r.size[1],
                r.size[2],
                r.steps,
                r.mlups,
                r.stored,
                r.moved,
                gbs,
                100.0 * gbs / copy,
                copy,
                r.setup
            )?;
        }
        Ok(())
    })
    .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `esoflow bench --backend wgpu`: the adapter's copy bandwidth through a compute shader, then
/// each lattice's box on the wgpu solver (Esoteric Pull; FP32, and FP16S where the adapter has
/// half floats: what that backend runs).
fn bench_wgpu(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let lattices = pick(&Lattice::ALL, &a.lattice, |l| l.name().to_string(), "lattice")?;
    let schemes = pick(&Scheme::ALL, &a.scheme, |s| s.name().to_string(), "scheme")?;
    let precisions = pick(&Precision::ALL, &a.precision, |p| p.name().to_string(), "precision")?;
    if !a.scheme.is_empty() && schemes != [Scheme::EsotericPull] {
        bail!("--scheme: the wgpu backend runs esoteric_pull; drop --scheme or give --scheme esoteric_pull");
    }
    if precisions.contains(&Precision::Fp16c) && !a.precision.is_empty() {
        bail!("--precision: the wgpu backend stores fp32 or fp16s; drop fp16c");
    }
    let gpu = esoflow_wgpu::Gpu::open(&crate::solvers::adapter_choice()).map_err(|e| anyhow::anyhow!("--backend wgpu: {e}"))?;
    if precisions.contains(&Precision::Fp16s) && !gpu.has_f16() && !a.precision.is_empty() {
        bail!("--precision fp16s: {} has no half floats in shaders (shader-f16); give --precision fp32", gpu.describe());
    }
    // By default every precision the adapter stores.
    let precisions: Vec<Precision> =
        precisions.into_iter().filter(|&p| p == Precision::Fp32 || (p == Precision::Fp16s && gpu.has_f16())).collect();
    let device = gpu.describe();
    eprintln!("measuring the copy bandwidth of a compute shader ...");
    let copy = esoflow_wgpu::copy_bandwidth_gbs(&gpu)?;
    print_head(&device, copy, "a compute shader copying 16-byte words", a.size);
    let mut rows = Vec::new();
    for &l in &lattices {
        let size = box_size(l, a.size);
        for &p in &precisions {
            let setup_t = Instant::now();
            let (dom, params) = (Domain::periodic(l, size), Params::timing_box(Collision::Bgk));
            let mut solver = esoflow_wgpu::WgpuSolver::new(gpu.clone(), dom, params, p, &box_init(size))
                .map_err(|e| anyhow::anyhow!("--size {}: {e}", a.size))?;
            solver.synchronize()?;
            let setup = setup_t.elapsed().as_secs_f64();
            let (steps, mlups) = time_steps(&mut solver, true, a.seconds, &NO_STOP)?;
            let row = Row::of(size, &Measured { info: solver.info(), steps, mlups, setup });
            row.print(copy);
            rows.push(row);
        }
    }
    if let Some(path) = &a.csv {
        write_csv(path, "wgpu", &device, copy, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Never set: the bench's own timings run their full time.
static NO_STOP: AtomicBool = AtomicBool::new(false);

/// One bench box: an empty periodic box with a Taylor-Green shear, on one GPU or the CPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoxCase {
    /// Velocity set.
    pub lattice: Lattice,
    /// Streaming scheme.
    pub scheme: Scheme,
    /// DDF storage precision.
    pub precision: Precision,
    /// Cells per axis ([`box_size`]).
    pub size: [usize; 3],
    /// Block edge of LBM-Ghost (clamped to the box by the solver).
    pub ghost_block: usize,
    /// Collision operator.
    pub collision: Collision,
    /// On one GPU (CUDA) rather than the CPU.
    pub cuda: bool,
}

/// What timing a bench box gave.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The box's solver as it describes itself (bytes per cell, bytes moved, device).
    pub info: sim_core::SolverInfo,
    /// Steps timed.
    pub steps: u64,
    /// Million lattice-cell updates per second.
    pub mlups: f64,
    /// Seconds from nothing to a solver ready to step: the grid, its initial state and (CUDA)
    /// the kernels and the upload.
    pub setup: f64,
}

/// Set up the box `c` and time it after a warm-up for `seconds` (and at least 3 steps); `stop`
/// ends the timing early once 3 steps are done. `esoflow bench` and the viewer's streaming
/// schemes window measure with this.
///
/// # Errors
/// A GPU solver that does not start (no device, a kernel, the device's memory, an LBM-Ghost
/// block the CUDA backend does not run), a failed step.
pub fn measure_box(c: &BoxCase, seconds: f64, stop: &AtomicBool) -> anyhow::Result<Measured> {
    let setup_t = Instant::now();
    let (dom, params) = (Domain::periodic(c.lattice, c.size), Params::timing_box(c.collision));
    let init = box_init(c.size);
    let mut solver: Box<dyn Solver> = if c.cuda {
        Box::new(sim_core::backend::cuda::CudaSolver::with_ghost_block(dom, c.scheme, c.precision, params, c.ghost_block, init)?)
    } else {
        cpu::build(dom, c.scheme, c.precision, params, c.ghost_block, init)
    };
    solver.synchronize()?;
    let setup = setup_t.elapsed().as_secs_f64();
    let (steps, mlups) = time_steps(solver.as_mut(), c.cuda, seconds, stop)?;
    Ok(Measured { info: solver.info(), steps, mlups, setup })
}

/// The memory plan of a bench box, checked before it is allocated: one clear error with what
/// it needs, what is free and the largest --size that fits.
fn box_fits(l: Lattice, s: Scheme, p: Precision, size: [usize; 3], place: Place) -> anyhow::Result<()> {
    use sim_core::memory::{shortfall, Spec};
    let spec = Spec::dense(place, l, size, s, p);
    let free = sim_core::build::free_memory(place).map_err(anyhow::Error::msg)?;
    let Some(short) = shortfall(&spec, &free) else { return Ok(()) };
    // The largest edge whose box fits (2D boxes hold edge^3 cells too).
    let fits = |e: usize| shortfall(&spec.with_size(box_size(l, e)), &free).is_none();
    let (mut lo, mut hi) = (3usize, size[0].max(size[1]));
    if !fits(lo) {
        bail!("--size {}: out of memory: the {l} {s} {p} box {short}; no box fits", edge_of(l, size));
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    bail!("--size {}: out of memory: the {l} {s} {p} box {short}; --size {lo} fits", edge_of(l, size))
}

/// The --size of a bench box.
fn edge_of(l: Lattice, size: [usize; 3]) -> usize {
    if l.dims() == 2 {
        ((size[0] * size[1]) as f64).cbrt().round() as usize
    } else {
        size[0]
    }
}

/// The bench box of a lattice: `edge`^3 cells in 3D, the same count in 2D.
pub(crate) fn box_size(l: Lattice, edge: usize) -> [usize; 3] {
    if l.dims() == 2 {
        let e = ((edge * edge * edge) as f64).sqrt() as usize;
        [e, e, 1]
    } else {
        [edge, edge, edge]
    }
}

/// The box split over `n` GPUs: the one-GPU box (strong scaling), or with `--weak` that box
/// `n` times along the cut (z in 3D, y in 2D).
fn split_box(l: Lattice, a: &BenchArgs, n: usize) -> [usize; 3] {
    let mut b = box_size(l, a.size);
    if a.weak {
        b[if l.dims() == 2 { 1 } else { 2 }] *= n;
    }
    b
}

/// A Taylor-Green shear over the box (so the collision does real work).
fn box_init(size: [usize; 3]) -> impl Fn([usize; 3]) -> (f32, [f32; 3]) + Copy + Sync {
    let (nx, ny) = (size[0] as f32, size[1] as f32);
    move |q: [usize; 3]| {
        let (x, y) = (q[0] as f32 / nx, q[1] as f32 / ny);
        let k = 2.0 * std::f32::consts::PI;
        (1.0, [0.05 * (k * x).sin() * (k * y).cos(), -0.05 * (k * x).cos() * (k * y).sin(), 0.0])
    }
}

/// Warm up, then step for at least `seconds` (and 3 steps), or until `stop` is set once 3 steps
/// are done: (steps timed, MLUPS).
fn time_steps(solver: &mut dyn Solver, device: bool, seconds: f64, stop: &AtomicBool) -> anyhow::Result<(u64, f64)> {
    solver.step(if device { 20 } else { 2 })?; // warm up (page faults, caches, module load)
    solver.synchronize()?;
    let batch = if device { 50 } else { 1 };
    let t = Instant::now();
    let mut steps = 0u64;
    while steps < 3 || (t.elapsed().as_secs_f64() < seconds && !stop.load(Ordering::Relaxed)) {
        solver.step(batch)?;
        solver.synchronize()?;
        steps += batch;
    }
    let n = solver.info().size;
    Ok((steps, (n[0] * n[1] * n[2]) as f64 * steps as f64 / t.elapsed().as_secs_f64() / 1e6))
}

/// `--gpus N`: every chosen lattice and precision with Esoteric Pull, on one GPU and split over
/// N; MLUPS, per GPU, speedup and efficiency (MLUPS_N / (N MLUPS_1)).
fn bench_multi(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    use sim_core::backend::cuda::{self, multi as cuda_multi};
    let n = a.gpus as usize;
    let lattices = pick(&Lattice::ALL, &a.lattice, |l| l.name().to_string(), "lattice")?;
    let precisions = pick(&Precision::ALL, &a.precision, |p| p.name().to_string(), "precision")?;
    if let Some(s) = a.scheme.iter().find(|s| s.as_str() != Scheme::EsotericPull.name()) {
        bail!("--gpus {n} measures esoteric_pull only (the scheme multi-GPU runs use); drop --scheme {s}");
    }
    let devices = cuda_multi::devices_for(n)?;
    for &l in &lattices {
        for &p in &precisions {
            box_fits(l, Scheme::EsotericPull, p, split_box(l, a, n), Place::Gpus(n))?;
            box_fits(l, Scheme::EsotericPull, p, box_size(l, a.size), Place::Gpus(1))?;
        }
    }
    let d = sim_core::build::gpu_available().map_err(anyhow::Error::msg)?;
    let device = format!("{} (sm_{}{})", d.name, d.cc.0, d.cc.1);
    eprintln!("measuring device-to-device copy bandwidth ...");
    let copy = cuda::copy_bandwidth_gbs().map_err(anyhow::Error::msg)?;
    println!("device: {n} x {device}, devices {devices:?}");
    println!("copy bandwidth (one GPU): {copy:.2} GB/s (read + write)");
    println!("box: empty, periodic, BGK, Esoteric Pull; {}^3 cells in 3D, the same count in 2D; slabs along the last axis", a.size);
    if a.weak {
        println!("weak scaling: the {n}-GPU box is {n} times the one-GPU box along the last axis (the same cells per GPU)");
    }
    println!();
    println!(
        "{:<6} {:<6} {:>10} {:>10} {:>10} {:>8} {:>7} {:>8}  transport",
        "lattice",
        "prec",
        "1 GPU",
        format!("{n} GPUs"),
        "per GPU",
        "speedup",
        "eff.",
        "% copy1"
    );
    let mut lines = Vec::new();
    for &l in &lattices {
        let size = box_size(l, a.size);
        for &p in &precisions {
            let (one_mlups, moved) = {
                let mut s = cuda::CudaSolver::new(
                    Domain::periodic(l, size),
                    Scheme::EsotericPull,
                    p,
                    Params::timing_box(Collision::Bgk),
                    box_init(size),
                )?;
                let (_, m) = time_steps(&mut s, true, a.seconds, &NO_STOP)?;
                (m, s.info().bytes_moved_per_cell)
            };
            let setup_t = Instant::now();
            let big = split_box(l, a, n);
            let mut s = cuda_multi::MultiCudaSolver::new(
                Domain::periodic(l, big),
                Scheme::EsotericPull,
                p,
                Params::timing_box(Collision::Bgk),
                &devices,
                box_init(big),
            )?;
            s.synchronize()?;
            eprintln!("{} {}: {n} GPUs ready to step after {:.2} s of set-up", l.name(), p.name(), setup_t.elapsed().as_secs_f64());
            let (steps, multi) = time_steps(&mut s, true, a.seconds, &NO_STOP)?;
            let speedup = multi / one_mlups;
            let eff = speedup / n as f64;
            let pct = 100.0 * one_mlups * moved / 1e3 / copy;
            println!(
                "{:<6} {:<6} {:>10.1} {:>10.1} {:>10.1} {:>7.3}x {:>6.1}% {:>7.1}%  {}",
                l.name(),
                p.name(),
                one_mlups,
                multi,
                multi / n as f64,
                speedup,
                100.0 * eff,
                pct,
                s.transport()
            );
            lines.push(format!(
                "\"{device}\",{n},{},{},{},{},{},{steps},{one_mlups:.3},{multi:.3},{:.3},{speedup:.4},{eff:.4},{},{copy:.3}",
                l.name(),
                p.name(),
                big[0],
                big[1],
                big[2],
                multi / n as f64,
                s.transport()
            ));
        }
    }
    if let Some(path) = &a.csv {
        sim_core::atomic_file::write_atomic(path, |f| -> std::io::Result<()> {
            let cmd: Vec<String> = std::env::args().collect();
            writeln!(f, "# device: {n} x {device}")?;
            writeln!(f, "# date: {}", date_utc())?;
            writeln!(f, "# command: {}", cmd.join(" "))?;
            writeln!(f, "# copy_gbs (one GPU, read + write): {copy:.3}")?;
            if a.weak {
                writeln!(f, "# weak scaling: nx,ny,nz are the {n}-GPU box, {n} times the one-GPU box along the last axis")?;
            }
            writeln!(
                f,
                "device,gpus,lattice,precision,nx,ny,nz,steps,mlups_1gpu,mlups_ngpu,mlups_per_gpu,speedup,efficiency,transport,copy_gbs"
            )?;
            for l in &lines {
                writeln!(f, "{l}")?;
            }
            Ok(())
        })
        .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The disaggregated design on a scene with an obstacle, an inlet and an outlet: plain-fluid
/// bricks through the lean kernel and the rest through the boundary kernel, against every
/// brick through the boundary kernel.
fn disaggregation_gain(a: &BenchArgs) -> anyhow::Result<()> {
    use sim_core::backend::cuda::Dispatch;
    let n = a.size;
    if n < 32 {
        println!();
        println!("disaggregation: skipped, the channel needs --size 32 or more");
        return Ok(());
    }
    box_fits(Lattice::D3Q19, Scheme::EsotericPull, Precision::Fp32, [n, n / 2, n / 2], Place::Gpus(1))?;
    let text = format!(
        "[domain]\nsize = [{n}, {h}, {h}]\n[boundaries]\nx_min = {{ type = \"inlet\", velocity = [0.05, 0, 0] }}\nx_max = \"outlet\"\ny_min = \"wall\"\ny_max = \"wall\"\nz_min = \"wall\"\nz_max = \"wall\"\n[fluid]\nreynolds = 200\nlength = {d}\nvelocity = 0.05\n[[obstacles]]\nshape = \"sphere\"\ncenter = [{cx}, {c}, {c}]\nradius = {r}\n",
        h = n / 2,
        d = n / 8,
        cx = n / 4,
        c = n / 4,
        r = n / 16
    );
    let ls = sim_core::scene::from_str(&text, "bench channel", PathBuf::from("."), &[])?;
    let mut s = sim_core::backend::cuda::CudaSolver::from_scene(&ls)?;
    let (regs_lean, regs_boundary, regs_fused) = s.registers();
    let (bl, bb) = s.brick_counts();
    let brick = s.brick();
    println!();
    println!("disaggregation: D3Q19 esoteric_pull fp32, channel {}x{}x{} with a sphere, inlet, outlet, walls", n, n / 2, n / 2);
    println!(
        "  bricks of {}x{}x{}: {bl} plain fluid, {bb} with boundaries; registers: lean {regs_lean}, boundary {regs_boundary}, fused {regs_fused}",
        brick[0], brick[1], brick[2]
    );
    let cells = (n * (n / 2) * (n / 2)) as f64;
    let mut time = |d: Dispatch| -> anyhow::Result<f64> {
        s.set_dispatch(d);
        s.step(20)?;
        s.synchronize()?;
        let t = Instant::now();
        let mut steps = 0u64;
        while steps < 50 || t.elapsed().as_secs_f64() < a.seconds {
            s.step(50)?;
            s.synchronize()?;
            steps += 50;
        }
        Ok(cells * steps as f64 / t.elapsed().as_secs_f64() / 1e6)
    };
    let base = time(Dispatch::BoundaryOnly)?;
    let split = time(Dispatch::Split)?;
    let fused = time(Dispatch::Fused)?;
    println!("  MLUPS: {base:.0} every brick through the boundary kernel (baseline)");
    println!("         {split:.0} split: lean kernel + boundary kernel, two launches ({:.2}x)", split / base);
    println!("         {fused:.0} fused: one launch, lean or boundary path per brick ({:.2}x)", fused / base);
    Ok(())
}
