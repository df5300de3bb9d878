//! The Compression panel: compressed subgrids on or off, threshold, memory budget, ratio plots, subgrid outlines.

use crate::viewer::app::ViewerApp;
use crate::viewer::panels::left_field;
use crate::viewer::reference::reference_bytes;
use crate::viewer::render::{self, OutlineBox};
use crate::viewer::worker::Command;
use egui::{Color32, Ui};
use sim_core::scene::LoadedScene;

/// The range of the compression threshold slider (lattice units of the shifted DDFs).
pub const COMPRESSION_TAU: (f64, f64) = (1e-9, 1e-2);

/// Why a scene cannot run on compressed subgrids (its 2D lattice, scheme or precision), or
/// `None` when it can.
#[must_use]
pub fn compression_blocker(ls: &LoadedScene) -> Option<String> {
    let mut sc = ls.scene.clone();
    sc.compression.enabled = true;
    sim_core::scene::validate(&sc).err().map(|(_, msg)| msg)
}

impl ViewerApp {
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

    pub(crate) fn compression_ui(&mut self, ui: &mut Ui) {
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
                self.budget_text = c.budget.map(sim_core::units::human_bytes).unwrap_or_default();
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
                sim_core::units::human_bytes(need)
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
}
