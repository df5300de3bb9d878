//! Esoflow's dense-grid lattice Boltzmann solver on any GPU wgpu reaches (Vulkan, Metal, DX12,
//! WebGPU): WGSL compute kernels whose lattice tables, operator codes and parameter struct are
//! generated from sim-core's Rust tables, checked against the CPU reference.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ls = sim_core::scene::load(std::path::Path::new("scenes/lid_driven_cavity_2d.toml"), &[])?;
//! let mut s = esoflow_wgpu::WgpuSolver::from_scene(&ls, &esoflow_wgpu::AdapterChoice::Auto)?;
//! sim_core::Solver::step(&mut s, 100)?;
//! # Ok(()) }
//! ```

mod copy;
mod gpu;
mod layout;
mod solver;
pub mod wgsl;

pub use copy::copy_bandwidth_gbs;
pub use gpu::{adapters, AdapterChoice, AdapterSummary, Gpu};
pub use solver::{build, WgpuSolver};
/// The wgpu this crate is built on (adapter types, backends).
pub use wgpu;
