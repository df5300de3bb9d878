//! `esoflow`: the window (no subcommand or `view`) and the command-line tools (run, bench, info).

mod bench;
mod pacer;
mod run;
mod solvers;
mod viewer;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// The default scene, embedded so `esoflow` works from any directory.
pub const DEFAULT_SCENE: &str = include_str!("../../scenes/cylinder_2d.toml");
/// Name of the default scene in messages.
pub const DEFAULT_SCENE_NAME: &str = "scenes/cylinder_2d.toml (built in)";

#[derive(Parser, Debug)]
#[command(name = "esoflow", version, about = "Esoflow: a lattice Boltzmann fluid simulator you watch and steer while it runs")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// Which solver backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA where an NVIDIA GPU is usable, else wgpu on a GPU that runs the scene, else the
    /// CPU (with a notice).
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// The CUDA backend (fails with a message where it is not available).
    Cuda,
    /// The wgpu backend: WGSL kernels on any GPU through Vulkan, Metal or DX12 (the adapter
    /// `esoflow info` lists first, or the one ESOFLOW_ADAPTER names by index or name).
    Wgpu,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Open a scene in the window (the default with no subcommand).
    View(viewer::ViewArgs),
    /// Run a scene headless, with a progress bar; optionally export fields, stats and checkpoints.
    Run(run::RunArgs),
    /// Measure this machine's memory-copy bandwidth and every lattice x scheme x precision.
    Bench(bench::BenchArgs),
    /// List backends, devices and memory.
    Info,
}

/// What stderr shows by default: our warnings and errors; of the window and GPU libraries only
/// their errors (their warnings are about the desktop, e.g. a display that reports no size, and
/// say nothing a user can act on; ESOFLOW_LOG=warn shows them).
const DEFAULT_LOG: &str = "warn,winit=error,egui_wgpu=error,wgpu_hal=error,wgpu_core=error,naga=error";

fn main() -> ExitCode {
    use std::io::IsTerminal;
    quiet_runtime_dir();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("ESOFLOW_LOG").unwrap_or_else(|_| DEFAULT_LOG.into()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Under a launcher `run` cuts its grid into one slab per process; the viewer and the bench
    // run in one process, and each process of a launch would do the whole work.
    let env = |k: &str| std::env::var(k).ok();
    let launched = match &cli.command {
        Some(Command::Run(_)) => sim_core::ranks::from_env(env).map(|r| r.filter(|r| r.world > 1)),
        Some(Command::View(_)) | None => sim_core::ranks::refuse_several(env, "the viewer").map(|()| None),
        Some(Command::Bench(_)) => sim_core::ranks::refuse_several(env, "the bench").map(|()| None),
        Some(Command::Info) => Ok(None),
    };
    let launch = match launched {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Some(Command::Run(a)) => match launch {
            Some(r) if r.rank > 0 => run::follow(&a, &r),
            _ => run::run(&a, launch.as_ref()),
        },
        Some(Command::Bench(a)) => bench::bench(&a),
        Some(Command::Info) => info(),
        Some(Command::View(a)) => viewer::window::run_window(&a),
        None => {
            // The window on the built-in default scene, running.
            let a = viewer::ViewArgs {
                scene: None,
                backend: BackendChoice::Auto,
                gpus: solvers::Gpus::Count(1),
                set: Vec::new(),
                paused: false,
                frames: None,
                screenshot: None,
                view: None,
                steps_per_frame: 20,
                bench: None,
                bench_fps: 0.0,
                frame_path: viewer::frames::FramePath::Auto,
                record: None,
                every: None,
                probe: Vec::new(),
            };
            viewer::window::run_window(&a)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Where XDG_RUNTIME_DIR is unset or not a folder (a container, `su`, a CI job), give this
/// process a private one: the Wayland client library inside the Vulkan drivers otherwise prints
/// "error: XDG_RUNTIME_DIR is invalid" once per GPU query, which is noise in a run's output.
/// Called first in `main`, before any thread exists.
fn quiet_runtime_dir() {
    use std::os::unix::fs::DirBuilderExt;
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        return;
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let dir = std::env::temp_dir().join(format!("esoflow-runtime-{user}"));
    if dir.is_dir() || std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}

/// Parse a number for a flag that takes values from `lo` to `hi` (finite): the message says
/// which values are valid.
///
/// # Errors
/// Not a number, not finite, or out of the range.
pub fn parse_f64_in(s: &str, lo: f64, hi: f64) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("expected a number from {lo} to {hi}, got \"{s}\""))?;
    if !(v >= lo && v <= hi) {
        return Err(format!("{} is out of range: give a number from {lo} to {hi}", s.trim()));
    }
    Ok(v)
}

/// Total and available memory of this machine in bytes, from /proc/meminfo.
#[must_use]
pub fn host_memory() -> Option<(u64, u64)> {
    sim_core::memory::host_memory()
}

/// The CPU model name, from /proc/cpuinfo.
#[must_use]
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into())
}

