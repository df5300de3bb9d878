//! Probes: fixed cells where a run samples the flow over time ("what is the velocity here?").
//!
//! A [`Probe`] is a named cell, given in a scene's `[[probes]]` or on the command line as
//! `X,Y[,Z]` ([`Probe::parse`]). [`crate::solver::Solver::probe`] samples the velocity, density
//! and vorticity of a few cells at once; a [`ProbeSeries`] keeps the samples of each probe over
//! the steps (a bounded ring), writes them as `probes.csv` ([`PROBES_CSV_HEADER`]) and
//! summarises them ([`ProbeSeries::summary`]): mean speed, its range, and the period of the
//! velocity's oscillation (vortex shedding seen from the wake), by the same zero-crossing rule
//! as the lift's ([`crate::forces::oscillation`]).
//!
//! Everything is in lattice units: cells, steps, cells per step, lattice density; the pressure
//! is the lattice one, `c_s^2 (rho - 1)` with `c_s^2 = 1/3`, about the reference density 1.
//! Where the scene gives SI units ([`crate::units`]), probes.csv has the same columns followed
//! by their SI values ([`PROBES_CSV_SI_COLUMNS`]).

use crate::error::SolverError;
use crate::fields::{curl_of_gradient, gradient_at, Fields};
use crate::forces::{oscillation, NoShedding};
pub use crate::scene::{cell_of, name_probes, Probe};
use crate::units::Units;
use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

/// Header of probes.csv (a contract other tools script against): one row per probe and sample,
/// in lattice units (`x,y,z` the probe's cell; `speed` = |u|; `pressure` = (rho - 1) / 3;
/// `vorticity` = |curl u|).
pub const PROBES_CSV_HEADER: &str = "step,probe,x,y,z,ux,uy,uz,speed,rho,pressure,vorticity";

/// The columns probes.csv has after [`PROBES_CSV_HEADER`] where the scene gives SI units: the
/// step's time (s), the velocity and speed (m/s), the density (kg/m^3), the pressure about
/// lattice density 1 (Pa) and the vorticity (1/s).
pub const PROBES_CSV_SI_COLUMNS: &str = "time_s,ux_m_s,uy_m_s,uz_m_s,speed_m_s,rho_kg_m3,pressure_pa,vorticity_1_s";

/// The header of probes.csv: [`PROBES_CSV_HEADER`], and [`PROBES_CSV_SI_COLUMNS`] with `units`.
#[must_use]
pub fn probes_csv_header(units: Option<&Units>) -> String {
    match units {
        Some(_) => format!("{PROBES_CSV_HEADER},{PROBES_CSV_SI_COLUMNS}"),
        None => PROBES_CSV_HEADER.to_string(),
    }
}

/// The lattice speed of sound squared of every velocity set Esoflow runs (D2Q9, D3Q19, D3Q27).
pub const CS2: f32 = 1.0 / 3.0;

/// The flow at one probe at one step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProbeSample {
    /// Step the sample was taken at.
    pub step: u64,
    /// Velocity (cells/step); zero in a solid cell.
    pub u: [f32; 3],
    /// Density (lattice units); 1 in a solid cell (as [`Fields`] stores solid cells).
    pub rho: f32,
    /// Vorticity magnitude |curl u| (1/step), the quantity of
    /// [`crate::fields::FieldKind::Vorticity`]; zero in a solid cell.
    pub vorticity: f32,
}

impl ProbeSample {
    /// Speed |u| (cells/step).
    #[must_use]
    pub fn speed(&self) -> f32 {
        (self.u[0] * self.u[0] + self.u[1] * self.u[1] + self.u[2] * self.u[2]).sqrt()
    }

    /// Lattice pressure about the reference density 1: `c_s^2 (rho - 1)` with `c_s^2 = 1/3`
    /// (the equation of state of the lattice Boltzmann method); zero in a solid cell.
    #[must_use]
    pub fn pressure(&self) -> f32 {
        CS2 * (self.rho - 1.0)
    }
}

