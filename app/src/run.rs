//! `esoflow run`: run a scene headless.

pub mod probes;
pub mod record;

use crate::pacer::CheckpointPacer;
use crate::solvers::load_scene;
use crate::BackendChoice;
use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use sim_core::build::Keeps;
use sim_core::checkpoint::Checkpoint;
use sim_core::export::{write_fields_csv, write_fields_vti, StatsColumns, StatsWriter};
use sim_core::forces::{ForceHistory, Keep, NoShedding};
use sim_core::ranks::Rank;
use sim_core::units::{human_bytes, si, Units};
use sim_core::Solver;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Exit code of a run stopped by a blow-up.
pub const EXIT_BLOWUP: u8 = 3;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("picture").args(["screenshot", "record"]).multiple(true)))]
pub struct RunArgs {
    /// Scene file (TOML). Default: the built-in cylinder_2d scene.
    pub scene: Option<PathBuf>,
    /// Solver backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Split the grid over this many GPUs of this machine (CUDA; slabs along z, y in 2D, halos
    /// exchanged through NCCL), or `auto`: the count predicted fastest for this scene from
    /// boxes of its cross-section timed here at start (one GPU where a split would not pay).
    #[arg(long, default_value = "1", value_parser = crate::solvers::parse_gpus)]
    pub gpus: crate::solvers::Gpus,
    /// Steps to run (default: the scene's solver.steps), 0 to 10^12.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_STEPS))]
    pub steps: Option<u64>,
    /// Override a scene key, e.g. --set solver.scheme=aa --set fluid.reynolds=200.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Write fields.csv, fields.vti (see --export-fields) and stats.csv into this directory.
    #[arg(long, value_name = "DIR")]
    pub export: Option<PathBuf>,
    /// Which field files --export writes (at the end, with --every and after a blow-up):
    /// all (fields.csv and fields.vti), csv, vti, or none (stats.csv only). In a launch of
    /// several processes the VTK file is fields.pvti with one piece per process, each written
    /// by its process (the folder must be one every process sees at the same path).
    #[arg(long, value_enum, value_name = "WHICH", default_value = "all", requires = "export")]
    pub export_fields: ExportFields,
    /// Also export the fields every K steps (fields_STEP.csv / .vti), K >= 1; with --record,
    /// a frame every K steps.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=MAX_STEPS))]
    pub every: Option<u64>,
    /// Sample the flow at a cell every --probe-every steps: X,Y (2D) or X,Y,Z (3D) in cells,
    /// optionally named, NAME=X,Y[,Z]; repeatable, after the scene's [[probes]]. Each probe is
    /// summarised at the end; with --export every sample goes to DIR/probes.csv, columns
    /// step,probe,x,y,z,ux,uy,uz,speed,rho,pressure,vorticity (lattice units).
    #[arg(long, value_name = "X,Y[,Z]")]
    pub probe: Vec<String>,
    /// Steps between two probe samples (taken at the multiples of K, step 0 included), 1 to
    /// 10^12.
    #[arg(long, value_name = "K", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=MAX_STEPS))]
    pub probe_every: u64,
    /// Save a checkpoint to this file at the end (and every K steps with --every).
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// Resume from a checkpoint made on the same scene (stats.csv and probes.csv in --export
    /// are continued, and so are the frames of --record).
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
    /// After the run, render the view offscreen (no window) and write it as PNG.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<PathBuf>,
    /// Record the view (--view) offscreen every --every K steps (default every 100) as numbered
    /// PNGs DIR/frame_000000.png, frame_000001.png, ...; at the end, where ffmpeg is on the PATH
    /// (or ESOFLOW_FFMPEG names it), also DIR/recording.mp4 (H.264, 30 frames a second). Frames
    /// of an earlier recording in DIR are replaced (continued after --resume).
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// The view for --screenshot and --record: field=speed|ux|uy|uz|rho|vorticity|q, cmap=viridis|turbo|diverging,
    /// range=MIN:MAX (default auto), slices=X:Y:Z (3D), size=WIDTHxHEIGHT, iso=vorticity:T|q:T
    /// (3D isosurface at threshold T), solids=on|off (3D obstacle surfaces), overlay=bricks (the
    /// bricks on the slices), outlines=bricks (3D: boundary and all-solid bricks as boxes),
    /// outlines=subgrids (3D, compressed runs: subgrids coloured by compression ratio) or
    /// outlines=bricks+subgrids, legend=on|off (the legend strip; off for a bare picture).
    #[arg(long, value_name = "SPEC", requires = "picture")]
    pub view: Option<String>,
    /// Where stderr is not a terminal (a log file, a pipe), print a progress line every SECONDS
    /// (0.1 to 86400).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = progress_secs)]
    pub progress_every: f64,
}

/// The field files `--export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFields {
    /// fields.csv and fields.vti.
    All,
    /// fields.csv only.
    Csv,
    /// fields.vti only.
    Vti,
    /// No field files: stats.csv only.
    None,
}

