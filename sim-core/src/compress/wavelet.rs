//! The mass-conserving 5/3 lifting wavelet (Flint et al. 2024, section 3.1.3) on one block, in `f32`.
//!
//! Per line and level, over the samples `s_0 .. s_2m` on that level's lattice:
//! - predict: `d_k = s_{2k+1} - (s_2k + s_{2k+2}) / 2`, stored where `s_{2k+1}` was;
//! - update: `s_2k += a_{k-1} d_{k-1} + a_k d_k` for the interior even samples, with `a = 1/4`,
//!   or `1/2` for the first and last detail. The two end samples never change.
//!
//! These weights are the only ones that keep the trapezoidal sum of the line, so dropping any
//! detail keeps it too; as the end samples are untouched, the plain sum of the samples (the
//! lattice Boltzmann mass) is kept as well.
//!
//! **Levels in 3D** follow the pyramid ("non-standard") order: at level `l` the lines along x,
//! then y, then z (each axis while `l` is below its level count) run through the samples that
//! are still approximations in every axis, so the coefficients that turn into details at level
//! `l` are that level's details (threshold `tau_l`, see [`Thresholds`]).
//!
//! **Lines of any length.** The default block (33 x 17 x 17, levels 3, 2, 2) always meets odd
//! sample counts; partial blocks at a grid's far edges may not. A line with an even count on a
//! level keeps its last sample as a permanent approximation ("dangling"): it is never
//! predicted, never thresholded and not on the next level's lattice. A line stops taking
//! levels once its lattice has fewer than 5 samples ([`line_levels`]). Both sums stay kept.
//!
//! **Arithmetic.** Every rounded operation is one `f32` add or subtract (the halves and quarters
//! are exact products), in the order written here; the CUDA kernels (`kernels/wavelet.cuh`) do
//! the same operations without fused multiply-adds, so both give the same bits. The inverse
//! undoes each step in reverse, which round-trips to within `f32` rounding (the lifting steps
//! are not exactly invertible in floating point).

/// Samples of a block along each axis and wavelet levels per axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    /// Samples per axis (x fastest in memory).
    pub n: [usize; 3],
    /// Levels per axis.
    pub levels: [u32; 3],
}

impl BlockShape {
    /// The block of Flint et al. 2024: 33 x 17 x 17 samples (2^k + 1, so the ends land on samples and shared
    /// memory rows shift banks), 3 levels along x and 2 along y and z (5 x 5 x 5 coarse samples).
    pub const DEFAULT: BlockShape = BlockShape { n: [33, 17, 17], levels: [3, 2, 2] };

    /// Samples in a full block.
    #[must_use]
    pub fn samples(&self) -> usize {
        self.n[0] * self.n[1] * self.n[2]
    }

    /// The most levels of any axis.
    #[must_use]
    pub fn max_levels(&self) -> u32 {
        self.levels.iter().copied().max().unwrap_or(0)
    }

    /// Index of sample `(x, y, z)` in a block buffer (x fastest), also for partial blocks,
    /// which use the full block's layout.
    #[must_use]
    pub fn index(&self, x: usize, y: usize, z: usize) -> usize {
        x + self.n[0] * (y + self.n[1] * z)
    }
}

/// What a coordinate along one axis is after that axis's levels: which level made it a detail,
/// or an approximation kept to the end (the coarse lattice and dangling samples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisClass {
    /// A detail made at this level.
    Detail(u32),
    /// An approximation to the end.
    Approx,
}

/// Levels a line of `n` samples gets out of `levels` wanted: a level runs while the line has
/// at least 5 samples on its lattice. With 3 (or 4) there is one detail and no interior
/// approximation to take its mass, so dropping it would change the sum; such lines stop.
#[must_use]
pub fn line_levels(n: usize, levels: u32) -> u32 {
    (0..levels).take_while(|&l| n.saturating_sub(1) >> l >= 4).count() as u32
}

/// The class of coordinate `p` on a line of `n` samples transformed over `levels` levels (fewer
/// for short lines: [`line_levels`]).
#[must_use]
pub fn axis_class(p: usize, n: usize, levels: u32) -> AxisClass {
    for l in 0..line_levels(n, levels) {
        let step = 1usize << l;
        if (p >> l) & 1 == 1 {
            // An odd multiple of the level's step: predicted if it has a right neighbour on
            // this level's lattice, else the dangling last sample.
            return if p + step < n { AxisClass::Detail(l) } else { AxisClass::Approx };
        }
    }
    AxisClass::Approx
}

