//! The CUDA device layer: whether a driver and a device are here, what they are and how much
//! memory is free, launch shapes, uploads, the copy bandwidth, and errors of the driver in the
//! solvers' words. Every CUDA solver builds on it.

use super::*;
use crate::solver::SolverError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig};
use std::sync::Arc;

/// Launch shape for the per-cell kernels (fields, derived, swap): 256-thread blocks, which
/// every variant's register count allows (1024 does not for D3Q19/D3Q27).
pub(crate) fn threads(cells: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// Whether the CUDA driver library can be loaded.
#[must_use]
pub fn cuda_present() -> bool {
    // SAFETY: only probes for the shared library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// A usable CUDA device.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Free and total memory in bytes.
    pub mem: (usize, usize),
}

/// Probe for a usable CUDA device 0 (driver, NVRTC and a device).
///
/// # Errors
/// A sentence saying what is missing.
pub fn probe() -> Result<DeviceInfo, String> {
    // SAFETY: only probes for the shared library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so) on this machine".into());
    }
    if !nvrtc_present() {
        return Err(NVRTC_MISSING.into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("no usable CUDA device: {e:?}"))?;
    device_info(&ctx)
}

/// Wall time of the stages of a set-up, logged as each ends.
pub(super) struct Stages {
    pub(super) t0: std::time::Instant,
    pub(super) at: std::time::Instant,
}

impl Stages {
    pub(super) fn new() -> Stages {
        let now = std::time::Instant::now();
        Stages { t0: now, at: now }
    }

    pub(super) fn done(&mut self, what: &str) {
        let now = std::time::Instant::now();
        tracing::info!("set-up: {what} {:.3} s (total {:.3} s)", (now - self.at).as_secs_f64(), (now - self.t0).as_secs_f64());
        self.at = now;
    }
}

/// Free memory of device `ordinal` in bytes (`cuMemGetInfo`), for memory plans.
///
/// # Errors
/// No driver or no such device.
pub fn free_memory(ordinal: usize) -> Result<u64, String> {
    // SAFETY: only probes for the shared library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no NVIDIA driver (libcuda.so) on this machine".into());
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| format!("no usable CUDA device {ordinal}: {e:?}"))?;
    Ok(device_info(&ctx)?.mem.0 as u64)
}

pub(crate) fn device_info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, String> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let name = ctx.name().map_err(|e| format!("{e:?}"))?;
    let major = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(|e| format!("{e:?}"))?;
    let minor = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(|e| format!("{e:?}"))?;
    ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
    let mem = cudarc::driver::result::mem_get_info().map_err(|e| format!("{e:?}"))?;
    Ok(DeviceInfo { name, cc: (major, minor), mem })
}

/// Device-to-device copy bandwidth of device 0 in GB/s, counting bytes read plus written
/// (1 GiB buffers, best of 20 copies).
///
/// # Errors
/// No device, or CUDA errors.
pub fn copy_bandwidth_gbs() -> Result<f64, String> {
    probe()?;
    let ctx = CudaContext::new(0).map_err(|e| format!("{e:?}"))?;
    let stream = ctx.default_stream();
    let n = 1usize << 30;
    let a = stream.alloc_zeros::<u8>(n).map_err(|e| format!("{e:?}"))?;
    let mut b = stream.alloc_zeros::<u8>(n).map_err(|e| format!("{e:?}"))?;
    let mut best = f64::MAX;
    for _ in 0..20 {
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        let t = std::time::Instant::now();
        stream.memcpy_dtod(&a, &mut b).map_err(|e| format!("{e:?}"))?;
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(2.0 * n as f64 / best / 1e9)
}

pub(crate) fn derr(what: &str) -> impl Fn(cudarc::driver::DriverError) -> SolverError + '_ {
    move |e| SolverError::Backend(format!("CUDA error while {what}: {e:?}"))
}

/// Copy plain structs into the start of a byte buffer (nothing for an empty list).
pub(crate) fn upload_pod<T: bytemuck::Pod>(stream: &Arc<CudaStream>, v: &[T], dst: &mut CudaSlice<u8>) -> Result<(), SolverError> {
    if v.is_empty() {
        return Ok(());
    }
    let bytes: &[u8] = bytemuck::cast_slice(v);
    let mut view = dst.slice_mut(0..bytes.len());
    stream.memcpy_htod(bytes, &mut view).map_err(derr("uploading boundary tables"))
}

/// The UUID of CUDA device 0 (to check a renderer runs on the same GPU), if there is one.
#[must_use]
pub fn device_uuid() -> Option<[u8; 16]> {
    if !cuda_present() {
        return None;
    }
    let ctx = CudaContext::new(0).ok()?;
    let u = ctx.uuid().ok()?;
    Some(u.bytes.map(|b| b as u8))
}

/// The `--gpu-architecture` of a device.
pub(crate) fn arch_of(dev: &DeviceInfo) -> String {
    format!("sm_{}{}", dev.cc.0, dev.cc.1)
}

/// A loaded kernel module: its kernels looked up by name, with one error text for a module that
/// does not load and one for a kernel it lacks. Every CUDA solver loads its modules through it.
pub(crate) struct Module(Arc<CudaModule>);

impl Module {
    /// Load compiled PTX into `ctx`; `what` names the kernels in an error ("the frame kernels").
    pub(crate) fn load(ctx: &Arc<CudaContext>, ptx: cudarc::nvrtc::Ptx, what: &str) -> Result<Module, SolverError> {
        let loading = format!("loading {what}");
        ctx.load_module(ptx).map(Module).map_err(|e| derr(&loading)(e))
    }

    /// The kernel `name`.
    pub(crate) fn get(&self, name: &str) -> Result<CudaFunction, SolverError> {
        self.0.load_function(name).map_err(|e| SolverError::Backend(format!("kernel {name} missing: {e:?}")))
    }

    /// The module itself, for a solver that keeps it loaded as long as its kernels.
    pub(crate) fn keep(&self) -> Arc<CudaModule> {
        Arc::clone(&self.0)
    }
}
