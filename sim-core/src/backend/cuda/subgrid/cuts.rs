//! Compressed subgrids over several GPUs: the subgrids are shared out in slabs along one axis
//! (each GPU its own subgrids, ring and working box), and each GPU keeps a copy of the shells of
//! the subgrids just across each of its two cuts. A subgrid next to a cut reads its ghost frame
//! from the copy and writes the slots its step changes into it, as on one GPU; after the step
//! the two cell planes at each cut (the own layer and the neighbour's) go to the neighbour
//! (NCCL, or device copies), and each GPU keeps what the other changed (`cut_planes` in
//! kernels/subgrid.cu). In-place streaming gives every slot one writer a step, so the merged
//! planes are those of one GPU: the result equals the one-GPU solver bit for bit.
//!
//! A GPU steps the subgrids next to its cuts first; with NCCL the planes then travel and merge
//! on a second stream while the other subgrids step (they never touch the planes), and the next
//! step waits for the merge. With device copies the exchange follows the step.

use super::ring::{Comm, Cut, Dev, GSub};
use crate::backend::cuda::{derr, threads};
use crate::solver::SolverError;
use cudarc::driver::sys;
use cudarc::driver::{CudaStream, DevicePtr, PushKernelArg};
use cudarc::nccl::sys as nccl;
use std::sync::Arc;

/// How the subgrids are shared among GPUs: slabs of subgrids along `axis`, one range of subgrid
/// indices along it per GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Share {
    pub(super) axis: usize,
    pub(super) ranges: Vec<(usize, usize)>,
}

/// Share `counts` subgrids per axis among `parts` GPUs: along the axis with the most subgrids
/// (the smallest planes to exchange for near-cubic subgrids; the later axis on a tie), as even
/// as whole subgrids allow.
///
/// # Errors
/// Fewer subgrids along every axis than GPUs.
pub(super) fn share(counts: [usize; 3], parts: usize) -> Result<Share, SolverError> {
    let axis = (0..3).rev().max_by_key(|&a| (counts[a], a)).unwrap_or(2);
    if counts[axis] < parts {
        return Err(SolverError::Backend(format!(
            "compressed subgrids on {parts} GPUs need at least {parts} subgrids along one axis, and the grid has {counts:?}: use a \
             smaller compression.subgrid or fewer GPUs"
        )));
    }
    let (base, extra) = (counts[axis] / parts, counts[axis] % parts);
    let mut ranges = Vec::with_capacity(parts);
    let mut at = 0;
    for p in 0..parts {
        let len = base + usize::from(p < extra);
        ranges.push((at, at + len));
        at += len;
    }
    Ok(Share { axis, ranges })
}

impl Cut {
    /// The cut's buffers of `len` values on `stream`.
    pub(super) fn new(stream: &Arc<CudaStream>, neighbour: usize, own: u32, halo: u32, len: usize) -> Result<Cut, SolverError> {
        let a = derr("allocating the cut planes");
        let bufs = [
            stream.alloc_zeros::<f32>(len).map_err(&a)?,
            stream.alloc_zeros::<f32>(len).map_err(&a)?,
            stream.alloc_zeros::<f32>(len).map_err(&a)?,
        ];
        let ptr = [0, 1, 2].map(|k| bufs[k].device_ptr(stream).0);
        Ok(Cut { neighbour, own, halo, len, _bufs: bufs, ptr })
    }
}

impl Cut {
    /// Values in one buffer (both planes, every direction).
    pub(super) fn len(q: usize, n: [usize; 3], axis: usize) -> usize {
        2 * q * n.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &x)| x).product::<usize>()
    }
}

/// The cuts of GPU `p` of `share` on a grid of `n` cells with subgrid slabs `slabs` along the
/// axis (first cell, cells): its low side, then its high side; none on one GPU.
pub(super) fn sides(share: &Share, p: usize, n: usize, slabs: &[(usize, usize)]) -> Vec<(usize, u32, u32)> {
    let parts = share.ranges.len();
    if parts < 2 {
        return Vec::new();
    }
    let (k0, k1) = share.ranges[p];
    let lo = slabs[k0].0;
    let hi = slabs[k1 - 1].0 + slabs[k1 - 1].1;
    vec![((p + parts - 1) % parts, lo as u32, ((lo + n - 1) % n) as u32), ((p + 1) % parts, (hi - 1) as u32, (hi % n) as u32)]
}

