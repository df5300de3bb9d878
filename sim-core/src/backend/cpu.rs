//! CPU reference backend (rayon). Generic over the velocity set and the storage format; the
//! streaming scheme is a const parameter of the stepping loop so each combination is compiled
//! to straight-line code.
//!
//! Layout: structure of arrays, `F[i * cells + n]`, `n = x + nx * (y + ny * z)`. Indices wrap
//! periodically on every axis; non-periodic faces are layers of boundary cells.

use super::ghost::GhostLayout;
use crate::checkpoint::Checkpoint;
use crate::collision::{collide_w, equilibrium};
use crate::domain::{id_of, is_solid, kind, kind_of, slip_source, Domain, NEAR};
use crate::edit::{CellEdit, EditReport};
use crate::lattice::{opposite, Lat, D2Q9, D3Q19, D3Q27, MAX_Q};
use crate::precision::{Fp16c, Fp16s, Precision, Store};
use crate::probes::ProbeSample;
use crate::schemes::Scheme;
use crate::solver::{Fields, Params, Solver, SolverError, SolverInfo, Stats};
use crate::walls::Links;
use rayon::prelude::*;
use std::marker::PhantomData;

pub(crate) use super::cell::{cell_moments, moving_walls, update_cell, Ctx, Forces, Ptr};

// Scheme ids for the const parameter of the stepping loop.
const OSP: u8 = 0;
const AA: u8 = 1;
const EP: u8 = 2;
const EPUSH: u8 = 3;
const SWAP: u8 = 4;

/// Only LBM-Swap gets same-step (halfway) bounce-back without reading neighbour flags: a swap
/// with a solid neighbour is skipped, leaving the outgoing DDF reversed in place. In Esoteric
/// Pull/Push and AA, skipping solid cells returns a DDF one step late (full-way bounce-back,
/// same steady state, different transients), so boundary cells read it explicitly.
const fn implicit_bb(p: u8) -> bool {
    matches!(p, SWAP)
}

/// Slot holding the incoming DDF `i` of cell `n` before the step of parity `odd`.
/// `nbr[i]` is the neighbour along `c_i`; `nn` the number of cells.
#[inline(always)]
fn load_slot<const P: u8>(i: usize, n: usize, nbr: &[usize; MAX_Q], odd: bool, nn: usize) -> usize {
    match P {
        OSP => i * nn + nbr[opposite(i)],
        AA => {
            if odd {
                opposite(i) * nn + n
            } else {
                i * nn + nbr[opposite(i)]
            }
        }
        EP => {
            if i == 0 {
                n
            } else if i % 2 == 1 {
                if odd {
                    i * nn + n
                } else {
                    (i + 1) * nn + n
                }
            } else if odd {
                i * nn + nbr[i - 1]
            } else {
                (i - 1) * nn + nbr[i - 1]
            }
        }
        EPUSH => {
            // Esoteric Pull mirrored: pairs stream along c_{i+1} = -c_i.
            if i == 0 {
                n
            } else if i % 2 == 0 {
                if odd {
                    i * nn + n
                } else {
                    (i - 1) * nn + n
                }
            } else if odd {
                i * nn + nbr[i + 1]
            } else {
                (i + 1) * nn + nbr[i + 1]
            }
        }
        _ => i * nn + n, // SWAP: between steps every cell holds its own incoming DDFs
    }
}

/// Slot the bounce-back value comes from when the source of DDF `i` is solid: where this cell
/// stored its outgoing DDF `opposite(i)` in the previous step. That slot belongs to the solid
/// neighbour's share of memory, which no other cell touches: race-free.
#[inline(always)]
fn bb_slot<const P: u8>(i: usize, n: usize, nbr: &[usize; MAX_Q], odd: bool, nn: usize) -> usize {
    match P {
        OSP => opposite(i) * nn + n,
        _ => load_slot::<P>(i, n, nbr, !odd, nn),
    }
}

/// Slot the incoming DDF `i` of cell `n` comes from when its source is the wall cell with flag
/// `wall`: the bounce-back slot, or for a free-slip wall the slot of the reflected DDF
/// ([`slip_source`]; that cell's neighbour along `c_m` is the wall cell `b`).
#[inline(always)]
fn wall_slot<L: Lat, const P: u8>(i: usize, wall: u8, n: usize, nbr: &[usize; MAX_Q], flags: &[u8], odd: bool, nn: usize) -> usize {
    match slip_source::<L>(i, wall, nbr, flags) {
        Some((xs, m, b)) => bb_slot::<P>(opposite(m), xs, &[b; MAX_Q], odd, nn),
        None => bb_slot::<P>(i, n, nbr, odd, nn),
    }
}

/// Slot the outgoing DDF `i` of cell `n` is stored to in the step of parity `odd`.
#[inline(always)]
fn store_slot<const P: u8>(i: usize, n: usize, nbr: &[usize; MAX_Q], odd: bool, nn: usize) -> usize {
    match P {
        OSP => i * nn + n,
        SWAP => opposite(i) * nn + n,
        _ => load_slot::<P>(opposite(i), n, nbr, odd, nn),
    }
}

/// Neighbour indices of every cell of one row: row bases per direction.
#[inline(always)]
fn row_bases<L: Lat>(y: usize, z: usize, n: [usize; 3]) -> [usize; MAX_Q] {
    let mut rb = [0usize; MAX_Q];
    for i in 0..L::Q {
        let c = L::C[i];
        let yy = (y as i64 + i64::from(c[1])).rem_euclid(n[1] as i64) as usize;
        let zz = (z as i64 + i64::from(c[2])).rem_euclid(n[2] as i64) as usize;
        rb[i] = n[0] * (yy + n[1] * zz);
    }
    rb
}

#[inline(always)]
fn neighbours<L: Lat>(x: usize, nx: usize, rb: &[usize; MAX_Q]) -> [usize; MAX_Q] {
    let mut nbr = [0usize; MAX_Q];
    let xp = if x + 1 == nx { 0 } else { x + 1 };
    let xm = if x == 0 { nx - 1 } else { x - 1 };
    for i in 0..L::Q {
        let cx = L::C[i][0];
        nbr[i] = rb[i]
            + if cx == 0 {
                x
            } else if cx > 0 {
                xp
            } else {
                xm
            };
    }
    nbr
}

