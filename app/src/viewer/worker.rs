//! The solver thread. It owns the solver, steps it in batches and hands the UI a snapshot of
//! the field it shows whenever the UI has taken the previous one: the UI never waits for the
//! solver, and steps that are not drawn cost no field computation. With an isosurface on, a
//! snapshot also carries the surface's field and the velocity magnitude that colours it (only
//! then: with the isosurface off nothing more is computed).

use super::frames::{Frame, FramePool, SharedSlot};
use crate::pacer::CheckpointPacer;
use sim_core::bricks::BrickMap;
use sim_core::checkpoint::Checkpoint;
use sim_core::domain::{id_of, is_solid, kind, kind_of, Domain};
use sim_core::fields::FieldKind;
use sim_core::frame::FrameRegion;
use sim_core::{CellEdit, EditReport, EditTo, Params, Solver, SolverInfo, Stats};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the UI asks the solver thread to do.
pub enum Command {
    /// Run or pause.
    SetRunning(bool),
    /// Do these steps now (paused or not), then publish.
    Step(u64),
    /// Steps per batch (one batch per published snapshot at most).
    SetStepsPerBatch(u64),
    /// The field to publish.
    SetField(FieldKind),
    /// The isosurface's field to publish with it (and the velocity magnitude), or none.
    SetIso(Option<FieldKind>),
    /// The slice planes the view draws (index along x, y, z; `None`: that slice is off), or
    /// `None` when the view may need any cell. Without an isosurface, 3D frames then carry
    /// only these planes' cells.
    SetSlices(Option<[Option<usize>; 3]>),
    /// Cube edge (cells) the view marches its isosurface with: with 2 or more, 3D frames with
    /// an isosurface carry only the lattice of every such cell and the slice planes
    /// ([`FrameRegion::Sampled`]), 1/s^3 of the volume.
    SetIsoStride(u32),
    /// Publish the velocity components with every snapshot (tracers and streamlines move
    /// through them), or stop. 3D frames then carry the whole volume: every cell of grids up to
    /// [`super::frames::VELOCITY_FULL_CELLS`], a lattice of every 2nd or 4th cell beyond.
    SetVelocity(bool),
    /// Sample the flow at these cells of the solver's grid with every snapshot (probes; empty:
    /// none).
    SetProbes(Vec<[usize; 3]>),
    /// Write frames into these buffers shared with the renderer's GPU (empty: host memory).
    SharedFrames(Vec<Arc<SharedSlot>>),
    /// Keep a rollback checkpoint every K steps.
    SetCheckpointEvery(u64),
    /// Change parameters.
    SetParams(Params),
    /// Change the compression threshold of a compressed run.
    SetCompressionTau(f32),
    /// Limit the bytes a compressed run's state may take (`None`: no limit).
    SetCompressionBudget(Option<u64>),
    /// Change an adaptive run's criterion, levels, interval and frozen levels (it adapts at once).
    SetAmr(sim_core::amr::AmrSettings),
    /// Run an uncompressed reference solver in lockstep (it is brought to the running solver's
    /// cells and state first), or stop it.
    SetReference(Option<Box<dyn Solver>>),
    /// Publish the density difference against the reference with every snapshot.
    SetDiffView(bool),
    /// Back to the initial state (the current parameters stay).
    Reset,
    /// Restore the last good checkpoint after a blow-up (stays paused).
    Rollback,
    /// Replace the solver (a new scene), starting paused or running as now. With `true` (the
    /// same scene rebuilt with other solver settings) the cells drawn or erased so far are
    /// edited into the new solver too. With the second `true` the new solver goes on from the
    /// old one's state (its checkpoint; compression switched on or off), where it can.
    Replace(Box<dyn Solver>, String, bool, bool),
    /// Write the current fields as VTK image data.
    ExportVtk(PathBuf),
    /// Save a checkpoint file, with the probes placed (cells of the scene's size) in it.
    SaveCheckpoint(PathBuf, Vec<sim_core::probes::Probe>),
    /// Load a checkpoint file.
    LoadCheckpoint(PathBuf),
    /// Make cells solid or fluid: one frame of a brush stroke. Cells that may not be edited
    /// (inlets, outlets, moving walls; boundary walls when erasing) are left alone and counted
    /// for the stroke's summary.
    Edit {
        /// Sequence number of this command (the snapshot's `edit_seq` says which was applied last).
        seq: u64,
        /// The stroke it belongs to.
        stroke: u64,
        /// Cell indices.
        cells: Vec<usize>,
        /// What they become.
        to: EditTo,
    },
    /// The stroke is over: say what it did.
    EndStroke(u64),
    /// Voxelise an STL file into the running domain as a new obstacle named after the file
    /// (one stroke, so it can be undone).
    LoadStl {
        /// Sequence number, as for `Edit`.
        seq: u64,
        /// Stroke id (for undo).
        stroke: u64,
        /// The file.
        path: PathBuf,
        /// Where the centre of the mesh's bounding box goes (cells).
        center: [f32; 3],
        /// Longest edge of the mesh's bounding box (cells).
        size: f32,
    },
    /// Undo the last stroke (or STL load): its cells go back to what they were.
    UndoStroke,
    /// Stop the thread.
    Quit,
}

/// Messages from the solver thread.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Something to tell the user.
    Info(String),
    /// Something failed; the run goes on.
    Error(String),
    /// The state stopped being physically sane (non-finite values, a density far from the
    /// reference, a speed at the speed of sound); the thread paused itself.
    BlownUp {
        /// Step at which the blow-up was seen.
        step: u64,
        /// What is wrong with the state ([`sim_core::Stats::sanity`]).
        why: String,
        /// Step of the last good checkpoint kept in memory.
        last_good: u64,
    },
    /// A loaded checkpoint carried probes (cells of the scene's size): the view samples them.
    Probes(Vec<sim_core::probes::Probe>),
}