/// The order a GPU steps its subgrids in (and stores their records, so that they leave the
/// ring in the order they came): those next to a cut first, then the others, each in index
/// order; and how many are next to a cut. `slab_of` gives a subgrid's slab index along the axis.
pub(super) fn order(subs: &[GSub], range: (usize, usize), slab_of: impl Fn(&GSub) -> usize, cut: bool) -> (Vec<usize>, usize) {
    let edge = |s: &GSub| cut && (slab_of(s) == range.0 || slab_of(s) + 1 == range.1);
    let mut first: Vec<usize> = (0..subs.len()).filter(|&k| edge(&subs[k])).collect();
    let edges = first.len();
    first.extend((0..subs.len()).filter(|&k| !edge(&subs[k])));
    (first, edges)
}

impl Dev {
    /// Launch `cut_planes` in `mode` for side `k` on `stream` (see kernels/subgrid.cu).
    pub(super) fn cut_planes(&self, stream: &Arc<CudaStream>, k: usize, mode: u32) -> Result<(), SolverError> {
        let l = self.link.as_ref().ok_or_else(|| SolverError::Backend("a GPU without cuts exchanged planes (a bug)".into()))?;
        let (axis, n, c) = (self.axis as u32, self.n, self.counts);
        let cut = &self.cuts[k];
        let [before, send, recv] = cut.ptr;
        let mut b = stream.launch_builder(&self.kernels[0].1.cut);
        b.arg(&l.shells).arg(&send).arg(&before).arg(&recv).arg(&l.axis_map).arg(&l.slab_len).arg(&l.shell_off);
        b.arg(&n[0]).arg(&n[1]).arg(&n[2]).arg(&c[0]).arg(&c[1]).arg(&axis).arg(&cut.own).arg(&cut.halo).arg(&mode);
        // SAFETY: arguments match cut_planes (addresses of live buffers: every buffer holds both
        // planes of this cut, the shells this GPU's own and copied shells, in which every plane
        // cell lies); the caller orders the launch after the steps that wrote the planes.
        unsafe { b.launch(threads(cut.len / self.q)) }.map_err(derr("launching cut_planes"))?;
        Ok(())
    }

    /// Pack both sides' planes into their `send` buffers (main stream).
    pub(super) fn pack_cuts(&self) -> Result<(), SolverError> {
        for k in 0..self.cuts.len() {
            self.cut_planes(&self.stream, k, 0)?;
        }
        Ok(())
    }

    /// After the subgrids next to the cuts: pack the planes, and on the exchange stream send
    /// them to the neighbours, receive theirs (NCCL, this GPU's communicator) and merge.
    pub(super) fn launch_exchange(&self, comm: Comm) -> Result<(), SolverError> {
        self.pack_cuts()?;
        let l = self.link.as_ref().ok_or_else(|| SolverError::Backend("a GPU without cuts exchanged planes (a bug)".into()))?;
        l.packed.record(&self.stream).map_err(derr("recording the packed planes"))?;
        l.comm.wait(&l.packed).map_err(derr("ordering the cut exchange"))?;
        let bytes = 4 * self.cuts[0].len;
        let ty = nccl::ncclDataType_t::ncclUint8;
        let err = |e: cudarc::nccl::result::NcclError| SolverError::Backend(format!("NCCL error in the cut exchange: {e:?}"));
        let st = l.comm.cu_stream() as nccl::cudaStream_t;
        cudarc::nccl::result::group_start().map_err(err)?;
        // Sends: low side, then high side; receives: from the high neighbour (its low side)
        // into the high side, then from the low neighbour into the low side. Two GPUs are each
        // other's both neighbours, and NCCL matches messages between a pair in order.
        for k in [0, 1] {
            let c = &self.cuts[k];
            // SAFETY: the buffer holds `bytes` and lives as long as the solver; the next pack
            // waits for the merge that follows this send.
            unsafe { cudarc::nccl::result::send(c.ptr[1] as *const _, bytes, ty, c.neighbour as i32, comm.0, st) }.map_err(err)?;
        }
        for k in [1, 0] {
            let c = &self.cuts[k];
            // SAFETY: as above.
            unsafe { cudarc::nccl::result::recv(c.ptr[2] as *mut _, bytes, ty, c.neighbour as i32, comm.0, st) }.map_err(err)?;
        }
        cudarc::nccl::result::group_end().map_err(err)?;
        for k in 0..self.cuts.len() {
            self.cut_planes(&l.comm, k, 1)?;
        }
        l.merged.record(&l.comm).map_err(derr("recording the merge"))?;
        Ok(())
    }

