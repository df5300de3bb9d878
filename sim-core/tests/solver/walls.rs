//! Curved walls (interpolated bounce-back on the exact shape) and open boundaries (absorbing
//! layers) on the CPU reference: every scheme and precision runs the same wall rule, a restored
//! checkpoint continues exactly, the wall sits where the shape is, and a pressure pulse leaves
//! through an absorbing layer instead of bouncing back.

use crate::common::*;
use sim_core::backend::cpu;
use sim_core::domain::Domain;
use sim_core::Solver;

/// A channel with a cylinder off the centre line, an inlet and an outlet: every kind of link.
const CYLINDER: &str = r#"
[domain]
size = [64, 34]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0], profile = "parabolic" }
x_max = { type = "outlet", density = 1.0 }
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.6
[initial]
velocity = [0.03, 0.0]
[[obstacles]]
shape = "cylinder"
center = [20.3, 16.7]
radius = 5.37
[[obstacles]]
shape = "box"
min = [40.4, 8.2]
max = [46.6, 12.9]
"#;

const SPHERE: &str = r#"
[domain]
size = [32, 20, 18]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.04, 0.0, 0.0] }
x_max = { type = "outlet", density = 1.0 }
[fluid]
tau = 0.62
[initial]
velocity = [0.04, 0.0, 0.0]
[[obstacles]]
shape = "sphere"
center = [11.2, 9.6, 8.3]
radius = 4.1
"#;

fn run(text: &str, sets: &[(&str, &str)], steps: u64) -> Box<dyn Solver> {
    let mut s = solver(text, sets);
    s.step(steps).unwrap();
    s
}

/// The in-place schemes keep f*_k(x) of each link beside the DDFs and re-read it from the
/// buffer; they must give the two-buffer One-Step Pull's result (same arithmetic: to rounding of
/// the 16-bit storage at most), with the forces.
#[test]
fn every_scheme_runs_the_same_curved_walls() {
    for (text, lattice) in [(CYLINDER, "D2Q9"), (SPHERE, "D3Q19"), (SPHERE, "D3Q27")] {
        for precision in ["fp32", "fp16s", "fp16c"] {
            let base = [("domain.lattice", lattice), ("solver.precision", precision)];
            let sets = |scheme: &'static str| {
                let mut v = base.to_vec();
                v.push(("solver.scheme", scheme));
                v
            };
            let reference = run(text, &sets("one_step_pull"), 60);
            let f_ref = reference.stats().forces;
            assert!(f_ref[0][0] > 0.0, "{lattice} {precision}: no drag {f_ref:?}");
            for scheme in ["esoteric_pull", "esoteric_push", "aa", "swap"] {
                let s = run(text, &sets(scheme), 60);
                let (du, dr) = max_field_diff(reference.as_ref(), s.as_ref());
                let f = s.stats().forces;
                let df =
                    (0..f.len()).flat_map(|k| (0..3).map(move |a| (k, a))).map(|(k, a)| (f[k][a] - f_ref[k][a]).abs()).fold(0.0, f64::max);
                println!("{lattice} {precision} {scheme}: |du| {du:.2e} |drho| {dr:.2e} |dF| {df:.2e}");
                assert!(
                    du < 1e-6 && dr < 1e-6 && df < 1e-6,
                    "{lattice} {precision} {scheme}: differs from one_step_pull: du {du:e} drho {dr:e} dF {df:e}"
                );
            }
        }
    }
}

/// A checkpoint holds only the DDFs; the links' kept values are read back from them, so a
/// restored run continues bit for bit.
#[test]
fn a_restored_run_with_curved_walls_continues_exactly() {
    restored_runs_continue_exactly(CYLINDER, &["esoteric_pull", "aa", "one_step_pull", "esoteric_push", "swap"]);
}

/// A cylinder in a channel on adaptive blocks that adapt while it runs: the finest level's
/// interpolated walls need no kept values (two-buffer stream), so a restored run continues bit
/// for bit too, forces included.
const CYLINDER_BLOCKS: &str = r#"
[domain]
size = [64, 32]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0] }
x_max = { type = "outlet", density = 1.0 }
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.56
[initial]
velocity = [0.05, 0.0]
[amr]
enabled = true
max_level = 2
near_wall = 2
wall_margin = 2
threshold = 0.01
interval = 10
[[obstacles]]
shape = "cylinder"
center = [20.3, 15.7]
radius = 4.37
"#;

