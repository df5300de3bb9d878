//! The field renderer: slice planes of a scalar field (with the brick overlay), isosurfaces and
//! solid obstacles as surfaces (marching cubes in a compute shader), the domain box and outlines
//! of boxes (the solver's bricks, compressed subgrids; later refined blocks), drawn with
//! wgpu into a texture. Knows nothing of egui (the window shows the texture; tests read it back).
//!
//! The fields are read by the shaders straight from storage buffers: a frame the solver wrote
//! into GPU memory shared with the renderer is bound where it lies (rows padded, planes one after
//! the other), with no copy; fields from host memory are written into buffers of the same kind
//! with `queue.write_buffer`. One shader path for both.
//!
//! Here the renderer and its pipelines; `field`: its inputs uploaded or bound; `mesh`: the
//! marching-cubes surfaces; `draw`: one frame; `outlines`: the boxes outlined; `readback`: the
//! texture read back.

mod draw;
mod field;
mod mesh;
mod outlines;
mod readback;
mod tracers;

pub use outlines::*;
pub use readback::*;
pub use tracers::{StreamlineView, TracerView, MAX_TRACERS};
#[cfg(test)]
pub use tracers::{TRACERS_DRAW_WGSL, TRACERS_WGSL};

use super::camera::Camera;
use super::colormap::{self, ColorMap, LUT_SIZE};
use super::gpu_timer::{GpuTimer, GpuTiming};
use bytemuck::{Pod, Zeroable};
use mesh::Mesh;
use sim_core::fields::FieldKind;
use std::any::Any;
use std::sync::Arc;

/// The WGSL of the field view.
pub const FIELD_WGSL: &str = include_str!("../../../../shaders/field.wgsl");
/// The WGSL of the marching-cubes compute passes.
pub const MARCHING_CUBES_WGSL: &str = include_str!("../../../../shaders/marching_cubes.wgsl");

/// Colour format of the view texture: plain RGBA8 holding gamma-encoded (sRGB) colours, the way
/// egui treats its textures; the stored bytes are the colour map's sRGB bytes.
pub const VIEW_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;
const DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;
/// Background colour of the view (sRGB).
pub const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.06, g: 0.065, b: 0.075, a: 1.0 };
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
    /// Tracers carried by the flow (with a velocity field: [`FieldRenderer::upload_velocity`]).
    pub tracers: Option<TracerView>,
    /// Streamlines from a rectangle of seeds.
    pub streamlines: Option<StreamlineView>,
}

impl ViewParams {
    /// Slices and box only: no isosurface, no solid surfaces, no overlay, no outlines.
    #[must_use]
    pub fn plain(cmap: ColorMap, range: (f32, f32), slices: [usize; 3], show: [bool; 3], camera: Camera) -> ViewParams {
        ViewParams {
            cmap,
            range,
            slices,
            show,
            camera,
            iso: None,
            solids: false,
            bricks: false,
            outlines: false,
            tracers: None,
            streamlines: None,
        }
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
/// the speed, the three velocity components (made on first use, kept while the grid's size
/// stays).
#[derive(Default)]
struct HostBuffers([Option<wgpu::Buffer>; 6]);

struct FieldData {
    size: [usize; 3],
    /// The slices' field (None until one is uploaded).
    field: Option<FieldBinding>,
    solid: wgpu::Texture,
    /// Isosurface field and speed.
    iso: Option<(FieldBinding, FieldBinding)>,
    /// Brick classes and the brick size.
    bricks: Option<(wgpu::Texture, [usize; 3])>,
    /// Velocity components x, y, z (z of a 2D grid: a zeroed stand-in), for tracers and
    /// streamlines.
    velocity: Option<[FieldBinding; 3]>,
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
    /// Tracers and streamlines (where the device runs compute shaders).
    tracer_pipelines: Option<tracers::TracerPipelines>,
    tracer_state: tracers::TracerState,
    /// Counts velocity uploads (what the streamlines were traced through).
    velocity_serial: u64,
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

/// A storage buffer entry of a bind group layout.
pub(super) fn storage(binding: u32, read_only: bool, visibility: wgpu::ShaderStages) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

/// A uniform buffer entry of a bind group layout.
pub(super) fn uniform(binding: u32, visibility: wgpu::ShaderStages) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility,
        ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: false, min_binding_size: None },
        count: None,
    }
}

/// A texture entry of a bind group layout.
pub(super) fn texture(
    binding: u32,
    visibility: wgpu::ShaderStages,
    sample_type: wgpu::TextureSampleType,
    dim: wgpu::TextureViewDimension,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility,
        ty: wgpu::BindingType::Texture { sample_type, view_dimension: dim, multisampled: false },
        count: None,
    }
}

/// Blending by the source's alpha (outlines, tracers); the view's alpha stays 1.
pub(super) fn alpha_blend() -> wgpu::BlendState {
    wgpu::BlendState {
        color: wgpu::BlendComponent {
            src_factor: wgpu::BlendFactor::SrcAlpha,
            dst_factor: wgpu::BlendFactor::OneMinusSrcAlpha,
            operation: wgpu::BlendOperation::Add,
        },
        alpha: wgpu::BlendComponent::OVER,
    }
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
        // Outlines blend by their alpha.
        let blend = alpha_blend();
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
        let tracer_pipelines = mc.is_some().then(|| tracers::TracerPipelines::new(device));
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
            tracer_pipelines,
            tracer_state: tracers::TracerState::default(),
            velocity_serial: 0,
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
        let cs = wgpu::ShaderStages::COMPUTE;
        let uniform = |binding: u32| uniform(binding, cs);
        let storage = |binding: u32, read_only: bool| storage(binding, read_only, cs);
        let tex = |binding: u32, sample_type| texture(binding, cs, sample_type, wgpu::TextureViewDimension::D3);
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
}
