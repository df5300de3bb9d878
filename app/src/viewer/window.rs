//! The window shell: winit events, the wgpu surface (through egui-wgpu's painter, which
//! reconfigures an outdated surface and recreates a lost one), the field view texture, and
//! screenshots of the whole window.

use super::app::ViewerApp;
use super::headless::save_png;
use super::render::FieldRenderer;
use super::{ViewArgs, ViewSpec};
use crate::solvers::{build_solver, load_scene};
use anyhow::Context as _;
use egui::ViewportId;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use winit::application::ApplicationHandler;
use winit::event::{StartCause, WindowEvent};
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop};
use winit::window::{Window, WindowId};

/// Frames before the screenshot of `--screenshot` when `--frames` is not given.
const DEFAULT_SHOT_FRAMES: u64 = 60;

type Shared<T> = Arc<Mutex<Vec<T>>>;

fn drain<T>(m: &Shared<T>) -> Vec<T> {
    std::mem::take(&mut *m.lock().unwrap_or_else(PoisonError::into_inner))
}

struct Gfx {
    window: Arc<Window>,
    state: egui_winit::State,
    painter: egui_wgpu::winit::Painter,
    render: egui_wgpu::RenderState,
    field: FieldRenderer,
    field_tex: Option<egui::TextureId>,
}

struct Shell {
    app: ViewerApp,
    ctx: egui::Context,
    gfx: Option<Gfx>,
    title: String,
    uploaded: Option<(u64, u64)>,
    /// The solid mask last uploaded (a new mask is a new `Arc`: edits and their preview).
    solid_uploaded: Option<std::sync::Arc<Vec<u8>>>,
    /// Counts solid uploads (part of the redraw key).
    solid_uploads: u64,
    /// The solver whose bricks the overlay shows.
    bricks_uploaded: Option<u64>,
    /// What the outline boxes were last set for ([`super::app::ViewerApp::outline_key`]).
    outlines_for: Option<(u64, u64, bool, bool)>,
    /// How frames should reach the renderer, and the grid and field count shared buffers were
    /// last made (or tried) for.
    frame_path: super::frames::FramePath,
    shared_for: Option<([usize; 3], usize)>,
    drawn: Option<(u64, u64, [u32; 2], super::render::ViewParams)>,
    surface_events: Shared<String>,
    shots: Shared<Result<PathBuf, String>>,
    /// Frames of the recording written (or why not).
    recorded: Shared<Result<PathBuf, String>>,
    frames: u64,
    max_frames: Option<u64>,
    final_shot: Option<PathBuf>,
    final_shot_requested: bool,
    exit: Option<ExitCode>,
    last_frame: Instant,
    zero_size: bool,
}

