//! Tracers and streamlines in the window: what the user chose (how many tracers, where they are
//! released, the streamlines' seed line or plane), turned into what the renderer draws, the
//! Seed tool's click, and their part of the Visualization panel. The particles move on the GPU
//! (see `render::tracers`); here only settings.

use crate::viewer::app::{Tool, ViewerApp};
use crate::viewer::render::{StreamlineView, TracerView, MAX_TRACERS};
use egui::{Color32, Ui};
use sim_core::fields::FieldKind;

/// Where tracers are released when they leave the grid, enter an obstacle or grow old.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seeding {
    /// In front of the velocity inlet (everywhere where the scene has none).
    Inlet,
    /// Anywhere in the grid, each living a while: an even cover of the flow.
    Everywhere,
    /// Around the point last clicked with the Seed tool.
    Point,
}

impl Seeding {
    /// Every choice.
    pub const ALL: [Seeding; 3] = [Seeding::Inlet, Seeding::Everywhere, Seeding::Point];

    /// Name in the panel and in `--view`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Seeding::Inlet => "inlet",
            Seeding::Everywhere => "everywhere",
            Seeding::Point => "clicked point",
        }
    }
}

/// The tracers' settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracerSettings {
    /// Drawn (t).
    pub on: bool,
    /// How many.
    pub count: u32,
    /// Where they are released.
    pub seeding: Seeding,
    /// The Seed tool's last click (world space, cells of the view's grid).
    pub point: Option<[f32; 3]>,
    /// Half the edge of the box around the point tracers are released in (cells).
    pub radius: f32,
    /// Dot diameter (pixels).
    pub size_px: f32,
    /// Counts changes of the seeding (every tracer is placed anew).
    pub generation: u64,
}

impl Default for TracerSettings {
    fn default() -> TracerSettings {
        TracerSettings { on: false, count: 20_000, seeding: Seeding::Inlet, point: None, radius: 3.0, size_px: 3.0, generation: 0 }
    }
}

/// The streamlines' settings: seeds on a line (2D, or 3D by choice) or a plane across `axis`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamlineSettings {
    /// Drawn (l).
    pub on: bool,
    /// The axis the seed line or plane lies across.
    pub axis: usize,
    /// Its position on that axis (cells; `None`: in front of the inlet, else an eighth in).
    pub position: Option<f32>,
    /// Seeds along each edge.
    pub seeds: u32,
    /// A plane of seeds (3D) rather than a line.
    pub plane: bool,
    /// Share of the grid's cross-section the seeds cover.
    pub span: f32,
    /// Centre of the seeds across the axis (`None`: the grid's centre).
    pub centre: Option<[f32; 3]>,
    /// Coloured by speed (else white: lines coloured like the slices behind them hide in them).
    pub by_speed: bool,
}

impl Default for StreamlineSettings {
    fn default() -> StreamlineSettings {
        StreamlineSettings { on: false, axis: 0, position: None, seeds: 16, plane: true, span: 0.8, centre: None, by_speed: false }
    }
}

/// A tracer's life (time steps) when released everywhere: long enough to show the path through
/// a good part of the grid at the flow's speed, short enough to keep them spread.
fn life_everywhere(n: [usize; 3], speed: f32) -> f32 {
    let longest = n.iter().copied().max().unwrap_or(1) as f32;
    0.5 * longest / speed.max(1e-3)
}

