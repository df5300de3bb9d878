//! The device side of compressed subgrids: the working box (a subgrid and its ghost frame,
//! with the box kernels compiled for its size), the subgrids' records in the ring and the
//! ring's device buffers.

use crate::backend::cpu::ep_scatter;
use crate::backend::cuda::codec::{GpuCodec, Window};
use crate::backend::cuda::{classify, compile, derr, threads, DeviceInfo, KernelConfig, BRICK_BOUNDARY};
use crate::collision::equilibrium;
use crate::domain::{id_of, is_solid, kind, kind_of, Domain};
use crate::lattice::{Lat, Lattice, D3Q19, D3Q27, MAX_Q};
use crate::precision::Precision;
use crate::schemes::Scheme;
use crate::solver::{Params, SolverError};
use crate::units::human_bytes;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use rayon::prelude::*;
use std::sync::Arc;

use super::*;

use crate::memory::BUILD_AHEAD;

/// Brick shape of the box kernels (the dense solver's default shape for 3D).
pub(super) const BOX_BRICK: [usize; 3] = [32, 2, 2];

/// Kernels for one working-box size.
pub(super) struct BoxKernels {
    pub(super) _module: Arc<CudaModule>,
    pub(super) fused: CudaFunction,
    pub(super) fields: CudaFunction,
    pub(super) flags: CudaFunction,
    pub(super) outer: CudaFunction,
    pub(super) pack: CudaFunction,
    pub(super) stats: CudaFunction,
    pub(super) cut: CudaFunction,
}

/// One GPU's share of a saved state ([`Dev::snapshot`]).
pub(super) struct DevSnapshot {
    shells: Vec<f32>,
    /// Per subgrid of the share, in its order.
    subs: Vec<SubSnapshot>,
}

impl DevSnapshot {
    pub(super) fn bytes(&self) -> u64 {
        4 * self.shells.len() as u64 + self.subs.iter().map(|s| 4 * s.record.len() as u64 + 8 * s.offsets.len() as u64).sum::<u64>()
    }
}

/// One subgrid of a saved state: its record, the record's block offsets (compressed records
/// only) and what the budget knows of it.
struct SubSnapshot {
    tau: f32,
    raw: bool,
    memo: Memo,
    record: Vec<u32>,
    /// Whether the record was in the ring (else in host memory).
    in_ring: bool,
    offsets: Vec<u64>,
}

/// Where a subgrid's core is.
pub(super) enum Record {
    /// Not stored yet.
    None,
    /// `words` words from `start` in the ring (wrapping at its end).
    Ring { start: u64, words: u64 },
    /// Spilled to host memory (the ring had no room).
    Host(Vec<u32>),
}

impl Record {
    pub(super) fn words(&self) -> u64 {
        match self {
            Record::None => 0,
            Record::Ring { words, .. } => *words,
            Record::Host(v) => v.len() as u64,
        }
    }
}

/// A record being written: the codec runs ahead of the host, which learns the record's size
/// (through pinned memory) only while the next subgrid already steps.
pub(super) struct Pending {
    id: usize,
    /// Where the codec writes it: the ring from this word (its tail at launch), else scratch.
    at: Option<u64>,
    /// Its size where known at launch (a raw core).
    words: Option<u64>,
    /// The step, for the warning of a full ring.
    step: u64,
}

/// Timing events per subgrid: around its fetch, its interfaces and its LBM (0 to 4), its
/// compression (8 to 5), and around the placing of its record (6, 7), which happens later: in
/// the next subgrid's step, between that one's events 4 and 8, so no time is counted twice.
pub(super) const EVENTS: usize = 9;

pub(super) struct GSub {
    /// Index among all subgrids of the grid (x fastest).
    pub(super) id: usize,
    pub(super) origin: [usize; 3],
    pub(super) size: [usize; 3],
    pub(super) tau: f32,
    pub(super) record: Record,
    /// Whether the record is the raw core (else compressed).
    pub(super) raw: bool,
    /// Block offsets of the compressed record (blocks x q), relative to its start.
    pub(super) offsets: CudaSlice<u64>,
    /// Bricks of the box (boundary bricks carry [`BRICK_BOUNDARY`]).
    pub(super) bricks: CudaSlice<u32>,
    pub(super) n_bricks: u32,
    /// The inlets as this box sees them.
    pub(super) inlets: CudaSlice<u8>,
    /// Index into the kernels per box size.
    pub(super) kernels: usize,
    /// What the memory budget remembers of the subgrid's raises of tau.
    pub(super) memo: Memo,
}

impl GSub {
    pub(super) fn box_size(&self) -> [usize; 3] {
        self.size.map(|s| s + 2)
    }
    pub(super) fn core(&self) -> [usize; 3] {
        self.size.map(|s| s - 2)
    }
}

