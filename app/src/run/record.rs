//! Recordings: a run's view as a numbered sequence of PNG frames in a folder
//! (`frame_000000.png`, `frame_000001.png`, ...: zero-padded, so they sort by name), made into
//! an H.264 video `recording.mp4` by ffmpeg where it is installed. `esoflow run --record DIR`
//! writes them; anything else that records (a viewer's Record button) uses the same names and
//! the same encoding, so a folder of frames is one kind of thing everywhere.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Frames per second of the video.
pub const FPS: u32 = 30;

/// File name of the video in the frames' folder.
pub const VIDEO: &str = "recording.mp4";

/// Environment variable that names the ffmpeg executable (default: `ffmpeg` on the PATH).
pub const FFMPEG_ENV: &str = "ESOFLOW_FFMPEG";

/// Digits of the frame number in a frame's name (more where a recording outgrows them).
const DIGITS: usize = 6;

/// The path of frame `index` in `dir`: `dir/frame_000042.png`.
#[must_use]
pub fn frame_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("frame_{index:0DIGITS$}.png"))
}

/// The frame number of a file name written by [`frame_path`].
fn frame_index(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("frame_")?.strip_suffix(".png")?;
    (digits.len() >= DIGITS && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
}

/// The frame numbers in `dir`, in order (none for a folder that cannot be read).
#[must_use]
pub fn frames(dir: &Path) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<u64> = entries.flatten().filter_map(|e| frame_index(&e.file_name().to_string_lossy())).collect();
    v.sort_unstable();
    v
}

/// Remove an earlier recording from `dir`: its frames (only files named as [`frame_path`]
/// names them) and its video, so that a new recording's video holds only its own frames and
/// no video of other frames is left beside them; returns how many frames were removed.
#[must_use]
pub fn remove_recording(dir: &Path) -> usize {
    let _ = std::fs::remove_file(dir.join(VIDEO));
    frames(dir).into_iter().filter(|&i| std::fs::remove_file(frame_path(dir, i)).is_ok()).count()
}

/// The ffmpeg executable: [`FFMPEG_ENV`] where set, else `ffmpeg` (looked up on the PATH).
fn ffmpeg() -> (OsString, bool) {
    match std::env::var_os(FFMPEG_ENV).filter(|v| !v.is_empty()) {
        Some(p) => (p, true),
        None => (OsString::from("ffmpeg"), false),
    }
}

/// ffmpeg's arguments to encode the frames of `dir` from number `first` at `fps` into `out`:
/// H.264 in yuv420p (what every player plays), each dimension cut to an even number of pixels
/// (yuv420p needs that), `-y` to replace an earlier video.
fn ffmpeg_args(dir: &Path, first: u64, fps: u32, out: &Path) -> Vec<OsString> {
    // The input is a printf pattern: a '%' of the folder's name is written '%%'.
    let name = format!("frame_%0{DIGITS}d.png");
    let pattern = match dir.to_str() {
        Some(d) if d.contains('%') => Path::new(&d.replace('%', "%%")).join(name).into_os_string(),
        _ => dir.join(name).into_os_string(),
    };
    let mut a: Vec<OsString> = ["-y", "-hide_banner", "-loglevel", "error", "-framerate"].iter().map(OsString::from).collect();
    a.push(fps.to_string().into());
    if first != 0 {
        a.extend(["-start_number".into(), first.to_string().into()]);
    }
    a.extend(["-i".into(), pattern]);
    for s in ["-vf", "scale=trunc(iw/2)*2:trunc(ih/2)*2", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart"] {
        a.push(s.into());
    }
    a.push(out.as_os_str().to_owned());
    a
}

