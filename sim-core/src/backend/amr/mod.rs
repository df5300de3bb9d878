//! Adaptive blocks behind the [`Solver`] seam: a scene with `[amr] enabled = true` runs
//! [`AmrLbm`] on a forest over `domain.size`, adapted every `amr.interval` coarse steps to the
//! criterion, and shows the world the grid of its finest level. [`from_scene_cuda`] runs the
//! time steps and the whole adaptation (criterion, marks, balance, the new mesh, the data's
//! transfer) on the GPU ([`AmrGpu`], the same arithmetic: identical results); the host's copy
//! of the forest and the DDFs is brought up to date only when something reads it (fields,
//! stats, the leaves' boxes, checkpoints): the mesh from the rows the device changed, then the
//! DDFs. Between reads nothing crosses the bus but one flag per fixed-point iteration and the
//! counters of each adaptation.
//!
//! # How a scene maps onto the forest
//! - The root grid is `domain.size / 4` blocks; level `l` has cells `2^-l` of the scene's.
//! - Faces: `periodic` axes wrap; `wall`, `moving_wall` and `inlet` (uniform) are bounce-back at
//!   the face of the domain box (with the wall or inlet velocity, as Jaber, Essel & Sullivan 2025 impose their inlet
//!   and far field); `outlet` is anti-bounce-back at the given density. The face itself is the
//!   wall: the dense solvers' boundary layer of cells is fluid here, so an adaptive run has the
//!   wall half a coarse cell further out.
//! - Obstacles are voxelised at the finest level; a cell of a coarser level is solid where at
//!   least half of the finest cells it covers are.
//! - [`Solver::domain`] and [`Solver::fields`] are the finest level's grid
//!   (`domain.size * 2^max_level`): each leaf cell fills the finest cells it covers.
//! - [`Solver::time_step`] counts coarse steps (level 0); `fluid.tau` is level 0's, finer
//!   levels get `2^l (tau - 1/2) + 1/2`.
//! - Checkpoints keep the forest (refined blocks by level and position) and every active
//!   block's DDFs in FP32: a restore rebuilds the same forest and continues bit for bit.

use crate::amr::criterion::{Criterion, Field, NearWall, ObstacleSums};
use crate::amr::forest::{AdaptReport, AmrError, BlockForest, ForestConfig, BLOCK, NONE};
use crate::amr::lbm::{AmrLbm, CellRef};
use crate::amr::{AmrInfo, AmrSettings};
use crate::backend::cuda::amr::AmrGpu;
use crate::checkpoint::Checkpoint;
use crate::domain::{id_of, is_obstacle, Domain};
use crate::lattice::{Lat, Lattice, D2Q9, D3Q19, D3Q27};
use crate::precision::Precision;
use crate::scene::{AmrCriterion, FaceKind, LoadedScene, Obstacle, SceneError, Vec3};
use crate::solver::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use rayon::prelude::*;
use std::cell::{Cell, Ref, RefCell};
use std::collections::HashMap;
use std::time::Instant;

/// The scene with its geometry scaled `s` times (cell centres map as `(x + 1/2) s - 1/2`), to
/// voxelise it at the finest level.
fn scaled(ls: &LoadedScene, s: usize) -> LoadedScene {
    let mut out = ls.clone();
    let sf = s as f32;
    let dims = ls.derived.lattice.dims();
    let point = |v: Vec3| {
        let mut p = v.0;
        (0..dims).for_each(|a| p[a] = (p[a] + 0.5) * sf - 0.5);
        Vec3(p)
    };
    for a in 0..dims {
        out.derived.size[a] *= s;
    }
    out.scene.domain.size = out.derived.size[..dims].to_vec();
    for o in &mut out.scene.obstacles {
        match o {
            Obstacle::Box { min, max, .. } => {
                for a in 0..dims {
                    min.0[a] *= sf;
                    max.0[a] = (max.0[a] + 1.0) * sf - 1.0;
                }
            }
            Obstacle::Sphere { center, radius, .. } => {
                *center = point(*center);
                *radius *= sf;
            }
            Obstacle::Cylinder { center, radius, length, .. } => {
                *center = point(*center);
                *radius *= sf;
                if let Some(l) = length.as_mut() {
                    *l *= sf;
                }
            }
            Obstacle::Stl { center, size, .. } => {
                *center = point(*center);
                *size *= sf;
            }
        }
    }
    out
}

/// Build the adaptive solver a loaded scene with `[amr] enabled = true` describes.
///
/// # Errors
/// Voxelisation errors; a forest the capacity cannot hold.
pub fn from_scene(ls: &LoadedScene) -> Result<Box<dyn Solver>, SceneError> {
    match ls.derived.lattice {
        Lattice::D2Q9 => Ok(Box::new(AmrSolver::<D2Q9>::new(ls)?)),
        Lattice::D3Q19 => Ok(Box::new(AmrSolver::<D3Q19>::new(ls)?)),
        Lattice::D3Q27 => Ok(Box::new(AmrSolver::<D3Q27>::new(ls)?)),
    }
}

/// The same solver with its time stepping on the GPU ([`AmrGpu`]): the forest is built and its
/// mesh adapted on the host; the steps, the criterion and the data transfer of an adaptation
/// run on device 0.
///
/// # Errors
/// Scene errors as [`from_scene`]; no CUDA device, or a capacity the device cannot hold.
pub fn from_scene_cuda(ls: &LoadedScene) -> Result<Box<dyn Solver>, SolverError> {
    from_scene_cuda_with(ls, ls.scene.amr.in_place || crate::backend::cuda::amr::in_place_knob())
}