#[test]
fn a_restored_run_with_curved_walls_on_adaptive_blocks_continues_exactly() {
    restored_runs_continue_exactly(CYLINDER_BLOCKS, &["esoteric_pull"]);
}

/// Checkpoint after 40 and 41 steps (both parities), run on 30 steps, and compare with a run
/// restored from the checkpoint: the same bits and forces.
fn restored_runs_continue_exactly(text: &str, schemes: &[&str]) {
    for &scheme in schemes {
        for steps in [40, 41] {
            let mut a = run(text, &[("solver.scheme", scheme)], steps);
            let c = a.checkpoint();
            a.step(30).unwrap();
            let mut b = solver(text, &[("solver.scheme", scheme)]);
            b.restore(&c).unwrap();
            b.step(30).unwrap();
            let (du, dr) = max_field_diff(a.as_ref(), b.as_ref());
            assert!(du == 0.0 && dr == 0.0, "{scheme} after {steps} steps: restored run differs by {du:e} / {dr:e}");
            assert_eq!(a.stats().forces, b.stats().forces, "{scheme}: forces differ after a restore");
        }
    }
}

/// With interpolated walls the wall sits on the shape: a channel bounded by two box obstacles
/// whose faces lie at fractions of a cell (not half-way) carries the Poiseuille profile of the
/// true width. Forced flow, periodic in x; the centre-line velocity of a channel of width h is
/// F h^2 / (8 nu). Halfway walls on the same voxels give the width of the voxels instead.
#[test]
fn the_wall_sits_where_the_shape_is() {
    let (lo, hi) = (3.3f64, 26.8f64); // fluid between y = 3.3 and y = 26.8: h = 23.5
    let text = format!(
        r#"
[domain]
size = [4, 31]
[boundaries]
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.8
force = [1e-6, 0.0]
[[obstacles]]
shape = "box"
min = [-1, -1]
max = [10, {lo}]
[[obstacles]]
shape = "box"
min = [-1, {hi}]
max = [10, 40]
"#
    );
    let nu = (0.8 - 0.5) / 3.0;
    let h = hi - lo;
    let expect = 1e-6 * h * h / (8.0 * nu);
    let mut errs = Vec::new();
    for walls in ["interpolated", "staircase"] {
        let mut s = solver(&text, &[("solver.walls", walls)]);
        s.step(20_000).unwrap();
        let f = s.fields();
        let umax = f.u.iter().map(|u| f64::from(u[0])).fold(0.0, f64::max);
        let err = umax / expect - 1.0;
        println!("{walls}: centre-line velocity {umax:.5e}, true width gives {expect:.5e} ({:+.2}%)", 100.0 * err);
        errs.push(err.abs());
    }
    assert!(errs[0] < 0.01, "interpolated walls: centre-line velocity off by {:.2}%", 100.0 * errs[0]);
    assert!(errs[1] > 3.0 * errs[0], "halfway walls should miss the true width: {errs:?}");
}

