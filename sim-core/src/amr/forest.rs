//! The block forest: flat per-block arrays, the ID and gap sets, and the refine/coarsen pass.
//! See the module documentation of [`crate::amr`] for the layout and its invariants.

use super::prims::compact;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

/// Cells along each axis of a block.
pub const BLOCK: usize = 4;
/// "No block": an absent child, parent or neighbour-child, or a neighbour link that leaves a
/// non-periodic domain.
pub const NONE: u32 = u32::MAX;
/// Bit of a neighbour link whose region is covered by a coarser (level - 1) leaf; the other
/// bits are that leaf's ID.
pub const COARSER: u32 = 1 << 31;
/// Deepest level a forest may have (block positions stay in `i32`).
pub const MAX_LEVELS: u8 = 15;

/// Refinement states (`state` array).
pub mod state {
    /// The ID is free (in the gap set).
    pub const INACTIVE: u8 = 0;
    /// Active, no change requested.
    pub const KEEP: u8 = 1;
    /// Active leaf marked for refinement.
    pub const REFINE: u8 = 2;
    /// Active block marked for coarsening (its children, all leaves, are removed).
    pub const COARSEN: u8 = 3;
    /// Active, frozen by the user: never refined, never coarsened, marks ignored.
    pub const FROZEN: u8 = 4;
}

/// A decoded neighbour link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// A block of the same level.
    Same(u32),
    /// The region is covered by this leaf of the next coarser level.
    Coarser(u32),
    /// Outside a non-periodic domain.
    Outside,
}

impl Link {
    /// Decode a raw link value.
    #[inline(always)]
    #[must_use]
    pub fn decode(v: u32) -> Link {
        if v == NONE {
            Link::Outside
        } else if v & COARSER != 0 {
            Link::Coarser(v & !COARSER)
        } else {
            Link::Same(v)
        }
    }
}

/// What a caller asks of a block before [`BlockForest::adapt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// Leave as is.
    Keep,
    /// Split a leaf into 2^D children.
    Refine,
    /// Remove the children of a block whose children are all leaves.
    Coarsen,
}

/// Shape of a forest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForestConfig {
    /// 2 or 3.
    pub dims: usize,
    /// Root blocks along x, y, z (z = 1 in 2D). The domain is `BLOCK * root[a]` cells of
    /// level 0 along each axis.
    pub root: [usize; 3],
    /// Periodic axes (ignored for z in 2D).
    pub periodic: [bool; 3],
    /// Finest level allowed (0 = root only), at most [`MAX_LEVELS`].
    pub max_level: u8,
    /// Most blocks (active at once, all levels, parents included). Rounded down so that the
    /// IDs after the root grid form whole groups of 2^D.
    pub capacity: usize,
}

/// Errors of the mesh operations. None of them changes the forest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmrError {
    /// The configuration was refused.
    #[error("invalid forest configuration: {0}")]
    Config(String),
    /// An adaptation needed more blocks than the capacity.
    #[error("refinement refused: it needs {needed} blocks, the capacity is {capacity} ({active} active now)")]
    Capacity {
        /// Active blocks the adapted forest would have.
        needed: usize,
        /// Capacity of the forest.
        capacity: usize,
        /// Active blocks now.
        active: usize,
    },
    /// A block ID or level out of range, or a mark that does not apply.
    #[error("{0}")]
    Invalid(String),
}

/// What an adaptation did: the parents refined and coarsened (for the data transfers: new
/// children are filled by interpolation from their parent; coarsened parents already hold the
/// averaged data of their children).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdaptReport {
    /// Blocks that were refined (their children are new). Empty where the device adapted
    /// without reading the lists back ([`AmrGpu::set_report_ids`]); `counts` holds their
    /// numbers either way.
    ///
    /// [`AmrGpu::set_report_ids`]: crate::backend::cuda::amr::AmrGpu::set_report_ids
    pub refined: Vec<u32>,
    /// Blocks whose children were removed (as `refined`, may be left empty by the device).
    pub coarsened: Vec<u32>,
    /// The numbers of blocks refined and coarsened.
    pub counts: (usize, usize),
    /// Refine marks cancelled because the 2:1 balance would have needed a frozen change.
    pub cancelled: usize,
    /// Blocks refined to keep the 2:1 balance though not marked.
    pub balance_added: usize,
    /// Coarsen marks reverted to keep the 2:1 balance.
    pub reverted: usize,
}

/// Block masks (`block_mask` bits).
pub mod block_mask {
    /// The block is a leaf (it is stepped).
    pub const LEAF: u8 = 1;
    /// Leaf with a coarser neighbour: has ghost cells (interpolation) and interface cells
    /// (averaging).
    pub const NEAR_COARSER: u8 = 2;
    /// Leaf with a same-level neighbour that has children: it streams from that neighbour's
    /// parent cells.
    pub const NEAR_FINER: u8 = 4;
    /// Non-leaf with a same-level leaf neighbour: part of its cells are stepped on its level
    /// (over the children's ghost cells) or receive averages (over interface cells).
    pub const FEEDS: u8 = 8;
    /// Some neighbour link leaves the (non-periodic) domain.
    pub const ON_BOUNDARY: u8 = 16;
}

