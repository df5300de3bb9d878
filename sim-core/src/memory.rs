//! Memory plans: what a run will need on the host and on each GPU, worked out from the scene
//! before anything large is allocated, and checked against what is free (`MemAvailable` of
//! /proc/meminfo, `cuMemGetInfo` of each device). A run that cannot fit is refused at once with
//! both numbers and the largest `domain.size` of the same shape that fits, instead of aborting
//! in an allocation minutes later.
//!
//! The numbers follow what each solver allocates (bytes per cell of its storage, times cells,
//! plus what the caller keeps: rollback states and checkpoints in flight, exported fields). All
//! arithmetic is checked: a plan that overflows is reported as too large, never wrapped.

use crate::lattice::Lattice;
use crate::precision::Precision;
use crate::scene::LoadedScene;
use crate::schemes::Scheme;
use crate::units::human_bytes;

/// Boxes a GPU subgrid solver fills on the host at once while it builds its state.
pub(crate) const BUILD_AHEAD: usize = 8;

/// Which solver a run builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The uniform grid (CPU reference, CUDA on one or several GPUs).
    Dense,
    /// Wavelet-compressed subgrids.
    Subgrids,
    /// Adaptive octree blocks.
    Blocks,
}

/// Where the run steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The CPU backend.
    Cpu,
    /// The CUDA backend on this many GPUs (the grid split in slabs over them).
    Gpus(usize),
}

/// Everything a memory plan needs to know about a run.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Which solver.
    pub engine: Engine,
    /// Where it steps.
    pub place: Place,
    /// Velocity set.
    pub lattice: Lattice,
    /// Cells per axis (z = 1 in 2D).
    pub size: [usize; 3],
    /// Streaming scheme.
    pub scheme: Scheme,
    /// DDF storage precision.
    pub precision: Precision,
    /// LBM-Ghost block edge.
    pub ghost_block: usize,
    /// Adaptive blocks: the scene's settings (capacity, levels, in place).
    pub amr: Option<crate::scene::Amr>,
    /// Compressed subgrids: the memory budget, if any.
    pub budget: Option<u64>,
    /// Compressed subgrids: cells of a subgrid per axis.
    pub subgrid: [usize; 3],
    /// Saved states the caller holds at once (rollback states, a checkpoint being written):
    /// `esoflow run` 2, the viewer 3. Each is a dense copy of the DDFs, except a compressed
    /// subgrid run's, which is its shells and records ([`crate::solver::Solver::snapshot`]).
    pub saved_states: usize,
    /// Whether the run writes checkpoints (compressed subgrids reassemble the dense state for
    /// them).
    pub checkpoints: bool,
    /// Whether the run exports fields (fields.csv / fields.vti are built in memory).
    pub export: bool,
}

/// What the caller of a solver keeps besides it, for the memory plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keeps {
    /// Saved states held at once (see [`Spec::saved_states`]).
    pub saved_states: usize,
    /// Whether checkpoints are written.
    pub checkpoints: bool,
    /// Whether fields are exported (built in host memory).
    pub export: bool,
}

impl Keeps {
    /// The viewer: the initial state, the rollback state and one being taken, checkpoints and
    /// exports.
    pub const VIEWER: Keeps = Keeps { saved_states: 3, checkpoints: true, export: true };
}

/// What a run needs, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// Host memory.
    pub host: u64,
    /// Memory on each GPU (0 on the CPU backend).
    pub device: u64,
}

/// Host bytes per cell of a field export: the fields (density, velocity, solid flag), the
/// derived vorticity and Q, their flattened copies for the VTK file and its base64 text
/// (measured: a 3-million-cell export raised the peak resident memory by 239 B a cell).
const EXPORT_BYTES_PER_CELL: u64 = 250;
/// Device bytes per cell of the CUDA solvers' field planes (density and velocity).
const PLANE_BYTES_PER_CELL: u64 = 16;
/// Device bytes a CUDA solver takes besides its per-cell arrays (modules, launch lists, tables,
/// the context's own reserve).
const DEVICE_FIXED: u64 = 512 << 20;
/// Host bytes a run takes besides its per-cell arrays (the program, the context, threads).
const HOST_FIXED: u64 = 256 << 20;

