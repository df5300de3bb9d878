//! The forces on the obstacles over a run: a history of samples, and over its second half the
//! mean force, the drag and lift coefficients and the Strouhal number of the lift's oscillation
//! (the period between zero crossings of the lift less its mean, as `scripts/strouhal.py` reads
//! it from `stats.csv`).

use crate::scene::ForceReference;

/// What a full [`ForceHistory`] gives up for a new sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The whole run at a coarser rate: every other sample goes, and from then on every other
    /// new one is skipped (a headless run, summarised at its end).
    WholeRun,
    /// The latest samples: the oldest quarter goes (a viewer, whose flow changes as it runs).
    Latest,
}

/// Forces on each obstacle at a series of steps, in memory.
#[derive(Clone, Debug)]
pub struct ForceHistory {
    keep: Keep,
    cap: usize,
    steps: Vec<u64>,
    /// `forces[k][i]`: obstacle `k` at `steps[i]`.
    forces: Vec<Vec<[f64; 3]>>,
    /// Every `stride`-th offered sample is kept ([`Keep::WholeRun`] after thinning).
    stride: u64,
    offered: u64,
}

impl ForceHistory {
    /// An empty history of at most `cap` samples (at least 16).
    #[must_use]
    pub fn new(keep: Keep, cap: usize) -> ForceHistory {
        ForceHistory { keep, cap: cap.max(16), steps: Vec::new(), forces: Vec::new(), stride: 1, offered: 0 }
    }

    /// Forget every sample.
    pub fn clear(&mut self) {
        self.steps.clear();
        self.forces.clear();
        self.stride = 1;
        self.offered = 0;
    }

    /// Record the forces on every obstacle at `step`. A step before the last one (a reset or a
    /// rollback) or another number of obstacles (one drawn or loaded) starts the history again;
    /// the last step again (a paused viewer) and non-finite forces (a blown-up state) are not
    /// recorded.
    pub fn push(&mut self, step: u64, forces: &[[f64; 3]]) {
        let same = forces.len() == self.forces.len();
        if forces.iter().flatten().any(|v| !v.is_finite()) || (same && self.steps.last() == Some(&step)) {
            return;
        }
        if !same || self.steps.last().is_some_and(|&s| s > step) {
            self.clear();
            self.forces = vec![Vec::new(); forces.len()];
        }
        let offered = self.offered;
        self.offered += 1;
        if offered % self.stride != 0 {
            return;
        }
        if self.steps.len() >= self.cap {
            match self.keep {
                Keep::WholeRun => {
                    thin(&mut self.steps);
                    self.forces.iter_mut().for_each(thin);
                    self.stride *= 2;
                    if offered % self.stride != 0 {
                        return;
                    }
                }
                Keep::Latest => {
                    let n = self.cap / 4;
                    self.steps.drain(..n);
                    self.forces.iter_mut().for_each(|v| drop(v.drain(..n)));
                }
            }
        }
        self.steps.push(step);
        for (v, f) in self.forces.iter_mut().zip(forces) {
            v.push(*f);
        }
    }

    /// Number of samples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether there are no samples.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The steps sampled.
    #[must_use]
    pub fn steps(&self) -> &[u64] {
        &self.steps
    }

    /// The forces on obstacle `k` at [`Self::steps`] (empty for an obstacle it does not have).
    #[must_use]
    pub fn forces(&self, k: usize) -> &[[f64; 3]] {
        self.forces.get(k).map_or(&[], Vec::as_slice)
    }

    /// The summary of obstacle `k` over the second half of the steps sampled (the first half
    /// holds the start-up); `None` without samples.
    #[must_use]
    pub fn summary(&self, k: usize, reference: &ForceReference) -> Option<ForceSummary> {
        let f = self.forces.get(k).filter(|f| !f.is_empty())?;
        let (first, last) = (self.steps[0], *self.steps.last()?);
        let mid = first + (last - first) / 2;
        let from = self.steps.partition_point(|&s| s < mid);
        Some(ForceSummary::of(&self.steps[from..], &f[from..], reference))
    }
}

/// Keep every other element of `v` (the first, third, ...).
fn thin<T>(v: &mut Vec<T>) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        i % 2 == 1
    });
}

/// The forces on one obstacle over a stretch of steps.
#[derive(Clone, Debug, PartialEq)]
pub struct ForceSummary {
    /// First step of the stretch.
    pub from: u64,
    /// Last step of the stretch.
    pub to: u64,
    /// Samples in it.
    pub samples: usize,
    /// Mean force.
    pub mean: [f64; 3],
    /// Mean drag and lift coefficients [C_D, C_L] (where the scene gives reference values).
    pub coefficients: Option<[f64; 2]>,
    /// Half the peak-to-peak swing of the lift (a force).
    pub lift_amplitude: f64,
    /// The lift's oscillation, or why there is none.
    pub shedding: Result<Shedding, NoShedding>,
}

