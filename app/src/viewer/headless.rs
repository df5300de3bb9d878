//! Offscreen rendering without a window: the GPU setup for tests and `esoflow run --screenshot`,
//! and the composition of the field view with its legend (egui, rendered by egui-wgpu).

use super::camera::Camera;
use super::legend::{auto_range, default_cmap, legend_texture};
use super::render::{read_texture, FieldRenderer, IsoView, MeshStats, OutlineBox, ViewParams};
use super::worker::{fluid_min_max, solid_mask};
use super::{legend_ui, BrickLegend, IsoLegend, LegendInfo, ViewSpec};
use anyhow::Context as _;
use sim_core::bricks::BrickMap;
use sim_core::fields::FieldKind;
use sim_core::Solver;
use std::path::Path;

/// A device for offscreen work.
pub struct Gpu {
    /// Device.
    pub device: wgpu::Device,
    /// Queue.
    pub queue: wgpu::Queue,
    /// Adapter description.
    pub adapter: String,
}

/// Find any adapter (a software one such as lavapipe is fine) and open a device on it, with GPU
/// timestamps where the adapter has them.
///
/// # Errors
/// No adapter, or the device could not be opened; the message says what to install.
pub fn gpu() -> Result<Gpu, String> {
    gpu_with(true)
}

/// As [`gpu`]; `timestamps` false opens the device without timestamp queries (tests of the
/// path where an adapter lacks them).
///
/// # Errors
/// As [`gpu`].
pub fn gpu_with(timestamps: bool) -> Result<Gpu, String> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY | wgpu::Backends::GL),
        flags: wgpu::InstanceFlags::from_build_config().with_env(),
        backend_options: wgpu::BackendOptions::from_env_or_default(),
        memory_budget_thresholds: wgpu::MemoryBudgetThresholds::default(),
        display: None,
    });
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))
    .map_err(|e| {
        format!("no GPU adapter for offscreen rendering ({e}); on Debian/Ubuntu `apt-get install mesa-vulkan-drivers libvulkan1` gives a software one")
    })?;
    let info = adapter.get_info();
    let base = wgpu::Limits { max_texture_dimension_3d: adapter.limits().max_texture_dimension_3d, ..wgpu::Limits::downlevel_defaults() }
        .using_resolution(adapter.limits());
    let limits = super::render::wanted_limits(base, &adapter.limits());
    // With timeline semaphores that CUDA can share where the device has them (shared frames
    // then hand over on the GPU); a plain device elsewhere.
    let (device, queue, _semaphores) = super::interop::open_device_with_semaphore_export(
        &adapter,
        &wgpu::DeviceDescriptor {
            label: Some("esoflow offscreen"),
            required_limits: limits,
            required_features: if timestamps { super::gpu_timer::wanted_features(adapter.features()) } else { wgpu::Features::empty() },
            ..Default::default()
        },
    )
    .map_err(|e| format!("cannot open the GPU device {}: {e}", info.name))?;
    Ok(Gpu { device, queue, adapter: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type) })
}

/// Height of the legend strip under the field in offscreen pictures.
pub const LEGEND_STRIP: u32 = 84;

/// The data of an offscreen picture.
#[derive(Clone, Copy, Debug)]
pub struct PictureData<'a> {
    /// Cells per axis.
    pub n: [usize; 3],
    /// The field on the slices, x fastest.
    pub values: &'a [f32],
    /// Solid mask (see [`solid_mask`]).
    pub solid: &'a [u8],
    /// The isosurface's field, its values and the velocity magnitude that colours it.
    pub iso: Option<(FieldKind, &'a [f32], &'a [f32])>,
    /// Brick classes for the overlay.
    pub bricks: Option<&'a BrickMap>,
    /// Boxes to outline (drawn where the view's `outlines` is on).
    pub outlines: Option<&'a [OutlineBox]>,
    /// Velocity components x, y, z (tracers, streamlines).
    pub velocity: Option<[&'a [f32]; 3]>,
}

