//! The legend's colour ranges and colour-map textures, shared by the window and offscreen pictures.

use super::colormap::ColorMap;
use super::frames::{Frame, FrameData, RANGE_SAMPLE};
use egui::Color32;
use sim_core::fields::FieldKind;
use sim_core::frame::{FrameLayout, FrameRegion};
use sim_core::units::{si, Units};
use std::time::{Duration, Instant};

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

/// Share of the fluid values an auto colour range leaves out at each end: a handful of extreme
/// cells (the corners of a driven lid, the edge of an obstacle) would otherwise take the whole
/// colour map and hide the flow. The legend still gives the true smallest and largest value.
pub const AUTO_TAIL: f32 = 0.01;

/// The finite values of plane `plane` of a host frame `data` laid out as `layout`, at the fluid
/// cells (`solid` 0) of its region: every one up to [`RANGE_SAMPLE`], an even sample beyond.
#[must_use]
pub fn frame_sample(layout: &FrameLayout, data: &[f32], plane: usize, solid: &[u8]) -> Vec<f32> {
    let n = layout.n;
    let idx = |p: [usize; 3]| p[0] + n[0] * (p[1] + n[1] * p[2]);
    let mut cells: Vec<usize> = Vec::new();
    let mut add_plane = |a: usize, i: usize| {
        let (u, v) = ((a + 1) % 3, (a + 2) % 3);
        for j in 0..n[v] {
            for k in 0..n[u] {
                let mut p = [0; 3];
                (p[a], p[u], p[v]) = (i.min(n[a] - 1), k, j);
                cells.push(idx(p));
            }
        }
    };
    match layout.region {
        FrameRegion::All => {}
        FrameRegion::Planes(k) => (0..3).filter_map(|a| k[a].map(|i| (a, i))).for_each(|(a, i)| add_plane(a, i)),
        FrameRegion::Sampled { stride, planes } => {
            (0..3).filter_map(|a| planes[a].map(|i| (a, i))).for_each(|(a, i)| add_plane(a, i));
            let s = stride.max(1);
            for z in (0..n[2]).step_by(s) {
                for y in (0..n[1]).step_by(s) {
                    for x in (0..n[0]).step_by(s) {
                        cells.push(idx([x, y, z]));
                    }
                }
            }
        }
    }
    let total = if layout.region == FrameRegion::All { n.iter().product() } else { cells.len() };
    let step = total.div_ceil(RANGE_SAMPLE).max(1);
    let cell = |i: usize| if layout.region == FrameRegion::All { i } else { cells[i] };
    (0..total)
        .step_by(step)
        .map(cell)
        .filter(|&c| solid.get(c).is_some_and(|&s| s == 0))
        .map(|c| data[layout.index(plane, c)])
        .filter(|v| v.is_finite())
        .collect()
}

/// The range from the [`AUTO_TAIL`] quantile to the 1 - [`AUTO_TAIL`] quantile of `values`
/// (reordered in place); `None` for no values.
#[must_use]
pub fn robust_range(values: &mut [f32]) -> Option<(f32, f32)> {
    if values.is_empty() {
        return None;
    }
    let last = values.len() - 1;
    let lo_i = ((last as f32) * AUTO_TAIL).round() as usize;
    let hi_i = ((last as f32) * (1.0 - AUTO_TAIL)).round() as usize;
    let (_, &mut hi, _) = values.select_nth_unstable_by(hi_i, f32::total_cmp);
    // The low quantile lies among the values left of the high one.
    let (_, &mut lo, _) = values[..=hi_i].select_nth_unstable_by(lo_i, f32::total_cmp);
    Some((lo, hi))
}

/// The legend's line of a colour range `(lo, hi)` of `field` (lattice units) in SI units:
/// velocities in m/s, density in kg/m³, vorticity in 1/s and Q in 1/s².
#[must_use]
pub fn si_range(field: FieldKind, (lo, hi): (f32, f32), u: &Units) -> String {
    let (scale, unit) = match field {
        FieldKind::Speed | FieldKind::Ux | FieldKind::Uy | FieldKind::Uz => (u.velocity(1.0), "m/s"),
        FieldKind::Density => (u.density(1.0), "kg/m³"),
        FieldKind::Vorticity => (u.rate(1.0), "1/s"),
        FieldKind::Q => (u.rate(1.0) * u.rate(1.0), "1/s²"),
    };
    format!("in SI units {} to {} {unit}", si(f64::from(lo) * scale), si(f64::from(hi) * scale))
}

/// How often the percentile range of a frame in GPU memory is taken at most.
const SHARED_RANGE_EVERY: Duration = Duration::from_millis(500);

/// The percentile range of the shown field, frame after frame: from the frame where it lies in
/// host memory; where it lies in GPU memory, from a sample of the frame read back there (the
/// slice planes it holds, or an even choice of rows: [`Frame::device_sample`]), kept for
/// [`SHARED_RANGE_EVERY`] and never taking more than 2 % of the time.
#[derive(Default)]
pub struct RobustRange {
    /// The last range taken from GPU memory: its field, when and how long it took.
    last: Option<(FieldKind, Instant, Duration, (f32, f32))>,
    /// Reading a sample from the GPU failed once (said then, not again).
    failed: bool,
}

impl RobustRange {
    /// The range of `field` in `frame` at the fluid cells (`solid` 0); `None` without one.
    pub fn of(&mut self, frame: &Frame, field: FieldKind, solid: &[u8]) -> Option<(f32, f32)> {
        let plane = frame.plane(field)?;
        if let FrameData::Host(h) = &frame.data {
            return robust_range(&mut frame_sample(&frame.layout, h.floats(), plane, solid));
        }
        if let Some((_, at, took, r)) = self.last.filter(|r| r.0 == field) {
            if at.elapsed() < SHARED_RANGE_EVERY.max(took * 50) {
                return Some(r);
            }
        }
        let t = Instant::now();
        let mut sample = match frame.device_sample(plane, solid) {
            Ok(s) => s?,
            Err(e) => {
                // The legend keeps min..max.
                if !std::mem::replace(&mut self.failed, true) {
                    tracing::warn!("the colour range's sample could not be read from the GPU: {e}");
                }
                return None;
            }
        };
        let r = robust_range(&mut sample)?;
        self.last = Some((field, Instant::now(), t.elapsed(), r));
        Some(r)
    }
}