/// Reflection of a pressure pulse at the open faces: a Gaussian density pulse in a channel at
/// rest splits into two sound waves that run into an inlet (velocity 0) and an outlet. With
/// equilibrium faces they come back at nearly full strength; with absorbing layers most of the
/// energy is gone. Measured as the largest density deviation in the middle of the channel
/// after the waves had time to return (about 1.2 crossings), against the pulse's: 0.39 with
/// equilibrium faces, 0.087 with layers of 40 cells (80 cells: 0.075). The inlet's layer relaxes
/// the velocity only (its density must stay free to carry a pressure drop), which turns part of
/// the wave around; the outlet's relaxes density and velocity together.
#[test]
fn a_pressure_pulse_leaves_through_absorbing_layers() {
    let text = r#"
[domain]
size = [400, 4]
[boundaries]
x_min = { type = "inlet", velocity = [0.0, 0.0] }
x_max = { type = "outlet", density = 1.0 }
[fluid]
tau = 0.55
"#;
    let amp = 1e-3f32;
    let mut left = Vec::new();
    for sponge in ["0", "40"] {
        let ls = scene(text, &[("boundaries.x_min.sponge", sponge), ("boundaries.x_max.sponge", sponge)]);
        let dom = Domain::from_scene(&ls).unwrap();
        let params = sim_core::Params::from_scene(&ls, &dom);
        let mut s = cpu::build(dom, ls.scene.solver.scheme, ls.scene.solver.precision, params, 16, |p| {
            let d = (p[0] as f32 - 200.0) / 8.0;
            (1.0 + amp * (-d * d).exp(), [0.0; 3])
        });
        let mut worst = 0.0f64;
        for _ in 0..8 {
            s.step(50).unwrap();
        }
        for _ in 0..8 {
            s.step(50).unwrap();
            let f = s.fields();
            let nx = 400;
            let mid = (100..300).flat_map(|x| (0..4).map(move |y| x + nx * y));
            worst = mid.map(|i| f64::from((f.rho[i] - 1.0).abs())).fold(worst, f64::max);
        }
        let r = worst / f64::from(amp);
        println!("sponge {sponge}: largest returning deviation {:.3} of the pulse", r);
        left.push(r);
    }
    assert!(left[0] > 0.3, "equilibrium faces should reflect the pulse: {left:?}");
    assert!(left[1] < 0.3 * left[0], "absorbing layers should remove at least 70% of the reflection: {left:?}");
}

/// A channel whose upper half is the mirror image of its lower half, started from rest: inlet,
/// outlet, a no-slip wall below and an obstacle cut by the mirror plane (`cut` = its centre on
/// the plane y = 12.5, between the fluid layers 12 and 13 of the full channel).
fn mirror_channel(dims: usize, ny: usize, top: &str) -> String {
    let (size, v0, obstacle, lattice) = if dims == 2 {
        (format!("[40, {ny}]"), "[0.05, 0.0]", "shape = \"cylinder\"\ncenter = [12.0, 12.5]\nradius = 3.6", "D2Q9")
    } else {
        (format!("[28, {ny}, 6]"), "[0.05, 0.0, 0.0]", "shape = \"sphere\"\ncenter = [10.0, 12.5, 2.5]\nradius = 3.6", "D3Q19")
    };
    format!(
        r#"
[domain]
size = {size}
lattice = "{lattice}"
[boundaries]
x_min = {{ type = "inlet", velocity = {v0} }}
x_max = {{ type = "outlet", density = 1.0 }}
y_min = "wall"
y_max = "{top}"
[fluid]
tau = 0.56
[solver]
walls = "staircase"
[[obstacles]]
{obstacle}
"#
    )
}

/// A free-slip wall is a mirror: the lower half of a channel with a free-slip wall on the
/// mirror plane runs exactly as the lower half of the whole symmetric channel (to rounding),
/// on every scheme that reads wall values explicitly and every lattice; a no-slip wall there
/// gives a different flow.
#[test]
fn a_free_slip_wall_is_a_mirror_plane() {
    for (dims, lattice) in [(2, "D2Q9"), (3, "D3Q19"), (3, "D3Q27")] {
        let full = mirror_channel(dims, 26, "wall");
        let half = mirror_channel(dims, 14, "slip_wall");
        let noslip = mirror_channel(dims, 14, "wall");
        for scheme in ["esoteric_pull", "esoteric_push", "aa", "one_step_pull"] {
            let sets = [("domain.lattice", lattice), ("solver.scheme", scheme)];
            let steps = if dims == 2 { 300 } else { 120 };
            let (a, b, c) = (run(&full, &sets, steps), run(&half, &sets, steps), run(&noslip, &sets, steps));
            let (fa, fb, fc) = (a.fields(), b.fields(), c.fields());
            let (da, db) = (a.domain(), b.domain());
            let (mut diff, mut wall_diff, mut umax) = (0.0f32, 0.0f32, 0.0f32);
            for i in 0..db.cells() {
                let p = db.coords(i);
                if p[1] > 12 {
                    continue;
                }
                let j = da.index(p[0], p[1], p[2]);
                let d = (0..3).map(|k| (fa.u[j][k] - fb.u[i][k]).abs()).fold((fa.rho[j] - fb.rho[i]).abs(), f32::max);
                diff = diff.max(d);
                wall_diff = wall_diff.max((fc.u[i][0] - fb.u[i][0]).abs());
                umax = umax.max(fa.u[j][0].abs());
            }
            println!("{lattice} {scheme}: slip vs mirror {diff:.2e}, no-slip vs slip {wall_diff:.2e} (u max {umax:.3})");
            assert!(umax > 0.04, "{lattice} {scheme}: the flow did not develop ({umax})");
            assert!(diff < 2e-5, "{lattice} {scheme}: the free-slip half differs from the mirrored channel by {diff:e}");
            assert!(wall_diff > 1e-3, "{lattice} {scheme}: a no-slip wall gives the same flow ({wall_diff:e})");
        }
    }
}

