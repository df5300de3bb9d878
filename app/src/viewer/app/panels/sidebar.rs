//! The frame around the view: the toolbar along the top (run, pause, step, reset, the field and
//! its colour map) and the side bar of panels, which takes at most a quarter of the window by
//! default, can be resized and hidden, and opens with only Simulation unfolded.

use crate::viewer::app::{Tool, ViewerApp};
use crate::viewer::colormap::ColorMap;
use egui::{Key, RichText, Ui};
use sim_core::fields::FieldKind;

/// The side bar's panels, top to bottom; keys 1 to 8 unfold and fold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Run control, solver settings, tau and boundary velocities.
    Simulation,
    /// Range, slices, isosurfaces, overlays.
    Visualization,
    /// Probes and the forces on obstacles, over time.
    Probes,
    /// The adaptive blocks' settings (adaptive runs only).
    Adaptive,
    /// Compressed subgrids (says why not where a run cannot compress).
    Compression,
    /// Numbers of the run: speed, memory, forces.
    Stats,
    /// Scenes, presets, drawing tools, STL obstacles.
    Scene,
    /// Fields, checkpoints, screenshots.
    Export,
}

impl Section {
    /// Every section, in the side bar's order.
    pub const ALL: [Section; 8] = [
        Section::Simulation,
        Section::Visualization,
        Section::Probes,
        Section::Adaptive,
        Section::Compression,
        Section::Stats,
        Section::Scene,
        Section::Export,
    ];

    /// The heading.
    #[must_use]
    pub fn title(self) -> &'static str {
        match self {
            Section::Simulation => "Simulation",
            Section::Visualization => "Visualization",
            Section::Probes => "Probes and forces",
            Section::Adaptive => "Adaptive blocks",
            Section::Compression => "Compression",
            Section::Stats => "Stats",
            Section::Scene => "Scene",
            Section::Export => "Export",
        }
    }

    /// The key that unfolds and folds it (1 for the first).
    #[must_use]
    pub fn key(self) -> Key {
        const KEYS: [Key; 8] = [Key::Num1, Key::Num2, Key::Num3, Key::Num4, Key::Num5, Key::Num6, Key::Num7, Key::Num8];
        KEYS[Section::ALL.iter().position(|&s| s == self).unwrap_or(0)]
    }

    fn index(self) -> usize {
        Section::ALL.iter().position(|&s| s == self).unwrap_or(0)
    }
}

/// Widest the side bar starts (points), and its share of the window at most.
const SIDEBAR_WIDTH: f32 = 330.0;
const SIDEBAR_SHARE: f32 = 0.25;

/// Whether the side bar is shown and which of its sections are unfolded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideBar {
    /// Shown (b or the toolbar's Panels button hides and shows it).
    pub shown: bool,
    /// Unfolded sections, by [`Section::ALL`] index.
    pub open: [bool; 8],
}

impl Default for SideBar {
    fn default() -> SideBar {
        SideBar { shown: true, open: Section::ALL.map(|s| s == Section::Simulation) }
    }
}

impl SideBar {
    /// Whether `s` is unfolded.
    #[must_use]
    pub fn is_open(&self, s: Section) -> bool {
        self.open[s.index()]
    }

    /// Unfold or fold `s` (unfolding shows the side bar).
    pub fn set_open(&mut self, s: Section, open: bool) {
        self.open[s.index()] = open;
        self.shown |= open;
    }
}

impl ViewerApp {
    /// Whether section `s` applies to this run (the adaptive blocks' panel only to adaptive runs).
    fn applies(&self, s: Section) -> bool {
        s != Section::Adaptive || self.amr_info().is_some()
    }

    /// Keys of the frame: b shows and hides the side bar, 1 to 8 unfold and fold a section,
    /// f and c step through the fields and colour maps.
    pub(crate) fn frame_keys(&mut self, ctx: &egui::Context) {
        if ctx.egui_wants_keyboard_input() {
            return;
        }
        let (b, f, c, o) = ctx.input(|i| (i.key_pressed(Key::B), i.key_pressed(Key::F), i.key_pressed(Key::C), i.key_pressed(Key::O)));
        if o {
            self.show_presets = !self.show_presets;
        }
        if ctx.input(|i| i.key_pressed(Key::K)) {
            self.toggle_schemes();
        }
        if ctx.input(|i| i.key_pressed(Key::F9)) {
            self.toggle_recording();
        }
        if b {
            self.sidebar.shown = !self.sidebar.shown;
        }
        for s in Section::ALL {
            if ctx.input(|i| i.key_pressed(s.key())) && self.applies(s) {
                let open = !(self.sidebar.shown && self.sidebar.is_open(s));
                self.sidebar.set_open(s, open);
            }
        }
        if f {
            let k = FieldKind::ALL.iter().position(|&k| k == self.view.field).unwrap_or(0);
            self.set_field(FieldKind::ALL[(k + 1) % FieldKind::ALL.len()]);
        }
        if c {
            let k = ColorMap::ALL.iter().position(|&m| m == self.view.cmap).unwrap_or(0);
            self.view.cmap = ColorMap::ALL[(k + 1) % ColorMap::ALL.len()];
        }
    }

