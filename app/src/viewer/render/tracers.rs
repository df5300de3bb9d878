//! Tracers and streamlines: particles carried through the velocity of the frame the view already
//! holds (a compute pass each time the frame's step moves on), and lines traced through that
//! velocity from a rectangle of seeds (a compute pass whenever the frame or the seeds change),
//! drawn in the view's render pass over the slices and surfaces. All of it stays on the GPU: the
//! velocity is read where the frame lies (a buffer shared with the solver, or the upload of a host
//! frame), the particles and lines live in buffers of the renderer's own.

use super::{alpha_blend, storage, texture, uniform, FieldRenderer, DEPTH_FORMAT, VIEW_FORMAT};
use bytemuck::{Pod, Zeroable};

/// The WGSL of the tracers' and streamlines' compute passes (their `Params` first).
pub const TRACERS_WGSL: &str =
    concat!(include_str!("../../../../shaders/tracer_params.wgsl"), include_str!("../../../../shaders/tracers.wgsl"));
/// The WGSL that draws them (the same `Params` first).
pub const TRACERS_DRAW_WGSL: &str =
    concat!(include_str!("../../../../shaders/tracer_params.wgsl"), include_str!("../../../../shaders/tracers_draw.wgsl"));

/// Most tracers (one workgroup of 64 per 64 tracers, in one dispatch dimension).
pub const MAX_TRACERS: u32 = 1 << 22;
/// Most points of all streamlines together.
pub const MAX_LINE_POINTS: u32 = 1 << 21;
/// Streamlines are traced through a new velocity at most this often.
pub const RETRACE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// Most time steps tracers move by in one pass (a run that went on unseen for longer: they
/// move by this much, not by the whole gap).
pub const MAX_STEPS_PER_PASS: f32 = 4000.0;

/// `Params` in tracer_params.wgsl (both tracer shaders).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TracerParams {
    /// Clip space from world space (cells).
    pub clip_from_world: [[f32; 4]; 4],
    /// nx, ny, nz, tracers.
    pub size: [u32; 4],
    /// Velocity row pitch, lattice spacing, pass counter, place-anew flag.
    pub pitch: [u32; 4],
    /// Seed box lower corner; w = life in time steps.
    pub seed_min: [f32; 4],
    /// Seed box upper corner; w = time steps to move by.
    pub seed_max: [f32; 4],
    /// First corner of the streamline seed rectangle; w = step length (cells).
    pub line_origin: [f32; 4],
    /// Edge u of the rectangle.
    pub line_u: [f32; 4],
    /// Edge v of the rectangle.
    pub line_v: [f32; 4],
    /// Seeds along u and v, points per line, colour map row.
    pub lines: [u32; 4],
    /// Tracer colour.
    pub color: [f32; 4],
    /// Dot size (pixels), view width and height (pixels), lines coloured by speed (1) or not.
    pub style: [f32; 4],
    /// Speed range of the lines' colours.
    pub line_range: [f32; 4],
}
const _: () = assert!(std::mem::size_of::<TracerParams>() == 240);

/// The tracers to move and draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracerView {
    /// How many (at most [`MAX_TRACERS`]).
    pub count: u32,
    /// The box (cells, world space) tracers are released in when they leave.
    pub seed: [[f32; 3]; 2],
    /// Time steps a tracer lives before it is released again (infinite: until it leaves).
    pub life: f32,
    /// Time step of the frame drawn: tracers move by its difference from the step they were
    /// last moved to (back in time: they are placed anew).
    pub step: u64,
    /// Changes whenever the seeding changes: every tracer is placed anew.
    pub generation: u64,
    /// Dot diameter in pixels.
    pub size_px: f32,
    /// Dot colour (sRGB, alpha).
    pub color: [f32; 4],
}

/// The streamlines to trace and draw: `seeds[0] x seeds[1]` seeds spread over the rectangle
/// `origin + a u + b v` (a, b in 0..1), each traced along the flow for `points` points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamlineView {
    /// A corner of the seed rectangle (cells).
    pub origin: [f32; 3],
    /// One edge.
    pub u: [f32; 3],
    /// The other edge (zero: a seed line).
    pub v: [f32; 3],
    /// Seeds along u and along v.
    pub seeds: [u32; 2],
    /// Points per line.
    pub points: u32,
    /// Step between points (cells).
    pub step: f32,
    /// Coloured by speed through the view's colour map (else `color`).
    pub by_speed: bool,
    /// Speed range of the colours.
    pub range: (f32, f32),
    /// Colour when not by speed.
    pub color: [f32; 4],
}

