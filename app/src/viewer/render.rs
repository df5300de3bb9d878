//! The field renderer: slice planes of a scalar field (with the brick overlay), isosurfaces and
//! solid obstacles as surfaces (marching cubes in a compute shader), the domain box and outlines
//! of boxes (the solver's bricks, compressed subgrids; later refined blocks), drawn with
//! wgpu into a texture. Knows nothing of egui (the window shows the texture; tests read it back).
//!
//! The fields are read by the shaders straight from storage buffers: a frame the solver wrote
//! into GPU memory shared with the renderer is bound where it lies (rows padded, planes one after
//! the other), with no copy; fields from host memory are written into buffers of the same kind
//! with `queue.write_buffer`. One shader path for both.

use super::camera::Camera;
use super::colormap::{self, ColorMap, LUT_SIZE};
use super::gpu_timer::{GpuSpan, GpuTimer, GpuTiming};
use bytemuck::{Pod, Zeroable};
use sim_core::bricks::{BrickClass, BrickMap};
use sim_core::fields::FieldKind;
use sim_core::SubgridStat;
use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The WGSL of the field view.
pub const FIELD_WGSL: &str = include_str!("../../../shaders/field.wgsl");
/// The WGSL of the marching-cubes compute passes.
pub const MARCHING_CUBES_WGSL: &str = include_str!("../../../shaders/marching_cubes.wgsl");

/// Colour format of the view texture: plain RGBA8 holding gamma-encoded (sRGB) colours, the way
/// egui treats its textures; the stored bytes are the colour map's sRGB bytes.
pub const VIEW_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;
const DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;
/// Background colour of the view (sRGB).
pub const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.06, g: 0.065, b: 0.075, a: 1.0 };
/// Colour of the brick classes in the overlay (sRGB bytes), indexed by `BrickClass as usize`.
pub const BRICK_COLORS: [[u8; 3]; 3] = [[120, 120, 240], [60, 200, 90], [255, 140, 30]];
/// How much of the class colour a brick's inside takes in the overlay (the rest is the field).
pub const BRICK_TINT: f32 = 0.35;
/// Grey of the solid obstacles' surfaces, before shading.
pub const SOLID_GREY: f32 = 0.62;
/// Bytes per surface vertex: position (3 x f32), packed normal, velocity magnitude (f32).
const VERTEX_BYTES: u64 = 20;
/// Largest vertex buffer asked for (bytes), if the device allows it.
const MAX_VERTEX_BUFFER: u64 = 1 << 30;
/// First size of a vertex buffer (vertices, a multiple of 3); it grows when a surface needs more.
const FIRST_CAPACITY: u32 = (1 << 20) / 3 * 3;
/// Most boxes [`FieldRenderer::set_outlines`] keeps (32 bytes each: 8 MiB of instances).
pub const MAX_OUTLINES: usize = 1 << 18;
/// Most brick outlines the viewer draws: a 512^3 channel has 16k boundary bricks along its four
/// walls; far more than that is a mesh of lines, not a picture.
pub const MAX_BRICK_OUTLINES: usize = 1 << 14;

/// GPU-side structs. Keep in sync with `shaders/field.wgsl` and `shaders/marching_cubes.wgsl`.
pub mod gpu_data {
    use super::{Pod, Zeroable};

    /// `Globals` in field.wgsl.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Pod, Zeroable)]
    pub struct FieldGlobals {
        /// Clip space from world space (cells).
        pub clip_from_world: [[f32; 4]; 4],
        /// nx, ny, nz, colour map row.
        pub size: [u32; 4],
        /// Slice index along x, y, z; w = bit mask of planes drawn (1 = x, 2 = y, 4 = z).
        pub slices: [u32; 4],
        /// lo, hi of the colour range; z = the brick overlay's tint ([`super::BRICK_TINT`]).
        pub range: [f32; 4],
        /// Camera position (world space), for the surfaces' lighting.
        pub eye: [f32; 4],
        /// lo, hi of the isosurface's colour range (velocity magnitude); z = grey of the solid
        /// surfaces ([`super::SOLID_GREY`]).
        pub iso_range: [f32; 4],
        /// Brick size x, y, z; w = 1 when the brick overlay is drawn.
        pub bricks: [u32; 4],
        /// Overlay colour of each brick class (linear 0..1 of the sRGB bytes).
        pub brick_colors: [[f32; 4]; 3],
        /// x = floats from one row of the field to the next; the rest unused.
        pub pitch: [u32; 4],
    }
    const _: () = assert!(std::mem::size_of::<FieldGlobals>() == 224);

    /// `McParams` in marching_cubes.wgsl.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Pod, Zeroable)]
    pub struct McParams {
        /// nx, ny, nz, mode (0: the field, 1: the obstacle mask).
        pub size: [u32; 4],
        /// Threshold (mode 0).
        pub threshold: f32,
        /// Capacity of the vertex buffer in vertices.
        pub capacity: u32,
        /// Cube edge in cells (1: every cell; more: a coarser surface with fewer triangles).
        pub stride: u32,
        /// Floats from one row of the field to the next.
        pub pitch: u32,
        /// Floats from one row of the speed to the next.
        pub speed_pitch: u32,
        /// Padding.
        pub pad: [u32; 3],
    }
    const _: () = assert!(std::mem::size_of::<McParams>() == 48);

    /// One outline box: the instance vertex attributes of `vs_outline` in field.wgsl.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Pod, Zeroable)]
    pub struct OutlineInstance {
        /// Lower corner (cells, world space).
        pub min: [f32; 3],
        /// Upper corner.
        pub max: [f32; 3],
        /// Colour: sRGB bytes and alpha (read as `Unorm8x4`).
        pub color: [u8; 4],
        /// Padding.
        pub pad: u32,
    }
    const _: () = assert!(std::mem::size_of::<OutlineInstance>() == 32);
}

/// An axis-aligned box drawn as its 12 edges in the 3D view (see [`FieldRenderer::set_outlines`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutlineBox {
    /// Lower corner in cell units (world space: cell (x, y, z) fills [x, x+1] x ...).
    pub min: [f32; 3],
    /// Upper corner in cell units.
    pub max: [f32; 3],
    /// Colour: sRGB bytes and alpha (alpha below 255 blends over what is behind).
    pub color: [u8; 4],
}

/// The outlines of a brick map's bricks, as [`brick_outlines`] makes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrickOutlines {
    /// The boxes to draw.
    pub boxes: Vec<OutlineBox>,
    /// Bricks that would be outlined without the cap (boundary and all-solid ones).
    pub total: usize,
}

impl BrickOutlines {
    /// Whether bricks were left out to stay under the cap.
    #[must_use]
    pub fn capped(&self) -> bool {
        self.boxes.len() < self.total
    }
}

/// Outlines of the boundary bricks and the all-solid bricks of `map` (a domain of `size` cells),
/// coloured as in the overlay ([`BRICK_COLORS`]). Plain fluid bricks are left to the slices'
/// tint: they fill most of a large domain, and their outlines would hide everything else.
/// At most `max` boxes: boundary bricks first, then solid ones in the room left; a class that
/// does not fit is thinned evenly over the domain (every k-th brick), not cut at one end.
#[must_use]
pub fn brick_outlines(map: &BrickMap, size: [usize; 3], max: usize) -> BrickOutlines {
    let of = |c: BrickClass| -> Vec<usize> { (0..map.class.len()).filter(|&i| map.class[i] == c).collect() };
    let (boundary, solid) = (of(BrickClass::Boundary), of(BrickClass::Solid));
    let total = boundary.len() + solid.len();
    let thin = |ids: &[usize], room: usize| -> Vec<usize> {
        if ids.len() <= room {
            ids.to_vec()
        } else {
            (0..room).map(|j| ids[j * ids.len() / room]).collect()
        }
    };
    let keep_b = thin(&boundary, max);
    let keep_s = thin(&solid, max - keep_b.len());
    let boxes = keep_b
        .iter()
        .chain(&keep_s)
        .map(|&id| {
            let c = map.coords(id);
            let k = BRICK_COLORS[map.class[id] as usize];
            let lo = [0, 1, 2].map(|a| (c[a] * map.brick[a]).min(size[a]));
            let hi = [0, 1, 2].map(|a| ((c[a] + 1) * map.brick[a]).min(size[a]));
            OutlineBox { min: lo.map(|v| v as f32), max: hi.map(|v| v as f32), color: [k[0], k[1], k[2], 255] }
        })
        .collect();
    BrickOutlines { boxes, total }
}

