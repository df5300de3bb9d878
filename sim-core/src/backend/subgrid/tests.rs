//! Tests of the CPU subgrid solver: shell indexing, slabs, and compressed and uncompressed runs, checkpoints, edits and budgets against the dense solver.

use super::*;

#[test]
fn shell_indices_cover_the_shell_once() {
    for s in [[3, 3, 3], [5, 4, 3], [7, 6, 9]] {
        let mut seen = vec![false; shell_cells(s)];
        let mut core = 0;
        for z in 0..s[2] {
            for y in 0..s[1] {
                for x in 0..s[0] {
                    match shell_index([x, y, z], s) {
                        Some(k) => {
                            assert!(!seen[k], "{s:?} {x} {y} {z}");
                            seen[k] = true;
                        }
                        None => core += 1,
                    }
                }
            }
        }
        assert!(seen.iter().all(|&b| b));
        assert_eq!(core, (s[0] - 2) * (s[1] - 2) * (s[2] - 2));
    }
}

#[test]
fn slabs_cover_the_axis() {
    assert_eq!(slabs(10, 4), vec![(0, 4), (4, 6)]);
    assert_eq!(slabs(12, 4), vec![(0, 4), (4, 4), (8, 4)]);
    assert_eq!(slabs(5, 8), vec![(0, 5)]);
}

use crate::lattice::D3Q19;

const DUCT: &str = r#"
[domain]
size = [40, 22, 20]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0, 0.0] }
x_max = { type = "outlet" }
y_min = "wall"
y_max = { type = "moving_wall", velocity = [0.04, 0.0, 0.01] }
[solver]
walls = "staircase"
[fluid]
tau = 0.6
[[obstacles]]
shape = "sphere"
center = [14, 11, 9.5]
radius = 4.2
"#;

const BOX: &str = r#"
[domain]
size = [68, 36, 36]
lattice = "D3Q19"
[fluid]
tau = 0.56
[initial]
velocity = [0.05, 0.02, 0.0]
"#;

