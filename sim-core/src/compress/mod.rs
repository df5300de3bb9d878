//! On-the-fly lossy compression of the DDFs (Flint et al. 2024): the mass-conserving 5/3 lifting wavelet
//! on blocks of 33 x 17 x 17 samples, a hard threshold per level and a sparse record per block.
//!
//! - [`wavelet`]: the transform of one block and the thresholds per level.
//! - [`coding`]: the record a block is written as (bit mask, the paper's COO, or dense).
//! - [`field`]: whole fields through both, the CPU reference of the CUDA kernels
//!   (`kernels/compress.cu`), with the paper's error measure.

pub mod coding;
pub mod field;
pub mod wavelet;

pub use coding::{Format, RecordError};
pub use field::{nmse, CompressedField};
pub use wavelet::{BlockShape, Thresholds};