/// The colour map of the subgrid outlines (compression ratio, low to high).
pub const SUBGRID_CMAP: ColorMap = ColorMap::Turbo;

/// How far each subgrid outline sits inside its subgrid (cells), so that two neighbours'
/// edges lie side by side instead of on top of each other.
pub const SUBGRID_INSET: f32 = 0.2;

/// The colour range of the subgrid outlines: the smallest and largest ratio now (never empty).
#[must_use]
pub fn ratio_range(per: &[SubgridStat]) -> (f32, f32) {
    let (lo, hi) = per.iter().fold((f32::INFINITY, 0.0f32), |(lo, hi), s| (lo.min(s.ratio as f32), hi.max(s.ratio as f32)));
    if per.is_empty() {
        (1.0, 2.0)
    } else if hi > lo {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 0.05).max(1e-3);
        (lo - pad, hi + pad)
    }
}

/// Outlines of a compressed run's subgrids, each coloured by its compression ratio on
/// [`SUBGRID_CMAP`] over `range`, inset by [`SUBGRID_INSET`].
#[must_use]
pub fn subgrid_outlines(per: &[SubgridStat], range: (f32, f32)) -> Vec<OutlineBox> {
    per.iter()
        .map(|s| {
            let min = [0, 1, 2].map(|a| s.origin[a] as f32 + SUBGRID_INSET);
            let max = [0, 1, 2].map(|a| (s.origin[a] + s.size[a]) as f32 - SUBGRID_INSET);
            OutlineBox { min, max, color: SUBGRID_CMAP.color_of(s.ratio as f32, range.0, range.1) }
        })
        .collect()
}

/// The colour map of the block outlines of an adaptive run (level, coarse to fine).
pub const LEVEL_CMAP: ColorMap = ColorMap::Turbo;

/// The colour of level `l` of a forest whose finest level is `finest`: evenly spaced on
/// [`LEVEL_CMAP`], away from its dark ends.
#[must_use]
pub fn level_color(l: u8, finest: u8) -> [u8; 4] {
    LEVEL_CMAP.color_of(f32::from(l), -0.5, f32::from(finest.max(1)) + 0.5)
}

/// Outlines of an adaptive run's leaf blocks (cells of the finest grid), coloured by level with
/// [`level_color`], coarse levels first so that a finer block's edge is drawn over a coarser
/// neighbour's. In 3D they sit [`SUBGRID_INSET`] inside their block (neighbours' edges side by
/// side); in 2D they lie on the block edges, from z = 0 to 1.
#[must_use]
pub fn block_outlines(info: &sim_core::amr::AmrInfo, two_d: bool) -> Vec<OutlineBox> {
    let inset = if two_d { 0.0 } else { SUBGRID_INSET };
    let mut boxes: Vec<(u8, OutlineBox)> = info
        .boxes
        .iter()
        .map(|&(lo, edge, l)| {
            let mut min = [0, 1, 2].map(|a| lo[a] as f32 + inset);
            let mut max = [0, 1, 2].map(|a| (lo[a] + edge) as f32 - inset);
            if two_d {
                (min[2], max[2]) = (0.0, 1.0);
            }
            (l, OutlineBox { min, max, color: level_color(l, info.max_level) })
        })
        .collect();
    boxes.sort_by_key(|(l, _)| *l);
    boxes.into_iter().map(|(_, b)| b).collect()
}

/// The isosurface to draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IsoView {
    /// Field of the surface (|vorticity| or Q).
    pub kind: FieldKind,
    /// Threshold.
    pub threshold: f32,
    /// Colour range of the velocity magnitude on the surface.
    pub color_range: (f32, f32),
}

/// What to draw, besides the field itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewParams {
    /// Colour map.
    pub cmap: ColorMap,
    /// Colour range (lo, hi).
    pub range: (f32, f32),
    /// Slice index along x, y, z (3D).
    pub slices: [usize; 3],
    /// Which slice planes to draw (3D).
    pub show: [bool; 3],
    /// Camera.
    pub camera: Camera,
    /// Isosurface (3D).
    pub iso: Option<IsoView>,
    /// Solid obstacles as surfaces (3D).
    pub solids: bool,
    /// Brick overlay on the slices.
    pub bricks: bool,
    /// The outline boxes of [`FieldRenderer::set_outlines`] (3D).
    pub outlines: bool,
}

impl ViewParams {
    /// Slices and box only: no isosurface, no solid surfaces, no overlay, no outlines.
    #[must_use]
    pub fn plain(cmap: ColorMap, range: (f32, f32), slices: [usize; 3], show: [bool; 3], camera: Camera) -> ViewParams {
        ViewParams { cmap, range, slices, show, camera, iso: None, solids: false, bricks: false, outlines: false }
    }
}

/// How many triangles a surface wanted and how many fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// Vertices the surface has (three per triangle), capped or not.
    pub wanted: u32,
    /// Vertices the buffer holds.
    pub capacity: u32,
    /// Largest buffer this device allows (vertices).
    pub max_capacity: u32,
    /// Cube edge (cells) it was marched with.
    pub stride: u32,
    /// Vertices made: each one once for an isosurface (an indexed mesh, about half as many as
    /// triangles), three per triangle for obstacles.
    pub vertices: u32,
}

impl MeshStats {
    /// Triangles of the surface.
    #[must_use]
    pub fn triangles(&self) -> u32 {
        self.wanted / 3
    }
    /// Triangles drawn.
    #[must_use]
    pub fn drawn(&self) -> u32 {
        self.wanted.min(self.capacity) / 3
    }
    /// Whether triangles were left out because the largest buffer is full.
    #[must_use]
    pub fn capped(&self) -> bool {
        self.wanted.max(self.vertices) > self.capacity && self.capacity >= self.max_capacity
    }
}

/// A field as the shaders read it: a range of a storage buffer holding the grid, x fastest, rows
/// of `pitch` floats, then y, then z.
#[derive(Clone, Debug, PartialEq)]
struct FieldBinding {
    buffer: wgpu::Buffer,
    offset: u64,
    size: u64,
    pitch: u32,
    /// Whether the buffer is one shared with the solver (held through [`FieldRenderer::hold`]).
    shared: bool,
    /// Spacing of the cells that hold values in every direction (1: every cell; s: a sampled
    /// frame's lattice, see [`sim_core::frame::FrameRegion::Sampled`]): an isosurface is marched
    /// from it on cubes of a multiple of s.
    lattice: u32,
}

impl FieldBinding {
    fn resource(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: wgpu::BufferSize::new(self.size),
        })
    }
}

/// Something the caller hands with a buffer it shares (a frame of the solver): held while the
/// shaders may read the buffer, so that nobody writes it meanwhile.
pub type Keep = Arc<dyn Any + Send + Sync>;

/// Buffers for fields uploaded from host memory: the slices' field, the isosurface's field and
/// the speed (made on first use, kept while the grid's size stays).
#[derive(Default)]
struct HostBuffers([Option<wgpu::Buffer>; 3]);

struct FieldData {
    size: [usize; 3],
    /// The slices' field (None until one is uploaded).
    field: Option<FieldBinding>,
    solid: wgpu::Texture,
    /// Isosurface field and speed.
    iso: Option<(FieldBinding, FieldBinding)>,
    /// Brick classes and the brick size.
    bricks: Option<(wgpu::Texture, [usize; 3])>,
    host: HostBuffers,
    /// Made by [`FieldRenderer::rebind`] whenever a binding changes.
    bind_group: Option<wgpu::BindGroup>,
}

struct Target {
    size: [u32; 2],
    color: wgpu::Texture,
    view: wgpu::TextureView,
    depth_view: wgpu::TextureView,
}

/// What a surface's vertex buffer holds: which upload of the data, at which threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MeshKey {
    data: u64,
    threshold: u32,
}

