//! Tests of the viewer: shaders through naga, pixels of offscreen renders on whatever adapter
//! there is (lavapipe in CI), and the panels driven headless with egui_kittest.

use super::app::ViewerApp;
use super::camera::Camera;
use super::colormap::{lut_index, ColorMap};
use super::headless::{self, Gpu, PictureData};
use super::legend::{auto_range, frame_sample, robust_range};
use super::panels::sidebar::Section;
use super::render::{self, read_texture, FieldRenderer, IsoView, ViewParams};
use super::{legend_bar_rect, LegendInfo, ViewSpec};
use crate::BackendChoice;
use egui_kittest::kittest::Queryable as _;
use sim_core::bricks::{BrickClass, BrickMap};
use sim_core::domain::{kind, make_flag, Domain};
use sim_core::fields::FieldKind;
use sim_core::lattice::Lattice;
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
        let mut src = std::fs::read_to_string(&p).expect("readable shader");
        // The tracer shaders are built with their shared `Params` first (render::tracers).
        if p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("tracers")) {
            src = std::fs::read_to_string(shaders_dir().join("tracer_params.wgsl")).expect("tracer_params.wgsl") + &src;
        }
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}: {}", p.display(), e.emit_to_string(&src)));
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::empty())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}", p.display(), e.emit_to_string(&src)));
        n += 1;
    }
    assert!(n >= 2, "shaders missing in {}", shaders_dir().display());
    // The embedded copies are the files on disk.
    assert_eq!(render::FIELD_WGSL, std::fs::read_to_string(shaders_dir().join("field.wgsl")).expect("field.wgsl"));
    assert_eq!(
        render::MARCHING_CUBES_WGSL,
        std::fs::read_to_string(shaders_dir().join("marching_cubes.wgsl")).expect("marching_cubes.wgsl")
    );
    // Every entry point the renderer asks for is in its module.
    for (src, entries) in [
        (
            render::FIELD_WGSL,
            &["vs_slice", "fs_slice", "vs_iso", "vs_solid", "fs_surface", "vs_box", "fs_box", "vs_outline", "fs_outline"][..],
        ),
        (render::MARCHING_CUBES_WGSL, &["emit", "finish"][..]),
    ] {
        let module = naga::front::wgsl::parse_str(src).expect("parsed above");
        for e in entries {
            assert!(module.entry_points.iter().any(|p| p.name == *e), "entry point {e} missing");
        }
    }
}

/// A GPU adapter, or None (the test is skipped) unless ESOFLOW_REQUIRE_ADAPTER=1.
pub(super) fn gpu_or_skip(test: &str) -> Option<Gpu> {
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
    ViewParams::plain(cmap, range, [0; 3], [true; 3], Camera::default())
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
        let p = ViewParams::plain(ColorMap::Viridis, (0.0, 1.0), [sx, 8, 4], [true, false, false], cam);
        let img = render_field(&gpu, n, &values, &solid, &p, size);
        let at = cam.project(n, size, false, [sx as f32 + 0.5, 8.0, 4.0]).expect("in front");
        let got = px(&img, size[0], at[0] as u32, at[1] as u32);
        let want = ColorMap::Viridis.color_of(sx as f32 / 31.0, 0.0, 1.0);
        assert!(close(got, want, 1), "x slice {sx} at pixel {at:?}: got {got:?}, want {want:?}");
        // The corner of the view is background.
        assert!(!close(px(&img, size[0], 2, 2), want, 20));
    }
    // All three planes on: the z plane through the middle shows the x gradient.
    let p = ViewParams::plain(ColorMap::Turbo, (0.0, 1.0), [0, 0, 4], [false, false, true], cam);
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
        let legend = LegendInfo::field(FieldKind::Speed, cmap, (0.0, 1.0), true);
        let img = headless::render_picture(&gpu, &PictureData::field(n, &values, &solid), &p, &legend, size).expect("picture");
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
    // Isosurface, solids and overlay.
    let v = ViewSpec::parse("iso=vorticity:0.01,solids=off,overlay=bricks").expect("valid");
    assert_eq!(v.iso, Some((FieldKind::Vorticity, 0.01)));
    assert_eq!(v.solids, Some(false));
    assert!(v.bricks && !v.brick_outlines);
    let v = ViewSpec::parse("outlines=bricks").expect("valid");
    assert!(v.brick_outlines && !v.bricks && !v.subgrid_outlines);
    let v = ViewSpec::parse("outlines=subgrids").expect("valid");
    assert!(v.subgrid_outlines && !v.brick_outlines);
    let v = ViewSpec::parse("outlines=bricks+subgrids").expect("valid");
    assert!(v.subgrid_outlines && v.brick_outlines);
    assert_eq!(ViewSpec::parse("outlines=none").expect("valid"), ViewSpec::default());
    assert_eq!(ViewSpec::parse("iso=q:1e-5").expect("valid").iso, Some((FieldKind::Q, 1e-5)));
    assert_eq!(ViewSpec::parse("iso=Q").expect("valid").iso, Some((FieldKind::Q, super::default_iso_threshold(FieldKind::Q))));
    assert_eq!(ViewSpec::parse("iso=off,overlay=none").expect("valid"), ViewSpec::default());
    for (bad, names) in [
        ("iso=speed:0.1", "iso=speed:0.1"),
        ("iso=vorticity:abc", "iso=vorticity:abc"),
        ("iso=vorticity:NaN", "finite"),
        ("iso=q:inf", "finite"),
        ("iso=off:1", "iso=off:1"),
        ("solids=maybe", "solids=maybe: expected on or off"),
        ("overlay=grid", "overlay=grid: expected bricks or none"),
        ("outlines=blocks", "outlines=blocks: expected bricks, subgrids, bricks+subgrids or none"),
        ("isosurface=q", "unknown key"),
    ] {
        let e = ViewSpec::parse(bad).expect_err(bad).to_string();
        assert!(e.contains(names), "{bad}: {e}");
    }
}

// ---- isosurfaces, solid surfaces and the brick overlay -------------------------------------

