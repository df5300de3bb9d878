//! The Adaptive blocks panel: the refinement criterion and its limits, block outlines by level, the forest's cost.

use crate::viewer::app::ViewerApp;
use crate::viewer::render::{self, OutlineBox};
use crate::viewer::worker::Command;
use egui::{Color32, RichText, Ui};
use glam::Vec3;
use sim_core::amr::{AmrInfo, AmrSettings};

impl ViewerApp {
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

    /// The adaptive blocks panel: the criterion and its limits (live), the outlines, and what
    /// the forest costs now.
    pub(crate) fn amr_ui(&mut self, ui: &mut Ui) {
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
    pub(crate) fn paint_block_outlines(&self, ui: &Ui, rect: egui::Rect) {
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
}

/// A count with a thousands unit (1.2 M, 34.5 k).
fn fmt_count(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..10_000_000 => format!("{:.1} k", n as f64 / 1e3),
        _ => format!("{:.1} M", n as f64 / 1e6),
    }
}

/// The range of the adaptive blocks' threshold slider (lattice units).
const AMR_THRESHOLD: (f32, f32) = (1e-5, 1.0);
