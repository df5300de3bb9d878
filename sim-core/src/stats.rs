//! The statistics of a state (mass, density range, fastest speed, forces) and what makes a
//! state sane: the test every state a run keeps, rolls back to or loads must pass.

/// Statistics after the last step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Steps done.
    pub step: u64,
    /// Total mass (sum of density over non-solid cells).
    pub mass: f64,
    /// Largest velocity magnitude.
    pub max_u: f64,
    /// Smallest and largest density of a fluid cell (NaN after a blow-up).
    pub rho_range: [f64; 2],
    /// Force on each obstacle during the last step (momentum exchange), lattice units.
    pub forces: Vec<[f64; 3]>,
    /// The first cell (lowest index) with a non-finite density or velocity, after a blow-up.
    pub first_bad_cell: Option<[usize; 3]>,
}

/// Largest speed a sane state has: the lattice speed of sound 1/sqrt(3) (Mach 1).
pub const SANE_SPEED: f64 = 0.577_350_269_189_625_8;

/// How far a sane state's density may stray from the reference density (a fraction of it):
/// a weakly compressible lattice Boltzmann flow varies its density by about Mach^2 / 2, a few
/// per cent; 50 % is a shock no valid run shows.
pub const SANE_DENSITY_SPREAD: f64 = 0.5;

impl Stats {
    /// The statistics of a state that could not be read (every number NaN).
    #[must_use]
    pub fn unreadable(step: u64) -> Stats {
        Stats { step, mass: f64::NAN, max_u: f64::NAN, rho_range: [f64::NAN; 2], forces: Vec::new(), first_bad_cell: None }
    }

    /// Whether the state is physically sane around the reference density `rho0` (see
    /// [`crate::domain::Domain::rho0`]): every value finite, the density of every fluid cell
    /// within [`SANE_DENSITY_SPREAD`] of `rho0` and every speed below the lattice speed of sound.
    /// Rollbacks, "last good" states and the exports after a blow-up use only such states.
    ///
    /// # Errors
    /// What is wrong with the state, in words.
    pub fn sanity(&self, rho0: f64) -> Result<(), String> {
        if self.blown_up() || !self.rho_range.iter().all(|r| r.is_finite()) {
            let at =
                self.first_bad_cell.map(|c| format!(" (first non-finite cell at x={}, y={}, z={})", c[0], c[1], c[2])).unwrap_or_default();
            return Err(format!("values are not finite{at}"));
        }
        if !(self.max_u < SANE_SPEED) {
            return Err(format!(
                "the speed reached {:.3}, Mach {:.2}: at or above the lattice speed of sound",
                self.max_u,
                self.max_u / SANE_SPEED
            ));
        }
        let (lo, hi) = (rho0 * (1.0 - SANE_DENSITY_SPREAD), rho0 * (1.0 + SANE_DENSITY_SPREAD));
        if !(self.rho_range[0] >= lo && self.rho_range[1] <= hi) {
            return Err(format!(
                "the density spans {:.4} to {:.4}, outside {lo} to {hi} (50 % around the reference density {rho0})",
                self.rho_range[0], self.rho_range[1]
            ));
        }
        Ok(())
    }

    /// Sum of the forces on all obstacles.
    #[must_use]
    pub fn total_force(&self) -> [f64; 3] {
        let mut t = [0.0; 3];
        for f in &self.forces {
            for a in 0..3 {
                t[a] += f[a];
            }
        }
        t
    }
    /// Whether the state has blown up (non-finite numbers).
    #[must_use]
    pub fn blown_up(&self) -> bool {
        !self.mass.is_finite() || !self.max_u.is_finite()
    }
}
