//! The Probes panel: probes placed with a click (the Probe tool) or given by the scene, each
//! with its velocity, pressure and vorticity over time in a plot with labelled axes (the latest
//! values in SI units too where the scene gives them), exported as CSV; and the forces and
//! force coefficients of each obstacle over time, plotted the same way.

use crate::viewer::app::{Tool, ViewerApp};
use crate::viewer::worker::Command;
use egui::{Color32, RichText, Ui};
use sim_core::probes::{Probe, ProbeSample, ProbeSeries};
use sim_core::units::{si, Units};

/// Samples kept of each probe in the window (at one sample per frame, minutes of a run).
pub const PROBE_SAMPLES: usize = 20_000;
/// Most probes at once (each is a line of the panel and a read of the solver per frame).
pub const MAX_PROBES: usize = 16;

/// What the probe plots show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeQuantity {
    /// |u|.
    Speed,
    /// The velocity's x, y and z components, one line each.
    Velocity,
    /// Lattice pressure (rho - 1) / 3.
    Pressure,
    /// Density.
    Density,
    /// |curl u|.
    Vorticity,
}

impl ProbeQuantity {
    /// Every quantity, in the menu's order.
    pub const ALL: [ProbeQuantity; 5] =
        [ProbeQuantity::Speed, ProbeQuantity::Velocity, ProbeQuantity::Pressure, ProbeQuantity::Density, ProbeQuantity::Vorticity];

    /// Name in the menu.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ProbeQuantity::Speed => "|u|",
            ProbeQuantity::Velocity => "ux, uy, uz",
            ProbeQuantity::Pressure => "pressure",
            ProbeQuantity::Density => "density",
            ProbeQuantity::Vorticity => "|vorticity|",
        }
    }

    /// The plot's y axis: what and in which units (lattice units).
    #[must_use]
    pub fn axis(self) -> &'static str {
        match self {
            ProbeQuantity::Speed => "|u| [cells/step]",
            ProbeQuantity::Velocity => "u [cells/step]",
            ProbeQuantity::Pressure => "p = (rho - 1)/3 [lattice]",
            ProbeQuantity::Density => "rho [lattice, rest = 1]",
            ProbeQuantity::Vorticity => "|curl u| [1/step]",
        }
    }

    /// The names of the plot's lines (one per velocity component in a `dims`-D run).
    fn lines(self, dims: usize) -> &'static [&'static str] {
        match self {
            ProbeQuantity::Speed => &["|u|"],
            ProbeQuantity::Velocity => &VELOCITY_LINES[..dims.min(3)],
            ProbeQuantity::Pressure => &["p"],
            ProbeQuantity::Density => &["rho"],
            ProbeQuantity::Vorticity => &["|curl u|"],
        }
    }

    /// The value of line `i` of a sample.
    fn value(self, s: &ProbeSample, i: usize) -> f64 {
        f64::from(match self {
            ProbeQuantity::Speed => s.speed(),
            ProbeQuantity::Velocity => s.u[i],
            ProbeQuantity::Pressure => s.pressure(),
            ProbeQuantity::Density => s.rho,
            ProbeQuantity::Vorticity => s.vorticity,
        })
    }
}

/// The velocity plot's lines.
static VELOCITY_LINES: [&str; 3] = ["ux", "uy", "uz"];

/// Colours of the probes' markers and plot lines, by probe number.
const PROBE_COLORS: [Color32; 8] = [
    Color32::from_rgb(255, 120, 90),
    Color32::from_rgb(90, 200, 255),
    Color32::from_rgb(250, 220, 80),
    Color32::from_rgb(170, 130, 255),
    Color32::from_rgb(120, 230, 140),
    Color32::from_rgb(255, 150, 220),
    Color32::from_rgb(255, 255, 255),
    Color32::from_rgb(255, 180, 60),
];

/// The colour of probe `k`.
#[must_use]
pub fn probe_color(k: usize) -> Color32 {
    PROBE_COLORS[k % PROBE_COLORS.len()]
}

/// A plot over steps with labelled axes (and a legend when it has several lines).
pub fn time_plot(ui: &mut Ui, id: &str, y_label: &str, lines: Vec<(String, Color32, Vec<[f64; 2]>)>) {
    let legend = lines.len() > 1;
    let mut plot = egui_plot::Plot::new(id)
        .height(130.0)
        .allow_scroll(false)
        .x_axis_label("step")
        .y_axis_label(y_label)
        .y_axis_min_width(44.0)
        .auto_bounds(egui::Vec2b::TRUE);
    if legend {
        plot = plot.legend(egui_plot::Legend::default().position(egui_plot::Corner::LeftTop));
    }
    plot.show(ui, |p| {
        for (name, color, pts) in lines {
            p.line(egui_plot::Line::new(name, pts).color(color));
        }
    });
}

