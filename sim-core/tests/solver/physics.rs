//! Physics validation of the CPU reference solver against analytic solutions and published
//! benchmark data. Every test names its reference, prints what it measured (run with
//! `--nocapture` to see the numbers) and asserts a tolerance justified in its comment.
//!
//! Conventions (see DESIGN.md): lattice units; the domain size includes boundary layers; a wall
//! face is a layer of solid cells with halfway bounce-back, so walls at y = 0 and y = ny - 1 act
//! at y = 0.5 and y = ny - 1.5; cell (x, y, z) has its centre at (x, y, z).
//!
//! Sizes are chosen to prove the point and no more: the whole file takes about 40 s of wall time
//! on an otherwise idle 2-core machine in release mode (the cylinder is the longest test).

use crate::common::*;
use sim_core::backend::cpu;
use sim_core::domain::Domain;
use sim_core::Solver;
use std::time::Instant;

/// Build a solver from scene text with a custom initial field (density, velocity per cell).
fn solver_with_init(text: &str, overrides: &[(&str, &str)], init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync) -> Box<dyn Solver> {
    let ls = scene(text, overrides);
    let dom = Domain::from_scene(&ls).unwrap_or_else(|e| panic!("{e}"));
    let params = sim_core::Params::from_scene(&ls, &dom);
    let s = &ls.scene.solver;
    cpu::build(dom, s.scheme, s.precision, params, s.ghost_block, init)
}

/// Largest change of any velocity component between two velocity fields.
fn max_change(a: &[[f32; 3]], b: &[[f32; 3]]) -> f64 {
    a.iter().zip(b).flat_map(|(p, q)| (0..3).map(move |c| f64::from((p[c] - q[c]).abs()))).fold(0.0, f64::max)
}

/// Step until the largest velocity change over `chunk` steps is below `tol`, or `max_steps`.
/// Returns the steps taken and the last change.
fn run_to_steady(s: &mut dyn Solver, chunk: u64, tol: f64, max_steps: u64) -> (u64, f64) {
    let mut prev = s.fields().u;
    let mut done = 0;
    loop {
        s.step(chunk).unwrap();
        done += chunk;
        let u = s.fields().u;
        let d = max_change(&u, &prev);
        assert!(d.is_finite(), "blew up after {done} steps");
        if d < tol || done >= max_steps {
            return (done, d);
        }
        prev = u;
    }
}

/// Least-squares slope of y against x.
fn slope(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    sxy / sxx
}

// ---------------------------------------------------------------------------------------------
// Mass conservation
// ---------------------------------------------------------------------------------------------

/// Mass (as `Stats::mass` reports it) and largest speed before and after 10,000 steps.
fn check_mass(label: &str, mut s: Box<dyn Solver>) {
    const STEPS: u64 = 10_000;
    let t = Instant::now();
    let st0 = s.stats();
    s.step(STEPS).unwrap();
    let st1 = s.stats();
    let (m0, m1) = (st0.mass, st1.mass);
    let rel = ((m1 - m0) / m0).abs();
    println!(
        "mass {label}: {m0:.7} -> {m1:.7} after {STEPS} steps, relative change {rel:.2e} \
         (bound 1e-6); max|u| {:.4} -> {:.4} ({:.1}s)",
        st0.max_u,
        st1.max_u,
        t.elapsed().as_secs_f64()
    );
    // The flow must still be moving at the end, or the test would prove little.
    assert!(st1.max_u > 5e-3, "{label}: flow died out (max|u| = {})", st1.max_u);
    assert!(rel < 1e-6, "{label}: mass changed by {rel:e} (relative)");
}

// Reference: exact conservation. Collision and Guo forcing conserve mass exactly, halfway
// bounce-back on resting walls returns every DDF that hits a wall, periodic edges wrap. What is
// left is FP32 round-off, which must stay below 1e-6 relative over 10,000 steps. (Stats::mass
// sums f32 densities, so its own resolution is ~6e-8 relative.) No moving walls: Ladd's
// correction adds momentum that legitimately changes the mass next to lid corners.

/// D2Q9, closed box (resting walls on all four faces) started from a Taylor-Green field at low
/// viscosity, so the flow still moves after 10,000 steps.
#[test]
fn mass_conserved_d2q9_closed_box() {
    let text = r#"
[domain]
size = [64, 64]
lattice = "D2Q9"
[boundaries]
x_min = "wall"
x_max = "wall"
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.51
[initial]
kind = "taylor_green"
velocity = [0.05, 0.0]
"#;
    check_mass("D2Q9 closed box, Taylor-Green start", solver(text, &[]));
}

/// D2Q9, fully periodic decaying Taylor-Green vortex at low viscosity.
#[test]
fn mass_conserved_d2q9_periodic() {
    let text = r#"
[domain]
size = [64, 64]
lattice = "D2Q9"
[fluid]
tau = 0.51
[initial]
kind = "taylor_green"
velocity = [0.08, 0.0]
"#;
    check_mass("D2Q9 periodic Taylor-Green", solver(text, &[]));
}

