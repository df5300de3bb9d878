//! Tests of the block-forest LBM: the transfers between levels, uniform flow, channel, shear wave, Taylor-Green, lid-driven cavity, obstacles and outflow.

use super::super::criterion::{Criterion, Field};
use super::super::forest::{ForestConfig, Mark};
use super::transfer::Taps;
use super::*;
use crate::lattice::D2Q9;

fn channel(rx: usize, ry: usize, refine_rows: &[usize]) -> BlockForest {
    let mut f = BlockForest::new(ForestConfig { dims: 2, root: [rx, ry, 1], periodic: [true, false, false], max_level: 2, capacity: 4096 })
        .unwrap();
    for y in refine_rows {
        for x in 0..rx {
            f.set_mark((x + rx * y) as u32, Mark::Refine).unwrap();
        }
    }
    f.adapt().unwrap();
    f
}

/// The restriction's sum in the GPU's order (rows to lanes, then pairwise) is the
/// serial tensor sum up to rounding, for the 4-, 3- and 2-tap stencils in 2D and 3D, and
/// fails where the serial one fails.
#[test]
fn row_ordered_tensor_sum_matches_the_serial_one() {
    fn check<L: Lat>() {
        let get = |k: [i32; 3]| {
            let mut g = [0.0f32; MAX_Q];
            for (i, v) in g.iter_mut().enumerate().take(L::Q) {
                let h = (k[0] * 73 + k[1] * 179 + k[2] * 283 + i as i32 * 37).rem_euclid(1000) as f32;
                *v = 0.02 + 1e-4 * h;
            }
            Some(g)
        };
        let stencils: [&[(i32, f32)]; 3] = [
            &[(-1, -1.0 / 16.0), (0, 9.0 / 16.0), (1, 9.0 / 16.0), (2, -1.0 / 16.0)],
            &[(0, 0.375), (1, 0.75), (2, -0.125)],
            &[(0, 0.5), (1, 0.5)],
        ];
        for (sx, sy, sz) in [(0, 0, 0), (1, 0, 2), (2, 2, 2), (0, 2, 1)] {
            let mut taps: Taps = ([[(0, 1.0), (0, 0.0), (0, 0.0), (0, 0.0)]; 3], [1; 3]);
            for (a, st) in [sx, sy, sz].into_iter().enumerate().take(L::D) {
                for (t, &tap) in stencils[st].iter().enumerate() {
                    taps.0[a][t] = tap;
                }
                taps.1[a] = stencils[st].len();
            }
            let (fs, fd) = ([1e-6, 0.0, 0.0], [0.0, 2e-6, 0.0]);
            let serial = AmrLbm::<L>::tensor_sum(&taps, [1, 2, 1], get, fs, fd, 0.7).unwrap();
            let rows = AmrLbm::<L>::tensor_sum_in_lanes(&taps, [1, 2, 1], get, fs, fd, 0.7, AmrLbm::<L>::RESTRICTION_LANES).unwrap();
            for i in 0..L::Q {
                assert!((serial[i] - rows[i]).abs() <= 1e-6 * serial[i].abs(), "D{}: {i}: {} vs {}", L::D, serial[i], rows[i]);
            }
            // A cell inside every one of these stencils without data: both fail.
            let hole = |k: [i32; 3]| if k == [2, 3, 1] { None } else { get(k) };
            assert!(AmrLbm::<L>::tensor_sum(&taps, [1, 2, 1], hole, fs, fd, 0.7).is_none());
            assert!(AmrLbm::<L>::tensor_sum_in_lanes(&taps, [1, 2, 1], hole, fs, fd, 0.7, AmrLbm::<L>::RESTRICTION_LANES).is_none());
        }
    }
    check::<D2Q9>();
    check::<crate::lattice::D3Q19>();
}

/// A uniform flow stays uniform across level jumps: interpolation and averaging keep
/// equilibria.
#[test]
fn uniform_flow_is_preserved_across_levels() {
    let mut f =
        BlockForest::new(ForestConfig { dims: 2, root: [4, 4, 1], periodic: [true, true, false], max_level: 2, capacity: 4096 }).unwrap();
    f.set_mark(5, Mark::Refine).unwrap();
    f.set_mark(6, Mark::Refine).unwrap();
    f.adapt().unwrap();
    let c = f.first_child(5) + 3;
    f.set_mark(c, Mark::Refine).unwrap();
    f.adapt().unwrap();
    assert_eq!(f.finest_level(), 2);
    let u0 = [0.05f32, -0.02, 0.0];
    let mut s = AmrLbm::<D2Q9>::new(f, 0.7, [0.0; 3], |_| (1.0, u0));
    let m0 = s.mass();
    for _ in 0..50 {
        s.step();
    }
    for (x, l, rho, u) in s.leaf_cells() {
        assert!((rho - 1.0).abs() < 1e-5, "rho {rho} at {x:?} level {l}");
        assert!((u[0] - u0[0]).abs() < 1e-5 && (u[1] - u0[1]).abs() < 1e-5, "u {u:?} at {x:?} level {l}");
    }
    assert!((s.mass() - m0).abs() < 1e-4 * m0);
}