/// [`from_scene_cuda`] with the device's DDFs in two buffers (`in_place` false) or in one, in
/// place ([`AmrGpu::with_storage`]).
///
/// # Errors
/// As [`from_scene_cuda`].
pub fn from_scene_cuda_with(ls: &LoadedScene, in_place: bool) -> Result<Box<dyn Solver>, SolverError> {
    fn on_gpu<L: Lat>(ls: &LoadedScene, in_place: bool) -> Result<Box<dyn Solver>, SolverError> {
        crate::backend::cuda::probe().map_err(SolverError::Backend)?;
        let mut s = AmrSolver::<L>::new(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
        let lbm = s.lbm.get_mut();
        let curved = lbm.curved_walls().is_some();
        let mut gpu = AmrGpu::with_walls(L::KIND, lbm.storage(), lbm.forest().capacity(), in_place, curved)?;
        gpu.set_obstacles(&s.obstacle_sums, s.max_level)?;
        // The panel needs only the numbers of blocks an adaptation changed.
        gpu.set_report_ids(false);
        *s.gpu.get_mut() = Some(gpu);
        s.gpu_dirty = true;
        Ok(Box::new(s))
    }
    match ls.derived.lattice {
        Lattice::D2Q9 => on_gpu::<D2Q9>(ls, in_place),
        Lattice::D3Q19 => on_gpu::<D3Q19>(ls, in_place),
        Lattice::D3Q27 => on_gpu::<D3Q27>(ls, in_place),
    }
}

/// Which solver setting each domain face carries.
#[derive(Clone, Copy, Debug, PartialEq)]
enum FaceRole {
    None,
    Wall(usize),
    Inlet(usize),
    Outlet(usize),
}

/// Adaptive blocks on the CPU.
pub struct AmrSolver<L: Lat> {
    /// The forest and the DDFs. With a GPU, the device is ahead of this copy while `stale`
    /// says so: read it through [`Self::lbm`] (`&self`) or [`Self::lbm_mut`], which bring it up
    /// to date first.
    lbm: RefCell<AmrLbm<L>>,
    /// The finest level's grid (flags of the scaled scene).
    dom: Domain,
    /// Finest level allowed.
    max_level: u8,
    crit: Criterion,
    near_wall: Option<NearWall>,
    params: Params,
    faces: [FaceRole; 6],
    cfg: ForestConfig,
    info: AmrInfo,
    /// The scene's near-wall level (the settings' max level caps it).
    near_wall_level: u8,
    /// The scene's near-wall margin, for the rule a drawn obstacle switches on in a scene
    /// that had none.
    wall_margin: f64,
    /// The obstacles for near-wall refinement (prefix sums over the finest grid).
    obstacle_sums: ObstacleSums,
    /// The time stepping and adaptation on the GPU, if this run has it; `lbm` then holds the
    /// forest and a copy of the DDFs, current when `stale` is clear.
    gpu: RefCell<Option<AmrGpu>>,
    /// Whether the host changed the forest or the DDFs since the last upload.
    gpu_dirty: bool,
    /// What the device changed since the host's copy was last brought up to date.
    stale: Cell<Stale>,
    /// Seconds spent bringing the host's copy up to date: the mesh (counted as time in
    /// refinement) and the DDFs (counted as stepping).
    sync_secs: Cell<(f64, f64)>,
    /// A failed refresh of the host's copy, returned by the next [`Solver::step`].
    sync_error: RefCell<Option<SolverError>>,
}

/// Which parts of the host's copy the device has moved past.
#[derive(Clone, Copy, Default, PartialEq)]
struct Stale {
    /// An adaptation on the device changed the forest.
    mesh: bool,
    /// Steps ran on the device.
    ddfs: bool,
}

impl<L: Lat> AmrSolver<L> {
    fn new(ls: &LoadedScene) -> Result<Self, SceneError> {
        let a = &ls.scene.amr;
        let dims = L::D;
        let scale = 1usize << a.max_level;
        let dom = Domain::from_scene(&scaled(ls, scale))?;
        let params = crate::solver::Params::from_scene(ls, &dom);
        let faces_spec = ls.scene.boundaries.faces();
        let mut root = [1usize; 3];
        let mut periodic = [true; 3];
        for ax in 0..dims {
            root[ax] = ls.derived.size[ax] / BLOCK;
            periodic[ax] = faces_spec[2 * ax].kind == FaceKind::Periodic;
        }
        // Face roles, with the ids Domain::from_scene gives (inlets and outlets in face order,
        // moving walls from 1 in face order).
        let mut faces = [FaceRole::None; 6];
        let (mut inl, mut outl, mut wall) = (0, 0, 1);
        for (fi, f) in faces_spec.iter().enumerate() {
            if fi / 2 >= dims {
                continue;
            }
            faces[fi] = match f.kind {
                FaceKind::Inlet => {
                    inl += 1;
                    FaceRole::Inlet(inl - 1)
                }
                FaceKind::Outlet => {
                    outl += 1;
                    FaceRole::Outlet(outl - 1)
                }
                _ => FaceRole::None,
            };
        }
        for (fi, f) in faces_spec.iter().enumerate() {
            if fi / 2 < dims && f.kind == FaceKind::MovingWall {
                faces[fi] = FaceRole::Wall(wall);
                wall += 1;
            }
        }
        let cfg = ForestConfig { dims, root, periodic, max_level: a.max_level, capacity: a.capacity_for(ls.derived.size, dims, L::Q) };
        let err = |m: String| SceneError { file: ls.origin.clone(), line: None, key: "amr".into(), message: m };
        let mut forest = BlockForest::new(cfg).map_err(|e| err(e.to_string()))?;
        for &l in &a.freeze {
            forest.freeze_level(l, true).map_err(|e| err(e.to_string()))?;
        }
        let init = |c: [f64; 3]| {
            // Level-0 cell centres are at x + 1/2 for the scene's cell x.
            let p = c.map(|v| (v - 0.5).round().max(0.0) as usize);
            let p = [p[0].min(ls.derived.size[0] - 1), p[1].min(ls.derived.size[1] - 1), p[2].min(ls.derived.size[2] - 1)];
            crate::domain::initial_state(ls, p)
        };
        let mut lbm = AmrLbm::<L>::new(forest, ls.derived.tau, ls.scene.fluid.force.0, init);
        lbm.set_storage(ls.scene.solver.precision);
        let crit = Criterion {
            field: match a.criterion {
                AmrCriterion::Vorticity => Field::Vorticity,
                AmrCriterion::Q => Field::Q,
            },
            threshold: a.threshold,
            coarsen: a.coarsen,
            max_level: a.max_level,
            every: a.interval,
        };
        let near_wall =
            (!ls.scene.obstacles.is_empty()).then_some(NearWall { level: a.near_wall.unwrap_or(a.max_level), margin: a.wall_margin });
        let near_wall_level = a.near_wall.unwrap_or(a.max_level);
        let obstacle_sums = ObstacleSums::new(&dom, a.max_level);
        let mut s = AmrSolver {
            lbm: RefCell::new(lbm),
            dom,
            max_level: a.max_level,
            crit,
            near_wall,
            params,
            faces,
            cfg,
            info: AmrInfo::default(),
            near_wall_level,
            wall_margin: a.wall_margin,
            obstacle_sums,
            gpu: RefCell::new(None),
            gpu_dirty: false,
            stale: Cell::new(Stale::default()),
            sync_secs: Cell::new((0.0, 0.0)),
            sync_error: RefCell::new(None),
        };
        s.apply_boundaries();
        s.install_solids();
        // The initial mesh: refine towards the criterion and the obstacles, level by level.
        for _ in 0..a.max_level {
            s.adapt();
        }
        s.info.adaptations = 0;
        s.info.adapt_secs = 0.0;
        Ok(s)
    }

    /// Wall, inlet and outlet settings of the faces from the parameters.
    fn apply_boundaries(&mut self) {
        let lbm = self.lbm.get_mut();
        for (fi, role) in self.faces.iter().enumerate() {
            let (axis, high) = (fi / 2, fi % 2 == 1);
            match *role {
                FaceRole::Wall(id) => lbm.set_wall_velocity(axis, high, self.params.walls[id]),
                FaceRole::Inlet(id) => lbm.set_wall_velocity(axis, high, self.params.inlets[id]),
                FaceRole::Outlet(id) => lbm.set_outflow(axis, high, self.params.outlets[id]),
                FaceRole::None => {}
            }
        }
    }

    /// Solid cells of every level from the obstacles voxelised at the finest level.
    fn install_solids(&mut self) {
        let query = self.solid_query();
        self.lbm_mut().set_solid(query);
        self.install_curved_walls();
    }

    /// The interpolated walls' links of the finest level from the domain's obstacles (those
    /// with exact shapes: `solver.walls = "interpolated"`), on the host's copy; the device
    /// takes them with its next upload.
    fn install_curved_walls(&mut self) {
        let w = crate::amr::lbm::CurvedWalls::of_domain::<L>(&self.dom, self.max_level);
        self.lbm.get_mut().set_curved_walls(w);
        self.gpu_dirty = true;
    }

    /// The obstacle query of the forest: a cell of any level is solid where at least half of
    /// the finest cells under it are obstacle cells.
    fn solid_query(&self) -> impl Fn([f64; 3], u8) -> bool + Send + Sync + 'static {
        let dom = self.dom.clone();
        let max = self.max_level;
        let dims = L::D;
        move |c: [f64; 3], l: u8| {
            obstacle_share(&dom, max, dims, c, l) * 2 >= 1u64 << ((u32::from(max) - u32::from(l.min(max))) * dims as u32)
        }
    }

    /// Adapt the mesh to the criterion now (timed), on the host; a capacity refusal is
    /// reported, not fatal.
    fn adapt(&mut self) {
        let t = Instant::now();
        let values = match self.crit.field {
            Field::Vorticity => self.lbm_mut().block_vorticity(),
            Field::Q => self.lbm_mut().block_q(),
        };
        let targets = self.targets(&values);
        let r = self.lbm.get_mut().adapt_to(&targets);
        self.report(r);
        self.info.adapt_secs += t.elapsed().as_secs_f64();
        self.gpu_dirty = true;
    }

    /// Adapt the mesh to the criterion now (timed) on the device: block maxima, targets,
    /// marks, balance, the new mesh and the data's transfer all run there
    /// ([`AmrGpu::adapt_to_criterion`]); the host's copy of the forest is brought up to date
    /// when the host next reads it.
    fn adapt_on(&mut self, gpu: &mut AmrGpu) -> Result<(), SolverError> {
        let t = Instant::now();
        let r = gpu.adapt_to_criterion(self.lbm.get_mut(), &self.crit, self.near_wall)?;
        if let Ok(rep) = &r {
            if rep.counts != (0, 0) {
                self.stale.set(Stale { mesh: true, ..self.stale.get() });
            }
        }
        self.report(r);
        gpu.synchronize()?;
        self.info.adapt_secs += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Per-block target levels from the criterion's block maxima and the near-wall rule.
    fn targets(&self, values: &[f32]) -> Vec<u8> {
        let sums = &self.obstacle_sums;
        let solid = |lo: [f64; 3], hi: [f64; 3]| sums.any(lo, hi);
        self.lbm().forest().targets(
            |b| values[b as usize],
            &self.crit,
            self.near_wall.map(|nw| (nw, &solid as crate::amr::criterion::SolidQuery<'_>)),
        )
    }

    /// Record an adaptation's outcome in the panel's line and count it.
    fn report(&mut self, r: Result<AdaptReport, AmrError>) {
        self.info.last = match r {
            Ok(r) => format!(
                "{} refined, {} coarsened{}",
                r.counts.0,
                r.counts.1,
                if r.cancelled > 0 { format!(", {} refinements cancelled by frozen levels", r.cancelled) } else { String::new() }
            ),
            Err(AmrError::Capacity { needed, capacity, active }) => {
                let m = format!("refinement skipped: it needs {needed} blocks, the capacity is {capacity} ({active} active); raise amr.capacity or amr.threshold");
                tracing::warn!("{m}");
                m
            }
            Err(e) => {
                tracing::warn!("adaptation skipped: {e}");
                format!("adaptation skipped: {e}")
            }
        };
        self.info.adaptations += 1;
    }

    /// [`Solver::step`] on the GPU: upload what the host changed, launch the coarse steps,
    /// adapt when due ([`Self::adapt_on`]: the mesh and the DDFs stay on the device; counted as
    /// time in refinement), and wait for the device. Nothing is copied back: the host's copy is
    /// brought up to date when it is read ([`Self::lbm`]).
    fn step_gpu(&mut self, steps: u64) -> Result<(), SolverError> {
        if let Some(e) = self.sync_error.get_mut().take() {
            return Err(e);
        }
        let Some(mut gpu) = self.gpu.get_mut().take() else {
            return Ok(());
        };
        let r = self.step_on(&mut gpu, steps);
        *self.gpu.get_mut() = Some(gpu);
        r
    }

    fn step_on(&mut self, gpu: &mut AmrGpu, steps: u64) -> Result<(), SolverError> {
        let mut t = Instant::now();
        for _ in 0..steps {
            if self.gpu_dirty {
                let u = Instant::now();
                gpu.upload(self.lbm.get_mut())?;
                gpu.synchronize()?;
                self.info.adapt_secs += u.elapsed().as_secs_f64();
                self.gpu_dirty = false;
                t = Instant::now();
            }
            let lbm = self.lbm.get_mut();
            gpu.step(lbm)?;
            self.stale.set(Stale { ddfs: true, ..self.stale.get() });
            lbm.set_time(lbm.time() + 1);
            if self.crit.due(lbm.time()) {
                // The criterion goes in behind the steps; the wait for them is stepping time.
                gpu.queue_criterion(lbm, &self.crit, self.near_wall)?;
                self.info.step_secs += t.elapsed().as_secs_f64();
                self.adapt_on(gpu)?;
                t = Instant::now();
            }
        }
        gpu.synchronize()?;
        self.info.step_secs += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// [`Solver::stats`] computed on the device while the host's copy is behind it (no copy
    /// of the DDFs comes back: the viewer asks every frame). `None` where the host's copy is
    /// current, there is no device, several obstacles share the force (the host splits it by
    /// footprint), or a value is not finite (the host's copy finds the first such cell).
    fn device_stats(&self) -> Option<Stats> {
        let n_obs = self.dom.obstacles.len();
        if !self.stale.get().ddfs || n_obs > 1 {
            return None;
        }
        let mut gpu = self.gpu.borrow_mut();
        let s = match gpu.as_mut()?.stats(n_obs == 1) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("statistics on the device failed, taking them from the host's copy: {e}");
                return None;
            }
        };
        if s.not_finite {
            return None;
        }
        let forces = if n_obs == 1 { vec![s.force] } else { Vec::new() };
        Some(Stats { step: self.lbm.borrow().time(), mass: s.mass, max_u: s.max_u, rho_range: s.rho_range, forces, first_bad_cell: None })
    }

    /// The host's copy of the forest and the DDFs, brought up to date from the device first
    /// where it moved on ([`Self::sync_host`]).
    fn lbm(&self) -> Ref<'_, AmrLbm<L>> {
        if self.stale.get() != Stale::default() {
            self.sync_host();
        }
        self.lbm.borrow()
    }

    /// The host's copy with its forest (and obstacle flags) up to date, its DDFs maybe not: for
    /// what reads only the mesh (the viewer's block outlines, every frame), no DDFs come back.
    fn lbm_mesh(&self) -> Ref<'_, AmrLbm<L>> {
        if self.stale.get().mesh {
            self.sync_mesh();
        }
        self.lbm.borrow()
    }

    /// Copy the forest the device changed into the host's copy ([`AmrGpu::download_mesh`],
    /// timed as refinement); the DDFs stay stale (the next [`Self::sync_host`] copies them
    /// for the new forest).
    fn sync_mesh(&self) {
        if self.copy_back(0, AmrGpu::download_mesh) {
            self.stale.set(Stale { mesh: false, ddfs: true });
        }
    }

    /// Run a copy from the device into the host's copy, its time added to the mesh's (`which`
    /// 0) or the DDFs' (1) share of the sync time; a failure is kept for the next step. False
    /// if it failed (or there is no device).
    fn copy_back(&self, which: usize, copy: impl FnOnce(&mut AmrGpu, &mut AmrLbm<L>) -> Result<(), SolverError>) -> bool {
        let mut gpu = self.gpu.borrow_mut();
        let Some(gpu) = gpu.as_mut() else {
            return false;
        };
        let t = Instant::now();
        let r = copy(gpu, &mut self.lbm.borrow_mut());
        let mut secs = self.sync_secs.get();
        if which == 0 {
            secs.0 += t.elapsed().as_secs_f64();
        } else {
            secs.1 += t.elapsed().as_secs_f64();
        }
        self.sync_secs.set(secs);
        if let Err(e) = r {
            tracing::warn!("the host's copy of the adaptive run could not be brought up to date: {e}");
            *self.sync_error.borrow_mut() = Some(e);
            return false;
        }
        true
    }

    /// The same, to change: the host's changes go to the device before the next step
    /// (`gpu_dirty`, set by the caller where it changes the forest or the DDFs).
    fn lbm_mut(&mut self) -> &mut AmrLbm<L> {
        if self.stale.get() != Stale::default() {
            self.sync_host();
        }
        self.lbm.get_mut()
    }

    /// Copy what the device changed into the host's copy: the mesh from the rows it changed
    /// ([`AmrGpu::download_mesh`], timed as refinement), then the DDFs (timed as stepping). A
    /// failure leaves the copy as it was and is returned by the next step.
    fn sync_host(&self) {
        if self.gpu.borrow().is_none() {
            return;
        }
        let stale = self.stale.replace(Stale::default());
        let mesh_ok = !stale.mesh || self.copy_back(0, AmrGpu::download_mesh);
        if mesh_ok && (stale.ddfs || stale.mesh) {
            self.copy_back(1, AmrGpu::download);
        }
    }

    /// The current forest's numbers for [`AmrInfo`], with every leaf's box if `boxes`.
    fn refresh_info(&self, boxes: bool) -> AmrInfo {
        let mut info = self.info.clone();
        let (mesh_s, ddf_s) = self.sync_secs.get();
        info.adapt_secs += mesh_s;
        info.step_secs += ddf_s;
        let dims = L::D;
        let b = BLOCK.pow(dims as u32) as u64;
        info.boxes.clear();
        if boxes {
            let lbm = self.lbm_mesh();
            let f = lbm.forest();
            for id in f.leaves() {
                let l = f.level(id);
                let s = 1usize << (self.max_level - l);
                let p = f.pos(id);
                let mut lo = [0usize; 3];
                (0..dims).for_each(|a| lo[a] = p[a] as usize * BLOCK * s);
                info.boxes.push((lo, BLOCK * s, l));
            }
        }
        let (leaves, active, capacity) = self.counts();
        info.updates_per_step = leaves.iter().enumerate().map(|(l, &n)| (n as u64 * b) << l).sum();
        info.leaves = leaves;
        info.blocks = (active, capacity);
        info.max_level = self.max_level;
        info.effective_cells = self.dom.cells() as u64;
        info.settings = self.settings();
        info
    }

    /// Leaves per level (levels 0 to the finest allowed), active blocks and the capacity: on
    /// the GPU from the device's ID sets, without copying the mesh back.
    fn counts(&self) -> (Vec<usize>, usize, usize) {
        let levels = usize::from(self.max_level) + 1;
        if !self.gpu_dirty {
            if let Some(g) = self.gpu.borrow().as_ref() {
                let per = g.blocks_per_level();
                let at = |l: usize| per.get(l).copied().unwrap_or(0);
                let leaves = (0..levels).map(|l| at(l) - (at(l + 1) >> L::D)).collect();
                return (leaves, per.iter().sum(), g.capacity());
            }
        }
        let lbm = self.lbm();
        let f = lbm.forest();
        let mut leaves = vec![0; levels];
        for id in f.leaves() {
            leaves[usize::from(f.level(id))] += 1;
        }
        (leaves, f.active(), f.capacity())
    }

    fn settings(&self) -> AmrSettings {
        // The frozen levels are the host's to set: no refresh needed.
        let lbm = self.lbm.borrow();
        let f = lbm.forest();
        AmrSettings {
            field: self.crit.field,
            threshold: self.crit.threshold,
            coarsen: self.crit.coarsen,
            max_level: self.crit.max_level,
            interval: self.crit.every,
            frozen: (0..=self.max_level).filter(|&l| f.level_frozen(l)).collect(),
        }
    }

    fn fill_fields(&self) -> Fields {
        let n = self.dom.n;
        let dims = L::D;
        let cells = self.dom.cells();
        let mut rho = vec![1.0f32; cells];
        let mut u = vec![[0.0f32; 3]; cells];
        let lbm = self.lbm();
        let lbm = &*lbm;
        let f = lbm.forest();
        let b = f.cells_per_block();
        let leaves = f.leaves();
        let max = self.max_level;
        // Each leaf cell's value into the finest cells it covers.
        let vals: Vec<(usize, usize, f32, [f32; 3])> = leaves
            .par_iter()
            .flat_map_iter(|&id| {
                let l = f.level(id);
                let s = 1usize << (max - l);
                let p = f.pos(id);
                (0..b).map(move |cell| {
                    let c = crate::amr::forest::cell_coords(cell, dims);
                    let mut lo = [0usize; 3];
                    (0..dims).for_each(|a| lo[a] = (p[a] as usize * BLOCK + c[a] as usize) * s);
                    // A solid cell shows the rest state, also under finest cells the obstacles
                    // do not cover (in-place storage keeps neighbours' values in its slots).
                    let r = CellRef { block: id, cell };
                    let (r, v) = if lbm.is_solid(r) { (1.0, [0.0; 3]) } else { lbm.moments(r) };
                    (lo[0] + n[0] * (lo[1] + n[1] * lo[2]), s, r, v)
                })
            })
            .collect();
        for (i0, s, r, v) in vals {
            let sz = if dims == 3 { s } else { 1 };
            for z in 0..sz {
                for y in 0..s {
                    let row = i0 + n[0] * (y + n[1] * z);
                    rho[row..row + s].fill(r);
                    u[row..row + s].fill(v);
                }
            }
        }
        let solid: Vec<bool> = self.dom.flags.iter().map(|&fl| is_obstacle(fl)).collect();
        for (i, &sd) in solid.iter().enumerate() {
            if sd {
                rho[i] = 1.0;
                u[i] = [0.0; 3];
            }
        }
        Fields { size: n, rho, u, solid }
    }

    /// The forest's refined blocks, level by level, as (level, position).
    fn refined_blocks(&self) -> Vec<(u8, [i32; 3])> {
        let lbm = self.lbm();
        let f = lbm.forest();
        let mut out = Vec::new();
        for l in 0..=f.finest_level() {
            for &id in f.level_ids(l) {
                if f.first_child(id) != NONE {
                    out.push((l, f.pos(id)));
                }
            }
        }
        out
    }
}

