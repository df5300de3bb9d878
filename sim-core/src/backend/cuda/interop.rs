//! Timeline semaphores another API (the renderer's Vulkan) exported on the solver's GPU,
//! imported into CUDA: the solver's stream waits for values the renderer's queue signals and
//! signals values the renderer's queue waits for, so neither side stops its CPU thread to hand
//! a shared buffer over (see [`crate::frame::FrameSync`]).

use crate::backend::cuda::{cuda_present, derr};
use crate::SolverError;
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::sync::Arc;

/// A timeline semaphore exported as an opaque file descriptor (Vulkan's
/// `VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT` of a `VK_SEMAPHORE_TYPE_TIMELINE`),
/// imported into device 0's primary context (shared by every CUDA solver, so it outlives
/// solver rebuilds). Drop it before the exporter destroys the semaphore.
pub struct SharedSemaphore {
    ctx: Arc<CudaContext>,
    sem: sys::CUexternalSemaphore,
}

// SAFETY: a plain driver handle, usable from any thread once the context is bound (every use
// binds it first).
unsafe impl Send for SharedSemaphore {}
// SAFETY: as above; the driver serialises operations on the handle.
unsafe impl Sync for SharedSemaphore {}

impl SharedSemaphore {
    /// The CUDA semaphore behind a frame's timeline.
    ///
    /// # Errors
    /// A timeline that was not imported into CUDA.
    pub fn of(t: &dyn crate::frame::SharedTimeline) -> Result<&SharedSemaphore, SolverError> {
        (t as &dyn std::any::Any)
            .downcast_ref::<SharedSemaphore>()
            .ok_or_else(|| SolverError::Backend("the frame's timeline semaphore was not imported into CUDA".into()))
    }

    /// Import a timeline semaphore exported as an opaque fd. On success CUDA owns `fd`.
    ///
    /// # Errors
    /// No CUDA, or the driver refused the handle (other GPU, not a timeline semaphore).
    #[cfg(unix)]
    pub fn import_timeline_fd(fd: std::os::fd::OwnedFd) -> Result<SharedSemaphore, SolverError> {
        use std::os::fd::{AsRawFd, IntoRawFd};
        if !cuda_present() {
            return Err(SolverError::Backend("no CUDA driver (libcuda) to import a semaphore into".into()));
        }
        let ctx = CudaContext::new(0).map_err(derr("opening device 0"))?;
        ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
            type_: sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD,
            handle: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 { fd: fd.as_raw_fd() },
            flags: 0,
            reserved: [0; 16],
        };
        let mut sem = std::mem::MaybeUninit::uninit();
        // SAFETY: desc is fully initialised and names an open fd; on success the driver owns it.
        unsafe { sys::cuImportExternalSemaphore(sem.as_mut_ptr(), &raw const desc) }
            .result()
            .map_err(derr("importing a timeline semaphore (cuImportExternalSemaphore)"))?;
        let _ = fd.into_raw_fd();
        // SAFETY: the call succeeded, so the handle is initialised.
        Ok(SharedSemaphore { ctx, sem: unsafe { sem.assume_init() } })
    }

    /// Queue on `stream`: set the timeline to `value` once the work queued before is done.
    /// Values must grow from one signal to the next.
    ///
    /// # Errors
    /// Driver errors.
    pub fn signal(&self, stream: &CudaStream, value: u64) -> Result<(), SolverError> {
        self.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        // SAFETY: zero is a valid bit pattern for the plain-data parameter struct.
        let mut p: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS = unsafe { std::mem::zeroed() };
        p.params.fence.value = value;
        // SAFETY: a live semaphore of this context, one parameter set, a live stream.
        unsafe { sys::cuSignalExternalSemaphoresAsync(&raw const self.sem, &raw const p, 1, stream.cu_stream()) }
            .result()
            .map_err(derr("signalling the renderer (cuSignalExternalSemaphoresAsync)"))
    }

    /// Queue on `stream`: hold the work queued after this until the timeline reaches `value`.
    ///
    /// # Errors
    /// Driver errors.
    pub fn wait(&self, stream: &CudaStream, value: u64) -> Result<(), SolverError> {
        self.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        // SAFETY: zero is a valid bit pattern for the plain-data parameter struct.
        let mut p: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
        p.params.fence.value = value;
        // SAFETY: a live semaphore of this context, one parameter set, a live stream.
        unsafe { sys::cuWaitExternalSemaphoresAsync(&raw const self.sem, &raw const p, 1, stream.cu_stream()) }
            .result()
            .map_err(derr("waiting for the renderer (cuWaitExternalSemaphoresAsync)"))
    }
}

impl Drop for SharedSemaphore {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: a live handle, destroyed once; work that used it was queued on streams
            // the driver keeps ordered.
            let _ = unsafe { sys::cuDestroyExternalSemaphore(self.sem) };
        }
    }
}

impl crate::frame::SharedTimeline for SharedSemaphore {}

impl std::fmt::Debug for SharedSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedSemaphore")
    }
}

/// Memory another API exported on the solver's GPU (a Vulkan buffer shared with the renderer),
/// imported into CUDA: frames can be written straight into it with [`FrameTarget::Device`].
/// It lives in device 0's primary context, which every [`CudaSolver`] shares, so it outlives
/// solver rebuilds. Drop it before the exporting API frees the memory.
pub struct SharedImport {
    ctx: Arc<CudaContext>,
    ext: cudarc::driver::sys::CUexternalMemory,
    ptr: u64,
    bytes: u64,
}

// SAFETY: the handles are plain driver handles, usable from any thread once the context is
// bound (every use binds it first).
unsafe impl Send for SharedImport {}