/// Refuse cells outside a grid of `n` cells (before anything indexes with them).
///
/// # Errors
/// [`SolverError::Param`] naming the first such cell and the grid.
pub fn check_cells(n: [usize; 3], cells: &[[usize; 3]]) -> Result<(), SolverError> {
    match cells.iter().find(|c| (0..3).any(|a| c[a] >= n[a])) {
        Some(c) => Err(SolverError::Param(format!(
            "probe cell ({}, {}, {}) is outside the grid of {} x {} x {} cells",
            c[0], c[1], c[2], n[0], n[1], n[2]
        ))),
        None => Ok(()),
    }
}

/// Sample `cells` (inside a grid of `n` cells, see [`check_cells`]) at `step`, from `at`, which
/// gives the density, velocity and solidity of a cell by its index `x + nx (y + ny z)` (zero
/// velocity and density 1 in solid cells, as [`Fields`] stores them). Only the probed cells and
/// their neighbours along each axis are asked for; the vorticity comes from
/// [`crate::fields::gradient_at`], as the vorticity field does.
pub fn sample_cells(n: [usize; 3], step: u64, cells: &[[usize; 3]], at: impl Fn(usize) -> (f32, [f32; 3], bool)) -> Vec<ProbeSample> {
    let idx = |p: [usize; 3]| p[0] + n[0] * (p[1] + n[1] * p[2]);
    cells
        .iter()
        .map(|&c| {
            let (rho, u, solid) = at(idx(c));
            if solid {
                return ProbeSample { step, u: [0.0; 3], rho: 1.0, vorticity: 0.0 };
            }
            let w = curl_of_gradient(&gradient_at(n, c, false, |q| at(idx(q)).1));
            ProbeSample { step, u, rho, vorticity: (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt() }
        })
        .collect()
}

/// [`sample_cells`] where the density and velocity come from a device a few cells at a time:
/// `read` gets the cells the samples read (the probed cells and their neighbours, grid indices,
/// sorted, each once) and returns `[rho, ux, uy, uz]` of each, in that order. Solid cells (by
/// `flags`) read as [`Fields`] stores them: at rest, density 1.
///
/// # Errors
/// A cell outside the grid; what `read` returns.
pub fn sample_read(
    n: [usize; 3],
    flags: &[u8],
    step: u64,
    cells: &[[usize; 3]],
    read: impl FnOnce(&[usize]) -> Result<Vec<[f32; 4]>, SolverError>,
) -> Result<Vec<ProbeSample>, SolverError> {
    check_cells(n, cells)?;
    if cells.is_empty() {
        return Ok(Vec::new());
    }
    // Which cells the samples read, the sampling says itself in a dry run.
    let wanted = std::cell::RefCell::new(Vec::new());
    let _ = sample_cells(n, step, cells, |i| {
        wanted.borrow_mut().push(i);
        (1.0, [0.0; 3], false)
    });
    let mut wanted = wanted.into_inner();
    wanted.sort_unstable();
    wanted.dedup();
    let values = read(&wanted)?;
    if values.len() != wanted.len() {
        return Err(SolverError::Backend(format!("{} probe values read for {} cells (a bug)", values.len(), wanted.len())));
    }
    Ok(sample_cells(n, step, cells, |i| match wanted.binary_search(&i) {
        Ok(k) if !crate::domain::is_solid(flags[i]) => {
            let v = values[k];
            (v[0], [v[1], v[2], v[3]], false)
        }
        _ => (1.0, [0.0; 3], true),
    }))
}

/// [`sample_cells`] from the fields of a whole grid.
#[must_use]
pub fn sample_fields(f: &Fields, step: u64, cells: &[[usize; 3]]) -> Vec<ProbeSample> {
    sample_cells(f.size, step, cells, |i| (f.rho[i], f.u[i], f.solid[i]))
}

/// One row of probes.csv ([`probes_csv_header`]): the lattice values, and their SI values
/// with `units`.
fn csv_row(w: &mut dyn Write, p: &Probe, s: &ProbeSample, units: Option<&Units>) -> std::io::Result<()> {
    let [x, y, z] = p.cell;
    let [ux, uy, uz] = s.u;
    write!(w, "{},{},{x},{y},{z},{ux},{uy},{uz},{},{},{},{}", s.step, p.name, s.speed(), s.rho, s.pressure(), s.vorticity)?;
    if let Some(u) = units {
        let v = |x: f32| u.velocity(f64::from(x));
        write!(
            w,
            ",{},{},{},{},{},{},{},{}",
            u.time(s.step as f64),
            v(s.u[0]),
            v(s.u[1]),
            v(s.u[2]),
            v(s.speed()),
            u.density(f64::from(s.rho)),
            u.pressure(f64::from(s.pressure())),
            u.rate(f64::from(s.vorticity))
        )?;
    }
    writeln!(w)
}

/// Write the samples of several series (probes placed at different times, each with the steps
/// it saw) as one probes.csv: the columns of [`ProbeSeries::write_csv`] (the SI ones with
/// `units`), rows in step order and, within a step, in the order of the series; atomically.
///
/// # Errors
/// The file cannot be written.
pub fn write_csv_of(series: &[ProbeSeries], units: Option<&Units>, path: &Path) -> std::io::Result<()> {
    let mut rows: Vec<(u64, usize, &Probe, &ProbeSample)> = Vec::new();
    for (k, ps) in series.iter().enumerate() {
        for (p, q) in ps.probes.iter().zip(&ps.samples) {
            rows.extend(q.iter().map(|s| (s.step, k, p, s)));
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    crate::atomic_file::write_atomic(path, |w| {
        writeln!(w, "{}", probes_csv_header(units))?;
        rows.iter().try_for_each(|(_, _, p, s)| csv_row(w, p, s, units))
    })
}

/// The samples of several probes over a run, each probe's in a ring of at most `capacity`
/// samples (the oldest go first). Samples come in sets, one per probe at one step, so every
/// probe holds the same steps.
#[derive(Clone, Debug)]
pub struct ProbeSeries {
    probes: Vec<Probe>,
    samples: Vec<VecDeque<ProbeSample>>,
    capacity: usize,
    dropped: u64,
    /// The scene's SI units, where it gives them: probes.csv gets their columns too.
    units: Option<Units>,
}

impl ProbeSeries {
    /// An empty series of `probes` (named: see [`name_probes`]), keeping at most `capacity`
    /// samples of each (at least 1).
    #[must_use]
    pub fn new(probes: Vec<Probe>, capacity: usize) -> ProbeSeries {
        let samples = vec![VecDeque::new(); probes.len()];
        ProbeSeries { probes, samples, capacity: capacity.max(1), dropped: 0, units: None }
    }

    /// This series with the scene's SI units (`None`: lattice units only), which add their
    /// columns to probes.csv ([`probes_csv_header`]).
    #[must_use]
    pub fn with_units(mut self, units: Option<Units>) -> ProbeSeries {
        self.units = units;
        self
    }

    /// The SI units of probes.csv, if any.
    #[must_use]
    pub fn units(&self) -> Option<&Units> {
        self.units.as_ref()
    }

    /// The probes.
    #[must_use]
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// The samples of probe `k`, oldest first (empty for a probe it does not have).
    #[must_use]
    pub fn samples(&self, k: usize) -> &VecDeque<ProbeSample> {
        static NONE: VecDeque<ProbeSample> = VecDeque::new();
        self.samples.get(k).unwrap_or(&NONE)
    }

    /// Steps sampled (the same for every probe).
    #[must_use]
    pub fn len(&self) -> usize {
        self.samples.first().map_or(0, VecDeque::len)
    }

    /// Whether nothing was sampled.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most samples kept of each probe.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets of samples dropped to keep within the capacity since the series was last cleared.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Forget every sample.
    pub fn clear(&mut self) {
        self.samples.iter_mut().for_each(VecDeque::clear);
        self.dropped = 0;
    }

    /// Record one set of samples, one per probe in order (as [`crate::solver::Solver::probe`]
    /// returns them). A step before the last one (a reset or a rollback) starts the series
    /// again; the last step again (a paused viewer) and a set of another length are ignored.
    pub fn push(&mut self, set: &[ProbeSample]) {
        let Some(first) = set.first() else { return };
        if set.len() != self.probes.len() {
            return;
        }
        match self.samples[0].back().map(|s| s.step) {
            Some(last) if last == first.step => return,
            Some(last) if last > first.step => self.clear(),
            _ => {}
        }
        if self.len() >= self.capacity {
            for q in &mut self.samples {
                q.pop_front();
            }
            self.dropped += 1;
        }
        for (q, s) in self.samples.iter_mut().zip(set) {
            q.push_back(*s);
        }
    }

    /// Drop the samples of steps after `step` (a run that goes back to its last good state
    /// keeps what it sampled up to there).
    pub fn truncate_after(&mut self, step: u64) {
        for q in &mut self.samples {
            while q.back().is_some_and(|s| s.step > step) {
                q.pop_back();
            }
        }
    }

    /// Write every sample as CSV ([`probes_csv_header`]), one row per probe and step, in step
    /// order and, within a step, in the order of the probes; atomically (see
    /// [`crate::atomic_file`]). Numbers are written in their shortest exact form.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_csv(&self, path: &Path) -> std::io::Result<()> {
        crate::atomic_file::write_atomic(path, |w| self.csv(w))
    }

    fn csv(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(w, "{}", probes_csv_header(self.units.as_ref()))?;
        for i in 0..self.len() {
            for (p, q) in self.probes.iter().zip(&self.samples) {
                csv_row(w, p, &q[i], self.units.as_ref())?;
            }
        }
        Ok(())
    }

    /// Continue a probes.csv after a resume: read the samples of steps before `before` from the
    /// file at `path` (written by [`Self::write_csv`] for the same probes) into this series,
    /// which must be empty. A missing file reads as none. Returns the steps read.
    ///
    /// # Errors
    /// The file cannot be read, or holds other columns or other probes (the message names the
    /// file and line); the series is left as it was.
    pub fn resume_csv(&mut self, path: &Path, before: u64) -> Result<usize, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let other = "move it away or export into another folder";
        // The SI columns follow the lattice ones, which alone are read back (the SI values
        // follow from them).
        let header = probes_csv_header(self.units.as_ref());
        let columns = header.split(',').count();
        let mut lines = text.lines().enumerate();
        if lines.next().map(|(_, l)| l.trim_end()) != Some(header.as_str()) {
            return Err(format!("{}:1: the header is not {header}; {other}", path.display()));
        }
        let mut sets: Vec<Vec<Option<ProbeSample>>> = Vec::new();
        for (i, line) in lines {
            let at = || format!("{}:{}", path.display(), i + 1);
            let f: Vec<&str> = line.trim_end().split(',').collect();
            if f.len() != columns {
                return Err(format!("{}: {} columns, expected {columns} ({header}); {other}", at(), f.len()));
            }
            let num =
                |c: usize| f[c].parse::<f32>().map_err(|_| format!("{}: {} = \"{}\" is not a number; {other}", at(), column(c), f[c]));
            let step = f[0].parse::<u64>().map_err(|_| format!("{}: step = \"{}\" is not a step number; {other}", at(), f[0]))?;
            let Some(k) = self.probes.iter().position(|p| p.name == f[1]) else {
                let ours: Vec<&str> = self.probes.iter().map(|p| p.name.as_str()).collect();
                return Err(format!("{}: probe \"{}\" is not one of this run's probes ({}); {other}", at(), f[1], ours.join(", ")));
            };
            let cell = self.probes[k].cell;
            if (0..3).any(|a| f[2 + a] != cell[a].to_string()) {
                return Err(format!(
                    "{}: probe \"{}\" is at ({},{},{}) there but at ({},{},{}) in this run; {other}",
                    at(),
                    f[1],
                    f[2],
                    f[3],
                    f[4],
                    cell[0],
                    cell[1],
                    cell[2]
                ));
            }
            let sample = ProbeSample { step, u: [num(5)?, num(6)?, num(7)?], rho: num(9)?, vorticity: num(11)? };
            if step >= before {
                continue;
            }
            if sets.last().is_none_or(|s| s[k].is_some()) {
                sets.push(vec![None; self.probes.len()]);
            }
            if let Some(set) = sets.last_mut() {
                set[k] = Some(sample);
            }
        }
        let mut read = Vec::with_capacity(sets.len());
        for set in sets {
            let whole: Option<Vec<ProbeSample>> = set.iter().copied().collect();
            let Some(whole) = whole.filter(|w| w.iter().all(|s| s.step == w[0].step)) else {
                return Err(format!("{}: the rows do not come in whole sets of this run's probes, one per step; {other}", path.display()));
            };
            read.push(whole);
        }
        for set in &read {
            self.push(set);
        }
        Ok(read.len())
    }

    /// The samples of probe `k` over the second half of the steps sampled (the first half
    /// holds the start-up, as in [`crate::forces::ForceHistory::summary`]): the mean speed and
    /// its range, and the period of the velocity component that swings most; `None` without
    /// samples.
    #[must_use]
    pub fn summary(&self, k: usize) -> Option<ProbeSummary> {
        let q = self.samples.get(k).filter(|q| !q.is_empty())?;
        let (first, last) = (q.front()?.step, q.back()?.step);
        let mid = first + (last - first) / 2;
        let half: Vec<&ProbeSample> = q.iter().filter(|s| s.step >= mid).collect();
        let speeds: Vec<f64> = half.iter().map(|s| f64::from(s.speed())).collect();
        let mean_speed = speeds.iter().sum::<f64>() / speeds.len() as f64;
        let (min_speed, max_speed) = speeds.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let t: Vec<f64> = half.iter().map(|s| s.step as f64).collect();
        let comp = |a: usize| -> Vec<f64> { half.iter().map(|s| f64::from(s.u[a])).collect() };
        let swing = |y: &[f64]| y.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v)) - y.iter().fold(f64::INFINITY, |m, &v| m.min(v));
        let component = (0..3).max_by(|&a, &b| swing(&comp(a)).total_cmp(&swing(&comp(b)))).unwrap_or(0);
        // A swing below a thousandth of the mean speed is numerical noise, not an oscillation.
        let period =
            oscillation(&t, &comp(component), 1e-3 * mean_speed).map(|(period, periods, _)| ProbePeriod { component, period, periods });
        Some(ProbeSummary { from: half[0].step, to: last, samples: half.len(), mean_speed, min_speed, max_speed, period })
    }
}

/// The name of column `c` of probes.csv.
fn column(c: usize) -> &'static str {
    PROBES_CSV_HEADER.split(',').nth(c).unwrap_or("?")
}

/// One probe over a stretch of steps (see [`ProbeSeries::summary`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbeSummary {
    /// First step of the stretch.
    pub from: u64,
    /// Last step of the stretch.
    pub to: u64,
    /// Samples in it.
    pub samples: usize,
    /// Mean speed |u| (cells/step).
    pub mean_speed: f64,
    /// Smallest speed.
    pub min_speed: f64,
    /// Largest speed.
    pub max_speed: f64,
    /// The period of the oscillation of the velocity component that swings most, or why there
    /// is none (a steady flow, too few periods, too few samples per period).
    pub period: Result<ProbePeriod, NoShedding>,
}

/// A periodic velocity at a probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbePeriod {
    /// The component (0, 1, 2 for x, y, z).
    pub component: usize,
    /// Mean period (steps).
    pub period: f64,
    /// Whole periods seen.
    pub periods: usize,
}

#[cfg(test)]
mod tests;
