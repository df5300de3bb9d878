//! Frames of an adaptive run written on the device (the `amr_frame` step of docs/amr-gpu.md):
//! `amr_planes` fills the finest grid's density and velocity planes from the leaves, as the
//! solver's `fill_fields` does on the host, and the uniform-grid backend's frame kernels
//! (`frame_fields`, `frame_box`, `frame_lattice`, compiled once for the finest grid) derive
//! the view's fields and their ranges from them, straight into the renderer's shared buffer
//! or into a staging buffer copied to the host. The DDFs never leave the device.

use super::AmrGpu;
use crate::amr::{AmrLbm, BLOCK};
use crate::backend::cuda::{
    derr, device_info, frame_ranges, launch_frame, load_frame_module, threads, FrameKernels, FRAME_RANGE_INIT, FRAME_RANGE_WORDS,
};
use crate::domain::Domain;
use crate::fields::FieldKind;
use crate::frame::{FrameLayout, FrameRanges, FrameTarget};
use crate::lattice::Lat;
use crate::solver::SolverError;
use cudarc::driver::{CudaFunction, CudaModule, CudaSlice, DevicePtr, PushKernelArg};
use std::sync::Arc;

/// What frames need, made on the first one: the frame kernels for the finest grid, its field
/// planes and obstacle flags, the range words, a staging buffer for host frames.
pub(super) struct FrameKit {
    _module: Arc<CudaModule>,
    k: [CudaFunction; 3],
    n: [usize; 3],
    planes: CudaSlice<f32>,
    flags: CudaSlice<u8>,
    range: CudaSlice<u32>,
    staging: Option<CudaSlice<f32>>,
}

impl AmrGpu {
    /// Write one frame of the finest grid `dom` (the solver's domain) from the device's DDFs:
    /// the fields `kinds` as `layout` says into `target`, as [`crate::Solver::write_frame`]
    /// describes (the caller has checked the request). `lbm` gives the levels' forces.
    ///
    /// # Errors
    /// NVRTC errors on the first frame, CUDA errors.
    pub fn write_frame<L: Lat>(
        &mut self,
        lbm: &AmrLbm<L>,
        dom: &Domain,
        kinds: &[FieldKind],
        layout: &FrameLayout,
        target: FrameTarget<'_>,
    ) -> Result<FrameRanges, SolverError> {
        self.settle()?;
        self.sync_params(lbm)?;
        if self.frame.as_ref().is_none_or(|k| k.n != dom.n) {
            self.frame = Some(self.frame_kit(dom)?);
        }
        let e = derr("writing a frame");
        let lmax = u32::from(lbm.forest().max_level());
        let b = BLOCK.pow(L::D as u32);
        let levels = self.levels.clone();
        let Some(kit) = self.frame.as_mut() else {
            return Err(SolverError::Backend("no frame kernels".into()));
        };
        let (nx, ny, nz) = (dom.n[0] as u32, dom.n[1] as u32, dom.n[2] as u32);
        for (l, lv) in levels.iter().enumerate() {
            let (off, count) = lv.all;
            if count == 0 {
                continue;
            }
            let ids = self.lists.slice(off..off + count);
            let (count32, l32) = (count as u32, l as u32);
            let mut bld = self.stream.launch_builder(&self.planes_k);
            bld.arg(&ids).arg(&count32).arg(&l32).arg(&lmax).arg(&self.prm).arg(&self.pos).arg(&self.child).arg(&self.solid);
            bld.arg(&self.f).arg(&kit.flags).arg(&nx).arg(&ny).arg(&nz).arg(&mut kit.planes);
            // SAFETY: arguments as amr_planes declares them; the list holds IDs below the
            // capacity; a leaf's finest cells lie in the grid (checked per cell); the planes
            // hold 4 N floats.
            unsafe { bld.launch(threads(count * b)) }.map_err(&e)?;
        }
        self.stream.memcpy_htod(&FRAME_RANGE_INIT, &mut kit.range).map_err(&e)?;
        let fk = FrameKernels { frame: &kit.k[0], frame_box: &kit.k[1], frame_lattice: &kit.k[2] };
        let keys = match target {
            FrameTarget::Device { ptr, sync, .. } => {
                if let Some(s) = &sync {
                    if s.read_value > 0 {
                        crate::backend::cuda::interop::SharedSemaphore::of(s.read)?.wait(&self.stream, s.read_value)?;
                    }
                }
                launch_frame(&self.stream, &fk, &kit.planes, &kit.flags, kit.n, kinds, layout, ptr, &mut kit.range)?;
                if let Some(s) = &sync {
                    crate::backend::cuda::interop::SharedSemaphore::of(s.written)?.signal(&self.stream, s.written_value)?;
                }
                self.stream.clone_dtoh(&kit.range).map_err(&e)?
            }
            FrameTarget::Host(out) => {
                let floats = layout.floats();
                if kit.staging.as_ref().is_none_or(|s| s.len() < floats) {
                    kit.staging = None;
                    kit.staging = Some(self.stream.alloc_zeros::<f32>(floats).map_err(&e)?);
                }
                let staging = kit.staging.as_ref().ok_or_else(|| SolverError::Backend("no frame buffer".into()))?;
                let ptr = {
                    let (p, _sync) = staging.device_ptr(&self.stream);
                    p
                };
                launch_frame(&self.stream, &fk, &kit.planes, &kit.flags, kit.n, kinds, layout, ptr, &mut kit.range)?;
                self.stream.memcpy_dtoh(&staging.slice(..floats), &mut out[..floats]).map_err(&e)?;
                self.stream.clone_dtoh(&kit.range).map_err(&e)?
            }
        };
        self.stream.synchronize().map_err(&e)?;
        Ok(frame_ranges(&keys, kinds.len(), 0))
    }

    /// The obstacles of the finest grid changed (a cell edit): the next frame marks the new ones.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn set_frame_obstacles(&mut self, dom: &Domain) -> Result<(), SolverError> {
        if let Some(kit) = self.frame.as_mut().filter(|k| k.n == dom.n) {
            self.stream.memcpy_htod(&frame_flags(dom), &mut kit.flags).map_err(derr("uploading the obstacles of the frames"))?;
        }
        Ok(())
    }

    fn frame_kit(&self, dom: &Domain) -> Result<FrameKit, SolverError> {
        let dev = device_info(&self._ctx).map_err(SolverError::Backend)?;
        let (module, k) = load_frame_module(&self._ctx, self.lattice, dom.n, &dev)?;
        let cells = dom.cells();
        let a = derr("allocating the frame buffers");
        let flags = frame_flags(dom);
        let mut d_flags = self.stream.alloc_zeros::<u8>(cells).map_err(&a)?;
        self.stream.memcpy_htod(&flags, &mut d_flags).map_err(&a)?;
        Ok(FrameKit {
            _module: module,
            k,
            n: dom.n,
            planes: self.stream.alloc_zeros::<f32>(4 * cells).map_err(&a)?,
            flags: d_flags,
            range: self.stream.alloc_zeros::<u32>(FRAME_RANGE_WORDS).map_err(&a)?,
            staging: None,
        })
    }
}

/// The frame kernels' flags of the finest grid: obstacle cells keep their flag (a solid kind),
/// the rest 0.
fn frame_flags(dom: &Domain) -> Vec<u8> {
    dom.flags.iter().map(|&f| if crate::domain::is_obstacle(f) { f } else { 0 }).collect()
}
