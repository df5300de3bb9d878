//! Every in-place scheme equals One-Step Pull after 1,000 steps, with resting walls, a moving
//! wall, an obstacle, an inlet and an outlet, for each lattice and each storage precision.

use crate::common::*;
use sim_core::schemes::Scheme;

const SCENE_2D: &str = r#"
[domain]
size = [28, 20]
[boundaries]
x_min = { type = "inlet", velocity = [0.04, 0.0], profile = "parabolic" }
x_max = { type = "outlet", density = 1.0 }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.05, 0.0] }
[fluid]
tau = 0.62
[[obstacles]]
shape = "cylinder"
center = [10, 9]
radius = 3.5
[[obstacles]]
shape = "box"
min = [18, 3]
max = [20, 6]
"#;

const SCENE_3D: &str = r#"
[domain]
size = [14, 10, 9]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.03, 0.0, 0.0] }
x_max = { type = "outlet" }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.04, 0.0, 0.01] }
z_min = "periodic"
z_max = "periodic"
[fluid]
tau = 0.65
[[obstacles]]
shape = "sphere"
center = [6, 5, 4]
radius = 2.2
"#;

fn check(scene: &str, lattice: &str, precision: &str, steps: u64, tol: f64) {
    let base = [("domain.lattice", lattice), ("solver.precision", precision)];
    // LBM-Ghost keeps obstacle walls half-way: it is compared with a staircase reference.
    let reference_with = |walls: &str| {
        let mut r = solver(scene, &[base[0], base[1], ("solver.scheme", "one_step_pull"), ("solver.walls", walls)]);
        r.step(steps).unwrap();
        r
    };
    let (curved, staircase) = (reference_with("interpolated"), reference_with("staircase"));
    let st = curved.stats();
    assert!(st.max_u > 0.01 && st.max_u < 0.2, "reference flow is not moving sensibly: {st:?}");
    for s in Scheme::ALL.into_iter().filter(|&s| s != Scheme::OneStepPull) {
        let reference = if s == Scheme::Ghost { &staircase } else { &curved };
        let mut other = solver(scene, &[base[0], base[1], ("solver.scheme", s.name()), ("solver.ghost_block", "4")]);
        other.step(steps).unwrap();
        let (dr, du) = max_field_diff(reference.as_ref(), other.as_ref());
        assert!(dr <= tol && du <= tol, "{lattice} {precision} {s}: differs from one_step_pull by rho {dr:e}, u {du:e}");
        let f = (reference.stats().total_force(), other.stats().total_force());
        for a in 0..3 {
            assert!((f.0[a] - f.1[a]).abs() <= 1e-6 + 1e-4 * f.0[a].abs(), "{lattice} {s}: force {:?} vs {:?}", f.0, f.1);
        }
    }
}

#[test]
fn in_place_schemes_equal_one_step_pull_d2q9() {
    for p in ["fp32", "fp16s", "fp16c"] {
        check(SCENE_2D, "D2Q9", p, 1000, 1e-6);
    }
}

#[test]
fn in_place_schemes_equal_one_step_pull_d3q19() {
    check(SCENE_3D, "D3Q19", "fp32", 1000, 1e-6);
    check(SCENE_3D, "D3Q19", "fp16s", 300, 1e-6);
}

#[test]
fn in_place_schemes_equal_one_step_pull_d3q27() {
    check(SCENE_3D, "D3Q27", "fp32", 1000, 1e-6);
    check(SCENE_3D, "D3Q27", "fp16c", 300, 1e-6);
}

/// Wide rows run the lane-parallel (SIMD) bulk path in Esoteric Pull; LBM-Ghost runs every cell
/// through the scalar path. Both must agree bit for bit for every collision operator, with a
/// body force, in FP32 and FP16.
#[test]
fn simd_bulk_path_equals_scalar_path() {
    let scene = r#"
[domain]
size = [52, 12, 6]
[initial]
kind = "taylor_green"
velocity = [0.06, 0.0, 0.0]
[fluid]
tau = 0.56
force = [1e-6, 2e-7, 0.0]
"#;
    for lattice in ["D3Q19", "D3Q27"] {
        for collision in ["bgk", "trt", "smagorinsky", "regularized"] {
            for precision in ["fp32", "fp16s", "fp16c"] {
                let set = |scheme: &'static str| {
                    let mut s = solver(
                        scene,
                        &[
                            ("domain.lattice", lattice),
                            ("solver.collision", collision),
                            ("solver.precision", precision),
                            ("solver.scheme", scheme),
                            ("solver.ghost_block", "8"),
                        ],
                    );
                    s.step(60).unwrap();
                    s
                };
                let (a, b) = (set("esoteric_pull"), set("ghost"));
                let (dr, du) = max_field_diff(a.as_ref(), b.as_ref());
                assert!(dr == 0.0 && du == 0.0, "{lattice} {collision} {precision}: SIMD and scalar paths differ by rho {dr:e}, u {du:e}");
            }
        }
    }
}
