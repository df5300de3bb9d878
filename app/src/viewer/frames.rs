//! Frames: the field data a snapshot carries to the renderer, and the few buffers they are
//! written into, reused frame after frame.
//!
//! A frame lies either in host memory (the CPU backend; CUDA without interop, copied through
//! page-locked memory) or in a buffer the renderer's GPU shares with the solver's (CUDA writes
//! the fields straight into Vulkan memory; the renderer's shaders read them there, with no
//! copy). Nothing is allocated per frame: a buffer is written again once no snapshot holds it
//! and the renderer no longer binds it (nor has commands in flight that read it).

use sim_core::fields::FieldKind;
use sim_core::frame::{FrameLayout, FrameRanges, FrameRegion, FrameTarget, HostFrame};
use sim_core::{Solver, SolverError};
use std::sync::Arc;

/// Most values an auto colour range is taken from (an even sample of the region beyond that).
pub const RANGE_SAMPLE: usize = 1 << 18;

/// Row alignment of shared frames (bytes). The shaders read any row pitch; 256-byte rows keep
/// each plane's start a multiple of 256 bytes, where every device binds storage buffers
/// (`min_storage_buffer_offset_alignment` is at most 256), and rows start on whole memory
/// transactions.
pub const SHARED_ROW_ALIGN: usize = 256;

/// Fields a frame carries in the viewer besides the velocity: the slice field, the isosurface's
/// field and the speed that colours it.
pub const VIEW_PLANES: usize = 3;

/// Fields a frame carries at most in the viewer: with the velocity components that move the
/// tracers and trace the streamlines.
pub const VIEW_PLANES_WITH_VELOCITY: usize = sim_core::frame::MAX_FRAME_FIELDS;

/// The velocity components, in the order the renderer takes them.
pub const VELOCITY: [FieldKind; 3] = [FieldKind::Ux, FieldKind::Uy, FieldKind::Uz];

/// Grids up to this many cells carry the velocity of every cell to the tracers; larger ones a
/// lattice of every 2nd cell (every 4th beyond [`VELOCITY_HALF_CELLS`]): a 256^3 grid's three
/// components at every cell are 200 MB a frame, on the lattice 25 MB, and a tracer between
/// lattice points moves with the trilinear mean of their velocities.
pub const VELOCITY_FULL_CELLS: usize = 1 << 22;
/// Grids up to this many cells carry the velocity of every 2nd cell.
pub const VELOCITY_HALF_CELLS: usize = 1 << 25;

/// Spacing of the cells whose velocity a 3D frame of `cells` cells carries for tracers.
#[must_use]
pub fn velocity_stride(cells: usize) -> usize {
    if cells <= VELOCITY_FULL_CELLS {
        1
    } else if cells <= VELOCITY_HALF_CELLS {
        2
    } else {
        4
    }
}

/// Greatest common divisor (the finest lattice two strides share).
pub fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The box of cells one cell deep in front of the first velocity inlet (past its absorbing
/// layer), across the inlet's open cells: where tracers seeded at the inlet are released.
#[must_use]
pub fn inlet_box(d: &sim_core::domain::Domain) -> Option<[[f32; 3]; 2]> {
    let i = d.inlets.first()?;
    let dims = d.lattice.dims();
    let mut lo = [0.0f32; 3];
    let mut hi = [0.0f32; 3];
    for a in 0..3 {
        let (first, last) = i.open[a];
        lo[a] = first as f32;
        hi[a] = (last + 1) as f32;
    }
    let a = i.axis;
    let depth = (i.sponge + 1).min(d.n[a].saturating_sub(1)) as i64;
    let layer = (i.layer as i64 + i64::from(i.inward) * depth).clamp(0, d.n[a] as i64 - 1) as f32;
    lo[a] = layer;
    hi[a] = layer + 1.0;
    if dims == 2 {
        lo[2] = 0.0;
        hi[2] = 1.0;
    }
    Some([lo, hi])
}

/// Which way frames travel (`--frame-path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FramePath {
    /// Shared GPU memory where the solver and the renderer can share it, else host memory.
    #[default]
    Auto,
    /// Shared GPU memory (CUDA writes into Vulkan memory); where it cannot be had, host memory
    /// and a message saying why.
    Shared,
    /// Host memory always (the staging path: page-locked copies on CUDA).
    Host,
}

/// A buffer shared by the renderer's GPU and the solver's: the CUDA mapping first, so it is
/// dropped before the Vulkan memory it maps.
pub struct SharedSlot {
    /// The CUDA side (device address to write to).
    pub import: sim_core::backend::cuda::SharedImport,
    /// The renderer's side.
    pub buffer: super::interop::SharedBuffer,
    /// GPU-side hand-over, where the renderer's device can share timeline semaphores with CUDA
    /// (one for all slots); `None`: host-synchronised.
    pub sync: Option<Arc<SharedSync>>,
    /// The value of [`SharedSync`]'s `read` timeline after which the renderer no longer reads
    /// this buffer (0: nothing to wait for).
    pub read_done: std::sync::atomic::AtomicU64,
}