fn dense(text: &str) -> CpuSolver<D3Q19, f32> {
    let ls = crate::scene::from_str(text, "test", std::path::PathBuf::from("."), &[]).unwrap();
    let dom = Domain::from_scene(&ls).unwrap();
    let params = Params::from_scene(&ls, &dom);
    let n = dom.n;
    CpuSolver::<D3Q19, f32>::new(dom, Scheme::EsotericPull, params, 16, |p| {
        // A swirl on top of the scene's start, so the flow is not uniform.
        let (rho, u) = crate::domain::initial_state(&ls, p);
        let (x, y) = (p[0] as f32 / n[0] as f32, p[1] as f32 / n[1] as f32);
        let s = 0.02 * (std::f32::consts::TAU * x).sin() * (std::f32::consts::TAU * y).cos();
        (rho, [u[0] + s, u[1] - s, u[2]])
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn uncompressed_subgrids_equal_the_dense_solver_bit_for_bit() {
    // Uneven subgrids, one subgrid across the periodic z axis, walls, inlet, outlet, a
    // moving wall and an obstacle; both step parities.
    for g in [[12, 8, 7], [9, 22, 20], [40, 5, 20]] {
        let mut d = dense(DUCT);
        d.step(3).unwrap();
        let mut s = SubgridSolver::from_dense(&d, g, None).unwrap();
        assert_eq!(bits(&s.dense_state().unwrap()), bits(d.state()), "{g:?}: split");
        for _ in 0..4 {
            d.step(5).unwrap();
            s.step(5).unwrap();
            let (a, b) = (s.dense_state().unwrap(), d.state().to_vec());
            let diff = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
            assert!(diff.is_none(), "{g:?} step {}: first differing slot {diff:?}", d.time_step());
        }
        assert_eq!(s.last_forces()[1], d.forces_ref()[1], "{g:?}: drag");
    }
}

#[test]
fn compressed_subgrids_keep_mass_on_a_periodic_box_and_stay_close() {
    let mut d = dense(BOX);
    let mass0: f64 = d.state().iter().map(|&v| f64::from(v)).sum::<f64>();
    let mut s = SubgridSolver::from_dense(&d, [34, 36, 36], Some(Thresholds { tau: 1e-5 })).unwrap();
    d.step(40).unwrap();
    s.step(40).unwrap();
    let a = s.dense_state().unwrap();
    let mass: f64 = a.iter().map(|&v| f64::from(v)).sum();
    let dense_mass: f64 = d.state().iter().map(|&v| f64::from(v)).sum();
    let cells = d.domain().cells() as f64;
    // The summed DDFs drift only by f32 rounding, as in the dense run (density is about 1
    // per cell, so these are relative drifts).
    let (drift, dense_drift) = ((mass - mass0).abs() / cells, (dense_mass - mass0).abs() / cells);
    eprintln!("mass drift per cell over 40 steps: compressed subgrids {drift:.2e}, dense {dense_drift:.2e}");
    assert!(drift < 2e-8 && dense_drift < 2e-8, "mass drift per cell: compressed {drift:e}, dense {dense_drift:e}");
    let e = crate::compress::nmse(d.state(), &a);
    eprintln!("ratio {:.2}, NMSE of the DDFs against the dense run {e:.2e}", s.ratio());
    assert!(e < 0.05, "NMSE of the DDFs against the dense run: {e}");
    assert!(s.ratio() > 3.0, "ratio {}", s.ratio());
}

/// The scene, subgrids, tau and steps of the GPU test
/// `gpu_compressed_subgrids_conserve_mass_and_stay_close` (sim-core/tests/cuda.rs), mass
/// from the solvers' statistics as there: the CPU reference's drift, to compare with the
/// GPU's (both about -8e-8 per cell, 100x the dense solver's; without the sphere -2.9e-10 against the dense -8.5e-10: the wavelet keeps the sum of
/// every line, solid cells' slots included, so its error moves a little mass between the
/// sphere's cells and the fluid; on a box without obstacles the drift is the dense one's,
/// see `compressed_subgrids_keep_mass_on_a_periodic_box_and_stay_close`).
#[test]
fn compressed_subgrids_drift_like_the_gpu_test_scene() {
    let text = r#"
[domain]
size = [70, 40, 38]
[solver]
walls = "staircase"
[fluid]
tau = 0.6
force = [0.0, 0.0, 0.0]
[initial]
kind = "taylor_green"
velocity = [0.04, 0.0, 0.0]
[[obstacles]]
shape = "sphere"
center = [20, 10, 9]
radius = 3.5
"#;
    let ls = crate::scene::from_str(text, "test", std::path::PathBuf::from("."), &[]).unwrap();
    let dom = Domain::from_scene(&ls).unwrap();
    let params = Params::from_scene(&ls, &dom);
    let mut d = CpuSolver::<D3Q19, f32>::new(dom, Scheme::EsotericPull, params, 16, |p| crate::domain::initial_state(&ls, p));
    let mut s = SubgridSolver::from_dense(&d, [36, 20, 19], Some(Thresholds { tau: 1e-6 })).unwrap();
    let m0 = Solver::stats(&s).mass;
    d.step(200).unwrap();
    s.step(200).unwrap();
    let cells = d.domain().fluid_cells() as f64;
    let (md, ms) = (Solver::stats(&d).mass, Solver::stats(&s).mass);
    let (dd, ds) = ((md - m0) / cells, (ms - m0) / cells);
    eprintln!("mass drift per cell over 200 steps: dense {dd:.2e}, compressed subgrids {ds:.2e}; ratio {:.2}", s.ratio());
    assert!(ds.abs() < 2e-7 && dd.abs() < 2e-8, "mass drift per cell: compressed {ds:e}, dense {dd:e}");
}

// -----------------------------------------------------------------------------------------
// Through the Solver trait

fn ckpt_bits(c: &Checkpoint) -> (u64, Vec<u8>) {
    (c.step, c.data.clone())
}

#[test]
fn the_solver_trait_matches_the_dense_solver_without_compression() {
    let mut d = dense(DUCT);
    d.step(3).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [12, 8, 7], None).unwrap();
    let (dd, ss): (&mut dyn Solver, &mut dyn Solver) = (&mut d, &mut s);
    for _ in 0..3 {
        dd.step(4).unwrap();
        ss.step(4).unwrap();
        assert_eq!(ss.time_step(), dd.time_step());
        assert_eq!(ss.fields(), dd.fields(), "fields at step {}", dd.time_step());
        assert_eq!(ss.stats(), dd.stats(), "stats at step {}", dd.time_step());
        assert_eq!(ckpt_bits(&ss.checkpoint()), ckpt_bits(&dd.checkpoint()), "checkpoint at step {}", dd.time_step());
    }
    let info = ss.info();
    assert_eq!(info.backend, "cpu-subgrid");
    assert_eq!((info.lattice, info.scheme, info.precision), (Lattice::D3Q19, Scheme::EsotericPull, Precision::Fp32));
    assert_eq!(info.memory_bytes, s.bytes() as u64);
    assert!((info.bytes_per_cell - s.bytes() as f64 / d.domain().cells() as f64).abs() < 1e-9);
    let c = s.compressed().map(|c| c.compression()).unwrap();
    assert_eq!((c.bytes, c.subgrids, c.tau), (s.bytes() as u64, s.subgrid_ratios().len(), (0.0, 0.0)));
    assert!(d.compressed().is_none());
}

#[test]
fn set_params_takes_effect_on_the_next_step() {
    let mut d = dense(DUCT);
    let mut s = SubgridSolver::from_dense(&d, [12, 8, 7], None).unwrap();
    d.step(2).unwrap();
    Solver::step(&mut s, 2).unwrap();
    let mut p = d.params();
    p.collide.tau = 0.8;
    p.walls[1] = [0.02, 0.0, 0.03];
    p.inlets[0] = [0.07, 0.0, 0.0];
    d.set_params(p.clone()).unwrap();
    s.set_params(p.clone()).unwrap();
    assert_eq!(s.params(), p);
    d.step(5).unwrap();
    Solver::step(&mut s, 5).unwrap();
    assert_eq!(bits(&s.dense_state().unwrap()), bits(d.state()));
    // And the change did change the flow.
    let mut untouched = dense(DUCT);
    untouched.step(7).unwrap();
    assert_ne!(bits(untouched.state()), bits(d.state()));
    // Invalid parameters are refused and change nothing.
    let mut bad = p.clone();
    bad.collide.tau = 0.5;
    assert!(matches!(s.set_params(bad), Err(SolverError::Param(_))));
    assert_eq!(s.params(), p);
}

#[test]
fn checkpoints_resume_bit_exactly_across_dense_and_subgrid_solvers() {
    let mut d = dense(DUCT);
    d.step(5).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [9, 22, 20], None).unwrap();
    Solver::step(&mut s, 3).unwrap();
    // Subgrid -> dense.
    let c = s.checkpoint();
    let mut d2 = dense(DUCT);
    d2.restore(&c).unwrap();
    assert_eq!(d2.time_step(), 8);
    Solver::step(&mut s, 6).unwrap();
    d2.step(6).unwrap();
    assert_eq!(ckpt_bits(&s.checkpoint()), ckpt_bits(&d2.checkpoint()));
    assert_eq!(s.fields(), d2.fields());
    // Dense -> subgrid (odd parity, and over a state that moved on).
    d2.step(1).unwrap();
    let c = d2.checkpoint();
    let mut s2 = SubgridSolver::from_dense(&dense(DUCT), [12, 8, 7], None).unwrap();
    s2.restore(&c).unwrap();
    assert_eq!(s2.time_step(), 15);
    d2.step(4).unwrap();
    Solver::step(&mut s2, 4).unwrap();
    assert_eq!(ckpt_bits(&s2.checkpoint()), ckpt_bits(&d2.checkpoint()));
    // The checkpoint file round trip, and a refused one changes nothing.
    let path = std::env::temp_dir().join(format!("esoflow-subgrid-{}.ckpt", std::process::id()));
    s2.checkpoint().save(&path).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(back, s2.checkpoint());
    let mut other = back.clone();
    other.size = [1, 2, 3];
    let before = bits(&s2.dense_state().unwrap());
    assert!(matches!(s2.restore(&other), Err(SolverError::Checkpoint(_))));
    assert_eq!(bits(&s2.dense_state().unwrap()), before);
}

#[test]
fn compressed_checkpoints_restore_into_either_solver() {
    let d = dense(BOX);
    let mut s = SubgridSolver::from_dense(&d, [34, 18, 18], Some(Thresholds { tau: 1e-5 })).unwrap();
    Solver::step(&mut s, 4).unwrap();
    let c = s.checkpoint();
    let mut d2 = dense(BOX);
    d2.restore(&c).unwrap();
    assert_eq!(ckpt_bits(&d2.checkpoint()), ckpt_bits(&c));
    let mut s2 = SubgridSolver::from_dense(&dense(BOX), [34, 18, 18], Some(Thresholds { tau: 1e-5 })).unwrap();
    s2.restore(&c).unwrap();
    // Restoring recompresses: close to the checkpoint, not equal.
    let e = crate::compress::nmse(&s.dense_state().unwrap(), &s2.dense_state().unwrap());
    assert!(e < 1e-3, "NMSE after a restore: {e}");
    assert_eq!(s2.time_step(), 4);
}

#[test]
fn cell_edits_match_the_dense_solver() {
    use crate::edit::EditTo;
    let mut d = dense(DUCT);
    d.step(4).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [12, 8, 7], None).unwrap();
    let dom = d.domain();
    let cells: Vec<usize> = (24..28).flat_map(|x| (9..13).map(move |y| (x, y))).map(|(x, y)| dom.index(x, y, 10)).collect();
    let e = CellEdit { cells, to: EditTo::Solid("drawn".into()) };
    let rd = d.edit_cells(&e).unwrap();
    let rs = s.edit_cells(&e).unwrap();
    assert_eq!(rs, rd);
    assert_eq!(s.domain().flags, d.domain().flags);
    d.step(5).unwrap();
    Solver::step(&mut s, 5).unwrap();
    assert_eq!(s.stats(), d.stats());
    assert_eq!(bits(&s.dense_state().unwrap()), bits(d.state()));
    // Erase the sphere's middle, then a refused edit (an inlet cell) changes nothing.
    let e = CellEdit { cells: vec![dom_index(&d, 14, 11, 9)], to: EditTo::Fluid };
    assert_eq!(s.edit_cells(&e).unwrap(), d.edit_cells(&e).unwrap());
    let before = bits(&s.dense_state().unwrap());
    let bad = CellEdit { cells: vec![dom_index(&d, 0, 11, 9)], to: EditTo::Fluid };
    assert!(matches!(s.edit_cells(&bad), Err(SolverError::Edit(_))));
    assert_eq!(bits(&s.dense_state().unwrap()), before);
    d.step(3).unwrap();
    Solver::step(&mut s, 3).unwrap();
    assert_eq!(bits(&s.dense_state().unwrap()), bits(d.state()));
}