/// How many of the finest cells under the level-`l` cell centred at `c` (cells of level 0) are
/// obstacle cells.
fn obstacle_share(dom: &Domain, max: u8, dims: usize, c: [f64; 3], l: u8) -> u64 {
    footprint_obstacles(dom, max, dims, c, l).0
}

/// The obstacle cells of the finest grid under the level-`l` cell centred at `c` (cells of
/// level 0), and the id of the obstacle most of them belong to (0: none; ties to the lower id).
fn footprint_obstacles(dom: &Domain, max: u8, dims: usize, c: [f64; 3], l: u8) -> (u64, usize) {
    let s = 1usize << (max - l.min(max));
    let fine = f64::from(1u32 << max);
    let mut lo = [0usize; 3];
    let mut hi = [1usize; 3];
    for a in 0..dims {
        let first = (c[a] * fine - s as f64 / 2.0).round().max(0.0) as usize;
        lo[a] = first.min(dom.n[a]);
        hi[a] = (first + s).min(dom.n[a]);
    }
    let mut per_id = [0u64; 16];
    for z in lo[2]..hi[2] {
        for y in lo[1]..hi[1] {
            for x in lo[0]..hi[0] {
                let fl = dom.flags[dom.index(x, y, z)];
                if is_obstacle(fl) {
                    per_id[id_of(fl) & 15] += 1;
                }
            }
        }
    }
    let total = per_id.iter().sum();
    let id = (1..16).fold(0, |best, k| if per_id[k] > per_id[best] { k } else { best });
    (total, id)
}