/// Two timeline semaphores shared by the renderer's Vulkan device and CUDA: `written`, which the
/// solver's stream signals when a frame is in its buffer (the renderer's first submit that reads
/// it waits for it), and `read`, which the renderer's submits signal (the solver's stream waits
/// for the last submit that read a buffer before writing it again). Neither thread waits for the
/// other API: the waits are on the GPU. The CUDA imports come first, so they drop before the
/// Vulkan semaphores.
pub struct SharedSync {
    written_cuda: sim_core::backend::cuda::interop::SharedSemaphore,
    read_cuda: sim_core::backend::cuda::interop::SharedSemaphore,
    written: super::interop::SharedTimeline,
    read: super::interop::SharedTimeline,
    next_written: std::sync::atomic::AtomicU64,
    next_read: std::sync::atomic::AtomicU64,
}

impl SharedSync {
    /// Both timelines on `device` (opened by
    /// [`super::interop::open_device_with_semaphore_export`]), imported into CUDA.
    ///
    /// # Errors
    /// Why not (no semaphore export on this device, the CUDA import failed).
    pub fn new(device: &wgpu::Device) -> Result<SharedSync, String> {
        use sim_core::backend::cuda::interop::SharedSemaphore;
        let mut written = super::interop::SharedTimeline::new(device).map_err(|e| e.to_string())?;
        let mut read = super::interop::SharedTimeline::new(device).map_err(|e| e.to_string())?;
        let import = |t: &mut super::interop::SharedTimeline| -> Result<SharedSemaphore, String> {
            let fd = t.take_fd().ok_or("the timeline semaphore has no file descriptor")?;
            SharedSemaphore::import_timeline_fd(fd).map_err(|e| e.to_string())
        };
        let written_cuda = import(&mut written)?;
        let read_cuda = import(&mut read)?;
        Ok(SharedSync {
            written_cuda,
            read_cuda,
            written,
            read,
            next_written: std::sync::atomic::AtomicU64::new(1),
            next_read: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// Before the submit that first reads a frame written with value `written` (0: none): wait
    /// for it on the GPU, and signal the next `read` value when the submit is done. Returns that
    /// value.
    pub fn stage(&self, queue: &wgpu::Queue, written: u64) -> u64 {
        let r = self.next_read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.written.wait_signal_on_next_submit(queue, (written > 0).then_some(written), None);
        self.read.wait_signal_on_next_submit(queue, None, Some(r));
        r
    }
}

impl SharedSlot {
    /// Bytes a frame may use.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.buffer.size()
    }
}

impl std::fmt::Debug for SharedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedSlot({} bytes, {})", self.bytes(), if self.sync.is_some() { "GPU-side hand-over" } else { "host-synchronised" })
    }
}

/// Where a frame's data lies.
#[derive(Debug)]
pub enum FrameData {
    /// Host memory, in the layout of the frame.
    Host(HostFrame),
    /// A shared GPU buffer.
    Shared(Arc<SharedSlot>),
}

/// One frame: the fields, their layout and ranges, and where they lie.
#[derive(Debug)]
pub struct Frame {
    /// The fields, one plane each, in this order.
    pub kinds: Vec<FieldKind>,
    /// Where each value lies.
    pub layout: FrameLayout,
    /// Each field's range over the fluid cells.
    pub ranges: FrameRanges,
    /// The data.
    pub data: FrameData,
    /// The value the solver's stream signals on the shared `written` timeline once this frame
    /// is in its buffer (0: host-synchronised).
    pub written: u64,
}

/// Runs of a frame plane's floats read at once: `rows` runs of `len` floats, the first at
/// float `offset` of the plane, each `pitch` after the one before; `cell(r, k)` is the domain
/// cell of float `k` of run `r`.
struct Runs<'a> {
    offset: usize,
    len: usize,
    rows: usize,
    pitch: usize,
    cell: Box<dyn Fn(usize, usize) -> usize + 'a>,
}

impl Runs<'_> {
    /// Every `s`-th run, `s` chosen so that at most about `most` floats are read.
    fn thinned(mut self, most: usize) -> Self {
        let s = (self.rows * self.len).div_ceil(most.max(1)).max(1);
        if s > 1 {
            let cell = self.cell;
            self.rows = self.rows.div_ceil(s);
            self.pitch *= s;
            self.cell = Box::new(move |r, k| cell(r * s, k));
        }
        self
    }
}

