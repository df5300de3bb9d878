//! Cell edits of a running simulation (`Solver::edit_cells`): every scheme continues exactly as
//! One-Step Pull does, at odd and even time steps; cells that stay fluid keep their state bit
//! for bit; mass changes by exactly the cells added and removed; refused edits change nothing.

use crate::common::*;
use sim_core::domain::{id_of, is_solid, kind, kind_of};
use sim_core::schemes::Scheme;
use sim_core::{CellEdit, EditTo, Solver};

const SCENE_2D: &str = r#"
[domain]
size = [36, 22]
[boundaries]
x_min = { type = "inlet", velocity = [0.04, 0.0], profile = "parabolic" }
x_max = { type = "outlet", density = 1.0 }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.05, 0.0] }
[fluid]
tau = 0.62
[[obstacles]]
name = "cylinder"
shape = "cylinder"
center = [10, 10]
radius = 3.5
[[obstacles]]
shape = "box"
min = [24, 3]
max = [26, 6]
"#;

const SCENE_3D: &str = r#"
[domain]
size = [16, 11, 9]
[boundaries]
x_min = { type = "inlet", velocity = [0.03, 0.0, 0.0] }
x_max = { type = "outlet" }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.04, 0.0, 0.01] }
[fluid]
tau = 0.65
[[obstacles]]
name = "sphere"
shape = "sphere"
center = [6, 5, 4]
radius = 2.2
"#;

/// The edits every scheme gets, at steps 101 (odd), 151 (odd) and 202 (even).
fn run_with_edits(s: &mut dyn Solver, is_3d: bool) -> Vec<(usize, usize, f64)> {
    let mut reports = Vec::new();
    let mut rep = |s: &mut dyn Solver, e: CellEdit| {
        let r = s.edit_cells(&e).unwrap_or_else(|e| panic!("{e}"));
        reports.push((r.became_solid(), r.became_fluid(), r.mass_added - r.mass_removed));
    };
    let (a, b) = if is_3d { ([11.0, 5.0, 4.0], [6.0, 5.0, 4.0]) } else { ([18.0, 12.0, 0.0], [10.0, 10.0, 0.0]) };
    s.step(101).unwrap();
    // Draw a new obstacle in the wake (odd time step).
    let e = CellEdit { cells: ball(s, a, 2.6), to: EditTo::Solid("drawn".into()) };
    rep(s, e);
    s.step(50).unwrap();
    // Erase half of the scene obstacle and a corner of the drawn one (odd).
    let cells: Vec<usize> =
        ball(s, b, 4.0).into_iter().chain(ball(s, a, 1.2)).filter(|&i| s.domain().coords(i)[0] as f32 >= b[0]).collect();
    let e = CellEdit { cells, to: EditTo::Fluid };
    rep(s, e);
    s.step(51).unwrap();
    // Grow the scene obstacle again, by id (even).
    let e = CellEdit { cells: ball(s, [b[0] + 2.0, b[1], b[2]], 2.0), to: EditTo::SolidId(1) };
    rep(s, e);
    s.step(200).unwrap();
    reports
}

fn check_schemes(scene: &str, lattice: &str, precision: &str, tol: f64) {
    let is_3d = lattice != "D2Q9";
    let base = [("domain.lattice", lattice), ("solver.precision", precision), ("solver.ghost_block", "4")];
    // LBM-Ghost keeps obstacle walls half-way: it is compared with a staircase reference.
    let mut staircase = solver(scene, &[base[0], base[1], ("solver.scheme", "one_step_pull"), ("solver.walls", "staircase")]);
    let want_staircase = run_with_edits(staircase.as_mut(), is_3d);
    let mut curved = solver(scene, &[base[0], base[1], ("solver.scheme", "one_step_pull")]);
    let want_curved = run_with_edits(curved.as_mut(), is_3d);
    let (reference, want) = (&curved, &want_curved);
    assert!(want.iter().all(|r| r.0 + r.1 > 0), "every edit changes cells: {want:?}");
    let st = reference.stats();
    assert!(st.max_u > 0.01 && st.max_u < 0.2, "the flow moves sensibly: {st:?}");
    assert_eq!(reference.domain().obstacles.last().map(String::as_str), Some("drawn"));
    for sc in Scheme::ALL.into_iter().filter(|&s| s != Scheme::OneStepPull) {
        let (reference, want) = if sc == Scheme::Ghost { (&staircase, &want_staircase) } else { (reference, want) };
        let mut other = solver(scene, &[base[0], base[1], base[2], ("solver.scheme", sc.name())]);
        let got = run_with_edits(other.as_mut(), is_3d);
        for (w, g) in want.iter().zip(&got) {
            assert_eq!((w.0, w.1), (g.0, g.1), "{lattice} {sc}: same cells change");
            assert!((w.2 - g.2).abs() < 1e-4, "{lattice} {sc}: mass change {} vs {}", w.2, g.2);
        }
        assert_eq!(reference.domain().flags, other.domain().flags, "{lattice} {sc}: same flags");
        let (dr, du) = max_field_diff(reference.as_ref(), other.as_ref());
        assert!(dr <= tol && du <= tol, "{lattice} {precision} {sc}: differs from one_step_pull by rho {dr:e}, u {du:e}");
        let (fa, fb) = (reference.stats().forces, other.stats().forces);
        assert_eq!(fa.len(), fb.len());
        for (a, b) in fa.iter().zip(&fb) {
            for c in 0..3 {
                assert!((a[c] - b[c]).abs() <= 1e-6 + 1e-4 * a[c].abs(), "{lattice} {sc}: force {a:?} vs {b:?}");
            }
        }
    }
}