/// 3D: a channel (periodic x and z, resting walls in y) driven by a body force along x, started
/// from a genuinely three-dimensional field, so walls, periodic wrap in two axes, Guo forcing
/// and a sustained flow are all exercised.
fn channel_3d(lattice: &str) -> Box<dyn Solver> {
    let text = format!(
        r#"
[domain]
size = [16, 18, 12]
lattice = "{lattice}"
[boundaries]
y_min = "wall"
y_max = "wall"
[fluid]
tau = 0.6
force = [2e-5, 0.0, 0.0]
"#
    );
    use std::f32::consts::PI;
    solver_with_init(&text, &[], |p| {
        let (x, y, z) = (p[0] as f32, p[1] as f32, p[2] as f32);
        let s = (PI * (y - 0.5) / 16.0).sin();
        (
            1.0,
            [0.04 * s + 0.02 * (2.0 * PI * z / 12.0).sin(), 0.02 * (2.0 * PI * x / 16.0).sin() * s, 0.02 * (2.0 * PI * x / 16.0).cos() * s],
        )
    })
}

#[test]
fn mass_conserved_d3q19_forced_channel() {
    check_mass("D3Q19 forced 3D channel", channel_3d("D3Q19"));
}

#[test]
fn mass_conserved_d3q27_forced_channel() {
    check_mass("D3Q27 forced 3D channel", channel_3d("D3Q27"));
}

// ---------------------------------------------------------------------------------------------
// Poiseuille channel
// ---------------------------------------------------------------------------------------------

const POISEUILLE_TAU: f64 = 0.8;

/// Steady state of a body-force driven channel.
struct Channel {
    /// Fluid cells across (walls at y = 0.5 and y = h + 0.5).
    h: usize,
    /// Relative L2 error against the analytic parabola.
    err: f64,
    /// Mean of u_num - u_exact in units of F / (2 nu).
    slip: f64,
    /// Largest |u_num - u_exact - mean| in units of F / (2 nu) (0 for an exact parabola).
    spread: f64,
    /// u_x of each fluid row (averaged over x), y = 1..=h.
    profile: Vec<f64>,
    steps: u64,
    secs: f64,
}

/// Channel of `h` fluid cells, periodic in x (4 cells), resting walls in y, driven by a body
/// force, run from rest until the velocity changes by less than 2e-7 u_c per 100 steps. Fixed
/// tau and diffusive scaling: the centre velocity is u_c = 0.05 * 8 / h (Mach <= 0.087), so
/// F = 8 nu u_c / h^2. Compared with u(y) = F / (2 nu) (y - 0.5)(ny - 1.5 - y).
fn poiseuille(collision: &str, h: usize) -> Channel {
    let t = Instant::now();
    let tau = POISEUILLE_TAU;
    let nu = (tau - 0.5) / 3.0;
    let uc = 0.05 * 8.0 / h as f64;
    let force = 8.0 * nu * uc / (h * h) as f64;
    let ny = h + 2;
    let text = format!(
        r#"
[domain]
size = [4, {ny}]
[boundaries]
y_min = "wall"
y_max = "wall"
[fluid]
tau = {tau}
force = [{force:e}, 0.0]
[solver]
collision = "{collision}"
"#
    );
    let mut s = solver(&text, &[]);
    // The force the solver really applies (f32).
    let f = f64::from(force as f32);
    // The slowest mode decays like exp(-nu pi^2 t / h^2): allow 30 e-folds.
    let max_steps = (30.0 * (h * h) as f64 / (nu * 9.87)) as u64;
    let (steps, change) = run_to_steady(s.as_mut(), 100, 2e-7 * uc, max_steps);
    assert!(change < 2e-7 * uc, "{collision} h={h}: not steady after {steps} steps (change {change:e})");
    let fl = s.fields();
    let scale = f / (2.0 * nu);
    let (mut e2, mut a2) = (0.0, 0.0);
    let (mut devs, mut profile) = (Vec::new(), Vec::new());
    for y in 1..ny - 1 {
        let yf = y as f64;
        let ua = scale * (yf - 0.5) * (ny as f64 - 1.5 - yf);
        let mut mean = 0.0;
        for x in 0..4 {
            let u = fl.u[x + 4 * y];
            e2 += (f64::from(u[0]) - ua).powi(2) + f64::from(u[1]).powi(2);
            a2 += ua * ua;
            mean += f64::from(u[0]) / 4.0;
        }
        devs.push((mean - ua) / scale);
        profile.push(mean);
    }
    let slip = devs.iter().sum::<f64>() / devs.len() as f64;
    let spread = devs.iter().map(|d| (d - slip).abs()).fold(0.0, f64::max);
    Channel { h, err: (e2 / a2).sqrt(), slip, spread, profile, steps, secs: t.elapsed().as_secs_f64() }
}

/// Run the widths, print the table and return the runs with the observed orders between
/// successive widths.
fn poiseuille_series(collision: &str, widths: &[usize]) -> (Vec<Channel>, Vec<f64>) {
    let runs: Vec<Channel> = widths.iter().map(|&h| poiseuille(collision, h)).collect();
    for c in &runs {
        println!(
            "poiseuille {collision} tau={POISEUILLE_TAU} h={:2}: steady after {:5} steps, \
             relative L2 error {:.4e}, slip {:+.5} F/(2nu) (spread {:.1e}) ({:.2}s)",
            c.h, c.steps, c.err, c.slip, c.spread, c.secs
        );
    }
    let orders: Vec<f64> = runs.windows(2).map(|w| (w[0].err / w[1].err).ln() / (w[1].h as f64 / w[0].h as f64).ln()).collect();
    println!("poiseuille {collision}: observed orders of convergence {orders:.3?}");
    (runs, orders)
}

