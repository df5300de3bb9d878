//! Moving the blocks' data on the GPU: the maxima of the criterion's field per block, the
//! transfer of the DDFs when the forest adapts (copies, interpolation to new children, averaging
//! to new parents) and the download of the DDFs to the host's forest.

use super::*;

impl AmrGpu {
    /// The criterion's block maximum of every block (|vorticity| or, with `q`, the Q
    /// criterion, per unit time of level 0; 0 for non-leaves and free IDs), indexed by ID, as
    /// [`AmrLbm::block_vorticity`] and [`AmrLbm::block_q`] compute them from the same DDFs.
    /// Only these floats come back from the device.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn block_values<L: Lat>(&mut self, lbm: &AmrLbm<L>, q: bool) -> Result<Vec<f32>, SolverError> {
        // Free IDs keep the values of their last active block: zeros first.
        self.stream.memset_zeros(&mut self.values).map_err(derr("computing the refinement criterion"))?;
        self.block_maxima(lbm, q)?;
        self.stream.clone_dtoh(&self.values).map_err(derr("reading the refinement criterion"))
    }

    /// [`Self::block_values`] into the device's `values`, not read back.
    /// The DDFs are read where the steps left them (no settle: most adaptations change
    /// nothing, and [`Self::adapt_marked`] settles only where they do).
    pub(super) fn block_maxima<L: Lat>(&mut self, lbm: &AmrLbm<L>, q: bool) -> Result<(), SolverError> {
        self.flush()?;
        // An adaptation's halo form (no step since): into the stepping arrangement first.
        if self.halo {
            self.rearrange(true)?;
        }
        self.sync_params(lbm)?;
        let e = derr("computing the refinement criterion");
        // No zeroing first: every active block gets its value, and the targets read only
        // theirs (free IDs get target 0 without a look at their stale value; block_values
        // zeroes them).
        let b = BLOCK.pow(L::D as u32) as u32;
        let q = u32::from(q);
        // Every level at once, over the ID set.
        let count = self.active;
        if count > 0 {
            let ids = self.id_set.slice(0..count);
            let cfg = LaunchConfig { grid_dim: (count as u32, 1, 1), block_dim: (b, 1, 1), shared_mem_bytes: 0 };
            let mut l = self.stream.launch_builder(&self.block_max);
            // Bit l: level l made an odd number of steps since the last settle (two buffers:
            // its data is in `post`; in place: its parity, `ep` where not at rest).
            let par = self.parity_bits();
            let ep = u32::from(self.inplace.is_some() && !self.at_rest);
            l.arg(&ids).arg(&q).arg(&self.prm).arg(&self.level).arg(&self.child).arg(&self.solid).arg(&self.nbr);
            l.arg(&self.f).arg(if self.inplace.is_some() { &self.f } else { &self.post }).arg(&par).arg(&ep).arg(&mut self.values);
            // SAFETY: arguments as amr_block_max declares them; one thread block of B threads
            // per listed ID, every ID below the capacity the arrays hold.
            unsafe { l.launch(cfg) }.map_err(&e)?;
        }
        self.tick("block maxima");
        Ok(())
    }

    /// Move the DDFs on the device through an adaptation whose mesh part the host has just
    /// done ([`AmrLbm::adapt_mesh`], `report` its result): `lbm` holds the new forest, the
    /// device still the old one. In the order of [`AmrLbm::adapt_to`]: flag the cells that
    /// hold current data and restrict into the coarsened blocks on the old mesh; upload the new
    /// mesh; interpolate the new children from their parents' level and shift them to their
    /// parent cells' mass; refresh the cells that start being read. Bit for bit the CPU's.
    ///
    /// # Errors
    /// CUDA errors.
    pub fn transfer<L: Lat>(&mut self, lbm: &AmrLbm<L>, report: &AdaptReport) -> Result<(), SolverError> {
        let forest = lbm.forest();
        let k = forest.children_per_block() as u32;
        // One list buffer: the coarsened blocks, then per level of the refined ones (coarse
        // first, as the CPU: a new child may read the new children one level up) their
        // children and themselves.
        let mut xl: Vec<u32> = report.coarsened.clone();
        let nc = xl.len();
        let mut groups = Vec::new();
        for g in crate::amr::lbm::refined_by_level(forest, &report.refined) {
            let start = xl.len();
            xl.extend(g.iter().flat_map(|&p| (0..k).map(move |j| forest.first_child(p) + j)));
            let nn = xl.len() - start;
            xl.extend(&g);
            groups.push((start, nn, g.len()));
        }
        if xl.is_empty() {
            xl.push(0);
        }
        let e = derr("moving the DDFs through an adaptation");
        self.settle_for_mesh()?;
        self.sync_params(lbm)?;
        self.stream.memcpy_htod(&xl, &mut self.xlists.slice_mut(0..xl.len())).map_err(&e)?;
        let mut fresh = vec![0u8; self.capacity];
        report.refined.iter().for_each(|&p| fresh[p as usize] = 1);
        // Old mesh: current cells, then the coarsened blocks from their children.
        self.stream.memset_zeros(&mut self.valid).map_err(&e)?;
        self.transfer_op(Xf::Valid, Src::Ids, (0, self.active), L::D)?;
        self.transfer_op(Xf::Coarsen, Src::X, (0, nc), L::D)?;
        // New mesh.
        self.upload_mesh(lbm)?;
        self.stream.memcpy_htod(&fresh, &mut self.fresh).map_err(&e)?;
        self.transfer_new_mesh(nc, &groups, L::D)
    }

    /// The new-mesh half of a transfer: per level group (start in the transfer's lists, new
    /// children, refined blocks after them) interpolate the new children and shift their mass;
    /// then refresh the exposed cells. The coarsened blocks are the lists' first `nc`.
    pub(super) fn transfer_new_mesh(&mut self, nc: usize, groups: &[(usize, usize, usize)], dims: usize) -> Result<(), SolverError> {
        for &(start, nn, _) in groups {
            self.transfer_op(Xf::New, Src::X, (start, nn), dims)?;
            self.transfer_op(Xf::Mass, Src::X, (start, nn), dims)?;
        }
        self.transfer_op(Xf::Current, Src::X, (0, nc), dims)?;
        for &(start, nn, _) in groups {
            self.transfer_op(Xf::Current, Src::X, (start, nn), dims)?;
        }
        for lv in self.levels.clone().iter().skip(1) {
            self.transfer_op(Xf::Leaf, Src::Lists, lv.all, dims)?;
        }
        // Every level's leaves at once (each cell's own flag; the interpolation above read them).
        let finer = self.level_start.get(1).map_or(self.active, |&s| s as usize).min(self.active);
        self.transfer_op(Xf::LeafMark, Src::Ids, (finer, self.active - finer), dims)?;
        for lv in self.levels.clone() {
            self.transfer_op(Xf::Parent, Src::Lists, lv.all, dims)?;
        }
        Ok(())
    }

    /// Launch one operation of `amr_transfer` over a range of the launch lists, the transfer's
    /// lists or the ID set (`src`).
    pub(super) fn transfer_op(&mut self, op: Xf, src: Src, (off, count): (usize, usize), dims: usize) -> Result<(), SolverError> {
        if count == 0 {
            return Ok(());
        }
        let cells = count * BLOCK.pow(dims as u32);
        let cfg = LaunchConfig { grid_dim: (cells.div_ceil(256) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let ids = match src {
            Src::Lists => &self.lists,
            Src::X => &self.xlists,
            Src::Ids => &self.id_set,
        }
        .slice(off..off + count);
        // New children and exposed leaf cells are interpolated as ghost cells are, through
        // the parent tile of amr_interpolate_adapt (its modes; the level is each block's own).
        let prolong = match op {
            Xf::New => Some(PROLONG_NEW),
            Xf::Leaf => Some(PROLONG_EXPOSED),
            _ => None,
        };
        let form = self.form();
        if let Xf::Mass = op {
            let count = count as u32;
            let mut b = self.stream.launch_builder(&self.mass_k);
            b.arg(&ids).arg(&count).arg(&self.parent).arg(&self.child).arg(&self.solid).arg(&self.level).arg(&self.nbr).arg(&form);
            b.arg(&mut self.f);
            // SAFETY: arguments as amr_mass_shift declares them; the list holds new children's
            // IDs below the capacity; threads past count * B load and write nothing.
            unsafe { b.launch(cfg) }.map_err(derr("launching a transfer kernel"))?;
            self.tick(XF_NAMES[op as usize]);
            return Ok(());
        }
        if let Some(mode) = prolong {
            // In these modes `sel` is the form word in place (two buffers: 0, `f` both ways).
            let sel = if self.inplace.is_some() { form } else { 0 };
            let (count, l) = (count as u32, 0u32);
            let mut b = self.stream.launch_builder(&self.interpolate_adapt);
            b.arg(&ids).arg(&count).arg(&l).arg(&self.prm);
            b.arg(&self.pos).arg(&self.parent).arg(&self.child).arg(&self.nbr).arg(&self.cmask).arg(&self.solid);
            b.arg(&mut self.f).arg(&mut self.post).arg(&sel).arg(&mode).arg(&self.level).arg(&self.valid).arg(&self.fresh);
            // SAFETY: arguments as amr_interpolate_adapt declares them; the list holds IDs below the
            // capacity; threads past count * B load and write nothing.
            unsafe { b.launch(cfg) }.map_err(derr("launching a transfer kernel"))?;
            self.tick(XF_NAMES[op as usize]);
            return Ok(());
        }
        let (count, op) = (count as u32, op as u32);
        let mut b = self.stream.launch_builder(&self.transfer_k);
        b.arg(&ids).arg(&count).arg(&op).arg(&self.prm).arg(&self.level);
        b.arg(&self.pos).arg(&self.parent).arg(&self.child).arg(&self.nbr).arg(&self.cmask).arg(&self.solid);
        b.arg(&mut self.valid).arg(&self.fresh).arg(&form).arg(&mut self.f);
        // SAFETY: arguments as amr_transfer declares them; the list holds IDs below the
        // capacity every array was allocated for; threads past count * B return.
        unsafe { b.launch(cfg) }.map_err(derr("launching a transfer kernel"))?;
        self.tick(XF_NAMES[op as usize]);
        Ok(())
    }

    /// Copy the device's DDFs of the active blocks into a solver (waits for the steps
    /// launched so far): the IDs up to the highest active one, not the whole capacity.
    ///
    /// # Errors
    /// A solver of another capacity; CUDA errors.
    pub fn download<L: Lat>(&mut self, lbm: &mut AmrLbm<L>) -> Result<(), SolverError> {
        self.settle()?;
        let per_block = L::Q * lbm.forest().cells_per_block();
        let n = lbm.forest().active_ids().iter().max().map_or(0, |&id| (id as usize + 1) * per_block);
        let bytes = self.precision.bytes();
        let out = lbm.raw_ddfs_mut();
        if out.len() != ddf_values(self.lattice, self.capacity, false) {
            return Err(SolverError::Backend("the solver's DDFs and the device's differ in size".into()));
        }
        let e = derr("reading the DDFs");
        // FP32 straight into the solver's buffer (no staging copy); 16 bits decoded.
        if self.precision == Precision::Fp32 {
            return self.stream.memcpy_dtoh(&self.f.slice(0..n * bytes), bytemuck::cast_slice_mut::<f32, u8>(&mut out[..n])).map_err(e);
        }
        let raw = self.stream.clone_dtoh(&self.f.slice(0..n * bytes)).map_err(e)?;
        self.precision.decode_all(&raw, &mut out[..n]);
        Ok(())
    }
}