impl StreamlineView {
    /// Seeds along u and v that are traced: as asked, fewer where all points would not fit
    /// [`MAX_LINE_POINTS`].
    #[must_use]
    pub fn grid(&self) -> [u32; 2] {
        let lines = MAX_LINE_POINTS / self.points.max(2);
        let a = self.seeds[0].clamp(1, lines);
        [a, self.seeds[1].clamp(1, lines / a)]
    }

    /// Lines traced.
    #[must_use]
    pub fn lines(&self) -> u32 {
        let [a, b] = self.grid();
        a * b
    }
}

pub(super) struct TracerPipelines {
    compute_layout: wgpu::BindGroupLayout,
    draw_layout: wgpu::BindGroupLayout,
    advect: wgpu::ComputePipeline,
    trace: wgpu::ComputePipeline,
    dots: wgpu::RenderPipeline,
    lines: wgpu::RenderPipeline,
    params: wgpu::Buffer,
}

/// The tracers' and lines' buffers and what they were made from.
#[derive(Default)]
pub(super) struct TracerState {
    tracers: Option<wgpu::Buffer>,
    lines: Option<wgpu::Buffer>,
    /// Tracers placed, their generation and the step they were moved to.
    placed: Option<(u32, u64, u64)>,
    /// The lines traced: the velocity's serial and the view, and when.
    traced: Option<(u64, StreamlineView)>,
    traced_at: Option<std::time::Instant>,
    /// Counts passes (the shader's random numbers).
    counter: u32,
    /// Tracers and lines last drawn.
    drawn: (u32, u32),
}

impl TracerPipelines {
    /// The pipelines (on a device that runs compute shaders: the caller checked).
    pub(super) fn new(device: &wgpu::Device) -> TracerPipelines {
        let cs = wgpu::ShaderStages::COMPUTE;
        let compute_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tracers compute"),
            entries: &[
                uniform(0, cs),
                storage(1, true, cs),
                storage(2, true, cs),
                storage(3, true, cs),
                texture(4, cs, wgpu::TextureSampleType::Uint, wgpu::TextureViewDimension::D3),
                storage(5, false, cs),
                storage(6, false, cs),
            ],
        });
        let vf = wgpu::ShaderStages::VERTEX_FRAGMENT;
        let draw_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("tracers draw"),
            entries: &[
                uniform(0, vf),
                storage(1, true, wgpu::ShaderStages::VERTEX),
                storage(2, true, wgpu::ShaderStages::VERTEX),
                texture(
                    3,
                    wgpu::ShaderStages::VERTEX,
                    wgpu::TextureSampleType::Float { filterable: false },
                    wgpu::TextureViewDimension::D2,
                ),
            ],
        });
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tracers.wgsl"),
            source: wgpu::ShaderSource::Wgsl(TRACERS_WGSL.into()),
        });
        let draw_module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("tracers_draw.wgsl"),
            source: wgpu::ShaderSource::Wgsl(TRACERS_DRAW_WGSL.into()),
        });
        let compute_pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tracers compute"),
            bind_group_layouts: &[Some(&compute_layout)],
            immediate_size: 0,
        });
        let compute = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&compute_pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let draw_pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("tracers draw"),
            bind_group_layouts: &[Some(&draw_layout)],
            immediate_size: 0,
        });
        // Hidden behind slices and surfaces in 3D; writing no depth of their own.
        let depth = wgpu::DepthStencilState {
            format: DEPTH_FORMAT,
            depth_write_enabled: Some(false),
            depth_compare: Some(wgpu::CompareFunction::LessEqual),
            stencil: wgpu::StencilState::default(),
            bias: wgpu::DepthBiasState::default(),
        };
        let blend = alpha_blend();
        let render = |label: &str, vs: &str, fs: &str, topology: wgpu::PrimitiveTopology| {
            device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
                label: Some(label),
                layout: Some(&draw_pl),
                vertex: wgpu::VertexState {
                    module: &draw_module,
                    entry_point: Some(vs),
                    compilation_options: Default::default(),
                    buffers: &[],
                },
                primitive: wgpu::PrimitiveState { topology, ..Default::default() },
                depth_stencil: Some(depth.clone()),
                multisample: wgpu::MultisampleState::default(),
                fragment: Some(wgpu::FragmentState {
                    module: &draw_module,
                    entry_point: Some(fs),
                    compilation_options: Default::default(),
                    targets: &[Some(wgpu::ColorTargetState {
                        format: VIEW_FORMAT,
                        blend: Some(blend),
                        write_mask: wgpu::ColorWrites::ALL,
                    })],
                }),
                multiview_mask: None,
                cache: None,
            })
        };
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tracer params"),
            size: std::mem::size_of::<TracerParams>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        TracerPipelines {
            advect: compute("advect"),
            trace: compute("trace"),
            dots: render("tracer dots", "vs_dot", "fs_dot", wgpu::PrimitiveTopology::TriangleList),
            lines: render("streamlines", "vs_line", "fs_line", wgpu::PrimitiveTopology::LineList),
            compute_layout,
            draw_layout,
            params,
        }
    }
}

