//! The legend's colour ranges and colour-map textures, shared by the window and offscreen pictures.

use super::colormap::ColorMap;
use egui::Color32;
use sim_core::fields::FieldKind;

/// The usual colour map of a field: diverging for signed fields.
#[must_use]
pub fn default_cmap(f: FieldKind) -> ColorMap {
    match f {
        FieldKind::Ux | FieldKind::Uy | FieldKind::Uz | FieldKind::Q => ColorMap::Diverging,
        FieldKind::Speed | FieldKind::Density | FieldKind::Vorticity => ColorMap::Viridis,
    }
}

/// The colour range for data with `min_max`: symmetric about 0 for the diverging map, never empty.
#[must_use]
pub fn auto_range(min_max: (f32, f32), cmap: ColorMap) -> (f32, f32) {
    let (lo, hi) = min_max;
    let (lo, hi) = if cmap == ColorMap::Diverging {
        let m = lo.abs().max(hi.abs());
        (-m, m)
    } else {
        (lo, hi)
    };
    if hi > lo {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 1e-3).max(1e-6);
        (lo - pad, hi + pad)
    }
}

/// An egui texture of a colour map (one row of the LUT).
pub fn legend_texture(ctx: &egui::Context, cmap: ColorMap) -> egui::TextureHandle {
    let px: Vec<Color32> = (0..super::colormap::LUT_SIZE)
        .map(|i| {
            let c = cmap.lut_entry(i);
            Color32::from_rgb(c[0], c[1], c[2])
        })
        .collect();
    let img = egui::ColorImage::new([super::colormap::LUT_SIZE, 1], px);
    ctx.load_texture(format!("cmap-{}", cmap.name()), img, egui::TextureOptions::NEAREST)
}
