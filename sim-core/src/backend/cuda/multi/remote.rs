//! One slab per process: the grid of a launch of `W` processes (`mpirun`, `srun`, `torchrun`)
//! cut into `W` slabs, slab `k` on rank `k`'s GPU. Rank 0 holds the [`MultiCudaSolver`] the
//! program uses (its own slab, and [`Followers`] for the others); every other rank builds its
//! slab and serves rank 0's commands ([`follow`]) until rank 0 says stop.
//!
//! **Start.** Every rank voxelises the scene and builds its slab, then tells rank 0 whether it
//! could, with the checksum of the grid it built; rank 0 stops all of them with one message
//! where one could not (or loaded another scene), else sends an NCCL unique id and all join one
//! communicator (`ncclCommInitRank`), the slab's index its rank there.
//!
//! **Run.** Steps: rank 0 tells the others how many, all queue them (each step's halo exchange
//! pairs the neighbours' sends and receives through NCCL), then rank 0 reads their answers.
//! Fields, statistics and checkpoint data: each rank sends its own layers to rank 0, which joins
//! them in slab order into the whole grid's (checkpoints are the dense format, so they resume
//! on any number of processes or GPUs). A restore sends each rank its slab of the checkpoint.
//!
//! **A rank that dies.** Each side watches its connections: where a peer's process ends while
//! this one may be waiting on it inside the GPU (an exchange that never comes), this process
//! stops with one message instead of hanging; rank 0 answers errors of the others' commands
//! with the rank and host that failed.

use super::{MultiCudaSolver, Nccl};
use crate::checkpoint::Checkpoint;
use crate::domain::Domain;
use crate::fields::Fields;
use crate::params::Params;
use crate::ranks::rendezvous::Cluster;
use crate::ranks::wire::{Dec, Enc, Link};
use crate::ranks::Rank;
use crate::scene::LoadedScene;
use crate::solver::{SolverError, Stats};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(super) const STEP: u8 = 10;
pub(super) const SYNC: u8 = 11;
const STATS: u8 = 12;
const FIELDS: u8 = 13;
const CHECKPOINT: u8 = 14;
pub(super) const RESTORE: u8 = 15;
pub(super) const PARAMS: u8 = 16;
const QUIT: u8 = 17;
const EDGES: u8 = 18;
const PIECE: u8 = 19;
const OK: u8 = 20;
const ERR: u8 = 21;
const READY: u8 = 30;
const NCCL_ID: u8 = 31;
const ABORT: u8 = 32;

/// Exit code of a process that stops because another rank of its launch is gone.
pub const EXIT_RANK_LOST: i32 = 4;

/// Rank 0's side of the other ranks.
pub struct Followers {
    /// To ranks 1.. in order (a link's peer is its rank and slab).
    links: Vec<Link>,
    /// Every rank's host.
    hosts: Vec<String>,
    /// The device and memory of each other rank's slab.
    devices: Vec<String>,
    memory: u64,
    /// Set when rank 0 ends the run: a closed connection is then no loss.
    closing: Arc<AtomicBool>,
    /// Set while rank 0 waits for answers: a lost rank is then reported by the call.
    waiting: Arc<AtomicBool>,
    /// The first failure of a call that cannot return one (fields, stats, checkpoint data):
    /// every later command returns it.
    failure: RefCell<Option<String>>,
}

impl Followers {
    pub(super) fn devices(&self) -> &[String] {
        &self.devices
    }
    pub(super) fn memory_bytes(&self) -> u64 {
        self.memory
    }
    pub(super) fn links(&self) -> &[Link] {
        &self.links
    }
    /// Whether a call failed (the communicator is then aborted, not destroyed).
    pub(super) fn broken(&self) -> bool {
        self.failure.borrow().is_some()
    }

    fn who(&self, rank: usize) -> String {
        format!("rank {rank} on {}", self.hosts.get(rank).map_or("?", String::as_str))
    }

    fn lost(&self, link: &Link, e: &std::io::Error) -> SolverError {
        let m = format!("{} is gone ({e}); the run cannot go on without its slab", self.who(link.peer));
        self.failure.borrow_mut().get_or_insert(m.clone());
        SolverError::Backend(m)
    }

