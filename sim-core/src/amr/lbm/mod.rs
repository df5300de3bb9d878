//! LBM on a block forest (CPU reference): cell-centred overlapping levels coupled as in Jaber, Essel &
//! Sullivan 2025 (after Schornbaum), with recursive time stepping; the forest may be adapted between
//! coarse steps ([`AmrLbm::adapt_to`]).
//!
//! # Scheme
//! Level `l` has spacing `dx_0 / 2^l` and time step `dt_0 / 2^l` (acoustic scaling: lattice
//! velocities agree on every level), so `tau_l = 2^l (tau_0 - 1/2) + 1/2` keeps the viscosity
//! and the body force is `F_l = F_0 / 2^l`.
//!
//! Cells that take part in level `l` (see [`super::cell_mask`]):
//! - stepped (collide and stream): every cell of a leaf of level `l`, and the
//!   `PARENT_OF_GHOST` cells of non-leaf blocks of level `l` (they lie over the finer level's
//!   ghost cells; a coarse leaf next to them streams from them);
//! - collided only: `PARENT_OF_INTERFACE` cells (they hold the average of the finer level's
//!   interface cells; the stepped parent cells stream from them).
//!
//! One step of level `l` (`step_level`):
//! 1. interpolate level `l` (pre-collision state at time `T`) into the ghost cells of level
//!    `l + 1` (tensor-product quadratic, non-equilibrium rescaled by `tau_f / (2 tau_c)`);
//! 2. collide and stream level `l` (pull; half-way bounce-back where a link leaves the domain);
//! 3. two steps of level `l + 1` (recursively); the outer ghost layer goes stale after one,
//!    the inner after two, while the interface cells stay valid;
//! 4. average the interface cells of level `l + 1` into their parents' `PARENT_OF_INTERFACE`
//!    cells (non-equilibrium rescaled by `2 tau_c / tau_f`).
//!
//! Collision is the dense solver's [`crate::collision::collide`]; moments and equilibria
//! are the shared functions too. Storage is two plain copies per block
//! (`f[(id * Q + i) * B + cell]`, pre-collision, and the post-collision copy streaming pulls
//! from) rather than Esoteric Pull in place: two copies keep this reference obviously right.
//! The CUDA backend keeps two copies too, or with `amr.in_place` one, streamed in place, whose
//! every reader applies the level's parity (`kernels/amr.cu`, "In-place storage"): the same
//! numbers either way.
//!
//! # Storage precision
//! The pre-collision DDFs may be stored in a 16-bit format ([`AmrLbm::set_storage`]: FP16S or
//! FP16C, as the dense solver stores them). Arithmetic stays FP32; every value written into `f`
//! (a step's streamed populations, interpolated ghost cells, restricted parents, the data an
//! adaptation moves, the mass correction) is rounded to what the format holds
//! ([`Precision::round_trip`]), so that this reference stays bit for bit equal to the GPU's
//! 16-bit buffers. The post-collision copy is an intermediate (the GPU keeps it in registers)
//! and is not rounded.
//!
//! # Accuracy
//! Uniform flows stay exactly uniform across level jumps, and a fully refined channel
//! reproduces the uniform fine channel to rounding. Both transfers are exact for parabolic
//! profiles: ghost cells are interpolated quadratically (per axis, through the parent cell and
//! both its neighbours; linear or constant where a neighbour holds no data), and the parents of
//! interface cells get a restriction that is exact for quadratics (per axis, four fine cells,
//! or three on the side away from the stale ghost cells). Each of the simpler choices, linear
//! interpolation (off by `3/32 h^2 u''`) and the plain average of the children (off by
//! `h^2 u''/32`), is reset into the overlap every coarse step, acts as a momentum sink at the
//! interface and made the channel error first order (with both: L2 2.1e-2 at H = 16 coarse
//! cells; with the plain average only: 4.8e-3 at H = 16, 3.0e-3 at H = 32). Now the
//! force-driven channel with refined walls has L2 1.5e-3 (H = 16) and 3.1e-4 (H = 32), second
//! order, against 2.8e-3 and 7.2e-4 for the uniform coarse grid and 1.2e-3 for the uniform fine
//! grid at H = 16. A decaying Taylor-Green vortex with the central quarter refined has L2
//! errors 1.86e-2 (16 coarse cells a wavelength) and 4.46e-3 (32) after one decay time, second
//! order like the uniform coarse grid (2.11e-2, 5.17e-3), with a relative mass drift of 1e-7.
//! The lid-driven cavity at Re = 100 (32 coarse cells, the two block rows under the lid
//! refined) is within 0.58 % of the lid velocity of Ghia et al. at all 30 centreline points
//! (uniform coarse 0.91 %, uniform fine 0.59 %); adapted every 100 coarse steps to the
//! block-max vorticity ([`AmrLbm::adapt_to`], [`AmrLbm::block_vorticity`]) it is within
//! 0.57-0.85 % with 73-145 leaves instead of 256 (thresholds 0.04-0.005).
//!
//! # Boundaries and obstacles
//! Domain faces are walls (half-way bounce-back, moving with a velocity: lids, and velocity
//! inlets and far fields the way Jaber, Essel & Sullivan 2025 impose them) or outflows at a density (the
//! equilibrium at that density and the cell's velocity enters). Obstacles come from a query
//! per cell centre and level ([`AmrLbm::set_solid`]), asked again for every block refinement
//! creates; fluid cells bounce back half-way off solid cells, and the transfers between
//! levels leave solid cells out. On the level of a [`CurvedWalls`] table (the finest) the
//! links it lists bounce back at the obstacle's exact surface instead (interpolated
//! bounce-back, [`walls`]). [`AmrLbm::obstacle_force`] is the momentum exchange on the
//! obstacles, each level's links weighted by its cell size and step count.
//!
//! Mass is not conserved exactly across level jumps (the coupling exchanges interpolated and
//! averaged populations, not fluxes): the relative drift is below 1e-5 for the channel in 6,000
//! steps and 2e-7 for the Taylor-Green vortex, but 9.2e-4 in 4,000 steps for the cavity with
//! refined lid rows (the interface meets the side walls under a fast vortex) and 7.6e-5 to
//! 8.2e-3 for the adaptive cavity. `coupling_accuracy_diagnostics` prints these numbers.