/// One GPU's share of the grid: its subgrids, their records and its working box, everything a
/// step, the statistics or a read-back of the state changes. Behind a mutex in the solver, so
/// `&self` methods of [`Solver`] (fields, statistics, checkpoints) can read records through the
/// working box.
pub(super) struct Dev {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) info: DeviceInfo,
    /// CUDA ordinal of the device.
    pub(super) ordinal: usize,
    pub(super) stream: Arc<CudaStream>,
    pub(super) q: usize,
    pub(super) n: [u32; 3],
    pub(super) counts: [u32; 2],
    /// This GPU's subgrids.
    pub(super) subs: Vec<GSub>,
    /// The order they step in and their records enter the ring (those next to a cut first),
    /// and how many are next to a cut.
    pub(super) order: Vec<usize>,
    pub(super) edges: usize,
    /// The axis the grid is shared along, this GPU's index among the solver's GPUs, its cuts
    /// and the exchange's stream (none on one GPU).
    pub(super) axis: usize,
    pub(super) index: usize,
    pub(super) cuts: Vec<Cut>,
    pub(super) link: Option<Link>,
    /// Bytes of device memory besides the ring, and how a budget sizes the ring.
    pub(super) fixed: u64,
    pub(super) sizing: RingSizing,
    /// Values in the shells of this GPU's own subgrids (the copies across cuts left out).
    pub(super) own_shell_floats: u64,
    pub(super) kernels: Vec<([usize; 3], BoxKernels)>,
    pub(super) codec: GpuCodec,
    /// The grid's flags on the layers along `axis` this GPU's boxes reach: from
    /// `flag_layers.0`, `flag_layers.1` of them (wrapping).
    pub(super) gflags: CudaSlice<u8>,
    pub(super) flag_layers: (u32, u32),
    pub(super) bflags: CudaSlice<u8>,
    pub(super) boxbuf: CudaSlice<f32>,
    pub(super) changed: CudaSlice<u32>,
    pub(super) shells: CudaSlice<f32>,
    pub(super) shell_off: CudaSlice<u64>,
    pub(super) axis_map: CudaSlice<u32>,
    pub(super) slab_len: CudaSlice<u32>,
    /// A record on its way where the ring's tail has no room for its worst case (the ring
    /// copies it from here), and a wrapped or spilled record on its way to the working box.
    pub(super) scratch: CudaSlice<u32>,
    pub(super) ring: CudaSlice<u32>,
    pub(super) ring_tail: u64,
    pub(super) ring_used: u64,
    /// The record being written, and the pinned word its size comes back in.
    pub(super) pending: Option<Pending>,
    pub(super) sizes: PinnedHostSlice<u64>,
    pub(super) walls: CudaSlice<f32>,
    pub(super) outlets: CudaSlice<u8>,
    pub(super) forces: CudaSlice<f64>,
    /// Subgrids keep halfway walls: an empty link table for the box kernels.
    pub(super) no_links: CudaSlice<u32>,
    pub(super) no_links_save: CudaSlice<f32>,
    /// Field planes of one box (statistics), made when first needed.
    pub(super) planes: Option<CudaSlice<f32>>,
    pub(super) spilled_warned: bool,
    /// Timing events, two sets of [`EVENTS`] per subgrid (made when a timed step first needs
    /// them): a step records into one set while the host reads the other, the last step's.
    pub(super) events: Vec<CudaEvent>,
    /// The set that holds a timed step not yet read.
    pub(super) unread: Option<usize>,
}

/// Words free in one piece from the tail of a ring of `cap` words holding `used` words of
/// records that end at `tail`: up to the ring's end, or up to the oldest record where the
/// records wrap around the end.
pub(super) fn tail_room(cap: u64, tail: u64, used: u64) -> u64 {
    if used >= cap {
        return 0;
    }
    let head = (tail + cap - used) % cap;
    if head > tail {
        head - tail
    } else {
        cap - tail
    }
}

/// Writes the own cells' slots of a subgrid's working box (of the given size) on the host.
pub(super) type BoxFill<'a> = dyn Fn(&GSub, [usize; 3], &Domain, &mut [f32]) + Sync + 'a;

/// The layers `(lo, len)` (wrapping) along `axis` of a grid of `n` cells' `flags`, x fastest.
pub(super) fn layers_of(flags: &[u8], n: [usize; 3], axis: usize, (lo, len): (u32, u32)) -> Vec<u8> {
    let mut m = n;
    m[axis] = len as usize;
    let mut out = vec![0u8; vol(m)];
    out.par_chunks_mut(m[0] * m[1]).enumerate().for_each(|(z, plane)| {
        for y in 0..m[1] {
            for x in 0..m[0] {
                let mut g = [x, y, z];
                g[axis] = (lo as usize + g[axis]) % n[axis];
                plane[x + m[0] * y] = flags[g[0] + n[0] * (g[1] + n[1] * g[2])];
            }
        }
    });
    out
}

/// Cells of a box.
pub(super) fn vol(s: [usize; 3]) -> usize {
    s[0] * s[1] * s[2]
}

/// Bricks of a box for the fused kernel (boundary bricks marked), and how many; never empty.
pub(super) fn box_bricks(dom: &Domain, origin: [usize; 3], bn: [usize; 3]) -> (Vec<u32>, u32) {
    let (lean, bound) = classify(&box_domain(dom, origin, bn), BOX_BRICK);
    let mut all = lean;
    all.extend(bound.iter().map(|&b| b | BRICK_BOUNDARY));
    all.sort_unstable_by_key(|&b| b & !BRICK_BOUNDARY);
    let count = all.len() as u32;
    if all.is_empty() {
        all.push(0);
    }
    (all, count)
}

pub(super) fn box_config(dom: &Domain, params: &Params, bn: [usize; 3]) -> KernelConfig {
    KernelConfig {
        lattice: dom.lattice,
        scheme: Scheme::EsotericPull,
        precision: Precision::Fp32,
        collision: params.collide.kind,
        force: params.collide.has_force(),
        n: bn,
        brick: BOX_BRICK,
        rows: false,
        ghost_block: 16,
        boxed: true,
        halo: 0,
        slip: false,
    }
}

impl Dev {
    /// This GPU's layers of `dom`'s flags (see `gflags`).
    pub(super) fn flag_slab(&self, dom: &Domain) -> Vec<u8> {
        layers_of(&dom.flags, dom.n, self.axis, self.flag_layers)
    }

    pub(super) fn lock_err() -> SolverError {
        SolverError::Backend("the compressed-subgrid state's lock is poisoned (an earlier error)".into())
    }

    /// The box's outer layers and the shells (mode as in kernels/subgrid.cu box_outer).
    pub(super) fn outer(&mut self, id: usize, mode: u32) -> Result<(), SolverError> {
        let s = &self.subs[id];
        let k = &self.kernels[s.kernels].1;
        let o = s.origin.map(|x| x as u32);
        let (n, c, ax) = (self.n, self.counts, self.axis as u32);
        let mut b = self.stream.launch_builder(&k.outer);
        b.arg(&mut self.boxbuf).arg(&mut self.shells).arg(&mut self.changed).arg(&self.axis_map).arg(&self.slab_len).arg(&self.shell_off);
        b.arg(&n[0]).arg(&n[1]).arg(&n[2]).arg(&c[0]).arg(&c[1]).arg(&ax).arg(&o[0]).arg(&o[1]).arg(&o[2]).arg(&mode);
        // SAFETY: arguments match box_outer; the box buffer holds this box, the shell array
        // every shell, the maps every axis.
        unsafe { b.launch(threads(vol(s.box_size()))) }.map_err(derr("launching box_outer"))?;
        Ok(())
    }

