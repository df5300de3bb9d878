//! The probes of `esoflow run`: the scene's `[[probes]]` and the `--probe` flags, sampled every
//! `--probe-every` steps, written to `probes.csv` in the `--export` folder and summarised at
//! the end of the run.

use super::RunArgs;
use anyhow::{anyhow, Context};
use sim_core::forces::NoShedding;
use sim_core::probes::{name_probes, Probe, ProbeSeries};
use sim_core::scene::{ForceReference, LoadedScene};
use sim_core::units::si;
use sim_core::Solver;
use std::path::PathBuf;

/// Most samples a run keeps of each probe (and writes to probes.csv): 2^18, about 8 MB a
/// probe; a longer series keeps its latest samples.
pub const PROBE_SAMPLES: usize = 1 << 18;

/// The probes of a run and their samples.
pub struct Probes {
    series: ProbeSeries,
    /// The probes' cells on the solver's grid (finer than the scene's on adaptive blocks).
    cells: Vec<[usize; 3]>,
    every: u64,
    dims: usize,
    /// probes.csv, with `--export`.
    csv: Option<PathBuf>,
}

/// The solver's checkpoint with the run's probes in it (a resume samples the same places).
pub fn checkpoint_with(solver: &dyn Solver, probes: Option<&Probes>) -> sim_core::checkpoint::Checkpoint {
    let mut c = solver.checkpoint();
    c.probes = probes.map(|p| p.series.probes().to_vec()).unwrap_or_default();
    c
}

impl Probes {
    /// The probes of a run: the scene's, then those of `--probe` in their order, each checked
    /// against the scene's domain and named; where there are none, those the resumed
    /// checkpoint carries (`resumed`, inside the domain); `None` where there are none at all.
    ///
    /// # Errors
    /// A `--probe` that is not a cell of the domain (the message names the flag and what is
    /// valid).
    pub fn new(a: &RunArgs, ls: &LoadedScene, resumed: &[Probe]) -> anyhow::Result<Option<Probes>> {
        let dims = ls.derived.lattice.dims();
        let mut probes = ls.derived.probes.clone();
        for text in &a.probe {
            probes.push(Probe::parse(text, ls.derived.size, dims).map_err(|e| anyhow!("--probe {text}: {e}"))?);
        }
        if probes.is_empty() && !resumed.is_empty() {
            let size = ls.derived.size;
            probes = resumed.iter().filter(|p| (0..3).all(|k| p.cell[k] < size[k])).cloned().collect();
            if probes.len() < resumed.len() {
                eprintln!("note: {} of the checkpoint's probes lie outside this scene's grid: left out", resumed.len() - probes.len());
            }
            if !probes.is_empty() {
                eprintln!("sampling the checkpoint's {} probes", probes.len());
            }
        }
        if probes.is_empty() {
            return Ok(None);
        }
        name_probes(&mut probes);
        let csv = a.export.as_ref().map(|d| d.join("probes.csv"));
        // With the scene's SI units probes.csv gets their columns too.
        let series = ProbeSeries::new(probes, PROBE_SAMPLES).with_units(ls.derived.units);
        Ok(Some(Probes { series, cells: Vec::new(), every: a.probe_every, dims, csv }))
    }

    /// Get ready to sample `solver` (a scene of `size` cells) for `steps` steps: the cells on
    /// its grid; after a resume, the samples of probes.csv before the first step; the first
    /// sample where the first step is one.
    ///
    /// # Errors
    /// A probes.csv of other probes on a resume (left as it was), or a failed sample.
    pub fn start(&mut self, solver: &dyn Solver, size: [usize; 3], resumed: bool, steps: u64) -> anyhow::Result<()> {
        let grid = solver.domain().n;
        self.cells = self.series.probes().iter().map(|p| p.cell_on(size, grid)).collect();
        let d = solver.domain();
        for (p, c) in self.series.probes().iter().zip(&self.cells) {
            if sim_core::domain::is_solid(d.flags[d.index(c[0], c[1], c[2])]) {
                eprintln!("note: probe {} at {} is inside an obstacle or wall: it samples zero velocity", p.name, self.at(p.cell));
            }
        }
        let start = solver.time_step();
        if let (true, Some(p)) = (resumed, &self.csv) {
            let kept = self.series.resume_csv(p, start).map_err(|e| anyhow!("--resume: continuing {e}"))?;
            if kept > 0 {
                eprintln!("continuing {} after its samples of {kept} steps before step {start}", p.display());
            }
        }
        if steps / self.every >= PROBE_SAMPLES as u64 {
            eprintln!(
                "warning: --probe-every {} takes {} samples of each probe; a run keeps the latest {PROBE_SAMPLES} \
                 (raise --probe-every to keep the whole run)",
                self.every,
                steps / self.every + 1
            );
        }
        if self.due(start) {
            self.sample(solver)?;
        }
        Ok(())
    }