impl<'a> PictureData<'a> {
    /// A field and its solid mask alone.
    #[must_use]
    pub fn field(n: [usize; 3], values: &'a [f32], solid: &'a [u8]) -> PictureData<'a> {
        PictureData { n, values, solid, iso: None, bricks: None, outlines: None, velocity: None }
    }
}

/// Upload `data` into a new renderer and draw it at `size` pixels, waiting for the surfaces'
/// triangle counts (and drawing again if a surface's buffer had to grow). Returns the renderer
/// (its target holds the view) and the isosurface's triangle counts.
///
/// # Errors
/// Data that does not fit the renderer.
pub fn draw_offscreen(
    gpu: &Gpu,
    data: &PictureData,
    params: &ViewParams,
    size: [u32; 2],
) -> anyhow::Result<(FieldRenderer, Option<MeshStats>)> {
    let (device, queue) = (&gpu.device, &gpu.queue);
    let mut fr = FieldRenderer::new(device, queue);
    fr.upload(device, queue, data.n, data.values, Some(data.solid))?;
    if let Some((kind, values, speed)) = data.iso {
        fr.upload_iso(device, queue, data.n, kind, values, speed)?;
    }
    if let Some(b) = data.bricks {
        fr.upload_bricks(device, queue, b)?;
    }
    if let Some(o) = data.outlines {
        fr.set_outlines(device, queue, o);
    }
    if data.velocity.is_some() {
        fr.upload_velocity(device, queue, data.n, data.velocity, 1)?;
    }
    // Tracers in a picture: carried through the velocity for their life first, in passes of a
    // few cells each, so that the picture shows them spread along the flow.
    if let Some(t) = params.tracers {
        let passes = TRACER_WARMUP_PASSES;
        let per_pass = (t.life.min(1e6) / passes as f32).max(1.0) as u64;
        for k in 0..passes {
            let p = ViewParams { tracers: Some(super::render::TracerView { step: k * per_pass, ..t }), ..params.clone() };
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("tracers") });
            fr.render(device, queue, &mut encoder, [8, 8], &p);
            queue.submit([encoder.finish()]);
        }
        let last = ViewParams { tracers: Some(super::render::TracerView { step: passes * per_pass, ..t }), ..params.clone() };
        return draw_final(gpu, fr, &last, size);
    }
    draw_final(gpu, fr, params, size)
}

/// Passes that carry a picture's tracers through the velocity before it is drawn.
pub const TRACER_WARMUP_PASSES: u64 = 96;

/// Draw at `size`, waiting for the surfaces' triangle counts (and drawing again if a
/// surface's buffer had to grow).
fn draw_final(gpu: &Gpu, mut fr: FieldRenderer, params: &ViewParams, size: [u32; 2]) -> anyhow::Result<(FieldRenderer, Option<MeshStats>)> {
    let (device, queue) = (&gpu.device, &gpu.queue);
    // A surface too large for its first buffer grows (at most ~10 times to the device's limit).
    for _ in 0..12 {
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("picture") });
        fr.render(device, queue, &mut encoder, size, params);
        queue.submit([encoder.finish()]);
        fr.poll(device, true);
        if !fr.needs_redraw() {
            break;
        }
    }
    let stats = fr.iso_stats();
    Ok((fr, stats))
}

/// Draw a field and its legend into an RGBA image of `size` pixels: the field fills the top,
/// the legend sits in a strip of [`LEGEND_STRIP`] pixels at the bottom.
///
/// # Errors
/// Rendering or read-back failures.
#[cfg(test)]
pub fn render_picture(
    gpu: &Gpu,
    data: &PictureData,
    params: &ViewParams,
    legend: &LegendInfo,
    size: [u32; 2],
) -> anyhow::Result<image::RgbaImage> {
    render_picture_with(gpu, data, params, size, true, |_| legend.clone())
}