    /// The box's flags from the grid's.
    pub(super) fn flags(&mut self, id: usize) -> Result<(), SolverError> {
        let s = &self.subs[id];
        let k = &self.kernels[s.kernels].1;
        let o = s.origin.map(|x| x as u32);
        let n = self.n;
        let mut b = self.stream.launch_builder(&k.flags);
        let (axis, lo, len) = (self.axis as u32, self.flag_layers.0, self.flag_layers.1);
        b.arg(&self.gflags).arg(&mut self.bflags).arg(&o[0]).arg(&o[1]).arg(&o[2]).arg(&n[0]).arg(&n[1]).arg(&n[2]);
        b.arg(&axis).arg(&lo).arg(&len);
        // SAFETY: arguments match box_flags; bflags holds the box.
        unsafe { b.launch(threads(vol(s.box_size()))) }.map_err(derr("launching box_flags"))?;
        Ok(())
    }

    /// Window of the core in the box buffer (all q planes) and its first sample.
    pub(super) fn core_window(&self, id: usize) -> (usize, Window) {
        let s = &self.subs[id];
        let bn = s.box_size();
        let base = 2 + bn[0] * (2 + bn[1] * 2);
        (base, Window { n: s.core(), pitch: [bn[0] as u64, bn[1] as u64], plane: vol(bn) as u64, fields: self.q })
    }

    pub(super) fn pack(&mut self, id: usize, dir: u32) -> Result<(), SolverError> {
        let s = &self.subs[id];
        let k = &self.kernels[s.kernels].1;
        let mut b = self.stream.launch_builder(&k.pack);
        b.arg(&mut self.boxbuf).arg(&mut self.scratch).arg(&dir);
        // SAFETY: arguments match core_pack; scratch holds a raw core.
        unsafe { b.launch(threads(vol(s.core()))) }.map_err(derr("launching core_pack"))?;
        Ok(())
    }

    /// Whether a subgrid's record decompresses straight out of the ring (compressed, in one
    /// piece), else it goes through scratch.
    pub(super) fn direct(&self, id: usize) -> bool {
        let s = &self.subs[id];
        match s.record {
            Record::Ring { start, words } => !s.raw && start + words <= self.ring.len() as u64,
            _ => false,
        }
    }

    /// Decompress (or unpack) a subgrid's record into the box's core: straight out of the ring
    /// where it is in one piece, else through scratch (a record still there is placed first).
    /// The record stays where it is.
    pub(super) fn fetch(&mut self, id: usize) -> Result<(), SolverError> {
        let words = self.subs[id].record.words() as usize;
        if self.direct(id) {
            let Record::Ring { start, .. } = self.subs[id].record else { unreachable!("direct means in the ring") };
            let (base, w) = self.core_window(id);
            let mut field = self.boxbuf.slice_mut(base..base + w.span());
            let rec = self.ring.slice(start as usize..start as usize + words);
            return self.codec.launch_decompress_window_deferred(&rec, &self.subs[id].offsets.as_view(), w, &mut field);
        }
        if self.pending.as_ref().is_some_and(|p| p.at.is_none()) {
            self.settle(None)?;
        }
        match &self.subs[id].record {
            Record::None => return Err(SolverError::Backend("a subgrid has no record (a bug)".into())),
            Record::Ring { start, .. } => {
                let (start, cap) = (*start as usize, self.ring.len());
                let first = words.min(cap - start);
                let mut dst = self.scratch.slice_mut(0..first);
                self.stream
                    .memcpy_dtod(&self.ring.slice(start..start + first), &mut dst)
                    .map_err(derr("copying a record out of the ring"))?;
                if first < words {
                    let mut dst = self.scratch.slice_mut(first..words);
                    self.stream
                        .memcpy_dtod(&self.ring.slice(0..words - first), &mut dst)
                        .map_err(derr("copying a record out of the ring"))?;
                }
            }
            Record::Host(v) => {
                let mut dst = self.scratch.slice_mut(0..v.len());
                self.stream.memcpy_htod(v.as_slice(), &mut dst).map_err(derr("uploading a spilled record"))?;
            }
        }
        if self.subs[id].raw {
            return self.pack(id, 1);
        }
        let (base, w) = self.core_window(id);
        let mut field = self.boxbuf.slice_mut(base..base + w.span());
        // Damage is checked once per step (Dev::check_damage), not per subgrid: a host round
        // trip here would leave the GPU idle between every pair of subgrids.
        self.codec.launch_decompress_window_deferred(&self.scratch.slice(0..words), &self.subs[id].offsets.as_view(), w, &mut field)
    }

    /// Whether a record decompressed since the last call was missing or damaged: an error.
    pub(super) fn check_damage(&mut self) -> Result<(), SolverError> {
        if self.codec.take_damage()? {
            return Err(SolverError::Backend(crate::backend::cuda::codec::DAMAGED.into()));
        }
        Ok(())
    }

    /// Take a subgrid's record out of the ring (its space is free again) after [`Dev::fetch`].
    pub(super) fn release(&mut self, id: usize) {
        if let Record::Ring { start, words } = self.subs[id].record {
            let cap = self.ring.len() as u64;
            debug_assert_eq!(start, (self.ring_tail + cap - self.ring_used) % cap, "records leave the ring in the order they came");
            self.ring_used -= words;
            if self.ring_used == 0 && self.pending.as_ref().is_none_or(|p| p.at.is_none()) {
                // An empty ring starts over at its beginning: the most room in one piece.
                self.ring_tail = 0;
            }
        }
        self.subs[id].record = Record::None;
    }

    /// Compress (`tau`) or pack (`None`) the box's core and store the record: in the ring
    /// where it has room, else in host memory.
    pub(super) fn store(&mut self, id: usize, tau: Option<f32>, step: u64) -> Result<(), SolverError> {
        self.launch_encode(id, tau, step)?;
        self.settle(None)
    }

    /// Words free in one piece from the ring's tail.
    fn tail_room(&self) -> u64 {
        tail_room(self.ring.len() as u64, self.ring_tail, self.ring_used)
    }