/// The isosurface's fields in a snapshot: its field and the velocity magnitude that colours it
/// (both planes of the snapshot's frame).
#[derive(Clone, Copy, Debug)]
pub struct IsoData {
    /// Field of the surface.
    pub kind: FieldKind,
    /// Smallest and largest finite value over fluid cells.
    pub min_max: (f32, f32),
    /// Smallest and largest finite velocity magnitude over fluid cells.
    pub speed_min_max: (f32, f32),
}

/// The uncompressed reference run beside a compressed one, as a snapshot carries it.
#[derive(Clone, Debug)]
pub struct ReferenceData {
    /// Steps the reference has done (the same as the run's, in lockstep).
    pub step: u64,
    /// The error measure of Flint et al. 2024 (their eq. 19, [`sim_core::compress::nmse`]) of the run's density
    /// against the reference's, over the fluid cells.
    pub nmse: f64,
    /// Largest |compressed - reference| density over the fluid cells.
    pub max_abs: f32,
    /// Density of the run minus the reference's, every cell (0 in solid cells), when the
    /// difference view is on.
    pub diff: Option<Arc<Vec<f32>>>,
    /// Bytes the reference solver holds.
    pub bytes: u64,
}

/// One published state: the field to draw and the numbers for the panels.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Counts up with every snapshot.
    pub serial: u64,
    /// Steps done.
    pub step: u64,
    /// Cells per axis.
    pub size: [usize; 3],
    /// The field the slices show.
    pub field: FieldKind,
    /// The fields of this state (the slices' field; with an isosurface on, its field and the
    /// speed), in host memory or in a buffer shared with the renderer's GPU.
    pub frame: Arc<Frame>,
    /// Smallest and largest finite value of `field` over fluid cells.
    pub min_max: (f32, f32),
    /// The auto colour range of `field`: its values from the 1st to the 99th percentile over
    /// the fluid cells (see [`super::legend::AUTO_TAIL`]); `None` where it could not be had
    /// (a large grid whose frames stay in GPU memory): the view then uses `min_max`.
    pub robust: Option<(f32, f32)>,
    /// The isosurface's fields, when an isosurface is on (3D only).
    pub iso: Option<IsoData>,
    /// Solid mask (see [`solid_mask`]), shared between snapshots of one solver.
    pub solid: Arc<Vec<u8>>,
    /// The solver's bricks and their classes, shared between snapshots of one solver.
    pub bricks: Arc<BrickMap>,
    /// Bumped when the solver (and so the solid mask) changes.
    pub solver_serial: u64,
    /// Stats of this state.
    pub stats: Stats,
    /// Parameters in force.
    pub params: Params,
    /// Solver description.
    pub info: SolverInfo,
    /// Ratio, memory and thresholds of a compressed run (`None` for the dense backends).
    pub compression: Option<sim_core::solver::CompressionInfo>,
    /// The uncompressed reference run, when one runs beside this one.
    pub reference: Option<ReferenceData>,
    /// The forest of an adaptive run (leaves, their boxes, settings, time in refinement).
    pub amr: Option<sim_core::amr::AmrInfo>,
    /// Obstacle names (for forces).
    pub obstacles: Vec<String>,
    /// Mass at step 0 (for the drift).
    pub mass0: f64,
    /// Average solver time per step over the last batch (seconds).
    pub solver_secs_per_step: f64,
    /// Time to compute this snapshot's fields and stats (seconds; on the host path this
    /// includes copying them to the host).
    pub fields_secs: f64,
    /// Million lattice updates per second over the last batch.
    pub mlups: f64,
    /// Steps per second (wall clock, stepping plus snapshots).
    pub steps_per_sec: f64,
    /// Sequence number of the last edit command applied (or refused).
    pub edit_seq: u64,
    /// Strokes that can be undone.
    pub undo_depth: usize,
    /// The probes' samples of this state, one per cell of `probe_cells` (empty where none were
    /// taken with this snapshot: see [`PROBE_SHARE`]).
    pub probes: Vec<sim_core::probes::ProbeSample>,
    /// The cells sampled (the solver's grid).
    pub probe_cells: Vec<[usize; 3]>,
    /// The box (cells) in front of the first velocity inlet, where tracers are released when
    /// they are seeded at the inlet (`None`: the scene has no inlet).
    pub inlet: Option<[[f32; 3]; 2]>,
}

impl Snapshot {
    /// What of this snapshot's frame the renderer is given.
    #[must_use]
    pub fn view(&self) -> super::frames::FrameView<'_> {
        super::frames::FrameView {
            frame: &self.frame,
            field: self.field,
            size: self.size,
            iso: self.iso.map(|d| d.kind),
            velocity: super::frames::VELOCITY.iter().all(|&k| self.frame.plane(k).is_some()),
        }
    }
}

/// The mailbox the solver thread writes and the UI takes from.
type Mailbox = Arc<Mutex<Option<Snapshot>>>;

/// The UI's handle on the solver thread.
pub struct WorkerHandle {
    tx: Sender<Command>,
    events: Receiver<Event>,
    mailbox: Mailbox,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Start the thread with a solver (paused or running).
    #[must_use]
    pub fn start(solver: Box<dyn Solver>, name: String, running: bool, field: FieldKind, steps_per_batch: u64) -> WorkerHandle {
        let (tx, rx) = mpsc::channel();
        let (etx, events) = mpsc::channel();
        let mailbox: Mailbox = Arc::new(Mutex::new(None));
        let mb = Arc::clone(&mailbox);
        let thread = std::thread::Builder::new()
            .name("esoflow-solver".into())
            .spawn(move || {
                let mut w = Worker::new(solver, name, mb, etx, running, field, steps_per_batch);
                w.run(&rx);
            })
            .ok();
        WorkerHandle { tx, events, mailbox, thread }
    }