use super::forest::{cell_coords, cell_mask, dir_index, state, AdaptReport, AmrError, BlockForest, Link, BLOCK};
use crate::collision::{collide, equilibrium, moments, CollideParams, Collision};
use crate::lattice::{opposite, Lat, MAX_Q};
use crate::precision::Precision;
use rayon::prelude::*;
use std::marker::PhantomData;
use transfer::{children_of, children_offsets, plain_taps};

mod transfer;
pub mod walls;
pub use walls::CurvedWalls;

/// Index of the cell at block coordinates `k` (each in `0..BLOCK`).
fn cell_index(k: [i32; 3]) -> usize {
    (k[0] + BLOCK as i32 * (k[1] + BLOCK as i32 * k[2])) as usize
}

/// The obstacle query of [`AmrLbm::set_solid`]: whether the cell with this centre (cells of
/// level 0) on this level is solid.
type SolidFn = Box<dyn Fn([f64; 3], u8) -> bool + Send + Sync>;

/// The refined blocks of an adaptation grouped by level, coarsest first (the order their
/// children get data in: a child may read the new children one level up).
#[must_use]
pub fn refined_by_level(forest: &BlockForest, refined: &[u32]) -> Vec<Vec<u32>> {
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for &p in refined {
        let l = usize::from(forest.level(p));
        if groups.len() <= l {
            groups.resize(l + 1, Vec::new());
        }
        groups[l].push(p);
    }
    groups.retain(|g| !g.is_empty());
    groups
}

/// A block-structured LBM on a forest.
pub struct AmrLbm<L: Lat> {
    forest: BlockForest,
    tau0: f32,
    force0: [f32; 3],
    /// Pre-collision DDFs (shifted by the weights), `f[(id * Q + i) * B + cell]`.
    f: Vec<f32>,
    /// Post-collision DDFs, same layout.
    post: Vec<f32>,
    /// Coarse steps done.
    t: u64,
    /// Velocity of the wall across each domain face `2 axis + (1 on the high side)`, in lattice
    /// units (the same on every level under acoustic scaling).
    walls: [[f32; 3]; 6],
    /// Density of the outflow across each domain face (`None`: a wall, see `walls`).
    outflow: [Option<f32>; 6],
    /// Whether each cell is solid (an obstacle), `solid[id * B + cell]`.
    solid: Vec<bool>,
    /// The obstacle query that set `solid`; blocks made by refinement ask it too.
    solid_fn: Option<SolidFn>,
    /// Storage format of `f` (values in `f` are what it holds, see the module docs).
    store: Precision,
    /// Interpolated walls of the finest level ([`walls`]); None: every obstacle wall half-way.
    curved: Option<CurvedWalls>,
    _l: PhantomData<L>,
}

/// Where a cell of a level lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellRef {
    /// Block ID.
    pub block: u32,
    /// Cell index in the block (`x + 4 (y + 4 z)`).
    pub cell: usize,
}

impl<L: Lat> AmrLbm<L> {
    /// A solver on a forest (its dimensions must match the lattice's); every cell starts at
    /// equilibrium with the density and velocity `init` gives for the cell centre (in cells of
    /// level 0).
    ///
    /// # Panics
    /// A forest of other dimensions than the lattice, or `tau0 <= 1/2`.
    pub fn new(forest: BlockForest, tau0: f32, force0: [f32; 3], init: impl Fn([f64; 3]) -> (f32, [f32; 3]) + Sync) -> AmrLbm<L> {
        assert_eq!(forest.dims(), L::D, "forest and lattice dimensions differ");
        assert!(tau0 > 0.5, "tau must exceed 1/2");
        let b = forest.cells_per_block();
        let n = forest.capacity() * L::Q * b;
        let cells = forest.capacity() * b;
        let mut s = AmrLbm {
            forest,
            tau0,
            force0,
            f: vec![0.0; n],
            post: vec![0.0; n],
            t: 0,
            walls: [[0.0; 3]; 6],
            outflow: [None; 6],
            solid: vec![false; cells],
            solid_fn: None,
            store: Precision::Fp32,
            curved: None,
            _l: PhantomData,
        };
        let q = L::Q;
        let forest = &s.forest;
        s.f.par_chunks_mut(q * b).enumerate().for_each(|(id, blk)| {
            if !forest.is_active(id as u32) {
                return;
            }
            for cell in 0..b {
                let (rho, u) = init(cell_centre(forest, id as u32, cell));
                let mut feq = [0.0f32; MAX_Q];
                equilibrium::<L>(rho - 1.0, u, &mut feq);
                for i in 0..q {
                    blk[i * b + cell] = feq[i];
                }
            }
        });
        s
    }

    /// Make the face across the low (`high = false`) or high side of `axis` a wall moving with
    /// velocity `u` (a lid, or a velocity inlet as Jaber, Essel & Sullivan 2025 impose their far field): bounce-back
    /// there gets the moving-wall term `6 w_i (c_i . u)`. Links that leave through several
    /// wall faces (edges, corners) take the mean of those walls' velocities.
    pub fn set_wall_velocity(&mut self, axis: usize, high: bool, u: [f32; 3]) {
        self.walls[2 * axis + usize::from(high)] = u;
        self.outflow[2 * axis + usize::from(high)] = None;
    }

    /// Make a face an outflow at density `rho`: the populations that enter through it are the
    /// equilibrium at `rho` and the velocity of the cell they enter (zero velocity gradient
    /// across the face). A link that also crosses a wall face (an edge or corner) bounces back.
    pub fn set_outflow(&mut self, axis: usize, high: bool, rho: f32) {
        self.outflow[2 * axis + usize::from(high)] = Some(rho);
    }

    /// Set the obstacles: `solid(centre, level)` (centre in cells of level 0) says whether a
    /// cell is solid; it is asked now for every active block and later for every block that
    /// refinement creates. Solid cells neither collide nor stream and hold the rest state; the
    /// fluid cells next to them bounce back half-way (a wall at rest). A cell that turns solid
    /// loses its populations; one that turns fluid starts at rest.
    pub fn set_solid(&mut self, solid: impl Fn([f64; 3], u8) -> bool + Send + Sync + 'static) {
        self.solid_fn = Some(Box::new(solid));
        let ids = self.forest.active_ids().to_vec();
        self.update_solids(&ids);
    }

