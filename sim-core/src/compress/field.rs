//! Whole fields through the block coder: a 3D `f32` field (x fastest) is tiled into blocks of
//! [`BlockShape`] samples (partial blocks at the far edges), each block transformed,
//! thresholded and written as one record. This is the CPU reference the CUDA kernels are
//! checked against, and what the threshold sweep and the tests run.

use super::coding::{self, Format, RecordError};
use super::wavelet::{self, BlockShape, Thresholds};
use rayon::prelude::*;

/// A compressed field: the records of its blocks (block x fastest) and where each starts.
#[derive(Clone, Debug, PartialEq)]
pub struct CompressedField {
    /// Samples per axis.
    pub n: [usize; 3],
    /// The block shape.
    pub shape: BlockShape,
    /// The thresholds it was written with.
    pub thresholds: Thresholds,
    /// All records, one after another.
    pub words: Vec<u32>,
    /// Word offset of each block's record in `words`.
    pub offsets: Vec<usize>,
    /// Blocks written in each format ([`Format`] order).
    pub formats: [usize; 3],
}

/// Blocks per axis that tile a grid `n`.
#[must_use]
pub fn block_counts(n: [usize; 3], shape: &BlockShape) -> [usize; 3] {
    [0, 1, 2].map(|a| n[a].div_ceil(shape.n[a]))
}

/// First sample and extents of block `b` (linear index, x fastest) of a grid `n`.
#[must_use]
pub fn block_box(n: [usize; 3], shape: &BlockShape, b: usize) -> ([usize; 3], [usize; 3]) {
    let c = block_counts(n, shape);
    let idx = [b % c[0], (b / c[0]) % c[1], b / (c[0] * c[1])];
    let origin = [0, 1, 2].map(|a| idx[a] * shape.n[a]);
    (origin, [0, 1, 2].map(|a| shape.n[a].min(n[a] - origin[a])))
}

/// Copy block `b` of `field` into a full-block buffer (zeros outside the block's extents).
fn load(field: &[f32], n: [usize; 3], shape: &BlockShape, b: usize, buf: &mut [f32]) -> [usize; 3] {
    let (o, ext) = block_box(n, shape, b);
    buf.fill(0.0);
    for z in 0..ext[2] {
        for y in 0..ext[1] {
            let src = o[0] + n[0] * ((o[1] + y) + n[1] * (o[2] + z));
            let dst = shape.index(0, y, z);
            buf[dst..dst + ext[0]].copy_from_slice(&field[src..src + ext[0]]);
        }
    }
    ext
}

impl CompressedField {
    /// Compress `field` (`n[0] * n[1] * n[2]` samples, x fastest).
    ///
    /// # Panics
    /// If `field` has another length (a caller bug).
    #[must_use]
    pub fn compress(field: &[f32], n: [usize; 3], shape: BlockShape, thresholds: Thresholds) -> CompressedField {
        assert_eq!(field.len(), n[0] * n[1] * n[2], "field length");
        let c = block_counts(n, &shape);
        let blocks = c[0] * c[1] * c[2];
        let records: Vec<(Vec<u32>, Format)> = (0..blocks)
            .into_par_iter()
            .map(|b| {
                let mut buf = vec![0.0f32; shape.samples()];
                let ext = load(field, n, &shape, b, &mut buf);
                wavelet::forward(&shape, ext, &mut buf);
                let keep = coding::kept_mask(&shape, ext, &buf, thresholds);
                let mut out = Vec::new();
                let f = coding::encode(&buf, &keep, &mut out);
                (out, f)
            })
            .collect();
        let mut words = Vec::with_capacity(records.iter().map(|r| r.0.len()).sum());
        let mut offsets = Vec::with_capacity(blocks);
        let mut formats = [0; 3];
        for (r, f) in records {
            offsets.push(words.len());
            words.extend_from_slice(&r);
            formats[f as usize] += 1;
        }
        CompressedField { n, shape, thresholds, words, offsets, formats }
    }

    /// Decompress into `out` (`n[0] * n[1] * n[2]` samples).
    ///
    /// # Errors
    /// A damaged record (names the block).
    ///
    /// # Panics
    /// If `out` has another length (a caller bug).
    pub fn decompress(&self, out: &mut [f32]) -> Result<(), (usize, RecordError)> {
        let n = self.n;
        assert_eq!(out.len(), n[0] * n[1] * n[2], "field length");
        let shape = self.shape;
        let blocks: Vec<Vec<f32>> = (0..self.offsets.len())
            .into_par_iter()
            .map(|b| {
                let mut buf = vec![0.0f32; shape.samples()];
                coding::decode(&self.words[self.offsets[b]..], &mut buf).map_err(|e| (b, e))?;
                let (_, ext) = block_box(n, &shape, b);
                wavelet::inverse(&shape, ext, &mut buf);
                Ok(buf)
            })
            .collect::<Result<_, _>>()?;
        for (b, buf) in blocks.iter().enumerate() {
            let (o, ext) = block_box(n, &shape, b);
            for z in 0..ext[2] {
                for y in 0..ext[1] {
                    let dst = o[0] + n[0] * ((o[1] + y) + n[1] * (o[2] + z));
                    let src = shape.index(0, y, z);
                    out[dst..dst + ext[0]].copy_from_slice(&buf[src..src + ext[0]]);
                }
            }
        }
        Ok(())
    }