    /// Send a command (ignored if the thread has gone, which it only does on `Quit`).
    pub fn send(&self, c: Command) {
        let _ = self.tx.send(c);
    }

    /// Take the newest snapshot, if a new one is there.
    #[must_use]
    pub fn take(&self) -> Option<Snapshot> {
        self.mailbox.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Messages since the last call.
    #[must_use]
    pub fn events(&self) -> Vec<Event> {
        self.events.try_iter().collect()
    }

    /// Whether the thread is alive.
    #[must_use]
    pub fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Quit);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A saved state to go back to (initial state, rollback point), with the cell flags it was
/// taken on: a checkpoint only restores onto the same cells, so edits made since are undone
/// first.
struct Saved {
    ckpt: Checkpoint,
    flags: Arc<Vec<u8>>,
    mass0: f64,
}

/// A brush stroke or STL load: what it did, for its summary and for undo.
struct Stroke {
    id: u64,
    what: String,
    changed: Vec<(usize, u8)>,
    refused: Vec<(&'static str, usize)>,
    failed: bool,
}

/// Strokes kept for undo.
const UNDO_DEPTH: usize = 64;
/// Most of the wall time probes may take (a probe read that takes 1 ms is repeated at most
/// every 50 ms).
pub const PROBE_SHARE: f64 = 0.02;
/// Stats (mass, forces: sums over the grid) are taken at most this often.
const STATS_EVERY: Duration = Duration::from_millis(100);

struct Worker {
    solver: Box<dyn Solver>,
    /// The uncompressed reference run, stepped in lockstep with `solver`.
    reference: Option<Box<dyn Solver>>,
    /// Whether snapshots carry the density difference against the reference.
    diff_view: bool,
    /// The reference must be brought to the run's cells and state again (after a reset, a
    /// rollback, a checkpoint load or an edit).
    reference_stale: bool,
    frames: FramePool,
    name: String,
    mailbox: Mailbox,
    events: Sender<Event>,
    running: bool,
    field: FieldKind,
    iso: Option<FieldKind>,
    slices: Option<[Option<usize>; 3]>,
    iso_stride: u32,
    velocity: bool,
    steps_per_batch: u64,
    checkpoint_every: u64,
    initial: Arc<Saved>,
    last_good: Arc<Saved>,
    /// The solver's flags now (shared with the saved states taken on them).
    flags: Arc<Vec<u8>>,
    strokes: Vec<Stroke>,
    edit_seq: u64,
    /// When the last rollback checkpoint was taken and how long it took.
    pacer: CheckpointPacer,
    cells: f64,
    stats: Option<(Instant, Stats)>,
    solid: Arc<Vec<u8>>,
    bricks: Arc<BrickMap>,
    solver_serial: u64,
    serial: u64,
    mass0: f64,
    dirty: bool,
    blown: bool,
    solver_secs_per_step: f64,
    mlups: f64,
    rate_t0: Instant,
    rate_steps0: u64,
    steps_per_sec: f64,
    /// The percentile colour range of the shown field, kept between frames in GPU memory.
    robust: super::legend::RobustRange,
    /// Cells the probes sample (the solver's grid).
    probe_cells: Vec<[usize; 3]>,
    /// When the probes were last sampled and how long that took.
    probe_cost: Option<(Instant, Duration)>,
}

/// The solid mask the renderer draws: 0 fluid, 1 solid wall (domain walls, moving walls), 2 solid
/// obstacle (the scene's shapes and STL; drawn as surfaces in 3D). x fastest.
#[must_use]
pub fn solid_mask(d: &Domain) -> Vec<u8> {
    d.flags
        .iter()
        .map(|&f| match (is_solid(f), kind_of(f) == kind::SOLID && id_of(f) > 0) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        })
        .collect()
}

/// Smallest and largest finite value over fluid cells ((0, 0) if none), and whether every fluid
/// value is finite.
#[must_use]
pub fn fluid_min_max(values: &[f32], solid: &[u8]) -> ((f32, f32), bool) {
    sim_core::frame::fluid_range(values.iter().copied(), solid.iter().map(|&s| s != 0))
}

impl Worker {
    fn new(
        solver: Box<dyn Solver>,
        name: String,
        mailbox: Mailbox,
        events: Sender<Event>,
        running: bool,
        field: FieldKind,
        spb: u64,
    ) -> Worker {
        let mut solver = solver;
        // Frames and stats from the last step of each batch (one step old) where the backend
        // can: no pass of their own over the state.
        solver.fuse_frame_fields(true);
        let flags = Arc::new(solver.domain().flags.clone());
        let mass0 = solver.stats().mass;
        let mut pacer = CheckpointPacer::new();
        let initial = pacer.take(|| Arc::new(Saved { ckpt: solver.checkpoint(), flags: Arc::clone(&flags), mass0 }));
        let last_good = Arc::clone(&initial);
        let solid = Arc::new(solid_mask(solver.domain()));
        let bricks = Arc::new(solver.bricks());
        let cells = solver.domain().cells() as f64;
        let t = solver.time_step();
        Worker {
            solver,
            reference: None,
            diff_view: false,
            reference_stale: false,
            frames: FramePool::default(),
            name,
            mailbox,
            events,
            running,
            field,
            iso: None,
            slices: None,
            iso_stride: 1,
            velocity: false,
            steps_per_batch: spb.max(1),
            checkpoint_every: 1000,
            initial,
            last_good,
            flags,
            strokes: Vec::new(),
            edit_seq: 0,
            pacer,
            cells,
            stats: None,
            solid,
            bricks,
            solver_serial: 0,
            serial: 0,
            mass0,
            dirty: true,
            blown: false,
            solver_secs_per_step: 0.0,
            mlups: 0.0,
            rate_t0: Instant::now(),
            rate_steps0: t,
            steps_per_sec: 0.0,
            robust: super::legend::RobustRange::default(),
            probe_cells: Vec::new(),
            probe_cost: None,
        }
    }