/// Check the orders and the slip against the prediction for halfway bounce-back.
fn check_poiseuille(collision: &str, runs: &[Channel], orders: &[f64], lambda: f64) {
    for o in orders {
        assert!((1.8..=2.2).contains(o), "{collision}: order of convergence {o:.3} outside [1.8, 2.2]");
    }
    let predicted = (16.0 * lambda - 3.0) / 12.0;
    for c in runs {
        println!("  h={:2}: slip {:+.5} vs predicted (16 Lambda - 3)/12 = {predicted:+.5}", c.h, c.slip);
        assert!(
            (c.slip - predicted).abs() < 0.03 * predicted.abs(),
            "{collision} h={}: slip {} F/(2nu), predicted {predicted}",
            c.h,
            c.slip
        );
        assert!(c.spread < 0.03 * predicted.abs(), "{collision} h={}: profile is not a shifted parabola (spread {})", c.h, c.spread);
    }
}

/// Reference: plane Poiseuille flow, u(y) = F / (2 nu) (y - 0.5)(ny - 1.5 - y) with the walls
/// at y = 0.5 and y = ny - 1.5. With halfway bounce-back and Guo forcing the steady LBM
/// solution is that parabola plus a uniform slip F / (2 nu) (16 Lambda - 3) / 12, where
/// Lambda = (tau+ - 1/2)(tau- - 1/2) = (tau - 1/2)^2 for BGK (Ginzburg & Adler, J. Phys. II
/// France 4 (1994) 191; Ginzburg, Verhaeghe & d'Humieres, Commun. Comput. Phys. 3 (2008) 427;
/// the "magic" Lambda = 3/16 makes it exact, so it is not used here). The relative error
/// therefore falls as 1/h^2: the observed order between h = 8, 16, 32 must lie in [1.8, 2.2],
/// and the measured slip must match the prediction within 3%. h = 64 is left out: there the
/// FP32 round-off of the DDFs, amplified by the ~4,000-step relaxation time of the channel, is
/// ~20% of the (tiny, 2e-4) discretisation error and spoils the order (measured 1.66).
#[test]
fn poiseuille_bgk_second_order() {
    let (runs, orders) = poiseuille_series("bgk", &[8, 16, 32]);
    let lambda = (POISEUILLE_TAU - 0.5).powi(2);
    check_poiseuille("bgk", &runs, &orders, lambda);
}

/// TRT with this solver's magic parameter (Lambda = 1/4 at this tau, see
/// `collision::trt_tau_minus`): same reference, slip 1/12 F/(2 nu) independent of tau.
#[test]
fn poiseuille_trt_second_order() {
    assert!((sim_core::collision::trt_lambda(POISEUILLE_TAU as f32) - sim_core::collision::TRT_MAGIC).abs() < 1e-6);
    let (runs, orders) = poiseuille_series("trt", &[8, 16, 32]);
    check_poiseuille("trt", &runs, &orders, f64::from(sim_core::collision::trt_lambda(POISEUILLE_TAU as f32)));
}

/// Smagorinsky (C_s = 0.1) in laminar flow is BGK plus a small eddy viscosity
/// nu_t = (C_s)^2 |S|; with diffusive scaling nu_t / nu falls like 1/h^2, so the order must
/// still be in [1.8, 2.2] and the profile must stay within 1% (relative L2) of BGK's.
#[test]
fn poiseuille_smagorinsky_close_to_bgk() {
    let widths = [8, 16, 32];
    let (runs, orders) = poiseuille_series("smagorinsky", &widths);
    let bgk: Vec<Channel> = widths.iter().map(|&h| poiseuille("bgk", h)).collect();
    for (s, b) in runs.iter().zip(&bgk) {
        let d2: f64 = s.profile.iter().zip(&b.profile).map(|(x, y)| (x - y).powi(2)).sum();
        let b2: f64 = b.profile.iter().map(|y| y * y).sum();
        let rel = (d2 / b2).sqrt();
        println!("  h={:2}: Smagorinsky vs BGK profile, relative L2 difference {rel:.3e}", s.h);
        assert!(rel < 1e-2, "h={}: Smagorinsky differs from BGK by {rel}", s.h);
    }
    for o in &orders {
        assert!((1.8..=2.2).contains(o), "smagorinsky: order of convergence {o:.3} outside [1.8, 2.2]");
    }
}

/// The regularized collision with the Guo force on the same channel: the force enters the
/// rebuilt non-equilibrium part and the source as with BGK, so the steady profile must be the
/// parabola plus a uniform slip, converging at second order. The odd non-equilibrium moments
/// that set the bounce-back slip are rebuilt from the stress (their own part, of order u
/// times the stress here, is dropped), so they keep no memory of their own, as with a TRT
/// whose odd rate is 1 (tau- = 1): Lambda = (tau - 1/2) / 2, slip (16 Lambda - 3) / 12 =
/// -0.05 F/(2 nu) at tau = 0.8. Measured -0.0500,
/// -0.0501, -0.0521 for h = 8, 16, 32 (the last carries the FP32 round-off the BGK test
/// describes: spread 2e-3). Tolerance: orders in [1.8, 2.2]; slip within 0.003 F/(2 nu) of the
/// prediction.
#[test]
fn poiseuille_regularized_second_order() {
    let (runs, orders) = poiseuille_series("regularized", &[8, 16, 32]);
    for o in &orders {
        assert!((1.8..=2.2).contains(o), "regularized: order of convergence {o:.3} outside [1.8, 2.2]");
    }
    let predicted = (16.0 * (POISEUILLE_TAU - 0.5) / 2.0 - 3.0) / 12.0;
    for c in &runs {
        println!("  h={:2}: slip {:+.5} F/(2nu) vs predicted {predicted:+.5}, spread {:.1e}", c.h, c.slip, c.spread);
        assert!((c.slip - predicted).abs() < 0.003, "regularized h={}: slip {} F/(2nu), predicted {predicted}", c.h, c.slip);
        assert!(c.spread < 0.003, "regularized h={}: profile is not a shifted parabola (spread {})", c.h, c.spread);
    }
}