/// A storage buffer of at least `bytes`, kept while big enough.
fn ensure_buffer(device: &wgpu::Device, slot: &mut Option<wgpu::Buffer>, bytes: u64, label: &str) -> bool {
    if slot.as_ref().is_some_and(|b| b.size() >= bytes) {
        return false;
    }
    *slot = Some(device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(16).next_power_of_two(),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    }));
    true
}

/// The first `count` vec4s of `buffer`, read back to the host (tests).
#[cfg(test)]
fn read_vec4s(device: &wgpu::Device, queue: &wgpu::Queue, buffer: &wgpu::Buffer, count: u32) -> Vec<[f32; 4]> {
    let bytes = u64::from(count.max(1)) * 16;
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("tracers read back"),
        size: bytes,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tracers read back") });
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
    queue.submit([encoder.finish()]);
    let slice = staging.slice(..);
    slice.map_async(wgpu::MapMode::Read, |_| {});
    device.poll(wgpu::PollType::wait_indefinitely()).expect("GPU wait");
    let out = bytemuck::cast_slice::<u8, [f32; 4]>(&slice.get_mapped_range().expect("mapped")).to_vec();
    staging.unmap();
    out.into_iter().take(count as usize).collect()
}

/// What one draw of the tracers and lines needs: the bind group and the counts.
pub(super) struct TracerDraw {
    bind_group: wgpu::BindGroup,
    dots: u32,
    segments: u32,
}

