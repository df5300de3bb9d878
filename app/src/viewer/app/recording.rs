//! Recording the view in the window: the view (the flow and its legend, no panels) saved as the
//! numbered PNG frames of `esoflow run --record` every K steps while it runs, and made into a
//! video by ffmpeg (where one is on the PATH) when the recording stops. The window shell takes
//! the pictures ([`ViewerApp::record_request`]); what to take and when is decided here.

use super::ViewerApp;
use crate::run::record;
use egui::Ui;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// A recording in progress.
#[derive(Debug)]
pub struct Recording {
    /// Folder of the frames.
    pub dir: PathBuf,
    /// Steps between two frames.
    pub every: u64,
    /// Frames taken so far.
    pub frames: u64,
    /// The step the next frame waits for.
    next_step: u64,
}

/// What the Export panel's recording fields hold.
#[derive(Clone, Debug)]
pub struct RecordSettings {
    /// Folder of the frames.
    pub dir: String,
    /// Steps between two frames (0: every new frame of the view).
    pub every: u64,
}

impl Default for RecordSettings {
    fn default() -> RecordSettings {
        RecordSettings { dir: "recordings/esoflow".into(), every: 0 }
    }
}

impl ViewerApp {
    /// Start recording into `dir` every `every` steps (0: every new frame, that is every
    /// `steps_per_frame` steps): the folder is created and must take files; an earlier
    /// recording in it is replaced. Refused with a message where it cannot be written.
    pub fn start_recording(&mut self, dir: &Path, every: u64) {
        if self.recording.is_some() {
            self.stop_recording();
        }
        let made = std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| sim_core::atomic_file::probe_dir(dir).map_err(|e| e.to_string()));
        if let Err(e) = made {
            self.message(format!("not recording: cannot write into {}: {e}", dir.display()), true);
            return;
        }
        let removed = record::remove_recording(dir);
        let every = if every == 0 { self.steps_per_frame } else { every };
        let step = self.step();
        self.recording = Some(Recording { dir: dir.to_path_buf(), every, frames: 0, next_step: step });
        let note = if removed > 0 { format!(" (replacing {removed} frames of an earlier recording)") } else { String::new() };
        self.message(format!("recording the view every {every} steps into {}{note}", dir.display()), false);
    }

    /// Stop recording; the video is made on a thread of its own (a message says where it went,
    /// or how to make it where there is no ffmpeg).
    pub fn stop_recording(&mut self) {
        let Some(r) = self.recording.take() else { return };
        self.record_request = None;
        if r.frames == 0 {
            self.message("recording stopped: no frames were taken", false);
            return;
        }
        self.message(format!("recorded {} frames into {}; making the video…", r.frames, r.dir.display()), false);
        let (tx, rx) = mpsc::channel();
        let dir = r.dir.clone();
        let spawned = std::thread::Builder::new().name("video".into()).spawn(move || {
            let said = match record::encode_video(&dir, record::FPS) {
                Ok(Some(v)) => (format!("wrote {}", v.display()), false),
                Ok(None) => (
                    format!("no ffmpeg on the PATH: the frames stay; make the video with: {}", record::ffmpeg_command(&dir, record::FPS)),
                    false,
                ),
                Err(e) => (format!("the video was not made ({e}); the frames stay in {}", dir.display()), true),
            };
            let _ = tx.send(said);
        });
        match spawned {
            Ok(_) => self.video = Some(rx),
            Err(e) => self.message(format!("cannot start making the video: {e}"), true),
        }
    }

    /// The frames a recording takes now: a new snapshot at or past the step the next frame
    /// waits for asks the shell for a picture of the view. A video made meanwhile says so.
    pub(crate) fn poll_recording(&mut self) {
        if let Some(rx) = &self.video {
            if let Ok((text, error)) = rx.try_recv() {
                self.video = None;
                self.message(text, error);
            }
        }
        let Some(step) = self.snap.as_ref().map(|s| s.step) else { return };
        let Some(r) = self.recording.as_mut() else { return };
        if step < r.next_step || self.record_request.is_some() || self.field_texture.is_none() {
            return;
        }
        self.record_request = Some(record::frame_path(&r.dir, r.frames));
        r.frames += 1;
        r.next_step = (step / r.every + 1) * r.every;
    }

    /// Stop recording and make the video now (the window is closing): what was done, for stderr.
    pub fn finish_recording(&mut self) -> Option<String> {
        let r = self.recording.take()?;
        if r.frames == 0 {
            return Some(format!("recording into {}: no frames were taken", r.dir.display()));
        }
        let made = match record::encode_video(&r.dir, record::FPS) {
            Ok(Some(v)) => format!(", and {}", v.display()),
            Ok(None) => format!("; no ffmpeg on the PATH, make the video with: {}", record::ffmpeg_command(&r.dir, record::FPS)),
            Err(e) => format!("; the video was not made: {e}"),
        };
        Some(format!("recorded {} frames (every {} steps) into {}{made}", r.frames, r.every, r.dir.display()))
    }

    /// A frame the shell could not write: the recording stops with a message.
    pub fn recording_failed(&mut self, why: &str) {
        if let Some(r) = self.recording.take() {
            self.message(format!("recording into {} stopped: {why}", r.dir.display()), true);
        }
    }

    /// The Export panel's recording controls.
    pub(crate) fn recording_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            let label = ui.label("record into");
            ui.add(egui::TextEdit::singleline(&mut self.record_settings.dir).desired_width(150.0)).labelled_by(label.id);
        });
        ui.horizontal(|ui| {
            let label = ui.label("every");
            ui.add(egui::DragValue::new(&mut self.record_settings.every).range(0..=1_000_000).suffix(" steps"))
                .labelled_by(label.id)
                .on_hover_text("0: every new frame of the view");
            match &self.recording {
                Some(r) => {
                    let text = format!("Stop recording ({} frames)", r.frames);
                    if ui.button(text).on_hover_text("F9").clicked() {
                        self.stop_recording();
                    }
                }
                None => {
                    if ui.button("Start recording").on_hover_text("F9: the view as PNG frames, a video where ffmpeg is installed").clicked()
                    {
                        self.toggle_recording();
                    }
                }
            }
        });
    }

    /// Start recording with the Export panel's settings, or stop (F9, the toolbar's Record).
    pub fn toggle_recording(&mut self) {
        if self.recording.is_some() {
            self.stop_recording();
        } else {
            let dir = PathBuf::from(self.record_settings.dir.trim());
            self.start_recording(&dir, self.record_settings.every);
        }
    }
}
