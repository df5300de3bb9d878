//! The forest's adaptation on the device (`kernels/amr_mesh.cu`): marks from the criterion,
//! the 2:1 balance, the refine and coarsen lists, the gap set, the ID sets, the links, the
//! masks, the launch lists and the obstacle flags of new children, without the mesh leaving
//! the GPU. Each pass is the device form of a pass of [`BlockForest::adapt`] (the reference,
//! array for array); the fixed points of the balance read back one flag per iteration, and a
//! handful of counters come back once the lists are compacted and once at the end.
//!
//! [`BlockForest::adapt`]: crate::amr::BlockForest::adapt

use super::{AmrGpu, Lists, Src, Xf};
use crate::amr::{AdaptReport, AmrError, AmrLbm, BlockForest, Criterion, NearWall, ObstacleSums, BLOCK};
use crate::backend::cuda::derr;
use crate::lattice::Lat;
use crate::solver::SolverError;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

/// Words of the counter array (`ctr` in `kernels/amr_mesh.cu`).
pub(super) const CTR: usize = 256;
const M_CHANGED: usize = 0;
const M_BLOCKED: usize = 1;
const M_NC: usize = 2;
const M_NR: usize = 3;
const M_CANCELLED: usize = 4;
const M_ADDED: usize = 5;
const M_REQUESTED: usize = 6;
/// Whether any mark is left after the sanitising pass.
const M_ANY: usize = 7;
/// Per level, where its blocks start in the ID sets (`M_LEVELS + 1` words).
const M_LEVEL_START: usize = 8;
/// Some state holds a refine or coarsen mark (the sanitising pass): without one (and no mark
/// left after it, `M_ANY`) an adaptation has no marks to clear.
const M_MARKED: usize = 28;
/// The adaptation's number (1 to 255, cycling; the sanitising pass sets it from its argument):
/// the rows it changes get it in `dirty`, so that `amr_codes` can tell the blocks whose
/// neighbourhood this adaptation changed.
const M_EPOCH: usize = 29;
/// Rows the last adaptation changed (the host copy's refresh).
const M_DIRTY: usize = 30;
/// One more than the highest ID active since the upload (the allocation raises it; the
/// one-block scans stop there, not at the capacity); kept across adaptations
/// ([`AmrGpu::clear_counters`]).
const M_HW: usize = 31;
/// Per level, its launch lists as (offset, count) pairs: all, near-coarser, feeding.
const M_LISTS: usize = 32;
/// Per level, the transfer's groups (3 words a level).
const M_XGROUPS: usize = 128;
/// Per level, the count of its core blocks (the head of its launch list: `amr_mesh_lists`).
const M_CORE: usize = 176;
/// Levels the counters can name.
const M_LEVELS: usize = 16;

/// The counters' offsets in `ctr`, the one table both sides read: the kernels get them as
/// `#define`s in their generated header ([`counter_defines`]).
const COUNTERS: [(&str, usize); 17] = [
    ("M_CHANGED", M_CHANGED),
    ("M_BLOCKED", M_BLOCKED),
    ("M_NC", M_NC),
    ("M_NR", M_NR),
    ("M_CANCELLED", M_CANCELLED),
    ("M_ADDED", M_ADDED),
    ("M_REQUESTED", M_REQUESTED),
    ("M_ANY", M_ANY),
    ("M_LEVEL_START", M_LEVEL_START),
    ("M_MARKED", M_MARKED),
    ("M_EPOCH", M_EPOCH),
    ("M_DIRTY", M_DIRTY),
    ("M_HW", M_HW),
    ("M_LISTS", M_LISTS),
    ("M_XGROUPS", M_XGROUPS),
    ("M_CORE", M_CORE),
    ("M_LEVELS", M_LEVELS),
];

/// The `#define`s of the counters' offsets for `kernels/amr_mesh.cu`.
pub(super) fn counter_defines() -> String {
    COUNTERS.iter().map(|(name, at)| format!("#define {name} {at}\n")).collect()
}

/// Passes of `amr_mesh` (its `MO_*`).
#[derive(Clone, Copy)]
enum Mo {
    Sanitise = 0,
    Closure = 1,
    Cancel = 2,
    Unseed = 3,
    Count = 4,
    Revert = 5,
    Free = 6,
    FreeParent = 7,
    Alloc = 8,
    Clear = 9,
    Fresh = 10,
    Links = 11,
    NbrChild = 12,
    LeafMasks = 13,
    ParentMasks = 14,
    Mark = 15,
}