/// Open the window on the scene `args` names and run until it is closed.
///
/// # Errors
/// The scene cannot be loaded, no display or GPU can be opened.
pub fn run_window(args: &ViewArgs) -> anyhow::Result<ExitCode> {
    let ls = load_scene(args.scene.as_deref(), &args.set)?;
    for w in &ls.derived.warnings {
        eprintln!("warning: {w}");
    }
    let spec = args.view.as_deref().map(ViewSpec::parse).transpose()?;
    let size = ls.derived.size;
    let dims = if size[2] > 1 { 3 } else { 2 };
    let probes = args
        .probe
        .iter()
        .map(|text| sim_core::probes::Probe::parse(text, size, dims).map_err(|e| anyhow::anyhow!("--probe {text}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let choice = crate::solvers::choice(&ls, args.backend, args.gpus, sim_core::build::Keeps::VIEWER);
    if let Some(secs) = args.bench {
        let how = super::headless::BenchHow { steps_per_frame: args.steps_per_frame, path: args.frame_path, fps: args.bench_fps };
        return super::headless::render_bench(&ls, &choice, secs, spec.unwrap_or_default(), how);
    }
    let solver = build_solver(&ls, &choice)?;
    let event_loop = EventLoop::new()
        .context("cannot open a window: no display found (set DISPLAY or WAYLAND_DISPLAY; `esoflow run` works without one)")?;
    let title = format!("Esoflow — {}", ls.scene.name);
    let mut app = ViewerApp::new(ls, solver, choice, !args.paused);
    app.set_steps_per_frame(args.steps_per_frame);
    if let Some(s) = &spec {
        app.set_field(s.field);
        if let Some(c) = s.cmap {
            app.view.cmap = c;
        }
        if let Some(r) = s.range {
            app.view.auto_range = false;
            app.view.fixed = r;
        }
        if let Some(sl) = s.slices {
            app.view.slices = sl;
        }
        if let Some((kind, threshold)) = s.iso {
            app.set_iso_field(kind);
            app.set_iso_threshold(threshold);
            app.set_iso(true);
        }
        if let Some(on) = s.solids {
            app.view.solids = on;
        }
        app.view.bricks = s.bricks;
        app.view.brick_outlines = s.brick_outlines;
        app.view.subgrid_outlines = s.subgrid_outlines;
        if let Some((count, seeding)) = s.tracers {
            app.view.tracers.count = count;
            app.view.tracers.seeding = seeding;
            app.set_tracers(true);
        }
        if let Some(seeds) = s.streamlines {
            app.view.streamlines.seeds = seeds;
            app.set_streamlines(true);
        }
    }
    for p in probes {
        app.add_probe(p.cell, (!p.name.is_empty()).then_some(p.name));
        app.sidebar.set_open(super::panels::sidebar::Section::Probes, true);
    }
    if let Some(dir) = &args.record {
        app.start_recording(dir, args.every.unwrap_or(0));
        if app.recording.is_none() {
            anyhow::bail!("--record {}: cannot write into this folder", dir.display());
        }
    }
    let max_frames = args.frames.or(args.screenshot.as_ref().map(|_| DEFAULT_SHOT_FRAMES));
    let mut shell = Shell {
        app,
        ctx: egui::Context::default(),
        gfx: None,
        title,
        uploaded: None,
        solid_uploaded: None,
        solid_uploads: 0,
        bricks_uploaded: None,
        outlines_for: None,
        frame_path: args.frame_path,
        shared_for: None,
        drawn: None,
        surface_events: Arc::default(),
        shots: Arc::default(),
        recorded: Arc::default(),
        frames: 0,
        max_frames,
        final_shot: args.screenshot.clone(),
        final_shot_requested: false,
        exit: None,
        last_frame: Instant::now(),
        zero_size: false,
    };
    event_loop.run_app(&mut shell).context("the window's event loop failed")?;
    Ok(shell.exit.unwrap_or(ExitCode::SUCCESS))
}

/// Shared frame buffers for the snapshot's grid when the path allows them (with a note saying
/// which path frames take and why).
fn shared_frames(
    path: super::frames::FramePath,
    device: &wgpu::Device,
    snap: &super::worker::Snapshot,
    planes: usize,
) -> (Option<Vec<Arc<super::frames::SharedSlot>>>, String) {
    use super::frames::FramePath;
    if path == FramePath::Host {
        return (None, "host memory (--frame-path host)".into());
    }
    if snap.info.backend != "cuda" {
        return (None, format!("host memory (the {} backend computes there)", snap.info.backend));
    }
    match super::frames::make_shared_slots(device, snap.size, super::frames::POOL, planes) {
        Ok(slots) => {
            let note = format!("shared GPU memory (CUDA writes, the shaders read in place; {})", super::frames::hand_over_note(&slots));
            (Some(slots), note)
        }
        Err(why) => (None, format!("page-locked host memory: {why}")),
    }
}

fn painter_config(events: &Shared<String>) -> egui_wgpu::WgpuConfiguration {
    let mut setup = egui_wgpu::WgpuSetupCreateNew::without_display_handle();
    setup.device_descriptor = Arc::new(|adapter| {
        let a = adapter.limits();
        let base = if adapter.get_info().backend == wgpu::Backend::Gl {
            wgpu::Limits::downlevel_webgl2_defaults()
        } else {
            wgpu::Limits::default()
        };
        wgpu::DeviceDescriptor {
            label: Some("esoflow window"),
            required_limits: super::render::wanted_limits(
                wgpu::Limits {
                    max_texture_dimension_2d: 8192.min(a.max_texture_dimension_2d),
                    max_texture_dimension_3d: a.max_texture_dimension_3d,
                    ..base
                },
                &a,
            ),
            required_features: super::gpu_timer::wanted_features(adapter.features()),
            ..Default::default()
        }
    });
    let ev = Arc::clone(events);
    egui_wgpu::WgpuConfiguration {
        surface: egui_wgpu::SurfaceConfig::LOW_LATENCY,
        wgpu_setup: setup.into(),
        on_surface_status: Arc::new(move |status| {
            let (msg, action) = match status {
                wgpu::CurrentSurfaceTexture::Outdated => {
                    ("the window surface was outdated: reconfigured", egui_wgpu::SurfaceErrorAction::Reconfigure)
                }
                wgpu::CurrentSurfaceTexture::Lost => {
                    ("the window surface was lost: recreated", egui_wgpu::SurfaceErrorAction::RecreateSurface)
                }
                wgpu::CurrentSurfaceTexture::Occluded => ("", egui_wgpu::SurfaceErrorAction::SkipFrame),
                wgpu::CurrentSurfaceTexture::Timeout => {
                    ("the GPU timed out presenting a frame: skipped", egui_wgpu::SurfaceErrorAction::SkipFrame)
                }
                _ => ("the window surface reported an error: frame skipped", egui_wgpu::SurfaceErrorAction::SkipFrame),
            };
            if !msg.is_empty() {
                ev.lock().unwrap_or_else(PoisonError::into_inner).push(msg.to_string());
            }
            action
        }),
    }
}

/// The window's first size: 1440 x 900 points where the monitor has room, else 90 % of its width
/// and 85 % of its height (a 1280 x 720 screen gets 1152 x 612), never below 640 x 400.
fn window_size(event_loop: &ActiveEventLoop) -> winit::dpi::LogicalSize<f64> {
    let screen = event_loop.primary_monitor().or_else(|| event_loop.available_monitors().next()).map(|m| {
        let s = m.size().to_logical::<f64>(m.scale_factor());
        [s.width, s.height]
    });
    let [w, h] = fit_window(screen);
    winit::dpi::LogicalSize::new(w, h)
}

/// The window size for a screen of `screen` points (unknown: a size that fits 1280 x 720).
#[must_use]
pub fn fit_window(screen: Option<[f64; 2]>) -> [f64; 2] {
    let [sw, sh] = screen.filter(|s| s[0] > 0.0 && s[1] > 0.0).unwrap_or([1280.0, 720.0]);
    [(sw * 0.9).clamp(640.0, 1440.0), (sh * 0.85).clamp(400.0, 900.0)]
}

impl Shell {
    fn init(&mut self, event_loop: &ActiveEventLoop) -> anyhow::Result<()> {
        let attrs = Window::default_attributes().with_title(&self.title).with_inner_size(window_size(event_loop));
        let window = Arc::new(event_loop.create_window(attrs).context("cannot create the window")?);
        let mut painter = pollster::block_on(egui_wgpu::winit::Painter::new(
            self.ctx.clone(),
            painter_config(&self.surface_events),
            false,
            egui_wgpu::RendererOptions::default(),
        ));
        pollster::block_on(painter.set_window(ViewportId::ROOT, Some(Arc::clone(&window))))
            .context("no GPU adapter can draw to this window (on Linux without a GPU, install mesa-vulkan-drivers)")?;
        let render = painter.render_state().context("the GPU device did not start")?;
        let info = render.adapter.get_info();
        self.app.gpu_note = format!("{} ({:?})", info.name, info.backend);
        if info.device_type == wgpu::DeviceType::Cpu {
            eprintln!("note: the window is drawn by a software renderer ({}): expect a low frame rate", info.name);
        }
        let state = egui_winit::State::new(
            self.ctx.clone(),
            ViewportId::ROOT,
            &window,
            Some(window.scale_factor() as f32),
            window.theme(),
            painter.max_texture_side(),
        );
        let field = FieldRenderer::new(&render.device, &render.queue);
        self.app.surfaces_supported = field.surfaces_supported();
        window.request_redraw();
        self.gfx = Some(Gfx { window, state, painter, render, field, field_tex: None });
        Ok(())
    }

    fn redraw(&mut self, event_loop: &ActiveEventLoop) {
        let Some(g) = self.gfx.as_mut() else { return };
        let size = g.window.inner_size();
        if size.width == 0 || size.height == 0 {
            return;
        }
        for m in drain(&self.surface_events) {
            self.app.message(m, false);
        }
        for r in drain(&self.recorded) {
            if let Err(e) = r {
                self.app.recording_failed(&e);
            }
        }
        for r in drain(&self.shots) {
            let done = match r {
                Ok(p) => {
                    self.app.message(format!("saved screenshot {}", p.display()), false);
                    Some(ExitCode::SUCCESS)
                }
                Err(e) => {
                    self.app.message(e.clone(), true);
                    eprintln!("error: {e}");
                    Some(ExitCode::from(2))
                }
            };
            if self.final_shot_requested {
                self.exit = done;
                event_loop.exit();
                return;
            }
        }
        let t0 = Instant::now();
        let input = g.state.take_egui_input(&g.window);
        let app = &mut self.app;
        let mut out = self.ctx.run_ui(input, |ui| app.ui(ui));
        g.state.handle_platform_output(&g.window, std::mem::take(&mut out.platform_output));

        // The field view: upload a new snapshot, draw when something changed.
        let tr = Instant::now();
        let (device, queue) = (&g.render.device, &g.render.queue);
        // Frames in GPU memory shared with CUDA where that can be had: made once per grid size,
        // and made larger once the view wants the velocity too (tracers), never smaller.
        let planes = if self.app.wants_velocity() { super::frames::VIEW_PLANES_WITH_VELOCITY } else { super::frames::VIEW_PLANES };
        let due = |s: &super::worker::Snapshot, had: Option<([usize; 3], usize)>| had.is_none_or(|(n, p)| n != s.size || p < planes);
        if let Some(snap) = self.app.snap.as_ref().filter(|s| due(s, self.shared_for)) {
            self.shared_for = Some((snap.size, planes));
            let (slots, note) = shared_frames(self.frame_path, device, snap, planes);
            if let Some(slots) = slots {
                self.app.worker.send(super::worker::Command::SharedFrames(slots));
            }
            if self.frame_path == super::frames::FramePath::Shared && !note.starts_with("shared") {
                self.app.message(format!("frames go through {note}"), true);
            }
            self.app.frame_note = note;
        }
        // One encoder for the frame's GPU work (marching cubes, drawing): one submit.
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("field view") });
        g.field.begin_gpu_frame();
        let mut uploaded: Option<super::frames::Uploaded> = None;
        if let Some(snap) = &self.app.snap {
            let key = (snap.solver_serial, snap.serial);
            let new_solid = !self.solid_uploaded.as_ref().is_some_and(|m| std::sync::Arc::ptr_eq(m, &snap.solid));
            if self.uploaded != Some(key) || new_solid {
                let new_solver = self.bricks_uploaded != Some(snap.solver_serial);
                let solid = new_solid.then(|| snap.solid.as_slice());
                // The field is needed; isosurface data and bricks only for what they draw (a
                // failure there is shown and the field is drawn anyway). A new solid mask (a new
                // solver, or cells drawn or erased) also makes the solid surfaces again.
                let mut problems = Vec::new();
                // The difference view replaces the slices' field by the density difference
                // against the reference run (host memory; a shared frame is not copied then, so
                // its GPU copy cannot land after it).
                let diff = self.app.diff_values().map(std::sync::Arc::clone);
                let result = match &diff {
                    Some(d) if snap.frame.is_shared() => g
                        .field
                        .upload(device, queue, snap.size, d, solid)
                        .map(|()| super::frames::Uploaded::released_by(&mut g.field))
                        .map_err(|e| e.to_string()),
                    _ => super::frames::upload_snapshot(&mut g.field, device, queue, snap.view(), solid).and_then(|up| {
                        if let Some(d) = &diff {
                            g.field.upload(device, queue, snap.size, d, None).map_err(|e| e.to_string())?;
                        }
                        Ok(up)
                    }),
                };
                match result {
                    Ok(mut up) => {
                        problems.append(&mut up.problems);
                        uploaded = Some(up);
                        self.uploaded = Some(key);
                        if new_solid {
                            self.solid_uploaded = Some(std::sync::Arc::clone(&snap.solid));
                            self.solid_uploads += 1;
                        }
                        if new_solver {
                            self.bricks_uploaded = Some(snap.solver_serial);
                            if let Err(e) = g.field.upload_bricks(device, queue, &snap.bricks) {
                                problems.push(format!("brick overlay: {e}"));
                            }
                        }
                    }
                    Err(e) => problems.push(e.to_string()),
                }
                self.app.status = (!problems.is_empty()).then(|| problems.join("; "));
            }
        }
        // The outline boxes (bricks, subgrids by ratio), set again when what they show changed.
        let key = self.app.outline_key();
        if self.outlines_for != Some(key) {
            self.outlines_for = Some(key);
            g.field.set_outlines(device, queue, &self.app.outline_boxes());
            self.drawn = None;
        }
        // Triangle counts of the surfaces and GPU times, when the GPU has them (never waiting).
        g.field.poll(device, false);
        self.app.iso_stats = g.field.iso_stats();
        self.app.iso_stride = g.field.iso_stride_wanted();
        self.app.solid_stats = g.field.solid_stats();
        self.app.gpu_timing = g.field.gpu_timing();
        let params = self.app.view_params();
        let px = self.app.view_px;
        let draw_key = (self.uploaded.map_or(0, |k| k.1), self.solid_uploads, px, params.clone());
        let draw = (self.drawn.as_ref() != Some(&draw_key) || g.field.needs_redraw()) && px[0] > 0 && px[1] > 0;
        let reallocated = draw && g.field.render(device, queue, &mut encoder, px, &params);
        if draw || uploaded.is_some() {
            g.field.end_gpu_frame(&mut encoder);
            queue.submit([encoder.finish()]);
        }
        if let Some(up) = uploaded {
            up.release(queue);
        }
        if draw {
            if let Some((_, view)) = g.field.target() {
                let mut renderer = g.render.renderer.write();
                match g.field_tex {
                    Some(id) if reallocated => renderer.update_egui_texture_from_wgpu_texture(device, view, wgpu::FilterMode::Nearest, id),
                    Some(_) => {}
                    None => g.field_tex = Some(renderer.register_native_texture(device, view, wgpu::FilterMode::Nearest)),
                }
            }
            self.app.field_texture = g.field_tex;
            self.drawn = Some(draw_key);
        }
        let render_secs = tr.elapsed().as_secs_f64();

        let prims = self.ctx.tessellate(std::mem::take(&mut out.shapes), out.pixels_per_point);
        self.frames += 1;
        let mut captures = Vec::new();
        if let Some(p) = self.app.screenshot_request.take() {
            captures.push(screenshot_callback(p, Arc::clone(&self.shots)));
        }
        if let (Some(p), Some(view)) = (self.app.record_request.take(), self.app.view_rect) {
            captures.push(view_callback(p, view * out.pixels_per_point, Arc::clone(&self.recorded)));
        }
        if let (Some(p), Some(n)) = (&self.final_shot, self.max_frames) {
            if self.frames >= n && !self.final_shot_requested {
                self.final_shot_requested = true;
                println!("{}", self.app.layout_line(self.ctx.content_rect().size()));
                captures.push(screenshot_callback(p.clone(), Arc::clone(&self.shots)));
            }
        }
        let tp = Instant::now();
        g.painter.paint_and_update_textures(
            ViewportId::ROOT,
            out.pixels_per_point,
            [0.0, 0.0, 0.0, 1.0],
            &prims,
            &mut out.textures_delta,
            captures,
            &g.window,
        );
        let render_secs = render_secs + tp.elapsed().as_secs_f64();

        let dt = self.last_frame.elapsed().as_secs_f64();
        self.last_frame = Instant::now();
        let t = &mut self.app.times;
        t.fps = if t.fps > 0.0 { 0.9 * t.fps + 0.1 / dt.max(1e-6) } else { 1.0 / dt.max(1e-6) };
        t.render_secs = render_secs;
        t.frame_secs = t0.elapsed().as_secs_f64();

        if self.final_shot.is_none() && self.max_frames.is_some_and(|n| self.frames >= n) {
            event_loop.exit();
            return;
        }
        let delay = out.viewport_output.get(&ViewportId::ROOT).map_or(Duration::from_millis(100), |v| v.repaint_delay);
        // Paused and idle: look for news from the solver thread ten times a second.
        let delay =
            if self.final_shot_requested || self.max_frames.is_some() { Duration::ZERO } else { delay.min(Duration::from_millis(100)) };
        if delay.is_zero() {
            g.window.request_redraw();
        } else {
            event_loop.set_control_flow(ControlFlow::WaitUntil(Instant::now() + delay));
        }
    }
}

/// Save the part `view` (pixels) of the window's picture: a frame of a recording.
fn view_callback(path: PathBuf, view: egui::Rect, done: Shared<Result<PathBuf, String>>) -> egui::ScreenshotCallback {
    egui::ScreenshotCallback::new(move |img: Arc<egui::ColorImage>| {
        let full = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(img.size[0] as f32, img.size[1] as f32));
        let part = view.intersect(full);
        let r = if part.width() >= 1.0 && part.height() >= 1.0 {
            save_color_image(&img.region(&part, None), &path)
                .map(|()| path.clone())
                .map_err(|e| format!("frame {} not written: {e:#}", path.display()))
        } else {
            Err("the view has no pixels (is the window minimised?)".to_string())
        };
        done.lock().unwrap_or_else(PoisonError::into_inner).push(r);
    })
}