impl Frame {
    /// The finite values of plane `plane` at the fluid cells (`solid` 0) of the region of a
    /// frame in GPU memory, for its percentile colour range, read with a few strided copies
    /// rather than a copy of the frame: every cell of the slice planes it holds (an even
    /// choice of their rows beyond [`RANGE_SAMPLE`] cells), or an even choice of
    /// whole rows of a frame of every cell. `None` for a host frame, or a lattice without
    /// planes (an isosurface alone: its colours have their own range).
    ///
    /// # Errors
    /// The driver's, reading the memory.
    pub fn device_sample(&self, plane: usize, solid: &[u8]) -> Result<Option<Vec<f32>>, SolverError> {
        let FrameData::Shared(slot) = &self.data else { return Ok(None) };
        let l = &self.layout;
        let n = l.n;
        let most = RANGE_SAMPLE;
        let idx = move |x: usize, y: usize, z: usize| x + n[0] * (y + n[1] * z);
        let mut runs: Vec<Runs> = Vec::new();
        match l.region.planes() {
            None => runs.push(
                Runs {
                    offset: 0,
                    len: n[0],
                    rows: n[1] * n[2],
                    pitch: l.row_pitch,
                    cell: Box::new(move |r, k| idx(k, r % n[1], r / n[1])),
                }
                .thinned(most),
            ),
            Some(k) if k.iter().all(Option::is_none) => return Ok(None),
            Some(k) => {
                for (a, i) in (0..3).filter_map(|a| k[a].map(|i| (a, i.min(n[a] - 1)))) {
                    let r = match a {
                        0 => Runs {
                            offset: i,
                            len: 1,
                            rows: n[1] * n[2],
                            pitch: l.row_pitch,
                            cell: Box::new(move |r, _| idx(i, r % n[1], r / n[1])),
                        },
                        1 => Runs {
                            offset: l.row_pitch * i,
                            len: n[0],
                            rows: n[2],
                            pitch: l.row_pitch * n[1],
                            cell: Box::new(move |r, k| idx(k, i, r)),
                        },
                        _ => Runs {
                            offset: l.row_pitch * n[1] * i,
                            len: n[0],
                            rows: n[1],
                            pitch: l.row_pitch,
                            cell: Box::new(move |r, k| idx(k, r, i)),
                        },
                    };
                    runs.push(r.thinned(most));
                }
            }
        }
        let mut out = Vec::new();
        for r in runs {
            let values = slot.import.read_rows(plane * l.plane_floats() + r.offset, r.len, r.rows, r.pitch)?;
            for (j, v) in values.into_iter().enumerate() {
                let c = (r.cell)(j / r.len, j % r.len);
                if v.is_finite() && solid.get(c).is_some_and(|&s| s == 0) {
                    out.push(v);
                }
            }
        }
        Ok(Some(out))
    }

    /// Plane of `kind`, if the frame has it.
    #[must_use]
    pub fn plane(&self, kind: FieldKind) -> Option<usize> {
        self.kinds.iter().position(|&k| k == kind)
    }

    /// Range of `kind` over the fluid cells.
    #[must_use]
    pub fn range(&self, kind: FieldKind) -> Option<(f32, f32)> {
        self.plane(kind).and_then(|p| self.ranges.min_max.get(p).copied())
    }

    /// The field `kind` in the domain's cell order, when the frame is in host memory.
    #[must_use]
    pub fn host_values(&self, kind: FieldKind) -> Option<&[f32]> {
        let p = self.plane(kind)?;
        match &self.data {
            FrameData::Host(h) if self.layout.is_tight() => {
                h.floats().get(p * self.layout.plane_floats()..(p + 1) * self.layout.plane_floats())
            }
            _ => None,
        }
    }

    /// Whether the data is in a shared GPU buffer.
    #[must_use]
    pub fn is_shared(&self) -> bool {
        matches!(self.data, FrameData::Shared(_))
    }
}

/// The frames the solver thread writes, reused once nobody holds them.
#[derive(Default)]
pub struct FramePool {
    frames: Vec<Arc<Frame>>,
    shared: Vec<Arc<SharedSlot>>,
}

/// Frames in flight at most: the one the window shows, the one in the mailbox, the one being
/// written.
pub const POOL: usize = 3;

impl FramePool {
    /// Use these shared buffers from now on (none: host memory).
    pub fn set_shared(&mut self, slots: Vec<Arc<SharedSlot>>) {
        self.shared = slots;
        self.frames.retain(|f| !f.is_shared());
    }