/// Checkpoints hold each cell's incoming DDFs; next to a free-slip wall these come from the
/// reflected slots, so a restored run continues bit for bit.
#[test]
fn a_restored_run_with_free_slip_walls_continues_exactly() {
    restored_runs_continue_exactly(&mirror_channel(2, 14, "slip_wall"), &["esoteric_pull", "aa", "one_step_pull", "esoteric_push"]);
}

/// Forced flow between a no-slip wall and a free-slip wall is half a Poiseuille channel of
/// twice the width: u(y) = F y (2h - y) / (2 nu) at the distance y from the wall (both walls
/// half-way between cell centres; TRT keeps them there independently of tau), and the flow
/// stays parallel.
#[test]
fn half_a_channel_under_a_free_slip_wall_is_half_a_poiseuille_flow() {
    let text = r#"
[domain]
size = [4, 18]
[boundaries]
y_min = "wall"
y_max = "slip_wall"
[fluid]
tau = 0.8
force = [1e-6, 0.0]
[solver]
collision = "trt"
"#;
    let mut s = solver(text, &[]);
    s.step(12000).unwrap();
    let f = s.fields();
    let h = 16.0f64; // fluid layers 1..=16, walls half-way below 1 and above 16
    let nu = (0.8 - 0.5) / 3.0;
    let mut worst = 0.0f64;
    for y in 1..=16usize {
        let i = s.domain().index(1, y, 0);
        let d = y as f64 - 0.5;
        let exact = 1e-6 * d * (2.0 * h - d) / (2.0 * nu);
        worst = worst.max((f64::from(f.u[i][0]) - exact).abs() / (1e-6 * h * h / (2.0 * nu)));
        assert!(f.u[i][1].abs() < 1e-9, "cross-flow at y = {y}: {}", f.u[i][1]);
    }
    println!("largest error {worst:.2e} of the slip-wall velocity");
    assert!(worst < 1e-3, "the profile is not half a Poiseuille flow: error {worst:e}");
}