/// A periodic lift: vortex shedding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shedding {
    /// Mean period (steps).
    pub period: f64,
    /// Whole periods seen.
    pub periods: usize,
    /// Shortest and longest single period (steps).
    pub range: (f64, f64),
    /// f L / U, where the scene gives reference values.
    pub strouhal: Option<f64>,
}

/// Why a lift gives no shedding frequency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoShedding {
    /// It does not oscillate: its swing is below a thousandth of the mean force.
    Steady {
        /// Half the peak-to-peak swing (force).
        amplitude: f64,
    },
    /// Fewer than two whole periods in the stretch.
    TooFewPeriods {
        /// Whole periods found.
        periods: usize,
    },
    /// The period found spans fewer than 4 samples, so the samples cannot follow the lift.
    Undersampled {
        /// The period found (steps).
        period: f64,
        /// Mean steps between two samples.
        spacing: f64,
    },
}

impl std::fmt::Display for NoShedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoShedding::Steady { amplitude } => write!(f, "no shedding: the lift is steady (swing {amplitude:.2e})"),
            NoShedding::TooFewPeriods { periods } => {
                write!(f, "no shedding seen: {periods} whole lift period(s) in these steps, and St needs two or more")
            }
            NoShedding::Undersampled { period, spacing } => write!(
                f,
                "no shedding frequency: the lift changes sign every ~{period:.0} steps but is sampled only every {spacing:.0} steps"
            ),
        }
    }
}

impl ForceSummary {
    /// The summary of the forces `f` at `steps` (increasing, not empty).
    fn of(steps: &[u64], f: &[[f64; 3]], reference: &ForceReference) -> ForceSummary {
        let n = f.len().max(1) as f64;
        let mut mean = [0.0; 3];
        for v in f {
            for a in 0..3 {
                mean[a] += v[a] / n;
            }
        }
        let t: Vec<f64> = steps.iter().map(|&s| s as f64).collect();
        let lift: Vec<f64> = f.iter().map(|&v| reference.lift.component(v)).collect();
        let [drag_mean, lift_mean] = reference.drag_lift(mean);
        // A swing below a thousandth of the mean force is numerical noise, not shedding.
        let floor = 1e-3 * drag_mean.hypot(lift_mean);
        let shedding = oscillation(&t, &lift, floor).map(|(period, periods, range)| Shedding {
            period,
            periods,
            range,
            strouhal: reference.values.map(|v| v.strouhal(period)),
        });
        ForceSummary {
            from: steps.first().copied().unwrap_or(0),
            to: steps.last().copied().unwrap_or(0),
            samples: f.len(),
            mean,
            coefficients: reference.coefficients(mean),
            lift_amplitude: swing(&lift),
            shedding,
        }
    }

    /// The lift's swing as a coefficient, where the scene gives reference values.
    #[must_use]
    pub fn lift_amplitude_coefficient(&self, reference: &ForceReference) -> Option<f64> {
        reference.values.map(|v| self.lift_amplitude / v.force_scale())
    }
}

/// Half the peak-to-peak swing of `y`.
fn swing(y: &[f64]) -> f64 {
    let (lo, hi) = y.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if y.is_empty() {
        0.0
    } else {
        (hi - lo) / 2.0
    }
}

