//! The viewer's state and its frame (egui): the solver thread's news, keys, the panels laid out
//! (each drawn by its file in `panels`) and the central view. No window and no GPU here: the shell
//! (window.rs) or a test drives [`ViewerApp::ui`] and renders what [`ViewerApp::view_params`] says.

pub mod panels;
pub mod recording;

use super::camera::Camera;
use super::colormap::ColorMap;
use super::gpu_timer::GpuTiming;
use super::legend::{auto_range, default_cmap};
use super::render::{self, IsoView, MeshStats, OutlineBox, ViewParams, MAX_BRICK_OUTLINES};
use super::worker::{Command, Event, Snapshot, WorkerHandle};
use super::{default_iso_threshold, legend_ui};
use crate::solvers::Choice;
use egui::{Color32, Ui};
use glam::Vec3;
use sim_core::fields::FieldKind;
use sim_core::scene::LoadedScene;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a message stays on screen.
const MESSAGE_SECS: f32 = 8.0;
/// Points kept in the stats plots.
const HISTORY: usize = 2000;
/// Snapshots of obstacle forces kept for the coefficients and Strouhal numbers (at 20 steps a
/// frame, 80,000 steps: tens of shedding periods).
const FORCE_SAMPLES: usize = 4096;

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
    /// Tracers carried by the flow.
    pub tracers: super::panels::tracers::TracerSettings,
    /// Streamlines.
    pub streamlines: super::panels::tracers::StreamlineSettings,
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
            tracers: super::panels::tracers::TracerSettings::default(),
            streamlines: super::panels::tracers::StreamlineSettings::default(),
        }
    }

    /// Threshold of the isosurface's field.
    #[must_use]
    pub fn iso_threshold(&self) -> f32 {
        self.iso_thresholds[usize::from(self.iso_field == FieldKind::Q)]
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
    /// A click places a probe.
    Probe,
    /// A click releases tracers there and centres the streamlines' seeds.
    Seed,
}

impl Tool {
    /// Whether a left drag paints cells (Draw, Erase).
    #[must_use]
    pub fn is_brush(self) -> bool {
        matches!(self, Tool::Draw | Tool::Erase)
    }
}

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
    pub(super) stl_path: String,
    /// Strokes started so far (the current one's id while `active`).
    pub(super) stroke: u64,
    pub(super) active: bool,
    /// Brush centre at the last stamp (world, cells).
    pub(super) last: Option<Vec3>,
    /// Cells painted in this frame, sent as one edit.
    pub(super) frame: Vec<usize>,
    /// Edit commands sent so far.
    pub(super) seq: u64,
    /// Sent edits the solver has not confirmed yet (seq, cells, solid), shown at once.
    pub(super) preview: Vec<(u64, Arc<Vec<usize>>, bool)>,
    /// Brush centre under the pointer (for the cursor).
    pub(super) hover: Option<Vec3>,
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
pub(super) enum Dialog {
    LoadStl,
    OpenScene,
    SaveScreenshot,
    ExportVtk,
    SaveCheckpoint,
    LoadCheckpoint,
}