impl ExportFields {
    fn csv(self) -> bool {
        matches!(self, ExportFields::All | ExportFields::Csv)
    }
    fn vti(self) -> bool {
        matches!(self, ExportFields::All | ExportFields::Vti)
    }
}

/// Largest `--steps` and `--every` (as the scene's `solver.steps`).
pub const MAX_STEPS: u64 = sim_core::scene::MAX_STEPS;

fn progress_secs(s: &str) -> Result<f64, String> {
    crate::parse_f64_in(s, 0.1, 86_400.0)
}

fn export_fields(dir: &Path, solver: &dyn Solver, suffix: &str, which: ExportFields) -> anyhow::Result<Vec<PathBuf>> {
    if which == ExportFields::None {
        return Ok(Vec::new());
    }
    let mut written = Vec::new();
    // A launch of several processes writes a .pvti, each process its own piece.
    if which.vti() {
        if let Some(pieces) = solver.write_vti_pieces(dir, &format!("fields{suffix}")) {
            written
                .extend(pieces.with_context(|| format!("writing the pieces of {}", dir.join(format!("fields{suffix}.pvti")).display()))?);
        }
    }
    let pieces = !written.is_empty();
    if which.csv() || (which.vti() && !pieces) {
        let f = solver.fields();
        if which.csv() {
            let csv = dir.join(format!("fields{suffix}.csv"));
            write_fields_csv(&csv, &f).with_context(|| format!("writing {}", csv.display()))?;
            written.push(csv);
        }
        if which.vti() && !pieces {
            let vti = dir.join(format!("fields{suffix}.vti"));
            write_fields_vti(&vti, &f).map_err(anyhow::Error::msg)?;
            written.push(vti);
        }
    }
    Ok(written)
}

/// What [`check_outputs`] holds for the run: the locks of its output folders (released when
/// the run ends) and the GPU adapter its pictures are rendered on.
struct Outputs {
    _locks: Vec<sim_core::atomic_file::FolderLock>,
    gpu: Option<crate::viewer::headless::Gpu>,
}

/// Check every destination a run writes to before the first step, so that a bad path fails
/// at once instead of after the compute: the export and recording folders are created, must
/// take files and are held for this run alone (a second run into the same folder is
/// refused), and leftover temporary files of killed runs in them are removed; the
/// checkpoint's folder must take files (a killed run's leftovers of the same checkpoint are
/// removed), and a screenshot must be a PNG in a folder that takes files; a screenshot or a
/// recording needs a GPU adapter to render it (opened here and returned for the run).
fn check_outputs(a: &RunArgs) -> anyhow::Result<Outputs> {
    let mut locks = Vec::new();
    let say_removed = |n: usize, what: &Path| {
        if n > 0 {
            eprintln!("note: removed {n} partial file(s) that an interrupted run left in {}", what.display());
        }
    };
    if let Some(d) = &a.export {
        std::fs::create_dir_all(d).with_context(|| format!("--export {}: cannot create the folder", d.display()))?;
        sim_core::atomic_file::probe_dir(d).with_context(|| format!("--export {}: cannot write into the folder", d.display()))?;
        locks.push(sim_core::atomic_file::FolderLock::take(d).map_err(|e| anyhow!("--export {}: {e}", d.display()))?);
        say_removed(sim_core::atomic_file::remove_leftovers(d), d);
    }
    if let Some(c) = &a.checkpoint {
        sim_core::atomic_file::check_writable(c).map_err(|e| anyhow!("--checkpoint {e}"))?;
        say_removed(sim_core::atomic_file::remove_leftovers_of(c), &sim_core::atomic_file::folder_of(c));
    }
    if let Some(d) = &a.record {
        if d.exists() && !d.is_dir() {
            bail!("--record {}: this is a file, not a folder; give a folder for the frames (it is created if missing)", d.display());
        }
        std::fs::create_dir_all(d).with_context(|| format!("--record {}: cannot create the folder", d.display()))?;
        sim_core::atomic_file::probe_dir(d).with_context(|| format!("--record {}: cannot write into the folder", d.display()))?;
        // The same folder as --export is held once.
        if a.export.as_ref().is_none_or(|e| !same_folder(e, d)) {
            locks.push(sim_core::atomic_file::FolderLock::take(d).map_err(|e| anyhow!("--record {}: {e}", d.display()))?);
        }
        let _ = sim_core::atomic_file::remove_leftovers(d);
    }
    let Some(p) = &a.screenshot else {
        let Some(d) = &a.record else { return Ok(Outputs { _locks: locks, gpu: None }) };
        let gpu =
            crate::viewer::headless::gpu().map_err(|e| anyhow!("--record {}: no GPU adapter to render the frames: {e}", d.display()))?;
        return Ok(Outputs { _locks: locks, gpu: Some(gpu) });
    };
    let png = p.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !png {
        bail!("--screenshot {}: screenshots are written as PNG; give a file name ending in .png", p.display());
    }
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--screenshot {}: cannot create the folder {}", p.display(), dir.display()))?;
    }
    sim_core::atomic_file::check_writable(p).map_err(|e| anyhow!("--screenshot {e}"))?;
    let gpu = crate::viewer::headless::gpu().map_err(|e| anyhow!("--screenshot {}: no GPU adapter to render it: {e}", p.display()))?;
    Ok(Outputs { _locks: locks, gpu: Some(gpu) })
}