/// A periodic cylinder array driven by a body force on adaptive blocks, refined everywhere (the
/// near-wall margin covers the box), against the dense solver on the finest grid: the level
/// runs alone there, so its interpolated walls must be the dense solver's (same rule, same q
/// from the exact shape, two-buffer pull against Esoteric Pull in place) as closely as the
/// blocks' staircase walls are the dense staircase (the level machinery's own difference), and
/// the force the same momentum exchange (the blocks' next-step form against the dense
/// last-step one, averaged over an acoustic period of the box). Staircase walls differ from
/// both at the wall.
#[test]
fn adaptive_blocks_interpolate_walls_like_the_dense_solver() {
    for (dims, n, c, r, lattice) in [(2, 32usize, [15.3, 16.1, 0.0], 5.2, "D2Q9"), (3, 16, [7.3, 8.1, 7.6], 3.4, "D3Q19")] {
        let size = |s: usize| (0..dims).map(|_| s.to_string()).collect::<Vec<_>>().join(", ");
        let at = |k: f64| (0..dims).map(|a| format!("{}", (c[a] + 0.5) * k - 0.5)).collect::<Vec<_>>().join(", ");
        let force = |g: f64| if dims == 2 { format!("[{g}, 0.0]") } else { format!("[{g}, 0.0, 0.0]") };
        let text = |s: usize, k: f64, tau: f64, g: f64, amr: bool| {
            let shape = if dims == 2 { "cylinder" } else { "sphere" };
            let amr = if amr { "[amr]\nenabled = true\nmax_level = 1\nnear_wall = 1\nwall_margin = 64\ninterval = 0\n" } else { "" };
            format!(
                "[domain]\nsize = [{}]\nlattice = \"{lattice}\"\n[fluid]\ntau = {tau}\nforce = {}\n[solver]\ncollision = \"bgk\"\n{amr}[[obstacles]]\nshape = \"{shape}\"\ncenter = [{}]\nradius = {}\n",
                size(s),
                force(g),
                at(k),
                r * k
            )
        };
        // Level 1 of the forest: tau_1 = 2 (tau_0 - 1/2) + 1/2, force g_0 / 2. Forces per
        // coarse step in coarse units: a fine link's momentum counts 2^-(D-1), twice a step.
        let g0 = if dims == 2 { 4e-6 } else { 1e-5 };
        let (steps, period) = if dims == 2 { (400u64, 64u64) } else { (600, 32) };
        let per = 1.0 / f64::from(1u32 << (dims - 1));
        let mean_force = |s: &mut Box<dyn Solver>, n: u64, scale: f64| {
            (0..n)
                .map(|_| {
                    s.step(1).unwrap();
                    s.stats().forces[0][0] * scale
                })
                .sum::<f64>()
                / n as f64
        };
        let run_blocks = |walls: &str| {
            let mut s = solver(&text(n, 1.0, 0.56, g0, true), &[("solver.walls", walls)]);
            s.step(steps - period).unwrap();
            let f = mean_force(&mut s, period, 1.0);
            assert_eq!(s.amr().unwrap().leaves[0], 0, "{lattice}: every block refined: {:?}", s.amr().unwrap().leaves);
            (s, f)
        };
        // The blocks' forces after coarse step m are the exchange of fine step 2m + 1
        // (interpolated links: the next step's) or 2m (half-way links: the last step's).
        let run_dense = |walls: &str, next: u64| {
            let mut s = solver(&text(2 * n, 2.0, 0.62, g0 / 2.0, false), &[("solver.walls", walls)]);
            let t0 = 2 * (steps - period);
            s.step(t0).unwrap();
            let (mut sum, mut k) = (0.0, 0);
            for t in t0 + 1..=t0 + 2 * period + next {
                s.step(1).unwrap();
                if t % 2 == next && t >= t0 + 2 + next {
                    sum += s.stats().forces[0][0] * per;
                    k += 1;
                }
            }
            (s, sum / f64::from(k))
        };
        let ((amr, fa), (stairs, fs)) = (run_blocks("\"interpolated\""), run_blocks("\"staircase\""));
        let ((dense, fd), (dstairs, fds)) = (run_dense("\"interpolated\"", 1), run_dense("\"staircase\"", 0));
        let (dr, du) = max_field_diff(amr.as_ref(), dense.as_ref());
        let (_, su) = max_field_diff(stairs.as_ref(), dense.as_ref());
        let (base_r, base_u) = max_field_diff(stairs.as_ref(), dstairs.as_ref());
        let umax = dense.stats().max_u;
        eprintln!(
            "{lattice}: interpolated blocks vs dense: rho {dr:.2e}, u {du:.2e} (max u {umax:.3e}), mean force {fa:.6e} vs {fd:.6e}; \
             staircase blocks vs dense staircase: rho {base_r:.2e}, u {base_u:.2e}, force {fs:.6e} vs {fds:.6e}; staircase vs interpolated u {su:.2e}"
        );
        assert!(
            du <= 2.0 * base_u + 1e-7 && dr <= 2.0 * base_r + 1e-7,
            "{lattice}: the blocks' curved walls differ from the dense solver's: u {du:e}, rho {dr:e}"
        );
        assert!(su > 20.0 * du, "{lattice}: staircase walls should differ visibly: {su:e} vs {du:e}");
        let base_f = (fs / fds - 1.0).abs();
        assert!((fa / fd - 1.0).abs() < base_f + 1e-3, "{lattice}: force {fa} vs dense {fd} (staircase {fs} vs {fds})");
    }
}
