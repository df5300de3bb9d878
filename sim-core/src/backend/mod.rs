//! Solver backends. `cpu` is the reference every other backend is tested against.

pub mod amr;
mod cell;
pub mod cpu;
pub mod cuda;
pub mod cuda_amr;
pub mod cuda_compress;
pub mod cuda_multi;
pub mod cuda_subgrid;
pub mod cuda_sync;
mod ghost;
pub mod subgrid;