fn dom_index(d: &CpuSolver<D3Q19, f32>, x: usize, y: usize, z: usize) -> usize {
    d.domain().index(x, y, z)
}

#[test]
fn set_tau_takes_effect_at_the_next_compression() {
    let mut d = dense(BOX);
    d.step(10).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [34, 18, 18], Some(Thresholds { tau: 1e-6 })).unwrap();
    let fine = s.compression_ratio();
    s.set_tau(1e-3).unwrap();
    assert_eq!(s.compression_ratio(), fine, "nothing is recompressed before a step");
    Solver::step(&mut s, 1).unwrap();
    let coarse = s.compression_ratio();
    assert!(coarse > 1.5 * fine, "ratio {fine} at tau 1e-6, {coarse} at 1e-3");
    assert!(s.subgrid_taus().iter().all(|&t| t == 1e-3));
    let r = s.subgrid_ratios();
    assert_eq!(r.len(), 2 * 2 * 2);
    assert_eq!(r[1].0, [34, 0, 0]);
    assert_eq!(r[7].1, [34, 18, 18]);
    assert!(r.iter().all(|&(_, _, x)| x > 1.0));
    assert!(s.set_tau(-1.0).is_err() && s.set_tau(f32::NAN).is_err());
    // A raw solver starts compressing.
    let mut raw = SubgridSolver::from_dense(&d, [34, 18, 18], None).unwrap();
    assert_eq!(raw.ratio(), 1.0, "raw cores and shells take what the dense state takes");
    raw.set_tau(1e-5).unwrap();
    Solver::step(&mut raw, 1).unwrap();
    assert!(raw.ratio() > 2.0, "{}", raw.ratio());
}