    /// The main stream waits for the last merge.
    pub(super) fn wait_merge(&self) -> Result<(), SolverError> {
        match &self.link {
            Some(l) => self.stream.wait(&l.merged).map_err(derr("ordering after the cut exchange")),
            None => Ok(()),
        }
    }
}

/// NCCL communicators, one per GPU of the solver (destroyed on drop, or aborted where a GPU's
/// step failed and its neighbours may wait for planes that never come).
pub(super) struct Comms(pub(super) Vec<nccl::ncclComm_t>, pub(super) std::sync::atomic::AtomicBool);

// SAFETY: NCCL communicators may be used from any thread, one call at a time (the solver is
// used by one thread at a time).
unsafe impl Send for Comms {}
// SAFETY: as above: `&self` methods of the solver never use the communicators.
unsafe impl Sync for Comms {}

impl Drop for Comms {
    fn drop(&mut self) {
        let broken = self.1.load(std::sync::atomic::Ordering::Relaxed);
        for &c in &self.0 {
            // SAFETY: each communicator was created by NCCL's init and is destroyed (or
            // aborted) once.
            let _ = unsafe {
                if broken {
                    cudarc::nccl::result::comm_abort(c)
                } else {
                    cudarc::nccl::result::comm_destroy(c)
                }
            };
        }
    }
}

impl Comms {
    /// GPU `k`'s communicator.
    pub(super) fn of(&self, k: usize) -> Comm {
        Comm(self.0[k])
    }
}

/// One communicator per device where each GPU is a different device and `libnccl` loads
/// (`ESOFLOW_NCCL=0` turns it off), else `None`: device copies.
pub(super) fn communicators(devices: &[usize]) -> Result<Option<Comms>, SolverError> {
    let mut d = devices.to_vec();
    d.sort_unstable();
    d.dedup();
    // SAFETY: only tries to open the library.
    let present = unsafe { nccl::is_culib_present() };
    if devices.len() < 2 || d.len() != devices.len() || !present || std::env::var("ESOFLOW_NCCL").as_deref() == Ok("0") {
        return Ok(None);
    }
    let k = devices.len();
    let mut comms = vec![std::ptr::null_mut(); k];
    let ords: Vec<i32> = devices.iter().map(|&d| d as i32).collect();
    // SAFETY: `comms` has room for k communicators and `ords` lists k devices.
    unsafe { cudarc::nccl::result::comm_init_all(comms.as_mut_ptr(), k as i32, ords.as_ptr()) }
        .map_err(|e| SolverError::Backend(format!("NCCL could not set up {k} GPUs (ncclCommInitAll): {e:?}")))?;
    Ok(Some(Comms(comms, std::sync::atomic::AtomicBool::new(false))))
}