/// A 32^3 ball: value 16 - distance from the centre (16, 16, 16) in world space, so the surface
/// at threshold t is a sphere of radius 16 - t; speed 0.5 everywhere.
fn ball() -> ([usize; 3], Vec<f32>, Vec<f32>) {
    let n = [32, 32, 32];
    let values = (0..32 * 32 * 32)
        .map(|i| {
            let p = [i % 32, (i / 32) % 32, i / 1024].map(|k| k as f32 + 0.5 - 16.0);
            16.0 - (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt()
        })
        .collect();
    (n, values, vec![0.5; 32 * 32 * 32])
}

fn iso_params(cmap: ColorMap, threshold: f32) -> ViewParams {
    let mut p = ViewParams::plain(cmap, (0.0, 1.0), [16; 3], [false; 3], Camera::default());
    p.iso = Some(IsoView { kind: FieldKind::Vorticity, threshold, color_range: (0.0, 1.0) });
    p
}

fn draw(gpu: &Gpu, data: &PictureData, p: &ViewParams, size: [u32; 2]) -> (Vec<u8>, Option<render::MeshStats>) {
    let (fr, stats) = headless::draw_offscreen(gpu, data, p, size).expect("draw");
    let (tex, _) = fr.target().expect("target");
    (read_texture(&gpu.device, &gpu.queue, tex, size).expect("read back"), stats)
}

/// Whether `got` is `want` darkened by a lighting factor between 0.3 and 1 (a lit surface).
fn shaded(got: [u8; 4], want: [u8; 4]) -> bool {
    let m = (0..3).max_by_key(|&k| want[k]).unwrap_or(0);
    let k = f32::from(got[m]) / f32::from(want[m]).max(1.0);
    (0.28..=1.02).contains(&k) && (0..3).all(|c| (f32::from(got[c]) - k * f32::from(want[c])).abs() <= 4.0)
}

fn background() -> [u8; 4] {
    let c = render::BACKGROUND;
    [(c.r * 255.0).round() as u8, (c.g * 255.0).round() as u8, (c.b * 255.0).round() as u8, 255]
}

#[test]
fn isosurface_of_a_ball_matches_the_cpu_and_shows_at_the_centre() {
    let Some(gpu) = gpu_or_skip("isosurface_of_a_ball_matches_the_cpu_and_shows_at_the_centre") else { return };
    let (n, values, speed) = ball();
    let solid = vec![0u8; values.len()];
    let size = [240, 180];
    let data = PictureData { iso: Some((FieldKind::Vorticity, &values, &speed)), ..PictureData::field(n, &values, &solid) };
    let cam = Camera::default();
    let centre = cam.project(n, size, false, [16.0, 16.0, 16.0]).expect("in front");
    let at = |img: &[u8], p: [f32; 2]| px(img, size[0], p[0] as u32, p[1] as u32);
    // A threshold inside the range: a sphere of radius 10, coloured by |u| = 0.5 (turbo's
    // middle), with as many triangles as the CPU reference makes.
    let (img, stats) = draw(&gpu, &data, &iso_params(ColorMap::Turbo, 6.0), size);
    let stats = stats.expect("the adapter runs compute shaders");
    let cpu = super::mc::triangles_cpu(&values, n, 6.0).len() as u32;
    assert!(cpu > 1000, "{cpu}");
    assert_eq!((stats.triangles(), stats.drawn()), (cpu, cpu), "{stats:?}");
    let want = ColorMap::Turbo.color_of(0.5, 0.0, 1.0);
    let got = at(&img, centre);
    assert!(shaded(got, want) && close(got, want, 40), "centre {got:?}, want a lit {want:?}");
    // Facing the camera, the centre is lit fully; inside the silhouette it is still the surface,
    // outside it the background.
    let r_px = cam.project(n, size, false, [16.0, 16.0, 16.0]).map(|c| c[1]).unwrap_or(0.0)
        - cam.project(n, size, false, [16.0, 16.0 + 10.0, 16.0]).map(|c| c[1]).unwrap_or(0.0);
    assert!(r_px > 20.0, "{r_px}");
    assert!(shaded(at(&img, [centre[0] + 0.5 * r_px, centre[1]]), want));
    assert_eq!(at(&img, [3.0, 3.0]), background());
    // Above the field's maximum (16): no triangles, the centre is background.
    let (img, stats) = draw(&gpu, &data, &iso_params(ColorMap::Turbo, 20.0), size);
    assert_eq!(stats.map(|s| s.wanted), Some(0));
    assert_eq!(at(&img, centre), background());
    // NaN cells (a blown-up state): cubes touching them make nothing, the rest is as on the CPU.
    let mut bad = values.clone();
    for v in bad.iter_mut().step_by(7) {
        *v = f32::NAN;
    }
    let data_nan = PictureData { iso: Some((FieldKind::Vorticity, &bad, &speed)), ..PictureData::field(n, &bad, &solid) };
    let (_, stats) = draw(&gpu, &data_nan, &iso_params(ColorMap::Viridis, 6.0), size);
    let cpu = super::mc::triangles_cpu(&bad, n, 6.0).len() as u32;
    assert_eq!(stats.map(|s| s.triangles()), Some(cpu));
}

#[test]
fn isosurface_on_coarse_cubes_reads_only_the_lattice() {
    // Marched on cubes of s cells, the surface reads only the cells whose coordinates are
    // multiples of s (a sampled frame holds just those): data with NaN everywhere else draws
    // the same picture with the same triangles as the whole field, as many as the CPU makes
    // from the lattice alone. The cubes are a multiple of the data's lattice.
    let Some(gpu) = gpu_or_skip("isosurface_on_coarse_cubes_reads_only_the_lattice") else { return };
    let n = [38usize, 41, 35];
    let cells = n[0] * n[1] * n[2];
    let at = |i: usize| [i % n[0], (i / n[0]) % n[1], i / (n[0] * n[1])];
    let values: Vec<f32> = (0..cells)
        .map(|i| {
            let p = at(i).map(|k| k as f32 + 0.5);
            let d = [p[0] - 19.0, p[1] - 20.5, p[2] - 17.5];
            14.0 - (d[0] * d[0] + 1.3 * d[1] * d[1] + d[2] * d[2]).sqrt()
        })
        .collect();
    let speed: Vec<f32> = (0..cells).map(|i| at(i)[0] as f32 / n[0] as f32).collect();
    let solid = vec![0u8; cells];
    let on = |i: usize, s: usize| at(i).iter().all(|k| k % s == 0);
    let sampled = |v: &[f32]| -> Vec<f32> { (0..cells).map(|i| if on(i, 4) { v[i] } else { f32::NAN }).collect() };
    let (sv, ss) = (sampled(&values), sampled(&speed));
    let size = [96, 96];
    let p = iso_params(ColorMap::Turbo, 6.0);
    let render = |v: &[f32], s: &[f32], lattice: u32, lod: u32| {
        let mut fr = FieldRenderer::new(&gpu.device, &gpu.queue);
        fr.set_capacity_for_tests(300_000, 300_000);
        fr.upload(&gpu.device, &gpu.queue, n, &values, Some(&solid)).expect("upload");
        fr.upload_iso(&gpu.device, &gpu.queue, n, FieldKind::Vorticity, v, s).expect("upload");
        fr.set_iso_lattice(lattice);
        fr.set_iso_lod_for_tests(lod);
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        fr.render(&gpu.device, &gpu.queue, &mut enc, size, &p);
        gpu.queue.submit([enc.finish()]);
        fr.poll(&gpu.device, true);
        let (tex, _) = fr.target().expect("target");
        (read_texture(&gpu.device, &gpu.queue, tex, size).expect("read back"), fr.iso_stats().expect("stats"))
    };
    let coarse_cpu = |s: usize| {
        let m = n.map(|k| (k - 1) / s + 1);
        let c: Vec<f32> = (0..m[0] * m[1] * m[2])
            .map(|j| {
                let q = [j % m[0], (j / m[0]) % m[1], j / (m[0] * m[1])];
                values[s * q[0] + n[0] * (s * q[1] + n[1] * s * q[2])]
            })
            .collect();
        super::mc::triangles_cpu(&c, m, 6.0).len() as u32
    };
    let (whole, sw) = render(&values, &speed, 1, 4);
    let (lat, sl) = render(&sv, &ss, 4, 4);
    assert_eq!((sw.stride, sl.stride), (4, 4));
    assert!(sw.triangles() > 50 && sw.triangles() == coarse_cpu(4), "{sw:?} vs the CPU's {}", coarse_cpu(4));
    assert_eq!(sl, sw, "the lattice alone gives the same surface");
    // An indexed mesh: each vertex once (a closed surface has about half as many as triangles).
    assert!(sw.vertices > sw.triangles() / 3 && sw.vertices < 2 * sw.triangles() / 3, "{sw:?}");
    assert_eq!(lat, whole, "the lattice alone draws the same picture (normals and colours from lattice points)");
    // Finer cubes than the lattice are not possible: cubes of 4; coarser ones: of 8.
    let (_, s3) = render(&sv, &ss, 4, 3);
    assert_eq!((s3.stride, s3.triangles()), (4, coarse_cpu(4)));
    let (_, s5) = render(&sv, &ss, 4, 5);
    assert!(s5.stride == 8 && s5.triangles() > 0 && s5.triangles() == coarse_cpu(8), "{s5:?}");
}

#[test]
fn isosurface_buffer_grows_and_caps() {
    let Some(gpu) = gpu_or_skip("isosurface_buffer_grows_and_caps") else { return };
    let (n, values, speed) = ball();
    let solid = vec![0u8; values.len()];
    let cpu = super::mc::triangles_cpu(&values, n, 6.0).len() as u32;
    let p = iso_params(ColorMap::Viridis, 6.0);
    let render = |first: u32, max: u32| {
        let mut fr = FieldRenderer::new(&gpu.device, &gpu.queue);
        fr.set_capacity_for_tests(first, max);
        fr.upload(&gpu.device, &gpu.queue, n, &values, Some(&solid)).expect("upload");
        fr.upload_iso(&gpu.device, &gpu.queue, n, FieldKind::Vorticity, &values, &speed).expect("upload");
        let mut passes = 0;
        loop {
            let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            fr.render(&gpu.device, &gpu.queue, &mut enc, [64, 64], &p);
            gpu.queue.submit([enc.finish()]);
            fr.poll(&gpu.device, true);
            passes += 1;
            if !fr.needs_redraw() || passes > 20 {
                break;
            }
        }
        (fr.iso_stats().expect("stats"), passes)
    };
    // A small first buffer grows until the surface fits.
    let (st, passes) = render(30, 3 * cpu + 300);
    assert!(passes > 1 && !st.capped() && st.drawn() == cpu, "{st:?} after {passes} passes");
    // At the largest buffer the surface is capped: the count says so, the buffer is full.
    let (st, _) = render(30, 300);
    assert!(st.capped(), "{st:?}");
    assert_eq!((st.triangles(), st.drawn()), (cpu, 100));
}

#[test]
fn solid_obstacles_are_grey_surfaces_and_walls_are_not() {
    let Some(gpu) = gpu_or_skip("solid_obstacles_are_grey_surfaces_and_walls_are_not") else { return };
    let n = [32, 32, 32];
    // Walls (mask 1) on every face, an obstacle ball (mask 2) of radius 8 in the middle.
    let solid: Vec<u8> = (0..32 * 32 * 32)
        .map(|i| {
            let q = [i % 32, (i / 32) % 32, i / 1024];
            let p = q.map(|k| k as f32 + 0.5 - 16.0);
            if q.iter().any(|&k| k == 0 || k == 31) {
                1
            } else {
                u8::from((p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt() < 8.0) * 2
            }
        })
        .collect();
    let values = vec![0.0f32; solid.len()];
    let size = [200, 160];
    let cam = Camera::default();
    let centre = cam.project(n, size, false, [16.0, 16.0, 16.0]).expect("in front");
    let mut p = ViewParams::plain(ColorMap::Viridis, (0.0, 1.0), [16; 3], [false; 3], cam);
    p.solids = true;
    let data = PictureData::field(n, &values, &solid);
    let (img, _) = draw(&gpu, &data, &p, size);
    let grey = (render::SOLID_GREY * 255.0).round() as u8;
    let got = px(&img, size[0], centre[0] as u32, centre[1] as u32);
    assert!(shaded(got, [grey, grey, grey, 255]) && got[0] > 100, "obstacle at the centre: {got:?}");
    // The walls make no surface: the box's inside is open, its corner region is background.
    let (img, _) = draw(&gpu, &PictureData::field(n, &values, &solid.iter().map(|&m| m.min(1)).collect::<Vec<_>>()), &p, size);
    assert_eq!(px(&img, size[0], centre[0] as u32, centre[1] as u32), background());
    // Solids off: nothing.
    p.solids = false;
    let (img, _) = draw(&gpu, &data, &p, size);
    assert_eq!(px(&img, size[0], centre[0] as u32, centre[1] as u32), background());
}

#[test]
fn brick_overlay_colours_each_class() {
    let Some(gpu) = gpu_or_skip("brick_overlay_colours_each_class") else { return };
    // 48 x 24 cells, bricks of 8 x 8: a wall at x < 8 (all-solid bricks), an obstacle at
    // (28..30, 4..6) (a boundary brick), plain fluid bricks elsewhere. 10 pixels per cell.
    let n = [48, 24, 1];
    let mut dom = Domain::periodic(Lattice::D2Q9, n);
    for y in 0..24 {
        for x in 0..48 {
            let wall = x < 8;
            let obstacle = (28..30).contains(&x) && (4..6).contains(&y);
            if wall || obstacle {
                let i = dom.index(x, y, 0);
                dom.flags[i] = make_flag(kind::SOLID, usize::from(obstacle));
            }
        }
    }
    dom.mark_near();
    let map = BrickMap::classify(&dom, BrickMap::default_brick(2));
    let solid = super::worker::solid_mask(&dom);
    let values = vec![0.25f32; 48 * 24];
    let size = [480, 240];
    let mut p = params(ColorMap::Viridis, (0.0, 1.0));
    p.bricks = true;
    let data = PictureData { bricks: Some(&map), ..PictureData::field(n, &values, &solid) };
    let (img, _) = draw(&gpu, &data, &p, size);
    let (plain_img, _) = draw(&gpu, &data, &params(ColorMap::Viridis, (0.0, 1.0)), size);
    let field = ColorMap::Viridis.color_of(0.25, 0.0, 1.0);
    let mut seen = [false; 3];
    for (id, &class) in map.class.iter().enumerate() {
        let [bx, by, _] = map.coords(id);
        // A cell near the brick's middle (not on its edge) and the pixel at its centre.
        let (cx, cy) = (bx * 8 + 3, by * 8 + 3);
        let (x, y) = (cx as u32 * 10 + 5, (23 - cy as u32) * 10 + 5);
        let base = if solid[cx + 48 * cy] != 0 { [128, 128, 128, 255] } else { field };
        let k = render::BRICK_COLORS[class as usize];
        let want = [0, 1, 2, 3].map(|c| {
            if c == 3 {
                255
            } else {
                (f32::from(base[c]) + render::BRICK_TINT * (f32::from(k[c]) - f32::from(base[c]))).round() as u8
            }
        });
        let got = px(&img, size[0], x, y);
        assert!(close(got, want, 2), "brick {id} ({class:?}) inside: got {got:?}, want {want:?}");
        assert!(close(px(&plain_img, size[0], x, y), base, 1), "no overlay: the field");
        // The brick's left edge (world x = 8 bx) is drawn in the class colour.
        if bx > 0 {
            let got = px(&img, size[0], (bx * 80) as u32, y);
            assert!(close(got, [k[0], k[1], k[2], 255], 2), "brick {id} edge: {got:?}, want {k:?}");
        }
        seen[class as usize] = true;
    }
    assert_eq!(seen, [true; 3], "every class is in the picture");
    assert_eq!([BrickClass::Solid, BrickClass::Plain, BrickClass::Boundary].map(|c| map.count_of(c)), [3, 8, 7]);
}

/// Whether a pixel within one pixel of `at` (a line's pixels may sit half a pixel off) is `want`.
fn near_has(img: &[u8], size: [u32; 2], at: [f32; 2], want: [u8; 4]) -> bool {
    let (x0, y0) = (at[0].floor() as i64, at[1].floor() as i64);
    (-1..=1).any(|dy| {
        (-1..=1).any(|dx| {
            let (x, y) = (x0 + dx, y0 + dy);
            (0..i64::from(size[0])).contains(&x)
                && (0..i64::from(size[1])).contains(&y)
                && close(px(img, size[0], x as u32, y as u32), want, 2)
        })
    })
}

/// Distance (pixels) from `p` to the segment a-b.
fn to_segment(p: [f32; 2], a: [f32; 2], b: [f32; 2]) -> f32 {
    let (d, q) = ([b[0] - a[0], b[1] - a[1]], [p[0] - a[0], p[1] - a[1]]);
    let t = ((q[0] * d[0] + q[1] * d[1]) / (d[0] * d[0] + d[1] * d[1]).max(1e-9)).clamp(0.0, 1.0);
    ((q[0] - t * d[0]).powi(2) + (q[1] - t * d[1]).powi(2)).sqrt()
}

#[test]
fn outline_box_draws_its_edges_in_its_colour() {
    let Some(gpu) = gpu_or_skip("outline_box_draws_its_edges_in_its_colour") else { return };
    // An empty scene (no slices, no surfaces) and one box; its edges are where the camera says.
    let n = [32, 32, 32];
    let values = vec![0.0f32; 32 * 32 * 32];
    let solid = vec![0u8; values.len()];
    let size = [320, 240];
    let cam = Camera::default();
    let (lo, hi) = ([6.0f32, 10.0, 8.0], [20.0f32, 22.0, 24.0]);
    let color = [255, 0, 200, 255];
    let boxes = [render::OutlineBox { min: lo, max: hi, color }];
    let mut p = ViewParams::plain(ColorMap::Viridis, (0.0, 1.0), [16; 3], [false; 3], cam);
    p.outlines = true;
    let data = PictureData { outlines: Some(&boxes), ..PictureData::field(n, &values, &solid) };
    let (img, _) = draw(&gpu, &data, &p, size);
    let proj = |w: [f32; 3]| cam.project(n, size, false, w).expect("in front");
    // The 12 edges, projected.
    let corner = |k: usize| [0, 1, 2].map(|a| if k >> a & 1 == 1 { hi[a] } else { lo[a] });
    let edges: Vec<([f32; 2], [f32; 2])> = (0..8usize)
        .flat_map(|k| (0..3).filter(move |a| k >> a & 1 == 0).map(move |a| (k, k | 1 << a)))
        .map(|(a, b)| (proj(corner(a)), proj(corner(b))))
        .collect();
    assert_eq!(edges.len(), 12);
    let off_edges = |q: [f32; 2]| edges.iter().map(|&(a, b)| to_segment(q, a, b)).fold(f32::MAX, f32::min);
    // Along the edge (lo.x..hi.x, lo.y, lo.z) and the edge (hi.x, lo.y..hi.y, hi.z): the colour.
    for (a, b) in [(lo, [hi[0], lo[1], lo[2]]), ([hi[0], lo[1], hi[2]], hi)] {
        let (pa, pb) = (proj(a), proj(b));
        for t in [0.2f32, 0.5, 0.8] {
            let q = [pa[0] + t * (pb[0] - pa[0]), pa[1] + t * (pb[1] - pa[1])];
            assert!(near_has(&img, size, q, color), "edge {a:?}-{b:?} at {t}: pixel {q:?} lacks the box colour");
        }
    }
    // Inside the box's picture (a point inside the box whose pixel is farthest from every
    // projected edge) and outside it: not the colour.
    let inside = [0.25f32, 0.5, 0.75]
        .iter()
        .flat_map(|&u| [0.25f32, 0.5, 0.75].map(|v| [0.25f32, 0.5, 0.75].map(|w| [u, v, w])))
        .flatten()
        .map(|t| proj([0, 1, 2].map(|a| lo[a] + t[a] * (hi[a] - lo[a]))))
        .max_by(|a, b| off_edges(*a).total_cmp(&off_edges(*b)))
        .expect("candidates");
    assert!(off_edges(inside) > 4.0, "every candidate pixel inside the box lies on an edge: {inside:?}");
    assert_eq!(px(&img, size[0], inside[0] as u32, inside[1] as u32), background(), "inside the box at {inside:?}: background");
    for q in [[4.0f32, 4.0], [size[0] as f32 - 5.0, size[1] as f32 - 5.0]] {
        assert!(off_edges(q) > 4.0);
        assert!(!near_has(&img, size, q, color), "outside the box at {q:?}");
    }
    let colored = img.chunks(4).filter(|c| close([c[0], c[1], c[2], c[3]], color, 2)).count();
    assert!(colored > 100, "{colored} pixels of the box colour");
    // Outlines off: none of its colour anywhere.
    p.outlines = false;
    let (img, _) = draw(&gpu, &data, &p, size);
    assert!(!img.chunks(4).any(|c| close([c[0], c[1], c[2], c[3]], color, 2)), "outlines off");
}

#[test]
fn brick_outlines_take_boundary_and_solid_bricks_and_cap_evenly() {
    // 28 x 12 x 10 cells (periodic) in bricks of 8: 4 x 2 x 2 bricks, the far ones partial. A
    // solid slab at 8 <= x < 16 makes the second column all solid, the columns beside it boundary
    // bricks (cells next to a solid); the last column is plain fluid.
    let n = [28, 12, 10];
    let mut dom = Domain::periodic(Lattice::D3Q19, n);
    for z in 0..10 {
        for y in 0..12 {
            for x in 8..16 {
                let i = dom.index(x, y, z);
                dom.flags[i] = make_flag(kind::SOLID, 0);
            }
        }
    }
    dom.mark_near();
    let map = BrickMap::classify(&dom, [8, 8, 8]);
    let counts = [BrickClass::Solid, BrickClass::Plain, BrickClass::Boundary].map(|c| map.count_of(c));
    assert_eq!(counts, [4, 4, 8], "{:?}", map.class);
    let o = render::brick_outlines(&map, n, 100);
    assert_eq!((o.boxes.len(), o.total), (12, 12));
    assert!(!o.capped());
    // Boundary bricks first, in their colour; corners clamped to the domain.
    let k = render::BRICK_COLORS[BrickClass::Boundary as usize];
    assert!(o.boxes[..8].iter().all(|b| b.color == [k[0], k[1], k[2], 255] && (b.min[0] == 0.0 || b.min[0] == 16.0)));
    let k = render::BRICK_COLORS[BrickClass::Solid as usize];
    assert!(o.boxes[8..].iter().all(|b| b.color == [k[0], k[1], k[2], 255] && b.min[0] == 8.0 && b.max[0] == 16.0));
    assert!(o.boxes.iter().all(|b| (0..3).all(|a| b.max[a] <= n[a] as f32 && b.min[a] < b.max[a])));
    assert!(o.boxes.iter().any(|b| b.min == [16.0, 8.0, 8.0] && b.max == [24.0, 12.0, 10.0]), "partial bricks end at the domain");
    // Capped: boundary bricks fill the room first, solid ones take what is left.
    let o = render::brick_outlines(&map, n, 10);
    assert_eq!((o.boxes.len(), o.total), (10, 12));
    assert!(o.capped());
    assert_eq!(o.boxes.iter().filter(|b| b.min[0] == 8.0).count(), 2);
    // A class thinned keeps its spread: every fourth boundary brick, not the first two.
    let o = render::brick_outlines(&map, n, 2);
    assert!(o.boxes.iter().all(|b| b.min[0] != 8.0));
    assert_eq!((o.boxes[0].min[2], o.boxes[1].min[2]), (0.0, 8.0), "{:?}", o.boxes);
}

#[test]
fn gpu_times_are_finite_where_supported_and_reported_where_not() {
    use super::gpu_timer::{summary, GpuSpan, GpuTiming};
    // With the adapter's timestamps, then a device opened without them (the unsupported path
    // runs everywhere, whatever the adapter has).
    for timestamps in [true, false] {
        let gpu = match headless::gpu_with(timestamps) {
            Ok(g) => g,
            Err(e) => {
                assert!(std::env::var("ESOFLOW_REQUIRE_ADAPTER").as_deref() != Ok("1"), "ESOFLOW_REQUIRE_ADAPTER=1 but {e}");
                eprintln!("skipping gpu_times_are_finite_where_supported_and_reported_where_not: {e}");
                return;
            }
        };
        let (dev, queue) = (&gpu.device, &gpu.queue);
        let supported = dev.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let (n, values, speed) = ball();
        // The frame in a GPU buffer as a shared one would be (the field, the surface's field,
        // the speed), read in place as on the shared path.
        let layout = sim_core::frame::FrameLayout::new(n, 3, super::frames::SHARED_ROW_ALIGN);
        let mut floats = vec![0.0f32; layout.floats()];
        for c in 0..values.len() {
            floats[layout.index(1, c)] = values[c];
            floats[layout.index(2, c)] = speed[c];
        }
        let buffer = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("frame"),
            size: layout.bytes() as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&floats));
        let solid = vec![0u8; values.len()];
        let mut fr = FieldRenderer::new(dev, queue);
        fr.sample_gpu_every(1);
        let p = iso_params(ColorMap::Viridis, 6.0);
        // A few frames, each with new data (marching cubes, draw); never waiting.
        for k in 0..5 {
            let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            fr.begin_gpu_frame();
            let iso = Some((FieldKind::Vorticity, 1, 2));
            fr.upload_from_buffer(dev, queue, &buffer, &layout, 0, iso, None, (k == 0).then_some(solid.as_slice()), None).expect("upload");
            fr.render(dev, queue, &mut enc, [96, 64], &p);
            fr.end_gpu_frame(&mut enc);
            queue.submit([enc.finish()]);
            fr.poll(dev, false);
        }
        fr.poll(dev, true);
        let timing = fr.gpu_timing();
        match timing {
            GpuTiming::Times(t) => {
                assert!(supported && timestamps, "times without the feature");
                assert!(t.frames >= 1, "{t:?}");
                let split = dev.features().contains(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);
                assert_eq!(t.in_place, t.frames, "every frame timed was read in place: {t:?}");
                for s in GpuSpan::ALL {
                    let Some(ms) = t.last_ms[s as usize] else {
                        assert!(s == GpuSpan::Copy || (s.in_draw() && !split), "{} not timed: {t:?}", s.name());
                        continue;
                    };
                    assert!(s != GpuSpan::Copy, "nothing is copied: {t:?}");
                    assert!(ms.is_finite() && ms >= 0.0, "{}: {ms} ms", s.name());
                    let mean = t.mean_ms(s).expect("a mean where there is a last time");
                    assert!(mean.is_finite() && mean >= 0.0);
                }
                assert!(t.frames + t.dropped == 5, "{t:?}");
                let line = summary(&timing, |t, s| t.last_ms[s as usize]);
                assert!(line.starts_with("GPU: copy 0 (fields read in place") && line.contains("draw"), "{line}");
                if split {
                    assert!(line.contains("(slices ") && line.contains(", surfaces "), "{line}");
                }
                eprintln!("{}: {line}", gpu.adapter);
            }
            GpuTiming::Unsupported => {
                assert!(!timestamps || !supported, "the adapter has timestamps but none were taken");
                assert_eq!(summary(&timing, |t, s| t.last_ms[s as usize]), "GPU times: not supported by this adapter");
            }
            GpuTiming::Unknown => panic!("a renderer always knows"),
        }
        // The view was drawn either way (timestamps change nothing in the picture).
        let (tex, _) = fr.target().expect("target");
        let img = read_texture(dev, queue, tex, [96, 64]).expect("read back");
        let c = Camera::default().project(n, [96, 64], false, [16.0; 3]).expect("in front");
        assert_ne!(px(&img, 96, c[0] as u32, c[1] as u32), background(), "the ball's surface at the centre");
    }
}