/// The same in 3D (D3Q19), with a level-2 block inside a level-1 one.
#[test]
fn uniform_flow_is_preserved_across_levels_3d() {
    use crate::lattice::D3Q19;
    let mut f = BlockForest::new(ForestConfig { dims: 3, root: [2, 2, 2], periodic: [true; 3], max_level: 2, capacity: 4096 }).unwrap();
    f.set_mark(0, Mark::Refine).unwrap();
    f.adapt().unwrap();
    let c = f.first_child(0) + 7;
    f.set_mark(c, Mark::Refine).unwrap();
    f.adapt().unwrap();
    assert_eq!(f.finest_level(), 2);
    let u0 = [0.03f32, -0.02, 0.01];
    let mut s = AmrLbm::<D3Q19>::new(f, 0.6, [0.0; 3], |_| (1.0, u0));
    let m0 = s.mass();
    for _ in 0..10 {
        s.step();
    }
    for (x, l, rho, u) in s.leaf_cells() {
        assert!((rho - 1.0).abs() < 1e-5, "rho {rho} at {x:?} level {l}");
        for a in 0..3 {
            assert!((u[a] - u0[a]).abs() < 1e-5, "u {u:?} at {x:?} level {l}");
        }
    }
    assert!((s.mass() - m0).abs() < 1e-4 * m0);
}

