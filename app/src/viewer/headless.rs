//! Offscreen rendering without a window: the GPU setup for tests and `esoflow run --screenshot`,
//! and the composition of the field view with its legend (egui, rendered by egui-wgpu).

use super::app::{auto_range, default_cmap, legend_texture};
use super::camera::Camera;
use super::render::{read_texture, FieldRenderer, ViewParams};
use super::{legend_ui, LegendInfo, ViewSpec};
use anyhow::Context as _;
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

/// Find any adapter (a software one such as lavapipe is fine) and open a device on it.
///
/// # Errors
/// No adapter, or the device could not be opened; the message says what to install.
pub fn gpu() -> Result<Gpu, String> {
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
    let limits = wgpu::Limits { max_texture_dimension_3d: adapter.limits().max_texture_dimension_3d, ..wgpu::Limits::downlevel_defaults() }
        .using_resolution(adapter.limits());
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("esoflow offscreen"),
        required_limits: limits,
        ..Default::default()
    }))
    .map_err(|e| format!("cannot open the GPU device {}: {e}", info.name))?;
    Ok(Gpu { device, queue, adapter: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type) })
}

/// Height of the legend strip under the field in offscreen pictures.
pub const LEGEND_STRIP: u32 = 84;

/// Draw a field and its legend into an RGBA image of `size` pixels: the field fills the top,
/// the legend sits in a strip of [`LEGEND_STRIP`] pixels at the bottom.
///
/// # Errors
/// Rendering or read-back failures.
pub fn render_picture(
    gpu: &Gpu,
    n: [usize; 3],
    values: &[f32],
    solid: &[u8],
    params: &ViewParams,
    legend: &LegendInfo,
    size: [u32; 2],
) -> anyhow::Result<image::RgbaImage> {
    let (device, queue) = (&gpu.device, &gpu.queue);
    let field_px = [size[0], size[1].saturating_sub(LEGEND_STRIP).max(1)];
    let mut fr = FieldRenderer::new(device, queue);
    fr.upload(device, queue, n, values, Some(solid))?;
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("picture") });
    fr.render(device, queue, &mut encoder, field_px, params);
    queue.submit([encoder.finish()]);
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
        legend_ui(ui, rect, legend, tex);
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

/// Render the solver's current state as the view `spec` says and write a PNG.
///
/// # Errors
/// No GPU adapter, rendering failures, or the file cannot be written.
pub fn screenshot_solver(solver: &dyn Solver, spec: &ViewSpec, path: &Path) -> anyhow::Result<String> {
    let gpu = gpu().map_err(anyhow::Error::msg)?;
    let d = solver.domain();
    let n = d.n;
    let solid: Vec<u8> = d.flags.iter().map(|&f| u8::from(sim_core::domain::is_solid(f))).collect();
    let values = solver.scalar_field(spec.field);
    let mut lo = f32::INFINITY;
    let mut hi = f32::NEG_INFINITY;
    for (v, &s) in values.iter().zip(&solid) {
        if s == 0 && v.is_finite() {
            lo = lo.min(*v);
            hi = hi.max(*v);
        }
    }
    if lo > hi {
        (lo, hi) = (0.0, 0.0);
    }
    let cmap = spec.cmap.unwrap_or_else(|| default_cmap(spec.field));
    let range = spec.range.unwrap_or_else(|| auto_range((lo, hi), cmap));
    let slices = spec.slices.unwrap_or([n[0] / 2, n[1] / 2, n[2] / 2]);
    let params = ViewParams { cmap, range, slices, show: [true; 3], camera: Camera::default() };
    let legend = LegendInfo { field: spec.field, cmap, range, auto: spec.range.is_none() };
    let size = spec.size.unwrap_or_else(|| default_size(n));
    let img = render_picture(&gpu, n, &values, &solid, &params, &legend, size)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    img.save(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(gpu.adapter)
}

/// The viewer's pipeline without a window, timed: first the solver alone, then the solver thread
/// running while this thread takes every new snapshot, uploads it and draws the view (as the
/// window does, less egui and presenting). Prints frames per second and MLUPS both ways.
///
/// # Errors
/// No GPU adapter, or the solver cannot be built.
pub fn render_bench(
    ls: &sim_core::scene::LoadedScene,
    backend: crate::BackendChoice,
    secs: f64,
    spec: ViewSpec,
    steps_per_frame: u64,
) -> anyhow::Result<std::process::ExitCode> {
    use super::worker::WorkerHandle;
    use std::time::{Duration, Instant};
    let gpu = gpu().map_err(anyhow::Error::msg)?;
    let secs = secs.max(0.5);
    let spf = steps_per_frame.max(1);
    let mut solver = crate::run::build_solver(ls, backend)?;
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
    let worker = WorkerHandle::start(solver, ls.origin.clone(), true, spec.field, spf);
    let mut frames = 0u64;
    let mut first: Option<(Instant, u64)> = None;
    let mut last_step = 0;
    let (mut upload_s, mut draw_s) = (0.0f64, 0.0f64);
    let mut solid_done = false;
    let t_end = Instant::now() + Duration::from_secs_f64(secs + 1.0);
    while Instant::now() < t_end {
        let Some(snap) = worker.take() else {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        };
        let tu = Instant::now();
        fr.upload(&gpu.device, &gpu.queue, snap.size, &snap.values, (!solid_done).then(|| snap.solid.as_slice()))?;
        solid_done = true;
        let td = Instant::now();
        let params = ViewParams {
            cmap,
            range: spec.range.unwrap_or_else(|| auto_range(snap.min_max, cmap)),
            slices: spec.slices.unwrap_or([n[0] / 2, n[1] / 2, n[2] / 2]),
            show: [true, false, false],
            camera: Camera::default(),
        };
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("bench") });
        fr.render(&gpu.device, &gpu.queue, &mut enc, size, &params);
        gpu.queue.submit([enc.finish()]);
        gpu.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| anyhow::anyhow!("GPU wait failed: {e}"))?;
        let done = Instant::now();
        // Count from the first frame on (the first one includes allocating the textures).
        match first {
            None => first = Some((done, snap.step)),
            Some(_) => {
                frames += 1;
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
    println!("frames drawn (each a new field):  {frames} in {dt:.2} s = {:.1} FPS", frames as f64 / dt);
    println!("per frame: upload {:.2} ms, draw {:.2} ms ({}x{} px, one x slice)", upload_s / f * 1e3, draw_s / f * 1e3, size[0], size[1]);
    println!("MLUPS alone:          {alone:.1}");
    println!("MLUPS while drawing:  {drawing:.1} ({:+.1} %)", (drawing / alone - 1.0) * 100.0);
    Ok(std::process::ExitCode::SUCCESS)
}
