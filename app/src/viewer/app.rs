//! The viewer's state and its panels (egui). No window and no GPU here: the shell (window.rs)
//! or a test drives [`ViewerApp::ui`] and renders what [`ViewerApp::view_params`] says.

use super::camera::Camera;
use super::colormap::ColorMap;
use super::gpu_timer::{self, GpuTiming};
use super::render::{self, IsoView, MeshStats, OutlineBox, ViewParams, MAX_BRICK_OUTLINES};
use super::worker::{Command, Event, Snapshot, WorkerHandle};
use super::{default_iso_threshold, fmt_value, legend_ui, BlockLegend, BrickLegend, IsoLegend, LegendInfo, SubgridLegend, ISO_FIELDS};
use crate::run::{build_solver, load_scene};
use crate::BackendChoice;
use egui::{Color32, Key, RichText, Ui};
use glam::Vec3;
use sim_core::amr::{AmrInfo, AmrSettings};
use sim_core::bricks::BrickClass;
use sim_core::collision::Collision;
use sim_core::fields::FieldKind;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::scene::{FaceKind, LoadedScene};
use sim_core::schemes::Scheme;
use sim_core::EditTo;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a message stays on screen.
const MESSAGE_SECS: f32 = 8.0;
/// Points kept in the stats plots.
const HISTORY: usize = 2000;

/// What the user sees and chose in the Visualization panel.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewSettings {
    /// Field shown.
    pub field: FieldKind,
    /// Colour map.
    pub cmap: ColorMap,
    /// Colour range from the data (true) or fixed.
    pub auto_range: bool,
    /// Fixed colour range.
    pub fixed: (f32, f32),
    /// Slice index along x, y, z (3D).
    pub slices: [usize; 3],
    /// Which slices are drawn (3D).
    pub show: [bool; 3],
    /// Camera.
    pub camera: Camera,
    /// Isosurface drawn (3D).
    pub iso: bool,
    /// Field of the isosurface (|vorticity| or Q).
    pub iso_field: FieldKind,
    /// Threshold of each isosurface field: [|vorticity|, Q].
    pub iso_thresholds: [f32; 2],
    /// Solid obstacles drawn as surfaces (3D).
    pub solids: bool,
    /// Brick overlay on the slices.
    pub bricks: bool,
    /// Outlines of the boundary and all-solid bricks (3D).
    pub brick_outlines: bool,
    /// Outlines of a compressed run's subgrids, coloured by compression ratio (3D).
    pub subgrid_outlines: bool,
    /// Outlines of an adaptive run's leaf blocks, coloured by level (2D and 3D).
    pub block_outlines: bool,
    /// The slices show the density difference against the uncompressed reference run.
    pub diff: bool,
}

impl ViewSettings {
    /// Defaults for a domain of `n` cells.
    #[must_use]
    pub fn new(n: [usize; 3]) -> ViewSettings {
        ViewSettings {
            field: FieldKind::Speed,
            cmap: default_cmap(FieldKind::Speed),
            auto_range: true,
            fixed: (0.0, 0.1),
            slices: [n[0] / 2, n[1] / 2, n[2] / 2],
            show: [true, true, true],
            camera: Camera::default(),
            iso: false,
            iso_field: FieldKind::Vorticity,
            iso_thresholds: [default_iso_threshold(FieldKind::Vorticity), default_iso_threshold(FieldKind::Q)],
            solids: true,
            bricks: false,
            brick_outlines: false,
            subgrid_outlines: false,
            block_outlines: true,
            diff: false,
        }
    }

    /// Threshold of the isosurface's field.
    #[must_use]
    pub fn iso_threshold(&self) -> f32 {
        self.iso_thresholds[usize::from(self.iso_field == FieldKind::Q)]
    }
}

/// The range of the compression threshold slider (lattice units of the shifted DDFs).
pub const COMPRESSION_TAU: (f64, f64) = (1e-9, 1e-2);

/// Bytes an uncompressed reference run of `cells` cells takes at its peak: the dense CPU
/// solver's DDFs (Esoteric Pull, FP32) and flags, the checkpoint that brings it to the run's
/// state, and the density fields of both runs and their difference while a snapshot is made.
#[must_use]
pub fn reference_bytes(lattice: Lattice, cells: usize) -> u64 {
    let ddfs = Scheme::EsotericPull.bytes_stored(lattice, Precision::Fp32, 16);
    let checkpoint = (4 * lattice.q()) as f64;
    // Two `Fields` (density, velocity, solid flag: 17 bytes a cell) and the difference.
    let fields = 2.0 * 17.0 + 4.0;
    ((ddfs + checkpoint + fields) * cells as f64).ceil() as u64
}

/// Why a scene cannot run on compressed subgrids (its 2D lattice, scheme or precision), or
/// `None` when it can.
#[must_use]
pub fn compression_blocker(ls: &LoadedScene) -> Option<String> {
    let mut sc = ls.scene.clone();
    sc.compression.enabled = true;
    sim_core::scene::validate(&sc).err().map(|(_, msg)| msg)
}

/// The range of the logarithmic threshold slider of an isosurface field (lattice units: a
/// vorticity of 1/step or a Q of 1/step² is far beyond a stable flow).
#[must_use]
pub fn iso_slider_range(kind: FieldKind) -> (f32, f32) {
    if kind == FieldKind::Q {
        (1e-12, 1.0)
    } else {
        (1e-6, 1.0)
    }
}

/// The usual colour map of a field: diverging for signed fields.
#[must_use]
pub fn default_cmap(f: FieldKind) -> ColorMap {
    match f {
        FieldKind::Ux | FieldKind::Uy | FieldKind::Uz | FieldKind::Q => ColorMap::Diverging,
        FieldKind::Speed | FieldKind::Density | FieldKind::Vorticity => ColorMap::Viridis,
    }
}

/// The colour range for data with `min_max`: symmetric about 0 for the diverging map, never empty.
#[must_use]
pub fn auto_range(min_max: (f32, f32), cmap: ColorMap) -> (f32, f32) {
    let (lo, hi) = min_max;
    let (lo, hi) = if cmap == ColorMap::Diverging {
        let m = lo.abs().max(hi.abs());
        (-m, m)
    } else {
        (lo, hi)
    };
    if hi > lo {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 1e-3).max(1e-6);
        (lo - pad, hi + pad)
    }
}

/// A message on screen.
#[derive(Clone, Debug)]
pub struct Message {
    /// Text.
    pub text: String,
    /// Error (red) or information.
    pub error: bool,
    at: Instant,
}

/// A blow-up waiting for the user's decision.
#[derive(Clone, Debug, PartialEq)]
pub struct BlowUp {
    /// Step it was seen at.
    pub step: u64,
    /// What is wrong with the state.
    pub why: String,
    /// Step of the rollback state.
    pub last_good: u64,
}

/// What a left drag on the view does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// Pan (2D) or orbit (3D).
    Navigate,
    /// Paint solid cells (a new obstacle "drawn").
    Draw,
    /// Paint fluid cells (erase obstacles).
    Erase,
}

/// Name of the obstacle the Draw tool paints into.
pub const DRAWN: &str = "drawn";

/// The Scene panel's editing tools and the stroke in progress.
#[derive(Clone, Debug)]
pub struct EditTools {
    /// Current tool.
    pub tool: Tool,
    /// Brush radius (cells).
    pub brush: f32,
    /// 3D: the slice painted on (0 = x, 1 = y, 2 = z), at the index the Visualization panel sets.
    pub axis: usize,
    /// STL placement: centre of the mesh as a fraction of the domain along each axis.
    pub stl_center: [f32; 3],
    /// STL placement: longest edge of the mesh as a fraction of the domain's smallest extent.
    pub stl_size: f32,
    stl_path: String,
    /// Strokes started so far (the current one's id while `active`).
    stroke: u64,
    active: bool,
    /// Brush centre at the last stamp (world, cells).
    last: Option<Vec3>,
    /// Cells painted in this frame, sent as one edit.
    frame: Vec<usize>,
    /// Edit commands sent so far.
    seq: u64,
    /// Sent edits the solver has not confirmed yet (seq, cells, solid), shown at once.
    preview: Vec<(u64, Arc<Vec<usize>>, bool)>,
    /// Brush centre under the pointer (for the cursor).
    hover: Option<Vec3>,
}

