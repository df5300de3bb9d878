//! Smoke tests of the viewer through the real binary: the window under Xvfb (a few frames, a
//! screenshot, a clean exit) and the offscreen `run --screenshot`. Each skips with a message
//! where Xvfb or a GPU adapter is missing, unless ESOFLOW_REQUIRE_ADAPTER=1 (CI), then fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn required() -> bool {
    std::env::var("ESOFLOW_REQUIRE_ADAPTER").as_deref() == Ok("1")
}

fn skip(test: &str, why: &str) {
    assert!(!required(), "{test}: ESOFLOW_REQUIRE_ADAPTER=1 but {why}");
    eprintln!("skipping {test}: {why}");
}

fn out_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Wait for a child with a time limit; kill it (by its own handle) past the limit.
fn wait_with_limit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Distinct colours in a PNG (a real picture has many; a blank window one or two).
fn distinct_colours(p: &Path) -> (u32, u32, usize) {
    let img = image::open(p).unwrap_or_else(|e| panic!("{} is not a PNG: {e}", p.display())).to_rgba8();
    let mut set = std::collections::HashSet::new();
    for px in img.pixels() {
        set.insert(px.0);
    }
    (img.width(), img.height(), set.len())
}

struct Xvfb(Child);

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_xvfb(screen: &str) -> Result<(Xvfb, String), String> {
    for k in 0..20 {
        let n = 100 + (std::process::id() + k * 37) % 800;
        let lock = format!("/tmp/.X{n}-lock");
        if Path::new(&lock).exists() {
            continue;
        }
        let child = Command::new("Xvfb")
            .args([format!(":{n}").as_str(), "-screen", "0", &format!("{screen}x24"), "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("Xvfb not found ({e}); on Debian `apt-get install xvfb`"))?;
        let mut x = Xvfb(child);
        let socket = format!("/tmp/.X11-unix/X{n}");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if Path::new(&socket).exists() {
                return Ok((x, format!(":{n}")));
            }
            if let Ok(Some(_)) = x.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Err("Xvfb did not start".into())
}

/// Run the window (`esoflow ARGS` in `dir` on X display `display`, with PATH set to `path`
/// where given) and wait at most 240 s for it to exit: its stdout and stderr. It must exit
/// with success; `Err` says why it could not run at all (no adapter or display: skipped).
fn run_window(display: &str, dir: &Path, args: &[&str], path: Option<&str>) -> Result<(String, String), String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_esoflow"));
    cmd.args(args).env("DISPLAY", display).env_remove("WAYLAND_DISPLAY").env_remove("ESOFLOW_LOG").current_dir(dir);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
    let status = wait_with_limit(&mut child, Duration::from_secs(240));
    let (mut err, mut out) = (String::new(), String::new());
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    if let Some(mut o) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    let Some(status) = status else { panic!("{args:?}: the window did not exit within 240 s; stderr:\n{err}") };
    if !status.success() && (err.contains("no GPU adapter") || err.contains("cannot open a window")) {
        return Err(format!("no adapter or display for the window: {err}"));
    }
    assert!(status.success(), "{args:?}: exit {status:?}; stderr:\n{err}");
    Ok((out, err))
}

/// The numbers of a `layout:` line: window width and height, the view's left, right, top,
/// bottom and share of the width, the legend's left, right, top, bottom.
fn parse_layout(line: &str) -> Vec<f64> {
    line.replace("..", " ").split(|c: char| !(c.is_ascii_digit() || c == '.')).filter_map(|t| t.parse().ok()).collect()
}

#[test]
fn window_fits_the_screen_shows_the_flow_first_and_exits_cleanly() {
    let test = "window_fits_the_screen_shows_the_flow_first_and_exits_cleanly";
    for (screen, sw, sh) in [("1280x720", 1280.0, 720.0), ("1920x1080", 1920.0, 1080.0)] {
        let (_x, display) = match start_xvfb(screen) {
            Ok(x) => x,
            Err(why) => return skip(test, &why),
        };
        let dir = out_dir(&format!("window_smoke_{screen}"));
        let shot = dir.join("window.png");
        let args = ["view", "--backend", "cpu", "--frames", "20", "--screenshot", "window.png"];
        let (out, err) = match run_window(&display, &dir, &args, None) {
            Ok(o) => o,
            Err(why) => return skip(test, &why),
        };
        let (w, h, colours) = distinct_colours(&shot);
        assert!(colours > 100, "{screen}: the screenshot shows a field and panels ({colours} colours)");
        // The window fits the screen; the view takes at least 70 % of its width with the
        // default layout; the legend lies inside the view.
        assert!(f64::from(w) <= sw && f64::from(h) <= sh, "{screen}: a window of {w}x{h}");
        let line = out.lines().find(|l| l.starts_with("layout:")).unwrap_or_else(|| panic!("{screen}: no layout line in:\n{out}"));
        let v = parse_layout(line);
        assert_eq!(v.len(), 11, "{line}");
        assert_eq!((v[0], v[1]), (f64::from(w), f64::from(h)), "{screen}: the screenshot is the window: {line}");
        assert!(v[6] >= 70.0, "{screen}: the view takes {} % of the width: {line}", v[6]);
        let (view, legend) = ([v[2], v[3], v[4], v[5]], [v[7], v[8], v[9], v[10]]);
        assert!(
            legend[0] >= view[0]
                && legend[1] <= view[1]
                && legend[2] >= view[2]
                && legend[3] <= view[3]
                && view[1] <= v[0]
                && view[3] <= v[1],
            "{screen}: legend outside the view or the window: {line}"
        );
        // Clean stderr: no colour codes when it is not a terminal, no library warnings.
        assert!(!err.contains('\u{1b}'), "{screen}: colour codes on stderr:\n{err}");
        assert!(!err.contains("WARN") && !err.contains("XDG_RUNTIME_DIR"), "{screen}: noise on stderr:\n{err}");
    }
}

#[test]
fn window_records_the_view_as_numbered_frames() {
    let test = "window_records_the_view_as_numbered_frames";
    let (_x, display) = match start_xvfb("1280x720") {
        Ok(x) => x,
        Err(why) => return skip(test, &why),
    };
    let dir = out_dir("window_record");
    let rec = dir.join("rec");
    let args = ["view", "--backend", "cpu", "--frames", "30", "--every", "40", "--record", "rec"];
    let (_, err) = match run_window(&display, &dir, &args, Some("/nonexistent")) {
        Ok(o) => o,
        Err(why) => return skip(test, &why),
    };
    // Frames of the view alone (narrower than the window: no side bar), numbered from 0, and a
    // note on how to make the video (no ffmpeg on this PATH).
    let first = rec.join("frame_000000.png");
    let (w, h, colours) = distinct_colours(&first);
    assert!(w < 1200 && h > 300 && colours > 50, "{w}x{h}, {colours} colours");
    assert!(rec.join("frame_000002.png").is_file(), "three frames at least: {err}");
    assert!(err.contains("recorded ") && err.contains("make the video with: ffmpeg"), "{err}");
}

#[test]
fn run_screenshot_renders_offscreen_without_a_window() {
    let test = "run_screenshot_renders_offscreen_without_a_window";
    let dir = out_dir("run_screenshot");
    let shot = dir.join("pics/cyl.png");
    let out = Command::new(env!("CARGO_BIN_EXE_esoflow"))
        .args(["run", "--backend", "cpu", "--steps", "300", "--screenshot"])
        .arg(&shot)
        .args(["--view", "field=vorticity,cmap=turbo,size=800x300"])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("no GPU adapter") {
        return skip(test, &err);
    }
    assert!(out.status.success(), "stderr:\n{err}");
    let (w, h, colours) = distinct_colours(&shot);
    assert_eq!((w, h), (800, 300));
    assert!(colours > 50, "{colours} colours");
    // A bad view spec is refused before running.
    let out = Command::new(env!("CARGO_BIN_EXE_esoflow"))
        .args(["run", "--steps", "10", "--screenshot", "x.png", "--view", "field=nope"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("field=nope"));
}

#[test]
fn run_screenshot_draws_an_isosurface_and_the_brick_overlay() {
    let test = "run_screenshot_draws_an_isosurface_and_the_brick_overlay";
    let dir = out_dir("run_screenshot_iso");
    let scene = dir.join("ball.toml");
    std::fs::write(
        &scene,
        "name = \"ball\"\n[domain]\nsize = [32, 16, 16]\nlattice = \"D3Q19\"\n[boundaries]\n\
         x_min = { type = \"inlet\", velocity = [0.08, 0.0, 0.0] }\nx_max = \"outlet\"\n[fluid]\ntau = 0.6\n\
         [initial]\nvelocity = [0.08, 0.0, 0.0]\n[[obstacles]]\nshape = \"sphere\"\ncenter = [10, 8, 8]\nradius = 3.0\n",
    )
    .expect("scene file");
    let shot = dir.join("iso.png");
    let out = Command::new(env!("CARGO_BIN_EXE_esoflow"))
        .args(["run", "--backend", "cpu", "--steps", "60", "--screenshot"])
        .arg(&shot)
        .args(["--view", "field=speed,iso=vorticity:0.005,overlay=bricks,size=500x400"])
        .arg(&scene)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("no GPU adapter") {
        return skip(test, &err);
    }
    assert!(out.status.success(), "stderr:\n{err}");
    // The isosurface was made (the count is printed) and the picture is a real one.
    let line =
        err.lines().find(|l| l.starts_with("isosurface |vorticity| = 0.005:")).unwrap_or_else(|| panic!("no isosurface line:\n{err}"));
    let tris: u64 = line.split_whitespace().rev().nth(1).and_then(|t| t.parse().ok()).unwrap_or(0);
    assert!(tris > 100, "{line}");
    let (w, h, colours) = distinct_colours(&shot);
    assert_eq!((w, h), (500, 400));
    assert!(colours > 50, "{colours} colours");
    // Bad isosurface specs are refused before running, naming the key and the valid forms.
    for (spec, says) in
        [("iso=speed:0.1", "vorticity:THRESHOLD or q:THRESHOLD"), ("iso=q:x", "not a finite number"), ("overlay=grid", "bricks or none")]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_esoflow"))
            .args(["run", "--steps", "10", "--screenshot", "x.png", "--view", spec])
            .arg(&scene)
            .output()
            .expect("runs");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && e.contains(spec) && e.contains(says), "{spec}: {e}");
    }
}

/// Whether an executable of this name is on the PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

#[test]
fn run_record_writes_numbered_frames_and_makes_the_video() {
    let test = "run_record_writes_numbered_frames_and_makes_the_video";
    let dir = out_dir("run_record");
    let frames = dir.join("frames");
    let record = |steps: &str, ffmpeg: Option<&Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_esoflow"));
        c.args(["run", "--backend", "cpu", "--steps", steps, "--every", "20", "--record"])
            .arg(&frames)
            .args(["--view", "size=320x120"])
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY");
        match ffmpeg {
            Some(f) => c.env("ESOFLOW_FFMPEG", f),
            None => c.env_remove("ESOFLOW_FFMPEG"),
        };
        let out = c.output().expect("the binary runs");
        (out.status, String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (status, err) = record("60", None);
    if !status.success() && err.contains("no GPU adapter") {
        return skip(test, &err);
    }
    assert!(status.success(), "stderr:\n{err}");
    // Frames at steps 20, 40 and 60, numbered from 0.
    for i in 0..3 {
        let (w, h, colours) = distinct_colours(&frames.join(format!("frame_{i:06}.png")));
        assert_eq!((w, h), (320, 120));
        assert!(colours > 50, "frame {i}: {colours} colours");
    }
    assert!(!frames.join("frame_000003.png").exists());
    assert!(err.contains("recorded 3 frames (steps 20 to 60, every 20)"), "{err}");
    if on_path("ffmpeg") {
        let video = std::fs::metadata(frames.join("recording.mp4")).map(|m| m.len()).unwrap_or(0);
        assert!(video > 0, "recording.mp4 is missing or empty; stderr:\n{err}");
    } else {
        eprintln!("{test}: ffmpeg is not on the PATH, so the real encoding was not tried");
        assert!(err.contains("ffmpeg is not on the PATH") && err.contains("-pix_fmt yuv420p"), "{err}");
        assert!(!frames.join("recording.mp4").exists());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A stand-in ffmpeg: it notes its arguments and writes its output file.
        let fake = dir.join("fake-ffmpeg");
        std::fs::write(&fake, "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args.txt\"\nfor last; do :; done\nprintf mp4 > \"$last\"\n")
            .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (status, err) = record("40", Some(&fake));
        assert!(status.success(), "stderr:\n{err}");
        assert!(err.contains("removed 3 frames of an earlier recording"), "{err}");
        assert!(frames.join("frame_000001.png").exists() && !frames.join("frame_000002.png").exists(), "a new recording");
        assert_eq!(std::fs::read(frames.join("recording.mp4")).unwrap(), b"mp4");
        assert!(err.contains("encoded") && err.contains("recording.mp4"), "{err}");
        let args = std::fs::read_to_string(dir.join("args.txt")).unwrap();
        for a in ["-y", "-framerate 30", "frame_%06d.png", "scale=trunc(iw/2)*2:trunc(ih/2)*2", "-c:v libx264", "-pix_fmt yuv420p"] {
            assert!(args.contains(a), "{a} in {args}");
        }
        // A failing ffmpeg is a warning: the run succeeds and the frames stay.
        let broken = dir.join("broken-ffmpeg");
        std::fs::write(&broken, "#!/bin/sh\necho 'Unknown encoder libx264' >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (status, err) = record("40", Some(&broken));
        assert!(status.success(), "stderr:\n{err}");
        assert!(err.contains("warning: no video: ffmpeg failed") && err.contains("Unknown encoder libx264"), "{err}");
        assert!(frames.join("frame_000001.png").exists() && !frames.join("recording.mp4").exists());
        assert_eq!(std::fs::read_dir(&frames).unwrap().count(), 2, "no temporary file is left");
    }
}
