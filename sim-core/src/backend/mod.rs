//! Solver backends. `cpu` is the reference every other backend is tested against.

pub mod cpu;
pub mod cuda;
pub mod cuda_compress;
mod ghost;
pub mod subgrid;
