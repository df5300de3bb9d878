//! Solver backends. `cpu` is the reference every other backend is tested against.

pub mod amr;
mod cell;
pub mod cpu;
pub mod cuda;
mod ghost;
pub mod subgrid;
