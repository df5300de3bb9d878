//! How many GPUs a grid should be split over: a model of a slab's step and of what the split
//! adds, measured on this machine, so that `--gpus auto` is never slower than one GPU.
//!
//! For each candidate count k, two periodic boxes with the grid's cross-section are timed: `L`
//! layers on one GPU, and `k L` layers split over k GPUs (`L` layers each, as the grid's slabs
//! would have, up to a size where a slab's step dwarfs the fixed costs). One GPU then takes
//! `b = T1 / L` per layer, and the split adds `o_k = Tk - T1` per step: the halo layers, the
//! exchange left uncovered by the interior, the launches on every GPU. A grid of `Z` layers is
//! predicted to take `b Z` on one GPU and `b Z / k + o_k` on k. The count with the best
//! predicted speed-up is chosen where that speed-up is worth it ([`WORTH`]), else one GPU.

use super::multi::{MultiCudaSolver, MIN_LAYERS};
use super::CudaSolver;
use crate::collision::Collision;
use crate::domain::Domain;
use crate::lattice::Lattice;
use crate::params::Params;
use crate::precision::Precision;
use crate::schemes::Scheme;
use crate::{Solver, SolverError};
use std::time::Instant;

/// Least predicted speed-up for which more GPUs are used (the model's error and the set-up of
/// several slabs are not worth less).
pub const WORTH: f64 = 1.1;

/// Cells per GPU at which the boxes stop growing: a slab's step then takes about half a
/// millisecond, and what the split adds is measured against a step of real size.
const BOX_CELLS: usize = 1 << 23;

/// One candidate count, timed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitTiming {
    /// GPUs.
    pub gpus: usize,
    /// Layers per GPU in both boxes.
    pub layers: usize,
    /// Seconds per step of `layers` layers on one GPU.
    pub one: f64,
    /// Seconds per step of `gpus * layers` layers split over `gpus` GPUs.
    pub split: f64,
}

impl SplitTiming {
    /// Predicted speed-up of a grid of `z` layers on `gpus` GPUs over one.
    #[must_use]
    pub fn speedup(&self, z: usize) -> f64 {
        let per_layer = self.one / self.layers.max(1) as f64;
        let added = (self.split - self.one).max(0.0);
        let one = per_layer * z as f64;
        one / (one / self.gpus as f64 + added)
    }
}

/// What `--gpus auto` chose and why.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuChoice {
    /// GPUs to use.
    pub gpus: usize,
    /// One line for the user: the choice and the numbers behind it.
    pub why: String,
}

/// Choose among `timings` for a grid of `z` layers along its cut: the count with the best
/// predicted speed-up where it is at least [`WORTH`], else one GPU.
#[must_use]
pub fn choose(z: usize, timings: &[SplitTiming]) -> GpuChoice {
    let best = timings.iter().map(|t| (t, t.speedup(z))).max_by(|a, b| a.1.total_cmp(&b.1));
    let Some((t, s)) = best else {
        return GpuChoice { gpus: 1, why: format!("1 GPU: {z} layers leave fewer than {MIN_LAYERS} per GPU on two") };
    };
    let us = |x: f64| x * 1e6;
    let detail = format!(
        "one GPU {:.0} us a step, {} GPUs {:.0} us each plus {:.0} us for the split (measured here)",
        us(t.one / t.layers.max(1) as f64 * z as f64),
        t.gpus,
        us(t.one / t.layers.max(1) as f64 * z as f64 / t.gpus as f64),
        us((t.split - t.one).max(0.0))
    );
    if s >= WORTH {
        GpuChoice { gpus: t.gpus, why: format!("{} GPUs, predicted {s:.2}x one GPU ({detail})", t.gpus) }
    } else {
        GpuChoice { gpus: 1, why: format!("1 GPU: {} GPUs would run at {s:.2}x ({detail})", t.gpus) }
    }
}

/// Seconds per step of `s`, after a warm-up, over at least 0.1 s.
fn time_per_step(s: &mut dyn Solver) -> Result<f64, SolverError> {
    s.step(4)?;
    s.synchronize()?;
    let mut steps = 8u64;
    loop {
        let t = Instant::now();
        s.step(steps)?;
        s.synchronize()?;
        let secs = t.elapsed().as_secs_f64();
        if secs >= 0.1 || steps >= 4096 {
            return Ok(secs / steps as f64);
        }
        steps *= 2;
    }
}