#[test]
fn edits_keep_every_scheme_equal_to_one_step_pull_d2q9() {
    check_schemes(SCENE_2D, "D2Q9", "fp32", 1e-6);
    check_schemes(SCENE_2D, "D2Q9", "fp16s", 1e-6);
}

#[test]
fn edits_keep_every_scheme_equal_to_one_step_pull_d3q19() {
    check_schemes(SCENE_3D, "D3Q19", "fp32", 1e-6);
}

#[test]
fn edits_keep_every_scheme_equal_to_one_step_pull_d3q27() {
    check_schemes(SCENE_3D, "D3Q27", "fp32", 1e-6);
}

/// Cells outside an edit keep density and velocity bit for bit; mass changes by exactly what
/// the report says; new fluid cells start at rest with a density between their neighbours'.
/// (Staircase walls: with interpolated walls a cell next to an erased or added piece of a
/// shape sees a different wall, so its fields legitimately change.)
#[test]
fn edit_changes_mass_by_exactly_the_cells_added_and_removed() {
    for sc in Scheme::ALL {
        let mut s = solver(SCENE_2D, &[("solver.scheme", sc.name()), ("solver.ghost_block", "5"), ("solver.walls", "staircase")]);
        s.step(37).unwrap();
        for e in [
            CellEdit { cells: ball(s.as_ref(), [10.0, 10.0, 0.0], 4.0), to: EditTo::Fluid },
            CellEdit { cells: ball(s.as_ref(), [20.0, 14.0, 0.0], 3.0), to: EditTo::Solid("drawn".into()) },
        ] {
            let (f0, m0) = (s.fields(), s.stats().mass);
            let r = s.edit_cells(&e).unwrap();
            let (f1, m1) = (s.fields(), s.stats().mass);
            assert!(!r.changed.is_empty());
            let changed: std::collections::HashSet<usize> = r.changed.iter().map(|c| c.0).collect();
            for i in 0..f0.rho.len() {
                if !changed.contains(&i) {
                    assert_eq!(f0.rho[i].to_bits(), f1.rho[i].to_bits(), "{sc}: cell {i} density changed");
                    assert_eq!(f0.u[i], f1.u[i], "{sc}: cell {i} velocity changed");
                    assert_eq!(f0.solid[i], f1.solid[i]);
                }
            }
            let want = r.mass_added - r.mass_removed;
            assert!((m1 - m0 - want).abs() < 1e-9 * m0, "{sc}: mass went {m0} -> {m1}, the report says {want:+}");
            if e.to == EditTo::Fluid {
                assert!(r.mass_added > 0.9 * changed.len() as f64 && r.mass_removed == 0.0);
                for &i in &changed {
                    assert!(!f1.solid[i] && f1.u[i].iter().all(|u| u.abs() < 1e-6), "{sc}: new fluid cell {i} at rest: {:?}", f1.u[i]);
                    let (lo, hi) = f0
                        .rho
                        .iter()
                        .zip(&f0.solid)
                        .filter(|(_, s)| !**s)
                        .fold((f32::MAX, f32::MIN), |(l, h), (r, _)| (l.min(*r), h.max(*r)));
                    assert!(
                        f1.rho[i] >= lo - 1e-6 && f1.rho[i] <= hi + 1e-6,
                        "{sc}: new fluid density {} outside the fluid's {lo}..{hi}",
                        f1.rho[i]
                    );
                }
            } else {
                assert!(r.mass_added == 0.0 && r.mass_removed > 0.9 * changed.len() as f64);
                assert!(changed.iter().all(|&i| f1.solid[i]));
            }
        }
        // Stepping on conserves what is there: the run stays finite and moving.
        s.step(100).unwrap();
        assert!(!s.stats().blown_up());
    }
}

/// In a closed box the mass after an edit stays constant, and a fluid cell deep inside a
/// removed obstacle (no fluid neighbour) starts at density 1.
#[test]
fn closed_box_conserves_the_mass_after_edits() {
    let scene = r#"
[domain]
size = [24, 20]
[boundaries]
x_min = "wall"
x_max = "wall"
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.06, 0.0] }
[fluid]
tau = 0.7
[[obstacles]]
shape = "box"
min = [8, 6]
max = [15, 13]
"#;
    for sc in [Scheme::EsotericPull, Scheme::Aa, Scheme::Swap] {
        let mut s = solver(scene, &[("solver.scheme", sc.name())]);
        s.step(120).unwrap();
        let centre = s.domain().index(11, 9, 0);
        let r = s.edit_cells(&CellEdit { cells: ball(s.as_ref(), [11.5, 9.5, 0.0], 2.0), to: EditTo::Fluid }).unwrap();
        assert_eq!(r.became_fluid(), 12);
        assert_eq!(s.fields().rho[centre], 1.0, "no fluid neighbour: density 1");
        s.edit_cells(&CellEdit { cells: ball(s.as_ref(), [4.0, 16.0, 0.0], 1.5), to: EditTo::Solid("drawn".into()) }).unwrap();
        let m = s.stats().mass;
        s.step(300).unwrap();
        let m2 = s.stats().mass;
        assert!((m2 - m).abs() < 2e-4 * m, "{sc}: mass {m} -> {m2}");
    }
}