/// Relative L2 error of the x velocity against the parabola after `steps` coarse steps.
fn poiseuille_error(rx: usize, ry: usize, refine_rows: &[usize], tau0: f32, steps: usize) -> (f64, f64) {
    let f = channel(rx, ry, refine_rows);
    let h = (ry * BLOCK) as f64;
    let nu = (f64::from(tau0) - 0.5) / 3.0;
    let umax = 0.04;
    let g = 8.0 * nu * umax / (h * h);
    let mut s = AmrLbm::<D2Q9>::new(f, tau0, [g as f32, 0.0, 0.0], |_| (1.0, [0.0; 3]));
    let m0 = s.mass();
    for _ in 0..steps {
        s.step();
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (x, _, _, u) in s.leaf_cells() {
        let y = x[1];
        let want = g / (2.0 * nu) * y * (h - y);
        num += (f64::from(u[0]) - want).powi(2);
        den += want * want;
    }
    ((num / den).sqrt(), (s.mass() - m0).abs() / m0)
}

fn shear_wave(refine_rows: &[usize], steps: usize) -> f64 {
    let mut f =
        BlockForest::new(ForestConfig { dims: 2, root: [2, 4, 1], periodic: [true, true, false], max_level: 2, capacity: 4096 }).unwrap();
    for y in refine_rows {
        for x in 0..2 {
            f.set_mark((x + 2 * y) as u32, Mark::Refine).unwrap();
        }
    }
    f.adapt().unwrap();
    let h = 16.0;
    let k = 2.0 * std::f64::consts::PI / h;
    let tau0 = 0.8f32;
    let nu = (f64::from(tau0) - 0.5) / 3.0;
    let u0 = 0.01;
    let mut s = AmrLbm::<D2Q9>::new(f, tau0, [0.0; 3], |x| (1.0, [(u0 * (k * x[1]).sin()) as f32, 0.0, 0.0]));
    for _ in 0..steps {
        s.step();
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (x, l, _, u) in s.leaf_cells() {
        let w = 1.0 / f64::from(1u32 << (2 * l));
        num += w * f64::from(u[0]) * (k * x[1]).sin();
        den += w * (k * x[1]).sin().powi(2);
    }
    let amp = num / den;
    let want = u0 * (-nu * k * k * steps as f64).exp();
    amp / want - 1.0
}

/// Decaying Taylor-Green vortex, one wavelength on a periodic grid of `n` x `n` root blocks
/// (4n coarse cells a side), with the central `n/2` x `n/2` blocks refined once if
/// `patch`, or every block if `all`: (relative L2 error of the velocity against the
/// analytic decay, relative mass drift) after `time` decay times `1 / (2 nu k^2)`.
fn taylor_green(n: usize, patch: bool, all: bool, time: f64) -> (f64, f64) {
    let mut f = BlockForest::new(ForestConfig { dims: 2, root: [n, n, 1], periodic: [true, true, false], max_level: 1, capacity: 1 << 14 })
        .unwrap();
    for y in 0..n {
        for x in 0..n {
            let inner = (n / 4..3 * n / 4).contains(&x) && (n / 4..3 * n / 4).contains(&y);
            if all || (patch && inner) {
                f.set_mark((x + n * y) as u32, Mark::Refine).unwrap();
            }
        }
    }
    f.adapt().unwrap();
    let k = 2.0 * std::f64::consts::PI / (n * BLOCK) as f64;
    let tau0 = 0.8f32;
    let nu = (f64::from(tau0) - 0.5) / 3.0;
    let u0 = 0.02;
    let field = |x: [f64; 3], t: f64| {
        let d = (-2.0 * nu * k * k * t).exp();
        let u = [-u0 * d * (k * x[0]).cos() * (k * x[1]).sin(), u0 * d * (k * x[0]).sin() * (k * x[1]).cos()];
        let p = -u0 * u0 * d * d / 4.0 * ((2.0 * k * x[0]).cos() + (2.0 * k * x[1]).cos());
        (1.0 + 3.0 * p, u)
    };
    let mut s = AmrLbm::<D2Q9>::new(f, tau0, [0.0; 3], |x| {
        let (rho, u) = field(x, 0.0);
        (rho as f32, [u[0] as f32, u[1] as f32, 0.0])
    });
    let m0 = s.mass();
    let steps = (time / (2.0 * nu * k * k)).round() as usize;
    for _ in 0..steps {
        s.step();
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (x, l, _, u) in s.leaf_cells() {
        let w = 1.0 / f64::from(1u32 << (2 * l));
        let (_, want) = field(x, steps as f64);
        for a in 0..2 {
            num += w * (f64::from(u[a]) - want[a]).powi(2);
            den += w * want[a] * want[a];
        }
    }
    ((num / den).sqrt(), (s.mass() - m0).abs() / m0)
}

/// Ghia, Ghia & Shin (1982), J. Comput. Phys. 48, 387-411, Re = 100: (y, u / U) on the
/// vertical centreline (Table I) and (x, v / U) on the horizontal one (Table II), the points
/// of `sim-core/tests/solver/physics.rs`.
const GHIA_RE100: [((f64, f64), (f64, f64)); 15] = [
    ((0.0547, -0.03717), (0.0625, 0.09233)),
    ((0.0625, -0.04192), (0.0703, 0.10091)),
    ((0.0703, -0.04775), (0.0781, 0.10890)),
    ((0.1016, -0.06434), (0.0938, 0.12317)),
    ((0.1719, -0.10150), (0.1563, 0.16077)),
    ((0.2813, -0.15662), (0.2266, 0.17507)),
    ((0.4531, -0.21090), (0.2344, 0.17527)),
    ((0.5000, -0.20581), (0.5000, 0.05454)),
    ((0.6172, -0.13641), (0.8047, -0.24533)),
    ((0.7344, 0.00332), (0.8594, -0.22445)),
    ((0.8516, 0.23151), (0.9063, -0.16914)),
    ((0.9531, 0.68717), (0.9453, -0.10313)),
    ((0.9609, 0.73722), (0.9531, -0.08864)),
    ((0.9688, 0.78871), (0.9609, -0.07391)),
    ((0.9766, 0.84123), (0.9688, -0.05906)),
];

/// Velocity component `c` along the centreline across axis `a` (the line where coordinate
/// `a` is half the side `side`), linearly interpolated at `t` (0..1) along the other axis:
/// the two leaf cells that straddle the line at each position are averaged.
fn centreline(cells: &[([f64; 3], u8, f32, [f32; 3])], side: f64, a: usize, c: usize, t: f64) -> f64 {
    let o = 1 - a;
    let mut pts: Vec<(f64, f64)> = cells
        .iter()
        .filter(|(x, l, _, _)| ((x[a] - side / 2.0).abs() - 0.5 / f64::from(1u32 << l)).abs() < 1e-9)
        .map(|(x, _, _, u)| (x[o], f64::from(u[c])))
        .collect();
    pts.sort_by(|p, q| p.0.total_cmp(&q.0));
    let line: Vec<(f64, f64)> = pts.chunks(2).map(|w| (w[0].0, 0.5 * (w[0].1 + w[1].1))).collect();
    let y = t * side;
    let k = line.partition_point(|p| p.0 < y).clamp(1, line.len() - 1);
    let ((y0, u0), (y1, u1)) = (line[k - 1], line[k]);
    u0 + (u1 - u0) * (y - y0) / (y1 - y0)
}

/// Lid-driven cavity at Re = 100 on `n` x `n` root blocks with the block rows `refine`
/// refined once: the largest deviation from Ghia's 30 centreline points, in units of the
/// lid velocity, after `steps` coarse steps.
fn cavity(n: usize, refine: &[usize], steps: usize) -> f64 {
    cavity_run(n, refine, steps, None).0
}

/// [`cavity`], adapting every `adapt.1` coarse steps to the block-max vorticity with
/// threshold `adapt.0` (level 1 at most) if given: (largest deviation from Ghia, leaf
/// blocks at the end, relative mass drift).
fn cavity_run(n: usize, refine: &[usize], steps: usize, adapt: Option<(f32, usize)>) -> (f64, usize, f64) {
    cavity_run_in(n, refine, steps, adapt, Precision::Fp32)
}

fn cavity_run_in(n: usize, refine: &[usize], steps: usize, adapt: Option<(f32, usize)>, store: Precision) -> (f64, usize, f64) {
    let mut f = BlockForest::new(ForestConfig { dims: 2, root: [n, n, 1], periodic: [false; 3], max_level: 1, capacity: 1 << 14 }).unwrap();
    for &y in refine {
        for x in 0..n {
            f.set_mark((x + n * y) as u32, Mark::Refine).unwrap();
        }
    }
    f.adapt().unwrap();
    let side = (n * BLOCK) as f64;
    let ulid = 0.1f32;
    let nu = f64::from(ulid) * side / 100.0;
    let mut s = AmrLbm::<D2Q9>::new(f, (3.0 * nu + 0.5) as f32, [0.0; 3], |_| (1.0, [0.0; 3]));
    s.set_wall_velocity(1, true, [ulid, 0.0, 0.0]);
    s.set_storage(store);
    let m0 = s.mass();
    for t in 1..=steps {
        s.step();
        if let Some((threshold, every)) = adapt {
            if t % every == 0 {
                let crit = Criterion { field: Field::Vorticity, threshold, coarsen: 1.0, max_level: 1, every: every as u64 };
                let w = s.block_vorticity();
                let target = s.forest().targets(|b| w[b as usize], &crit, None);
                s.adapt_to(&target).unwrap();
            }
        }
    }
    let cells = s.leaf_cells();
    let u = f64::from(ulid);
    let worst = GHIA_RE100
        .iter()
        .map(|&((y, ug), (x, vg))| {
            let um = centreline(&cells, side, 0, 0, y) / u;
            let vm = centreline(&cells, side, 1, 1, x) / u;
            (um - ug).abs().max((vm - vg).abs())
        })
        .fold(0.0, f64::max);
    (worst, s.forest().leaves().len(), (s.mass() - m0).abs() / m0)
}

/// Accuracy diagnostics of the level coupling (slow; run with `--ignored --nocapture`):
/// Poiseuille at two resolutions, a decaying shear wave across a refined band, and the
/// all-refined channel against a uniform fine one (identical: the level machinery itself
/// is exact).
#[test]
#[ignore = "diagnostic, prints numbers"]
fn coupling_accuracy_diagnostics() {
    let steps = 6000;
    let (e1, _) = poiseuille_error(2, 4, &[0, 3], 0.8, steps);
    let (u1, _) = poiseuille_error(2, 4, &[], 0.8, steps);
    let (e2, _) = poiseuille_error(4, 8, &[0, 1, 6, 7], 0.8, steps * 4);
    let (u2, _) = poiseuille_error(4, 8, &[], 0.8, steps * 4);
    eprintln!("poiseuille L2: H=16 refined {e1:.2e} uniform {u1:.2e}; H=32 refined {e2:.2e} uniform {u2:.2e}");
    let (all, _) = poiseuille_error(2, 4, &[0, 1, 2, 3], 0.8, steps);
    let (fine, _) = poiseuille_error(2, 8, &[], 1.1, steps * 2);
    eprintln!("all refined {all:.3e} vs uniform fine {fine:.3e}");
    eprintln!(
        "shear wave amplitude error after 100 steps: uniform {:.2e}, refined band {:.2e}",
        shear_wave(&[], 100),
        shear_wave(&[1, 2], 100)
    );
    for refine in [&[][..], &[6, 7][..]] {
        let (d, _, dm) = cavity_run(8, refine, 4000, None);
        eprintln!("static cavity, rows {refine:?} refined: worst {d:.4}, mass drift {dm:.1e}");
    }
    for threshold in [0.005f32, 0.01, 0.02, 0.04] {
        let t = std::time::Instant::now();
        let (d, leaves, dm) = cavity_run(8, &[], 4000, Some((threshold, 100)));
        eprintln!(
            "adaptive cavity, vorticity threshold {threshold}: worst {d:.4}, {leaves} leaves at the end, mass drift {dm:.1e} ({:.1}s)",
            t.elapsed().as_secs_f64()
        );
    }
    let t = std::time::Instant::now();
    let (c, r, a) = (cavity(8, &[], 4000), cavity(8, &[6, 7], 4000), cavity(8, &[0, 1, 2, 3, 4, 5, 6, 7], 4000));
    eprintln!(
        "cavity Re=100, 32 coarse cells, 4000 steps: worst deviation from Ghia uniform coarse {c:.4}, lid rows refined {r:.4}, all refined {a:.4} ({:.1}s)",
        t.elapsed().as_secs_f64()
    );
    for n in [4, 8] {
        let (c, _) = taylor_green(n, false, false, 1.0);
        let (p, dm) = taylor_green(n, true, false, 1.0);
        let (f, _) = taylor_green(n, false, true, 1.0);
        eprintln!(
            "taylor-green L2 after one decay time, {} coarse cells: uniform coarse {c:.3e}, central patch {p:.3e} (mass drift {dm:.1e}), uniform fine {f:.3e}",
            4 * n
        );
    }
}

/// Force-driven channel flow with the near-wall rows refined once converges like the
/// uniform fine channel: at H = 16 coarse cells its error is below the uniform coarse
/// grid's and within 1.5x of the uniform fine grid's (every row refined), halving the
/// spacing divides it by more than 3.5 (second order), and mass is kept.
#[test]
fn poiseuille_with_refined_walls_converges_like_the_fine_grid() {
    let steps = 6000;
    let (e16, dm) = poiseuille_error(2, 4, &[0, 3], 0.8, steps);
    let (coarse, _) = poiseuille_error(2, 4, &[], 0.8, steps);
    let (fine, _) = poiseuille_error(2, 4, &[0, 1, 2, 3], 0.8, steps);
    let (e32, dm32) = poiseuille_error(4, 8, &[0, 1, 6, 7], 0.8, 4 * steps);
    assert!(e16 < coarse, "refined walls {e16} vs uniform coarse {coarse}");
    assert!(e16 < 1.5 * fine, "refined walls {e16} vs uniform fine {fine}");
    assert!(e32 < e16 / 3.5, "H = 32: {e32}, H = 16: {e16}");
    assert!(dm < 1e-5 && dm32 < 1e-5, "mass drift {dm}, {dm32}");
}

/// Relative L2 error of the x velocity against the parabola and the relative mass drift of
/// a force-driven D3Q19 channel one root block deep and wide (periodic along x and z, walls
/// at y = 0 and H), with the root block rows `refine_rows` refined once.
fn poiseuille_error_3d(ry: usize, refine_rows: &[usize], steps: usize) -> (f64, f64) {
    use crate::lattice::D3Q19;
    let mut f =
        BlockForest::new(ForestConfig { dims: 3, root: [1, ry, 1], periodic: [true, false, true], max_level: 1, capacity: 4096 }).unwrap();
    for &y in refine_rows {
        f.set_mark(y as u32, Mark::Refine).unwrap();
    }
    f.adapt().unwrap();
    let h = (ry * BLOCK) as f64;
    let tau0 = 0.8f32;
    let nu = (f64::from(tau0) - 0.5) / 3.0;
    let g = 8.0 * nu * 0.04 / (h * h);
    let mut s = AmrLbm::<D3Q19>::new(f, tau0, [g as f32, 0.0, 0.0], |_| (1.0, [0.0; 3]));
    let m0 = s.mass();
    for _ in 0..steps {
        s.step();
    }
    let (mut num, mut den) = (0.0, 0.0);
    for (x, l, _, u) in s.leaf_cells() {
        // Cells weighted by their volume (a fine cell is 1/8 of a coarse one).
        let w = 1.0 / f64::from(1u32 << (3 * l));
        let want = g / (2.0 * nu) * x[1] * (h - x[1]);
        num += w * (f64::from(u[0]) - want).powi(2);
        den += w * want * want;
        assert!(u[1].abs() < 1e-6 && u[2].abs() < 1e-6, "cross flow {u:?} at {x:?}");
    }
    ((num / den).sqrt(), (s.mass() - m0).abs() / m0)
}

/// The 3D channel (D3Q19, H = 16 coarse cells) with its wall rows refined: more accurate
/// than the uniform coarse grid, within 1.5x of the uniform fine grid, mass kept.
#[test]
fn poiseuille_3d_with_refined_walls_is_as_accurate_as_the_fine_grid() {
    let steps = 5000;
    let (walls, dm) = poiseuille_error_3d(4, &[0, 3], steps);
    let (coarse, _) = poiseuille_error_3d(4, &[], steps);
    let (fine, _) = poiseuille_error_3d(4, &[0, 1, 2, 3], steps);
    eprintln!("3D Poiseuille L2: refined walls {walls:.3e}, uniform coarse {coarse:.3e}, uniform fine {fine:.3e}, mass drift {dm:.1e}");
    assert!(walls < coarse, "refined walls {walls} vs uniform coarse {coarse}");
    assert!(walls < 1.5 * fine, "refined walls {walls} vs uniform fine {fine}");
    assert!(dm < 1e-5, "mass drift {dm}");
}

/// A decaying Taylor-Green vortex with the central quarter of the domain refined once
/// stays at least as accurate as the uniform coarse grid and converges at second order like
/// it (error divided by about 4 when the grid is doubled); mass is kept to 1e-6.
#[test]
fn taylor_green_with_a_refined_patch_converges_at_second_order() {
    let (c16, _) = taylor_green(4, false, false, 1.0);
    let (p16, dm16) = taylor_green(4, true, false, 1.0);
    let (c32, _) = taylor_green(8, false, false, 1.0);
    let (p32, dm32) = taylor_green(8, true, false, 1.0);
    assert!(p16 < c16 && p32 < c32, "patch {p16}, {p32} vs uniform coarse {c16}, {c32}");
    assert!(p32 < p16 / 3.5, "32 cells: {p32}, 16 cells: {p16}");
    assert!(dm16 < 1e-6 && dm32 < 1e-6, "mass drift {dm16}, {dm32}");
}

/// Lid-driven cavity at Re = 100 (32 coarse cells a side, lid velocity 0.1) with the two
/// block rows under the lid refined once: every one of Ghia's 30 centreline points within
/// 1 % of the lid velocity (measured 0.58 %), closer than the uniform coarse grid (0.91 %;
/// the uniform fine grid: 0.59 %).
#[test]
fn lid_driven_cavity_with_a_refined_lid_matches_ghia() {
    let coarse = cavity(8, &[], 4000);
    let lid = cavity(8, &[6, 7], 4000);
    assert!(lid < 0.01, "largest deviation {lid} of the lid velocity");
    assert!(lid < coarse, "refined lid {lid} vs uniform coarse {coarse}");
}

/// The same cavity adapted every 100 coarse steps to the block-max vorticity (threshold
/// 0.01 per coarse time step, level 1 at most), from the uniform coarse grid: within 1 % of
/// Ghia (measured 0.70 %, uniform coarse 0.91 %) with fewer leaves than the uniform fine
/// grid (measured 118 of 256), and the relative mass drift below 1e-3 (measured 7.6e-5).
#[test]
fn adaptive_lid_driven_cavity_matches_ghia() {
    let (coarse, _, _) = cavity_run(8, &[], 4000, None);
    let (worst, leaves, dm) = cavity_run(8, &[], 4000, Some((0.01, 100)));
    assert!(worst < 0.01 && worst < coarse, "largest deviation {worst} (uniform coarse {coarse})");
    assert!(leaves > 64 && leaves < 256, "{leaves} leaves");
    assert!(dm < 1e-3, "mass drift {dm}");
}

/// The adaptive cavity with its DDFs stored in 16 bits (the GPU's FP16S and FP16C buffers,
/// rounded the same way here) stays as close to Ghia et al. as in FP32.
#[test]
fn adaptive_lid_driven_cavity_in_16_bits_matches_ghia() {
    let (fp32, leaves32, _) = cavity_run(8, &[], 4000, Some((0.01, 100)));
    for store in [Precision::Fp16s, Precision::Fp16c] {
        let (worst, leaves, dm) = cavity_run_in(8, &[], 4000, Some((0.01, 100)), store);
        eprintln!("{store}: largest deviation {worst:.5} (fp32 {fp32:.5}), {leaves} leaves (fp32 {leaves32}), mass drift {dm:.2e}");
        assert!(worst < 0.01 && (worst - fp32).abs() < 2e-3, "{store}: largest deviation {worst} (fp32 {fp32})");
        assert!(leaves > 64 && leaves < 256, "{store}: {leaves} leaves");
        assert!(dm < 1e-3, "{store}: mass drift {dm}");
    }
}

/// The fully refined channel (every root refined, level-0 parents not stepped) is the
/// uniform fine channel: tau and force per level are right.
#[test]
fn all_refined_channel_equals_uniform_fine_channel() {
    let (all, _) = poiseuille_error(2, 4, &[0, 1, 2, 3], 0.8, 1500);
    let (fine, _) = poiseuille_error(2, 8, &[], 1.1, 3000);
    assert!((all - fine).abs() < 1e-6 * fine.max(1e-3), "all refined {all} vs uniform fine {fine}");
}

/// A forest on `root` blocks (2D) with the leaves whose boxes meet `region(level)` refined
/// level by level up to `levels`; `region` gives (lo, hi) in cells of level 0.
fn refined_forest(root: [usize; 3], periodic: [bool; 3], levels: u8, region: impl Fn(u8) -> ([f64; 2], [f64; 2])) -> BlockForest {
    let mut f = BlockForest::new(ForestConfig { dims: 2, root, periodic, max_level: levels, capacity: 1 << 16 }).unwrap();
    for l in 0..levels {
        let (lo, hi) = region(l + 1);
        for id in f.leaves() {
            let (b0, s) = f.block_box(id);
            if f.level(id) == l && (0..2).all(|a| b0[a] < hi[a] && b0[a] + s > lo[a]) {
                f.set_mark(id, Mark::Refine).unwrap();
            }
        }
        f.adapt().unwrap();
    }
    f
}

/// Body-force-driven flow through a periodic array of square obstacles (side `side` cells
/// of level 0, centred in a periodic box of `n` x `n` root blocks), with `levels` levels
/// refined around the obstacle (`all`: every block), `tau0` and force `g0` on level 0:
/// (obstacle force, body force on the fluid, both in units of level 0) after `steps`
/// coarse steps.
fn obstacle_array(n: usize, side: f64, levels: u8, all: bool, tau0: f32, g0: f32, steps: usize) -> ([f64; 3], f64) {
    let c = (n * BLOCK) as f64 / 2.0;
    let f = refined_forest([n, n, 1], [true, true, false], levels, |l| {
        let m = if all { 1e9 } else { side / 2.0 + 4.0 / f64::from(l) };
        ([c - m, c - m], [c + m, c + m])
    });
    let mut s = AmrLbm::<D2Q9>::new(f, tau0, [g0, 0.0, 0.0], |_| (1.0, [0.0; 3]));
    let h = side / 2.0;
    s.set_solid(move |x, _| (x[0] - c).abs() < h && (x[1] - c).abs() < h);
    for _ in 0..steps {
        s.step();
    }
    let fluid: f64 = s.leaf_cells().iter().map(|(_, l, _, _)| 1.0 / f64::from(1u32 << (2 * u32::from(*l)))).sum();
    (s.obstacle_force(), f64::from(g0) * fluid)
}

/// Without obstacles the obstacle force is zero; with one, the fully refined problem's force
/// (level 1, converted to units of level 0) is the uniform fine grid's (the same problem on
/// twice the root blocks, in its own units, times 2^{-(D-1)}) to rounding, and at steady
/// state the force balances the body force on the fluid, also with only the obstacle's
/// surroundings refined (one and two levels): the level scaling of the momentum exchange.
#[test]
fn obstacle_force_balances_the_body_force_on_every_level() {
    let mut s = AmrLbm::<D2Q9>::new(channel(2, 2, &[1]), 0.8, [1e-5, 0.0, 0.0], |_| (1.0, [0.03, 0.0, 0.0]));
    assert_eq!(s.obstacle_force(), [0.0; 3]);
    s.set_solid(|_, _| false);
    for _ in 0..10 {
        s.step();
    }
    assert_eq!(s.obstacle_force(), [0.0; 3]);
    let g = 2e-6f32;
    // Fully refined (2 x 2 roots, 16 fine cells a side, tau 0.8 and force g on level 1)
    // against uniform (4 x 4 roots, the same on level 0), over the same time.
    let (fa, ba) = obstacle_array(2, 2.0, 1, true, 0.65, 2.0 * g, 1000);
    let (fb, bb) = obstacle_array(4, 4.0, 0, false, 0.8, g, 2000);
    assert!((fa[0] - fb[0] / 2.0).abs() < 1e-4 * fa[0].abs(), "all refined {fa:?} vs uniform fine {fb:?} / 2");
    assert!((ba - bb / 2.0).abs() < 1e-9 * ba, "body forces {ba} vs {bb} / 2");
    assert!((fa[0] / ba - 1.0).abs() < 2e-3 && fa[1].abs() < 1e-4 * fa[0], "obstacle force {fa:?} vs body force {ba}");
    // Refined around the obstacle only, one and two levels.
    for levels in [1u8, 2] {
        let (f, b) = obstacle_array(4, 4.0, levels, false, 0.8, g, 1000);
        eprintln!("{levels} levels around the obstacle: force {f:?}, body force {b}");
        assert!((f[0] / b - 1.0).abs() < 1e-2 && f[1].abs() < 1e-3 * f[0], "{levels} levels: obstacle force {f:?} vs body force {b}");
    }
}

/// A channel with a velocity inlet (a moving wall) on the left, far-field walls moving with
/// the inflow, and an outflow face on the right (blocks along it refined, as the paper does):
/// started at rest, the flow becomes the uniform inflow with the outflow's density.
#[test]
fn outflow_face_passes_a_uniform_stream() {
    let u0 = 0.05f32;
    let f = refined_forest([8, 4, 1], [false; 3], 1, |_| ([28.0, 0.0], [32.0, 16.0]));
    let mut s = AmrLbm::<D2Q9>::new(f, 0.6, [0.0; 3], |_| (1.0, [0.0; 3]));
    s.set_wall_velocity(0, false, [u0, 0.0, 0.0]);
    s.set_wall_velocity(1, false, [u0, 0.0, 0.0]);
    s.set_wall_velocity(1, true, [u0, 0.0, 0.0]);
    s.set_outflow(0, true, 1.0);
    for _ in 0..3000 {
        s.step();
    }
    for (x, l, rho, u) in s.leaf_cells() {
        assert!((u[0] - u0).abs() < 1e-3 * u0 && u[1].abs() < 1e-3 * u0, "u {u:?} at {x:?} level {l}");
        assert!((rho - 1.0).abs() < 1e-4, "rho {rho} at {x:?} level {l}");
    }
}

/// Flow past a square cylinder (2D, D2Q9) in a channel of `len` x `height` cylinder sides,
/// the cylinder's centre `front` sides behind the inlet and centred across, side `d0`
/// cells of level 0 and `levels` levels refined around it and its near wake; inlet and far
/// field moving walls at `u`, outflow (density 1) on the right. Runs `periods` estimated
/// shedding periods (St = 0.15) and measures over the last `measure` of them.
struct Cylinder {
    st: f64,
    cd: f64,
    cl_amp: f64,
    cells: usize,
    leaves: usize,
    steps: usize,
    secs: f64,
}

#[allow(clippy::too_many_arguments)]
fn square_cylinder_run(
    d0: usize,
    levels: u8,
    len: usize,
    height: usize,
    front: f64,
    re: f64,
    u: f64,
    periods: f64,
    measure: f64,
) -> Cylinder {
    let t0 = std::time::Instant::now();
    let d = d0 as f64;
    let (xc, yc) = (front * d, height as f64 * d / 2.0);
    let f = refined_forest([len * d0 / BLOCK, height * d0 / BLOCK, 1], [false; 3], levels, |l| {
        // Level 1: from 1.5 D before the cylinder to 8 D behind it, +-2 D across; each
        // further level a smaller box.
        let s = f64::from(l - 1);
        let (back, side, fore) = (8.0 / (1.0 + s), 2.0 / (1.0 + 0.5 * s), 1.5 / (1.0 + 0.5 * s));
        ([xc - fore * d, yc - side * d], [xc + back * d, yc + side * d])
    });
    let scale = f64::from(1u32 << levels);
    // nu in level-0 units: U D / Re.
    let nu0 = u * d / re;
    let tau0 = (3.0 * nu0 + 0.5) as f32;
    let uf = u as f32;
    let mut s = AmrLbm::<D2Q9>::new(f, tau0, [0.0; 3], |x| {
        // A small asymmetric kick in the near wake starts the shedding early.
        let r2 = ((x[0] - xc - d).powi(2) + (x[1] - yc).powi(2)) / (d * d);
        (1.0, [uf, (0.1 * u * (-r2).exp()) as f32, 0.0])
    });
    let h = d / 2.0;
    s.set_solid(move |x, _| (x[0] - xc).abs() < h && (x[1] - yc).abs() < h);
    s.set_wall_velocity(0, false, [uf, 0.0, 0.0]);
    s.set_wall_velocity(1, false, [uf, 0.0, 0.0]);
    s.set_wall_velocity(1, true, [uf, 0.0, 0.0]);
    s.set_outflow(0, true, 1.0);
    let period = d / (0.15 * u);
    let steps = (periods * period).round() as usize;
    let from = steps - (measure * period).round() as usize;
    let mut fx = Vec::new();
    let mut fy = Vec::new();
    for t in 0..steps {
        s.step();
        if t >= from {
            let f = s.obstacle_force();
            fx.push(f[0]);
            fy.push(f[1]);
        }
    }
    let q = 0.5 * u * u * d;
    let cd = fx.iter().sum::<f64>() / fx.len() as f64 / q;
    let mean_y = fy.iter().sum::<f64>() / fy.len() as f64;
    // Upward zero crossings of the lift (linearly interpolated): the mean spacing is the
    // period.
    let ups: Vec<f64> = fy
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[0] - mean_y < 0.0 && w[1] - mean_y >= 0.0)
        .map(|(k, w)| k as f64 + (mean_y - w[0]) / (w[1] - w[0]))
        .collect();
    let st = if ups.len() >= 2 { d * (ups.len() - 1) as f64 / ((ups[ups.len() - 1] - ups[0]) * u) } else { f64::NAN };
    let cl_amp = fy.iter().map(|y| (y - mean_y).abs()).fold(0.0, f64::max) / q;
    let cells = s.leaf_cells().len();
    let leaves = s.forest().leaves().len();
    let _ = scale;
    Cylinder { st, cd, cl_amp, cells, leaves, steps, secs: t0.elapsed().as_secs_f64() }
}

/// Square cylinder at Re = 100 (run with `--ignored --nocapture`): prints St, Cd, the lift
/// amplitude, blockage, resolution, cells and runtime for a few configurations.
#[test]
#[ignore = "diagnostic, prints numbers"]
fn square_cylinder() {
    let cfg: Vec<(usize, u8, usize, usize, f64, f64, f64)> = match std::env::var("CYL") {
        Ok(v) => {
            let p: Vec<f64> = v.split(',').map(|x| x.trim().parse().unwrap()).collect();
            vec![(p[0] as usize, p[1] as u8, p[2] as usize, p[3] as usize, p[4], p[5], p[6])]
        }
        Err(_) => vec![(8, 1, 20, 10, 6.0, 0.1, 30.0)],
    };
    for (d0, levels, len, height, front, u, periods) in cfg {
        let r = square_cylinder_run(d0, levels, len, height, front, 100.0, u, periods, periods / 3.0);
        eprintln!(
            "square cylinder Re=100: D = {d0} coarse / {} fine cells, {levels} levels, {len} x {height} D (blockage {:.3}), U = {u}: St {:.4}, Cd {:.4}, Cl amplitude {:.3}; {} leaf cells, {} leaves, {} coarse steps, {:.1} s",
            d0 << levels,
            1.0 / height as f64,
            r.st,
            r.cd,
            r.cl_amp,
            r.cells,
            r.leaves,
            r.steps,
            r.secs
        );
    }
}