const CKPT_MAGIC: &[u8; 8] = b"ESOAMR01";

impl<L: Lat> Solver for AmrSolver<L> {
    fn adaptive(&self) -> Option<&dyn crate::solver::Adaptive> {
        Some(self)
    }
    fn adaptive_mut(&mut self) -> Option<&mut dyn crate::solver::Adaptive> {
        Some(self)
    }
    fn info(&self) -> SolverInfo {
        let (leaves, _, capacity) = self.counts();
        let precision = self.lbm.borrow().storage();
        let gpu = self.gpu.borrow();
        // The CPU reference keeps FP32 numbers (rounded to the storage format).
        let stored = if gpu.is_some() { precision.bytes() } else { 4 };
        let memory = match gpu.as_ref() {
            Some(g) => g.bytes(),
            None => (capacity * BLOCK.pow(L::D as u32) * (2 * L::Q * 4 + 1)) as u64,
        };
        let (backend, device) = match gpu.as_ref() {
            Some(g) => ("cuda", g.device().to_string()),
            None => ("cpu", "CPU".to_string()),
        };
        SolverInfo {
            backend,
            device: format!("{device}, adaptive blocks: {} leaves on levels 0-{}", leaves.iter().sum::<usize>(), self.max_level),
            lattice: L::KIND,
            // Two copies of the DDFs (the CPU reference, the GPU's default), or in place.
            scheme: if gpu.as_ref().is_some_and(|g| g.in_place()) {
                crate::schemes::Scheme::EsotericPull
            } else {
                crate::schemes::Scheme::OneStepPull
            },
            precision,
            size: self.dom.n,
            bytes_per_cell: memory as f64 / self.dom.cells() as f64,
            bytes_moved_per_cell: (2 * L::Q * stored * 2) as f64,
            memory_bytes: memory,
        }
    }