/// The tracers of settings `t` on a grid `n` whose inlet box is `inlet` (see
/// [`crate::viewer::frames::inlet_box`]), in a flow of typical speed `speed`, at time step
/// `step` (dot size in points: scale it to pixels).
#[must_use]
pub fn tracer_view_of(t: &TracerSettings, n: [usize; 3], inlet: Option<[[f32; 3]; 2]>, speed: f32, step: u64) -> TracerView {
    let nf = n.map(|c| c as f32);
    let whole = [[0.0; 3], nf];
    let (seed, life) = match (t.seeding, t.point) {
        (Seeding::Inlet, _) => match inlet {
            Some(b) => (b, 4.0 * life_everywhere(n, speed)),
            None => (whole, life_everywhere(n, speed)),
        },
        (Seeding::Point, Some(p)) => {
            let r = t.radius.max(0.5);
            let lo = std::array::from_fn(|a| (p[a] - r).clamp(0.0, nf[a]));
            let hi = std::array::from_fn(|a| (p[a] + r).clamp(0.0, nf[a]));
            ([lo, hi], 4.0 * life_everywhere(n, speed))
        }
        (Seeding::Everywhere | Seeding::Point, _) => (whole, life_everywhere(n, speed)),
    };
    TracerView {
        count: t.count.clamp(1, MAX_TRACERS),
        seed,
        life,
        step,
        generation: t.generation,
        size_px: t.size_px,
        color: [1.0, 1.0, 1.0, 0.9],
    }
}

/// The streamlines of settings `s` on a grid `n` (2D where `n[2]` is 1) whose inlet box is
/// `inlet`, coloured over the speeds 0 to `speed`: seeds on a line or plane across the chosen
/// axis, in front of the inlet unless placed, traced for twice the grid's longest edge.
#[must_use]
pub fn streamline_view_of(s: &StreamlineSettings, n: [usize; 3], inlet: Option<[[f32; 3]; 2]>, speed: f32) -> StreamlineView {
    let nf = n.map(|c| c as f32);
    let two_d = n[2] == 1;
    let axis = if two_d { s.axis.min(1) } else { s.axis.min(2) };
    // Half a cell past the inlet's layer, on the flow's side, where the inlet lies across the axis.
    let inlet_at =
        inlet
            .filter(|b| b[1][axis] - b[0][axis] <= 1.0)
            .map(|b| if b[0][axis] < nf[axis] / 2.0 { b[1][axis] + 0.5 } else { b[0][axis] - 0.5 });
    let at = s.position.or(inlet_at).unwrap_or(nf[axis] / 8.0).clamp(0.5, (nf[axis] - 0.5).max(0.5));
    let centre = s.centre.unwrap_or([nf[0] / 2.0, nf[1] / 2.0, nf[2] / 2.0]);
    let across: Vec<usize> = (0..if two_d { 2 } else { 3 }).filter(|&a| a != axis).collect();
    let mut origin = [0.0f32; 3];
    origin[axis] = at;
    if two_d {
        origin[2] = 0.5;
    }
    let mut u = [0.0f32; 3];
    let mut v = [0.0f32; 3];
    let span = s.span.clamp(0.01, 1.0);
    let b = across[0];
    u[b] = nf[b] * span;
    origin[b] = (centre[b] - u[b] / 2.0).clamp(0.0, nf[b] - u[b]);
    let plane = s.plane && !two_d;
    if let Some(&c) = across.get(1) {
        if plane {
            v[c] = nf[c] * span;
            origin[c] = (centre[c] - v[c] / 2.0).clamp(0.0, nf[c] - v[c]);
        } else {
            origin[c] = centre[c].clamp(0.5, nf[c] - 0.5);
        }
    }
    let seeds = s.seeds.clamp(1, 256);
    let longest = n.iter().copied().max().unwrap_or(1) as f32;
    // Steps of half a cell on small grids, of up to 2 cells on large ones: a line's points
    // are walked one after the other by one GPU thread.
    let step = (longest / 256.0).clamp(0.5, 2.0);
    StreamlineView {
        origin,
        u,
        v,
        seeds: [seeds, if plane { seeds } else { 1 }],
        points: ((2.0 * longest / step) as u32).clamp(16, 1024),
        step,
        by_speed: s.by_speed,
        range: (0.0, speed),
        color: [1.0, 1.0, 1.0, 1.0],
    }
}

impl ViewerApp {
    /// Whether the view needs the velocity (tracers or streamlines on, on a device that moves
    /// them).
    #[must_use]
    pub fn wants_velocity(&self) -> bool {
        self.surfaces_supported && (self.view.tracers.on || self.view.streamlines.on)
    }