#[test]
fn a_state_over_the_budget_raises_tau_for_the_largest_subgrids_and_runs_on() {
    let mut d = dense(BOX);
    d.step(10).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [17, 18, 18], Some(Thresholds { tau: 1e-7 })).unwrap();
    let bytes = s.bytes() as u64;
    s.set_budget(Some(bytes * 9 / 10));
    Solver::step(&mut s, 1).unwrap();
    let taus = s.subgrid_taus();
    let raised = taus.iter().filter(|&&t| t == 2e-7).count();
    assert!(raised >= 1 && raised < taus.len(), "taus {taus:?}");
    assert!(taus.iter().all(|&t| t == 1e-7 || t == 2e-7), "{taus:?}");
    // The raised subgrids compress harder in the next step.
    Solver::step(&mut s, 3).unwrap();
    assert!((s.bytes() as u64) < bytes, "{} >= {bytes}", s.bytes());
    // A budget nothing can meet: tau climbs while it makes records smaller, then stays (each
    // subgrid at the cap or where its last raise stopped paying), and the run goes on.
    s.set_budget(Some(1));
    Solver::step(&mut s, 30).unwrap();
    let taus = s.subgrid_taus();
    assert!(taus.iter().all(|&t| t > 1e-5), "raised from 2e-7 while it paid: {taus:?}");
    assert!(s.subs.iter().all(|x| x.memo.spent() || x.tau == TAU_CAP), "{taus:?}");
    assert!(s.budget_warned);
    Solver::step(&mut s, 10).unwrap();
    assert_eq!(s.subgrid_taus(), taus, "tau stays once raising stops paying");
    assert!(!s.stats().blown_up());
}

