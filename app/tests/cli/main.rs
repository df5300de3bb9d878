//! The CLI contract other tools script against: `esoflow run/bench/info`, exports, errors,
//! checkpoints and blow-ups, through the real binary; and in `edges`, what happens at the edges
//! of a run. One test binary for both, so that the solver code they link is optimised once.

#[path = "../common/mod.rs"]
mod common;
mod edges;

use common::{esoflow, stderr};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("esoflow-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn run_exports_fields_csv_vti_and_stats() {
    let d = tmp("export");
    let o = esoflow(&["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "250", "--export", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(d.join("fields.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("x,y,z,rho,ux,uy,uz"));
    // 130 x 130 cavity with one wall layer on each side: 128^2 fluid cells.
    assert_eq!(lines.clone().count(), 128 * 128);
    let row: Vec<f64> = lines.next().unwrap().split(',').map(|v| v.parse().unwrap()).collect();
    assert_eq!(row.len(), 7);
    assert_eq!(row[2], 0.0, "z = 0 in 2D");
    let stats = std::fs::read_to_string(d.join("stats.csv")).unwrap();
    assert!(stats.starts_with("step,mass,max_u,fx,fy,fz,mlups\n"), "{stats}");
    let last = stats.lines().last().unwrap();
    assert!(last.starts_with("250,"), "{last}");
    let vti = std::fs::read_to_string(d.join("fields.vti")).unwrap();
    assert!(vti.contains("ImageData") && vti.contains("velocity") && vti.contains("rho"));
    assert!(stderr(&o).contains("fields.csv"), "says where the output went");
    assert!(!d.join("units.toml").exists(), "a scene without [units] stays in lattice units");
}

#[test]
fn bad_input_gets_one_clear_error() {
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--set", "fluid.viscosty=0.1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("fluid.viscosty") && e.contains("fluid.viscosity"), "{e}");
    let d = tmp("bad");
    let f = d.join("broken.toml");
    std::fs::write(&f, "[domain]\nsize = [32, 32]\n[fluid]\ntau = 0.45\n").unwrap();
    let o = esoflow(&["run", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("broken.toml:4") && e.contains("fluid.tau") && e.contains("0.5"), "{e}");
    let o = esoflow(&["run", "no/such/scene.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no/such/scene.toml"));
}

#[test]
fn checkpoint_and_resume_are_bit_exact_through_the_cli() {
    let d = tmp("ckpt");
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    let scene = "scenes/lid_driven_cavity_2d.toml";
    let run = |args: &[&str]| {
        let mut a = vec!["run", scene, "--backend", "cpu", "--set", "domain.size=[40,40]"];
        a.extend_from_slice(args);
        let o = esoflow(&a);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    run(&["--steps", "120", "--checkpoint", &p("a.ckpt")]);
    run(&["--resume", &p("a.ckpt"), "--steps", "80", "--checkpoint", &p("b.ckpt")]);
    run(&["--steps", "200", "--checkpoint", &p("c.ckpt")]);
    assert_eq!(std::fs::read(p("b.ckpt")).unwrap(), std::fs::read(p("c.ckpt")).unwrap());
    // A damaged checkpoint is refused, not half-read.
    let mut bytes = std::fs::read(p("a.ckpt")).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::write(p("bad.ckpt"), bytes).unwrap();
    let o = esoflow(&["run", scene, "--set", "domain.size=[40,40]", "--resume", &p("bad.ckpt")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("checksum"), "{}", stderr(&o));
}

/// A checkpoint of `scene` at 40 x 40 cells after `steps` steps, saved to `path`; resumed with
/// [`UNSTABLE`] it blows up within a few dozen steps.
fn cavity_checkpoint(scene: &Path, steps: u64, path: &Path) {
    let ls = sim_core::scene::load(scene, &[("domain.size".to_string(), "[40,40]".to_string())]).unwrap();
    let mut s = sim_core::build::cpu(&ls).unwrap();
    s.step(steps).unwrap();
    s.checkpoint().save(path).unwrap();
}

/// The cavity's lid at Mach 0.52 and Reynolds number 10^6 (tau just above 1/2): BGK blows up
/// within a few dozen steps.
const UNSTABLE: [&str; 4] = ["--set", "fluid.reynolds=1e6", "--set", "boundaries.y_max.velocity=[0.3,0]"];

#[test]
fn a_blow_up_stops_with_the_last_good_step_and_a_non_zero_exit() {
    let d = tmp("blowup");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scene = root.join("scenes/lid_driven_cavity_2d.toml");
    cavity_checkpoint(&scene, 10, &d.join("a.ckpt"));
    let ckpt = d.join("a.ckpt");
    let mut args = vec![
        "run",
        scene.to_str().unwrap(),
        "--backend",
        "cpu",
        "--set",
        "domain.size=[40,40]",
        "--resume",
        ckpt.to_str().unwrap(),
        "--steps",
        "3000",
        "--export",
        d.to_str().unwrap(),
    ];
    args.extend_from_slice(&UNSTABLE);
    let o = esoflow(&args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("blew up") && e.contains("last good"), "{e}");
    assert!(d.join("last_good.ckpt").exists());
}

/// A compressed-subgrid run keeps its last good state compressed and rolls back to it bit for
/// bit: the checkpoint written after a blow-up equals that of a run stopped at that step.
#[test]
fn a_compressed_run_that_blows_up_rolls_back_bit_for_bit() {
    let d = tmp("compressed-blowup");
    let scene = d.join("blow.toml");
    // Mach 0.52 at tau 0.5005: BGK blows up within a few dozen steps.
    std::fs::write(
        &scene,
        r#"
[domain]
size = [48, 24, 24]
lattice = "D3Q19"
[boundaries]
x_min = { type = "inlet", velocity = [0.3, 0.0, 0.0] }
x_max = { type = "outlet", density = 1.0 }
[fluid]
tau = 0.5005
[initial]
velocity = [0.3, 0.0, 0.0]
[solver]
stats_every = 10
[compression]
enabled = true
subgrid = [16, 12, 12]
tau = 1e-5
[[obstacles]]
shape = "sphere"
center = [12, 11.5, 11.5]
radius = 4.0
"#,
    )
    .unwrap();
    let s = scene.to_str().unwrap();
    let o = esoflow(&["run", s, "--backend", "cpu", "--steps", "3000", "--export", d.join("out").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("cpu-subgrid") && e.contains("blew up"), "{e}");
    let good: u64 =
        e.split("the last good state is step ").nth(1).and_then(|t| t.split('.').next()).and_then(|t| t.parse().ok()).expect(&e);
    assert!(good > 0, "{e}");
    let back = sim_core::checkpoint::Checkpoint::load(&d.join("out/last_good.ckpt")).unwrap();
    let o = esoflow(&["run", s, "--backend", "cpu", "--steps", &good.to_string(), "--checkpoint", d.join("c.ckpt").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let straight = sim_core::checkpoint::Checkpoint::load(&d.join("c.ckpt")).unwrap();
    assert_eq!(back.step, good);
    assert!(back.data == straight.data, "the rolled-back state differs from a run stopped at step {good}");
}

#[test]
fn info_and_a_small_bench_run() {
    let o = esoflow(&["info"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("backend cpu") && out.contains("backend cuda"), "{out}");
    let d = tmp("bench");
    let csv = d.join("b.csv");
    let o = esoflow(&[
        "bench",
        "--backend",
        "cpu",
        "--lattice",
        "D2Q9",
        "--scheme",
        "esoteric_pull,one_step_pull",
        "--precision",
        "fp32",
        "--size",
        "24",
        "--seconds",
        "0.05",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("copy bandwidth") && out.contains("% copy") && out.contains("esoteric_pull"), "{out}");
    let c = std::fs::read_to_string(&csv).unwrap();
    assert!(c.contains("# device:") && c.contains("# date:") && c.contains("# command:") && c.lines().count() >= 7, "{c}");
}

/// `--backend cuda` runs where there is a GPU and fails with one clear error where there is
/// none; `--backend auto` runs either way and says which backend it took.
#[test]
fn cuda_backend_runs_or_fails_clearly_and_auto_falls_back() {
    let gpu = sim_core::backend::cuda::probe().is_ok();
    let o = esoflow(&["run", "scenes/poiseuille_2d.toml", "--backend", "cuda", "--steps", "10"]);
    if gpu {
        assert!(o.status.success() && stderr(&o).contains("steps on cuda"), "{}", stderr(&o));
    } else {
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("--backend cuda"), "{}", stderr(&o));
    }
    let o = esoflow(&["run", "scenes/poiseuille_2d.toml", "--backend", "auto", "--steps", "10"]);
    assert!(o.status.success());
    let says = if gpu { "steps on cuda" } else { "CPU backend" };
    assert!(stderr(&o).contains(says), "{}", stderr(&o));
}

#[test]
fn a_compressed_run_reports_its_ratio_and_memory_and_resumes_densely() {
    let d = tmp("compressed");
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    let small = ["--set", "domain.size=[48,24,24]", "--set", "obstacles.0.center=[16,12,12]", "--set", "obstacles.0.radius=4"];
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "scenes/sphere_3d.toml", "--steps", "20"];
        a.extend_from_slice(&small);
        a.extend_from_slice(extra);
        esoflow(&a)
    };
    let o = run(&[
        "--set",
        "compression.enabled=true",
        "--set",
        "compression.tau=1e-5",
        "--set",
        "compression.subgrid=[24,12,12]",
        "--checkpoint",
        &p("c.ckpt"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("cpu-subgrid"), "{e}");
    assert!(e.contains("compression: ratio ") && e.contains("in memory") && e.contains("8 subgrids, tau 1e-5"), "{e}");
    if sim_core::backend::cuda::probe().is_err() {
        assert!(e.contains("running on the CPU backend"), "the default (auto) backend says it runs on the CPU: {e}");
    }
    // The checkpoint is the dense solver's format: a dense CPU run resumes it.
    let o = run(&["--backend", "cpu", "--resume", &p("c.ckpt")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("done: step 40"), "{}", stderr(&o));
    // A budget the start fits (about 0.89 MB estimated) but the developing flow outgrows: tau
    // is raised with a warning and the run completes.
    let o =
        run(&["--set", "compression.enabled=true", "--set", "compression.subgrid=[24,12,12]", "--set", "compression.memory_budget=1MB"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("WARN") && e.contains("over the memory budget") && e.contains("raising tau"), "{e}");
    assert!(e.contains("done: step 20") && e.contains("budget 1.00 MB") && !e.contains("tau 1e-5, budget"), "tau was raised: {e}");
    // A budget the state cannot fit is refused before the run, saying what to change.
    let o = run(&["--set", "compression.enabled=true", "--set", "compression.memory_budget=10KB"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("compression.memory_budget") && e.contains("needs about") && e.contains("raise compression.tau"), "{e}");
}

/// `--gpus N` is checked up front: the CPU backend refuses it with one sentence, compressed
/// subgrids take it (shared out over the GPUs) or say why not, and 0 GPUs is not a count clap
/// accepts.
#[test]
fn gpus_flag_refuses_what_it_cannot_run() {
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--backend", "cpu", "--gpus", "2", "--steps", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("--gpus 2 runs on the CUDA backend"), "{e}");
    let o =
        esoflow(&["run", "scenes/sphere_3d.toml", "--backend", "cuda", "--gpus", "2", "--steps", "1", "--set", "compression.enabled=true"]);
    let e = stderr(&o);
    if sim_core::build::gpu_available().is_err() {
        assert_eq!(o.status.code(), Some(2));
        assert!(e.contains("--gpus 2:") && e.lines().filter(|l| l.starts_with("error")).count() == 1, "{e}");
    }
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--gpus", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--gpus") && stderr(&o).contains("expected auto or a count of GPUs from 1 to 64"), "{}", stderr(&o));
    // auto: one GPU where only one can run the scene (here the CPU, or adaptive blocks), said.
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--backend", "cpu", "--gpus", "auto", "--steps", "1"]);
    assert!(o.status.success() && stderr(&o).contains("--gpus auto: 1 GPU: the CPU backend runs one grid"), "{}", stderr(&o));
    let o = esoflow(&["run", "scenes/lid_driven_cavity_amr_2d.toml", "--gpus", "auto", "--steps", "1"]);
    assert!(o.status.success() && stderr(&o).contains("--gpus auto: 1 GPU: adaptive blocks run on one GPU"), "{}", stderr(&o));
    // Under a launcher, flags a launch cannot take are refused on every rank before anything
    // runs or is written, and the viewer and the bench run in one process.
    let out = tmp("ranks");
    let launched = |args: &[&str], rank: usize| {
        std::process::Command::new(env!("CARGO_BIN_EXE_esoflow"))
            .args(args)
            .env("OMPI_COMM_WORLD_RANK", rank.to_string())
            .env("OMPI_COMM_WORLD_SIZE", "2")
            .current_dir(common::root())
            .output()
            .unwrap()
    };
    let x = out.join("x");
    let o = launched(&["run", "--backend", "cpu", "--steps", "1", "--export", x.to_str().unwrap()], 1);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: --backend cpu: a launch of 2 processes (mpirun (Open MPI)) runs one slab per process"),
        "{}",
        stderr(&o)
    );
    let o = launched(&["run", "--gpus", "3", "--steps", "1", "--export", x.to_str().unwrap()], 0);
    assert!(stderr(&o).contains("--gpus 3: a launch of 2 processes"), "{}", stderr(&o));
    assert!(!x.exists());
    let o = launched(&["view", "--frames", "1"], 0);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: this process is rank 0 of 2 launched by mpirun (Open MPI): the viewer runs in one process"),
        "{}",
        stderr(&o)
    );
    let o = launched(&["bench", "--seconds", "0.1"], 1);
    assert!(stderr(&o).contains("the bench runs in one process"), "{}", stderr(&o));
    let o = esoflow(&["bench", "--weak"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--weak scales the box with the GPUs: add --gpus N"), "{}", stderr(&o));
    let o = esoflow(&["bench", "--backend", "cpu", "--gpus", "2"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--gpus 2 measures the CUDA backend"), "{}", stderr(&o));
}

#[test]
fn adaptive_blocks_run_from_a_scene_on_the_cpu_or_one_gpu() {
    let o = esoflow(&["run", "scenes/lid_driven_cavity_amr_2d.toml", "--backend", "cpu", "--steps", "200"]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    // The finest level's grid, the forest's numbers and the time in refinement.
    assert!(e.contains("D2Q9 256x256x1"), "{e}");
    assert!(e.contains("adaptive blocks: leaves per level"), "{e}");
    assert!(e.contains("% of the time in refinement"), "{e}");
    // On the GPU where there is one (sim-core/tests/cuda.rs compares it with the CPU); here,
    // without one, a clear refusal that names the flag and what is missing.
    let o = esoflow(&["run", "scenes/lid_driven_cavity_amr_2d.toml", "--backend", "cuda", "--steps", "1"]);
    if o.status.success() {
        assert!(stderr(&o).contains("cuda"), "{}", stderr(&o));
    } else {
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("--backend cuda: "), "{}", stderr(&o));
    }
    let o = esoflow(&["run", "scenes/lid_driven_cavity_amr_2d.toml", "--gpus", "2", "--steps", "1"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("adaptive blocks (amr.enabled = true) run on one GPU"), "{}", stderr(&o));
    let o = esoflow(&["run", "scenes/lid_driven_cavity_amr_2d.toml", "--steps", "1", "--set", "domain.size=[66,64]"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("adaptive blocks are 4 cells wide"), "{}", stderr(&o));
}

/// The default scene at half size (D = 10, 200 x 50 cells): it sheds within 4,000 steps.
const SMALL_CYLINDER: [&str; 8] =
    ["--set", "domain.size=[200,50]", "--set", "obstacles.0.center=[40,26]", "--set", "obstacles.0.radius=5", "--set", "fluid.length=10"];

/// stats.csv: the columns of every obstacle (forces, C_D, C_L) with finite numbers; the
/// summary: the means over the second half, C_D, C_L and St; `--export-fields none` writes
/// stats.csv alone, even with --every.
#[test]
fn stats_csv_has_per_obstacle_forces_and_coefficients_and_the_summary_gives_st() {
    let d = tmp("forces");
    let mut a = vec!["run", "scenes/cylinder_2d.toml", "--backend", "cpu", "--steps", "8000", "--set", "solver.stats_every=20"];
    a.extend_from_slice(&SMALL_CYLINDER);
    a.extend_from_slice(&["--export", d.to_str().unwrap(), "--export-fields", "none", "--every", "4000"]);
    let o = esoflow(&a);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    let stats = std::fs::read_to_string(d.join("stats.csv")).unwrap();
    let mut lines = stats.lines();
    assert_eq!(lines.next(), Some("step,mass,max_u,fx,fy,fz,mlups,cylinder.fx,cylinder.fy,cylinder.fz,cylinder.cd,cylinder.cl"), "{stats}");
    let rows: Vec<Vec<f64>> = lines.map(|l| l.split(',').map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 401);
    for r in &rows {
        assert!(r.len() == 12 && r.iter().all(|v| v.is_finite()), "{r:?}");
        // One obstacle: its force is the total, and C_D = 2 F_x / (U^2 L) with U = 0.066667, L = 10.
        assert_eq!((r[7], r[8]), (r[3], r[4]));
        assert!((r[10] - 2.0 * r[7] / (0.066667f64.powi(2) * 10.0)).abs() < 1e-4 * r[10].abs().max(1.0), "{r:?}");
    }
    let files: Vec<String> = std::fs::read_dir(&d).unwrap().map(|f| f.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files, ["stats.csv"], "--export-fields none writes stats.csv alone");
    // The summary: the force at the end, then the means over steps 4,000 to 8,000.
    assert!(e.contains("force on cylinder at step 8000: (") && e.contains("steps 4000 to 8000 (201 rows): mean force ("), "{e}");
    let num = |after: &str| -> f64 {
        let i = e.rfind(after).unwrap_or_else(|| panic!("no {after:?} in {e}")) + after.len();
        e[i..].split([' ', ',']).next().unwrap().parse().unwrap()
    };
    let (cd, st) = (num("C_D "), num("St "));
    assert!((2.5..4.5).contains(&cd) && (0.2..0.35).contains(&st), "C_D {cd}, St {st}: {e}");
    assert!(e.contains("lift period ") && e.contains(" periods, "), "{e}");
    // Field files are asked for with --export only.
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--steps", "1", "--export-fields", "none"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--export"), "{}", stderr(&o));
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--steps", "1", "--export", d.to_str().unwrap(), "--export-fields", "some"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("all, csv, vti, none"), "{}", stderr(&o));
}

/// A resume continues a stats.csv of the same columns, and refuses one of other columns (other
/// obstacles, or one that has no coefficients) with one line that says which, leaving it be.
#[test]
fn a_resume_continues_the_per_obstacle_columns_and_refuses_others() {
    let d = tmp("forces-resume");
    let dir = d.to_str().unwrap();
    let ckpt = d.join("a.ckpt");
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "scenes/cylinder_2d.toml", "--backend", "cpu", "--set", "solver.stats_every=50"];
        a.extend_from_slice(&SMALL_CYLINDER);
        a.extend_from_slice(extra);
        esoflow(&a)
    };
    let o = run(&["--steps", "200", "--export", dir, "--export-fields", "none", "--checkpoint", ckpt.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["--steps", "100", "--export", dir, "--export-fields", "none", "--resume", ckpt.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stats = std::fs::read_to_string(d.join("stats.csv")).unwrap();
    let header = "step,mass,max_u,fx,fy,fz,mlups,cylinder.fx,cylinder.fy,cylinder.fz,cylinder.cd,cylinder.cl";
    assert!(stats.starts_with(&format!("{header}\n")), "{stats}");
    let steps: Vec<&str> = stats.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(steps, ["0", "50", "100", "150", "200", "250", "300"]);
    // Another obstacle name, and a scene without a reference velocity: other columns.
    let o = run(&["--steps", "100", "--export", dir, "--resume", ckpt.to_str().unwrap(), "--set", "obstacles.0.name=disc"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("error: --resume: continuing ") && e.contains("its columns differ from this run's"), "{e}");
    assert!(
        e.contains("it has the columns cylinder.fx,") && e.contains("where this run writes disc.fx,") && e.contains("move it away"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(d.join("stats.csv")).unwrap(), stats, "a refused resume leaves stats.csv as it was");
}

/// A bad reference value is one error line naming the file, line and key, or `--set`.
#[test]
fn bad_force_reference_keys_give_one_clear_error() {
    let o = esoflow(&["run", "scenes/cylinder_2d.toml", "--steps", "1", "--set", "forces.velocity=-0.1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("--set: forces.velocity: must be a finite number > 0 (the reference velocity of the force coefficients), got -0.1"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    let d = tmp("forces-bad");
    let f = d.join("bad.toml");
    let text = std::fs::read_to_string(common::root().join("scenes/cylinder_2d.toml")).unwrap() + "\n[forces]\narea = 30.0\n";
    std::fs::write(&f, &text).unwrap();
    let o = esoflow(&["run", f.to_str().unwrap(), "--steps", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    let line = text.lines().position(|l| l.starts_with("area")).unwrap() + 1;
    assert!(e.contains(&format!("bad.toml:{line}: forces.area: a 2D scene's coefficients are per unit depth")), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// The rows of a probes.csv as columns split at commas (header checked).
fn probe_rows(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,probe,x,y,z,ux,uy,uz,speed,rho,pressure,vorticity"));
    lines.map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn probes_sample_the_default_scene_into_probes_csv() {
    let d = tmp("probes");
    let dir = d.to_str().unwrap();
    let o = esoflow(&[
        "run",
        "--backend",
        "cpu",
        "--steps",
        "200",
        "--probe",
        "100,50",
        "--probe",
        "cyl=80,52",
        "--probe-every",
        "10",
        "--export",
        dir,
        "--export-fields",
        "none",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    let rows = probe_rows(&d.join("probes.csv"));
    let wake: Vec<&Vec<String>> = rows.iter().filter(|r| r[1] == "probe0").collect();
    assert_eq!(wake.len(), 21, "steps 0, 10, ..., 200");
    assert_eq!(rows.len(), 42, "two probes");
    for (i, r) in wake.iter().enumerate() {
        assert_eq!(r.len(), 12);
        assert_eq!((r[0].as_str(), &r[2..5]), ((10 * i).to_string().as_str(), &["100".to_string(), "50".into(), "0".into()][..]));
        let v: Vec<f64> = r[5..].iter().map(|x| x.parse().unwrap()).collect();
        let (ux, uy, uz, speed, rho, p, w) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        // The channel's flow, 1 cell below the centre line 20 cells ahead of the cylinder.
        assert!(ux > 0.0 && ux < 0.12 && uy.abs() < 0.05 && uz == 0.0, "{r:?}");
        // The start-up sends a pressure wave through (density 0.92 at step 20).
        assert!((speed - (ux * ux + uy * uy).sqrt()).abs() < 1e-6 && (rho - 1.0).abs() < 0.15, "{r:?}");
        assert!((p - (rho - 1.0) / 3.0).abs() < 1e-6 && (0.0..0.05).contains(&w), "{r:?}");
    }
    // A probe inside the cylinder samples zeros, with a note.
    assert!(rows.iter().filter(|r| r[1] == "cyl").all(|r| r[5..8] == ["0", "0", "0"] && r[9] == "1"), "{rows:?}");
    assert!(e.contains("probe cyl at (80, 52) is inside an obstacle"), "{e}");
    assert!(e.contains("probe probe0 at (100, 50): steps 100 to 200 (11 samples): |u| mean"), "{e}");
    assert!(e.contains(&d.join("probes.csv").display().to_string()), "listed as an output: {e}");
    // A probe outside the domain is refused before anything runs or is written.
    let none = d.join("never");
    let o = esoflow(&["run", "--backend", "cpu", "--steps", "10", "--probe", "500,20", "--export", none.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.trim(), "error: --probe 500,20: x = 500 is outside the domain (0 to 399)");
    assert!(!none.exists());
    let o = esoflow(&["run", "--steps", "10", "--probe", "10,20,3"]);
    assert!(stderr(&o).contains("--probe 10,20,3: z = 3 is outside the domain (0 to 0)"), "{}", stderr(&o));
}

/// A scene's [[probes]] and --probe together; a resumed run continues probes.csv and equals an
/// uninterrupted one; a blow-up keeps the samples of the sane states.
#[test]
fn scene_probes_resume_bit_exact_and_survive_a_blow_up() {
    let d = tmp("probes-resume");
    let scene = d.join("cavity.toml");
    let text = std::fs::read_to_string(common::root().join("scenes/lid_driven_cavity_2d.toml")).unwrap();
    std::fs::write(&scene, format!("{text}\n[[probes]]\nat = [20, 30]\nname = \"upper\"\n")).unwrap();
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        let mut a = vec!["run", scene.to_str().unwrap(), "--backend", "cpu", "--set", "domain.size=[40,40]", "--probe", "10,10"];
        a.extend_from_slice(&["--probe-every", "7", "--export-fields", "none"]);
        a.extend_from_slice(args);
        let o = esoflow(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    run(&["--steps", "120", "--checkpoint", &p("a.ckpt"), "--export", &p("split")]);
    let e = run(&["--resume", &p("a.ckpt"), "--steps", "80", "--export", &p("split")]);
    assert!(e.contains("after its samples of 18 steps before step 120"), "{e}");
    run(&["--steps", "200", "--export", &p("whole")]);
    let whole = std::fs::read_to_string(d.join("whole/probes.csv")).unwrap();
    assert_eq!(std::fs::read_to_string(d.join("split/probes.csv")).unwrap(), whole);
    let rows = probe_rows(&d.join("whole/probes.csv"));
    assert_eq!(rows.len(), 2 * 29, "steps 0, 7, ..., 196 of two probes");
    assert_eq!((rows[0][1].as_str(), rows[1][1].as_str()), ("upper", "probe1"), "the scene's probes first");
    // The checkpoint carries the probes: the scene without them, resumed, samples the same places.
    let plain = common::root().join("scenes/lid_driven_cavity_2d.toml");
    let o = esoflow(&[
        "run",
        plain.to_str().unwrap(),
        "--backend",
        "cpu",
        "--set",
        "domain.size=[40,40]",
        "--resume",
        &p("a.ckpt"),
        "--steps",
        "20",
        "--probe-every",
        "10",
        "--export-fields",
        "none",
        "--export",
        &p("carried"),
    ]);
    assert!(o.status.success() && stderr(&o).contains("sampling the checkpoint's 2 probes"), "{}", stderr(&o));
    let carried = probe_rows(&d.join("carried/probes.csv"));
    let at = |r: &Vec<String>| (r[1].clone(), r[2].clone(), r[3].clone());
    assert_eq!(at(&carried[0]), ("upper".into(), "20".into(), "30".into()), "{carried:?}");
    assert_eq!(at(&carried[1]), ("probe1".into(), "10".into(), "10".into()), "{carried:?}");
    // Another run's probes.csv is not continued: refused before running, and left as it was.
    let o = esoflow(&[
        "run",
        scene.to_str().unwrap(),
        "--set",
        "domain.size=[40,40]",
        "--resume",
        &p("a.ckpt"),
        "--probe",
        "11,10",
        "--export",
        &p("whole"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("probes.csv:3: probe \"probe1\" is at (10,10,0) there but at (11,10,0)"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(d.join("whole/probes.csv")).unwrap(), whole);
    // A blow-up: probes.csv holds the samples up to the last state found sane, all finite.
    cavity_checkpoint(&scene, 140, &d.join("b.ckpt"));
    let (b, blown) = (p("b.ckpt"), p("blown"));
    let mut args = vec!["run", scene.to_str().unwrap(), "--backend", "cpu", "--set", "domain.size=[40,40]", "--resume", &b];
    args.extend_from_slice(&["--steps", "3000", "--set", "solver.stats_every=20", "--export", &blown]);
    args.extend_from_slice(&UNSTABLE);
    let o = esoflow(&args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    let good: u64 =
        e.split("the last good state is step ").nth(1).and_then(|t| t.split('.').next()).and_then(|t| t.parse().ok()).expect(&e);
    let rows = probe_rows(&d.join("blown/probes.csv"));
    assert!(!rows.is_empty() && rows.iter().all(|r| r[0].parse::<u64>().unwrap() <= good), "samples after step {good}: {rows:?}");
    assert!(rows.iter().flat_map(|r| &r[5..]).all(|v| v.parse::<f64>().unwrap().is_finite()), "{rows:?}");
}

#[test]
fn a_record_folder_that_is_a_file_is_refused_before_running() {
    let d = tmp("record-file");
    let f = d.join("frames");
    std::fs::write(&f, "not a folder").unwrap();
    let o = esoflow(&["run", "--backend", "cpu", "--steps", "10", "--record", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("--record") && e.contains("is a file, not a folder") && !e.contains("done:"), "{e}");
    // --view needs a picture to apply to.
    let o = esoflow(&["run", "--steps", "10", "--view", "field=speed"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--screenshot") && stderr(&o).contains("--record"), "{}", stderr(&o));
}

/// A scene with `[units]`: the summary gives SI values beside the lattice ones, probes.csv gets
/// SI columns after its usual ones, and units.toml holds the factors.
#[test]
fn a_scene_with_si_units_reports_and_exports_them() {
    let d = tmp("units");
    let scene = d.join("channel.toml");
    // 6 cells are 3 cm (dx = 5 mm); the inlet's 0.05 cells/step is 0.25 m/s (dt = 1 ms);
    // nu = 2e-4 m^2/s is 0.008 cells^2/step, tau 0.524, Re = 0.25 * 0.03 / 2e-4 = 37.5.
    std::fs::write(
        &scene,
        "name = \"units\"\n[domain]\nsize = [60, 24]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.05, 0.0] }\n\
         x_max = \"outlet\"\ny_min = \"wall\"\ny_max = \"wall\"\n[fluid]\nlength = 6\nvelocity = 0.05\n[initial]\nvelocity = [0.05, 0.0]\n\
         [[obstacles]]\nname = \"disc\"\nshape = \"cylinder\"\ncenter = [15, 12]\nradius = 3\n[[probes]]\nat = [30, 12]\nname = \"wake\"\n\
         [units]\nlength = 0.03\nvelocity = 0.25\nviscosity = 2e-4\ndensity = 1.2\n",
    )
    .unwrap();
    let out = d.join("out");
    let o = esoflow(&[
        "run",
        scene.to_str().unwrap(),
        "--backend",
        "cpu",
        "--steps",
        "40",
        "--probe-every",
        "10",
        "--export",
        out.to_str().unwrap(),
        "--export-fields",
        "none",
    ]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    for want in [
        "tau 0.5240",
        "SI units ([units]): 1 cell = 0.005 m, 1 step = 0.001 s, velocity 1 cell/step = 5 m/s, density 1 = 1.2 kg/m³",
        "force 1 = 0.15 N/m (per metre of depth)",
        "viscosity 2e-4 m²/s, Re 37.5 (0.03 m over 6 cells, 0.25 m/s for 0.05 cells/step); 40 steps are 0.04 s",
        "in SI units: 0.04 s of flow at step 40, max |u| ",
        "; force in SI units (",
        "probe wake at (30, 12): steps 20 to 40 (3 samples): |u| mean ",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    assert!(e.lines().any(|l| l.starts_with("probe wake") && l.contains(" m/s, ")), "{e}");
    assert!(e.contains(&out.join("units.toml").display().to_string()), "listed as an output: {e}");
    // probes.csv: the usual columns, then the SI ones; the time of step 40 is 40 ms.
    let text = std::fs::read_to_string(out.join("probes.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("step,probe,x,y,z,ux,uy,uz,speed,rho,pressure,vorticity,time_s,ux_m_s,uy_m_s,uz_m_s,speed_m_s,rho_kg_m3,pressure_pa,vorticity_1_s")
    );
    let last: Vec<f64> = lines.last().unwrap().split(',').enumerate().filter(|(i, _)| *i != 1).map(|(_, v)| v.parse().unwrap()).collect();
    assert_eq!(last[0], 40.0);
    assert!((last[11] - 0.04).abs() < 1e-8, "time_s {last:?}");
    assert!((last[12] - 5.0 * last[4]).abs() < 1e-6 && (last[16] - 1.2 * last[8]).abs() < 1e-6, "{last:?}");
    // units.toml: the factors, as TOML.
    let units = std::fs::read_to_string(out.join("units.toml")).unwrap();
    assert!(units.contains("dx = 0.005  # m per cell") && units.contains("[reference]"), "{units}");
}

/// Two processes of one launch meet and run `esoflow run` together: on a host with two GPUs the
/// launch's checkpoint equals one GPU's bit for bit; without GPUs both stop, rank 0 saying why
/// and rank 1 that it stopped with rank 0, nothing written and nothing left waiting.
#[test]
fn a_launch_of_two_processes_runs_together_or_stops_together() {
    let out = tmp("launch");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ckpt = out.join("launch.ckpt");
    let kids: Vec<_> = (0..2)
        .map(|r| {
            std::process::Command::new(env!("CARGO_BIN_EXE_esoflow"))
                .args(["run", "scenes/sphere_3d.toml", "--steps", "40", "--checkpoint", ckpt.to_str().unwrap()])
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("ESOFLOW_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("ESOFLOW_RENDEZVOUS_TIMEOUT", "60")
                .current_dir(common::root())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = kids.into_iter().map(|k| k.wait_with_output().unwrap()).collect();
    let (e0, e1) = (stderr(&outs[0]), stderr(&outs[1]));
    let gpus = sim_core::backend::cuda::probe().is_ok() && cudarc::driver::CudaContext::device_count().unwrap_or(0) >= 2;
    if gpus {
        assert!(outs[0].status.success() && outs[1].status.success(), "rank 0: {e0}\nrank 1: {e1}");
        assert!(e0.contains("2 processes met") && !e1.contains("error"), "rank 0: {e0}\nrank 1: {e1}");
        let one = out.join("one.ckpt");
        let o = esoflow(&["run", "scenes/sphere_3d.toml", "--backend", "cuda", "--steps", "40", "--checkpoint", one.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let (a, b) = (sim_core::checkpoint::Checkpoint::load(&ckpt).unwrap(), sim_core::checkpoint::Checkpoint::load(&one).unwrap());
        assert!(a.data == b.data && a.step == 40, "the launch's checkpoint differs from one GPU's");
    } else {
        assert_eq!((outs[0].status.code(), outs[1].status.code()), (Some(2), Some(2)), "rank 0: {e0}\nrank 1: {e1}");
        assert!(e0.contains("2 processes met") && e0.contains("error: a launch of 2 processes:"), "{e0}");
        // Rank 1 says first whom it connects to, then why it stopped.
        assert!(e1.starts_with("rank 1 of 2 (from RANK/WORLD_SIZE): connecting to rank 0 at "), "{e1}");
        assert!(e1.lines().last().is_some_and(|l| l.starts_with("error: rank 1: stopped with rank 0")), "{e1}");
        assert!(!ckpt.exists());
    }
}
