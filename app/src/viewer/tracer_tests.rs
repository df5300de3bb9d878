//! Tests of tracers and streamlines: the GPU passes against flows whose paths are known, and the
//! window's controls (keys, the Seed tool, the panel) down to the frames the solver thread writes.

use super::app::Tool;
use super::camera::Camera;
use super::colormap::ColorMap;
use super::render::{self, FieldRenderer, StreamlineView, TracerView, ViewParams};
use super::tests::{click_at, gpu_or_skip, harness, padded_frame, run_until, screen, small_3d_app, small_app};
use egui_kittest::kittest::Queryable as _;
use sim_core::fields::FieldKind;

#[test]
fn tracer_shaders_are_the_files_on_disk_with_their_entry_points() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shaders");
    for (name, src, entries) in [
        ("tracers.wgsl", render::TRACERS_WGSL, &["advect", "trace"][..]),
        ("tracers_draw.wgsl", render::TRACERS_DRAW_WGSL, &["vs_dot", "fs_dot", "vs_line", "fs_line"][..]),
    ] {
        let params = std::fs::read_to_string(dir.join("tracer_params.wgsl")).expect("tracer_params.wgsl");
        assert_eq!(src, params + &std::fs::read_to_string(dir.join(name)).expect("shader file"), "{name}");
        let module = naga::front::wgsl::parse_str(src).expect("parses");
        for e in entries {
            assert!(module.entry_points.iter().any(|p| p.name == *e), "{name}: entry point {e} missing");
        }
    }
}

fn tracers(count: u32, seed: [[f32; 3]; 2], step: u64) -> TracerView {
    TracerView { count, seed, life: f32::INFINITY, step, generation: 1, size_px: 2.0, color: [1.0; 4] }
}

fn draw(gpu: &super::headless::Gpu, fr: &mut FieldRenderer, p: &ViewParams) {
    let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    fr.render(&gpu.device, &gpu.queue, &mut enc, [64, 32], p);
    gpu.queue.submit([enc.finish()]);
}

#[test]
fn tracers_move_with_the_flow_and_are_released_again_at_the_inlet() {
    let Some(gpu) = gpu_or_skip("tracers_move_with_the_flow_and_are_released_again_at_the_inlet") else { return };
    let (dev, queue) = (&gpu.device, &gpu.queue);
    // A 2D channel of 64 x 16 cells with a uniform flow of 0.1 cells a step along x.
    let n = [64usize, 16, 1];
    let cells = n[0] * n[1];
    let (ux, uy, uz) = (vec![0.1f32; cells], vec![0.0f32; cells], vec![0.0f32; cells]);
    let mut fr = FieldRenderer::new(dev, queue);
    fr.upload(dev, queue, n, &ux, Some(&vec![0u8; cells])).expect("upload");
    fr.upload_velocity(dev, queue, n, Some([&ux, &uy, &uz]), 1).expect("velocity");
    let inlet = [[0.0, 0.0, 0.0], [1.0, 16.0, 1.0]];
    let mut p = ViewParams::plain(ColorMap::Viridis, (0.0, 0.2), [0; 3], [true; 3], Camera::default());
    p.tracers = Some(tracers(2000, inlet, 100));
    draw(&gpu, &mut fr, &p);
    let (start, _) = fr.tracers_for_tests(dev, queue);
    assert_eq!(start.len(), 2000);
    assert_eq!(fr.tracers_drawn(), (2000, 0));
    // Placed anywhere in the grid, at z = 0.5.
    assert!(start.iter().all(|t| (0.0..64.0).contains(&t[0]) && (0.0..16.0).contains(&t[1]) && t[2] == 0.5));
    let spread = start.iter().filter(|t| t[0] > 32.0).count();
    assert!((700..1300).contains(&spread), "placed evenly: {spread} of 2000 in the right half");
    // 30 steps later: every tracer 3 cells downstream, or released again within the 3 cells
    // behind the inlet face (its random part of the pass).
    p.tracers = Some(tracers(2000, inlet, 130));
    draw(&gpu, &mut fr, &p);
    let (moved, _) = fr.tracers_for_tests(dev, queue);
    let mut released = 0;
    for (a, b) in start.iter().zip(&moved) {
        if a[0] + 3.0 < 64.0 {
            assert!((b[0] - a[0] - 3.0).abs() < 1e-3 && (b[1] - a[1]).abs() < 1e-4, "moved with the flow: {a:?} -> {b:?}");
        } else {
            released += 1;
            assert!((0.0..4.0).contains(&b[0]) && (0.0..16.0).contains(&b[1]), "released at the inlet: {b:?}");
        }
    }
    assert!(released > 40, "{released} tracers left through the outlet and came back at the inlet");
    // Drawn as white dots over the field.
    let (tex, _) = fr.target().expect("target");
    let img = render::read_texture(dev, queue, tex, [64, 32]).expect("read back");
    assert!(img.chunks(4).any(|c| c[0] > 200 && c[1] > 200 && c[2] > 200), "white dots in the picture");
    // Back in time (a reset): placed anew, none moved.
    p.tracers = Some(tracers(2000, inlet, 0));
    draw(&gpu, &mut fr, &p);
    let (again, _) = fr.tracers_for_tests(dev, queue);
    assert!(again.iter().all(|t| t[3] >= 0.0 && (0.0..64.0).contains(&t[0])));
    assert_ne!(again, moved);
}

