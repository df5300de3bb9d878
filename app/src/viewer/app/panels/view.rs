//! The Visualization panel: field, colour map and range, slices, isosurfaces, solid surfaces, brick overlay and outlines; what the legend shows.

use crate::viewer::app::ViewerApp;
use crate::viewer::colormap::ColorMap;
use crate::viewer::legend::{auto_range, default_cmap, legend_texture};
use crate::viewer::panels::left_field;
use crate::viewer::render::MAX_BRICK_OUTLINES;
use crate::viewer::worker::Command;
use crate::viewer::{fmt_value, BlockLegend, BrickLegend, IsoLegend, LegendInfo, SubgridLegend, ISO_FIELDS};
use egui::{Color32, Ui};
use sim_core::bricks::BrickClass;
use sim_core::fields::FieldKind;

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

impl ViewerApp {
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
    pub fn iso_data(&self) -> Option<&crate::viewer::worker::IsoData> {
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
        l.units = self.scene.derived.units;
        if self.view.auto_range {
            l.data = self.snap.as_ref().filter(|s| s.field == self.view.field && s.robust.is_some()).map(|s| s.min_max);
        }
        if self.diff_values().is_some() {
            l.field = FieldKind::Density;
            l.cmap = ColorMap::Diverging;
            l.data = None;
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

    pub(crate) fn legend_texture(&mut self, ctx: &egui::Context, cmap: ColorMap) -> egui::TextureId {
        if let Some((_, t)) = self.legend_tex.iter().find(|(m, _)| *m == cmap) {
            return t.id();
        }
        let t = legend_texture(ctx, cmap);
        let id = t.id();
        self.legend_tex.push((cmap, t));
        id
    }

    pub(crate) fn visualization_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.radio_value(&mut self.view.auto_range, true, "auto range").on_hover_text(
                "from the 1st to the 99th percentile of the fluid cells, so that a few extreme cells do not take the colours; the legend gives the true extremes",
            );
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
        ui.separator();
        self.tracers_ui(ui);
    }

    fn surfaces_ui(&mut self, ui: &mut Ui) {
        if self.is_2d() {
            // Surfaces are for 3D scenes: nothing to show here.
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
}
