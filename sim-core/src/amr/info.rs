//! What an adaptive run reports (for the CLI and the viewer) and the settings a user may change
//! while it runs.

use super::criterion::Field;

/// What an adaptive run looks like now (for the CLI and the viewer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AmrInfo {
    /// Leaves per level.
    pub leaves: Vec<usize>,
    /// Active blocks (parents included) and the capacity.
    pub blocks: (usize, usize),
    /// Every leaf: lower corner and edge in cells of the finest level, and its level.
    pub boxes: Vec<([usize; 3], usize, u8)>,
    /// Finest level allowed.
    pub max_level: u8,
    /// Cells updated per coarse step counted as Jaber, Essel & Sullivan 2025 count them (a level-`l` cell `2^l` times).
    pub updates_per_step: u64,
    /// Cells of the uniform grid at the finest level (the effective resolution).
    pub effective_cells: u64,
    /// Seconds spent in adaptation (criterion, mesh, data) and in steps, since the start.
    pub adapt_secs: f64,
    /// Seconds spent stepping.
    pub step_secs: f64,
    /// Adaptations done.
    pub adaptations: u64,
    /// What the last adaptation did, or why it was skipped.
    pub last: String,
    /// The criterion and limits in force (what [`crate::Solver::set_amr`] changes).
    pub settings: AmrSettings,
}

/// The live settings of an adaptive run: the criterion, the finest level it may ask for (at
/// most the run's finest level, which fixes the grid), the interval and the frozen levels.
#[derive(Clone, Debug, PartialEq)]
pub struct AmrSettings {
    /// The field the block values come from.
    pub field: Field,
    /// Block value that asks for level 1; each doubling asks for one level more.
    pub threshold: f32,
    /// Hysteresis in (0, 1]: a block keeps its level while its value stays above this times
    /// the value that asks for it ([`Criterion::coarsen`]).
    pub coarsen: f32,
    /// Finest level the criterion and near-wall refinement may ask for.
    pub max_level: u8,
    /// Adapt every this many coarse steps; 0 = never.
    pub interval: u64,
    /// Levels whose ID sets do not change (no block of them created or removed).
    pub frozen: Vec<u8>,
}

impl Default for AmrSettings {
    fn default() -> Self {
        AmrSettings { field: Field::Vorticity, threshold: 0.01, coarsen: 1.0, max_level: 0, interval: 0, frozen: Vec::new() }
    }
}

impl AmrInfo {
    /// Share of the time spent in adaptation.
    #[must_use]
    pub fn adapt_share(&self) -> f64 {
        let t = self.adapt_secs + self.step_secs;
        if t > 0.0 {
            self.adapt_secs / t
        } else {
            0.0
        }
    }
}