    /// Write the fields `kinds` of the solver's state in `region` into a free frame: a shared buffer when
    /// there is a free one that fits and the solver can write it, else host memory. `None` when
    /// every frame is still held (the caller publishes later).
    ///
    /// # Errors
    /// The solver's errors.
    pub fn write(&mut self, solver: &mut dyn Solver, kinds: &[FieldKind], region: FrameRegion) -> Result<Option<Arc<Frame>>, SolverError> {
        let n = solver.domain().n;
        let shared_layout = FrameLayout::new(n, kinds.len(), SHARED_ROW_ALIGN).with_region(region);
        let use_shared = solver.shares_device_memory() && self.shared.iter().any(|s| s.bytes() >= shared_layout.bytes() as u64);
        if use_shared {
            // Every shared buffer gets a frame of its own; a frame is free when no snapshot and no
            // GPU copy holds it (or its buffer).
            for s in &self.shared {
                if s.bytes() >= shared_layout.bytes() as u64
                    && !self.frames.iter().any(|f| matches!(&f.data, FrameData::Shared(x) if Arc::ptr_eq(x, s)))
                {
                    self.frames.push(Arc::new(Frame {
                        kinds: Vec::new(),
                        layout: shared_layout,
                        ranges: FrameRanges::default(),
                        data: FrameData::Shared(Arc::clone(s)),
                        written: 0,
                    }));
                }
            }
            for f in &mut self.frames {
                let Some(fr) = Arc::get_mut(f) else { continue };
                let FrameData::Shared(slot) = &fr.data else { continue };
                if Arc::strong_count(slot) > 2 || slot.bytes() < shared_layout.bytes() as u64 {
                    continue;
                }
                let ptr = slot.import.device_ptr();
                let bytes = slot.bytes() as usize;
                let written = slot.sync.as_ref().map_or(0, |s| s.next_written.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                let sync = slot.sync.as_ref().map(|s| sim_core::frame::FrameSync {
                    read: &s.read_cuda,
                    read_value: slot.read_done.load(std::sync::atomic::Ordering::Acquire),
                    written: &s.written_cuda,
                    written_value: written,
                });
                fr.ranges = solver.write_frame(kinds, &shared_layout, FrameTarget::Device { ptr, bytes, sync })?;
                fr.written = written;
                fr.kinds = kinds.to_vec();
                fr.layout = shared_layout;
                return Ok(Some(Arc::clone(f)));
            }
            return Ok(None);
        }
        let layout = FrameLayout::new(n, kinds.len(), 1).with_region(region);
        let free = self.frames.iter().position(|f| !f.is_shared() && Arc::strong_count(f) == 1);
        let i = match free {
            Some(i) => i,
            None if self.frames.iter().filter(|f| !f.is_shared()).count() < POOL => {
                self.frames.push(Arc::new(Frame {
                    kinds: Vec::new(),
                    layout,
                    ranges: FrameRanges::default(),
                    data: FrameData::Host(solver.host_frame(layout.floats())),
                    written: 0,
                }));
                self.frames.len() - 1
            }
            None => return Ok(None),
        };
        let Some(fr) = Arc::get_mut(&mut self.frames[i]) else { return Ok(None) };
        if let FrameData::Host(h) = &mut fr.data {
            if h.floats().len() < layout.floats() {
                *h = solver.host_frame(layout.floats());
            }
            fr.ranges = solver.write_frame(kinds, &layout, FrameTarget::Host(h.floats_mut()))?;
        }
        fr.kinds = kinds.to_vec();
        fr.layout = layout;
        fr.written = 0;
        Ok(Some(Arc::clone(&self.frames[i])))
    }
}

/// What [`upload_snapshot`] did: problems that left the field drawn (an isosurface that could
/// not be uploaded), and the shared buffers the renderer bound before and no longer binds (hand
/// them to [`Uploaded::release`] right after the next submit).
#[must_use]
pub struct Uploaded {
    /// Messages for the status line.
    pub problems: Vec<String>,
    hold: Vec<super::render::Keep>,
    /// The `read` value the next submit signals (staged by the upload of a shared frame with
    /// GPU-side hand-over): the buffers released are free once it is reached.
    read_signal: Option<u64>,
}

impl Uploaded {
    /// Nothing new held, no problems (an upload through the queue alone); the shared buffers
    /// the renderer stopped binding go with it, to be released after the next submit.
    pub fn released_by(fr: &mut super::render::FieldRenderer) -> Uploaded {
        Uploaded { problems: Vec::new(), hold: fr.take_released(), read_signal: None }
    }

    /// After the next submit: the solver thread may write the shared buffers bound before once
    /// the GPU has run every command submitted so far, the last that could read them (no wait
    /// here).
    ///
    /// With GPU-side hand-over (the submit signalled the `read` timeline), buffers go back at
    /// once, marked with the value the solver's stream waits for before writing them again.
    pub fn release(self, queue: &wgpu::Queue) {
        let mut later = Vec::new();
        for k in self.hold {
            match (self.read_signal, Arc::clone(&k).downcast::<SharedSlot>()) {
                (Some(r), Ok(slot)) if slot.sync.is_some() => slot.read_done.store(r, std::sync::atomic::Ordering::Release),
                _ => later.push(k),
            }
        }
        if !later.is_empty() {
            queue.on_submitted_work_done(move || drop(later));
        }
    }
}

/// What of a frame the renderer is given: the frame, the field the slices show, the grid and
/// the isosurface's field when one is on.
#[derive(Clone, Copy)]
pub struct FrameView<'a> {
    /// The frame.
    pub frame: &'a Frame,
    /// The field the slices show.
    pub field: FieldKind,
    /// Cells per axis.
    pub size: [usize; 3],
    /// The isosurface's field, when an isosurface is on.
    pub iso: Option<FieldKind>,
    /// Whether the velocity components go too (tracers, streamlines).
    pub velocity: bool,
}

