//! Where the subgrids of a grid lie and one GPU's share of them built: its subgrids' tables,
//! the shells (its own and the copies across its cuts), the working box, scratch and the ring
//! sized from the memory budget.

use super::cuts::{self, Share};
use super::*;
use rayon::prelude::*;

/// The subgrids of a grid and how they are shared among GPUs.
pub(super) struct Layout {
    pub(super) q: usize,
    /// Origin and size of every subgrid, x fastest.
    boxes: Vec<([usize; 3], [usize; 3])>,
    share: Share,
    /// Subgrids per axis.
    counts: [usize; 3],
    /// The subgrid slabs along the shared axis (first cell, cells).
    along: Vec<(usize, usize)>,
    /// Per axis and coordinate: subgrid index (high 16 bits) and coordinate inside it.
    axis_map: Vec<u32>,
    /// Subgrid lengths of the three axes one after another.
    lens: Vec<u32>,
    /// Largest box (cells), core (cells) and codec block count of a core.
    max_nb: usize,
    max_core: usize,
    max_blocks: usize,
}

/// Top bit of a subgrid's shell offset: only its two faces across the shared axis are kept.
const FACES_ONLY: u64 = 1 << 63;

impl Layout {
    /// Subgrid slabs `sl` per axis of `dom`, shared as `share` says.
    pub(super) fn new(dom: &Domain, sl: &[Vec<(usize, usize)>; 3], share: Share) -> Layout {
        let mut boxes = Vec::new();
        for &(z0, sz) in &sl[2] {
            for &(y0, sy) in &sl[1] {
                for &(x0, sx) in &sl[0] {
                    boxes.push(([x0, y0, z0], [sx, sy, sz]));
                }
            }
        }
        let n = dom.n;
        let mut axis_map = Vec::with_capacity(n[0] + n[1] + n[2]);
        let mut lens = Vec::new();
        for s in sl {
            for (k, &(_, len)) in s.iter().enumerate() {
                lens.push(len as u32);
                axis_map.extend((0..len).map(|u| ((k as u32) << 16) | u as u32));
            }
        }
        Layout {
            q: dom.lattice.q(),
            max_nb: boxes.iter().map(|&(_, s)| vol(s.map(|x| x + 2))).max().unwrap_or(0),
            max_core: boxes.iter().map(|&(_, s)| vol(s.map(|x| x - 2))).max().unwrap_or(0),
            max_blocks: boxes.iter().map(|&(_, s)| blocks_of(s)).max().unwrap_or(0),
            boxes,
            counts: [0, 1, 2].map(|a| sl[a].len()),
            along: sl[share.axis].clone(),
            share,
            axis_map,
            lens,
        }
    }

    /// The slab index along the shared axis of subgrid `id`.
    fn slab_of(&self, id: usize) -> usize {
        let k = [id % self.counts[0], (id / self.counts[0]) % self.counts[1], id / (self.counts[0] * self.counts[1])];
        k[self.share.axis]
    }

