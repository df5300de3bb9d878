//! The seam between a solver backend and everything else (CLI, viewer, tests, later CUDA,
//! subgrids and blocks): build from a scene, step, read fields and stats, change parameters,
//! checkpoint and restore.

use crate::bricks::BrickMap;
use crate::checkpoint::{Checkpoint, Snapshot};
use crate::collision::Collision;
use crate::domain::Domain;
pub use crate::error::SolverError;
pub use crate::fields::Fields;
use crate::lattice::Lattice;
pub use crate::params::Params;
use crate::precision::Precision;
use crate::schemes::Scheme;
pub use crate::stats::{Stats, SANE_DENSITY_SPREAD, SANE_SPEED};

/// What a solver is.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverInfo {
    /// Backend name ("cpu", "cuda").
    pub backend: &'static str,
    /// Device description.
    pub device: String,
    /// Velocity set.
    pub lattice: Lattice,
    /// Streaming scheme.
    pub scheme: Scheme,
    /// Storage precision.
    pub precision: Precision,
    /// Cells per axis.
    pub size: [usize; 3],
    /// Bytes per cell in memory (DDFs and flags).
    pub bytes_per_cell: f64,
    /// Bytes moved per cell and step (ideal model).
    pub bytes_moved_per_cell: f64,
    /// Memory the solver holds (bytes).
    pub memory_bytes: u64,
}

/// How a compressing backend stores its state (see [`Solver::compression`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CompressionInfo {
    /// Bytes of the DDFs uncompressed (FP32) over the bytes the state takes.
    pub ratio: f64,
    /// Bytes the state takes (compressed cores and uncompressed interfaces).
    pub bytes: u64,
    /// Bytes the same DDFs take uncompressed.
    pub dense_bytes: u64,
    /// Number of subgrids.
    pub subgrids: usize,
    /// Smallest and largest threshold in use (they differ once a memory budget raised some).
    pub tau: (f32, f32),
    /// The memory budget, if any.
    pub budget: Option<u64>,
    /// Every subgrid's place, memory and threshold (x fastest, then y, then z); their bytes sum
    /// to `bytes` (less a GPU backend's working box, scratch and tables) and their uncompressed
    /// bytes to `dense_bytes`.
    pub per_subgrid: Vec<SubgridStat>,
}

/// One subgrid of a compressing backend (see [`CompressionInfo::per_subgrid`]): plain data, so
/// every backend fills it the same way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubgridStat {
    /// First cell.
    pub origin: [usize; 3],
    /// Cells per axis.
    pub size: [usize; 3],
    /// Uncompressed bytes of its DDFs (FP32) over the bytes it takes.
    pub ratio: f64,
    /// Its threshold now (a memory budget may have raised it above the others').
    pub tau: f32,
    /// Bytes it takes (compressed core and uncompressed shell).
    pub bytes: u64,
    /// Bytes its DDFs take uncompressed.
    pub dense_bytes: u64,
}