    /// The failure of an earlier call, if any.
    pub(super) fn failed(&self) -> Result<(), SolverError> {
        match &*self.failure.borrow() {
            Some(m) => Err(SolverError::Backend(m.clone())),
            None => Ok(()),
        }
    }

    pub(super) fn send(&self, link: &Link, tag: u8, payload: &[u8]) -> Result<(), SolverError> {
        link.send(tag, payload).map_err(|e| self.lost(link, &e))
    }

    pub(super) fn send_all(&self, tag: u8, payload: &[u8]) -> Result<(), SolverError> {
        for l in &self.links {
            self.send(l, tag, payload)?;
        }
        Ok(())
    }

    /// Every rank's answer to the last command, in rank order; the first error (all are read,
    /// so that the next command meets no stale answer).
    pub(super) fn replies(&self) -> Result<Vec<Vec<u8>>, SolverError> {
        self.waiting.store(true, Ordering::SeqCst);
        let mut out = Vec::with_capacity(self.links.len());
        let mut first = None;
        for l in &self.links {
            match l.recv() {
                Ok((OK, b)) => out.push(b),
                Ok((ERR, why)) => {
                    first.get_or_insert_with(|| SolverError::Backend(format!("{}: {}", self.who(l.peer), String::from_utf8_lossy(&why))));
                    out.push(Vec::new());
                }
                Ok((t, _)) => {
                    first.get_or_insert_with(|| SolverError::Backend(format!("{} answered with message {t} (a bug)", self.who(l.peer))));
                    out.push(Vec::new());
                }
                Err(e) => {
                    first.get_or_insert_with(|| self.lost(l, &e));
                    out.push(Vec::new());
                }
            }
        }
        self.waiting.store(false, Ordering::SeqCst);
        match first {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    pub(super) fn call(&self, tag: u8, payload: &[u8]) -> Result<Vec<Vec<u8>>, SolverError> {
        self.failed()?;
        self.send_all(tag, payload)?;
        self.replies()
    }

    /// A call whose failure is kept for the next command (the callers return no error).
    fn call_keeping(&self, tag: u8) -> Option<Vec<Vec<u8>>> {
        match self.call(tag, &[]) {
            Ok(r) => Some(r),
            Err(e) => {
                self.failure.borrow_mut().get_or_insert(e.to_string());
                None
            }
        }
    }

    /// The other slabs' own fields (NaN where a rank could not answer).
    pub(super) fn fields(&self, slabs: &[(usize, usize)], n: [usize; 3], axis: usize) -> Vec<(usize, Fields)> {
        let answers = self.call_keeping(FIELDS);
        self.links
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let decoded = answers.as_ref().and_then(|a| decode_fields(&a[i]).ok());
                let f = decoded.unwrap_or_else(|| {
                    let mut size = n;
                    size[axis] = slabs[l.peer].1;
                    let cells = size.iter().product();
                    Fields { size, rho: vec![f32::NAN; cells], u: vec![[f32::NAN; 3]; cells], solid: vec![false; cells] }
                });
                (l.peer, f)
            })
            .collect()
    }

    /// The other slabs' statistics (unreadable where a rank could not answer).
    pub(super) fn stats(&self, t: u64) -> Vec<(usize, Stats)> {
        let answers = self.call_keeping(STATS);
        self.links
            .iter()
            .enumerate()
            .map(|(i, l)| (l.peer, answers.as_ref().and_then(|a| decode_stats(&a[i]).ok()).unwrap_or_else(|| Stats::unreadable(t))))
            .collect()
    }

    /// The other slabs' checkpoint data of their own layers (empty where a rank could not
    /// answer: such a checkpoint is refused on restore).
    pub(super) fn checkpoint_data(&self) -> Vec<(usize, Vec<u8>)> {
        let answers = self.call_keeping(CHECKPOINT).unwrap_or_default();
        let mut answers = answers.into_iter();
        self.links.iter().map(|l| (l.peer, answers.next().unwrap_or_default())).collect()
    }
}

impl Drop for Followers {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        for l in &self.links {
            let _ = l.send(QUIT, &[]);
        }
    }
}

