//! The field renderer: slice planes of a scalar field and the domain box, drawn with wgpu into
//! a texture. Knows nothing of egui (the window shows the texture; tests read it back).

use super::camera::Camera;
use super::colormap::{self, ColorMap, LUT_SIZE};
use bytemuck::{Pod, Zeroable};

/// The WGSL of the field view.
pub const FIELD_WGSL: &str = include_str!("../../../shaders/field.wgsl");

/// Colour format of the view texture: plain RGBA8 holding gamma-encoded (sRGB) colours, the way
/// egui treats its textures; the stored bytes are the colour map's sRGB bytes.
pub const VIEW_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;
const DEPTH_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Depth32Float;
/// Background colour of the view (sRGB).
pub const BACKGROUND: wgpu::Color = wgpu::Color { r: 0.06, g: 0.065, b: 0.075, a: 1.0 };

/// GPU-side structs. Keep in sync with `shaders/field.wgsl`.
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
        /// lo, hi of the colour range.
        pub range: [f32; 4],
    }
    const _: () = assert!(std::mem::size_of::<FieldGlobals>() == 112);
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
}

struct FieldTextures {
    size: [usize; 3],
    field: wgpu::Texture,
    solid: wgpu::Texture,
    bind_group: wgpu::BindGroup,
}

struct Target {
    size: [u32; 2],
    color: wgpu::Texture,
    view: wgpu::TextureView,
    depth_view: wgpu::TextureView,
}

/// Pipelines, the field textures and the view texture.
pub struct FieldRenderer {
    slice_pipeline: wgpu::RenderPipeline,
    box_pipeline: wgpu::RenderPipeline,
    layout: wgpu::BindGroupLayout,
    globals: wgpu::Buffer,
    lut_view: wgpu::TextureView,
    field: Option<FieldTextures>,
    target: Option<Target>,
}