    fn event(&self, e: Event) {
        let _ = self.events.send(e);
    }

    fn run(&mut self, rx: &Receiver<Command>) {
        loop {
            // Commands first; when idle, block until one comes (or a short timeout to publish).
            let idle = !self.running && !self.dirty;
            let first = if idle { rx.recv_timeout(Duration::from_millis(50)).ok() } else { rx.try_recv().ok() };
            let mut cmds: Vec<Command> = first.into_iter().collect();
            cmds.extend(rx.try_iter());
            for c in cmds {
                if !self.handle(c) {
                    return;
                }
            }
            if self.reference_stale {
                self.sync_reference("");
            }
            if self.running && !self.blown {
                self.step(self.steps_per_batch);
            }
            if self.dirty && self.mailbox_empty() {
                self.publish();
            } else if self.running {
                // The UI has not taken the last snapshot yet: keep stepping, publish later.
                self.dirty = true;
            }
        }
    }

    fn mailbox_empty(&self) -> bool {
        self.mailbox.lock().unwrap_or_else(PoisonError::into_inner).is_none()
    }

    fn handle(&mut self, c: Command) -> bool {
        match c {
            Command::SetRunning(r) => {
                if r && self.blown {
                    self.event(Event::Error("the state has blown up: roll back (or reset) before running again".into()));
                } else {
                    self.running = r;
                }
            }
            Command::Step(n) => {
                if self.blown {
                    self.event(Event::Error("the state has blown up: roll back (or reset) before stepping".into()));
                } else {
                    self.step(n.max(1));
                }
            }
            Command::SetStepsPerBatch(n) => self.steps_per_batch = n.clamp(1, 1_000_000),
            Command::SetField(f) => self.field = f,
            Command::SetProbes(cells) => {
                self.probe_cells = cells;
                self.probe_cost = None;
                // A paused view samples the new probes at once.
                self.dirty = true;
            }
            Command::SetIso(k) => {
                self.iso = k;
                self.update_fusion();
            }
            Command::SetSlices(k) => {
                if k != self.slices {
                    self.slices = k;
                    self.update_fusion();
                    // A paused view shows the new planes at once.
                    self.dirty = true;
                }
            }
            Command::SetIsoStride(s) => {
                if s != self.iso_stride {
                    self.iso_stride = s.max(1);
                    self.update_fusion();
                    self.dirty = true;
                }
            }
            Command::SetVelocity(on) => {
                if on != self.velocity {
                    self.velocity = on;
                    self.update_fusion();
                    self.dirty = true;
                }
            }
            Command::SharedFrames(slots) => {
                self.frames.set_shared(slots);
                self.dirty = true;
            }
            Command::SetCheckpointEvery(k) => self.checkpoint_every = k.max(1),
            Command::SetParams(p) => {
                // The reference run follows (it compares compression alone).
                if let Some(r) = self.reference.as_mut() {
                    let _ = r.set_params(p.clone());
                }
                if let Err(e) = self.solver.set_params(p) {
                    self.event(Event::Error(e.to_string()));
                }
            }
            Command::SetCompressionTau(tau) => {
                if let Err(e) = self.solver.set_compression_tau(tau) {
                    self.event(Event::Error(e.to_string()));
                }
                self.dirty = true;
            }
            Command::SetCompressionBudget(b) => {
                match self.solver.set_compression_budget(b) {
                    Ok(()) => self.event(Event::Info(match b {
                        Some(b) => format!(
                            "memory budget {}: a state over it gets tau raised for its largest subgrids from the next step",
                            sim_core::units::human_bytes(b)
                        ),
                        None => "no memory budget".into(),
                    })),
                    Err(e) => self.event(Event::Error(e.to_string())),
                }
                // The panel shows the budget from the next snapshot, paused or not.
                self.dirty = true;
            }
            Command::SetAmr(a) => {
                if let Err(e) = self.solver.set_amr(&a) {
                    self.event(Event::Error(format!("adaptive blocks: {e}")));
                }
                // The new blocks show at once, paused or not.
                self.dirty = true;
            }
            Command::SetReference(r) => match r {
                Some(r) => {
                    self.reference = Some(r);
                    self.sync_reference("the uncompressed reference run starts from the state at step ");
                }
                None => {
                    if self.reference.take().is_some() {
                        self.event(Event::Info("the reference run stopped".into()));
                    }
                }
            },
            Command::SetDiffView(on) => self.diff_view = on,
            Command::Reset => {
                let params = self.solver.params();
                let initial = Arc::clone(&self.initial);
                self.restore_saved(&initial, "reset");
                if let Err(e) = self.solver.set_params(params) {
                    self.event(Event::Error(e.to_string()));
                }
                self.last_good = Arc::clone(&self.initial);
                self.stats = None;
                self.rate_steps0 = self.solver.time_step();
                self.reference_stale = true;
            }
            Command::Rollback => {
                let good = Arc::clone(&self.last_good);
                self.restore_saved(&good, "rollback");
                self.reference_stale = true;
                self.stats = None;
                self.running = false;
                self.rate_steps0 = self.solver.time_step();
            }
            Command::Replace(s, name, keep_cells, keep_state) => {
                let old = std::mem::replace(&mut self.solver, s);
                self.update_fusion();
                self.name = name;
                if keep_cells {
                    self.carry_cells(old.domain());
                }
                if self.reference.take().is_some() {
                    self.event(Event::Info("the reference run stopped: the solver was replaced".into()));
                }
                if keep_state && self.go_on_from(old.as_ref()) {
                    return true;
                }
                self.flags = Arc::new(self.solver.domain().flags.clone());
                self.mass0 = self.solver.stats().mass;
                let (solver, flags, mass0) = (&self.solver, &self.flags, self.mass0);
                self.initial = self.pacer.take(|| Arc::new(Saved { ckpt: solver.checkpoint(), flags: Arc::clone(flags), mass0 }));
                self.last_good = Arc::clone(&self.initial);
                self.solid = Arc::new(solid_mask(self.solver.domain()));
                self.bricks = Arc::new(self.solver.bricks());
                self.cells = self.solver.domain().cells() as f64;
                self.stats = None;
                self.solver_serial += 1;
                self.strokes.clear();
                self.blown = false;
                self.rate_steps0 = self.solver.time_step();
                self.rate_t0 = Instant::now();
                self.event(Event::Info(format!("loaded {}", self.name)));
            }
            Command::ExportVtk(p) => {
                let f = self.solver.fields();
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let _ = std::fs::create_dir_all(dir);
                }
                match sim_core::export::write_fields_vti(&p, &f) {
                    Ok(()) => self.event(Event::Info(format!("wrote {} (step {})", p.display(), self.solver.time_step()))),
                    Err(e) => self.event(Event::Error(format!("VTK export to {} failed: {e}", p.display()))),
                }
            }
            Command::SaveCheckpoint(p, probes) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let _ = std::fs::create_dir_all(dir);
                }
                let mut c = self.solver.checkpoint();
                c.probes = probes;
                match c.save(&p) {
                    Ok(()) => self.event(Event::Info(format!("saved checkpoint {} (step {})", p.display(), self.solver.time_step()))),
                    Err(e) => self.event(Event::Error(format!("saving {} failed: {e}", p.display()))),
                }
            }
            Command::LoadCheckpoint(p) => match Checkpoint::load(&p).and_then(|c| {
                c.check_sane(f64::from(self.solver.domain().rho0))
                    .map(|()| c)
                    .map_err(|why| format!("{}: {why}; load an earlier checkpoint", p.display()))
            }) {
                Ok(mut c) => {
                    self.restore(&c, &format!("checkpoint {}", p.display()));
                    self.stats = None;
                    self.reference_stale = true;
                    if !c.probes.is_empty() {
                        self.event(Event::Probes(std::mem::take(&mut c.probes)));
                    }
                }
                Err(e) => self.event(Event::Error(e)),
            },
            Command::Edit { seq, stroke, cells, to } => {
                self.edit_seq = self.edit_seq.max(seq);
                self.edit(stroke, cells, to);
            }
            Command::EndStroke(id) => self.end_stroke(id),
            Command::LoadStl { seq, stroke, path, center, size } => {
                self.edit_seq = self.edit_seq.max(seq);
                self.load_stl(stroke, &path, center, size);
            }
            Command::UndoStroke => self.undo_stroke(),
            Command::Quit => return false,
        }
        self.dirty = true;
        true
    }

    /// Go back to a saved state: first the cells edited since are turned back (a checkpoint
    /// restores onto the cells it was taken on), then the DDFs restored.
    fn restore_saved(&mut self, s: &Saved, what: &str) {
        if self.solver.domain().flags != *s.flags {
            let edits = match self.solver.domain().edits_towards(&s.flags, &[]) {
                Ok(e) => e,
                Err(e) => {
                    self.event(Event::Error(format!("{what} refused: {e}")));
                    return;
                }
            };
            for e in &edits {
                if let Err(err) = self.solver.edit_cells(e) {
                    self.event(Event::Error(format!("{what}: cannot turn the edited cells back: {err}")));
                    break;
                }
            }
            self.cells_changed();
            self.strokes.clear();
        }
        self.restore(&s.ckpt, what);
        self.mass0 = s.mass0;
    }

    /// Edit the cells of `old` (the domain of the solver replaced) into the new solver, when it
    /// has the same size.
    fn carry_cells(&mut self, old: &sim_core::domain::Domain) {
        let d = self.solver.domain();
        if d.n != old.n || d.flags.iter().zip(&old.flags).all(|(a, b)| is_solid(*a) == is_solid(*b)) {
            return;
        }
        let edits = match d.edits_towards(&old.flags, &old.obstacles) {
            Ok(e) => e,
            Err(e) => {
                self.event(Event::Error(format!("the drawn and erased cells are not carried over: {e}")));
                return;
            }
        };
        let mut k = 0;
        for e in &edits {
            match self.solver.edit_cells(e) {
                Ok(r) => k += r.changed.len(),
                Err(err) => {
                    self.event(Event::Error(format!("the drawn and erased cells are not all carried over: {err}")));
                    return;
                }
            }
        }
        self.event(Event::Info(format!("{k} drawn or erased cells carried over to the new solver")));
    }

    /// The new solver (compression switched on or off) goes on from the old one's state: its
    /// checkpoint, and the saved states (initial, rollback), mass and strokes kept, as they
    /// fit any solver of the same lattice, precision and cells. `false` (and a message) where
    /// the new solver refuses the state: it then starts from its own initial state.
    fn go_on_from(&mut self, old: &dyn Solver) -> bool {
        let c = old.checkpoint();
        match self.solver.restore(&c) {
            Ok(()) => {
                self.flags = Arc::new(self.solver.domain().flags.clone());
                self.solid = Arc::new(solid_mask(self.solver.domain()));
                self.bricks = Arc::new(self.solver.bricks());
                self.cells = self.solver.domain().cells() as f64;
                self.stats = None;
                self.solver_serial += 1;
                self.blown = false;
                self.rate_steps0 = self.solver.time_step();
                self.rate_t0 = Instant::now();
                self.dirty = true;
                self.event(Event::Info(format!("{}: going on from step {}", self.name, self.solver.time_step())));
                true
            }
            Err(e) => {
                self.event(Event::Error(format!("the new solver cannot take the running state ({e}); it starts from step 0")));
                false
            }
        }
    }

    /// Bring the reference run to the running solver's cells and state (its checkpoint), so
    /// that the two start equal; `what` (when not empty) is said with the step.
    fn sync_reference(&mut self, what: &str) {
        self.reference_stale = false;
        let Some(mut r) = self.reference.take() else { return };
        let d = self.solver.domain();
        let result = (|| -> Result<(), String> {
            if r.domain().n != d.n {
                return Err(format!("the reference has {:?} cells, the run {:?}", r.domain().n, d.n));
            }
            if r.domain().flags != d.flags {
                for e in r.domain().edits_towards(&d.flags, &d.obstacles).map_err(|e| e.to_string())? {
                    r.edit_cells(&e).map_err(|e| e.to_string())?;
                }
            }
            r.restore(&self.solver.checkpoint()).map_err(|e| e.to_string())
        })();
        match result {
            Ok(()) => {
                if !what.is_empty() {
                    self.event(Event::Info(format!("{what}{}", r.time_step())));
                }
                self.reference = Some(r);
            }
            Err(e) => self.event(Event::Error(format!("the reference run stopped: it cannot follow the run ({e})"))),
        }
        self.dirty = true;
    }

    /// Density of the run against the reference's: NMSE over the fluid cells, and the
    /// difference field when the difference view is on.
    fn reference_data(&self) -> Option<ReferenceData> {
        let r = self.reference.as_ref()?;
        let a = self.solver.scalar_field(FieldKind::Density);
        let b = r.scalar_field(FieldKind::Density);
        let fluid = |i: usize| self.solid.get(i).is_some_and(|&s| s == 0);
        let (fa, fb): (Vec<f32>, Vec<f32>) = (0..a.len().min(b.len())).filter(|&i| fluid(i)).map(|i| (a[i], b[i])).unzip();
        let nmse = sim_core::compress::nmse(&fb, &fa);
        let max_abs = fa.iter().zip(&fb).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        let diff = self
            .diff_view
            .then(|| Arc::new(a.iter().zip(&b).enumerate().map(|(i, (x, y))| if fluid(i) { x - y } else { 0.0 }).collect::<Vec<f32>>()));
        Some(ReferenceData { step: r.time_step(), nmse, max_abs, diff, bytes: r.info().memory_bytes })
    }

    /// After cells changed: the solid mask, the shared flags and the solver serial (so views
    /// keyed on it redraw the solids).
    fn cells_changed(&mut self) {
        self.reference_stale = true;
        self.solid = Arc::new(solid_mask(self.solver.domain()));
        self.flags = Arc::new(self.solver.domain().flags.clone());
        self.solver_serial += 1;
        self.stats = None;
    }

    /// The stroke `id`, started with a description if it is new.
    fn stroke(&mut self, id: u64, what: impl FnOnce() -> String) -> &mut Stroke {
        if self.strokes.last().is_none_or(|s| s.id != id) {
            self.strokes.push(Stroke { id, what: what(), changed: Vec::new(), refused: Vec::new(), failed: false });
            if self.strokes.len() > UNDO_DEPTH {
                self.strokes.remove(0);
            }
        }
        let last = self.strokes.len() - 1;
        &mut self.strokes[last]
    }

    /// Apply an edit's report to the worker's books.
    fn edited(&mut self, r: &EditReport) {
        self.mass0 += r.mass_added - r.mass_removed;
        if !r.changed.is_empty() {
            self.cells_changed();
        }
    }

    fn edit(&mut self, stroke: u64, mut cells: Vec<usize>, to: EditTo) {
        let refused = self.solver.domain().retain_editable(&mut cells, &to);
        let what = match &to {
            EditTo::Fluid => "erased".to_string(),
            EditTo::Solid(name) => format!("drew (obstacle \"{name}\")"),
            EditTo::SolidId(id) => format!("drew (obstacle {id})"),
        };
        let r = self.solver.edit_cells(&CellEdit { cells, to });
        let st = self.stroke(stroke, || what);
        for (why, k) in refused {
            match st.refused.iter_mut().find(|(w, _)| *w == why) {
                Some(e) => e.1 += k,
                None => st.refused.push((why, k)),
            }
        }
        match r {
            Ok(r) => {
                st.changed.extend_from_slice(&r.changed);
                self.edited(&r);
            }
            Err(e) => {
                // Once per stroke: a drag repeats the same refusal every frame.
                let first = !std::mem::replace(&mut st.failed, true);
                if first {
                    self.event(Event::Error(e.to_string()));
                }
            }
        }
    }

    fn end_stroke(&mut self, id: u64) {
        let Some(st) = self.strokes.last().filter(|s| s.id == id) else { return };
        let mut text = format!("{}: {} cells", st.what, st.changed.len());
        if !st.refused.is_empty() {
            let why: Vec<String> = st.refused.iter().map(|(w, k)| format!("{w} ({k} left alone)")).collect();
            text.push_str(&format!("; {}", why.join("; ")));
        }
        let refused = !st.refused.is_empty();
        if st.changed.is_empty() {
            self.strokes.pop();
        }
        self.event(if refused { Event::Error(text) } else { Event::Info(text) });
    }

    fn load_stl(&mut self, stroke: u64, path: &std::path::Path, center: [f32; 3], size: f32) {
        let d = self.solver.domain();
        let cells = match sim_core::scene::voxel::stl_cells(path, d.n, d.lattice.dims(), center, size) {
            Ok(c) => c,
            Err(e) => {
                self.event(Event::Error(format!("STL not loaded: {e}")));
                return;
            }
        };
        let name = path.file_stem().map_or_else(|| "stl".to_string(), |s| s.to_string_lossy().to_string());
        match self.solver.edit_cells(&CellEdit { cells, to: EditTo::Solid(name.clone()) }) {
            Ok(r) => {
                let n = r.changed.len();
                self.edited(&r);
                let st = self.stroke(stroke, || format!("loaded {} (obstacle \"{name}\")", path.display()));
                st.changed = r.changed;
                self.event(Event::Info(format!("loaded {} as obstacle \"{name}\": {n} cells", path.display())));
            }
            Err(e) => {
                self.event(Event::Error(format!("STL not loaded: {e}; move or shrink the mesh (position and size in the Scene panel)")))
            }
        }
    }

    fn undo_stroke(&mut self) {
        let Some(st) = self.strokes.pop() else {
            self.event(Event::Info("nothing to undo".into()));
            return;
        };
        let r = EditReport { changed: st.changed, ..EditReport::default() };
        for e in r.undo() {
            match self.solver.edit_cells(&e) {
                Ok(r) => self.edited(&r),
                Err(err) => {
                    self.event(Event::Error(format!("undo failed: {err}")));
                    return;
                }
            }
        }
        self.event(Event::Info(format!("undone: {}: {} cells", st.what, r.changed.len())));
    }

    fn restore(&mut self, c: &Checkpoint, what: &str) {
        match self.solver.restore(c) {
            Ok(()) => {
                self.blown = false;
                self.event(Event::Info(format!("{what}: back at step {}", self.solver.time_step())));
            }
            Err(e) => self.event(Event::Error(format!("{what} refused: {e}"))),
        }
    }

    fn step(&mut self, n: u64) {
        self.update_fusion();
        // Stop at checkpoint boundaries so the rollback state is at most `checkpoint_every` old.
        let mut left = n;
        while left > 0 {
            let now = self.solver.time_step();
            let to_ckpt = self.checkpoint_every - now % self.checkpoint_every;
            let k = left.min(to_ckpt);
            let t = Instant::now();
            if let Err(e) = self.solver.step(k).and_then(|()| self.solver.synchronize()) {
                self.running = false;
                self.event(Event::Error(format!("the solver failed: {e}")));
                return;
            }
            let secs = t.elapsed().as_secs_f64().max(1e-9);
            self.solver_secs_per_step = secs / k as f64;
            self.mlups = self.cells * k as f64 / secs / 1e6;
            // The reference in lockstep (not timed: the numbers are the run's).
            if let Some(r) = self.reference.as_mut() {
                if let Err(e) = r.step(k) {
                    self.reference = None;
                    self.event(Event::Error(format!("the reference run stopped: {e}")));
                }
            }
            left -= k;
            // A rollback state every `checkpoint_every` steps, but spaced in wall time so that
            // copying the state (a GiB on a large GPU grid) costs at most ~5 % of the run.
            let due = (now + k) % self.checkpoint_every == 0 && self.pacer.due();
            if due {
                // Only a sane state becomes the rollback state.
                let st = self.solver.stats();
                if let Err(why) = self.sanity(&st) {
                    self.blow_up(&st, why);
                    return;
                }
                let (solver, flags, mass0) = (&self.solver, &self.flags, self.mass0);
                self.last_good = self.pacer.take(|| Arc::new(Saved { ckpt: solver.checkpoint(), flags: Arc::clone(flags), mass0 }));
            }
        }
        let dt = self.rate_t0.elapsed().as_secs_f64();
        if dt > 0.5 {
            self.steps_per_sec = (self.solver.time_step().saturating_sub(self.rate_steps0)) as f64 / dt;
            self.rate_t0 = Instant::now();
            self.rate_steps0 = self.solver.time_step();
        }
        self.dirty = true;
    }

    fn blow_up(&mut self, st: &Stats, why: String) {
        self.blown = true;
        self.running = false;
        self.event(Event::BlownUp { step: st.step, why, last_good: self.last_good.ckpt.step });
    }

    /// Whether a state is sane around the run's reference density ([`Stats::sanity`]).
    fn sanity(&self, st: &Stats) -> Result<(), String> {
        st.sanity(f64::from(self.solver.domain().rho0))
    }

    /// The cells a frame carries (3D, planes known): the slice planes alone when the view
    /// draws nothing else; with an isosurface marched on cubes of 2 cells or more, or with
    /// the velocity for tracers of a large grid, the lattice they read (the finer of the two:
    /// both strides are powers of two or the isosurface's stride is a multiple of the
    /// velocity's) and the slice planes; else every cell.
    fn frame_region(&self) -> FrameRegion {
        let n = self.solver.domain().n;
        let Some(k) = self.slices.filter(|_| n[2] > 1) else { return FrameRegion::All };
        let planes = std::array::from_fn(|a| k[a].map(|i| i.min(n[a] - 1)));
        let iso = self.iso.map(|_| self.iso_stride as usize);
        let velocity = self.velocity.then(|| super::frames::velocity_stride(n.iter().product()));
        let stride = match (iso, velocity) {
            (None, None) if k.iter().any(Option::is_some) => return FrameRegion::Planes(planes),
            (None, None) => 1,
            (Some(a), Some(b)) => super::frames::gcd(a, b),
            (Some(a), None) | (None, Some(a)) => a,
        };
        if stride >= 2 {
            FrameRegion::Sampled { stride, planes }
        } else {
            FrameRegion::All
        }
    }

    /// Whole frames and frames with the velocity come from the last step of each batch where the
    /// backend can (no pass of their own over the state); frames of a few planes are cheaper
    /// computed on their own, but
    /// the stats (sums over the grid) still ride on the batch after which they are due.
    fn update_fusion(&mut self) {
        // Frames with the velocity for tracers read the whole volume (every cell or a lattice
        // whose cells lie on every cache line of the state): the planes come from the last step
        // too, rather than from a pass of their own over the state.
        let whole = self.frame_region() == FrameRegion::All || self.velocity;
        let stats_due = self.stats.as_ref().is_none_or(|(at, _)| at.elapsed() >= STATS_EVERY);
        self.solver.fuse_frame_fields(whole || stats_due);
    }

    /// The fields a frame carries: the slices' field, with an isosurface on (3D) its field and
    /// the speed that colours it, with tracers the velocity components, each once.
    fn frame_kinds(&self) -> Vec<FieldKind> {
        let mut kinds = vec![self.field];
        let iso = self.iso.filter(|_| self.solver.domain().n[2] > 1).map(|k| [k, FieldKind::Speed]);
        let velocity = self.velocity.then_some(super::frames::VELOCITY);
        for k in iso.iter().flatten().chain(velocity.iter().flatten()) {
            if !kinds.contains(k) {
                kinds.push(*k);
            }
        }
        kinds
    }

    /// The probes' samples of the current state: with every snapshot where sampling is cheap
    /// (a CPU grid reads just the probed cells), less often where it is not (a GPU backend
    /// without its own probe reads the whole field), so that it takes at most [`PROBE_SHARE`]
    /// of the time; none while the last sampling is too recent. A failure is said once and
    /// the probes are dropped.
    fn sample_probes(&mut self) -> Vec<sim_core::probes::ProbeSample> {
        if self.probe_cells.is_empty() {
            return Vec::new();
        }
        if let Some((at, took)) = self.probe_cost {
            if at.elapsed().as_secs_f64() * PROBE_SHARE < took.as_secs_f64() {
                return Vec::new();
            }
        }
        let t = Instant::now();
        match self.solver.probe(&self.probe_cells) {
            Ok(s) => {
                self.probe_cost = Some((Instant::now(), t.elapsed()));
                s
            }
            Err(e) => {
                self.probe_cells.clear();
                self.event(Event::Error(format!("the probes could not be sampled ({e}): removed")));
                Vec::new()
            }
        }
    }

    fn publish(&mut self) {
        let t = Instant::now();
        let kinds = self.frame_kinds();
        let region = self.frame_region();
        let frame = match self.frames.write(self.solver.as_mut(), &kinds, region) {
            Ok(Some(f)) => f,
            // Every frame is still held by the window: publish after the next batch.
            Ok(None) => return,
            Err(e) => {
                self.running = false;
                self.dirty = false;
                self.event(Event::Error(format!("the view's fields could not be computed: {e}")));
                return;
            }
        };
        let finite = frame.ranges.finite;
        let lag = frame.ranges.lag;
        let min_max = frame.range(self.field).unwrap_or((0.0, 0.0));
        let robust = self.robust.of(&frame, self.field, &self.solid);
        let probes = self.sample_probes();
        let iso = self.iso.filter(|_| self.solver.domain().n[2] > 1).map(|kind| IsoData {
            kind,
            min_max: frame.range(kind).unwrap_or((0.0, 0.0)),
            speed_min_max: frame.range(FieldKind::Speed).unwrap_or((0.0, 0.0)),
        });
        // Stats (mass, forces: reductions over the grid) at most 10 times a second, and at
        // once when the field shows non-finite values or the step went back.
        let step = self.solver.time_step();
        let fresh = self.stats.as_ref().is_some_and(|(at, st)| at.elapsed() < STATS_EVERY && st.step <= step && finite);
        if !fresh {
            self.stats = Some((Instant::now(), self.solver.stats()));
        }
        let stats = self.stats.as_ref().map(|(_, st)| st.clone()).unwrap_or_default();
        if !self.blown {
            let why = self.sanity(&stats).err().or_else(|| (!finite).then(|| "the view's field has non-finite values".to_string()));
            if let Some(why) = why {
                self.blow_up(&stats, why);
            }
        }
        // Never show garbage: neither a frame with a non-finite fluid value nor numbers for the
        // panels that are not finite (the stats sum the whole grid; a frame fused into the last
        // step is a step behind them, and cached stats may be up to STATS_EVERY old). The view
        // keeps the last snapshot it had, the run is paused and the blow-up event says why.
        let stats_finite = !stats.blown_up() && stats.rho_range.iter().all(|r| r.is_finite());
        if !finite || !stats_finite {
            self.dirty = false;
            return;
        }
        let d = self.solver.domain();
        let snap = Snapshot {
            serial: self.serial,
            step: self.solver.time_step() - lag,
            size: d.n,
            field: self.field,
            frame,
            min_max,
            robust,
            iso,
            solid: Arc::clone(&self.solid),
            bricks: Arc::clone(&self.bricks),
            solver_serial: self.solver_serial,
            stats,
            params: self.solver.params(),
            info: self.solver.info(),
            compression: self.solver.compression(),
            reference: self.reference_data(),
            amr: self.solver.amr(),
            obstacles: d.obstacles.clone(),
            mass0: self.mass0,
            solver_secs_per_step: self.solver_secs_per_step,
            fields_secs: t.elapsed().as_secs_f64(),
            mlups: self.mlups,
            steps_per_sec: if self.running { self.steps_per_sec } else { 0.0 },
            edit_seq: self.edit_seq,
            undo_depth: self.strokes.len(),
            probes,
            probe_cells: self.probe_cells.clone(),
            inlet: super::frames::inlet_box(d),
        };
        self.serial += 1;
        *self.mailbox.lock().unwrap_or_else(PoisonError::into_inner) = Some(snap);
        self.dirty = false;
    }
}
