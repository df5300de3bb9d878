//! Time stepping of the blocks on the GPU: the plan of a coarse step's launches (levels,
//! interpolation and averaging in order), their lanes and graphs, and the step's parameters.

use super::*;

impl AmrGpu {
    /// Launch one coarse step of a solver whose forest and DDFs are on the device (after
    /// [`Self::upload`]); its relaxation times, forces and boundaries are read now. Returns at
    /// once (the kernels run on the device's streams; the restriction into level 0 may be left
    /// pending for the next step, see [`Self::flush`]).
    ///
    /// # Errors
    /// CUDA launch errors.
    pub fn step<L: Lat>(&mut self, lbm: &AmrLbm<L>) -> Result<(), SolverError> {
        self.sync_params(lbm)?;
        self.rearrange(true)?;
        if !self.use_graphs || self.levels.is_empty() {
            let plan = self.plan();
            let lanes = self.lanes_for(&plan)?;
            return self.run_plan(&plan, lanes);
        }
        let e = derr("replaying a coarse step");
        let key = self.parity_bits() | u32::from(self.pending.is_some()) << 31;
        if let Some((g, after)) = self.graphs.get(&key) {
            g.launch().map_err(&e)?;
            (self.odd, self.pending) = (after.odd, after.pending);
            return Ok(());
        }
        let plan = self.plan();
        let after = StepAfter { odd: self.odd, pending: self.pending };
        // The streams and events exist before the capture starts.
        let lanes = self.lanes_for(&plan)?;
        let main = self.stream.clone();
        main.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(&e)?;
        let r = self.run_plan(&plan, lanes);
        let g = StepGraph::capture(&main, self.stale_graphs.remove(&key).map(|x| x.0));
        r?;
        if let Some(g) = g.map_err(&e)? {
            g.launch().map_err(&e)?;
            self.graphs.insert(key, (g, after));
        }
        Ok(())
    }

    /// The launches of the next coarse step (`schedule::coarse_step`), the pending restriction
    /// first; updates the parities and the pending restriction as the launches will.
    pub(super) fn plan(&mut self) -> schedule::Plan {
        let defer = self.pipeline && self.concurrent;
        let has = |o: &Op| self.op_range(o).1 > 0;
        let mut odd = self.odd;
        let curved = self.walls_level();
        let plan = schedule::coarse_step(self.levels.len(), &mut odd, self.pending, defer, self.inplace.is_some(), curved, &has);
        self.odd = odd;
        self.pending = plan.pending;
        plan
    }

    /// The launch list range an operation runs over.
    pub(super) fn op_range(&self, o: &Op) -> (usize, usize) {
        let lv = |l: usize| self.levels.get(l).copied().unwrap_or_default();
        match o.kind {
            OpKind::Step(p) => lv(o.level).part(p),
            OpKind::Interpolate => lv(o.level).near_coarser,
            OpKind::Average => lv(o.level - 1).feeds,
            OpKind::Walls => lv(o.level).all,
        }
    }

    /// Launch an operation on stream `s`.
    pub(super) fn launch_op(&mut self, s: &Arc<CudaStream>, o: Op) -> Result<(), SolverError> {
        let range = self.op_range(&o);
        let k = match o.kind {
            OpKind::Step(_) => Kernel::Step,
            OpKind::Interpolate => Kernel::Interpolate,
            OpKind::Average => Kernel::Average,
            OpKind::Walls => return self.launch_walls(s, o.level, range, o.sel),
        };
        self.launch(s, k, o.level, range, self.dims, o.sel)
    }

