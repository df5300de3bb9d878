//! The Stats panel: speed, frame times, memory, mass drift, forces, drag and lift coefficients
//! and Strouhal numbers, with their plots; where the scene gives SI units, the simulated time,
//! speed and forces in SI and the table of the conversion.

use crate::viewer::app::ViewerApp;
use crate::viewer::gpu_timer::{self, GpuTiming};
use egui::{RichText, Ui};
use sim_core::forces::ForceHistory;
use sim_core::units::{si, Units};

impl ViewerApp {
    pub(crate) fn stats_ui(&mut self, ui: &mut Ui) {
        let Some(s) = self.snap.clone() else {
            ui.label("no data yet");
            return;
        };
        let t = self.times;
        let reference = self.scene.scene.force_reference();
        let units = self.scene.derived.units;
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
            if let Some(u) = &units {
                row("time", format!("{} s (step {})", si(u.time(s.stats.step as f64)), s.stats.step));
                row("max |u|", format!("{:.4} cells/step = {} m/s", s.stats.max_u, si(u.velocity(s.stats.max_u))));
            }
            for (k, (name, f)) in s.obstacles.iter().zip(&s.stats.forces).enumerate() {
                row(&format!("force on {name}"), format!("({:.3e}, {:.3e}, {:.3e})", f[0], f[1], f[2]));
                if let Some(u) = &units {
                    let c = |v: f64| si(u.force(v));
                    row("  in SI units", format!("({}, {}, {}) {}", c(f[0]), c(f[1]), c(f[2]), u.force_unit()));
                }
                for (key, value) in force_rows(&self.forces, k, *f, &reference) {
                    row(key, value);
                }
            }
            if !self.gpu_note.is_empty() {
                row("view GPU", self.gpu_note.clone());
            }
            if !self.frame_note.is_empty() {
                row("frame path", self.frame_note.clone());
            }
        });
        ui.separator();
        match &units {
            Some(u) => units_table(ui, u, s.params.collide.tau),
            None => {
                ui.label(RichText::new("Lattice units only: a [units] table in the scene adds SI values (scenes/README.md)").small());
            }
        }
        let drift: Vec<[f64; 2]> = self.history.iter().map(|h| [h[0], h[1]]).collect();
        crate::viewer::panels::probes::time_plot(
            ui,
            "mass",
            "mass drift [relative]",
            vec![("mass drift".into(), egui::Color32::LIGHT_BLUE, drift)],
        );
        if !s.obstacles.is_empty() {
            ui.label(if reference.values.is_some() {
                "drag and lift coefficients over time: the Probes and forces panel (3)"
            } else {
                "forces over time: the Probes and forces panel (3)"
            });
        }
    }
}

/// The conversion between lattice and SI units of the scene's `[units]`, with the viscosity
/// and Reynolds number of the relaxation time `tau` in force.
fn units_table(ui: &mut Ui, u: &Units, tau: f32) {
    ui.label(RichText::new("SI units (the scene's [units])").strong());
    egui::Grid::new("si units").num_columns(2).striped(true).show(ui, |ui| {
        let mut row = |k: &str, v: String| {
            ui.label(k);
            ui.label(v);
            ui.end_row();
        };
        for (k, v) in u.rows() {
            row(k, v);
        }
        let nu = (f64::from(tau) - 0.5) / 3.0;
        row("viscosity", format!("{nu:.5} cells²/step = {} m²/s (tau {tau:.4})", si(u.viscosity(nu))));
        let r = u.reference;
        row(
            "Reynolds",
            format!(
                "{:.1} ({} m over {} cells, {} m/s for {} cells/step)",
                u.reynolds(nu),
                si(r.length),
                si(r.cells),
                si(r.velocity),
                si(r.lattice_velocity)
            ),
        );
        row("speed of sound", format!("{} m/s on the lattice (c_s = 1/√3 cells/step)", si(u.sound_speed())));
    });
}

/// The Stats rows of obstacle `k` under its force: C_D and C_L now and their means with the
/// Strouhal number over the second half of the snapshots kept, or what the scene lacks for them.
fn force_rows(history: &ForceHistory, k: usize, f: [f64; 3], reference: &sim_core::scene::ForceReference) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    let Some(now) = reference.coefficients(f) else {
        rows.push(("  C_D, C_L, St", "need a reference length and velocity: fluid.length and fluid.velocity, or [forces]".into()));
        return rows;
    };
    rows.push(("  C_D, C_L", format!("{:.4}, {:.4}", now[0], now[1])));
    let Some(s) = history.summary(k, reference).filter(|s| s.samples >= 2) else {
        return rows;
    };
    if let (Some([cd, cl]), Some(amp)) = (s.coefficients, s.lift_amplitude_coefficient(reference)) {
        rows.push(("  mean C_D, C_L", format!("{cd:.4}, {cl:.4} (swing +-{amp:.4}), steps {} to {}", s.from, s.to)));
    }
    let st = match &s.shedding {
        Ok(sh) => match sh.strouhal {
            Some(v) => format!("{v:.4} (lift period {:.0} steps over {} periods)", sh.period, sh.periods),
            None => format!("lift period {:.0} steps", sh.period),
        },
        Err(why) => why.to_string(),
    };
    rows.push(("  St", st));
    rows
}
