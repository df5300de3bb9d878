//! Tests of the viewer: shaders through naga, pixels of offscreen renders on whatever adapter
//! there is (lavapipe in CI), and the panels driven headless with egui_kittest.

use super::app::{auto_range, ViewerApp};
use super::camera::Camera;
use super::colormap::{lut_index, ColorMap};
use super::headless::{self, Gpu};
use super::render::{read_texture, FieldRenderer, ViewParams};
use super::{legend_bar_rect, LegendInfo, ViewSpec};
use crate::BackendChoice;
use egui_kittest::kittest::Queryable as _;
use sim_core::fields::FieldKind;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn shaders_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shaders")
}

#[test]
fn every_shader_parses_and_validates_with_naga() {
    let mut n = 0;
    for e in std::fs::read_dir(shaders_dir()).expect("shaders/ exists") {
        let p = e.expect("readable entry").path();
        if p.extension().is_none_or(|x| x != "wgsl") {
            continue;
        }
        let src = std::fs::read_to_string(&p).expect("readable shader");
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}: {}", p.display(), e.emit_to_string(&src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", p.display(), e.emit_to_string(&src)));
        n += 1;
    }
    assert!(n >= 1, "no shaders found in {}", shaders_dir().display());
    // The embedded copy is the file on disk.
    assert_eq!(super::render::FIELD_WGSL, std::fs::read_to_string(shaders_dir().join("field.wgsl")).expect("field.wgsl"));
}

/// A GPU adapter, or None (the test is skipped) unless ESOFLOW_REQUIRE_ADAPTER=1.
fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match headless::gpu() {
        Ok(g) => Some(g),
        Err(e) => {
            assert!(std::env::var("ESOFLOW_REQUIRE_ADAPTER").as_deref() != Ok("1"), "{test}: ESOFLOW_REQUIRE_ADAPTER=1 but {e}");
            eprintln!("skipping {test}: {e}");
            None
        }
    }
}

fn render_field(gpu: &Gpu, n: [usize; 3], values: &[f32], solid: &[u8], p: &ViewParams, size: [u32; 2]) -> Vec<u8> {
    let mut fr = FieldRenderer::new(&gpu.device, &gpu.queue);
    fr.upload(&gpu.device, &gpu.queue, n, values, Some(solid)).expect("upload");
    let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    fr.render(&gpu.device, &gpu.queue, &mut enc, size, p);
    gpu.queue.submit([enc.finish()]);
    let (tex, _) = fr.target().expect("target");
    read_texture(&gpu.device, &gpu.queue, tex, size).expect("read back")
}

fn px(img: &[u8], width: u32, x: u32, y: u32) -> [u8; 4] {
    let i = ((y * width + x) * 4) as usize;
    [img[i], img[i + 1], img[i + 2], img[i + 3]]
}

fn close(a: [u8; 4], b: [u8; 4], tol: i32) -> bool {
    (0..3).all(|k| (i32::from(a[k]) - i32::from(b[k])).abs() <= tol)
}

fn params(cmap: ColorMap, range: (f32, f32)) -> ViewParams {
    ViewParams { cmap, range, slices: [0; 3], show: [true; 3], camera: Camera::default() }
}

#[test]
fn render_2d_field_colours_and_solid_cells() {
    let Some(gpu) = gpu_or_skip("render_2d_field_colours_and_solid_cells") else { return };
    // 64 x 32 cells drawn at 10 pixels per cell; value = x / 63; the two bottom rows are solid.
    let n = [64, 32, 1];
    let values: Vec<f32> = (0..64 * 32).map(|i| (i % 64) as f32 / 63.0).collect();
    let solid: Vec<u8> = (0..64 * 32).map(|i| u8::from(i / 64 < 2)).collect();
    let size = [640, 320];
    for cmap in ColorMap::ALL {
        let img = render_field(&gpu, n, &values, &solid, &params(cmap, (0.0, 1.0)), size);
        for i in [0usize, 7, 31, 32, 50, 63] {
            for j in [2usize, 15, 31] {
                let p = px(&img, size[0], i as u32 * 10 + 5, (31 - j as u32) * 10 + 5);
                let want = cmap.color_of(i as f32 / 63.0, 0.0, 1.0);
                assert!(close(p, want, 1), "{cmap:?} cell ({i}, {j}): got {p:?}, want {want:?}");
            }
            let p = px(&img, size[0], i as u32 * 10 + 5, 31 * 10 + 5);
            assert!(close(p, [128, 128, 128, 255], 1), "solid cell ({i}, 0) is grey: {p:?}");
        }
    }
    // A fixed range clamps: values above it take the top colour.
    let img = render_field(&gpu, n, &values, &solid, &params(ColorMap::Turbo, (0.0, 0.5)), size);
    assert!(close(px(&img, size[0], 605, 105), ColorMap::Turbo.lut_entry(255), 1));
    // The diverging map's centre is the colour of 0 in a symmetric range.
    let zero: Vec<f32> = vec![0.0; 64 * 32];
    let img = render_field(&gpu, n, &zero, &solid, &params(ColorMap::Diverging, auto_range((-0.2, 0.1), ColorMap::Diverging)), size);
    assert!(close(px(&img, size[0], 300, 100), ColorMap::Diverging.lut_entry(lut_index(0.5)), 1));
}