#[test]
fn tracers_read_only_the_lattice_of_a_sampled_frame_and_stay_out_of_obstacles() {
    let Some(gpu) = gpu_or_skip("tracers_read_only_the_lattice_of_a_sampled_frame_and_stay_out_of_obstacles") else { return };
    let (dev, queue) = (&gpu.device, &gpu.queue);
    // A 3D frame in a shared-buffer layout (padded rows, NaN padding) whose velocity is held at
    // every 2nd cell only: NaN between the lattice points, which a tracer must never read.
    let n = [40usize, 12, 10];
    let cells = n[0] * n[1] * n[2];
    let on_lattice = |c: usize| [c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])].iter().all(|&x| x % 2 == 0);
    let plane = |v: f32| -> Vec<f32> { (0..cells).map(|c| if on_lattice(c) { v } else { f32::NAN }).collect() };
    let (speed, ux, uy, uz) = (plane(0.05), plane(0.05), plane(0.0), plane(0.0));
    let (buffer, layout) = padded_frame(&gpu, n, &[&speed, &ux, &uy, &uz]);
    let layout = layout.with_region(sim_core::frame::FrameRegion::Sampled { stride: 2, planes: [None; 3] });
    // A wall across x = 30..32: tracers that reach it are released again at the inlet.
    let solid: Vec<u8> = (0..cells).map(|c| u8::from((30..32).contains(&(c % n[0])))).collect();
    let mut fr = FieldRenderer::new(dev, queue);
    fr.upload_from_buffer(dev, queue, &buffer, &layout, 0, None, Some([1, 2, 3]), Some(&solid), None).expect("bind");
    assert!(fr.has_velocity());
    let inlet = [[0.0, 0.0, 0.0], [1.0, 12.0, 10.0]];
    let mut p = ViewParams::plain(ColorMap::Viridis, (0.0, 0.1), [20, 6, 5], [true; 3], Camera::default());
    for step in [0u64, 100, 200, 300, 400, 500, 600] {
        p.tracers = Some(tracers(3000, inlet, step));
        draw(&gpu, &mut fr, &p);
    }
    let (t, _) = fr.tracers_for_tests(dev, queue);
    assert!(t.iter().all(|v| v.iter().all(|x| x.is_finite())), "no tracer read a value between the lattice points");
    for v in &t {
        assert!(!(30.0..32.0).contains(&v[0]), "a tracer inside the wall: {v:?}");
        assert!(v[0] < 30.0, "a tracer went through the wall: {v:?}");
    }
}

