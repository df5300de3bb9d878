//! The Scene panel: the edit tools, opening scenes and presets, and rebuilding the solver (loaded on threads of their own).

use crate::solvers::{build_solver, load_scene};
use crate::viewer::app::{Dialog, Tool, ViewSettings, ViewerApp};
use crate::viewer::worker::Command;
use egui::{RichText, Ui};
use sim_core::scene::LoadedScene;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

impl ViewerApp {
    /// Replace the scene (load a file, or the built-in default with `None`). The scene is read
    /// and its solver built on a helper thread; the old scene runs on until the new one is ready,
    /// and stays if the new one fails (with a message).
    pub fn open_scene(&mut self, path: Option<&Path>) {
        let path = path.map(Path::to_path_buf);
        let what = path.as_ref().map_or_else(|| "the built-in scene".to_string(), |p| p.display().to_string());
        self.load_in_background(what, move || load_scene(path.as_deref(), &[]));
    }

    /// Replace the scene with one given as text (a preset built into the binary), named
    /// `origin` in messages, its relative paths resolved against `base`; as [`Self::open_scene`].
    pub fn open_scene_text(&mut self, text: &'static str, origin: &str, base: PathBuf) {
        let name = origin.to_string();
        self.load_in_background(origin.to_string(), move || Ok(sim_core::scene::from_str(text, &name, base, &[])?));
    }

    /// Read a scene and build its solver on a thread of their own (`poll_scene` takes it).
    fn load_in_background(&mut self, what: String, load: impl FnOnce() -> anyhow::Result<LoadedScene> + Send + 'static) {
        if self.pending_scene.is_some() {
            self.message("a scene is already loading", false);
            return;
        }
        let choice = self.choice;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("scene-loader".into()).spawn(move || {
            let r = load().map_err(|e| format!("cannot open the scene: {e:#}")).and_then(|ls| {
                let s = build_solver(&ls, &choice).map_err(|e| format!("cannot build a solver for {}: {e:#}", ls.origin))?;
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
    pub(crate) fn rebuild(&mut self, what: &str, keep_state: bool, change: impl FnOnce(&mut sim_core::scene::Scene)) {
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
        let choice = self.choice;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("solver-rebuild".into()).spawn(move || {
            let r = build_solver(&ls, &choice).map_err(|e| format!("cannot rebuild the solver: {e:#}")).map(|mut s| {
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

    /// Whether a scene is being loaded.
    #[must_use]
    pub fn loading(&self) -> bool {
        self.pending_scene.is_some()
    }

    pub(crate) fn poll_scene(&mut self) {
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
        // The same scene rebuilt keeps the probes placed so far; another scene brings its own.
        if self.rebuilding {
            self.send_probes();
        } else {
            self.probes_from_scene();
        }
        self.snap = None;
        self.blowup = None;
        self.history.clear();
    }

    pub(crate) fn scene_ui(&mut self, ui: &mut Ui) {
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
        if ui.button("Presets…").on_hover_text("o: every shipped scene, with a picture, what it shows and what to try").clicked() {
            self.show_presets = true;
        }
    }

    /// Draw / erase tools and the STL obstacle loader (top of the Scene panel).
    fn edit_ui(&mut self, ui: &mut Ui) {
        ui.label(RichText::new("Draw (d) and Erase (e) are in the toolbar.").small());
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
        if self.edit.tool.is_brush() {
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
}
