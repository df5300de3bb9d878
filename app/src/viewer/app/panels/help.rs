//! Keys: the keyboard shortcuts, and the help window that lists them with the mouse, units and stability.

use crate::viewer::app::{Tool, ViewerApp};
use egui::{Key, RichText};

impl ViewerApp {
    pub(crate) fn shortcuts(&mut self, ctx: &egui::Context) {
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let (space, s, r, h, f12, esc, iso) = ctx.input(|i| {
            (
                i.key_pressed(Key::Space),
                i.key_pressed(Key::S),
                i.key_pressed(Key::R),
                i.key_pressed(Key::H),
                i.key_pressed(Key::F12),
                i.key_pressed(Key::Escape),
                i.key_pressed(Key::I),
            )
        });
        if iso {
            self.set_iso(!self.view.iso);
        }
        let (undo, n, d, e, smaller, larger) = ctx.input(|i| {
            (
                i.modifiers.command && i.key_pressed(Key::Z),
                i.key_pressed(Key::N),
                i.key_pressed(Key::D),
                i.key_pressed(Key::E),
                i.key_pressed(Key::OpenBracket),
                i.key_pressed(Key::CloseBracket),
            )
        });
        if undo {
            self.undo_stroke();
        }
        let (p, g, t, l) = ctx.input(|i| (i.key_pressed(Key::P), i.key_pressed(Key::G), i.key_pressed(Key::T), i.key_pressed(Key::L)));
        if t {
            self.set_tracers(!self.view.tracers.on);
        }
        if l {
            self.set_streamlines(!self.view.streamlines.on);
        }
        for (pressed, t) in [(n, Tool::Navigate), (d, Tool::Draw), (e, Tool::Erase), (p, Tool::Probe), (g, Tool::Seed)] {
            if pressed {
                self.set_tool(t);
            }
        }
        if smaller {
            self.edit.brush = (self.edit.brush / 1.25).max(0.5);
        }
        if larger {
            self.edit.brush = (self.edit.brush * 1.25).min(100.0);
        }
        if space {
            self.set_running(!self.running);
        }
        if s {
            self.single_step();
        }
        if r {
            self.reset();
        }
        if h {
            self.show_help = !self.show_help;
        }
        if esc {
            self.show_help = false;
        }
        if f12 {
            self.screenshot();
        }
    }

    pub(crate) fn help_ui(&mut self, ctx: &egui::Context) {
        let mut open = self.show_help;
        egui::Window::new("Help").open(&mut open).collapsible(false).resizable(false).anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0]).show(
            ctx,
            |ui| {
                egui::Grid::new("keys").num_columns(2).show(ui, |ui| {
                    for (k, v) in [
                        ("space", "run / pause"),
                        ("s", "one batch of steps (steps per frame)"),
                        ("r", "reset to step 0 (parameters kept)"),
                        ("h", "this help"),
                        ("b", "show / hide the side bar of panels"),
                        ("o", "presets: every shipped scene with a picture, what it shows and what to try"),
                        ("k", "streaming schemes: memory, traffic and measured MLUPS of each, side by side (m there: measure)"),
                        ("1 … 8", "unfold / fold a panel: Simulation, Visualization, Probes and forces, Adaptive blocks, Compression, Stats, Scene, Export"),
                        ("f / c", "next field / next colour map"),
                        ("tab", "move between the controls of the panels (enter / space to use one)"),
                        ("i", "isosurface on / off (3D)"),
                        ("t", "tracers on / off: particles carried by the flow (Visualization panel: how many, where released)"),
                        ("l", "streamlines on / off: lines along the flow from a line or plane of seeds"),
                        ("F12", "screenshot into screenshots/"),
                        ("F9", "start / stop recording the view (PNG frames, a video with ffmpeg; Export panel)"),
                        ("drag", "3D: orbit · 2D: pan"),
                        ("right/middle drag", "pan"),
                        ("scroll", "zoom"),
                        ("double-click", "reset the camera"),
                        ("n / p / g / d / e", "tool: navigate / probe (a click places one) / seed (a click releases tracers there and centres the streamlines) / draw obstacles / erase obstacles"),
                        ("left drag (draw, erase)", "paint on the 2D view, or on the chosen slice in 3D"),
                        ("[ / ]", "smaller / larger brush"),
                        ("ctrl+z", "undo the last stroke or STL load"),
                    ] {
                        ui.label(RichText::new(k).monospace().strong());
                        ui.label(v);
                        ui.end_row();
                    }
                });
                ui.separator();
                ui.label("Units are lattice units: lengths in cells, time in steps, density around 1.");
                ui.label("Keep tau above ~0.51 and Mach below 0.3 (velocities below ~0.17) for a stable, accurate run.");
            },
        );
        self.show_help = open;
    }
}
