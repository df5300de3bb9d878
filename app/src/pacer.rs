//! When to take a rollback checkpoint: paced in wall time so that copying the state costs a
//! small share of a run (`esoflow run` and the viewer's solver thread).

use std::time::Instant;

/// Spaces the rollback checkpoints a run keeps (the state a blow-up goes back to) in wall time,
/// so that copying the state (a GiB on a large GPU grid) costs at most about 1/`RATIO` of the
/// run: a new one is due once `RATIO` times the last one's cost has passed since it was taken.
/// Without it, `esoflow run --backend cuda` with statistics every 10 steps spent 95 % of its time
/// copying checkpoints (a 1009 x 641 grid: 117 ms a row on an H200).
pub(crate) struct CheckpointPacer {
    at: Instant,
    cost: f64,
}

impl CheckpointPacer {
    const RATIO: f64 = 20.0;

    pub(crate) fn new() -> Self {
        CheckpointPacer { at: Instant::now(), cost: 0.0 }
    }

    /// Whether enough time has passed since the last checkpoint for the next.
    pub(crate) fn due(&self) -> bool {
        self.due_at(Instant::now())
    }

    fn due_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.at).as_secs_f64() >= Self::RATIO * self.cost
    }

    /// Seconds the last checkpoint took, and the least time until the next.
    pub(crate) fn cost(&self) -> (f64, f64) {
        (self.cost, Self::RATIO * self.cost)
    }

    /// Take a checkpoint through `take`, timing it.
    pub(crate) fn take<T>(&mut self, take: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = take();
        self.cost = t.elapsed().as_secs_f64();
        self.at = Instant::now();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::CheckpointPacer;
    use std::time::{Duration, Instant};

    #[test]
    fn a_checkpoint_is_due_after_twenty_times_its_cost() {
        let at = Instant::now();
        let p = CheckpointPacer { at, cost: 0.010 };
        assert!(!p.due_at(at));
        assert!(!p.due_at(at + Duration::from_millis(150)), "150 ms after a 10 ms checkpoint is too soon");
        assert!(p.due_at(at + Duration::from_millis(201)));
        // A checkpoint that costs nothing (a small grid) is due at every statistics row.
        let free = CheckpointPacer { at, cost: 0.0 };
        assert!(free.due_at(at));
        // `take` returns what it took and records when.
        let mut p = CheckpointPacer::new();
        assert_eq!(p.take(|| 7), 7);
        assert!(p.at >= at && p.cost < 1.0);
    }
}