    /// The first step after `now` that takes a sample.
    #[must_use]
    pub fn next_after(&self, now: u64) -> u64 {
        (now / self.every + 1).saturating_mul(self.every)
    }

    /// Whether `step` takes a sample.
    #[must_use]
    pub fn due(&self, step: u64) -> bool {
        step % self.every == 0
    }

    /// Sample every probe now.
    ///
    /// # Errors
    /// The solver's (a device error).
    pub fn sample(&mut self, solver: &dyn Solver) -> anyhow::Result<()> {
        let set = solver.probe(&self.cells).context("sampling the probes")?;
        self.series.push(&set);
        Ok(())
    }

    /// Drop the samples taken after `step`, the state a blow-up rolled the run back to: the
    /// samples then end where the saved state does, and a resume from it continues them.
    pub fn back_to(&mut self, step: u64) {
        self.series.truncate_after(step);
    }

    /// Write probes.csv (with `--export`); returns its path.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write(&self) -> anyhow::Result<Option<PathBuf>> {
        let Some(p) = &self.csv else { return Ok(None) };
        self.series.write_csv(p).with_context(|| format!("writing {}", p.display()))?;
        Ok(Some(p.clone()))
    }

    /// A cell as the user gave it: (x, y) in 2D, (x, y, z) in 3D.
    fn at(&self, c: [usize; 3]) -> String {
        if self.dims == 2 {
            format!("({}, {})", c[0], c[1])
        } else {
            format!("({}, {}, {})", c[0], c[1], c[2])
        }
    }

    /// One line per probe: where it is, its speed over the second half of the samples and
    /// the period of its velocity's oscillation (with the Strouhal number where the scene
    /// gives reference values), each also in SI units where the scene gives them.
    pub fn report(&self, reference: &ForceReference) {
        for (k, p) in self.series.probes().iter().enumerate() {
            let at = self.at(p.cell);
            let Some(s) = self.series.summary(k) else {
                eprintln!("probe {} at {at}: no samples", p.name);
                continue;
            };
            let units = self.series.units();
            let mut line = format!(
                "probe {} at {at}: steps {} to {} ({} samples): |u| mean {:.4e}, {:.4e} to {:.4e}",
                p.name, s.from, s.to, s.samples, s.mean_speed, s.min_speed, s.max_speed
            );
            if let Some(u) = units {
                let v = |x: f64| si(u.velocity(x));
                line.push_str(&format!(" ({} m/s, {} to {})", v(s.mean_speed), v(s.min_speed), v(s.max_speed)));
            }
            let axis = |a: usize| ["ux", "uy", "uz"][a.min(2)];
            match s.period {
                Ok(o) => {
                    line.push_str(&format!(", {} period {:.1} steps", axis(o.component), o.period));
                    if let Some(u) = units {
                        line.push_str(&format!(" = {} s", si(u.time(o.period))));
                    }
                    line.push_str(&format!(" over {} periods", o.periods));
                    if let Some(v) = reference.values {
                        line.push_str(&format!(", St {:.4}", v.strouhal(o.period)));
                    }
                }
                Err(NoShedding::Steady { .. }) => line.push_str(", steady"),
                Err(NoShedding::TooFewPeriods { periods }) => {
                    line.push_str(&format!(", {periods} whole period(s) of oscillation: too few for a period"));
                }
                Err(NoShedding::Undersampled { period, .. }) => line.push_str(&format!(
                    ", it swings every ~{period:.0} steps but is sampled every {} steps: lower --probe-every",
                    self.every
                )),
            }
            eprintln!("{line}");
        }
        if self.series.dropped() > 0 {
            eprintln!(
                "note: the probes kept their latest {} samples ({} older ones went); raise --probe-every to keep the whole run",
                self.series.len(),
                self.series.dropped()
            );
        }
        if self.csv.is_none() {
            eprintln!("(add --export DIR to write every sample to DIR/probes.csv)");
        }
    }
}
