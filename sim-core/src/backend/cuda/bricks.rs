//! Bricks on the GPU: the brick shape a grid gets, the classes of its bricks (plain fluid or
//! with boundaries) and the launch lists of each class.

use super::*;
use crate::bricks::{BrickClass, BrickMap};
use crate::domain::Domain;
use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::solver::SolverError;
use cudarc::driver::{CudaSlice, CudaStream};
use rayon::prelude::*;
use std::sync::Arc;

/// Brick shapes the solver chooses between, with the MLUPS each class of brick ran at (H200,
/// D3Q19 Esoteric Pull FP32, 2026-11-22; docs/performance.md):
/// wide bricks (one CUDA block along a row) stream best on an open grid (88.8% of the copy
/// ceiling against 76.0% for 32x2x2: fewer partial 32-byte sectors at brick edges), compact
/// bricks sort cells into plain fluid and boundary more finely.
pub const BRICK_SHAPES: [([usize; 3], [usize; 3], f64, f64); 2] = [
    // (3D shape, 2D shape, plain-fluid MLUPS, boundary MLUPS)
    ([128, 1, 1], [128, 1, 1], 24_313.0, 18_860.0),
    ([32, 2, 2], [32, 4, 1], 20_802.0, 19_907.0),
];

/// The developer override `ESOFLOW_CUDA_BRICK=BXxBYxBZ` (e.g. `64x2x1`: 32 to 1024 cells, BX a
/// multiple of 32), if set and valid.
pub(super) fn brick_override(dims: usize) -> Option<[usize; 3]> {
    let v = std::env::var("ESOFLOW_CUDA_BRICK").ok()?;
    let b: Vec<usize> = v.split('x').filter_map(|t| t.trim().parse().ok()).collect();
    if b.len() == 3 && b[0] % 32 == 0 && b[0] > 0 && b[1] > 0 && b[2] > 0 && b.iter().product::<usize>() <= 1024 && (dims == 3 || b[2] == 1)
    {
        return Some([b[0], b[1], b[2]]);
    }
    tracing::warn!("ESOFLOW_CUDA_BRICK={v} ignored: expected BXxBYxBZ with BX a multiple of 32 and at most 1024 cells");
    None
}

/// The brick shape for a domain: of [`BRICK_SHAPES`], the one whose bricks (idle threads of
/// partial bricks included) take the least time by the measured rates of plain-fluid and
/// boundary bricks.
#[must_use]
pub fn choose_brick(dom: &Domain) -> [usize; 3] {
    let dims = dom.lattice.dims();
    if let Some(b) = brick_override(dims) {
        return b;
    }
    let cost = |(s3, s2, lean_rate, boundary_rate): &([usize; 3], [usize; 3], f64, f64)| {
        let b = if dims == 3 { *s3 } else { *s2 };
        let (lean, bound) = classify(dom, b);
        let v = b.iter().product::<usize>() as f64;
        (v * lean.len() as f64 / lean_rate + v * bound.len() as f64 / boundary_rate, b)
    };
    BRICK_SHAPES.iter().map(cost).min_by(|a, b| a.0.total_cmp(&b.0)).map_or([32, 2, 2], |c| c.1)
}

/// How the stream-collide step runs the brick classes (the disaggregation of Meneghin & Mahmoud 2025).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Two launches: plain-fluid bricks through the lean kernel, the rest through the boundary kernel.
    Split,
    /// One launch over every brick in memory order; each block takes the lean or the boundary
    /// path by its brick's class.
    Fused,
    /// Every brick through the boundary kernel (the baseline the gain is measured against).
    BoundaryOnly,
}

/// Class bit of a boundary brick in the list of all bricks (as in stream_collide.cu).
pub(crate) const BRICK_BOUNDARY: u32 = 0x8000_0000;

/// The rows and bricks of one launch group, on the device (never-empty buffers, with counts).
pub(super) struct Lists {
    pub(super) rows: CudaSlice<u32>,
    pub(super) n_rows: u32,
    pub(super) lean: CudaSlice<u32>,
    pub(super) n_lean: u32,
    pub(super) boundary: CudaSlice<u32>,
    pub(super) n_boundary: u32,
    pub(super) all: CudaSlice<u32>,
    pub(super) n_all: u32,
}

impl Lists {
    /// Upload rows, plain-fluid bricks and bricks with boundaries (and every brick in memory
    /// order, boundary bricks carrying [`BRICK_BOUNDARY`], for the fused kernel).
    pub(super) fn upload(stream: &Arc<CudaStream>, rows: &[u32], lean: &[u32], bound: &[u32]) -> Result<Lists, SolverError> {
        let mut all = lean.to_vec();
        all.extend(bound.iter().map(|&b| b | BRICK_BOUNDARY));
        all.sort_unstable_by_key(|&b| b & !BRICK_BOUNDARY);
        let up = |v: &[u32]| stream.clone_htod(if v.is_empty() { &[0u32][..] } else { v }).map_err(derr("uploading bricks"));
        Ok(Lists {
            rows: up(rows)?,
            n_rows: rows.len() as u32,
            lean: up(lean)?,
            n_lean: lean.len() as u32,
            boundary: up(bound)?,
            n_boundary: bound.len() as u32,
            all: up(&all)?,
            n_all: all.len() as u32,
        })
    }
}