// ---------------------------------------------------------------------------------------------
// Taylor-Green vortex
// ---------------------------------------------------------------------------------------------

/// Decay rate of the kinetic energy of the Taylor-Green vortex that `initial.kind =
/// "taylor_green"` sets up in a periodic box (domain.rs: u = U sin(kx x) cos(ky y),
/// v = -U (kx/ky) cos(kx x) sin(ky y), kx = 2 pi / nx, ky = 2 pi / ny, uniform in z), fitted
/// to ln E(t) over two e-folds of E. Returns (measured rate, analytic rate).
fn tgv_rate(lattice: &str, size: &str, tau: f64, collision: &str) -> (f64, f64) {
    let text = format!(
        r#"
[domain]
size = {size}
lattice = "{lattice}"
[fluid]
tau = {tau}
[initial]
kind = "taylor_green"
velocity = [0.03, 0.0, 0.0]
[solver]
collision = "{collision}"
"#
    );
    let mut s = solver(&text, &[]);
    let n = s.domain().n;
    let nu = (tau - 0.5) / 3.0;
    let kx = 2.0 * std::f64::consts::PI / n[0] as f64;
    let ky = 2.0 * std::f64::consts::PI / n[1] as f64;
    let analytic = 2.0 * nu * (kx * kx + ky * ky);
    let energy = |s: &dyn Solver| -> f64 { s.fields().u.iter().map(|u| f64::from(u[0] * u[0] + u[1] * u[1] + u[2] * u[2])).sum::<f64>() };
    // Skip the short start-up transient (the initial DDFs carry no non-equilibrium part).
    let t0 = (0.1 / analytic).ceil() as u64;
    let t1 = t0 + (2.0 / analytic).ceil() as u64;
    let samples = 20;
    let (mut ts, mut ls) = (Vec::new(), Vec::new());
    for k in 0..=samples {
        let t = t0 + (t1 - t0) * k / samples;
        s.step(t - s.time_step()).unwrap();
        ts.push(t as f64);
        ls.push(energy(s.as_ref()).ln());
    }
    (-slope(&ts, &ls), analytic)
}

/// Reference: Taylor & Green (1937); the 2D vortex above is an exact Navier-Stokes solution
/// whose velocity decays as exp(-nu (kx^2 + ky^2) t), so the kinetic energy decays at the rate
/// 2 nu (kx^2 + ky^2) (= 4 nu k^2 for a square box, k = kx = ky). nu = (tau - 1/2) / 3.
/// Tolerance 1% on the rate: at 64 x 48 cells the lattice error is ~0.1%.
#[test]
fn taylor_green_decay_rate() {
    let cases = [
        ("D2Q9", "[64, 48]", 0.8, "bgk"),
        ("D2Q9", "[64, 48]", 0.6, "bgk"),
        ("D2Q9", "[64, 48]", 0.55, "bgk"),
        ("D2Q9", "[64, 48]", 0.8, "trt"),
        ("D2Q9", "[64, 48]", 0.6, "smagorinsky"),
        ("D3Q19", "[64, 48, 3]", 0.8, "bgk"),
        ("D3Q27", "[64, 48, 3]", 0.8, "bgk"),
    ];
    let mut worst = 0.0f64;
    for (lat, size, tau, coll) in cases {
        let t = Instant::now();
        let (m, a) = tgv_rate(lat, size, tau, coll);
        let rel = m / a - 1.0;
        println!(
            "taylor-green {lat} {size} tau={tau} {coll}: energy decay rate {m:.5e}, analytic \
             {a:.5e}, relative error {rel:+.2e} ({:.2}s)",
            t.elapsed().as_secs_f64()
        );
        worst = worst.max(rel.abs());
    }
    assert!(worst < 0.01, "decay rate off by {worst:.3e} (relative)");
}