/// Draw a field and its legend into an RGBA image of `size` pixels (the field fills the top,
/// the legend sits in a strip of [`LEGEND_STRIP`] pixels at the bottom), the legend made once
/// the isosurface's triangles are counted; without the legend (`with_legend` false) the field
/// fills it all.
///
/// # Errors
/// Rendering or read-back failures.
pub fn render_picture_with(
    gpu: &Gpu,
    data: &PictureData,
    params: &ViewParams,
    size: [u32; 2],
    with_legend: bool,
    legend: impl FnOnce(Option<MeshStats>) -> LegendInfo,
) -> anyhow::Result<image::RgbaImage> {
    let (device, queue) = (&gpu.device, &gpu.queue);
    let strip = if with_legend { LEGEND_STRIP } else { 0 };
    let field_px = [size[0], size[1].saturating_sub(strip).max(1)];
    let (fr, stats) = draw_offscreen(gpu, data, params, field_px)?;
    let legend = &legend(stats);
    let (_, view) = fr.target().context("no view texture")?;

    let format = wgpu::TextureFormat::Rgba8Unorm;
    let mut renderer = egui_wgpu::Renderer::new(device, format, egui_wgpu::RendererOptions::PREDICTABLE);
    let field_tex = renderer.register_native_texture(device, view, wgpu::FilterMode::Nearest);
    let ctx = egui::Context::default();
    let screen = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(size[0] as f32, size[1] as f32));
    let input = egui::RawInput { screen_rect: Some(screen), ..Default::default() };
    ctx.set_pixels_per_point(1.0);
    let mut legend_tex = None;
    let mut out = ctx.run_ui(input, |ui| {
        let tex = legend_tex.get_or_insert_with(|| legend_texture(ui.ctx(), legend.cmap)).id();
        let rect = ui.max_rect();
        ui.painter().rect_filled(rect, 0.0, egui::Color32::from_gray(12));
        let field_rect = egui::Rect::from_min_size(rect.min, egui::vec2(field_px[0] as f32, field_px[1] as f32));
        ui.painter().image(
            field_tex,
            field_rect,
            egui::Rect::from_min_max(egui::pos2(0.0, 0.0), egui::pos2(1.0, 1.0)),
            egui::Color32::WHITE,
        );
        if with_legend {
            legend_ui(ui, rect, legend, tex);
        }
    });
    let prims = ctx.tessellate(std::mem::take(&mut out.shapes), 1.0);
    for (id, deltas) in &out.textures_delta.set {
        for delta in deltas {
            renderer.update_texture(device, queue, *id, delta);
        }
    }
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("picture"),
        size: wgpu::Extent3d { width: size[0], height: size[1], depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let target_view = target.create_view(&wgpu::TextureViewDescriptor::default());
    let sd = egui_wgpu::ScreenDescriptor { size_in_pixels: size, pixels_per_point: 1.0 };
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("egui") });
    let cmds = renderer.update_buffers(device, queue, &mut encoder, &prims, &sd);
    {
        let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("egui"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &target_view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations { load: wgpu::LoadOp::Clear(wgpu::Color::BLACK), store: wgpu::StoreOp::Store },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        let mut pass = pass.forget_lifetime();
        renderer.render(&mut pass, &prims, &sd);
    }
    queue.submit(cmds.into_iter().chain([encoder.finish()]));
    for id in &out.textures_delta.free {
        renderer.free_texture(id);
    }
    // Applied above; epaint asserts (in debug builds) that no delta is dropped unapplied.
    out.textures_delta.clear();
    let bytes = read_texture(device, queue, &target, size).context("reading the picture back from the GPU failed")?;
    image::RgbaImage::from_raw(size[0], size[1], bytes).context("picture of the wrong size")
}

/// The default picture size for a domain: about 1200 pixels wide, the field's aspect kept in 2D.
#[must_use]
pub fn default_size(n: [usize; 3]) -> [u32; 2] {
    if n[2] == 1 {
        let w = 1200u32;
        let h = ((w as f32 * n[1] as f32 / n[0] as f32).round() as u32).clamp(150, 1600);
        [w, h + LEGEND_STRIP]
    } else {
        [1100, 800]
    }
}

