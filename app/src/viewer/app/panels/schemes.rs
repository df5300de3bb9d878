//! The streaming schemes window (`k`, or the toolbar's Schemes button): every scheme side by
//! side, with its memory per cell and for the running grid, the bytes it moves per cell and
//! step, its speed measured live on this machine, and a sentence on how it works with the
//! paper it comes from. A row's button switches the run to that scheme.
//!
//! The measurement runs each scheme on a small empty periodic box of the running lattice,
//! precision and collision (the box of `esoflow bench`, through [`crate::bench::measure_box`]),
//! on the CPU or on one GPU as the run does, on a thread of its own so the window stays
//! responsive. The user's run is paused while it measures and resumed after: the box and the
//! run would otherwise share the same cores or the same GPU, and each would slow the other and
//! skew the numbers. The run's state is never touched (the boxes are solvers of their own).

use crate::bench::{box_size, measure_box, BoxCase};
use crate::viewer::app::ViewerApp;
use egui::{Color32, Key, RichText, Ui};
use sim_core::collision::Collision;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::schemes::Scheme;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

/// Seconds each scheme is timed for unless the user sets another value.
const DEFAULT_SECONDS: f64 = 0.5;
/// Shortest and longest time per scheme the window accepts.
const SECONDS_RANGE: (f64, f64) = (0.05, 5.0);
/// Edge of the measured box (3D; a 2D box has the same number of cells): small enough that
/// six schemes take a few seconds on a laptop, large enough to leave the caches (CPU) or to
/// keep a GPU busy.
const CPU_EDGE: usize = 64;
const GPU_EDGE: usize = 128;

/// The name the window gives a scheme.
#[must_use]
pub fn title(s: Scheme) -> &'static str {
    match s {
        Scheme::OneStepPull => "One-Step Pull",
        Scheme::Aa => "AA",
        Scheme::EsotericPull => "Esoteric Pull",
        Scheme::EsotericPush => "Esoteric Push",
        Scheme::Swap => "LBM-Swap",
        Scheme::Ghost => "LBM-Ghost",
    }
}

/// How a scheme works, in one sentence, with the paper it comes from.
#[must_use]
pub fn how_it_works(s: Scheme) -> &'static str {
    match s {
        Scheme::OneStepPull => {
            "two copies: each cell pulls its DDFs from its neighbours in one copy, collides and writes them to the other, \
             and the copies swap roles every step; the reference every in-place scheme must match"
        }
        Scheme::Aa => {
            "one copy: steps alternate between one that reads and writes only a cell's own slots (directions reversed) \
             and one that reads from and writes to its neighbours' slots, so each DDF still moves one cell a step \
             (Bailey et al. 2009)"
        }
        Scheme::EsotericPull => {
            "one copy: each cell reads and writes the same slots, half in its own cell and the opposite half in its \
             neighbours', and each pair of opposite directions swaps roles every other step (Lehmann 2022)"
        }
        Scheme::EsotericPush => {
            "Esoteric Pull mirrored: the same in-place exchange, with each pair streamed along the opposite direction \
             (Lehmann 2022)"
        }
        Scheme::Swap => {
            "one copy: a cell collides and swaps each pair of opposite DDFs in place, then a second pass streams by \
             swapping with the neighbours' slots; a skipped swap with a solid neighbour is the bounce-back \
             (Valero-Lara et al. 2017)"
        }
        Scheme::Ghost => {
            "the grid is cut into blocks, each stored with a one-cell ghost layer copied from its neighbours before \
             every step; a block pulls from its own cells and ghosts and writes back in place: one copy plus the \
             ghosts (Valero-Lara et al. 2017)"
        }
    }
}

/// The papers the sentences cite.
pub const REFERENCES: [&str; 3] = [
    "Lehmann 2022: M. Lehmann, Esoteric Pull and Esoteric Push: Two Simple In-Place Streaming Schemes for the \
     Lattice Boltzmann Method on GPUs, Computation 10(6), 92.",
    "Bailey et al. 2009: P. Bailey, J. Myre, S. D. C. Walsh, D. J. Lilja, M. O. Saar, Accelerating Lattice Boltzmann \
     Fluid Flow Simulations Using Graphics Processors, ICPP 2009 (the AA pattern).",
    "Valero-Lara et al. 2017: P. Valero-Lara et al., Reducing memory requirements for large size LBM simulations \
     on GPUs, Concurrency and Computation: Practice and Experience (LBM-Swap, LBM-Ghost).",
];