/// Reference: as above. The regularized collision relaxes the stress as BGK does, so it must
/// decay the vortex at the same (analytic) rate; dropping the non-hydrodynamic part of f - feq
/// must cost no accuracy. Compared with BGK at the same resolution, lattice and tau, down to
/// tau close to 1/2. Measured relative rate errors: regularized -0.7e-4 to -2.4e-4 (a slight
/// excess of dissipation), BGK -3.7e-4 to +2.8e-4 (closer at tau 0.55 and 0.6, farther at 0.8
/// and 0.51). Tolerance: the regularized error at most BGK's plus 5e-4, and within the 1 % of
/// the test above.
#[test]
fn taylor_green_regularized_as_accurate_as_bgk() {
    let cases = [
        ("D2Q9", "[64, 48]", 0.8),
        ("D2Q9", "[64, 48]", 0.55),
        ("D2Q9", "[64, 48]", 0.51),
        ("D3Q19", "[64, 48, 3]", 0.6),
        ("D3Q27", "[64, 48, 3]", 0.6),
    ];
    for (lat, size, tau) in cases {
        let t = Instant::now();
        let (mb, a) = tgv_rate(lat, size, tau, "bgk");
        let (mr, _) = tgv_rate(lat, size, tau, "regularized");
        let (eb, er) = (mb / a - 1.0, mr / a - 1.0);
        println!(
            "taylor-green {lat} {size} tau={tau}: relative rate error BGK {eb:+.3e}, regularized {er:+.3e} ({:.2}s)",
            t.elapsed().as_secs_f64()
        );
        assert!(er.abs() <= eb.abs() + 5e-4, "{lat} tau={tau}: regularized error {er:.3e} vs BGK {eb:.3e}");
        assert!(er.abs() < 0.01, "{lat} tau={tau}: regularized error {er:.3e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Lid-driven cavity
// ---------------------------------------------------------------------------------------------

/// Ghia, Ghia & Shin (1982), J. Comput. Phys. 48, 387-411, Table I, Re = 100: u / U_lid along
/// the vertical centreline x = 0.5, as (y, u). The end points (walls) are left out: they are
/// boundary conditions, not results.
const GHIA_U_RE100: [(f64, f64); 15] = [
    (0.0547, -0.03717),
    (0.0625, -0.04192),
    (0.0703, -0.04775),
    (0.1016, -0.06434),
    (0.1719, -0.10150),
    (0.2813, -0.15662),
    (0.4531, -0.21090),
    (0.5000, -0.20581),
    (0.6172, -0.13641),
    (0.7344, 0.00332),
    (0.8516, 0.23151),
    (0.9531, 0.68717),
    (0.9609, 0.73722),
    (0.9688, 0.78871),
    (0.9766, 0.84123),
];

/// Ghia, Ghia & Shin (1982), Table II, Re = 100: v / U_lid along the horizontal centreline
/// y = 0.5, as (x, v).
const GHIA_V_RE100: [(f64, f64); 15] = [
    (0.0625, 0.09233),
    (0.0703, 0.10091),
    (0.0781, 0.10890),
    (0.0938, 0.12317),
    (0.1563, 0.16077),
    (0.2266, 0.17507),
    (0.2344, 0.17527),
    (0.5000, 0.05454),
    (0.8047, -0.24533),
    (0.8594, -0.22445),
    (0.9063, -0.16914),
    (0.9453, -0.10313),
    (0.9531, -0.08864),
    (0.9609, -0.07391),
    (0.9688, -0.05906),
];

/// Bilinear interpolation of velocity component `c` at a point given in cavity units
/// (0..1 between the effective walls at cell coordinate 0.5 and l + 0.5).
fn sample(u: &[[f32; 3]], n: usize, l: usize, c: usize, px: f64, py: f64) -> f64 {
    let (x, y) = (0.5 + px * l as f64, 0.5 + py * l as f64);
    let (x0, y0) = (x.floor() as usize, y.floor() as usize);
    let (fx, fy) = (x - x0 as f64, y - y0 as f64);
    let at = |i: usize, j: usize| f64::from(u[i + n * j][c]);
    (1.0 - fy) * ((1.0 - fx) * at(x0, y0) + fx * at(x0 + 1, y0)) + fy * ((1.0 - fx) * at(x0, y0 + 1) + fx * at(x0 + 1, y0 + 1))
}

/// The scene of a lid-driven cavity of `l` x `l` fluid cells with lid velocity `ulid`.
fn cavity_scene(l: usize, ulid: f64, tau: f64) -> String {
    format!(
        r#"
[domain]
size = [{n}, {n}]
[boundaries]
x_min = "wall"
x_max = "wall"
y_min = "wall"
y_max = {{ type = "moving_wall", velocity = [{ulid}, 0.0] }}
[fluid]
tau = {tau}
"#,
        n = l + 2
    )
}

/// Lid-driven cavity of `l` x `l` fluid cells (walls at 0.5 and l + 0.5), lid velocity `ulid`
/// at Re = ulid * l / nu = 100. With `steps = None` it runs until the velocity changes by less
/// than 1e-5 ulid per 1,000 steps (at most 60,000 steps), else exactly `steps` steps.
fn cavity(l: usize, ulid: f64, precision: &str, steps: Option<u64>) -> Box<dyn Solver> {
    let tau = 0.5 + 3.0 * ulid * l as f64 / 100.0;
    let mut s = solver(&cavity_scene(l, ulid, tau), &[("solver.precision", precision)]);
    if let Some(n) = steps {
        s.step(n).unwrap();
        return s;
    }
    let (done, change) = run_to_steady(s.as_mut(), 1000, 1e-5 * ulid, 60_000);
    println!(
        "cavity {l}x{l} {precision}: lid {ulid}, tau {tau:.3}, {done} steps, last change per \
         1000 steps {:.1e} U",
        change / ulid
    );
    assert!(change < 1e-5 * ulid, "cavity did not reach a steady state");
    s
}

/// Reference: Ghia, Ghia & Shin (1982), Re = 100, u on the vertical and v on the horizontal
/// centreline (tables above). D2Q9 BGK, 100 x 100 fluid cells, lid velocity 0.1 (Mach 0.17),
/// tau = 0.8. Tolerance: every one of the 30 points within 2% of the lid velocity (measured:
/// 0.8%; linear interpolation between cell centres costs ~0.1% next to the lid, and Ghia's
/// own 129 x 129 solution is only accurate to about 1%).
#[test]
fn lid_driven_cavity_re100_matches_ghia() {
    let t = Instant::now();
    let (l, ulid) = (100, 0.1);
    let s = cavity(l, ulid, "fp32", None);
    let u = s.fields().u;
    let n = l + 2;
    let mut worst = 0.0f64;
    println!("   y      u Ghia   u LBM    |    x      v Ghia   v LBM");
    for (&(y, ug), &(x, vg)) in GHIA_U_RE100.iter().zip(&GHIA_V_RE100) {
        let um = sample(&u, n, l, 0, 0.5, y) / ulid;
        let vm = sample(&u, n, l, 1, x, 0.5) / ulid;
        println!("  {y:.4} {ug:+.5} {um:+.5}   |  {x:.4} {vg:+.5} {vm:+.5}");
        worst = worst.max((um - ug).abs()).max((vm - vg).abs());
    }
    println!("cavity Re=100: largest deviation from Ghia {:.2}% of the lid velocity ({:.1}s)", 100.0 * worst, t.elapsed().as_secs_f64());
    assert!(worst < 0.02, "deviation {worst:.4} of the lid velocity exceeds 0.02");
}

/// A lid-driven cavity of 256 x 256 fluid cells at Re = U L / nu = `re` (lid velocity 0.1),
/// started impulsively, run in chunks of `chunk` steps up to `steps`. Returns the step at which
/// the state first failed `Stats::sanity` (None if it never did), the largest |u| / U seen while
/// sane, and the relative mass change over the run while sane.
fn cavity_sanity(re: f64, collision: &str, steps: u64, chunk: u64) -> (Option<u64>, f64, f64) {
    let (l, ulid) = (256usize, 0.1f64);
    let tau = 0.5 + 3.0 * ulid * l as f64 / re;
    let mut s = solver(&cavity_scene(l, ulid, tau), &[("solver.collision", collision)]);
    let m0 = s.stats().mass;
    let (mut max_u, mut dm) = (0.0f64, 0.0f64);
    while s.time_step() < steps {
        s.step(chunk).unwrap();
        let st = s.stats();
        if let Err(why) = st.sanity(1.0) {
            println!("cavity Re={re} {collision}: insane at step {}: {why}", s.time_step());
            return (Some(s.time_step()), max_u, dm);
        }
        max_u = max_u.max(st.max_u / ulid);
        dm = dm.max((st.mass / m0 - 1.0).abs());
    }
    (None, max_u, dm)
}

/// The regularized collision keeps a high-Reynolds flow that BGK cannot run. Lid-driven cavity,
/// D2Q9, 256 x 256 fluid cells, Re = 10,000, lid velocity 0.1 (Mach 0.17), tau = 0.5077, for
/// 200,000 steps (78 lid passes). Measured: BGK turns non-finite within 1,000 steps; regularized
/// stays sane with its largest speed 0.80 U (at the lid) and the mass to rounding. The
/// mass-neutral moving wall (`moving_walls`) makes this possible: with Ladd's correction alone
/// the cell in the lid's upstream corner lost 6 w U of mass per step, drew a jet of 1.8 U into
/// the corner and the run blew up after about 4,500 steps.
/// Assertions: BGK fails `Stats::sanity` within 2,000 steps; regularized passes it at every
/// 10,000 steps up to 200,000, with |u| below 1.2 U and mass within 1e-6.
#[test]
fn lid_driven_cavity_re10000_regularized_where_bgk_blows_up() {
    let t = Instant::now();
    let (bgk_fail, _, _) = cavity_sanity(10_000.0, "bgk", 2000, 250);
    println!("cavity Re=10000 bgk: fails at step {bgk_fail:?} ({:.1}s)", t.elapsed().as_secs_f64());
    assert!(bgk_fail.is_some(), "BGK was expected to blow up in this setting");
    let t = Instant::now();
    let (fail, max_u, dm) = cavity_sanity(10_000.0, "regularized", 200_000, 10_000);
    println!(
        "cavity Re=10000 regularized: 200000 steps, largest |u| {max_u:.3} U, mass change {dm:.2e} ({:.1}s)",
        t.elapsed().as_secs_f64()
    );
    assert!(fail.is_none(), "regularized failed at step {fail:?}");
    assert!(max_u < 1.2, "largest speed {max_u:.3} U");
    assert!(dm < 1e-6, "mass changed by {dm:.2e}");
}

// ---------------------------------------------------------------------------------------------
// Obstacle forces
// ---------------------------------------------------------------------------------------------

/// Reference: momentum conservation. In a fully periodic box the only thing that can take up
/// the momentum the body force puts in (F per fluid cell per step with Guo forcing) is the
/// obstacle, so at steady state the momentum-exchange force on it must equal F times the number
/// of fluid cells (and be zero across the force). Tolerance 1e-4 relative (FP32; steady state
/// to a change of 1e-8 per 500 steps, 1e-6 of the velocity).
#[test]
fn obstacle_force_balances_body_force() {
    let cases = [
        (
            "D2Q9 cylinder",
            r#"
[domain]
size = [40, 30]
[fluid]
tau = 0.8
force = [1e-5, 0.0]
[[obstacles]]
shape = "cylinder"
center = [20, 15]
radius = 5.5
"#,
        ),
        (
            "D3Q19 sphere",
            r#"
[domain]
size = [20, 16, 16]
lattice = "D3Q19"
[fluid]
tau = 0.8
force = [0.0, 0.0, 1e-5]
[[obstacles]]
shape = "sphere"
center = [10, 8, 8]
radius = 4.5
"#,
        ),
    ];
    for (label, text) in cases {
        let t = Instant::now();
        let mut s = solver(text, &[]);
        let force = s.params().collide.force;
        let (steps, change) = run_to_steady(s.as_mut(), 500, 1e-8, 100_000);
        let st = s.stats();
        let fluid = s.domain().fluid_cells() as f64;
        let expect: Vec<f64> = force.iter().map(|&f| f64::from(f) * fluid).collect();
        let got = st.forces[0];
        let big = expect.iter().map(|e| e.abs()).fold(0.0, f64::max);
        let err = (0..3).map(|a| (got[a] - expect[a]).abs()).fold(0.0, f64::max) / big;
        println!(
            "force balance {label}: obstacle force [{:.5e}, {:.5e}, {:.5e}], body force \
             on the fluid [{:.5e}, {:.5e}, {:.5e}], relative error {err:.2e}; max|u| {:.4}, \
             {steps} steps (change {change:.1e}) ({:.1}s)",
            got[0],
            got[1],
            got[2],
            expect[0],
            expect[1],
            expect[2],
            st.max_u,
            t.elapsed().as_secs_f64()
        );
        assert!(change < 1e-8, "{label}: not steady");
        assert!(err < 1e-4, "{label}: force balance off by {err:e}");
    }
}

/// Cylinder in a channel, Schaefer & Turek (1996) case 2D-1 scaled to `d` cells per diameter:
/// channel 2.2 x 0.41 (22 d x 4.1 d cells between inlet and outlet and between the walls),
/// cylinder at (0.2, 0.2) from the inlet and the lower wall, parabolic inflow with mean
/// velocity `umean`, Re = umean d / nu = 20. Starts from the inflow parabola everywhere and runs
/// until C_D and C_L (averaged over 100 steps) change by less than 0.1 % and 0.2 % over two
/// successive 1,000-step blocks. Returns (C_D, C_L, steps).
fn schaefer_turek_2d1(d: usize, umean: f64, collision: &str) -> (f64, f64, u64) {
    let h = 41 * d / 10;
    let nx = 22 * d + 1;
    let umax = 1.5 * umean;
    let tau = 0.5 + 3.0 * umean * d as f64 / 20.0;
    let text = format!(
        r#"
[domain]
size = [{nx}, {ny}]
[boundaries]
x_min = {{ type = "inlet", velocity = [{umax}, 0.0], profile = "parabolic" }}
x_max = {{ type = "outlet", density = 1.0 }}
y_min = "wall"
y_max = "wall"
[fluid]
tau = {tau}
[[obstacles]]
shape = "cylinder"
center = [{cx}, {cy}]
radius = {r}
"#,
        ny = h + 2,
        cx = 2 * d,
        cy = 0.5 + 2.0 * d as f64,
        r = d as f64 / 2.0
    );
    let hh = h as f64;
    let mut s = solver_with_init(&text, &[("solver.collision", collision)], |p| {
        let t = (p[1] as f64 - 0.5) / hh;
        (1.0, [(umax * 4.0 * t * (1.0 - t)).max(0.0) as f32, 0.0, 0.0])
    });
    // C = 2 F / (rho U_mean^2 D), rho = 1.
    let q = 0.5 * umean * umean * d as f64;
    let mut hist: Vec<(f64, f64)> = Vec::new();
    loop {
        s.step(900).unwrap();
        let (mut fx, mut fy) = (0.0, 0.0);
        for _ in 0..100 {
            s.step(1).unwrap();
            let f = s.stats().forces[0];
            fx += f[0] / 100.0;
            fy += f[1] / 100.0;
        }
        let (cd, cl) = (fx / q, fy / q);
        assert!(cd.is_finite(), "blew up");
        hist.push((cd, cl));
        let k = hist.len();
        // Both coefficients settled: the lift, 500 times smaller, takes longer than the drag.
        let settled =
            |j: usize| ((hist[k - 1].0 - hist[k - 1 - j].0) / cd).abs() < 1e-3 && ((hist[k - 1].1 - hist[k - 1 - j].1) / cl).abs() < 2e-3;
        if k >= 3 && (1..3).all(settled) {
            return (cd, cl, s.time_step());
        }
        assert!(k < 150, "C_D and C_L did not settle: {hist:?}");
    }
}

/// Reference: Schaefer & Turek (1996), "Benchmark computations of laminar flow around a
/// cylinder", case 2D-1 (Re = 20, steady): C_D in [5.57, 5.59], C_L in [0.0104, 0.0110]
/// (C = 2 F / (rho U_mean^2 D), F from the momentum exchange, `Stats::forces`).
///
/// D2Q9 TRT, interpolated walls (the cylinder's exact distance on every link), U_mean = 0.025
/// (Mach 0.065 at the centreline; at 0.05 compressibility adds ~1.5 % to the drag), D = 10 and
/// 20 cells (tau 0.5375 and 0.575). Measured: C_D 5.705 and 5.604 (+2.2 %, +0.4 %) and C_L
/// 0.0125 and 0.01104 (+18 %, +4.2 %) at D = 10 and 20; the staircase cylinder gave C_D 6.13
/// and 5.87 (+9.8 %, +5.2 %). At D = 20 TRT runs with Lambda = 1/4, which puts the wall where
/// the link distances say whatever the viscosity, and the drag no longer depends on D (the GPU
/// gives 5.6048 at D = 40, scripts/bench-walls.sh). At D = 10 the tau is below 0.5625, where
/// TRT bounds its odd relaxation time for stability (`collision::TRT_MAX_ODD_RATIO`; Lambda
/// 0.09 there, and C_D was +0.3 % with Lambda = 1/4). The test asserts C_D within 1 % at D = 20
/// and 3 % at D = 10, C_L within 5 % at D = 20, and that the lift's error shrinks from D = 10
/// to D = 20.
#[test]
fn cylinder_schaefer_turek_2d1() {
    let (cd_ref, cl_ref) = (5.58, 0.0106);
    let mut errs = Vec::new();
    for d in [10, 20] {
        let t = Instant::now();
        let (cd, cl, steps) = schaefer_turek_2d1(d, 0.025, "trt");
        let (ecd, ecl) = (cd / cd_ref - 1.0, cl / cl_ref - 1.0);
        println!(
            "cylinder 2D-1 D={d}: C_D {cd:.4} ({:+.2}% vs 5.58), C_L {cl:.5} ({:+.1}% vs 0.0106) \
             after {steps} steps ({:.1}s)",
            100.0 * ecd,
            100.0 * ecl,
            t.elapsed().as_secs_f64()
        );
        errs.push((ecd, ecl));
    }
    let (ecd, ecl) = errs[1];
    assert!(errs[1].1.abs() < errs[0].1.abs(), "the lift's error does not shrink with resolution: {errs:?}");
    assert!(errs[0].0.abs() < 0.03, "C_D off by more than 3 % at D = 10: {errs:?}");
    assert!(ecd.abs() < 0.01, "C_D off by {:.2}%", 100.0 * ecd);
    assert!(ecl.abs() < 0.05, "C_L off by {:.1}%", 100.0 * ecl);
}

// ---------------------------------------------------------------------------------------------
// 16-bit storage
// ---------------------------------------------------------------------------------------------

/// Relative L2 difference of the velocity fields of two solvers.
fn rel_l2_u(a: &dyn Solver, b: &dyn Solver) -> f64 {
    let (fa, fb) = (a.fields(), b.fields());
    let (mut d2, mut r2) = (0.0, 0.0);
    for (p, q) in fa.u.iter().zip(&fb.u) {
        for c in 0..3 {
            d2 += f64::from(p[c] - q[c]).powi(2);
            r2 += f64::from(q[c]).powi(2);
        }
    }
    (d2 / r2).sqrt()
}

/// Reference: the FP32 solver on the same scene (DESIGN.md: 16-bit DDF storage, arithmetic in
/// FP32). FP16S keeps 11 significant bits of the shifted DDF (IEEE half of (f - w) * 32768),
/// FP16C 12 bits, so FP16C must come out closer to FP32 than FP16S. Scenes: the Re = 100 lid
/// cavity (62 x 62 fluid cells) at steady state, where the walls and the moving lid take part,
/// and a decaying Taylor-Green vortex after 1,000 steps (its velocity falls to 40% meanwhile,
/// so the rounding errors accumulate against a shrinking signal).
/// Bounds on the relative L2 error of the velocity: FP16S < 5e-3, FP16C < 2.5e-3 (both measure
/// ~1e-3 or less; the bounds are 20 units of FP16S rounding, 2^-12, and half that).
#[test]
fn fp16_storage_matches_fp32() {
    let t = Instant::now();
    let (l, ulid) = (62, 0.1);
    let reference = cavity(l, ulid, "fp32", None);
    let steps = reference.time_step();
    let mut cav = Vec::new();
    for p in ["fp16s", "fp16c"] {
        let s = cavity(l, ulid, p, Some(steps));
        cav.push(rel_l2_u(s.as_ref(), reference.as_ref()));
    }
    let tgv_text = r#"
[domain]
size = [64, 48]
[fluid]
tau = 0.6
[initial]
kind = "taylor_green"
velocity = [0.03, 0.0, 0.0]
"#;
    let mut tgv = Vec::new();
    let mut r = solver(tgv_text, &[]);
    r.step(1000).unwrap();
    for p in ["fp16s", "fp16c"] {
        let mut s = solver(tgv_text, &[("solver.precision", p)]);
        s.step(1000).unwrap();
        tgv.push(rel_l2_u(s.as_ref(), r.as_ref()));
    }
    println!(
        "fp16 vs fp32, relative L2 error of velocity: cavity Re=100 ({steps} steps): FP16S \
         {:.3e}, FP16C {:.3e}; Taylor-Green (1000 steps): FP16S {:.3e}, FP16C {:.3e} ({:.1}s)",
        cav[0],
        cav[1],
        tgv[0],
        tgv[1],
        t.elapsed().as_secs_f64()
    );
    for (label, e) in [("cavity", &cav), ("taylor-green", &tgv)] {
        assert!(e[0] < 5e-3, "{label}: FP16S error {:e}", e[0]);
        assert!(e[1] < 2.5e-3, "{label}: FP16C error {:e}", e[1]);
        assert!(e[1] < e[0], "{label}: FP16C ({:e}) is not closer to FP32 than FP16S ({:e})", e[1], e[0]);
    }
}
