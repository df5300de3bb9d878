//! GPU timestamps around the viewer's GPU work in a frame: the marching-cubes compute passes and
//! the draw pass (split into the slices and the surfaces where the device writes timestamps
//! inside passes). Frames copy nothing on the GPU any more: a frame in shared GPU memory is read
//! in place by the shaders (such frames are counted, and the line says "copy 0"), a host frame
//! is written through the queue (not timed). The timestamps are resolved into a buffer that is
//! mapped asynchronously and read one or more frames later; a frame that finds no free slot is
//! not timed (a sample dropped, never a wait). One frame in [`SAMPLE_EVERY`] is timed: the
//! timestamps themselves cost a GPU shared with a compute solver.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Frames in flight at most (each with its own queries and read-back buffer).
const SLOTS: usize = 4;
/// One frame in this many is timed. Timestamps are not free where a compute context shares the
/// GPU: on an H100 beside the running CUDA solver, timing every frame of a slice view at 60 FPS
/// cost the solver 2.4 % of its throughput (-6.4 % against -4.0 % untimed; 2026-11-22).
pub const SAMPLE_EVERY: u64 = 16;
/// Timestamps one frame may write (two per span timed).
const QUERIES: u32 = 16;

/// The features the viewer asks a device for where the adapter has them: timestamps around
/// passes, and inside passes (the draw's split).
#[must_use]
pub fn wanted_features(adapter: wgpu::Features) -> wgpu::Features {
    adapter & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
}

/// Spans timed.
const SPANS: usize = 5;

/// What a span of GPU work is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuSpan {
    /// Copies of a frame's fields in the frame's commands. None is left: shared frames are read
    /// in place, host frames are written through the queue (outside the frame's commands, not
    /// timed). Kept for the line's "copy" entry, which says which of these it was.
    Copy = 0,
    /// Marching cubes: the isosurface's and the solid surfaces' compute passes.
    Iso = 1,
    /// The render pass that draws the view.
    Draw = 2,
    /// Part of `Draw`: the slice planes (timestamps inside the pass).
    DrawSlices = 3,
    /// Part of `Draw`: the isosurface and the solid surfaces.
    DrawSurfaces = 4,
}

impl GpuSpan {
    /// Every span, in the order of their index.
    pub const ALL: [GpuSpan; SPANS] = [GpuSpan::Copy, GpuSpan::Iso, GpuSpan::Draw, GpuSpan::DrawSlices, GpuSpan::DrawSurfaces];

    /// Short name (Stats and the bench).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            GpuSpan::Copy => "copy",
            GpuSpan::Iso => "iso",
            GpuSpan::Draw => "draw",
            GpuSpan::DrawSlices => "slices",
            GpuSpan::DrawSurfaces => "surfaces",
        }
    }

    /// Whether the span is part of the draw (shown inside the draw's entry).
    #[must_use]
    pub fn in_draw(self) -> bool {
        matches!(self, GpuSpan::DrawSlices | GpuSpan::DrawSurfaces)
    }
}

/// GPU milliseconds of each span ([`GpuSpan`] order).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTimes {
    /// The last frame timed that had the span (a frame without new data has no copy and no
    /// marching cubes); `None`: not measured yet.
    pub last_ms: [Option<f64>; SPANS],
    /// Sum of the span's times over the frames timed since the last reset.
    pub sum_ms: [f64; SPANS],
    /// Frames timed that had the span, since the last reset.
    pub count: [u64; SPANS],
    /// Frames timed since the last reset.
    pub frames: u64,
    /// Frames not timed since the last reset (every slot still in flight).
    pub dropped: u64,
    /// Frames timed since the last reset whose fields the shaders read where they lie (a buffer
    /// shared with the solver): nothing copied.
    pub in_place: u64,
}

impl GpuTimes {
    /// Mean milliseconds of a span over the frames that had it.
    #[must_use]
    pub fn mean_ms(&self, span: GpuSpan) -> Option<f64> {
        let i = span as usize;
        (self.count[i] > 0).then(|| self.sum_ms[i] / self.count[i] as f64)
    }
}

/// Where GPU timing stands (what Stats shows).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum GpuTiming {
    /// No renderer has reported yet.
    #[default]
    Unknown,
    /// The adapter has no timestamp queries.
    Unsupported,
    /// Times measured so far.
    Times(GpuTimes),
}

/// State of a slot's read-back: 0 waiting, 1 mapped, 2 failed (as the surfaces' counters).
type MapFlag = Arc<AtomicU8>;

struct Slot {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// The spans of the frame and the first of their two queries (begin; end is the next).
    spans: Vec<(GpuSpan, u32)>,
    used: u32,
    /// Which frame the slot holds (the newest result wins `last_ms`).
    frame: u64,
    in_flight: Option<MapFlag>,
}