#[test]
fn a_flow_at_rest_over_the_budget_keeps_its_tau() {
    // A box at rest compresses to its approximations at once: a higher tau cannot make it
    // smaller, so the raise after the first step is undone and tau stays where it was.
    let ls =
        crate::scene::from_str(BOX, "test", std::path::PathBuf::from("."), &[("initial.velocity".into(), "[0, 0, 0]".into())]).unwrap();
    let dom = Domain::from_scene(&ls).unwrap();
    let params = Params::from_scene(&ls, &dom);
    let d = CpuSolver::<D3Q19, f32>::new(dom, Scheme::EsotericPull, params, 16, |p| crate::domain::initial_state(&ls, p));
    let mut s = SubgridSolver::from_dense(&d, [17, 18, 18], Some(Thresholds { tau: 1e-5 })).unwrap();
    s.set_budget(Some(s.bytes() as u64 * 9 / 10));
    Solver::step(&mut s, 1).unwrap();
    assert!(s.subgrid_taus().contains(&2e-5), "the first step over the budget raises tau");
    Solver::step(&mut s, 20).unwrap();
    assert!(s.subgrid_taus().iter().all(|&t| t == 1e-5), "{:?}", s.subgrid_taus());
    assert!(s.budget_warned, "the budget cannot be met: said once");
    assert!(!s.stats().blown_up());
}