#[test]
fn streamlines_follow_the_flow_and_end_at_obstacles() {
    let Some(gpu) = gpu_or_skip("streamlines_follow_the_flow_and_end_at_obstacles") else { return };
    let (dev, queue) = (&gpu.device, &gpu.queue);
    // A 3D box with a uniform flow along x, a solid block at x 20..24 over the lower half of y.
    let n = [32usize, 16, 16];
    let cells = n[0] * n[1] * n[2];
    let (ux, zero) = (vec![0.05f32; cells], vec![0.0f32; cells]);
    let solid: Vec<u8> = (0..cells).map(|c| u8::from((20..24).contains(&(c % n[0])) && (c / n[0]) % n[1] < 8)).collect();
    let mut fr = FieldRenderer::new(dev, queue);
    fr.upload(dev, queue, n, &ux, Some(&solid)).expect("upload");
    fr.upload_velocity(dev, queue, n, Some([&ux, &zero, &zero]), 1).expect("velocity");
    let mut p = ViewParams::plain(ColorMap::Viridis, (0.0, 0.1), [16, 8, 8], [true; 3], Camera::default());
    let lines = StreamlineView {
        origin: [0.5, 0.0, 0.0],
        u: [0.0, 16.0, 0.0],
        v: [0.0, 0.0, 16.0],
        seeds: [4, 4],
        points: 80,
        step: 0.5,
        by_speed: true,
        range: (0.0, 0.1),
        color: [1.0; 4],
    };
    p.streamlines = Some(lines);
    draw(&gpu, &mut fr, &p);
    assert_eq!(fr.tracers_drawn(), (0, 16));
    let (_, pts) = fr.tracers_for_tests(dev, queue);
    assert_eq!(pts.len(), 16 * 80);
    for (j, line) in pts.chunks(80).enumerate() {
        let seed = [0.5, (f32::from(j as u8 % 4) + 0.5) * 4.0, (f32::from(j as u8 / 4) + 0.5) * 4.0];
        let valid: Vec<&[f32; 4]> = line.iter().take_while(|q| q[3] >= 0.0).collect();
        assert!(line[valid.len()..].iter().all(|q| q[3] < 0.0), "line {j}: points after its end are marked");
        for (k, q) in valid.iter().enumerate() {
            let want = seed[0] + 0.5 * k as f32;
            assert!(
                (q[0] - want).abs() < 1e-3 && (q[1] - seed[1]).abs() < 1e-4 && (q[2] - seed[2]).abs() < 1e-4,
                "line {j} point {k}: {q:?}"
            );
            assert!((q[3] - 0.05).abs() < 1e-6, "the speed rides along");
        }
        let last = valid.last().expect("a line has points")[0];
        if seed[1] < 8.0 {
            assert!((19.0..20.0).contains(&last), "line {j} ends in front of the block, at x {last}");
        } else {
            assert!(last >= 31.0, "line {j} runs over the block to the outlet, ends at x {last}");
        }
    }
    // Traced again only when the velocity or the seeds change: a new seed count retraces.
    p.streamlines = Some(StreamlineView { seeds: [2, 1], v: [0.0; 3], ..lines });
    draw(&gpu, &mut fr, &p);
    assert_eq!(fr.tracers_drawn(), (0, 2));
}

#[test]
fn ui_tracer_and_streamline_keys_send_the_velocity_and_the_seed_tool_places_the_seed() {
    let mut h = harness(small_app(true));
    run_until(&mut h, "a first frame", |a| a.snap.is_some());
    assert!(h.state().view_params().tracers.is_none() && !h.state().wants_velocity());
    // t: tracers on; the solver thread then publishes the velocity with every frame.
    h.key_press(egui::Key::T);
    h.step();
    assert!(h.state().view.tracers.on);
    run_until(&mut h, "frames with the velocity", |a| {
        a.snap.as_ref().is_some_and(|s| [FieldKind::Ux, FieldKind::Uy, FieldKind::Uz].iter().all(|&k| s.frame.plane(k).is_some()))
    });
    let p = h.state().view_params();
    let t = p.tracers.expect("tracers drawn");
    // Released in front of the scene's inlet (x = 0), across the channel.
    assert_eq!(t.seed, [[1.0, 1.0, 0.0], [2.0, 23.0, 1.0]], "released at the inlet, past its layer, across its open cells");
    assert_eq!(t.count, super::panels::tracers::TracerSettings::default().count);
    assert_eq!(t.step, h.state().snap.as_ref().map(|s| s.step).unwrap_or_default());
    // g: the Seed tool; a click on the view releases tracers around that point.
    h.key_press(egui::Key::G);
    h.step();
    assert_eq!(h.state().edit.tool, Tool::Seed);
    let at = screen(&h, [30.5, 12.5, 0.5]);
    click_at(&mut h, at);
    let tv = h.state().view_params().tracers.expect("tracers");
    let r = h.state().view.tracers.radius;
    assert!(
        (tv.seed[0][0] - (30.5 - r)).abs() < 0.6 && (tv.seed[1][1] - (12.5 + r)).abs() < 0.6,
        "seed box around the click: {:?}",
        tv.seed
    );
    assert_ne!(tv.generation, t.generation, "every tracer is placed anew");
    // l: streamlines from a line of seeds across y in front of the inlet, centred on the seed.
    h.key_press(egui::Key::L);
    h.step();
    let s = h.state().view_params().streamlines.expect("streamlines");
    assert_eq!(s.seeds[1], 1, "a seed line in 2D");
    assert!(s.origin[0] > 0.0 && s.u[1] > 0.0 && s.v == [0.0; 3]);
    // Both off: the velocity is no longer asked for.
    h.key_press(egui::Key::T);
    h.key_press(egui::Key::L);
    h.step();
    assert!(!h.state().wants_velocity());
    run_until(&mut h, "frames without the velocity", |a| a.snap.as_ref().is_some_and(|s| s.frame.plane(FieldKind::Uy).is_none()));
}