    /// Interpolate the walls of the links `w` lists (on its level, the finest grid's cells;
    /// [`walls`]); None: half-way walls everywhere.
    pub fn set_curved_walls(&mut self, w: Option<CurvedWalls>) {
        self.curved = w;
    }

    /// The interpolated walls' links ([`Self::set_curved_walls`]).
    #[must_use]
    pub fn curved_walls(&self) -> Option<&CurvedWalls> {
        self.curved.as_ref()
    }

    /// The q row of a cell's curved links, if the cell is on the table's level and has any.
    fn curved_row(&self, id: u32, cell: usize) -> Option<&[f32]> {
        let w = self.curved.as_ref().filter(|w| w.level == self.forest.level(id))?;
        w.row(global_cell(&self.forest, id, cell))
    }

    /// Whether a cell is solid ([`Self::set_solid`]).
    #[must_use]
    pub fn is_solid(&self, r: CellRef) -> bool {
        self.solid[r.block as usize * self.forest.cells_per_block() + r.cell]
    }

    /// Replace the obstacle query after the obstacles changed inside the box `lo..hi` (cells of
    /// level 0; a cell edit) and ask it again for every cell of the active blocks that meet the
    /// box, as [`Self::set_solid`] does: a cell whose flag changes starts at rest. Returns the
    /// cells that changed, `id * B + cell` with bit 63 set where the cell turned solid, and
    /// the mass (density times the cell's volume in cells of level 0) of the leaf cells that
    /// turned solid, before, and of those that turned fluid, after.
    pub fn change_solids(
        &mut self,
        solid: impl Fn([f64; 3], u8) -> bool + Send + Sync + 'static,
        lo: [f64; 3],
        hi: [f64; 3],
    ) -> (Vec<u64>, f64, f64) {
        let query: SolidFn = Box::new(solid);
        let dims = L::D;
        let forest = &self.forest;
        let ids: Vec<u32> = forest
            .active_ids()
            .iter()
            .copied()
            .filter(|&id| {
                let (blo, s) = forest.block_box(id);
                (0..dims).all(|a| blo[a] < hi[a] && blo[a] + s > lo[a])
            })
            .collect();
        let b = forest.cells_per_block();
        let this = &*self;
        let per_block: Vec<(Vec<u64>, f64, f64)> = ids
            .par_iter()
            .map(|&id| {
                let vol = 1.0 / f64::from(1u32 << (u32::from(forest.level(id)) * dims as u32));
                let leaf = forest.is_leaf(id);
                let (mut cells, mut removed, mut added) = (Vec::new(), 0.0f64, 0.0f64);
                for cell in 0..b {
                    let at = id as usize * b + cell;
                    let now = query(cell_centre(forest, id, cell), forest.level(id));
                    if now == this.solid[at] {
                        continue;
                    }
                    if leaf && now {
                        removed += f64::from(this.moments(CellRef { block: id, cell }).0) * vol;
                    } else if leaf {
                        added += vol;
                    }
                    cells.push(at as u64 | (u64::from(now) << 63));
                }
                (cells, removed, added)
            })
            .collect();
        let removed = per_block.iter().map(|p| p.1).sum();
        let added = per_block.iter().map(|p| p.2).sum();
        let changed: Vec<u64> = per_block.into_iter().flat_map(|p| p.0).collect();
        self.solid_fn = Some(query);
        let q = L::Q;
        for &w in &changed {
            let at = (w & !(1u64 << 63)) as usize;
            let (id, cell) = (at / b, at % b);
            self.solid[at] = w >> 63 == 1;
            (0..q).for_each(|i| self.f[(id * q + i) * b + cell] = 0.0);
        }
        (changed, removed, added)
    }

    /// Ask the obstacle query for the cells of blocks `ids`; a cell whose flag changes is set to
    /// the rest state (zero in the shifted storage).
    fn update_solids(&mut self, ids: &[u32]) {
        let Some(query) = &self.solid_fn else {
            return;
        };
        let b = self.forest.cells_per_block();
        let q = L::Q;
        let forest = &self.forest;
        let flags: Vec<(u32, Vec<bool>)> =
            ids.par_iter().map(|&id| (id, (0..b).map(|cell| query(cell_centre(forest, id, cell), forest.level(id))).collect())).collect();
        for (id, new) in flags {
            for (cell, &s) in new.iter().enumerate() {
                let at = id as usize * b + cell;
                if self.solid[at] != s {
                    self.solid[at] = s;
                    (0..q).for_each(|i| self.f[(id as usize * q + i) * b + cell] = 0.0);
                }
            }
        }
    }

    /// The force of the fluid on the obstacles (the solid cells), in lattice units of level 0,
    /// from the current state (call it after a coarse step): momentum exchange over every link
    /// from a fluid cell `x` to a solid cell `x + c_i`, whose population came back as
    /// `F_opp(i)(x) = F*_i(x)` in the last streaming, `2 F_opp(i)(x) c_i` per link (`F` with the
    /// weight, not this file's shifted storage). The cells are those that hold the level's
    /// state: leaf cells except ghost cells, and the stepped (parent-of-ghost) cells over
    /// them. A level-`l` link's momentum is in units of its cell volume `2^{-lD}` and is
    /// exchanged every level-`l` step, `2^l` times per coarse step: it counts `2^{-l(D-1)}`
    /// times (the force is momentum per coarse time step). This is the force of the last step
    /// of each level, not a time average over the substeps; over interpolated links it is the
    /// exchange of the level's next step, from colliding the cells now ([`walls`]), since the
    /// state keeps no post-collision copy.
    #[must_use]
    pub fn obstacle_force(&self) -> [f64; 3] {
        self.obstacle_force_on(|_, _| true)
    }