/// Send every GPU's packed planes to its neighbours' receive buffers: a GPU's low side goes to
/// its low neighbour's high side and the other way round. With NCCL the transfers are queued
/// on each GPU's stream; with device copies the call returns once they are done.
pub(super) fn exchange(devs: &mut [&mut Dev], comms: Option<&Comms>) -> Result<(), SolverError> {
    let ptrs: Vec<[(u64, u64); 2]> = devs.iter().map(|d| [0, 1].map(|k| (d.cuts[k].ptr[1], d.cuts[k].ptr[2]))).collect();
    let bytes = 4 * devs[0].cuts[0].len;
    match comms {
        Some(c) => {
            let ty = nccl::ncclDataType_t::ncclUint8;
            let err = |e: cudarc::nccl::result::NcclError| SolverError::Backend(format!("NCCL error in the cut exchange: {e:?}"));
            cudarc::nccl::result::group_start().map_err(err)?;
            for (i, d) in devs.iter().enumerate() {
                let st = d.stream.cu_stream() as nccl::cudaStream_t;
                // Sends: low side, then high side; receives: from the high neighbour (its low
                // side) into the high side, then from the low neighbour into the low side. Two
                // GPUs are each other's both neighbours, and NCCL matches messages between a pair
                // in order.
                for k in [0, 1] {
                    // SAFETY: the buffer holds `bytes` and lives until the step's end.
                    unsafe { cudarc::nccl::result::send(ptrs[i][k].0 as *const _, bytes, ty, d.cuts[k].neighbour as i32, c.0[i], st) }
                        .map_err(err)?;
                }
                for k in [1, 0] {
                    // SAFETY: as above.
                    unsafe { cudarc::nccl::result::recv(ptrs[i][k].1 as *mut _, bytes, ty, d.cuts[k].neighbour as i32, c.0[i], st) }
                        .map_err(err)?;
                }
            }
            cudarc::nccl::result::group_end().map_err(err)?;
        }
        None => {
            for d in devs.iter() {
                d.stream.synchronize().map_err(derr("waiting for the cut planes"))?;
            }
            for i in 0..devs.len() {
                for k in [0, 1] {
                    let j = devs[i].cuts[k].neighbour;
                    let (src, dst) = (ptrs[i][k].0, ptrs[j][1 - k].1);
                    let (sc, dc) = (devs[i].ctx.cu_ctx(), devs[j].ctx.cu_ctx());
                    // SAFETY: both ranges hold `bytes` in live buffers; the stream is the
                    // source's.
                    unsafe { sys::cuMemcpyPeerAsync(dst, dc, src, sc, bytes, devs[i].stream.cu_stream()).result() }
                        .map_err(derr("copying cut planes"))?;
                }
            }
            for d in devs.iter() {
                d.stream.synchronize().map_err(derr("copying cut planes"))?;
            }
        }
    }
    Ok(())
}

/// From the main thread, after every GPU packed its planes into `send`: exchange them and
/// merge (`mode` 1) or copy the neighbours' own planes into the copies (`mode` 2, after a
/// build), on the main streams.
pub(super) fn settle(devs: &mut [&mut Dev], comms: Option<&Comms>, mode: u32) -> Result<(), SolverError> {
    if devs.len() < 2 {
        return Ok(());
    }
    exchange(devs, comms)?;
    for d in devs.iter_mut() {
        for k in 0..d.cuts.len() {
            d.cut_planes(&d.stream, k, mode)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subgrids_are_shared_along_the_axis_with_the_most() {
        assert_eq!(share([10, 4, 4], 2).unwrap(), Share { axis: 0, ranges: vec![(0, 5), (5, 10)] });
        assert_eq!(share([3, 3, 7], 3).unwrap(), Share { axis: 2, ranges: vec![(0, 3), (3, 5), (5, 7)] });
        assert_eq!(share([2, 2, 2], 2).unwrap().axis, 2);
        let e = share([1, 3, 2], 4).unwrap_err().to_string();
        assert!(e.contains("at least 4 subgrids") && e.contains("compression.subgrid"), "{e}");
    }

    #[test]
    fn each_cut_faces_the_neighbours_cut() {
        let s = share([4, 1, 1], 2).unwrap();
        let slabs = [(0, 10), (10, 10), (20, 10), (30, 12)];
        let a = sides(&s, 0, 42, &slabs);
        let b = sides(&s, 1, 42, &slabs);
        // GPU 0: layers 0..20; GPU 1: 20..42 (periodic: 41 meets 0).
        assert_eq!(a, vec![(1, 0, 41), (1, 19, 20)]);
        assert_eq!(b, vec![(0, 20, 19), (0, 41, 0)]);
        // A low side's own and halo planes are the high side's halo and own across the cut.
        assert_eq!((a[1].1, a[1].2), (b[0].2, b[0].1));
        assert_eq!((b[1].1, b[1].2), (a[0].2, a[0].1));
        assert!(sides(&share([4, 1, 1], 1).unwrap(), 0, 42, &slabs).is_empty());
    }
}