/// Whether two paths name the same folder.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Steps between two frames of `--record` without `--every`.
pub const RECORD_EVERY: u64 = 100;

/// `--record`: the view rendered offscreen every `every` steps into the numbered frames of
/// [`record::frame_path`], made into a video at the end.
struct Recorder {
    dir: PathBuf,
    every: u64,
    /// Number of the next frame.
    next: u64,
    /// Frames this run wrote, and the steps of its first and last.
    written: u64,
    steps: (u64, u64),
}

impl Recorder {
    /// Start a recording in `dir` (checked by [`check_outputs`]): an earlier recording there
    /// (frames and video) is removed, or its frames continued after a resume.
    fn new(dir: &Path, every: u64, resumed: bool) -> Recorder {
        let next = if resumed {
            record::frames(dir).last().map_or(0, |&i| i + 1)
        } else {
            let n = record::remove_recording(dir);
            if n > 0 {
                eprintln!("note: removed {n} frames of an earlier recording from {}", dir.display());
            }
            0
        };
        Recorder { dir: dir.to_path_buf(), every, next, written: 0, steps: (0, 0) }
    }

    /// Whether `step` is recorded.
    fn due(&self, step: u64) -> bool {
        step % self.every == 0
    }

    /// Render the solver's state as the next frame (notes of the view on the first only).
    fn frame(&mut self, gpu: &crate::viewer::headless::Gpu, solver: &dyn Solver, view: &crate::viewer::ViewSpec) -> anyhow::Result<()> {
        let p = record::frame_path(&self.dir, self.next);
        let img = crate::viewer::headless::render_solver(gpu, solver, view, self.written == 0)
            .with_context(|| format!("--record: frame {}", p.display()))?;
        crate::viewer::headless::save_png(&img, &p)?;
        let step = solver.time_step();
        self.steps = if self.written == 0 { (step, step) } else { (self.steps.0, step) };
        self.written += 1;
        self.next += 1;
        Ok(())
    }

    /// Say what was recorded and make the video; returns the video where one was made. A
    /// failed encoding is a warning: the frames stay.
    fn finish(&self) -> Option<PathBuf> {
        if self.written == 0 {
            eprintln!("--record: no frames: the run ended before its first multiple of {} steps", self.every);
            return None;
        }
        eprintln!(
            "recorded {} frames (steps {} to {}, every {}) into {}",
            self.written,
            self.steps.0,
            self.steps.1,
            self.every,
            self.dir.display()
        );
        match record::encode_video(&self.dir, record::FPS) {
            Ok(Some(v)) => {
                eprintln!("encoded {} with ffmpeg", v.display());
                Some(v)
            }
            Ok(None) => {
                eprintln!(
                    "ffmpeg is not on the PATH (or set {}=/path/to/ffmpeg); to make the video, run:\n  {}",
                    record::FFMPEG_ENV,
                    record::ffmpeg_command(&self.dir, record::FPS)
                );
                None
            }
            Err(e) => {
                eprintln!("warning: no video: {e}; the frames are in {}", self.dir.display());
                None
            }
        }
    }
}

/// Signals that ask a run to stop (Ctrl+C, SIGTERM, SIGHUP): the first finishes the steps under
/// way and writes what was asked for, the second exits at once (every file is written whole or
/// not at all, so that loses nothing already written).
static STOPS: AtomicU32 = AtomicU32::new(0);

/// Exit code of a run stopped by a signal (128 + SIGINT, as shells report Ctrl+C).
pub const EXIT_STOPPED: u8 = 130;

fn catch_stops() {
    let r = ctrlc::set_handler(|| {
        if STOPS.fetch_add(1, Ordering::SeqCst) == 0 {
            eprintln!("\nstopping: finishing the steps under way, then writing the outputs asked for (press Ctrl+C again to quit at once)");
        } else {
            eprintln!("\nquit at once");
            std::process::exit(i32::from(EXIT_STOPPED));
        }
    });
    if let Err(e) = r {
        tracing::warn!("Ctrl+C will end the run at once: {e}");
    }
}

fn stop_asked() -> bool {
    STOPS.load(Ordering::SeqCst) > 0
}

/// How far a run got and how fast, for the progress bar, the plain progress lines (stderr not
/// a terminal) and the stats rows.
struct Progress {
    bar: ProgressBar,
    plain: Option<(f64, Instant)>,
    start: u64,
    end: u64,
    t0: Instant,
}

impl Progress {
    fn new(start: u64, end: u64, plain_every: f64) -> Progress {
        let plain = !std::io::stderr().is_terminal();
        let bar = if plain { ProgressBar::hidden() } else { ProgressBar::new(end - start) };
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {msg}  ETA {eta}").unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress { bar, plain: plain.then(|| (plain_every, Instant::now())), start, end, t0: Instant::now() }
    }