/// What a scene loader thread hands back: the scene and its solver, or a message.
pub(super) type SceneResult = Result<(LoadedScene, Box<dyn sim_core::Solver>), String>;

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
    pub(super) choice: Choice,
    /// Latest snapshot (the renderer uploads it when `serial` changes).
    pub snap: Option<Snapshot>,
    /// Whether the user asked it to run.
    pub running: bool,
    /// Steps per frame (per published snapshot).
    pub steps_per_frame: u64,
    pub(super) checkpoint_every: u64,
    /// View settings.
    pub view: ViewSettings,
    pub(super) tau_edit: f32,
    pub(super) messages: Vec<Message>,
    /// A blow-up waiting for a decision.
    pub blowup: Option<BlowUp>,
    /// Step and mass drift per snapshot.
    pub(super) history: VecDeque<[f64; 2]>,
    /// Step, compression ratio, MiB stored and MiB of the DDFs uncompressed, per snapshot.
    pub(super) comp_history: VecDeque<[f64; 4]>,
    /// Forces on each obstacle per snapshot, for the coefficients and Strouhal numbers in Stats.
    pub(super) forces: sim_core::forces::ForceHistory,
    pub(super) budget_text: String,
    pub(super) budget_focused: bool,
    /// Most bytes an uncompressed reference run may take (`None`: 80 % of the memory available
    /// now, from /proc/meminfo; no check where that cannot be read).
    pub reference_limit: Option<u64>,
    /// The reference solver being built.
    pub(super) pending_reference: Option<Receiver<Result<Box<dyn sim_core::Solver>, String>>>,
    /// The pending rebuild goes on from the running state (compression switched).
    pub(super) keep_state: bool,
    /// The slice planes last sent to the solver thread (frames without an isosurface carry
    /// only their cells).
    pub(super) sent_slices: Option<[Option<usize>; 3]>,
    /// Help overlay shown.
    pub show_help: bool,
    /// The presets window shown.
    pub show_presets: bool,
    /// The streaming schemes window: shown or not, its measurement.
    pub schemes: super::panels::schemes::SchemesWindow,
    /// The recording in progress.
    pub recording: Option<super::recording::Recording>,
    /// A frame of the recording the shell should take at the end of this frame (the view only).
    pub record_request: Option<PathBuf>,
    pub(super) record_settings: super::recording::RecordSettings,
    /// The video being made from a stopped recording (its message).
    pub(super) video: Option<Receiver<(String, bool)>>,
    /// The presets' pictures, decoded once shown.
    pub(super) preset_tex: Vec<Option<egui::TextureHandle>>,
    /// The side bar: shown or not, which sections are unfolded.
    pub sidebar: super::panels::sidebar::SideBar,
    /// Where the legend and the messages were drawn in the last frame (points).
    pub overlays: Overlays,
    /// Each probe's samples (one series per probe, so that probes come and go on their own).
    pub(super) probe_series: Vec<sim_core::probes::ProbeSeries>,
    /// What the probe plots show.
    pub probe_quantity: super::panels::probes::ProbeQuantity,
    pub(super) probe_csv_path: String,
    /// Timings from the shell.
    pub times: FrameTimes,
    /// A screenshot the shell should take at the end of this frame.
    pub screenshot_request: Option<PathBuf>,
    pub(super) scene_path_edit: String,
    pub(super) vtk_path: String,
    pub(super) ckpt_path: String,
    pub(super) dialog: Option<Receiver<(Dialog, Option<PathBuf>)>>,
    pub(super) pending_scene: Option<Receiver<SceneResult>>,
    /// The pending scene is the running one rebuilt (edited cells carry over).
    pub(super) rebuilding: bool,
    /// The egui texture of the field view (set by the shell once it exists).
    pub field_texture: Option<egui::TextureId>,
    /// Size in pixels the central view wants (the shell renders at this size).
    pub view_px: [u32; 2],
    pub(super) legend_tex: Vec<(ColorMap, egui::TextureHandle)>,
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
    pub(super) sent_iso_stride: Option<u32>,
    /// Whether the worker was last asked for the velocity (tracers, streamlines).
    sent_velocity: bool,
    /// Physical pixels per point of the view (tracer dots are sized in points).
    pub(crate) pixels_per_point: f32,
    /// GPU times of the view (from the shell's renderer).
    pub gpu_timing: GpuTiming,
    /// Whether the shell's GPU can make surfaces (compute shaders).
    pub surfaces_supported: bool,
    pub(super) iso_text: String,
    pub(super) iso_text_focused: bool,
    /// Draw / erase tools.
    pub edit: EditTools,
    /// Where the field view was laid out in the last frame (points).
    pub view_rect: Option<egui::Rect>,
    /// Cells per axis of the solver's grid (an adaptive run's is its finest level's, finer
    /// than the scene's domain.size).
    pub(super) grid: [usize; 3],
}