impl Spec {
    /// The plan of a scene's run.
    #[must_use]
    pub fn of_scene(ls: &LoadedScene, place: Place, keeps: Keeps) -> Spec {
        let s = &ls.scene;
        let engine = if s.amr.enabled {
            Engine::Blocks
        } else if s.compression.enabled {
            Engine::Subgrids
        } else {
            Engine::Dense
        };
        Spec {
            engine,
            place,
            lattice: ls.derived.lattice,
            size: ls.derived.size,
            scheme: s.solver.scheme,
            precision: s.solver.precision,
            ghost_block: s.solver.ghost_block,
            amr: s.amr.enabled.then(|| s.amr.clone()),
            budget: s.compression.memory_budget.map(|b| b.0),
            subgrid: s.compression.subgrid_size(),
            saved_states: keeps.saved_states,
            checkpoints: keeps.checkpoints,
            export: keeps.export,
        }
    }

    /// A uniform grid of `size` (no saved states, no export: a bench box); set the fields
    /// that differ.
    #[must_use]
    pub fn dense(place: Place, lattice: Lattice, size: [usize; 3], scheme: Scheme, precision: Precision) -> Spec {
        Spec {
            engine: Engine::Dense,
            place,
            lattice,
            size,
            scheme,
            precision,
            ghost_block: 16,
            amr: None,
            budget: None,
            subgrid: [64; 3],
            saved_states: 0,
            checkpoints: false,
            export: false,
        }
    }

    /// The same run on a grid of `size`.
    #[must_use]
    pub fn with_size(&self, size: [usize; 3]) -> Spec {
        Spec { size, ..self.clone() }
    }