// ---- fields read from storage buffers ------------------------------------------------------

/// A storage buffer holding `planes` as a frame of padded rows (`SHARED_ROW_ALIGN`, as the CUDA
/// solver writes shared frames), the padding NaN (magenta if a shader read it).
pub(super) fn padded_frame(gpu: &Gpu, n: [usize; 3], planes: &[&[f32]]) -> (wgpu::Buffer, sim_core::frame::FrameLayout) {
    let layout = sim_core::frame::FrameLayout::new(n, planes.len(), super::frames::SHARED_ROW_ALIGN);
    let mut floats = vec![f32::NAN; layout.floats()];
    for (p, v) in planes.iter().enumerate() {
        for (c, &x) in v.iter().enumerate() {
            floats[layout.index(p, c)] = x;
        }
    }
    let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("padded frame"),
        size: layout.bytes() as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    gpu.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&floats));
    (buffer, layout)
}

fn render_with(gpu: &Gpu, fr: &mut FieldRenderer, p: &ViewParams, size: [u32; 2]) -> Vec<u8> {
    for _ in 0..4 {
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        fr.render(&gpu.device, &gpu.queue, &mut enc, size, p);
        gpu.queue.submit([enc.finish()]);
        fr.poll(&gpu.device, true);
        if !fr.needs_redraw() {
            break;
        }
    }
    let (tex, _) = fr.target().expect("target");
    read_texture(&gpu.device, &gpu.queue, tex, size).expect("read back")
}

#[test]
fn storage_buffer_frames_with_padded_rows_draw_the_known_field() {
    let Some(gpu) = gpu_or_skip("storage_buffer_frames_with_padded_rows_draw_the_known_field") else { return };
    let (dev, queue) = (&gpu.device, &gpu.queue);
    // 37 cells along x: rows padded to 64 floats. Neighbouring cells along every axis differ
    // by many colour steps, so a wrong pitch, row or plane shows in the colours.
    let n = [37, 20, 12];
    let cells = n[0] * n[1] * n[2];
    let value = |x: usize, y: usize, z: usize| ((7 * x + 13 * y + 29 * z) % 17) as f32 / 16.0;
    let field: Vec<f32> = (0..cells).map(|c| value(c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1]))).collect();
    // The isosurface's field: 8 - distance from the centre (a ball of radius 8 - t).
    let ctr = [18.5f32, 10.0, 6.0];
    let ball: Vec<f32> = (0..cells)
        .map(|c| {
            let p = [c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])];
            let d: f32 = (0..3).map(|a| (p[a] as f32 + 0.5 - ctr[a]).powi(2)).sum();
            8.0 - d.sqrt()
        })
        .collect();
    let speed = vec![0.5f32; cells];
    let solid = vec![0u8; cells];
    let (buffer, layout) = padded_frame(&gpu, n, &[&field, &ball, &speed]);
    assert_eq!(layout.row_pitch, 64);
    let size = [320, 240];
    let cam = Camera::default();
    let keep: render::Keep = std::sync::Arc::new(());
    let mut fr = FieldRenderer::new(dev, queue);
    let iso = Some((FieldKind::Vorticity, 1, 2));
    fr.upload_from_buffer(dev, queue, &buffer, &layout, 0, iso, None, Some(&solid), Some(std::sync::Arc::clone(&keep))).expect("bind");
    assert_eq!(std::sync::Arc::strong_count(&keep), 2, "held while bound");
    // Each slice plane alone: the pixel over a cell centre has that cell's colour.
    for (axis, slices) in [(0usize, [20usize, 0, 0]), (1, [0, 7, 0]), (2, [0, 0, 5])] {
        let mut show = [false; 3];
        show[axis] = true;
        let p = ViewParams::plain(ColorMap::Turbo, (0.0, 1.0), slices, show, cam);
        let img = render_with(&gpu, &mut fr, &p, size);
        let mut checked = 0;
        for a in [3usize, 9, 15, 30] {
            for b in [2usize, 6, 11, 17] {
                let mut c = [0usize; 3];
                c[axis] = slices[axis];
                let (u, v) = ((axis + 1) % 3, (axis + 2) % 3);
                c[u] = a.min(n[u] - 1);
                c[v] = b.min(n[v] - 1);
                let w = c.map(|k| k as f32 + 0.5);
                let Some(at) = cam.project(n, size, false, w) else { continue };
                if at[0] < 1.0 || at[1] < 1.0 || at[0] >= size[0] as f32 - 1.0 || at[1] >= size[1] as f32 - 1.0 {
                    continue;
                }
                let got = px(&img, size[0], at[0] as u32, at[1] as u32);
                if got == [204, 204, 204, 255] {
                    continue; // an edge of the domain box in front of the plane
                }
                let want = ColorMap::Turbo.color_of(value(c[0], c[1], c[2]), 0.0, 1.0);
                assert!(close(got, want, 1), "plane {axis}, cell {c:?} at {at:?}: got {got:?}, want {want:?}");
                checked += 1;
            }
        }
        assert!(checked >= 8, "plane {axis}: only {checked} cells in view");
    }
    // The same picture as the host path (tight rows in the renderer's own buffer), all planes on.
    let p = ViewParams::plain(ColorMap::Viridis, (0.0, 1.0), [20, 7, 5], [true; 3], cam);
    let shared_img = render_with(&gpu, &mut fr, &p, size);
    let mut host = FieldRenderer::new(dev, queue);
    host.upload(dev, queue, n, &field, Some(&solid)).expect("upload");
    assert_eq!(render_with(&gpu, &mut host, &p, size), shared_img, "shared and host paths draw the same picture");
    // The isosurface from the padded planes: as many triangles as the CPU makes from the
    // unpadded field, present at the ball's centre; above the maximum, absent.
    let mut p = iso_params(ColorMap::Turbo, 3.0);
    p.show = [false; 3];
    let img = render_with(&gpu, &mut fr, &p, size);
    let cpu = super::mc::triangles_cpu(&ball, n, 3.0).len() as u32;
    assert!(cpu > 100, "{cpu}");
    assert_eq!(fr.iso_stats().map(|s| s.triangles()), Some(cpu));
    let centre = cam.project(n, size, false, ctr).expect("in front");
    let want = ColorMap::Turbo.color_of(0.5, 0.0, 1.0);
    let got = px(&img, size[0], centre[0] as u32, centre[1] as u32);
    assert!(shaded(got, want), "the surface at the centre, coloured by |u| = 0.5: got {got:?}, want a lit {want:?}");
    let img = render_with(&gpu, &mut fr, &iso_params(ColorMap::Turbo, 50.0), size);
    assert_eq!(fr.iso_stats().map(|s| s.wanted), Some(0));
    assert_eq!(px(&img, size[0], centre[0] as u32, centre[1] as u32), background());
    // A host upload replaces the binding: what was held comes back to be released.
    fr.upload(dev, queue, n, &field, None).expect("upload");
    let released = fr.take_released();
    assert_eq!(released.len(), 1);
    drop(released);
    assert_eq!(std::sync::Arc::strong_count(&keep), 1, "released");
}

#[test]
fn storage_buffer_frames_of_2d_scenes_draw_the_known_field() {
    let Some(gpu) = gpu_or_skip("storage_buffer_frames_of_2d_scenes_draw_the_known_field") else { return };
    // As render_2d_field_colours_and_solid_cells, from a padded frame (70 floats a row in 128).
    let n = [70, 30, 1];
    let values: Vec<f32> = (0..70 * 30).map(|i| (i % 70) as f32 / 69.0 + (i / 70) as f32 * 1e-3).collect();
    let solid: Vec<u8> = (0..70 * 30).map(|i| u8::from(i / 70 < 2)).collect();
    let (buffer, layout) = padded_frame(&gpu, n, &[&values]);
    let mut fr = FieldRenderer::new(&gpu.device, &gpu.queue);
    fr.upload_from_buffer(&gpu.device, &gpu.queue, &buffer, &layout, 0, None, None, Some(&solid), None).expect("bind");
    let size = [700, 300];
    let img = render_with(&gpu, &mut fr, &params(ColorMap::Viridis, (0.0, 1.1)), size);
    for i in [0usize, 13, 35, 64, 69] {
        for j in [2usize, 14, 29] {
            let got = px(&img, size[0], i as u32 * 10 + 5, (29 - j as u32) * 10 + 5);
            let want = ColorMap::Viridis.color_of(values[j * 70 + i], 0.0, 1.1);
            assert!(close(got, want, 1), "cell ({i}, {j}): got {got:?}, want {want:?}");
        }
        assert!(close(px(&img, size[0], i as u32 * 10 + 5, 295), [128, 128, 128, 255], 1), "solid row");
    }
}