#[test]
fn ui_3d_tracers_carry_the_whole_volume_and_the_panel_sets_them() {
    let mut h = harness(small_3d_app());
    // The first snapshot changes the panels' layout: clicks wait for it, or they land beside.
    run_until(&mut h, "a first frame", |a| a.snap.is_some());
    super::tests::unfold(&mut h, super::panels::sidebar::Section::Visualization);
    h.get_by_label("tracers").click();
    h.step();
    assert!(h.state().view.tracers.on, "the checkbox turns tracers on");
    h.get_by_label("Step").click();
    // A small grid carries the velocity of every cell, even with slices alone shown.
    run_until(&mut h, "a whole frame with the velocity", |a| {
        a.snap
            .as_ref()
            .is_some_and(|s| s.frame.layout.region == sim_core::frame::FrameRegion::All && s.frame.plane(FieldKind::Uz).is_some())
    });
    // The panel: seeding everywhere places them anew.
    let g = h.state().view.tracers.generation;
    h.state_mut().view.tracers.seeding = super::panels::tracers::Seeding::Everywhere;
    h.get_by_label("streamlines").click();
    h.step();
    let p = h.state().view_params();
    assert_eq!(p.tracers.expect("tracers").seed, [[0.0; 3], [24.0, 16.0, 16.0]]);
    let s = p.streamlines.expect("streamlines");
    assert_eq!(s.seeds, [16, 16], "a plane of seeds in 3D");
    assert!(s.origin[0] > 0.5 && s.origin[0] < 3.0, "in front of the inlet: {:?}", s.origin);
    let _ = g;
    // Larger grids carry a lattice of every 2nd or 4th cell.
    assert_eq!(super::frames::velocity_stride(256 * 256 * 256), 2);
    assert_eq!(super::frames::velocity_stride(512 * 512 * 512), 4);
    assert_eq!(super::frames::velocity_stride(100 * 100 * 100), 1);
}

#[test]
fn view_spec_takes_tracers_and_streamlines_and_refuses_bad_counts() {
    use super::panels::tracers::Seeding;
    let v = super::ViewSpec::parse("tracers=5000:everywhere,streamlines=8").expect("parses");
    assert_eq!(v.tracers, Some((5000, Seeding::Everywhere)));
    assert_eq!(v.streamlines, Some(8));
    assert_eq!(super::ViewSpec::parse("tracers=100").expect("parses").tracers, Some((100, Seeding::Inlet)));
    assert_eq!(super::ViewSpec::parse("tracers=off").expect("parses").tracers, None);
    for bad in ["tracers=0", "tracers=lots", "tracers=10:upstream", "streamlines=0x", "streamlines=1000"] {
        let e = super::ViewSpec::parse(bad).expect_err(bad).to_string();
        assert!(e.contains("expected"), "{bad}: {e}");
    }
}
