//! Adaptive blocks behind the solver seam against the dense CPU solver and themselves.

use super::*;
use crate::scene;
use std::path::PathBuf;

const CAVITY: &str = r#"
name = "amr cavity"
[domain]
size = [32, 32]
[boundaries]
x_min = "wall"
x_max = "wall"
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.1, 0.0] }
[fluid]
reynolds = 100.0
length = 32.0
velocity = 0.1
[amr]
enabled = true
max_level = 1
threshold = 0.01
interval = 50
"#;

fn load(text: &str, sets: &[(&str, &str)]) -> Result<LoadedScene, SceneError> {
    let sets: Vec<(String, String)> = sets.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    scene::from_str(text, "test.toml", PathBuf::from("."), &sets)
}

fn solver(text: &str, sets: &[(&str, &str)]) -> Box<dyn Solver> {
    crate::build::cpu(&load(text, sets).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn live_settings_change_the_forest_and_are_checked() {
    let mut s = solver(CAVITY, &[("amr.max_level", "2")]);
    s.step(100).expect("steps");
    let info = s.amr().expect("amr");
    assert_eq!(
        info.settings,
        AmrSettings { field: Field::Vorticity, threshold: 0.01, coarsen: 1.0, max_level: 2, interval: 50, frozen: vec![] }
    );
    assert!(info.leaves[1] + info.leaves[2] > 0, "the lid refines: {:?}", info.leaves);
    // Refinement capped at level 0: each adaptation coarsens one level.
    let coarse = AmrSettings { max_level: 0, interval: 0, ..info.settings.clone() };
    s.set_amr(&coarse).expect("settings");
    assert_eq!(s.amr().expect("amr").leaves[2], 0, "one level down at once");
    s.set_amr(&coarse).expect("settings");
    let info = s.amr().expect("amr");
    assert_eq!(info.leaves, vec![64, 0, 0], "all coarse");
    assert_eq!(info.settings.interval, 0);
    // Interval 0: no adaptation while stepping.
    let n = info.adaptations;
    s.step(120).expect("steps");
    assert_eq!(s.amr().expect("amr").adaptations, n);
    // A frozen level 1 keeps its (empty) ID set: nothing refines, whatever the threshold.
    let frozen = AmrSettings { max_level: 2, threshold: 1e-6, coarsen: 0.5, frozen: vec![1], field: Field::Q, interval: 10 };
    s.set_amr(&frozen).expect("settings");
    let info = s.amr().expect("amr");
    assert_eq!((info.leaves[0], info.settings.clone()), (64, frozen.clone()));
    // Thawed: the low threshold refines.
    s.set_amr(&AmrSettings { frozen: vec![], field: Field::Vorticity, ..frozen.clone() }).expect("settings");
    assert!(s.amr().expect("amr").leaves[1] > 0);
    // Refusals name the value and what is valid; nothing changes.
    let before = s.amr().expect("amr").settings;
    for (bad, want) in [
        (AmrSettings { max_level: 3, ..before.clone() }, "choose 0 to 2"),
        (AmrSettings { threshold: 0.0, ..before.clone() }, "must be a number above 0"),
        (AmrSettings { coarsen: 1.5, ..before.clone() }, "at most 1"),
        (AmrSettings { frozen: vec![4], ..before.clone() }, "levels 0 to 2"),
    ] {
        let e = s.set_amr(&bad).expect_err("refused").to_string();
        assert!(e.contains(want), "{e}");
    }
    assert_eq!(s.amr().expect("amr").settings, before);
    // A uniform-grid run has no adaptive blocks to set.
    let mut dense = solver(CAVITY, &[("amr.enabled", "false")]);
    assert!(dense.set_amr(&before).expect_err("refused").to_string().contains("no adaptive blocks"));
}

#[test]
fn a_scene_runs_on_adaptive_blocks_and_shows_the_finest_grid() {
    let mut s = solver(CAVITY, &[]);
    assert_eq!(s.domain().n, [64, 64, 1]);
    assert_eq!(s.info().size, [64, 64, 1]);
    let m0 = s.stats().mass;
    assert!((m0 - 32.0 * 32.0).abs() < 1e-3, "mass {m0}: one per level-0 cell");
    s.step(300).unwrap();
    let st = s.stats();
    assert!(!st.blown_up() && st.max_u > 0.02 && st.max_u < 0.12, "{st:?}");
    assert!((st.mass - m0).abs() / m0 < 1e-3, "mass {} vs {m0}", st.mass);
    let info = s.amr().expect("an adaptive run says so");
    assert_eq!(info.adaptations, 6);
    // The lid's shear asked for level 1 somewhere, not everywhere.
    assert!(info.leaves[1] > 0 && info.leaves[0] > 0, "{info:?}");
    let leaves_area: usize = info.boxes.iter().map(|b| b.1 * b.1).sum();
    assert_eq!(leaves_area, 64 * 64, "the leaves tile the domain");
    assert!(info.updates_per_step < 64 * 64 * 2 && info.updates_per_step > 32 * 32);
    // Fields: the finest grid, each leaf cell copied into the cells it covers.
    let f = s.fields();
    assert_eq!((f.size, f.rho.len()), ([64, 64, 1], 64 * 64));
    for (lo, edge, level) in &info.boxes {
        if *level == 0 {
            // A level-0 cell covers 2 x 2 finest cells with one value.
            let i = lo[0] + 64 * lo[1];
            assert_eq!(f.u[i], f.u[i + 1]);
            assert_eq!(f.u[i], f.u[i + 64]);
            assert_eq!(*edge, 8);
        }
    }
    // Under the lid the flow follows it.
    let top = f.u[32 + 64 * 63][0];
    assert!(top > 0.03, "u under the lid {top}");
}

/// Cells of the finest grid drawn into an adaptive run turn the forest's cells under them
/// solid (on every level, half of the fine cells or more), the mass changes by what the
/// report says, the new obstacle is refined around at once (the scene had no obstacle, so
/// no near-wall rule until then) and feels the flow, erasing it with the
/// report's undo gives the domain back, and a checkpoint from before then restores.
#[test]
fn drawn_cells_become_an_obstacle_of_the_forest_and_undo_erases_it() {
    use crate::edit::{CellEdit, EditTo};
    let mut s = solver(CAVITY, &[("amr.interval", "20"), ("amr.threshold", "100")]);
    s.step(40).unwrap();
    let ck = s.checkpoint();
    let flags0 = s.domain().flags.clone();
    assert_eq!(s.amr().unwrap().leaves[1], 0, "nothing refined yet: {:?}", s.amr().unwrap().leaves);
    // A box of 6 x 6 finest cells (3 x 3 cells of level 0) left of the centre.
    let d = s.domain();
    let cells: Vec<usize> = (20..26).flat_map(|y| (14..20).map(move |x| (x, y))).map(|(x, y)| d.index(x, y, 0)).collect();
    let m0 = s.stats().mass;
    let r = s.edit_cells(&CellEdit { cells: cells.clone(), to: EditTo::Solid("drawn".into()) }).unwrap();
    assert_eq!((r.became_solid(), r.obstacle), (36, Some(1)));
    assert_eq!(s.domain().obstacles, vec!["drawn".to_string()]);
    let m1 = s.stats().mass;
    // (The refinement around the box at once keeps the mass up to rounding.)
    assert!((m1 - (m0 - r.mass_removed + r.mass_added)).abs() < 1e-6 * m0, "mass {m0} -> {m1}, report {r:?}");
    assert!(r.mass_removed > 8.5 && r.mass_removed < 9.5, "9 level-0 cells removed: {}", r.mass_removed);
    // Drawing the same cells again changes nothing.
    let again = s.edit_cells(&CellEdit { cells, to: EditTo::SolidId(1) }).unwrap();
    assert!(again.changed.is_empty() && again.mass_removed == 0.0);
    let info = s.amr().unwrap();
    assert!(info.leaves[1] > 0, "the drawn box is refined around at once: {:?}", info.leaves);
    s.step(120).unwrap();
    let st = s.stats();
    assert!(!st.blown_up() && st.forces.len() == 1, "{st:?}");
    assert!(st.forces[0][0].abs() + st.forces[0][1].abs() > 1e-5, "the drawn box feels the flow: {:?}", st.forces);
    // Undo: fluid again at rest; the domain is the scene's, and the old checkpoint fits.
    for e in r.undo() {
        let u = s.edit_cells(&e).unwrap();
        assert_eq!(u.became_fluid(), 36);
        assert!(u.mass_added > 8.5 && u.mass_added < 9.5 * 4.0, "{}", u.mass_added);
    }
    assert_eq!(s.domain().flags, flags0);
    s.step(20).unwrap();
    assert!(!s.stats().blown_up());
    s.restore(&ck).unwrap();
    assert_eq!(s.time_step(), 40);
    // Refusals name the cell and change nothing.
    let e = s.edit_cells(&CellEdit { cells: vec![0], to: EditTo::Fluid }).unwrap_err().to_string();
    assert!(e.contains("boundary walls") && e.contains("x=0, y=0"), "{e}");
    assert_eq!(s.domain().flags, flags0);
}

#[test]
fn a_restored_checkpoint_continues_bit_for_bit() {
    let mut a = solver(CAVITY, &[]);
    a.step(120).unwrap();
    let c = a.checkpoint();
    a.step(130).unwrap();
    // Into the same solver (after it moved on and adapted) and into a fresh one.
    let mut b = solver(CAVITY, &[]);
    b.restore(&c).unwrap();
    assert_eq!(b.time_step(), 120);
    b.step(130).unwrap();
    let mut a2 = solver(CAVITY, &[]);
    a2.step(10).unwrap();
    a2.restore(&c).unwrap();
    a2.step(130).unwrap();
    let (fa, fb, fc) = (a.fields(), b.fields(), a2.fields());
    assert!(fa.rho.iter().zip(&fb.rho).all(|(x, y)| x.to_bits() == y.to_bits()));
    assert!(fa.u.iter().zip(&fb.u).all(|(x, y)| x.map(f32::to_bits) == y.map(f32::to_bits)));
    assert_eq!(fa, fc);
    // The same leaves (their IDs, and so their order, may differ).
    let leaves = |s: &dyn Solver| {
        let mut v = s.amr().expect("amr").boxes;
        v.sort_unstable();
        v
    };
    assert_eq!(leaves(a.as_ref()), leaves(b.as_ref()));
    // Dense checkpoints and other domains are refused with the reason.
    let dense = solver(CAVITY, &[("amr.enabled", "false")]).checkpoint();
    assert!(b.restore(&dense).unwrap_err().to_string().contains("lattice, size or domain"));
    let mut wrong = c.clone();
    wrong.data.truncate(8);
    assert!(b.restore(&wrong).is_err());
}

#[test]
fn parameters_change_tau_and_the_lid() {
    let mut s = solver(CAVITY, &[]);
    let mut p = s.params();
    p.walls[1] = [0.05, 0.0, 0.0];
    p.collide.tau = 0.8;
    s.set_params(p.clone()).unwrap();
    assert_eq!(s.params(), p);
    s.step(400).unwrap();
    let st = s.stats();
    assert!(st.max_u < 0.06 && st.max_u > 0.01, "{st:?}");
    p.collide.kind = crate::collision::Collision::Trt;
    assert!(s.set_params(p).unwrap_err().to_string().contains("BGK"));
}

/// A square in a uniform stream, symmetric about the channel's mid line.
const SQUARE: &str = r#"
name = "amr square"
[domain]
size = [64, 32]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0] }
x_max = { type = "outlet", density = 1.0 }
y_min = { type = "inlet", velocity = [0.05, 0.0] }
y_max = { type = "inlet", velocity = [0.05, 0.0] }
[fluid]
tau = 0.56
[initial]
velocity = [0.05, 0.0]
[amr]
enabled = true
max_level = 1
threshold = 1.0
interval = 0
wall_margin = 2
[[obstacles]]
shape = "box"
min = [16, 14]
max = [19, 17]
"#;