    fn update(&mut self, step: u64, msg: String) {
        self.bar.set_position(step - self.start);
        if let Some((every, last)) = &mut self.plain {
            if last.elapsed().as_secs_f64() >= *every {
                *last = Instant::now();
                let done = (step - self.start) as f64;
                let total = (self.end - self.start).max(1) as f64;
                let secs = self.t0.elapsed().as_secs_f64();
                let eta = if done > 0.0 { format!("{:.0} s", secs * (total - done) / done) } else { "-".into() };
                eprintln!("progress: step {step} of {} ({:.1} %), {msg}, {secs:.0} s elapsed, ETA {eta}", self.end, 100.0 * done / total);
            }
        }
        self.bar.set_message(msg);
    }
}

/// The solver's own summary of the chunk just run, for the progress line.
fn chunk_message(solver: &dyn Solver, mlups: f64) -> String {
    match (solver.compression(), solver.amr_counts()) {
        (Some(c), _) => format!("{mlups:.1} MLUPS, compressed {:.1}x ({})", c.ratio, human_bytes(c.bytes)),
        (None, Some(i)) => format!("{mlups:.1} MLUPS, leaves per level {:?}, {:.1} % in refinement", i.leaves, 100.0 * i.adapt_share()),
        (None, None) => format!("{mlups:.1} MLUPS"),
    }
}

/// Wall time a batch of steps aims at between two looks at the stop flag and the progress.
const BATCH_SECS: f64 = 0.25;

/// The flags a run under a launcher of several processes cannot take, checked alike on every
/// rank (so that all stop with the same message before they meet).
fn check_launch(a: &RunArgs, r: &Rank) -> anyhow::Result<()> {
    let w = r.world;
    if a.backend == crate::BackendChoice::Cpu || a.backend == crate::BackendChoice::Wgpu {
        let b = if a.backend == crate::BackendChoice::Cpu { "cpu" } else { "wgpu" };
        bail!(
            "--backend {b}: a launch of {w} processes ({}) runs one slab per process on the CUDA backend; start one process for --backend {b}",
            r.source
        );
    }
    match a.gpus {
        crate::solvers::Gpus::Count(n) if n as usize != 1 && n as usize != w => bail!(
            "--gpus {n}: a launch of {w} processes ({}) runs one GPU per process, {w} in all; drop --gpus, or start {n} processes",
            r.source
        ),
        _ => Ok(()),
    }
}

/// What differs between the parameters `was` and `now`, one phrase each ("tau 0.6 -> 1.5").
fn params_changes(was: &sim_core::Params, now: &sim_core::Params) -> Vec<String> {
    let (a, b) = (&was.collide, &now.collide);
    let mut out = Vec::new();
    if a.kind != b.kind {
        out.push(format!("collision {} -> {}", a.kind, b.kind));
    }
    if a.tau != b.tau {
        out.push(format!("tau {} -> {}", a.tau, b.tau));
    }
    if a.cs != b.cs && b.kind == sim_core::collision::Collision::Smagorinsky {
        out.push(format!("Smagorinsky constant {} -> {}", a.cs, b.cs));
    }
    if a.force != b.force {
        out.push(format!("body force {:?} -> {:?}", a.force, b.force));
    }
    for (what, x, y) in [("inlet", &was.inlets, &now.inlets), ("moving wall", &was.walls, &now.walls)] {
        for (i, (u, v)) in x.iter().zip(y).enumerate().filter(|(_, (u, v))| u != v) {
            // Wall id 0 is the resting wall; the others are the scene's moving walls in order.
            let n = if what == "moving wall" { i.saturating_sub(1) } else { i };
            out.push(format!("{what} {n} velocity {u:?} -> {v:?}"));
        }
    }
    for (i, (u, v)) in was.outlets.iter().zip(&now.outlets).enumerate().filter(|(_, (u, v))| u != v) {
        out.push(format!("outlet {i} density {u} -> {v}"));
    }
    out
}

/// Meet the other processes of a launch (see [`sim_core::ranks::rendezvous`]).
fn meet(r: &Rank) -> anyhow::Result<sim_core::ranks::rendezvous::Cluster> {
    use sim_core::ranks::rendezvous;
    let (place, wait) = rendezvous::from_env(|k| std::env::var(k).ok()).map_err(anyhow::Error::msg)?;
    rendezvous::join_saying(r, &place, wait, &mut |m| eprintln!("{m}")).map_err(anyhow::Error::msg)
}