    /// Launch `amr_walls` over a range of the launch lists after a step of level `l` with the
    /// step's `sel` (the interpolated walls' links with q < 1/2; counted as stepping in the
    /// profile).
    pub(super) fn launch_walls(
        &mut self,
        s: &Arc<CudaStream>,
        l: usize,
        (off, count): (usize, usize),
        sel: u32,
    ) -> Result<(), SolverError> {
        let Some(c) = &self.curved else {
            return Ok(());
        };
        if count == 0 {
            return Ok(());
        }
        let cells = count * BLOCK.pow(self.dims as u32);
        let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let ids = self.lists.slice(off..off + count);
        let (count, l) = (count as u32, l as u32);
        let t0 = self.profile_start()?;
        let mut b = s.launch_builder(&c.walls_k);
        b.arg(&ids).arg(&count).arg(&l).arg(&self.pos).arg(&self.nbr);
        b.arg(&mut self.f).arg(&mut self.post).arg(&sel).arg(&self.codes).arg(&self.code_cells).arg(&c.table);
        // SAFETY: the arguments match amr_walls in kernels/amr.cu; the lists hold IDs below the
        // capacity every array was allocated for; threads past count * B return.
        unsafe { b.launch(cfg) }.map_err(derr("launching a block kernel"))?;
        self.profile_end(Kernel::Step, t0)
    }

    /// Launch the deferred restriction into level 0, if any: before anything reads the data,
    /// changes the parameters or the mesh.
    ///
    /// # Errors
    /// CUDA launch errors.
    pub fn flush(&mut self) -> Result<(), SolverError> {
        if let Some(o) = self.pending.take() {
            let main = self.stream.clone();
            self.launch_op(&main, o)?;
        }
        Ok(())
    }

    /// Where a plan's launches run (`schedule::assign`; `None` without concurrency: in order on
    /// the device's stream), making the streams and events that needs.
    pub(super) fn lanes_for(&mut self, plan: &schedule::Plan) -> Result<Option<Assigned>, SolverError> {
        if !self.concurrent {
            return Ok(None);
        }
        let e = derr("making the block solver's streams");
        let ctx = self.stream.context().clone();
        if self.lanes.is_none() {
            let (least, greatest) = cudarc::driver::result::stream::get_priority_range().map_err(&e)?;
            let priority = if self.priorities { [least, greatest] } else { [0, 0] };
            self.lanes =
                Some(Lanes { streams: [Vec::new(), Vec::new()], events: Vec::new(), start: ctx.new_event(None).map_err(&e)?, priority });
        }
        let assigned = schedule::assign(plan, &|o| self.high(o));
        let last = &assigned.1;
        let lanes = self.lanes.as_mut().expect("made above");
        for c in 0..2 {
            while lanes.streams[c].len() < last[c].len() {
                lanes.streams[c].push(ctx.new_stream_with_priority(lanes.priority[c]).map_err(&e)?);
            }
        }
        while lanes.events.len() < plan.ops.len() {
            lanes.events.push(ctx.new_event(None).map_err(&e)?);
        }
        Ok(Some(assigned))
    }

    /// Whether an operation runs on a high-priority stream: all but level 0's steps.
    pub(super) fn high(&self, o: &Op) -> bool {
        !(matches!(o.kind, OpKind::Step(_)) && o.level == 0)
    }

    /// Launch a plan: in order on the device's stream without concurrency, else on the streams
    /// [`Self::lanes_for`] gave, each launch waiting for its dependencies' events, the step's
    /// first launches for its start and its end for every stream's last launch.
    pub(super) fn run_plan(&mut self, plan: &schedule::Plan, assigned: Option<Assigned>) -> Result<(), SolverError> {
        let main = self.stream.clone();
        let Some((assigned, last)) = assigned else {
            for &o in &plan.ops {
                self.launch_op(&main, o)?;
            }
            return Ok(());
        };
        let lanes = self.lanes.take().expect("made by lanes_for");
        let e = derr("ordering the block solver's streams");
        let r = (|| {
            lanes.start.record(&main).map_err(&e)?;
            for (i, (&o, lane)) in plan.ops.iter().zip(&assigned).enumerate() {
                let s = lanes.streams[usize::from(lane.high)][lane.stream].clone();
                if lane.join_start {
                    s.wait(&lanes.start).map_err(&e)?;
                }
                for &w in &lane.waits {
                    s.wait(&lanes.events[w]).map_err(&e)?;
                }
                self.launch_op(&s, o)?;
                lanes.events[i].record(&s).map_err(&e)?;
            }
            for &i in last.iter().flatten().flatten() {
                main.wait(&lanes.events[i]).map_err(&e)?;
            }
            Ok(())
        })();
        self.lanes = Some(lanes);
        r
    }