impl Default for EditTools {
    fn default() -> EditTools {
        EditTools {
            tool: Tool::Navigate,
            brush: 3.0,
            axis: 2,
            stl_center: [0.5; 3],
            stl_size: 0.3,
            stl_path: String::new(),
            stroke: 0,
            active: false,
            last: None,
            frame: Vec::new(),
            seq: 0,
            preview: Vec::new(),
            hover: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialog {
    LoadStl,
    OpenScene,
    SaveScreenshot,
    ExportVtk,
    SaveCheckpoint,
    LoadCheckpoint,
}

/// What a scene loader thread hands back: the scene and its solver, or a message.
type SceneResult = Result<(LoadedScene, Box<dyn sim_core::Solver>), String>;

/// Frame timings the shell measures.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameTimes {
    /// Frames per second (smoothed).
    pub fps: f64,
    /// Seconds to upload and draw the field view.
    pub render_secs: f64,
    /// Seconds for the whole frame (UI + render + present).
    pub frame_secs: f64,
}

/// The viewer: scene, solver thread, view settings, panels.
pub struct ViewerApp {
    pub(crate) worker: WorkerHandle,
    /// The scene running now.
    pub scene: LoadedScene,
    backend: BackendChoice,
    /// Latest snapshot (the renderer uploads it when `serial` changes).
    pub snap: Option<Snapshot>,
    /// Whether the user asked it to run.
    pub running: bool,
    /// Steps per frame (per published snapshot).
    pub steps_per_frame: u64,
    checkpoint_every: u64,
    /// View settings.
    pub view: ViewSettings,
    tau_edit: f32,
    messages: Vec<Message>,
    /// A blow-up waiting for a decision.
    pub blowup: Option<BlowUp>,
    history: VecDeque<[f64; 4]>,
    /// Step, compression ratio, MiB stored and MiB of the DDFs uncompressed, per snapshot.
    comp_history: VecDeque<[f64; 4]>,
    pub(super) budget_text: String,
    pub(super) budget_focused: bool,
    /// Most bytes an uncompressed reference run may take (`None`: 80 % of the memory available
    /// now, from /proc/meminfo; no check where that cannot be read).
    pub reference_limit: Option<u64>,
    /// The reference solver being built.
    pending_reference: Option<Receiver<Result<Box<dyn sim_core::Solver>, String>>>,
    /// The pending rebuild goes on from the running state (compression switched).
    keep_state: bool,
    /// The slice planes last sent to the solver thread (frames without an isosurface carry
    /// only their cells).
    sent_slices: Option<[Option<usize>; 3]>,
    /// Help overlay shown.
    pub show_help: bool,
    /// Timings from the shell.
    pub times: FrameTimes,
    /// A screenshot the shell should take at the end of this frame.
    pub screenshot_request: Option<PathBuf>,
    scene_path_edit: String,
    vtk_path: String,
    ckpt_path: String,
    dialog: Option<Receiver<(Dialog, Option<PathBuf>)>>,
    pending_scene: Option<Receiver<SceneResult>>,
    /// The pending scene is the running one rebuilt (edited cells carry over).
    rebuilding: bool,
    presets: Vec<PathBuf>,
    /// The egui texture of the field view (set by the shell once it exists).
    pub field_texture: Option<egui::TextureId>,
    /// Size in pixels the central view wants (the shell renders at this size).
    pub view_px: [u32; 2],
    legend_tex: Vec<(ColorMap, egui::TextureHandle)>,
    /// Adapter description (shown in Stats).
    pub gpu_note: String,
    /// How frames reach the renderer, and why (shown in Stats).
    pub frame_note: String,
    /// Extra status line from the shell (surface state).
    pub status: Option<String>,
    /// Triangles of the isosurface last made (from the shell's renderer).
    pub iso_stats: Option<MeshStats>,
    /// Triangles of the solid surfaces last made.
    pub solid_stats: Option<MeshStats>,
    /// Cube edge the shell's renderer marches the next isosurface with (sent to the solver
    /// thread, whose frames then sample just that lattice).
    pub iso_stride: Option<u32>,
    sent_iso_stride: Option<u32>,
    /// GPU times of the view (from the shell's renderer).
    pub gpu_timing: GpuTiming,
    /// Whether the shell's GPU can make surfaces (compute shaders).
    pub surfaces_supported: bool,
    iso_text: String,
    iso_text_focused: bool,
    /// Draw / erase tools.
    pub edit: EditTools,
    /// Where the field view was laid out in the last frame (points).
    pub view_rect: Option<egui::Rect>,
    /// Cells per axis of the solver's grid (an adaptive run's is its finest level's, finer
    /// than the scene's domain.size).
    grid: [usize; 3],
}

impl ViewerApp {
    /// Start the viewer on a loaded scene and a solver built from it.
    #[must_use]
    pub fn new(scene: LoadedScene, solver: Box<dyn sim_core::Solver>, backend: BackendChoice, running: bool) -> ViewerApp {
        let n = solver.domain().n;
        let tau = solver.params().collide.tau;
        let view = ViewSettings::new(n);
        let steps_per_frame = 20;
        let worker = WorkerHandle::start(solver, scene.origin.clone(), running, view.field, steps_per_frame);
        let mut app = ViewerApp {
            worker,
            backend,
            snap: None,
            running,
            steps_per_frame,
            checkpoint_every: 1000,
            view,
            tau_edit: tau,
            messages: Vec::new(),
            blowup: None,
            history: VecDeque::new(),
            comp_history: VecDeque::new(),
            budget_text: String::new(),
            budget_focused: false,
            reference_limit: None,
            pending_reference: None,
            keep_state: false,
            show_help: false,
            times: FrameTimes::default(),
            screenshot_request: None,
            scene_path_edit: String::new(),
            vtk_path: "out/esoflow.vti".into(),
            ckpt_path: "out/esoflow.ckpt".into(),
            dialog: None,
            pending_scene: None,
            rebuilding: false,
            presets: find_presets(Path::new("scenes")),
            field_texture: None,
            view_px: [0, 0],
            legend_tex: Vec::new(),
            gpu_note: String::new(),
            frame_note: String::new(),
            status: None,
            iso_stats: None,
            iso_stride: None,
            sent_iso_stride: None,
            sent_slices: None,
            solid_stats: None,
            gpu_timing: GpuTiming::Unknown,
            surfaces_supported: true,
            iso_text: String::new(),
            iso_text_focused: false,
            edit: EditTools::default(),
            view_rect: None,
            grid: n,
            scene,
        };
        for w in app.scene.derived.warnings.clone() {
            app.message(format!("scene warning: {w}"), false);
        }
        app
    }

    /// Show a message in the window.
    pub fn message(&mut self, text: impl Into<String>, error: bool) {
        let text = text.into();
        if error {
            tracing::warn!("{text}");
        }
        self.messages.push(Message { text, error, at: Instant::now() });
    }

    /// Messages on screen now.
    #[cfg(test)]
    #[must_use]
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Whether the domain is 2D.
    #[must_use]
    pub fn is_2d(&self) -> bool {
        self.scene.derived.size[2] == 1
    }

    /// Steps done (from the latest snapshot).
    #[must_use]
    pub fn step(&self) -> u64 {
        self.snap.as_ref().map_or(0, |s| s.step)
    }

    /// Run or pause.
    pub fn set_running(&mut self, r: bool) {
        if r && self.blowup.is_some() {
            self.message("the simulation has blown up: roll back or reset first", true);
            return;
        }
        self.running = r;
        self.worker.send(Command::SetRunning(r));
    }

    /// Steps per frame (the solver thread's batch).
    pub fn set_steps_per_frame(&mut self, n: u64) {
        self.steps_per_frame = n.clamp(1, 1_000_000);
        self.worker.send(Command::SetStepsPerBatch(self.steps_per_frame));
    }

    /// One batch of steps (`steps_per_frame`), paused.
    pub fn single_step(&mut self) {
        self.set_running(false);
        self.worker.send(Command::Step(self.steps_per_frame.max(1)));
    }

    /// Back to step 0 with the current parameters.
    pub fn reset(&mut self) {
        self.blowup = None;
        self.history.clear();
        self.worker.send(Command::Reset);
    }

    /// Choose the field shown (and its usual colour map).
    pub fn set_field(&mut self, f: FieldKind) {
        if f != self.view.field {
            self.view.field = f;
            self.view.cmap = default_cmap(f);
            self.worker.send(Command::SetField(f));
        }
    }

    /// Turn the isosurface on or off (3D scenes only; a 2D scene says so).
    pub fn set_iso(&mut self, on: bool) {
        if on && self.is_2d() {
            self.message("isosurfaces need a 3D scene", false);
            return;
        }
        if on && !self.surfaces_supported {
            self.message("this GPU or driver has no compute shaders: isosurfaces cannot be drawn", true);
            return;
        }
        self.view.iso = on;
        self.worker.send(Command::SetIso(self.iso_request()));
    }

    /// The isosurface's field (|vorticity| or Q; others are refused with a message).
    pub fn set_iso_field(&mut self, kind: FieldKind) {
        if !ISO_FIELDS.contains(&kind) {
            self.message(format!("an isosurface shows |vorticity| or Q, not {}", kind.name()), true);
            return;
        }
        if kind != self.view.iso_field {
            self.view.iso_field = kind;
            self.iso_text_focused = false;
            if self.view.iso {
                self.worker.send(Command::SetIso(self.iso_request()));
            }
        }
    }

    /// Set the isosurface threshold; a value that is not a finite number is refused with a
    /// message (the threshold stays). Returns whether it was taken.
    pub fn set_iso_threshold(&mut self, t: f32) -> bool {
        if !t.is_finite() {
            self.message(format!("isosurface threshold {t} refused: it must be a finite number"), true);
            return false;
        }
        self.view.iso_thresholds[usize::from(self.view.iso_field == FieldKind::Q)] = t;
        true
    }

    /// What the solver thread should publish for the isosurface.
    fn iso_request(&self) -> Option<FieldKind> {
        (self.view.iso && !self.is_2d()).then_some(self.view.iso_field)
    }

    /// The isosurface data of the latest snapshot, if it is of the field the view wants.
    #[must_use]
    pub fn iso_data(&self) -> Option<&super::worker::IsoData> {
        self.snap.as_ref().and_then(|s| s.iso.as_ref()).filter(|d| d.kind == self.view.iso_field)
    }

    /// Colour range of the velocity magnitude on the isosurface: the slices' range when they
    /// show |u| too, else the data's own (auto) range.
    #[must_use]
    pub fn iso_color_range(&self) -> (f32, f32) {
        if self.view.field == FieldKind::Speed {
            return self.range();
        }
        auto_range(self.iso_data().map_or((0.0, 0.1), |d| d.speed_min_max), self.view.cmap)
    }

    /// Set the compression threshold of a compressed run (the solver refuses on dense runs,
    /// and the message says how to turn compression on).
    pub fn set_compression_tau(&mut self, tau: f32) {
        if let Some(c) = self.snap.as_mut().and_then(|s| s.compression.as_mut()) {
            c.tau = (tau, tau);
        }
        self.worker.send(Command::SetCompressionTau(tau));
    }

    /// Whether the run keeps its state on compressed subgrids.
    #[must_use]
    pub fn compressed(&self) -> bool {
        self.scene.scene.compression.enabled
    }

    /// Switch compression on or off: the solver is rebuilt (compressed subgrids on the CPU, or
    /// the dense solver of the backend chosen) and goes on from the running state, said in a
    /// message. A run that cannot be compressed (2D, another scheme, FP16) says why.
    pub fn set_compression_enabled(&mut self, on: bool) {
        if on == self.compressed() {
            return;
        }
        if on {
            if let Some(why) = compression_blocker(&self.scene) {
                self.message(format!("compression not switched on: {why}"), true);
                return;
            }
        }
        self.view.diff = false;
        let what = if on { "compressed subgrids" } else { "the uncompressed solver" };
        self.rebuild(what, true, |sc| sc.compression.enabled = on);
    }

    /// Limit the bytes a compressed run's state may take (`None`: no limit); see
    /// [`sim_core::Solver::set_compression_budget`]. Kept in the scene for rebuilds.
    pub fn set_compression_budget(&mut self, budget: Option<u64>) {
        self.scene.scene.compression.memory_budget = budget.map(sim_core::scene::ByteSize);
        self.worker.send(Command::SetCompressionBudget(budget));
    }

    /// Start (or stop) an uncompressed reference run of the same scene beside a compressed one:
    /// the dense CPU solver, same size, brought to the running state and stepped in lockstep.
    /// Refused with a message on a dense run, and where it would not fit in memory (the message
    /// says how much it needs and suggests a smaller `domain.size`).
    pub fn set_reference(&mut self, on: bool) {
        if !on {
            self.view.diff = false;
            self.worker.send(Command::SetDiffView(false));
            self.worker.send(Command::SetReference(None));
            return;
        }
        if !self.compressed() {
            self.message("a reference run compares a compressed run with an uncompressed one: switch compression on first", true);
            return;
        }
        if self.pending_reference.is_some() {
            self.message("the reference run is already being built", false);
            return;
        }
        let n = self.scene.derived.size;
        let cells: usize = n.iter().product();
        let need = reference_bytes(self.scene.derived.lattice, cells);
        if let Some(limit) = self.reference_limit.or_else(|| crate::host_memory().map(|(_, avail)| avail / 10 * 8)) {
            if need > limit {
                let k = (limit as f64 / need as f64).cbrt() * 0.95;
                let smaller: Vec<String> = n.iter().map(|&x| ((x as f64 * k).floor() as usize).max(3).to_string()).collect();
                self.message(
                    format!(
                        "no reference run: it needs about {} (the uncompressed DDFs of {cells} cells, a checkpoint and density \
                         fields) but only {} is available; try a smaller domain.size, e.g. --set domain.size=[{}]",
                        sim_core::scene::human_bytes(need),
                        sim_core::scene::human_bytes(limit),
                        smaller.join(",")
                    ),
                    true,
                );
                return;
            }
        }
        let mut ls = self.scene.clone();
        ls.scene.compression.enabled = false;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("reference-build".into()).spawn(move || {
            let r = sim_core::build::cpu(&ls).map_err(|e| format!("cannot build the reference run: {e}"));
            let _ = tx.send(r);
        });
        match spawned {
            Ok(_) => {
                self.pending_reference = Some(rx);
                self.message(format!("starting an uncompressed reference run ({} at most)", sim_core::scene::human_bytes(need)), false);
            }
            Err(e) => self.message(format!("cannot build the reference run: {e}"), true),
        }
    }

    fn poll_reference(&mut self) {
        let Some(rx) = &self.pending_reference else { return };
        let r = match rx.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return,
            Err(mpsc::TryRecvError::Disconnected) => Err("the reference builder stopped without an answer".into()),
        };
        self.pending_reference = None;
        match r {
            Ok(s) if self.compressed() && s.domain().n == self.scene.derived.size => self.worker.send(Command::SetReference(Some(s))),
            Ok(_) => self.message("the reference run was not started: the scene changed meanwhile", false),
            Err(e) => self.message(e, true),
        }
    }

    /// Whether a reference run is going (or being built).
    #[must_use]
    pub fn reference_running(&self) -> bool {
        self.pending_reference.is_some() || self.snap.as_ref().is_some_and(|s| s.reference.is_some())
    }

    /// Show the density difference against the reference run on the slices (needs one).
    pub fn set_diff_view(&mut self, on: bool) {
        if on && !self.reference_running() {
            self.message("the difference view needs the reference run: switch it on first", true);
            return;
        }
        self.view.diff = on;
        self.worker.send(Command::SetDiffView(on));
    }

    /// The density difference the slices show now, if the difference view is on and has data.
    #[must_use]
    pub fn diff_values(&self) -> Option<&Arc<Vec<f32>>> {
        if !self.view.diff {
            return None;
        }
        self.snap.as_ref()?.reference.as_ref()?.diff.as_ref()
    }

    /// Smallest and largest density difference over the fluid cells.
    fn diff_min_max(&self) -> Option<(f32, f32)> {
        let d = self.diff_values()?;
        let solid = &self.snap.as_ref()?.solid;
        Some(super::worker::fluid_min_max(d, solid).0)
    }

    /// The subgrid outlines now (a compressed 3D run with them switched on), coloured by
    /// compression ratio over [`render::ratio_range`].
    #[must_use]
    pub fn subgrid_outlines(&self) -> Option<(Vec<OutlineBox>, (f32, f32))> {
        if !self.view.subgrid_outlines || self.is_2d() {
            return None;
        }
        let c = self.snap.as_ref()?.compression.as_ref()?;
        let range = render::ratio_range(&c.per_subgrid);
        Some((render::subgrid_outlines(&c.per_subgrid, range), range))
    }

    /// Every box the view outlines: the bricks' (when on) and the subgrids' (when on).
    #[must_use]
    pub fn outline_boxes(&self) -> Vec<OutlineBox> {
        let mut boxes = Vec::new();
        if let Some(s) = self.snap.as_ref().filter(|_| self.view.brick_outlines && !self.is_2d()) {
            boxes = render::brick_outlines(&s.bricks, s.size, MAX_BRICK_OUTLINES).boxes;
        }
        if let Some((b, _)) = self.subgrid_outlines() {
            boxes.extend(b);
        }
        if let Some(b) = self.block_outlines().filter(|_| !self.is_2d()) {
            boxes.extend(b);
        }
        boxes
    }

    /// The forest of an adaptive run, as of the last snapshot.
    #[must_use]
    pub fn amr_info(&self) -> Option<&AmrInfo> {
        self.snap.as_ref()?.amr.as_ref()
    }

    /// An adaptive run's leaf blocks coloured by level (when their outlines are on): drawn by
    /// the renderer in 3D, painted over the view in 2D.
    #[must_use]
    pub fn block_outlines(&self) -> Option<Vec<OutlineBox>> {
        let a = self.amr_info().filter(|_| self.view.block_outlines)?;
        Some(render::block_outlines(a, self.is_2d()))
    }

    /// Change an adaptive run's criterion, finest level asked for, interval or frozen levels:
    /// the panel shows them at once, the forest adapts to them as soon as the solver thread
    /// takes them (refusals come back as messages).
    pub fn set_amr(&mut self, settings: AmrSettings) {
        let Some(a) = self.snap.as_mut().and_then(|s| s.amr.as_mut()) else {
            self.message("this run has no adaptive blocks: set [amr] enabled = true in the scene", true);
            return;
        };
        a.settings = settings.clone();
        self.worker.send(Command::SetAmr(settings));
    }

    /// What the outlines depend on: when it changes, the shell sets them again.
    #[must_use]
    pub fn outline_key(&self) -> (u64, u64, bool, bool) {
        let s = self.snap.as_ref();
        let sub = self.view.subgrid_outlines && s.is_some_and(|s| s.compression.is_some());
        // Subgrid ratios and adaptive blocks change with every snapshot.
        let live = sub || (self.view.block_outlines && s.is_some_and(|s| s.amr.is_some()));
        (s.map_or(0, |s| s.solver_serial), if live { s.map_or(0, |s| s.serial) } else { 0 }, self.view.brick_outlines, live)
    }

    /// Set tau (live); refuses tau <= 0.5 with a message.
    pub fn set_tau(&mut self, tau: f32) {
        self.tau_edit = tau;
        let Some(mut p) = self.snap.as_ref().map(|s| s.params.clone()) else { return };
        p.collide.tau = tau;
        if let Err(e) = p.validate() {
            self.message(format!("tau not applied: {e}"), true);
            return;
        }
        if let Some(s) = self.snap.as_mut() {
            s.params = p.clone();
        }
        self.worker.send(Command::SetParams(p));
    }

    /// Tau the UI shows (the value last set, or the solver's).
    #[cfg(test)]
    #[must_use]
    pub fn tau(&self) -> f32 {
        self.tau_edit
    }

    /// Replace the scene (load a file, or the built-in default with `None`). The scene is read
    /// and its solver built on a helper thread; the old scene runs on until the new one is ready,
    /// and stays if the new one fails (with a message).
    pub fn open_scene(&mut self, path: Option<&Path>) {
        if self.pending_scene.is_some() {
            self.message("a scene is already loading", false);
            return;
        }
        let path = path.map(Path::to_path_buf);
        let backend = self.backend;
        let (tx, rx) = mpsc::channel();
        let what = path.as_ref().map_or_else(|| "the built-in scene".to_string(), |p| p.display().to_string());
        let spawned = std::thread::Builder::new().name("scene-loader".into()).spawn(move || {
            let r = load_scene(path.as_deref(), &[]).map_err(|e| format!("cannot open the scene: {e:#}")).and_then(|ls| {
                let s = build_solver(&ls, backend).map_err(|e| format!("cannot build a solver for {}: {e:#}", ls.origin))?;
                Ok((ls, s))
            });
            let _ = tx.send(r);
        });
        match spawned {
            Ok(_) => {
                self.pending_scene = Some(rx);
                self.rebuilding = false;
                self.keep_state = false;
                self.message(format!("loading {what}…"), false);
            }
            Err(e) => self.message(format!("cannot start loading the scene: {e}"), true),
        }
    }

    /// Rebuild the solver with changed solver settings (lattice, scheme, precision, collision).
    /// The run starts again from step 0 (said in a message); tau and the boundary velocities in
    /// force are kept.
    pub fn rebuild_with(&mut self, what: &str, change: impl FnOnce(&mut sim_core::scene::Scene)) {
        self.rebuild(what, false, change);
    }

    /// [`Self::rebuild_with`]; with `keep_state` the new solver goes on from the running state
    /// (where it can take it: same lattice, precision and cells).
    fn rebuild(&mut self, what: &str, keep_state: bool, change: impl FnOnce(&mut sim_core::scene::Scene)) {
        if self.pending_scene.is_some() {
            self.message("a scene is already loading", false);
            return;
        }
        let mut ls = self.scene.clone();
        change(&mut ls.scene);
        match sim_core::scene::validate(&ls.scene) {
            Ok(d) => ls.derived = d,
            Err((key, msg)) => {
                self.message(format!("cannot switch to {what}: {key}: {msg}"), true);
                return;
            }
        }
        let params = self.snap.as_ref().map(|s| s.params.clone());
        let backend = self.backend;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("solver-rebuild".into()).spawn(move || {
            let r = build_solver(&ls, backend).map_err(|e| format!("cannot rebuild the solver: {e:#}")).map(|mut s| {
                if let Some(mut p) = params {
                    // The new collision kind comes from the scene; tau and velocities stay.
                    p.collide.kind = s.params().collide.kind;
                    let _ = s.set_params(p);
                }
                (ls, s)
            });
            let _ = tx.send(r);
        });
        match spawned {
            Ok(_) => {
                self.pending_scene = Some(rx);
                self.rebuilding = true;
                self.keep_state = keep_state;
                if keep_state {
                    self.message(format!("switching to {what}: the solver is rebuilt and goes on from step {}", self.step()), false);
                } else {
                    self.message(format!("switching to {what}: the solver is rebuilt and starts again from step 0"), false);
                }
            }
            Err(e) => self.message(format!("cannot rebuild the solver: {e}"), true),
        }
    }

    fn solver_settings_ui(&mut self, ui: &mut Ui) {
        let s = self.scene.scene.solver.clone();
        let lattice = self.scene.derived.lattice;
        let lattices: Vec<Lattice> = if self.is_2d() { vec![Lattice::D2Q9] } else { vec![Lattice::D3Q19, Lattice::D3Q27] };
        egui::Grid::new("solver settings").num_columns(2).show(ui, |ui| {
            let label = ui.label("lattice");
            let mut l = lattice;
            egui::ComboBox::from_id_salt("lattice")
                .selected_text(l.name())
                .show_ui(ui, |ui| {
                    for k in &lattices {
                        ui.selectable_value(&mut l, *k, k.name());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("scheme");
            let mut sc = s.scheme;
            egui::ComboBox::from_id_salt("scheme")
                .selected_text(sc.name())
                .show_ui(ui, |ui| {
                    for k in Scheme::ALL {
                        ui.selectable_value(&mut sc, k, k.name());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("precision");
            let mut pr = s.precision;
            egui::ComboBox::from_id_salt("precision")
                .selected_text(pr.name())
                .show_ui(ui, |ui| {
                    for k in Precision::ALL {
                        ui.selectable_value(&mut pr, k, k.name());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
            let label = ui.label("collision");
            let mut co = s.collision;
            egui::ComboBox::from_id_salt("collision")
                .selected_text(co.name())
                .show_ui(ui, |ui| {
                    for k in Collision::ALL {
                        ui.selectable_value(&mut co, k, k.name());
                    }
                })
                .response
                .labelled_by(label.id);
            ui.end_row();
            if l != lattice {
                self.rebuild_with(l.name(), |sc| sc.domain.lattice = Some(l));
            } else if sc != s.scheme {
                self.rebuild_with(sc.name(), |x| x.solver.scheme = sc);
            } else if pr != s.precision {
                self.rebuild_with(pr.name(), |x| x.solver.precision = pr);
            } else if co != s.collision {
                self.rebuild_with(co.name(), |x| x.solver.collision = co);
            }
        });
    }

    /// Whether a scene is being loaded.
    #[must_use]
    pub fn loading(&self) -> bool {
        self.pending_scene.is_some()
    }

    fn poll_scene(&mut self) {
        let Some(rx) = &self.pending_scene else { return };
        let r = match rx.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return,
            Err(mpsc::TryRecvError::Disconnected) => Err("the scene loader stopped without an answer".into()),
        };
        self.pending_scene = None;
        match r {
            Ok((ls, solver)) => self.replace_scene(ls, solver),
            Err(e) => self.message(e, true),
        }
    }

    fn replace_scene(&mut self, ls: LoadedScene, solver: Box<dyn sim_core::Solver>) {
        let n = solver.domain().n;
        self.tau_edit = solver.params().collide.tau;
        for w in &ls.derived.warnings {
            self.message(format!("scene warning: {w}"), false);
        }
        // Field, colour map and the surface and overlay choices stay; slices and camera start over.
        let old = self.view.clone();
        self.view = ViewSettings {
            field: old.field,
            cmap: old.cmap,
            iso: old.iso,
            iso_field: old.iso_field,
            iso_thresholds: old.iso_thresholds,
            solids: old.solids,
            bricks: old.bricks,
            brick_outlines: old.brick_outlines,
            subgrid_outlines: old.subgrid_outlines,
            block_outlines: old.block_outlines,
            ..ViewSettings::new(n)
        };
        if self.keep_state && n == self.grid {
            // The same cells go on: keep the slices and the camera too.
            self.view.slices = old.slices;
            self.view.show = old.show;
            self.view.camera = old.camera;
        }
        self.grid = n;
        self.worker.send(Command::Replace(solver, ls.origin.clone(), self.rebuilding, self.keep_state));
        self.pending_reference = None;
        self.comp_history.clear();
        self.edit.active = false;
        self.edit.last = None;
        self.edit.frame.clear();
        self.edit.preview.clear();
        self.scene = ls;
        self.snap = None;
        self.blowup = None;
        self.history.clear();
    }

    /// The colour range in force.
    #[must_use]
    pub fn range(&self) -> (f32, f32) {
        if let Some(mm) = self.diff_min_max() {
            return if self.view.auto_range { auto_range(mm, ColorMap::Diverging) } else { self.view.fixed };
        }
        if self.view.auto_range {
            auto_range(self.snap.as_ref().filter(|s| s.field == self.view.field).map_or((0.0, 1.0), |s| s.min_max), self.view.cmap)
        } else {
            self.view.fixed
        }
    }

    /// What the renderer should draw.
    #[must_use]
    pub fn view_params(&self) -> ViewParams {
        let three_d = !self.is_2d();
        let iso = (self.view.iso && three_d).then(|| IsoView {
            kind: self.view.iso_field,
            threshold: self.view.iso_threshold(),
            color_range: self.iso_color_range(),
        });
        let subgrids = self.view.subgrid_outlines && self.snap.as_ref().is_some_and(|s| s.compression.is_some());
        // A frame of slice planes only: its planes are drawn (a slice just moved or switched
        // on appears with the next frame, never with another plane's old values).
        let mut slices = self.view.slices;
        let mut show = self.view.show;
        if let Some(k) = self.snap.as_ref().and_then(|s| s.frame.layout.region.planes()) {
            for a in 0..3 {
                match k[a] {
                    Some(i) => slices[a] = i,
                    None => show[a] = false,
                }
            }
        }
        ViewParams {
            cmap: if self.diff_values().is_some() { ColorMap::Diverging } else { self.view.cmap },
            range: self.range(),
            slices,
            show,
            camera: self.view.camera,
            iso,
            solids: self.view.solids && three_d,
            bricks: self.view.bricks,
            outlines: (self.view.brick_outlines || subgrids || self.block_outlines().is_some()) && three_d,
        }
    }

    /// A warning about the isosurface, if there is one: triangles capped, or no surface at
    /// this threshold.
    #[must_use]
    pub fn iso_note(&self) -> Option<String> {
        if !self.view.iso || self.is_2d() {
            return None;
        }
        let st = self.iso_stats?;
        if st.capped() {
            return Some(format!(
                "triangles capped: {} of {} drawn (the GPU's buffer limit); raise the threshold",
                st.drawn(),
                st.triangles()
            ));
        }
        if st.wanted == 0 {
            let d = self.iso_data()?;
            return Some(format!(
                "no surface at {}: {} ranges from {} to {}",
                fmt_value(self.view.iso_threshold()),
                d.kind.name(),
                fmt_value(d.min_max.0),
                fmt_value(d.min_max.1)
            ));
        }
        None
    }

    /// What the legend shows now.
    #[must_use]
    pub fn legend(&self) -> LegendInfo {
        let mut l = LegendInfo::field(self.view.field, self.view.cmap, self.range(), self.view.auto_range);
        if self.diff_values().is_some() {
            l.field = FieldKind::Density;
            l.cmap = ColorMap::Diverging;
            l.title = Some("density difference: compressed run - uncompressed reference [lattice units]".into());
        }
        if let Some((boxes, range)) = self.subgrid_outlines() {
            let tau = self.snap.as_ref().and_then(|s| s.compression.as_ref()).map_or((0.0, 0.0), |c| c.tau);
            l.subgrids = Some(SubgridLegend { range, count: boxes.len(), tau });
        }
        if let (Some(a), true) = (self.amr_info(), self.view.block_outlines) {
            let edge = (0..a.leaves.len()).map(|lv| sim_core::amr::BLOCK << (usize::from(a.max_level) - lv)).collect();
            l.blocks = Some(BlockLegend { leaves: a.leaves.clone(), edge });
        }
        if let Some(iso) = self.view_params().iso {
            l.iso = Some(IsoLegend { kind: iso.kind, threshold: iso.threshold, color_range: iso.color_range, note: self.iso_note() });
        }
        if self.view.bricks || (self.view.brick_outlines && !self.is_2d()) {
            l.bricks = self.snap.as_ref().map(|s| BrickLegend::of(&s.bricks));
        }
        l
    }

    fn poll_worker(&mut self) {
        let planes = (!self.is_2d()).then(|| std::array::from_fn(|a| self.view.show[a].then_some(self.view.slices[a])));
        if planes != self.sent_slices {
            self.sent_slices = planes;
            self.worker.send(Command::SetSlices(planes));
        }
        if self.iso_stride.is_some() && self.iso_stride != self.sent_iso_stride {
            self.sent_iso_stride = self.iso_stride;
            self.worker.send(Command::SetIsoStride(self.iso_stride.unwrap_or(1)));
        }
        for e in self.worker.events() {
            match e {
                Event::Info(t) => self.message(t, false),
                Event::Error(t) => self.message(t, true),
                Event::BlownUp { step, why, last_good } => {
                    self.running = false;
                    self.message(format!("the simulation blew up at step {step} ({why}): paused"), true);
                    self.blowup = Some(BlowUp { step, why, last_good });
                }
            }
        }
        if let Some(s) = self.worker.take() {
            if !s.stats.blown_up() {
                let f = s.stats.total_force();
                let drift = if s.mass0 > 0.0 { (s.stats.mass - s.mass0) / s.mass0 } else { 0.0 };
                if self.history.back().is_none_or(|h| h[0] < s.step as f64) {
                    self.history.push_back([s.step as f64, drift, f[0], f[1]]);
                    if self.history.len() > HISTORY {
                        self.history.pop_front();
                    }
                } else if self.history.back().is_some_and(|h| h[0] > s.step as f64) {
                    // Reset or rollback: the history starts again.
                    self.history.clear();
                    self.history.push_back([s.step as f64, drift, f[0], f[1]]);
                }
            }
            if self.snap.as_ref().is_none_or(|o| o.solver_serial != s.solver_serial) {
                self.tau_edit = s.params.collide.tau;
            }
            if let Some(c) = &s.compression {
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let row = [s.step as f64, c.ratio, mib(c.bytes), mib(c.dense_bytes)];
                if self.comp_history.back().is_some_and(|h| h[0] > row[0]) {
                    self.comp_history.clear();
                }
                match self.comp_history.back_mut() {
                    // A new tau or budget at the same step: the newest numbers.
                    Some(h) if h[0] == row[0] => *h = row,
                    _ => self.comp_history.push_back(row),
                }
                if self.comp_history.len() > HISTORY {
                    self.comp_history.pop_front();
                }
            }
            let mut s = s;
            self.edit.preview.retain(|(seq, _, _)| *seq > s.edit_seq);
            if !self.edit.preview.is_empty() {
                s.solid = self.with_preview(&s.solid);
            }
            self.snap = Some(s);
        }
        if !self.worker.alive() {
            self.status = Some("the solver thread has stopped".into());
        }
        let now = Instant::now();
        self.messages.retain(|m| now.duration_since(m.at).as_secs_f32() < MESSAGE_SECS);
    }

    fn poll_dialog(&mut self) {
        let Some(rx) = &self.dialog else { return };
        let Ok((what, path)) = rx.try_recv() else { return };
        self.dialog = None;
        let Some(p) = path else {
            self.message("no file chosen (dialog cancelled, or no file-dialog service here: type the path instead)", false);
            return;
        };
        match what {
            Dialog::LoadStl => {
                self.edit.stl_path = p.display().to_string();
                self.load_stl(&p);
            }
            Dialog::OpenScene => self.open_scene(Some(&p)),
            Dialog::SaveScreenshot => self.screenshot_request = Some(p),
            Dialog::ExportVtk => {
                self.vtk_path = p.display().to_string();
                self.worker.send(Command::ExportVtk(p));
            }
            Dialog::SaveCheckpoint => {
                self.ckpt_path = p.display().to_string();
                self.worker.send(Command::SaveCheckpoint(p));
            }
            Dialog::LoadCheckpoint => {
                self.ckpt_path = p.display().to_string();
                self.worker.send(Command::LoadCheckpoint(p));
            }
        }
    }

    /// Open a native file dialog on its own thread (the UI keeps running).
    fn file_dialog(&mut self, what: Dialog) {
        if self.dialog.is_some() {
            self.message("a file dialog is already open", false);
            return;
        }
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("file-dialog".into()).spawn(move || {
            let d = rfd::FileDialog::new();
            let path = match what {
                Dialog::LoadStl => d.add_filter("STL mesh", &["stl", "STL"]).pick_file(),
                Dialog::OpenScene => d.add_filter("Esoflow scene", &["toml"]).set_directory("scenes").pick_file(),
                Dialog::LoadCheckpoint => d.add_filter("checkpoint", &["ckpt"]).pick_file(),
                Dialog::SaveScreenshot => d.add_filter("PNG", &["png"]).set_file_name("esoflow.png").save_file(),
                Dialog::ExportVtk => d.add_filter("VTK image data", &["vti"]).set_file_name("esoflow.vti").save_file(),
                Dialog::SaveCheckpoint => d.add_filter("checkpoint", &["ckpt"]).set_file_name("esoflow.ckpt").save_file(),
            };
            let _ = tx.send((what, path));
        });
        match spawned {
            Ok(_) => self.dialog = Some(rx),
            Err(e) => self.message(format!("cannot open a file dialog: {e}; type the path instead"), true),
        }
    }

    /// Request a screenshot into screenshots/ (named by scene and step).
    pub fn screenshot(&mut self) {
        let stem = self.scene.origin.rsplit('/').next().unwrap_or("esoflow").split(['.', ' ']).next().unwrap_or("esoflow").to_string();
        self.screenshot_request = Some(PathBuf::from("screenshots").join(format!("{stem}_step{:07}.png", self.step())));
    }

    fn shortcuts(&mut self, ctx: &egui::Context) {
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let (space, s, r, h, f12, esc, iso) = ctx.input(|i| {
            (
                i.key_pressed(Key::Space),
                i.key_pressed(Key::S),
                i.key_pressed(Key::R),
                i.key_pressed(Key::H),
                i.key_pressed(Key::F12),
                i.key_pressed(Key::Escape),
                i.key_pressed(Key::I),
            )
        });
        if iso {
            self.set_iso(!self.view.iso);
        }
        let (undo, n, d, e, smaller, larger) = ctx.input(|i| {
            (
                i.modifiers.command && i.key_pressed(Key::Z),
                i.key_pressed(Key::N),
                i.key_pressed(Key::D),
                i.key_pressed(Key::E),
                i.key_pressed(Key::OpenBracket),
                i.key_pressed(Key::CloseBracket),
            )
        });
        if undo {
            self.undo_stroke();
        }
        for (pressed, t) in [(n, Tool::Navigate), (d, Tool::Draw), (e, Tool::Erase)] {
            if pressed {
                self.set_tool(t);
            }
        }
        if smaller {
            self.edit.brush = (self.edit.brush / 1.25).max(0.5);
        }
        if larger {
            self.edit.brush = (self.edit.brush * 1.25).min(100.0);
        }
        if space {
            self.set_running(!self.running);
        }
        if s {
            self.single_step();
        }
        if r {
            self.reset();
        }
        if h {
            self.show_help = !self.show_help;
        }
        if esc {
            self.show_help = false;
        }
        if f12 {
            self.screenshot();
        }
    }

    /// The whole window's UI for one frame.
    pub fn ui(&mut self, ui: &mut Ui) {
        let ctx = ui.ctx().clone();
        self.poll_worker();
        self.poll_dialog();
        self.poll_scene();
        self.poll_reference();
        self.shortcuts(&ctx);
        egui::Panel::left("panels").resizable(true).default_size(330.0).show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.heading("Esoflow");
                ui.label(RichText::new(&self.scene.scene.name).strong());
                egui::CollapsingHeader::new("Simulation").default_open(true).show(ui, |ui| self.simulation_ui(ui));
                egui::CollapsingHeader::new("Compression").default_open(true).show(ui, |ui| self.compression_ui(ui));
                if self.amr_info().is_some() {
                    egui::CollapsingHeader::new("Adaptive blocks").default_open(true).show(ui, |ui| self.amr_ui(ui));
                }
                egui::CollapsingHeader::new("Visualization").default_open(true).show(ui, |ui| self.visualization_ui(ui));
                egui::CollapsingHeader::new("Stats").default_open(true).show(ui, |ui| self.stats_ui(ui));
                egui::CollapsingHeader::new("Scene").default_open(false).show(ui, |ui| self.scene_ui(ui));
                egui::CollapsingHeader::new("Export").default_open(false).show(ui, |ui| self.export_ui(ui));
            });
        });
        egui::CentralPanel::default().frame(egui::Frame::NONE.fill(Color32::from_gray(4))).show(ui, |ui| self.central_ui(ui));
        self.help_ui(&ctx);
        self.blowup_ui(&ctx);
        if self.running
            || self.dialog.is_some()
            || self.pending_scene.is_some()
            || self.pending_reference.is_some()
            || !self.messages.is_empty()
        {
            ctx.request_repaint_after(Duration::from_millis(if self.running { 0 } else { 100 }));
        }
    }

    fn simulation_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            let label = if self.running { "Pause" } else { "Run" };
            if ui.button(label).on_hover_text("space").clicked() {
                self.set_running(!self.running);
            }
            if ui.button("Step").on_hover_text("s: one batch of steps, paused").clicked() {
                self.single_step();
            }
            if ui.button("Reset").on_hover_text("r: back to step 0, parameters kept").clicked() {
                self.reset();
            }
        });
        ui.label(format!("step {}", self.step()));
        ui.horizontal(|ui| {
            let label = ui.label("steps per frame");
            let mut n = self.steps_per_frame;
            if ui.add(egui::DragValue::new(&mut n).range(1..=10_000).speed(1.0)).labelled_by(label.id).changed() {
                self.set_steps_per_frame(n);
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("rollback checkpoint every");
            let mut k = self.checkpoint_every;
            if ui.add(egui::DragValue::new(&mut k).range(10..=1_000_000).suffix(" steps")).labelled_by(label.id).changed() {
                self.checkpoint_every = k;
                self.worker.send(Command::SetCheckpointEvery(k));
            }
        });
        let Some(snap) = self.snap.clone() else {
            ui.label("starting the solver…");
            return;
        };
        ui.separator();
        self.solver_settings_ui(ui);
        let info = &snap.info;
        ui.label(format!("running: {} {}, {}, {}", info.lattice, info.scheme, info.precision, snap.params.collide.kind.name()));
        ui.horizontal(|ui| {
            ui.label("tau");
            let mut tau = self.tau_edit;
            let r = ui
                .add(egui::DragValue::new(&mut tau).range(0.5001..=5.0).speed(0.0005).max_decimals(5))
                .on_hover_text("relaxation time; viscosity = (tau - 0.5) / 3");
            if r.changed() {
                self.set_tau(tau);
            }
            ui.label("viscosity");
            let mut nu = (self.tau_edit - 0.5) / 3.0;
            if ui
                .add(egui::DragValue::new(&mut nu).range(0.00003..=1.5).speed(0.0001).max_decimals(6))
                .on_hover_text("kinematic viscosity, cells²/step")
                .changed()
            {
                self.set_tau(3.0 * nu + 0.5);
            }
        });
        // Boundary velocities: inlets and moving walls (wall id 0 is the resting wall).
        let mut params = snap.params.clone();
        let mut changed = false;
        for (k, v) in params.inlets.iter_mut().enumerate() {
            ui.horizontal(|ui| {
                let label = ui.label(format!("inflow {k} velocity"));
                changed |= vec_edit(ui, v, self.is_2d(), label.id);
            });
        }
        for (k, v) in params.walls.iter_mut().enumerate().skip(1) {
            ui.horizontal(|ui| {
                let label = ui.label(format!("lid/wall {k} velocity"));
                changed |= vec_edit(ui, v, self.is_2d(), label.id);
            });
        }
        if changed {
            match params.validate() {
                Ok(()) => {
                    if let Some(s) = self.snap.as_mut() {
                        s.params = params.clone();
                    }
                    self.worker.send(Command::SetParams(params.clone()));
                }
                Err(e) => self.message(format!("not applied: {e}"), true),
            }
        }
        let n = numbers(&self.scene, &params, self.tau_edit, snap.stats.max_u);
        ui.label(format!("Reynolds {:.1}  (U {:.4} x L {:.1} / nu {:.5})", n.reynolds, n.u_ref, n.length, n.viscosity));
        ui.label(format!(
            "Mach {:.3} at the boundaries, {:.3} in the flow (max |u| {:.4})",
            n.mach_boundary, n.mach_flow, snap.stats.max_u
        ));
        for w in &n.warnings {
            ui.colored_label(Color32::from_rgb(255, 170, 60), format!("warning: {w}"));
        }
    }

    fn compression_ui(&mut self, ui: &mut Ui) {
        let orange = Color32::from_rgb(255, 170, 60);
        let blocker = if self.compressed() { None } else { compression_blocker(&self.scene) };
        let mut on = self.compressed();
        let r = ui.add_enabled(blocker.is_none() && !self.loading(), egui::Checkbox::new(&mut on, "compressed subgrids")).on_hover_text(
            "keep the state wavelet-compressed between steps (CPU); switching rebuilds the solver and goes on from the running state",
        );
        if r.changed() {
            self.set_compression_enabled(on);
        }
        if let Some(why) = &blocker {
            ui.colored_label(orange, format!("cannot compress this run: {why}"));
        }
        let Some(snap) = self.snap.clone() else { return };
        let Some(c) = snap.compression.clone() else {
            if blocker.is_none() {
                ui.label("off: the run keeps its DDFs uncompressed");
            }
            return;
        };
        ui.horizontal(|ui| {
            let label = ui.label("compression tau");
            let mut t = f64::from(c.tau.1).clamp(COMPRESSION_TAU.0, COMPRESSION_TAU.1);
            let r = ui
                .add(
                    egui::Slider::new(&mut t, COMPRESSION_TAU.0..=COMPRESSION_TAU.1)
                        .logarithmic(true)
                        .custom_formatter(|v, _| format!("{v:.1e}")),
                )
                .labelled_by(label.id)
                .on_hover_text("wavelet threshold: details under tau * 2^(l+1) at level l are dropped (more memory saved, more error); takes effect at the next step");
            if r.changed() {
                self.set_compression_tau(t as f32);
            }
        });
        let shape = sim_core::compress::BlockShape::DEFAULT;
        ui.label(format!(
            "wavelet: {} levels along x, {} along y and z, blocks of {} x {} x {} samples (fixed by the codec)",
            shape.levels[0], shape.levels[1], shape.n[0], shape.n[1], shape.n[2]
        ));
        let g = self.scene.scene.compression.subgrid_size();
        ui.label(format!("{} subgrids of up to {} x {} x {} cells (compression.subgrid)", c.subgrids, g[0], g[1], g[2]));
        // Text fields carry fixed ids: an automatic id follows the widgets above it, which change
        // as snapshots arrive (plots, messages), and a changed id drops the keyboard focus while
        // the user types.
        ui.horizontal(|ui| {
            let label = ui.label("memory budget");
            if !self.budget_focused {
                self.budget_text = c.budget.map(sim_core::scene::human_bytes).unwrap_or_default();
            }
            let r = ui
                .add(egui::TextEdit::singleline(&mut self.budget_text).id(egui::Id::unique("esoflow.memory_budget")).hint_text("none, or e.g. 64 MB").desired_width(110.0))
                .labelled_by(label.id)
                .on_hover_text("most bytes the compressed state may take; over it, the largest subgrids get tau doubled (never halts). Empty: no limit. Press Enter");
            if left_field(&mut self.budget_focused, &r) {
                let t = self.budget_text.trim();
                if t.is_empty() || t.eq_ignore_ascii_case("none") {
                    self.set_compression_budget(None);
                } else {
                    match sim_core::scene::ByteSize::parse(t) {
                        Ok(b) => self.set_compression_budget(Some(b.0)),
                        Err(e) => self.message(format!("memory budget {t:?} refused: {e}"), true),
                    }
                }
            }
        });
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let tau = if c.tau.0 == c.tau.1 { format!("{:.1e}", c.tau.1) } else { format!("{:.1e} to {:.1e}", c.tau.0, c.tau.1) };
        ui.label(format!("ratio {:.2}x: {:.2} MiB for {:.2} MiB of DDFs, tau {tau}", c.ratio, mib(c.bytes), mib(c.dense_bytes)));
        if let Some(b) = c.budget {
            let over = c.bytes > b;
            let text = format!("{} the budget of {:.2} MiB", if over { "over" } else { "within" }, mib(b));
            if over {
                ui.colored_label(orange, text);
            } else {
                ui.label(text);
            }
        }
        if !self.is_2d() {
            ui.checkbox(&mut self.view.subgrid_outlines, "subgrid outlines by ratio")
                .on_hover_text("each subgrid as a box coloured by its compression ratio (legend top left)");
            if let Some((_, range)) = self.subgrid_outlines() {
                let (lo, hi) = c.per_subgrid.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| (lo.min(p.ratio), hi.max(p.ratio)));
                ui.label(format!("subgrid ratios {lo:.2}x to {hi:.2}x (colours from {:.2}x to {:.2}x)", range.0, range.1));
            }
        }
        let pts = |k: usize| -> Vec<[f64; 2]> { self.comp_history.iter().map(|h| [h[0], h[k]]).collect() };
        ui.label("compression ratio");
        egui_plot::Plot::new("compression ratio").height(80.0).allow_scroll(false).show(ui, |p| {
            p.line(egui_plot::Line::new("ratio", pts(1)));
        });
        ui.label("memory (MiB)");
        egui_plot::Plot::new("compression memory").height(80.0).allow_scroll(false).legend(egui_plot::Legend::default()).show(ui, |p| {
            p.line(egui_plot::Line::new("compressed", pts(2)));
            if let Some(b) = c.budget {
                let y = mib(b);
                let ends: Vec<[f64; 2]> =
                    [self.comp_history.front(), self.comp_history.back()].into_iter().flatten().map(|h| [h[0], y]).collect();
                p.line(egui_plot::Line::new("budget", ends));
            }
        });
        ui.separator();
        let mut reference = self.reference_running();
        let need = reference_bytes(self.scene.derived.lattice, self.scene.derived.size.iter().product());
        if ui
            .checkbox(&mut reference, "uncompressed reference run")
            .on_hover_text(format!(
                "the dense CPU solver beside this one, same scene and size, stepped in lockstep from the running state (about {})",
                sim_core::scene::human_bytes(need)
            ))
            .changed()
        {
            self.set_reference(reference);
        }
        if let Some(r) = &snap.reference {
            ui.label(format!("NMSE of density (eq. 19) {:.3e} at step {}", r.nmse, r.step)).on_hover_text(
                "sqrt(sum (rho - rho_ref)^2 / sum rho_ref^2) over the fluid cells, against the reference run at the same step",
            );
            ui.label(format!("largest |rho - rho_ref| {:.3e}, reference {:.1} MiB", r.max_abs, mib(r.bytes)));
            let mut diff = self.view.diff;
            if ui.checkbox(&mut diff, "difference view").on_hover_text("the slices show rho - rho_ref (diverging colours)").changed() {
                self.set_diff_view(diff);
            }
        } else if self.pending_reference.is_some() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("building the reference run…");
            });
        }
    }

    fn visualization_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("field");
            let mut f = self.view.field;
            let r = egui::ComboBox::from_id_salt("field").selected_text(f.name()).show_ui(ui, |ui| {
                for k in FieldKind::ALL {
                    ui.selectable_value(&mut f, k, k.name());
                }
            });
            r.response.labelled_by(label.id);
            self.set_field(f);
        });
        ui.horizontal(|ui| {
            let label = ui.label("colour map");
            let r = egui::ComboBox::from_id_salt("cmap").selected_text(self.view.cmap.name()).show_ui(ui, |ui| {
                for m in ColorMap::ALL {
                    ui.selectable_value(&mut self.view.cmap, m, m.name());
                }
            });
            r.response.labelled_by(label.id);
        });
        ui.horizontal(|ui| {
            ui.radio_value(&mut self.view.auto_range, true, "auto range");
            if ui.radio_value(&mut self.view.auto_range, false, "fixed").clicked() {
                self.view.fixed = self.range();
            }
        });
        if !self.view.auto_range {
            ui.horizontal(|ui| {
                let (mut lo, mut hi) = self.view.fixed;
                let speed = ((hi - lo).abs() * 0.005).max(1e-7);
                let l = ui.label("min");
                ui.add(egui::DragValue::new(&mut lo).speed(speed).max_decimals(6)).labelled_by(l.id);
                let l = ui.label("max");
                ui.add(egui::DragValue::new(&mut hi).speed(speed).max_decimals(6)).labelled_by(l.id);
                self.view.fixed = (lo, hi);
            });
            if self.view.fixed.1 <= self.view.fixed.0 {
                ui.colored_label(Color32::from_rgb(255, 170, 60), "max must be above min");
            }
        }
        let n = self.grid;
        if self.is_2d() {
            ui.label("2D: drag to pan, scroll to zoom, double-click to reset the view");
        } else {
            for (a, name) in ["x", "y", "z"].iter().enumerate() {
                ui.horizontal(|ui| {
                    let label = ui.checkbox(&mut self.view.show[a], format!("{name} slice"));
                    ui.add(egui::Slider::new(&mut self.view.slices[a], 0..=n[a].saturating_sub(1))).labelled_by(label.id);
                });
            }
            ui.label("drag: orbit · right/middle drag: pan · scroll: zoom");
        }
        if ui.button("Reset camera").clicked() {
            self.view.camera.reset();
        }
        ui.separator();
        self.surfaces_ui(ui);
    }

    fn surfaces_ui(&mut self, ui: &mut Ui) {
        if self.is_2d() {
            ui.label("isosurfaces and solid surfaces: 3D scenes only (solid cells are grey in the image)");
        } else if !self.surfaces_supported {
            ui.colored_label(
                Color32::from_rgb(255, 170, 60),
                "this GPU or driver has no compute shaders: no isosurfaces or solid surfaces",
            );
        } else {
            let mut on = self.view.iso;
            if ui
                .checkbox(&mut on, "isosurface")
                .on_hover_text("i: marching cubes of |vorticity| or Q at the threshold, coloured by |u|")
                .changed()
            {
                self.set_iso(on);
            }
            ui.horizontal(|ui| {
                let label = ui.label("iso field");
                let mut k = self.view.iso_field;
                egui::ComboBox::from_id_salt("iso field")
                    .selected_text(k.name())
                    .show_ui(ui, |ui| {
                        for f in ISO_FIELDS {
                            ui.selectable_value(&mut k, f, f.name());
                        }
                    })
                    .response
                    .labelled_by(label.id);
                self.set_iso_field(k);
            });
            let kind = self.view.iso_field;
            ui.horizontal(|ui| {
                let label = ui.label("threshold");
                let (lo, hi) = iso_slider_range(kind);
                let mut t = self.view.iso_threshold().clamp(lo, hi);
                let r = ui.add(egui::Slider::new(&mut t, lo..=hi).logarithmic(true).show_value(false)).labelled_by(label.id);
                if r.changed() {
                    self.set_iso_threshold(t);
                }
            });
            ui.horizontal(|ui| {
                let label = ui.label("threshold value");
                if !self.iso_text_focused {
                    self.iso_text = format!("{}", self.view.iso_threshold());
                }
                let r = ui
                    .add(egui::TextEdit::singleline(&mut self.iso_text).id(egui::Id::unique("esoflow.iso_threshold")).desired_width(110.0))
                    .labelled_by(label.id)
                    .on_hover_text("type a value (e.g. 0.02 or 1e-5) and press Enter");
                if left_field(&mut self.iso_text_focused, &r) {
                    match self.iso_text.trim().parse::<f32>() {
                        Ok(t) => {
                            self.set_iso_threshold(t);
                        }
                        Err(_) => self.message(format!("isosurface threshold {:?} refused: not a number", self.iso_text.trim()), true),
                    }
                    self.iso_text = format!("{}", self.view.iso_threshold());
                }
            });
            match self.iso_data() {
                Some(d) => ui.label(format!("{} now from {} to {}", kind.name(), fmt_value(d.min_max.0), fmt_value(d.min_max.1))),
                None if self.view.iso => ui.label(format!("waiting for the {} field…", kind.name())),
                None => ui.label(format!("{} range: shown when the isosurface is on", kind.name())),
            };
            if self.view.iso {
                if let Some(st) = self.iso_stats {
                    ui.label(match st.stride {
                        1 => format!("{} triangles, {} vertices", st.triangles(), st.vertices),
                        s => format!("{} triangles, {} vertices (cubes of {s} cells, to keep the frame rate)", st.triangles(), st.vertices),
                    });
                }
                if let Some(n) = self.iso_note() {
                    ui.colored_label(Color32::from_rgb(255, 170, 60), n);
                }
            }
            ui.horizontal(|ui| {
                ui.checkbox(&mut self.view.solids, "solid obstacles as surfaces");
                if let Some(st) = self.solid_stats.filter(|_| self.view.solids) {
                    ui.label(format!("{} triangles", st.triangles()));
                    if st.capped() {
                        ui.colored_label(Color32::from_rgb(255, 170, 60), format!("(capped: {} drawn)", st.drawn()));
                    }
                }
            });
        }
        ui.checkbox(&mut self.view.bricks, "brick overlay")
            .on_hover_text("the solver's bricks on the slices: all solid (skipped), plain fluid (lean kernel), boundary");
        if self.view.bricks {
            if let Some(s) = &self.snap {
                let b = BrickLegend::of(&s.bricks);
                ui.label(format!(
                    "bricks of {}x{}x{}: {} all solid, {} plain fluid, {} boundary",
                    b.brick[0], b.brick[1], b.brick[2], b.counts[0], b.counts[1], b.counts[2]
                ));
            }
        }
        if !self.is_2d() {
            ui.checkbox(&mut self.view.brick_outlines, "brick outlines (3D)").on_hover_text(
                "the boundary and all-solid bricks as boxes in their class colour; plain fluid bricks are left to the slice overlay",
            );
            if self.view.brick_outlines {
                if let Some(s) = &self.snap {
                    let counts = BrickLegend::of(&s.bricks).counts;
                    let total = counts[BrickClass::Boundary as usize] + counts[BrickClass::Solid as usize];
                    let drawn = total.min(MAX_BRICK_OUTLINES);
                    ui.label(format!(
                        "{drawn} boxes: {} boundary, {} all solid",
                        counts[BrickClass::Boundary as usize],
                        counts[BrickClass::Solid as usize]
                    ));
                    if drawn < total {
                        ui.colored_label(
                            Color32::from_rgb(255, 170, 60),
                            format!("outlines capped: {drawn} of {total} bricks drawn (evenly thinned, boundary bricks first)"),
                        );
                    }
                }
            }
        }
    }

    fn stats_ui(&mut self, ui: &mut Ui) {
        let Some(s) = self.snap.clone() else {
            ui.label("no data yet");
            return;
        };
        let t = self.times;
        egui::Grid::new("stats").num_columns(2).striped(true).show(ui, |ui| {
            let mut row = |k: &str, v: String| {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            };
            row("backend", format!("{} ({})", s.info.backend, s.info.device));
            row("grid", format!("{} x {} x {} = {} cells", s.size[0], s.size[1], s.size[2], s.size.iter().product::<usize>()));
            row("MLUPS", format!("{:.1}", s.mlups));
            row("steps/s", format!("{:.0}", s.steps_per_sec));
            row("FPS", format!("{:.1}", t.fps));
            row("frame", format!("{:.1} ms", t.frame_secs * 1e3));
            row(
                "  solver",
                format!("{:.2} ms ({} steps)", s.solver_secs_per_step * self.steps_per_frame as f64 * 1e3, self.steps_per_frame),
            );
            row(
                "  fields",
                format!(
                    "{:.2} ms ({})",
                    s.fields_secs * 1e3,
                    if s.frame.is_shared() { "written into shared GPU memory" } else { "in host memory" }
                ),
            );
            row("  render", format!("{:.2} ms", t.render_secs * 1e3));
            if self.gpu_timing != GpuTiming::Unknown {
                // GPU timestamps, read a frame or more late; each span's last frame that had it
                // (a frame without new data makes no surface).
                let line = gpu_timer::summary(&self.gpu_timing, |t, s| t.last_ms[s as usize]);
                row("  GPU", line.strip_prefix("GPU: ").map_or(line.clone(), str::to_string));
            }
            row("memory", format!("{:.1} MiB", s.info.memory_bytes as f64 / (1u64 << 20) as f64));
            if let Some(c) = &s.compression {
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let tau = if c.tau.0 == c.tau.1 { format!("{:.1e}", c.tau.1) } else { format!("{:.1e} to {:.1e}", c.tau.0, c.tau.1) };
                row(
                    "compression",
                    format!(
                        "ratio {:.2}x: {:.1} MiB for {:.1} MiB of DDFs, {} subgrids, tau {tau}",
                        c.ratio,
                        mib(c.bytes),
                        mib(c.dense_bytes),
                        c.subgrids
                    ),
                );
            }
            row("bytes/cell", format!("{:.1} in memory, {:.0} moved per step", s.info.bytes_per_cell, s.info.bytes_moved_per_cell));
            let drift = if s.mass0 > 0.0 { (s.stats.mass - s.mass0) / s.mass0 } else { 0.0 };
            row("mass drift", format!("{drift:+.3e}"));
            for (name, f) in s.obstacles.iter().zip(&s.stats.forces) {
                row(&format!("force on {name}"), format!("({:.3e}, {:.3e}, {:.3e})", f[0], f[1], f[2]));
            }
            if !self.gpu_note.is_empty() {
                row("view GPU", self.gpu_note.clone());
            }
            if !self.frame_note.is_empty() {
                row("frame path", self.frame_note.clone());
            }
        });
        let pts = |k: usize| -> Vec<[f64; 2]> { self.history.iter().map(|h| [h[0], h[k]]).collect() };
        ui.label("mass drift");
        egui_plot::Plot::new("mass").height(90.0).show_x(false).allow_scroll(false).show(ui, |p| {
            p.line(egui_plot::Line::new("mass drift", pts(1)));
        });
        if !s.obstacles.is_empty() {
            ui.label("force on obstacles (fx, fy)");
            egui_plot::Plot::new("force").height(90.0).allow_scroll(false).legend(egui_plot::Legend::default()).show(ui, |p| {
                p.line(egui_plot::Line::new("fx", pts(2)));
                p.line(egui_plot::Line::new("fy", pts(3)));
            });
        }
    }

    /// The adaptive blocks panel: the criterion and its limits (live), the outlines, and what
    /// the forest costs now.
    fn amr_ui(&mut self, ui: &mut Ui) {
        let Some(a) = self.amr_info().cloned() else { return };
        let mut st = a.settings.clone();
        let finest = a.max_level;
        ui.horizontal(|ui| {
            ui.label("criterion");
            ui.selectable_value(&mut st.field, sim_core::amr::Field::Vorticity, "|vorticity|")
                .on_hover_text("block maximum of the vorticity magnitude");
            ui.selectable_value(&mut st.field, sim_core::amr::Field::Q, "Q")
                .on_hover_text("block maximum of the Q criterion (vortex cores)");
        });
        ui.horizontal(|ui| {
            let label = ui.label("threshold");
            ui.add(
                egui::Slider::new(&mut st.threshold, AMR_THRESHOLD.0..=AMR_THRESHOLD.1)
                    .logarithmic(true)
                    .custom_formatter(|v, _| format!("{v:.1e}")),
            )
            .labelled_by(label.id)
            .on_hover_text(
                "a block whose value reaches it asks for level 1, each doubling for one level more (lattice units, per coarse step)",
            );
        });
        ui.horizontal(|ui| {
            let label = ui.label("coarsen below");
            ui.add(egui::Slider::new(&mut st.coarsen, 0.1..=1.0).custom_formatter(|v, _| format!("{v:.2} x")))
                .labelled_by(label.id)
                .on_hover_text("hysteresis: a block keeps its level while its value stays above this times the value that asks for it (1: none; lower stops blocks refining and coarsening by turns)");
        });
        ui.horizontal(|ui| {
            let label = ui.label("max level");
            ui.add(egui::Slider::new(&mut st.max_level, 0..=finest)).labelled_by(label.id).on_hover_text(format!(
                "finest level the criterion and the walls may ask for; this run's grid goes to level {finest} (amr.max_level)"
            ));
        });
        ui.horizontal(|ui| {
            let label = ui.label("adapt every");
            ui.add(egui::DragValue::new(&mut st.interval).range(0..=100_000).speed(1.0)).labelled_by(label.id).on_hover_text("0: never");
            ui.label("coarse steps");
        });
        ui.horizontal(|ui| {
            ui.label("freeze");
            for l in 0..=finest {
                let mut on = st.frozen.contains(&l);
                if ui.checkbox(&mut on, format!("L{l}")).on_hover_text(format!("no block of level {l} is created or removed")).changed() {
                    if on {
                        st.frozen.push(l);
                        st.frozen.sort_unstable();
                    } else {
                        st.frozen.retain(|&x| x != l);
                    }
                }
            }
        });
        let adapt_now = ui.button("Adapt now").on_hover_text("apply the criterion to the current state (one level per block)").clicked();
        if st != a.settings || adapt_now {
            self.set_amr(st);
        }
        ui.checkbox(&mut self.view.block_outlines, "block outlines by level");
        let leaves: Vec<String> = a.leaves.iter().enumerate().map(|(l, n)| format!("L{l} {n}")).collect();
        ui.label(format!("leaf blocks: {} ({} active of {} capacity)", leaves.join(" · "), a.blocks.0, a.blocks.1));
        let n = self.grid;
        let res = if self.is_2d() { format!("{} x {}", n[0], n[1]) } else { format!("{} x {} x {}", n[0], n[1], n[2]) };
        ui.label(format!(
            "cell updates per coarse step: {} ({:.1} % of the uniform {res} grid of level {finest}, the effective resolution)",
            fmt_count(a.updates_per_step),
            100.0 * a.updates_per_step as f64 / ((a.effective_cells << finest).max(1)) as f64
        ));
        ui.label(format!("time in refinement: {:.2} % ({} adaptations)", 100.0 * a.adapt_share(), a.adaptations));
        if !a.last.is_empty() {
            ui.label(RichText::new(format!("last: {}", a.last)).small());
        }
    }

    /// An adaptive run's block outlines over the 2D view, clipped to it.
    fn paint_block_outlines(&self, ui: &Ui, rect: egui::Rect) {
        let Some(boxes) = self.block_outlines() else { return };
        let painter = ui.painter().with_clip_rect(rect);
        for b in boxes {
            let (Some(p), Some(q)) =
                (self.screen_of(Vec3::new(b.min[0], b.min[1], 0.5)), self.screen_of(Vec3::new(b.max[0], b.max[1], 0.5)))
            else {
                continue;
            };
            let c = Color32::from_rgb(b.color[0], b.color[1], b.color[2]);
            painter.rect_stroke(egui::Rect::from_two_pos(p, q), 0.0, egui::Stroke::new(1.0, c), egui::StrokeKind::Middle);
        }
    }

    fn scene_ui(&mut self, ui: &mut Ui) {
        self.edit_ui(ui);
        ui.separator();
        ui.label(format!("now: {}", self.scene.origin));
        if self.loading() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("loading…");
            });
        }
        if !self.scene.scene.description.is_empty() {
            ui.label(RichText::new(&self.scene.scene.description).small());
        }
        if ui.button("Open scene file…").clicked() {
            self.file_dialog(Dialog::OpenScene);
        }
        ui.horizontal(|ui| {
            ui.add(
                egui::TextEdit::singleline(&mut self.scene_path_edit)
                    .id(egui::Id::unique("esoflow.scene_path"))
                    .hint_text("path/to/scene.toml")
                    .desired_width(180.0),
            );
            if ui.button("Load").clicked() {
                let p = PathBuf::from(self.scene_path_edit.trim());
                self.open_scene(Some(&p));
            }
        });
        ui.label("presets");
        if ui.button("cylinder_2d (built in)").clicked() {
            self.open_scene(None);
        }
        for p in self.presets.clone() {
            let name = p.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
            if ui.button(name).on_hover_text(p.display().to_string()).clicked() {
                self.open_scene(Some(&p));
            }
        }
        if self.presets.is_empty() {
            ui.label(RichText::new("(no scenes/ folder here: run from the repository to list the presets)").small());
        }
    }

    /// Draw / erase tools and the STL obstacle loader (top of the Scene panel).
    fn edit_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            let mut t = self.edit.tool;
            ui.selectable_value(&mut t, Tool::Navigate, "Navigate").on_hover_text("n: the mouse moves the view");
            ui.selectable_value(&mut t, Tool::Draw, "Draw").on_hover_text("d: left-drag paints solid cells (obstacle \"drawn\")");
            ui.selectable_value(&mut t, Tool::Erase, "Erase").on_hover_text("e: left-drag turns solid cells into fluid");
            if t != self.edit.tool {
                self.set_tool(t);
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("brush radius");
            ui.add(egui::DragValue::new(&mut self.edit.brush).range(0.5..=100.0).speed(0.1).max_decimals(1).suffix(" cells"))
                .labelled_by(label.id)
                .on_hover_text("[ and ] change it");
            let undo = self.snap.as_ref().is_some_and(|s| s.undo_depth > 0);
            if ui.add_enabled(undo, egui::Button::new("Undo stroke")).on_hover_text("ctrl+z").clicked() {
                self.undo_stroke();
            }
        });
        if !self.is_2d() {
            ui.horizontal(|ui| {
                ui.label("paint on the");
                let mut a = self.edit.axis;
                for (k, name) in ["x", "y", "z"].iter().enumerate() {
                    ui.radio_value(&mut a, k, format!("{name} slice"));
                }
                if a != self.edit.axis {
                    self.edit.axis = a;
                    if self.edit.tool != Tool::Navigate {
                        self.view.show[a] = true;
                    }
                }
            });
            ui.label(RichText::new(format!("(at index {}: move it in Visualization)", self.view.slices[self.edit.axis])).small());
        }
        if self.edit.tool != Tool::Navigate {
            ui.label(RichText::new("left-drag on the view paints · right/middle drag pans · scroll zooms").small());
        }
        ui.separator();
        if ui.button("Load STL obstacle…").on_hover_text("voxelised into the running domain as a new obstacle").clicked() {
            self.file_dialog(Dialog::LoadStl);
        }
        ui.horizontal(|ui| {
            ui.add(
                egui::TextEdit::singleline(&mut self.edit.stl_path)
                    .id(egui::Id::unique("esoflow.stl_path"))
                    .hint_text("path/to/mesh.stl")
                    .desired_width(180.0),
            );
            if ui.button("Load STL").clicked() {
                let p = PathBuf::from(self.edit.stl_path.trim());
                self.load_stl(&p);
            }
        });
        let dims = if self.is_2d() { 2 } else { 3 };
        ui.horizontal(|ui| {
            let label = ui.label("STL centre");
            for c in self.edit.stl_center.iter_mut().take(dims) {
                ui.add(egui::DragValue::new(c).range(0.0..=1.0).speed(0.005).max_decimals(3)).labelled_by(label.id);
            }
        });
        ui.horizontal(|ui| {
            let label = ui.label("STL size");
            ui.add(egui::DragValue::new(&mut self.edit.stl_size).range(0.01..=1.0).speed(0.005).max_decimals(3))
                .labelled_by(label.id)
                .on_hover_text("longest edge of the mesh as a fraction of the domain's smallest extent");
            ui.label(RichText::new("(fractions of the domain)").small());
        });
    }

    /// Edits sent that the solver has not confirmed yet.
    #[cfg(test)]
    #[must_use]
    pub fn pending_edits(&self) -> usize {
        self.edit.preview.len()
    }

    /// Choose the tool; in 3D the slice painted on is made visible.
    pub fn set_tool(&mut self, t: Tool) {
        if self.edit.active {
            self.end_stroke();
        }
        self.edit.tool = t;
        if t != Tool::Navigate && !self.is_2d() {
            self.view.show[self.edit.axis] = true;
        }
    }

    /// Voxelise an STL file into the running domain (the Load STL button's path, after the dialog):
    /// centred at the panel's position, its longest edge the panel's fraction of the domain's
    /// smallest extent. Errors come back as messages; the run goes on.
    pub fn load_stl(&mut self, path: &Path) {
        let n = self.grid;
        let dims = if self.is_2d() { 2 } else { 3 };
        let smallest = n[..dims].iter().copied().min().unwrap_or(1) as f32;
        let mut center = [0.0f32; 3];
        for a in 0..dims {
            center[a] = self.edit.stl_center[a].clamp(0.0, 1.0) * (n[a] as f32 - 1.0);
        }
        let size = self.edit.stl_size.clamp(0.01, 1.0) * smallest;
        self.edit.seq += 1;
        self.edit.stroke += 1;
        self.worker.send(Command::LoadStl { seq: self.edit.seq, stroke: self.edit.stroke, path: path.to_path_buf(), center, size });
        self.message(format!("loading {}…", path.display()), false);
    }

    /// Undo the last stroke or STL load.
    pub fn undo_stroke(&mut self) {
        if self.edit.active {
            self.end_stroke();
        }
        self.worker.send(Command::UndoStroke);
    }

    /// Whether a cell lies on a non-periodic face layer (walls, inlets, outlets): the brush
    /// preview leaves those alone, as the solver refuses most of them.
    fn locked(&self, c: usize) -> bool {
        let n = self.grid;
        let p = [c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])];
        let faces = self.scene.scene.boundaries.faces();
        let dims = if self.is_2d() { 2 } else { 3 };
        (0..dims).any(|a| {
            (p[a] == 0 && faces[2 * a].kind != FaceKind::Periodic) || (p[a] + 1 == n[a] && faces[2 * a + 1].kind != FaceKind::Periodic)
        })
    }

    /// A solid mask with the unconfirmed edits painted in.
    fn with_preview(&self, mask: &Arc<Vec<u8>>) -> Arc<Vec<u8>> {
        let mut m = (**mask).clone();
        for (_, cells, solid) in &self.edit.preview {
            for &c in cells.iter() {
                if c < m.len() && !self.locked(c) {
                    // Drawn cells are obstacles (2: drawn as surfaces too).
                    m[c] = if *solid { 2 } else { 0 };
                }
            }
        }
        Arc::new(m)
    }

    /// Axis painted on (2 in 2D, the image plane), the world coordinate of its plane and the
    /// cell layer.
    fn paint_plane(&self) -> (usize, f32, usize) {
        if self.is_2d() {
            (2, 0.5, 0)
        } else {
            let a = self.edit.axis;
            let k = self.view.slices[a].min(self.grid[a].saturating_sub(1));
            (a, k as f32 + 0.5, k)
        }
    }

    /// The point of the painted plane under a screen position (points), if the view shows it.
    #[must_use]
    pub fn world_at(&self, pos: egui::Pos2) -> Option<Vec3> {
        let rect = self.view_rect?;
        if rect.width() < 1.0 || rect.height() < 1.0 {
            return None;
        }
        let ndc = [(pos.x - rect.left()) / rect.width() * 2.0 - 1.0, 1.0 - (pos.y - rect.top()) / rect.height() * 2.0];
        let (axis, coord, _) = self.paint_plane();
        self.view.camera.pick_plane(self.grid, rect.width() / rect.height(), self.is_2d(), ndc, axis, coord)
    }

    /// Screen position (points) of a world point, if in front of the camera.
    #[must_use]
    pub fn screen_of(&self, p: Vec3) -> Option<egui::Pos2> {
        let rect = self.view_rect?;
        let px =
            self.view.camera.project(self.grid, [rect.width().max(1.0) as u32, rect.height().max(1.0) as u32], self.is_2d(), p.into())?;
        // `project` works in whole pixels of the given size; scale back to the rect's points.
        let sx = rect.width() / rect.width().max(1.0).floor();
        let sy = rect.height() / rect.height().max(1.0).floor();
        Some(egui::pos2(rect.left() + px[0] * sx, rect.top() + px[1] * sy))
    }

    /// Cells of the brush centred at `c` on the painted plane.
    fn brush_cells(&self, c: Vec3, out: &mut Vec<usize>) {
        let n = self.grid;
        let (axis, _, layer) = self.paint_plane();
        let (u, v) = match axis {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let r = self.edit.brush.max(0.5);
        let range = |a: usize| {
            let lo = (c[a] - r).floor().max(0.0) as usize;
            let hi = ((c[a] + r).floor() as i64).min(n[a] as i64 - 1);
            (lo, hi)
        };
        let ((u0, u1), (v0, v1)) = (range(u), range(v));
        let under = [c[u].floor(), c[v].floor()];
        for j in v0 as i64..=v1 {
            for i in u0 as i64..=u1 {
                let (fi, fj) = (i as f32, j as f32);
                let inside = (fi + 0.5 - c[u]).powi(2) + (fj + 0.5 - c[v]).powi(2) <= r * r || (fi == under[0] && fj == under[1]);
                if inside {
                    let mut p = [0usize; 3];
                    p[axis] = layer;
                    p[u] = i as usize;
                    p[v] = j as usize;
                    out.push(p[0] + n[0] * (p[1] + n[1] * p[2]));
                }
            }
        }
    }

    /// Paint along the pointer's path from the last stamp to `w`.
    fn paint_to(&mut self, w: Vec3) {
        let step = (self.edit.brush * 0.5).max(0.5);
        let from = self.edit.last.unwrap_or(w);
        let k = ((w - from).length() / step).ceil().max(1.0) as usize;
        let mut cells = std::mem::take(&mut self.edit.frame);
        for i in 1..=k {
            self.brush_cells(from.lerp(w, i as f32 / k as f32), &mut cells);
        }
        self.edit.frame = cells;
        self.edit.last = Some(w);
    }

    /// Send the cells painted in this frame as one edit, and show them at once.
    fn flush_edits(&mut self) {
        if self.edit.frame.is_empty() {
            return;
        }
        let mut cells = std::mem::take(&mut self.edit.frame);
        cells.sort_unstable();
        cells.dedup();
        let solid = self.edit.tool == Tool::Draw;
        let to = if solid { EditTo::Solid(DRAWN.into()) } else { EditTo::Fluid };
        self.edit.seq += 1;
        let cells = Arc::new(cells);
        self.edit.preview.push((self.edit.seq, Arc::clone(&cells), solid));
        if let Some(snap) = &self.snap {
            let patched = self.with_preview(&snap.solid);
            if let Some(snap) = self.snap.as_mut() {
                snap.solid = patched;
            }
        }
        self.worker.send(Command::Edit { seq: self.edit.seq, stroke: self.edit.stroke, cells: (*cells).clone(), to });
    }

    fn end_stroke(&mut self) {
        self.flush_edits();
        if self.edit.active {
            self.worker.send(Command::EndStroke(self.edit.stroke));
        }
        self.edit.active = false;
        self.edit.last = None;
    }

    /// Left button on the view with Draw or Erase: paint; released: the stroke ends.
    fn paint_input(&mut self, ui: &Ui, resp: &egui::Response) {
        let pos = resp.hover_pos().or_else(|| resp.interact_pointer_pos());
        self.edit.hover = pos.and_then(|p| self.world_at(p));
        let down = resp.is_pointer_button_down_on() && ui.input(|i| i.pointer.primary_down());
        if self.edit.tool == Tool::Navigate || !down {
            if self.edit.active {
                self.end_stroke();
            }
            return;
        }
        let Some(w) = resp.interact_pointer_pos().and_then(|p| self.world_at(p)) else { return };
        if !self.edit.active {
            self.edit.active = true;
            self.edit.stroke += 1;
            self.edit.last = None;
        }
        self.paint_to(w);
        self.flush_edits();
    }

    /// The brush outline at the pointer.
    fn brush_cursor(&self, ui: &Ui) {
        let (Some(c), true) = (self.edit.hover, self.edit.tool != Tool::Navigate) else { return };
        let (axis, _, _) = self.paint_plane();
        let (u, v) = match axis {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let r = self.edit.brush.max(0.5);
        let pts: Vec<egui::Pos2> = (0..=40)
            .filter_map(|k| {
                let t = k as f32 / 40.0 * std::f32::consts::TAU;
                let mut p = c;
                p[u] += r * t.cos();
                p[v] += r * t.sin();
                self.screen_of(p)
            })
            .collect();
        let color = if self.edit.tool == Tool::Draw { Color32::from_rgb(255, 220, 120) } else { Color32::from_rgb(120, 200, 255) };
        ui.painter().add(egui::Shape::line(pts, egui::Stroke::new(1.5, color)));
    }

    fn export_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            if ui.button("Screenshot (F12)").on_hover_text("into screenshots/").clicked() {
                self.screenshot();
            }
            if ui.button("Save as…").clicked() {
                self.file_dialog(Dialog::SaveScreenshot);
            }
        });
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.vtk_path).id(egui::Id::unique("esoflow.vtk_path")).desired_width(160.0));
            if ui.button("Export VTK").clicked() {
                self.worker.send(Command::ExportVtk(PathBuf::from(self.vtk_path.trim())));
            }
            if ui.button("…").clicked() {
                self.file_dialog(Dialog::ExportVtk);
            }
        });
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.ckpt_path).id(egui::Id::unique("esoflow.checkpoint_path")).desired_width(120.0));
            if ui.button("Save checkpoint").clicked() {
                self.worker.send(Command::SaveCheckpoint(PathBuf::from(self.ckpt_path.trim())));
            }
            if ui.button("Load").clicked() {
                self.worker.send(Command::LoadCheckpoint(PathBuf::from(self.ckpt_path.trim())));
            }
        });
        ui.horizontal(|ui| {
            if ui.button("Save checkpoint as…").clicked() {
                self.file_dialog(Dialog::SaveCheckpoint);
            }
            if ui.button("Load checkpoint…").clicked() {
                self.file_dialog(Dialog::LoadCheckpoint);
            }
        });
    }

    fn central_ui(&mut self, ui: &mut Ui) {
        let rect = ui.available_rect_before_wrap();
        let ppp = ui.ctx().pixels_per_point();
        self.view_px = [(rect.width() * ppp).round().max(0.0) as u32, (rect.height() * ppp).round().max(0.0) as u32];
        self.view_rect = Some(rect);
        let resp = ui.allocate_rect(rect, egui::Sense::click_and_drag());
        if let Some(tex) = self.field_texture {
            ui.painter().image(tex, rect, egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)), Color32::WHITE);
        } else {
            ui.painter().text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "waiting for the first frame…",
                egui::FontId::proportional(16.0),
                Color32::GRAY,
            );
        }
        if self.is_2d() {
            self.paint_block_outlines(ui, rect);
        }
        self.camera_input(ui, &resp, rect);
        self.paint_input(ui, &resp);
        self.brush_cursor(ui);
        let legend = self.legend();
        let tex = self.legend_texture(ui.ctx(), self.view.cmap);
        legend_ui(ui, rect, &legend, tex);
        // Status and messages, bottom left.
        let mut y = rect.bottom() - 8.0;
        let mut lines: Vec<(String, Color32)> = self
            .messages
            .iter()
            .rev()
            .take(6)
            .map(|m| (m.text.clone(), if m.error { Color32::from_rgb(255, 110, 100) } else { Color32::from_gray(220) }))
            .collect();
        if let Some(s) = &self.status {
            lines.insert(0, (s.clone(), Color32::from_rgb(255, 170, 60)));
        }
        let state = if self.blowup.is_some() {
            "BLOWN UP"
        } else if self.running {
            "running"
        } else {
            "paused"
        };
        lines.insert(0, (format!("step {} · {state} · h: help", self.step()), Color32::from_gray(200)));
        for (text, color) in lines {
            let galley = ui.painter().layout(text, egui::FontId::proportional(14.0), color, rect.width() * 0.6);
            let pos = egui::pos2(rect.left() + 10.0, y - galley.size().y);
            ui.painter().rect_filled(egui::Rect::from_min_size(pos, galley.size()).expand(3.0), 3.0, Color32::from_black_alpha(170));
            y -= galley.size().y + 8.0;
            ui.painter().galley(pos, galley, color);
        }
    }

    fn camera_input(&mut self, ui: &Ui, resp: &egui::Response, rect: egui::Rect) {
        let n = self.grid;
        let is_2d = self.is_2d();
        let ppp = ui.ctx().pixels_per_point();
        let size = [rect.width() * ppp, rect.height() * ppp];
        let painting = self.edit.tool != Tool::Navigate;
        if resp.double_clicked() && !painting {
            self.view.camera.reset();
        }
        if resp.dragged() && !(painting && resp.dragged_by(egui::PointerButton::Primary)) {
            let d = resp.drag_delta() * ppp;
            let pan = is_2d || resp.dragged_by(egui::PointerButton::Secondary) || resp.dragged_by(egui::PointerButton::Middle);
            if pan {
                self.view.camera.pan_by(n, d.x, d.y, size, is_2d);
            } else {
                self.view.camera.orbit(d.x, d.y);
            }
        }
        if resp.hovered() {
            let scroll = ui.ctx().input(|i| i.smooth_scroll_delta.y + (i.zoom_delta() - 1.0) * 200.0);
            if scroll != 0.0 {
                self.view.camera.zoom_by(scroll);
            }
        }
    }

    fn legend_texture(&mut self, ctx: &egui::Context, cmap: ColorMap) -> egui::TextureId {
        if let Some((_, t)) = self.legend_tex.iter().find(|(m, _)| *m == cmap) {
            return t.id();
        }
        let t = legend_texture(ctx, cmap);
        let id = t.id();
        self.legend_tex.push((cmap, t));
        id
    }

    fn help_ui(&mut self, ctx: &egui::Context) {
        let mut open = self.show_help;
        egui::Window::new("Help").open(&mut open).collapsible(false).resizable(false).anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0]).show(
            ctx,
            |ui| {
                egui::Grid::new("keys").num_columns(2).show(ui, |ui| {
                    for (k, v) in [
                        ("space", "run / pause"),
                        ("s", "one batch of steps (steps per frame)"),
                        ("r", "reset to step 0 (parameters kept)"),
                        ("h", "this help"),
                        ("i", "isosurface on / off (3D)"),
                        ("F12", "screenshot into screenshots/"),
                        ("drag", "3D: orbit · 2D: pan"),
                        ("right/middle drag", "pan"),
                        ("scroll", "zoom"),
                        ("double-click", "reset the camera"),
                        ("n / d / e", "tool: navigate / draw obstacles / erase obstacles (Scene panel)"),
                        ("left drag (draw, erase)", "paint on the 2D view, or on the chosen slice in 3D"),
                        ("[ / ]", "smaller / larger brush"),
                        ("ctrl+z", "undo the last stroke or STL load"),
                    ] {
                        ui.label(RichText::new(k).monospace().strong());
                        ui.label(v);
                        ui.end_row();
                    }
                });
                ui.separator();
                ui.label("Units are lattice units: lengths in cells, time in steps, density around 1.");
                ui.label("Keep tau above ~0.51 and Mach below 0.3 (velocities below ~0.17) for a stable, accurate run.");
            },
        );
        self.show_help = open;
    }

    fn blowup_ui(&mut self, ctx: &egui::Context) {
        let Some(b) = self.blowup.clone() else { return };
        egui::Window::new("The simulation blew up").collapsible(false).resizable(false).anchor(egui::Align2::CENTER_TOP, [0.0, 40.0]).show(
            ctx,
            |ui| {
                ui.label(format!("At step {} {}. The run is paused.", b.step, b.why));
                ui.label("Raise tau (viscosity), lower the velocities, or switch to TRT / Smagorinsky in the scene.");
                ui.horizontal(|ui| {
                    if ui.button(format!("Roll back to step {}", b.last_good)).clicked() {
                        self.worker.send(Command::Rollback);
                        self.blowup = None;
                    }
                    if ui.button("Reset to step 0").clicked() {
                        self.reset();
                    }
                });
            },
        );
    }
}