/// Watch a connection from a thread of its own: where the other process ends while this one
/// is not waiting to read from it (and the run is not ending), this process may be waiting
/// for it inside the GPU, where nothing would ever come: it stops with `why`.
fn watch(link: &Link, why: String, closing: Arc<AtomicBool>, reading: Arc<AtomicBool>) {
    let Ok(s) = link.watcher() else { return };
    std::thread::spawn(move || {
        let mut b = [0u8; 1];
        loop {
            match s.peek(&mut b) {
                Ok(n) if n > 0 => std::thread::sleep(std::time::Duration::from_millis(20)),
                _ => {
                    if closing.load(Ordering::SeqCst) || reading.load(Ordering::SeqCst) {
                        return;
                    }
                    eprintln!("error: {why}");
                    std::process::exit(EXIT_RANK_LOST);
                }
            }
        }
    });
}

pub(super) fn step_message(steps: u64, fuse: bool) -> Vec<u8> {
    let mut e = Enc::new();
    e.u64(steps).u64(u64::from(fuse));
    e.0
}

/// Parameters travel in the checkpoint header's words.
pub(super) fn params_message(p: &Params) -> Vec<u8> {
    Checkpoint {
        lattice: crate::lattice::Lattice::D2Q9,
        precision: crate::precision::Precision::Fp32,
        size: [0; 3],
        flags_crc: 0,
        step: 0,
        params: p.clone(),
        data: Vec::new(),
        probes: Vec::new(),
    }
    .to_bytes()
}

fn encode_stats(s: &Stats) -> Vec<u8> {
    let mut e = Enc::new();
    e.u64(s.step).f64(s.mass).f64(s.max_u).f64(s.rho_range[0]).f64(s.rho_range[1]).u64(s.forces.len() as u64);
    for f in &s.forces {
        e.f64(f[0]).f64(f[1]).f64(f[2]);
    }
    match s.first_bad_cell {
        Some(c) => e.u64(1).u64(c[0] as u64).u64(c[1] as u64).u64(c[2] as u64),
        None => e.u64(0),
    };
    e.0
}

fn decode_stats(b: &[u8]) -> Result<Stats, String> {
    let mut d = Dec::new(b);
    let (step, mass, max_u, r0, r1) = (d.u64()?, d.f64()?, d.f64()?, d.f64()?, d.f64()?);
    let n = d.u64()?;
    let mut forces = Vec::new();
    for _ in 0..n {
        forces.push([d.f64()?, d.f64()?, d.f64()?]);
    }
    let first_bad_cell = if d.u64()? == 1 { Some([d.u64()? as usize, d.u64()? as usize, d.u64()? as usize]) } else { None };
    Ok(Stats { step, mass, max_u, rho_range: [r0, r1], forces, first_bad_cell })
}

fn encode_fields(f: &Fields) -> Vec<u8> {
    let mut e = Enc::new();
    e.u64(f.size[0] as u64).u64(f.size[1] as u64).u64(f.size[2] as u64);
    e.bytes(bytemuck::cast_slice(&f.rho)).bytes(bytemuck::cast_slice(&f.u));
    let solid: Vec<u8> = f.solid.iter().map(|&s| u8::from(s)).collect();
    e.bytes(&solid);
    e.0
}

fn decode_fields(b: &[u8]) -> Result<Fields, String> {
    let mut d = Dec::new(b);
    let size = [d.u64()? as usize, d.u64()? as usize, d.u64()? as usize];
    let cells = size[0].saturating_mul(size[1]).saturating_mul(size[2]);
    let rho: Vec<f32> = d.bytes()?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let flat: Vec<f32> = d.bytes()?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let u: Vec<[f32; 3]> = flat.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
    let solid: Vec<bool> = d.bytes()?.iter().map(|&s| s != 0).collect();
    if rho.len() != cells || u.len() != cells || solid.len() != cells {
        return Err("fields of the wrong size".into());
    }
    Ok(Fields { size, rho, u, solid })
}