#[test]
fn refused_edits_say_why_and_change_nothing() {
    let mut s = solver(SCENE_2D, &[]);
    s.step(10).unwrap();
    let before = (s.domain().flags.clone(), s.checkpoint());
    let d = s.domain();
    let n = d.cells();
    let inlet = d.index(0, 10, 0);
    let outlet = d.index(35, 10, 0);
    let lid = d.index(10, 21, 0);
    let wall = d.index(10, 0, 0);
    let fluid = d.index(20, 15, 0);
    for (e, want) in [
        (CellEdit { cells: vec![fluid, n], to: EditTo::Fluid }, "outside the domain"),
        (CellEdit { cells: vec![fluid, inlet], to: EditTo::Solid("x".into()) }, "inlet"),
        (CellEdit { cells: vec![outlet], to: EditTo::Fluid }, "outlet"),
        (CellEdit { cells: vec![lid], to: EditTo::Solid("x".into()) }, "moving-wall"),
        (CellEdit { cells: vec![wall], to: EditTo::Fluid }, "boundary walls"),
        (CellEdit { cells: vec![fluid], to: EditTo::SolidId(7) }, "no obstacle 7"),
    ] {
        let err = s.edit_cells(&e).expect_err(want).to_string();
        assert!(err.contains(want), "{err}");
    }
    // Resting walls may be drawn over: they are solid already, nothing changes.
    assert!(s.edit_cells(&CellEdit { cells: vec![wall], to: EditTo::Solid("x".into()) }).unwrap().changed.is_empty());
    assert_eq!(s.domain().flags, before.0);
    assert_eq!(s.checkpoint(), before.1, "the state is unchanged");
    // At most 15 obstacles.
    for k in 3..=15 {
        s.edit_cells(&CellEdit { cells: vec![s.domain().index(k, 16, 0)], to: EditTo::Solid(format!("o{k}")) }).unwrap();
    }
    assert_eq!(s.domain().obstacles.len(), 15);
    let err = s.edit_cells(&CellEdit { cells: vec![s.domain().index(17, 17, 0)], to: EditTo::Solid("o16".into()) }).unwrap_err();
    assert!(err.to_string().contains("at most 15 obstacles"), "{err}");
    // An existing name reuses its id.
    let r = s.edit_cells(&CellEdit { cells: vec![s.domain().index(17, 17, 0)], to: EditTo::Solid("o5".into()) }).unwrap();
    assert_eq!(r.obstacle, Some(5));
}

/// A drawn obstacle's cells carry its id, its force is reported, and undoing the edit restores
/// the flags exactly (so checkpoints of the unedited domain restore again).
#[test]
fn drawn_obstacle_feels_the_flow_and_undo_restores_the_domain() {
    let mut s = solver(SCENE_2D, &[]);
    let initial = s.checkpoint();
    s.step(200).unwrap();
    let cells = ball(s.as_ref(), [18.0, 12.0, 0.0], 2.5);
    let r = s.edit_cells(&CellEdit { cells: cells.clone(), to: EditTo::Solid("drawn".into()) }).unwrap();
    let id = r.obstacle.unwrap();
    assert_eq!(s.domain().obstacles[id - 1], "drawn");
    assert!(cells.iter().all(|&c| kind_of(s.domain().flags[c]) == kind::SOLID && id_of(s.domain().flags[c]) == id));
    s.step(300).unwrap();
    let st = s.stats();
    assert_eq!(st.forces.len(), 3);
    assert!(st.forces[id - 1][0] > 1e-4, "drag on the drawn obstacle: {:?}", st.forces[id - 1]);
    // Restoring a checkpoint of the unedited domain is refused until the edit is undone.
    assert!(s.restore(&initial).is_err());
    for u in r.undo() {
        s.edit_cells(&u).unwrap();
    }
    assert!(cells.iter().all(|&c| !is_solid(s.domain().flags[c])));
    s.restore(&initial).unwrap();
    assert_eq!(s.time_step(), 0);
    // A checkpoint of an edited domain resumes bit for bit.
    s.edit_cells(&CellEdit { cells, to: EditTo::Solid("drawn".into()) }).unwrap();
    s.step(11).unwrap();
    let c = s.checkpoint();
    s.step(20).unwrap();
    let f = s.fields();
    s.restore(&c).unwrap();
    s.step(20).unwrap();
    assert_eq!(s.fields(), f);
}
