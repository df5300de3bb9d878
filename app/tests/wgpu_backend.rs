//! `--backend wgpu` from the command line: a run of the default scene (interpolated walls, a
//! parabolic inlet, an outlet) agrees with the CPU backend, the bench measures it, `info` lists
//! the adapters and says where `--backend auto` runs, and what the backend cannot run is refused
//! with the flag or key to change. Needs a wgpu adapter (lavapipe here and in CI): where there
//! is none, every test is reported as ignored with the reason, never as passed;
//! `ESOFLOW_REQUIRE_ADAPTER=1` makes that a failure.

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn esoflow(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_esoflow"));
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR")).env_remove("ESOFLOW_ADAPTER");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("esoflow runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scene(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("scenes").join(name).to_str().unwrap().to_string()
}

/// The last row of stats.csv as numbers (step, mass, max_u, fx, fy, fz, ...).
fn last_row(dir: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join("stats.csv")).expect("stats.csv");
    let line = text.lines().rfind(|l| !l.starts_with('#')).expect("a row").to_string();
    line.split(',').map(|v| v.trim().parse::<f64>().unwrap_or(f64::NAN)).collect()
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-30)
}

fn the_default_scene_runs_on_wgpu_as_on_the_cpu() {
    let d = tempfile::tempdir().unwrap();
    let out = |b: &str| -> PathBuf { d.path().join(b) };
    let mut rows = Vec::new();
    for b in ["wgpu", "cpu"] {
        let dir = out(b);
        let o = esoflow(
            &[
                "run",
                &scene("cylinder_2d.toml"),
                "--backend",
                b,
                "--steps",
                "400",
                "--export",
                dir.to_str().unwrap(),
                "--export-fields",
                "none",
            ],
            &[],
        );
        let e = stderr(&o);
        assert!(o.status.success(), "--backend {b}: {e}");
        if b == "wgpu" {
            assert!(e.contains("wgpu"), "the header names the backend: {e}");
        }
        rows.push(last_row(&dir));
    }
    let (g, c) = (&rows[0], &rows[1]);
    assert_eq!(g[0], c[0], "the same last step");
    assert!(rel(g[1], c[1]) < 1e-6, "mass: wgpu {} cpu {}", g[1], c[1]);
    assert!(rel(g[2], c[2]) < 1e-4, "max |u|: wgpu {} cpu {}", g[2], c[2]);
    // The drag on the cylinder, over its interpolated walls.
    assert!(rel(g[3], c[3]) < 1e-3, "drag: wgpu {} cpu {}", g[3], c[3]);
}

fn the_bench_measures_wgpu_against_its_copy_bandwidth() {
    let d = tempfile::tempdir().unwrap();
    let csv = d.path().join("b.csv");
    let o = esoflow(&["bench", "--backend", "wgpu", "--size", "16", "--seconds", "0.05", "--csv", csv.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("copy bandwidth") && out.contains("D2Q9") && out.contains("D3Q19") && out.contains("D3Q27"), "{out}");
    let c = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = c.lines().filter(|l| l.starts_with("wgpu,")).collect();
    // FP32 on every lattice, and FP16S where the adapter has half floats (lavapipe has).
    assert!(rows.len() == 3 || rows.len() == 6, "{c}");
    assert_eq!(rows.iter().filter(|r| r.contains(",fp32,")).count(), 3, "{c}");
    for r in rows {
        let mlups: f64 = r.split(',').nth(10).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
        assert!(mlups.is_finite() && mlups > 0.0, "{r}");
    }
    let o = esoflow(&["bench", "--backend", "wgpu", "--precision", "fp16c", "--size", "16"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--precision") && stderr(&o).contains("fp16s"), "{}", stderr(&o));
}

fn info_lists_the_adapters_and_where_auto_runs() {
    let o = esoflow(&["info"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("backend wgpu: available"), "{out}");
    assert!(out.contains("storage binding"), "each adapter with its limits: {out}");
    let auto = out.lines().find(|l| l.starts_with("--backend auto runs on")).unwrap_or_else(|| panic!("{out}")).to_string();
    // Where auto says the CPU, a run with auto runs there (a software adapter is never chosen).
    if auto.contains("the CPU backend") {
        let o = esoflow(&["run", "--steps", "5"], &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("running on the CPU backend"), "{auto}: {}", stderr(&o));
    }
}

fn what_wgpu_cannot_run_is_refused_with_the_key() {
    let o = esoflow(&["run", "--backend", "wgpu", "--steps", "5", "--set", "solver.precision=fp16c"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("--backend wgpu") && e.contains("solver.precision") && e.contains("fp16s"), "{e}");
    let o = esoflow(&["run", "--backend", "wgpu", "--steps", "5", "--set", "solver.scheme=aa"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("solver.scheme") && stderr(&o).contains("esoteric_pull"), "{}", stderr(&o));
    let o = esoflow(&["run", "--backend", "wgpu", "--gpus", "2", "--steps", "5"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--gpus 2"), "{}", stderr(&o));
    let o = esoflow(&["run", "--backend", "wgpu", "--steps", "5"], &[("ESOFLOW_ADAPTER", "no-such-adapter")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-adapter") && stderr(&o).contains("the adapters are"), "{}", stderr(&o));
}

/// Whether this machine offers an adapter (the list `info` prints).
fn adapter() -> Result<(), String> {
    let o = esoflow(&["info"], &[]);
    let out = stdout(&o);
    if out.contains("backend wgpu: available") {
        Ok(())
    } else {
        Err(out.lines().find(|l| l.starts_with("backend wgpu")).unwrap_or("no wgpu adapter").to_string())
    }
}

fn main() {
    let args = Arguments::from_args();
    let required = std::env::var("ESOFLOW_REQUIRE_ADAPTER").as_deref() == Ok("1");
    let tests: [(&str, fn()); 4] = [
        ("the_default_scene_runs_on_wgpu_as_on_the_cpu", the_default_scene_runs_on_wgpu_as_on_the_cpu),
        ("the_bench_measures_wgpu_against_its_copy_bandwidth", the_bench_measures_wgpu_against_its_copy_bandwidth),
        ("info_lists_the_adapters_and_where_auto_runs", info_lists_the_adapters_and_where_auto_runs),
        ("what_wgpu_cannot_run_is_refused_with_the_key", what_wgpu_cannot_run_is_refused_with_the_key),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, f)| {
            Trial::ignorable_test(name, move || match adapter() {
                Ok(()) => {
                    f();
                    Ok(Completion::Completed)
                }
                Err(why) if required => Err(Failed::from(format!("ESOFLOW_REQUIRE_ADAPTER=1 but {why}"))),
                Err(why) => Ok(Completion::ignored_with(format!("not run: {why}"))),
            })
        })
        .collect::<Vec<_>>();
    libtest_mimic::run(&args, trials).exit()
}