/// The GPU of a rank: its place among the ranks of its machine (the launcher's local rank,
/// else its rank) over the devices it sees; `ESOFLOW_GPUS=a,b,...` lists the devices for the
/// local ranks 0, 1, ... instead.
///
/// # Errors
/// A bad `ESOFLOW_GPUS`; no CUDA device.
pub fn rank_device(r: &Rank) -> Result<usize, SolverError> {
    let local = r.local.unwrap_or(r.rank);
    if let Ok(v) = std::env::var("ESOFLOW_GPUS") {
        let list: Vec<usize> = v
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| SolverError::Backend(format!("ESOFLOW_GPUS={v}: expected device ordinals, e.g. 0,1")))?;
        return list.get(local % list.len().max(1)).copied().ok_or_else(|| SolverError::Backend(format!("ESOFLOW_GPUS={v}: no devices")));
    }
    super::probe().map_err(SolverError::Backend)?;
    let count = cudarc::driver::CudaContext::device_count().map_err(super::derr("counting devices"))?.max(1) as usize;
    Ok(local % count)
}

/// This rank's slab of the scene's grid, cut into one slab per rank.
fn rank_part(ls: &LoadedScene, r: &Rank) -> Result<MultiCudaSolver, SolverError> {
    let dom = Domain::from_scene(ls).map_err(|e| SolverError::Backend(e.to_string()))?;
    let params = Params::from_scene(ls, &dom);
    let s = &ls.scene.solver;
    let device = rank_device(r)?;
    MultiCudaSolver::assemble(dom, s.scheme, s.precision, params, r.world, &[(r.rank, device)], |p| crate::domain::initial_state(ls, p))
}

/// Checksum of the scene a rank loaded (after its `--set`) and of the grid it built from it:
/// every rank must run the same (a different viscosity or initial state would not show in the
/// grid, and the slabs would silently disagree).
fn scene_crc(ls: &LoadedScene, m: &MultiCudaSolver) -> u64 {
    let d = m.mirror.domain();
    (u64::from(crc32fast::hash(format!("{:?}", ls.scene).as_bytes())) << 32) | u64::from(crc32fast::hash(&d.flags))
}

/// Join this rank's part to the launch's NCCL communicator.
fn join_nccl(m: &mut MultiCudaSolver, id: &[u8], r: &Rank) -> Result<(), SolverError> {
    let mut uid = cudarc::nccl::sys::ncclUniqueId { internal: [0; 128] };
    if id.len() != uid.internal.len() {
        return Err(SolverError::Backend("rank 0 sent an NCCL id of the wrong size".into()));
    }
    for (a, &b) in uid.internal.iter_mut().zip(id) {
        *a = b as _;
    }
    m.parts[0].s.context().bind_to_thread().map_err(super::derr("binding the CUDA context"))?;
    let mut comm = std::ptr::null_mut();
    // SAFETY: `comm` receives one communicator; every rank of the launch calls this with the
    // same id and its own rank.
    unsafe { cudarc::nccl::result::comm_init_rank(&mut comm, r.world as i32, uid, r.rank as i32) }.map_err(|e| {
        SolverError::Backend(format!(
            "rank {} could not join the NCCL communicator of {} processes ({e:?}); each rank needs a GPU of its own (two ranks on one GPU are refused by NCCL)",
            r.rank, r.world
        ))
    })?;
    m.nccl = Some(Nccl(vec![comm]));
    m.transport = "NCCL";
    Ok(())
}

fn ready_message(ls: &LoadedScene, built: &Result<MultiCudaSolver, SolverError>) -> Vec<u8> {
    use crate::solver::Solver;
    let mut e = Enc::new();
    match built {
        Ok(m) => {
            let i = m.parts[0].s.info();
            e.u64(1).str(&i.device).u64(i.memory_bytes).u64(scene_crc(ls, m));
        }
        Err(why) => {
            e.u64(0).str(&why.to_string());
        }
    }
    e.0
}

/// Rank 0 stops the start of every other rank, with why (they wait for its word after
/// building their slabs).
pub fn abort(cluster: &Cluster, why: &str) {
    for l in &cluster.links {
        let _ = l.send(ABORT, why.as_bytes());
    }
    // Their word of how the build went, before the connections close (a rank writing into a
    // closed connection could lose the reason waiting for it).
    for l in &cluster.links {
        let _ = l.stream.set_read_timeout(Some(std::time::Duration::from_secs(30)));
        let _ = l.recv();
    }
}