    /// A typical speed of the flow (lattice units): the largest of the last stats, or the top
    /// of the speed's colour range.
    fn flow_speed(&self) -> f32 {
        let s = self.snap.as_ref();
        let from_stats = s.map_or(0.0, |s| s.stats.max_u as f32);
        let from_frame = s.and_then(|s| s.frame.range(FieldKind::Speed)).map_or(0.0, |r| r.1);
        from_stats.max(from_frame).clamp(1e-3, 0.5)
    }

    /// The tracers the renderer moves and draws, if on.
    #[must_use]
    pub fn tracer_view(&self) -> Option<TracerView> {
        let snap = self.snap.as_ref().filter(|_| self.view.tracers.on)?;
        let mut v = tracer_view_of(&self.view.tracers, self.grid, snap.inlet, self.flow_speed(), snap.step);
        v.generation = v.generation.wrapping_mul(1_000_003).wrapping_add(snap.solver_serial);
        v.size_px *= self.pixels_per_point;
        Some(v)
    }

    /// The streamlines the renderer traces and draws, if on.
    #[must_use]
    pub fn streamline_view(&self) -> Option<StreamlineView> {
        let snap = self.snap.as_ref().filter(|_| self.view.streamlines.on)?;
        Some(streamline_view_of(&self.view.streamlines, self.grid, snap.inlet, self.flow_speed()))
    }

    /// Tracers on or off (t).
    pub fn set_tracers(&mut self, on: bool) {
        self.view.tracers.on = on;
        if on && !self.surfaces_supported {
            self.message("this GPU or driver has no compute shaders: no tracers", true);
        }
    }

    /// Streamlines on or off (l).
    pub fn set_streamlines(&mut self, on: bool) {
        self.view.streamlines.on = on;
        if on && !self.surfaces_supported {
            self.message("this GPU or driver has no compute shaders: no streamlines", true);
        }
    }

    /// A click on the view with the Seed tool: tracers are released around that point from
    /// now on, and the streamlines' seeds are centred on it (their line or plane moved there).
    pub(crate) fn seed_input(&mut self, resp: &egui::Response) {
        if self.edit.tool != Tool::Seed || !resp.clicked() {
            return;
        }
        let Some(w) = resp.interact_pointer_pos().and_then(|p| self.world_at(p)) else { return };
        let p = [w.x, w.y, if self.is_2d() { 0.5 } else { w.z }];
        let t = &mut self.view.tracers;
        t.point = Some(p);
        t.seeding = Seeding::Point;
        t.generation += 1;
        if !t.on {
            self.set_tracers(true);
        }
        let s = &mut self.view.streamlines;
        s.centre = Some(p);
        s.position = Some(p[s.axis.min(2)]);
    }

    /// The seed point as a small cross on the view.
    pub(crate) fn seed_marker(&self, ui: &Ui) {
        let Some(p) = self.view.tracers.point.filter(|_| self.view.tracers.on && self.view.tracers.seeding == Seeding::Point) else {
            return;
        };
        let Some(s) = self.screen_of(glam::Vec3::from(p)) else { return };
        if !self.view_rect.is_some_and(|r| r.contains(s)) {
            return;
        }
        for (w, c) in [(3.0, Color32::BLACK), (1.5, Color32::WHITE)] {
            let st = egui::Stroke::new(w, c);
            ui.painter().line_segment([s - egui::vec2(7.0, 0.0), s + egui::vec2(7.0, 0.0)], st);
            ui.painter().line_segment([s - egui::vec2(0.0, 7.0), s + egui::vec2(0.0, 7.0)], st);
        }
    }