/// The level at which sample `(x, y, z)` of a block with extents `ext` became a detail, or
/// `None` for the approximations (never thresholded). The level of a 3D sample is the first
/// level at which any axis made it a detail.
#[must_use]
pub fn detail_level(shape: &BlockShape, ext: [usize; 3], p: [usize; 3]) -> Option<u32> {
    (0..3)
        .filter_map(|a| match axis_class(p[a], ext[a], shape.levels[a]) {
            AxisClass::Detail(l) => Some(l),
            AxisClass::Approx => None,
        })
        .min()
}

/// Whether coordinate `p` is still an approximation along its axis when level `l` starts.
fn approx_before(p: usize, n: usize, levels: u32, l: u32) -> bool {
    match axis_class(p, n, levels) {
        AxisClass::Detail(d) => d >= l,
        AxisClass::Approx => true,
    }
}

/// Weight of detail `k` of `m` in the update step.
fn weight(k: usize, m: usize) -> f32 {
    if k == 0 || k + 1 == m {
        0.5
    } else {
        0.25
    }
}

/// Count of details on a line of `c` lattice samples (the last one dangles when `c` is even).
fn details_on_line(c: usize) -> usize {
    let odd = if c % 2 == 1 { c } else { c.saturating_sub(1) };
    odd.saturating_sub(1) / 2
}

/// Forward lifting of one level on the line `v[base + i * stride]`, `i < c`.
pub fn lift_line(v: &mut [f32], base: usize, stride: usize, c: usize) {
    let m = details_on_line(c);
    let at = |i: usize| base + i * stride;
    for k in 0..m {
        let p = (v[at(2 * k)] + v[at(2 * k + 2)]) * 0.5;
        v[at(2 * k + 1)] -= p;
    }
    for k in 1..m {
        let t = weight(k - 1, m) * v[at(2 * k - 1)] + weight(k, m) * v[at(2 * k + 1)];
        v[at(2 * k)] += t;
    }
}

/// Inverse of [`lift_line`].
pub fn unlift_line(v: &mut [f32], base: usize, stride: usize, c: usize) {
    let m = details_on_line(c);
    let at = |i: usize| base + i * stride;
    for k in 1..m {
        let t = weight(k - 1, m) * v[at(2 * k - 1)] + weight(k, m) * v[at(2 * k + 1)];
        v[at(2 * k)] -= t;
    }
    for k in 0..m {
        let p = (v[at(2 * k)] + v[at(2 * k + 2)]) * 0.5;
        v[at(2 * k + 1)] += p;
    }
}

/// Every line of level `l` along axis `a`: `(base index, stride, sample count)`.
fn lines(shape: &BlockShape, ext: [usize; 3], l: u32, a: usize) -> Vec<(usize, usize, usize)> {
    let (b, c) = ((a + 1) % 3, (a + 2) % 3);
    let step = 1usize << l;
    let count = (ext[a] - 1) / step + 1;
    let mut stride_of = [1, shape.n[0], shape.n[0] * shape.n[1]];
    stride_of[a] *= step;
    let mut out = Vec::new();
    for qc in 0..ext[c] {
        if !approx_before(qc, ext[c], shape.levels[c], l) {
            continue;
        }
        for qb in 0..ext[b] {
            if !approx_before(qb, ext[b], shape.levels[b], l) {
                continue;
            }
            let mut p = [0; 3];
            p[b] = qb;
            p[c] = qc;
            out.push((shape.index(p[0], p[1], p[2]), stride_of[a], count));
        }
    }
    out
}

/// Forward transform of a block in place: `v` has the full block's layout
/// ([`BlockShape::index`]); only samples inside `ext` (each `1..=shape.n[a]`) are read or
/// written.
///
/// # Panics
/// If `v` is shorter than a full block or `ext` is out of range (caller bugs).
pub fn forward(shape: &BlockShape, ext: [usize; 3], v: &mut [f32]) {
    assert!(v.len() >= shape.samples() && (0..3).all(|a| (1..=shape.n[a]).contains(&ext[a])));
    for l in 0..shape.max_levels() {
        for a in 0..3 {
            if l < line_levels(ext[a], shape.levels[a]) {
                for (base, stride, c) in lines(shape, ext, l, a) {
                    lift_line(v, base, stride, c);
                }
            }
        }
    }
}