impl MultiCudaSolver {
    /// Rank 0 of a launch: the whole grid, one slab per process, this process holding slab 0
    /// and steering the others ([`follow`]).
    ///
    /// # Errors
    /// Any rank's failure to build its slab or to join NCCL, named with its rank and host; a
    /// rank that loaded another scene (another file or `--set`).
    pub fn lead(ls: &LoadedScene, cluster: Cluster) -> Result<MultiCudaSolver, SolverError> {
        let Cluster { rank, links, hosts } = cluster;
        let who = |r: usize| format!("rank {r} on {}", hosts.get(r).map_or("?", String::as_str));
        let built = rank_part(ls, &rank);
        let mut problems = Vec::new();
        if let Err(e) = &built {
            problems.push(format!("{}: {e}", who(0)));
        }
        let mine = built.as_ref().ok().map(|m| scene_crc(ls, m));
        let (mut devices, mut memory) = (Vec::new(), 0u64);
        for l in &links {
            let answer = l.recv().map_err(|e| e.to_string()).and_then(|(t, b)| {
                if t != READY {
                    return Err(format!("message {t} instead of its start"));
                }
                let mut d = Dec::new(&b);
                if d.u64()? == 0 {
                    return Err(d.str()?);
                }
                Ok((d.str()?, d.u64()?, d.u64()?))
            });
            match answer {
                Ok((dev, mem, crc)) => {
                    if mine.is_some_and(|c| c != crc) {
                        problems.push(format!(
                            "{} loaded another scene than rank 0 (another file, or other --set values): start every rank with the same command",
                            who(l.peer)
                        ));
                    }
                    devices.push(dev);
                    memory += mem;
                }
                Err(why) => problems.push(format!("{}: {why}", who(l.peer))),
            }
        }
        if !problems.is_empty() {
            let text = problems.join("; ");
            for l in &links {
                let _ = l.send(ABORT, text.as_bytes());
            }
            return Err(SolverError::Backend(text));
        }
        let mut m = built?;
        let id = cudarc::nccl::result::get_uniqueid()
            .map_err(|e| SolverError::Backend(format!("NCCL could not make an id for the launch ({e:?}); is libnccl installed?")))?;
        let id: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        for l in &links {
            l.send(NCCL_ID, &id).map_err(|e| SolverError::Backend(format!("{} is gone ({e})", who(l.peer))))?;
        }
        join_nccl(&mut m, &id, &rank)?;
        let (closing, waiting) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        for l in &links {
            watch(
                l,
                format!("{} stopped during the run; rank 0 stops too (the files written so far are whole)", who(l.peer)),
                closing.clone(),
                waiting.clone(),
            );
        }
        m.remote = Some(Followers { links, hosts, devices, memory, closing, waiting, failure: RefCell::new(None) });
        Ok(m)
    }
}

/// A rank other than 0: build this rank's slab, join the launch and serve rank 0's commands
/// until it says stop (or ends).
///
/// # Errors
/// This rank's slab could not be built, or rank 0 stopped the start (its message says why).
pub fn follow(ls: &LoadedScene, cluster: Cluster) -> Result<(), SolverError> {
    let rank = cluster.rank.clone();
    let link = cluster.links.into_iter().next().ok_or_else(|| SolverError::Backend("no connection to rank 0".into()))?;
    let built = rank_part(ls, &rank);
    let lost = |e: std::io::Error| SolverError::Backend(format!("rank {}: rank 0 is gone ({e})", rank.rank));
    // Rank 0 may have stopped the start already: its word is read even where this one fails.
    let _ = link.send(READY, &ready_message(ls, &built));
    let (tag, b) = link.recv().map_err(lost)?;
    if tag == ABORT {
        // Rank 0 says why (this rank's failure among the reasons).
        return Err(SolverError::Backend(format!("rank {}: stopped with rank 0 (its message says why)", rank.rank)));
    }
    let mut m = built?;
    if tag != NCCL_ID {
        return Err(SolverError::Backend(format!("rank 0 sent message {tag} instead of the NCCL id")));
    }
    join_nccl(&mut m, &b, &rank)?;
    let (closing, reading) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
    watch(&link, format!("rank {}: rank 0 stopped during the run; this rank stops too", rank.rank), closing.clone(), reading.clone());
    // The own fields read for the edges of an export, kept for its piece (one read, not two).
    let mut own = None;
    loop {
        reading.store(true, Ordering::SeqCst);
        let Ok((tag, b)) = link.recv() else {
            // Rank 0 ended without a word (it exited after an error of its own).
            return Ok(());
        };
        reading.store(false, Ordering::SeqCst);
        let answer = match tag {
            QUIT => {
                closing.store(true, Ordering::SeqCst);
                return Ok(());
            }
            _ => serve(&mut m, &mut own, tag, &b),
        };
        let sent = match answer {
            Ok(out) => link.send(OK, &out),
            Err(e) => link.send(ERR, e.to_string().as_bytes()),
        };
        if sent.is_err() {
            return Ok(());
        }
    }
}

