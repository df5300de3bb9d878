//! What happens at the edges of a run, through the real binary: destinations checked before the
//! first step, outputs that are whole or absent when the process is killed, clean stops on
//! Ctrl+C and SIGTERM, resumes that continue stats.csv, and progress lines in a log.

use crate::common::{esoflow, root, stderr};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_esoflow"))
        .args(args)
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the esoflow binary starts")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child this test started and has not waited for.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill({}, {sig})", child.id());
}

/// Read the child's stderr until a line contains `what` (or the child ends); returns all text
/// read so far. The rest of stderr is drained on a thread so the child never blocks on it.
fn wait_for_line(child: &mut Child, what: &str, timeout: Duration) -> (String, std::thread::JoinHandle<String>) {
    let mut r = BufReader::new(child.stderr.take().expect("stderr piped"));
    let t = Instant::now();
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).unwrap_or(0);
        seen.push_str(&line);
        if n == 0 || line.contains(what) {
            break;
        }
        assert!(t.elapsed() < timeout, "no line with {what:?} within {timeout:?}; stderr so far:\n{seen}");
    }
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    });
    (seen, rest)
}

fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if t.elapsed() > timeout {
            let _ = child.kill();
            panic!("the run did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tmp(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("esoflow-edges-{name}-")).tempdir().expect("temp dir")
}

/// Rows of stats.csv as (step, whole line).
fn stats_steps(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).expect("stats.csv");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,mass,max_u,fx,fy,fz,mlups"), "{text}");
    lines.map(|l| l.split(',').next().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("bad row {l:?}"))).collect()
}