/// Errors the renderer reports (shown in the window).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The domain does not fit the GPU's 3D texture limit.
    #[error("the domain {0:?} is larger than this GPU's 3D texture limit ({1} per axis): the view cannot show it")]
    TooLarge([usize; 3], u32),
    /// Data of the wrong length.
    #[error("field of {0} values for a domain of {1} cells")]
    Length(usize, usize),
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
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Texture { sample_type, view_dimension: dim, multisampled: false },
            count: None,
        };
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
                tex_entry(1, wgpu::TextureSampleType::Float { filterable: false }, wgpu::TextureViewDimension::D3),
                tex_entry(2, wgpu::TextureSampleType::Uint, wgpu::TextureViewDimension::D3),
                tex_entry(3, wgpu::TextureSampleType::Float { filterable: false }, wgpu::TextureViewDimension::D2),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("field"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let depth = |write: bool| wgpu::DepthStencilState {
            format: DEPTH_FORMAT,
            depth_write_enabled: Some(write),
            depth_compare: Some(wgpu::CompareFunction::LessEqual),
            stencil: wgpu::StencilState::default(),
            bias: wgpu::DepthBiasState::default(),
        };
        let pipeline = |label: &str, vs: &str, fs: &str, topology: wgpu::PrimitiveTopology| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(label),
                layout: Some(&pipeline_layout),
                vertex: wgpu::VertexState { module: &module, entry_point: Some(vs), compilation_options: Default::default(), buffers: &[] },
                primitive: wgpu::PrimitiveState { topology, ..Default::default() },
                depth_stencil: Some(depth(true)),
                multisample: wgpu::MultisampleState::default(),
                fragment: Some(wgpu::FragmentState {
                    module: &module,
                    entry_point: Some(fs),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState { format: VIEW_FORMAT, blend: None, write_mask: wgpu::ColorWrites::ALL })],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let slice_pipeline = pipeline("slices", "vs_slice", "fs_slice", wgpu::PrimitiveTopology::TriangleList);
        let box_pipeline = pipeline("box", "vs_box", "fs_box", wgpu::PrimitiveTopology::LineList);
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
        FieldRenderer { slice_pipeline, box_pipeline, layout, globals, lut_view, field: None, target: None }
    }

    /// Upload a scalar field and the solid mask (x fastest). Textures are reallocated only when
    /// the size changes.
    ///
    /// # Errors
    /// A domain over the GPU's 3D texture limit, or data of the wrong length.
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
        let max = device.limits().max_texture_dimension_3d;
        if size.iter().any(|&n| n == 0 || n > max as usize) {
            return Err(RenderError::TooLarge(size, max));
        }
        let extent = wgpu::Extent3d { width: size[0] as u32, height: size[1] as u32, depth_or_array_layers: size[2] as u32 };
        if self.field.as_ref().is_none_or(|f| f.size != size) {
            let tex = |label: &str, format: wgpu::TextureFormat| {
                device.create_texture(&wgpu::TextureDescriptor {
                    label: Some(label),
                    size: extent,
                    mip_level_count: 1,
                    sample_count: 1,
                    dimension: wgpu::TextureDimension::D3,
                    format,
                    usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                    view_formats: &[],
                })
            };
            let field = tex("field", wgpu::TextureFormat::R32Float);
            let solid_tex = tex("solid", wgpu::TextureFormat::R8Uint);
            let fv = field.create_view(&wgpu::TextureViewDescriptor::default());
            let sv = solid_tex.create_view(&wgpu::TextureViewDescriptor::default());
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("field"),
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: self.globals.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: wgpu::BindingResource::TextureView(&fv) },
                    wgpu::BindGroupEntry { binding: 2, resource: wgpu::BindingResource::TextureView(&sv) },
                    wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&self.lut_view) },
                ],
            });
            // A new texture starts zeroed: no solid cells until a mask arrives.
            self.field = Some(FieldTextures { size, field, solid: solid_tex, bind_group });
        }
        let Some(f) = &self.field else { return Ok(()) };
        queue.write_texture(
            f.field.as_image_copy(),
            bytemuck::cast_slice(values),
            wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(4 * size[0] as u32), rows_per_image: Some(size[1] as u32) },
            extent,
        );
        if let Some(s) = solid {
            queue.write_texture(
                f.solid.as_image_copy(),
                s,
                wgpu::TexelCopyBufferLayout { offset: 0, bytes_per_row: Some(size[0] as u32), rows_per_image: Some(size[1] as u32) },
                extent,
            );
        }
        Ok(())
    }

    /// The view texture (created by [`FieldRenderer::render`]).
    #[must_use]
    pub fn target(&self) -> Option<(&wgpu::Texture, &wgpu::TextureView)> {
        self.target.as_ref().map(|t| (&t.color, &t.view))
    }

    /// Draw the view into the view texture of `size` pixels (reallocated when the size changes;
    /// returns true then, so a caller that registered the texture elsewhere can refresh it).
    /// A zero size draws nothing.
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
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        let Some(f) = &self.field else { return reallocated };
        let n = f.size;
        let is_2d = n[2] == 1;
        let aspect = size[0] as f32 / size[1] as f32;
        let clip_from_world = p.camera.clip_from_world(n, aspect, is_2d);
        let clampi = |i: usize, a: usize| i.min(n[a] - 1) as u32;
        let mask = if is_2d { 4 } else { u32::from(p.show[0]) | u32::from(p.show[1]) << 1 | u32::from(p.show[2]) << 2 };
        let globals = gpu_data::FieldGlobals {
            clip_from_world: clip_from_world.to_cols_array_2d(),
            size: [n[0] as u32, n[1] as u32, n[2] as u32, p.cmap.row()],
            slices: [clampi(p.slices[0], 0), clampi(p.slices[1], 1), if is_2d { 0 } else { clampi(p.slices[2], 2) }, mask],
            range: [p.range.0, p.range.1, 0.0, 0.0],
        };
        queue.write_buffer(&self.globals, 0, bytemuck::bytes_of(&globals));
        pass.set_bind_group(0, &f.bind_group, &[]);
        pass.set_pipeline(&self.slice_pipeline);
        pass.draw(0..6, 0..3);
        if !is_2d {
            pass.set_pipeline(&self.box_pipeline);
            pass.draw(0..24, 0..1);
        }
        reallocated
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