/// One command of rank 0 on this rank's slab.
fn serve(m: &mut MultiCudaSolver, own: &mut Option<Fields>, tag: u8, b: &[u8]) -> Result<Vec<u8>, SolverError> {
    use crate::solver::Solver;
    let bad = |e: String| SolverError::Backend(format!("a damaged command from rank 0: {e}"));
    // Kept only from an export's edges to its piece: any other command may change the state.
    if tag != PIECE {
        *own = None;
    }
    match tag {
        STEP => {
            let mut d = Dec::new(b);
            let (steps, fuse) = (d.u64().map_err(bad)?, d.u64().map_err(bad)? == 1);
            m.local_steps(steps, fuse)?;
            Ok(Vec::new())
        }
        SYNC => m.local_sync().map(|()| Vec::new()),
        STATS => Ok(encode_stats(&m.parts[0].s.stats())),
        FIELDS => Ok(m.own_fields().first().map(|(_, f)| encode_fields(f)).unwrap_or_default()),
        CHECKPOINT => Ok(m.own_checkpoint_data().0.into_iter().next().map(|(_, d)| d).unwrap_or_default()),
        RESTORE => {
            let c = Checkpoint::from_bytes(b).map_err(bad)?;
            m.parts[0].s.restore(&c)?;
            m.mirror.set_params(c.params.clone())?;
            m.t = c.step;
            Ok(Vec::new())
        }
        PARAMS => {
            let p = Checkpoint::from_bytes(b).map_err(bad)?.params;
            m.mirror.set_params(p.clone())?;
            m.parts[0].s.set_params(p)?;
            Ok(Vec::new())
        }
        EDGES => {
            let (_, f) = m.own_fields().into_iter().next().ok_or_else(|| SolverError::Backend("no slab here".into()))?;
            let out = encode_fields(&edges(&f, m.axis));
            *own = Some(f);
            Ok(out)
        }
        PIECE => {
            let mut d = Dec::new(b);
            let path = std::path::PathBuf::from(d.str().map_err(bad)?);
            let lo = d.u64().map_err(bad)? as usize;
            let overlap = d.u64().map_err(bad)? == 1;
            let below = decode_fields(d.bytes().map_err(bad)?).map_err(bad)?;
            let above = decode_fields(d.bytes().map_err(bad)?).map_err(bad)?;
            let f = match own.take() {
                Some(f) => f,
                None => m.own_fields().into_iter().next().ok_or_else(|| SolverError::Backend("no slab here".into()))?.1,
            };
            write_piece(&path, &below, &f, &above, m.axis, lo, overlap)?;
            Ok(Vec::new())
        }
        t => Err(SolverError::Backend(format!("unknown command {t} from rank 0"))),
    }
}

/// Layers `r` of fields `f` along `axis` (the slowest of its axes).
pub(super) fn layers(f: &Fields, axis: usize, r: std::ops::Range<usize>) -> Fields {
    let lc: usize = f.size[..axis].iter().product();
    let mut size = f.size;
    size[axis] = r.len();
    let c = r.start * lc..r.end * lc;
    Fields { size, rho: f.rho[c.clone()].to_vec(), u: f.u[c.clone()].to_vec(), solid: f.solid[c].to_vec() }
}