/// The command line that makes the video of `dir` by hand (for where ffmpeg is not installed),
/// quoted for a POSIX shell.
#[must_use]
pub fn ffmpeg_command(dir: &Path, fps: u32) -> String {
    let first = frames(dir).first().copied().unwrap_or(0);
    let quote = |s: &str| {
        if s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./+:=".contains(c)) {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let args = ffmpeg_args(dir, first, fps, &dir.join(VIDEO));
    let skip = ["-hide_banner", "-loglevel", "error"];
    let mut words = vec!["ffmpeg".to_string()];
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned()).peekable();
    while let Some(w) = it.next() {
        if w == "-loglevel" {
            it.next();
            continue;
        }
        if !skip.contains(&w.as_str()) {
            words.push(quote(&w));
        }
    }
    words.join(" ")
}

/// Encode the frames in `dir` as `dir/recording.mp4` at `fps` frames a second with ffmpeg
/// ([`FFMPEG_ENV`], else `ffmpeg` on the PATH): stdin closed, its output captured (and shown
/// only in an error). The video is written to a temporary file beside it and renamed into
/// place, so a failed or killed encoding never leaves a damaged `recording.mp4`.
///
/// Returns the video's path, or `None` where `ffmpeg` is not on the PATH (say how to make the
/// video by hand with [`ffmpeg_command`]).
///
/// # Errors
/// No frames in `dir`, an [`FFMPEG_ENV`] that cannot be run, or ffmpeg failing (the message
/// has the end of what it printed). The frames stay either way.
pub fn encode_video(dir: &Path, fps: u32) -> Result<Option<PathBuf>, String> {
    let Some(&first) = frames(dir).first() else {
        return Err(format!("{} holds no frames (frame_NNNNNN.png) to encode", dir.display()));
    };
    let out = dir.join(VIDEO);
    let tmp = dir.join(format!(".{VIDEO}.{}{}", std::process::id(), sim_core::atomic_file::PARTIAL_SUFFIX));
    let (exe, from_env) = ffmpeg();
    // The container is named: the temporary file's name does not say it.
    let mut args = ffmpeg_args(dir, first, fps, &tmp);
    args.insert(args.len() - 1, "-f".into());
    args.insert(args.len() - 1, "mp4".into());
    let run = Command::new(&exe).args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).output();
    let output = match run {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from_env => return Ok(None),
        Err(e) => return Err(format!("{FFMPEG_ENV}={}: cannot run it: {e}", exe.to_string_lossy())),
    };
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let said = String::from_utf8_lossy(&output.stderr);
        let said: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = said[said.len().saturating_sub(3)..].join(" / ");
        return Err(format!("ffmpeg failed ({}): {tail}", output.status));
    }
    std::fs::rename(&tmp, &out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", out.display())
    })?;
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_named_to_sort_and_found_again() {
        let dir = std::env::temp_dir().join(format!("esoflow-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(frame_path(&dir, 42), dir.join("frame_000042.png"));
        assert_eq!(frame_path(&dir, 1_234_567), dir.join("frame_1234567.png"));
        for i in [3, 1, 2] {
            std::fs::write(frame_path(&dir, i), b"png").unwrap();
        }
        for other in ["frame_1.png", "frame_000004.jpg", "notes.txt"] {
            std::fs::write(dir.join(other), b"x").unwrap();
        }
        assert_eq!(frames(&dir), [1, 2, 3]);
        assert_eq!(ffmpeg_command(&dir, 30).split(' ').filter(|w| *w == "-start_number").count(), 1);
        std::fs::write(dir.join(VIDEO), b"mp4").unwrap();
        assert_eq!(remove_recording(&dir), 3);
        assert!(!dir.join(VIDEO).exists());
        assert!(frames(&dir).is_empty() && dir.join("frame_1.png").exists());
        assert!(encode_video(&dir, 30).unwrap_err().contains("holds no frames"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_command_line_encodes_h264_yuv420p_at_even_sizes() {
        let dir = Path::new("/tmp/my run%");
        let c = ffmpeg_command(dir, 30);
        assert_eq!(
            c,
            "ffmpeg -y -framerate 30 -i '/tmp/my run%%/frame_%06d.png' -vf 'scale=trunc(iw/2)*2:trunc(ih/2)*2' -c:v libx264 \
             -pix_fmt yuv420p -movflags +faststart '/tmp/my run%/recording.mp4'"
        );
    }
}