#[test]
fn bad_destinations_are_refused_before_the_first_step() {
    let d = tmp("dest");
    let dir = d.path().to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--screenshot", &format!("{dir}/x.jpg")], "PNG"),
        (&["--checkpoint", &format!("{dir}/missing/a.ckpt")], "does not exist"),
        (&["--checkpoint", dir], "is a folder"),
        (&["--export", &format!("{dir}/file.txt/sub")], "--export"),
    ];
    std::fs::write(d.path().join("file.txt"), "a file, not a folder").unwrap();
    for (extra, says) in cases {
        let mut args = vec!["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "100000000"];
        args.extend_from_slice(extra);
        let t = Instant::now();
        let o = esoflow(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {e}");
        assert!(e.contains(says) && e.lines().filter(|l| l.starts_with("error")).count() == 1, "{extra:?}: {e}");
        assert!(t.elapsed() < Duration::from_secs(20), "{extra:?} was refused only after {:?}", t.elapsed());
    }
    assert!(!d.path().join("x.jpg").exists(), "no empty picture is left");
}

#[test]
fn numeric_flags_out_of_range_get_one_clear_error() {
    for args in [
        &["bench", "--size", "0"][..],
        &["bench", "--size", "5000000"],
        &["bench", "--seconds", "nan"],
        &["view", "--bench", "inf"],
        &["view", "--bench", "1", "--bench-fps", "1e-300"],
        &["view", "--steps-per-frame", "0"],
        &["run", "--every", "0"],
        &["run", "--steps=-1"],
        &["run", "--progress-every", "0"],
    ] {
        let o = esoflow(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        let flag = args.iter().rev().find(|a| a.starts_with("--")).unwrap().split('=').next().unwrap();
        assert!(e.contains(flag) && !e.contains("panicked"), "{args:?}: {e}");
    }
}

#[test]
fn a_window_probe_outside_the_grid_is_refused_before_the_window_opens() {
    for probe in ["9999,1", "wake=1,2,3,4", "x,y"] {
        let o = esoflow(&["view", "--probe", probe]);
        let e = stderr(&o);
        assert!(!o.status.success(), "--probe {probe}: {e}");
        assert!(e.contains(&format!("--probe {probe}")) && !e.contains("panicked") && !e.contains("display"), "--probe {probe}: {e}");
    }
}

/// Run with exports every few steps and kill -9 at random moments: every file under a final
/// name is complete (the temporary files beside them may be partial).
#[test]
fn a_killed_run_leaves_no_truncated_file_under_a_final_name() {
    let d = tmp("kill");
    let dir = d.path().to_str().unwrap().to_string();
    // Random moments: a seed from the clock, printed so a failure can be read back.
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |t| t.subsec_nanos()) | 1;
    eprintln!("kill moments from seed {seed}");
    let mut x = u64::from(seed);
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..4 {
        let mut c = spawn(&[
            "run",
            "scenes/sphere_3d.toml",
            "--backend",
            "cpu",
            "--set",
            "domain.size=[48,40,40]",
            "--set",
            "obstacles.0.center=[16,20,20]",
            "--steps",
            "100000",
            "--every",
            "4",
            "--export",
            &dir,
            "--checkpoint",
            &format!("{dir}/run.ckpt"),
        ]);
        let drain = {
            let mut e = c.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        };
        let ms = 1000 + rnd() % 2500;
        std::thread::sleep(Duration::from_millis(ms));
        c.kill().expect("kill -9");
        let _ = c.wait();
        eprintln!("round {round}: killed after {ms} ms");
        let _ = drain.join();
        let files: Vec<String> =
            std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect();
        assert!(files.iter().any(|f| f.starts_with("fields_")), "the run got to its first export before the kill: {files:?}");
        for e in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue; // a temporary file of the write that was killed
            }
            let p = e.path();
            if name.ends_with(".vti") {
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(text.trim_end().ends_with("</VTKFile>"), "{name} is truncated ({} bytes)", text.len());
            } else if name.ends_with(".csv") && name.starts_with("fields") {
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(text.ends_with('\n') && text.lines().last().unwrap().split(',').count() == 7, "{name} is truncated");
            } else if name == "run.ckpt" {
                sim_core::checkpoint::Checkpoint::load(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
}

#[test]
fn ctrl_c_and_sigterm_finish_the_step_write_the_outputs_and_exit_130() {
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let d = tmp("stop");
        let dir = d.path().to_str().unwrap().to_string();
        let ckpt = format!("{dir}/run.ckpt");
        let mut c = spawn(&[
            "run",
            "scenes/lid_driven_cavity_2d.toml",
            "--backend",
            "cpu",
            "--steps",
            "100000000",
            "--export",
            &dir,
            "--checkpoint",
            &ckpt,
            "--progress-every",
            "0.1",
        ]);
        let (seen, rest) = wait_for_line(&mut c, "progress: step", Duration::from_secs(60));
        signal(&c, sig);
        let status = wait_exit(&mut c, Duration::from_secs(60));
        let all = seen + &rest.join().unwrap_or_default();
        assert_eq!(status.code(), Some(130), "{name}: {all}");
        assert!(all.contains("stopping:") && all.contains("stopped at step"), "{name}: {all}");
        let ck = sim_core::checkpoint::Checkpoint::load(Path::new(&ckpt)).expect("the checkpoint was written");
        let steps = stats_steps(&d.path().join("stats.csv"));
        assert_eq!(steps.last().copied(), Some(ck.step), "{name}: stats.csv ends at the step the checkpoint holds");
        assert!(d.path().join("fields.vti").exists() && d.path().join("fields.csv").exists(), "{name}");
    }
}

#[test]
fn a_second_ctrl_c_quits_at_once() {
    let mut c = spawn(&["run", "scenes/sphere_3d.toml", "--backend", "cpu", "--steps", "100000000", "--progress-every", "0.1"]);
    let (_, rest) = wait_for_line(&mut c, "progress: step", Duration::from_secs(120));
    signal(&c, libc::SIGINT);
    signal(&c, libc::SIGINT);
    let status = wait_exit(&mut c, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{}", rest.join().unwrap_or_default());
}

#[test]
fn a_resume_says_so_and_continues_stats_csv() {
    let d = tmp("resume");
    let dir = d.path().to_str().unwrap().to_string();
    let ckpt = format!("{dir}/a.ckpt");
    let base =
        ["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--set", "domain.size=[40,40]", "--set", "solver.stats_every=50"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let o = esoflow(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    run(&["--steps", "200", "--export", &dir, "--checkpoint", &ckpt, "--every", "100"]);
    // The checkpoint holds step 200; rewind it by resuming from an earlier one.
    run(&["--steps", "100", "--checkpoint", &ckpt]);
    let e = run(&["--resume", &ckpt, "--steps", "150", "--export", &dir]);
    assert!(e.contains("resumed from step 100"), "{e}");
    assert_eq!(
        stats_steps(&d.path().join("stats.csv")),
        vec![0, 50, 100, 150, 200, 250],
        "rows before the resume kept, later ones replaced"
    );
}

#[test]
fn progress_lines_reach_a_log() {
    let o = esoflow(&["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "3000", "--progress-every", "0.1"]);
    assert!(o.status.success());
    let e = stderr(&o);
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with("progress: step")).collect();
    assert!(!lines.is_empty() && lines[0].contains("MLUPS") && lines[0].contains("ETA"), "{e}");
}

mod generated {
    use super::*;
    use proptest::prelude::*;

    fn flag() -> impl Strategy<Value = Vec<String>> {
        let value = prop_oneof![
            Just("0"),
            Just("-1"),
            Just("1"),
            Just("3"),
            Just("nan"),
            Just("inf"),
            Just("1e-300"),
            Just("1e300"),
            Just("18446744073709551615"),
            Just(""),
            Just("x.jpg"),
            Just("/nonexistent/dir/f"),
            Just("field=q,cmap=nope"),
            Just("domain.size=[4294967296,4294967296,4]"),
            Just("fluid.tau=0.5"),
            Just("domain.size=[0,0]"),
            Just("obstacles.0.center=[nan,1]"),
        ];
        let name = prop_oneof![
            Just("--steps"),
            Just("--every"),
            Just("--set"),
            Just("--gpus"),
            Just("--backend"),
            Just("--view"),
            Just("--progress-every"),
            Just("--resume"),
            Just("--checkpoint"),
        ];
        (name, value).prop_map(|(n, v)| vec![n.to_string(), v.to_string()])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// `esoflow run` with generated flags on a small scene: it runs, refuses with exit 2
        /// and one error, or reports a blow-up (3); never a panic, abort or hang.
        #[test]
        fn generated_run_flags_never_panic(flags in prop::collection::vec(flag(), 1..4)) {
            let d = tmp("prop");
            let scene = root().join("scenes/lid_driven_cavity_2d.toml").to_string_lossy().to_string();
            let mut args: Vec<String> = ["run", scene.as_str(), "--set", "domain.size=[24,24]", "--steps", "20"].iter().map(ToString::to_string).collect();
            for f in flags {
                args.extend(f);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            // In the test's own folder: a generated value such as `--checkpoint 0` names a file.
            let mut c = Command::new(env!("CARGO_BIN_EXE_esoflow")).args(&args).current_dir(d.path()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
            let status = wait_exit(&mut c, Duration::from_secs(120));
            let mut e = String::new();
            let _ = c.stderr.take().unwrap().read_to_string(&mut e);
            prop_assert!(matches!(status.code(), Some(0 | 2 | 3)), "{args:?}: {status:?}\n{e}");
            prop_assert!(!e.contains("panicked"), "{args:?}: {e}");
        }
    }
}

/// The cylinder at Mach 0.43 and tau 0.501 blows up within a few hundred steps. Before NaNs
/// appear the state is already garbage (densities of 1e22, speeds of 300); what the run saves
/// as its last good state must be physically sane.
#[test]
fn a_blow_up_saves_only_a_sane_state() {
    let d = tmp("blowup");
    let dir = d.path().to_str().unwrap();
    let o = esoflow(&[
        "run",
        "--backend",
        "cpu",
        "--set",
        "boundaries.x_min.velocity=[0.25,0]",
        "--set",
        "fluid.reynolds=4000",
        "--set",
        "solver.stats_every=50",
        "--steps",
        "20000",
        "--export",
        dir,
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(e.contains("tau 0.501") && e.contains("blew up") && e.contains("last good"), "{e}");
    // The saved checkpoint resumes to a sane state.
    let ck = sim_core::checkpoint::Checkpoint::load(&d.path().join("last_good.ckpt")).expect("last_good.ckpt");
    let ls = sim_core::scene::from_str(
        &std::fs::read_to_string(root().join("scenes/cylinder_2d.toml")).unwrap(),
        "cylinder",
        root().join("scenes"),
        &[("boundaries.x_min.velocity".into(), "[0.25,0]".into()), ("fluid.reynolds".into(), "4000".into())],
    )
    .unwrap();
    let mut s = sim_core::build::cpu(&ls).unwrap();
    s.restore(&ck).unwrap();
    let st = s.stats();
    assert!(st.sanity(1.0).is_ok(), "last_good.ckpt holds {st:?}");
    // So do the exported fields.
    let csv = std::fs::read_to_string(d.path().join("fields.csv")).unwrap();
    for l in csv.lines().skip(1) {
        let v: Vec<f64> = l.split(',').map(|x| x.parse().unwrap()).collect();
        let speed = (v[4] * v[4] + v[5] * v[5] + v[6] * v[6]).sqrt();
        assert!(v[3] > 0.5 && v[3] < 1.5 && speed < sim_core::solver::SANE_SPEED, "fields.csv row {l}");
    }
}

/// The memory plan is an upper bound of what a run takes, and not a wild one: the peak resident
/// memory of a CPU run with exports and rollback checkpoints against the plan's host bytes.
#[test]
fn the_memory_plan_bounds_the_peak_of_a_cpu_run() {
    let d = tmp("plan");
    let dir = d.path().to_str().unwrap();
    let sets = [("domain.size", "[200,100,100]"), ("obstacles.0.center", "[50,50,50]"), ("solver.stats_every", "1")];
    let mut args = vec!["run", "scenes/sphere_3d.toml", "--backend", "cpu", "--steps", "30", "--every", "15", "--export", dir];
    for (k, v) in &sets {
        args.push("--set");
        args.push(Box::leak(format!("{k}={v}").into_boxed_str()));
    }
    // wait4 below reaps it (and gives its own peak memory, which wait() does not).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_esoflow")).args(&args).current_dir(root()).stderr(Stdio::null()).spawn().unwrap();
    // The peak of this child alone (other tests' children run beside it).
    // SAFETY: wait4 on the pid of a child this test started and has not waited for; it fills
    // the status and the struct it is given.
    let (status, peak) = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        let mut status = 0;
        assert_eq!(libc::wait4(child.id() as libc::pid_t, &raw mut status, 0, &raw mut u), child.id() as libc::pid_t);
        (status, u.ru_maxrss as u64 * 1024)
    };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the run failed: {status}");
    let ov: Vec<(String, String)> = sets.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    let ls = sim_core::scene::load(&root().join("scenes/sphere_3d.toml"), &ov).unwrap();
    let need = sim_core::memory::Spec::of_scene(
        &ls,
        sim_core::memory::Place::Cpu,
        sim_core::memory::Keeps { saved_states: 2, checkpoints: true, export: true },
    )
    .need()
    .unwrap();
    eprintln!("peak resident {} MB, planned {} MB", peak >> 20, need.host >> 20);
    assert!(peak <= need.host, "the run took {peak} B, more than its plan of {} B", need.host);
    assert!(need.host <= 3 * peak, "the plan ({} B) is far above what the run took ({peak} B)", need.host);
}

/// A grid far larger than the machine is refused at once, with what it needs, what is free and
/// the largest size of the same shape that fits; so is a bench box.
#[test]
fn a_run_that_cannot_fit_is_refused_up_front() {
    let t = Instant::now();
    let o = esoflow(&["run", "scenes/sphere_3d.toml", "--backend", "cpu", "--set", "domain.size=[1000,1000,1000]", "--steps", "10"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("out of memory")
            && e.contains("of host memory, but")
            && e.contains("the largest domain.size of this shape that fits is ["),
        "{e}"
    );
    let o =
        esoflow(&["bench", "--backend", "cpu", "--size", "5000", "--lattice", "D3Q19", "--precision", "fp32", "--scheme", "esoteric_pull"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--size 5000: out of memory") && e.contains("fits"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(20), "refused only after {:?}", t.elapsed());
}

/// A resume takes the state from the checkpoint and the parameters from the scene and the
/// command line: for each kind of key that may change (tau, the collision, an inlet's and a
/// moving wall's velocity, the body force), the resumed run equals a solver that restored the
/// checkpoint, took the new parameters and stepped, bit for bit, and the run says what changed.
#[test]
fn a_resume_takes_the_parameters_of_the_scene_and_the_command_line() {
    let d = tmp("resume-params");
    let scene = d.path().join("channel.toml");
    std::fs::write(
        &scene,
        "[domain]\nsize = [48, 24]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.05, 0.0], profile = \"parabolic\" }\n\
         x_max = \"outlet\"\ny_min = \"wall\"\ny_max = { type = \"moving_wall\", velocity = [0.02, 0.0] }\n[fluid]\ntau = 0.6\n\
         [[obstacles]]\nshape = \"sphere\"\ncenter = [14, 11]\nradius = 3\n",
    )
    .unwrap();
    let s = scene.to_str().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let o = esoflow(&["run", s, "--backend", "cpu", "--steps", "60", "--checkpoint", &p("a.ckpt")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plain = esoflow(&["run", s, "--backend", "cpu", "--resume", &p("a.ckpt"), "--steps", "40", "--checkpoint", &p("plain.ckpt")]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let plain = sim_core::checkpoint::Checkpoint::load(&d.path().join("plain.ckpt")).unwrap();
    for (key, value, said) in [
        ("fluid.tau", "0.9", "tau 0.6 -> 0.9"),
        ("solver.collision", "trt", "collision bgk -> trt"),
        ("boundaries.x_min.velocity", "[0.08,0]", "inlet 0 velocity"),
        ("boundaries.y_max.velocity", "[-0.03,0]", "moving wall 0 velocity"),
        ("fluid.force", "[1e-5,0]", "body force"),
    ] {
        let set = format!("{key}={value}");
        let out = p("b.ckpt");
        let o = esoflow(&["run", s, "--backend", "cpu", "--set", &set, "--resume", &p("a.ckpt"), "--steps", "40", "--checkpoint", &out]);
        let e = stderr(&o);
        assert!(o.status.success(), "{set}: {e}");
        assert!(e.contains(&format!("note: {said}")), "{set}: the change is announced: {e}");
        let got = sim_core::checkpoint::Checkpoint::load(Path::new(&out)).unwrap();
        let ls = sim_core::scene::load(&scene, &[(key.to_string(), value.to_string())]).unwrap();
        let mut want = sim_core::build::cpu(&ls).unwrap();
        let params = sim_core::Params::from_scene(&ls, want.domain());
        want.restore(&sim_core::checkpoint::Checkpoint::load(&d.path().join("a.ckpt")).unwrap()).unwrap();
        want.set_params(params).unwrap();
        want.step(40).unwrap();
        let want = want.checkpoint();
        assert_eq!(got.params, want.params, "{set}");
        assert!(got.data == want.data, "{set}: the resumed run differs from restore + new parameters + steps");
        assert!(got.data != plain.data, "{set}: the change made no difference");
    }
    // What cannot change (the grid) is refused, naming the checkpoint.
    let o = esoflow(&["run", s, "--backend", "cpu", "--set", "domain.size=[50,24]", "--resume", &p("a.ckpt"), "--steps", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a.ckpt") && stderr(&o).contains("different domain"), "{}", stderr(&o));
}

/// A checkpoint whose values are not a sane state (here NaN, with a valid checksum) is refused
/// when it is loaded, before anything runs or is written.
#[test]
fn a_checkpoint_of_an_insane_state_is_refused_on_resume() {
    let d = tmp("nan-resume");
    let scene = root().join("scenes/lid_driven_cavity_2d.toml");
    let ls = sim_core::scene::load(&scene, &[("domain.size".to_string(), "[40,40]".to_string())]).unwrap();
    let mut s = sim_core::build::cpu(&ls).unwrap();
    s.step(10).unwrap();
    let mut ck = s.checkpoint();
    ck.data[(500 * 9 + 2) * 4..(500 * 9 + 3) * 4].copy_from_slice(&f32::NAN.to_le_bytes());
    let nan = d.path().join("nan.ckpt");
    ck.save(&nan).unwrap();
    let out = d.path().join("out");
    let o = esoflow(&[
        "run",
        scene.to_str().unwrap(),
        "--backend",
        "cpu",
        "--set",
        "domain.size=[40,40]",
        "--resume",
        nan.to_str().unwrap(),
        "--export",
        out.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("nan.ckpt") && e.contains("step 10) is not sane") && e.contains("not finite"), "{e}");
    assert!(!out.join("last_good.ckpt").exists() && !out.join("stats.csv").exists(), "nothing is written");
}

/// Two runs into one export folder: the second is refused while the first holds it, and the
/// folder is free again once the first has ended, even when it was killed.
#[test]
fn a_second_run_into_a_held_export_folder_is_refused() {
    let d = tmp("lock");
    let dir = d.path().to_str().unwrap();
    let args =
        ["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "1000000", "--export", dir, "--progress-every", "0.2"];
    let mut first = spawn(&args);
    let (_, rest) = wait_for_line(&mut first, "step", Duration::from_secs(60));
    let o = esoflow(&["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "10", "--export", dir]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(&format!("another Esoflow run (process {})", first.id())) && e.contains(dir), "{e}");
    signal(&first, libc::SIGKILL);
    let _ = wait_exit(&mut first, Duration::from_secs(30));
    let _ = rest.join();
    let o = esoflow(&["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "10", "--export", dir]);
    assert!(o.status.success(), "the lock of a killed run is gone: {}", stderr(&o));
    assert!(!d.path().join(sim_core::atomic_file::LOCK_NAME).exists(), "the lock file goes with the run that held it");
}

/// A process started in a launcher's leftover environment says at once what it waits for.
#[test]
fn a_lone_rank_says_at_once_what_it_waits_for() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_esoflow"))
        .args(["run", "scenes/lid_driven_cavity_2d.toml", "--steps", "10"])
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("ESOFLOW_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("ESOFLOW_RENDEZVOUS_TIMEOUT", "1")
        .current_dir(root())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(!o.status.success() && t.elapsed() < Duration::from_secs(30), "{e}");
    let first = e.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "rank 0 of 2 (from RANK/WORLD_SIZE): waiting up to 1 s for rank 1 at 127.0.0.1:{port}; a run of one process needs none of these variables"
        ),
        "{e}"
    );
    assert!(e.contains("rank 1 did not come"), "{e}");
}

/// stats.csv on a disk that fills up (a file-size limit stands in for the full disk): the
/// error names the file, and the file holds whole rows only.
#[test]
fn a_full_disk_names_stats_csv_and_leaves_whole_rows() {
    let d = tmp("full");
    let dir = d.path().to_str().unwrap();
    // A 4 KiB limit on files this process writes (in 512-byte blocks of sh's ulimit); with
    // SIGXFSZ ignored, a write past it fails instead of killing the process.
    let bin = env!("CARGO_BIN_EXE_esoflow");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 8; exec '{bin}' run scenes/lid_driven_cavity_2d.toml --backend cpu --set domain.size=[24,24] \
             --set solver.stats_every=1 --steps 2000 --export-fields none --export '{dir}'"
        ))
        .current_dir(root())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "an error of the run's outputs: {e}");
    assert!(e.contains(&format!("writing {dir}/stats.csv")), "the file is named: {e}");
    let text = std::fs::read_to_string(d.path().join("stats.csv")).unwrap();
    assert!(text.len() <= 4096 && text.ends_with('\n'), "whole rows only: {:?}", &text[text.len().saturating_sub(80)..]);
    let steps = stats_steps(&d.path().join("stats.csv"));
    assert!(steps.len() > 10 && steps.windows(2).all(|w| w[1] == w[0] + 1), "{steps:?}");
}

/// A scene path that is not a scene file: a device is refused at once, as is a file too large
/// to be one; an STL path that is a device too.
#[test]
fn a_device_or_a_huge_file_is_not_read_as_a_scene() {
    let t = Instant::now();
    let o = esoflow(&["run", "/dev/zero"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("/dev/zero is a device, not a scene file"), "{e}");
    let d = tmp("huge");
    let big = d.path().join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(sim_core::input::SCENE_CAP + 1).unwrap();
    drop(f);
    let o = esoflow(&["run", big.to_str().unwrap()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("big.toml") && e.contains("larger than the 16.00 MB that a scene file may be"), "{e}");
    let stl = d.path().join("stl.toml");
    std::fs::write(
        &stl,
        "[domain]\nsize = [24, 24, 24]\n[[obstacles]]\nshape = \"stl\"\nfile = \"/dev/zero\"\ncenter = [12, 12, 12]\nsize = 8\n",
    )
    .unwrap();
    let o = esoflow(&["run", stl.to_str().unwrap(), "--backend", "cpu", "--steps", "1"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("obstacles.0") && e.contains("/dev/zero is a device, not an STL file"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(60));
}

/// Temporary files that a killed run left beside its checkpoint are removed by the next run
/// that writes the same checkpoint; other files there stay.
#[test]
fn leftovers_of_a_killed_checkpoint_write_are_removed() {
    let d = tmp("ckpt-leftover");
    let ck = d.path().join("run.ckpt");
    let left = d.path().join(".run.ckpt.a1b2c3.partial");
    let other = d.path().join(".notes.txt.x9y8z7.partial");
    std::fs::write(&left, vec![0u8; 4096]).unwrap();
    std::fs::write(&other, b"not ours").unwrap();
    let o =
        esoflow(&["run", "scenes/lid_driven_cavity_2d.toml", "--backend", "cpu", "--steps", "10", "--checkpoint", ck.to_str().unwrap()]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("removed 1 partial file(s)"), "{e}");
    assert!(!left.exists() && other.exists() && ck.exists());
}

/// Interpolated walls where the grid cannot have them (LBM-Ghost blocks, compressed subgrids):
/// the run says the obstacles get staircase walls instead of running them silently.
#[test]
fn interpolated_walls_that_a_scheme_cannot_run_are_announced() {
    let o = esoflow(&["run", "--backend", "cpu", "--set", "solver.walls=interpolated", "--set", "solver.scheme=ghost", "--steps", "1"]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("warning: solver.walls = \"interpolated\": solver.scheme = \"ghost\"") && e.contains("staircase walls"), "{e}");
    let o = esoflow(&["run", "--backend", "cpu", "--set", "solver.walls=staircase", "--set", "solver.scheme=ghost", "--steps", "1"]);
    assert!(!stderr(&o).contains("staircase walls"), "said once, where it matters: {}", stderr(&o));
}