#[test]
fn per_subgrid_stats_sum_to_the_totals() {
    // Uneven subgrids (the last on each axis takes a remainder), some taus raised by a
    // budget, through the Solver trait as a viewer reads them.
    let mut d = dense(BOX);
    d.step(10).unwrap();
    let mut s = SubgridSolver::from_dense(&d, [17, 14, 20], Some(Thresholds { tau: 1e-6 })).unwrap();
    s.set_budget(Some(s.bytes() as u64 * 9 / 10));
    Solver::step(&mut s, 2).unwrap();
    let c = s.compressed().map(|c| c.compression()).unwrap();
    let per = &c.per_subgrid;
    assert_eq!(per.len(), c.subgrids);
    assert_eq!(per.len(), 4 * 3 * 2, "68 x 36 x 36 in subgrids of 17 x 14 x 20");
    assert_eq!(per.iter().map(|p| p.bytes).sum::<u64>(), c.bytes);
    assert_eq!(per.iter().map(|p| p.dense_bytes).sum::<u64>(), c.dense_bytes);
    let cells: usize = per.iter().map(|p| p.size.iter().product::<usize>()).sum();
    assert_eq!(cells, s.domain().cells(), "the subgrids tile the grid");
    for p in per {
        assert!((p.ratio - p.dense_bytes as f64 / p.bytes as f64).abs() < 1e-12, "{p:?}");
        assert!(p.tau >= c.tau.0 && p.tau <= c.tau.1, "{p:?} within {:?}", c.tau);
    }
    assert!(c.tau.0 < c.tau.1, "the budget raised some taus: {:?}", c.tau);
    // The overall ratio is the bytes-weighted harmonic mean of the subgrids' ratios.
    let r = c.dense_bytes as f64 / per.iter().map(|p| p.dense_bytes as f64 / p.ratio).sum::<f64>();
    assert!((r - c.ratio).abs() < 1e-9 * c.ratio, "{r} vs {}", c.ratio);
    assert_eq!(per.iter().map(|p| (p.origin, p.size, p.ratio)).collect::<Vec<_>>(), s.subgrid_ratios());
    assert_eq!(per.iter().map(|p| p.tau).collect::<Vec<_>>(), s.subgrid_taus());
    // The budget goes through the trait too.
    crate::solver::Compressed::set_compression_budget(&mut s, None).unwrap();
    assert_eq!(s.compressed().map(|c| c.compression()).unwrap().budget, None);
    assert!((&mut d as &mut dyn Solver).set_compression_budget(Some(1)).is_err(), "a dense solver has no budget");
}

const SCENE: &str = r#"
[domain]
size = [40, 24, 24]
[boundaries]
x_min = { type = "inlet", velocity = [0.05, 0.0, 0.0] }
x_max = "outlet"
[fluid]
tau = 0.6
[[obstacles]]
shape = "sphere"
center = [14, 12, 12]
radius = 4
[compression]
enabled = true
subgrid = [20, 12, 12]
"#;

