//! The viewer: a window (winit) with the field drawn by wgpu and panels in egui, and the same
//! view rendered offscreen for `esoflow run --screenshot`.
//!
//! - `worker`: the solver thread (owns the solver; hands over field snapshots).
//! - `app`: the viewer's state and panels (egui only; testable headless).
//! - `render`, `camera`, `colormap`: the field renderer (wgpu, no egui).
//! - `window`: the winit shell (surface, event loop, screenshots).
//! - `headless`: offscreen GPU setup and screenshots without a window.

pub mod app;
pub mod camera;
pub mod colormap;
pub mod headless;
pub mod render;
pub mod window;
pub mod worker;

#[cfg(test)]
mod tests;

use colormap::ColorMap;
use egui::{Color32, Rect, Ui};
use sim_core::fields::FieldKind;
use std::path::PathBuf;

/// `esoflow view`: open a scene in the window.
#[derive(clap::Args, Debug, Clone)]
pub struct ViewArgs {
    /// Scene file (TOML). Default: the built-in cylinder_2d scene.
    pub scene: Option<PathBuf>,
    /// Solver backend.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: crate::BackendChoice,
    /// Override a scene key, e.g. --set fluid.reynolds=100.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Start paused.
    #[arg(long)]
    pub paused: bool,
    /// Close the window after this many frames (with --screenshot: after saving it).
    #[arg(long, value_name = "N")]
    pub frames: Option<u64>,
    /// Save a screenshot of the window to FILE (after --frames N frames, default 60) and exit.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<PathBuf>,
    /// Initial view, as for `run --view`: field=speed,cmap=turbo,range=0:0.1,slices=10:20:5.
    #[arg(long, value_name = "SPEC")]
    pub view: Option<String>,
    /// Steps per frame (the solver thread's batch between two pictures).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub steps_per_frame: u64,
    /// No window: measure the viewer's pipeline offscreen for SECONDS: the solver alone, then the
    /// solver thread running while the main thread uploads and draws every new field (FPS, MLUPS).
    #[arg(long, value_name = "SECONDS")]
    pub bench: Option<f64>,
}

/// Parse a field name.
#[must_use]
pub fn field_from_name(s: &str) -> Option<FieldKind> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "speed" | "|u|" | "u" | "velocity" => FieldKind::Speed,
        "ux" => FieldKind::Ux,
        "uy" => FieldKind::Uy,
        "uz" => FieldKind::Uz,
        "rho" | "density" | "pressure" => FieldKind::Density,
        "vorticity" | "|vorticity|" | "curl" => FieldKind::Vorticity,
        "q" => FieldKind::Q,
        _ => return None,
    })
}

/// Long name of a field with its units (lattice units).
#[must_use]
pub fn field_units(f: FieldKind) -> &'static str {
    match f {
        FieldKind::Speed => "velocity magnitude |u| [cells/step]",
        FieldKind::Ux => "x velocity ux [cells/step]",
        FieldKind::Uy => "y velocity uy [cells/step]",
        FieldKind::Uz => "z velocity uz [cells/step]",
        FieldKind::Density => "density rho [lattice units, rest = 1]",
        FieldKind::Vorticity => "vorticity |curl u| [1/step]",
        FieldKind::Q => "Q criterion [1/step²]",
    }
}

/// A view given on the command line: `field=speed,cmap=turbo,range=0:0.1,slices=10:20:5,size=1200x400`.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewSpec {
    /// Field.
    pub field: FieldKind,
    /// Colour map (default: the field's usual one).
    pub cmap: Option<ColorMap>,
    /// Fixed range (default: auto).
    pub range: Option<(f32, f32)>,
    /// Slice indices x:y:z (3D; default: the middle).
    pub slices: Option<[usize; 3]>,
    /// Image size in pixels (default: fit the domain, about 1200 wide).
    pub size: Option<[u32; 2]>,
}

impl Default for ViewSpec {
    fn default() -> ViewSpec {
        ViewSpec { field: FieldKind::Speed, cmap: None, range: None, slices: None, size: None }
    }
}