/// Inverse of [`forward`].
///
/// # Panics
/// As [`forward`].
pub fn inverse(shape: &BlockShape, ext: [usize; 3], v: &mut [f32]) {
    assert!(v.len() >= shape.samples() && (0..3).all(|a| (1..=shape.n[a]).contains(&ext[a])));
    for l in (0..shape.max_levels()).rev() {
        for a in (0..3).rev() {
            if l < line_levels(ext[a], shape.levels[a]) {
                for (base, stride, c) in lines(shape, ext, l, a) {
                    unlift_line(v, base, stride, c);
                }
            }
        }
    }
}

/// Thresholds per level: `tau_l = tau * 2^(l + 1)` for the details made at level `l` (`l = 0`
/// the finest). In the paper's numbering, details `d_j` come from the samples of scale `j + 1`
/// and get `tau * 2^(J - j)`; the finest details are `d_(J-1)`, so this is the same rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// The user's tau.
    pub tau: f32,
}

impl Thresholds {
    /// The threshold of the details made at level `l`.
    #[must_use]
    pub fn at(&self, l: u32) -> f32 {
        self.tau * (2u32 << l) as f32
    }

    /// Whether a coefficient is kept: non-zero, and an approximation or a detail whose size is
    /// not below its level's threshold (a NaN is kept, so a blow-up is not hidden).
    #[must_use]
    pub fn keeps(&self, value: f32, level: Option<u32>) -> bool {
        value != 0.0 && level.is_none_or(|l| !(value.abs() < self.at(l)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Plain and trapezoidal sums in f64.
    fn sums(v: &[f32]) -> (f64, f64) {
        let plain: f64 = v.iter().map(|&x| f64::from(x)).sum();
        let ends = f64::from(v[0]) + f64::from(v[v.len() - 1]);
        (plain, plain - 0.5 * ends)
    }

    /// Multi-level 1D transform of a whole line (levels while the lattice has 3+ samples).
    fn forward_1d(v: &mut [f32], levels: u32) {
        for l in 0..line_levels(v.len(), levels) {
            let step = 1 << l;
            lift_line(v, 0, step, (v.len() - 1) / step + 1);
        }
    }

    /// Drop every detail below `tau` (1D classes), as the coder does.
    fn threshold_1d(v: &mut [f32], levels: u32, tau: f32) {
        let t = Thresholds { tau };
        let n = v.len();
        for (p, x) in v.iter_mut().enumerate() {
            let level = match axis_class(p, n, levels) {
                AxisClass::Detail(l) => Some(l),
                AxisClass::Approx => None,
            };
            if !t.keeps(*x, level) {
                *x = 0.0;
            }
        }
    }

    fn inverse_1d(v: &mut [f32], levels: u32) {
        for l in (0..line_levels(v.len(), levels)).rev() {
            let step = 1 << l;
            unlift_line(v, 0, step, (v.len() - 1) / step + 1);
        }
    }

    #[test]
    fn a_ramp_has_no_details_and_a_parabola_only_small_ones() {
        let mut v: Vec<f32> = (0..33).map(|i| 3.0 + 2.0 * i as f32).collect();
        forward_1d(&mut v, 3);
        for p in 0..33 {
            if let AxisClass::Detail(_) = axis_class(p, 33, 3) {
                assert_eq!(v[p], 0.0, "detail at {p}");
            }
        }
        // The coarse samples of a ramp are the ramp (end samples unchanged).
        assert_eq!(v[0], 3.0);
        assert_eq!(v[32], 67.0);
    }

    #[test]
    fn classes_of_the_default_block() {
        let s = BlockShape::DEFAULT;
        let full = s.n;
        // 5 x 5 x 5 coarse approximations.
        let approx = (0..s.samples()).filter(|&i| detail_level(&s, full, [i % 33, (i / 33) % 17, i / (33 * 17)]).is_none()).count();
        assert_eq!(approx, 125);
        assert_eq!(detail_level(&s, full, [1, 0, 0]), Some(0));
        assert_eq!(detail_level(&s, full, [4, 2, 0]), Some(1));
        assert_eq!(detail_level(&s, full, [4, 4, 8]), Some(2));
        assert_eq!(detail_level(&s, full, [8, 4, 16]), None);
        // A partial line of 6 samples: 5 dangles at level 0 ...
        assert_eq!(axis_class(5, 6, 3), AxisClass::Approx);
        assert_eq!(axis_class(3, 6, 3), AxisClass::Detail(0));
        // ... but level 1's lattice has 3 samples, too few to take a detail's mass.
        assert_eq!(line_levels(6, 3), 1);
        assert_eq!(axis_class(2, 6, 3), AxisClass::Approx);
        assert_eq!([line_levels(33, 3), line_levels(17, 2), line_levels(9, 3), line_levels(4, 3)], [3, 2, 2, 0]);
    }

    #[test]
    fn thresholds_double_per_level() {
        let t = Thresholds { tau: 0.01 };
        assert_eq!([t.at(0), t.at(1), t.at(2)], [0.02, 0.04, 0.08]);
        assert!(t.keeps(f32::NAN, Some(0)));
        assert!(!t.keeps(0.0, None));
        assert!(t.keeps(-0.03, Some(0)) && !t.keeps(-0.03, Some(1)));
    }

    proptest! {
        /// Any line, any levels, any tau: after thresholding, the plain and the trapezoidal
        /// sums are what they were, to f32 rounding.
        #[test]
        fn lines_keep_their_mass(v in prop::collection::vec(-1.0f32..1.0, 1..80), levels in 0u32..5, tau in 0.0f32..0.5) {
            let (plain, trap) = sums(&v);
            let scale: f64 = v.iter().map(|&x| f64::from(x.abs())).sum::<f64>() + 1e-30;
            let mut w = v.clone();
            forward_1d(&mut w, levels);
            threshold_1d(&mut w, levels, tau);
            inverse_1d(&mut w, levels);
            let (p2, t2) = sums(&w);
            prop_assert!((p2 - plain).abs() <= 1e-5 * scale, "plain {plain} -> {p2}");
            prop_assert!((t2 - trap).abs() <= 1e-5 * scale, "trapezoid {trap} -> {t2}");
            // The end samples never change (the last one is an end or dangles on every level).
            prop_assert_eq!(w[0], v[0]);
            prop_assert_eq!(w[v.len() - 1], v[v.len() - 1]);
        }

        /// Blocks of any extents: tau = 0 round-trips to f32 rounding, and any tau keeps the
        /// block's plain sum.
        #[test]
        fn blocks_round_trip_and_keep_their_mass(
            ext in (1usize..=33, 1usize..=17, 1usize..=17),
            seed in any::<u64>(),
            tau in 0.0f32..0.2,
        ) {
            let s = BlockShape::DEFAULT;
            let ext = [ext.0, ext.1, ext.2];
            let mut rng = seed | 1;
            let mut v = vec![0.0f32; s.samples()];
            for z in 0..ext[2] { for y in 0..ext[1] { for x in 0..ext[0] {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                v[s.index(x, y, z)] = 0.3 + 0.1 * ((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5);
            }}}
            let mass: f64 = v.iter().map(|&x| f64::from(x)).sum();
            let mut w = v.clone();
            forward(&s, ext, &mut w);
            let mut back = w.clone();
            inverse(&s, ext, &mut back);
            for i in 0..v.len() {
                prop_assert!((back[i] - v[i]).abs() <= 4e-7, "sample {i}: {} -> {}", v[i], back[i]);
            }
            let t = Thresholds { tau };
            for z in 0..ext[2] { for y in 0..ext[1] { for x in 0..ext[0] {
                let i = s.index(x, y, z);
                if !t.keeps(w[i], detail_level(&s, ext, [x, y, z])) { w[i] = 0.0; }
            }}}
            inverse(&s, ext, &mut w);
            let m2: f64 = w.iter().map(|&x| f64::from(x)).sum();
            prop_assert!((m2 - mass).abs() <= 2e-5 * mass, "mass {mass} -> {m2}");
        }
    }
}
