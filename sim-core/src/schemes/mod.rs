//! Streaming schemes: where each DDF is loaded from and stored to. The collision and boundary
//! code is shared (see `backend::cell::update_cell`); a scheme only maps (cell, direction,
//! parity) to memory slots. Memory and traffic per cell are given for the UI and the bench.

use crate::lattice::Lattice;
use crate::precision::Precision;
use serde::{Deserialize, Serialize};

/// A streaming scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// Two DDF copies: pull from neighbours of copy A, collide, store into copy B (reference).
    OneStepPull,
    /// AA-pattern (Bailey et al.): one copy; even steps stream twice, odd steps not at all.
    Aa,
    /// Esoteric Pull (Lehmann 2022): one copy, implicit bounce-back. The default.
    #[default]
    EsotericPull,
    /// Esoteric Push: Esoteric Pull mirrored (pairs streamed along the opposite direction).
    EsotericPush,
    /// LBM-Swap (Valero-Lara 2017): collide and swap, then stream by swapping with neighbours.
    Swap,
    /// LBM-Ghost (Valero-Lara 2017): blocks with ghost layers, one copy plus ghosts.
    Ghost,
}

impl Scheme {
    /// All schemes.
    pub const ALL: [Scheme; 6] = [Scheme::OneStepPull, Scheme::Aa, Scheme::EsotericPull, Scheme::EsotericPush, Scheme::Swap, Scheme::Ghost];

    /// Name as written in scene files.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Scheme::OneStepPull => "one_step_pull",
            Scheme::Aa => "aa",
            Scheme::EsotericPull => "esoteric_pull",
            Scheme::EsotericPush => "esoteric_push",
            Scheme::Swap => "swap",
            Scheme::Ghost => "ghost",
        }
    }

    /// Whether solid cells give same-step (halfway) bounce-back without fluid cells reading
    /// neighbour flags. Only LBM-Swap does: in Esoteric Pull/Push and AA a skipped solid cell
    /// returns the DDF one step late (full-way bounce-back), so Esoflow's boundary cells read the
    /// bounce-back slot explicitly and every scheme matches One-Step Pull step for step.
    #[must_use]
    pub fn implicit_bounce_back(self) -> bool {
        matches!(self, Scheme::Swap)
    }

    /// Copies of the DDFs held in memory (ghost layers counted for LBM-Ghost with edge `b`).
    #[must_use]
    pub fn ddf_copies(self, lattice: Lattice, ghost_block: usize) -> f64 {
        match self {
            Scheme::OneStepPull => 2.0,
            Scheme::Ghost => {
                let b = ghost_block as f64;
                ((b + 2.0) / b).powi(lattice.dims() as i32)
            }
            _ => 1.0,
        }
    }

    /// Bytes stored per cell: DDFs plus one flag byte.
    #[must_use]
    pub fn bytes_stored(self, lattice: Lattice, precision: Precision, ghost_block: usize) -> f64 {
        (lattice.q() * precision.bytes()) as f64 * self.ddf_copies(lattice, ghost_block) + 1.0
    }

    /// Bytes moved per cell and step in the ideal model for cells away from boundaries: every DDF
    /// read and written once plus the own flag. Esoflow's flag byte says whether a cell touches a
    /// boundary, so no scheme reads neighbour flags in the bulk (Lehmann 2022, Table 1, counts
    /// q more bytes for One-Step Pull and AA, which check every neighbour). LBM-Swap streams in
    /// a second pass (its swaps read and write again); LBM-Ghost also copies the ghost layers.
    #[must_use]
    pub fn bytes_moved(self, lattice: Lattice, precision: Precision, ghost_block: usize) -> f64 {
        let q = lattice.q() as f64;
        let b = precision.bytes() as f64;
        let base = 2.0 * q * b + 1.0;
        match self {
            Scheme::EsotericPull | Scheme::EsotericPush | Scheme::OneStepPull | Scheme::Aa => base,
            Scheme::Swap => base + 2.0 * (q - 1.0) * b + 1.0,
            Scheme::Ghost => {
                let extra = self.ddf_copies(lattice, ghost_block) - 1.0;
                base + 2.0 * q * b * extra
            }
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_matches_lehmann_table_1_for_d3q19() {
        let l = Lattice::D3Q19;
        // FP32: Esoteric Pull 8q + 1; FP16 4q + 1. One-Step Pull stores two copies.
        assert_eq!(Scheme::EsotericPull.bytes_moved(l, Precision::Fp32, 16), 153.0);
        assert_eq!(Scheme::EsotericPull.bytes_moved(l, Precision::Fp16s, 16), 77.0);
        assert_eq!(Scheme::OneStepPull.bytes_stored(l, Precision::Fp32, 16), 153.0);
        assert_eq!(Scheme::EsotericPull.bytes_stored(l, Precision::Fp32, 16), 77.0);
        assert_eq!(Scheme::EsotericPull.bytes_stored(l, Precision::Fp16c, 16), 39.0);
    }
}