fn add_forces(mut a: Forces, b: Forces) -> Forces {
    for k in 0..16 {
        for c in 0..3 {
            a[k][c] += b[k][c];
        }
    }
    a
}

/// Cells processed side by side in the bulk (two AVX2 registers of f32).
const LANES: usize = 16;

/// How far ahead (in cells) the bulk path prefetches each DDF stream: SoA storage streams
/// q arrays at once, more than the hardware prefetchers follow.
const PREFETCH_AHEAD: usize = 4 * LANES;

#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, even past the end of the buffer.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Whether the CPU runs the AVX2 + FMA row kernel (checked once).
fn simd_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static SIMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SIMD.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One row of cells for the stepping loop.
struct RowJob<'a, S> {
    row: usize,
    /// Cells of the row stepped: `x0..x1`.
    x0: usize,
    x1: usize,
    /// Added (wrapping) to the buffer's coordinates to give the domain's (boundary profiles).
    off: [usize; 3],
    n3: [usize; 3],
    nn: usize,
    odd: bool,
    rd: Ptr<S>,
    wr: Ptr<S>,
    flags: &'a [u8],
    ctx: &'a Ctx<'a>,
}

/// Row kernel compiled for AVX2 + FMA (same code as [`row_kernel`]; FP results are identical
/// because Rust never contracts or reassociates floating-point operations).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2<L: Lat, S: Store, const P: u8>(job: &RowJob<S>, acc: &mut Forces) {
    // SAFETY: forwarded from the caller.
    unsafe { row_kernel::<L, S, P>(job, acc) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn row_avx2<L: Lat, S: Store, const P: u8>(job: &RowJob<S>, acc: &mut Forces) {
    unsafe { row_kernel::<L, S, P>(job, acc) }
}

/// Stream and collide one row. Runs of `LANES` plain fluid cells away from the row's ends go
/// through the lane-parallel path (their slots are consecutive); all other cells through the
/// scalar path with boundaries.
///
/// # Safety
/// `rd`/`wr` point to the scheme's buffers and no other thread touches this row's slots.
#[inline(always)]
unsafe fn row_kernel<L: Lat, S: Store, const P: u8>(job: &RowJob<S>, acc: &mut Forces) {
    let RowJob { row, x0, x1, off, n3, nn, odd, rd, wr, flags, ctx } = *job;
    let (y, z) = (row % n3[1], row / n3[1]);
    let rb = row_bases::<L>(y, z, n3);
    let nx = n3[0];
    let mut x = x0;
    while x < x1 {
        let n = rb[0] + x;
        if x >= 1 && x + LANES < x1 && flags[n..n + LANES].iter().all(|&f| f == 0) {
            let nbr = neighbours::<L>(x, nx, &rb);
            let mut f = [[0.0f32; LANES]; MAX_Q];
            for i in 0..L::Q {
                let s = load_slot::<P>(i, n, &nbr, odd, nn);
                prefetch(rd.0.wrapping_add(s + PREFETCH_AHEAD));
                for l in 0..LANES {
                    // SAFETY: consecutive cells of a run have consecutive slots.
                    f[i][l] = unsafe { *rd.at(s + l) }.dec();
                }
            }
            collide_w::<L, LANES>(&mut f, &ctx.p);
            for i in 0..L::Q {
                let s = store_slot::<P>(i, n, &nbr, odd, nn);
                for l in 0..LANES {
                    // SAFETY: as above.
                    unsafe { *wr.at(s + l) = S::enc(f[i][l]) };
                }
            }
            x += LANES;
            continue;
        }
        let flag = flags[n];
        if !is_solid(flag) {
            let nbr = neighbours::<L>(x, nx, &rb);
            let mut f = [0.0f32; MAX_Q];
            // SAFETY: slots inside the buffers, owned by this cell in this step.
            unsafe {
                for i in 0..L::Q {
                    f[i] = (*rd.at(load_slot::<P>(i, n, &nbr, odd, nn))).dec();
                }
                if !implicit_bb(P) && flag & NEAR != 0 {
                    for i in 1..L::Q {
                        let sf = flags[nbr[opposite(i)]];
                        if is_solid(sf) {
                            f[i] = (*rd.at(wall_slot::<L, P>(i, sf, n, &nbr, flags, odd, nn))).dec();
                        }
                    }
                }
                let pos = [x.wrapping_add(off[0]), y.wrapping_add(off[1]), z.wrapping_add(off[2])];
                let nf = |i: usize| flags[nbr[i]];
                let l0 = if flag & NEAR != 0 && ctx.links.mask != 0 { ctx.links.find(n) } else { None };
                if let Some(l0) = l0 {
                    ctx.links.apply::<L>(&mut f, l0, &|l| *ctx.save.at(l), &nf, Some(acc));
                }
                update_cell::<L>(&mut f, flag, pos, nf, ctx, acc);
                if let Some(l0) = l0 {
                    Links::each::<L>(ctx.links.mask, l0, &nf, |l, d| *ctx.save.at(l) = S::enc(f[opposite(d)]).dec());
                }
                for i in 0..L::Q {
                    *wr.at(store_slot::<P>(i, n, &nbr, odd, nn)) = S::enc(f[i]);
                }
            }
        }
        x += 1;
    }
}

/// One Esoteric-Pull step (FP32) of the cells of a box buffer that carries a one-cell ghost
/// frame: cells `1..bn[a] - 1` on each axis are updated, the frame is only read and written as
/// their neighbours' slots. `origin` is the domain position of the first updated cell
/// (boundary profiles need it); `flags` are the domain's flags of every box cell. The
/// compressed-subgrid solver steps each subgrid this way, with the same cell update as the
/// dense solver.
pub(crate) fn step_box<L: Lat>(
    buf: &mut [f32],
    flags: &[u8],
    bn: [usize; 3],
    origin: [usize; 3],
    odd: bool,
    params: &Params,
    dom: &Domain,
) -> Forces {
    let nn = bn[0] * bn[1] * bn[2];
    assert!(buf.len() >= L::Q * nn && flags.len() >= nn && bn.iter().all(|&b| b >= 3), "box buffer");
    let ctx = Ctx::halfway(params.collide, &params.walls, &dom.inlets, &dom.outlets, L::D);
    let p = Ptr(buf.as_mut_ptr());
    let off = origin.map(|o| o.wrapping_sub(1));
    let rows: Vec<usize> = (1..bn[2] - 1).flat_map(|z| (1..bn[1] - 1).map(move |y| y + bn[1] * z)).collect();
    let simd = simd_available();
    rows.into_par_iter()
        .fold(
            || [[0.0f64; 3]; 16],
            |mut acc, row| {
                let job = RowJob { row, x0: 1, x1: bn[0] - 1, off, n3: bn, nn, odd, rd: p, wr: p, flags, ctx: &ctx };
                // SAFETY: Esoteric Pull maps concurrent cells to disjoint slots; cells of the
                // frame are not updated, and every updated cell's neighbours lie in the box.
                unsafe {
                    if simd {
                        row_avx2::<L, f32, EP>(&job, &mut acc);
                    } else {
                        row_kernel::<L, f32, EP>(&job, &mut acc);
                    }
                }
                acc
            },
        )
        .reduce(|| [[0.0f64; 3]; 16], add_forces)
}

/// Store the incoming DDFs `v` of cell `n` of a periodic grid `n3` (with `flags`) where
/// Esoteric Pull keeps them before a step of parity `odd`, bounce-back resolved: what
/// [`CpuSolver::new`] writes for every fluid cell at the start. The GPU compressed-subgrid
/// solver builds its working boxes with it, so the slot rules stay in this file.
pub(crate) fn ep_scatter<L: Lat>(buf: &mut [f32], flags: &[u8], n3: [usize; 3], n: usize, v: &[f32; MAX_Q], odd: bool) {
    let nn = n3[0] * n3[1] * n3[2];
    let (x, y, z) = (n % n3[0], (n / n3[0]) % n3[1], n / (n3[0] * n3[1]));
    let nbr = neighbours::<L>(x, n3[0], &row_bases::<L>(y, z, n3));
    for i in 0..L::Q {
        let src_solid = i != 0 && is_solid(flags[nbr[opposite(i)]]);
        let s = if src_solid { bb_slot::<EP>(i, n, &nbr, odd, nn) } else { load_slot::<EP>(i, n, &nbr, odd, nn) };
        buf[s] = v[i];
    }
}

/// The CPU solver for one velocity set and storage format.
pub struct CpuSolver<L: Lat, S: Store> {
    dom: Domain,
    scheme: Scheme,
    /// DDFs; One-Step Pull uses both, other schemes only `buf[0]`.
    buf: [Vec<S>; 2],
    /// Index of the buffer holding the current state (One-Step Pull swaps).
    cur: usize,
    ghost: Option<GhostLayout>,
    t: u64,
    params: Params,
    last_forces: Forces,
    /// Where this grid lies in the scene's (a multi-GPU slab's halo layer 0 included; added,
    /// wrapping, to cell coordinates for inlet profiles) and its halo axis + 1 (0: none).
    place: Slab,
    /// Interpolated wall links of the grid (none for LBM-Ghost and slabs).
    links: Links,
    /// f*_k(x) of every link (see [`crate::walls`]), as stored (rounded to the precision).
    save: Vec<f32>,
    _l: PhantomData<L>,
}

/// A grid's place as one slab of a multi-GPU run ([`super::cuda::multi`]): coordinate offset
/// (wrapping) and `1 + axis` of the two halo layers that are not updated (0: a whole grid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slab {
    pub off: [usize; 3],
    pub halo: usize,
}