#[test]
fn fields_over_the_binding_limit_are_refused_with_a_reason() {
    let l = wgpu::Limits { max_storage_buffer_binding_size: 128 << 20, max_buffer_size: 1 << 30, ..wgpu::Limits::default() };
    // 256^3 f32 = 64 MiB fits; 512^3 = 512 MiB does not, and says why.
    assert_eq!(render::check_binding(&l, [256; 3], 256, 0).expect("fits"), 64 << 20);
    let e = render::check_binding(&l, [512; 3], 512, 0).expect_err("too large");
    assert!(matches!(e, render::RenderError::BindingTooLarge(_, 512, 128)), "{e:?}");
    assert!(e.to_string().contains("max_storage_buffer_binding_size"), "{e}");
    // Where the device allows it, 512^3 is one binding.
    let big = wgpu::Limits { max_storage_buffer_binding_size: 4 << 30, max_buffer_size: 4 << 30, ..l.clone() };
    assert_eq!(render::check_binding(&big, [512; 3], 512, 512 << 20).expect("fits"), 512 << 20);
    // A plane that does not start on the binding alignment.
    assert!(matches!(render::check_binding(&l, [37, 3, 1], 37, 444), Err(render::RenderError::Misaligned(444, 256))));
    // The limits asked for take the adapter's.
    let want = render::wanted_limits(wgpu::Limits::downlevel_defaults(), &big);
    assert_eq!((want.max_storage_buffer_binding_size, want.max_buffer_size), (4 << 30, 4 << 30));
    assert!(want.max_storage_buffers_per_shader_stage >= render::STORAGE_BUFFERS_PER_STAGE);
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

pub(super) fn small_app(running: bool) -> ViewerApp {
    let ls = sim_core::scene::from_str(SMALL_SCENE, "test", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    ViewerApp::new(ls, solver, BackendChoice::Cpu, running)
}

pub(super) type Harness = egui_kittest::Harness<'static, ViewerApp>;

pub(super) fn harness(app: ViewerApp) -> Harness {
    harness_sized(app, 1200.0, 900.0)
}

pub(super) fn harness_sized(app: ViewerApp, w: f32, h: f32) -> Harness {
    egui_kittest::Harness::builder().with_size(egui::vec2(w, h)).build_ui_state(|ui, app: &mut ViewerApp| app.ui(ui), app)
}

/// Run frames until `cond` holds (the solver thread answers asynchronously).
/// Step the harness until `cond` holds. The limit only catches a wait that never ends: on a
/// loaded 2-core machine (a build beside the tests) a compressed solver's rebuild and batches
/// took over 30 s twice, so it is two minutes.
pub(super) fn run_until(h: &mut Harness, what: &str, cond: impl Fn(&ViewerApp) -> bool) {
    let t0 = Instant::now();
    while !cond(h.state()) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "timed out waiting for: {what} (state: step {}, running {}, loading {})",
            h.state().step(),
            h.state().running,
            h.state().loading()
        );
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
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness(ViewerApp::new(ls, solver, BackendChoice::Cpu, true));
    run_until(&mut h, "the blow-up", |a| a.blowup.is_some());
    assert!(!h.state().running);
    let good = h.state().blowup.as_ref().map(|b| b.last_good).expect("blow-up");
    h.step();
    h.get_by_label(&format!("Roll back to step {good}")).click();
    run_until(&mut h, "the rollback", |a| a.blowup.is_none() && a.snap.as_ref().is_some_and(|s| s.step == good && !s.stats.blown_up()));
    // The state rolled back to is physically sane, not merely finite.
    let st = &h.state().snap.as_ref().expect("snapshot").stats;
    assert!(st.sanity(1.0).is_ok(), "rolled back to {st:?}: {:?}", st.sanity(1.0));
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

const SMALL_3D_SCENE: &str = r#"
name = "test sphere"
[domain]
size = [24, 16, 16]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0, 0.0] }
x_max = "outlet"
[fluid]
tau = 0.8
[initial]
velocity = [0.05, 0.0, 0.0]
[[obstacles]]
name = "ball"
shape = "sphere"
center = [8, 8, 8]
radius = 3.0
"#;

pub(super) fn small_3d_app() -> ViewerApp {
    let ls = sim_core::scene::from_str(SMALL_3D_SCENE, "test3d", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    ViewerApp::new(ls, solver, BackendChoice::Cpu, false)
}

/// Type into the text field labelled `label`: select all, type, press Enter.
fn type_into(h: &mut Harness, label: &str, text: &str) {
    h.get_by_label(label).focus();
    h.step();
    // Keystrokes go to whatever has the focus: a field that lost it would swallow them silently.
    for _ in 0..3 {
        h.step();
        assert!(h.get_by_label(label).is_focused(), "{label} lost the keyboard focus");
    }
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    if text.is_empty() {
        // Typing nothing over a selection leaves it: clearing the field is a delete.
        h.key_press(egui::Key::Backspace);
    } else {
        h.get_by_label(label).type_text(text);
    }
    h.step();
    h.key_press(egui::Key::Enter);
    h.step();
}

#[test]
fn ui_isosurface_toggle_field_and_threshold() {
    let mut h = harness(small_3d_app());
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    unfold_panels(&mut h);
    // Off: the snapshots carry nothing extra; the bricks come with every snapshot.
    assert!(h.state().snap.as_ref().is_some_and(|s| s.iso.is_none()));
    assert_eq!(h.state().snap.as_ref().map(|s| s.bricks.count), Some([3, 2, 2]));
    assert_eq!(h.state().view_params().iso, None);
    // On from the checkbox: the solver thread publishes |vorticity| and |u| with the field.
    h.get_by_label("isosurface").click();
    h.step();
    assert!(h.state().view.iso);
    run_until(&mut h, "vorticity data", |a| a.iso_data().is_some_and(|d| d.kind == FieldKind::Vorticity));
    let d = h.state().iso_data().copied().expect("iso data");
    let frame = std::sync::Arc::clone(&h.state().snap.as_ref().expect("snapshot").frame);
    let (v, sp) =
        (frame.host_values(FieldKind::Vorticity).expect("vorticity plane"), frame.host_values(FieldKind::Speed).expect("speed plane"));
    assert!(v.len() == 24 * 16 * 16 && sp.len() == v.len(), "the frame carries the surface's field and the speed");
    assert!(d.min_max.1 > 0.0 && d.speed_min_max.1 > 0.0, "the flow bends around the ball: {:?}", d.min_max);
    h.step();
    assert!(h.query_by_label_contains("|vorticity| now from").is_some(), "the panel shows the field's range");
    let p = h.state().view_params().iso.expect("iso drawn");
    assert_eq!((p.kind, p.threshold), (FieldKind::Vorticity, 0.01));
    // A typed threshold is taken; text that is not a number (or NaN) is refused with a message.
    type_into(&mut h, "threshold value", "0.0025");
    assert_eq!(h.state().view_params().iso.map(|i| i.threshold), Some(0.0025));
    type_into(&mut h, "threshold value", "abc");
    type_into(&mut h, "threshold value", "NaN");
    assert_eq!(h.state().view.iso_threshold(), 0.0025, "refused values leave the threshold");
    assert_eq!(h.state().messages().iter().filter(|m| m.error && m.text.contains("threshold")).count(), 2);
    // The logarithmic slider moves it too.
    let slider = h.get_by_label("threshold");
    slider.set_value_accesskit(0.004);
    h.run_steps(2);
    let t = h.state().view.iso_threshold();
    assert!((t - 0.004).abs() < 1e-4, "slider: {t}");
    // Q: its own threshold; the solver thread switches the published field.
    h.get_by_label("iso field").click();
    h.run_steps(2);
    h.get_by_label("Q").click();
    h.run_steps(2);
    assert_eq!(h.state().view_params().iso.map(|i| (i.kind, i.threshold)), Some((FieldKind::Q, 1e-5)));
    h.get_by_label("Step").click();
    run_until(&mut h, "Q data", |a| a.iso_data().is_some_and(|d| d.kind == FieldKind::Q));
    // The key i turns it off: new snapshots carry no isosurface data again.
    h.key_press(egui::Key::I);
    h.step();
    assert!(!h.state().view.iso && h.state().view_params().iso.is_none());
    h.get_by_label("Step").click();
    let before = h.state().step();
    run_until(&mut h, "a snapshot without iso data", |a| a.step() > before && a.snap.as_ref().is_some_and(|s| s.iso.is_none()));
    // Solids and the brick overlay are view switches.
    h.get_by_label("brick overlay").click();
    h.get_by_label("solid obstacles as surfaces").click();
    h.step();
    let p = h.state().view_params();
    assert!(p.bricks && !p.solids && !p.outlines);
    assert!(h.query_by_label_contains("bricks of 8x8x8").is_some());
    // Brick outlines: their own switch, with the number of boxes.
    h.get_by_label("brick outlines (3D)").click();
    h.step();
    assert!(h.state().view_params().outlines);
    assert!(h.query_by_label_contains("boxes:").is_some());
}

#[test]
fn ui_frames_carry_only_the_slices_without_an_isosurface() {
    use sim_core::frame::FrameRegion;
    let mut h = harness(small_3d_app());
    let n = [24usize, 16, 16];
    run_until(&mut h, "a frame of the three slice planes", |a| {
        a.snap.as_ref().is_some_and(|s| s.frame.layout.region == FrameRegion::Planes([Some(12), Some(8), Some(8)]))
    });
    unfold_panels(&mut h);
    // The field's range is taken over the fluid cells of those planes alone.
    let snap = h.state().snap.as_ref().expect("snapshot");
    let v = snap.frame.host_values(snap.field).expect("host values");
    let on = |c: usize| c % n[0] == 12 || (c / n[0]) % n[1] == 8 || c / (n[0] * n[1]) == 8;
    let planes: Vec<u8> = snap.solid.iter().enumerate().map(|(c, &s)| if on(c) { s } else { 1 }).collect();
    assert_eq!(snap.min_max, super::worker::fluid_min_max(v, &planes).0, "the range is the planes'");
    // A slice moved (paused): drawn where the frame has values until the frame of the new plane
    // comes, then there; a slice switched off leaves the frame.
    h.state_mut().view.slices[0] = 3;
    h.state_mut().view.show[1] = false;
    assert_eq!(h.state().view_params().slices[0], 12, "the old frame's plane until a new frame comes");
    run_until(&mut h, "the frame of the moved slice", |a| {
        a.snap.as_ref().is_some_and(|s| s.frame.layout.region == FrameRegion::Planes([Some(3), None, Some(8)]))
    });
    let p = h.state().view_params();
    assert_eq!((p.slices[0], p.show), (3, [true, false, true]));
    // With an isosurface the frame holds every cell again, until the renderer says it marches
    // on cubes of 2 or more cells: then the lattice it reads and the slices.
    h.get_by_label("isosurface").click();
    h.step();
    h.get_by_label("Step").click();
    run_until(&mut h, "a whole frame", |a| a.snap.as_ref().is_some_and(|s| s.frame.layout.region == FrameRegion::All));
    h.state_mut().iso_stride = Some(4);
    h.step();
    let sampled = FrameRegion::Sampled { stride: 4, planes: [Some(3), None, Some(8)] };
    run_until(&mut h, "a sampled frame", |a| a.snap.as_ref().is_some_and(|s| s.frame.layout.region == sampled));
    // Its slice field and isosurface ranges are taken over the lattice and the planes.
    let snap = h.state().snap.as_ref().expect("snapshot");
    let iso = snap.iso.expect("iso data");
    let v = snap.frame.host_values(iso.kind).expect("iso values");
    let out: Vec<u8> = snap
        .solid
        .iter()
        .enumerate()
        .map(|(c, &s)| if sampled.contains([c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])]) { s } else { 1 })
        .collect();
    assert_eq!(iso.min_max, super::worker::fluid_min_max(v, &out).0, "the isosurface field's range is the sampled cells'");
    let p = h.state().view_params();
    assert_eq!((p.slices[0], p.show), (3, [true, false, true]), "slices drawn from the frame's planes");
    // Cubes of one cell: whole frames again.
    h.state_mut().iso_stride = Some(1);
    h.step();
    h.get_by_label("Step").click();
    run_until(&mut h, "a whole frame again", |a| a.snap.as_ref().is_some_and(|s| s.frame.layout.region == FrameRegion::All));
}

#[test]
fn ui_stats_show_gpu_times_or_why_not() {
    use super::gpu_timer::{GpuTimes, GpuTiming};
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    unfold_panels(&mut h);
    h.step();
    // No renderer (as here, without a shell): no GPU row.
    assert!(h.query_by_label_contains("GPU times").is_none() && h.query_by_label_contains("draw ").is_none());
    h.state_mut().gpu_timing = GpuTiming::Unsupported;
    h.step();
    assert!(h.query_by_label("GPU times: not supported by this adapter").is_some());
    let t = GpuTimes { last_ms: [None, None, Some(2.1), None, None], ..GpuTimes::default() };
    h.state_mut().gpu_timing = GpuTiming::Times(t);
    h.step();
    assert!(h.query_by_label_contains("copy not timed (host frames are written through the queue), iso none yet, draw 2.100 ms").is_some());
    // Shared frames read in place: no copy; the draw split where it was measured.
    let t = GpuTimes { last_ms: [None, Some(0.3), Some(2.1), Some(0.5), Some(1.5)], in_place: 4, ..GpuTimes::default() };
    h.state_mut().gpu_timing = GpuTiming::Times(t);
    h.step();
    assert!(h
        .query_by_label_contains(
            "copy 0 (fields read in place from shared GPU memory), iso 0.300 ms, draw 2.100 ms (slices 0.500, surfaces 1.500)"
        )
        .is_some());
}