/// A solver backend.
pub trait Solver: Send {
    /// What it is.
    fn info(&self) -> SolverInfo;
    /// The voxelised domain.
    fn domain(&self) -> &Domain;
    /// Steps done so far.
    fn time_step(&self) -> u64;
    /// Advance `steps` time steps.
    ///
    /// # Errors
    /// Backend failures (a CPU solver never fails here).
    fn step(&mut self, steps: u64) -> Result<(), SolverError>;
    /// Density and velocity of every cell.
    fn fields(&self) -> Fields;
    /// One scalar field of every cell (for display). Backends with their own kernels for the
    /// derived fields override this.
    fn scalar_field(&self, kind: crate::fields::FieldKind) -> Vec<f32> {
        crate::fields::scalar(&self.fields(), kind)
    }
    /// Sample the flow at a few cells (probes): the velocity, density and vorticity magnitude
    /// of each of `cells` (x, y, z on this solver's grid, [`Solver::domain`]) at the current
    /// step, in their order. A solid cell gives zero velocity and vorticity and density 1
    /// (pressure 0). The vorticity is the vorticity field's at that cell: the same central
    /// differences ([`crate::fields::gradient_at`]), with solid neighbours at rest and
    /// periodic wrap at the domain edges. The default reads [`Solver::fields`] (the whole
    /// grid; on a GPU a copy of it to the host); backends that can compute the moments of
    /// single cells from their DDFs override it and read only the probed cells and their
    /// neighbours.
    ///
    /// # Errors
    /// A cell outside the grid; device errors.
    fn probe(&self, cells: &[[usize; 3]]) -> Result<Vec<crate::probes::ProbeSample>, SolverError> {
        crate::probes::check_cells(self.domain().n, cells)?;
        if cells.is_empty() {
            return Ok(Vec::new());
        }
        Ok(crate::probes::sample_fields(&self.fields(), self.time_step(), cells))
    }
    /// Write the fields as ParaView image data split into one piece per slab, each written by
    /// the process that holds it, joined by `DIR/STEM.pvti` (a launch of several processes);
    /// returns the files written. `None` where the solver writes one file instead
    /// ([`crate::export::write_fields_vti`] of [`Solver::fields`]).
    fn write_vti_pieces(&self, _dir: &std::path::Path, _stem: &str) -> Option<Result<Vec<std::path::PathBuf>, SolverError>> {
        None
    }
    /// Write one frame of a view: the fields `kinds` of the current state into `target` as
    /// `layout` says, with each field's range over the fluid cells of `layout.region` (cells
    /// outside the region may be left as they were). Derived fields (speed,
    /// vorticity, Q) are 0 in solid cells. Host targets work on every backend; device targets
    /// (memory shared with a renderer) only where [`Solver::shares_device_memory`] is true.
    ///
    /// # Errors
    /// A request that does not fit the grid or the target (see
    /// [`crate::frame::check_request`]); a device target on a host backend; device errors.
    fn write_frame(
        &mut self,
        kinds: &[crate::fields::FieldKind],
        layout: &crate::frame::FrameLayout,
        target: crate::frame::FrameTarget<'_>,
    ) -> Result<crate::frame::FrameRanges, SolverError> {
        crate::frame::check_request(self.domain(), kinds, layout, target.floats())?;
        let backend = self.info().backend;
        crate::frame::write_from_fields(|| self.fields(), backend, kinds, layout, target)
    }
    /// Let the last step of every [`Solver::step`] call store the fields of the state it starts
    /// from on the way (the step reads every DDF anyway), so that a frame or the stats taken
    /// right after need no pass of their own over the state. They then show the flow one step
    /// before [`Solver::time_step`]: [`crate::frame::FrameRanges::lag`] and [`Stats::step`]
    /// say so. For a viewer; off by default. Backends without such steps ignore it.
    fn fuse_frame_fields(&mut self, on: bool) {
        let _ = on;
    }
    /// Host memory for frames of `floats` floats (page-locked on GPU backends, so copies into
    /// it run at full speed).
    fn host_frame(&self, floats: usize) -> crate::frame::HostFrame {
        crate::frame::HostFrame::vec(floats)
    }
    /// Whether frames can be written into device memory shared with a renderer (imported with
    /// [`crate::backend::cuda::SharedImport`]).
    fn shares_device_memory(&self) -> bool {
        false
    }
    /// The bricks this solver tiles the domain in, with the class of each (all solid, plain
    /// fluid, boundary). The default classifies the domain in bricks of
    /// [`BrickMap::default_brick`] (8^3, 8x8 in 2D); backends that run bricks report their own.
    fn bricks(&self) -> BrickMap {
        let d = self.domain();
        BrickMap::classify(d, BrickMap::default_brick(d.lattice.dims()))
    }
    /// The compressed-subgrid side of a run that keeps its state compressed; `None` (the
    /// default) for the dense backends.
    fn compressed(&self) -> Option<&dyn Compressed> {
        None
    }
    /// [`Self::compressed`], to change its thresholds or budget.
    fn compressed_mut(&mut self) -> Option<&mut dyn Compressed> {
        None
    }
    /// The adaptive-block side of a run on a forest of blocks; `None` (the default) for the
    /// uniform-grid backends.
    fn adaptive(&self) -> Option<&dyn Adaptive> {
        None
    }
    /// [`Self::adaptive`], to change its criterion, levels or interval.
    fn adaptive_mut(&mut self) -> Option<&mut dyn Adaptive> {
        None
    }
    /// Wait until queued steps have finished (device backends queue work asynchronously).
    ///
    /// # Errors
    /// Device errors surfacing at the wait.
    fn synchronize(&self) -> Result<(), SolverError> {
        Ok(())
    }
    /// Mass, largest velocity and obstacle forces of the current state.
    fn stats(&self) -> Stats;
    /// Current parameters.
    fn params(&self) -> Params;
    /// Change parameters for the following steps.
    ///
    /// # Errors
    /// Invalid values (message says what is valid).
    fn set_params(&mut self, p: Params) -> Result<(), SolverError>;
    /// Save the state.
    fn checkpoint(&self) -> Checkpoint;
    /// Restore a state saved by [`Solver::checkpoint`] (any scheme, same lattice, precision
    /// and domain).
    ///
    /// # Errors
    /// A checkpoint of another lattice, precision or domain.
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError>;
    /// Keep the state to go back to with [`Solver::roll_back`] (a run's last good state): its
    /// [`Solver::checkpoint`], or where the solver keeps its state compressed, that compressed
    /// form (no dense copy of the grid on the host).
    ///
    /// # Errors
    /// Device errors, a damaged record.
    fn snapshot(&self) -> Result<Snapshot, SolverError> {
        Ok(Snapshot::of_checkpoint(self.checkpoint()))
    }
    /// Go back to a state kept by [`Solver::snapshot`], bit for bit.
    ///
    /// # Errors
    /// A snapshot taken by another kind of solver or on other cells; device errors.
    fn roll_back(&mut self, s: &Snapshot) -> Result<(), SolverError> {
        restore_snapshot(self, s)
    }
    /// Turn cells solid (part of an obstacle, whose force [`Solver::stats`] then reports) or
    /// fluid, between two steps. Cells that stay fluid keep their incoming DDFs bit for bit;
    /// cells that become fluid start at rest equilibrium with the mean density of their fluid
    /// neighbours (1 without any); cells that become solid drop out of the mass. Every scheme
    /// continues as One-Step Pull would. All or nothing: a refused edit changes nothing.
    ///
    /// # Errors
    /// [`SolverError::Edit`] for a cell outside the domain, an inlet, outlet or moving-wall
    /// cell, a boundary wall made fluid, or a 16th obstacle; device errors.
    fn edit_cells(&mut self, edit: &crate::edit::CellEdit) -> Result<crate::edit::EditReport, SolverError>;
}