/// The period of the oscillation of `y` sampled at times `t` (increasing): the mean spacing of
/// the zero crossings of `y` less its mean, upwards and downwards, each placed by linear
/// interpolation between two samples. A crossing counts only once the signal has been on the
/// other side of the mean by a quarter of its swing since the last one, so that noise and small
/// kinks near the mean make no extra crossings. A slow drift of the mean delays the upward
/// crossings as much as it advances the downward ones, so the mean of the two periods does not
/// feel it. Returns the period, the whole periods seen and the shortest and longest single
/// period. A swing not above `floor` is no oscillation.
///
/// # Errors
/// Why there is no period: a steady signal, fewer than two whole periods, or a period shorter
/// than 4 samples.
pub fn oscillation(t: &[f64], y: &[f64], floor: f64) -> Result<(f64, usize, (f64, f64)), NoShedding> {
    let amplitude = swing(y);
    if !(amplitude > floor.max(f64::MIN_POSITIVE)) {
        return Err(NoShedding::Steady { amplitude });
    }
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let (mut ups, mut downs) = (Vec::new(), Vec::new());
    let (mut up_armed, mut down_armed) = (false, false);
    for i in 1..y.len() {
        let (a, b) = (y[i - 1] - mean, y[i] - mean);
        let at = || t[i - 1] + (t[i] - t[i - 1]) * a / (a - b);
        up_armed = up_armed || a < -amplitude / 4.0;
        down_armed = down_armed || a > amplitude / 4.0;
        if up_armed && a < 0.0 && b >= 0.0 {
            ups.push(at());
            up_armed = false;
        }
        if down_armed && a > 0.0 && b <= 0.0 {
            downs.push(at());
            down_armed = false;
        }
    }
    let whole = |c: &[f64]| c.len().saturating_sub(1);
    let periods = whole(&ups).max(whole(&downs));
    if periods < 2 {
        return Err(NoShedding::TooFewPeriods { periods });
    }
    let mean_period = |c: &[f64]| (c.len() >= 2).then(|| (c[c.len() - 1] - c[0]) / whole(c) as f64);
    let period = match (mean_period(&ups), mean_period(&downs)) {
        (Some(u), Some(d)) => (u + d) / 2.0,
        (Some(p), None) | (None, Some(p)) => p,
        (None, None) => unreachable!("two whole periods need crossings"),
    };
    let spacing = (t[t.len() - 1] - t[0]) / (t.len() - 1) as f64;
    if period < 4.0 * spacing {
        return Err(NoShedding::Undersampled { period, spacing });
    }
    let singles = ups.windows(2).chain(downs.windows(2)).map(|w| w[1] - w[0]);
    let range = singles.fold((f64::INFINITY, 0.0f64), |(lo, hi), p| (lo.min(p), hi.max(p)));
    Ok((period, periods, range))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::{ReferenceValues, SignedAxis};

    fn reference(values: Option<ReferenceValues>) -> ForceReference {
        ForceReference { drag: SignedAxis::X, lift: SignedAxis::Y, values }
    }

    const REF_2D: ReferenceValues = ReferenceValues { length: 20.0, velocity: 0.05, area: None, density: 1.0 };

    /// Samples every `every` steps from 0 to `steps` of drag `d(step)` and lift `l(step)`.
    fn history(steps: u64, every: u64, d: impl Fn(f64) -> f64, l: impl Fn(f64) -> f64) -> ForceHistory {
        let mut h = ForceHistory::new(Keep::WholeRun, 1 << 16);
        for s in (0..=steps).step_by(every as usize) {
            let x = s as f64;
            h.push(s, &[[d(x), l(x), 0.0]]);
        }
        h
    }

    #[test]
    fn a_sine_lift_gives_its_period_and_strouhal_number() {
        // Period 1,000 steps, sampled every 37 (not a divisor), on an offset and a drift of 10 %
        // of the swing over the stretch (alone, that would move the upward crossings' period by
        // 1.6 steps).
        let period = 1000.0;
        let tau = std::f64::consts::TAU;
        let h = history(20_000, 37, |_| 0.01, |x| 0.002 * (tau * x / period + 0.3).sin() + 1e-4 + 2e-8 * x);
        let s = h.summary(0, &reference(Some(REF_2D))).unwrap();
        let sh = s.shedding.unwrap();
        assert!((sh.period - period).abs() < 0.5, "{sh:?}");
        assert!(sh.periods >= 8 && sh.range.0 > 990.0 && sh.range.1 < 1010.0, "{sh:?}");
        // St = f L / U = 20 / (0.05 * 1000) = 0.4.
        assert!((sh.strouhal.unwrap() - 0.4).abs() < 1e-3, "{sh:?}");
        // C_D = 2 F / (rho U^2 L) = 2 * 0.01 / (0.0025 * 20) = 0.4; the mean lift 4e-4 is
        // C_L 0.016, and the swing 0.002 (and half the drift, 1e-4) C_L 0.084.
        let [cd, cl] = s.coefficients.unwrap();
        assert!((cd - 0.4).abs() < 1e-12, "{cd}");
        assert!((cl - 0.016).abs() < 0.003, "{cl}");
        let amp = s.lift_amplitude_coefficient(&reference(Some(REF_2D))).unwrap();
        assert!((amp - 0.084).abs() < 0.003, "{amp}");
        // The second half of the steps: from the first sample at or after step 9,990.
        assert_eq!((s.from, s.to), (9_990, 19_980), "{s:?}");
    }

    #[test]
    fn noise_and_kinks_near_zero_make_no_extra_crossings() {
        let tau = std::f64::consts::TAU;
        // A small sawtooth kink every 250 steps on a period of 1,300 steps.
        let lift = |x: f64| (tau * x / 1300.0).sin() + 0.05 * ((x % 250.0) / 250.0 - 0.5);
        let t: Vec<f64> = (0..4000).map(|i| f64::from(i) * 10.0).collect();
        let y: Vec<f64> = t.iter().map(|&x| lift(x)).collect();
        let (p, n, _) = oscillation(&t, &y, 0.0).unwrap();
        assert!((p - 1300.0).abs() < 5.0 && n >= 28, "{p} over {n}");
    }

    #[test]
    fn a_steady_lift_is_no_shedding() {
        // A start-up that has settled: a swing of 1e-7 against a drag of 1e-2.
        let h = history(10_000, 10, |_| 0.01, |x| 1e-7 * (x / 50.0).sin());
        let s = h.summary(0, &reference(Some(REF_2D))).unwrap();
        assert!(matches!(s.shedding, Err(NoShedding::Steady { .. })), "{:?}", s.shedding);
        assert!(s.shedding.unwrap_err().to_string().starts_with("no shedding"));
        // A constant lift, and no force at all.
        let h = history(1000, 10, |_| 0.0, |_| 0.0);
        assert!(matches!(h.summary(0, &reference(None)).unwrap().shedding, Err(NoShedding::Steady { .. })));
    }

    #[test]
    fn too_few_periods_and_too_coarse_samples_are_said() {
        let tau = std::f64::consts::TAU;
        let t: Vec<f64> = (0..150).map(f64::from).collect();
        let y: Vec<f64> = t.iter().map(|&x| (tau * x / 100.0).sin()).collect();
        assert!(matches!(oscillation(&t, &y, 0.0), Err(NoShedding::TooFewPeriods { .. })));
        // A period of 30 steps sampled every 9 steps (3.3 samples a period).
        let t: Vec<f64> = (0..400).map(|i| f64::from(i) * 9.0).collect();
        let y: Vec<f64> = t.iter().map(|&x| (tau * x / 30.0).sin()).collect();
        assert!(matches!(oscillation(&t, &y, 0.0), Err(NoShedding::Undersampled { .. })), "{:?}", oscillation(&t, &y, 0.0));
    }

    #[test]
    fn coefficients_follow_the_reference_axes_and_area() {
        // 3D: C = 2 F / (rho U^2 A), drag along -x, lift along z.
        let v = ReferenceValues { length: 16.0, velocity: 0.1, area: Some(201.0), density: 1.0 };
        let r = ForceReference { drag: SignedAxis::NegX, lift: SignedAxis::Z, values: Some(v) };
        let [cd, cl] = r.coefficients([-1.005, 3.0, 0.201]).unwrap();
        assert!((cd - 1.0).abs() < 1e-12 && (cl - 0.2).abs() < 1e-12, "{cd} {cl}");
        assert_eq!(reference(None).coefficients([1.0, 0.0, 0.0]), None);
    }

    #[test]
    fn a_full_history_keeps_the_whole_run_or_the_latest_samples() {
        let mut h = ForceHistory::new(Keep::WholeRun, 16);
        for s in 0..100u64 {
            h.push(s, &[[s as f64, 0.0, 0.0]]);
        }
        assert!(h.len() <= 16 && h.len() >= 8, "{}", h.len());
        assert_eq!(h.steps()[0], 0);
        assert!(*h.steps().last().unwrap() >= 88, "{:?}", h.steps());
        let gaps: Vec<u64> = h.steps().windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == gaps[0]), "evenly thinned: {gaps:?}");
        assert_eq!(h.forces(0).len(), h.len());
        let mut h = ForceHistory::new(Keep::Latest, 16);
        for s in 0..100u64 {
            h.push(s, &[[s as f64, 0.0, 0.0]]);
        }
        assert_eq!(*h.steps().last().unwrap(), 99);
        assert!(h.len() <= 16 && h.steps().windows(2).all(|w| w[1] == w[0] + 1));
        // The last step again is left out; a rollback, or another obstacle, starts again; a
        // blown-up sample is left out.
        h.push(99, &[[0.0; 3]]);
        assert_eq!(h.forces(0).last().unwrap()[0], 99.0);
        h.push(50, &[[0.0; 3]]);
        assert_eq!(h.steps(), &[50]);
        h.push(60, &[[0.0; 3], [1.0; 3]]);
        assert_eq!((h.steps(), h.forces(1).len()), (&[60u64][..], 1));
        h.push(70, &[[f64::NAN; 3], [1.0; 3]]);
        assert_eq!(h.len(), 1);
    }
}