/// Render the solver's current state as the view `spec` says and write a PNG, on `gpu` (opened
/// with [`gpu`] before the run, so that a machine without an adapter is told before the
/// compute, not after).
///
/// # Errors
/// Rendering failures, or the file cannot be written.
pub fn screenshot_solver(gpu: &Gpu, solver: &dyn Solver, spec: &ViewSpec, path: &Path) -> anyhow::Result<String> {
    let img = render_solver(gpu, solver, spec, true)?;
    save_png(&img, path)?;
    Ok(gpu.adapter.clone())
}

/// Render the solver's current state as the view `spec` says, on `gpu`: the picture of
/// [`screenshot_solver`], not written anywhere. With `notes`, what the view leaves out (an
/// isosurface in 2D, capped outlines) and the isosurface's triangle count are printed; a
/// recording prints them for its first frame only.
///
/// # Errors
/// Rendering failures.
pub fn render_solver(gpu: &Gpu, solver: &dyn Solver, spec: &ViewSpec, notes: bool) -> anyhow::Result<image::RgbaImage> {
    let d = solver.domain();
    let n = d.n;
    let three_d = n[2] > 1;
    let solid = solid_mask(d);
    let values = solver.scalar_field(spec.field);
    let (min_max, _) = fluid_min_max(&values, &solid);
    let cmap = spec.cmap.unwrap_or_else(|| default_cmap(spec.field));
    let whole = sim_core::frame::FrameLayout::new(n, 1, 1);
    let robust = super::legend::robust_range(&mut super::legend::frame_sample(&whole, &values, 0, &solid));
    let range = spec.range.unwrap_or_else(|| auto_range(robust.unwrap_or(min_max), cmap));
    let slices = spec.slices.unwrap_or([n[0] / 2, n[1] / 2, n[2] / 2]);
    let mut params = ViewParams::plain(cmap, range, slices, [true; 3], Camera::default());
    params.solids = spec.solids.unwrap_or(true) && three_d;
    params.bricks = spec.bricks;
    let compression = solver.compression().filter(|_| spec.subgrid_outlines && three_d);
    if notes && spec.subgrid_outlines && compression.is_none() {
        eprintln!("note: outlines=subgrids is ignored: this run is not compressed (or not 3D)");
    }
    params.outlines = (spec.brick_outlines || compression.is_some()) && three_d;
    let mut legend = LegendInfo::field(spec.field, cmap, range, spec.range.is_none());
    legend.data = robust.filter(|_| spec.range.is_none()).map(|_| min_max);
    // The isosurface: its field and |u| (the slices' own field where it is one of them).
    let iso = spec.iso.filter(|_| three_d).map(|(kind, threshold)| {
        let iso = if kind == spec.field { values.clone() } else { solver.scalar_field(kind) };
        let speed = if spec.field == FieldKind::Speed { values.clone() } else { solver.scalar_field(FieldKind::Speed) };
        let color_range = if spec.field == FieldKind::Speed { range } else { auto_range(fluid_min_max(&speed, &solid).0, cmap) };
        (IsoView { kind, threshold, color_range }, iso, speed)
    });
    if notes && spec.iso.is_some() && !three_d {
        eprintln!("note: iso= is ignored for a 2D scene (isosurfaces need 3D)");
    }
    params.iso = iso.as_ref().map(|(v, _, _)| *v);
    let velocity = (spec.tracers.is_some() || spec.streamlines.is_some())
        .then(|| super::frames::VELOCITY.map(|k| if k == spec.field { values.clone() } else { solver.scalar_field(k) }));
    if let Some(v) = &velocity {
        let speed = v[0].iter().zip(&v[1]).zip(&v[2]).zip(&solid).filter(|(_, &s)| s == 0).fold(0.0f32, |m, (((x, y), z), _)| {
            let s = (x * x + y * y + z * z).sqrt();
            if s.is_finite() {
                m.max(s)
            } else {
                m
            }
        });
        let speed = speed.clamp(1e-3, 0.5);
        let inlet = super::frames::inlet_box(d);
        params.tracers = spec.tracers.map(|(count, seeding)| {
            let t = super::panels::tracers::TracerSettings { on: true, count, seeding, ..Default::default() };
            super::panels::tracers::tracer_view_of(&t, n, inlet, speed, 0)
        });
        params.streamlines = spec.streamlines.map(|seeds| {
            let s = super::panels::tracers::StreamlineSettings { on: true, seeds, ..Default::default() };
            super::panels::tracers::streamline_view_of(&s, n, inlet, speed)
        });
    }
    let bricks = (spec.bricks || (spec.brick_outlines && three_d)).then(|| solver.bricks());
    if let Some(b) = &bricks {
        legend.bricks = Some(BrickLegend::of(b));
    }
    let mut outlines = bricks.as_ref().filter(|_| spec.brick_outlines && three_d).map(|b| {
        let o = super::render::brick_outlines(b, n, super::render::MAX_BRICK_OUTLINES);
        if notes && o.capped() {
            eprintln!("note: brick outlines capped: {} of {} bricks drawn", o.boxes.len(), o.total);
        }
        o.boxes
    });
    if let Some(c) = &compression {
        let range = super::render::ratio_range(&c.per_subgrid);
        outlines.get_or_insert_with(Vec::new).extend(super::render::subgrid_outlines(&c.per_subgrid, range));
        legend.subgrids = Some(super::SubgridLegend { range, count: c.per_subgrid.len(), tau: c.tau });
    }
    let data = PictureData {
        iso: iso.as_ref().map(|(v, i, s)| (v.kind, i.as_slice(), s.as_slice())),
        bricks: bricks.as_ref(),
        outlines: outlines.as_deref(),
        velocity: velocity.as_ref().map(|v| [v[0].as_slice(), v[1].as_slice(), v[2].as_slice()]),
        ..PictureData::field(n, &values, &solid)
    };
    let size = spec.size.unwrap_or_else(|| default_size(n));
    let img = render_picture_with(gpu, &data, &params, size, spec.legend, |stats| {
        if let Some((v, i, _)) = &iso {
            let note = match stats {
                None => Some("this GPU has no compute shaders: no isosurface".to_string()),
                Some(st) if st.capped() => Some(format!("triangles capped: {} of {} drawn", st.drawn(), st.triangles())),
                Some(st) if st.wanted == 0 => {
                    let (lo, hi) = fluid_min_max(i, &solid).0;
                    Some(format!(
                        "no surface at this threshold: {} ranges from {} to {}",
                        v.kind.name(),
                        super::fmt_value(lo),
                        super::fmt_value(hi)
                    ))
                }
                Some(_) => None,
            };
            if let Some(st) = stats.filter(|_| notes) {
                eprintln!("isosurface {} = {}: {} triangles", v.kind.name(), v.threshold, st.triangles());
            }
            legend.iso = Some(IsoLegend { kind: v.kind, threshold: v.threshold, color_range: v.color_range, note });
        }
        legend
    })?;
    Ok(img)
}