    /// [`Self::obstacle_force`] on the solid cells for which `which(centre, level)` holds (one
    /// obstacle of several): links to other solid cells do not count.
    #[must_use]
    pub fn obstacle_force_on(&self, which: impl Fn([f64; 3], u8) -> bool + Sync) -> [f64; 3] {
        if self.solid_fn.is_none() {
            return [0.0; 3];
        }
        let dims = L::D;
        let q = L::Q;
        let b = self.forest.cells_per_block();
        let forest = &self.forest;
        let (f, solid) = (&self.f, &self.solid);
        forest
            .active_ids()
            .par_iter()
            .map(|&id| {
                let leaf = forest.is_leaf(id);
                let masks = forest.cell_masks(id);
                let l = u32::from(forest.level(id));
                let scale = 1.0 / f64::from(1u32 << (l * (dims as u32 - 1)));
                let mut acc = [0.0f64; 3];
                for cell in 0..b {
                    let owned = if leaf { masks[cell] != cell_mask::GHOST } else { masks[cell] == cell_mask::PARENT_OF_GHOST };
                    if !owned || solid[id as usize * b + cell] {
                        continue;
                    }
                    let c = cell_coords(cell, dims);
                    let row = self.curved_row(id, cell);
                    let mut post_x: Option<[f32; MAX_Q]> = None;
                    for i in 1..q {
                        let mut e = [0i32; 3];
                        let mut s = [0i32; 3];
                        for a in 0..dims {
                            let t = c[a] + L::C[i][a];
                            e[a] = t.div_euclid(BLOCK as i32);
                            s[a] = t.rem_euclid(BLOCK as i32);
                        }
                        if let Link::Same(n) = forest.neighbour(id, dir_index(e, dims)) {
                            let sc = cell_index(s);
                            if solid[n as usize * b + sc] && which(cell_centre(forest, n, sc), forest.level(n)) {
                                let qd = row.map_or(0.0, |r| r[i]);
                                let v = if qd > 0.0 {
                                    // An interpolated link: the next step's exchange (walls.rs).
                                    let g = post_x.get_or_insert_with(|| self.collided(id, cell));
                                    let k = opposite(i);
                                    let up = if qd < 0.5 { self.upstream_post(id, c, i) } else { None };
                                    f64::from(g[i] + L::W[i]) + f64::from(walls::next_back(qd, i, k, g, up) + L::W[k])
                                } else {
                                    2.0 * f64::from(f[(id as usize * q + opposite(i)) * b + cell] + L::W[i])
                                };
                                (0..dims).for_each(|a| acc[a] += v * f64::from(L::C[i][a]) * scale);
                            }
                        }
                    }
                }
                acc
            })
            .reduce(|| [0.0; 3], |x, y| [x[0] + y[0], x[1] + y[1], x[2] + y[2]])
    }

    /// The post-collision DDFs of a cell, collided now from its state with its level's
    /// parameters.
    fn collided(&self, id: u32, cell: usize) -> [f32; MAX_Q] {
        let mut g = self.ddfs(CellRef { block: id, cell });
        collide::<L>(&mut g, &self.params(self.forest.level(id)));
        g
    }

    /// f*_d(x - c_d) for the cell at block coordinates `c` of block `id`, collided now: None
    /// where x - c_d is no fluid cell of the same level.
    fn upstream_post(&self, id: u32, c: [i32; 3], d: usize) -> Option<f32> {
        let k = std::array::from_fn(|a| if a < L::D { c[a] - L::C[d][a] } else { 0 });
        let (n, sc) = self.locate(id, k)?;
        (!self.solid[n as usize * self.forest.cells_per_block() + sc]).then(|| self.collided(n, sc)[d])
    }

    /// Set the relaxation time of level 0 (the finer levels follow).
    ///
    /// # Panics
    /// `tau0 <= 1/2`.
    pub fn set_tau0(&mut self, tau0: f32) {
        assert!(tau0 > 0.5, "tau must exceed 1/2");
        self.tau0 = tau0;
    }

    /// Set the body force of level 0 (the finer levels follow).
    pub fn set_force0(&mut self, force0: [f32; 3]) {
        self.force0 = force0;
    }

    /// Overwrite the pre-collision DDFs of one cell (shifted storage, `L::Q` values), e.g. from
    /// a checkpoint; they are rounded to the storage format.
    pub fn set_ddfs(&mut self, r: CellRef, g: &[f32]) {
        let b = self.forest.cells_per_block();
        let base = r.block as usize * L::Q * b;
        for (i, &v) in g.iter().take(L::Q).enumerate() {
            self.f[base + i * b + r.cell] = self.store.round_trip(v);
        }
    }

    /// Store the DDFs in `p` from now on (see the module docs); the current ones are rounded
    /// to it.
    pub fn set_storage(&mut self, p: Precision) {
        self.store = p;
        self.f.par_iter_mut().for_each(|v| *v = p.round_trip(*v));
    }

    /// The DDFs' storage format.
    #[must_use]
    pub fn storage(&self) -> Precision {
        self.store
    }

    /// Set the coarse step count (a restored checkpoint's).
    pub fn set_time(&mut self, t: u64) {
        self.t = t;
    }

    /// Freeze or thaw a level of the forest ([`BlockForest::freeze_level`]).
    ///
    /// # Errors
    /// A level above the forest's maximum.
    pub fn freeze_level(&mut self, l: u8, frozen: bool) -> Result<(), super::forest::AmrError> {
        self.forest.freeze_level(l, frozen)
    }

    /// The obstacle flag of every cell, `solid[id * B + cell]` (for a device copy).
    #[must_use]
    pub fn solid_flags(&self) -> &[bool] {
        &self.solid
    }

    /// The forest and the obstacle flags, to overwrite with a device copy that adapted them
    /// (the CUDA backend keeps the mesh on the GPU and adapts it there).
    pub fn forest_and_solids_mut(&mut self) -> (&mut BlockForest, &mut [bool]) {
        (&mut self.forest, &mut self.solid)
    }

    /// The pre-collision DDFs of every block, `f[(id * Q + i) * B + cell]` (shifted by the
    /// weights; for a device copy).
    #[must_use]
    pub fn raw_ddfs(&self) -> &[f32] {
        &self.f
    }

    /// The same, to overwrite (from a device copy).
    pub fn raw_ddfs_mut(&mut self) -> &mut [f32] {
        &mut self.f
    }