impl<L: Lat, S: Store> CpuSolver<L, S> {
    /// Build a solver on a domain; every non-solid cell starts at equilibrium with the
    /// density and velocity `init` gives for its coordinates.
    pub fn new(
        dom: Domain,
        scheme: Scheme,
        params: Params,
        ghost_block: usize,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Self {
        CpuSolver::new_at(dom, scheme, params, ghost_block, Slab::default(), init)
    }

    /// [`CpuSolver::new`] as a slab of a larger grid: `init` and inlet profiles see the cells'
    /// coordinates in that grid, and the halo layers are not updated.
    pub(crate) fn new_at(
        dom: Domain,
        scheme: Scheme,
        params: Params,
        ghost_block: usize,
        place: Slab,
        init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
    ) -> Self {
        let nn = dom.cells();
        let q = L::Q;
        let ghost = (scheme == Scheme::Ghost).then(|| GhostLayout::new::<L>(&dom, ghost_block));
        let len0 = ghost.as_ref().map_or(q * nn, GhostLayout::storage_len);
        let len1 = if scheme == Scheme::OneStepPull { q * nn } else { 0 };
        let mut s = CpuSolver {
            dom,
            scheme,
            buf: [vec![S::default(); len0], vec![S::default(); len1]],
            cur: 0,
            ghost,
            t: 0,
            params,
            last_forces: [[0.0; 3]; 16],
            place,
            links: Links::default(),
            save: Vec::new(),
            _l: PhantomData,
        };
        // Every cell's equilibrium, in parallel (a 512^3 grid has 134 million cells).
        let out = Ptr(s.buf[s.cur].as_mut_ptr());
        let this = &s;
        (0..nn).into_par_iter().with_min_len(1 << 12).for_each(|n| {
            let flag = this.dom.flags[n];
            if is_solid(flag) {
                return;
            }
            let l = this.dom.coords(n);
            let p = [0, 1, 2].map(|a| l[a].wrapping_add(place.off[a]));
            let (rho, mut u) = init(l);
            if kind_of(flag) == kind::INLET {
                u = this.dom.inlets[id_of(flag)].velocity_at(p, L::D);
            }
            let mut feq = [0.0f32; MAX_Q];
            equilibrium::<L>(rho - 1.0, u, &mut feq);
            let nbr = this.nbr_of(n);
            for i in 0..q {
                // SAFETY: the slots of the non-solid cells' incoming DDFs are distinct (gather and
                // scatter of one cell never meet another's), so every thread writes its own
                // elements of the buffer, which outlives the loop; nothing reads it meanwhile.
                unsafe { *out.at(this.slot(i, n, &nbr)) = S::enc(feq[i]) };
            }
        });
        s.relink();
        s
    }

    /// Build the interpolated wall links from the domain's surfaces and read every link's
    /// f*_k(x) from the state (after a start, a restore or an edit).
    fn relink(&mut self) {
        self.links = self.links_of_domain();
        self.refresh_save();
    }

    /// The interpolated wall links of the grid's updated cells (a slab's halo layers are not);
    /// none for LBM-Ghost, which keeps halfway walls.
    fn links_of_domain(&self) -> Links {
        if self.scheme == Scheme::Ghost {
            return Links::default();
        }
        Links::of_grid(&self.dom, self.place.halo)
    }

    /// Read every link's f*_k(x) from the state: the value x + c_k loads along c_k in the next
    /// step (for LBM-Swap with a solid x + c_k, where the skipped swap left it at x).
    fn refresh_save(&mut self) {
        let mut save = vec![0.0f32; self.links.len()];
        let flags = &self.dom.flags;
        let nn = self.dom.cells();
        let odd = self.t % 2 == 1;
        for (ci, &cell) in self.links.cells.iter().enumerate() {
            let x = cell as usize;
            let nbr = self.nbr_of(x);
            Links::each::<L>(self.links.mask, self.links.start[ci] as usize, &|i| flags[nbr[i]], |l, d| {
                let k = opposite(d);
                let m = nbr[k];
                let slot = if self.scheme == Scheme::Swap && is_solid(flags[m]) {
                    d * nn + x
                } else {
                    let nm = self.nbr_of(m);
                    match self.scheme {
                        Scheme::OneStepPull => load_slot::<OSP>(k, m, &nm, odd, nn),
                        Scheme::Aa => load_slot::<AA>(k, m, &nm, odd, nn),
                        Scheme::EsotericPull => load_slot::<EP>(k, m, &nm, odd, nn),
                        Scheme::EsotericPush => load_slot::<EPUSH>(k, m, &nm, odd, nn),
                        Scheme::Swap | Scheme::Ghost => load_slot::<SWAP>(k, m, &nm, odd, nn),
                    }
                };
                save[l] = self.buf[self.cur][slot].dec();
            });
        }
        self.save = save;
    }

    /// An Esoteric-Pull solver holding a given state (`F[i * cells + n]` at the parity of step
    /// `t`) instead of an initial one: the dense view the compressed-subgrid solver reads
    /// fields, statistics and checkpoints through.
    pub(crate) fn with_state(dom: Domain, params: Params, t: u64, state: Vec<S>, last_forces: Forces) -> Self {
        debug_assert_eq!(state.len(), L::Q * dom.cells(), "state length");
        CpuSolver {
            dom,
            scheme: Scheme::EsotericPull,
            buf: [state, Vec::new()],
            cur: 0,
            ghost: None,
            t,
            params,
            last_forces,
            place: Slab::default(),
            links: Links::default(),
            save: Vec::new(),
            _l: PhantomData,
        }
    }

    /// The domain, parameters and current state (the inverse of [`Self::with_state`]; for an
    /// in-place scheme).
    pub(crate) fn into_parts(self) -> (Domain, Params, Vec<S>) {
        let [a, b] = self.buf;
        (self.dom, self.params, if self.cur == 0 { a } else { b })
    }

    /// The streaming scheme.
    pub(crate) fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The raw DDF storage of the current state (`F[i * cells + n]` for the in-place schemes).
    pub(crate) fn state(&self) -> &[S] {
        &self.buf[self.cur]
    }

    /// Forces on the obstacles in the last step.
    #[cfg(test)]
    pub(crate) fn forces_ref(&self) -> &Forces {
        &self.last_forces
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            p: self.params.collide,
            walls: &self.params.walls,
            inlets: &self.dom.inlets,
            outlets: &self.dom.outlets,
            dims: L::D,
            links: &self.links,
            // Written only by the step, where each link's cell writes its own entry.
            save: Ptr(self.save.as_ptr().cast_mut()),
        }
    }