impl ViewerApp {
    /// Start the viewer on a loaded scene and a solver built from it.
    #[must_use]
    pub fn new(scene: LoadedScene, solver: Box<dyn sim_core::Solver>, choice: impl Into<Choice>, running: bool) -> ViewerApp {
        let n = solver.domain().n;
        let tau = solver.params().collide.tau;
        let view = ViewSettings::new(n);
        let steps_per_frame = 20;
        let worker = WorkerHandle::start(solver, scene.origin.clone(), running, view.field, steps_per_frame);
        let mut app = ViewerApp {
            worker,
            choice: choice.into(),
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
            forces: sim_core::forces::ForceHistory::new(sim_core::forces::Keep::Latest, FORCE_SAMPLES),
            budget_text: String::new(),
            budget_focused: false,
            reference_limit: None,
            pending_reference: None,
            keep_state: false,
            show_help: false,
            show_presets: false,
            schemes: super::panels::schemes::SchemesWindow::default(),
            recording: None,
            record_request: None,
            record_settings: super::recording::RecordSettings::default(),
            video: None,
            preset_tex: Vec::new(),
            sidebar: super::panels::sidebar::SideBar::default(),
            overlays: Overlays::default(),
            probe_series: Vec::new(),
            probe_quantity: super::panels::probes::ProbeQuantity::Speed,
            probe_csv_path: "out/probes.csv".into(),
            times: FrameTimes::default(),
            screenshot_request: None,
            scene_path_edit: String::new(),
            vtk_path: "out/esoflow.vti".into(),
            ckpt_path: "out/esoflow.ckpt".into(),
            dialog: None,
            pending_scene: None,
            rebuilding: false,
            field_texture: None,
            view_px: [0, 0],
            legend_tex: Vec::new(),
            gpu_note: String::new(),
            frame_note: String::new(),
            status: None,
            iso_stats: None,
            iso_stride: None,
            sent_iso_stride: None,
            sent_velocity: false,
            pixels_per_point: 1.0,
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
        app.probes_from_scene();
        app.record_settings.dir = format!("recordings/{}", app.scene_stem());
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
        self.forces.clear();
        self.worker.send(Command::Reset);
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

    /// The colour range in force.
    #[must_use]
    pub fn range(&self) -> (f32, f32) {
        if let Some(mm) = self.diff_min_max() {
            return if self.view.auto_range { auto_range(mm, ColorMap::Diverging) } else { self.view.fixed };
        }
        if self.view.auto_range {
            let data = self.snap.as_ref().filter(|s| s.field == self.view.field);
            auto_range(data.map_or((0.0, 1.0), |s| s.robust.unwrap_or(s.min_max)), self.view.cmap)
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
            tracers: self.tracer_view(),
            streamlines: self.streamline_view(),
        }
    }

    fn poll_worker(&mut self) {
        let planes = (!self.is_2d()).then(|| std::array::from_fn(|a| self.view.show[a].then_some(self.view.slices[a])));
        if planes != self.sent_slices {
            self.sent_slices = planes;
            self.worker.send(Command::SetSlices(planes));
        }
        if self.wants_velocity() != self.sent_velocity {
            self.sent_velocity = self.wants_velocity();
            self.worker.send(Command::SetVelocity(self.sent_velocity));
        }
        if self.iso_stride.is_some() && self.iso_stride != self.sent_iso_stride {
            self.sent_iso_stride = self.iso_stride;
            self.worker.send(Command::SetIsoStride(self.iso_stride.unwrap_or(1)));
        }
        for e in self.worker.events() {
            match e {
                Event::Info(t) => self.message(t, false),
                Event::Probes(p) => self.probes_from_checkpoint(p),
                Event::Error(t) => self.message(t, true),
                Event::BlownUp { step, why, last_good } => {
                    self.running = false;
                    self.message(format!("the simulation blew up at step {step} ({why}): paused"), true);
                    self.blowup = Some(BlowUp { step, why, last_good });
                }
            }
        }
        if let Some(s) = self.worker.take() {
            if !s.probes.is_empty() {
                self.record_probes(&s.probes, &s.probe_cells);
            }
            if !s.stats.blown_up() {
                self.forces.push(s.stats.step, &s.stats.forces);
                let drift = if s.mass0 > 0.0 { (s.stats.mass - s.mass0) / s.mass0 } else { 0.0 };
                if self.history.back().is_none_or(|h| h[0] < s.step as f64) {
                    self.history.push_back([s.step as f64, drift]);
                    if self.history.len() > HISTORY {
                        self.history.pop_front();
                    }
                } else if self.history.back().is_some_and(|h| h[0] > s.step as f64) {
                    // Reset or rollback: the history starts again.
                    self.history.clear();
                    self.history.push_back([s.step as f64, drift]);
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
                self.save_checkpoint(p);
            }
            Dialog::LoadCheckpoint => {
                self.ckpt_path = p.display().to_string();
                self.worker.send(Command::LoadCheckpoint(p));
            }
        }
    }

    /// Open a native file dialog on its own thread (the UI keeps running).
    pub(super) fn file_dialog(&mut self, what: Dialog) {
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

    /// The scene's file stem (for file names).
    #[must_use]
    pub fn scene_stem(&self) -> String {
        self.scene.origin.rsplit('/').next().unwrap_or("esoflow").split(['.', ' ']).next().unwrap_or("esoflow").to_string()
    }

    /// Request a screenshot into screenshots/ (named by scene and step).
    pub fn screenshot(&mut self) {
        let stem = self.scene_stem();
        self.screenshot_request = Some(PathBuf::from("screenshots").join(format!("{stem}_step{:07}.png", self.step())));
    }

    /// The whole window's UI for one frame.
    pub fn ui(&mut self, ui: &mut Ui) {
        let ctx = ui.ctx().clone();
        self.poll_worker();
        self.poll_dialog();
        self.poll_scene();
        self.poll_reference();
        self.poll_recording();
        self.shortcuts(&ctx);
        self.frame_keys(&ctx);
        self.toolbar_ui(ui);
        self.sidebar_ui(ui);
        egui::CentralPanel::default().frame(egui::Frame::NONE.fill(Color32::from_gray(4))).show(ui, |ui| self.central_ui(ui));
        self.help_ui(&ctx);
        self.presets_ui(&ctx);
        self.schemes_ui(&ctx);
        self.blowup_ui(&ctx);
        if self.running
            || self.dialog.is_some()
            || self.pending_scene.is_some()
            || self.pending_reference.is_some()
            || !self.messages.is_empty()
            || self.video.is_some()
        {
            ctx.request_repaint_after(Duration::from_millis(if self.running { 0 } else { 100 }));
        }
    }

    fn central_ui(&mut self, ui: &mut Ui) {
        let rect = ui.available_rect_before_wrap();
        let ppp = ui.ctx().pixels_per_point();
        self.pixels_per_point = ppp;
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
        self.probe_input(&resp);
        self.seed_input(&resp);
        self.brush_cursor(ui);
        self.probe_markers(ui);
        self.seed_marker(ui);
        let legend = self.legend();
        let tex = self.legend_texture(ui.ctx(), self.view.cmap);
        let legend_rect = legend_ui(ui, rect, &legend, tex);
        self.overlays = Overlays { legend: Some(legend_rect), messages: Vec::new() };
        self.messages_ui(ui, rect, legend_rect);
    }

    /// Status and messages, bottom left, never over the legend: beside it where there is room
    /// for them, else above it.
    fn messages_ui(&mut self, ui: &Ui, rect: egui::Rect, legend: egui::Rect) {
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
        let beside = legend.left() - 16.0 - (rect.left() + 10.0);
        let (width, mut y) =
            if beside >= 260.0 { (beside, rect.bottom() - 8.0) } else { ((rect.width() - 26.0).max(40.0), legend.top() - 8.0) };
        for (text, color) in lines {
            let galley = ui.painter().layout(text, egui::FontId::proportional(14.0), color, width);
            let pos = egui::pos2(rect.left() + 10.0, y - galley.size().y);
            let r = egui::Rect::from_min_size(pos, galley.size()).expand(3.0);
            if r.top() < rect.top() {
                break;
            }
            ui.painter().rect_filled(r, 3.0, Color32::from_black_alpha(170));
            y -= galley.size().y + 8.0;
            ui.painter().galley(pos, galley, color);
            self.overlays.messages.push(r);
        }
    }

    /// Where the view and its legend lie in a window of `window` points, as one line (printed
    /// with a window's `--screenshot`, so that a script can check the layout):
    /// `layout: window 1280x720, view 320..1280 x 30..720 (75 % of the width), legend 990..1270 x 640..712`.
    #[must_use]
    pub fn layout_line(&self, window: egui::Vec2) -> String {
        let r = |r: Option<egui::Rect>| {
            r.map_or("none".to_string(), |r| format!("{:.0}..{:.0} x {:.0}..{:.0}", r.left(), r.right(), r.top(), r.bottom()))
        };
        let share = self.view_rect.map_or(0.0, |v| 100.0 * v.width() / window.x.max(1.0));
        format!(
            "layout: window {:.0}x{:.0}, view {} ({share:.0} % of the width), legend {}",
            window.x,
            window.y,
            r(self.view_rect),
            r(self.overlays.legend)
        )
    }

    fn camera_input(&mut self, ui: &Ui, resp: &egui::Response, rect: egui::Rect) {
        let n = self.grid;
        let is_2d = self.is_2d();
        let ppp = ui.ctx().pixels_per_point();
        let size = [rect.width() * ppp, rect.height() * ppp];
        let painting = self.edit.tool.is_brush();
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
}

/// Where the view's overlays were drawn in the last frame (points).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overlays {
    /// The legend.
    pub legend: Option<egui::Rect>,
    /// Each status and message line.
    pub messages: Vec<egui::Rect>,
}