    /// The walls' velocities and the outflow densities of the six domain faces
    /// (`2 axis + (1 on the high side)`).
    #[must_use]
    pub fn boundaries(&self) -> ([[f32; 3]; 6], [Option<f32>; 6]) {
        (self.walls, self.outflow)
    }

    /// The forest.
    #[must_use]
    pub fn forest(&self) -> &BlockForest {
        &self.forest
    }
    /// Coarse steps done.
    #[must_use]
    pub fn time(&self) -> u64 {
        self.t
    }
    /// Relaxation time of a level: `2^l (tau_0 - 1/2) + 1/2`.
    #[must_use]
    pub fn tau(&self, l: u8) -> f32 {
        f32::from(1u16 << l) * (self.tau0 - 0.5) + 0.5
    }
    /// Body force of a level: `F_0 / 2^l`.
    #[must_use]
    pub fn force(&self, l: u8) -> [f32; 3] {
        let s = 1.0 / f32::from(1u16 << l);
        self.force0.map(|x| x * s)
    }

    fn params(&self, l: u8) -> CollideParams {
        CollideParams { kind: Collision::Bgk, tau: self.tau(l), cs: 0.0, force: self.force(l) }
    }

    /// Pre-collision DDFs of one cell.
    #[must_use]
    pub fn ddfs(&self, r: CellRef) -> [f32; MAX_Q] {
        let b = self.forest.cells_per_block();
        let base = r.block as usize * L::Q * b;
        let mut out = [0.0f32; MAX_Q];
        for i in 0..L::Q {
            out[i] = self.f[base + i * b + r.cell];
        }
        out
    }

    /// Density and velocity of a cell (velocity with the half-force shift of its level).
    #[must_use]
    pub fn moments(&self, r: CellRef) -> (f32, [f32; 3]) {
        let (rm1, u) = moments::<L>(&self.ddfs(r), self.force(self.forest.level(r.block)));
        (rm1 + 1.0, u)
    }

    /// Every fluid leaf cell (solid cells left out) with its centre (cells of level 0), level,
    /// density and velocity.
    #[must_use]
    pub fn leaf_cells(&self) -> Vec<([f64; 3], u8, f32, [f32; 3])> {
        let b = self.forest.cells_per_block();
        let mut out = Vec::new();
        for id in self.forest.leaves() {
            for cell in 0..b {
                if self.solid[id as usize * b + cell] {
                    continue;
                }
                let (rho, u) = self.moments(CellRef { block: id, cell });
                out.push((cell_centre(&self.forest, id, cell), self.forest.level(id), rho, u));
            }
        }
        out
    }

    /// Total mass of the fluid leaf cells (each weighted by its volume in cells of level 0).
    #[must_use]
    pub fn mass(&self) -> f64 {
        self.leaf_cells().iter().map(|(_, l, rho, _)| f64::from(*rho) / f64::from(1u32 << (u32::from(*l) * L::D as u32))).sum()
    }

    /// One coarse (level 0) time step.
    pub fn step(&mut self) {
        self.step_level(0);
        self.t += 1;
    }

    /// Adapt the mesh towards per-leaf target levels ([`BlockForest::mark_to_targets`], then
    /// [`BlockForest::adapt`]) and move the data with it: a coarsened block gets the average of
    /// its children (non-equilibrium rescaled) in every cell, and new children are interpolated
    /// from their parent as ghost cells are (quadratic, non-equilibrium rescaled), then shifted
    /// by `w_i` times the difference between the parent cell's density and the mean of its
    /// children's: both keep the mass of the leaves. Solid cells are left out of both (a fluid
    /// cell whose stencil meets them takes the mean of the fluid cells it can reach); the new
    /// blocks ask the obstacle query ([`Self::set_solid`]). Call it between coarse steps.
    ///
    /// # Errors
    /// The forest's capacity refusal ([`AmrError::Capacity`]); nothing changes then.
    pub fn adapt_to(&mut self, target: &[u8]) -> Result<AdaptReport, AmrError> {
        let b = self.forest.cells_per_block();
        let q = L::Q;
        let dims = L::D;
        let k = 1usize << dims;
        self.forest.mark_to_targets(target);
        // Children's averages for the covered cells of every block marked for coarsening,
        // taken while the children exist.
        let marked: Vec<u32> = self.forest.active_ids().iter().copied().filter(|&id| self.forest.state(id) == state::COARSEN).collect();
        let this = &*self;
        let restricted: Vec<(u32, usize, [f32; MAX_Q])> = marked
            .par_iter()
            .flat_map_iter(|&id| {
                let l = this.forest.level(id);
                let r = 2.0 * this.tau(l) / this.tau(l + 1);
                let (force_f, force_c) = (this.force(l + 1), this.force(l));
                let c0 = this.forest.first_child(id);
                (0..b).map(move |cell| {
                    if this.solid[id as usize * b + cell] {
                        return (id, cell, [0.0; MAX_Q]);
                    }
                    let (j, f0) = children_of(cell_coords(cell, dims), dims);
                    let get = |kk: [i32; 3]| {
                        let r = CellRef { block: c0 + j, cell: cell_index(kk) };
                        (!this.is_solid(r)).then(|| this.ddfs(r))
                    };
                    let acc = Self::tensor_sum(&plain_taps(dims), f0, get, force_f, force_c, r)
                        .or_else(|| Self::mean_of_available(children_offsets(dims, f0), get, force_f, force_c, r))
                        .unwrap_or([0.0; MAX_Q]);
                    (id, cell, acc)
                })
            })
            .collect();
        let mut valid = self.current_cells();
        let report = self.forest.adapt()?;
        let coarsened: std::collections::HashSet<u32> = report.coarsened.iter().copied().collect();
        self.write_cells(restricted.into_iter().filter(|(id, _, _)| coarsened.contains(id)));
        // New children from their parents, which were leaves a moment ago (all their fluid
        // cells hold data, though their masks now say otherwise); their solid cells at rest.
        let fresh: std::collections::HashSet<u32> = report.refined.iter().copied().collect();
        let children: Vec<u32> = report
            .refined
            .iter()
            .flat_map(|&p| {
                let c0 = self.forest.first_child(p);
                (0..k as u32).map(move |j| c0 + j)
            })
            .collect();
        self.update_solids(&children);
        // Level by level, coarse first: a new child may read the new children one level up
        // (made by the 2:1 balance in the same adaptation), which must hold their data by then.
        let sum = |f: &[f32], id: u32, cell: usize| -> f32 { (0..q).map(|i| f[(id as usize * q + i) * b + cell]).sum() };
        for group in refined_by_level(&self.forest, &report.refined) {
            let this = &*self;
            let vals: Vec<(u32, usize, [f32; MAX_Q])> = group
                .par_iter()
                .flat_map_iter(|&p| {
                    let c0 = this.forest.first_child(p);
                    let fresh = &fresh;
                    (c0..c0 + k as u32).flat_map(move |child| {
                        (0..b).map(move |cell| {
                            if this.is_solid(CellRef { block: child, cell }) {
                                return (child, cell, [0.0; MAX_Q]);
                            }
                            let g = this.prolong(child, cell, |pp, kk| match this.locate(pp, kk) {
                                Some((n, c)) if fresh.contains(&n) => {
                                    let r = CellRef { block: n, cell: c };
                                    (!this.is_solid(r)).then(|| this.ddfs(r))
                                }
                                _ => this.coarse_cell(pp, kk),
                            });
                            (child, cell, g)
                        })
                    })
                })
                .collect();
            self.write_cells(vals);
            // Mass: each fluid parent cell's density is the mean of its fluid children cells'
            // (the DDFs are stored less the weights, so a cell's density less 1 is their sum).
            for &p in &group {
                let c0 = self.forest.first_child(p);
                for cell in 0..b {
                    if self.solid[p as usize * b + cell] {
                        continue;
                    }
                    let (j, f0) = children_of(cell_coords(cell, dims), dims);
                    let child = c0 + j;
                    let fine: Vec<usize> =
                        children_offsets(dims, f0).map(cell_index).filter(|&fc| !self.solid[child as usize * b + fc]).collect();
                    if fine.is_empty() {
                        continue;
                    }
                    let mean = fine.iter().map(|&fc| sum(&self.f, child, fc)).sum::<f32>() / fine.len() as f32;
                    let d = sum(&self.f, p, cell) - mean;
                    for &fc in &fine {
                        let store = self.store;
                        (0..q).for_each(|i| {
                            let at = (child as usize * q + i) * b + fc;
                            self.f[at] = store.round_trip(self.f[at] + d * L::W[i]);
                        });
                    }
                }
            }
        }
        // Blocks just coarsened or created hold current data now; then the cells that start
        // being read.
        for &id in report.coarsened.iter().chain(&children) {
            valid[id as usize * b..(id as usize + 1) * b].fill(true);
        }
        self.refresh_exposed(valid);
        Ok(report)
    }

