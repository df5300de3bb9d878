//! The Stats panel: speed, frame times, memory, mass drift and forces, with their plots.

use crate::viewer::app::ViewerApp;
use crate::viewer::gpu_timer::{self, GpuTiming};
use egui::Ui;

impl ViewerApp {
    pub(crate) fn stats_ui(&mut self, ui: &mut Ui) {
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
}