    /// Bytes of the records.
    #[must_use]
    pub fn bytes(&self) -> usize {
        4 * self.words.len()
    }

    /// Uncompressed bytes over compressed bytes.
    #[must_use]
    pub fn ratio(&self) -> f64 {
        (4 * self.n[0] * self.n[1] * self.n[2]) as f64 / self.bytes().max(1) as f64
    }
}

/// The error measure of Flint et al. 2024 (their eq. 19, called NMSE there): the root of the summed squared
/// difference over the root of the summed squared reference, computed in `f64`.
#[must_use]
pub fn nmse(reference: &[f32], other: &[f32]) -> f64 {
    let (d, r) = reference.iter().zip(other).fold((0.0f64, 0.0f64), |(d, r), (&a, &b)| {
        let e = f64::from(a) - f64::from(b);
        (d + e * e, r + f64::from(a) * f64::from(a))
    });
    if r == 0.0 {
        d.sqrt()
    } else {
        (d / r).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = seed | 1;
        (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                ((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02
            })
            .collect()
    }

    /// A smooth field like a shifted DDF of a slow flow: small values, gentle gradients.
    fn smooth(n: [usize; 3]) -> Vec<f32> {
        let mut v = Vec::with_capacity(n[0] * n[1] * n[2]);
        for z in 0..n[2] {
            for y in 0..n[1] {
                for x in 0..n[0] {
                    let (x, y, z) = (x as f32 / 20.0, y as f32 / 15.0, z as f32 / 11.0);
                    v.push(0.01 * (x.sin() * y.cos() + 0.3 * z.sin()));
                }
            }
        }
        v
    }

    #[test]
    fn blocks_tile_the_grid_with_partial_edges() {
        let s = BlockShape::DEFAULT;
        assert_eq!(block_counts([70, 17, 18], &s), [3, 1, 2]);
        assert_eq!(block_box([70, 17, 18], &s, 2), ([66, 0, 0], [4, 17, 17]));
        assert_eq!(block_box([70, 17, 18], &s, 5), ([66, 0, 17], [4, 17, 1]));
    }

    #[test]
    #[ignore = "prints ratio and error against tau for a smooth field"]
    fn sweep_smooth() {
        let n = [99, 51, 34];
        let f = smooth(n);
        for tau in [0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4] {
            let c = CompressedField::compress(&f, n, BlockShape::DEFAULT, Thresholds { tau });
            let mut back = vec![0.0; f.len()];
            c.decompress(&mut back).unwrap();
            eprintln!("tau {tau:e} ratio {:.2} nmse {:.3e} formats {:?}", c.ratio(), nmse(&f, &back), c.formats);
        }
    }

    #[test]
    fn a_smooth_field_compresses_well_with_a_small_error() {
        let n = [99, 51, 34];
        let f = smooth(n);
        let c = CompressedField::compress(&f, n, BlockShape::DEFAULT, Thresholds { tau: 1e-5 });
        let mut back = vec![0.0; f.len()];
        c.decompress(&mut back).unwrap();
        let e = nmse(&f, &back);
        assert!(c.ratio() > 10.0, "ratio {}", c.ratio());
        assert!(e < 5e-3, "nmse {e}");
        let lossless = CompressedField::compress(&f, n, BlockShape::DEFAULT, Thresholds { tau: 0.0 });
        lossless.decompress(&mut back).unwrap();
        assert!(nmse(&f, &back) < 1e-6, "lossless nmse {}", nmse(&f, &back));
        assert!(lossless.ratio() < 1.1);
    }

    #[test]
    fn a_damaged_record_names_its_block() {
        let n = [40, 20, 5];
        let f = noise(n[0] * n[1] * n[2], 3);
        let mut c = CompressedField::compress(&f, n, BlockShape::DEFAULT, Thresholds { tau: 0.0 });
        let o = c.offsets[1];
        c.words[o] = 3 << coding::COUNT_BITS;
        let mut back = vec![0.0; f.len()];
        assert_eq!(c.decompress(&mut back).map_err(|e| e.0), Err(1));
    }

    proptest! {
        /// Any grid and any tau: the field's total mass is kept to f32 rounding; tau = 0
        /// round-trips to f32 rounding.
        #[test]
        fn fields_keep_mass(nx in 1usize..80, ny in 1usize..40, nz in 1usize..25, seed in any::<u64>(), tau in 0.0f32..0.01) {
            let n = [nx, ny, nz];
            let f: Vec<f32> = noise(nx * ny * nz, seed).iter().zip(smooth(n)).map(|(a, b)| a + b).collect();
            let mass: f64 = f.iter().map(|&v| f64::from(v)).sum();
            let scale: f64 = f.iter().map(|&v| f64::from(v.abs())).sum::<f64>() + 1e-30;
            for t in [0.0, tau] {
                let c = CompressedField::compress(&f, n, BlockShape::DEFAULT, Thresholds { tau: t });
                let mut back = vec![0.0; f.len()];
                c.decompress(&mut back).unwrap();
                let m2: f64 = back.iter().map(|&v| f64::from(v)).sum();
                prop_assert!((m2 - mass).abs() <= 1e-5 * scale, "tau {t}: mass {mass} -> {m2}");
                if t == 0.0 {
                    for i in 0..f.len() {
                        prop_assert!((back[i] - f[i]).abs() <= 1e-8, "sample {i}: {} -> {}", f[i], back[i]);
                    }
                }
            }
        }
    }
}
