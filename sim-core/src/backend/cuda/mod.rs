//! CUDA backend: the DDFs stay on the GPU; kernels are CUDA C from `kernels/`, compiled at run
//! time by NVRTC with a generated header of constants. cudarc loads libcuda and libnvrtc on
//! first use, so the binary builds and starts where there is no CUDA at all.
//!
//! Memory layout equals the CPU backend's, so a CPU solver (a [`Mirror`]) writes the initial
//! state and encodes/decodes checkpoints from bytes copied to and from the device.

pub mod amr;
mod bricks;
pub mod codec;
mod dense;
mod device;
mod frame;
pub mod interop;
pub mod multi;
mod nvrtc;
pub mod split;
pub mod subgrid;

pub use bricks::*;
pub use dense::*;
pub use device::*;
use frame::*;
pub use interop::SharedImport;
pub use nvrtc::*;