/// Cell masks (`cell_mask` values).
pub mod cell_mask {
    /// Leaf cell away from a level jump.
    pub const INTERIOR: u8 = 0;
    /// Leaf cell within two cells of a coarser leaf: filled by interpolation from the coarse
    /// level before each coarse step.
    pub const GHOST: u8 = 1;
    /// Leaf cell three or four cells from a coarser leaf: averaged to its parent after the two
    /// fine steps.
    pub const INTERFACE: u8 = 2;
    /// Cell of a non-leaf block that nobody reads.
    pub const COVERED: u8 = 3;
    /// Cell of a non-leaf block over children's ghost cells: stepped with its own level (a
    /// coarse leaf next to it streams from it) and the source of the interpolation.
    pub const PARENT_OF_GHOST: u8 = 4;
    /// Cell of a non-leaf block over children's interface cells: receives their average.
    pub const PARENT_OF_INTERFACE: u8 = 5;
}

/// The forest of quad/octrees of blocks. Every array is allocated once in [`Self::new`].
pub struct BlockForest {
    dims: usize,
    root: [usize; 3],
    periodic: [bool; 3],
    max_level: u8,
    capacity: usize,
    /// Bit `l`: level `l` is frozen (no block of that level is created or removed).
    frozen_levels: u32,
    /// Per block: level.
    level: Vec<u8>,
    /// Per block: position in blocks of its level (`0..root[a] << level`).
    pos: Vec<[i32; 3]>,
    /// Per block: parent ID or NONE (roots).
    parent: Vec<u32>,
    /// Per block: first child ID or NONE (leaf); children are `child..child + 2^D`.
    child: Vec<u32>,
    /// Per block: refinement state ([`state`]).
    state: Vec<u8>,
    /// Per block and direction: neighbour link (`nbr[id * N + d]`).
    nbr: Vec<u32>,
    /// Per block and direction: first child of the same-level neighbour, or NONE.
    nbr_child: Vec<u32>,
    /// Per block: [`block_mask`] bits.
    block_mask: Vec<u8>,
    /// Per block and cell: [`cell_mask`] value (`cell_mask[id * BLOCK^D + cell]`).
    cell_mask: Vec<u8>,
    /// Active IDs grouped by level (ascending IDs within a level).
    id_set: Vec<u32>,
    /// `id_set[level_start[l]..level_start[l + 1]]` is level `l`'s ID set.
    level_start: Vec<u32>,
    /// Free IDs, a stack of groups of 2^D contiguous IDs, each stored descending so that the
    /// top of a group is its first ID.
    gap: Vec<u32>,
    gap_len: usize,
    // Scratch, sized once.
    marks: Vec<AtomicU8>,
    flags: Vec<u32>,
    offsets: Vec<u32>,
    list: Vec<u32>,
}

/// A forest's arrays as stored (see the fields of [`BlockForest`]), for a device copy: the CUDA
/// backend keeps the mesh on the GPU and adapts it there (`kernels/amr_mesh.cu`).
#[allow(missing_docs)] // the fields of `BlockForest`
pub struct ForestArrays<'a> {
    pub level: &'a [u8],
    /// `[x, y, z]` per block.
    pub pos: &'a [[i32; 3]],
    pub parent: &'a [u32],
    pub child: &'a [u32],
    pub state: &'a [u8],
    pub nbr: &'a [u32],
    pub nbr_child: &'a [u32],
    pub block_mask: &'a [u8],
    pub cell_mask: &'a [u8],
    pub id_set: &'a [u32],
    pub level_start: &'a [u32],
    pub gap: &'a [u32],
    pub gap_len: usize,
    /// Bit `l`: level `l` frozen.
    pub frozen_levels: u32,
}

/// The same, to overwrite from a device copy ([`BlockForest::arrays_mut`]).
#[allow(missing_docs)] // the fields of `BlockForest`
pub struct ForestArraysMut<'a> {
    pub level: &'a mut [u8],
    pub pos: &'a mut [[i32; 3]],
    pub parent: &'a mut [u32],
    pub child: &'a mut [u32],
    pub state: &'a mut [u8],
    pub nbr: &'a mut [u32],
    pub nbr_child: &'a mut [u32],
    pub block_mask: &'a mut [u8],
    pub cell_mask: &'a mut [u8],
    pub id_set: &'a mut [u32],
    pub level_start: &'a mut [u32],
    pub gap: &'a mut [u32],
    pub gap_len: &'a mut usize,
}

/// Number of neighbour directions (self included): 3^D.
#[inline(always)]
#[must_use]
pub const fn n_dirs(dims: usize) -> usize {
    if dims == 2 {
        9
    } else {
        27
    }
}

/// Direction index of an offset `e` in {-1, 0, 1}^D: `(ex + 1) + 3 (ey + 1) + 9 (ez + 1)`.
/// The opposite of `d` is `n_dirs - 1 - d`; the block itself is `n_dirs / 2`.
#[inline(always)]
#[must_use]
pub fn dir_index(e: [i32; 3], dims: usize) -> usize {
    let mut d = 0usize;
    let mut m = 1usize;
    for a in 0..dims {
        d += (e[a] + 1) as usize * m;
        m *= 3;
    }
    d
}