// SAFETY: as above; no method mutates through &self.
unsafe impl Sync for SharedImport {}

impl SharedImport {
    /// Import `bytes` bytes (the exporter's allocation size) of memory exported as an opaque
    /// file descriptor; `dedicated` for a dedicated allocation. On success CUDA owns `fd`.
    ///
    /// # Errors
    /// No CUDA, or the driver refused the handle (other GPU, wrong size).
    #[cfg(unix)]
    pub fn import_fd(fd: std::os::fd::OwnedFd, bytes: u64, dedicated: bool) -> Result<SharedImport, SolverError> {
        use cudarc::driver::sys;
        use std::os::fd::{AsRawFd, IntoRawFd};
        if !cuda_present() {
            return Err(SolverError::Backend("no CUDA driver (libcuda) to import shared memory into".into()));
        }
        let ctx = CudaContext::new(0).map_err(derr("opening device 0"))?;
        ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        let mut desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
            type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            handle: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 { fd: fd.as_raw_fd() },
            size: bytes,
            flags: if dedicated { sys::CUDA_EXTERNAL_MEMORY_DEDICATED } else { 0 },
            reserved: [0; 16],
        };
        let mut ext = std::mem::MaybeUninit::uninit();
        // SAFETY: desc is fully initialised and describes an open fd; on success the driver owns it.
        unsafe { sys::cuImportExternalMemory(ext.as_mut_ptr(), &raw mut desc) }
            .result()
            .map_err(derr("importing shared memory (cuImportExternalMemory)"))?;
        // The descriptor is now the driver's.
        let _ = fd.into_raw_fd();
        // SAFETY: the call succeeded, so the handle is initialised.
        let ext = unsafe { ext.assume_init() };
        let mut bd = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC { offset: 0, size: bytes, flags: 0, reserved: [0; 16] };
        let mut ptr = 0;
        // SAFETY: ext is a live handle; the buffer covers the whole import.
        if let Err(e) = unsafe { sys::cuExternalMemoryGetMappedBuffer(&raw mut ptr, ext, &raw mut bd) }.result() {
            // SAFETY: ext is live and not mapped.
            unsafe { sys::cuDestroyExternalMemory(ext) };
            return Err(derr("mapping shared memory (cuExternalMemoryGetMappedBuffer)")(e));
        }
        Ok(SharedImport { ctx, ext, ptr, bytes })
    }

    /// Device address of the memory (for [`FrameTarget::Device`]).
    #[must_use]
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Size in bytes.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Read `rows` runs of `row_floats` floats, the first at float `offset`, each `pitch_floats`
    /// after the one before (one strided copy), once the work queued on the GPU is done: a
    /// sample of a frame written here, without a copy of the whole frame.
    ///
    /// # Errors
    /// Runs past the end of the memory, a pitch shorter than a run, or a driver error.
    pub fn read_rows(&self, offset: usize, row_floats: usize, rows: usize, pitch_floats: usize) -> Result<Vec<f32>, SolverError> {
        use cudarc::driver::sys;
        if rows == 0 || row_floats == 0 {
            return Ok(Vec::new());
        }
        let end = (rows - 1).checked_mul(pitch_floats).and_then(|x| x.checked_add(offset + row_floats));
        if pitch_floats < row_floats || end.is_none_or(|e| e as u64 * 4 > self.bytes) {
            return Err(SolverError::Backend(format!(
                "{rows} runs of {row_floats} floats every {pitch_floats} from {offset} do not fit {} bytes of shared memory",
                self.bytes
            )));
        }
        self.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        // The frame may still be being written on the solver's stream.
        self.ctx.synchronize().map_err(derr("waiting for the GPU"))?;
        let mut out = vec![0.0f32; rows * row_floats];
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: self.ptr + offset as u64 * 4,
            srcArray: std::ptr::null_mut(),
            srcPitch: pitch_floats * 4,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            dstHost: out.as_mut_ptr().cast(),
            dstDevice: 0,
            dstArray: std::ptr::null_mut(),
            dstPitch: row_floats * 4,
            WidthInBytes: row_floats * 4,
            Height: rows,
        };
        // SAFETY: the source runs lie inside the mapped memory (checked above) and the
        // destination holds rows * row_floats floats; the copy is synchronous.
        unsafe { sys::cuMemcpy2D_v2(&raw const copy) }.result().map_err(derr("reading shared memory"))?;
        Ok(out)
    }

    /// Fill the first `values.len()` floats from the host and wait (tests of the shared path).
    ///
    /// # Errors
    /// More floats than the memory holds, or a driver error.
    pub fn write_floats(&self, values: &[f32]) -> Result<(), SolverError> {
        use cudarc::driver::sys;
        if values.len() as u64 * 4 > self.bytes {
            return Err(SolverError::Backend(format!("{} floats do not fit {} bytes of shared memory", values.len(), self.bytes)));
        }
        self.ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
        // SAFETY: the destination holds at least that many bytes (checked above).
        unsafe { sys::cuMemcpyHtoD_v2(self.ptr, values.as_ptr().cast(), values.len() * 4) }
            .result()
            .map_err(derr("writing shared memory"))?;
        self.ctx.synchronize().map_err(derr("waiting for the GPU"))
    }
}

impl Drop for SharedImport {
    fn drop(&mut self) {
        use cudarc::driver::sys;
        let _ = self.ctx.synchronize();
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the pointer came from cuExternalMemoryGetMappedBuffer and is freed once, before
        // its external memory is destroyed.
        unsafe {
            let _ = sys::cuMemFree_v2(self.ptr);
            let _ = sys::cuDestroyExternalMemory(self.ext);
        }
    }
}