/// A scheme's numbers for the running lattice, precision and grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// The scheme.
    pub scheme: Scheme,
    /// Bytes stored per cell ([`Scheme::bytes_stored`]).
    pub stored: f64,
    /// Bytes the whole grid takes with it (stored x cells).
    pub grid_bytes: f64,
    /// Bytes moved per cell and step ([`Scheme::bytes_moved`]).
    pub moved: f64,
}

/// Every scheme's row, in [`Scheme::ALL`] order.
#[must_use]
pub fn rows(lattice: Lattice, precision: Precision, ghost_block: usize, cells: usize) -> [Row; 6] {
    Scheme::ALL.map(|scheme| {
        let stored = scheme.bytes_stored(lattice, precision, ghost_block);
        Row { scheme, stored, grid_bytes: stored * cells as f64, moved: scheme.bytes_moved(lattice, precision, ghost_block) }
    })
}

/// Bytes per cell as the window writes them: whole numbers plain, others (LBM-Ghost) to 0.01.
#[must_use]
pub fn per_cell(b: f64) -> String {
    if (b - b.round()).abs() < 1e-9 {
        format!("{b:.0} B")
    } else {
        format!("{b:.2} B")
    }
}

/// A memory size in B, KiB, MiB or GiB.
#[must_use]
pub fn size_text(b: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b.max(0.0);
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// MLUPS as the window writes them.
#[must_use]
pub fn mlups_text(m: f64) -> String {
    if m < 100.0 {
        format!("{m:.1}")
    } else {
        format!("{m:.0}")
    }
}

/// What a measurement ran on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Setup {
    /// Velocity set.
    pub lattice: Lattice,
    /// Storage precision.
    pub precision: Precision,
    /// Collision operator.
    pub collision: Collision,
    /// LBM-Ghost block edge.
    pub ghost_block: usize,
    /// On one GPU (CUDA) rather than the CPU.
    pub cuda: bool,
    /// Cells per axis of the box.
    pub size: [usize; 3],
}

/// One scheme's measured speed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Million lattice-cell updates per second.
    pub mlups: f64,
    /// Steps timed.
    pub steps: u64,
    /// Bytes moved per cell and step in the measured box (its solver's own figure).
    pub moved: f64,
}

impl Measurement {
    /// The bandwidth the speed implies: MLUPS x bytes moved, in GB/s.
    #[must_use]
    pub fn gbs(&self) -> f64 {
        self.mlups * self.moved / 1e3
    }
}

/// News from the measuring thread.
enum Progress {
    /// Scheme `k` of [`Scheme::ALL`] is being set up and timed.
    Started(usize),
    /// Scheme `k`'s result.
    Done(usize, Result<Measurement, String>),
}

/// A measurement in progress.
struct Running {
    rx: Receiver<Progress>,
    stop: Arc<AtomicBool>,
    /// The user's run was running when the measurement started (it is resumed after).
    resume: bool,
    /// The scheme being timed.
    current: Option<usize>,
    /// Schemes done.
    done: usize,
}

/// The window's state.
pub struct SchemesWindow {
    /// Shown.
    pub shown: bool,
    /// Seconds each scheme is timed for (at least 3 steps are always timed).
    pub seconds: f64,
    /// Edge of the measured box (3D; a 2D box has as many cells); `None`: 64 on the CPU, 128
    /// on a GPU.
    pub edge: Option<usize>,
    /// The latest results, by [`Scheme::ALL`] index.
    pub results: [Option<Result<Measurement, String>>; 6],
    /// What the latest results were measured on.
    pub measured_on: Option<Setup>,
    running: Option<Running>,
    /// Why the run cannot switch to each scheme (`None`: it can), for the solver of this serial.
    blocked: Option<(u64, [Option<String>; 6])>,
}