/// Offset of a direction index (inverse of [`dir_index`]).
#[inline(always)]
#[must_use]
pub fn dir_offset(d: usize, dims: usize) -> [i32; 3] {
    let mut e = [0i32; 3];
    let mut r = d;
    for a in 0..dims {
        e[a] = (r % 3) as i32 - 1;
        r /= 3;
    }
    e
}

impl BlockForest {
    /// A forest holding the root grid only.
    ///
    /// # Errors
    /// A refused configuration (dimensions, sizes, capacity below the root grid).
    pub fn new(cfg: ForestConfig) -> Result<BlockForest, AmrError> {
        let ForestConfig { dims, mut root, mut periodic, max_level, capacity } = cfg;
        if dims != 2 && dims != 3 {
            return Err(AmrError::Config(format!("dims must be 2 or 3, not {dims}")));
        }
        if dims == 2 {
            root[2] = 1;
            periodic[2] = false;
        }
        if root.iter().any(|&r| r == 0 || r > 1 << 15) {
            return Err(AmrError::Config(format!("root grid {root:?}: every axis needs 1..=32768 blocks")));
        }
        if max_level > MAX_LEVELS {
            return Err(AmrError::Config(format!("max_level {max_level} is above {MAX_LEVELS}")));
        }
        let roots = root[0] * root[1] * root[2];
        let k = 1usize << dims;
        if capacity < roots || capacity >= COARSER as usize {
            return Err(AmrError::Config(format!("capacity {capacity}: the root grid alone needs {roots} blocks (and at most 2^31 - 1)")));
        }
        let capacity = roots + (capacity - roots) / k * k;
        let nd = n_dirs(dims);
        let cells = BLOCK.pow(dims as u32);
        let mut f = BlockForest {
            dims,
            root,
            periodic,
            max_level,
            capacity,
            frozen_levels: 0,
            level: vec![0; capacity],
            pos: vec![[0; 3]; capacity],
            parent: vec![NONE; capacity],
            child: vec![NONE; capacity],
            state: vec![state::INACTIVE; capacity],
            nbr: vec![NONE; capacity * nd],
            nbr_child: vec![NONE; capacity * nd],
            block_mask: vec![0; capacity],
            cell_mask: vec![0; capacity * cells],
            id_set: vec![0; capacity],
            level_start: vec![0; usize::from(MAX_LEVELS) + 2],
            gap: vec![0; capacity],
            gap_len: 0,
            marks: (0..capacity).map(|_| AtomicU8::new(0)).collect(),
            flags: vec![0; capacity],
            offsets: vec![0; capacity],
            list: vec![0; capacity],
        };
        // Root grid: ID = x + nx (y + ny z), links by arithmetic (wrapping on periodic axes).
        for id in 0..roots {
            let p = [(id % root[0]) as i32, ((id / root[0]) % root[1]) as i32, (id / (root[0] * root[1])) as i32];
            f.pos[id] = p;
            f.state[id] = state::KEEP;
            for d in 0..nd {
                let e = dir_offset(d, dims);
                let mut q = [0i32; 3];
                let mut inside = true;
                for a in 0..dims {
                    let n = root[a] as i32;
                    let t = p[a] + e[a];
                    if periodic[a] {
                        q[a] = t.rem_euclid(n);
                    } else if t < 0 || t >= n {
                        inside = false;
                    } else {
                        q[a] = t;
                    }
                }
                f.nbr[id * nd + d] =
                    if inside { (q[0] as usize + root[0] * (q[1] as usize + root[1] * q[2] as usize)) as u32 } else { NONE };
            }
        }
        // Gap set: the groups after the roots, the smallest on top.
        let groups = (capacity - roots) / k;
        let mut n = 0;
        for g in (0..groups).rev() {
            let c0 = roots + g * k;
            for j in (0..k).rev() {
                f.gap[n] = (c0 + j) as u32;
                n += 1;
            }
        }
        f.gap_len = n;
        f.rebuild_id_sets();
        f.rebuild_links();
        f.rebuild_masks();
        Ok(f)
    }

    // ---------------------------------------------------------------- accessors