/// State of the asynchronous read of a surface's counter: 0 waiting, 1 mapped, 2 failed.
type MapFlag = Arc<AtomicU8>;

/// One surface made by marching cubes: its vertex buffer, counter and draw arguments.
struct Mesh {
    mode: u32,
    params: wgpu::Buffer,
    counter: wgpu::Buffer,
    args: wgpu::Buffer,
    verts: Option<wgpu::Buffer>,
    /// Isosurfaces: the index buffer and the vertex number of every lattice edge (see
    /// `mesh` in marching_cubes.wgsl), and the lattice points it was made for; obstacles: a
    /// placeholder (their surface is drawn unindexed, made once from every cell).
    indexed: Option<(wgpu::Buffer, u64)>,
    capacity: u32,
    max_capacity: u32,
    key: Option<MeshKey>,
    readback: Option<(wgpu::Buffer, MapFlag)>,
    stats: Option<MeshStats>,
    /// Extra coarsening of an isosurface over its grid's stride ([`iso_stride`]), raised while
    /// the surface has more than [`ISO_TRIANGLE_BUDGET`] triangles and lowered again below a
    /// quarter of it.
    lod: u32,
    /// Stride of the last march.
    stride: u32,
}

impl Mesh {
    fn new(device: &wgpu::Device, mode: u32, max_capacity: u32) -> Mesh {
        let buf = |label: &str, size: u64, usage: wgpu::BufferUsages| {
            device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
        };
        Mesh {
            mode,
            params: buf(
                "mc params",
                std::mem::size_of::<gpu_data::McParams>() as u64,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            ),
            counter: buf("mc counter", 8, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC),
            args: buf("mc draw args", 20, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT),
            verts: None,
            indexed: None,
            capacity: FIRST_CAPACITY.min(max_capacity),
            max_capacity,
            key: None,
            readback: None,
            stats: None,
            lod: 1,
            stride: 1,
        }
    }

    /// Run marching cubes into this mesh (encoded into `encoder`, before the render pass).
    fn compute(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        mc: &McPipelines,
        data: (&FieldBinding, &FieldBinding, &wgpu::Texture),
        size: [usize; 3],
        threshold: f32,
        stride: u32,
        key: MeshKey,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites<'_>>,
    ) {
        let verts = self.verts.get_or_insert_with(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mc vertices"),
                size: u64::from(self.capacity.max(3)) * VERTEX_BYTES,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::VERTEX,
                mapped_at_creation: false,
            })
        });
        // An isosurface's cubes grow with its level of detail, to a multiple of the spacing of
        // the data's lattice (a sampled frame holds only those cells); obstacles keep every cell.
        let stride = if self.mode == 0 {
            let lattice = data.0.lattice.min(data.1.lattice).max(1);
            (stride * self.lod).div_ceil(lattice) * lattice
        } else {
            stride
        };
        self.stride = stride;
        let params = gpu_data::McParams {
            size: [size[0] as u32, size[1] as u32, size[2] as u32, self.mode],
            threshold,
            capacity: self.capacity,
            stride,
            pitch: data.0.pitch,
            speed_pitch: data.1.pitch,
            pad: [0; 3],
        };
        queue.write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
        // Cubes and lattice points per axis at this stride.
        let cubes = size.map(|k| k.saturating_sub(1) as u32 / stride);
        let points = cubes.map(|c| u64::from(c) + 1);
        let words = if self.mode == 0 { u64::from(self.capacity) + 3 * points.iter().product::<u64>() } else { 4 };
        if self.indexed.as_ref().is_none_or(|(_, w)| *w != words) {
            let b = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mc indices and edges"),
                size: words * 4,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDEX,
                mapped_at_creation: false,
            });
            self.indexed = Some((b, words));
        }
        let Some((mesh_buf, _)) = &self.indexed else { return };
        let mv = data.2.create_view(&wgpu::TextureViewDescriptor::default());
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("marching cubes"),
            layout: &mc.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: self.params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: mc.table.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: data.0.resource() },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&mv) },
                wgpu::BindGroupEntry { binding: 4, resource: verts.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: self.counter.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: self.args.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 7, resource: data.1.resource() },
                wgpu::BindGroupEntry { binding: 8, resource: mesh_buf.as_entire_binding() },
            ],
        });
        encoder.clear_buffer(&self.counter, 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("marching cubes"), timestamp_writes });
            pass.set_bind_group(0, &bind_group, &[]);
            let groups = |n: [u32; 3]| n.map(|k| k.div_ceil(4).max(1));
            if self.mode == 0 {
                let g = groups(points.map(|k| k as u32));
                pass.set_pipeline(&mc.iso_vertices);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
                let g = groups(cubes);
                pass.set_pipeline(&mc.iso_triangles);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
            } else {
                let g = groups(cubes);
                pass.set_pipeline(&mc.emit);
                pass.dispatch_workgroups(g[0], g[1], g[2]);
            }
            pass.set_pipeline(&mc.finish);
            pass.dispatch_workgroups(1, 1, 1);
        }
        // Read the count back when the GPU is done, without waiting for it.
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mc count readback"),
            size: 8,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        encoder.copy_buffer_to_buffer(&self.counter, 0, &staging, 0, 8);
        let flag: MapFlag = Arc::new(AtomicU8::new(0));
        let f = Arc::clone(&flag);
        encoder.map_buffer_on_submit(&staging, wgpu::MapMode::Read, .., move |r| f.store(if r.is_ok() { 1 } else { 2 }, Ordering::Release));
        self.readback = Some((staging, flag));
        self.key = Some(key);
    }

    /// Take a finished count; grow the buffer (and forget the surface, so it is made again) when
    /// it was too small. Returns true when the surface must be made again.
    fn take_count(&mut self) -> bool {
        let Some((buf, flag)) = &self.readback else { return false };
        match flag.load(Ordering::Acquire) {
            0 => return false,
            1 => {
                let word = |v: &[u8], k: usize| u32::from_le_bytes([v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]]);
                let counts = buf.get_mapped_range(..).ok().map(|v| (word(&v, 0), word(&v, 1)));
                buf.unmap();
                if let Some((wanted, made)) = counts {
                    let vertices = if self.mode == 0 { made } else { wanted };
                    let st = MeshStats { wanted, capacity: self.capacity, max_capacity: self.max_capacity, stride: self.stride, vertices };
                    self.stats = Some(st);
                    // Indices or vertices over the buffers: grow them (the surface's vertices are
                    // fewer than its indices, but a NaN region can leave some unused).
                    let need = wanted.max(vertices);
                    if need > self.capacity && self.capacity < self.max_capacity {
                        let grown = u64::from(need).next_power_of_two().min(u64::from(self.max_capacity)) as u32 / 3 * 3;
                        self.capacity = grown.max(self.capacity);
                        self.verts = None;
                        self.indexed = None;
                        self.key = None;
                        self.readback = None;
                        return true;
                    }
                    // Level of detail for the next surfaces (a surface made again for a larger
                    // buffer keeps its detail): a field changes little between frames, so its
                    // next surface has about as many triangles.
                    if self.mode == 0 {
                        let tris = wanted / 3;
                        if tris > ISO_TRIANGLE_BUDGET && self.stride < ISO_MAX_STRIDE {
                            self.lod += 1;
                        } else if tris < ISO_TRIANGLE_BUDGET / 4 && self.lod > 1 {
                            self.lod -= 1;
                        }
                    }
                }
            }
            _ => {}
        }
        self.readback = None;
        false
    }
}

struct McPipelines {
    layout: wgpu::BindGroupLayout,
    table: wgpu::Buffer,
    emit: wgpu::ComputePipeline,
    iso_vertices: wgpu::ComputePipeline,
    iso_triangles: wgpu::ComputePipeline,
    finish: wgpu::ComputePipeline,
}