fn info() -> anyhow::Result<ExitCode> {
    println!("Esoflow {}", env!("CARGO_PKG_VERSION"));
    println!();
    println!("backend cpu: available (reference backend)");
    println!("  device:  {}", cpu_name());
    println!("  threads: {}", rayon::current_num_threads());
    if let Some((total, avail)) = host_memory() {
        println!("  memory:  {:.1} GiB total, {:.1} GiB available", gib(total), gib(avail));
        let free = sim_core::memory::Free { host: Some(avail), device: None };
        if let Some(n) = cube_plan(sim_core::memory::Place::Cpu).largest_fitting(&free) {
            println!("  largest D3Q19 Esoteric-Pull FP32 cube `esoflow run` fits (memory plan, with exports): {}^3 cells", n[0]);
        }
    }
    match sim_core::build::gpu_available() {
        Ok(d) => {
            println!("backend cuda: available");
            println!("  device:  {} (compute capability {}.{})", d.name, d.cc.0, d.cc.1);
            println!("  memory:  {:.1} GiB total, {:.1} GiB free", gib(d.mem.1 as u64), gib(d.mem.0 as u64));
            let free = sim_core::memory::Free { host: sim_core::memory::host_available(), device: Some(d.mem.0 as u64) };
            if let Some(n) = cube_plan(sim_core::memory::Place::Gpus(1)).largest_fitting(&free) {
                println!("  largest D3Q19 Esoteric-Pull FP32 cube `esoflow run` fits (memory plan, with exports): {}^3 cells", n[0]);
            }
        }
        Err(why) => println!("backend cuda: not available: {why}"),
    }
    let adapters = esoflow_wgpu::adapters();
    let auto = solvers::auto_adapter();
    if adapters.is_empty() {
        println!("backend wgpu: not available: no adapter that runs compute shaders (Vulkan, Metal or DX12)");
    } else {
        println!("backend wgpu: available (choose an adapter with ESOFLOW_ADAPTER=INDEX or a part of its name)");
        for a in &adapters {
            println!("  {a}");
        }
    }
    let auto_says = if sim_core::build::gpu_available().is_ok() {
        "the CUDA backend".to_string()
    } else if let Some(a) = auto {
        format!("the wgpu backend on adapter {} ({}), where it runs the scene; else the CPU", a.index, a.name)
    } else {
        "the CPU backend (no hardware GPU adapter)".to_string()
    };
    println!("--backend auto runs on {auto_says}");
    Ok(ExitCode::SUCCESS)
}

/// The memory plan of an `esoflow run` of a D3Q19 Esoteric-Pull FP32 cube with exports.
fn cube_plan(place: sim_core::memory::Place) -> sim_core::memory::Spec {
    use sim_core::{lattice::Lattice, precision::Precision, schemes::Scheme};
    let dense = sim_core::memory::Spec::dense(place, Lattice::D3Q19, [1 << 14; 3], Scheme::EsotericPull, Precision::Fp32);
    sim_core::memory::Spec { saved_states: 2, checkpoints: true, export: true, ..dense }
}

/// Bytes to GiB.
#[must_use]
pub fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}