    /// Neighbour indices of one cell (any cell, for gathers outside the step).
    fn nbr_of(&self, n: usize) -> [usize; MAX_Q] {
        let p = self.dom.coords(n);
        let rb = row_bases::<L>(p[1], p[2], self.dom.n);
        neighbours::<L>(p[0], self.dom.n[0], &rb)
    }

    /// Slot of incoming DDF `i` of cell `n` in the current state (bounce-back resolved).
    fn slot(&self, i: usize, n: usize, nbr: &[usize; MAX_Q]) -> usize {
        self.slot_at(i, n, nbr, self.t % 2 == 1)
    }

    /// Slot of incoming DDF `i` of cell `n` after a step of parity `!odd` (before a step of
    /// parity `odd`), with the flags as they are now.
    fn slot_at(&self, i: usize, n: usize, nbr: &[usize; MAX_Q], odd: bool) -> usize {
        let nn = self.dom.cells();
        let flags = &self.dom.flags;
        let src_solid = i != 0 && is_solid(flags[nbr[opposite(i)]]);
        macro_rules! pick {
            ($p:expr) => {
                if src_solid && !implicit_bb($p) {
                    wall_slot::<L, $p>(i, flags[nbr[opposite(i)]], n, nbr, flags, odd, nn)
                } else {
                    load_slot::<$p>(i, n, nbr, odd, nn)
                }
            };
        }
        match self.scheme {
            Scheme::OneStepPull => pick!(OSP),
            Scheme::Aa => pick!(AA),
            Scheme::EsotericPull => pick!(EP),
            Scheme::EsotericPush => pick!(EPUSH),
            Scheme::Swap => pick!(SWAP),
            Scheme::Ghost => {
                let g = self.ghost.as_ref().expect("ghost layout");
                if src_solid {
                    g.storage_index(&self.dom, n, opposite(i))
                } else {
                    g.storage_index(&self.dom, nbr[opposite(i)], i)
                }
            }
        }
    }