/// Pipelines, the field textures and the view texture.
pub struct FieldRenderer {
    slice_pipeline: wgpu::RenderPipeline,
    box_pipeline: wgpu::RenderPipeline,
    iso_pipeline: wgpu::RenderPipeline,
    solid_pipeline: wgpu::RenderPipeline,
    outline_pipeline: wgpu::RenderPipeline,
    /// Instances of the outline boxes (grown to a power of two) and how many are drawn.
    outlines: Option<wgpu::Buffer>,
    outline_count: u32,
    layout: wgpu::BindGroupLayout,
    globals: wgpu::Buffer,
    lut_view: wgpu::TextureView,
    /// A tiny zeroed storage buffer bound where a field is missing.
    dummy_field: FieldBinding,
    dummy_u8: wgpu::Texture,
    mc: Option<McPipelines>,
    iso_mesh: Option<Mesh>,
    solid_mesh: Option<Mesh>,
    /// Counts uploads of isosurface data and of the solid mask (what a mesh was made from).
    iso_serial: u64,
    iso_kind: Option<FieldKind>,
    solid_serial: u64,
    redraw: bool,
    field: Option<FieldData>,
    /// What the shared buffers now bound came with (held while they are bound).
    keep: Option<Keep>,
    /// What was held for buffers bound before: drop once the GPU is done with the commands
    /// submitted so far (see [`FieldRenderer::take_released`]).
    released: Vec<Keep>,
    target: Option<Target>,
    /// GPU timestamps of the frames (where the device has them).
    timer: Option<GpuTimer>,
}

/// Errors the renderer reports (shown in the window).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The domain does not fit the GPU's 3D texture limit.
    #[error("the domain {0:?} is larger than this GPU's 3D texture limit ({1} per axis): the view cannot show it")]
    TooLarge([usize; 3], u32),
    /// A field larger than the device lets a shader read from one buffer binding.
    #[error(
        "a field of the domain {0:?} takes {1} MiB, more than this GPU lets a shader read from one buffer ({2} MiB, \
         max_storage_buffer_binding_size): the view cannot show it"
    )]
    BindingTooLarge([usize; 3], u64, u64),
    /// A field that does not start where the device lets a storage binding start.
    #[error("a field at byte {0} of its buffer: this GPU binds storage buffers only at multiples of {1} bytes")]
    Misaligned(u64, u32),
    /// Data of the wrong length.
    #[error("field of {0} values for a domain of {1} cells")]
    Length(usize, usize),
    /// Isosurface data before the field it belongs to.
    #[error("isosurface data for a domain of {0:?} cells, but the view holds {1:?}")]
    NoField([usize; 3], Option<[usize; 3]>),
}

/// Storage buffers the viewer's shaders bind in one stage at most (marching cubes: the field,
/// the speed, the vertices, the counter, the draw's arguments, the indices and edges).
pub const STORAGE_BUFFERS_PER_STAGE: u32 = 6;

/// The limits the viewer asks a device for: `base`, with the largest storage buffer binding and
/// the largest buffer raised to what the adapter offers (the shaders read each field from one
/// binding: a 512^3 field is 512 MiB; a 512^3 frame shared with CUDA is 1.5 GiB), and the
/// storage buffers per stage raised to what the shaders bind where the adapter has them.
#[must_use]
pub fn wanted_limits(base: wgpu::Limits, adapter: &wgpu::Limits) -> wgpu::Limits {
    let storage = adapter.max_storage_buffer_binding_size.max(base.max_storage_buffer_binding_size);
    // Vertex buffers stay under MAX_VERTEX_BUFFER where they are made.
    let buffer = adapter.max_buffer_size.max(base.max_buffer_size);
    let per_stage = adapter.max_storage_buffers_per_shader_stage.min(8).max(base.max_storage_buffers_per_shader_stage);
    wgpu::Limits {
        max_storage_buffer_binding_size: storage,
        max_buffer_size: buffer,
        max_storage_buffers_per_shader_stage: per_stage,
        ..base
    }
}

/// Triangles an isosurface may have before it is marched on coarser cubes: more than enough
/// for a picture of a million pixels, and what a GPU with few raster units (a data-centre card
/// such as the H100) draws in about a millisecond. The level of detail follows the count of the
/// surface before (see `Mesh::lod`).
pub const ISO_TRIANGLE_BUDGET: u32 = 300_000;

/// Coarsest cube edge (cells) of an isosurface.
pub const ISO_MAX_STRIDE: u32 = 8;

/// Cubes per axis above which an isosurface is marched on coarser cubes.
pub const ISO_FULL_DETAIL_CUBES: usize = 160;

/// Cube edge (cells) of the isosurface of a grid: every cell up to [`ISO_FULL_DETAIL_CUBES`]
/// cubes along the longest axis, then 2, 3, ... cells, so that a large grid's surface keeps
/// about as many triangles as a 160^3 one (a 256^3 flow's |vorticity| surface has millions at
/// full detail, more than the picture has pixels).
#[must_use]
pub fn iso_stride(size: [usize; 3]) -> u32 {
    let longest = size.iter().copied().max().unwrap_or(1).saturating_sub(1);
    longest.div_ceil(ISO_FULL_DETAIL_CUBES).max(1) as u32
}

/// Bytes of a field of grid `size` with rows of `pitch` floats bound at byte `offset` of a
/// buffer, or why a shader cannot read it from one binding on a device with limits `l`.
///
/// # Errors
/// Over the storage binding (or buffer) size limit, or at an offset the device cannot bind.
pub fn check_binding(l: &wgpu::Limits, size: [usize; 3], pitch: usize, offset: u64) -> Result<u64, RenderError> {
    let bytes = (pitch * size[1] * size[2] * 4) as u64;
    let limit = l.max_storage_buffer_binding_size.min(l.max_buffer_size);
    if bytes > limit {
        return Err(RenderError::BindingTooLarge(size, bytes.div_ceil(1 << 20), limit >> 20));
    }
    if offset % u64::from(l.min_storage_buffer_offset_alignment.max(1)) != 0 {
        return Err(RenderError::Misaligned(offset, l.min_storage_buffer_offset_alignment));
    }
    Ok(bytes)
}