    /// Start compressing (`tau`) or packing (`None`) the box's core. A compressed record goes
    /// straight to the ring's tail where its worst case fits there, else to scratch; the host
    /// learns its size in [`Dev::settle`], which the step calls once the next subgrid's work
    /// is queued, so the GPU never waits for that round trip.
    pub(super) fn launch_encode(&mut self, id: usize, tau: Option<f32>, step: u64) -> Result<(), SolverError> {
        debug_assert!(self.pending.is_none(), "one record under way at a time");
        let q = self.q;
        let pending = match tau {
            Some(tau) => {
                let (base, w) = self.core_window(id);
                let worst = worst_record(q, self.subs[id].size);
                let at = (self.tail_room() >= worst).then_some(self.ring_tail);
                let field = self.boxbuf.slice(base..base + w.span());
                let s = &mut self.subs[id];
                let mut out = match at {
                    Some(t) => self.ring.slice_mut(t as usize..(t + worst) as usize),
                    None => self.scratch.slice_mut(..),
                };
                self.codec.launch_compress_window(&field, w, tau, &mut out, &mut s.offsets)?;
                self.codec.launch_written(&mut self.sizes)?;
                Pending { id, at, words: None, step }
            }
            None => {
                self.pack(id, 0)?;
                Pending { id, at: None, words: Some((q * vol(self.subs[id].core())) as u64), step }
            }
        };
        self.subs[id].raw = tau.is_none();
        self.pending = Some(pending);
        Ok(())
    }

    /// Place the record under way, if any: wait for its size, then keep it where the codec
    /// wrote it in the ring, or copy it from scratch to the ring's tail (host memory where the
    /// ring is full). With `ev`, the copy is timed by the record's events 6 and 7.
    pub(super) fn settle(&mut self, ev: Option<&[CudaEvent]>) -> Result<(), SolverError> {
        let Some(p) = self.pending.take() else { return Ok(()) };
        let words = match p.words {
            Some(w) => w,
            None => {
                let w = self.codec.written_in(&self.sizes)?;
                if w.overflow {
                    return Err(SolverError::Backend("a record overflowed its worst case (a bug)".into()));
                }
                w.words
            }
        };
        let mark = |k: usize, stream: &Arc<CudaStream>| -> Result<(), SolverError> {
            match ev {
                Some(e) => e[EVENTS * p.id + k].record(stream).map_err(derr("recording an event")),
                None => Ok(()),
            }
        };
        mark(6, &self.stream)?;
        match p.at {
            Some(start) => {
                debug_assert_eq!(start, self.ring_tail, "nothing enters the ring while a record is under way");
                let cap = self.ring.len() as u64;
                self.ring_tail = (start + words) % cap;
                self.ring_used += words;
                self.subs[p.id].record = Record::Ring { start, words };
            }
            None => self.place(p.id, words as usize, p.step)?,
        }
        mark(7, &self.stream)
    }

    /// A copy in host memory of the record of `words` words from `start` in the ring (wrapping
    /// at its end).
    fn ring_to_host(&self, start: u64, words: u64) -> Result<Vec<u32>, SolverError> {
        let cap = self.ring.len() as u64;
        let first = words.min(cap - start);
        let read = derr("copying a record out of the ring");
        let mut v = self.stream.clone_dtoh(&self.ring.slice(start as usize..(start + first) as usize)).map_err(&read)?;
        if first < words {
            v.extend(self.stream.clone_dtoh(&self.ring.slice(0..(words - first) as usize)).map_err(&read)?);
        }
        Ok(v)
    }

    /// Give the ring `words` words: every record in it goes to host memory first (the next step
    /// brings them back into the new ring, or leaves them in host memory where it has no room).
    pub(super) fn resize_ring(&mut self, words: u64) -> Result<(), SolverError> {
        let cap = self.ring.len() as u64;
        if words == cap {
            return Ok(());
        }
        for k in 0..self.subs.len() {
            if let Record::Ring { start, words } = self.subs[k].record {
                self.subs[k].record = Record::Host(self.ring_to_host(start, words)?);
            }
        }
        // The old ring goes before the new one is allocated (both may not fit at once).
        let placeholder = self.stream.alloc_zeros::<u32>(1).map_err(derr("resizing the ring"))?;
        drop(std::mem::replace(&mut self.ring, placeholder));
        self.ring = match self.stream.alloc_zeros::<u32>(words as usize) {
            Ok(r) => r,
            Err(e) => {
                // Keep running on the old size where the new one does not fit.
                self.ring = self.stream.alloc_zeros::<u32>(cap as usize).map_err(derr("allocating the ring again"))?;
                return Err(SolverError::Backend(format!(
                    "out of GPU memory: a ring of {} for the compressed cores could not be allocated ({e:?}); kept {}",
                    human_bytes(4 * words),
                    human_bytes(4 * cap)
                )));
            }
        };
        self.ring_tail = 0;
        self.ring_used = 0;
        self.spilled_warned = false;
        Ok(())
    }

    /// Put the record in scratch at the ring's tail where it has room, else in host memory.
    pub(super) fn place(&mut self, id: usize, words: usize, step: u64) -> Result<(), SolverError> {
        let cap = self.ring.len();
        if self.ring_used as usize + words <= cap {
            let start = self.ring_tail as usize;
            let first = words.min(cap - start);
            let mut dst = self.ring.slice_mut(start..start + first);
            self.stream.memcpy_dtod(&self.scratch.slice(0..first), &mut dst).map_err(derr("copying a record into the ring"))?;
            if first < words {
                let mut dst = self.ring.slice_mut(0..words - first);
                self.stream.memcpy_dtod(&self.scratch.slice(first..words), &mut dst).map_err(derr("copying a record into the ring"))?;
            }
            self.ring_tail = ((start + words) % cap) as u64;
            self.ring_used += words as u64;
            self.subs[id].record = Record::Ring { start: start as u64, words: words as u64 };
        } else {
            let v = self.stream.clone_dtoh(&self.scratch.slice(0..words)).map_err(derr("spilling a record to the host"))?;
            if !self.spilled_warned {
                tracing::warn!(
                    "step {step}: the ring of compressed subgrids ({}) is full: records go to host memory until the budget raises tau",
                    human_bytes(4 * cap as u64)
                );
                self.spilled_warned = true;
            }
            self.subs[id].record = Record::Host(v);
        }
        Ok(())
    }