/// Fields stacked along `axis` (each the same cross-section).
fn stack(parts: &[&Fields], axis: usize) -> Fields {
    let mut size = parts[0].size;
    size[axis] = parts.iter().map(|f| f.size[axis]).sum();
    let mut out = Fields { size, rho: Vec::new(), u: Vec::new(), solid: Vec::new() };
    for f in parts {
        out.rho.extend_from_slice(&f.rho);
        out.u.extend_from_slice(&f.u);
        out.solid.extend_from_slice(&f.solid);
    }
    out
}

/// What a slab's neighbours need of it for their pieces: its first two own layers (for the
/// slab below) and its last (for the slab above), in that order.
fn edges(own: &Fields, axis: usize) -> Fields {
    let n = own.size[axis];
    stack(&[&layers(own, axis, 0..2), &layers(own, axis, n - 1..n)], axis)
}

/// Write a slab's piece: its own layers (and, where `overlap`, the next slab's first, so that
/// the pieces meet without a gap), their vorticity and Q from the neighbours' layers.
fn write_piece(
    path: &std::path::Path,
    below: &Fields,
    own: &Fields,
    above: &Fields,
    axis: usize,
    lo: usize,
    overlap: bool,
) -> Result<(), SolverError> {
    let block = stack(&[below, own, above], axis);
    let len = own.size[axis];
    crate::export::write_fields_vti_piece(path, &block, axis, 1..1 + len + usize::from(overlap), lo).map_err(SolverError::Backend)
}