fn texture_3d(device: &wgpu::Device, label: &str, size: [usize; 3], format: wgpu::TextureFormat) -> wgpu::Texture {
    device.create_texture(&wgpu::TextureDescriptor {
        label: Some(label),
        size: wgpu::Extent3d { width: size[0] as u32, height: size[1] as u32, depth_or_array_layers: size[2] as u32 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D3,
        format,
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    })
}

fn write_3d(queue: &wgpu::Queue, tex: &wgpu::Texture, size: [usize; 3], bytes_per_texel: u32, data: &[u8]) {
    queue.write_texture(
        tex.as_image_copy(),
        data,
        wgpu::TexelCopyBufferLayout {
            offset: 0,
            bytes_per_row: Some(bytes_per_texel * size[0] as u32),
            rows_per_image: Some(size[1] as u32),
        },
        wgpu::Extent3d { width: size[0] as u32, height: size[1] as u32, depth_or_array_layers: size[2] as u32 },
    );
}

impl FieldRenderer {
    /// Create pipelines and the colour-map table.
    #[must_use]
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> FieldRenderer {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("field.wgsl"),
            source: wgpu::ShaderSource::Wgsl(FIELD_WGSL.into()),
        });
        let tex_entry = |binding: u32, sample_type: wgpu::TextureSampleType, dim: wgpu::TextureViewDimension| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
            ty: wgpu::BindingType::Texture { sample_type, view_dimension: dim, multisampled: false },
            count: None,
        };
        let float = wgpu::TextureSampleType::Float { filterable: false };
        let d3 = wgpu::TextureViewDimension::D3;
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("field"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::VERTEX_FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: true },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                tex_entry(2, wgpu::TextureSampleType::Uint, d3),
                tex_entry(3, float, wgpu::TextureViewDimension::D2),
                tex_entry(5, wgpu::TextureSampleType::Uint, d3),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("field"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let depth = wgpu::DepthStencilState {
            format: DEPTH_FORMAT,
            depth_write_enabled: Some(true),
            depth_compare: Some(wgpu::CompareFunction::LessEqual),
            stencil: wgpu::StencilState::default(),
            bias: wgpu::DepthBiasState::default(),
        };
        let vertex_layout = [Some(wgpu::VertexBufferLayout {
            array_stride: VERTEX_BYTES,
            step_mode: wgpu::VertexStepMode::Vertex,
            attributes: &[
                wgpu::VertexAttribute { format: wgpu::VertexFormat::Uint32x4, offset: 0, shader_location: 0 },
                wgpu::VertexAttribute { format: wgpu::VertexFormat::Float32, offset: 16, shader_location: 1 },
            ],
        })];
        let outline_attrs = wgpu::vertex_attr_array![0 => Float32x3, 1 => Float32x3, 2 => Unorm8x4];
        let outline_layout = [Some(wgpu::VertexBufferLayout {
            array_stride: std::mem::size_of::<gpu_data::OutlineInstance>() as u64,
            step_mode: wgpu::VertexStepMode::Instance,
            attributes: &outline_attrs,
        })];
        // Outlines blend by their alpha; the view's alpha stays 1.
        let blend = wgpu::BlendState {
            color: wgpu::BlendComponent {
                src_factor: wgpu::BlendFactor::SrcAlpha,
                dst_factor: wgpu::BlendFactor::OneMinusSrcAlpha,
                operation: wgpu::BlendOperation::Add,
            },
            alpha: wgpu::BlendComponent::OVER,
        };
        let pipeline = |label: &str,
                        vs: &str,
                        fs: &str,
                        topology: wgpu::PrimitiveTopology,
                        buffers: &[Option<wgpu::VertexBufferLayout>],
                        blend: Option<wgpu::BlendState>| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(label),
                layout: Some(&pipeline_layout),
                vertex: wgpu::VertexState { module: &module, entry_point: Some(vs), compilation_options: Default::default(), buffers },
                primitive: wgpu::PrimitiveState { topology, ..Default::default() },
                depth_stencil: Some(depth.clone()),
                multisample: wgpu::MultisampleState::default(),
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some(fs),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState { format: VIEW_FORMAT, blend, write_mask: wgpu::ColorWrites::ALL })],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let tri = wgpu::PrimitiveTopology::TriangleList;
        let lines = wgpu::PrimitiveTopology::LineList;
        let slice_pipeline = pipeline("slices", "vs_slice", "fs_slice", tri, &[], None);
        let box_pipeline = pipeline("box", "vs_box", "fs_box", lines, &[], None);
        let iso_pipeline = pipeline("isosurface", "vs_iso", "fs_surface", tri, &vertex_layout, None);
        let solid_pipeline = pipeline("solid surface", "vs_solid", "fs_surface", tri, &vertex_layout, None);
        let outline_pipeline = pipeline("outlines", "vs_outline", "fs_outline", lines, &outline_layout, Some(blend));
        let globals = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("field globals"),
            size: std::mem::size_of::<gpu_data::FieldGlobals>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let rows = ColorMap::ALL.len() as u32;
        let lut_tex = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("colour maps"),
            size: wgpu::Extent3d { width: LUT_SIZE as u32, height: rows, depth_or_array_layers: 1 },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        let lut = colormap::lut();
        queue.write_texture(
            lut_tex.as_image_copy(),
            bytemuck::cast_slice(&lut),
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(4 * LUT_SIZE as u32), rows_per_image: Some(rows) },
            wgpu::Extent3d { width: LUT_SIZE as u32, height: rows, depth_or_array_layers: 1 },
        );
        let lut_view = lut_tex.create_view(&wgpu::TextureViewDescriptor::default());
        let dummy_field = FieldBinding {
            // Zeroed at creation.
            buffer: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("no data"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            }),
            offset: 0,
            size: 16,
            pitch: 0,
            shared: false,
            lattice: 1,
        };
        let dummy_u8 = texture_3d(device, "no data", [1, 1, 1], wgpu::TextureFormat::R8Uint);
        write_3d(queue, &dummy_u8, [1, 1, 1], 1, &[0]);
        let mc = Self::mc_pipelines(device, queue);
        let max_capacity = {
            let l = device.limits();
            let bytes = l.max_storage_buffer_binding_size.min(l.max_buffer_size).min(MAX_VERTEX_BUFFER);
            (bytes / VERTEX_BYTES).min(u64::from(u32::MAX)) as u32 / 3 * 3
        };
        // An isosurface's index buffer shares one binding with the vertex numbers of its
        // lattice's edges (at most (ISO_FULL_DETAIL_CUBES + 1)^3 points, three edges each).
        let iso_capacity = {
            let l = device.limits();
            let words = l.max_storage_buffer_binding_size.min(l.max_buffer_size) / 4;
            let edges = 3 * (ISO_FULL_DETAIL_CUBES as u64 + 2).pow(3);
            (words.saturating_sub(edges).min(u64::from(max_capacity)) as u32) / 3 * 3
        };
        let (iso_mesh, solid_mesh) =
            if mc.is_some() { (Some(Mesh::new(device, 0, iso_capacity)), Some(Mesh::new(device, 1, max_capacity))) } else { (None, None) };
        FieldRenderer {
            slice_pipeline,
            box_pipeline,
            iso_pipeline,
            solid_pipeline,
            outline_pipeline,
            outlines: None,
            outline_count: 0,
            layout,
            globals,
            lut_view,
            dummy_field,
            dummy_u8,
            mc,
            iso_mesh,
            solid_mesh,
            iso_serial: 0,
            iso_kind: None,
            solid_serial: 0,
            redraw: false,
            field: None,
            keep: None,
            released: Vec::new(),
            target: None,
            timer: GpuTimer::new(device, queue),
        }
    }

    /// The marching-cubes pipelines, if the device runs compute shaders with storage buffers
    /// (not so on WebGL2-class GL devices).
    fn mc_pipelines(device: &wgpu::Device, queue: &wgpu::Queue) -> Option<McPipelines> {
        let l = device.limits();
        if l.max_compute_invocations_per_workgroup < 64
            || l.max_storage_buffers_per_shader_stage < STORAGE_BUFFERS_PER_STAGE
            || l.max_compute_workgroups_per_dimension == 0
        {
            return None;
        }
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("marching_cubes.wgsl"),
            source: wgpu::ShaderSource::Wgsl(MARCHING_CUBES_WGSL.into()),
        });
        let uniform = |binding: u32| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let tex = |binding: u32, sample_type| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Texture { sample_type, view_dimension: wgpu::TextureViewDimension::D3, multisampled: false },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("marching cubes"),
            entries: &[
                uniform(0),
                uniform(1),
                storage(2, true),
                tex(3, wgpu::TextureSampleType::Uint),
                storage(4, false),
                storage(5, false),
                storage(6, false),
                storage(7, true),
                storage(8, false),
            ],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("marching cubes"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipe = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let words: Vec<u32> = super::mc::packed_table().into_iter().flatten().collect();
        let table = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("marching cubes table"),
            size: (words.len() * 4) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&table, 0, bytemuck::cast_slice(&words));
        Some(McPipelines {
            emit: pipe("emit"),
            iso_vertices: pipe("iso_vertices"),
            iso_triangles: pipe("iso_triangles"),
            finish: pipe("finish"),
            layout,
            table,
        })
    }

    /// Shrink the surfaces' vertex buffers: `first` vertices at first, growing up to `max`.
    #[cfg(test)]
    pub fn set_capacity_for_tests(&mut self, first: u32, max: u32) {
        for m in [&mut self.iso_mesh, &mut self.solid_mesh].into_iter().flatten() {
            m.max_capacity = max / 3 * 3;
            m.capacity = first.min(max) / 3 * 3;
            m.verts = None;
            m.indexed = None;
            m.key = None;
        }
    }

    /// Set the isosurface's level of detail (tests: the next surface is marched on cubes of
    /// its grid's stride times `lod`, before the count it reports changes it).
    #[cfg(test)]
    pub fn set_iso_lod_for_tests(&mut self, lod: u32) {
        if let Some(m) = self.iso_mesh.as_mut() {
            m.lod = lod.max(1);
            m.key = None;
        }
    }

    /// Whether this device can draw isosurfaces and solid surfaces (compute shaders).
    #[must_use]
    pub fn surfaces_supported(&self) -> bool {
        self.mc.is_some()
    }

    /// Make the field bind group again after a binding changed.
    fn rebind(&mut self, device: &wgpu::Device) {
        let Some(f) = &self.field else { return };
        let view = |t: &wgpu::Texture| t.create_view(&wgpu::TextureViewDescriptor::default());
        let field = f.field.as_ref().unwrap_or(&self.dummy_field);
        let bricks = f.bricks.as_ref().map_or(&self.dummy_u8, |(t, _)| t);
        let (sv, bv) = (view(&f.solid), view(bricks));
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("field"),
            layout: &self.layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: self.globals.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: field.resource() },
                wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&sv) },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&self.lut_view) },
                wgpu::BindGroupEntry { binding: 5, resource: wgpu::BindingResource::TextureView(&bv) },
            ],
        });
        if let Some(f) = self.field.as_mut() {
            f.bind_group = Some(bind_group);
        }
    }

    /// The data of a grid of `size`: all new (no field, a zeroed solid mask) when the size
    /// changes.
    fn ensure_size(&mut self, device: &wgpu::Device, size: [usize; 3]) {
        if self.field.as_ref().is_none_or(|f| f.size != size) {
            // New textures start zeroed: no solid cells until a mask arrives.
            let solid = texture_3d(device, "solid", size, wgpu::TextureFormat::R8Uint);
            self.field =
                Some(FieldData { size, field: None, solid, iso: None, bricks: None, host: HostBuffers::default(), bind_group: None });
            self.iso_kind = None;
            self.iso_serial += 1;
            self.solid_serial += 1;
        }
    }

    /// Hold `keep` while the shared buffers now bound are read; what was held before is
    /// released after the next submit (see [`FieldRenderer::take_released`]).
    fn hold(&mut self, keep: Option<Keep>) {
        let same = match (&self.keep, &keep) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.released.extend(std::mem::replace(&mut self.keep, keep));
        }
    }

    /// What the renderer held for shared buffers it no longer binds: drop it once the GPU has run
    /// the commands submitted up to now (the last ones that could read those buffers), e.g. with
    /// `queue.on_submitted_work_done` right after the next submit.
    pub fn take_released(&mut self) -> Vec<Keep> {
        std::mem::take(&mut self.released)
    }

    /// Write `values` (a field of the current grid, tight rows) into the host buffer `slot`.
    fn write_host(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, slot: usize, values: &[f32]) -> Option<FieldBinding> {
        const LABELS: [&str; 3] = ["field", "isosurface field", "speed"];
        let f = self.field.as_mut()?;
        let bytes = std::mem::size_of_val(values) as u64;
        let buffer = f.host.0[slot].get_or_insert_with(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(LABELS[slot]),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        queue.write_buffer(buffer, 0, bytemuck::cast_slice(values));
        Some(FieldBinding { buffer: buffer.clone(), offset: 0, size: bytes, pitch: f.size[0] as u32, shared: false, lattice: 1 })
    }

    /// Errors of a grid the view cannot hold: a zero size or one over the 3D texture limit (the
    /// solid mask and the brick classes are textures).
    fn check_size(device: &wgpu::Device, size: [usize; 3]) -> Result<(), RenderError> {
        let max = device.limits().max_texture_dimension_3d;
        if size.iter().any(|&n| n == 0 || n > max as usize) {
            return Err(RenderError::TooLarge(size, max));
        }
        Ok(())
    }

    fn check_binding(device: &wgpu::Device, size: [usize; 3], pitch: usize, offset: u64) -> Result<u64, RenderError> {
        check_binding(&device.limits(), size, pitch, offset)
    }

    /// Upload a scalar field and the solid mask (x fastest; 0 fluid, 1 solid wall, 2 solid
    /// obstacle: the slices draw every solid cell grey, the solid surfaces are the obstacles').
    /// The field goes into a storage buffer of the renderer's (`queue.write_buffer`), made again
    /// only when the size changes.
    ///
    /// # Errors
    /// A domain over the GPU's 3D texture limit or its storage binding limit, or data of the
    /// wrong length.
    pub fn upload(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [usize; 3],
        values: &[f32],
        solid: Option<&[u8]>,
    ) -> Result<(), RenderError> {
        let cells = size[0] * size[1] * size[2];
        if values.len() != cells || solid.is_some_and(|s| s.len() != cells) {
            return Err(RenderError::Length(values.len(), cells));
        }
        Self::check_size(device, size)?;
        Self::check_binding(device, size, size[0], 0)?;
        self.ensure_size(device, size);
        let binding = self.write_host(device, queue, 0, values);
        if let Some(f) = self.field.as_mut() {
            f.field = binding;
            // Isosurface data in a shared buffer is not held any longer.
            if f.iso.as_ref().is_some_and(|(b, _)| b.shared) {
                f.iso = None;
                self.iso_kind = None;
            }
            if let Some(s) = solid {
                write_3d(queue, &f.solid, size, 1, s);
                self.solid_serial += 1;
            }
        }
        self.hold(None);
        self.rebind(device);
        Ok(())
    }

    /// Say that the isosurface data uploaded last holds values only at the cells whose
    /// coordinates are multiples of `lattice` (a sampled frame, written through host memory):
    /// its surface is then marched on cubes of a multiple of that.
    pub fn set_iso_lattice(&mut self, lattice: u32) {
        if let Some((a, b)) = self.field.as_mut().and_then(|f| f.iso.as_mut()) {
            a.lattice = lattice.max(1);
            b.lattice = lattice.max(1);
        }
    }

    /// Upload the isosurface's field (`kind`) and the velocity magnitude that colours it, for
    /// the domain of the last [`FieldRenderer::upload`]. The surface is made again at the next
    /// draw that shows it.
    ///
    /// # Errors
    /// No field uploaded for this size, or data of the wrong length.
    pub fn upload_iso(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        size: [usize; 3],
        kind: FieldKind,
        values: &[f32],
        speed: &[f32],
    ) -> Result<(), RenderError> {
        let have = self.field.as_ref().map(|f| f.size);
        if have != Some(size) {
            return Err(RenderError::NoField(size, have));
        }
        let cells = size[0] * size[1] * size[2];
        if values.len() != cells || speed.len() != cells {
            return Err(RenderError::Length(values.len().min(speed.len()), cells));
        }
        Self::check_binding(device, size, size[0], 0)?;
        let (Some(a), Some(b)) = (self.write_host(device, queue, 1, values), self.write_host(device, queue, 2, speed)) else {
            return Ok(());
        };
        if let Some(f) = self.field.as_mut() {
            f.iso = Some((a, b));
        }
        self.iso_kind = Some(kind);
        self.iso_serial += 1;
        Ok(())
    }

    /// Take a frame's fields from a GPU buffer (one shared with the solver) where they lie: the
    /// shaders read the planes of `buffer` straight (no copy). The slices' field is plane
    /// `field`; with `iso` = (kind, its plane, the speed's plane) the isosurface's data. `solid`
    /// as in [`FieldRenderer::upload`]. `keep` is held as long as the buffer is bound (give the
    /// frame's owner, so that nobody writes it meanwhile); what was held before comes back from
    /// [`FieldRenderer::take_released`].
    ///
    /// # Errors
    /// A domain over the GPU's 3D texture limit, planes over its storage binding limit or not
    /// aligned for it, or a buffer too small for the layout.
    #[allow(clippy::too_many_arguments)]
    pub fn upload_from_buffer(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        buffer: &wgpu::Buffer,
        layout: &sim_core::frame::FrameLayout,
        field: usize,
        iso: Option<(FieldKind, usize, usize)>,
        solid: Option<&[u8]>,
        keep: Option<Keep>,
    ) -> Result<(), RenderError> {
        let size = layout.n;
        let cells = size[0] * size[1] * size[2];
        if solid.is_some_and(|s| s.len() != cells) {
            return Err(RenderError::Length(solid.map_or(0, <[u8]>::len), cells));
        }
        let planes = [Some(field), iso.map(|i| i.1), iso.map(|i| i.2)];
        if (layout.bytes() as u64) > buffer.size() || planes.iter().flatten().any(|&p| p >= layout.planes) {
            return Err(RenderError::Length(buffer.size() as usize / 4, layout.floats()));
        }
        Self::check_size(device, size)?;
        let plane_bytes = (layout.plane_floats() * 4) as u64;
        let bind = |plane: usize| -> Result<FieldBinding, RenderError> {
            let offset = plane as u64 * plane_bytes;
            let bytes = Self::check_binding(device, size, layout.row_pitch, offset)?;
            let lattice = layout.region.lattice() as u32;
            Ok(FieldBinding { buffer: buffer.clone(), offset, size: bytes, pitch: layout.row_pitch as u32, shared: true, lattice })
        };
        let field_binding = bind(field)?;
        // A frame of planes alone (lattice 0) holds no isosurface data.
        let iso_bindings = match iso {
            Some((kind, ip, sp)) if layout.region.lattice() > 0 => Some((kind, bind(ip)?, bind(sp)?)),
            _ => None,
        };
        self.ensure_size(device, size);
        if let Some(f) = self.field.as_mut() {
            f.field = Some(field_binding);
            match iso_bindings {
                Some((kind, a, b)) => {
                    f.iso = Some((a, b));
                    self.iso_kind = Some(kind);
                    self.iso_serial += 1;
                }
                // Data in the buffer held before is not held any longer.
                None if f.iso.as_ref().is_some_and(|(b, _)| b.shared) => {
                    f.iso = None;
                    self.iso_kind = None;
                }
                None => {}
            }
            if let Some(s) = solid {
                write_3d(queue, &f.solid, size, 1, s);
                self.solid_serial += 1;
            }
        }
        if let Some(t) = self.timer.as_mut() {
            t.note_in_place();
        }
        self.hold(keep);
        self.rebind(device);
        Ok(())
    }

    /// Upload the solver's brick classes (for the overlay), for the domain of the last
    /// [`FieldRenderer::upload`].
    ///
    /// # Errors
    /// No field uploaded, or a map that does not cover the domain.
    pub fn upload_bricks(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, map: &BrickMap) -> Result<(), RenderError> {
        let Some(size) = self.field.as_ref().map(|f| f.size) else { return Err(RenderError::NoField(map.count, None)) };
        let covers = (0..3).all(|a| map.brick[a] > 0 && map.count[a] == size[a].div_ceil(map.brick[a]));
        if !covers || map.class.len() != map.count.iter().product::<usize>() {
            return Err(RenderError::Length(map.class.len(), map.count.iter().product()));
        }
        let tex = texture_3d(device, "brick classes", map.count, wgpu::TextureFormat::R8Uint);
        write_3d(queue, &tex, map.count, 1, &map.codes());
        if let Some(f) = self.field.as_mut() {
            f.bricks = Some((tex, map.brick));
        }
        self.rebind(device);
        Ok(())
    }

    /// The boxes to outline in the 3D view when [`ViewParams::outlines`] is on: a generic list
    /// (the solver's bricks by class now; compressed subgrids by compression ratio and refined
    /// blocks by level later), drawn as 12 edges each, one instance per box, depth-tested against
    /// the slices and surfaces. Kept until set again; at most [`MAX_OUTLINES`] boxes (the first
    /// ones). Returns how many are kept.
    pub fn set_outlines(&mut self, device: &wgpu::Device, queue: &wgpu::Queue, boxes: &[OutlineBox]) -> usize {
        let kept = boxes.len().min(MAX_OUTLINES);
        let data: Vec<gpu_data::OutlineInstance> =
            boxes[..kept].iter().map(|b| gpu_data::OutlineInstance { min: b.min, max: b.max, color: b.color, pad: 0 }).collect();
        let bytes = std::mem::size_of_val(data.as_slice()) as u64;
        if self.outlines.as_ref().is_none_or(|b| b.size() < bytes) {
            self.outlines = Some(device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("outline boxes"),
                size: bytes.next_power_of_two().max(1024),
                usage: wgpu::BufferUsages::VERTEX | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        if let Some(b) = self.outlines.as_ref().filter(|_| kept > 0) {
            queue.write_buffer(b, 0, bytemuck::cast_slice(&data));
        }
        self.outline_count = kept as u32;
        kept
    }

    /// The view texture (created by [`FieldRenderer::render`]).
    #[must_use]
    pub fn target(&self) -> Option<(&wgpu::Texture, &wgpu::TextureView)> {
        self.target.as_ref().map(|t| (&t.color, &t.view))
    }

    /// Pick up the surfaces' triangle counts the GPU has finished (without waiting; `wait` to
    /// block until they are in). A buffer that was too small grows and the view must be drawn
    /// again: see [`FieldRenderer::needs_redraw`].
    pub fn poll(&mut self, device: &wgpu::Device, wait: bool) {
        let pending = [&self.iso_mesh, &self.solid_mesh].iter().any(|m| m.as_ref().is_some_and(|m| m.readback.is_some()))
            || self.timer.as_ref().is_some_and(GpuTimer::pending);
        if !pending {
            return;
        }
        let _ = device.poll(if wait { wgpu::PollType::wait_indefinitely() } else { wgpu::PollType::Poll });
        for m in [&mut self.iso_mesh, &mut self.solid_mesh].into_iter().flatten() {
            self.redraw |= m.take_count();
        }
        if let Some(t) = self.timer.as_mut() {
            t.collect();
        }
    }

    /// Start timing a frame on the GPU: the marching cubes and the draw of
    /// [`FieldRenderer::render`] that go into one encoder, ended by
    /// [`FieldRenderer::end_gpu_frame`]; a frame whose fields [`FieldRenderer::upload_from_buffer`]
    /// bound where they lie counts as one with no copy. Work outside such a frame is not timed.
    pub fn begin_gpu_frame(&mut self) {
        if let Some(t) = self.timer.as_mut() {
            t.begin_frame();
        }
    }

    /// End the frame begun by [`FieldRenderer::begin_gpu_frame`]: call right before submitting
    /// `encoder`. Its times come in with a later [`FieldRenderer::poll`] (never waited for).
    pub fn end_gpu_frame(&mut self, encoder: &mut wgpu::CommandEncoder) {
        if let Some(t) = self.timer.as_mut() {
            t.end_frame(encoder);
        }
    }

    /// Time one frame in `every` (1: every frame; default [`super::gpu_timer::SAMPLE_EVERY`]).
    pub fn sample_gpu_every(&mut self, every: u64) {
        if let Some(t) = self.timer.as_mut() {
            t.sample_every(every);
        }
    }

    /// GPU times measured so far, or that the adapter has no timestamps.
    #[must_use]
    pub fn gpu_timing(&self) -> GpuTiming {
        self.timer.as_ref().map_or(GpuTiming::Unsupported, |t| GpuTiming::Times(t.times()))
    }

    /// Start the GPU times' sums again (the bench leaves out its first frame).
    pub fn reset_gpu_totals(&mut self) {
        if let Some(t) = self.timer.as_mut() {
            t.reset_totals();
        }
    }

    /// Whether the view must be drawn again although nothing the caller changed (a surface's
    /// buffer grew).
    #[must_use]
    pub fn needs_redraw(&self) -> bool {
        self.redraw
    }

    /// Triangles of the isosurface last made (once the GPU has reported them).
    #[must_use]
    pub fn iso_stats(&self) -> Option<MeshStats> {
        self.iso_mesh.as_ref().and_then(|m| m.stats)
    }

    /// Cube edge (cells) the next isosurface of this view's grid is meant to be marched with
    /// (its size and level of detail): a solver that writes sampled frames
    /// ([`sim_core::frame::FrameRegion::Sampled`]) for it samples this lattice.
    #[must_use]
    pub fn iso_stride_wanted(&self) -> Option<u32> {
        let f = self.field.as_ref()?;
        let m = self.iso_mesh.as_ref()?;
        Some(iso_stride(f.size) * m.lod)
    }

    /// Triangles of the solid surfaces last made.
    #[must_use]
    pub fn solid_stats(&self) -> Option<MeshStats> {
        self.solid_mesh.as_ref().and_then(|m| m.stats)
    }

    /// Draw the view into the view texture of `size` pixels (reallocated when the size changes;
    /// returns true then, so a caller that registered the texture elsewhere can refresh it).
    /// Surfaces whose data or threshold changed are made again first (compute passes in the same
    /// encoder). A zero size draws nothing.
    pub fn render(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        size: [u32; 2],
        p: &ViewParams,
    ) -> bool {
        if size[0] == 0 || size[1] == 0 {
            return false;
        }
        self.redraw = false;
        let mut reallocated = false;
        if self.target.as_ref().is_none_or(|t| t.size != size) {
            let extent = wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 };
            let color = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("field view"),
                size: extent,
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: VIEW_FORMAT,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_SRC,
                view_formats: &[],
            });
            let depth = device.create_texture(&wgpu::TextureDescriptor {
                label: Some("field depth"),
                size: extent,
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: DEPTH_FORMAT,
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
                view_formats: &[],
            });
            let view = color.create_view(&wgpu::TextureViewDescriptor::default());
            let depth_view = depth.create_view(&wgpu::TextureViewDescriptor::default());
            self.target = Some(Target { size, color, view, depth_view });
            reallocated = true;
        }
        // Make the surfaces that are shown and out of date (before the render pass).
        let (draw_iso, draw_solids) = self.update_surfaces(device, queue, encoder, p);
        let Some(t) = &self.target else { return reallocated };
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("field view"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &t.view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(BACKGROUND), store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: Some(wgpu::RenderPassDepthStencilAttachment {
                view: &t.depth_view,
                depth_ops: Some(wgpu::Operations { load: wgpu::LoadOp::Clear(1.0), store: wgpu::StoreOp::Discard }),
                stencil_ops: None,
            }),
            timestamp_writes: self.timer.as_mut().and_then(|t| t.render_writes(GpuSpan::Draw)),
            occlusion_query_set: None,
            multiview_mask: None,
        });
        let Some(f) = &self.field else { return reallocated };
        let Some(bind_group) = &f.bind_group else { return reallocated };
        let n = f.size;
        let is_2d = n[2] == 1;
        let aspect = size[0] as f32 / size[1] as f32;
        let clip_from_world = p.camera.clip_from_world(n, aspect, is_2d);
        let eye = p.camera.eye(n, aspect);
        let clampi = |i: usize, a: usize| i.min(n[a] - 1) as u32;
        let mask = if is_2d { 4 } else { u32::from(p.show[0]) | u32::from(p.show[1]) << 1 | u32::from(p.show[2]) << 2 };
        let brick = f.bricks.as_ref().filter(|_| p.bricks).map(|(_, b)| *b);
        let bricks = brick.map_or([1, 1, 1, 0], |b| [b[0] as u32, b[1] as u32, b[2] as u32, 1]);
        let iso_range = p.iso.map_or((0.0, 1.0), |i| i.color_range);
        let globals = gpu_data::FieldGlobals {
            clip_from_world: clip_from_world.to_cols_array_2d(),
            size: [n[0] as u32, n[1] as u32, n[2] as u32, p.cmap.row()],
            slices: [clampi(p.slices[0], 0), clampi(p.slices[1], 1), if is_2d { 0 } else { clampi(p.slices[2], 2) }, mask],
            range: [p.range.0, p.range.1, BRICK_TINT, 0.0],
            eye: [eye.x, eye.y, eye.z, 1.0],
            iso_range: [iso_range.0, iso_range.1, SOLID_GREY, 0.0],
            bricks,
            brick_colors: BrickClass::ALL.map(|c| {
                let k = BRICK_COLORS[c as usize];
                [f32::from(k[0]) / 255.0, f32::from(k[1]) / 255.0, f32::from(k[2]) / 255.0, 1.0]
            }),
            pitch: [f.field.as_ref().map_or(0, |b| b.pitch), 0, 0, 0],
        };
        queue.write_buffer(&self.globals, 0, bytemuck::bytes_of(&globals));
        pass.set_bind_group(0, bind_group, &[]);
        // Where the device writes timestamps inside passes, the draw is split: slices, surfaces.
        let mut split = self.timer.as_mut().filter(|t| t.inside_passes());
        GpuTimer::pass_span(split.as_deref_mut(), &mut pass, GpuSpan::DrawSlices, |pass| {
            pass.set_pipeline(&self.slice_pipeline);
            pass.draw(0..6, 0..3);
        });
        GpuTimer::pass_span(split, &mut pass, GpuSpan::DrawSurfaces, |pass| {
            for (on, mesh, pipeline) in
                [(draw_iso, &self.iso_mesh, &self.iso_pipeline), (draw_solids, &self.solid_mesh, &self.solid_pipeline)]
            {
                let Some(m) = mesh.as_ref().filter(|_| on) else { continue };
                let Some(v) = &m.verts else { continue };
                pass.set_pipeline(pipeline);
                pass.set_vertex_buffer(0, v.slice(..));
                match (&m.indexed, m.mode) {
                    (Some((ib, _)), 0) => {
                        pass.set_index_buffer(ib.slice(..u64::from(m.capacity.max(3)) * 4), wgpu::IndexFormat::Uint32);
                        pass.draw_indexed_indirect(&m.args, 0);
                    }
                    _ => pass.draw_indirect(&m.args, 0),
                }
            }
        });
        if !is_2d {
            pass.set_pipeline(&self.box_pipeline);
            pass.draw(0..24, 0..1);
            if let Some(b) = self.outlines.as_ref().filter(|_| p.outlines && self.outline_count > 0) {
                pass.set_pipeline(&self.outline_pipeline);
                pass.set_vertex_buffer(0, b.slice(..));
                pass.draw(0..24, 0..self.outline_count);
            }
        }
        reallocated
    }

    /// Make the isosurface and the solid surfaces again where their data or threshold changed
    /// since they were made; returns which of them to draw.
    fn update_surfaces(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        p: &ViewParams,
    ) -> (bool, bool) {
        let (Some(mc), Some(f)) = (&self.mc, &self.field) else { return (false, false) };
        if f.size[2] < 2 {
            return (false, false);
        }
        let mut draw = (false, false);
        if let (Some(iso), Some((iso_field, speed)), Some(mesh)) = (p.iso, &f.iso, self.iso_mesh.as_mut()) {
            // Data of another field (the new one is on its way) is not drawn.
            if self.iso_kind == Some(iso.kind) && iso.threshold.is_finite() {
                let key = MeshKey { data: self.iso_serial, threshold: iso.threshold.to_bits() };
                if mesh.key != Some(key) {
                    let tw = self.timer.as_mut().and_then(|t| t.compute_writes(GpuSpan::Iso));
                    let data = (iso_field, speed, &f.solid);
                    mesh.compute(device, queue, encoder, mc, data, f.size, iso.threshold, iso_stride(f.size), key, tw);
                }
                draw.0 = true;
            }
        }
        if let (true, Some(mesh)) = (p.solids, self.solid_mesh.as_mut()) {
            let key = MeshKey { data: self.solid_serial, threshold: 0 };
            if mesh.key != Some(key) {
                let tw = self.timer.as_mut().and_then(|t| t.compute_writes(GpuSpan::Iso));
                let data = (&self.dummy_field, &self.dummy_field, &f.solid);
                mesh.compute(device, queue, encoder, mc, data, f.size, 0.5, 1, key, tw);
            }
            draw.1 = true;
        }
        draw
    }
}

/// Copy a texture (RGBA8, `size` pixels) back to the host: rows of `4 * width` bytes.
#[must_use]
pub fn read_texture(device: &wgpu::Device, queue: &wgpu::Queue, texture: &wgpu::Texture, size: [u32; 2]) -> Option<Vec<u8>> {
    let row = 4 * size[0];
    let padded = row.div_ceil(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) * wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: u64::from(padded) * u64::from(size[1]),
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    encoder.copy_texture_to_buffer(
        texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(padded), rows_per_image: Some(size[1]) },
        },
        wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 },
    );
    queue.submit([encoder.finish()]);
    let slice = buffer.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).ok()?;
    rx.recv().ok()?.ok()?;
    let data = slice.get_mapped_range().ok()?;
    let mut out = Vec::with_capacity((row * size[1]) as usize);
    for y in 0..size[1] as usize {
        let start = y * padded as usize;
        out.extend_from_slice(&data[start..start + row as usize]);
    }
    drop(data);
    buffer.unmap();
    Some(out)
}