/// Time the boxes of a grid of `n` cells (cut along its last axis of more than one cell) for
/// every count k from 2 to the number of `devices` that leaves each GPU [`MIN_LAYERS`] layers
/// or more, on the first k devices (one GPU's box on the first).
///
/// # Errors
/// A GPU that fails to start or step (the caller falls back to one GPU and says why).
pub fn measure(lattice: Lattice, precision: Precision, n: [usize; 3], devices: &[usize]) -> Result<Vec<SplitTiming>, SolverError> {
    let axis = if n[2] > 1 { 2 } else { 1 };
    let layer: usize = (0..3).filter(|&a| a != axis).map(|a| n[a]).product();
    let cap = (BOX_CELLS / layer.max(1)).max(MIN_LAYERS);
    let sized = |layers: usize| {
        let mut s = n;
        s[axis] = layers;
        s
    };
    let mut one: Vec<(usize, f64)> = Vec::new();
    let mut out = Vec::new();
    for k in 2..=devices.len() {
        if n[axis] / k < MIN_LAYERS {
            break;
        }
        let layers = (n[axis] / k).min(cap);
        let t1 = match one.iter().find(|o| o.0 == layers) {
            Some(o) => o.1,
            None => {
                let place = super::Placement { ordinal: devices[0], ..super::Placement::default() };
                let dom = Domain::periodic(lattice, sized(layers));
                let mut s =
                    CudaSolver::on_device(dom, Scheme::EsotericPull, precision, Params::timing_box(Collision::Bgk), 16, place, |_| {
                        (1.0, [0.05, 0.0, 0.0])
                    })?;
                let t = time_per_step(&mut s)?;
                one.push((layers, t));
                t
            }
        };
        let mut s = MultiCudaSolver::new(
            Domain::periodic(lattice, sized(k * layers)),
            Scheme::EsotericPull,
            precision,
            Params::timing_box(Collision::Bgk),
            &devices[..k],
            |_| (1.0, [0.05, 0.0, 0.0]),
        )?;
        out.push(SplitTiming { gpus: k, layers, one: t1, split: time_per_step(&mut s)? });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(gpus: usize, layers: usize, one_us: f64, split_us: f64) -> SplitTiming {
        SplitTiming { gpus, layers, one: one_us * 1e-6, split: split_us * 1e-6 }
    }

    #[test]
    fn small_grids_stay_on_one_gpu_and_large_ones_split() {
        // A step that costs 60 us of work on one GPU and 65 us more split: one GPU.
        let small = [timing(2, 32, 30.0, 95.0)];
        let c = choose(64, &small);
        assert_eq!(c.gpus, 1, "{}", c.why);
        assert!(c.why.starts_with("1 GPU: 2 GPUs would run at 0.63x"), "{}", c.why);
        // 512 layers, boxes of 32 per GPU at 220 us, the split adding 30 us: 2 GPUs.
        let large = [timing(2, 32, 220.0, 250.0)];
        let c = choose(512, &large);
        assert_eq!(c.gpus, 2, "{}", c.why);
        let want = 3520.0 / (1760.0 + 30.0);
        assert!(c.why.starts_with(&format!("2 GPUs, predicted {want:.2}x")), "{}", c.why);
    }

    #[test]
    fn the_best_count_wins_and_a_split_that_saves_too_little_is_not_taken() {
        // Four GPUs add more per step than two; at 256 layers two are better.
        let t = [timing(2, 64, 400.0, 440.0), timing(4, 32, 200.0, 1000.0)];
        assert_eq!(choose(256, &t).gpus, 2);
        assert_eq!(choose(4096, &t).gpus, 4, "large enough, four win");
        // A predicted 1.05x is under the margin.
        let marginal = [timing(2, 16, 100.0, 148.0)];
        let s = marginal[0].speedup(16);
        assert!(s < WORTH && s > 1.0, "{s}");
        assert_eq!(choose(16, &marginal).gpus, 1);
        // No candidate (too few layers): one GPU, said.
        assert!(choose(6, &[]).why.contains("fewer than 4 per GPU"));
    }
}
