//! The uncompressed reference run beside a compressed one, and the density difference view.

use super::app::ViewerApp;
use super::worker::Command;
use sim_core::lattice::Lattice;
use sim_core::precision::Precision;
use sim_core::schemes::Scheme;
use std::sync::mpsc;
use std::sync::Arc;

/// Bytes an uncompressed reference run of `cells` cells takes at its peak: the dense CPU
/// solver's DDFs (Esoteric Pull, FP32) and flags, the checkpoint that brings it to the run's
/// state, and the density fields of both runs and their difference while a snapshot is made.
#[must_use]
pub fn reference_bytes(lattice: Lattice, cells: usize) -> u64 {
    let ddfs = Scheme::EsotericPull.bytes_stored(lattice, Precision::Fp32, 16);
    let checkpoint = (4 * lattice.q()) as f64;
    // Two `Fields` (density, velocity, solid flag: 17 bytes a cell) and the difference.
    let fields = 2.0 * 17.0 + 4.0;
    ((ddfs + checkpoint + fields) * cells as f64).ceil() as u64
}

impl ViewerApp {
    /// Start (or stop) an uncompressed reference run of the same scene beside a compressed one:
    /// the dense CPU solver, same size, brought to the running state and stepped in lockstep.
    /// Refused with a message on a dense run, and where it would not fit in memory (the message
    /// says how much it needs and suggests a smaller `domain.size`).
    pub fn set_reference(&mut self, on: bool) {
        if !on {
            self.view.diff = false;
            self.worker.send(Command::SetDiffView(false));
            self.worker.send(Command::SetReference(None));
            return;
        }
        if !self.compressed() {
            self.message("a reference run compares a compressed run with an uncompressed one: switch compression on first", true);
            return;
        }
        if self.pending_reference.is_some() {
            self.message("the reference run is already being built", false);
            return;
        }
        let n = self.scene.derived.size;
        let cells: usize = n.iter().product();
        let need = reference_bytes(self.scene.derived.lattice, cells);
        if let Some(limit) = self.reference_limit.or_else(|| crate::host_memory().map(|(_, avail)| avail / 10 * 8)) {
            if need > limit {
                let k = (limit as f64 / need as f64).cbrt() * 0.95;
                let smaller: Vec<String> = n.iter().map(|&x| ((x as f64 * k).floor() as usize).max(3).to_string()).collect();
                self.message(
                    format!(
                        "no reference run: it needs about {} (the uncompressed DDFs of {cells} cells, a checkpoint and density \
                         fields) but only {} is available; try a smaller domain.size, e.g. --set domain.size=[{}]",
                        sim_core::units::human_bytes(need),
                        sim_core::units::human_bytes(limit),
                        smaller.join(",")
                    ),
                    true,
                );
                return;
            }
        }
        let mut ls = self.scene.clone();
        ls.scene.compression.enabled = false;
        // Compressed subgrids keep obstacle walls half-way; so must the run they are compared with.
        ls.scene.solver.walls = sim_core::scene::WallMode::Staircase;
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("reference-build".into()).spawn(move || {
            let r = sim_core::build::cpu(&ls).map_err(|e| format!("cannot build the reference run: {e}"));
            let _ = tx.send(r);
        });
        match spawned {
            Ok(_) => {
                self.pending_reference = Some(rx);
                self.message(format!("starting an uncompressed reference run ({} at most)", sim_core::units::human_bytes(need)), false);
            }
            Err(e) => self.message(format!("cannot build the reference run: {e}"), true),
        }
    }

    pub(crate) fn poll_reference(&mut self) {
        let Some(rx) = &self.pending_reference else { return };
        let r = match rx.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return,
            Err(mpsc::TryRecvError::Disconnected) => Err("the reference builder stopped without an answer".into()),
        };
        self.pending_reference = None;
        match r {
            Ok(s) if self.compressed() && s.domain().n == self.scene.derived.size => self.worker.send(Command::SetReference(Some(s))),
            Ok(_) => self.message("the reference run was not started: the scene changed meanwhile", false),
            Err(e) => self.message(e, true),
        }
    }

    /// Whether a reference run is going (or being built).
    #[must_use]
    pub fn reference_running(&self) -> bool {
        self.pending_reference.is_some() || self.snap.as_ref().is_some_and(|s| s.reference.is_some())
    }

    /// Show the density difference against the reference run on the slices (needs one).
    pub fn set_diff_view(&mut self, on: bool) {
        if on && !self.reference_running() {
            self.message("the difference view needs the reference run: switch it on first", true);
            return;
        }
        self.view.diff = on;
        self.worker.send(Command::SetDiffView(on));
    }

    /// The density difference the slices show now, if the difference view is on and has data.
    #[must_use]
    pub fn diff_values(&self) -> Option<&Arc<Vec<f32>>> {
        if !self.view.diff {
            return None;
        }
        self.snap.as_ref()?.reference.as_ref()?.diff.as_ref()
    }

    /// Smallest and largest density difference over the fluid cells.
    pub(crate) fn diff_min_max(&self) -> Option<(f32, f32)> {
        let d = self.diff_values()?;
        let solid = &self.snap.as_ref()?.solid;
        Some(super::worker::fluid_min_max(d, solid).0)
    }
}
