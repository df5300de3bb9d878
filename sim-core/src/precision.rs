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

impl Precision {
    /// What the shifted DDF `x` becomes once stored in this format and read back (`x` itself
    /// for FP32). Storing a value that went through this once stores it exactly.
    #[inline(always)]
    #[must_use]
    pub fn round_trip(self, x: f32) -> f32 {
        match self {
            Precision::Fp32 => x,
            Precision::Fp16s => Fp16s::enc(x).dec(),
            Precision::Fp16c => Fp16c::enc(x).dec(),
        }
    }

    /// Shifted DDFs in this format's bytes, as the devices store them.
    #[must_use]
    pub fn encode_all(self, v: &[f32]) -> Vec<u8> {
        match self {
            Precision::Fp32 => bytemuck::cast_slice(v).to_vec(),
            Precision::Fp16s => v.iter().flat_map(|&x| Fp16s::enc(x).0.to_le_bytes()).collect(),
            Precision::Fp16c => v.iter().flat_map(|&x| Fp16c::enc(x).0.to_le_bytes()).collect(),
        }
    }

    /// The inverse of [`Self::encode_all`]: `bytes` holds `out.len()` values.
    pub fn decode_all(self, bytes: &[u8], out: &mut [f32]) {
        let n = self.bytes();
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(n)) {
            *o = match self {
                Precision::Fp32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                Precision::Fp16s => Fp16s(u16::from_le_bytes([b[0], b[1]])).dec(),
                Precision::Fp16c => Fp16c(u16::from_le_bytes([b[0], b[1]])).dec(),
            };
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
        Fp16s(f32_to_f16_bits(fs * FP16S_SCALE))
    }
    #[inline(always)]
    fn dec(self) -> f32 {
        f16_bits_to_f32(self.0) * (1.0 / FP16S_SCALE)
    }
}

/// IEEE half bits to f32, written without branches so that loops over many values vectorise
/// (the `half` crate decides per call). Exact for every half, infinities and NaN included.
#[inline(always)]
#[must_use]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let mag = (h & 0x7FFF) << 13;
    // Scaling by 2^112 re-biases the exponent and normalises subnormals exactly.
    let v = f32::from_bits(mag) * f32::from_bits(0x7780_0000); // 2^112
    let special = (h & 0x7C00) == 0x7C00;
    let bits = if special { 0x7F80_0000 | mag } else { v.to_bits() };
    f32::from_bits(bits | sign)
}

/// f32 to IEEE half bits with round-to-nearest-even, without branches (see
/// [`f16_bits_to_f32`]). Overflow gives infinity, NaN stays NaN.
#[inline(always)]
#[must_use]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let a = b & 0x7FFF_FFFF;
    // Normal range: re-bias the exponent, round to nearest even at bit 13.
    let odd = (a >> 13) & 1;
    let normal = (a.wrapping_sub(112 << 23).wrapping_add(0xFFF + odd)) >> 13;
    // Below 2^-14: adding 0.5 lets the FPU round at the half-subnormal step 2^-24.
    let sub = (f32::from_bits(a) + 0.5).to_bits().wrapping_sub(0x3F00_0000);
    let inf_nan = if a > 0x7F80_0000 { 0x7E00 } else { 0x7C00 };
    let o = if a >= 0x4780_0000 {
        inf_nan
    } else if a < 0x3880_0000 {
        sub
    } else {
        normal
    };
    (o | sign) as u16
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
        // Branch-free so that loops over many values vectorise.
        let bits = fs.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let a = bits & 0x7FFF_FFFF;
        let m = a & 0x7F_FFFF;
        let e = (a >> 23) as i32 - (127 - 15);
        // Normal: 4-bit exponent, 11 mantissa bits, round to nearest even; saturate (NaN too).
        let base = ((e.max(0) as u32) << 11) | (m >> 12);
        let rem = m & 0xFFF;
        let up = u32::from(rem > 0x800 || (rem == 0x800 && base & 1 == 1));
        let normal = (base + up).min(u32::from(FP16C_MAX));
        // Subnormal (|x| < 2^-14): adding 0.25 rounds at the step 2^-25 (nearest even).
        let sub = (f32::from_bits(a) + 0.25).to_bits().wrapping_sub(0x3E80_0000);
        let mag = if e >= 1 { normal } else { sub };
        Fp16c(sign | mag as u16)
    }
    #[inline(always)]
    fn dec(self) -> f32 {
        let h = u32::from(self.0);
        let e = (h >> 11) & 0xF;
        let m = h & 0x7FF;
        let sub = m as f32 * (1.0 / 33_554_432.0);
        let normal = f32::from_bits(((e + 127 - 15) << 23) | (m << 12));
        let mag = if e == 0 { sub } else { normal };
        f32::from_bits(mag.to_bits() | ((h & 0x8000) << 16))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fast_half_decode_is_exact_for_every_half() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan());
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#x}");
            }
        }
    }

    /// Straightforward FP16C encoder, the reference for the branch-free one.
    fn fp16c_reference(fs: f32) -> u16 {
        let sign = ((fs.to_bits() >> 16) & 0x8000) as u16;
        let a = f64::from(fs.abs());
        if a.is_nan() || a >= 2.0 {
            return sign | FP16C_MAX;
        }
        let mag = if a < 2f64.powi(-14) {
            (a * 2f64.powi(25)).round_ties_even() as u16
        } else {
            let e = a.log2().floor() as i32;
            let mant = a / 2f64.powi(e) - 1.0; // [0, 1)
            let m = (mant * 2048.0).round_ties_even() as u32;
            let v = (((e + 15) as u32) << 11) + m;
            v.min(u32::from(FP16C_MAX)) as u16
        };
        sign | mag
    }

    #[test]
    fn fp16c_known_values() {
        for x in [0.0f32, 1.0, -1.0, 0.5, 1.5, 2.0f32.powi(-14), 2.0f32.powi(-25), -0.75] {
            assert_eq!(Fp16c::enc(x).dec(), x, "{x}");
        }
        assert_eq!(Fp16c::enc(10.0).dec(), Fp16c(FP16C_MAX).dec());
        assert!(Fp16c::enc(f32::NAN).dec().is_finite());
    }

    #[test]
    fn encoded_ddfs_decode_to_their_round_trip() {
        let v: Vec<f32> = (0..200).map(|i| ((i as f32) * 0.37).sin() * 0.3).collect();
        for p in Precision::ALL {
            let bytes = p.encode_all(&v);
            assert_eq!(bytes.len(), v.len() * p.bytes());
            let mut back = vec![0.0f32; v.len()];
            p.decode_all(&bytes, &mut back);
            for (&x, &y) in v.iter().zip(&back) {
                assert_eq!(y.to_bits(), p.round_trip(x).to_bits(), "{p} {x}");
                assert_eq!(p.round_trip(y).to_bits(), y.to_bits(), "{p}: a stored value stores exactly");
            }
        }
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
        fn fast_half_conversion_matches_the_half_crate(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            let want = half::f16::from_f32(x);
            let got = f32_to_f16_bits(x);
            if want.is_nan() {
                prop_assert!(half::f16::from_bits(got).is_nan());
            } else {
                prop_assert_eq!(got, want.to_bits(), "{}", x);
            }
        }

        #[test]
        fn fp16c_matches_the_reference_encoder(x in -3.0f32..3.0, tiny in -1e-4f32..1e-4) {
            prop_assert_eq!(Fp16c::enc(x).0, fp16c_reference(x), "{}", x);
            prop_assert_eq!(Fp16c::enc(tiny).0, fp16c_reference(tiny), "{}", tiny);
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