    /// Raw incoming DDFs of a non-solid cell (no arithmetic: bit-exact).
    fn gather_raw(&self, n: usize) -> [S; MAX_Q] {
        let nbr = self.nbr_of(n);
        let mut out = [S::default(); MAX_Q];
        for i in 0..L::Q {
            out[i] = self.buf[self.cur][self.slot(i, n, &nbr)];
        }
        out
    }

    /// Inverse of [`Self::gather_raw`].
    fn scatter_raw(&mut self, n: usize, v: &[S; MAX_Q]) {
        let nbr = self.nbr_of(n);
        for i in 0..L::Q {
            let s = self.slot(i, n, &nbr);
            self.buf[self.cur][s] = v[i];
        }
    }

    /// Decoded incoming DDFs of a non-solid cell, moving walls applied: what the next
    /// collision sees.
    fn incoming(&self, n: usize) -> [f32; MAX_Q] {
        let raw = self.gather_raw(n);
        let mut f = [0.0f32; MAX_Q];
        for i in 0..L::Q {
            f[i] = raw[i].dec();
        }
        let nbr = self.nbr_of(n);
        let flags = &self.dom.flags;
        if let Some(l0) = self.links.find(n) {
            self.links.apply::<L>(&mut f, l0, &|l| self.save[l], &|i| flags[nbr[i]], None);
        }
        moving_walls::<L>(&mut f, &|i| flags[nbr[i]], &self.params.walls);
        f
    }

    fn step_cells<const P: u8>(&mut self) -> Forces {
        let nn = self.dom.cells();
        let odd = self.t % 2 == 1;
        let n3 = self.dom.n;
        let (rd, wr) = if P == OSP {
            let (a, b) = self.buf.split_at_mut(1);
            let (src, dst) = if self.cur == 0 { (&mut a[0], &mut b[0]) } else { (&mut b[0], &mut a[0]) };
            (Ptr(src.as_mut_ptr()), Ptr(dst.as_mut_ptr()))
        } else {
            let p = Ptr(self.buf[0].as_mut_ptr());
            (p, p)
        };
        let ctx = self.ctx();
        let flags = &self.dom.flags;
        let rows = n3[1] * n3[2];
        let simd = simd_available();
        // A slab's halo layers (axis 1 or 2, so whole rows) are not updated.
        let halo = self.place.halo;
        let off = self.place.off;
        let own = |r: &usize| match halo {
            2 => r % n3[1] != 0 && r % n3[1] != n3[1] - 1,
            3 => r / n3[1] != 0 && r / n3[1] != n3[2] - 1,
            _ => true,
        };
        let forces = (0..rows)
            .into_par_iter()
            .filter(own)
            .fold(
                || [[0.0f64; 3]; 16],
                |mut acc, row| {
                    let job = RowJob { row, x0: 0, x1: n3[0], off, n3, nn, odd, rd, wr, flags, ctx: &ctx };
                    // SAFETY: the scheme maps concurrent cells to disjoint slots inside the
                    // buffers; the AVX2 path is only taken where the CPU has AVX2 and FMA.
                    unsafe {
                        if simd {
                            row_avx2::<L, S, P>(&job, &mut acc);
                        } else {
                            row_kernel::<L, S, P>(&job, &mut acc);
                        }
                    }
                    acc
                },
            )
            .reduce(|| [[0.0f64; 3]; 16], add_forces);
        if P == OSP {
            self.cur = 1 - self.cur;
        }
        forces
    }

    /// LBM-Swap streaming pass: swap each outgoing DDF with the neighbour's opposite one.
    fn swap_stream(&mut self) {
        let nn = self.dom.cells();
        let n3 = self.dom.n;
        let fp = Ptr(self.buf[0].as_mut_ptr());
        let flags = &self.dom.flags;
        (0..n3[1] * n3[2]).into_par_iter().for_each(|row| {
            let (y, z) = (row % n3[1], row / n3[1]);
            let rb = row_bases::<L>(y, z, n3);
            for x in 0..n3[0] {
                let n = rb[0] + x;
                if is_solid(flags[n]) {
                    continue;
                }
                let nbr = neighbours::<L>(x, n3[0], &rb);
                for i in (1..L::Q).step_by(2) {
                    let m = nbr[i];
                    if is_solid(flags[m]) {
                        continue;
                    }
                    // SAFETY: slot (i+1, n) and slot (i, n + c_i) belong to cell n's swap only.
                    unsafe { std::ptr::swap(fp.at((i + 1) * nn + n), fp.at(i * nn + m)) };
                }
            }
        });
    }

    fn one_step(&mut self) {
        let forces = match self.scheme {
            Scheme::OneStepPull => self.step_cells::<OSP>(),
            Scheme::Aa => self.step_cells::<AA>(),
            Scheme::EsotericPull => self.step_cells::<EP>(),
            Scheme::EsotericPush => self.step_cells::<EPUSH>(),
            Scheme::Swap => {
                let f = self.step_cells::<SWAP>();
                self.swap_stream();
                f
            }
            Scheme::Ghost => {
                let g = self.ghost.take().expect("ghost layout");
                let ctx = Ctx::halfway(self.params.collide, &self.params.walls, &self.dom.inlets, &self.dom.outlets, L::D);
                let f = g.step::<L, S>(&mut self.buf[0], &ctx);
                self.ghost = Some(g);
                f
            }
        };
        self.last_forces = forces;
        self.t += 1;
    }