#[test]
fn render_2d_keeps_the_aspect_and_letterboxes() {
    let Some(gpu) = gpu_or_skip("render_2d_keeps_the_aspect_and_letterboxes") else { return };
    let n = [40, 10, 1];
    let values = vec![1.0f32; 400];
    let solid = vec![0u8; 400];
    // A square view: the 4:1 domain fills the middle quarter rows; above and below is background.
    let size = [200, 200];
    let img = render_field(&gpu, n, &values, &solid, &params(ColorMap::Viridis, (0.0, 1.0)), size);
    let top = ColorMap::Viridis.lut_entry(255);
    assert!(close(px(&img, 200, 100, 100), top, 1));
    assert!(!close(px(&img, 200, 100, 20), top, 30), "above the domain is background");
    assert!(!close(px(&img, 200, 100, 180), top, 30), "below the domain is background");
}

#[test]
fn render_3d_slice_sits_where_the_camera_says_and_moves() {
    let Some(gpu) = gpu_or_skip("render_3d_slice_sits_where_the_camera_says_and_moves") else { return };
    let n = [32, 16, 8];
    let cells = 32 * 16 * 8;
    // value = x index / 31: an x slice has one colour, which tells where the slice is.
    let values: Vec<f32> = (0..cells).map(|i| (i % 32) as f32 / 31.0).collect();
    let solid = vec![0u8; cells];
    let size = [400, 300];
    let cam = Camera::default();
    for sx in [10usize, 20] {
        let p = ViewParams { cmap: ColorMap::Viridis, range: (0.0, 1.0), slices: [sx, 8, 4], show: [true, false, false], camera: cam };
        let img = render_field(&gpu, n, &values, &solid, &p, size);
        let at = cam.project(n, size, false, [sx as f32 + 0.5, 8.0, 4.0]).expect("in front");
        let got = px(&img, size[0], at[0] as u32, at[1] as u32);
        let want = ColorMap::Viridis.color_of(sx as f32 / 31.0, 0.0, 1.0);
        assert!(close(got, want, 1), "x slice {sx} at pixel {at:?}: got {got:?}, want {want:?}");
        // The corner of the view is background.
        assert!(!close(px(&img, size[0], 2, 2), want, 20));
    }
    // All three planes on: the z plane through the middle shows the x gradient.
    let p = ViewParams { cmap: ColorMap::Turbo, range: (0.0, 1.0), slices: [0, 0, 4], show: [false, false, true], camera: cam };
    let img = render_field(&gpu, n, &values, &solid, &p, size);
    for x in [5.0f32, 25.0] {
        let at = cam.project(n, size, false, [x + 0.5, 8.5, 4.5]).expect("in front");
        let want = ColorMap::Turbo.color_of(x / 31.0, 0.0, 1.0);
        assert!(close(px(&img, size[0], at[0] as u32, at[1] as u32), want, 1), "z slice at x = {x}");
    }
}

#[test]
fn picture_has_the_legend_colours_at_known_values() {
    let Some(gpu) = gpu_or_skip("picture_has_the_legend_colours_at_known_values") else { return };
    let n = [64, 32, 1];
    let values: Vec<f32> = (0..64 * 32).map(|i| (i % 64) as f32 / 63.0).collect();
    let solid = vec![0u8; 64 * 32];
    let size = [640, 320 + headless::LEGEND_STRIP];
    for cmap in ColorMap::ALL {
        let p = params(cmap, (0.0, 1.0));
        let legend = LegendInfo { field: FieldKind::Speed, cmap, range: (0.0, 1.0), auto: true };
        let img = headless::render_picture(&gpu, n, &values, &solid, &p, &legend, size).expect("picture");
        let bar = legend_bar_rect(egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(size[0] as f32, size[1] as f32)));
        let y = bar.center().y as u32;
        for frac in [0.02f32, 0.25, 0.5, 0.75, 0.98] {
            let x = bar.left() + frac * bar.width();
            let got = img.get_pixel(x as u32, y).0;
            let i = ((x - bar.left()) / bar.width() * 256.0) as usize;
            let ok = (i.saturating_sub(2)..=(i + 2).min(255)).any(|k| close(got, cmap.lut_entry(k), 2));
            assert!(ok, "{cmap:?} legend at {frac}: got {got:?}, want about {:?}", cmap.lut_entry(i));
        }
        // The field above the legend strip: the same colours as the legend at the same values.
        let got = img.get_pixel(32 * 10 + 5, 105).0;
        assert!(close(got, cmap.color_of(32.0 / 63.0, 0.0, 1.0), 1), "{cmap:?} field pixel {got:?}");
    }
}