/// The fields of a launch as a `.pvti` with one piece per slab, each written by its process
/// (rank 0 sends every rank its neighbours' edge layers and the file to write).
pub(super) fn write_pieces(
    m: &MultiCudaSolver,
    r: &Followers,
    dir: &std::path::Path,
    stem: &str,
) -> Result<Vec<std::path::PathBuf>, SolverError> {
    let axis = m.axis;
    let k = m.slabs.len();
    let (_, own) = m.own_fields().into_iter().next().ok_or_else(|| SolverError::Backend("no slab on rank 0".into()))?;
    let mut all_edges = vec![edges(&own, axis)];
    for b in r.call(EDGES, &[])? {
        all_edges.push(decode_fields(&b).map_err(SolverError::Backend)?);
    }
    // Of slab s: the layer below it and the two above it (the ring wraps).
    let below = |s: usize| layers(&all_edges[(s + k - 1) % k], axis, 2..3);
    let above = |s: usize| layers(&all_edges[(s + 1) % k], axis, 0..2);
    let file = |s: usize| format!("{stem}.piece{s}.vti");
    let mut written = Vec::with_capacity(k + 1);
    for l in &r.links {
        let s = l.peer;
        let mut e = Enc::new();
        let path = dir.join(file(s));
        e.str(&path.to_string_lossy()).u64(m.slabs[s].0 as u64).u64(u64::from(s + 1 < k));
        e.bytes(&encode_fields(&below(s))).bytes(&encode_fields(&above(s)));
        r.send(l, PIECE, &e.0)?;
        written.push(path);
    }
    let mine = write_piece(&dir.join(file(0)), &below(0), &own, &above(0), axis, m.slabs[0].0, k > 1);
    r.replies()?;
    mine?;
    written.insert(0, dir.join(file(0)));
    let pieces: Vec<(String, usize, usize)> =
        m.slabs.iter().enumerate().map(|(s, &(lo, len))| (file(s), lo, lo + len - 1 + usize::from(s + 1 < k))).collect();
    let pvti = dir.join(format!("{stem}.pvti"));
    crate::export::write_fields_pvti(&pvti, m.mirror.domain().n, axis, &pieces)
        .map_err(|e| SolverError::Backend(format!("{}: {e}", pvti.display())))?;
    written.insert(0, pvti);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_and_fields_cross_intact() {
        let s = Stats {
            step: 12,
            mass: 1.5e6,
            max_u: f64::NAN,
            rho_range: [0.99, 1.01],
            forces: vec![[1.0, -2.0, 3.5], [0.0, 0.25, f64::INFINITY]],
            first_bad_cell: Some([3, 4, 5]),
        };
        let back = decode_stats(&encode_stats(&s)).unwrap();
        assert_eq!(
            (back.step, back.mass, back.rho_range, &back.forces, back.first_bad_cell),
            (12, 1.5e6, [0.99, 1.01], &s.forces, Some([3, 4, 5]))
        );
        assert!(back.max_u.is_nan());
        let f =
            Fields { size: [2, 1, 2], rho: vec![1.0, 1.5, -0.0, 2.0], u: vec![[0.1, 0.2, 0.3]; 4], solid: vec![true, false, false, true] };
        assert_eq!(decode_fields(&encode_fields(&f)).unwrap(), f);
        assert!(decode_fields(&encode_fields(&f)[..20]).is_err());
        let p = Params::timing_box(crate::collision::Collision::Bgk);
        assert_eq!(Checkpoint::from_bytes(&params_message(&p)).unwrap().params, p);
    }

    /// Each slab's piece, built from its own layers and its neighbours' edge layers as a launch
    /// builds it, carries the whole grid's values, vorticity and Q (the cut axis wraps), and
    /// the .pvti joins the pieces without a gap.
    #[test]
    fn pieces_carry_the_whole_grids_fields_and_join_without_a_gap() {
        let text = "[domain]\nsize = [14, 10, 18]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.04, 0.0, 0.0] }\nx_max = \"outlet\"\n[fluid]\ntau = 0.6\n[[obstacles]]\nshape = \"sphere\"\ncenter = [6, 5, 8]\nradius = 3.0\n";
        let ls = crate::scene::from_str(text, "test.toml", std::path::PathBuf::from("."), &[]).unwrap();
        let mut s = crate::build::cpu(&ls).unwrap();
        s.step(40).unwrap();
        let f = s.fields();
        let (axis, n) = (2, f.size);
        let (vw, qw) = (crate::fields::vorticity(&f), crate::fields::q_criterion(&f));
        let lc = n[0] * n[1];
        let slabs = super::super::split(n[axis], 3);
        let owns: Vec<Fields> = slabs.iter().map(|&(lo, len)| layers(&f, axis, lo..lo + len)).collect();
        let all: Vec<Fields> = owns.iter().map(|o| edges(o, axis)).collect();
        let dir = tempfile::tempdir().unwrap();
        let k = slabs.len();
        for (i, &(lo, len)) in slabs.iter().enumerate() {
            let below = layers(&all[(i + k - 1) % k], axis, 2..3);
            let above = layers(&all[(i + 1) % k], axis, 0..2);
            let block = stack(&[&below, &owns[i], &above], axis);
            let keep = len + usize::from(i + 1 < k);
            let (vb, qb) = (crate::fields::vorticity(&block), crate::fields::q_criterion(&block));
            assert_eq!(&vb[lc..lc * (1 + keep)], &vw[lc * lo..lc * (lo + keep)], "slab {i}: vorticity");
            assert_eq!(&qb[lc..lc * (1 + keep)], &qw[lc * lo..lc * (lo + keep)], "slab {i}: Q");
            assert_eq!(&block.rho[lc..lc * (1 + keep)], &f.rho[lc * lo..lc * (lo + keep)], "slab {i}: rho");
            write_piece(&dir.path().join(format!("f.piece{i}.vti")), &below, &owns[i], &above, axis, lo, i + 1 < k).unwrap();
        }
        let pieces: Vec<(String, usize, usize)> = slabs
            .iter()
            .enumerate()
            .map(|(i, &(lo, len))| (format!("f.piece{i}.vti"), lo, lo + len - 1 + usize::from(i + 1 < k)))
            .collect();
        crate::export::write_fields_pvti(&dir.path().join("f.pvti"), n, axis, &pieces).unwrap();
        let pvti = std::fs::read_to_string(dir.path().join("f.pvti")).unwrap();
        assert!(
            pvti.contains(r#"WholeExtent="0 13 0 9 0 17""#) && pvti.contains(r#"<Piece Extent="0 13 0 9 0 6" Source="f.piece0.vti"/>"#),
            "{pvti}"
        );
        assert!(pvti.contains(r#"<Piece Extent="0 13 0 9 12 17" Source="f.piece2.vti"/>"#), "{pvti}");
        let piece = std::fs::read_to_string(dir.path().join("f.piece1.vti")).unwrap();
        assert!(piece.contains(r#"WholeExtent="0 13 0 9 6 12""#), "{}", &piece[..400.min(piece.len())]);
    }
}