/// Write an image as PNG, creating the folder; atomically (a temporary file beside it, renamed
/// into place), so an interrupted write never leaves a damaged picture under its name.
///
/// # Errors
/// The folder or the file cannot be written.
pub fn save_png(img: &image::RgbaImage, path: &Path) -> anyhow::Result<()> {
    use image::ImageEncoder as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    sim_core::atomic_file::write_atomic(path, |w| {
        image::codecs::png::PngEncoder::new(w)
            .write_image(img.as_raw(), img.width(), img.height(), image::ExtendedColorType::Rgba8)
            .map_err(std::io::Error::other)
    })
    .with_context(|| format!("writing {}", path.display()))
}

/// How the render bench runs.
#[derive(Clone, Copy, Debug)]
pub struct BenchHow {
    /// Steps between two frames (the solver thread's batch).
    pub steps_per_frame: u64,
    /// How frames reach the renderer.
    pub path: super::frames::FramePath,
    /// Frames per second to draw at most (0: every new frame at once).
    pub fps: f64,
}

/// The viewer's pipeline without a window, timed: first the solver alone, then the solver thread
/// running while this thread takes every new snapshot, uploads it and draws the view (as the
/// window does, less egui and presenting). Prints frames per second and MLUPS both ways.
///
/// # Errors
/// No GPU adapter, or the solver cannot be built.
pub fn render_bench(
    ls: &sim_core::scene::LoadedScene,
    choice: &crate::solvers::Choice,
    secs: f64,
    spec: ViewSpec,
    how: BenchHow,
) -> anyhow::Result<std::process::ExitCode> {
    use super::frames::FramePath;
    use super::worker::WorkerHandle;
    use std::time::{Duration, Instant};
    let gpu = gpu().map_err(anyhow::Error::msg)?;
    let secs = secs.max(0.5);
    let spf = how.steps_per_frame.max(1);
    let mut solver = crate::solvers::build_solver(ls, choice)?;
    let info = solver.info();
    let n = solver.domain().n;
    let cells = (n[0] * n[1] * n[2]) as f64;
    eprintln!(
        "render bench: {} {}x{}x{} {} {} on {} ({}); view on {}; {spf} steps per frame; {secs} s each",
        info.lattice, n[0], n[1], n[2], info.scheme, info.precision, info.backend, info.device, gpu.adapter
    );
    // 1. The solver alone, in the same batches.
    solver.step(spf)?;
    solver.synchronize()?;
    let t0 = Instant::now();
    let mut steps = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        solver.step(spf)?;
        solver.synchronize()?;
        steps += spf;
    }
    let alone = cells * steps as f64 / t0.elapsed().as_secs_f64() / 1e6;
    // 2. The solver thread runs; this thread draws every new snapshot.
    let size = spec.size.unwrap_or_else(|| default_size(n));
    let cmap = spec.cmap.unwrap_or_else(|| default_cmap(spec.field));
    let mut fr = FieldRenderer::new(&gpu.device, &gpu.queue);
    // Experiment switch: time one frame in N (default super::gpu_timer::SAMPLE_EVERY; 1 shows
    // what timing every frame costs the solver).
    if let Some(k) = std::env::var("ESOFLOW_GPU_TIMER_EVERY").ok().and_then(|v| v.parse().ok()) {
        fr.sample_gpu_every(k);
    }
    let velocity = spec.tracers.is_some() || spec.streamlines.is_some();
    let planes = if velocity { super::frames::VIEW_PLANES_WITH_VELOCITY } else { super::frames::VIEW_PLANES };
    let shared = if how.path == FramePath::Host {
        Err("host memory asked for (--frame-path host)".to_string())
    } else if info.backend != "cuda" {
        Err(format!("the {} backend computes fields in host memory", info.backend))
    } else {
        super::frames::make_shared_slots(&gpu.device, n, super::frames::POOL, planes)
    };
    let path_note = match &shared {
        Ok(slots) => format!(
            "shared GPU memory (CUDA writes into Vulkan buffers; the shaders read them in place, no copy; {})",
            super::frames::hand_over_note(slots)
        ),
        Err(why) => format!("host memory ({why})"),
    };
    if how.path == FramePath::Shared {
        if let Err(why) = &shared {
            eprintln!("shared frames are not available: {why}");
        }
    }
    eprintln!("frames: {path_note}");
    let worker = WorkerHandle::start(solver, ls.origin.clone(), true, spec.field, spf);
    if let Ok(slots) = shared {
        worker.send(super::worker::Command::SharedFrames(slots));
    }
    let iso = spec.iso.filter(|_| n[2] > 1);
    if let Some((kind, _)) = iso {
        worker.send(super::worker::Command::SetIso(Some(kind)));
    }
    if velocity {
        worker.send(super::worker::Command::SetVelocity(true));
    }
    // One x slice, as the window's solver thread learns it: without an isosurface, frames carry
    // only that plane.
    let slices = spec.slices.unwrap_or([n[0] / 2, n[1] / 2, n[2] / 2]);
    worker.send(super::worker::Command::SetSlices(Some([Some(slices[0]), None, None])));
    let mut triangles = 0u32;
    let mut iso_stride = 1u32;
    let mut vertices = 0u32;
    let mut sent_stride = None;
    let mut frames = 0u64;
    let mut first: Option<(Instant, u64)> = None;
    let mut last_step = 0;
    let (mut upload_s, mut draw_s) = (0.0f64, 0.0f64);
    let mut solid_done = false;
    // The clock starts at the first frame: before it, the solver thread keeps its first rollback
    // state (seconds for a large grid on a GPU), which is not what is measured here.
    let mut t_end = Instant::now() + Duration::from_secs(180);
    let mut fields_s = 0.0f64;
    let period = (how.fps > 0.0).then(|| Duration::from_secs_f64(1.0 / how.fps));
    let empty = std::env::var("ESOFLOW_BENCH_DRAW").as_deref() == Ok("empty");
    let draw = !empty && std::env::var("ESOFLOW_BENCH_DRAW").as_deref() != Ok("0");
    if !draw {
        eprintln!("ESOFLOW_BENCH_DRAW=0: frames are taken but not drawn");
    }
    let mut next_frame = Instant::now();
    while Instant::now() < t_end {
        if let Some(p) = period {
            let now = Instant::now();
            if now < next_frame {
                std::thread::sleep(next_frame - now);
            }
            next_frame = next_frame.max(now) + p;
        }
        let Some(snap) = worker.take() else {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        };
        if empty {
            // Experiment switch: one empty submit per frame (what a Vulkan submission alone costs
            // the solver), waited for like a drawn frame.
            let enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("empty") });
            gpu.queue.submit([enc.finish()]);
            gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| anyhow::anyhow!("GPU wait failed: {e}"))?;
        }
        if !draw {
            // Experiment switch: frames are made and taken, nothing is drawn (what the solver
            // thread's share of a frame costs, without the renderer's GPU work beside it).
            let done = Instant::now();
            match first {
                None => {
                    first = Some((done, snap.step));
                    t_end = done + Duration::from_secs_f64(secs);
                }
                Some(_) => {
                    frames += 1;
                    fields_s += snap.fields_secs;
                }
            }
            last_step = snap.step;
            continue;
        }
        let tu = Instant::now();
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("bench") });
        fr.begin_gpu_frame();
        let uploaded =
            super::frames::upload_snapshot(&mut fr, &gpu.device, &gpu.queue, snap.view(), (!solid_done).then(|| snap.solid.as_slice()))
                .map_err(anyhow::Error::msg)?;
        solid_done = true;
        let td = Instant::now();
        let range = spec.range.unwrap_or_else(|| auto_range(snap.min_max, cmap));
        let mut params = ViewParams::plain(cmap, range, slices, [true, false, false], Camera::default());
        // With iso=...: the isosurface is made again for every new field (marching cubes on the GPU).
        params.iso = iso.map(|(kind, threshold)| {
            let color_range = snap.iso.as_ref().map_or((0.0, 0.1), |d| auto_range(d.speed_min_max, cmap));
            IsoView { kind, threshold, color_range }
        });
        // With tracers=... or streamlines=...: the tracers move with every frame, the lines are
        // traced again through every new velocity.
        let speed = (snap.stats.max_u as f32).clamp(1e-3, 0.5);
        params.tracers = spec.tracers.map(|(count, seeding)| {
            let t = super::panels::tracers::TracerSettings { on: true, count, seeding, ..Default::default() };
            super::panels::tracers::tracer_view_of(&t, n, snap.inlet, speed, snap.step)
        });
        params.streamlines = spec.streamlines.map(|seeds| {
            let s = super::panels::tracers::StreamlineSettings { on: true, seeds, ..Default::default() };
            super::panels::tracers::streamline_view_of(&s, n, snap.inlet, speed)
        });
        fr.render(&gpu.device, &gpu.queue, &mut enc, size, &params);
        fr.end_gpu_frame(&mut enc);
        gpu.queue.submit([enc.finish()]);
        uploaded.release(&gpu.queue);
        gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| anyhow::anyhow!("GPU wait failed: {e}"))?;
        let done = Instant::now();
        fr.poll(&gpu.device, true);
        if let Some(st) = fr.iso_stats() {
            triangles = st.triangles();
            vertices = st.vertices;
            iso_stride = st.stride;
        }
        // As the window does: the solver thread samples the lattice the next surface reads.
        if let Some(s) = fr.iso_stride_wanted().filter(|&s| Some(s) != sent_stride) {
            sent_stride = Some(s);
            worker.send(super::worker::Command::SetIsoStride(s));
        }
        // Count from the first frame on (the first one includes allocating the textures).
        match first {
            None => {
                first = Some((done, snap.step));
                t_end = done + Duration::from_secs_f64(secs);
                fr.reset_gpu_totals();
            }
            Some(_) => {
                frames += 1;
                fields_s += snap.fields_secs;
                upload_s += (td - tu).as_secs_f64();
                draw_s += (done - td).as_secs_f64();
            }
        }
        last_step = snap.step;
    }
    let Some((t_first, step_first)) = first else { anyhow::bail!("no frame arrived from the solver thread") };
    let dt = t_end.min(Instant::now()).duration_since(t_first).as_secs_f64().max(1e-9);
    let drawing = cells * (last_step - step_first) as f64 / dt / 1e6;
    let f = frames.max(1) as f64;
    println!(
        "frames drawn (each a new field):  {frames} in {dt:.2} s = {:.1} FPS{}",
        frames as f64 / dt,
        period.map_or(String::new(), |_| format!(" (paced at {} FPS)", how.fps))
    );
    println!("frame path: {path_note}");
    let what = match iso {
        Some((kind, t)) => {
            format!("one x slice and the isosurface {} = {t}, {triangles} triangles, {vertices} vertices at the end (cubes of {iso_stride} cells)", kind.name())
        }
        None => "one x slice".into(),
    };
    let what = match (spec.tracers, spec.streamlines) {
        (None, None) => what,
        (t, l) => {
            let (dots, lines) = fr.tracers_drawn();
            let region = if n[2] > 1 {
                format!("velocity every {} cells", super::frames::velocity_stride(n.iter().product()))
            } else {
                "velocity every cell".into()
            };
            format!(
                "{what}, {dots} tracers{}, {lines} streamlines{} ({region})",
                t.map_or(String::new(), |(_, s)| format!(" released {}", s.name())),
                l.map_or(String::new(), |k| format!(" from {k} seeds per edge")),
            )
        }
    };
    println!(
        "per frame: fields {:.2} ms (solver thread: computed, and on the host path copied to the host), upload {:.2} ms, draw {:.2} ms ({}x{} px, {what})",
        fields_s / f * 1e3,
        upload_s / f * 1e3,
        draw_s / f * 1e3,
        size[0],
        size[1]
    );
    // GPU timestamps: means over the frames timed (that had the span).
    let timing = fr.gpu_timing();
    let gpu_line = super::gpu_timer::summary(&timing, super::gpu_timer::GpuTimes::mean_ms);
    match (&timing, gpu_line.strip_prefix("GPU: ")) {
        (super::gpu_timer::GpuTiming::Times(t), Some(spans)) => {
            println!("GPU per frame: {spans} (timestamps, means over {} frames; {} not timed)", t.frames, t.dropped);
        }
        _ => println!("{gpu_line}"),
    }
    println!("MLUPS alone:          {alone:.1}");
    println!("MLUPS while drawing:  {drawing:.1} ({:+.1} %)", (drawing / alone - 1.0) * 100.0);
    Ok(std::process::ExitCode::SUCCESS)
}