    /// What the run needs; `None` where the numbers overflow (far beyond any machine).
    #[must_use]
    pub fn need(&self) -> Option<Need> {
        let cells = self.size.iter().try_fold(1u64, |p, &n| p.checked_mul(n as u64))?;
        let q = self.lattice.q() as u64;
        let ddf = q.checked_mul(self.precision.bytes() as u64)?;
        let per = |bytes: u64| cells.checked_mul(bytes);
        let add = |a: u64, b: u64| a.checked_add(b);
        // What the caller keeps besides the solver: saved states (one copy of the DDFs of every
        // fluid cell each) and an export's fields.
        let saved = |state: u64| state.checked_mul(self.saved_states as u64);
        let export = if self.export { per(EXPORT_BYTES_PER_CELL)? } else { 0 };
        let on_gpu = match self.place {
            Place::Cpu => None,
            Place::Gpus(g) => Some(g.max(1) as u64),
        };
        let (host, device) = match self.engine {
            Engine::Dense => {
                let stored = self.scheme.bytes_stored(self.lattice, self.precision, self.ghost_block).ceil() as u64;
                let state = per(ddf)?;
                match on_gpu {
                    None => {
                        // The DDFs (every copy the scheme keeps) and flags, the domain's flags.
                        let solver = per(stored.checked_add(1)?)?;
                        (add(add(solver, saved(state)?)?, export)?, 0)
                    }
                    Some(g) => {
                        // Each GPU holds its slab with two halo layers, DDFs, flags and field
                        // planes. The host builds the initial state in a mirror (every copy of
                        // the DDFs) and decodes checkpoints through it.
                        let layer = cells / self.size[if self.lattice.dims() == 2 { 1 } else { 2 }].max(1) as u64;
                        let slab = if g > 1 { cells.div_ceil(g).checked_add(layer.checked_mul(2)?)? } else { cells };
                        let device = add(slab.checked_mul(stored.checked_add(PLANE_BYTES_PER_CELL)?)?, DEVICE_FIXED)?;
                        let mirror = per(ddf.checked_mul(self.scheme.ddf_copies(self.lattice, self.ghost_block).ceil() as u64)?)?;
                        (add(add(add(per(1)?, mirror)?, saved(state)?)?, export)?, device)
                    }
                }
            }
            Engine::Subgrids => {
                // On the CPU the state is built from a dense FP32 grid on the host, which every
                // read of it reassembles again, and the compressed cores take at most the budget
                // (without one, a quarter of the raw DDFs is assumed: smooth flows compress 5-10x).
                // On the GPU the state is built on the host a few working boxes at a time per
                // GPU (each box's DDFs and its cells' equilibria) and the cores stay on the
                // device; the grid's flags are held three times while it builds (the caller's
                // domain, the solver's, the build's). A saved state is the shells and the cores
                // as stored. Checkpoints and fields are dense, reassembled on the host: a
                // checkpoint holds the dense state and its data at once, an export the dense
                // state and its fields. A GPU run that writes neither holds no dense copy.
                let raw = per(q.checked_mul(4)?)?;
                let devices = on_gpu.unwrap_or(1);
                let cores = self.budget.map_or(Some(raw / 4), |b| b.checked_mul(devices))?.min(raw);
                let core_share = (0..3).fold(1.0f64, |f, a| {
                    let g = self.subgrid[a].min(self.size[a]).max(3) as f64;
                    f * (g - 2.0) / g
                });
                let snapshot = add(cores, (raw as f64 * (1.0 - core_share)) as u64)?;
                let dense = match (on_gpu, self.checkpoints, self.export) {
                    (None, c, _) => 1 + u64::from(c),
                    (Some(_), true, _) => 2,
                    (Some(_), false, e) => u64::from(e),
                };
                let (flags, build) = match on_gpu {
                    None => (per(2)?, 0),
                    Some(g) => {
                        let box_cells = (0..3).try_fold(1u64, |p, a| p.checked_mul(self.subgrid[a].min(self.size[a]) as u64 + 2))?;
                        let per_cell = q.checked_mul(8)?.checked_add(1)?;
                        let boxes = (BUILD_AHEAD as u64).checked_mul(g)?;
                        (per(3)?, box_cells.checked_mul(per_cell)?.checked_mul(boxes)?)
                    }
                };
                let host = add(
                    add(add(add(add(raw.checked_mul(dense)?, flags)?, build)?, saved(snapshot)?)?, export)?,
                    if on_gpu.is_some() { 0 } else { cores },
                )?;
                // On the GPU the solver sizes its ring of compressed cores from what is free and
                // refuses a budget it cannot hold: the plan counts the grid's flags and the budget.
                let device = if on_gpu.is_some() { add(add(per(1)?, self.budget.unwrap_or(0))?, DEVICE_FIXED)? } else { 0 };
                (host, device)
            }
            Engine::Blocks => {
                let amr = self.amr.as_ref()?;
                let dims = self.lattice.dims();
                let block_cells = 4u64.pow(dims as u32);
                let capacity = amr.capacity_for(self.size, dims, q as usize) as u64;
                // Two FP32 copies of every block's DDFs and a few bytes of flags and links per
                // cell on the host (the reference forest the GPU's is mirrored from); on the GPU
                // two copies in the storage precision, or one in place.
                let per_block_host = block_cells.checked_mul(2 * q * 4 + 8)?;
                let forest = capacity.checked_mul(per_block_host)?;
                let state = capacity.checked_mul(block_cells.checked_mul(q * 4)?)?;
                let host = add(add(forest, saved(state)?)?, export)?;
                let device = match on_gpu {
                    None => 0,
                    Some(_) => {
                        let copies = if amr.in_place { 1 } else { 2 };
                        let per_block = block_cells.checked_mul(ddf.checked_mul(copies)?.checked_add(8)?)?;
                        add(add(capacity.checked_mul(per_block)?, per(PLANE_BYTES_PER_CELL)?)?, DEVICE_FIXED)?
                    }
                };
                (host, device)
            }
        };
        Some(Need { host: add(host, HOST_FIXED)?, device })
    }