#[test]
fn view_spec_parses_and_refuses_bad_input() {
    let v = ViewSpec::parse("field=ux, cmap=turbo, range=-0.1:0.1, slices=1:2:3, size=800x300").expect("valid");
    assert_eq!(v.field, FieldKind::Ux);
    assert_eq!(v.cmap, Some(ColorMap::Turbo));
    assert_eq!(v.range, Some((-0.1, 0.1)));
    assert_eq!(v.slices, Some([1, 2, 3]));
    assert_eq!(v.size, Some([800, 300]));
    for bad in ["field=pressure2", "cmap=jet", "range=1:0", "slices=1:2", "size=0x10", "colour=red", "speed"] {
        assert!(ViewSpec::parse(bad).is_err(), "{bad} must be refused");
    }
}

// ---- UI driven headless -------------------------------------------------------------------

const SMALL_SCENE: &str = r#"
name = "test channel"
[domain]
size = [48, 24]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0] }
x_max = "outlet"
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.8
[[obstacles]]
name = "disc"
shape = "cylinder"
center = [14, 12]
radius = 3.0
"#;

fn small_app(running: bool) -> ViewerApp {
    let ls = sim_core::scene::from_str(SMALL_SCENE, "test", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::backend::cpu::from_scene(&ls).expect("solver");
    ViewerApp::new(ls, solver, BackendChoice::Cpu, running)
}

type Harness = egui_kittest::Harness<'static, ViewerApp>;

fn harness(app: ViewerApp) -> Harness {
    egui_kittest::Harness::builder().with_size(egui::vec2(1200.0, 900.0)).build_ui_state(|ui, app: &mut ViewerApp| app.ui(ui), app)
}

/// Run frames until `cond` holds (the solver thread answers asynchronously).
fn run_until(h: &mut Harness, what: &str, cond: impl Fn(&ViewerApp) -> bool) {
    let t0 = Instant::now();
    while !cond(h.state()) {
        assert!(t0.elapsed() < Duration::from_secs(30), "timed out waiting for: {what}");
        h.step();
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn ui_pause_and_step() {
    let mut h = harness(small_app(true));
    run_until(&mut h, "the solver runs", |a| a.step() > 100);
    h.get_by_label("Pause").click();
    h.step();
    assert!(!h.state().running);
    // Let the thread finish the batch it was in and publish; then the step must stay put.
    std::thread::sleep(Duration::from_millis(100));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    for _ in 0..5 {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    let paused_at = h.state().step();
    for _ in 0..10 {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(h.state().step(), paused_at, "paused: no steps");
    // Step: exactly one batch (steps per frame).
    let spf = h.state().steps_per_frame;
    h.get_by_label("Step").click();
    run_until(&mut h, "the single step", |a| a.step() == paused_at + spf);
    for _ in 0..5 {
        h.step();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(h.state().step(), paused_at + spf);
    // Run again, from the button now labelled "Run"; and the keyboard: space pauses.
    h.get_by_label("Run").click();
    h.step();
    run_until(&mut h, "running again", |a| a.step() > paused_at + spf + 100);
    h.key_press(egui::Key::Space);
    h.step();
    assert!(!h.state().running, "space pauses");
    // h toggles the help overlay; r resets to step 0.
    h.key_press(egui::Key::H);
    h.step();
    assert!(h.state().show_help);
    h.key_press(egui::Key::R);
    run_until(&mut h, "reset to step 0", |a| a.step() == 0);
}

/// Set the number field that follows a label on its row (as a user typing into it would).
fn set_spin_after_label(h: &Harness, label: &str, v: f64) {
    let l = h.get_by_label(label).rect();
    let spin = h
        .get_all_by_role(egui::accesskit::Role::SpinButton)
        .filter(|n| (n.rect().center().y - l.center().y).abs() < 4.0 && n.rect().left() >= l.right())
        .min_by(|a, b| a.rect().left().total_cmp(&b.rect().left()))
        .unwrap_or_else(|| panic!("no number field after the label {label}"));
    spin.set_value_accesskit(v);
}

#[test]
fn ui_change_tau_reaches_the_solver_and_warns_near_half() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    set_spin_after_label(&h, "tau", 0.6);
    h.run_steps(3);
    assert!((h.state().tau() - 0.6).abs() < 1e-6, "tau field: {}", h.state().tau());
    run_until(&mut h, "the solver's tau", |a| a.snap.as_ref().is_some_and(|s| (s.params.collide.tau - 0.6).abs() < 1e-6));
    // Close to 0.5: a warning in the panel.
    set_spin_after_label(&h, "tau", 0.502);
    h.run_steps(3);
    assert!(h.query_by_label_contains("close to 0.5").is_some(), "tau near 0.5 warns");
    // A refused value (<= 0.5) never reaches the solver: the panel clamps and validate refuses.
    h.state_mut().set_tau(0.5);
    h.step();
    assert!(h.state().messages().iter().any(|m| m.error && m.text.contains("tau")), "tau = 0.5 is refused with a message");
}

#[test]
fn ui_switch_field_changes_the_published_field_and_colour_map() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    assert_eq!(h.state().view.field, FieldKind::Speed);
    h.get_by_label("field").click();
    h.run_steps(3);
    h.get_by_label("ux").click();
    h.run_steps(3);
    assert_eq!(h.state().view.field, FieldKind::Ux);
    assert_eq!(h.state().view.cmap, ColorMap::Diverging, "a signed field gets the diverging map");
    h.get_by_label("Step").click();
    run_until(&mut h, "a ux snapshot", |a| a.snap.as_ref().is_some_and(|s| s.field == FieldKind::Ux && s.step > 0));
    let (lo, hi) = h.state().range();
    assert!((lo + hi).abs() < 1e-9 && hi > 0.0, "auto range of ux is symmetric: {lo} {hi}");
}

#[test]
fn ui_bad_scene_path_shows_a_message_and_keeps_running() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.state_mut().open_scene(Some(std::path::Path::new("/nonexistent/scene.toml")));
    run_until(&mut h, "the load to fail", |a| !a.loading());
    h.step();
    assert!(h.state().messages().iter().any(|m| m.error && m.text.contains("cannot open the scene")));
    assert_eq!(h.state().scene.scene.name, "test channel", "the old scene stays");
    // A scene that parses but is invalid: also a message, old scene kept.
    let bad = std::env::temp_dir().join(format!("esoflow-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[domain]\nsize = [0, 10]\n").expect("temp file");
    h.state_mut().open_scene(Some(&bad));
    run_until(&mut h, "the load to fail", |a| !a.loading());
    assert_eq!(h.state().messages().iter().filter(|m| m.error && m.text.contains("cannot open the scene")).count(), 2);
    let _ = std::fs::remove_file(&bad);
    // A preset loads and replaces the running scene.
    let cavity = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenes/lid_driven_cavity_2d.toml");
    h.state_mut().open_scene(Some(&cavity));
    run_until(&mut h, "the new scene", |a| !a.loading());
    assert_ne!(h.state().scene.scene.name, "test channel");
    run_until(&mut h, "a snapshot of the new scene", |a| a.snap.as_ref().is_some_and(|s| s.size[0] == a.scene.derived.size[0]));
}

#[test]
fn blow_up_pauses_and_rolls_back() {
    // Mach ~0.6 at tau close to 0.5 blows up within a few hundred steps.
    let text = SMALL_SCENE.replace("tau = 0.8", "tau = 0.5005").replace("velocity = [0.05, 0.0]", "velocity = [0.3, 0.0]");
    let ls = sim_core::scene::from_str(&text, "unstable", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::backend::cpu::from_scene(&ls).expect("solver");
    let mut h = harness(ViewerApp::new(ls, solver, BackendChoice::Cpu, true));
    run_until(&mut h, "the blow-up", |a| a.blowup.is_some());
    assert!(!h.state().running);
    let good = h.state().blowup.as_ref().map(|b| b.last_good).expect("blow-up");
    h.step();
    h.get_by_label(&format!("Roll back to step {good}")).click();
    run_until(&mut h, "the rollback", |a| a.blowup.is_none() && a.snap.as_ref().is_some_and(|s| s.step == good && !s.stats.blown_up()));
}

#[test]
fn ui_switching_the_scheme_rebuilds_the_solver() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.get_by_label("scheme").click();
    h.run_steps(3);
    h.get_by_label("aa").click();
    h.run_steps(2);
    run_until(&mut h, "the rebuilt solver", |a| {
        !a.loading() && a.snap.as_ref().is_some_and(|s| s.info.scheme == sim_core::schemes::Scheme::Aa)
    });
    assert!(h.state().messages().iter().any(|m| m.text.contains("starts again from step 0")));
    assert_eq!(h.state().scene.scene.solver.scheme, sim_core::schemes::Scheme::Aa);
}