#[test]
fn an_obstacle_is_refined_around_and_feels_the_stream() {
    let mut s = solver(SQUARE, &[]);
    let info = s.amr().expect("amr");
    // Only the blocks near the square are fine (the criterion asks for nothing).
    let fine: Vec<_> = info.boxes.iter().filter(|b| b.2 == 1).collect();
    assert!(!fine.is_empty() && fine.len() < info.boxes.len() / 2, "{info:?}");
    for b in &fine {
        // Fine blocks (edge 4 finest cells) lie within a few cells of the square (finest
        // cells 32..39 x 28..35).
        assert!(b.0[0] + 4 >= 32 - 8 && b.0[0] <= 39 + 8 && b.0[1] + 4 >= 28 - 8 && b.0[1] <= 35 + 8, "{b:?}");
    }
    let f = s.fields();
    let solid = f.solid.iter().filter(|&&x| x).count();
    assert_eq!(solid, 8 * 8, "the square is 4 x 4 level-0 cells, 8 x 8 finest");
    s.step(300).unwrap();
    let st = s.stats();
    assert!(!st.blown_up(), "{st:?}");
    assert_eq!(st.forces.len(), 1);
    assert!(st.forces[0][0] > 0.0, "drag {:?}", st.forces[0]);
}

/// Two obstacles get their own forces (each from its own solid cells, on every level), and
/// the two add up to the force on all solid cells; the larger one feels more drag.
#[test]
fn each_obstacle_feels_its_own_force() {
    let text = format!("{SQUARE}\n[[obstacles]]\nname = \"behind\"\nshape = \"box\"\nmin = [36, 12]\nmax = [43, 19]\n");
    let ls = load(&text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let mut s = AmrSolver::<D2Q9>::new(&ls).unwrap_or_else(|e| panic!("{e}"));
    s.step(300).unwrap();
    let st = s.stats();
    assert_eq!(st.forces.len(), 2);
    let total = s.lbm().obstacle_force();
    for a in 0..2 {
        let sum = st.forces[0][a] + st.forces[1][a];
        assert!((sum - total[a]).abs() <= 1e-9 * total[0].abs(), "axis {a}: {sum} vs {}", total[a]);
    }
    let (front, back) = (st.forces[0][0], st.forces[1][0]);
    assert!(front > 0.0 && back > 1.2 * front, "drag {front} (4 x 4 square), {back} (8 x 8 square behind)");
}

/// With adaptation on, the blocks near a symmetric obstacle keep the finest level every
/// interval (none coarsens for lack of vorticity and comes back later) and the lift stays
/// near zero (it jumped by 50 times the drag while the square's top lay next to a coarse
/// block every other interval).
#[test]
fn near_wall_blocks_stay_fine_through_adaptations() {
    // A taller square (two root blocks across) whose inside has no vorticity.
    let mut s = solver(SQUARE, &[("amr.interval", "10"), ("obstacles.0.min", "[16, 12]"), ("obstacles.0.max", "[19, 19]")]);
    let fine0 = s.amr().expect("amr").leaves[1];
    assert!(fine0 > 0);
    for _ in 0..20 {
        s.step(10).unwrap();
        let info = s.amr().expect("amr");
        assert_eq!(info.leaves[1], fine0, "after {} adaptations", info.adaptations);
        let f = s.stats().forces[0];
        assert!(f[1].abs() < 1e-4, "step {}: force {f:?}", s.stats().step);
    }
    assert!(s.stats().forces[0][0] > 0.0, "{:?}", s.stats());
}

#[test]
fn scenes_that_adaptive_blocks_cannot_run_are_refused_by_key() {
    let err = |sets: &[(&str, &str)]| load(CAVITY, sets).unwrap_err();
    let e = err(&[("domain.size", "[34, 32]")]);
    assert_eq!(e.key, "domain.size");
    assert!(e.message.contains("multiple of 4 (e.g. [36, 32])"), "{e}");
    assert_eq!(err(&[("solver.collision", "\"trt\"")]).key, "solver.collision");
    assert_eq!(err(&[("amr.max_level", "9")]).key, "amr.max_level");
    assert_eq!(err(&[("amr.threshold", "0")]).key, "amr.threshold");
    assert_eq!(err(&[("amr.near_wall", "3")]).key, "amr.near_wall");
    assert_eq!(err(&[("amr.freeze", "[2]")]).key, "amr.freeze");
    assert_eq!(err(&[("amr.capacity", "10")]).key, "amr.capacity");
    let e = err(&[("boundaries.x_min", "{ type = \"inlet\", velocity = [0.05, 0], profile = \"parabolic\" }")]);
    assert_eq!(e.key, "boundaries.x_min.profile", "{e}");
    assert!(err(&[("amr.bogus", "1")]).message.contains("unknown key"));
}