    /// Apply a cell edit to the state after `t` steps, read and written through `io` (the
    /// solver's own buffer, or a device's memory in the same layout). Cells that stay fluid
    /// keep their raw incoming DDFs (moved to the slots the new flags give them), cells that
    /// become fluid get rest equilibrium at the mean density of the fluid neighbours.
    fn edit_via(&mut self, e: &CellEdit, t: u64, io: &mut dyn SlotIo) -> Result<EditReport, SolverError> {
        let plan = self.dom.plan_edit(e).map_err(SolverError::Edit)?;
        if plan.changes.is_empty() {
            return Ok(EditReport::default());
        }
        let odd = t % 2 == 1;
        let (q, es) = (L::Q, std::mem::size_of::<S>());
        let around = self.dom.around(&plan.changes);
        let changed: std::collections::HashSet<usize> = plan.changes.iter().map(|&(c, _)| c).collect();
        // 1. Read the incoming DDFs of every fluid cell around the edit (old flags).
        let read: Vec<usize> = around.iter().copied().filter(|&n| !is_solid(self.dom.flags[n])).collect();
        let mut slots = Vec::with_capacity(read.len() * q);
        for &n in &read {
            let nbr = self.nbr_of(n);
            slots.extend((0..q).map(|i| self.slot_at(i, n, &nbr, odd)));
        }
        let mut raw = vec![0u8; slots.len() * es];
        io.read(&slots, &mut raw)?;
        let rho: std::collections::HashMap<usize, f32> =
            read.iter().enumerate().map(|(k, &n)| (n, self.density_of_raw(n, &raw[k * q * es..(k + 1) * q * es]))).collect();
        let mass_removed: f64 = read.iter().filter(|n| changed.contains(n)).map(|n| f64::from(rho[n])).sum();
        // 2. Densities of the cells that become fluid: the mean of their neighbours that stay fluid.
        let c = L::C;
        let new_fluid: Vec<(usize, f32)> = plan
            .changes
            .iter()
            .filter(|&&(_, f)| !is_solid(f))
            .map(|&(n, _)| {
                let p = self.dom.coords(n);
                let (sum, k) = c
                    .iter()
                    .skip(1)
                    .filter_map(|&ci| {
                        let m = self.dom.neighbour(p, ci);
                        (!changed.contains(&m)).then(|| rho.get(&m)).flatten()
                    })
                    .fold((0.0f64, 0usize), |(s, k), &r| (s + f64::from(r), k + 1));
                (n, if k > 0 { (sum / k as f64) as f32 } else { 1.0 })
            })
            .collect();
        // 3. New flags (and ghost layout), then write the states back where they now belong.
        let before = self.dom.apply_plan(&plan, &around);
        if let Some(g) = &self.ghost {
            self.ghost = Some(g.rebuilt::<L>(&self.dom));
        }
        let mut wslots = Vec::with_capacity(read.len() * q + new_fluid.len() * q);
        let mut vals = Vec::with_capacity(wslots.capacity() * es);
        for (k, &n) in read.iter().enumerate() {
            if changed.contains(&n) {
                continue;
            }
            let nbr = self.nbr_of(n);
            wslots.extend((0..q).map(|i| self.slot_at(i, n, &nbr, odd)));
            vals.extend_from_slice(&raw[k * q * es..(k + 1) * q * es]);
        }
        let mut mass_added = 0.0f64;
        for &(n, r) in &new_fluid {
            let mut feq = [0.0f32; MAX_Q];
            equilibrium::<L>(r - 1.0, [0.0; 3], &mut feq);
            let start = vals.len();
            for v in &feq[..q] {
                vals.extend_from_slice(bytemuck::bytes_of(&S::enc(*v)));
            }
            mass_added += f64::from(self.density_of_raw(n, &vals[start..]));
            let nbr = self.nbr_of(n);
            wslots.extend((0..q).map(|i| self.slot_at(i, n, &nbr, odd)));
        }
        io.write(&wslots, &vals)?;
        Ok(EditReport { changed: before, obstacle: plan.obstacle.map(|(id, _)| id), mass_added, mass_removed })
    }

    /// Density of a non-solid cell from its raw incoming DDFs (`q` storage elements as bytes),
    /// as [`Solver::stats`] computes it.
    fn density_of_raw(&self, n: usize, raw: &[u8]) -> f32 {
        let es = std::mem::size_of::<S>();
        let mut f = [0.0f32; MAX_Q];
        for i in 0..L::Q {
            f[i] = bytemuck::pod_read_unaligned::<S>(&raw[i * es..(i + 1) * es]).dec();
        }
        let nbr = self.nbr_of(n);
        let flags = &self.dom.flags;
        moving_walls::<L>(&mut f, &|i| flags[nbr[i]], &self.params.walls);
        cell_moments::<L>(&f, flags[n], self.dom.coords(n), &self.ctx()).0
    }

    /// Density, velocity and solidity of cell `n` from its incoming DDFs, as
    /// [`Solver::fields`] stores them (a solid cell: density 1, velocity 0).
    fn cell_state(&self, n: usize, ctx: &Ctx<'_>) -> (f32, [f32; 3], bool) {
        let flag = self.dom.flags[n];
        if is_solid(flag) {
            return (1.0, [0.0; 3], true);
        }
        let f = self.incoming(n);
        let (r, u) = cell_moments::<L>(&f, flag, self.dom.coords(n), ctx);
        (r, u, false)
    }

    fn flags_crc(&self) -> u32 {
        crc32fast::hash(&self.dom.flags)
    }
}