impl ViewerApp {
    /// The probes the window samples now.
    #[must_use]
    pub fn probes(&self) -> Vec<Probe> {
        self.probe_series.iter().filter_map(|s| s.probes().first().cloned()).collect()
    }

    /// The samples of probe `k`.
    #[cfg(test)]
    #[must_use]
    pub fn probe_series(&self, k: usize) -> Option<&ProbeSeries> {
        self.probe_series.get(k)
    }

    /// Place a probe at `cell` (cells of the scene's domain), named `name` or `probeK`;
    /// refused with a message outside the domain or past [`MAX_PROBES`].
    pub fn add_probe(&mut self, cell: [usize; 3], name: Option<String>) {
        let size = self.scene.derived.size;
        if (0..3).any(|a| cell[a] >= size[a]) {
            self.message(format!("no probe at {cell:?}: outside the domain of {} x {} x {} cells", size[0], size[1], size[2]), true);
            return;
        }
        if self.probe_series.len() >= MAX_PROBES {
            self.message(format!("at most {MAX_PROBES} probes: remove one first"), true);
            return;
        }
        let taken: Vec<String> = self.probes().into_iter().map(|p| p.name).collect();
        let name = name.unwrap_or_else(|| (1..).map(|k| format!("probe{k}")).find(|n| !taken.contains(n)).unwrap_or_default());
        self.probe_series.push(ProbeSeries::new(vec![Probe { name, cell }], PROBE_SAMPLES));
        self.sidebar.set_open(super::sidebar::Section::Probes, true);
        self.send_probes();
    }

    /// Remove probe `k` (and its samples).
    pub fn remove_probe(&mut self, k: usize) {
        if k < self.probe_series.len() {
            self.probe_series.remove(k);
            self.send_probes();
        }
    }

    /// Save a checkpoint of the run with the probes placed so far in it.
    pub fn save_checkpoint(&mut self, path: std::path::PathBuf) {
        self.worker.send(Command::SaveCheckpoint(path, self.probes()));
    }

    /// The probes a loaded checkpoint carried replace those placed (their samples start
    /// again); any outside this scene's grid are left out, and said.
    pub(crate) fn probes_from_checkpoint(&mut self, probes: Vec<Probe>) {
        let size = self.scene.derived.size;
        let (inside, outside): (Vec<Probe>, Vec<Probe>) = probes.into_iter().partition(|p| (0..3).all(|a| p.cell[a] < size[a]));
        if !outside.is_empty() {
            let names: Vec<&str> = outside.iter().map(|p| p.name.as_str()).collect();
            self.message(format!("the checkpoint's probes {} lie outside this scene's grid: left out", names.join(", ")), true);
        }
        if inside.is_empty() {
            return;
        }
        self.message(format!("{} probes from the checkpoint", inside.len()), false);
        self.probe_series = inside.into_iter().map(|p| ProbeSeries::new(vec![p], PROBE_SAMPLES)).collect();
        self.sidebar.set_open(super::sidebar::Section::Probes, true);
        self.send_probes();
    }

    /// The scene's probes, with no samples yet.
    pub(crate) fn probes_from_scene(&mut self) {
        self.probe_series = self.scene.derived.probes.iter().map(|p| ProbeSeries::new(vec![p.clone()], PROBE_SAMPLES)).collect();
        self.send_probes();
    }

    /// Tell the solver thread which cells of its grid to sample.
    pub(crate) fn send_probes(&mut self) {
        let size = self.scene.derived.size;
        let cells = self.probes().iter().map(|p| p.cell_on(size, self.grid)).collect();
        self.worker.send(Command::SetProbes(cells));
    }

    /// Record a snapshot's probe samples (a step back, a reset or a rollback, drops the samples
    /// after it).
    pub(crate) fn record_probes(&mut self, samples: &[ProbeSample], cells: &[[usize; 3]]) {
        let size = self.scene.derived.size;
        let now: Vec<[usize; 3]> = self.probes().iter().map(|p| p.cell_on(size, self.grid)).collect();
        if samples.len() != self.probe_series.len() || cells != now.as_slice() {
            return;
        }
        for (series, s) in self.probe_series.iter_mut().zip(samples) {
            series.truncate_after(s.step);
            series.push(std::slice::from_ref(s));
        }
    }