/// Give a snapshot's frame to the renderer: the slices' field, the isosurface's data when the
/// snapshot has it, and `solid` when given. Host frames are written into the renderer's storage
/// buffers through the queue; shared frames are bound where they lie (no copy), and held by the
/// renderer as long as it binds them.
///
/// # Errors
/// The field itself could not be uploaded (the message says why).
pub fn upload_snapshot(
    fr: &mut super::render::FieldRenderer,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    snap: FrameView<'_>,
    solid: Option<&[u8]>,
) -> Result<Uploaded, String> {
    let frame = snap.frame;
    let mut problems = Vec::new();
    let mut read_signal = None;
    let field = frame.plane(snap.field).ok_or_else(|| format!("the frame lacks {}", snap.field.name()))?;
    let iso = snap.iso.and_then(|kind| Some((kind, frame.plane(kind)?, frame.plane(FieldKind::Speed)?)));
    if snap.iso.is_some() && iso.is_none() {
        problems.push("isosurface: its fields are missing from the frame".into());
    }
    let velocity = VELOCITY.map(|k| frame.plane(k));
    let velocity = snap.velocity.then_some(velocity).and_then(|v| Some([v[0]?, v[1]?, v[2]?]));
    match &frame.data {
        FrameData::Host(_) => {
            let values = frame.host_values(snap.field).ok_or("the frame's host data is not laid out for upload")?;
            fr.upload(device, queue, snap.size, values, solid).map_err(|e| e.to_string())?;
            if let Some((kind, _, _)) = iso {
                match (frame.host_values(kind), frame.host_values(FieldKind::Speed)) {
                    (Some(v), Some(sp)) => match fr.upload_iso(device, queue, snap.size, kind, v, sp) {
                        Ok(()) => fr.set_iso_lattice(frame.layout.region.lattice() as u32),
                        Err(e) => problems.push(format!("isosurface: {e}")),
                    },
                    _ => problems.push("isosurface: its fields are missing from the frame".into()),
                }
            }
            let values = velocity.and_then(|_| {
                let [x, y, z] = VELOCITY.map(|k| frame.host_values(k));
                Some([x?, y?, z?])
            });
            if let Err(e) = fr.upload_velocity(device, queue, snap.size, values, frame.layout.region.lattice() as u32) {
                problems.push(format!("tracers: {e}"));
            }
        }
        FrameData::Shared(slot) => {
            // The renderer holds the slot while it binds it: the solver thread writes the buffer
            // again only once it is released and the GPU is done with it.
            let keep: super::render::Keep = Arc::clone(slot) as _;
            fr.upload_from_buffer(device, queue, slot.buffer.buffer(), &frame.layout, field, iso, velocity, solid, Some(keep))
                .map_err(|e| e.to_string())?;
            // The next submit reads this frame: on the GPU it waits until the solver has written
            // it, and it tells the solver when the buffers bound before are free.
            if let Some(s) = &slot.sync {
                read_signal = Some(s.stage(queue, frame.written));
            }
        }
    }
    Ok(Uploaded { problems, hold: fr.take_released(), read_signal })
}

/// How shared frames change hands between the solver and the renderer, for the frame path's
/// note.
#[must_use]
pub fn hand_over_note(slots: &[Arc<SharedSlot>]) -> &'static str {
    if slots.iter().all(|s| s.sync.is_some()) {
        "handed over on the GPU through timeline semaphores"
    } else {
        "host-synchronised: this device shares no timeline semaphores with CUDA"
    }
}