/// The passes' names in the trace (`ESOFLOW_AMR_PROFILE=trace`), by `Mo` value.
const MO_NAMES: [&str; 16] = [
    "mesh sanitise",
    "mesh closure",
    "mesh cancel",
    "mesh unseed",
    "mesh count",
    "mesh revert",
    "mesh free",
    "mesh free parent",
    "mesh alloc",
    "mesh clear",
    "mesh fresh",
    "mesh links",
    "mesh nbr child",
    "mesh leaf masks",
    "mesh parent masks",
    "mesh mark",
];

/// The obstacles as the device sees them: the prefix sums of the finest grid's obstacle cells
/// ([`ObstacleSums`]) and that grid's level.
pub(super) struct Obstacles {
    sums: CudaSlice<u32>,
    n: [u32; 3],
    level: u8,
}

/// Levels the counters can name (M_LEVELS in kernels/amr_mesh.cu).
pub(super) const LIST_LEVELS: usize = 16;

/// Words per (level, tile) of the many-block launch lists' counts: blocks not feeding, next to
/// a coarser level, core (`amr_mesh_lists_tiles`).
pub(super) const LIST_FLAGS: usize = 3;

/// Tiles of 1024 IDs that cover a capacity (the many-block launch lists).
pub(super) fn list_tiles(capacity: usize) -> usize {
    capacity.div_ceil(1024).max(1)
}

/// Passes of a fixed point run between two reads of its changed flag ([`AmrGpu::fixed_point`]).
const FIXED_POINT_BATCH: usize = 2;

