//! DDF storage formats. Arithmetic is always FP32; storage is FP32 or one of two 16-bit formats.
//! Every format stores the DDF *shifted* by its lattice weight (`f_i - w_i`), which keeps the
//! stored numbers small and centred on zero so that 16 bits are enough.

use serde::{Deserialize, Serialize};

/// Storage precision of the DDFs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE single precision.
    Fp32,
    /// IEEE half precision of `(f - w) * 32768`.
    Fp16s,
    /// Esoflow's 16-bit format: sign, 4 exponent bits, 11 mantissa bits, covering |x| < 2.
    Fp16c,
}

impl Precision {
    /// All storage precisions.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Fp16s, Precision::Fp16c];

    /// Bytes per stored DDF.
    #[must_use]
    pub fn bytes(self) -> usize {
        match self {
            Precision::Fp32 => 4,
            Precision::Fp16s | Precision::Fp16c => 2,
        }
    }
    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16s => "fp16s",
            Precision::Fp16c => "fp16c",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A storage format for one shifted DDF value.
pub trait Store: bytemuck::Pod + Default + Send + Sync + 'static {
    /// The runtime tag.
    const KIND: Precision;
    /// Encode a shifted DDF (`f - w`).
    fn enc(fs: f32) -> Self;
    /// Decode to a shifted DDF.
    fn dec(self) -> f32;
}

impl Store for f32 {
    const KIND: Precision = Precision::Fp32;
    #[inline(always)]
    fn enc(fs: f32) -> Self {
        fs
    }
    #[inline(always)]
    fn dec(self) -> f32 {
        self
    }
}

/// Scale applied before rounding to IEEE half, so that small shifted DDFs stay normal numbers.
pub const FP16S_SCALE: f32 = 32768.0;

/// FP16S storage: IEEE half of the scaled shifted DDF.
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Fp16s(pub u16);

impl Store for Fp16s {
    const KIND: Precision = Precision::Fp16s;
    #[inline(always)]
    fn enc(fs: f32) -> Self {
        Fp16s(half::f16::from_f32(fs * FP16S_SCALE).to_bits())
    }
    #[inline(always)]
    fn dec(self) -> f32 {
        half::f16::from_bits(self.0).to_f32() * (1.0 / FP16S_SCALE)
    }
}

/// FP16C storage: 1 sign bit, 4 exponent bits (bias 15), 11 mantissa bits, no infinities.
/// Normal numbers cover 2^-14 <= |x| < 2 with 12 significant bits (one more than IEEE half);
/// subnormals go down to 2^-25. Out-of-range values and NaN saturate to the largest magnitude.
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Fp16c(pub u16);

const FP16C_MAX: u16 = 0x7FFF;

impl Store for Fp16c {
    const KIND: Precision = Precision::Fp16c;
    #[inline(always)]
    fn enc(fs: f32) -> Self {
        let bits = fs.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let a = fs.abs();
        if a.is_nan() {
            return Fp16c(sign | FP16C_MAX);
        }
        let abits = a.to_bits();
        let e = (abits >> 23) as i32 - 127 + 15;
        let mag = if e >= 1 {
            let m = abits & 0x7F_FFFF;
            let mut base = ((e as u32) << 11) | (m >> 12);
            let rem = m & 0xFFF;
            if rem > 0x800 || (rem == 0x800 && base & 1 == 1) {
                base += 1;
            }
            base.min(u32::from(FP16C_MAX)) as u16
        } else {
            // Subnormal: the value in units of 2^-25, rounded to nearest even. Exact scaling.
            let v = a * 33_554_432.0; // 2^25
            v.round_ties_even() as u16
        };
        Fp16c(sign | mag)
    }
    #[inline(always)]
    fn dec(self) -> f32 {
        let h = u32::from(self.0);
        let e = (h >> 11) & 0xF;
        let m = h & 0x7FF;
        let mag = if e == 0 {
            m as f32 * (1.0 / 33_554_432.0)
        } else {
            f32::from_bits(((e + 127 - 15) << 23) | (m << 12))
        };
        if h & 0x8000 != 0 {
            -mag
        } else {
            mag
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fp16c_known_values() {
        for x in [
            0.0f32,
            1.0,
            -1.0,
            0.5,
            1.5,
            2.0f32.powi(-14),
            2.0f32.powi(-25),
            -0.75,
        ] {
            assert_eq!(Fp16c::enc(x).dec(), x, "{x}");
        }
        assert_eq!(Fp16c::enc(10.0).dec(), Fp16c(FP16C_MAX).dec());
        assert!(Fp16c::enc(f32::NAN).dec().is_finite());
    }

    proptest! {
        #[test]
        fn fp16c_relative_error_is_below_2_pow_minus_12(x in -1.99f32..1.99) {
            let y = Fp16c::enc(x).dec();
            let tol = (x.abs() * 2.0f32.powi(-12)).max(2.0f32.powi(-26));
            prop_assert!((y - x).abs() <= tol, "{} -> {}", x, y);
        }

        #[test]
        fn fp16s_relative_error_is_below_2_pow_minus_11(x in -1.0f32..1.0) {
            let y = Fp16s::enc(x).dec();
            let tol = (x.abs() * 2.0f32.powi(-11)).max(2.0f32.powi(-40));
            prop_assert!((y - x).abs() <= tol, "{} -> {}", x, y);
        }

        #[test]
        fn encodings_are_idempotent(x in -1.99f32..1.99) {
            let c = Fp16c::enc(x).dec();
            prop_assert_eq!(Fp16c::enc(c).dec(), c);
            let s = Fp16s::enc(x * 0.5).dec();
            prop_assert_eq!(Fp16s::enc(s).dec(), s);
        }
    }
}