    /// The toolbar: the side bar's switch, run / pause, step, reset, the field and colour map,
    /// the mouse's tool.
    pub(crate) fn toolbar_ui(&mut self, ui: &mut Ui) {
        egui::Panel::top("toolbar").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                if ui.selectable_label(self.sidebar.shown, "Panels").on_hover_text("b: show or hide the side bar").clicked() {
                    self.sidebar.shown = !self.sidebar.shown;
                }
                ui.separator();
                let label = if self.running { "Pause" } else { "Run" };
                if ui.button(label).on_hover_text("space").clicked() {
                    self.set_running(!self.running);
                }
                if ui.button("Step").on_hover_text("s: one batch of steps, paused").clicked() {
                    self.single_step();
                }
                if ui.button("Reset").on_hover_text("r: back to step 0, parameters kept").clicked() {
                    self.reset();
                }
                ui.separator();
                let label = ui.label("field");
                let mut f = self.view.field;
                egui::ComboBox::from_id_salt("field")
                    .selected_text(f.name())
                    .show_ui(ui, |ui| {
                        for k in FieldKind::ALL {
                            ui.selectable_value(&mut f, k, k.name());
                        }
                    })
                    .response
                    .labelled_by(label.id)
                    .on_hover_text("f: next field");
                self.set_field(f);
                let label = ui.label("colour map");
                egui::ComboBox::from_id_salt("cmap")
                    .selected_text(self.view.cmap.name())
                    .show_ui(ui, |ui| {
                        for m in ColorMap::ALL {
                            ui.selectable_value(&mut self.view.cmap, m, m.name());
                        }
                    })
                    .response
                    .labelled_by(label.id)
                    .on_hover_text("c: next colour map");
                ui.separator();
                let mut t = self.edit.tool;
                ui.selectable_value(&mut t, Tool::Navigate, "Navigate").on_hover_text("n: the mouse moves the view");
                ui.selectable_value(&mut t, Tool::Probe, "Probe")
                    .on_hover_text("p: a click on the view places a probe (plots in Probes and forces)");
                ui.selectable_value(&mut t, Tool::Seed, "Seed")
                    .on_hover_text("g: a click on the view releases tracers there and centres the streamlines' seeds");
                ui.selectable_value(&mut t, Tool::Draw, "Draw").on_hover_text("d: left-drag paints solid cells (obstacle \"drawn\")");
                ui.selectable_value(&mut t, Tool::Erase, "Erase").on_hover_text("e: left-drag turns solid cells into fluid");
                if t != self.edit.tool {
                    self.set_tool(t);
                }
                let mut rec = self.recording.is_some();
                let label = match &self.recording {
                    Some(r) => format!("REC {}", r.frames),
                    None => "Record".to_string(),
                };
                if ui
                    .toggle_value(&mut rec, label)
                    .on_hover_text("F9: record the view as PNG frames (and a video with ffmpeg); settings in Export")
                    .changed()
                {
                    self.toggle_recording();
                }
                ui.separator();
                if ui.button("Presets").on_hover_text("o: every shipped scene, with a picture, what it shows and what to try").clicked() {
                    self.show_presets = !self.show_presets;
                }
                if ui.button("Schemes").on_hover_text("k: the streaming schemes side by side: memory, traffic, measured MLUPS").clicked() {
                    self.toggle_schemes();
                }
                if ui.button("? Help").on_hover_text("h: every key and mouse action").clicked() {
                    self.show_help = !self.show_help;
                }
            });
        });
    }

    /// The side bar, when shown: at most a quarter of the window wide at first, resizable.
    pub(crate) fn sidebar_ui(&mut self, ui: &mut Ui) {
        if !self.sidebar.shown {
            return;
        }
        let width = ui.ctx().content_rect().width();
        egui::Panel::left("panels")
            .resizable(true)
            .default_size(SIDEBAR_WIDTH.min(width * SIDEBAR_SHARE))
            .size_range(180.0..=(width * 0.6).max(180.0))
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    ui.label(RichText::new(&self.scene.scene.name).strong());
                    for s in Section::ALL {
                        if self.applies(s) {
                            self.section_ui(ui, s);
                        }
                    }
                });
            });
    }

    fn section_ui(&mut self, ui: &mut Ui, s: Section) {
        let open = self.sidebar.is_open(s);
        let r = egui::CollapsingHeader::new(s.title()).open(Some(open)).show(ui, |ui| match s {
            Section::Simulation => self.simulation_ui(ui),
            Section::Visualization => self.visualization_ui(ui),
            Section::Probes => self.probes_ui(ui),
            Section::Adaptive => self.amr_ui(ui),
            Section::Compression => self.compression_ui(ui),
            Section::Stats => self.stats_ui(ui),
            Section::Scene => self.scene_ui(ui),
            Section::Export => self.export_ui(ui),
        });
        if r.header_response.clicked() {
            self.sidebar.set_open(s, !open);
        }
    }
}
