//! Boxes outlined in the 3D view: the solver's bricks, compressed subgrids by ratio, adaptive blocks by level.

use crate::viewer::colormap::ColorMap;
use sim_core::bricks::{BrickClass, BrickMap};
use sim_core::SubgridStat;

/// Colour of the brick classes in the overlay (sRGB bytes), indexed by `BrickClass as usize`.
pub const BRICK_COLORS: [[u8; 3]; 3] = [[120, 120, 240], [60, 200, 90], [255, 140, 30]];
/// Most boxes [`FieldRenderer::set_outlines`] keeps (32 bytes each: 8 MiB of instances).
pub const MAX_OUTLINES: usize = 1 << 18;
/// Most brick outlines the viewer draws: a 512^3 channel has 16k boundary bricks along its four
/// walls; far more than that is a mesh of lines, not a picture.
pub const MAX_BRICK_OUTLINES: usize = 1 << 14;

/// An axis-aligned box drawn as its 12 edges in the 3D view (see [`FieldRenderer::set_outlines`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutlineBox {
    /// Lower corner in cell units (world space: cell (x, y, z) fills [x, x+1] x ...).
    pub min: [f32; 3],
    /// Upper corner in cell units.
    pub max: [f32; 3],
    /// Colour: sRGB bytes and alpha (alpha below 255 blends over what is behind).
    pub color: [u8; 4],
}

/// The outlines of a brick map's bricks, as [`brick_outlines`] makes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrickOutlines {
    /// The boxes to draw.
    pub boxes: Vec<OutlineBox>,
    /// Bricks that would be outlined without the cap (boundary and all-solid ones).
    pub total: usize,
}

impl BrickOutlines {
    /// Whether bricks were left out to stay under the cap.
    #[must_use]
    pub fn capped(&self) -> bool {
        self.boxes.len() < self.total
    }
}

/// Outlines of the boundary bricks and the all-solid bricks of `map` (a domain of `size` cells),
/// coloured as in the overlay ([`BRICK_COLORS`]). Plain fluid bricks are left to the slices'
/// tint: they fill most of a large domain, and their outlines would hide everything else.
/// At most `max` boxes: boundary bricks first, then solid ones in the room left; a class that
/// does not fit is thinned evenly over the domain (every k-th brick), not cut at one end.
#[must_use]
pub fn brick_outlines(map: &BrickMap, size: [usize; 3], max: usize) -> BrickOutlines {
    let of = |c: BrickClass| -> Vec<usize> { (0..map.class.len()).filter(|&i| map.class[i] == c).collect() };
    let (boundary, solid) = (of(BrickClass::Boundary), of(BrickClass::Solid));
    let total = boundary.len() + solid.len();
    let thin = |ids: &[usize], room: usize| -> Vec<usize> {
        if ids.len() <= room {
            ids.to_vec()
        } else {
            (0..room).map(|j| ids[j * ids.len() / room]).collect()
        }
    };
    let keep_b = thin(&boundary, max);
    let keep_s = thin(&solid, max - keep_b.len());
    let boxes = keep_b
        .iter()
        .chain(&keep_s)
        .map(|&id| {
            let c = map.coords(id);
            let k = BRICK_COLORS[map.class[id] as usize];
            let lo = [0, 1, 2].map(|a| (c[a] * map.brick[a]).min(size[a]));
            let hi = [0, 1, 2].map(|a| ((c[a] + 1) * map.brick[a]).min(size[a]));
            OutlineBox { min: lo.map(|v| v as f32), max: hi.map(|v| v as f32), color: [k[0], k[1], k[2], 255] }
        })
        .collect();
    BrickOutlines { boxes, total }
}

/// The colour map of the subgrid outlines (compression ratio, low to high).
pub const SUBGRID_CMAP: ColorMap = ColorMap::Turbo;

/// How far each subgrid outline sits inside its subgrid (cells), so that two neighbours'
/// edges lie side by side instead of on top of each other.
pub const SUBGRID_INSET: f32 = 0.2;

/// The colour range of the subgrid outlines: the smallest and largest ratio now (never empty).
#[must_use]
pub fn ratio_range(per: &[SubgridStat]) -> (f32, f32) {
    let (lo, hi) = per.iter().fold((f32::INFINITY, 0.0f32), |(lo, hi), s| (lo.min(s.ratio as f32), hi.max(s.ratio as f32)));
    if per.is_empty() {
        (1.0, 2.0)
    } else if hi > lo {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 0.05).max(1e-3);
        (lo - pad, hi + pad)
    }
}

/// Outlines of a compressed run's subgrids, each coloured by its compression ratio on
/// [`SUBGRID_CMAP`] over `range`, inset by [`SUBGRID_INSET`].
#[must_use]
pub fn subgrid_outlines(per: &[SubgridStat], range: (f32, f32)) -> Vec<OutlineBox> {
    per.iter()
        .map(|s| {
            let min = [0, 1, 2].map(|a| s.origin[a] as f32 + SUBGRID_INSET);
            let max = [0, 1, 2].map(|a| (s.origin[a] + s.size[a]) as f32 - SUBGRID_INSET);
            OutlineBox { min, max, color: SUBGRID_CMAP.color_of(s.ratio as f32, range.0, range.1) }
        })
        .collect()
}

/// The colour map of the block outlines of an adaptive run (level, coarse to fine).
pub const LEVEL_CMAP: ColorMap = ColorMap::Turbo;

/// The colour of level `l` of a forest whose finest level is `finest`: evenly spaced on
/// [`LEVEL_CMAP`], away from its dark ends.
#[must_use]
pub fn level_color(l: u8, finest: u8) -> [u8; 4] {
    LEVEL_CMAP.color_of(f32::from(l), -0.5, f32::from(finest.max(1)) + 0.5)
}

/// Outlines of an adaptive run's leaf blocks (cells of the finest grid), coloured by level with
/// [`level_color`], coarse levels first so that a finer block's edge is drawn over a coarser
/// neighbour's. In 3D they sit [`SUBGRID_INSET`] inside their block (neighbours' edges side by
/// side); in 2D they lie on the block edges, from z = 0 to 1.
#[must_use]
pub fn block_outlines(info: &sim_core::amr::AmrInfo, two_d: bool) -> Vec<OutlineBox> {
    let inset = if two_d { 0.0 } else { SUBGRID_INSET };
    let mut boxes: Vec<(u8, OutlineBox)> = info
        .boxes
        .iter()
        .map(|&(lo, edge, l)| {
            let mut min = [0, 1, 2].map(|a| lo[a] as f32 + inset);
            let mut max = [0, 1, 2].map(|a| (lo[a] + edge) as f32 - inset);
            if two_d {
                (min[2], max[2]) = (0.0, 1.0);
            }
            (l, OutlineBox { min, max, color: level_color(l, info.max_level) })
        })
        .collect();
    boxes.sort_by_key(|(l, _)| *l);
    boxes.into_iter().map(|(_, b)| b).collect()
}