    /// The mesh part of [`Self::adapt_to`] alone: the marks, the forest's adaptation and the
    /// new children's obstacle flags. The DDFs are not moved (those of cells that change
    /// obstacle flags are zeroed): the CUDA backend moves them on the device with the same
    /// arithmetic (`backend/cuda/amr/transfer.rs`, `AmrGpu::transfer`).
    ///
    /// # Errors
    /// The forest's capacity refusal ([`AmrError::Capacity`]); nothing changes then.
    pub fn adapt_mesh(&mut self, target: &[u8]) -> Result<AdaptReport, AmrError> {
        self.forest.mark_to_targets(target);
        let report = self.forest.adapt()?;
        let k = self.forest.children_per_block() as u32;
        let forest = &self.forest;
        let children: Vec<u32> = report.refined.iter().flat_map(|&p| (0..k).map(move |j| forest.first_child(p) + j)).collect();
        self.update_solids(&children);
        Ok(report)
    }

    /// Whether each cell (`id * B + cell`) holds current data: leaf cells except ghost cells,
    /// and the stepped or averaged cells of non-leaves (the others went stale when their block
    /// refined).
    fn current_cells(&self) -> Vec<bool> {
        let b = self.forest.cells_per_block();
        let forest = &self.forest;
        let mut valid = vec![false; forest.capacity() * b];
        valid.par_chunks_mut(b).enumerate().for_each(|(id, out)| {
            let id = id as u32;
            if !forest.is_active(id) {
                return;
            }
            let leaf = forest.is_leaf(id);
            for (v, &m) in out.iter_mut().zip(forest.cell_masks(id)) {
                *v = if leaf { m != cell_mask::GHOST } else { m == cell_mask::PARENT_OF_GHOST || m == cell_mask::PARENT_OF_INTERFACE };
            }
        });
        valid
    }

    /// After an adaptation, give current data to the cells that start being read (`valid`:
    /// which cells held current data before): leaf cells that were ghost cells (interpolated,
    /// then streamed only in part) and are not any more get the interpolation from their
    /// parent level again, and cells of non-leaves that were covered (stale since their block
    /// refined) and are now stepped or averaged get the average of their children. Left
    /// stale, both sent a pressure pulse through the flow at every adaptation.
    fn refresh_exposed(&mut self, mut valid: Vec<bool>) {
        let b = self.forest.cells_per_block();
        let dims = L::D;
        let this = &*self;
        let cur = &valid;
        let get = |p: u32, kk: [i32; 3]| -> Option<[f32; MAX_Q]> {
            let (n, c) = this.locate(p, kk)?;
            let at = n as usize * b + c;
            (cur[at] && !this.solid[at]).then(|| this.ddfs(CellRef { block: n, cell: c }))
        };
        let ids: Vec<u32> = this.forest.active_ids().to_vec();
        let stale = |id: u32, cell: usize| !cur[id as usize * b + cell] && !this.solid[id as usize * b + cell];
        let leaf_vals: Vec<(u32, usize, [f32; MAX_Q])> = ids
            .par_iter()
            .filter(|&&id| this.forest.is_leaf(id) && this.forest.level(id) > 0)
            .flat_map_iter(|&id| {
                let masks = this.forest.cell_masks(id);
                (0..b)
                    .filter(move |&cell| masks[cell] != cell_mask::GHOST && stale(id, cell))
                    .map(move |cell| (id, cell, this.prolong(id, cell, get)))
            })
            .collect();
        for &(id, cell, _) in &leaf_vals {
            valid[id as usize * b + cell] = true;
        }
        self.write_cells(leaf_vals);
        let this = &*self;
        let cur = &valid;
        let parent_vals: Vec<(u32, usize, [f32; MAX_Q])> = ids
            .par_iter()
            .filter(|&&id| !this.forest.is_leaf(id))
            .flat_map_iter(|&id| {
                let masks = this.forest.cell_masks(id);
                let l = this.forest.level(id);
                let r = 2.0 * this.tau(l) / this.tau(l + 1);
                let (force_f, force_c) = (this.force(l + 1), this.force(l));
                let c0 = this.forest.first_child(id);
                (0..b)
                    .filter(move |&cell| {
                        let m = masks[cell];
                        (m == cell_mask::PARENT_OF_GHOST || m == cell_mask::PARENT_OF_INTERFACE)
                            && !cur[id as usize * b + cell]
                            && !this.solid[id as usize * b + cell]
                    })
                    .filter_map(move |cell| {
                        let (j, f0) = children_of(cell_coords(cell, dims), dims);
                        let child = c0 + j;
                        let getc = |kk: [i32; 3]| {
                            let at = child as usize * b + cell_index(kk);
                            (cur[at] && !this.solid[at]).then(|| this.ddfs(CellRef { block: child, cell: cell_index(kk) }))
                        };
                        let acc = Self::tensor_sum(&plain_taps(dims), f0, getc, force_f, force_c, r)
                            .or_else(|| Self::mean_of_available(children_offsets(dims, f0), getc, force_f, force_c, r))?;
                        Some((id, cell, acc))
                    })
            })
            .collect();
        self.write_cells(parent_vals);
    }