/// A rank other than 0 of a launch: its slab of the grid, steered by rank 0, which prints and
/// writes everything; this process is silent but for its errors.
pub fn follow(a: &RunArgs, r: &Rank) -> anyhow::Result<ExitCode> {
    let ls = load_scene(a.scene.as_deref(), &a.set).with_context(|| format!("rank {}", r.rank))?;
    check_launch(a, r)?;
    let cluster = meet(r)?;
    sim_core::build::follow(&ls, cluster)?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: &RunArgs, launch: Option<&Rank>) -> anyhow::Result<ExitCode> {
    let view = a.view.as_deref().map(crate::viewer::ViewSpec::parse).transpose()?.unwrap_or_default();
    let ls = load_scene(a.scene.as_deref(), &a.set)?;
    if let Some(r) = launch {
        check_launch(a, r)?;
    }
    for w in &ls.derived.warnings {
        eprintln!("warning: {w}");
    }
    let resume = match &a.resume {
        Some(r) => Some(Checkpoint::load(r).map_err(|e| anyhow!("--resume {e}"))?),
        None => None,
    };
    // Bad probes are refused before any output folder is made.
    let mut probes = probes::Probes::new(a, &ls, resume.as_ref().map_or(&[], |c| c.probes.as_slice()))?;
    let outputs = check_outputs(a)?;
    let render_gpu = outputs.gpu.as_ref();
    // Two saved states are held at once (the last good state and the next, or a checkpoint
    // being written). A blow-up with --export writes the last good state as a checkpoint.
    let keeps = Keeps {
        saved_states: 2,
        checkpoints: a.checkpoint.is_some() || a.export.is_some(),
        export: a.export.is_some() && a.export_fields != ExportFields::None,
    };
    let mut solver = match launch {
        Some(r) => {
            let cluster = meet(r)?;
            eprintln!("{} processes met ({}): one slab of the grid each", r.world, r.source);
            sim_core::build::lead(&ls, keeps, cluster).map_err(|e| anyhow!("a launch of {} processes: {e}", r.world))?.solver
        }
        None => crate::solvers::build_solver(&ls, &crate::solvers::choice(&ls, a.backend, a.gpus, keeps))?,
    };
    if let (Some(r), Some(c)) = (&a.resume, &resume) {
        c.check_sane(f64::from(solver.domain().rho0))
            .map_err(|why| anyhow!("--resume {}: {why}; resume from an earlier checkpoint", r.display()))?;
        // The checkpoint holds the state; the scene and the command line say how it goes on
        // (taken before the restore, which sets the checkpoint's boundary values).
        let p = sim_core::Params::from_scene(&ls, solver.domain());
        solver.restore(c).with_context(|| format!("--resume {}", r.display()))?;
        eprintln!("resumed from step {} ({})", c.step, r.display());
        for d in params_changes(&c.params, &p) {
            eprintln!("note: {d} (the checkpoint's value gives way to the scene's and the command line's)");
        }
        solver.set_params(p).with_context(|| format!("--resume {}: the scene's parameters", r.display()))?;
    }
    drop(resume);
    let info = solver.info();
    let steps = a.steps.unwrap_or(ls.scene.solver.steps);
    let start_step = solver.time_step();
    let end_step = start_step.checked_add(steps).context("--steps: the run would end beyond step 2^64")?;
    let cells = (info.size[0] * info.size[1] * info.size[2]) as f64;
    let rho0 = f64::from(solver.domain().rho0);
    eprintln!(
        "{}: {} {}x{}x{}, {} {} {}, tau {:.4}, {} steps on {} ({})",
        ls.origin,
        info.lattice,
        info.size[0],
        info.size[1],
        info.size[2],
        info.scheme,
        info.precision,
        ls.scene.solver.collision,
        ls.derived.tau,
        steps,
        info.backend,
        info.device
    );
    let units = ls.derived.units;
    if let Some(u) = &units {
        report_units(u, ls.derived.viscosity(), steps);
    }
    // Before stats.csv is continued: a probes.csv of other probes stops the resume with both
    // files as they were.
    if let Some(p) = probes.as_mut() {
        p.start(solver.as_ref(), ls.derived.size, a.resume.is_some(), steps)?;
    }
    let reference = ls.scene.force_reference();
    let columns = StatsColumns::new(&solver.domain().obstacles, reference);
    let mut stats_w = match &a.export {
        Some(d) => {
            let p = d.join("stats.csv");
            let w = if a.resume.is_some() {
                let (w, kept) =
                    StatsWriter::resume(&p, start_step, &columns).with_context(|| format!("--resume: continuing {}", p.display()))?;
                if kept > 0 {
                    eprintln!("continuing {} after its {kept} rows before step {start_step}", p.display());
                }
                w
            } else {
                StatsWriter::create(&p, &columns).with_context(|| format!("writing {}", p.display()))?
            };
            Some(w)
        }
        None => None,
    };
    // The factors that turn the lattice values of the exported files into SI units.
    if let (Some(d), Some(u)) = (&a.export, &units) {
        let p = d.join("units.toml");
        sim_core::export::write_units_toml(&p, u).with_context(|| format!("writing {}", p.display()))?;
    }
    let mut recorder = a.record.as_deref().map(|d| Recorder::new(d, a.every.unwrap_or(RECORD_EVERY), a.resume.is_some()));
    let stats_every = ls.scene.solver.stats_every;
    let every = a.every;
    let which = a.export_fields;
    // The forces of every stats row (kept whether or not stats.csv is written), for the means,
    // coefficients and Strouhal numbers of the summary.
    let mut history = ForceHistory::new(Keep::WholeRun, FORCE_SAMPLES);
    catch_stops();
    let mut progress = Progress::new(start_step, end_step, a.progress_every);
    let mut pacer = CheckpointPacer::new();
    // The last good state, kept as the solver keeps its own (compressed subgrids: compressed).
    let mut last_good = pacer.take(|| solver.snapshot())?;
    if last_good.bytes() >= 1 << 30 {
        let (took, every) = pacer.cost();
        eprintln!(
            "the last good state (what a blow-up rolls back to) takes {} of host memory and {took:.1} s to copy; it is renewed at \
             most every {every:.0} s",
            human_bytes(last_good.bytes())
        );
    }
    let mut written: Vec<PathBuf> = Vec::new();
    let t0 = Instant::now();
    // Cell updates and seconds since the last stats row: the row's MLUPS.
    let (mut row_updates, mut row_secs, mut mlups) = (0.0f64, 0.0f64, 0.0f64);
    let mut secs_per_step = 0.0f64;
    let st = solver.stats();
    if let Some(w) = stats_w.as_mut() {
        w.row(&st, 0.0)?;
    }
    history.push(st.step, &st.forces);
    let mut row_at = start_step;
    let mut stopped = false;
    while solver.time_step() < end_step {
        if stop_asked() {
            stopped = true;
            break;
        }
        let now = solver.time_step();
        let mut next = (now / stats_every + 1) * stats_every;
        if let Some(k) = every {
            next = next.min((now / k + 1) * k);
        }
        if let Some(p) = &probes {
            next = next.min(p.next_after(now));
        }
        if let Some(r) = &recorder {
            next = next.min((now / r.every + 1) * r.every);
        }
        let next = next.min(end_step);
        // Batches of about BATCH_SECS between the boundaries, so that a stop or a progress line
        // never waits for a long stretch of steps.
        let batch = if secs_per_step > 0.0 { ((BATCH_SECS / secs_per_step) as u64).max(1) } else { 1 };
        let to = next.min(now + batch);
        let chunk_t = Instant::now();
        solver.step(to - now)?;
        // The clock stops when the device has finished, not when the steps were queued.
        solver.synchronize()?;
        let dt = chunk_t.elapsed().as_secs_f64().max(1e-9);
        secs_per_step = dt / (to - now) as f64;
        // Adaptive runs count a level-l cell 2^l times a step (as the adaptive-block papers do).
        let updates = solver.amr_counts().map_or(cells, |i| i.updates_per_step as f64);
        row_updates += updates * (to - now) as f64;
        row_secs += dt;
        mlups = updates * (to - now) as f64 / dt / 1e6;
        progress.update(to, chunk_message(solver.as_ref(), mlups));
        if to != next {
            continue;
        }
        if let Some(p) = probes.as_mut().filter(|p| p.due(next)) {
            p.sample(solver.as_ref())?;
        }
        let row_due = next % stats_every == 0 || next == end_step;
        let export_due = every.is_some_and(|k| next % k == 0 && next != end_step);
        let frame_due = recorder.as_ref().is_some_and(|r| r.due(next));
        // A boundary of probe samples alone costs the samples, not a pass over the state.
        if !(row_due || export_due || frame_due) {
            continue;
        }
        let st = solver.stats();
        // A state counts as good only if it is physically sane; the first that is not stops
        // the run, and the outputs hold the last one that was.
        if let Err(why) = st.sanity(rho0) {
            progress.bar.abandon();
            let good = last_good.step();
            solver.roll_back(&last_good)?;
            eprintln!(
                "error: the simulation blew up between step {good} and step {next} (at step {next} {why}); \
                 the last good state is step {good}. Lower the velocities or the Reynolds number, raise the resolution, \
                 or try --set solver.collision=regularized / trt / smagorinsky."
            );
            if let Some(d) = &a.export {
                let p = d.join("last_good.ckpt");
                solver.checkpoint().save(&p).with_context(|| format!("writing {}", p.display()))?;
                let fields = export_fields(d, solver.as_ref(), "", which)?;
                let mut wrote: Vec<String> = vec![p.display().to_string()];
                wrote.extend(fields.iter().map(|f| f.display().to_string()));
                eprintln!("wrote the last good state to {}", wrote.join(" and "));
            }
            // The probes keep their samples up to the state rolled back to; the frames stay.
            if let Some(p) = probes.as_mut() {
                p.back_to(good);
                if let Some(csv) = p.write()? {
                    eprintln!("wrote the probes' samples up to the last good state to {}", csv.display());
                }
            }
            if let Some(r) = &recorder {
                r.finish();
            }
            return Ok(ExitCode::from(crate::run::EXIT_BLOWUP));
        }
        if let (Some(r), Some(gpu)) = (recorder.as_mut().filter(|_| frame_due), render_gpu) {
            r.frame(gpu, solver.as_ref(), &view)?;
        }
        if row_due {
            if let Some(w) = stats_w.as_mut() {
                w.row(&st, row_updates / row_secs.max(1e-9) / 1e6)?;
            }
            history.push(st.step, &st.forces);
            (row_updates, row_secs, row_at) = (0.0, 0.0, next);
            if pacer.due() {
                last_good = pacer.take(|| solver.snapshot())?;
            }
        }
        if export_due {
            if let Some(d) = &a.export {
                written.extend(export_fields(d, solver.as_ref(), &format!("_{next:08}"), which)?);
            }
            if let Some(c) = &a.checkpoint {
                probes::checkpoint_with(solver.as_ref(), probes.as_ref()).save(c).with_context(|| format!("writing {}", c.display()))?;
            }
            if let Some(p) = &probes {
                p.write()?;
            }
        }
    }
    progress.bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    let st = solver.stats();
    if stopped {
        // The stats row of the step the run stopped at (a stop between rows), unless the state
        // is not worth one: a blow-up since the last row goes back to the last good state.
        if let Err(why) = st.sanity(rho0) {
            solver.roll_back(&last_good)?;
            eprintln!("at step {} {why}; the outputs hold the last good state, step {}", st.step, last_good.step());
            if let Some(p) = probes.as_mut() {
                p.back_to(last_good.step());
            }
        } else if st.step != row_at {
            if let Some(w) = stats_w.as_mut() {
                w.row(&st, row_updates / row_secs.max(1e-9) / 1e6)?;
            }
            history.push(st.step, &st.forces);
        }
    }
    let st = solver.stats();
    let done = solver.time_step() - start_step;
    let amr = solver.amr();
    let avg = amr.as_ref().map_or(cells, |i| i.updates_per_step as f64) * done as f64 / secs.max(1e-9) / 1e6;
    eprintln!(
        "{}: step {}, {:.2} s, {:.1} MLUPS (last batch {:.1}), mass {:.6e}, max |u| {:.4e}",
        if stopped { "stopped" } else { "done" },
        st.step,
        secs,
        avg,
        mlups,
        st.mass,
        st.max_u
    );
    if let Some(u) = &units {
        eprintln!("  in SI units: {} s of flow at step {}, max |u| {} m/s", si(u.time(st.step as f64)), st.step, si(u.velocity(st.max_u)));
    }
    report_solver(solver.as_ref());
    report_forces(&columns, &st, &history, &reference, stats_every, units.as_ref());
    if let Some(p) = &probes {
        p.report(&reference);
    }
    if let Some(d) = &a.export {
        written.extend(export_fields(d, solver.as_ref(), "", which)?);
        written.push(d.join("stats.csv"));
        if units.is_some() {
            written.push(d.join("units.toml"));
        }
    }
    if let Some(csv) = probes.as_ref().map(probes::Probes::write).transpose()?.flatten() {
        written.push(csv);
    }
    if let Some(c) = &a.checkpoint {
        probes::checkpoint_with(solver.as_ref(), probes.as_ref()).save(c).with_context(|| format!("writing {}", c.display()))?;
        written.push(c.clone());
    }
    if let (Some(p), Some(gpu)) = (&a.screenshot, render_gpu) {
        let adapter = crate::viewer::headless::screenshot_solver(gpu, solver.as_ref(), &view, p)
            .with_context(|| format!("screenshot {}", p.display()))?;
        eprintln!("rendered {} offscreen on {adapter}", p.display());
        written.push(p.clone());
    }
    if let Some(r) = &recorder {
        written.extend(r.finish());
        if r.written > 0 {
            written.push(r.dir.join("frame_*.png"));
        }
    }
    list_written(&written);
    if stopped {
        eprintln!("stopped at step {} by a signal; the outputs above hold that state", solver.time_step());
        return Ok(ExitCode::from(EXIT_STOPPED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The scene's SI units at the start of a run: what a cell, a step and each lattice unit stand
/// for, the viscosity (`nu`, cells^2/step) and Reynolds number, and how long `steps` steps are.
fn report_units(u: &Units, nu: f32, steps: u64) {
    let rows: Vec<String> = u.rows().into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
    eprintln!("SI units ([units]): {}", rows.join(", "));
    let r = u.reference;
    eprintln!(
        "  viscosity {} m²/s, Re {} ({} m over {} cells, {} m/s for {} cells/step); {steps} steps are {} s",
        si(u.viscosity(f64::from(nu))),
        si(u.reynolds(f64::from(nu))),
        si(r.length),
        si(r.cells),
        si(r.velocity),
        si(r.lattice_velocity),
        si(u.time(steps as f64))
    );
}

/// A force in SI units for the summary: its components in N (3D) or N/m (2D).
fn si_force(u: &Units, f: [f64; 3]) -> String {
    format!("({}, {}, {}) {}", si(u.force(f[0])), si(u.force(f[1])), si(u.force(f[2])), u.force_unit())
}

/// What the compressed and adaptive solvers report at the end of a run.
fn report_solver(solver: &dyn Solver) {
    if let Some(c) = solver.compression() {
        let tau = if c.tau.0 == c.tau.1 { format!("tau {:e}", c.tau.0) } else { format!("tau {:e} to {:e}", c.tau.0, c.tau.1) };
        let budget = c.budget.map(|b| format!(", budget {}", human_bytes(b))).unwrap_or_default();
        eprintln!(
            "compression: ratio {:.2}x, {} in memory ({} uncompressed), {} subgrids, {tau}{budget}",
            c.ratio,
            human_bytes(c.bytes),
            human_bytes(c.dense_bytes),
            c.subgrids
        );
    }
    if let Some(i) = solver.amr() {
        eprintln!(
            "adaptive blocks: leaves per level {:?} ({} of {} blocks in use), {} cell updates a step against {} cells at the finest level \
             ({:.1} % of them), {} adaptations, {:.2} % of the time in refinement; last: {}",
            i.leaves,
            i.blocks.0,
            i.blocks.1,
            i.updates_per_step,
            i.effective_cells,
            100.0 * i.updates_per_step as f64 / ((i.effective_cells as f64) * f64::from(1u32 << i.max_level)).max(1.0),
            i.adaptations,
            100.0 * i.adapt_share(),
            i.last
        );
    }
}

/// Most force samples a run keeps in memory; beyond, every other one goes (a run of a
/// billion steps with a stats row every step keeps 65,536 rows evenly spread).
const FORCE_SAMPLES: usize = 1 << 16;

/// The force on each obstacle at the end of a run, and over the second half of its stats rows
/// the mean force, drag and lift coefficients and the Strouhal number of the lift; with SI
/// `units`, the forces in N (N/m in 2D) and the lift's frequency in Hz too.
fn report_forces(
    columns: &StatsColumns,
    st: &sim_core::Stats,
    history: &ForceHistory,
    reference: &sim_core::scene::ForceReference,
    stats_every: u64,
    units: Option<&Units>,
) {
    let e = |v: f64| format!("{v:.4e}");
    let in_si = |what: &str, f: [f64; 3]| units.map(|u| format!("; {what} in SI units {}", si_force(u, f))).unwrap_or_default();
    for (k, (name, f)) in columns.names().iter().zip(&st.forces).enumerate() {
        let [cd, cl] = reference.coefficients(*f).map(|[d, l]| [format!(", C_D {d:.4}"), format!(", C_L {l:.4}")]).unwrap_or_default();
        eprintln!("force on {name} at step {}: ({}, {}, {}){cd}{cl}{}", st.step, e(f[0]), e(f[1]), e(f[2]), in_si("force", *f));
        let Some(s) = history.summary(k, reference).filter(|s| s.samples >= 2) else { continue };
        let mut line = format!(
            "  steps {} to {} ({} rows): mean force ({}, {}, {})",
            s.from,
            s.to,
            s.samples,
            e(s.mean[0]),
            e(s.mean[1]),
            e(s.mean[2])
        );
        if let (Some([cd, cl]), Some(amp)) = (s.coefficients, s.lift_amplitude_coefficient(reference)) {
            line.push_str(&format!(", C_D {cd:.4}, C_L {cl:.4} (swing +-{amp:.4})"));
        }
        match &s.shedding {
            Ok(sh) => {
                let hz = units.map(|u| format!(" = {} Hz", si(u.rate(1.0 / sh.period)))).unwrap_or_default();
                let period =
                    format!("lift period {:.1} steps{hz} over {} periods, {:.0} to {:.0}", sh.period, sh.periods, sh.range.0, sh.range.1);
                match sh.strouhal {
                    Some(v) => line.push_str(&format!(", St {v:.4} ({period})")),
                    None => line.push_str(&format!(", {period}")),
                }
            }
            Err(why) => {
                line.push_str(&format!(", {why}"));
                if matches!(why, NoShedding::Undersampled { .. }) {
                    line.push_str(&format!(": lower solver.stats_every (now {stats_every})"));
                }
            }
        }
        if reference.values.is_none() {
            line.push_str("; C_D, C_L and St need a reference length and velocity (fluid.length and fluid.velocity, or [forces])");
        }
        line.push_str(&in_si("mean force", s.mean));
        eprintln!("{line}");
    }
}

fn list_written(written: &[PathBuf]) {
    if written.is_empty() {
        eprintln!(
            "no output written (add --export DIR to write fields.csv, fields.vti and stats.csv, --export-fields none for stats.csv only)"
        );
        return;
    }
    eprintln!("output:");
    for w in written.iter().filter(|p| !p.to_string_lossy().contains("fields_")) {
        eprintln!("  {}", w.display());
    }
    let n = written.iter().filter(|p| p.to_string_lossy().contains("fields_")).count();
    if n > 0 {
        eprintln!("  and {n} intermediate field files (fields_STEP.csv/.vti)");
    }
}
