//! Colour maps. One source of truth: the renderer uploads [`lut`] as a texture and the legend
//! draws the same table, so the colours on the field and in the legend cannot disagree.

/// Entries per colour map in the lookup table.
pub const LUT_SIZE: usize = 256;

/// A colour map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColorMap {
    /// Perceptually uniform, dark blue to yellow (magnitudes).
    Viridis,
    /// Rainbow-like with high contrast (Google's Turbo).
    Turbo,
    /// Blue - light grey - red, for signed fields (centre = 0 with a symmetric range).
    Diverging,
}

impl ColorMap {
    /// Every colour map, in the order of the LUT texture rows.
    pub const ALL: [ColorMap; 3] = [ColorMap::Viridis, ColorMap::Turbo, ColorMap::Diverging];

    /// Row of this map in the LUT texture (keep in sync with `field.wgsl`).
    #[must_use]
    pub fn row(self) -> u32 {
        match self {
            ColorMap::Viridis => 0,
            ColorMap::Turbo => 1,
            ColorMap::Diverging => 2,
        }
    }

    /// Name for the UI and `--view cmap=...`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ColorMap::Viridis => "viridis",
            ColorMap::Turbo => "turbo",
            ColorMap::Diverging => "diverging",
        }
    }

    /// Parse a name.
    #[must_use]
    pub fn from_name(s: &str) -> Option<ColorMap> {
        ColorMap::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(s))
    }

    /// sRGB colour (0..1) at `t` in 0..1 (clamped).
    #[must_use]
    pub fn eval(self, t: f32) -> [f32; 3] {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        match self {
            ColorMap::Viridis => viridis(t),
            ColorMap::Turbo => turbo(t),
            ColorMap::Diverging => diverging(t),
        }
    }

    /// The 8-bit sRGB colour of LUT entry `i`: what the renderer draws for a normalised value
    /// `t` is entry `round(t * 255)`.
    #[must_use]
    pub fn lut_entry(self, i: usize) -> [u8; 4] {
        let c = self.eval(i as f32 / (LUT_SIZE - 1) as f32);
        [to_u8(c[0]), to_u8(c[1]), to_u8(c[2]), 255]
    }

    /// The colour the renderer draws for value `v` in the range `lo..hi`.
    #[must_use]
    pub fn color_of(self, v: f32, lo: f32, hi: f32) -> [u8; 4] {
        let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.lut_entry(lut_index(t))
    }
}

/// LUT index of a normalised value (keep in sync with `field.wgsl`).
#[must_use]
pub fn lut_index(t: f32) -> usize {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    (t * (LUT_SIZE - 1) as f32 + 0.5) as usize
}