    pub(super) fn lbm(&mut self, id: usize, t: u64, p: &Params) -> Result<(), SolverError> {
        let s = &self.subs[id];
        if s.n_bricks == 0 {
            return Ok(());
        }
        let k = &self.kernels[s.kernels].1;
        let c = p.collide;
        let (fx, fy, fz) = (c.force[0], c.force[1], c.force[2]);
        let cfg = LaunchConfig {
            grid_dim: (s.n_bricks, 1, 1),
            block_dim: ((BOX_BRICK[0] * BOX_BRICK[1] * BOX_BRICK[2]) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&k.fused);
        b.arg(&self.boxbuf).arg(&self.boxbuf).arg(&s.bricks).arg(&self.bflags).arg(&t).arg(&c.tau).arg(&c.cs).arg(&fx).arg(&fy).arg(&fz);
        let no_fields = 0u64;
        b.arg(&self.walls).arg(&s.inlets).arg(&self.outlets).arg(&self.forces).arg(&self.no_links).arg(&self.no_links_save).arg(&no_fields);
        // SAFETY: arguments match stream_collide_fused (no field planes: a null `mom`); the box buffer holds the box the kernel
        // was compiled for, the brick list covers it.
        unsafe { b.launch(cfg) }.map_err(derr("launching the box's stream_collide_fused"))?;
        Ok(())
    }

    /// One step of subgrid `id`; with `ev` (every subgrid's), events between its parts. Its
    /// record is left under way; the previous subgrid's is placed once this one's work up to
    /// its compression is queued.
    pub(super) fn step_subgrid(
        &mut self,
        id: usize,
        t: u64,
        p: &Params,
        tau: Option<f32>,
        ev: Option<&[CudaEvent]>,
    ) -> Result<(), SolverError> {
        let mark = |k: usize, stream: &Arc<CudaStream>| -> Result<(), SolverError> {
            match ev {
                Some(e) => e[EVENTS * id + k].record(stream).map_err(derr("recording an event")),
                None => Ok(()),
            }
        };
        if !self.direct(id) {
            self.settle(ev)?;
        }
        mark(0, &self.stream)?;
        self.fetch(id)?;
        self.release(id);
        mark(1, &self.stream)?;
        self.flags(id)?;
        self.outer(id, 0)?;
        mark(2, &self.stream)?;
        self.lbm(id, t, p)?;
        mark(3, &self.stream)?;
        self.outer(id, 1)?;
        self.outer(id, 2)?;
        mark(4, &self.stream)?;
        self.settle(ev)?;
        mark(8, &self.stream)?;
        self.launch_encode(id, tau, t)?;
        mark(5, &self.stream)
    }

    /// Fill every subgrid from `fill` (the own cells' slots of its box, as the dense solver
    /// keeps them), storing shells and records in order (the ring starts empty).
    pub(super) fn build(&mut self, dom: &Domain, compress: bool, fill: &BoxFill<'_>) -> Result<(), SolverError> {
        // A record left under way by a step that failed is dropped with the old state.
        self.pending = None;
        self.ring_tail = 0;
        self.ring_used = 0;
        for s in &mut self.subs {
            s.record = Record::None;
        }
        // The boxes are filled on the host a few at once (each fill is partly serial), then
        // uploaded and stored one by one in the ring's order.
        let order = self.order.clone();
        for chunk in order.chunks(BUILD_AHEAD) {
            let subs = &self.subs;
            let q = self.q;
            let hosts: Vec<Vec<f32>> = chunk
                .par_iter()
                .map(|&id| {
                    let bn = subs[id].box_size();
                    let mut host = vec![0.0f32; q * vol(bn)];
                    fill(&subs[id], bn, dom, &mut host);
                    host
                })
                .collect();
            for (&id, host) in chunk.iter().zip(hosts) {
                let mut view = self.boxbuf.slice_mut(0..host.len());
                self.stream.memcpy_htod(&host, &mut view).map_err(derr("uploading a working box"))?;
                self.outer(id, 3)?;
                let tau = compress.then_some(self.subs[id].tau);
                self.store(id, tau, 0)?;
            }
        }
        self.pack_cuts()?;
        self.stream.synchronize().map_err(derr("building the compressed state"))
    }

    /// This GPU's share as it is stored, read to the host between two steps: the shells and
    /// every subgrid's record, block offsets and threshold.
    pub(super) fn snapshot(&mut self) -> Result<DevSnapshot, SolverError> {
        self.settle(None)?;
        let shells = self.stream.clone_dtoh(&self.shells).map_err(derr("reading the shells"))?;
        let mut subs = Vec::with_capacity(self.subs.len());
        for s in &self.subs {
            // Record by record: the host holds each once.
            let (record, in_ring) = match &s.record {
                Record::None => return Err(SolverError::Backend("a subgrid has no record (a bug)".into())),
                Record::Ring { start, words } => (self.ring_to_host(*start, *words)?, true),
                Record::Host(v) => (v.clone(), false),
            };
            let offsets = if s.raw { Vec::new() } else { self.stream.clone_dtoh(&s.offsets).map_err(derr("reading block offsets"))? };
            subs.push(SubSnapshot { tau: s.tau, raw: s.raw, memo: s.memo, record, in_ring, offsets });
        }
        Ok(DevSnapshot { shells, subs })
    }

    /// Put back a share read by [`Dev::snapshot`]: the shells as they were, the records where
    /// they were (those of the ring into an empty ring, in the order the subgrids step; host
    /// memory where the ring has no room now), and the cut planes packed for the exchange that
    /// follows. Which records lie in host memory decides what the next step spills, so the
    /// steps after a roll-back repeat those after the snapshot.
    pub(super) fn roll_back(&mut self, snap: &DevSnapshot) -> Result<(), SolverError> {
        if snap.subs.len() != self.subs.len() || snap.shells.len() != self.shells.len() {
            return Err(SolverError::Checkpoint("the saved state was taken on another layout of subgrids".into()));
        }
        self.pending = None;
        self.unread = None;
        self.ring_tail = 0;
        self.ring_used = 0;
        self.stream.memcpy_htod(&snap.shells, &mut self.shells).map_err(derr("uploading the shells"))?;
        let cap = self.ring.len() as u64;
        for id in self.order.clone() {
            let k = &snap.subs[id];
            let s = &mut self.subs[id];
            (s.tau, s.raw, s.memo) = (k.tau, k.raw, k.memo);
            if !k.raw {
                self.stream.memcpy_htod(&k.offsets, &mut s.offsets).map_err(derr("uploading block offsets"))?;
            }
            let words = k.record.len() as u64;
            // The ring fills from its start and nothing leaves it here, so a record that fits
            // lies in one piece.
            s.record = if k.in_ring && self.ring_used + words <= cap {
                let start = self.ring_tail;
                let mut dst = self.ring.slice_mut(start as usize..(start + words) as usize);
                self.stream.memcpy_htod(&k.record, &mut dst).map_err(derr("uploading a record"))?;
                self.ring_tail = (start + words) % cap;
                self.ring_used += words;
                Record::Ring { start, words }
            } else {
                Record::Host(k.record.clone())
            };
        }
        self.pack_cuts()?;
        self.stream.synchronize().map_err(derr("putting back a saved state"))
    }

    pub(super) fn host_words(&self) -> u64 {
        self.subs.iter().filter(|s| matches!(s.record, Record::Host(_))).map(|s| s.record.words()).sum()
    }

    /// The field planes (density and velocity, one box volume each) of subgrid `id`'s box at
    /// step `t`: its record decompressed into the box and its ghost frame filled, as a step
    /// starts.
    fn box_fields(&mut self, id: usize, t: u64, p: &Params) -> Result<(), SolverError> {
        if self.planes.is_none() {
            self.planes = Some(self.stream.alloc_zeros::<f32>(4 * self.bflags.len()).map_err(derr("allocating field planes"))?);
        }
        self.fetch(id)?;
        self.flags(id)?;
        self.outer(id, 0)?;
        let s = &self.subs[id];
        let k = &self.kernels[s.kernels].1;
        let planes = self.planes.as_mut().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
        let c = p.collide;
        let mut b = self.stream.launch_builder(&k.fields);
        b.arg(&self.boxbuf).arg(&self.bflags).arg(&t).arg(&c.force[0]).arg(&c.force[1]).arg(&c.force[2]);
        b.arg(&self.walls).arg(&s.inlets).arg(&self.outlets).arg(&self.no_links).arg(&self.no_links_save).arg(planes);
        // SAFETY: arguments match the box's fields kernel; planes hold 4 box volumes.
        unsafe { b.launch(threads(vol(s.box_size()))) }.map_err(derr("launching fields"))?;
        Ok(())
    }

    /// Density and velocity (`[rho, ux, uy, uz]`) of those of `cells` (grid indices) that lie
    /// in this GPU's subgrids, from the field planes of their boxes (one box per subgrid
    /// probed; only the cells' values come back).
    pub(super) fn probe_cells(&mut self, dom: &Domain, t: u64, p: &Params, cells: &[usize]) -> Result<Vec<(usize, [f32; 4])>, SolverError> {
        let mut out = Vec::new();
        for id in 0..self.subs.len() {
            let (o, sz) = (self.subs[id].origin, self.subs[id].size);
            let mine: Vec<(usize, [usize; 3])> =
                cells.iter().map(|&i| (i, dom.coords(i))).filter(|(_, c)| (0..3).all(|a| c[a] >= o[a] && c[a] < o[a] + sz[a])).collect();
            if mine.is_empty() {
                continue;
            }
            self.box_fields(id, t, p)?;
            self.check_damage()?;
            let bn = self.subs[id].box_size();
            let nb = vol(bn);
            let planes = self.planes.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
            for (i, c) in mine {
                let b = (c[0] - o[0] + 1) + bn[0] * ((c[1] - o[1] + 1) + bn[1] * (c[2] - o[2] + 1));
                let mut v = [0.0f32; 4];
                for (k, x) in v.iter_mut().enumerate() {
                    let at = k * nb + b;
                    *x = self.stream.clone_dtoh(&planes.slice(at..at + 1)).map_err(derr("reading a probe"))?[0];
                }
                out.push((i, v));
            }
        }
        Ok(out)
    }

    /// Mass, largest speed, density range and first bad cell, subgrid by subgrid.
    pub(super) fn stats(&mut self, t: u64, p: &Params) -> Result<GridStats, SolverError> {
        let mut mass = self.stream.alloc_zeros::<f64>(1).map_err(derr("allocating"))?;
        let mut maxu = self.stream.alloc_zeros::<u32>(1).map_err(derr("allocating"))?;
        let mut bad = self.stream.alloc_zeros::<u64>(1).map_err(derr("allocating"))?;
        let mut rho = self.stream.clone_htod(&crate::backend::cuda::RHO_KEYS_START).map_err(derr("allocating"))?;
        let mut first_bad = None;
        for id in 0..self.subs.len() {
            self.box_fields(id, t, p)?;
            self.stream.memcpy_htod(&[u64::MAX], &mut bad).map_err(derr("clearing"))?;
            let s = &self.subs[id];
            let bn = s.box_size();
            let k = &self.kernels[s.kernels].1;
            let planes = self.planes.as_ref().ok_or_else(|| SolverError::Backend("no field planes".into()))?;
            let cfg = LaunchConfig { grid_dim: (vol(bn).div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let mut b = self.stream.launch_builder(&k.stats);
            b.arg(planes).arg(&self.bflags).arg(&mut mass).arg(&mut maxu).arg(&mut bad).arg(&mut rho);
            // SAFETY: arguments match stats (DEF_BOX: the subgrid's own cells only).
            unsafe { b.launch(cfg) }.map_err(derr("launching the box's stats"))?;
            let fb = self.stream.clone_dtoh(&bad).map_err(derr("reading stats"))?[0];
            if fb != u64::MAX && first_bad.is_none() {
                let b = fb as usize;
                let l = [b % bn[0], (b / bn[0]) % bn[1], b / (bn[0] * bn[1])];
                first_bad = Some([0, 1, 2].map(|a| s.origin[a] + l[a] - 1));
            }
        }
        self.check_damage()?;
        let m = self.stream.clone_dtoh(&mass).map_err(derr("reading stats"))?[0];
        let u = f32::from_bits(self.stream.clone_dtoh(&maxu).map_err(derr("reading stats"))?[0]);
        let rho = crate::backend::cuda::rho_range_of_keys(&self.stream.clone_dtoh(&rho).map_err(derr("reading stats"))?);
        Ok(GridStats { mass: m, max_u: u, rho_range: rho, first_bad })
    }

    /// Write this GPU's subgrids into the state as the dense solver lays it out
    /// (`F[i * cells + n]`), on the host.
    pub(super) fn dense_state(&mut self, dom: &Domain, out: &mut [f32]) -> Result<(), SolverError> {
        let q = self.q;
        let nn = dom.cells();
        for id in 0..self.subs.len() {
            self.fetch(id)?;
            self.outer(id, 0)?;
            self.check_damage()?;
            let s = &self.subs[id];
            let bn = s.box_size();
            let nb = vol(bn);
            let host = self.stream.clone_dtoh(&self.boxbuf.slice(0..q * nb)).map_err(derr("reading a working box"))?;
            for uz in 0..s.size[2] {
                for uy in 0..s.size[1] {
                    for ux in 0..s.size[0] {
                        let g = dom.index(s.origin[0] + ux, s.origin[1] + uy, s.origin[2] + uz);
                        let b = (ux + 1) + bn[0] * ((uy + 1) + bn[1] * (uz + 1));
                        (0..q).for_each(|i| out[i * nn + g] = host[i * nb + b]);
                    }
                }
            }
        }
        Ok(())
    }

    /// One step of every subgrid of this GPU, in its order. With `timing`, its parts are timed
    /// by events, and the summed times of the parts of the last timed step come back: they are
    /// read subgrid by subgrid while this step runs (each read is a few host calls; reading them
    /// all between steps would leave the GPU idle), and [`Dev::read_unread`] reads the last
    /// step's. Where the GPU has cuts: with a communicator the planes travel and merge while the
    /// subgrids away from the cuts step (the main stream then waits for the merge); without,
    /// they are packed for the main thread's exchange.
    pub(super) fn step_all(
        &mut self,
        t: u64,
        p: &Params,
        compress: bool,
        timing: bool,
        comm: Option<Comm>,
    ) -> Result<Option<[f64; 6]>, SolverError> {
        self.stream.memset_zeros(&mut self.forces).map_err(derr("clearing forces"))?;
        let n = self.subs.len();
        let mut ev = std::mem::take(&mut self.events);
        if timing && ev.len() != 2 * EVENTS * n {
            let f = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            ev = (0..2 * EVENTS * n).map(|_| self.ctx.new_event(f)).collect::<Result<Vec<_>, _>>().map_err(derr("creating events"))?;
            self.unread = None;
        }
        let last = if timing { self.unread.take() } else { None };
        self.unread = None;
        let set = last.map_or(0, |h| 1 - h);
        let (cur, old) = if timing {
            let (a, b) = ev.split_at(EVENTS * n);
            let (cur, old) = if set == 0 { (a, b) } else { (b, a) };
            (Some(cur), last.map(|_| old))
        } else {
            (None, None)
        };
        let overlap = comm.filter(|_| !self.cuts.is_empty());
        let order = std::mem::take(&mut self.order);
        let mut parts = [0.0f64; 6];
        let mut stepped = || -> Result<(), SolverError> {
            for (k, &id) in order.iter().enumerate() {
                if let (Some(c), true) = (overlap, k == self.edges) {
                    self.launch_exchange(c)?;
                }
                let tau = compress.then_some(self.subs[id].tau);
                self.step_subgrid(id, t, p, tau, cur)?;
                if let Some(o) = old {
                    add_parts(&mut parts, &o[EVENTS * id..EVENTS * (id + 1)])?;
                }
            }
            match overlap {
                Some(c) if self.edges == order.len() => self.launch_exchange(c)?,
                _ => {}
            }
            self.settle(cur)
        };
        let stepped = stepped();
        self.order = order;
        self.events = ev;
        stepped?;
        if overlap.is_some() {
            self.wait_merge()?;
        } else if !self.cuts.is_empty() {
            self.pack_cuts()?;
        }
        self.unread = timing.then_some(set);
        Ok(last.map(|_| parts))
    }

    /// The summed times of the parts of the last timed step, if not read yet (waits for it).
    pub(super) fn read_unread(&mut self) -> Result<Option<[f64; 6]>, SolverError> {
        let Some(set) = self.unread.take() else { return Ok(None) };
        let n = self.subs.len();
        let mut parts = [0.0f64; 6];
        for e in self.events[set * EVENTS * n..(set + 1) * EVENTS * n].chunks(EVENTS) {
            add_parts(&mut parts, e)?;
        }
        Ok(Some(parts))
    }
}

/// Add the times between one subgrid's events (see [`EVENTS`]) to the parts of a step.
fn add_parts(parts: &mut [f64; 6], e: &[CudaEvent]) -> Result<(), SolverError> {
    let ms = |a: usize, b: usize| e[a].elapsed_ms(&e[b]).map(f64::from).map_err(derr("reading an event"));
    for k in 0..4 {
        parts[k] += ms(k, k + 1)?;
    }
    parts[4] += ms(8, 5)?;
    parts[5] += ms(6, 7)?;
    Ok(())
}

/// Compile and load the kernels of one working-box size.
pub(super) fn load_box(ctx: &Arc<CudaContext>, cfg: &KernelConfig, dev: &DeviceInfo) -> Result<BoxKernels, SolverError> {
    let ptx = compile(cfg, &crate::backend::cuda::arch_of(dev)).map_err(SolverError::Backend)?;
    let module = crate::backend::cuda::Module::load(ctx, ptx, "the box kernels")?;
    let get = |n: &str| module.get(n);
    Ok(BoxKernels {
        fused: get("stream_collide_fused")?,
        fields: get("fields")?,
        flags: get("box_flags")?,
        outer: get("box_outer")?,
        pack: get("core_pack")?,
        stats: get("stats")?,
        cut: get("cut_planes")?,
        _module: module.keep(),
    })
}

/// The working box of the subgrid at `origin` as a domain of its own (flags only; for the
/// brick classification and the initial state).
pub(super) fn box_domain(dom: &Domain, origin: [usize; 3], bn: [usize; 3]) -> Domain {
    let n = dom.n;
    let mut flags = vec![0u8; vol(bn)];
    for z in 0..bn[2] {
        for y in 0..bn[1] {
            for x in 0..bn[0] {
                let gx = (origin[0] + n[0] + x - 1) % n[0];
                let gy = (origin[1] + n[1] + y - 1) % n[1];
                let gz = (origin[2] + n[2] + z - 1) % n[2];
                flags[x + bn[0] * (y + bn[1] * z)] = dom.flags[dom.index(gx, gy, gz)];
            }
        }
    }
    Domain {
        lattice: dom.lattice,
        n: bn,
        flags,
        walls: dom.walls.clone(),
        inlets: Vec::new(),
        outlets: Vec::new(),
        obstacles: dom.obstacles.clone(),
        surfaces: Vec::new(),
        surfaces_at: [0.0; 3],
        rho0: dom.rho0,
    }
}

/// The initial state of a subgrid's box: every box cell's equilibrium (inlets at their
/// velocity) stored where the dense solver stores it at step 0 ([`ep_scatter`] on the box as a
/// periodic grid of its own: the slots of the subgrid's own cells are those of the dense
/// solver, since their writers lie in the box).
pub(super) fn initial_box(
    dom: &Domain,
    origin: [usize; 3],
    bn: [usize; 3],
    init: &(impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync),
    out: &mut [f32],
) {
    match dom.lattice {
        Lattice::D3Q27 => initial_box_l::<D3Q27>(dom, origin, bn, init, out),
        _ => initial_box_l::<D3Q19>(dom, origin, bn, init, out),
    }
}

pub(super) fn initial_box_l<L: Lat>(
    dom: &Domain,
    origin: [usize; 3],
    bn: [usize; 3],
    init: &(impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync),
    out: &mut [f32],
) {
    let bd = box_domain(dom, origin, bn);
    let n = dom.n;
    let nb = vol(bn);
    // Equilibria in parallel (Q values a cell, in one array: the memory plan counts 4 Q bytes a
    // cell beside the box), then the scatter (cheap) in order.
    let mut feq = vec![0.0f32; L::Q * nb];
    feq.par_chunks_mut(L::Q).enumerate().for_each(|(b, f)| {
        let flag = bd.flags[b];
        if is_solid(flag) {
            return;
        }
        let l = [b % bn[0], (b / bn[0]) % bn[1], b / (bn[0] * bn[1])];
        let p = [0, 1, 2].map(|a| (origin[a] + n[a] + l[a] - 1) % n[a]);
        let (rho, mut u) = init(p);
        if kind_of(flag) == kind::INLET {
            u = dom.inlets[id_of(flag)].velocity_at(p, L::D);
        }
        let mut e = [0.0f32; MAX_Q];
        equilibrium::<L>(rho - 1.0, u, &mut e);
        f.copy_from_slice(&e[..L::Q]);
    });
    let mut e = [0.0f32; MAX_Q];
    for (b, f) in feq.chunks(L::Q).enumerate() {
        if !is_solid(bd.flags[b]) {
            e[..L::Q].copy_from_slice(f);
            ep_scatter::<L>(out, &bd.flags, bn, b, &e, false);
        }
    }
}

/// One side of a GPU's slab: the cut's two planes and the buffers of their exchange.
pub(super) struct Cut {
    /// The GPU across the cut (index among the solver's GPUs).
    pub(super) neighbour: usize,
    /// Coordinate along the axis of this GPU's layer at the cut and of the neighbour's.
    pub(super) own: u32,
    pub(super) halo: u32,
    /// Values in each buffer.
    pub(super) len: usize,
    /// Both planes as they were after the last exchange, as they are after the step (sent),
    /// as the neighbour sent them (kept for their memory: used through `ptr`).
    pub(super) _bufs: [CudaSlice<f32>; 3],
    /// Their device addresses: the exchange's launches pass addresses and are ordered by the
    /// link's events, not by cudarc's per-buffer tracking (which would hold the subgrids'
    /// launches on the main stream until the exchange stream's merge is done).
    pub(super) ptr: [u64; 3],
}

/// A GPU's second stream (the exchange), its events and the device addresses its launches use.
pub(super) struct Link {
    pub(super) comm: Arc<CudaStream>,
    /// The planes packed after the subgrids next to the cuts; the merge done.
    pub(super) packed: CudaEvent,
    pub(super) merged: CudaEvent,
    /// Addresses of the shells and the subgrid maps.
    pub(super) shells: u64,
    pub(super) axis_map: u64,
    pub(super) slab_len: u64,
    pub(super) shell_off: u64,
}

/// One GPU's NCCL communicator, handed to the thread that drives it.
#[derive(Clone, Copy)]
pub(super) struct Comm(pub(super) cudarc::nccl::sys::ncclComm_t);

// SAFETY: a communicator is used by one thread at a time (the thread of its GPU's step).
unsafe impl Send for Comm {}

/// Words of a subgrid's largest record: its core raw, or compressed with every block dense
/// (a block's header and all its samples, more than the raw core where blocks are cut short).
pub(super) fn worst_record(q: usize, size: [usize; 3]) -> u64 {
    (q * vol(size.map(|x| x - 2))).max(q * blocks_of(size) * (1 + BlockShape::DEFAULT.samples())) as u64
}

/// Codec blocks of the core of a subgrid of `s` cells.
pub(super) fn blocks_of(s: [usize; 3]) -> usize {
    crate::compress::field::block_counts(s.map(|x| x - 2), &BlockShape::DEFAULT).iter().product::<usize>()
}