    fn domain(&self) -> &Domain {
        &self.dom
    }

    fn time_step(&self) -> u64 {
        self.lbm.borrow().time()
    }

    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        if self.gpu.get_mut().is_some() {
            return self.step_gpu(steps);
        }
        for _ in 0..steps {
            let t = Instant::now();
            let lbm = self.lbm.get_mut();
            lbm.step();
            self.info.step_secs += t.elapsed().as_secs_f64();
            if self.crit.due(lbm.time()) {
                self.adapt();
            }
        }
        Ok(())
    }

    fn fields(&self) -> Fields {
        self.fill_fields()
    }

    fn write_frame(
        &mut self,
        kinds: &[crate::fields::FieldKind],
        layout: &crate::frame::FrameLayout,
        target: crate::frame::FrameTarget<'_>,
    ) -> Result<crate::frame::FrameRanges, SolverError> {
        crate::frame::check_request(&self.dom, kinds, layout, target.floats())?;
        match self.gpu.get_mut().as_mut() {
            // On the device from its DDFs: nothing of the state comes back. What the host
            // changed since the last step (a restore, settings adapted while paused) goes up
            // first, as the next step would take it.
            Some(gpu) => {
                if self.gpu_dirty {
                    gpu.upload(self.lbm.get_mut())?;
                    self.gpu_dirty = false;
                }
                gpu.write_frame(self.lbm.get_mut(), &self.dom, kinds, layout, target)
            }
            None => crate::frame::write_from_fields(|| self.fill_fields(), "cpu", kinds, layout, target),
        }
    }

    fn shares_device_memory(&self) -> bool {
        self.gpu.borrow().is_some()
    }

    fn stats(&self) -> Stats {
        if let Some(s) = self.device_stats() {
            return s;
        }
        let lbm = self.lbm();
        let lbm = &*lbm;
        let f = lbm.forest();
        let b = f.cells_per_block();
        let leaves = f.leaves();
        let (mass, max_u, rho_range, bad) = leaves
            .par_iter()
            .map(|&id| {
                let vol = 1.0 / f64::from(1u32 << (u32::from(f.level(id)) * L::D as u32));
                let mut m = 0.0f64;
                let mut mu = 0.0f64;
                let mut range = [f64::INFINITY, f64::NEG_INFINITY];
                let mut bad = None;
                for cell in 0..b {
                    let r = CellRef { block: id, cell };
                    if lbm.is_solid(r) {
                        continue;
                    }
                    let (rho, u) = lbm.moments(r);
                    m += f64::from(rho) * vol;
                    let s = f64::from(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt();
                    if !(rho.is_finite() && s.is_finite()) && bad.is_none() {
                        bad = Some((id, cell));
                    }
                    mu = mu.max(s);
                    range = [range[0].min(f64::from(rho)), range[1].max(f64::from(rho))];
                }
                (m, mu, range, bad)
            })
            .reduce(
                || (0.0, 0.0, [f64::INFINITY, f64::NEG_INFINITY], None),
                |a, b| {
                    let mu = if a.1.is_nan() || b.1.is_nan() { f64::NAN } else { a.1.max(b.1) };
                    (a.0 + b.0, mu, [a.2[0].min(b.2[0]), a.2[1].max(b.2[1])], a.3.or(b.3))
                },
            );
        let first_bad_cell = bad.map(|(id, cell)| {
            let l = f.level(id);
            let s = 1usize << (self.max_level - l);
            let p = f.pos(id);
            let c = crate::amr::forest::cell_coords(cell, L::D);
            let mut out = [0usize; 3];
            (0..L::D).for_each(|a| out[a] = (p[a] as usize * BLOCK + c[a] as usize) * s);
            out
        });
        // Each obstacle's own solid cells (on a coarse level, the obstacle most of a cell's
        // fine cells belong to); one obstacle takes every solid cell.
        let n_obs = self.dom.obstacles.len();
        let forces: Vec<[f64; 3]> = if n_obs == 1 {
            vec![lbm.obstacle_force()]
        } else {
            let (dom, max) = (&self.dom, self.max_level);
            (1..=n_obs).map(|k| lbm.obstacle_force_on(|c, l| footprint_obstacles(dom, max, L::D, c, l).1 == k)).collect()
        };
        let blown = first_bad_cell.is_some();
        let rho_range = if blown {
            [f64::NAN; 2]
        } else if rho_range[0] > rho_range[1] {
            [1.0; 2]
        } else {
            rho_range
        };
        Stats { step: lbm.time(), mass: if blown { f64::NAN } else { mass }, max_u, rho_range, forces, first_bad_cell }
    }

    fn params(&self) -> Params {
        self.params.clone()
    }

    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        p.validate().map_err(SolverError::Param)?;
        if p.collide.kind != crate::collision::Collision::Bgk {
            return Err(SolverError::Param(format!("adaptive blocks collide with BGK only, not {}", p.collide.kind.name())));
        }
        if p.walls.len() != self.params.walls.len()
            || p.inlets.len() != self.params.inlets.len()
            || p.outlets.len() != self.params.outlets.len()
        {
            return Err(SolverError::Param("the parameters are for another domain (wall, inlet or outlet counts differ)".into()));
        }
        // Parameters are the host's: the device reads them at the next step.
        let lbm = self.lbm.get_mut();
        lbm.set_tau0(p.collide.tau);
        lbm.set_force0(p.collide.force);
        self.params = p;
        self.apply_boundaries();
        Ok(())
    }

    fn checkpoint(&self) -> Checkpoint {
        // Magic, refined blocks (level, position) level by level, then every active block's
        // DDFs in level-then-ID order of the forest rebuilt from them (the same order a restore
        // rebuilds).
        let mut data = Vec::new();
        data.extend_from_slice(CKPT_MAGIC);
        let refined = self.refined_blocks();
        data.extend_from_slice(&(refined.len() as u64).to_le_bytes());
        for (l, p) in &refined {
            data.push(*l);
            for v in p {
                data.extend_from_slice(&v.to_le_bytes());
            }
        }
        let lbm = self.lbm();
        let f = lbm.forest();
        let b = f.cells_per_block();
        for (_, id) in ordered_blocks(f) {
            for cell in 0..b {
                let g = lbm.ddfs(CellRef { block: id, cell });
                for v in &g[..L::Q] {
                    data.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        Checkpoint {
            lattice: L::KIND,
            precision: Precision::Fp32,
            size: self.dom.n,
            flags_crc: crc32fast::hash(&self.dom.flags),
            step: lbm.time(),
            params: self.params.clone(),
            data,
            probes: Vec::new(),
        }
    }

    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        let bad = |m: &str| SolverError::Checkpoint(m.to_string());
        if c.lattice != L::KIND || c.size != self.dom.n || c.flags_crc != crc32fast::hash(&self.dom.flags) {
            return Err(bad("the checkpoint is of another lattice, size or domain"));
        }
        if c.data.len() < 16 || &c.data[..8] != CKPT_MAGIC {
            return Err(bad("not a checkpoint of an adaptive run (amr.enabled = true): dense checkpoints do not carry a forest"));
        }
        let mut at = 8usize;
        let take = |at: &mut usize, n: usize| -> Result<&[u8], SolverError> {
            let s = c.data.get(*at..*at + n).ok_or_else(|| bad("truncated adaptive checkpoint"))?;
            *at += n;
            Ok(s)
        };
        let count = u64::from_le_bytes(take(&mut at, 8)?.try_into().expect("8 bytes")) as usize;
        let mut refined = Vec::with_capacity(count.min(1 << 24));
        for _ in 0..count {
            let l = take(&mut at, 1)?[0];
            let mut p = [0i32; 3];
            for v in &mut p {
                *v = i32::from_le_bytes(take(&mut at, 4)?.try_into().expect("4 bytes"));
            }
            refined.push((l, p));
        }
        // Rebuild the forest: refine the listed blocks, one level at a time.
        let mut forest = BlockForest::new(self.cfg).map_err(|e| bad(&e.to_string()))?;
        for l in 0..=self.max_level {
            let at_level: Vec<[i32; 3]> = refined.iter().filter(|(ll, _)| *ll == l).map(|(_, p)| *p).collect();
            if at_level.is_empty() {
                continue;
            }
            let by_pos: HashMap<[i32; 3], u32> = forest.level_ids(l).iter().map(|&id| (forest.pos(id), id)).collect();
            for p in at_level {
                let id = *by_pos.get(&p).ok_or_else(|| bad("the checkpoint's forest does not fit this scene"))?;
                forest.set_mark(id, crate::amr::forest::Mark::Refine).map_err(|e| bad(&e.to_string()))?;
            }
            forest.adapt().map_err(|e| bad(&e.to_string()))?;
        }
        for l in 0..=self.max_level {
            if self.lbm.get_mut().forest().level_frozen(l) {
                forest.freeze_level(l, true).map_err(|e| bad(&e.to_string()))?;
            }
        }
        let b = forest.cells_per_block();
        let order = ordered_blocks(&forest);
        if c.data.len() - at != order.len() * b * L::Q * 4 {
            return Err(bad("the checkpoint's DDFs do not match its forest"));
        }
        let mut lbm = AmrLbm::<L>::new(forest, c.params.collide.tau, c.params.collide.force, |_| (1.0, [0.0; 3]));
        lbm.set_storage(self.lbm.get_mut().storage());
        for (_, id) in order {
            for cell in 0..b {
                let mut g = [0.0f32; crate::lattice::MAX_Q];
                for v in &mut g[..L::Q] {
                    *v = f32::from_le_bytes(take(&mut at, 4)?.try_into().expect("4 bytes"));
                }
                lbm.set_ddfs(CellRef { block: id, cell }, &g[..L::Q]);
            }
        }
        lbm.set_time(c.step);
        // The device's state is replaced: nothing of it is to be copied back.
        *self.lbm.get_mut() = lbm;
        self.stale.set(Stale::default());
        self.params = c.params.clone();
        self.apply_boundaries();
        self.install_solids();
        self.gpu_dirty = true;
        Ok(())
    }

    /// Cells of the finest grid (the grid [`Solver::domain`] describes) turn solid or fluid;
    /// the forest's cells follow as they do for the scene's obstacles: a cell of any level is
    /// solid where at least half of the finest cells under it are. Cells that change start at
    /// rest (density 1); the others keep their state. With a GPU the edit is applied there
    /// ([`AmrGpu::edit_solids`]: no copy of the DDFs either way). The near-wall rule (the
    /// scene's `amr.near_wall` and `amr.wall_margin`) refines around drawn obstacles at once,
    /// also in a scene that had none.
    fn edit_cells(&mut self, edit: &crate::edit::CellEdit) -> Result<crate::edit::EditReport, SolverError> {
        let plan = self.dom.plan_edit(edit).map_err(SolverError::Edit)?;
        let obstacle = plan.obstacle.as_ref().map(|o| o.0);
        if plan.changes.is_empty() {
            return Ok(crate::edit::EditReport { obstacle, ..crate::edit::EditReport::default() });
        }
        // The box of the change, in cells of level 0.
        let fine = f64::from(1u32 << self.max_level);
        let (mut lo, mut hi) = ([0.0f64; 3], [1.0f64; 3]);
        for a in 0..L::D {
            let (min, max) = plan.changes.iter().fold((usize::MAX, 0), |(mn, mx), &(c, _)| {
                let p = self.dom.coords(c)[a];
                (mn.min(p), mx.max(p))
            });
            lo[a] = min as f64 / fine;
            hi[a] = (max + 1) as f64 / fine;
        }
        let around = self.dom.around(&plan.changes);
        let changed = self.dom.apply_plan(&plan, &around);
        self.obstacle_sums = ObstacleSums::new(&self.dom, self.max_level);
        let walls = crate::amr::lbm::CurvedWalls::of_domain::<L>(&self.dom, self.max_level);
        self.lbm.get_mut().set_curved_walls(walls);
        if self.near_wall.is_none() && self.dom.flags.iter().any(|&f| is_obstacle(f)) {
            self.near_wall = Some(NearWall { level: self.near_wall_level.min(self.crit.max_level), margin: self.wall_margin });
        }
        let query = self.solid_query();
        let (mass_removed, mass_added) = match self.gpu.get_mut().take() {
            Some(mut gpu) => {
                let r = self.edit_on(&mut gpu, query, lo, hi);
                *self.gpu.get_mut() = Some(gpu);
                r?
            }
            None => {
                let (_, removed, added) = self.lbm.get_mut().change_solids(query, lo, hi);
                (removed, added)
            }
        };
        // The near-wall rule at once, one level an adaptation as at the start: a drawn obstacle
        // is resolved on the near-wall level before the next step, also with a fixed mesh
        // (interval 0), and not only where it covers half of a coarse cell.
        for _ in 0..self.near_wall.map_or(0, |nw| nw.level) {
            self.adapt_now()?;
        }
        Ok(crate::edit::EditReport { changed, obstacle, mass_added, mass_removed })
    }
}

impl<L: Lat> AmrSolver<L> {
    /// Adapt to the criterion now: on the device where the state is there, else on the host.
    fn adapt_now(&mut self) -> Result<(), SolverError> {
        match self.gpu.get_mut().take() {
            Some(mut gpu) if !self.gpu_dirty => {
                let r = self.adapt_on(&mut gpu);
                *self.gpu.get_mut() = Some(gpu);
                r
            }
            other => {
                *self.gpu.get_mut() = other;
                self.adapt();
                Ok(())
            }
        }
    }

    /// [`Solver::edit_cells`] with a GPU: the host's forest brought up to date (the mesh
    /// only), the obstacle flags changed there, then on the device ([`AmrGpu::edit_solids`],
    /// which takes the mass removed from the device's DDFs), unless the host's copy is the
    /// state still to be uploaded. The device gets the new obstacles for its near-wall rule.
    /// Returns the mass removed and added.
    fn edit_on(
        &mut self,
        gpu: &mut AmrGpu,
        query: impl Fn([f64; 3], u8) -> bool + Send + Sync + 'static,
        lo: [f64; 3],
        hi: [f64; 3],
    ) -> Result<(f64, f64), SolverError> {
        gpu.set_obstacles(&self.obstacle_sums, self.max_level)?;
        gpu.set_frame_obstacles(&self.dom)?;
        if self.gpu_dirty {
            // The host's copy is the state (the device gets it whole before the next step).
            let (_, removed, added) = self.lbm.get_mut().change_solids(query, lo, hi);
            return Ok((removed, added));
        }
        if self.stale.get().mesh {
            gpu.download_mesh(self.lbm.get_mut())?;
            self.stale.set(Stale { mesh: false, ddfs: true });
        }
        let host_current = !self.stale.get().ddfs;
        let lbm = self.lbm.get_mut();
        let (cells, host_removed, added) = lbm.change_solids(query, lo, hi);
        let removed = gpu.edit_solids(lbm, &cells)?;
        // Where the host's copy is current it stays so (both zeroed the same cells), and its
        // mass is the one the statistics will read.
        Ok((if host_current { host_removed } else { removed }, added))
    }
}

/// Active blocks by (level, position), the order checkpoints store them in.
fn ordered_blocks(f: &BlockForest) -> Vec<((u8, [i32; 3]), u32)> {
    let mut v: Vec<((u8, [i32; 3]), u32)> =
        f.active_ids().iter().map(|&id| ((f.level(id), [f.pos(id)[2], f.pos(id)[1], f.pos(id)[0]]), id)).collect();
    v.sort_unstable_by_key(|(k, _)| *k);
    v
}

#[cfg(test)]
mod tests;

impl<L: Lat> crate::solver::Adaptive for AmrSolver<L> {
    fn amr(&self) -> AmrInfo {
        self.refresh_info(true)
    }
    fn amr_counts(&self) -> AmrInfo {
        self.refresh_info(false)
    }
    fn set_amr(&mut self, s: &AmrSettings) -> Result<(), SolverError> {
        let bad = |m: String| Err(SolverError::Param(m));
        if !(s.threshold.is_finite() && s.threshold > 0.0) {
            return bad(format!("amr threshold {}: must be a number above 0", s.threshold));
        }
        if !(s.coarsen > 0.0 && s.coarsen <= 1.0) {
            return bad(format!("amr coarsen {}: must be above 0 and at most 1 (1: no hysteresis)", s.coarsen));
        }
        if s.max_level > self.max_level {
            return bad(format!(
                "amr max level {}: this run's grid is fixed at level {} (amr.max_level in the scene); choose 0 to {}",
                s.max_level, self.max_level, self.max_level
            ));
        }
        if let Some(&l) = s.frozen.iter().find(|&&l| l > self.max_level) {
            return bad(format!("frozen level {l}: this run has levels 0 to {}", self.max_level));
        }
        for l in 0..=self.max_level {
            self.lbm_mut().freeze_level(l, s.frozen.contains(&l)).map_err(|e| SolverError::Param(e.to_string()))?;
        }
        self.crit.field = s.field;
        self.crit.threshold = s.threshold;
        self.crit.coarsen = s.coarsen;
        self.crit.max_level = s.max_level;
        self.crit.every = s.interval;
        if let Some(nw) = self.near_wall.as_mut() {
            nw.level = self.near_wall_level.min(s.max_level);
        }
        // At once, so that a paused run shows what the settings do (one level per adaptation).
        self.adapt();
        Ok(())
    }
}
