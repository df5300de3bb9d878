//! The Simulation panel: run, step, reset, solver settings, tau and boundary velocities, Reynolds and Mach; the blow-up window.

use crate::viewer::app::ViewerApp;
use crate::viewer::worker::Command;
use egui::{Color32, Ui};
use sim_core::collision::Collision;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::scene::LoadedScene;
use sim_core::schemes::Scheme;

impl ViewerApp {
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

    pub(crate) fn simulation_ui(&mut self, ui: &mut Ui) {
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

    pub(crate) fn blowup_ui(&mut self, ctx: &egui::Context) {
        let Some(b) = self.blowup.clone() else { return };
        egui::Window::new("The simulation blew up").collapsible(false).resizable(false).anchor(egui::Align2::CENTER_TOP, [0.0, 40.0]).show(
            ctx,
            |ui| {
                ui.label(format!("At step {} {}. The run is paused.", b.step, b.why));
                ui.label("Raise tau (viscosity), lower the velocities, or switch to regularized, TRT or Smagorinsky in the scene.");
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
        warnings.push(format!(
            "tau = {tau:.4} is close to 0.5: the BGK collision becomes unstable (raise tau, or use regularized, TRT or Smagorinsky)"
        ));
    }
    if mach_boundary > 0.3 || mach_flow > 0.3 {
        warnings.push(format!("Mach {:.2} > 0.3: compressibility errors grow and the run may blow up", mach_boundary.max(mach_flow)));
    }
    Numbers { viscosity, u_ref, length, reynolds, mach_boundary, mach_flow, warnings }
}