    /// The stored arrays, for a device copy.
    #[must_use]
    pub fn arrays(&self) -> ForestArrays<'_> {
        ForestArrays {
            level: &self.level,
            pos: &self.pos,
            parent: &self.parent,
            child: &self.child,
            state: &self.state,
            nbr: &self.nbr,
            nbr_child: &self.nbr_child,
            block_mask: &self.block_mask,
            cell_mask: &self.cell_mask,
            id_set: &self.id_set,
            level_start: &self.level_start,
            gap: &self.gap,
            gap_len: self.gap_len,
            frozen_levels: self.frozen_levels,
        }
    }

    /// The stored arrays to overwrite with a device copy that a device adapted: the caller
    /// keeps the invariants ([`Self::adapt`]'s results, which the device's passes reproduce).
    pub fn arrays_mut(&mut self) -> ForestArraysMut<'_> {
        ForestArraysMut {
            level: &mut self.level,
            pos: &mut self.pos,
            parent: &mut self.parent,
            child: &mut self.child,
            state: &mut self.state,
            nbr: &mut self.nbr,
            nbr_child: &mut self.nbr_child,
            block_mask: &mut self.block_mask,
            cell_mask: &mut self.cell_mask,
            id_set: &mut self.id_set,
            level_start: &mut self.level_start,
            gap: &mut self.gap,
            gap_len: &mut self.gap_len,
        }
    }

    /// Spatial dimensions.
    #[must_use]
    pub fn dims(&self) -> usize {
        self.dims
    }
    /// Root blocks per axis.
    #[must_use]
    pub fn root(&self) -> [usize; 3] {
        self.root
    }
    /// Periodic axes.
    #[must_use]
    pub fn periodic(&self) -> [bool; 3] {
        self.periodic
    }
    /// Finest level allowed.
    #[must_use]
    pub fn max_level(&self) -> u8 {
        self.max_level
    }
    /// Capacity (after rounding).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Children per block (2^D).
    #[must_use]
    pub fn children_per_block(&self) -> usize {
        1 << self.dims
    }
    /// Neighbour directions per block (3^D, self included).
    #[must_use]
    pub fn dirs(&self) -> usize {
        n_dirs(self.dims)
    }
    /// Cells per block (BLOCK^D).
    #[must_use]
    pub fn cells_per_block(&self) -> usize {
        BLOCK.pow(self.dims as u32)
    }
    /// Number of root blocks.
    #[must_use]
    pub fn roots(&self) -> usize {
        self.root[0] * self.root[1] * self.root[2]
    }
    /// Active blocks (all levels, parents included).
    #[must_use]
    pub fn active(&self) -> usize {
        self.capacity - self.gap_len
    }
    /// Whether an ID holds a block.
    #[must_use]
    pub fn is_active(&self, id: u32) -> bool {
        self.state[id as usize] != state::INACTIVE
    }
    /// Level of a block.
    #[must_use]
    pub fn level(&self, id: u32) -> u8 {
        self.level[id as usize]
    }
    /// Position of a block in blocks of its level.
    #[must_use]
    pub fn pos(&self, id: u32) -> [i32; 3] {
        self.pos[id as usize]
    }
    /// Parent of a block (NONE for roots).
    #[must_use]
    pub fn parent(&self, id: u32) -> u32 {
        self.parent[id as usize]
    }
    /// First child (NONE for leaves).
    #[must_use]
    pub fn first_child(&self, id: u32) -> u32 {
        self.child[id as usize]
    }
    /// Whether an active block is a leaf.
    #[must_use]
    pub fn is_leaf(&self, id: u32) -> bool {
        self.child[id as usize] == NONE
    }
    /// Refinement state ([`state`]).
    #[must_use]
    pub fn state(&self, id: u32) -> u8 {
        self.state[id as usize]
    }
    /// Raw neighbour link of a block in direction `d` ([`dir_index`]).
    #[must_use]
    pub fn nbr_raw(&self, id: u32, d: usize) -> u32 {
        self.nbr[id as usize * self.dirs() + d]
    }
    /// Decoded neighbour link.
    #[must_use]
    pub fn neighbour(&self, id: u32, d: usize) -> Link {
        Link::decode(self.nbr_raw(id, d))
    }
    /// First child of the same-level neighbour in direction `d`, or NONE.
    #[must_use]
    pub fn nbr_child(&self, id: u32, d: usize) -> u32 {
        self.nbr_child[id as usize * self.dirs() + d]
    }
    /// Block mask bits ([`block_mask`]).
    #[must_use]
    pub fn block_mask(&self, id: u32) -> u8 {
        self.block_mask[id as usize]
    }
    /// Cell masks of a block ([`cell_mask`]), `x + 4 (y + 4 z)`.
    #[must_use]
    pub fn cell_masks(&self, id: u32) -> &[u8] {
        let c = self.cells_per_block();
        &self.cell_mask[id as usize * c..(id as usize + 1) * c]
    }
    /// The ID set of a level (ascending IDs; parents included).
    #[must_use]
    pub fn level_ids(&self, l: u8) -> &[u32] {
        let l = usize::from(l);
        &self.id_set[self.level_start[l] as usize..self.level_start[l + 1] as usize]
    }
    /// All active IDs, grouped by level.
    #[must_use]
    pub fn active_ids(&self) -> &[u32] {
        &self.id_set[..self.active()]
    }
    /// The gap set (free IDs; the top of the stack last).
    #[must_use]
    pub fn gap_ids(&self) -> &[u32] {
        &self.gap[..self.gap_len]
    }
    /// Active leaves (every level).
    #[must_use]
    pub fn leaves(&self) -> Vec<u32> {
        self.active_ids().iter().copied().filter(|&b| self.is_leaf(b)).collect()
    }
    /// Finest level with blocks.
    #[must_use]
    pub fn finest_level(&self) -> u8 {
        (0..=self.max_level).rev().find(|&l| !self.level_ids(l).is_empty()).unwrap_or(0)
    }
    /// Blocks per axis of a level's grid.
    #[must_use]
    pub fn level_extent(&self, l: u8) -> [i32; 3] {
        let mut e = [1i32; 3];
        for a in 0..self.dims {
            e[a] = (self.root[a] as i32) << l;
        }
        e
    }
    /// Lower corner and size of a block in cells of level 0.
    #[must_use]
    pub fn block_box(&self, id: u32) -> ([f64; 3], f64) {
        let s = BLOCK as f64 / f64::from(1u32 << self.level(id));
        let p = self.pos(id);
        let mut lo = [0.0; 3];
        for a in 0..self.dims {
            lo[a] = f64::from(p[a]) * s;
        }
        (lo, s)
    }

    // ---------------------------------------------------------------- freezing and marks

    /// Freeze or thaw a level: while frozen, no block of that level is created or removed
    /// (its ID set does not change); adaptation around it is limited accordingly.
    ///
    /// # Errors
    /// A level above the maximum.
    pub fn freeze_level(&mut self, l: u8, frozen: bool) -> Result<(), AmrError> {
        if l > self.max_level {
            return Err(AmrError::Invalid(format!("level {l} is above the maximum {}", self.max_level)));
        }
        if frozen {
            self.frozen_levels |= 1 << l;
        } else {
            self.frozen_levels &= !(1 << l);
        }
        Ok(())
    }
    /// Whether a level is frozen.
    #[must_use]
    pub fn level_frozen(&self, l: u8) -> bool {
        self.frozen_levels & (1 << l) != 0
    }

    /// Freeze or thaw one block: a frozen block is never refined or coarsened.
    ///
    /// # Errors
    /// An inactive ID.
    pub fn freeze_block(&mut self, id: u32, frozen: bool) -> Result<(), AmrError> {
        self.check_id(id)?;
        self.state[id as usize] = if frozen { state::FROZEN } else { state::KEEP };
        Ok(())
    }

    fn check_id(&self, id: u32) -> Result<(), AmrError> {
        if (id as usize) < self.capacity && self.is_active(id) {
            Ok(())
        } else {
            Err(AmrError::Invalid(format!("block {id} is not active")))
        }
    }

    /// Ask for a change of a block at the next [`Self::adapt`]. Marks on frozen blocks are
    /// ignored; marks that do not apply (refining a non-leaf or the finest level, coarsening a
    /// block whose children are not all leaves) are dropped by the adaptation.
    ///
    /// # Errors
    /// An inactive ID.
    pub fn set_mark(&mut self, id: u32, m: Mark) -> Result<(), AmrError> {
        self.check_id(id)?;
        let s = &mut self.state[id as usize];
        if *s != state::FROZEN {
            *s = match m {
                Mark::Keep => state::KEEP,
                Mark::Refine => state::REFINE,
                Mark::Coarsen => state::COARSEN,
            };
        }
        Ok(())
    }

    /// Clear every mark (frozen blocks stay frozen).
    pub fn clear_marks(&mut self) {
        self.state.par_iter_mut().for_each(|s| {
            if *s == state::REFINE || *s == state::COARSEN {
                *s = state::KEEP;
            }
        });
    }

    // ---------------------------------------------------------------- adaptation

    /// Whether block `b` may be refined at all (leaf, not frozen, below the maximum level,
    /// its children's level not frozen).
    fn refinable(&self, b: usize) -> bool {
        let s = self.state[b];
        s != state::INACTIVE
            && s != state::FROZEN
            && self.child[b] == NONE
            && self.level[b] < self.max_level
            && !self.level_frozen(self.level[b] + 1)
    }

    /// Whether block `b` may be coarsened at all (children all leaves, not frozen, children's
    /// level not frozen).
    fn coarsenable(&self, b: usize) -> bool {
        let s = self.state[b];
        let c = self.child[b];
        if s == state::INACTIVE || s == state::FROZEN || c == NONE || self.level_frozen(self.level[b] + 1) {
            return false;
        }
        (c..c + self.children_per_block() as u32).all(|k| self.child[k as usize] == NONE && self.state[k as usize] != state::FROZEN)
    }

    /// Refine-mark closure: every refining leaf's coarser neighbours refine too (their
    /// children must exist as the new children's neighbours). A pass per iteration over all
    /// IDs, until nothing changes. Leaves that cannot refine get `blocked`.
    fn propagate_refine(&self, blocked: &[AtomicBool]) {
        let nd = self.dirs();
        loop {
            let changed = AtomicBool::new(false);
            (0..self.capacity).into_par_iter().for_each(|b| {
                if self.marks[b].load(Relaxed) != state::REFINE {
                    return;
                }
                for d in 0..nd {
                    if let Link::Coarser(x) = Link::decode(self.nbr[b * nd + d]) {
                        let x = x as usize;
                        if self.refinable(x) {
                            if self.marks[x].swap(state::REFINE, Relaxed) != state::REFINE {
                                changed.store(true, Relaxed);
                            }
                        } else {
                            blocked[x].store(true, Relaxed);
                        }
                    }
                }
            });
            if !changed.load(Relaxed) {
                break;
            }
        }
    }

    /// Apply the marks: 2:1 balance by propagation and reversion, ID allocation from the gap
    /// set, children built, ID sets, links and masks rebuilt. Marks are cleared afterwards
    /// (also on error).
    ///
    /// Order of the passes (each a data-parallel loop over block IDs):
    /// 1. sanitise: refine marks kept on refinable leaves, coarsen marks on coarsenable blocks;
    /// 2. refine closure (fixed point): a refining leaf's coarser neighbours refine; leaves
    ///    that cannot (frozen) are noted;
    /// 3. cancel (fixed point): a refining leaf with a coarser neighbour that is noted or
    ///    cancelled is cancelled; the closure is then recomputed from the surviving marks only;
    /// 4. revert coarsening (fixed point): a block whose children, or whose children's
    ///    same-level neighbours, will have children after the adaptation keeps its children;
    /// 5. count, check the capacity, compact the refine and coarsen lists (scan + scatter);
    /// 6. free the coarsened blocks' children (push their groups on the gap set);
    /// 7. pop one group per refined block and build the children;
    /// 8. rebuild the ID sets (counting sort by level), the links level by level, the masks.
    ///
    /// # Errors
    /// [`AmrError::Capacity`] when the adapted forest would exceed the capacity; the forest is
    /// then unchanged (marks cleared).
    pub fn adapt(&mut self) -> Result<AdaptReport, AmrError> {
        let cap = self.capacity;
        let k = self.children_per_block();
        let nd = self.dirs();
        let mut report = AdaptReport::default();
        // 1. sanitise into `marks`; `seed` remembers the user's refine marks.
        let seed: Vec<bool> = (0..cap)
            .into_par_iter()
            .map(|b| {
                let m = match self.state[b] {
                    state::REFINE if self.refinable(b) => state::REFINE,
                    state::COARSEN if self.coarsenable(b) => state::COARSEN,
                    _ => state::KEEP,
                };
                self.marks[b].store(m, Relaxed);
                m == state::REFINE
            })
            .collect();
        // 2. closure.
        let blocked: Vec<AtomicBool> = (0..cap).map(|_| AtomicBool::new(false)).collect();
        self.propagate_refine(&blocked);
        // 3. cancellation.
        let any_blocked = blocked.par_iter().any(|x| x.load(Relaxed));
        if any_blocked {
            loop {
                let changed = AtomicBool::new(false);
                (0..cap).into_par_iter().for_each(|b| {
                    if self.marks[b].load(Relaxed) != state::REFINE {
                        return;
                    }
                    let bad = (0..nd).any(|d| match Link::decode(self.nbr[b * nd + d]) {
                        Link::Coarser(x) => blocked[x as usize].load(Relaxed) || self.marks[x as usize].load(Relaxed) != state::REFINE,
                        _ => false,
                    });
                    if bad {
                        self.marks[b].store(state::KEEP, Relaxed);
                        changed.store(true, Relaxed);
                    }
                });
                if !changed.load(Relaxed) {
                    break;
                }
            }
            report.cancelled = (0..cap).into_par_iter().filter(|&b| seed[b] && self.marks[b].load(Relaxed) != state::REFINE).count();
            // Recompute the closure from the surviving seeds only.
            (0..cap).into_par_iter().for_each(|b| {
                let m = self.marks[b].load(Relaxed);
                if m == state::REFINE && !seed[b] {
                    self.marks[b].store(state::KEEP, Relaxed);
                }
            });
            blocked.par_iter().for_each(|x| x.store(false, Relaxed));
            self.propagate_refine(&blocked);
            debug_assert!(!blocked.par_iter().any(|x| x.load(Relaxed)), "closure of surviving marks hit a frozen block");
        }
        report.balance_added = (0..cap).into_par_iter().filter(|&b| !seed[b] && self.marks[b].load(Relaxed) == state::REFINE).count();
        // 4. coarsening reversion.
        let coarsen_requested = (0..cap).into_par_iter().filter(|&b| self.marks[b].load(Relaxed) == state::COARSEN).count();
        loop {
            let changed = AtomicBool::new(false);
            (0..cap).into_par_iter().for_each(|p| {
                if self.marks[p].load(Relaxed) != state::COARSEN {
                    return;
                }
                let keeps_children = |n: usize| {
                    let m = self.marks[n].load(Relaxed);
                    m == state::REFINE || (self.child[n] != NONE && m != state::COARSEN)
                };
                let c0 = self.child[p] as usize;
                let bad = (c0..c0 + k).any(|c| {
                    keeps_children(c)
                        || (0..nd).any(|d| match Link::decode(self.nbr[c * nd + d]) {
                            Link::Same(n) => keeps_children(n as usize),
                            _ => false,
                        })
                });
                if bad {
                    self.marks[p].store(state::KEEP, Relaxed);
                    changed.store(true, Relaxed);
                }
            });
            if !changed.load(Relaxed) {
                break;
            }
        }
        // 5. count and check the capacity.
        let n_ref = (0..cap).into_par_iter().filter(|&b| self.marks[b].load(Relaxed) == state::REFINE).count();
        let n_coa = (0..cap).into_par_iter().filter(|&b| self.marks[b].load(Relaxed) == state::COARSEN).count();
        report.reverted = coarsen_requested - n_coa;
        let active = self.active();
        let needed = active + n_ref * k - n_coa * k;
        if needed > cap {
            self.clear_marks();
            return Err(AmrError::Capacity { needed, capacity: cap, active });
        }
        if n_ref == 0 && n_coa == 0 {
            self.clear_marks();
            return Ok(report);
        }
        // Compact the coarsen list.
        self.flags.par_iter_mut().enumerate().for_each(|(b, f)| *f = u32::from(self.marks[b].load(Relaxed) == state::COARSEN));
        let nc = compact(&self.flags, &mut self.offsets, &mut self.list);
        report.coarsened = self.list[..nc].to_vec();
        report.counts.1 = nc;
        // 6. free the children of coarsened blocks: group i goes to gap[gap_len + i k ..].
        for (i, &p) in report.coarsened.iter().enumerate() {
            let c0 = self.child[p as usize];
            for j in 0..k {
                let c = (c0 as usize) + j;
                self.state[c] = state::INACTIVE;
                self.parent[c] = NONE;
                self.child[c] = NONE;
                self.level[c] = 0;
                self.pos[c] = [0; 3];
                self.block_mask[c] = 0;
                self.nbr[c * nd..(c + 1) * nd].fill(NONE);
                self.nbr_child[c * nd..(c + 1) * nd].fill(NONE);
                self.gap[self.gap_len + i * k + j] = c0 + (k - 1 - j) as u32;
            }
            self.child[p as usize] = NONE;
        }
        self.gap_len += nc * k;
        // 7. allocate: refined block i takes the group whose first ID is gap[gap_len - 1 - i k].
        self.flags.par_iter_mut().enumerate().for_each(|(b, f)| *f = u32::from(self.marks[b].load(Relaxed) == state::REFINE));
        let nr = compact(&self.flags, &mut self.offsets, &mut self.list);
        report.refined = self.list[..nr].to_vec();
        report.counts.0 = nr;
        for (i, &b) in report.refined.iter().enumerate() {
            let c0 = self.gap[self.gap_len - 1 - i * k];
            debug_assert!((0..k).all(|j| self.gap[self.gap_len - 1 - i * k - j] == c0 + j as u32), "gap group not contiguous");
            let b = b as usize;
            self.child[b] = c0;
            let lp = self.level[b] + 1;
            let pp = self.pos[b];
            for j in 0..k {
                let c = c0 as usize + j;
                self.level[c] = lp;
                self.parent[c] = b as u32;
                self.child[c] = NONE;
                self.state[c] = state::KEEP;
                let mut p = [0i32; 3];
                for a in 0..self.dims {
                    p[a] = 2 * pp[a] + ((j >> a) & 1) as i32;
                }
                self.pos[c] = p;
            }
        }
        self.gap_len -= nr * k;
        // 8. rebuild.
        self.clear_marks();
        self.rebuild_id_sets();
        self.rebuild_links();
        self.rebuild_masks();
        Ok(report)
    }

    /// Counting sort of the active IDs by level into `id_set` / `level_start` (a histogram, an
    /// exclusive scan and a scatter that keeps IDs ascending within a level).
    fn rebuild_id_sets(&mut self) {
        let nl = usize::from(MAX_LEVELS) + 1;
        let mut count = vec![0u32; nl];
        for b in 0..self.capacity {
            if self.state[b] != state::INACTIVE {
                count[usize::from(self.level[b])] += 1;
            }
        }
        self.level_start[0] = 0;
        for l in 0..nl {
            self.level_start[l + 1] = self.level_start[l] + count[l];
        }
        let mut at: Vec<u32> = self.level_start[..nl].to_vec();
        for b in 0..self.capacity {
            if self.state[b] != state::INACTIVE {
                let l = usize::from(self.level[b]);
                self.id_set[at[l] as usize] = b as u32;
                at[l] += 1;
            }
        }
    }

    /// Neighbour link of child `o` (offset in {0,1}^D) of block `p` in direction `d`, from
    /// `p`'s links and neighbour-children: the child-level position `o + e` falls in `p`'s
    /// neighbour `floor((o + e) / 2)` at child offset `(o + e) mod 2`.
    fn child_link(&self, p: usize, o: [i32; 3], d: usize) -> u32 {
        let nd = self.dirs();
        let e = dir_offset(d, self.dims);
        let mut pe = [0i32; 3];
        let mut j = 0u32;
        for a in 0..self.dims {
            let t = o[a] + e[a];
            pe[a] = t.div_euclid(2);
            j |= (t.rem_euclid(2) as u32) << a;
        }
        let pd = dir_index(pe, self.dims);
        match Link::decode(self.nbr[p * nd + pd]) {
            Link::Outside => NONE,
            Link::Same(q) => {
                let fc = self.nbr_child[p * nd + pd];
                if fc != NONE {
                    fc + j
                } else {
                    q | COARSER
                }
            }
            // Cannot happen in a balanced forest: the child's neighbour would be two levels
            // coarser.
            Link::Coarser(_) => {
                debug_assert!(false, "unbalanced forest: block {p} direction {pd}");
                NONE
            }
        }
    }

    /// Rebuild `nbr` (levels >= 1) and `nbr_child` (all levels) level by level: level `l`'s
    /// links from its parents' links and neighbour-children, then its neighbour-children from
    /// its links and the `child` array.
    fn rebuild_links(&mut self) {
        let nd = self.dirs();
        let dims = self.dims;
        for l in 0..=self.max_level {
            let ids = self.level_ids(l).to_vec();
            if ids.is_empty() {
                break;
            }
            if l > 0 {
                // Kernel: one thread per (block, direction); rows written after the pass.
                let this = &*self;
                let rows: Vec<u32> = ids
                    .par_iter()
                    .flat_map_iter(|&b| {
                        let b = b as usize;
                        let p = this.parent[b] as usize;
                        let mut o = [0i32; 3];
                        for a in 0..dims {
                            o[a] = this.pos[b][a] & 1;
                        }
                        (0..nd).map(move |d| this.child_link(p, o, d))
                    })
                    .collect();
                for (i, &b) in ids.iter().enumerate() {
                    let b = b as usize;
                    self.nbr[b * nd..(b + 1) * nd].copy_from_slice(&rows[i * nd..(i + 1) * nd]);
                }
            }
            let this = &*self;
            let rows: Vec<u32> = ids
                .par_iter()
                .flat_map_iter(|&b| {
                    let b = b as usize;
                    (0..nd).map(move |d| match Link::decode(this.nbr[b * nd + d]) {
                        Link::Same(q) => this.child[q as usize],
                        _ => NONE,
                    })
                })
                .collect();
            for (i, &b) in ids.iter().enumerate() {
                let b = b as usize;
                self.nbr_child[b * nd..(b + 1) * nd].copy_from_slice(&rows[i * nd..(i + 1) * nd]);
            }
        }
    }

    /// Block and cell masks: leaves first (from their links), then non-leaves (from their
    /// children's cell masks).
    fn rebuild_masks(&mut self) {
        let nd = self.dirs();
        let dims = self.dims;
        let cells = self.cells_per_block();
        let mut bm = std::mem::take(&mut self.block_mask);
        let mut cm = std::mem::take(&mut self.cell_mask);
        {
            let this = &*self;
            bm.par_iter_mut().zip(cm.par_chunks_mut(cells)).enumerate().for_each(|(b, (m, cmask))| {
                if this.state[b] == state::INACTIVE || this.child[b] != NONE {
                    return;
                }
                let mut bits = block_mask::LEAF;
                for d in 0..nd {
                    match Link::decode(this.nbr[b * nd + d]) {
                        Link::Outside => bits |= block_mask::ON_BOUNDARY,
                        Link::Coarser(_) => bits |= block_mask::NEAR_COARSER,
                        Link::Same(q) => {
                            if this.child[q as usize] != NONE {
                                bits |= block_mask::NEAR_FINER;
                            }
                        }
                    }
                }
                *m = bits;
                for (cell, v) in cmask.iter_mut().enumerate() {
                    let c = cell_coords(cell, dims);
                    let mut g_min = i32::MAX;
                    if bits & block_mask::NEAR_COARSER != 0 {
                        for d in 0..nd {
                            if let Link::Coarser(_) = Link::decode(this.nbr[b * nd + d]) {
                                let e = dir_offset(d, dims);
                                let mut g = 0;
                                for a in 0..dims {
                                    let ga = match e[a] {
                                        -1 => c[a] + 1,
                                        1 => BLOCK as i32 - c[a],
                                        _ => 0,
                                    };
                                    g = g.max(ga);
                                }
                                g_min = g_min.min(g);
                            }
                        }
                    }
                    *v = if g_min <= 2 {
                        cell_mask::GHOST
                    } else if g_min <= 4 {
                        cell_mask::INTERFACE
                    } else {
                        cell_mask::INTERIOR
                    };
                }
            });
        }
        {
            let this = &*self;
            let leaf_cells: &[u8] = &cm;
            let parent_masks: Vec<(usize, u8, Vec<u8>)> = (0..this.capacity)
                .into_par_iter()
                .filter(|&b| this.state[b] != state::INACTIVE && this.child[b] != NONE)
                .map(|b| {
                    let mut bits = 0u8;
                    for d in 0..nd {
                        match Link::decode(this.nbr[b * nd + d]) {
                            Link::Outside => bits |= block_mask::ON_BOUNDARY,
                            Link::Same(q) if this.child[q as usize] == NONE => bits |= block_mask::FEEDS,
                            _ => {}
                        }
                    }
                    let c0 = this.child[b] as usize;
                    let mut out = vec![cell_mask::COVERED; cells];
                    for (cell, v) in out.iter_mut().enumerate() {
                        let c = cell_coords(cell, dims);
                        let mut j = 0usize;
                        let mut fine = 0usize;
                        let mut m = 1usize;
                        for a in 0..dims {
                            let half = (c[a] as usize) / 2;
                            j |= half << a;
                            fine += (2 * (c[a] as usize % 2)) * m;
                            m *= BLOCK;
                        }
                        let ch = c0 + j;
                        if this.child[ch] != NONE {
                            continue;
                        }
                        *v = match leaf_cells[ch * cells + fine] {
                            cell_mask::GHOST => cell_mask::PARENT_OF_GHOST,
                            cell_mask::INTERFACE => cell_mask::PARENT_OF_INTERFACE,
                            _ => cell_mask::COVERED,
                        };
                    }
                    (b, bits, out)
                })
                .collect();
            for (b, bits, out) in parent_masks {
                bm[b] = bits;
                cm[b * cells..(b + 1) * cells].copy_from_slice(&out);
            }
        }
        // Inactive IDs: zero masks.
        for b in 0..self.capacity {
            if self.state[b] == state::INACTIVE {
                bm[b] = 0;
            }
        }
        self.block_mask = bm;
        self.cell_mask = cm;
    }
}

/// Local coordinates of cell `cell` (`x + 4 (y + 4 z)`) of a block.
#[inline(always)]
#[must_use]
pub fn cell_coords(cell: usize, dims: usize) -> [i32; 3] {
    let mut c = [0i32; 3];
    let mut r = cell;
    for a in 0..dims {
        c[a] = (r % BLOCK) as i32;
        r /= BLOCK;
    }
    c
}