    /// `amr_codes` over the active blocks: what each cell's step does per direction, from the
    /// mesh as it is now; with `epoch` nonzero only for the blocks whose row or a same-level
    /// neighbour's that adaptation changed (the others' codes still hold).
    pub(super) fn work_out_codes(&mut self, dims: usize, epoch: u32) -> Result<(), SolverError> {
        // Every level at once, over the ID set (the codes are per block, from the mesh alone).
        let count = self.active;
        if count > 0 {
            let cells = count * BLOCK.pow(dims as u32);
            let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            let ids = self.id_set.slice(0..count);
            let count = count as u32;
            let mut b = self.stream.launch_builder(&self.codes_k);
            b.arg(&ids).arg(&count);
            b.arg(&self.pos).arg(&self.parent).arg(&self.child).arg(&self.nbr).arg(&self.cmask).arg(&self.solid);
            b.arg(&self.dirty).arg(&epoch).arg(&mut self.codes).arg(&self.code_cells);
            // SAFETY: the arguments match amr_codes in kernels/amr.cu; the ID set holds active
            // IDs below the capacity the codes were allocated for; threads past count * B return.
            unsafe { b.launch(cfg) }.map_err(derr("working out the step codes"))?;
        }
        self.tick("codes");
        Ok(())
    }

    /// Upload a solver's parameter table where it changed.
    pub(super) fn sync_params<L: Lat>(&mut self, lbm: &AmrLbm<L>) -> Result<(), SolverError> {
        let p = Self::params_of(lbm);
        if p.iter().map(|x| x.to_bits()).ne(self.prm_host.iter().map(|x| x.to_bits())) {
            // A deferred restriction rescales with the relaxation times of its own step.
            self.flush()?;
            self.stream.memcpy_htod(&p, &mut self.prm).map_err(derr("uploading the level parameters"))?;
            self.prm_host = p;
        }
        Ok(())
    }

    /// Launch a stepping kernel over a range of the launch lists; `sel` picks the DDF buffers
    /// (the kernels' `sel`).
    pub(super) fn launch(
        &mut self,
        s: &Arc<CudaStream>,
        k: Kernel,
        l: usize,
        (off, count): (usize, usize),
        dims: usize,
        sel: u32,
    ) -> Result<(), SolverError> {
        if count == 0 {
            return Ok(());
        }
        // amr_average's thread blocks take 64 cells each, the other kernels' 256.
        let per_block = if let Kernel::Average = k { 64 } else { 256 };
        let cells = count * BLOCK.pow(dims as u32);
        let cfg = LaunchConfig { grid_dim: (cells.div_ceil(per_block) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let ids = self.lists.slice(off..off + count);
        let (count, l, ghosts) = (count as u32, l as u32, PROLONG_GHOSTS);
        let t0 = self.profile_start()?;
        let mut b = match k {
            Kernel::Step => s.launch_builder(&self.step_k),
            Kernel::Interpolate => s.launch_builder(&self.interpolate),
            Kernel::Average | Kernel::Settle => s.launch_builder(&self.average),
        };
        b.arg(&ids).arg(&count).arg(&l).arg(&self.prm);
        if let Kernel::Step = k {
            b.arg(&self.root[0]).arg(&self.root[1]).arg(&self.root[2]);
        }
        b.arg(&self.pos).arg(&self.parent).arg(&self.child).arg(&self.nbr).arg(&self.cmask).arg(&self.solid);
        b.arg(&mut self.f).arg(&mut self.post).arg(&sel);
        if let Kernel::Step = k {
            b.arg(&self.codes).arg(&self.code_cells);
            // The interpolated walls' table (the curved amr_step takes it last).
            if let Some(c) = &self.curved {
                b.arg(&c.table);
            }
        }
        if let Kernel::Interpolate = k {
            b.arg(&ghosts).arg(&self.level).arg(&self.valid).arg(&self.fresh);
        }
        // SAFETY: the arguments match the kernels' signatures in kernels/amr.cu; the lists hold
        // IDs below the capacity every array was allocated for; threads past count * B return.
        unsafe { b.launch(cfg) }.map_err(derr("launching a block kernel"))?;
        self.profile_end(k, t0)
    }
}