#[test]
fn ui_stats_show_drag_and_lift_coefficients_and_the_strouhal_number() {
    // Without a reference length and velocity, the panel says what the scene lacks.
    let mut h = harness_sized(small_app(false), 1200.0, 1600.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    unfold_panels(&mut h);
    h.step();
    assert!(h.query_by_label_contains("need a reference length and velocity").is_some());
    // With them: C_D and C_L now, their means, St (a steady flow at Re 3: no shedding) and the plot.
    let sets = [("forces.length".to_string(), "6".to_string()), ("forces.velocity".to_string(), "0.05".to_string())];
    let ls = sim_core::scene::from_str(SMALL_SCENE, "test", PathBuf::from("."), &sets).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness_sized(ViewerApp::new(ls, solver, BackendChoice::Cpu, true), 1200.0, 1600.0);
    run_until(&mut h, "20 snapshots' forces", |a| a.forces.len() >= 20);
    unfold_panels(&mut h);
    h.step();
    // The rows "C_D, C_L" and "mean C_D, C_L", the mean's swing, and St.
    assert!(h.query_all_by_label_contains("C_D, C_L").count() >= 2 && h.query_by_label_contains("(swing +-").is_some());
    assert!(h.query_by_label_contains("no shedding").is_some());
    // The coefficients over time are plotted in the Probes and forces panel, axes labelled.
    assert!(h.query_by_label("drag and lift coefficients over time: the Probes and forces panel (3)").is_some());
    unfold(&mut h, Section::Probes);
    assert!(h.query_by_label("Forces on disc").is_some(), "a plot per obstacle, under its name");
}

#[test]
fn ui_isosurface_key_in_2d_says_it_needs_3d() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.key_press(egui::Key::I);
    h.step();
    assert!(!h.state().view.iso);
    assert!(h.state().messages().iter().any(|m| m.text.contains("3D")));
    // The Visualization panel shows no surface switches in 2D.
    unfold(&mut h, Section::Visualization);
    assert!(h.query_by_label("isosurface").is_none() && h.query_by_label("auto range").is_some());
    // Brick outlines are 3D only: no switch, and the view never draws them.
    assert!(h.query_by_label("brick outlines (3D)").is_none());
    h.state_mut().view.brick_outlines = true;
    assert!(!h.state().view_params().outlines);
}

// ---- Scene panel: draw, erase, STL obstacles ------------------------------------------------

fn solid_count(a: &ViewerApp) -> usize {
    a.snap.as_ref().map_or(0, |s| s.solid.iter().filter(|&&v| v != 0).count())
}

pub(super) fn screen(h: &Harness, p: [f32; 3]) -> egui::Pos2 {
    h.state().screen_of(glam::Vec3::from(p)).expect("the view is laid out")
}

/// A left drag from `a` to `b` in `moves` pointer moves, one frame each.
fn drag(h: &mut Harness, a: egui::Pos2, b: egui::Pos2, moves: usize) {
    h.drag_at(a);
    h.step();
    for k in 1..=moves {
        h.hover_at(a.lerp(b, k as f32 / moves as f32));
        h.step();
    }
    h.drop_at(b);
    h.step();
    h.step();
}

/// Wait until the solver has applied every edit sent and published the result.
fn run_until_applied(h: &mut Harness, what: &str) {
    run_until(h, what, |a| a.pending_edits() == 0);
    std::thread::sleep(Duration::from_millis(30));
    h.run_steps(3);
}

fn has_message(a: &ViewerApp, text: &str) -> bool {
    a.messages().iter().any(|m| m.text.contains(text))
}