fn vec_edit(ui: &mut Ui, v: &mut [f32; 3], is_2d: bool, label: egui::Id) -> bool {
    let mut changed = false;
    let dims = if is_2d { 2 } else { 3 };
    for c in v.iter_mut().take(dims) {
        changed |= ui.add(egui::DragValue::new(c).speed(0.0005).range(-0.3..=0.3).max_decimals(4)).labelled_by(label).changed();
    }
    changed
}

/// Reynolds and Mach numbers of the settings in force, with warnings.
#[derive(Clone, Debug, PartialEq)]
pub struct Numbers {
    /// Viscosity (tau - 0.5) / 3.
    pub viscosity: f32,
    /// Reference velocity.
    pub u_ref: f32,
    /// Reference length.
    pub length: f32,
    /// U L / nu.
    pub reynolds: f32,
    /// Largest boundary velocity / c_s.
    pub mach_boundary: f32,
    /// Largest flow velocity / c_s.
    pub mach_flow: f32,
    /// What is unstable or inaccurate.
    pub warnings: Vec<String>,
}

/// Reynolds and Mach numbers for a scene with parameters `p` and relaxation time `tau`.
/// The reference velocity and length are the scene's (`fluid.velocity`, `fluid.length`),
/// scaled with the boundary velocities as they change; without them, the largest boundary
/// velocity and the domain height.
#[must_use]
pub fn numbers(ls: &LoadedScene, p: &sim_core::Params, tau: f32, max_u: f64) -> Numbers {
    let norm = |v: &[f32; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let vmax = p.inlets.iter().chain(p.walls.iter()).map(norm).fold(0.0f32, f32::max);
    let scene_vmax = ls.derived.max_velocity;
    let u_ref = match ls.scene.fluid.velocity {
        Some(u) if scene_vmax > 0.0 => u * vmax / scene_vmax,
        Some(u) => u,
        None => vmax,
    };
    let length = ls.scene.fluid.length.unwrap_or(ls.derived.size[1] as f32);
    let viscosity = (tau - 0.5) / 3.0;
    let reynolds = if viscosity > 0.0 { u_ref * length / viscosity } else { f32::INFINITY };
    let cs = 1.0 / 3f32.sqrt();
    let mach_boundary = vmax / cs;
    let mach_flow = max_u as f32 / cs;
    let mut warnings = Vec::new();
    if tau < 0.51 {
        warnings.push(format!("tau = {tau:.4} is close to 0.5: the BGK collision becomes unstable (raise tau, or use TRT / Smagorinsky)"));
    }
    if mach_boundary > 0.3 || mach_flow > 0.3 {
        warnings.push(format!("Mach {:.2} > 0.3: compressibility errors grow and the run may blow up", mach_boundary.max(mach_flow)));
    }
    Numbers { viscosity, u_ref, length, reynolds, mach_boundary, mach_flow, warnings }
}

/// Scene files in a folder, sorted.
#[must_use]
pub fn find_presets(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "toml")).collect();
    v.sort();
    v
}