fn screenshot_callback(path: PathBuf, shots: Shared<Result<PathBuf, String>>) -> egui::ScreenshotCallback {
    egui::ScreenshotCallback::new(move |img: Arc<egui::ColorImage>| {
        let r = save_color_image(&img, &path).map(|()| path.clone()).map_err(|e| format!("screenshot {} failed: {e:#}", path.display()));
        shots.lock().unwrap_or_else(PoisonError::into_inner).push(r);
    })
}

/// Write an egui image (opaque) as PNG, creating the folder.
///
/// # Errors
/// The file cannot be written.
pub fn save_color_image(img: &egui::ColorImage, path: &Path) -> anyhow::Result<()> {
    let [w, h] = img.size;
    let bytes: Vec<u8> = img.pixels.iter().flat_map(|c| c.to_array()).collect();
    let out = image::RgbaImage::from_raw(w as u32, h as u32, bytes).context("image of the wrong size")?;
    save_png(&out, path)
}

impl ApplicationHandler for Shell {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.gfx.is_some() {
            return;
        }
        if let Err(e) = self.init(event_loop) {
            eprintln!("error: {e:#}");
            self.exit = Some(ExitCode::from(2));
            event_loop.exit();
        }
    }

    fn new_events(&mut self, _event_loop: &ActiveEventLoop, cause: StartCause) {
        if matches!(cause, StartCause::ResumeTimeReached { .. }) {
            if let Some(g) = &self.gfx {
                g.window.request_redraw();
            }
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        let Some(g) = self.gfx.as_mut() else { return };
        let resp = g.state.on_window_event(&g.window, &event);
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(size) => {
                if let (Some(w), Some(h)) = (NonZeroU32::new(size.width), NonZeroU32::new(size.height)) {
                    g.painter.on_window_resized(ViewportId::ROOT, w, h);
                    if self.zero_size {
                        self.zero_size = false;
                        self.app.message("the window was minimised or of zero size: drawing was paused (the solver kept running)", false);
                    }
                } else {
                    self.zero_size = true;
                }
            }
            WindowEvent::RedrawRequested => self.redraw(event_loop),
            _ => {}
        }
        if resp.repaint {
            if let Some(g) = &self.gfx {
                g.window.request_redraw();
            }
        }
    }

    fn exiting(&mut self, _event_loop: &ActiveEventLoop) {
        if let Some(said) = self.app.finish_recording() {
            eprintln!("{said}");
        }
        if let Some(g) = self.gfx.as_mut() {
            g.painter.destroy();
        }
    }
}