/// [`Solver::roll_back`] to a snapshot that is a checkpoint ([`Solver::restore`]); a solver's
/// own form of its state is refused here (only its own kind takes it back).
///
/// # Errors
/// As [`Solver::restore`]; a snapshot that is not a checkpoint.
pub fn restore_snapshot<S: Solver + ?Sized>(solver: &mut S, s: &Snapshot) -> Result<(), SolverError> {
    match s.checkpoint() {
        Some(c) => solver.restore(c),
        None => Err(SolverError::Checkpoint("the saved state was taken by another kind of solver".into())),
    }
}

/// A run that keeps its state compressed (compressed subgrids): what it reports and what a
/// user may change while it runs.
pub trait Compressed {
    /// Compression ratio, memory, thresholds and budget.
    fn compression(&self) -> CompressionInfo;
    /// Set the compression threshold tau of every subgrid (it takes effect at the next
    /// compression).
    ///
    /// # Errors
    /// A tau that is not a finite number >= 0.
    fn set_compression_tau(&mut self, tau: f32) -> Result<(), SolverError>;
    /// Limit the bytes the state may take (`None`: no limit); checked after every step, the
    /// thresholds rising where the state outgrows it.
    ///
    /// # Errors
    /// A budget the backend cannot hold.
    fn set_compression_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError>;
}

/// A run on adaptive blocks: its forest and the settings a user may change while it runs.
pub trait Adaptive {
    /// The forest (leaves per level, their boxes, time in refinement).
    fn amr(&self) -> crate::amr::AmrInfo;
    /// [`Self::amr`] without the leaves' boxes (`boxes` empty): the counts and times only.
    /// Cheap where the forest lives on a device (no copy of the mesh), so a bench can read it
    /// between every batch of steps.
    fn amr_counts(&self) -> crate::amr::AmrInfo {
        self.amr()
    }
    /// Change the criterion, finest level asked for, interval and frozen levels; the forest
    /// adapts to them at once.
    ///
    /// # Errors
    /// Settings outside what the run allows (the message says what is valid).
    fn set_amr(&mut self, settings: &crate::amr::AmrSettings) -> Result<(), SolverError>;
}

/// The extensions reached from any solver, with one refusal where a run lacks them.
impl dyn Solver + '_ {
    /// [`Compressed::compression`] of a compressed run.
    #[must_use]
    pub fn compression(&self) -> Option<CompressionInfo> {
        self.compressed().map(Compressed::compression)
    }
    /// [`Adaptive::amr`] of an adaptive run.
    #[must_use]
    pub fn amr(&self) -> Option<crate::amr::AmrInfo> {
        self.adaptive().map(Adaptive::amr)
    }
    /// [`Adaptive::amr_counts`] of an adaptive run.
    #[must_use]
    pub fn amr_counts(&self) -> Option<crate::amr::AmrInfo> {
        self.adaptive().map(Adaptive::amr_counts)
    }
    /// [`Adaptive::set_amr`]; a run without adaptive blocks refuses.
    ///
    /// # Errors
    /// No adaptive blocks, or settings the run does not allow.
    pub fn set_amr(&mut self, settings: &crate::amr::AmrSettings) -> Result<(), SolverError> {
        let not = || SolverError::Param("this run has no adaptive blocks; set [amr] enabled = true in the scene".into());
        self.adaptive_mut().ok_or_else(not)?.set_amr(settings)
    }
    /// [`Compressed::set_compression_tau`]; a dense run refuses.
    ///
    /// # Errors
    /// Not compressed, or a tau that is not a finite number >= 0.
    pub fn set_compression_tau(&mut self, tau: f32) -> Result<(), SolverError> {
        let not = || SolverError::Param("this run is not compressed; set [compression] enabled = true in the scene".into());
        self.compressed_mut().ok_or_else(not)?.set_compression_tau(tau)
    }
    /// [`Compressed::set_compression_budget`]; a dense run refuses.
    ///
    /// # Errors
    /// Not compressed.
    pub fn set_compression_budget(&mut self, budget: Option<u64>) -> Result<(), SolverError> {
        let not = || {
            SolverError::Param(
                "this run is not compressed, so it has no memory budget; set [compression] enabled = true in the scene".into(),
            )
        };
        self.compressed_mut().ok_or_else(not)?.set_compression_budget(budget)
    }
}

/// The collision kind of a parameter set, for display.
#[must_use]
pub fn collision_of(p: &Params) -> Collision {
    p.collide.kind
}