fn to_u8(x: f32) -> u8 {
    (x.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

/// The whole lookup table: `ColorMap::ALL.len()` rows of [`LUT_SIZE`] RGBA8 sRGB entries.
#[must_use]
pub fn lut() -> Vec<[u8; 4]> {
    ColorMap::ALL.iter().flat_map(|m| (0..LUT_SIZE).map(|i| m.lut_entry(i))).collect()
}

fn poly(t: f32, c: &[[f32; 3]]) -> [f32; 3] {
    let mut r = [0.0f32; 3];
    for k in (0..c.len()).rev() {
        for a in 0..3 {
            r[a] = r[a] * t + c[k][a];
        }
    }
    r
}

/// Viridis by a degree-6 polynomial fit (max error about 1/255 against matplotlib's table).
fn viridis(t: f32) -> [f32; 3] {
    const C: [[f32; 3]; 7] = [
        [0.277_727_33, 0.005_407_344_5, 0.334_099_8],
        [0.105_093_04, 1.404_613_5, 1.384_590_2],
        [-0.330_861_83, 0.214_847_56, 0.095_095_16],
        [-4.634_230_5, -5.799_101, -19.332_441],
        [6.228_27, 14.179_933, 56.690_55],
        [4.776_385, -13.745_145, -65.353_03],
        [-5.435_456, 4.645_852_6, 26.312_435],
    ];
    poly(t, &C)
}

/// Turbo: Google's polynomial approximation, pulled onto Turbo's true end colours over the
/// outer tenth at each end (the bare polynomial is up to 0.13 off there: a reddish black at 0).
fn turbo(t: f32) -> [f32; 3] {
    const START: [f32; 3] = [0.189_95, 0.071_76, 0.232_17];
    const END: [f32; 3] = [0.479_60, 0.015_83, 0.010_55];
    let mut c = turbo_poly(t);
    let (w, end, at) = if t < 0.1 {
        ((1.0 - t / 0.1).powi(2), START, 0.0)
    } else if t > 0.9 {
        ((1.0 - (1.0 - t) / 0.1).powi(2), END, 1.0)
    } else {
        return c;
    };
    let p = turbo_poly(at);
    for a in 0..3 {
        c[a] += w * (end[a] - p[a]);
    }
    c
}

fn turbo_poly(t: f32) -> [f32; 3] {
    const C: [[f32; 3]; 6] = [
        [0.135_721_38, 0.091_402_61, 0.106_673_3],
        [4.615_392_6, 2.194_188_4, 12.641_946],
        [-42.660_324, 4.842_966_6, -60.582_05],
        [132.131_08, -14.185_033, 110.362_77],
        [-152.942_4, 4.277_299, -89.903_11],
        [59.286_38, 2.829_566, 27.348_25],
    ];
    poly(t, &C)
}

/// A cool-warm diverging map: blue (0) - light grey (0.5) - red (1), piecewise linear.
fn diverging(t: f32) -> [f32; 3] {
    const STOPS: [[f32; 3]; 5] =
        [[0.23, 0.299, 0.754], [0.552, 0.69, 0.996], [0.865, 0.865, 0.865], [0.958, 0.603, 0.482], [0.706, 0.016, 0.15]];
    let x = t * 4.0;
    let i = (x.floor() as usize).min(3);
    let f = x - i as f32;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_match_their_reference_colours_at_the_ends() {
        // matplotlib viridis: #440154 at 0, #fde725 at 1; turbo: #30123b at 0, #7a0403 at 1.
        let close = |a: [u8; 4], b: [u8; 3], tol: i32| (0..3).all(|k| (i32::from(a[k]) - i32::from(b[k])).abs() <= tol);
        assert!(close(ColorMap::Viridis.lut_entry(0), [0x44, 0x01, 0x54], 6), "{:?}", ColorMap::Viridis.lut_entry(0));
        assert!(close(ColorMap::Viridis.lut_entry(255), [0xfd, 0xe7, 0x25], 6), "{:?}", ColorMap::Viridis.lut_entry(255));
        assert!(close(ColorMap::Turbo.lut_entry(0), [0x30, 0x12, 0x3b], 2), "{:?}", ColorMap::Turbo.lut_entry(0));
        assert!(close(ColorMap::Turbo.lut_entry(255), [0x7a, 0x04, 0x03], 2), "{:?}", ColorMap::Turbo.lut_entry(255));
        // Smooth across the joins at 0.1 and 0.9 (no jump bigger than the neighbouring steps).
        for i in [24usize, 25, 26, 229, 230, 231] {
            let (a, b) = (ColorMap::Turbo.lut_entry(i), ColorMap::Turbo.lut_entry(i + 1));
            assert!(close(a, [b[0], b[1], b[2]], 12), "turbo jumps between {i} and {}: {a:?} {b:?}", i + 1);
        }
        let mid = ColorMap::Turbo.lut_entry(128);
        assert!(mid[1] > mid[0] && mid[1] > mid[2], "{mid:?}");
        let mid = ColorMap::Diverging.lut_entry(lut_index(0.5));
        assert!(mid[0].abs_diff(mid[1]) <= 3 && mid[1].abs_diff(mid[2]) <= 3, "the diverging centre is grey: {mid:?}");
    }

    #[test]
    fn lut_has_one_row_per_map_and_clamps() {
        assert_eq!(lut().len(), 3 * LUT_SIZE);
        assert_eq!(lut_index(-1.0), 0);
        assert_eq!(lut_index(2.0), 255);
        assert_eq!(lut_index(f32::NAN), 0);
        assert_eq!(ColorMap::from_name("TURBO"), Some(ColorMap::Turbo));
    }
}