/// Timestamps of the frames in flight and what they measured.
pub struct GpuTimer {
    slots: Vec<Slot>,
    /// The slot this frame records into.
    current: Option<usize>,
    frame: u64,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    inside_passes: bool,
    /// One frame in `every` is timed.
    every: u64,
    /// Frame of each span's `last_ms`.
    last_frame: [u64; SPANS],
    times: GpuTimes,
}

impl GpuTimer {
    /// A timer, or `None` where the device has no timestamp queries.
    #[must_use]
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<GpuTimer> {
        let features = device.features();
        if !features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return None;
        }
        let bytes = u64::from(QUERIES) * u64::from(wgpu::QUERY_SIZE);
        let slots = (0..SLOTS)
            .map(|_| Slot {
                queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("gpu timer"),
                    ty: wgpu::QueryType::Timestamp,
                    count: QUERIES,
                }),
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpu timer resolve"),
                    size: bytes,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                readback: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpu timer readback"),
                    size: bytes,
                    usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
                    mapped_at_creation: false,
                }),
                spans: Vec::new(),
                used: 0,
                frame: 0,
                in_flight: None,
            })
            .collect();
        let inside_passes = features.contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
        Some(GpuTimer {
            slots,
            current: None,
            frame: 0,
            period_ns: f64::from(queue.get_timestamp_period()),
            inside_passes,
            every: SAMPLE_EVERY,
            last_frame: [0; SPANS],
            times: GpuTimes::default(),
        })
    }

    /// Time one frame in `every` from now on (1: every frame).
    pub fn sample_every(&mut self, every: u64) {
        self.every = every.max(1);
    }

    /// Start a frame (its commands go into one encoder, ended by [`GpuTimer::end_frame`]):
    /// timed if it is one of the frames sampled (the first, then one in `every`) and a slot is
    /// free (else counted as dropped). A frame begun and never ended (its encoder dropped) is
    /// forgotten here.
    pub fn begin_frame(&mut self) {
        if let Some(i) = self.current.take() {
            self.slots[i].spans.clear();
            self.slots[i].used = 0;
        }
        self.frame += 1;
        if (self.frame - 1) % self.every != 0 {
            return;
        }
        match self.slots.iter().position(|s| s.in_flight.is_none()) {
            Some(i) => {
                let s = &mut self.slots[i];
                s.spans.clear();
                s.used = 0;
                s.frame = self.frame;
                self.current = Some(i);
            }
            None => self.times.dropped += 1,
        }
    }

    /// Two queries for a span of this frame: the query set and the first index. `None` when no
    /// frame is being timed or its queries are used up.
    fn alloc(&mut self, span: GpuSpan) -> Option<(&wgpu::QuerySet, u32)> {
        let s = &mut self.slots[self.current?];
        if s.used + 2 > QUERIES {
            return None;
        }
        let first = s.used;
        s.used += 2;
        s.spans.push((span, first));
        Some((&s.queries, first))
    }

    /// Timestamp writes for a compute pass of `span` (pass them to the pass's descriptor: the
    /// queries must be written, so ask only for a pass that is begun).
    pub fn compute_writes(&mut self, span: GpuSpan) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let (query_set, i) = self.alloc(span)?;
        Some(wgpu::ComputePassTimestampWrites { query_set, beginning_of_pass_write_index: Some(i), end_of_pass_write_index: Some(i + 1) })
    }

    /// Timestamp writes for a render pass of `span` (as [`GpuTimer::compute_writes`]).
    pub fn render_writes(&mut self, span: GpuSpan) -> Option<wgpu::RenderPassTimestampWrites<'_>> {
        let (query_set, i) = self.alloc(span)?;
        Some(wgpu::RenderPassTimestampWrites { query_set, beginning_of_pass_write_index: Some(i), end_of_pass_write_index: Some(i + 1) })
    }

    /// Whether the device writes timestamps inside passes (the draw's split).
    #[must_use]
    pub fn inside_passes(&self) -> bool {
        self.inside_passes
    }

    /// Run `f` (draws in `pass`) between two timestamps of `span` written inside the pass, where
    /// the device writes timestamps inside passes; else just run it.
    pub fn pass_span<R>(
        timer: Option<&mut GpuTimer>,
        pass: &mut wgpu::RenderPass<'_>,
        span: GpuSpan,
        f: impl FnOnce(&mut wgpu::RenderPass<'_>) -> R,
    ) -> R {
        let Some(t) = timer.filter(|t| t.inside_passes) else { return f(pass) };
        let Some((qs, i)) = t.alloc(span) else { return f(pass) };
        pass.write_timestamp(qs, i);
        let r = f(pass);
        pass.write_timestamp(qs, i + 1);
        r
    }

    /// Count a frame whose fields are read where they lie (no copy), if it is timed.
    pub fn note_in_place(&mut self) {
        if self.current.is_some() {
            self.times.in_place += 1;
        }
    }

    /// End the frame: resolve its timestamps and map them for reading once the GPU has run
    /// `encoder` (call right before submitting it).
    pub fn end_frame(&mut self, encoder: &mut wgpu::CommandEncoder) {
        let Some(i) = self.current.take() else { return };
        let s = &mut self.slots[i];
        if s.used == 0 {
            return;
        }
        encoder.resolve_query_set(&s.queries, 0..s.used, &s.resolve, 0);
        let bytes = u64::from(s.used) * u64::from(wgpu::QUERY_SIZE);
        encoder.copy_buffer_to_buffer(&s.resolve, 0, &s.readback, 0, bytes);
        let flag: MapFlag = Arc::new(AtomicU8::new(0));
        let f = Arc::clone(&flag);
        encoder.map_buffer_on_submit(&s.readback, wgpu::MapMode::Read, .., move |r| {
            f.store(if r.is_ok() { 1 } else { 2 }, Ordering::Release);
        });
        s.in_flight = Some(flag);
    }

    /// Whether frames are waiting for their timestamps.
    #[must_use]
    pub fn pending(&self) -> bool {
        self.slots.iter().any(|s| s.in_flight.is_some())
    }

    /// Take the timestamps the GPU has delivered (the device must have been polled for the
    /// mappings to complete; nothing here waits).
    pub fn collect(&mut self) {
        let mut done: Vec<usize> =
            (0..self.slots.len()).filter(|&i| self.slots[i].in_flight.as_ref().is_some_and(|f| f.load(Ordering::Acquire) != 0)).collect();
        done.sort_by_key(|&i| self.slots[i].frame);
        for i in done {
            let s = &mut self.slots[i];
            let ok = s.in_flight.take().is_some_and(|f| f.load(Ordering::Acquire) == 1);
            if !ok {
                continue;
            }
            let ticks: Option<Vec<u64>> = s.readback.get_mapped_range(..).ok().map(|v| {
                v.chunks_exact(8)
                    .take(s.used as usize)
                    .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect()
            });
            s.readback.unmap();
            let Some(ticks) = ticks else { continue };
            let mut ms = [None::<f64>; SPANS];
            for &(span, first) in &s.spans {
                let (Some(&a), Some(&b)) = (ticks.get(first as usize), ticks.get(first as usize + 1)) else { continue };
                // A reset or wrapped counter (end before begin) makes no sample.
                if b < a {
                    continue;
                }
                let t = (b - a) as f64 * self.period_ns * 1e-6;
                let m = &mut ms[span as usize];
                *m = Some(m.unwrap_or(0.0) + t);
            }
            self.times.frames += 1;
            for (k, m) in ms.into_iter().enumerate() {
                let Some(m) = m.filter(|m| m.is_finite()) else { continue };
                self.times.sum_ms[k] += m;
                self.times.count[k] += 1;
                if s.frame >= self.last_frame[k] {
                    self.last_frame[k] = s.frame;
                    self.times.last_ms[k] = Some(m);
                }
            }
        }
    }

    /// What was measured.
    #[must_use]
    pub fn times(&self) -> GpuTimes {
        self.times
    }

    /// Start the sums and counts again (the last times stay).
    pub fn reset_totals(&mut self) {
        self.times = GpuTimes { last_ms: self.times.last_ms, ..GpuTimes::default() };
    }
}