/// Rows (`y + ny z`) and bricks of a grid in launch groups. A whole grid is one group. A
/// multi-GPU slab (`halo` = 1 + cut axis) drops what lies only in its two halo layers and
/// makes two groups: what touches the first or last own layer (whose DDFs the neighbours
/// exchange), then the interior, which can run while the exchange goes on.
pub(super) fn launch_groups(dom: &Domain, brick: [usize; 3], rows: bool, halo: usize) -> Vec<(Vec<u32>, Vec<u32>, Vec<u32>)> {
    let row_ids = if rows { plain_rows(dom) } else { Vec::new() };
    let (lean, bound) = classify_except(dom, brick, &row_ids);
    if halo == 0 {
        return vec![(row_ids, lean, bound)];
    }
    let (a, n) = (halo - 1, dom.n);
    let last = n[a] - 2;
    // A range [lo, hi) of layers on the cut axis: 0 = only halo, 1 = next to the cut, 2 = interior.
    let class = |lo: usize, hi: usize| -> usize {
        let hi = hi.min(n[a]);
        if (lo..hi).all(|l| l == 0 || l == n[a] - 1) {
            0
        } else if (lo..hi).any(|l| l == 1 || l == last) {
            1
        } else {
            2
        }
    };
    let nb = [n[0].div_ceil(brick[0]), n[1].div_ceil(brick[1])];
    let brick_class = |id: u32| {
        let id = id as usize;
        let c = [id % nb[0], (id / nb[0]) % nb[1], id / (nb[0] * nb[1])];
        class(c[a] * brick[a], (c[a] + 1) * brick[a])
    };
    let row_class = |r: u32| {
        let c = [0, r as usize % n[1], r as usize / n[1]];
        class(c[a], c[a] + 1)
    };
    let mut groups = vec![(Vec::new(), Vec::new(), Vec::new()), (Vec::new(), Vec::new(), Vec::new())];
    for &r in &row_ids {
        match row_class(r) {
            0 => {}
            k => groups[k - 1].0.push(r),
        }
    }
    for (ids, pick) in [(&lean, 1usize), (&bound, 2)] {
        for &b in ids {
            match brick_class(b) {
                0 => {}
                k => {
                    let g = &mut groups[k - 1];
                    if pick == 1 {
                        g.1.push(b)
                    } else {
                        g.2.push(b)
                    }
                }
            }
        }
    }
    groups
}

/// Classify bricks: (plain fluid, with boundaries); all-solid bricks are dropped.
pub(crate) fn classify(dom: &Domain, b: [usize; 3]) -> (Vec<u32>, Vec<u32>) {
    classify_except(dom, b, &[])
}

/// Rows (index y + ny z) whose every cell is plain fluid.
pub(super) fn plain_rows(dom: &Domain) -> Vec<u32> {
    let n = dom.n;
    (0..n[1] * n[2]).into_par_iter().filter(|&r| dom.flags[r * n[0]..(r + 1) * n[0]].iter().all(|&f| f == 0)).map(|r| r as u32).collect()
}

/// The whole-row kernel is on unless `ESOFLOW_CUDA_ROWS=0` (developer knob, to compare) or a
/// brick shape is forced with `ESOFLOW_CUDA_BRICK`.
pub(super) fn rows_wanted() -> bool {
    std::env::var("ESOFLOW_CUDA_ROWS").as_deref() != Ok("0") && std::env::var("ESOFLOW_CUDA_BRICK").is_err()
}

/// Whether the whole-row kernel fits this grid: a row in one CUDA block (at most 1024 threads)
/// and its x-shifted DDFs in 48 KiB of shared memory.
#[must_use]
pub fn rows_fit(n: [usize; 3], lattice: Lattice, precision: Precision) -> bool {
    let w = n[0].div_ceil(32) * 32;
    let xdirs = lattice.velocities().iter().filter(|c| c[0] != 0).count();
    w <= 1024 && xdirs * w * precision.bytes() <= 48 * 1024
}

/// Bricks of `b` (ids `bx + nbx (by + nby bz)`) as (plain fluid, with boundaries), all-solid
/// bricks dropped, leaving out the rows in `skip` (`b` must then be one row high). The classes
/// come from [`BrickMap::classify`], the one implementation the viewer's overlay shows too.
pub(super) fn classify_except(dom: &Domain, b: [usize; 3], skip: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let skip: std::collections::HashSet<u32> = skip.iter().copied().collect();
    let n = dom.n;
    let map = BrickMap::classify(dom, b);
    let (mut lean, mut bound) = (Vec::new(), Vec::new());
    for (id, &c) in map.class.iter().enumerate() {
        let [_, by, bz] = map.coords(id);
        if skip.contains(&((by + n[1] * bz) as u32)) {
            continue;
        }
        match c {
            BrickClass::Plain => lean.push(id as u32),
            BrickClass::Boundary => bound.push(id as u32),
            BrickClass::Solid => {}
        }
    }
    (lean, bound)
}