/// Shared buffers for frames of a grid `n` (room for `planes` fields each: [`VIEW_PLANES`], or
/// [`VIEW_PLANES_WITH_VELOCITY`] for a view with tracers) on the renderer's device, imported
/// into CUDA: `count` of them. Works where the renderer runs on Vulkan on the same GPU as CUDA
/// device 0.
///
/// # Errors
/// Why interop cannot be had here (other backend, other GPU, missing extension, driver refusal).
pub fn make_shared_slots(device: &wgpu::Device, n: [usize; 3], count: usize, planes: usize) -> Result<Vec<Arc<SharedSlot>>, String> {
    use super::interop::{device_uuid, interop_support, SharedBuffer};
    interop_support(device).map_err(|e| e.to_string())?;
    let cuda = sim_core::backend::cuda::device_uuid().ok_or("no CUDA device to share memory with")?;
    let vk = device_uuid(device).ok_or("the renderer's GPU has no UUID to match with CUDA's")?;
    if cuda != vk {
        return Err("the renderer runs on another GPU than CUDA device 0".into());
    }
    let bytes = FrameLayout::new(n, planes.clamp(1, VIEW_PLANES_WITH_VELOCITY), SHARED_ROW_ALIGN).bytes() as u64;
    // Timeline semaphores where the device can export them; host-synchronised otherwise.
    let sync = match SharedSync::new(device) {
        Ok(s) => Some(Arc::new(s)),
        Err(why) => {
            tracing::info!("shared frames are host-synchronised: {why}");
            None
        }
    };
    (0..count)
        .map(|i| {
            let mut buffer = SharedBuffer::new(device, bytes, &format!("shared frame {i}")).map_err(|e| e.to_string())?;
            let fd = buffer.take_fd().ok_or("the shared buffer has no file descriptor")?;
            let import =
                sim_core::backend::cuda::SharedImport::import_fd(fd, buffer.alloc_size(), buffer.dedicated()).map_err(|e| e.to_string())?;
            Ok(Arc::new(SharedSlot { import, buffer, sync: sync.clone(), read_done: std::sync::atomic::AtomicU64::new(0) }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    //! The shared path end to end on a GPU host (CUDA writes, wgpu reads back), the staging
    //! path beside it, and frames of a running CUDA solver both ways. Skipped with a message
    //! where there is no CUDA device or no Vulkan adapter on its GPU.
    use super::*;
    use crate::viewer::headless::{gpu, Gpu};

    /// The CUDA GPU and its wgpu adapter. These tests are ignored by default (they need an
    /// NVIDIA GPU) and fail where they are asked to run without one.
    fn cuda_gpu(test: &str) -> Gpu {
        if let Err(e) = sim_core::backend::cuda::probe() {
            panic!("{test} needs an NVIDIA GPU: {e}");
        }
        gpu().unwrap_or_else(|e| panic!("{test} needs a GPU adapter: {e}"))
    }

    fn read_back(g: &Gpu, src: &wgpu::Buffer, bytes: u64) -> Vec<f32> {
        let dst = g.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = g.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        enc.copy_buffer_to_buffer(src, 0, &dst, 0, bytes);
        g.queue.submit([enc.finish()]);
        dst.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("map"));
        g.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
        let view = dst.slice(..).get_mapped_range().expect("mapped range");
        let v = bytemuck::cast_slice::<u8, f32>(&view[..]).to_vec();
        drop(view);
        dst.unmap();
        v
    }

    /// A 40x24x20 channel with an inlet, an outlet and a sphere, on the CUDA backend.
    fn sphere_channel() -> (sim_core::scene::LoadedScene, Box<dyn Solver>) {
        let text = "[domain]\nsize = [40, 24, 20]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.05, 0.0, 0.0] }\nx_max = { type = \"outlet\" }\n[[obstacles]]\nshape = \"sphere\"\ncenter = [12, 12, 10]\nradius = 4\n";
        let ls = sim_core::scene::from_str(text, "test", std::path::PathBuf::from("."), &[]).expect("scene");
        let solver = crate::solvers::build_solver(&ls, &crate::BackendChoice::Cuda.into()).expect("CUDA solver");
        (ls, solver)
    }

    fn pattern(k: usize) -> Vec<f32> {
        (0..k).map(|i| (i % 1_000_003) as f32 * 0.5 - 7.0).collect()
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (CUDA): GPU hosts run it with --ignored (scripts/stage-gpu.sh)"]
    fn gpu_shared_buffers_carry_cuda_writes_to_wgpu() {
        let g = cuda_gpu("gpu_shared_buffers_carry_cuda_writes_to_wgpu");
        // One 256^2 slice up to a 512^3 volume (the first plane of a frame buffer).
        for n in [[256, 256, 1], [100, 30, 7], [64, 64, 64], [256, 256, 256], [512, 512, 512]] {
            let slots = make_shared_slots(&g.device, n, 1, VIEW_PLANES).expect("shared buffers on the CUDA GPU");
            let layout = FrameLayout::new(n, 1, SHARED_ROW_ALIGN);
            let want = pattern(layout.floats());
            slots[0].import.write_floats(&want).expect("CUDA writes");
            let got = read_back(&g, slots[0].buffer.buffer(), layout.bytes() as u64);
            assert!(got == want, "{n:?}: wgpu reads what CUDA wrote");
            // The staging path: CUDA memory to page-locked host memory, then the queue.
            let ctx = cudarc::driver::CudaContext::new(0).expect("CUDA");
            let stream = ctx.default_stream();
            let dev = stream.clone_htod(&want).expect("upload");
            // SAFETY: read only after the synchronising copy below.
            let mut pinned = unsafe { ctx.alloc_pinned::<f32>(want.len()) }.expect("pinned");
            stream.memcpy_dtoh(&dev, &mut pinned).expect("copy");
            stream.synchronize().expect("sync");
            let buf = g.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: layout.bytes() as u64,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            g.queue.write_buffer(&buf, 0, bytemuck::cast_slice(pinned.as_slice().expect("pinned")));
            assert!(read_back(&g, &buf, layout.bytes() as u64) == want, "{n:?}: the staging path carries the same values");
            eprintln!("shared and staging buffers agree at {n:?} ({} MiB)", layout.bytes() >> 20);
        }
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (CUDA): GPU hosts run it with --ignored (scripts/stage-gpu.sh)"]
    fn gpu_solver_frames_agree_shared_and_host() {
        let g = cuda_gpu("gpu_solver_frames_agree_shared_and_host");
        let (ls, mut solver) = sphere_channel();
        solver.step(100).expect("steps");
        let kinds = [FieldKind::Speed, FieldKind::Vorticity, FieldKind::Q];
        let mut host = FramePool::default();
        let h = host.write(solver.as_mut(), &kinds, FrameRegion::All).expect("host frame").expect("a free frame");
        assert!(!h.is_shared());
        let mut shared = FramePool::default();
        shared.set_shared(make_shared_slots(&g.device, ls.derived.size, POOL, VIEW_PLANES).expect("shared buffers"));
        let s = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("shared frame").expect("a free frame");
        let FrameData::Shared(slot) = &s.data else { panic!("the frame is not in a shared buffer") };
        assert_eq!(h.ranges, s.ranges, "same ranges both ways");
        let back = read_back(&g, slot.buffer.buffer(), s.layout.bytes() as u64);
        for (k, kind) in kinds.iter().enumerate() {
            assert_eq!(s.layout.unpad(&back, k), h.host_values(*kind).expect("host values"), "{kind:?}: same values both ways");
        }
        // The colour range's sample read from GPU memory holds the values the host frame's does
        // (a grid this small: every fluid cell), for a whole frame and for slice planes.
        let solid: Vec<u8> = solver.domain().flags.iter().map(|&f| u8::from(sim_core::domain::is_solid(f))).collect();
        let sorted = |mut v: Vec<f32>| {
            v.sort_by(f32::total_cmp);
            v
        };
        let FrameData::Host(hf) = &h.data else { panic!("host frame") };
        let from_host = sorted(crate::viewer::legend::frame_sample(&h.layout, hf.floats(), 1, &solid));
        assert_eq!(sorted(s.device_sample(1, &solid).expect("read").expect("a sample")), from_host, "whole frame");
        drop((h, s));
        let n = ls.derived.size;
        let planes = FrameRegion::Planes([Some(n[0] / 3), Some(n[1] / 2), Some(n[2] - 1)]);
        let hp = host.write(solver.as_mut(), &kinds, planes).expect("host frame").expect("a free frame");
        let sp = shared.write(solver.as_mut(), &kinds, planes).expect("shared frame").expect("a free frame");
        let FrameData::Host(hf) = &hp.data else { panic!("host frame") };
        let from_host = sorted(crate::viewer::legend::frame_sample(&hp.layout, hf.floats(), 0, &solid));
        assert!(!from_host.is_empty());
        assert_eq!(sorted(sp.device_sample(0, &solid).expect("read").expect("a sample")), from_host, "slice planes");
        drop((hp, sp));
        let s = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("shared frame").expect("a free frame");
        // Three frames at most are in flight; a held shared buffer is not written again.
        let s2 = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").expect("a second frame");
        let s3 = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").expect("a third frame");
        assert!(shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").is_none(), "all three shared buffers are held");
        drop((s, s2));
        assert!(shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").is_some(), "a released buffer is written again");
        drop(s3);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (CUDA): GPU hosts run it with --ignored (scripts/stage-gpu.sh)"]
    fn gpu_frames_hand_over_on_the_gpu_through_timeline_semaphores() {
        // On a device that shares timeline semaphores with CUDA, frames go round the three
        // shared buffers with the waits on the GPU: the solver's stream waits for the renderer's
        // last read of a buffer before writing it again, and the renderer's submit waits for the
        // solver's write. Every frame read back equals the host frame of the same state.
        let g = cuda_gpu("gpu_frames_hand_over_on_the_gpu_through_timeline_semaphores");
        let (ls, mut solver) = sphere_channel();
        solver.fuse_frame_fields(true);
        let slots = make_shared_slots(&g.device, ls.derived.size, POOL, VIEW_PLANES).expect("shared buffers");
        let sync =
            Arc::clone(slots[0].sync.as_ref().expect("this device shares timeline semaphores with CUDA (VK_KHR_external_semaphore_fd)"));
        let mut shared = FramePool::default();
        shared.set_shared(slots);
        let mut host = FramePool::default();
        let kinds = [FieldKind::Speed, FieldKind::Density];
        let (mut last_w, mut last_r) = (0, 0);
        for i in 0..12 {
            solver.step(3).expect("steps");
            let f = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").expect("a free shared buffer");
            let h = host.write(solver.as_mut(), &kinds, FrameRegion::All).expect("frame").expect("a free host frame");
            let FrameData::Shared(slot) = &f.data else { panic!("frame {i} is not in a shared buffer") };
            assert!(f.written > last_w, "frame {i}: written values grow");
            if i >= POOL {
                assert!(slot.read_done.load(std::sync::atomic::Ordering::Acquire) > 0, "frame {i}: its buffer was read before");
            }
            let r = sync.stage(&g.queue, f.written);
            let back = read_back(&g, slot.buffer.buffer(), f.layout.bytes() as u64);
            slot.read_done.store(r, std::sync::atomic::Ordering::Release);
            for (k, kind) in kinds.iter().enumerate() {
                assert_eq!(f.layout.unpad(&back, k), h.host_values(*kind).expect("host values"), "frame {i} {kind:?}");
            }
            (last_w, last_r) = (f.written, r);
        }
        assert_eq!(sync.written.value().expect("value"), last_w, "the solver signalled every frame");
        assert_eq!(sync.read.value().expect("value"), last_r, "the renderer signalled every read");
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (CUDA): GPU hosts run it with --ignored (scripts/stage-gpu.sh)"]
    fn gpu_shared_frames_draw_like_host_frames() {
        use crate::viewer::camera::Camera;
        use crate::viewer::colormap::ColorMap;
        use crate::viewer::render::{read_texture, FieldRenderer, IsoView, Keep, ViewParams};
        let g = cuda_gpu("gpu_shared_frames_draw_like_host_frames");
        // 40 cells along x: the shared frame's rows are padded to 64 floats.
        let (ls, mut solver) = sphere_channel();
        solver.step(200).expect("steps");
        let n = ls.derived.size;
        let kinds = [FieldKind::Speed, FieldKind::Vorticity];
        let mut host = FramePool::default();
        let h = host.write(solver.as_mut(), &kinds, FrameRegion::All).expect("host frame").expect("a free frame");
        let mut shared = FramePool::default();
        shared.set_shared(make_shared_slots(&g.device, n, POOL, VIEW_PLANES).expect("shared buffers"));
        let s = shared.write(solver.as_mut(), &kinds, FrameRegion::All).expect("shared frame").expect("a free frame");
        let FrameData::Shared(slot) = &s.data else { panic!("the frame is not in a shared buffer") };
        assert!(!s.layout.is_tight());
        let (lo, hi) = h.range(FieldKind::Vorticity).expect("vorticity range");
        let mut p =
            ViewParams::plain(ColorMap::Turbo, h.range(FieldKind::Speed).expect("range"), [20, 12, 10], [true; 3], Camera::default());
        p.iso = Some(IsoView { kind: FieldKind::Vorticity, threshold: lo + 0.3 * (hi - lo), color_range: (0.0, 0.06) });
        let solid = vec![0u8; n.iter().product()];
        let size = [320, 240];
        let draw = |fr: &mut FieldRenderer| {
            for _ in 0..4 {
                let mut enc = g.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                fr.render(&g.device, &g.queue, &mut enc, size, &p);
                g.queue.submit([enc.finish()]);
                fr.poll(&g.device, true);
                if !fr.needs_redraw() {
                    break;
                }
            }
            let (tex, _) = fr.target().expect("target");
            (read_texture(&g.device, &g.queue, tex, size).expect("read back"), fr.iso_stats())
        };
        let mut from_host = FieldRenderer::new(&g.device, &g.queue);
        let speed = h.host_values(FieldKind::Speed).expect("speed");
        from_host.upload(&g.device, &g.queue, n, speed, Some(&solid)).expect("upload");
        from_host
            .upload_iso(&g.device, &g.queue, n, FieldKind::Vorticity, h.host_values(FieldKind::Vorticity).expect("vorticity"), speed)
            .expect("upload");
        let mut in_place = FieldRenderer::new(&g.device, &g.queue);
        let keep: Keep = Arc::clone(slot) as _;
        let iso = Some((FieldKind::Vorticity, 1, 0));
        in_place
            .upload_from_buffer(&g.device, &g.queue, slot.buffer.buffer(), &s.layout, 0, iso, None, Some(&solid), Some(keep))
            .expect("bind");
        let (a, sa) = draw(&mut from_host);
        let (b, sb) = draw(&mut in_place);
        assert!(sa.is_some_and(|st| st.triangles() > 0), "{sa:?}");
        assert_eq!(sa, sb, "the same isosurface both ways");
        let differ = a.chunks(4).zip(b.chunks(4)).filter(|(x, y)| x != y).count();
        assert!(differ == 0, "{differ} pixels differ between the host frame and the shared frame read in place");
    }
}