impl<L: Lat, S: Store> Solver for CpuSolver<L, S> {
    fn info(&self) -> SolverInfo {
        let gb = self.ghost.as_ref().map_or(16, GhostLayout::block);
        let mem = (self.buf[0].len() + self.buf[1].len()) * std::mem::size_of::<S>() + self.dom.flags.len();
        SolverInfo {
            backend: "cpu",
            device: format!("{} threads", rayon::current_num_threads()),
            lattice: L::KIND,
            scheme: self.scheme,
            precision: S::KIND,
            size: self.dom.n,
            bytes_per_cell: self.scheme.bytes_stored(L::KIND, S::KIND, gb),
            bytes_moved_per_cell: self.scheme.bytes_moved(L::KIND, S::KIND, gb),
            memory_bytes: mem as u64,
        }
    }
    fn domain(&self) -> &Domain {
        &self.dom
    }
    fn time_step(&self) -> u64 {
        self.t
    }
    fn step(&mut self, steps: u64) -> Result<(), SolverError> {
        for _ in 0..steps {
            self.one_step();
        }
        Ok(())
    }
    fn fields(&self) -> Fields {
        let nn = self.dom.cells();
        let ctx = self.ctx();
        let cells: Vec<(f32, [f32; 3], bool)> = (0..nn).into_par_iter().map(|n| self.cell_state(n, &ctx)).collect();
        let mut out = Fields { size: self.dom.n, rho: Vec::with_capacity(nn), u: Vec::with_capacity(nn), solid: Vec::with_capacity(nn) };
        for (r, u, s) in cells {
            out.rho.push(r);
            out.u.push(u);
            out.solid.push(s);
        }
        out
    }
    /// Only the probed cells and their neighbours: a few moments, not the whole grid.
    fn probe(&self, cells: &[[usize; 3]]) -> Result<Vec<ProbeSample>, SolverError> {
        crate::probes::check_cells(self.dom.n, cells)?;
        let ctx = self.ctx();
        Ok(crate::probes::sample_cells(self.dom.n, self.t, cells, |n| self.cell_state(n, &ctx)))
    }
    fn stats(&self) -> Stats {
        let nn = self.dom.cells();
        let ctx = self.ctx();
        // (mass, max speed, smallest and largest density, first non-finite cell)
        let (mass, max_u, rho_range, bad) = (0..nn)
            .into_par_iter()
            .filter(|&n| !is_solid(self.dom.flags[n]))
            .map(|n| {
                let f = self.incoming(n);
                let (r, u) = cell_moments::<L>(&f, self.dom.flags[n], self.dom.coords(n), &ctx);
                let s = f64::from(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]).sqrt();
                if r.is_finite() && s.is_finite() {
                    (f64::from(r), s, [f64::from(r); 2], usize::MAX)
                } else {
                    (0.0, 0.0, [f64::INFINITY, f64::NEG_INFINITY], n)
                }
            })
            .reduce(
                || (0.0, 0.0, [f64::INFINITY, f64::NEG_INFINITY], usize::MAX),
                |a, b| (a.0 + b.0, a.1.max(b.1), [a.2[0].min(b.2[0]), a.2[1].max(b.2[1])], a.3.min(b.3)),
            );
        let blown = bad != usize::MAX;
        Stats {
            step: self.t,
            mass: if blown { f64::NAN } else { mass },
            max_u: if blown { f64::NAN } else { max_u },
            rho_range: if blown { [f64::NAN; 2] } else { rho_range },
            forces: (1..=self.dom.obstacles.len()).map(|k| self.last_forces[k]).collect(),
            first_bad_cell: blown.then(|| self.dom.coords(bad)),
        }
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn set_params(&mut self, p: Params) -> Result<(), SolverError> {
        apply_params(&mut self.dom, &self.params, &p)?;
        self.params = p;
        Ok(())
    }
    fn checkpoint(&self) -> Checkpoint {
        let mut data = Vec::new();
        for n in 0..self.dom.cells() {
            if is_solid(self.dom.flags[n]) {
                continue;
            }
            let raw = self.gather_raw(n);
            data.extend_from_slice(bytemuck::cast_slice(&raw[..L::Q]));
        }
        Checkpoint {
            lattice: L::KIND,
            precision: S::KIND,
            size: self.dom.n,
            flags_crc: self.flags_crc(),
            step: self.t,
            params: self.params.clone(),
            data,
            probes: Vec::new(),
        }
    }
    fn restore(&mut self, c: &Checkpoint) -> Result<(), SolverError> {
        let e = |m: String| Err(SolverError::Checkpoint(m));
        if c.lattice != L::KIND || c.precision != S::KIND {
            return e(format!("it holds {} {} but this solver is {} {}", c.lattice, c.precision, L::KIND, S::KIND));
        }
        if c.size != self.dom.n || c.flags_crc != self.flags_crc() {
            return e("it was made on a different domain (size or obstacles differ)".into());
        }
        let per = L::Q * std::mem::size_of::<S>();
        if c.data.len() != per * self.dom.fluid_cells() {
            return e("its data size does not match the domain".into());
        }
        self.set_params(c.params.clone())?;
        self.t = c.step;
        self.cur = 0;
        for b in &mut self.buf {
            b.fill(S::default());
        }
        let mut k = 0;
        for n in 0..self.dom.cells() {
            if is_solid(self.dom.flags[n]) {
                continue;
            }
            let mut raw = [S::default(); MAX_Q];
            let src: &[S] = bytemuck::cast_slice(&c.data[k * per..(k + 1) * per]);
            raw[..L::Q].copy_from_slice(src);
            self.scatter_raw(n, &raw);
            k += 1;
        }
        self.refresh_save();
        Ok(())
    }
    fn edit_cells(&mut self, edit: &CellEdit) -> Result<EditReport, SolverError> {
        let cur = self.cur;
        let mut buf = std::mem::take(&mut self.buf[cur]);
        let r = self.edit_via(edit, self.t, &mut HostIo(&mut buf));
        self.buf[cur] = buf;
        self.relink();
        r
    }
}

/// Check new parameters against the current ones and write the inlet velocities and outlet
/// densities into the domain tables the cell update reads (every host-stepped backend does
/// this in [`Solver::set_params`]).
pub(crate) fn apply_params(dom: &mut Domain, cur: &Params, p: &Params) -> Result<(), SolverError> {
    p.validate().map_err(SolverError::Param)?;
    if p.walls.len() != cur.walls.len() || p.inlets.len() != cur.inlets.len() || p.outlets.len() != cur.outlets.len() {
        return Err(SolverError::Param("the number of walls, inlets and outlets is fixed by the scene".into()));
    }
    for (b, v) in dom.inlets.iter_mut().zip(&p.inlets) {
        b.velocity = *v;
    }
    for (b, d) in dom.outlets.iter_mut().zip(&p.outlets) {
        b.density = *d;
    }
    Ok(())
}