/// One line of GPU times for Stats and the bench: each span's `pick`ed milliseconds, or why
/// there is none.
#[must_use]
pub fn summary(timing: &GpuTiming, pick: impl Fn(&GpuTimes, GpuSpan) -> Option<f64>) -> String {
    match timing {
        GpuTiming::Unknown => "GPU times: no renderer yet".into(),
        GpuTiming::Unsupported => "GPU times: not supported by this adapter".into(),
        GpuTiming::Times(t) => {
            let parts: Vec<String> = GpuSpan::ALL
                .iter()
                .filter(|s| !s.in_draw())
                .map(|&s| match pick(t, s) {
                    Some(ms) if s == GpuSpan::Draw => {
                        let split: Vec<String> = GpuSpan::ALL
                            .iter()
                            .filter(|s| s.in_draw())
                            .filter_map(|&d| pick(t, d).map(|m| format!("{} {m:.3}", d.name())))
                            .collect();
                        if split.is_empty() {
                            format!("draw {ms:.3} ms")
                        } else {
                            format!("draw {ms:.3} ms ({})", split.join(", "))
                        }
                    }
                    Some(ms) => format!("{} {ms:.3} ms", s.name()),
                    None if s == GpuSpan::Copy && t.in_place > 0 => "copy 0 (fields read in place from shared GPU memory)".into(),
                    None if s == GpuSpan::Copy => "copy not timed (host frames are written through the queue)".into(),
                    None => format!("{} none yet", s.name()),
                })
                .collect();
            format!("GPU: {}", parts.join(", "))
        }
    }
}