    /// GPU `p`'s share on device `ordinal`: its subgrids (not yet filled), the copies of the
    /// shells across its cuts, a ring for `budget` bytes of device memory in all.
    ///
    /// # Errors
    /// The device, a kernel, a budget below what the fixed part needs, not enough memory.
    pub(super) fn part(
        &self,
        dom: &Domain,
        params: &Params,
        p: usize,
        ordinal: usize,
        tau: Option<f32>,
        budget: Option<u64>,
    ) -> Result<Dev, SolverError> {
        let (q, n, axis) = (self.q, dom.n, self.share.axis);
        let ctx = CudaContext::new(ordinal).map_err(derr("opening the device"))?;
        // SAFETY: every slice below is made after this call. Slices are used on `stream`; the
        // exchange stream reaches the shells, maps and cut buffers through raw addresses, after
        // the `packed` event and before the main stream waits for `merged` (cuts.rs), so
        // cudarc's tracking would order nothing the events do not. With tracking on and two
        // streams in the context, every launch would also record and wait for an event per
        // buffer argument.
        unsafe { ctx.disable_event_tracking() };
        let info = device_info(&ctx).map_err(SolverError::Backend)?;
        let stream = ctx.default_stream();
        let parts = self.share.ranges.len();
        let range = self.share.ranges[p];
        let mine = |k: usize| (range.0..range.1).contains(&k);
        let own: Vec<usize> = (0..self.boxes.len()).filter(|&id| mine(self.slab_of(id))).collect();
        // The subgrid slabs just across the cuts, whose shells this GPU keeps a copy of.
        let c = self.counts[axis];
        let mut across: Vec<usize> = if parts > 1 { vec![(range.0 + c - 1) % c, range.1 % c] } else { Vec::new() };
        across.dedup();
        across.retain(|&k| !mine(k));
        let halo: Vec<usize> = (0..self.boxes.len()).filter(|&id| across.contains(&self.slab_of(id))).collect();
        // Own subgrids' whole shells, then of each subgrid across a cut its two faces across the
        // axis (FACES_ONLY in kernels/subgrid.cu): the boxes reach no other cells of it.
        let mut shell_off = vec![0u64; self.boxes.len()];
        let mut shell_floats = 0usize;
        for &id in &own {
            shell_off[id] = shell_floats as u64;
            shell_floats += q * shell_cells(self.boxes[id].1);
        }
        for &id in &halo {
            shell_off[id] = shell_floats as u64 | FACES_ONLY;
            let s = self.boxes[id].1;
            shell_floats += q * 2 * s.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &x)| x).product::<usize>();
        }
        let own_shell_floats: usize = own.iter().map(|&id| q * shell_cells(self.boxes[id].1)).sum();
        let shape = BlockShape::DEFAULT;
        // Worst case of one record: every block dense, or the raw core.
        let scratch_words = (q * self.max_blocks * (1 + shape.samples())).max(q * self.max_core);
        let sides = cuts::sides(&self.share, p, n[axis], &self.along);
        // The flags of the own layers and of the layer beyond each cut (the boxes' frames).
        let flag_layers = if parts > 1 {
            let (lo, hi) = (self.along[range.0].0, self.along[range.1 - 1].0 + self.along[range.1 - 1].1);
            if hi - lo + 2 >= n[axis] {
                (0, n[axis] as u32)
            } else {
                (((lo + n[axis] - 1) % n[axis]) as u32, (hi - lo + 2) as u32)
            }
        } else {
            (0, n[axis] as u32)
        };
        let flag_cells = dom.cells() / n[axis] * flag_layers.1 as usize;
        let cut_len = Cut::len(q, n, axis);
        let max_nb = self.max_nb;
        // Grid flags; box flags, change marks, DDFs and field planes; shells; scratch; block
        // offsets; axis maps; three buffers per cut.
        let fixed = (flag_cells + max_nb * (1 + 4 + 4 * q + 16) + 4 * shell_floats + 4 * scratch_words) as u64
            + 8 * (q * self.max_blocks * own.len()) as u64
            + 4 * (n[0] + n[1] + n[2]) as u64
            + 12 * (sides.len() * cut_len) as u64;
        let raw_core_words: u64 = own.iter().map(|&id| (q * vol(self.boxes[id].1.map(|x| x - 2))) as u64).sum();
        let free = info.mem.0 as u64;
        let sizing = RingSizing {
            fixed,
            least: fixed + raw_core_words / 25,
            max_words: own.iter().map(|&id| worst_record(q, self.boxes[id].1)).sum(),
            shell_bytes: 4 * own_shell_floats as u64,
        };
        let ring_words = sizing.words(budget, free)?;
        let need = fixed + 4 * ring_words;
        if need > free {
            return Err(SolverError::Backend(format!(
                "out of GPU memory: the compressed-subgrid state needs {} but {} has {} free; lower compression.memory_budget \
                 or use a smaller grid",
                human_bytes(need),
                info.name,
                human_bytes(free)
            )));
        }
        let a = |e| derr("allocating the compressed-subgrid state")(e);
        let codec = GpuCodec::new(Arc::clone(&stream))?;
        let mut kernels: Vec<([usize; 3], BoxKernels)> = Vec::new();
        let mut subs = Vec::with_capacity(own.len());
        // The boxes' brick lists (host work: a few at once).
        let bricks: Vec<(Vec<u32>, u32)> = own
            .par_iter()
            .map(|&id| {
                let (origin, size) = self.boxes[id];
                box_bricks(dom, origin, size.map(|s| s + 2))
            })
            .collect();
        for (&id, (bricks, n_bricks)) in own.iter().zip(bricks) {
            let (origin, size) = self.boxes[id];
            let bn = size.map(|s| s + 2);
            let k = match kernels.iter().position(|(s, _)| *s == bn) {
                Some(k) => k,
                None => {
                    kernels.push((bn, load_box(&ctx, &box_config(dom, params, bn), &info)?));
                    kernels.len() - 1
                }
            };
            let mut inlets = stream.alloc_zeros::<u8>(16 * 64).map_err(a)?;
            upload_pod(&stream, &gpu_inlets(dom, origin.map(|o| 1 - o as i32)), &mut inlets)?;
            subs.push(GSub {
                id,
                origin,
                size,
                tau: tau.unwrap_or(0.0),
                record: Record::None,
                raw: true,
                offsets: stream.alloc_zeros::<u64>((q * blocks_of(size)).max(1)).map_err(a)?,
                bricks: stream.clone_htod(&bricks).map_err(a)?,
                n_bricks,
                inlets,
                kernels: k,
                memo: Memo::default(),
            });
        }
        if kernels.is_empty() {
            return Err(SolverError::Backend("a GPU was given no subgrids (a bug)".into()));
        }
        let (order, edges) = cuts::order(&subs, range, |s| self.slab_of(s.id), parts > 1);
        let cut_list = sides.iter().map(|&(nb, own, halo)| Cut::new(&stream, nb, own, halo, cut_len)).collect::<Result<Vec<_>, _>>()?;
        let mut walls = vec![0.0f32; 48];
        for (i, w) in params.walls.iter().enumerate().take(16) {
            walls[3 * i..3 * i + 3].copy_from_slice(w);
        }
        let mut outlets = stream.alloc_zeros::<u8>(16 * 64).map_err(a)?;
        upload_pod(&stream, &gpu_outlets(dom, [0; 3]), &mut outlets)?;
        let shells = stream.alloc_zeros::<f32>(shell_floats.max(1)).map_err(a)?;
        let shell_off = stream.clone_htod(&shell_off).map_err(a)?;
        let axis_map = stream.clone_htod(&self.axis_map).map_err(a)?;
        let slab_len = stream.clone_htod(&self.lens).map_err(a)?;
        let link = if cut_list.is_empty() {
            None
        } else {
            // The exchange at the highest priority: its blocks run as soon as they are ready,
            // not after the subgrids' launches drain.
            ctx.bind_to_thread().map_err(derr("binding the CUDA context"))?;
            let (_, highest) = cudarc::driver::result::stream::get_priority_range().map_err(derr("reading stream priorities"))?;
            let comm = ctx.new_stream_with_priority(highest).map_err(derr("creating the exchange stream"))?;
            let ptr = |b: &cudarc::driver::CudaSlice<_>| cudarc::driver::DevicePtr::device_ptr(b, &stream).0;
            Some(Link {
                comm,
                packed: ctx.new_event(None).map_err(derr("creating events"))?,
                merged: ctx.new_event(None).map_err(derr("creating events"))?,
                shells: ptr(&shells),
                axis_map: cudarc::driver::DevicePtr::device_ptr(&axis_map, &stream).0,
                slab_len: cudarc::driver::DevicePtr::device_ptr(&slab_len, &stream).0,
                shell_off: cudarc::driver::DevicePtr::device_ptr(&shell_off, &stream).0,
            })
        };
        Ok(Dev {
            info,
            ordinal,
            q,
            n: n.map(|x| x as u32),
            counts: [self.counts[0] as u32, self.counts[1] as u32],
            subs,
            order,
            edges,
            axis,
            index: p,
            cuts: cut_list,
            link,
            fixed,
            sizing,
            own_shell_floats: own_shell_floats as u64,
            kernels,
            codec,
            gflags: stream.clone_htod(&layers_of(&dom.flags, n, axis, flag_layers)).map_err(a)?,
            flag_layers,
            bflags: stream.alloc_zeros::<u8>(max_nb).map_err(a)?,
            boxbuf: stream.alloc_zeros::<f32>(q * max_nb).map_err(a)?,
            changed: stream.alloc_zeros::<u32>(max_nb).map_err(a)?,
            shells,
            shell_off,
            axis_map,
            slab_len,
            scratch: stream.alloc_zeros::<u32>(scratch_words.max(1)).map_err(a)?,
            ring: stream.alloc_zeros::<u32>(ring_words as usize).map_err(a)?,
            ring_tail: 0,
            ring_used: 0,
            pending: None,
            // SAFETY: the word is only read after the cursor was copied into it.
            sizes: unsafe { ctx.alloc_pinned_with_flags::<u64>(1, 0) }.map_err(a)?,
            walls: stream.clone_htod(&walls).map_err(a)?,
            outlets,
            forces: stream.alloc_zeros::<f64>(48).map_err(a)?,
            no_links: stream.clone_htod(&crate::walls::Links::default().packed()).map_err(a)?,
            no_links_save: stream.alloc_zeros::<f32>(1).map_err(a)?,
            planes: None,
            spilled_warned: false,
            events: Vec::new(),
            unread: None,
            ctx,
            stream,
        })
    }
}