/// Reads and writes raw storage elements (DDF slots) of the buffer holding the current state:
/// the CPU solver's own buffer, or device memory in the same layout.
pub(crate) trait SlotIo {
    /// Copy the elements at `slots` into `out` (element after element, as bytes).
    fn read(&mut self, slots: &[usize], out: &mut [u8]) -> Result<(), SolverError>;
    /// Write the elements `vals` (as bytes) to `slots`.
    fn write(&mut self, slots: &[usize], vals: &[u8]) -> Result<(), SolverError>;
}

/// [`SlotIo`] on a host buffer.
struct HostIo<'a, S>(&'a mut [S]);

impl<S: Store> SlotIo for HostIo<'_, S> {
    fn read(&mut self, slots: &[usize], out: &mut [u8]) -> Result<(), SolverError> {
        let es = std::mem::size_of::<S>();
        for (k, &s) in slots.iter().enumerate() {
            out[k * es..(k + 1) * es].copy_from_slice(bytemuck::bytes_of(&self.0[s]));
        }
        Ok(())
    }
    fn write(&mut self, slots: &[usize], vals: &[u8]) -> Result<(), SolverError> {
        let es = std::mem::size_of::<S>();
        for (k, &s) in slots.iter().enumerate() {
            self.0[s] = bytemuck::pod_read_unaligned(&vals[k * es..(k + 1) * es]);
        }
        Ok(())
    }
}

/// Host access to a CPU solver's raw memory. Device backends use the same layout, so a CPU
/// solver doubles as their codec: it writes the initial state, and reads and writes
/// checkpoints, from bytes copied to and from the device.
pub(crate) trait Mirror: Solver {
    /// The DDF buffers as bytes (allocated again if released), the index of the buffer that
    /// holds the current state, and the step counter.
    fn raw(&mut self) -> (Vec<&mut [u8]>, &mut usize, &mut u64);
    /// Free the host copy of the DDFs (the device holds them).
    fn release(&mut self);
    /// Apply a cell edit to the domain and to a state after `t` steps held elsewhere (in this
    /// layout), read and written through `io`. Host buffers are not touched.
    fn edit_via_io(&mut self, e: &CellEdit, t: u64, io: &mut dyn SlotIo) -> Result<EditReport, SolverError>;
    /// Replace the domain (same size; a multi-GPU slab after an edit of the whole grid).
    fn set_domain(&mut self, d: Domain);
}

impl<L: Lat, S: Store> Mirror for CpuSolver<L, S> {
    fn raw(&mut self) -> (Vec<&mut [u8]>, &mut usize, &mut u64) {
        let nn = self.dom.cells();
        let len0 = self.ghost.as_ref().map_or(L::Q * nn, GhostLayout::storage_len);
        let len1 = if self.scheme == Scheme::OneStepPull { L::Q * nn } else { 0 };
        if self.buf[0].len() != len0 {
            self.buf[0] = vec![S::default(); len0];
        }
        if self.buf[1].len() != len1 {
            self.buf[1] = vec![S::default(); len1];
        }
        let [a, b] = &mut self.buf;
        let mut v: Vec<&mut [u8]> = vec![bytemuck::cast_slice_mut(a.as_mut_slice())];
        if !b.is_empty() {
            v.push(bytemuck::cast_slice_mut(b.as_mut_slice()));
        }
        (v, &mut self.cur, &mut self.t)
    }
    fn release(&mut self) {
        self.buf = [Vec::new(), Vec::new()];
    }
    fn edit_via_io(&mut self, e: &CellEdit, t: u64, io: &mut dyn SlotIo) -> Result<EditReport, SolverError> {
        self.edit_via(e, t, io)
    }
    fn set_domain(&mut self, d: Domain) {
        if let Some(g) = &self.ghost {
            self.ghost = Some(g.rebuilt::<L>(&d));
        }
        self.dom = d;
        self.links = self.links_of_domain();
    }
}

/// Build a CPU solver as a [`Mirror`].
pub(crate) fn build_mirror(
    dom: Domain,
    scheme: Scheme,
    precision: Precision,
    params: Params,
    ghost_block: usize,
    init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
) -> Box<dyn Mirror> {
    build_mirror_at(dom, scheme, precision, params, ghost_block, Slab::default(), init)
}

/// [`build_mirror`] as a slab of a larger grid (see [`CpuSolver::new_at`]).
pub(crate) fn build_mirror_at(
    dom: Domain,
    scheme: Scheme,
    precision: Precision,
    params: Params,
    ghost_block: usize,
    place: Slab,
    init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
) -> Box<dyn Mirror> {
    macro_rules! mk {
        ($l:ty) => {
            match precision {
                Precision::Fp32 => Box::new(CpuSolver::<$l, f32>::new_at(dom, scheme, params, ghost_block, place, init)) as Box<dyn Mirror>,
                Precision::Fp16s => Box::new(CpuSolver::<$l, Fp16s>::new_at(dom, scheme, params, ghost_block, place, init)),
                Precision::Fp16c => Box::new(CpuSolver::<$l, Fp16c>::new_at(dom, scheme, params, ghost_block, place, init)),
            }
        };
    }
    match dom.lattice {
        crate::lattice::Lattice::D2Q9 => mk!(D2Q9),
        crate::lattice::Lattice::D3Q19 => mk!(D3Q19),
        crate::lattice::Lattice::D3Q27 => mk!(D3Q27),
    }
}

/// Build a CPU solver for any lattice and precision.
#[must_use]
pub fn build(
    dom: Domain,
    scheme: Scheme,
    precision: Precision,
    params: Params,
    ghost_block: usize,
    init: impl Fn([usize; 3]) -> (f32, [f32; 3]) + Sync,
) -> Box<dyn Solver> {
    build_mirror(dom, scheme, precision, params, ghost_block, init)
}