    /// The largest grid of the same shape (every axis scaled by one factor, at least 3 cells;
    /// multiples of 4 for adaptive blocks) whose need fits `free`; `None` where none does.
    #[must_use]
    pub fn largest_fitting(&self, free: &Free) -> Option<[usize; 3]> {
        let dims = self.lattice.dims();
        let step = if self.engine == Engine::Blocks { 4 } else { 1 };
        let scaled = |s: f64| -> [usize; 3] {
            std::array::from_fn(|a| {
                if a >= dims {
                    return 1;
                }
                let n = ((self.size[a] as f64 * s) as usize / step) * step;
                n.max(if step == 4 { 4 } else { 3 })
            })
        };
        let fits = |size: [usize; 3]| self.with_size(size).need().is_some_and(|n| free.holds(&n));
        if !fits(scaled(0.0)) {
            return None;
        }
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..50 {
            let mid = 0.5 * (lo + hi);
            if fits(scaled(mid)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(scaled(lo))
    }

    fn describe(&self) -> String {
        let grid = if self.lattice.dims() == 2 {
            format!("[{}, {}]", self.size[0], self.size[1])
        } else {
            format!("[{}, {}, {}]", self.size[0], self.size[1], self.size[2])
        };
        let what = match self.engine {
            Engine::Dense => format!("{} {} {}", self.lattice, self.scheme, self.precision),
            Engine::Subgrids => format!("{} compressed subgrids", self.lattice),
            Engine::Blocks => format!("{} adaptive blocks", self.lattice),
        };
        format!("domain.size = {grid} ({what})")
    }
}

/// Memory free for a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Free {
    /// Host memory available (`None`: unknown, not checked).
    pub host: Option<u64>,
    /// The least free memory over the GPUs the run uses (`None`: CPU run or unknown).
    pub device: Option<u64>,
}

impl Free {
    /// Whether `need` fits.
    #[must_use]
    pub fn holds(&self, need: &Need) -> bool {
        self.host.is_none_or(|h| need.host <= h) && self.device.is_none_or(|d| need.device <= d)
    }
}

/// Host memory available to a new allocation: `MemAvailable` of /proc/meminfo, in bytes.
#[must_use]
pub fn host_available() -> Option<u64> {
    host_memory().map(|(_, avail)| avail)
}

/// Total and available host memory in bytes, from /proc/meminfo.
#[must_use]
pub fn host_memory() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kb.checked_mul(1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// What a run lacks: `None` where its plan fits `free`, else what it needs against what is
/// free ("needs 230 GB of host memory, but 24 GB is available").
#[must_use]
pub fn shortfall(spec: &Spec, free: &Free) -> Option<String> {
    let Some(need) = spec.need() else {
        return Some("needs more memory than any machine has".into());
    };
    if free.holds(&need) {
        return None;
    }
    let mut short = Vec::new();
    if let Some(h) = free.host.filter(|&h| need.host > h) {
        short.push(format!("{} of host memory, but {} is available", human_bytes(need.host), human_bytes(h)));
    }
    if let Some(d) = free.device.filter(|&d| need.device > d) {
        let each = if matches!(spec.place, Place::Gpus(g) if g > 1) { " on each GPU" } else { " of GPU memory" };
        short.push(format!("{}{each}, but {} is free", human_bytes(need.device), human_bytes(d)));
    }
    Some(format!("needs {}", short.join(", and ")))
}

/// Check a scene's run against `free`.
///
/// # Errors
/// One message with what the run needs, what is free, and the largest `domain.size` of the
/// same shape that fits (or that none does).
pub fn check(spec: &Spec, free: &Free) -> Result<(), String> {
    let Some(short) = shortfall(spec, free) else { return Ok(()) };
    let hint = match spec.largest_fitting(free) {
        Some(s) if spec.lattice.dims() == 2 => format!("the largest domain.size of this shape that fits is [{}, {}]", s[0], s[1]),
        Some(s) => format!("the largest domain.size of this shape that fits is [{}, {}, {}]", s[0], s[1], s[2]),
        None => "no grid of this shape fits; free some memory".into(),
    };
    let lean = Spec { checkpoints: false, export: false, ..spec.clone() };
    let also = match (spec.engine, spec.precision) {
        (Engine::Dense, Precision::Fp32) => "; solver.precision = \"fp16s\" halves the DDF memory",
        (Engine::Subgrids, _) if (spec.checkpoints || spec.export) && shortfall(&lean, free).is_none() => {
            "; without checkpoints and field exports, which reassemble the dense state on the host, it fits (the \
             rollback states stay compressed)"
        }
        _ => "",
    };
    Err(format!("out of memory: {} {short}; {hint}{also}", spec.describe()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(size: [usize; 3], place: Place) -> Spec {
        Spec {
            saved_states: 2,
            checkpoints: true,
            export: true,
            ..Spec::dense(place, Lattice::D3Q19, size, Scheme::EsotericPull, Precision::Fp32)
        }
    }

    #[test]
    fn a_billion_cells_need_hundreds_of_gigabytes_and_the_fitting_size_fits() {
        let s = dense([1000, 1000, 1000], Place::Cpu);
        let n = s.need().unwrap();
        // 77 B of DDFs and flags, a flag copy, two saved states of 76 B and 250 B of export.
        assert!(n.host > 450_000_000_000 && n.host < 500_000_000_000, "{n:?}");
        let free = Free { host: Some(24 << 30), device: None };
        let e = check(&s, &free).unwrap_err();
        assert!(e.contains("out of memory") && e.contains("host memory") && e.contains("available"), "{e}");
        let fit = s.largest_fitting(&free).unwrap();
        assert!(fit[0] == fit[1] && fit[1] == fit[2] && fit[0] > 200 && fit[0] < 1000, "{fit:?}");
        assert!(check(&s.with_size(fit), &free).is_ok());
        assert!(check(&s.with_size(fit.map(|n| n + 1)), &free).is_err(), "the largest: one more cell per axis does not fit");
        assert!(e.contains(&format!("[{}, {}, {}]", fit[0], fit[1], fit[2])), "{e}");
    }

    #[test]
    fn sizes_that_overflow_are_refused_not_wrapped() {
        let s = dense([1 << 40, 1 << 40, 1 << 40], Place::Cpu);
        assert!(s.need().is_none());
        assert!(check(&s, &Free::default()).unwrap_err().contains("more memory than any machine"));
        assert!(shortfall(&dense([64, 64, 64], Place::Cpu), &Free { host: Some(1 << 40), device: None }).is_none());
    }

    #[test]
    fn several_gpus_share_the_grid_and_the_gpu_plan_counts_field_planes() {
        let one = dense([512, 512, 512], Place::Gpus(1)).need().unwrap();
        let two = dense([512, 512, 512], Place::Gpus(2)).need().unwrap();
        // 77 B stored + 16 B of planes per cell.
        assert!(one.device > 93 * (1 << 27) && one.device < 93 * (1 << 27) + (1 << 30), "{one:?}");
        assert!(two.device < one.device / 2 + (1 << 30) && two.host == one.host, "{two:?}");
        let free = Free { host: Some(1 << 40), device: Some(80 << 30) };
        assert!(check(&dense([1024, 1024, 1024], Place::Gpus(1)), &free).unwrap_err().contains("of GPU memory"));
        let e = check(&dense([1024, 1024, 1024], Place::Gpus(4)), &Free { host: Some(1 << 40), device: Some(20 << 30) }).unwrap_err();
        assert!(e.contains("on each GPU"), "{e}");
    }

    #[test]
    fn compressed_subgrids_on_the_gpu_need_the_dense_state_on_the_host_only_for_checkpoints_and_exports() {
        let size = [3600, 756, 756];
        let raw = 19 * 4 * (3600 * 756 * 756) as u64;
        let sub = |place, saved_states, checkpoints, export| Spec {
            engine: Engine::Subgrids,
            budget: Some(15_000_000_000),
            subgrid: [200, 189, 189],
            saved_states,
            checkpoints,
            export,
            ..Spec::dense(place, Lattice::D3Q19, size, Scheme::EsotericPull, Precision::Fp32)
        };
        // A bench on the GPU keeps the grid's flags and the boxes being built on the host, not
        // its 156 GB of DDFs: a host with less memory than the dense state runs it.
        let bench = sub(Place::Gpus(1), 0, false, false).need().unwrap();
        assert!(bench.host > 14_000_000_000 && bench.host < 18_000_000_000, "{bench:?} against {raw} dense");
        let two = sub(Place::Gpus(2), 0, false, false).need().unwrap();
        assert!(two.host > bench.host + 8_000_000_000, "two GPUs build twice the boxes at once: {two:?}");
        assert_eq!(bench.device, (3600 * 756 * 756) as u64 + 15_000_000_000 + DEVICE_FIXED);
        let h100 = Free { host: Some(128 << 30), device: Some(80 << 30) };
        assert!(check(&sub(Place::Gpus(1), 0, false, false), &h100).is_ok());
        // `esoflow run` keeps two saved states at once, each the shells (3 % of the DDFs for
        // these subgrids) and at most the budget of cores: it fits where the bench does.
        let run = sub(Place::Gpus(1), 2, false, false).need().unwrap();
        let shells = raw / 32;
        assert!(
            run.host > bench.host + 2 * (15_000_000_000 + raw / 40) && run.host < bench.host + 2 * (15_000_000_000 + raw / 25),
            "{run:?}"
        );
        assert!(check(&sub(Place::Gpus(1), 2, false, false), &h100).is_ok());
        // Two GPUs' saved states hold both budgets.
        let run2 = sub(Place::Gpus(2), 2, false, false).need().unwrap();
        assert!(run2.host > two.host + 2 * 30_000_000_000, "{run2:?}");
        // A checkpoint holds the dense state and its data; an export the dense state and its
        // fields.
        let ckpt = sub(Place::Gpus(1), 2, true, false).need().unwrap();
        assert!(ckpt.host >= run.host + 2 * raw, "{ckpt:?}");
        let e = check(&sub(Place::Gpus(1), 2, true, false), &h100).unwrap_err();
        eprintln!("{e}");
        assert!(e.contains("without checkpoints and field exports") && e.contains("it fits"), "{e}");
        let e = check(&sub(Place::Gpus(1), 2, true, false), &Free { host: Some(24 << 30), device: Some(80 << 30) }).unwrap_err();
        assert!(!e.contains("without checkpoints"), "where the run does not fit either way, no such hint: {e}");
        let export = sub(Place::Gpus(1), 0, false, true).need().unwrap();
        assert!(export.host >= raw + 250 * (3600 * 756 * 756) as u64, "{export:?}");
        // On the CPU the state is built from the dense grid and the cores live on the host.
        let cpu = sub(Place::Cpu, 0, false, false).need().unwrap();
        assert!(cpu.host >= raw + 15_000_000_000 && cpu.device == 0, "{cpu:?}");
        // Without a budget a quarter of the DDFs is assumed for the cores.
        let free = Spec { budget: None, ..sub(Place::Gpus(1), 1, false, false) }.need().unwrap();
        let none = Spec { budget: None, ..sub(Place::Gpus(1), 0, false, false) }.need().unwrap();
        assert!(free.host > none.host + raw / 4 && free.host < none.host + raw / 4 + 2 * shells, "{free:?}");
    }

    #[test]
    fn two_dimensional_grids_keep_their_shape() {
        let mut s = dense([100_000, 50_000, 1], Place::Cpu);
        s.lattice = Lattice::D2Q9;
        let free = Free { host: Some(8 << 30), device: None };
        let fit = s.largest_fitting(&free).unwrap();
        assert_eq!(fit[2], 1);
        assert!((fit[0] as f64 / fit[1] as f64 - 2.0).abs() < 0.01, "{fit:?}");
        assert!(check(&s, &free).unwrap_err().contains(&format!("[{}, {}]", fit[0], fit[1])));
    }
}