    /// Store pre-collision DDFs, (block, cell, DDFs), into `f`.
    fn write_cells(&mut self, vals: impl IntoIterator<Item = (u32, usize, [f32; MAX_Q])>) {
        let b = self.forest.cells_per_block();
        for (id, cell, g) in vals {
            let base = id as usize * L::Q * b;
            (0..L::Q).for_each(|i| self.f[base + i * b + cell] = self.store.round_trip(g[i]));
        }
    }

    /// Block maximum of the vorticity magnitude (per unit time of level 0) of every leaf,
    /// indexed by ID (0 elsewhere), for the refinement criterion.
    #[must_use]
    pub fn block_vorticity(&self) -> Vec<f32> {
        self.block_max_of_gradient(|g| {
            let w = [g[1][2] - g[2][1], g[2][0] - g[0][2], g[0][1] - g[1][0]];
            (w[0] * w[0] + w[1] * w[1] + w[2] * w[2]).sqrt()
        })
    }

    /// Block maximum of the Q criterion (per unit time of level 0, squared) of every leaf,
    /// indexed by ID (0 elsewhere), for the refinement criterion.
    #[must_use]
    pub fn block_q(&self) -> Vec<f32> {
        self.block_max_of_gradient(crate::fields::q_of_gradient)
    }

    /// Block maximum of `value(g)` over the fluid cells of every leaf, indexed by ID (0
    /// elsewhere), with `g[a][m] = d u_m / d x_a` per unit length of level 0 from velocity
    /// differences inside the block (central, one-sided at its faces; solid cells count as
    /// at rest).
    fn block_max_of_gradient(&self, value: impl Fn(&[[f32; 3]; 3]) -> f32 + Sync) -> Vec<f32> {
        let dims = L::D;
        let b = self.forest.cells_per_block();
        let forest = &self.forest;
        (0..forest.capacity() as u32)
            .into_par_iter()
            .map(|id| {
                if !forest.is_active(id) || !forest.is_leaf(id) {
                    return 0.0;
                }
                let solid = &self.solid[id as usize * b..(id as usize + 1) * b];
                let u: Vec<[f32; 3]> =
                    (0..b).map(|cell| if solid[cell] { [0.0; 3] } else { self.moments(CellRef { block: id, cell }).1 }).collect();
                let scale = f32::from(1u16 << forest.level(id));
                let mut best = 0.0f32;
                for cell in (0..b).filter(|&cell| !solid[cell]) {
                    let c = cell_coords(cell, dims);
                    let mut g = [[0.0f32; 3]; 3];
                    for a in 0..dims {
                        let (mut lo, mut hi) = (c, c);
                        lo[a] = (c[a] - 1).max(0);
                        hi[a] = (c[a] + 1).min(BLOCK as i32 - 1);
                        let d = (hi[a] - lo[a]) as f32;
                        for m in 0..3 {
                            g[a][m] = (u[cell_index(hi)][m] - u[cell_index(lo)][m]) / d * scale;
                        }
                    }
                    best = best.max(value(&g));
                }
                best
            })
            .collect()
    }

    fn step_level(&mut self, l: u8) {
        let finer = l < self.forest.finest_level();
        if finer {
            self.interpolate(l + 1);
        }
        self.collide_level(l);
        self.stream_level(l);
        if finer {
            self.step_level(l + 1);
            self.step_level(l + 1);
            self.average(l + 1);
        }
    }

    /// Collide the cells of level `l` that are stepped or collided (leaves: all cells;
    /// non-leaves: parent-of-ghost and parent-of-interface cells) into `post`.
    fn collide_level(&mut self, l: u8) {
        let p = self.params(l);
        let b = self.forest.cells_per_block();
        let q = L::Q;
        let forest = &self.forest;
        let (f, solid) = (&self.f, &self.solid);
        self.post.par_chunks_mut(q * b).enumerate().for_each(|(id, out)| {
            let id32 = id as u32;
            if !forest.is_active(id32) || forest.level(id32) != l {
                return;
            }
            let leaf = forest.is_leaf(id32);
            let masks = forest.cell_masks(id32);
            let base = id * q * b;
            for cell in 0..b {
                if solid[id * b + cell]
                    || (!leaf && masks[cell] != cell_mask::PARENT_OF_GHOST && masks[cell] != cell_mask::PARENT_OF_INTERFACE)
                {
                    continue;
                }
                let mut g = [0.0f32; MAX_Q];
                for i in 0..q {
                    g[i] = f[base + i * b + cell];
                }
                collide::<L>(&mut g, &p);
                for i in 0..q {
                    out[i * b + cell] = g[i];
                }
            }
        });
    }

