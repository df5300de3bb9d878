//! The sparse record of one block's kept coefficients, in 32-bit words. One header word says
//! the format (top two bits) and how many values are kept (the other 30); the smallest of three
//! formats is written:
//!
//! | format | after the header | words |
//! | --- | --- | --- |
//! | [`Format::Mask`] | a bit per sample (x fastest, bit `i % 32` of word `i / 32`), then the kept values | `1 + ceil(N/32) + k` |
//! | [`Format::Coo`] | the paper's coordinate list: 16-bit sample indices, two per word (low half first), then the values | `1 + ceil(k/2) + k` |
//! | [`Format::Dense`] | all `N` coefficients | `1 + N` |
//!
//! Values are `f32`, in sample order; dropped coefficients read back as 0 in every format. For
//! the 9,537-sample block, COO is the smallest up to 596 kept values (6.2%), the bit mask up to
//! 9,238, dense above.
//! The CUDA kernels write and read the same words (`kernels/compress.cu`).

use super::wavelet::{detail_level, BlockShape, Thresholds};
use thiserror::Error;

/// How a record stores its kept coefficients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Every coefficient.
    Dense = 0,
    /// A bit mask of the kept samples, then their values.
    Mask = 1,
    /// 16-bit sample indices, then the values (the paper's COO).
    Coo = 2,
}

impl Format {
    /// All formats, in header order.
    pub const ALL: [Format; 3] = [Format::Dense, Format::Mask, Format::Coo];

    /// Short name, for tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Format::Dense => "dense",
            Format::Mask => "mask",
            Format::Coo => "coo",
        }
    }
}

/// Bits of the header that hold the count.
pub const COUNT_BITS: u32 = 30;

/// Words of the bit mask of a block of `samples`.
#[must_use]
pub fn mask_words(samples: usize) -> usize {
    samples.div_ceil(32)
}

/// Words of a record in each format, for `kept` values of a block of `samples`.
#[must_use]
pub fn record_words(format: Format, samples: usize, kept: usize) -> usize {
    1 + match format {
        Format::Dense => samples,
        Format::Mask => mask_words(samples) + kept,
        Format::Coo => kept.div_ceil(2) + kept,
    }
}

/// The format a block with `kept` values is written in: the smallest (mask before COO before
/// dense when equal).
#[must_use]
pub fn choose(samples: usize, kept: usize) -> Format {
    let mut best = Format::Mask;
    for f in [Format::Coo, Format::Dense] {
        if record_words(f, samples, kept) < record_words(best, samples, kept) {
            best = f;
        }
    }
    best
}

/// A record that cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    /// Shorter than its header says.
    #[error("the record is {have} words long, but its header needs {need}")]
    Truncated {
        /// Words there.
        have: usize,
        /// Words the header asks for.
        need: usize,
    },
    /// A header that no encoder writes.
    #[error("the record header {0:#010x} names no format or more values than samples")]
    BadHeader(u32),
    /// A COO index past the block.
    #[error("COO index {0} is outside the block")]
    BadIndex(usize),
}

/// Which samples of a block with extents `ext` are kept under `t` (the coder's rule: see
/// [`Thresholds::keeps`]); samples outside `ext` never are.
#[must_use]
pub fn kept_mask(shape: &BlockShape, ext: [usize; 3], coeffs: &[f32], t: Thresholds) -> Vec<bool> {
    let mut keep = vec![false; shape.samples()];
    for z in 0..ext[2] {
        for y in 0..ext[1] {
            for x in 0..ext[0] {
                let i = shape.index(x, y, z);
                keep[i] = t.keeps(coeffs[i], detail_level(shape, ext, [x, y, z]));
            }
        }
    }
    keep
}

/// Append the record of `coeffs` (a transformed block) to `out`, keeping the samples `keep`
/// says. Returns the format written.
pub fn encode(coeffs: &[f32], keep: &[bool], out: &mut Vec<u32>) -> Format {
    let samples = keep.len();
    let kept: Vec<usize> = (0..samples).filter(|&i| keep[i]).collect();
    let format = choose(samples, kept.len());
    let count = if format == Format::Dense { samples } else { kept.len() };
    out.push(((format as u32) << COUNT_BITS) | count as u32);
    match format {
        Format::Dense => out.extend((0..samples).map(|i| if keep[i] { coeffs[i].to_bits() } else { 0 })),
        Format::Mask => {
            let base = out.len();
            out.resize(base + mask_words(samples), 0);
            for &i in &kept {
                out[base + i / 32] |= 1 << (i % 32);
            }
            out.extend(kept.iter().map(|&i| coeffs[i].to_bits()));
        }
        Format::Coo => {
            out.extend(kept.chunks(2).map(|p| p[0] as u32 | (p.get(1).map_or(0, |&j| j as u32) << 16)));
            out.extend(kept.iter().map(|&i| coeffs[i].to_bits()));
        }
    }
    format
}