impl FieldRenderer {
    /// Move the tracers and trace the lines where their inputs changed (compute passes into
    /// `encoder`, before the render pass), and say what to draw. Nothing without compute
    /// shaders, without a velocity field, or with neither tracers nor lines asked for.
    pub(super) fn update_tracers(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        encoder: &mut wgpu::CommandEncoder,
        p: &super::ViewParams,
        view_size: [u32; 2],
        clip_from_world: glam::Mat4,
    ) -> Option<TracerDraw> {
        let (Some(tp), Some(f)) = (&self.tracer_pipelines, &self.field) else { return None };
        let Some(vel) = f.velocity.as_ref() else {
            self.tracer_state.drawn = (0, 0);
            return None;
        };
        if p.tracers.is_none() && p.streamlines.is_none() {
            self.tracer_state.drawn = (0, 0);
            return None;
        }
        let st = &mut self.tracer_state;
        let n = f.size;
        let count = p.tracers.map_or(0, |t| t.count.min(MAX_TRACERS));
        let line_count = p.streamlines.map_or(0, |s| s.lines());
        let points = p.streamlines.map_or(2, |s| s.points.max(2));
        let mut fresh = ensure_buffer(device, &mut st.tracers, u64::from(count) * 16, "tracers");
        fresh |= ensure_buffer(device, &mut st.lines, u64::from(line_count * points) * 16, "streamline points");
        // Place the tracers anew, move them by the steps since the last pass, or leave them.
        let (place, dt) = match (p.tracers, st.placed) {
            (None, _) => (false, 0.0),
            (Some(t), Some((c, g, at))) if !fresh && c == count && g == t.generation && t.step >= at => {
                (false, ((t.step - at) as f32).min(MAX_STEPS_PER_PASS))
            }
            (Some(_), _) => (true, 0.0),
        };
        if let Some(t) = p.tracers {
            st.placed = Some((count, t.generation, t.step));
        }
        // Traced again at once for new seeds, and for a new velocity at most every
        // RETRACE_EVERY (each line is one thread's walk of hundreds of steps, GPU time the
        // solver would otherwise wait for with every frame).
        let new_seeds = p.streamlines.is_some_and(|s| fresh || st.traced.is_none_or(|(_, t)| t != s));
        let new_velocity = st.traced.is_some_and(|(v, _)| v != self.velocity_serial);
        let recent = st.traced_at.is_some_and(|t| t.elapsed() < RETRACE_EVERY);
        let lines_due = p.streamlines.is_some() && (new_seeds || (new_velocity && !recent));
        if lines_due {
            st.traced = p.streamlines.map(|s| (self.velocity_serial, s));
            st.traced_at = Some(std::time::Instant::now());
        } else if p.streamlines.is_none() {
            st.traced = None;
        }
        st.counter = st.counter.wrapping_add(1);
        let t = p.tracers.unwrap_or(TracerView {
            count: 0,
            seed: [[0.0; 3]; 2],
            life: 0.0,
            step: 0,
            generation: 0,
            size_px: 1.0,
            color: [1.0; 4],
        });
        let s = p.streamlines;
        let v3 = |a: [f32; 3], w: f32| [a[0], a[1], a[2], w];
        let params = TracerParams {
            clip_from_world: clip_from_world.to_cols_array_2d(),
            size: [n[0] as u32, n[1] as u32, n[2] as u32, count],
            pitch: [vel[0].pitch, vel[0].lattice.max(1), st.counter, u32::from(place)],
            seed_min: v3(t.seed[0], if t.life.is_finite() { t.life } else { f32::MAX }),
            seed_max: v3(t.seed[1], dt),
            line_origin: v3(s.map_or([0.0; 3], |s| s.origin), s.map_or(0.5, |s| s.step.max(0.05))),
            line_u: v3(s.map_or([0.0; 3], |s| s.u), 0.0),
            line_v: v3(s.map_or([0.0; 3], |s| s.v), 0.0),
            lines: {
                let [a, b] = s.map_or([0, 0], |s| s.grid());
                [a, b, points, p.cmap.row()]
            },
            color: s.filter(|_| count == 0).map_or(t.color, |s| s.color),
            style: [t.size_px, view_size[0] as f32, view_size[1] as f32, f32::from(u8::from(s.is_some_and(|s| s.by_speed)))],
            line_range: [s.map_or(0.0, |s| s.range.0), s.map_or(1.0, |s| s.range.1), 0.0, 0.0],
        };
        queue.write_buffer(&tp.params, 0, bytemuck::bytes_of(&params));
        let (Some(tb), Some(lb)) = (&st.tracers, &st.lines) else { return None };
        let solid = f.solid.create_view(&wgpu::TextureViewDescriptor::default());
        let compute_bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tracers compute"),
            layout: &tp.compute_layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: tp.params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: vel[0].resource() },
                wgpu::BindGroupEntry { binding: 2, resource: vel[1].resource() },
                wgpu::BindGroupEntry { binding: 3, resource: vel[2].resource() },
                wgpu::BindGroupEntry { binding: 4, resource: wgpu::BindingResource::TextureView(&solid) },
                wgpu::BindGroupEntry { binding: 5, resource: tb.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: lb.as_entire_binding() },
            ],
        });
        let advect = count > 0 && (place || dt > 0.0);
        if advect || lines_due {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("tracers"), timestamp_writes: None });
            pass.set_bind_group(0, &compute_bg, &[]);
            if advect {
                pass.set_pipeline(&tp.advect);
                pass.dispatch_workgroups(count.div_ceil(64), 1, 1);
            }
            if lines_due && line_count > 0 {
                pass.set_pipeline(&tp.trace);
                pass.dispatch_workgroups(line_count.div_ceil(64), 1, 1);
            }
        }
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("tracers draw"),
            layout: &tp.draw_layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: tp.params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: tb.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: lb.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: wgpu::BindingResource::TextureView(&self.lut_view) },
            ],
        });
        let segments = line_count * (points - 1);
        st.drawn = (count, line_count);
        Some(TracerDraw { bind_group, dots: count, segments })
    }

    /// Draw what [`FieldRenderer::update_tracers`] made (inside the view's render pass).
    pub(super) fn draw_tracers(&self, pass: &mut wgpu::RenderPass<'_>, d: &TracerDraw) {
        let Some(tp) = &self.tracer_pipelines else { return };
        pass.set_bind_group(0, &d.bind_group, &[]);
        if d.segments > 0 {
            pass.set_pipeline(&tp.lines);
            pass.draw(0..2 * d.segments, 0..1);
        }
        if d.dots > 0 {
            pass.set_pipeline(&tp.dots);
            pass.draw(0..3, 0..d.dots);
        }
    }

    /// Tracers and streamlines drawn by the last [`FieldRenderer::render`] (0, 0: none, or no
    /// velocity to move them with).
    #[must_use]
    pub fn tracers_drawn(&self) -> (u32, u32) {
        self.tracer_state.drawn
    }

    /// The tracers (x, y, z, age) and the streamlines' points (x, y, z, speed; speed -1 past a
    /// line's end) as the last draw left them (tests).
    #[cfg(test)]
    pub fn tracers_for_tests(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> (Vec<[f32; 4]>, Vec<[f32; 4]>) {
        let st = &self.tracer_state;
        let read = |b: &Option<wgpu::Buffer>, n: u32| {
            b.as_ref().map_or_else(Vec::new, |b| read_vec4s(device, queue, b, n.min((b.size() / 16) as u32)))
        };
        let points = st.traced.map_or(0, |(_, s)| s.lines() * s.points.max(2));
        (read(&st.tracers, st.drawn.0), read(&st.lines, points))
    }

    /// Whether the view holds a velocity field for tracers and streamlines.
    #[cfg(test)]
    #[must_use]
    pub fn has_velocity(&self) -> bool {
        self.field.as_ref().is_some_and(|f| f.velocity.is_some())
    }
}