/// An egui texture of a colour map (one row of the LUT).
pub fn legend_texture(ctx: &egui::Context, cmap: ColorMap) -> egui::TextureHandle {
    let px: Vec<Color32> = (0..super::colormap::LUT_SIZE)
        .map(|i| {
            let c = cmap.lut_entry(i);
            Color32::from_rgb(c[0], c[1], c[2])
        })
        .collect();
    let img = egui::ColorImage::new([super::colormap::LUT_SIZE, 1], px);
    ctx.load_texture(format!("cmap-{}", cmap.name()), img, egui::TextureOptions::NEAREST)
}

/// Whether the user just left a text field (Enter, Tab, a click elsewhere): `focused` is the
/// field's focus as of its last drawing, updated here. Exactly once per edit: egui's
/// `lost_focus` stays true for two frames, and by the second the field may hold the solver's
/// value again (a budget typed and then reset to "none" was the flaky viewer test's failure).
fn left_field(focused: &mut bool, r: &egui::Response) -> bool {
    let was = std::mem::replace(focused, r.has_focus());
    was && !*focused
}

/// The range of the adaptive blocks' threshold slider (lattice units).
const AMR_THRESHOLD: (f32, f32) = (1e-5, 1.0);

/// A count with a thousands unit (1.2 M, 34.5 k).
fn fmt_count(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..10_000_000 => format!("{:.1} k", n as f64 / 1e3),
        _ => format!("{:.1} M", n as f64 / 1e6),
    }
}