    /// The tracers' and streamlines' part of the Visualization panel.
    pub(crate) fn tracers_ui(&mut self, ui: &mut Ui) {
        if !self.surfaces_supported {
            ui.colored_label(Color32::from_rgb(255, 170, 60), "this GPU or driver has no compute shaders: no tracers or streamlines");
            return;
        }
        let mut on = self.view.tracers.on;
        if ui.checkbox(&mut on, "tracers").on_hover_text("t: particles carried by the flow").changed() {
            self.set_tracers(on);
        }
        if self.view.tracers.on {
            let before = self.view.tracers;
            let t = &mut self.view.tracers;
            ui.horizontal(|ui| {
                let l = ui.label("count");
                ui.add(egui::Slider::new(&mut t.count, 1_000..=1_000_000).logarithmic(true)).labelled_by(l.id);
            });
            ui.horizontal(|ui| {
                let l = ui.label("released");
                egui::ComboBox::from_id_salt("seeding")
                    .selected_text(t.seeding.name())
                    .show_ui(ui, |ui| {
                        for s in Seeding::ALL {
                            ui.selectable_value(&mut t.seeding, s, s.name());
                        }
                    })
                    .response
                    .labelled_by(l.id)
                    .on_hover_text("where tracers start again when they leave the grid, enter an obstacle or grow old");
            });
            ui.horizontal(|ui| {
                let l = ui.label("dot size");
                ui.add(egui::Slider::new(&mut t.size_px, 1.0..=8.0)).labelled_by(l.id);
            });
            if t.seeding == Seeding::Point {
                ui.horizontal(|ui| {
                    let l = ui.label("seed box");
                    ui.add(egui::Slider::new(&mut t.radius, 0.5..=40.0).suffix(" cells")).labelled_by(l.id);
                });
                if t.point.is_none() {
                    ui.label("pick the Seed tool (g) and click the view to place the seed");
                }
            }
            if t.seeding != before.seeding || t.count != before.count || t.radius != before.radius {
                t.generation += 1;
            }
            if self.snap.as_ref().is_some_and(|s| s.inlet.is_none()) && t.seeding == Seeding::Inlet {
                ui.label("this scene has no inlet: tracers are released everywhere");
            }
        }
        let mut on = self.view.streamlines.on;
        if ui.checkbox(&mut on, "streamlines").on_hover_text("l: lines along the flow from a line or plane of seeds").changed() {
            self.set_streamlines(on);
        }
        if self.view.streamlines.on {
            let two_d = self.is_2d();
            let n = self.grid;
            let s = &mut self.view.streamlines;
            ui.horizontal(|ui| {
                let l = ui.label("seeds across");
                egui::ComboBox::from_id_salt("seed axis")
                    .selected_text(["x", "y", "z"][s.axis])
                    .show_ui(ui, |ui| {
                        for (a, name) in ["x", "y", "z"].iter().enumerate().take(if two_d { 2 } else { 3 }) {
                            if ui.selectable_value(&mut s.axis, a, *name).changed() {
                                s.position = None;
                            }
                        }
                    })
                    .response
                    .labelled_by(l.id);
                if !two_d {
                    ui.checkbox(&mut s.plane, "plane").on_hover_text("a plane of seeds (else a line)");
                }
            });
            ui.horizontal(|ui| {
                let l = ui.label("at");
                let max = n[s.axis].max(1) as f32;
                let mut at = s.position.unwrap_or(max / 8.0);
                if ui.add(egui::Slider::new(&mut at, 0.5..=max - 0.5).suffix(" cells")).labelled_by(l.id).changed() {
                    s.position = Some(at);
                }
            });
            ui.horizontal(|ui| {
                let l = ui.label("seeds");
                ui.add(egui::Slider::new(&mut s.seeds, 1..=64)).labelled_by(l.id);
                let l = ui.label("span");
                ui.add(egui::Slider::new(&mut s.span, 0.05..=1.0)).labelled_by(l.id);
            });
            ui.checkbox(&mut s.by_speed, "coloured by speed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracers_live_longer_in_slower_flows_and_larger_grids() {
        assert!(life_everywhere([200, 100, 1], 0.05) > life_everywhere([200, 100, 1], 0.1));
        assert!(life_everywhere([400, 100, 1], 0.1) > life_everywhere([200, 100, 1], 0.1));
        // Still water: a long but finite life.
        assert!(life_everywhere([64, 64, 64], 0.0).is_finite());
    }
}