fn threads(n: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (n.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

const ONE_BLOCK: LaunchConfig = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };

impl AmrGpu {
    /// Give the device the obstacles (the solver's [`ObstacleSums`] at the domain level
    /// `level`), so that it computes near-wall targets and the obstacle flags of new children
    /// itself ([`Self::adapt_to_criterion`]).
    ///
    /// # Errors
    /// CUDA errors.
    pub fn set_obstacles(&mut self, sums: &ObstacleSums, level: u8) -> Result<(), SolverError> {
        let (words, n) = sums.raw();
        let sums = self.stream.clone_htod(words).map_err(derr("uploading the obstacle sums"))?;
        self.obstacles = Some(Obstacles { sums, n: n.map(|x| x as u32), level });
        Ok(())
    }

    fn mesh_op(&mut self, op: Mo, n: usize, arg: u32) -> Result<(), SolverError> {
        if n == 0 {
            return Ok(());
        }
        let (op, n32, cap, maxl, frozen) = (op as u32, n as u32, self.capacity as u32, u32::from(self.max_level), self.frozen);
        let mut b = self.stream.launch_builder(&self.mesh_k);
        b.arg(&op).arg(&n32).arg(&arg).arg(&cap).arg(&maxl).arg(&frozen);
        b.arg(&mut self.level).arg(&mut self.pos).arg(&mut self.parent).arg(&mut self.child).arg(&mut self.state);
        b.arg(&mut self.nbr).arg(&mut self.nbr_child).arg(&mut self.bmask).arg(&mut self.cmask).arg(&mut self.id_set);
        b.arg(&mut self.gap).arg(&mut self.mk).arg(&mut self.aux).arg(&mut self.fresh).arg(&mut self.dirty).arg(&mut self.rl);
        b.arg(&mut self.xlists).arg(&mut self.ctr);
        // SAFETY: arguments as amr_mesh declares them; every array holds the capacity (xlists
        // 3 C, ctr CTR words); threads past n return, and n never exceeds what the pass's
        // lists hold.
        unsafe { b.launch(threads(n)) }.map_err(derr("launching a mesh kernel"))?;
        self.tick(MO_NAMES[op as usize]);
        Ok(())
    }

    /// Profiling (`ESOFLOW_AMR_PROFILE=1`): wait for the device and add the time since `t` to
    /// adaptation phase `i`.
    fn phase(&mut self, i: usize, t: &mut std::time::Instant) -> Result<(), SolverError> {
        if let Some(p) = self.phases.as_mut() {
            self.stream.synchronize().map_err(derr("adapting the forest"))?;
            p[i] += t.elapsed().as_secs_f64();
            *t = std::time::Instant::now();
        }
        Ok(())
    }

    fn counters(&mut self) -> Result<Vec<u32>, SolverError> {
        let e = derr("reading the mesh counters");
        self.stream.memcpy_dtoh(&self.ctr, &mut self.ctr_host).map_err(&e)?;
        // Wait on the stream (the context's spin or yield), not on the pinned copy's own
        // blocking event: by then that event has completed and as_slice returns at once.
        self.stream.synchronize().map_err(&e)?;
        let c = self.ctr_host.as_slice().map_err(&e)?.to_vec();
        self.tick("read counters");
        self.high_water = (c[M_HW] as usize).min(self.capacity);
        Ok(c)
    }

    /// Zero the counters but the high-water mark.
    fn clear_counters(&mut self) -> Result<(), SolverError> {
        let e = derr("adapting the forest");
        self.stream.memset_zeros(&mut self.ctr.slice_mut(..M_HW)).map_err(&e)?;
        self.stream.memset_zeros(&mut self.ctr.slice_mut(M_HW + 1..)).map_err(&e)
    }

    /// Run a pass until it changes nothing (it sets the changed flag), then `after` (a pass
    /// that may run early: it is run again after each batch); returns the counters. The
    /// passes only ever change marks one way, so a pass after the fixed point changes
    /// nothing: they run [`FIXED_POINT_BATCH`] at a time, the flag of the batch's last one
    /// read back (one round trip a batch, not one a pass).
    fn fixed_point(&mut self, op: Mo, mut after: impl FnMut(&mut Self) -> Result<(), SolverError>) -> Result<Vec<u32>, SolverError> {
        let e = derr("balancing the forest");
        // The reversion takes one thread per (block, child): each child's 3^D neighbours are
        // one chain of lookups (all 2^D children's in one thread: 60 us a pass on the sphere);
        // blocks above the high-water mark (no marks, never active) need no thread.
        let n = if let Mo::Revert = op { self.high_water << self.dims } else { self.capacity };
        loop {
            for _ in 0..FIXED_POINT_BATCH {
                self.stream.memset_zeros(&mut self.ctr.slice_mut(M_CHANGED..M_CHANGED + 1)).map_err(&e)?;
                self.mesh_op(op, n, 0)?;
            }
            after(self)?;
            let c = self.counters()?;
            if c[M_CHANGED] == 0 {
                return Ok(c);
            }
        }
    }

    /// Set refine and coarsen marks in the device's forest from the criterion, as the host's
    /// [`BlockForest::targets`] and [`BlockForest::mark_to_targets`] do: block maxima of the
    /// field, the log2 mapping, near-wall refinement from the obstacles ([`Self::set_obstacles`]).
    ///
    /// # Errors
    /// CUDA errors; near-wall refinement without obstacles on the device.
    pub fn mark_from_criterion<L: Lat>(
        &mut self,
        lbm: &AmrLbm<L>,
        crit: &Criterion,
        near_wall: Option<NearWall>,
    ) -> Result<(), SolverError> {
        self.block_maxima(lbm, crit.field == crate::amr::Field::Q)?;
        let e = derr("computing the target levels");
        let cap = self.capacity as u32;
        let crit_max = u32::from(crit.max_level.min(self.max_level));
        let forest_max = u32::from(self.max_level);
        let (nw_level, margin) = near_wall.map_or((-1i32, 0.0f64), |nw| (i32::from(nw.level), nw.margin));
        let Some(obs) = &self.obstacles else {
            return Err(SolverError::Backend("the device has no obstacles to refine near (AmrGpu::set_obstacles)".into()));
        };
        let scale = f64::from(1u32 << obs.level);
        let mut b = self.stream.launch_builder(&self.targets_k);
        b.arg(&cap).arg(&self.values).arg(&crit.threshold).arg(&crit.coarsen).arg(&crit_max).arg(&forest_max).arg(&nw_level).arg(&margin);
        b.arg(&obs.sums).arg(&obs.n[0]).arg(&obs.n[1]).arg(&obs.n[2]).arg(&scale);
        b.arg(&self.level).arg(&self.pos).arg(&self.child).arg(&self.state).arg(&mut self.aux);
        // SAFETY: arguments as amr_mesh_targets declares them; one thread per ID below the
        // capacity; the sums hold (n0 + 1) (n1 + 1) (n2 + 1) words.
        unsafe { b.launch(threads(self.capacity)) }.map_err(&e)?;
        self.tick("targets");
        self.mesh_op(Mo::Mark, self.active, 0)
    }

    /// Adapt the device's forest to the marks in its states ([`Self::mark_from_criterion`], or
    /// [`Self::set_states`]), as [`BlockForest::adapt`] does on the host; with `move_data`, the
    /// DDFs move with it as [`AmrGpu::transfer`] moves them (restriction into coarsened blocks
    /// on the old mesh; obstacle flags, interpolation, mass shift and refresh on the new one).
    /// The host's copy of the forest is out of date afterwards until [`Self::download_mesh`].
    ///
    /// # Errors
    /// CUDA errors (outer); the capacity refusal of [`BlockForest::adapt`] (inner: the forest
    /// is then unchanged, marks cleared).
    pub fn adapt_marked(&mut self, move_data: bool) -> Result<Result<AdaptReport, AmrError>, SolverError> {
        let cap = self.capacity;
        let dims = self.dims;
        let k = 1usize << dims;
        let nd = 3usize.pow(dims as u32);
        let cells = BLOCK.pow(dims as u32);
        let e = derr("adapting the forest");
        let cap32 = cap as u32;
        let mut t = std::time::Instant::now();
        // Steps still queued run first; the settle waits until the mesh is known to change.
        self.flush()?;
        self.clear_counters()?;
        self.tick("clear counters");
        // This adaptation's number: the rows it changes are marked with it.
        self.epoch = self.epoch % 255 + 1;
        // Marks, the refine closure, cancellation by frozen blocks, coarsening reverted.
        self.mesh_op(Mo::Sanitise, cap, u32::from(self.epoch))?;
        let c = self.fixed_point(Mo::Closure, |_| Ok(()))?;
        if c[M_ANY] == 0 {
            // Nothing to refine or coarsen (the usual case in a settled flow): one round trip,
            // and marks to clear only where a state held one the sanitising dropped.
            if c[M_MARKED] != 0 {
                self.mesh_op(Mo::Clear, cap, 0)?;
            }
            self.phase(1, &mut t)?;
            return Ok(Ok(AdaptReport::default()));
        }
        if c[M_BLOCKED] != 0 {
            self.fixed_point(Mo::Cancel, |_| Ok(()))?;
            self.mesh_op(Mo::Unseed, cap, 0)?;
            self.fixed_point(Mo::Closure, |_| Ok(()))?;
        }
        self.mesh_op(Mo::Count, cap, 0)?;
        let c = self.fixed_point(Mo::Revert, |g| {
            let mut b = g.stream.launch_builder(&g.compact_k);
            b.arg(&cap32).arg(&g.mk).arg(&mut g.xlists).arg(&mut g.rl).arg(&mut g.ctr);
            // SAFETY: one block of 1024 threads over the capacity's marks; the lists hold C IDs.
            unsafe { b.launch(ONE_BLOCK) }.map_err(derr("adapting the forest"))?;
            g.tick("compact");
            Ok(())
        })?;
        let (nc, nr) = (c[M_NC] as usize, c[M_NR] as usize);
        let mut report = AdaptReport {
            cancelled: c[M_CANCELLED] as usize,
            balance_added: c[M_ADDED] as usize,
            reverted: c[M_REQUESTED] as usize - nc,
            ..AdaptReport::default()
        };
        let active = self.active;
        let needed = active + nr * k - nc * k;
        if needed > cap {
            self.mesh_op(Mo::Clear, cap, 0)?;
            return Ok(Err(AmrError::Capacity { needed, capacity: cap, active }));
        }
        if nr == 0 && nc == 0 {
            self.mesh_op(Mo::Clear, cap, 0)?;
            self.phase(1, &mut t)?;
            return Ok(Ok(report));
        }
        report.counts = (nr, nc);
        // The data moves with the old lists: every level's in `f` first (in place: in the halo
        // form, which holds whatever the links become).
        self.settle_for_mesh()?;
        if self.report_ids {
            report.coarsened = self.stream.clone_dtoh(&self.xlists.slice(0..nc)).map_err(&e)?;
            report.refined = self.stream.clone_dtoh(&self.rl.slice(0..nr)).map_err(&e)?;
            self.tick("read lists");
        }
        self.phase(1, &mut t)?;
        if move_data {
            // The old mesh: the cells that hold data, the coarsened blocks from their children.
            self.stream.memset_zeros(&mut self.valid).map_err(&e)?;
            self.tick("clear valid");
            self.transfer_op(Xf::Valid, Src::Ids, (0, self.active), dims)?;
            self.transfer_op(Xf::Coarsen, Src::X, (0, nc), dims)?;
            self.phase(3, &mut t)?;
        }
        // Free, allocate, clear the marks.
        self.gap_lo = self.gap_lo.min(self.gap_len);
        self.mesh_op(Mo::Fresh, cap, 0)?;
        self.mesh_op(Mo::Free, nc * k * (nd + 1), self.gap_len as u32)?;
        self.mesh_op(Mo::FreeParent, nc, 0)?;
        self.gap_len += nc * k;
        self.mesh_op(Mo::Alloc, nr * k, self.gap_len as u32)?;
        self.gap_len -= nr * k;
        self.mesh_op(Mo::Clear, cap, 0)?;
        self.active = needed;
        // ID sets, links level by level, masks, launch lists.
        let maxl = u32::from(self.max_level);
        if let Some((tiles_k, offsets_k, write_k)) = self.id_sets_many.clone() {
            let tiles = list_tiles(self.capacity) as u32;
            let cfg = LaunchConfig { grid_dim: (tiles, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
            let mut b = self.stream.launch_builder(&tiles_k);
            b.arg(&cap32).arg(&maxl).arg(&self.level).arg(&self.state).arg(&self.ctr).arg(&tiles).arg(&mut self.list_tiles);
            // SAFETY (all three): arguments as the kernels declare them; `tiles` thread blocks
            // of 1024 cover the capacity; list_tiles holds a word per (level, tile) for every
            // level up to the maximum (at most 16); id_set holds C IDs.
            unsafe { b.launch(cfg) }.map_err(&e)?;
            let mut b = self.stream.launch_builder(&offsets_k);
            b.arg(&maxl).arg(&tiles).arg(&mut self.list_tiles).arg(&mut self.ctr);
            unsafe { b.launch(ONE_BLOCK) }.map_err(&e)?;
            let mut b = self.stream.launch_builder(&write_k);
            b.arg(&cap32).arg(&maxl).arg(&self.level).arg(&self.state).arg(&self.ctr).arg(&tiles).arg(&self.list_tiles);
            b.arg(&mut self.id_set);
            unsafe { b.launch(cfg) }.map_err(&e)?;
        } else {
            let mut b = self.stream.launch_builder(&self.id_sets_k);
            b.arg(&cap32).arg(&maxl).arg(&self.level).arg(&self.state).arg(&mut self.id_set).arg(&mut self.ctr);
            // SAFETY: one block of 1024 threads over the capacity; id_set holds C IDs.
            unsafe { b.launch(ONE_BLOCK) }.map_err(&e)?;
        }
        self.tick("id sets");
        for l in 0..=u32::from(self.max_level) {
            if l > 0 {
                self.mesh_op(Mo::Links, needed * nd, l)?;
            }
            self.mesh_op(Mo::NbrChild, needed * nd, l)?;
        }
        self.mesh_op(Mo::LeafMasks, needed * cells, 0)?;
        self.mesh_op(Mo::ParentMasks, needed * cells, 0)?;
        if let Some(obs) = self.obstacles.as_ref().filter(|_| nr > 0) {
            let n = (nr * k * cells) as u32;
            let dl = u32::from(obs.level);
            let mut b = self.stream.launch_builder(&self.solids_k);
            b.arg(&n).arg(&self.rl).arg(&obs.sums).arg(&obs.n[0]).arg(&obs.n[1]).arg(&obs.n[2]).arg(&dl);
            b.arg(&self.level).arg(&self.pos).arg(&self.child).arg(&mut self.solid).arg(&mut self.f);
            // SAFETY: one thread per cell of the refined blocks' children (rl holds nr IDs).
            unsafe { b.launch(threads(n as usize)) }.map_err(&e)?;
            self.tick("solids");
        }
        let c = self.build_lists(u32::from(self.epoch))?;
        self.phase(2, &mut t)?;
        self.level_start = c[M_LEVEL_START..=M_LEVEL_START + M_LEVELS].to_vec();
        if move_data {
            let groups: Vec<(usize, usize, usize)> = (0..M_LEVELS)
                .map(|l| &c[M_XGROUPS + 3 * l..M_XGROUPS + 3 * l + 3])
                .filter(|g| g[2] > 0)
                .map(|g| (g[0] as usize, g[1] as usize, g[2] as usize))
                .collect();
            self.transfer_new_mesh(nc, &groups, dims)?;
            self.phase(3, &mut t)?;
        }
        Ok(Ok(report))
    }

    /// The stepping's launch lists from the device's ID sets (level starts in the counters)
    /// and block masks, and after an adaptation the transfer's level groups
    /// (`amr_mesh_lists`); sets the per-level [`Lists`], works out the step's codes (of the
    /// blocks next to a row the adaptation `epoch` changed; 0: of every block) and returns
    /// the counters.
    pub(super) fn build_lists(&mut self, epoch: u32) -> Result<Vec<u32>, SolverError> {
        let e = derr("building the launch lists");
        if let Some((tiles_k, offsets_k, write_k)) = self.lists_many.clone() {
            let tiles = list_tiles(self.capacity) as u32;
            let cfg = LaunchConfig { grid_dim: (tiles, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
            let mut b = self.stream.launch_builder(&tiles_k);
            b.arg(&self.bmask).arg(&self.id_set).arg(&self.ctr).arg(&tiles).arg(&mut self.list_tiles);
            // SAFETY (all three): arguments as the kernels declare them; `tiles` thread blocks
            // of 1024 cover the capacity, so the ID set (at most C entries); list_tiles holds
            // 2 words per (level, tile) for every level the counters can name.
            unsafe { b.launch(cfg) }.map_err(&e)?;
            let mut b = self.stream.launch_builder(&offsets_k);
            b.arg(&tiles).arg(&mut self.list_tiles).arg(&mut self.ctr);
            unsafe { b.launch(ONE_BLOCK) }.map_err(&e)?;
            let mut b = self.stream.launch_builder(&write_k);
            b.arg(&self.bmask).arg(&self.id_set).arg(&self.ctr).arg(&tiles).arg(&self.list_tiles).arg(&mut self.lists);
            unsafe { b.launch(cfg) }.map_err(&e)?;
        }
        let id_part = u32::from(self.lists_many.is_none());
        let mut b = self.stream.launch_builder(&self.lists_k);
        b.arg(&self.level).arg(&self.child).arg(&self.bmask).arg(&self.id_set).arg(&self.rl);
        b.arg(&mut self.xlists).arg(&mut self.lists).arg(&mut self.ctr).arg(&id_part);
        // SAFETY: one block of 1024 threads; the launch lists hold 3 C IDs, the transfer's
        // lists nc + nr (K + 1) <= 3 C.
        unsafe { b.launch(ONE_BLOCK) }.map_err(&e)?;
        self.tick("lists");
        let c = self.counters()?;
        self.levels.clear();
        // The captured coarse steps launch over the old lists: captured again at their next
        // use, which updates these instances where it can.
        for (k, g) in self.graphs.drain() {
            self.stale_graphs.insert(k, g);
        }
        for l in 0..M_LEVELS {
            let r = &c[M_LISTS + 6 * l..M_LISTS + 6 * l + 6];
            if r[1] == 0 {
                break;
            }
            let p = |i: usize| (r[2 * i] as usize, r[2 * i + 1] as usize);
            self.levels.push(Lists { all: p(0), near_coarser: p(1), feeds: p(2), core: c[M_CORE + l] as usize });
        }
        // Every list change is a mesh change (an upload or an adaptation, obstacle flags of
        // new children included): the step's codes follow it.
        self.work_out_codes(self.dims, epoch)?;
        Ok(c)
    }

    /// After an upload: the counters hold the host's level starts, the high-water mark of its
    /// active IDs and no adaptation's lists, then [`Self::build_lists`].
    pub(super) fn lists_after_upload(&mut self, high_water: u32) -> Result<(), SolverError> {
        let e = derr("uploading the block forest");
        self.stream.memset_zeros(&mut self.ctr).map_err(&e)?;
        let ls = self.level_start.clone();
        self.stream.memcpy_htod(&ls, &mut self.ctr.slice_mut(M_LEVEL_START..M_LEVEL_START + ls.len())).map_err(&e)?;
        let hw = [high_water];
        self.stream.memcpy_htod(&hw, &mut self.ctr.slice_mut(M_HW..=M_HW)).map_err(&e)?;
        self.high_water = high_water as usize;
        self.build_lists(0).map(|_| ())
    }

    /// Queue the criterion's marks ([`Self::mark_from_criterion`]) behind the work already on
    /// the stream, then wait for that work only: the criterion's first kernel starts as the
    /// last step ends instead of a launch later, and the wait is the steps' time, not the
    /// adaptation's. [`Self::adapt_to_criterion`] goes on from these marks. With the trace knob
    /// the stream is drained first, so that the trace's intervals start at an idle device.
    ///
    /// # Errors
    /// As [`Self::mark_from_criterion`].
    pub fn queue_criterion<L: Lat>(&mut self, lbm: &AmrLbm<L>, crit: &Criterion, near_wall: Option<NearWall>) -> Result<(), SolverError> {
        let e = derr("waiting for the steps");
        // A deferred restriction is the last step's work: it goes in before the event.
        self.flush()?;
        if let Some(tr) = self.trace.as_mut() {
            self.stream.synchronize().map_err(&e)?;
            tr.begin(&self.stream);
        }
        let done = self.stream.record_event(None).map_err(&e)?;
        self.mark_from_criterion(lbm, crit, near_wall)?;
        self.marks_queued = true;
        done.synchronize().map_err(&e)
    }

    /// Adapt the device's forest and DDFs to the criterion, the mesh staying on the device:
    /// [`Self::mark_from_criterion`] (unless [`Self::queue_criterion`] queued the marks), then
    /// [`Self::adapt_marked`] with the data.
    ///
    /// # Errors
    /// As those two.
    pub fn adapt_to_criterion<L: Lat>(
        &mut self,
        lbm: &AmrLbm<L>,
        crit: &Criterion,
        near_wall: Option<NearWall>,
    ) -> Result<Result<AdaptReport, AmrError>, SolverError> {
        let mut t = std::time::Instant::now();
        if !std::mem::take(&mut self.marks_queued) {
            if let Some(tr) = self.trace.as_mut() {
                tr.begin(&self.stream);
            }
            self.mark_from_criterion(lbm, crit, near_wall)?;
        }
        self.phase(0, &mut t)?;
        let r = self.adapt_marked(true);
        if let Some(tr) = self.trace.as_mut() {
            tr.end(&self.stream, r.as_ref().ok().and_then(|x| x.as_ref().ok()).map_or((0, 0), |x| x.counts));
        }
        r
    }

    /// Overwrite the device's refinement states (marks for [`Self::adapt_marked`]; for tests
    /// that drive the device's forest as [`BlockForest::set_mark`] drives the host's).
    ///
    /// # Errors
    /// A state array of another size; CUDA errors.
    pub fn set_states(&mut self, states: &[u8]) -> Result<(), SolverError> {
        if states.len() != self.capacity {
            return Err(SolverError::Backend(format!("{} states for a forest of {} blocks", states.len(), self.capacity)));
        }
        let e = derr("uploading the marks");
        self.stream.memcpy_htod(states, &mut self.state).map_err(&e)?;
        // Frozen blocks may have changed: the host copy reads every row at its next refresh.
        self.stream.memcpy_htod(&vec![1u8; self.capacity], &mut self.dirty).map_err(&e)
    }

    /// Whether [`Self::adapt_marked`] reads the refined and coarsened blocks' IDs back into its
    /// report (on by default; off, the report has only their numbers, and an adaptation saves
    /// a round trip to the host).
    pub fn set_report_ids(&mut self, on: bool) {
        self.report_ids = on;
    }

    /// Freeze levels of the device's forest (bit `l`: level `l`), as
    /// [`BlockForest::freeze_level`] does on the host's (an upload copies the host's).
    pub fn set_frozen_levels(&mut self, bits: u32) {
        self.frozen = bits;
    }

    /// Copy the device's forest into `forest` (same configuration, equal to the device's own
    /// forest the last time the two met: an upload or a refresh), e.g. to check it. Only the
    /// rows of the blocks the device changed since are read (gathered on the device), the ID
    /// set up to the active blocks and the part of the gap set that changed. The obstacle
    /// flags' changes are read too but not kept: a solver's host copy refreshes with
    /// [`Self::download_mesh`].
    ///
    /// # Errors
    /// A forest of another capacity; CUDA errors.
    pub fn download_forest(&mut self, forest: &mut BlockForest) -> Result<(), SolverError> {
        self.refresh_host(forest, None)
    }

    /// Copy the device's forest and obstacle flags into a solver after device adaptations
    /// ([`Self::adapt_to_criterion`]), so that the host's fields, statistics, outlines and
    /// checkpoints see the mesh the DDFs ([`Self::download`]) belong to: the rows that
    /// changed, as [`Self::download_forest`].
    ///
    /// # Errors
    /// As [`Self::download_forest`].
    pub fn download_mesh<L: Lat>(&mut self, lbm: &mut AmrLbm<L>) -> Result<(), SolverError> {
        let mut t = std::time::Instant::now();
        let (forest, solid) = lbm.forest_and_solids_mut();
        self.refresh_host(forest, Some(solid))?;
        self.phase(4, &mut t)
    }

    fn refresh_host(&mut self, forest: &mut BlockForest, solid: Option<&mut [bool]>) -> Result<(), SolverError> {
        if forest.capacity() != self.capacity {
            return Err(SolverError::Backend(format!("the forest holds {} blocks, the device {}", forest.capacity(), self.capacity)));
        }
        let e = derr("reading the block forest");
        let (nd, cells) = (3usize.pow(self.dims as u32), BLOCK.pow(self.dims as u32));
        let cap32 = self.capacity as u32;
        {
            let mut b = self.stream.launch_builder(&self.dirty_k);
            b.arg(&cap32).arg(&self.dirty).arg(&mut self.rl).arg(&mut self.ctr);
            // SAFETY: one block of 1024 threads over the capacity's flags; rl holds C IDs.
            unsafe { b.launch(ONE_BLOCK) }.map_err(&e)?;
        }
        let n = self.counters()?[M_DIRTY] as usize;
        self.refreshes = (self.refreshes.0 + 1, self.refreshes.1 + n as u64);
        let a = forest.arrays_mut();
        if n > 0 {
            let n32 = n as u32;
            let g = &mut self.gathered;
            let mut b = self.stream.launch_builder(&self.gather_k);
            b.arg(&n32).arg(&self.rl).arg(&self.level).arg(&self.pos).arg(&self.parent).arg(&self.child).arg(&self.state);
            b.arg(&self.nbr).arg(&self.nbr_child).arg(&self.bmask).arg(&self.cmask).arg(&self.solid);
            b.arg(&mut g.bytes).arg(&mut g.pos).arg(&mut g.words).arg(&mut g.links).arg(&mut g.cells);
            // SAFETY: one thread per (dirty block, cell); the gathered arrays hold C rows.
            unsafe { b.launch(threads(n * cells)) }.map_err(&e)?;
            let s = &self.stream;
            let ids = s.clone_dtoh(&self.rl.slice(..n)).map_err(&e)?;
            let bytes = s.clone_dtoh(&g.bytes.slice(..3 * n)).map_err(&e)?;
            let pos = s.clone_dtoh(&g.pos.slice(..3 * n)).map_err(&e)?;
            let words = s.clone_dtoh(&g.words.slice(..2 * n)).map_err(&e)?;
            let links = s.clone_dtoh(&g.links.slice(..2 * nd * n)).map_err(&e)?;
            let cm = s.clone_dtoh(&g.cells.slice(..2 * cells * n)).map_err(&e)?;
            let mut solid = solid;
            for (i, &id) in ids.iter().enumerate() {
                let b = id as usize;
                a.level[b] = bytes[3 * i];
                a.state[b] = bytes[3 * i + 1];
                a.block_mask[b] = bytes[3 * i + 2];
                a.pos[b] = [pos[3 * i], pos[3 * i + 1], pos[3 * i + 2]];
                a.parent[b] = words[2 * i];
                a.child[b] = words[2 * i + 1];
                a.nbr[b * nd..(b + 1) * nd].copy_from_slice(&links[2 * nd * i..2 * nd * i + nd]);
                a.nbr_child[b * nd..(b + 1) * nd].copy_from_slice(&links[2 * nd * i + nd..2 * nd * (i + 1)]);
                a.cell_mask[b * cells..(b + 1) * cells].copy_from_slice(&cm[2 * cells * i..2 * cells * i + cells]);
                if let Some(sf) = solid.as_deref_mut() {
                    for (s, &f) in sf[b * cells..(b + 1) * cells].iter_mut().zip(&cm[2 * cells * i + cells..2 * cells * (i + 1)]) {
                        *s = f != 0;
                    }
                }
            }
        }
        s_copy(&self.stream, &self.id_set, 0..self.active, a.id_set).map_err(&e)?;
        let lo = self.gap_lo.min(self.gap_len);
        s_copy(&self.stream, &self.gap, lo..self.gap_len, a.gap).map_err(&e)?;
        a.level_start[..self.level_start.len()].copy_from_slice(&self.level_start);
        a.level_start[self.level_start.len()..].fill(*self.level_start.last().unwrap_or(&0));
        *a.gap_len = self.gap_len;
        self.stream.memset_zeros(&mut self.dirty).map_err(&e)?;
        self.gap_lo = self.gap_len;
        Ok(())
    }
}

/// Copy `range` of a device array into the same range of a host array.
fn s_copy(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    src: &CudaSlice<u32>,
    range: std::ops::Range<usize>,
    dst: &mut [u32],
) -> Result<(), cudarc::driver::DriverError> {
    if range.is_empty() {
        return Ok(());
    }
    s.memcpy_dtoh(&src.slice(range.clone()), &mut dst[range])
}

/// Device buffers the host copy's refresh gathers the changed rows into
/// (`amr_mesh_gather`).
pub(super) struct Gathered {
    bytes: CudaSlice<u8>,
    pos: CudaSlice<i32>,
    words: CudaSlice<u32>,
    links: CudaSlice<u32>,
    cells: CudaSlice<u8>,
}

impl Gathered {
    /// Room for every block of a forest of `capacity` blocks in `dims` dimensions.
    pub(super) fn new(
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        capacity: usize,
        dims: usize,
    ) -> Result<Gathered, cudarc::driver::DriverError> {
        let (nd, cells) = (3usize.pow(dims as u32), BLOCK.pow(dims as u32));
        Ok(Gathered {
            bytes: stream.alloc_zeros(3 * capacity)?,
            pos: stream.alloc_zeros(3 * capacity)?,
            words: stream.alloc_zeros(2 * capacity)?,
            links: stream.alloc_zeros(2 * nd * capacity)?,
            cells: stream.alloc_zeros(2 * cells * capacity)?,
        })
    }
}