#[test]
fn ui_draw_and_erase_obstacles_on_the_2d_view() {
    use super::app::Tool;
    // Tall enough for the Scene panel to be on screen below Simulation, Visualization and Stats.
    let mut h = harness_sized(small_app(false), 1200.0, 1600.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.step();
    let before = solid_count(h.state());
    h.get_by_label("Scene").click();
    h.run_steps(2);
    h.get_by_label("Draw").click();
    h.run_steps(2);
    assert_eq!(h.state().edit.tool, Tool::Draw);
    // A bar across the channel behind the disc; the new solids show at once (before the solver
    // thread answers).
    let (a, b) = (screen(&h, [32.5, 6.5, 0.5]), screen(&h, [32.5, 17.5, 0.5]));
    drag(&mut h, a, b, 6);
    let shown = solid_count(h.state());
    assert!(shown >= before + 60, "the stroke shows at once: {before} -> {shown}");
    h.get_by_label("Step").click();
    run_until_applied(&mut h, "the stroke to reach the solver");
    run_until(&mut h, "a stepped snapshot with the drawn obstacle", |a| {
        a.snap.as_ref().is_some_and(|s| s.step > 0 && s.obstacles.iter().any(|o| o == "drawn") && s.stats.forces.len() == 2)
    });
    let drawn = solid_count(h.state()) - before;
    assert!((60..=120).contains(&drawn), "{drawn} cells drawn");
    assert!(has_message(h.state(), "drew (obstacle \"drawn\")"), "the stroke is summed up");
    let snap = h.state().snap.clone().expect("snapshot");
    let d = snap.size;
    assert_eq!(snap.solid[32 + d[0] * 12], 2, "cell (32, 12) is a solid obstacle cell in the solver");
    // The drawn obstacle feels the flow (once the inflow has reached it): its force is in the stats.
    let t0 = Instant::now();
    while !h.state().snap.as_ref().is_some_and(|s| s.stats.forces.get(1).is_some_and(|f| f[0] > 1e-5)) {
        assert!(t0.elapsed() < Duration::from_secs(20), "no force on the drawn obstacle");
        h.get_by_label("Step").click();
        h.run_steps(2);
        std::thread::sleep(Duration::from_millis(10));
    }
    // Erase it again, then try the inlet and the bottom wall: refused, and said so.
    // (Screen positions again: the panel may have grown with the new rows in Stats.)
    h.get_by_label("Erase").click();
    h.run_steps(2);
    h.state_mut().edit.brush = 4.5;
    let (a, b) = (screen(&h, [32.5, 6.5, 0.5]), screen(&h, [32.5, 17.5, 0.5]));
    drag(&mut h, a, b, 6);
    run_until_applied(&mut h, "the erase to reach the solver");
    assert_eq!(solid_count(h.state()), before, "the drawn cells are fluid again");
    let (a2, b2) = (screen(&h, [0.5, 4.5, 0.5]), screen(&h, [0.5, 20.5, 0.5]));
    drag(&mut h, a2, b2, 3);
    run_until(&mut h, "the refusal at the inlet", |a| has_message(a, "inlet cells cannot be edited"));
    let (a3, b3) = (screen(&h, [20.5, 0.5, 0.5]), screen(&h, [40.5, 0.5, 0.5]));
    drag(&mut h, a3, b3, 3);
    run_until(&mut h, "the refusal at the wall", |a| has_message(a, "boundary walls cannot be erased"));
    run_until_applied(&mut h, "the refused strokes");
    assert_eq!(solid_count(h.state()), before, "walls and inlet are left alone");
    // Erase half of the scene's disc; ctrl+z brings it back.
    let (a4, b4) = (screen(&h, [15.5, 8.5, 0.5]), screen(&h, [15.5, 15.5, 0.5]));
    drag(&mut h, a4, b4, 3);
    run_until_applied(&mut h, "erasing the disc");
    assert!(solid_count(h.state()) < before);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    run_until(&mut h, "the undo", |a| solid_count(a) == before);
    assert!(h.state().snap.as_ref().is_some_and(|s| !s.stats.blown_up()));
    // Drawn cells carry over when the scheme is switched (the solver is rebuilt)...
    h.get_by_label("Draw").click();
    h.run_steps(2);
    let (a, b) = (screen(&h, [32.5, 6.5, 0.5]), screen(&h, [32.5, 17.5, 0.5]));
    drag(&mut h, a, b, 4);
    run_until_applied(&mut h, "drawing again");
    let drawn = solid_count(h.state());
    assert!(drawn > before + 50);
    h.state_mut().rebuild_with("aa", |sc| sc.solver.scheme = sim_core::schemes::Scheme::Aa);
    run_until(&mut h, "the rebuilt solver with the drawn cells", |a| {
        !a.loading() && a.snap.as_ref().is_some_and(|s| s.info.scheme == sim_core::schemes::Scheme::Aa && solid_count(a) == drawn)
    });
    assert!(h.state().snap.as_ref().is_some_and(|s| s.obstacles.iter().any(|o| o == "drawn")));
    // ... and reset (r) returns to the cells of the state it resets to.
    h.step();
    h.get_by_label("Step").click();
    run_until(&mut h, "a step", |a| a.step() > 0);
    h.get_by_label("Erase").click();
    h.run_steps(2);
    let (a, b) = (screen(&h, [32.5, 6.5, 0.5]), screen(&h, [32.5, 17.5, 0.5]));
    drag(&mut h, a, b, 4);
    run_until_applied(&mut h, "erasing after the rebuild");
    assert!(solid_count(h.state()) < drawn);
    h.key_press(egui::Key::R);
    run_until(&mut h, "the reset", |a| a.step() == 0 && solid_count(a) == drawn);
}

#[test]
fn ui_draw_on_the_active_slice_in_3d() {
    let text = "[domain]\nsize = [20, 12, 10]\n[boundaries]\ny_min = \"wall\"\ny_max = \"wall\"\n[fluid]\ntau = 0.7\n[initial]\nvelocity = [0.03, 0, 0]\n";
    let ls = sim_core::scene::from_str(text, "box3d", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness(ViewerApp::new(ls, solver, BackendChoice::Cpu, false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.step();
    let before = solid_count(h.state());
    // d: Draw; the z slice (index 5) is the default plane; a one-cell brush.
    h.key_press(egui::Key::D);
    h.step();
    h.state_mut().edit.brush = 0.5;
    let p = screen(&h, [10.5, 6.5, 5.5]);
    drag(&mut h, p, p + egui::vec2(0.5, 0.0), 1);
    run_until_applied(&mut h, "the dot to reach the solver");
    let snap = h.state().snap.clone().expect("snapshot");
    let idx = |x: usize, y: usize, z: usize| x + 20 * (y + 12 * z);
    assert_eq!(solid_count(h.state()), before + 1, "one cell drawn");
    assert_eq!(snap.solid[idx(10, 6, 5)], 2, "on the z slice, where the pointer was");
    // The x slice: the same screen point now picks a cell of the plane x = 7.
    h.state_mut().edit.axis = 0;
    h.state_mut().view.slices[0] = 7;
    h.run_steps(2);
    let p = screen(&h, [7.5, 3.5, 2.5]);
    drag(&mut h, p, p + egui::vec2(0.5, 0.0), 1);
    run_until_applied(&mut h, "the second dot");
    let snap = h.state().snap.clone().expect("snapshot");
    assert_eq!(snap.solid[idx(7, 3, 2)], 2, "on the x slice");
}

/// A closed cube as an ASCII STL.
fn cube_stl() -> String {
    let v = |i: usize| [if i & 1 != 0 { 1.0 } else { -1.0 }, if i & 2 != 0 { 1.0 } else { -1.0 }, if i & 4 != 0 { 1.0 } else { -1.0 }];
    let mut s = String::from("solid block\n");
    for q in [[0, 1, 3, 2], [4, 6, 7, 5], [0, 4, 5, 1], [2, 3, 7, 6], [0, 2, 6, 4], [1, 5, 7, 3]] {
        for t in [[q[0], q[1], q[2]], [q[0], q[2], q[3]]] {
            s.push_str("facet normal 0 0 0\nouter loop\n");
            for k in t {
                let p: [f32; 3] = v(k);
                s.push_str(&format!("vertex {} {} {}\n", p[0], p[1], p[2]));
            }
            s.push_str("endloop\nendfacet\n");
        }
    }
    s.push_str("endsolid block\n");
    s
}

#[test]
fn ui_load_stl_obstacle_and_refuse_bad_files() {
    let dir = std::env::temp_dir().join(format!("esoflow-ui-stl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let good = dir.join("block.stl");
    std::fs::write(&good, cube_stl()).expect("write");
    let bad = dir.join("broken.stl");
    std::fs::write(&bad, b"solid broken\nfacet normal 0 0 1\nouter loop\nvertex 0 0").expect("write");
    let mut h = harness(small_app(true));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.step();
    let before = solid_count(h.state());
    // The Load STL button's path (the dialog answered with `good`): centred, 0.3 of the height.
    h.state_mut().load_stl(&good);
    run_until(&mut h, "the STL obstacle", |a| a.snap.as_ref().is_some_and(|s| s.obstacles.iter().any(|o| o == "block")));
    run_until(&mut h, "its cells", |a| solid_count(a) > before);
    assert_eq!(solid_count(h.state()) - before, 64, "a 7.2-cell square centred at (23.5, 11.5): 8 x 8 cell centres");
    assert!(has_message(h.state(), "as obstacle \"block\": 64 cells"));
    // A damaged file and a placement over the inlet: messages, the run goes on.
    h.state_mut().load_stl(&bad);
    run_until(&mut h, "the damaged STL message", |a| {
        a.messages().iter().any(|m| m.error && m.text.contains("STL not loaded") && m.text.contains("broken.stl"))
    });
    h.state_mut().edit.stl_center = [0.0, 0.5, 0.5];
    h.state_mut().load_stl(&good);
    run_until(&mut h, "the inlet refusal", |a| has_message(a, "inlet cells cannot be edited"));
    h.state_mut().load_stl(&dir.join("missing.stl"));
    run_until(&mut h, "the missing file message", |a| has_message(a, "cannot open") && has_message(a, "missing.stl"));
    let step = h.state().step();
    run_until(&mut h, "the run going on", |a| a.step() > step + 40 && a.running);
    // Undo removes the STL obstacle's cells.
    h.state_mut().undo_stroke();
    run_until(&mut h, "the undo", |a| solid_count(a) == before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compressed 3D scene (CPU subgrid solver): 3 x 2 x 2 subgrids of a small box.
const COMPRESSED_SCENE: &str = r#"
name = "compressed box"
[domain]
size = [48, 24, 24]
lattice = "D3Q19"
[fluid]
tau = 0.6
[initial]
velocity = [0.05, 0.02, 0.0]
[compression]
enabled = true
tau = 1e-6
subgrid = [16, 12, 12]
"#;

#[test]
fn ui_compression_tau_and_stats_on_a_compressed_run() {
    let ls = sim_core::scene::from_str(COMPRESSED_SCENE, "test", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness(ViewerApp::new(ls, solver, BackendChoice::Cpu, false));
    run_until(&mut h, "a snapshot of a compressed run", |a| a.snap.as_ref().is_some_and(|s| s.compression.is_some()));
    unfold_panels(&mut h);
    h.run_steps(2);
    assert!(h.query_all_by_label("compression tau").next().is_some(), "the Simulation panel has a compression tau slider");
    let fine = h.state().snap.as_ref().and_then(|s| s.compression.clone()).expect("compression").ratio;
    // A coarser threshold reaches the solver (how the ratio then grows is sim-core's test).
    h.state_mut().set_compression_tau(1e-3);
    h.get_by_label("Step").click();
    run_until(&mut h, "the solver's new tau", |a| {
        a.snap.as_ref().and_then(|s| s.compression.as_ref()).is_some_and(|c| c.tau == (1e-3, 1e-3) && c.ratio >= 0.999 * fine)
    });
    run_until(&mut h, "a step at the new tau", |a| a.step() > 0);
    // A bad threshold is refused with a message, and the run goes on.
    h.state_mut().set_compression_tau(-1.0);
    run_until(&mut h, "a refusal", |a| a.messages().iter().any(|m| m.error && m.text.contains("compression tau")));
}

#[test]
fn ui_compression_tau_on_a_dense_run_says_how_to_turn_it_on() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    assert!(h.state().snap.as_ref().is_some_and(|s| s.compression.is_none()));
    assert!(h.query_all_by_label("compression tau").next().is_none(), "no compression slider on a dense run");
    h.state_mut().set_compression_tau(1e-5);
    run_until(&mut h, "a refusal", |a| a.messages().iter().any(|m| m.error && m.text.contains("[compression] enabled = true")));
}

// ---- Compression panel: switch, subgrid outlines, plots, reference run -----------------------

/// The small 3D sphere scene, compression off, with subgrids of 8 cells (3 x 2 x 2 of them).
fn small_3d_compressible_app() -> ViewerApp {
    let text = format!("{SMALL_3D_SCENE}\n[compression]\ntau = 1e-4\nsubgrid = [8, 8, 8]\n");
    let ls = sim_core::scene::from_str(&text, "test3d", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    ViewerApp::new(ls, solver, BackendChoice::Cpu, false)
}

fn compression_of(a: &ViewerApp) -> Option<&sim_core::CompressionInfo> {
    a.snap.as_ref().and_then(|s| s.compression.as_ref())
}

#[test]
fn ui_compression_switch_goes_on_from_the_state_and_outlines_subgrids_by_ratio() {
    let mut h = harness_sized(small_3d_compressible_app(), 1200.0, 1400.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    unfold_panels(&mut h);
    h.get_by_label("Step").click();
    run_until(&mut h, "a batch of steps", |a| a.step() == 20);
    // The speed range of the frame (fresh with every snapshot) shows where the flow is.
    let dense_max = h.state().snap.as_ref().map(|s| s.min_max.1).expect("frame");
    // Compression on: the solver is rebuilt, says so, and goes on from step 20.
    h.get_by_label("compressed subgrids").click();
    h.step();
    assert!(has_message(h.state(), "switching to compressed subgrids: the solver is rebuilt and goes on from step 20"));
    run_until(&mut h, "the compressed solver", |a| !a.loading() && compression_of(a).is_some());
    assert_eq!(h.state().step(), 20, "the compressed run goes on from the dense run's state");
    let max = h.state().snap.as_ref().map(|s| s.min_max.1).expect("frame");
    assert!((max - dense_max).abs() < 1e-3 * dense_max, "the state came along: max |u| {max} vs {dense_max}");
    assert!(h.state().compressed() && h.state().scene.scene.compression.enabled);
    h.run_steps(2);
    // The panel shows the codec's fixed shape, the subgrids and the live numbers.
    assert!(h.query_by_label_contains("3 levels along x, 2 along y and z, blocks of 33 x 17 x 17 samples").is_some());
    assert!(h.query_by_label_contains("12 subgrids of up to 8 x 8 x 8 cells").is_some());
    assert!(h.query_by_label_contains("MiB of DDFs, tau 1.0e-4").is_some());
    assert!(h.query_by_label("compression ratio").is_some() && h.query_by_label("memory (MiB)").is_some(), "the plots");
    h.get_by_label("Step").click();
    run_until(&mut h, "a compressed step", |a| a.step() == 40 && compression_of(a).is_some_and(|c| c.ratio > 1.0));
    // Subgrid outlines: one box per subgrid, inset, coloured by its ratio (legend top left).
    assert!(!h.state().view_params().outlines);
    h.get_by_label("subgrid outlines by ratio").click();
    h.step();
    let a = h.state();
    let c = compression_of(a).expect("compression").clone();
    assert_eq!(c.per_subgrid.len(), 12);
    let boxes = a.outline_boxes();
    assert_eq!(boxes.len(), 12);
    assert!(a.view_params().outlines);
    let range = render::ratio_range(&c.per_subgrid);
    for (b, s) in boxes.iter().zip(&c.per_subgrid) {
        assert_eq!(b.color, render::SUBGRID_CMAP.color_of(s.ratio as f32, range.0, range.1), "{s:?}");
        for k in 0..3 {
            assert_eq!(b.min[k], s.origin[k] as f32 + render::SUBGRID_INSET);
            assert_eq!(b.max[k], (s.origin[k] + s.size[k]) as f32 - render::SUBGRID_INSET);
        }
    }
    // The sphere's subgrids compress differently from the free stream's: the colours differ,
    // the lowest and highest ratios at the two ends of the map.
    let lo = c.per_subgrid.iter().map(|s| s.ratio).fold(f64::INFINITY, f64::min);
    let hi = c.per_subgrid.iter().map(|s| s.ratio).fold(0.0, f64::max);
    assert!(hi > lo, "ratios {lo} to {hi}");
    assert_eq!(range, (lo as f32, hi as f32));
    assert!(boxes.iter().any(|b| b.color == render::SUBGRID_CMAP.lut_entry(0)));
    assert!(boxes.iter().any(|b| b.color == render::SUBGRID_CMAP.lut_entry(super::colormap::LUT_SIZE - 1)));
    let legend = a.legend().subgrids.expect("the subgrid key in the legend");
    assert_eq!((legend.count, legend.range, legend.tau), (12, range, (1e-4, 1e-4)));
    // With the brick outlines too, both sets are drawn.
    h.state_mut().view.brick_outlines = true;
    let bricks = render::brick_outlines(&h.state().snap.as_ref().expect("snap").bricks, [24, 16, 16], 1000).boxes.len();
    assert_eq!(h.state().outline_boxes().len(), bricks + 12);
    // A memory budget through the panel reaches the solver.
    type_into(&mut h, "memory budget", "64 KB");
    run_until(&mut h, "the budget", |a| compression_of(a).is_some_and(|c| c.budget == Some(64_000)));
    // Sent once: egui reports the lost focus for two frames, and a second send would carry the
    // field's text as refilled from a snapshot older than the budget ("no memory budget").
    h.run_steps(5);
    assert!(!has_message(h.state(), "no memory budget"), "{:?}", h.state().messages().iter().map(|m| &m.text).collect::<Vec<_>>());
    type_into(&mut h, "memory budget", "lots");
    run_until(&mut h, "a refusal", |a| has_message(a, "memory budget \"lots\" refused"));
    type_into(&mut h, "memory budget", "");
    run_until(&mut h, "no budget", |a| compression_of(a).is_some_and(|c| c.budget.is_none()));
    // Compression off: the dense solver again, from the compressed state.
    let step = h.state().step();
    h.get_by_label("compressed subgrids").click();
    h.step();
    run_until(&mut h, "the dense solver", |a| !a.loading() && a.snap.as_ref().is_some_and(|s| s.compression.is_none()));
    assert_eq!(h.state().step(), step);
    assert!(h.state().outline_boxes().len() == bricks, "no subgrid boxes on a dense run");
}

#[test]
fn ui_compression_on_a_2d_run_says_why_not() {
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.step();
    // Folded, the section says nothing; unfolded (its key), it says why.
    assert!(h.query_by_label_contains("cannot compress this run").is_none(), "nobody asked to compress");
    h.key_press(Section::Compression.key());
    h.run_steps(2);
    assert!(h.state().sidebar.is_open(Section::Compression));
    assert!(h.query_by_label_contains("cannot compress this run: compressed subgrids need a 3D lattice").is_some());
    h.state_mut().set_compression_enabled(true);
    h.step();
    assert!(h.state().messages().iter().any(|m| m.error && m.text.contains("compression not switched on") && m.text.contains("3D")));
    assert!(!h.state().loading(), "nothing is rebuilt");
    // Nor a reference run, which compares a compressed run with a dense one.
    h.state_mut().set_reference(true);
    assert!(has_message(h.state(), "switch compression on first"));
}

fn reference_of(a: &ViewerApp) -> Option<&super::worker::ReferenceData> {
    a.snap.as_ref().and_then(|s| s.reference.as_ref())
}

#[test]
fn ui_reference_run_nmse_and_difference_view() {
    // The sphere in a channel (a uniform flow would compress exactly: no wavelet details).
    let text = format!("{SMALL_3D_SCENE}\n[compression]\nenabled = true\nsubgrid = [8, 8, 8]\n");
    let ls = sim_core::scene::from_str(&text, "test", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness_sized(ViewerApp::new(ls, solver, BackendChoice::Cpu, false), 1200.0, 1400.0);
    run_until(&mut h, "a snapshot", |a| compression_of(a).is_some());
    unfold_panels(&mut h);
    // Too little memory: refused, saying how much it needs and what to try.
    h.state_mut().reference_limit = Some(100_000);
    h.state_mut().set_reference(true);
    let m = h.state().messages().last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(m.starts_with("no reference run: it needs about ") && m.contains("but only 100.0 KB is available"), "{m}");
    assert!(m.contains("try a smaller domain.size, e.g. --set domain.size=["), "{m}");
    assert!(!h.state().reference_running());
    // Enough: the dense run starts from the running state, so the two agree at first.
    h.state_mut().reference_limit = None;
    h.state_mut().set_compression_tau(1e-3);
    h.get_by_label("uncompressed reference run").click();
    run_until(&mut h, "the reference run", |a| reference_of(a).is_some());
    assert_eq!(reference_of(h.state()).map(|r| r.nmse), Some(0.0), "synchronised");
    // Steps in lockstep: compression at tau = 1e-3 shows as an error.
    h.get_by_label("Step").click();
    run_until(&mut h, "steps of both", |a| a.step() == 20 && reference_of(a).is_some_and(|r| r.step == 20));
    let coarse = reference_of(h.state()).map(|r| r.nmse).expect("nmse");
    assert!(coarse > 1e-7 && coarse < 1e-2, "NMSE of density at tau 1e-3: {coarse}");
    h.step();
    assert!(h.query_by_label_contains("NMSE of density (eq. 19) ").is_some());
    // The difference view: rho - rho_ref on the slices, diverging, symmetric range.
    h.get_by_label("difference view").click();
    run_until(&mut h, "the difference field", |a| a.diff_values().is_some());
    let a = h.state();
    let d = a.diff_values().expect("diff");
    let r = reference_of(a).expect("reference");
    assert_eq!(d.len(), 24 * 16 * 16);
    let max = d.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(max > 0.0 && (max - r.max_abs).abs() <= 1e-9, "{max} vs {}", r.max_abs);
    let p = a.view_params();
    assert_eq!(p.cmap, ColorMap::Diverging);
    assert!((p.range.0 + p.range.1).abs() < 1e-12 && p.range.1 >= max * 0.999, "{:?}", p.range);
    assert!(a.legend().title.is_some_and(|t| t.starts_with("density difference")));
    // tau = 0: the cores round-trip through the wavelet to f32 rounding only. Reset: both go
    // back to step 0 together.
    h.state_mut().set_compression_tau(0.0);
    h.state_mut().reset();
    run_until(&mut h, "the reset", |a| a.step() == 0 && reference_of(a).is_some_and(|r| r.step == 0 && r.nmse == 0.0));
    h.get_by_label("Step").click();
    run_until(&mut h, "steps at tau 0", |a| a.step() == 20 && reference_of(a).is_some_and(|r| r.step == 20));
    let exact = reference_of(h.state()).map(|r| r.nmse).expect("nmse");
    eprintln!("NMSE of density after 20 steps: tau 1e-3 {coarse:.3e}, tau 0 {exact:.3e}");
    assert!(exact < 1e-6 && exact < coarse / 100.0, "NMSE at tau 0: {exact} (tau 1e-3: {coarse})");
    // Off: no reference, no difference view.
    h.get_by_label("uncompressed reference run").click();
    run_until(&mut h, "the reference stopped", |a| reference_of(a).is_none());
    assert!(!h.state().view.diff && h.state().diff_values().is_none());
}

#[test]
fn ui_adaptive_blocks_panel_outlines_and_live_settings() {
    use super::app::Tool;
    use sim_core::amr::{AmrSettings, Field};
    // The shipped adaptive cavity, small: 32^2 cells at level 0, one level finer.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenes/lid_driven_cavity_amr_2d.toml");
    let sets: Vec<String> =
        ["domain.size=[32,32]", "fluid.length=32", "amr.max_level=1", "amr.interval=50"].iter().map(|s| (*s).to_string()).collect();
    let ls = crate::solvers::load_scene(Some(&path), &sets).expect("scene");
    let solver = crate::solvers::build_solver(&ls, &BackendChoice::Cpu.into()).expect("solver");
    let mut h = harness_sized(ViewerApp::new(ls, solver, BackendChoice::Cpu, false), 1200.0, 1400.0);
    run_until(&mut h, "a snapshot of the forest", |a| a.amr_info().is_some());
    unfold_panels(&mut h);
    h.step();
    // The view is the finest level's grid (64^2 for 32^2 at level 1): its far corner is on screen.
    let rect = h.state().view_rect.expect("view");
    let far = h.state().screen_of(glam::Vec3::new(64.0, 64.0, 0.5)).expect("on screen");
    assert!(rect.expand(2.0).contains(far), "{far:?} in {rect:?}");
    // Run 100 steps: the lid's shear refines at the adaptations of steps 50 and 100.
    h.state_mut().set_steps_per_frame(100);
    h.get_by_label("Step").click();
    run_until(&mut h, "refined blocks", |a| a.step() == 100 && a.amr_info().is_some_and(|i| i.leaves[1] > 0));
    h.run_steps(2);
    let a = h.state().amr_info().expect("amr").clone();
    assert_eq!(a.adaptations, 2);
    // The panel: live numbers and the settings in force.
    assert!(h.query_by_label_contains(&format!("leaf blocks: L0 {} · L1 {}", a.leaves[0], a.leaves[1])).is_some());
    assert!(h.query_by_label_contains("of the uniform 64 x 64 grid of level 1, the effective resolution").is_some());
    assert!(h.query_by_label_contains("time in refinement: ").is_some());
    // Outlines on by default: one box per leaf, on the block edges, coloured by level, the
    // coarse ones first; the legend counts them.
    let boxes = h.state().block_outlines().expect("outlines");
    assert_eq!(boxes.len(), a.leaves.iter().sum::<usize>());
    assert_eq!(boxes.len(), a.boxes.len());
    let mut sorted = a.boxes.clone();
    sorted.sort_by_key(|b| b.2);
    for (b, &(lo, edge, l)) in boxes.iter().zip(&sorted) {
        assert_eq!(b.color, render::level_color(l, 1));
        assert_eq!((b.min, b.max), ([lo[0] as f32, lo[1] as f32, 0.0], [(lo[0] + edge) as f32, (lo[1] + edge) as f32, 1.0]));
        assert_eq!(edge, 4 << (1 - l));
    }
    assert_ne!(render::level_color(0, 1), render::level_color(1, 1));
    let legend = h.state().legend().blocks.expect("block legend");
    assert_eq!((legend.leaves.clone(), legend.edge.clone()), (a.leaves.clone(), vec![8, 4]));
    h.get_by_label("block outlines by level").click();
    h.step();
    assert!(h.state().block_outlines().is_none() && h.state().legend().blocks.is_none());
    // Freezing level 1 from the panel reaches the solver.
    h.get_by_label("L1").click();
    run_until(&mut h, "the frozen level", |a| a.amr_info().is_some_and(|i| i.settings.frozen == vec![1]));
    // Max level 0 (the call the slider makes): a frozen level 1 keeps its blocks.
    let st = AmrSettings { max_level: 0, ..h.state().amr_info().expect("amr").settings.clone() };
    h.state_mut().set_amr(st.clone());
    h.run_steps(2);
    run_until(&mut h, "the new max level", |a| a.amr_info().is_some_and(|i| i.settings.max_level == 0));
    assert_eq!(h.state().amr_info().expect("amr").leaves[1], a.leaves[1], "frozen: level 1 keeps its blocks");
    // Thawed: the adaptation now coarsens everything to level 0.
    h.get_by_label("L1").click();
    run_until(&mut h, "all coarse", |a| a.amr_info().is_some_and(|i| i.settings.frozen.is_empty() && i.leaves == vec![64, 0]));
    // A refused setting comes back as a message.
    h.state_mut().set_amr(AmrSettings { threshold: -1.0, field: Field::Q, ..st });
    run_until(&mut h, "a refusal", |a| has_message(a, "adaptive blocks: invalid parameter: amr threshold -1: must be a number above 0"));
    // Drawing on adaptive blocks: a bar of finest cells becomes an obstacle of the forest that
    // feels the lid's flow; ctrl+z erases it again.
    let before = solid_count(h.state());
    h.state_mut().set_tool(Tool::Draw);
    assert_eq!(h.state().edit.tool, Tool::Draw);
    h.state_mut().edit.brush = 1.5;
    let (p0, p1) = (screen(&h, [20.5, 40.5, 0.5]), screen(&h, [44.5, 40.5, 0.5]));
    drag(&mut h, p0, p1, 6);
    run_until_applied(&mut h, "the stroke to reach the adaptive solver");
    assert!(has_message(h.state(), "drew (obstacle \"drawn\")"), "the stroke is summed up");
    let drawn = solid_count(h.state()) - before;
    assert!(drawn >= 50, "{drawn} cells drawn");
    let step0 = h.state().step();
    h.get_by_label("Step").click();
    run_until(&mut h, "the drawn bar's force", |a| {
        a.snap.as_ref().is_some_and(|s| s.step >= step0 + 100 && s.stats.forces.first().is_some_and(|f| f[0].abs() + f[1].abs() > 1e-6))
    });
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    run_until(&mut h, "the undo", |a| solid_count(a) == before);
    assert!(h.state().snap.as_ref().is_some_and(|s| !s.stats.blown_up()));
}

/// Unfold the panels a run's settings and numbers are in (all but Scene and Export), as a
/// user working through them would.
fn unfold_panels(h: &mut Harness) {
    for s in [Section::Simulation, Section::Visualization, Section::Adaptive, Section::Compression, Section::Stats] {
        h.state_mut().sidebar.set_open(s, true);
    }
    h.run_steps(2);
}

/// Unfold a side-bar section (as its key or header would) and draw a frame.
pub(super) fn unfold(h: &mut Harness, s: Section) {
    h.state_mut().sidebar.set_open(s, true);
    h.run_steps(2);
}

#[test]
fn ui_the_flow_gets_the_window_and_the_side_bar_folds_away() {
    for (w, ht) in [(1280.0, 720.0), (1920.0, 1080.0), (900.0, 600.0)] {
        let mut h = harness_sized(small_app(false), w, ht);
        run_until(&mut h, "a snapshot", |a| a.snap.is_some());
        h.run_steps(2);
        let view = h.state().view_rect.expect("a view");
        if w >= 1280.0 {
            assert!(view.width() >= 0.7 * w, "{w}x{ht}: the view takes {} of {w} points", view.width());
        }
        // Only Simulation is unfolded: its tau is there, the Visualization range and the Stats
        // table are not.
        assert!(h.query_by_label("tau").is_some(), "{w}x{ht}: Simulation is open");
        assert!(h.query_by_label("auto range").is_none() && h.query_by_label("MLUPS").is_none(), "{w}x{ht}: the rest is folded");
        // The legend lies inside the view.
        let legend = h.state().overlays.legend.expect("a legend");
        assert!(view.contains_rect(legend), "{w}x{ht}: legend {legend:?} outside the view {view:?}");
    }
    let mut h = harness_sized(small_app(false), 1280.0, 720.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    // b hides the side bar: the view takes the whole width; the toolbar's button brings it back.
    h.key_press(egui::Key::B);
    h.run_steps(2);
    assert!(!h.state().sidebar.shown);
    assert!(h.state().view_rect.expect("view").width() >= 0.97 * 1280.0, "{:?}", h.state().view_rect);
    h.get_by_label("Panels").click();
    h.run_steps(2);
    assert!(h.state().sidebar.shown && h.query_by_label("tau").is_some());
    // Keys 1 to 7 unfold and fold sections; the header does too.
    h.key_press(Section::Visualization.key());
    h.run_steps(2);
    assert!(h.query_by_label("auto range").is_some(), "2 unfolds Visualization");
    h.key_press(Section::Simulation.key());
    h.run_steps(2);
    assert!(h.query_by_label("tau").is_none(), "1 folds Simulation");
    h.get_by_label("Stats").click();
    h.run_steps(2);
    assert!(h.state().sidebar.is_open(Section::Stats) && h.query_by_label("MLUPS").is_some(), "the header unfolds Stats");
    // A folded side bar unfolds with a section's key.
    h.key_press(egui::Key::B);
    h.run_steps(1);
    h.key_press(Section::Export.key());
    h.run_steps(2);
    assert!(h.state().sidebar.shown && h.state().sidebar.is_open(Section::Export));
    // Toolbar keys: f steps through the fields, c through the colour maps.
    let f = h.state().view.field;
    h.key_press(egui::Key::F);
    h.run_steps(1);
    assert_ne!(h.state().view.field, f);
    let c = h.state().view.cmap;
    h.key_press(egui::Key::C);
    h.run_steps(1);
    assert_ne!(h.state().view.cmap, c);
}

#[test]
fn ui_messages_never_cover_the_legend() {
    for (w, ht) in [(1280.0, 720.0), (640.0, 480.0)] {
        let mut h = harness_sized(small_app(false), w, ht);
        run_until(&mut h, "a snapshot", |a| a.snap.is_some());
        for k in 0..4 {
            h.state_mut().message(format!("message {k}: {}", "a long status message that goes on and on ".repeat(4)), k % 2 == 0);
        }
        h.run_steps(2);
        let o = h.state().overlays.clone();
        let legend = o.legend.expect("a legend");
        assert!(o.messages.len() >= 3, "{w}x{ht}: the status line and messages are drawn: {o:?}");
        for m in &o.messages {
            assert!(!m.intersects(legend), "{w}x{ht}: message {m:?} covers the legend {legend:?}");
        }
    }
}

#[test]
fn auto_range_leaves_out_a_few_extreme_cells_and_the_legend_keeps_them() {
    // 10,000 fluid cells from 0 to 1, and 20 corner cells at 50 (a driven lid's corners).
    let n = [101, 100, 1];
    let mut v: Vec<f32> = (0..n[0] * n[1]).map(|i| (i % 100) as f32 / 99.0).collect();
    for x in v.iter_mut().take(20) {
        *x = 50.0;
    }
    let mut solid = vec![0u8; v.len()];
    // A solid column with a huge value is never counted.
    for y in 0..n[1] {
        solid[y * n[0] + 100] = 1;
        v[y * n[0] + 100] = 1e6;
    }
    let layout = sim_core::frame::FrameLayout::new(n, 1, 1);
    let mut sample = frame_sample(&layout, &v, 0, &solid);
    assert_eq!(sample.len(), 100 * 100);
    let (lo, hi) = robust_range(&mut sample).expect("a range");
    assert!(lo <= 0.02 && (0.97..=1.0).contains(&hi), "{lo} {hi}");
    // Only the planes of a frame of planes are read, and a padded layout is read right.
    let n3 = [8, 6, 4];
    let layout = sim_core::frame::FrameLayout::new(n3, 2, 64).with_region(sim_core::frame::FrameRegion::Planes([None, None, Some(2)]));
    let mut data = vec![f32::NAN; layout.floats()];
    for y in 0..6 {
        for x in 0..8 {
            data[layout.index(1, x + 8 * (y + 6 * 2))] = (x + y) as f32;
        }
    }
    let s = frame_sample(&layout, &data, 1, &[0u8; 8 * 6 * 4]);
    assert_eq!(s.len(), 48, "the plane's cells only (the rest is NaN, never read)");
    assert!(robust_range(&mut []).is_none());
    // The app's legend gives the true extremes when the range leaves out the tails.
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.get_by_label("Step").click();
    run_until(&mut h, "a snapshot after a step", |a| a.snap.as_ref().is_some_and(|s| s.step > 0));
    let s = h.state().snap.as_ref().expect("snapshot");
    let r = s.robust.expect("a host frame has a percentile range");
    assert!(r.0 >= s.min_max.0 && r.1 <= s.min_max.1, "{r:?} inside {:?}", s.min_max);
    let l = h.state().legend();
    assert_eq!(l.data, Some(s.min_max));
    assert_eq!(l.range, auto_range(r, l.cmap));
}

#[test]
fn the_window_fits_the_screen() {
    use super::window::fit_window;
    assert_eq!(fit_window(Some([2560.0, 1440.0])), [1440.0, 900.0]);
    let [w, h] = fit_window(Some([1280.0, 720.0]));
    assert!(w <= 1280.0 && h <= 720.0 && w >= 1100.0, "{w}x{h}");
    let [w, h] = fit_window(None);
    assert!(w <= 1280.0 && h <= 720.0);
    assert_eq!(fit_window(Some([320.0, 200.0])), [640.0, 400.0]);
}

/// A click of the left button at `at` (press and release without moving).
pub(super) fn click_at(h: &mut Harness, at: egui::Pos2) {
    h.hover_at(at);
    h.step();
    h.drag_at(at);
    h.step();
    h.drop_at(at);
    h.run_steps(2);
}

#[test]
fn ui_probe_tool_places_probes_that_plot_and_export_over_time() {
    use super::app::Tool;
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.run_steps(2);
    assert!(h.state().probes().is_empty());
    // p picks the Probe tool; a click behind the disc places a probe at that cell.
    h.key_press(egui::Key::P);
    h.run_steps(1);
    assert_eq!(h.state().edit.tool, Tool::Probe);
    let at = screen(&h, [30.5, 12.5, 0.5]);
    click_at(&mut h, at);
    let probes = h.state().probes();
    assert_eq!(probes.len(), 1, "one click, one probe: {probes:?}");
    assert_eq!(probes[0].cell, [30, 12, 0]);
    assert!(h.state().sidebar.is_open(Section::Probes), "the panel opens with the first probe");
    assert!(h.query_by_label_contains("probe1 at (30, 12)").is_some());
    // Running: one sample per snapshot, steps increasing, the channel's flow at that cell.
    h.get_by_label("Run").click();
    run_until(&mut h, "30 samples", |a| a.probe_series(0).is_some_and(|s| s.len() >= 30));
    h.get_by_label("Pause").click();
    h.run_steps(2);
    let s = h.state().probe_series(0).expect("series").clone();
    let v: Vec<_> = s.samples(0).iter().copied().collect();
    assert!(v.windows(2).all(|w| w[1].step > w[0].step), "steps increase");
    let last = v.last().copied().expect("samples");
    assert!(last.u[0] > 0.005 && (0.9..1.1).contains(&last.rho) && last.vorticity.is_finite(), "{last:?}");
    assert!(h.query_all_by_label_contains("|u| ").next().is_some(), "the latest values are shown");
    // CSV: a header and one row per sample.
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("probes.csv");
    h.state().export_probes(&csv).expect("written");
    let text = std::fs::read_to_string(&csv).expect("csv");
    assert!(text.starts_with("step,probe,x,y,z,ux,uy,uz,speed,rho,pressure,vorticity"), "{text}");
    assert_eq!(text.lines().count(), 1 + s.len());
    assert!(text.lines().nth(1).is_some_and(|l| l.contains(",probe1,30,12,0,")), "{text}");
    // A second probe (paused: sampled at once); removing the first keeps the second's samples.
    h.state_mut().add_probe([40, 5, 0], Some("corner".into()));
    run_until(&mut h, "the second probe's sample", |a| a.probe_series(1).is_some_and(|s| !s.is_empty()));
    h.run_steps(2);
    h.get_all_by_label("Remove").next().expect("a Remove button").click();
    h.run_steps(2);
    let probes = h.state().probes();
    assert_eq!(probes.len(), 1);
    assert_eq!(probes[0].name, "corner");
    assert!(h.state().probe_series(0).is_some_and(|s| !s.is_empty()));
    // Outside the domain: refused with a message.
    h.state_mut().add_probe([48, 0, 0], None);
    assert!(has_message(h.state(), "outside the domain"));
    // Reset: the samples start again from step 0.
    h.key_press(egui::Key::R);
    run_until(&mut h, "reset", |a| a.step() == 0 && a.probe_series(0).is_some_and(|s| s.samples(0).back().is_some_and(|x| x.step <= 1)));
}

#[test]
fn ui_scene_probes_are_there_at_start_and_probes_go_on_a_3d_slice() {
    use super::app::Tool;
    let text = format!("{SMALL_SCENE}\n[[probes]]\nat = [20, 12]\nname = \"wake\"\n");
    let ls = sim_core::scene::from_str(&text, "test", PathBuf::from("."), &[]).expect("scene");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness(ViewerApp::new(ls, solver, BackendChoice::Cpu, false));
    run_until(&mut h, "the scene probe's first sample", |a| a.probe_series(0).is_some_and(|s| !s.is_empty()));
    assert_eq!(h.state().probes()[0].name, "wake");
    assert_eq!(h.state().probes()[0].cell, [20, 12, 0]);
    // 3D: a click lands on the slice painted on (z at its index).
    let mut h = harness(small_3d_app());
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.state_mut().set_tool(Tool::Probe);
    let k = h.state().view.slices[2];
    h.run_steps(2);
    let at = screen(&h, [10.5, 6.5, k as f32 + 0.5]);
    click_at(&mut h, at);
    let probes = h.state().probes();
    assert_eq!(probes.len(), 1, "{probes:?}");
    assert_eq!(probes[0].cell, [10, 6, k]);
    run_until(&mut h, "a 3D sample", |a| a.probe_series(0).is_some_and(|s| !s.is_empty()));
}

#[test]
fn ui_probes_placed_by_clicking_are_saved_in_the_checkpoint_and_come_back_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("with-probes.ckpt");
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.state_mut().add_probe([20, 12, 0], Some("wake".into()));
    h.state_mut().add_probe([5, 5, 0], None);
    h.state_mut().save_checkpoint(ckpt.clone());
    run_until(&mut h, "the checkpoint saved", |a| a.messages().iter().any(|m| m.text.contains("saved checkpoint")));
    let saved = sim_core::checkpoint::Checkpoint::load(&ckpt).expect("checkpoint");
    let names: Vec<(&str, [usize; 3])> = saved.probes.iter().map(|p| (p.name.as_str(), p.cell)).collect();
    assert_eq!(names, [("wake", [20, 12, 0]), ("probe1", [5, 5, 0])]);
    // Gone from the view, then back with the checkpoint, sampled again.
    h.state_mut().remove_probe(1);
    h.state_mut().remove_probe(0);
    assert!(h.state().probes().is_empty());
    h.state_mut().ckpt_path = ckpt.display().to_string();
    // The snapshot that answers the removal comes first (it changes the panels' layout).
    run_until(&mut h, "a snapshot without probes", |a| a.snap.as_ref().is_some_and(|s| s.probe_cells.is_empty()));
    super::tests::unfold(&mut h, super::panels::sidebar::Section::Export);
    h.get_by_label("Load").click();
    run_until(&mut h, "the checkpoint's probes", |a| a.probes().len() == 2);
    assert_eq!(h.state().probes()[0].name, "wake");
    assert_eq!(h.state().probes()[1].cell, [5, 5, 0]);
    assert!(has_message(h.state(), "2 probes from the checkpoint"));
    h.get_by_label("Step").click();
    run_until(&mut h, "samples of the probes", |a| a.probe_series(1).is_some_and(|s| !s.is_empty()));
}

#[test]
fn presets_are_every_shipped_scene_with_a_picture_and_a_card() {
    use super::panels::presets::PRESETS;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenes");
    let mut shipped: Vec<String> = std::fs::read_dir(&dir)
        .expect("scenes/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().to_string()))
        .collect();
    shipped.sort();
    let mut listed: Vec<String> = PRESETS.iter().map(|p| p.stem.to_string()).collect();
    listed.sort();
    assert_eq!(listed, shipped, "every scene in scenes/ has a card (and a picture: scripts/make-thumbnails.sh)");
    for p in &PRESETS {
        let img = image::load_from_memory(p.picture).unwrap_or_else(|e| panic!("{}: picture: {e}", p.stem)).to_rgba8();
        assert_eq!((img.width(), img.height()), (320, 180), "{}", p.stem);
        let distinct: std::collections::HashSet<_> = img.pixels().map(|px| px.0).collect();
        assert!(distinct.len() > 10, "{}: the picture shows a flow ({} colours)", p.stem, distinct.len());
        let c = p.card();
        assert!(!c.name.is_empty() && !c.shows.is_empty() && !c.try_this.is_empty(), "{}: {c:?}", p.stem);
        // The built-in copy loads as a scene.
        sim_core::scene::from_str(p.toml, p.stem, PathBuf::from("scenes"), &[]).unwrap_or_else(|e| panic!("{}: {e}", p.stem));
    }
}

#[test]
fn ui_presets_window_shows_the_cards_and_opens_a_scene() {
    let mut h = harness_sized(small_app(false), 1280.0, 720.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.key_press(egui::Key::O);
    h.run_steps(2);
    assert!(h.state().show_presets);
    assert!(h.query_by_label("Open cylinder_2d").is_some() && h.query_all_by_label_contains("Try: ").next().is_some());
    h.get_by_label("Open lid_driven_cavity_2d").click();
    h.run_steps(1);
    assert!(!h.state().show_presets, "the window closes on opening a scene");
    run_until(&mut h, "the cavity", |a| !a.loading() && a.scene.scene.name.starts_with("Lid-driven cavity 2D"));
}

/// Whether a label reading `text` sits on the row of the label `row` (a grid lays a row's
/// cells out on one line).
fn on_row(h: &Harness, row: &str, text: &str) -> bool {
    let y = h.get_by_label(row).rect().center().y;
    h.query_all_by_label(text).any(|n| (n.rect().center().y - y).abs() < 6.0)
}

#[test]
fn ui_schemes_window_lists_measures_and_switches_the_scheme() {
    use super::panels::schemes::{mlups_text, per_cell, rows, size_text, title};
    use sim_core::schemes::Scheme;
    let mut h = harness_sized(small_app(true), 1280.0, 900.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    h.key_press(egui::Key::K);
    h.run_steps(2);
    assert!(h.state().schemes.shown, "k opens the window");
    // Every scheme has a row with the memory and traffic sim-core gives for this run.
    let (l, p, g) = {
        let a = h.state();
        (a.scene.derived.lattice, a.scene.scene.solver.precision, a.scene.scene.solver.ghost_block)
    };
    let cells = 48 * 24;
    for (row, s) in rows(l, p, g, cells).iter().zip(Scheme::ALL) {
        assert_eq!((row.scheme, row.stored, row.moved), (s, s.bytes_stored(l, p, g), s.bytes_moved(l, p, g)));
        assert_eq!(row.grid_bytes, s.bytes_stored(l, p, g) * cells as f64);
        for text in [per_cell(row.stored), size_text(row.grid_bytes), per_cell(row.moved)] {
            assert!(on_row(&h, title(s), &text), "{}: {text} on its row", title(s));
        }
    }
    assert!(on_row(&h, "Esoteric Pull", "running"), "the running scheme is marked");
    // Measure (m): every scheme timed on a tiny box of this lattice on the CPU, the run paused
    // meanwhile and running again after.
    h.state_mut().schemes.seconds = 0.05;
    h.state_mut().schemes.edge = Some(8);
    h.key_press(egui::Key::M);
    h.run_steps(1);
    assert!(h.state().schemes.measuring() && !h.state().running, "measuring, the run paused");
    run_until(&mut h, "the measurement", |a| !a.schemes.measuring());
    assert!(h.state().running, "the run resumes");
    h.run_steps(1);
    for (k, s) in Scheme::ALL.into_iter().enumerate() {
        let m = match &h.state().schemes.results[k] {
            Some(Ok(m)) => *m,
            other => panic!("{}: {other:?}", title(s)),
        };
        assert!(m.mlups > 0.0 && m.mlups.is_finite() && m.steps >= 3, "{}: {m:?}", title(s));
        assert_eq!(m.moved, s.bytes_moved(l, p, g), "{}: the box moves what the table says", title(s));
        assert!(on_row(&h, title(s), &mlups_text(m.mlups)), "{}: MLUPS on its row", title(s));
        assert!(on_row(&h, title(s), &format!("{:.2}", m.gbs())), "{}: GB/s on its row", title(s));
    }
    // A row's button switches the run.
    h.get_by_label("Use AA").click();
    run_until(&mut h, "the AA solver", |a| !a.loading() && a.snap.as_ref().is_some_and(|s| s.info.scheme == Scheme::Aa));
    h.run_steps(2);
    assert_eq!(h.state().scene.scene.solver.scheme, Scheme::Aa);
    assert!(on_row(&h, "AA", "running") && !on_row(&h, "Esoteric Pull", "running"), "the mark moves");
    h.key_press(egui::Key::K);
    h.run_steps(1);
    assert!(!h.state().schemes.shown, "k closes it");
}

#[test]
fn ui_recording_asks_for_a_frame_every_k_steps_and_stops_with_the_video_note() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rec = dir.path().join("rec");
    let mut h = harness(small_app(false));
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    // The shell's texture of the view (frames are taken only once the view is drawn).
    h.state_mut().field_texture = Some(egui::TextureId::default());
    h.state_mut().start_recording(&rec, 40);
    assert!(rec.is_dir() && h.state().recording.is_some());
    h.get_by_label("Run").click();
    let mut taken = Vec::new();
    while taken.len() < 4 {
        run_until(&mut h, "a frame request", |a| a.record_request.is_some());
        // What the shell does: take the picture (here: note it).
        let p = h.state_mut().record_request.take().expect("request");
        taken.push((p, h.state().step()));
    }
    for (k, (p, step)) in taken.iter().enumerate() {
        assert_eq!(p, &crate::run::record::frame_path(&rec, k as u64), "frames are numbered in order");
        // One frame in each window of 40 steps (frames are due at multiples of 40).
        if k > 0 {
            assert!(step / 40 > taken[k - 1].1 / 40, "one frame per 40 steps: {taken:?}");
        }
    }
    assert!(h.query_by_label_contains("REC ").is_some(), "the toolbar shows the recording");
    // F9 stops; the video is made on a thread, and a message says what became of it.
    h.key_press(egui::Key::F9);
    h.run_steps(1);
    assert!(h.state().recording.is_none());
    run_until(&mut h, "the video's message", |a| a.messages().iter().any(|m| m.text.contains("video") || m.text.contains("ffmpeg")));
    // A folder that cannot be written: refused with a message.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("file");
    h.state_mut().start_recording(&file, 10);
    assert!(h.state().recording.is_none());
    assert!(has_message(h.state(), "not recording: cannot write into"));
}

/// A scene with SI units: the Stats panel shows the conversion, and a probe's readout and the
/// legend give SI values beside the lattice ones.
#[test]
fn ui_stats_show_the_si_conversion_of_a_units_scene() {
    // 6 cells are 6 cm (1 cell = 1 cm); the inlet's 0.05 cells/step is 0.5 m/s (1 step = 1 ms).
    let text = format!("{SMALL_SCENE}[units]\nlength = 0.06\ncells = 6\nvelocity = 0.5\ndensity = 1.2\n");
    let ls = sim_core::scene::from_str(&text, "test", PathBuf::from("."), &[]).expect("scene");
    let u = ls.derived.units.expect("units");
    let solver = sim_core::build::cpu(&ls).expect("solver");
    let mut h = harness_sized(ViewerApp::new(ls, solver, BackendChoice::Cpu, false), 1400.0, 1400.0);
    run_until(&mut h, "a snapshot", |a| a.snap.is_some());
    unfold(&mut h, Section::Stats);
    for (k, v) in [("1 cell", "0.01 m"), ("1 step", "0.001 s"), ("velocity 1 cell/step", "10 m/s"), ("density 1", "1.2 kg/m³")] {
        assert!(h.query_by_label(k).is_some() && h.query_by_label(v).is_some(), "the Stats panel shows {k} = {v}");
    }
    assert!(h.query_by_label_contains("N/m (per metre of depth)").is_some(), "2D forces are per unit depth");
    // tau 0.8: nu = 0.1 cells^2/step = 0.1 * 1e-4 / 1e-3 = 0.01 m^2/s; Re = 0.05 * 6 / 0.1 = 3.
    assert!(h.query_by_label("0.10000 cells²/step = 0.01 m²/s (tau 0.8000)").is_some());
    assert!(h.query_by_label_contains("3.0 (0.06 m over 6 cells, 0.5 m/s for 0.05 cells/step)").is_some());
    assert!(h.query_by_label_contains("s (step ").is_some(), "the simulated time");
    assert_eq!(h.state().legend().units, Some(u), "the legend gets the units");
    assert_eq!(super::legend::si_range(FieldKind::Speed, (0.0, 0.0834), &u), "in SI units 0 to 0.834 m/s");
    let s = sim_core::probes::ProbeSample { step: 10, u: [0.0834, 0.0, 0.0], rho: 1.003, vorticity: 0.002 };
    let line = super::panels::probes::probe_readout(&s, 2, Some(&u));
    assert!(line.starts_with("|u| 0.0834 (0.834 m/s)  u (0.0834, 0.0000) (0.834, 0 m/s)  p 1.000e-3 (0.12 Pa)"), "{line}");
    assert!(line.ends_with("|curl u| 2.000e-3 (2 1/s)"), "{line}");
    // Without units, lattice values alone.
    assert_eq!(super::panels::probes::probe_readout(&s, 2, None), "|u| 0.0834  u (0.0834, 0.0000)  p 1.000e-3  |curl u| 2.000e-3");
    let h = harness(small_app(false));
    assert!(h.state().legend().units.is_none());
}

/// The README's 3D command shows what its picture shows: its `--view` is the one the picture
/// was rendered with (screenshots/README.md), and it parses.
#[test]
fn the_readme_3d_command_asks_for_the_view_of_its_picture() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let view_of = |text: &str, line_has: &str| -> String {
        let line = text.lines().find(|l| l.contains(line_has) && l.contains("--view")).unwrap_or_else(|| panic!("no line with {line_has}"));
        line.split("--view").nth(1).unwrap().split_whitespace().next().unwrap().trim_end_matches('`').to_string()
    };
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let shots = std::fs::read_to_string(root.join("screenshots/README.md")).unwrap();
    let command = view_of(&readme, "view scenes/sphere_3d.toml");
    assert_eq!(command, view_of(&shots, "sphere_3d_streamlines.png"), "README.md and screenshots/README.md disagree");
    ViewSpec::parse(&command).unwrap();
}