impl ViewSpec {
    /// Parse `key=value` pairs separated by commas.
    ///
    /// # Errors
    /// An unknown key or a bad value, with the accepted forms.
    pub fn parse(s: &str) -> anyhow::Result<ViewSpec> {
        let mut v = ViewSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, val)) = part.split_once('=') else {
                anyhow::bail!("--view {part}: expected KEY=VALUE (field, cmap, range, slices, size)");
            };
            let nums = |sep: char| -> anyhow::Result<Vec<f64>> {
                val.split(sep).map(|x| x.trim().parse::<f64>().map_err(|e| anyhow::anyhow!("--view {part}: {e}"))).collect()
            };
            match k.trim() {
                "field" => {
                    v.field = field_from_name(val)
                        .ok_or_else(|| anyhow::anyhow!("--view field={val}: expected speed, ux, uy, uz, rho, vorticity or q"))?;
                }
                "cmap" | "colormap" => {
                    v.cmap = Some(
                        ColorMap::from_name(val)
                            .ok_or_else(|| anyhow::anyhow!("--view cmap={val}: expected viridis, turbo or diverging"))?,
                    );
                }
                "range" => {
                    let r = nums(':')?;
                    if r.len() != 2 || !(r[1] > r[0]) {
                        anyhow::bail!("--view range={val}: expected MIN:MAX with MAX > MIN, e.g. range=0:0.12");
                    }
                    v.range = Some((r[0] as f32, r[1] as f32));
                }
                "slices" => {
                    let r = nums(':')?;
                    if r.len() != 3 || r.iter().any(|&x| x < 0.0) {
                        anyhow::bail!("--view slices={val}: expected X:Y:Z cell indices, e.g. slices=32:16:16");
                    }
                    v.slices = Some([r[0] as usize, r[1] as usize, r[2] as usize]);
                }
                "size" => {
                    let r = nums('x')?;
                    if r.len() != 2 || r.iter().any(|&x| !(1.0..=8192.0).contains(&x)) {
                        anyhow::bail!("--view size={val}: expected WIDTHxHEIGHT in pixels, e.g. size=1200x400");
                    }
                    v.size = Some([r[0] as u32, r[1] as u32]);
                }
                other => anyhow::bail!("--view {other}: unknown key (field, cmap, range, slices, size)"),
            }
        }
        Ok(v)
    }
}

/// What the legend shows.
#[derive(Clone, Debug, PartialEq)]
pub struct LegendInfo {
    /// Field.
    pub field: FieldKind,
    /// Colour map.
    pub cmap: ColorMap,
    /// Range.
    pub range: (f32, f32),
    /// Auto range (from the data) or fixed.
    pub auto: bool,
}

/// Where the legend's colour bar is drawn inside a view `rect` (points).
#[must_use]
pub fn legend_bar_rect(rect: Rect) -> Rect {
    let w = 256.0f32.min(rect.width() - 40.0).max(40.0);
    Rect::from_min_size(egui::pos2(rect.right() - 18.0 - w, rect.bottom() - 36.0 - 14.0), egui::vec2(w, 14.0))
}

/// Draw the legend (field name, units, colour bar, range) in the bottom-right of `rect`.
pub fn legend_ui(ui: &Ui, rect: Rect, l: &LegendInfo, tex: egui::TextureId) {
    let bar = legend_bar_rect(rect);
    let painter = ui.painter();
    let font = egui::FontId::proportional(13.0);
    let title = format!("{}  ({})", field_units(l.field), if l.auto { "auto range" } else { "fixed range" });
    let galley = painter.layout_no_wrap(title, font.clone(), Color32::from_gray(235));
    let bg = Rect::from_min_max(
        egui::pos2(bar.left().min(bar.right() - galley.size().x) - 8.0, bar.top() - galley.size().y - 12.0),
        egui::pos2(bar.right() + 8.0, bar.bottom() + 24.0),
    );
    painter.rect_filled(bg, 4.0, Color32::from_black_alpha(190));
    painter.galley(egui::pos2(bg.left() + 8.0, bar.top() - galley.size().y - 6.0), galley, Color32::from_gray(235));
    painter.image(tex, bar, Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)), Color32::WHITE);
    let (lo, hi) = l.range;
    for (i, v) in [lo, 0.5 * (lo + hi), hi].into_iter().enumerate() {
        let x = bar.left() + bar.width() * i as f32 * 0.5;
        painter.line_segment([egui::pos2(x, bar.bottom()), egui::pos2(x, bar.bottom() + 4.0)], (1.0, Color32::from_gray(235)));
        let align = [egui::Align2::LEFT_TOP, egui::Align2::CENTER_TOP, egui::Align2::RIGHT_TOP][i];
        painter.text(egui::pos2(x, bar.bottom() + 5.0), align, fmt_value(v), font.clone(), Color32::from_gray(235));
    }
}

/// A number for the legend: short, with an exponent when it is very small or large.
#[must_use]
pub fn fmt_value(v: f32) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e4).contains(&a) {
        format!("{v:.2e}")
    } else {
        format!("{v:.4}")
    }
}