/// Read one record from the start of `words` into `coeffs` (all `samples` of it: dropped
/// coefficients become 0). Returns the format and the words the record took.
///
/// # Errors
/// A truncated record, a bad header or an index outside the block.
pub fn decode(words: &[u32], coeffs: &mut [f32]) -> Result<(Format, usize), RecordError> {
    let samples = coeffs.len();
    let head = *words.first().ok_or(RecordError::Truncated { have: 0, need: 1 })?;
    let count = (head & ((1 << COUNT_BITS) - 1)) as usize;
    let format = Format::ALL.into_iter().find(|&f| f as u32 == head >> COUNT_BITS).ok_or(RecordError::BadHeader(head))?;
    if count > samples || (format == Format::Dense && count != samples) {
        return Err(RecordError::BadHeader(head));
    }
    let need = record_words(format, samples, count);
    if words.len() < need {
        return Err(RecordError::Truncated { have: words.len(), need });
    }
    let body = &words[1..need];
    match format {
        Format::Dense => {
            for (c, &w) in coeffs.iter_mut().zip(body) {
                *c = f32::from_bits(w);
            }
        }
        Format::Mask => {
            coeffs.fill(0.0);
            let (mask, values) = body.split_at(mask_words(samples));
            let mut next = values.iter();
            for i in 0..samples {
                if mask[i / 32] >> (i % 32) & 1 == 1 {
                    let v = next.next().ok_or(RecordError::BadHeader(head))?;
                    coeffs[i] = f32::from_bits(*v);
                }
            }
            if next.next().is_some() {
                return Err(RecordError::BadHeader(head));
            }
        }
        Format::Coo => {
            coeffs.fill(0.0);
            let (index, values) = body.split_at(count.div_ceil(2));
            for (k, v) in values.iter().enumerate() {
                let i = (index[k / 2] >> (16 * (k % 2)) & 0xffff) as usize;
                *coeffs.get_mut(i).ok_or(RecordError::BadIndex(i))? = f32::from_bits(*v);
            }
        }
    }
    Ok((format, need))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_smallest_format_is_chosen() {
        let n = BlockShape::DEFAULT.samples();
        assert_eq!(n, 9537);
        assert_eq!(choose(n, 0), Format::Coo);
        assert_eq!(choose(n, 596), Format::Coo);
        assert_eq!(choose(n, 597), Format::Mask);
        assert_eq!(choose(n, n - 299), Format::Mask);
        assert_eq!(choose(n, n - 298), Format::Dense);
        assert_eq!(choose(n, n), Format::Dense);
        assert_eq!(record_words(Format::Mask, n, 10), 1 + 299 + 10);
    }

    #[test]
    fn bad_records_are_errors() {
        let mut c = vec![0.0f32; 40];
        assert_eq!(decode(&[], &mut c), Err(RecordError::Truncated { have: 0, need: 1 }));
        assert_eq!(decode(&[3 << COUNT_BITS], &mut c), Err(RecordError::BadHeader(3 << COUNT_BITS)));
        assert_eq!(decode(&[(2 << COUNT_BITS) | 1, 50, 0], &mut c), Err(RecordError::BadIndex(50)));
        assert!(matches!(decode(&[(1 << COUNT_BITS) | 3, 0], &mut c), Err(RecordError::Truncated { .. })));
    }

    proptest! {
        /// Any coefficients and any kept set: decoding gives the kept values bit for bit and
        /// zeros elsewhere, and reports the words written.
        #[test]
        fn records_round_trip(values in prop::collection::vec(prop_oneof![Just(0.0f32), -1e3f32..1e3, Just(f32::NAN)], 1..700),
                              keep_seed in any::<u64>()) {
            let mut rng = keep_seed | 1;
            let keep: Vec<bool> = values.iter().map(|&v| {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                v != 0.0 && rng % 3 != 0
            }).collect();
            let mut words = vec![7u32];
            let f = encode(&values, &keep, &mut words);
            let mut back = vec![1.0f32; values.len()];
            let (g, used) = decode(&words[1..], &mut back).unwrap();
            prop_assert_eq!(f, g);
            prop_assert_eq!(used, words.len() - 1);
            for i in 0..values.len() {
                let want = if keep[i] { values[i].to_bits() } else { 0 };
                prop_assert_eq!(back[i].to_bits(), want, "sample {}", i);
            }
        }
    }
}