#[test]
fn scenes_build_the_subgrid_solver_and_budgets_are_checked_before_building() {
    let load = |sets: &[(&str, &str)]| {
        let ov: Vec<(String, String)> = sets.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
        crate::scene::from_str(SCENE, "c.toml", std::path::PathBuf::from("."), &ov).unwrap()
    };
    let mut s = crate::build::cpu(&load(&[])).unwrap();
    assert_eq!(s.info().backend, "cpu-subgrid");
    s.step(3).unwrap();
    let c = s.compressed().map(|c| c.compression()).unwrap();
    assert_eq!((c.subgrids, c.tau, c.budget), (8, (1e-5, 1e-5), None));
    assert!(c.ratio > 2.0, "ratio {}", c.ratio);
    // The estimate is close to what the built state takes.
    let ls = load(&[]);
    let dom = Domain::from_scene(&ls).unwrap();
    let est = estimate::<D3Q19>(&dom, [20, 12, 12], 1e-5, |p| crate::domain::initial_state(&ls, p));
    let built = build::<D3Q19>(&ls).unwrap();
    let ratio = est.total() as f64 / built.bytes() as f64;
    assert!((0.5..2.0).contains(&ratio), "estimate {est:?}, built {}", built.bytes());
    assert_eq!(est.dense_bytes as usize, built.dense_bytes());
    // Over budget: refused, saying what it needs and what to change.
    let e = crate::build::cpu(&load(&[("compression.memory_budget", "10KB")])).err().unwrap();
    assert_eq!(e.key, "compression.memory_budget");
    let m = e.to_string();
    assert!(m.starts_with("c.toml: compression.memory_budget: the compressed state needs about "), "{m}");
    assert!(m.contains("but the budget is 10.0 KB") && m.contains("raise compression.tau") && m.contains("domain.size"), "{m}");
    // Within budget: built, with the budget in force.
    let s = crate::build::cpu(&load(&[("compression.memory_budget", "1 GB")])).unwrap();
    assert_eq!(s.compressed().map(|c| c.compression()).unwrap().budget, Some(1_000_000_000));
}

#[test]
fn snapshots_keep_the_compressed_state_and_roll_back_bit_for_bit() {
    let d = dense(BOX);
    let mut s = SubgridSolver::from_dense(&d, [17, 18, 18], Some(Thresholds { tau: 1e-6 })).unwrap();
    Solver::step(&mut s, 3).unwrap();
    // Over a budget, so the thresholds and the budget's memory change after the snapshot.
    s.set_budget(Some(s.bytes() as u64 * 9 / 10));
    let snap = s.snapshot().unwrap();
    assert_eq!(snap.step(), 3);
    assert!(snap.checkpoint().is_none(), "kept as the subgrids store it");
    assert_eq!(snap.bytes(), s.bytes() as u64);
    assert!(snap.bytes() < s.dense_bytes() as u64 * 3 / 5, "{} of {}", snap.bytes(), s.dense_bytes());
    let (state, taus) = (bits(&s.dense_state().unwrap()), s.subgrid_taus());
    Solver::step(&mut s, 5).unwrap();
    let (later, later_taus) = (bits(&s.dense_state().unwrap()), s.subgrid_taus());
    assert_ne!(later_taus, taus, "the budget raised tau");
    s.roll_back(&snap).unwrap();
    assert_eq!(s.time_step(), 3);
    assert_eq!(bits(&s.dense_state().unwrap()), state);
    assert_eq!(s.subgrid_taus(), taus);
    // The same steps again give the same state: the budget's memory came back too.
    Solver::step(&mut s, 5).unwrap();
    assert_eq!(bits(&s.dense_state().unwrap()), later);
    assert_eq!(s.subgrid_taus(), later_taus);
    // A dense solver's snapshot is a checkpoint, which the subgrids take; the subgrids' own
    // form goes back only into compressed subgrids on the same cells.
    let mut other = dense(BOX);
    assert!(matches!(other.roll_back(&snap), Err(SolverError::Checkpoint(_))));
    let dense_snap = other.snapshot().unwrap();
    assert!(dense_snap.checkpoint().is_some());
    s.roll_back(&dense_snap).unwrap();
    assert_eq!(s.time_step(), 0);
    let mut duct = SubgridSolver::from_dense(&dense(DUCT), [12, 8, 7], None).unwrap();
    assert!(matches!(duct.roll_back(&snap), Err(SolverError::Checkpoint(_))));
}