    /// Pull streaming of the stepped fluid cells of level `l` from `post` into `f`.
    fn stream_level(&mut self, l: u8) {
        let b = self.forest.cells_per_block();
        let q = L::Q;
        let dims = L::D;
        let forest = &self.forest;
        let (post, solid) = (&self.post, &self.solid);
        let (walls, outflow) = (self.walls, self.outflow);
        let force = self.force(l);
        let store = self.store;
        let curved = self.curved.as_ref().filter(|w| w.level == l);
        self.f.par_chunks_mut(q * b).enumerate().for_each(|(id, out)| {
            let id32 = id as u32;
            if !forest.is_active(id32) || forest.level(id32) != l {
                return;
            }
            let leaf = forest.is_leaf(id32);
            let masks = forest.cell_masks(id32);
            for cell in 0..b {
                if solid[id * b + cell] || (!leaf && masks[cell] != cell_mask::PARENT_OF_GHOST) {
                    continue;
                }
                let c = cell_coords(cell, dims);
                // Equilibrium at the outflow density and the cell's velocity, made when a link
                // leaves through an outflow face.
                let mut out_eq: Option<[f32; MAX_Q]> = None;
                // Directions whose value bounced back off an obstacle.
                let mut bounced = 0u32;
                for i in 0..q {
                    // Source cell x - c_i, possibly in a neighbour block.
                    let mut e = [0i32; 3];
                    let mut s = [0i32; 3];
                    for a in 0..dims {
                        let t = c[a] - L::C[i][a];
                        e[a] = t.div_euclid(BLOCK as i32);
                        s[a] = t.rem_euclid(BLOCK as i32);
                    }
                    let scell = cell_index(s);
                    match forest.neighbour(id32, dir_index(e, dims)) {
                        // Half-way bounce-back at an obstacle (at rest).
                        Link::Same(n) if solid[n as usize * b + scell] => {
                            out[i * b + cell] = post[(id * q + opposite(i)) * b + cell];
                            bounced |= 1 << i;
                        }
                        Link::Same(n) => {
                            debug_assert!(
                                forest.is_leaf(n) || forest.cell_masks(n)[scell] >= cell_mask::PARENT_OF_GHOST,
                                "level {l}: block {id} cell {cell} pulls from covered cell {scell} of block {n}"
                            );
                            out[i * b + cell] = post[(n as usize * q + i) * b + scell];
                        }
                        // At the domain boundary: half-way bounce-back at walls (moving ones with
                        // their momentum term), the outflow equilibrium where every face the link
                        // crosses is an outflow.
                        Link::Outside => {
                            let pos = forest.pos(id32);
                            let mut uw = [0.0f32; 3];
                            let mut n_walls = 0u32;
                            let mut rho_out = 1.0f32;
                            for a in 0..dims {
                                let np = pos[a] + e[a];
                                let crossed = if np < 0 {
                                    Some(0)
                                } else if np >= (forest.root()[a] << l) as i32 {
                                    Some(1)
                                } else {
                                    None
                                };
                                if let Some(side) = crossed {
                                    match outflow[2 * a + side] {
                                        Some(rho) => rho_out = rho,
                                        None => {
                                            n_walls += 1;
                                            (0..3).for_each(|k| uw[k] += walls[2 * a + side][k]);
                                        }
                                    }
                                }
                            }
                            out[i * b + cell] = if n_walls == 0 {
                                let eq = out_eq.get_or_insert_with(|| {
                                    let mut g = [0.0f32; MAX_Q];
                                    (0..q).for_each(|j| g[j] = post[(id * q + j) * b + cell]);
                                    let (_, u) = moments::<L>(&g, force);
                                    let mut feq = [0.0f32; MAX_Q];
                                    equilibrium::<L>(rho_out - 1.0, u, &mut feq);
                                    feq
                                });
                                eq[i]
                            } else {
                                let cu: f32 = (0..dims).map(|a| L::C[i][a] as f32 * uw[a]).sum::<f32>() / n_walls as f32;
                                post[(id * q + opposite(i)) * b + cell] + 6.0 * L::W[i] * cu
                            };
                        }
                        // Ghost cell next to the coarser level: stale until the next
                        // interpolation.
                        Link::Coarser(_) => {}
                    }
                }
                if store != Precision::Fp32 {
                    (0..q).for_each(|i| out[i * b + cell] = store.round_trip(out[i * b + cell]));
                }
                // Interpolated walls (walls.rs): on the stored values, as the GPU's pass after
                // its step.
                if bounced != 0 {
                    if let Some(row) = curved.and_then(|w| w.row(global_cell(forest, id32, cell))) {
                        for d in 1..q {
                            let k = opposite(d);
                            if row[d] > 0.0 && bounced & (1 << k) != 0 {
                                let v = walls::block_bouzidi(
                                    row[d],
                                    post[(id * q + d) * b + cell],
                                    post[(id * q + k) * b + cell],
                                    out[k * b + cell],
                                    out[d * b + cell],
                                );
                                out[k * b + cell] = store.round_trip(v);
                            }
                        }
                    }
                }
            }
        });
    }
}

/// Coordinates of a cell of a block on its level's grid (`4 pos + c` per axis): on the finest
/// level, the cell of the scene's finest grid.
#[must_use]
pub fn global_cell(forest: &BlockForest, id: u32, cell: usize) -> [i32; 3] {
    let p = forest.pos(id);
    let c = cell_coords(cell, forest.dims());
    let mut g = [0i32; 3];
    for a in 0..forest.dims() {
        g[a] = p[a] * BLOCK as i32 + c[a];
    }
    g
}

/// Centre of a cell of a block, in cells of level 0.
#[must_use]
pub fn cell_centre(forest: &BlockForest, id: u32, cell: usize) -> [f64; 3] {
    let (lo, size) = forest.block_box(id);
    let h = size / BLOCK as f64;
    let c = cell_coords(cell, forest.dims());
    let mut out = [0.0; 3];
    for a in 0..forest.dims() {
        out[a] = lo[a] + (f64::from(c[a]) + 0.5) * h;
    }
    out
}

#[cfg(test)]
mod tests;