    /// Write every probe's samples as one CSV file (the columns of `esoflow run --probe`, with
    /// the SI ones where the scene gives units).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn export_probes(&self, path: &std::path::Path) -> std::io::Result<()> {
        sim_core::probes::write_csv_of(&self.probe_series, self.scene.derived.units.as_ref(), path)
    }

    /// A click on the view with the Probe tool: a probe at the cell under the pointer (in 3D on
    /// the slice the Scene panel paints on).
    pub(crate) fn probe_input(&mut self, resp: &egui::Response) {
        if self.edit.tool != Tool::Probe || !resp.clicked() {
            return;
        }
        let Some(w) = resp.interact_pointer_pos().and_then(|p| self.world_at(p)) else { return };
        let size = self.scene.derived.size;
        let cell: [usize; 3] = std::array::from_fn(|a| {
            let scale = size[a] as f32 / self.grid[a].max(1) as f32;
            ((w[a] * scale).floor().max(0.0) as usize).min(size[a].saturating_sub(1))
        });
        self.add_probe(cell, None);
    }

    /// Each probe on the view: a ring in its colour and its number.
    pub(crate) fn probe_markers(&self, ui: &Ui) {
        let size = self.scene.derived.size;
        for (k, p) in self.probes().iter().enumerate() {
            let c = p.cell_on(size, self.grid);
            let at = glam::Vec3::new(c[0] as f32 + 0.5, c[1] as f32 + 0.5, if self.is_2d() { 0.5 } else { c[2] as f32 + 0.5 });
            let Some(s) = self.screen_of(at) else { continue };
            if !self.view_rect.is_some_and(|r| r.contains(s)) {
                continue;
            }
            let color = probe_color(k);
            ui.painter().circle_stroke(s, 6.0, egui::Stroke::new(2.0, Color32::BLACK));
            ui.painter().circle_stroke(s, 5.0, egui::Stroke::new(2.0, color));
            ui.painter().text(
                s + egui::vec2(8.0, -8.0),
                egui::Align2::LEFT_BOTTOM,
                format!("{}", k + 1),
                egui::FontId::proportional(13.0),
                color,
            );
        }
    }

    pub(crate) fn probes_ui(&mut self, ui: &mut Ui) {
        let dims = if self.is_2d() { 2 } else { 3 };
        ui.horizontal(|ui| {
            let mut on = self.edit.tool == Tool::Probe;
            if ui.toggle_value(&mut on, "Probe tool").on_hover_text("p: click the view to place a probe").changed() {
                self.set_tool(if on { Tool::Probe } else { Tool::Navigate });
            }
            if !self.probe_series.is_empty() && ui.button("Remove all").clicked() {
                self.probe_series.clear();
                self.send_probes();
            }
        });
        if self.probe_series.is_empty() {
            let where_ = if self.is_2d() { "on the view" } else { "on the slice chosen in the Scene panel" };
            ui.label(format!("No probes: pick the Probe tool (p) and click {where_}, or list [[probes]] in the scene."));
        } else {
            ui.horizontal(|ui| {
                let label = ui.label("plot");
                let mut q = self.probe_quantity;
                egui::ComboBox::from_id_salt("probe quantity")
                    .selected_text(q.name())
                    .show_ui(ui, |ui| {
                        for k in ProbeQuantity::ALL {
                            ui.selectable_value(&mut q, k, k.name());
                        }
                    })
                    .response
                    .labelled_by(label.id);
                self.probe_quantity = q;
            });
        }
        let q = self.probe_quantity;
        let mut remove = None;
        for k in 0..self.probe_series.len() {
            let series = &self.probe_series[k];
            let Some(p) = series.probes().first() else { continue };
            let at = if dims == 2 {
                format!("({}, {})", p.cell[0], p.cell[1])
            } else {
                format!("({}, {}, {})", p.cell[0], p.cell[1], p.cell[2])
            };
            ui.horizontal(|ui| {
                ui.label(RichText::new(format!("{} {} at {at}", k + 1, p.name)).color(probe_color(k)).strong());
                if ui.small_button("Remove").on_hover_text("remove this probe and its samples").clicked() {
                    remove = Some(k);
                }
            });
            let samples = series.samples(0);
            match samples.back() {
                Some(s) => {
                    ui.label(probe_readout(s, dims, self.scene.derived.units.as_ref()));
                }
                None => {
                    ui.label("no samples yet (run the simulation)");
                }
            }
            let mut lines: Vec<(String, Color32, Vec<[f64; 2]>)> = Vec::new();
            let names = q.lines(dims);
            for (i, name) in names.iter().enumerate() {
                let color = if names.len() > 1 { PROBE_COLORS[(k + i) % PROBE_COLORS.len()] } else { probe_color(k) };
                let pts = samples.iter().map(|s| [s.step as f64, q.value(s, i)]).collect();
                lines.push(((*name).to_string(), color, pts));
            }
            time_plot(ui, &format!("probe plot {k}"), q.axis(), lines);
        }
        if let Some(k) = remove {
            self.remove_probe(k);
        }
        if !self.probe_series.is_empty() {
            ui.horizontal(|ui| {
                let label = ui.label("CSV");
                ui.add(egui::TextEdit::singleline(&mut self.probe_csv_path).desired_width(150.0)).labelled_by(label.id);
                if ui.button("Export probes").on_hover_text("every sample of every probe, one row per probe and step").clicked() {
                    let path = std::path::PathBuf::from(self.probe_csv_path.trim());
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    match self.export_probes(&path) {
                        Ok(()) => self.message(format!("wrote {}", path.display()), false),
                        Err(e) => self.message(format!("probes not written to {}: {e}", path.display()), true),
                    }
                }
            });
        }
        ui.separator();
        self.force_plots_ui(ui);
    }

    /// Each obstacle's force over time (and its drag and lift coefficients where the scene gives
    /// a reference length and velocity), with labelled axes.
    fn force_plots_ui(&mut self, ui: &mut Ui) {
        let Some(s) = self.snap.clone() else { return };
        if s.obstacles.is_empty() {
            ui.label("Forces: this scene has no obstacles.");
            return;
        }
        let reference = self.scene.scene.force_reference();
        let dims = if self.is_2d() { 2 } else { 3 };
        let steps = self.forces.steps();
        let from = steps.len().saturating_sub(PLOT_POINTS);
        for (k, name) in s.obstacles.iter().enumerate() {
            let f = self.forces.forces(k);
            ui.label(RichText::new(format!("Forces on {name}")).strong());
            if reference.values.is_some() {
                let series = |i: usize| -> Vec<[f64; 2]> {
                    steps[from..]
                        .iter()
                        .zip(&f[from..])
                        .filter_map(|(&t, &v)| reference.coefficients(v).map(|c| [t as f64, c[i]]))
                        .collect()
                };
                let lines = vec![
                    (format!("C_D (along {})", reference.drag.name()), probe_color(0), series(0)),
                    (format!("C_L (along {})", reference.lift.name()), probe_color(1), series(1)),
                ];
                time_plot(ui, &format!("coefficients {k}"), "coefficient [1]", lines);
            } else {
                let lines = ["fx", "fy", "fz"]
                    .into_iter()
                    .enumerate()
                    .take(dims)
                    .map(|(i, n)| {
                        (n.to_string(), probe_color(i), steps[from..].iter().zip(&f[from..]).map(|(&t, v)| [t as f64, v[i]]).collect())
                    })
                    .collect();
                time_plot(ui, &format!("forces {k}"), "force [lattice: mass cells/step²]", lines);
                ui.label(
                    RichText::new("C_D and C_L need a reference length and velocity: fluid.length and fluid.velocity, or [forces]").small(),
                );
            }
        }
    }
}

/// The latest sample of a probe in a `dims`-D run, in lattice units and, with `units`, in SI
/// units beside each value: "|u| 0.0834 (0.417 m/s)".
#[must_use]
pub fn probe_readout(s: &ProbeSample, dims: usize, units: Option<&Units>) -> String {
    let list = |f: &dyn Fn(f32) -> String| s.u.iter().take(dims).map(|&v| f(v)).collect::<Vec<_>>().join(", ");
    let lattice = list(&|v| format!("{v:.4}"));
    let Some(u) = units else {
        return format!("|u| {:.4}  u ({lattice})  p {:.3e}  |curl u| {:.3e}", s.speed(), s.pressure(), s.vorticity);
    };
    let v = |x: f32| si(u.velocity(f64::from(x)));
    format!(
        "|u| {:.4} ({} m/s)  u ({lattice}) ({} m/s)  p {:.3e} ({} Pa)  |curl u| {:.3e} ({} 1/s)",
        s.speed(),
        v(s.speed()),
        list(&v),
        s.pressure(),
        si(u.pressure(f64::from(s.pressure()))),
        s.vorticity,
        si(u.rate(f64::from(s.vorticity)))
    )
}

/// Points of each force line (the latest snapshots).
const PLOT_POINTS: usize = 2000;
