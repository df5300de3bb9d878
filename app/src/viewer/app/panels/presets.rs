//! The presets window: a card per shipped scene with a picture the app made of it
//! (`scripts/make-thumbnails.sh`), what the scene shows and what to try, and a button that
//! opens it. The scenes and their pictures are built into the binary, so the window works from
//! any folder.

use crate::viewer::app::ViewerApp;
use egui::{RichText, Ui};
use std::path::{Path, PathBuf};

/// A shipped scene: its file stem, its TOML and its picture (PNG).
pub struct Preset {
    /// File stem in `scenes/`.
    pub stem: &'static str,
    /// The scene file.
    pub toml: &'static str,
    /// Its picture, 320 x 180 pixels.
    pub picture: &'static [u8],
}

macro_rules! preset {
    ($stem:literal) => {
        Preset {
            stem: $stem,
            toml: include_str!(concat!("../../../../../scenes/", $stem, ".toml")),
            picture: include_bytes!(concat!("../../../../../scenes/thumbnails/", $stem, ".png")),
        }
    };
}

/// Every shipped scene, in the order of the cards: first steps first, then validation cases,
/// then 3D and the advanced solvers.
pub const PRESETS: [Preset; 14] = [
    preset!("cylinder_2d"),
    preset!("lid_driven_cavity_2d"),
    preset!("poiseuille_2d"),
    preset!("taylor_green_2d"),
    preset!("square_cylinder_2d"),
    preset!("schaefer_turek_2d"),
    preset!("lid_driven_cavity_re10000_2d"),
    preset!("sphere_3d"),
    preset!("lid_driven_cavity_3d"),
    preset!("taylor_green_3d"),
    preset!("sphere_re100_3d"),
    preset!("lid_driven_cavity_amr_2d"),
    preset!("square_cylinder_amr_2d"),
    preset!("square_cylinder_open_amr_2d"),
];

/// What a card says: the scene's name, what it shows (`description`) and what to try (`try`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CardText {
    /// The scene's name.
    pub name: String,
    /// What it shows.
    pub shows: String,
    /// What to try.
    pub try_this: String,
}

impl Preset {
    /// The card's text, from the scene's top-level keys.
    #[must_use]
    pub fn card(&self) -> CardText {
        let Ok(t) = self.toml.parse::<toml::Table>() else { return CardText { name: self.stem.into(), ..CardText::default() } };
        let s = |k: &str| t.get(k).and_then(toml::Value::as_str).unwrap_or_default().to_string();
        CardText { name: s("name"), shows: s("description"), try_this: s("try") }
    }
}

impl ViewerApp {
    /// Open preset `k`: its file in `scenes/` where the app runs from the repository (so that
    /// edits to it count), else the copy built into the binary.
    pub fn open_preset(&mut self, k: usize) {
        let Some(p) = PRESETS.get(k) else { return };
        let file = Path::new("scenes").join(format!("{}.toml", p.stem));
        if file.is_file() {
            self.open_scene(Some(&file));
        } else {
            let origin = format!("scenes/{}.toml (built in)", p.stem);
            self.open_scene_text(p.toml, &origin, PathBuf::from("scenes"));
        }
        self.show_presets = false;
    }

    /// The presets window, when open (the toolbar's Presets button, or o).
    pub(crate) fn presets_ui(&mut self, ctx: &egui::Context) {
        if !self.show_presets {
            return;
        }
        let mut open = true;
        let width = (ctx.content_rect().width() - 80.0).clamp(300.0, 1100.0);
        egui::Window::new("Presets")
            .open(&mut open)
            .collapsible(false)
            .default_width(width)
            .default_height(ctx.content_rect().height() * 0.8)
            .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
            .show(ctx, |ui| {
                ui.label("Every scene that comes with Esoflow. Open one, read its card, then try what it suggests.");
                ui.separator();
                egui::ScrollArea::vertical().show(ui, |ui| self.cards_ui(ui, width));
            });
        self.show_presets &= open;
    }

    fn cards_ui(&mut self, ui: &mut Ui, width: f32) {
        let card_w = 250.0;
        let columns = ((width / (card_w + 16.0)).floor() as usize).max(1);
        let mut chosen = None;
        egui::Grid::new("preset cards").num_columns(columns).spacing([12.0, 12.0]).show(ui, |ui| {
            for (k, p) in PRESETS.iter().enumerate() {
                let text = p.card();
                ui.vertical(|ui| {
                    ui.set_width(card_w);
                    if let Some(tex) = self.preset_texture(ui.ctx(), k) {
                        let r = ui.add(egui::Image::new((tex, egui::vec2(card_w, card_w * 9.0 / 16.0))).sense(egui::Sense::click()));
                        if r.on_hover_text("open this scene").clicked() {
                            chosen = Some(k);
                        }
                    }
                    ui.label(RichText::new(&text.name).strong());
                    ui.label(RichText::new(&text.shows).small());
                    if !text.try_this.is_empty() {
                        ui.label(RichText::new(format!("Try: {}", text.try_this)).small().italics());
                    }
                    if ui.button(format!("Open {}", p.stem)).clicked() {
                        chosen = Some(k);
                    }
                });
                if (k + 1) % columns == 0 {
                    ui.end_row();
                }
            }
        });
        if let Some(k) = chosen {
            self.open_preset(k);
        }
    }

    /// The picture of preset `k` as a texture (decoded once).
    fn preset_texture(&mut self, ctx: &egui::Context, k: usize) -> Option<egui::TextureId> {
        if self.preset_tex.len() < PRESETS.len() {
            self.preset_tex = (0..PRESETS.len()).map(|_| None).collect();
        }
        if self.preset_tex[k].is_none() {
            let img = image::load_from_memory(PRESETS[k].picture).ok()?.to_rgba8();
            let size = [img.width() as usize, img.height() as usize];
            let color = egui::ColorImage::from_rgba_unmultiplied(size, img.as_raw());
            self.preset_tex[k] = Some(ctx.load_texture(format!("preset {}", PRESETS[k].stem), color, egui::TextureOptions::LINEAR));
        }
        self.preset_tex[k].as_ref().map(egui::TextureHandle::id)
    }
}