impl Default for SchemesWindow {
    fn default() -> SchemesWindow {
        SchemesWindow {
            shown: false,
            seconds: DEFAULT_SECONDS,
            edge: None,
            results: Default::default(),
            measured_on: None,
            running: None,
            blocked: None,
        }
    }
}

impl SchemesWindow {
    /// Whether a measurement is running.
    #[must_use]
    pub fn measuring(&self) -> bool {
        self.running.is_some()
    }
}

impl Drop for SchemesWindow {
    fn drop(&mut self) {
        // A measurement left running would time its remaining boxes for nobody.
        if let Some(r) = &self.running {
            r.stop.store(true, Ordering::Relaxed);
        }
    }
}

impl ViewerApp {
    /// Open or close the streaming schemes window.
    pub fn toggle_schemes(&mut self) {
        self.schemes.shown = !self.schemes.shown;
    }

    /// The run's lattice, precision, LBM-Ghost block and collision, from the running scene.
    fn running_setup(&self) -> (Lattice, Precision, usize, Collision) {
        let s = &self.scene.scene.solver;
        let collision = self.snap.as_ref().map_or(s.collision, |x| x.params.collide.kind);
        (self.scene.derived.lattice, s.precision, s.ghost_block, collision)
    }

    /// Measure every scheme on a small box of the running lattice, precision and backend, on a
    /// thread of its own; the user's run pauses until it is done.
    pub fn measure_schemes(&mut self) {
        if self.schemes.running.is_some() {
            return;
        }
        let Some(snap) = self.snap.as_ref() else {
            self.message("the solver is starting: measure once it runs", false);
            return;
        };
        let cuda = snap.info.backend.starts_with("cuda");
        let (lattice, precision, ghost_block, collision) = self.running_setup();
        let edge = self.schemes.edge.unwrap_or(if cuda { GPU_EDGE } else { CPU_EDGE }).clamp(4, 256);
        let size = box_size(lattice, edge);
        let seconds =
            if self.schemes.seconds.is_finite() { self.schemes.seconds.clamp(SECONDS_RANGE.0, SECONDS_RANGE.1) } else { DEFAULT_SECONDS };
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let spawned = std::thread::Builder::new().name("scheme-bench".into()).spawn(move || {
            for (k, &scheme) in Scheme::ALL.iter().enumerate() {
                if flag.load(Ordering::Relaxed) || tx.send(Progress::Started(k)).is_err() {
                    return;
                }
                let case = BoxCase { lattice, scheme, precision, size, ghost_block, collision, cuda };
                // A solver that panics gives that row an error, not a dead thread and a run
                // that stays paused.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| measure_box(&case, seconds, &flag)));
                let r = match r {
                    Ok(Ok(m)) => Ok(Measurement { mlups: m.mlups, steps: m.steps, moved: m.info.bytes_moved_per_cell }),
                    Ok(Err(e)) => Err(format!("{e:#}")),
                    Err(_) => Err("the solver stopped with an internal error".to_string()),
                };
                if tx.send(Progress::Done(k, r)).is_err() {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            self.message(format!("cannot start measuring: {e}"), true);
            return;
        }
        let resume = self.running;
        if resume {
            self.set_running(false);
        }
        self.schemes.results = Default::default();
        self.schemes.measured_on = Some(Setup { lattice, precision, collision, ghost_block, cuda, size });
        self.schemes.running = Some(Running { rx, stop, resume, current: None, done: 0 });
    }

    /// Stop a measurement: the scheme being timed ends after its current batch.
    pub fn stop_measuring(&mut self) {
        if let Some(r) = &self.schemes.running {
            r.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Take the measuring thread's news; at its end, resume the user's run if it was running.
    fn poll_measurement(&mut self) {
        let Some(r) = self.schemes.running.as_mut() else { return };
        let finished = loop {
            match r.rx.try_recv() {
                Ok(Progress::Started(k)) => r.current = Some(k),
                Ok(Progress::Done(k, res)) => {
                    r.done = k + 1;
                    r.current = None;
                    if let Some(slot) = self.schemes.results.get_mut(k) {
                        *slot = Some(res);
                    }
                }
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        if !finished {
            return;
        }
        let resume = r.resume;
        self.schemes.running = None;
        if resume && !self.running && self.blowup.is_none() {
            self.set_running(true);
        }
    }

    /// Why the run cannot switch to each scheme (the scene's own rules: adaptive blocks and
    /// compressed subgrids stream with Esoteric Pull, free-slip walls need a scheme that reads
    /// its wall values), worked out once per solver.
    fn switch_blocked(&mut self) -> [Option<String>; 6] {
        let serial = self.snap.as_ref().map_or(0, |s| s.solver_serial);
        if let Some((k, b)) = &self.schemes.blocked {
            if *k == serial {
                return b.clone();
            }
        }
        let b = Scheme::ALL.map(|s| {
            let mut scene = self.scene.scene.clone();
            scene.solver.scheme = s;
            sim_core::scene::validate(&scene).err().map(|(key, msg)| format!("{key}: {msg}"))
        });
        self.schemes.blocked = Some((serial, b.clone()));
        b
    }

    /// The window (and its measurement's news, also while it is closed).
    pub(crate) fn schemes_ui(&mut self, ctx: &egui::Context) {
        self.poll_measurement();
        if self.schemes.measuring() {
            ctx.request_repaint_after(Duration::from_millis(50));
        }
        if !self.schemes.shown {
            return;
        }
        if !ctx.egui_wants_keyboard_input() && ctx.input(|i| i.key_pressed(Key::M)) {
            self.measure_schemes();
        }
        let mut open = true;
        let width = (ctx.content_rect().width() - 80.0).clamp(300.0, 980.0);
        egui::Window::new("Streaming schemes")
            .open(&mut open)
            .collapsible(false)
            .default_width(width)
            .default_height(ctx.content_rect().height() * 0.85)
            .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
            .show(ctx, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| self.schemes_body(ui));
            });
        self.schemes.shown &= open;
    }

    fn schemes_body(&mut self, ui: &mut Ui) {
        let (lattice, precision, ghost_block, _) = self.running_setup();
        let running = self.scene.scene.solver.scheme;
        let n = self.grid;
        let cells = n[0] * n[1] * n[2];
        let grid = if self.is_2d() { format!("{} x {}", n[0], n[1]) } else { format!("{} x {} x {}", n[0], n[1], n[2]) };
        ui.label(format!(
            "How each scheme moves the DDFs between steps, for this run: {lattice}, {precision}, {grid} cells ({cells} cells); LBM-Ghost blocks of {ghost_block} cells."
        ));
        ui.separator();
        let blocked = self.switch_blocked();
        let loading = self.loading();
        let mut switch = None;
        let rows = rows(lattice, precision, ghost_block, cells);
        egui::Grid::new("schemes table").num_columns(7).striped(true).spacing([16.0, 6.0]).show(ui, |ui| {
            for h in ["scheme", "memory per cell", "for this grid", "moved per cell and step", "MLUPS", "GB/s", ""] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for (k, row) in rows.iter().enumerate() {
                let is_running = row.scheme == running;
                let name = RichText::new(title(row.scheme));
                ui.label(if is_running { name.strong().color(Color32::from_rgb(120, 200, 255)) } else { name });
                ui.label(per_cell(row.stored));
                ui.label(size_text(row.grid_bytes));
                ui.label(per_cell(row.moved));
                match &self.schemes.results[k] {
                    Some(Ok(m)) => {
                        ui.label(mlups_text(m.mlups)).on_hover_text(format!("{} steps timed", m.steps));
                        ui.label(format!("{:.2}", m.gbs()));
                    }
                    Some(Err(e)) => {
                        ui.colored_label(Color32::from_rgb(255, 110, 100), "failed").on_hover_text(e);
                        ui.label("");
                    }
                    None => {
                        let measuring = self.schemes.running.as_ref().is_some_and(|r| r.current == Some(k));
                        ui.label(if measuring { "measuring…" } else { "-" });
                        ui.label("-");
                    }
                }
                if is_running {
                    ui.label(RichText::new("running").strong().color(Color32::from_rgb(120, 200, 255)));
                } else {
                    let why = blocked[k].clone().or_else(|| loading.then(|| "a scene is loading".to_string()));
                    let r = ui
                        .add_enabled(why.is_none(), egui::Button::new(format!("Use {}", title(row.scheme))))
                        .on_hover_text("switch the run to this scheme (the solver is rebuilt and starts again from step 0)");
                    let r = match &why {
                        Some(w) => r.on_disabled_hover_text(w.as_str()),
                        None => r,
                    };
                    if r.clicked() {
                        switch = Some(row.scheme);
                    }
                }
                ui.end_row();
            }
        });
        if let Some(s) = switch {
            self.rebuild_with(s.name(), |x| x.solver.scheme = s);
        }
        ui.separator();
        self.measure_ui(ui, lattice, precision);
        ui.separator();
        ui.label(
            "Memory per cell: q DDFs x the bytes of the storage precision x the copies the scheme keeps, plus one flag byte. \
             Moved per cell and step: every DDF read and written once plus the flag, away from boundaries; LBM-Swap's \
             swap pass and LBM-Ghost's ghost copies come on top. The bandwidth is MLUPS x bytes moved: the closer it is \
             to the machine's copy bandwidth (esoflow bench), the better the scheme uses the memory.",
        );
        ui.add_space(6.0);
        ui.label(RichText::new("How they work").strong());
        for s in Scheme::ALL {
            ui.label(format!("{}: {}.", title(s), how_it_works(s)));
        }
        ui.add_space(6.0);
        for r in REFERENCES {
            ui.label(RichText::new(r).small());
        }
    }

    fn measure_ui(&mut self, ui: &mut Ui, lattice: Lattice, precision: Precision) {
        ui.horizontal(|ui| {
            if let Some((current, done)) = self.schemes.running.as_ref().map(|r| (r.current, r.done)) {
                if ui.button("Stop").on_hover_text("stop after the batch in progress").clicked() {
                    self.stop_measuring();
                }
                let at = current.unwrap_or(done).min(Scheme::ALL.len() - 1);
                let text = format!("measuring {} ({} of {})", title(Scheme::ALL[at]), at + 1, Scheme::ALL.len());
                ui.add(egui::ProgressBar::new(done as f32 / Scheme::ALL.len() as f32).text(text).desired_width(320.0));
            } else {
                let ready = self.snap.is_some();
                if ui
                    .add_enabled(ready, egui::Button::new("Measure"))
                    .on_hover_text("m: time every scheme on a small box of this lattice and precision; the run pauses meanwhile")
                    .clicked()
                {
                    self.measure_schemes();
                }
                let label = ui.label("seconds per scheme");
                let mut s = self.schemes.seconds;
                if ui
                    .add(egui::DragValue::new(&mut s).range(SECONDS_RANGE.0..=SECONDS_RANGE.1).speed(0.01).max_decimals(2))
                    .labelled_by(label.id)
                    .changed()
                {
                    self.schemes.seconds = s;
                }
            }
        });
        if let Some(m) = self.schemes.measured_on {
            let boxed = if m.lattice.dims() == 2 {
                format!("{} x {}", m.size[0], m.size[1])
            } else {
                format!("{} x {} x {}", m.size[0], m.size[1], m.size[2])
            };
            let on = if m.cuda { "one GPU (CUDA)" } else { "the CPU" };
            ui.label(format!(
                "Measured on {on}: an empty periodic {boxed} box, {} {} {}, the run paused meanwhile.",
                m.lattice,
                m.precision,
                m.collision.name()
            ));
            if m.lattice != lattice || m.precision != precision {
                ui.colored_label(Color32::from_rgb(255, 170, 60), "The run's lattice or precision has changed since: measure again.");
            }
        } else {
            ui.label("Measure times each scheme on an empty periodic box of this lattice and precision, where the run runs (CPU or GPU).");
        }
    }
}
