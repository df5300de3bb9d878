//! The update of one cell that every CPU solver shares (dense grids, LBM-Ghost blocks,
//! compressed subgrids): boundary conditions, collision and the moments a cell reports, on the
//! values a streaming scheme loaded for it.

use crate::collision::{collide, equilibrium, moments, CollideParams};
use crate::domain::{id_of, kind, kind_of, sponge_strength, Inlet, Outlet, NEAR};
use crate::lattice::{opposite, Lat, MAX_Q};
use crate::walls::{Links, NO_LINKS};

/// Per-obstacle force accumulators (index = obstacle id, 0 unused).
pub(crate) type Forces = [[f64; 3]; 16];

/// A raw pointer that rayon tasks may share. Every scheme guarantees that concurrent cells
/// touch disjoint slots (that is what makes a scheme thread-safe); this type only carries the
/// pointer across threads.
#[derive(Clone, Copy)]
pub(crate) struct Ptr<T>(pub *mut T);
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}
impl<T> Ptr<T> {
    #[inline(always)]
    pub(crate) fn at(self, i: usize) -> *mut T {
        // SAFETY: callers index within the buffer the pointer came from.
        unsafe { self.0.add(i) }
    }
}

/// What a cell update needs besides its DDFs.
pub(crate) struct Ctx<'a> {
    pub p: CollideParams,
    pub walls: &'a [[f32; 3]],
    pub inlets: &'a [Inlet],
    pub outlets: &'a [Outlet],
    pub dims: usize,
    /// Interpolated wall links ([`crate::walls`]); their obstacles' forces are summed when the
    /// links are applied, not after the collision.
    pub links: &'a Links,
    /// f*_k(x) of every link, written by its cell after the collision.
    pub save: Ptr<f32>,
}

impl<'a> Ctx<'a> {
    /// The context of a grid without interpolated walls.
    pub(crate) fn halfway(p: CollideParams, walls: &'a [[f32; 3]], inlets: &'a [Inlet], outlets: &'a [Outlet], dims: usize) -> Self {
        Ctx { p, walls, inlets, outlets, dims, links: &NO_LINKS, save: Ptr(std::ptr::null_mut()) }
    }
}

/// Add the moving-wall momentum to DDFs that came from a moving wall (Ladd):
/// `f_i += 6 w_i rho_w (c_i . u_w)` with rho_w = 1, and take what that adds to the cell's mass
/// back from the rest DDF. Along a wall the additions cancel in pairs (c_i and its mirror image
/// across the wall's direction of motion), and the rest DDF is untouched; in the cell where a
/// moving wall meets a resting one (a lid's corner) only one of the pair comes from the moving
/// wall, which would make that cell a source or sink of 6 w U of mass per step: at Re 10,000
/// on a 256^2 cavity, a jet of almost twice the lid speed into the corner that ended the run.
#[inline(always)]
pub(crate) fn moving_walls<L: Lat>(f: &mut [f32; MAX_Q], nbr_flag: &impl Fn(usize) -> u8, walls: &[[f32; 3]]) {
    let mut added = 0.0f32;
    for i in 1..L::Q {
        let sf = nbr_flag(opposite(i));
        if kind_of(sf) == kind::MOVING {
            let uw = walls[id_of(sf)];
            let c = L::C[i];
            let cu = c[0] as f32 * uw[0] + c[1] as f32 * uw[1] + c[2] as f32 * uw[2];
            let d = 6.0 * L::W[i] * cu;
            f[i] += d;
            added += d;
        }
    }
    f[0] -= added;
}

/// Density minus one and velocity that an equilibrium boundary cell imposes, from the DDFs that
/// arrived from inside the domain (Zou-He mass balance): an inlet takes its velocity from the
/// scene and its density from the balance; an outlet the reverse (tangential velocity zero).
#[inline(always)]
pub(crate) fn boundary_moments<L: Lat>(f: &[f32; MAX_Q], flag: u8, pos: [usize; 3], ctx: &Ctx) -> (f32, [f32; 3]) {
    let (axis, inward) = if kind_of(flag) == kind::INLET {
        let b = &ctx.inlets[id_of(flag)];
        (b.axis, b.inward)
    } else {
        let b = &ctx.outlets[id_of(flag)];
        (b.axis, b.inward)
    };
    let (mut s0, mut sk) = (0.0f32, 0.0f32);
    for i in 0..L::Q {
        let cn = L::C[i][axis] * inward;
        let fi = f[i] + L::W[i];
        if cn == 0 {
            s0 += fi;
        } else if cn < 0 {
            sk += fi;
        }
    }
    let known = s0 + 2.0 * sk;
    if kind_of(flag) == kind::INLET {
        let u = ctx.inlets[id_of(flag)].velocity_at(pos, ctx.dims);
        let un = u[axis] * inward as f32;
        (known / (1.0 - un) - 1.0, u)
    } else {
        let rho = ctx.outlets[id_of(flag)].density;
        let mut u = [0.0f32; 3];
        u[axis] = (1.0 - known / rho) * inward as f32;
        (rho - 1.0, u)
    }
}

/// The one cell update every scheme shares: moving walls, then collision or the equilibrium
/// boundary rule, then the momentum-exchange force on obstacles. `f` holds the incoming DDFs
/// (bounce-back already applied) and receives the outgoing ones. `nbr_flag(i)` is the flag of
/// the neighbour along `c_i`.
#[inline(always)]
pub(crate) fn update_cell<L: Lat>(
    f: &mut [f32; MAX_Q],
    flag: u8,
    pos: [usize; 3],
    nbr_flag: impl Fn(usize) -> u8,
    ctx: &Ctx,
    force: &mut Forces,
) {
    if flag & NEAR == 0 {
        collide::<L>(f, &ctx.p);
        return;
    }
    moving_walls::<L>(f, &nbr_flag, ctx.walls);
    let k = kind_of(flag);
    if k == kind::INLET || k == kind::OUTLET {
        let (rho_m1, u) = boundary_moments::<L>(f, flag, pos, ctx);
        equilibrium::<L>(rho_m1, u, f);
    } else if k == kind::SPONGE {
        let (rho_m1, u) = moments::<L>(f, ctx.p.force);
        collide::<L>(f, &ctx.p);
        absorb::<L>(f, flag, pos, rho_m1, u, ctx);
    } else {
        collide::<L>(f, &ctx.p);
    }
    for i in 1..L::Q {
        let df = nbr_flag(i);
        if kind_of(df) == kind::SOLID && id_of(df) > 0 && !Links::curved(ctx.links.mask, df) {
            let v = 2.0 * f64::from(f[i] + L::W[i]);
            let c = L::C[i];
            let acc = &mut force[id_of(df)];
            for a in 0..3 {
                acc[a] += f64::from(c[a]) * v;
            }
        }
    }
}

/// The absorbing layer in front of an inlet or outlet (after the collision of a
/// [`kind::SPONGE`] cell whose incoming DDFs had density `rho_m1 + 1` and velocity `u`): relax the
/// equilibrium part towards the layer's target, `f_i -= s (feq_i(rho, u) - feq_i(rho_t, u_t))`,
/// with s from [`sponge_strength`]. In front of an outlet the target is the outlet's density and
/// the velocity of the inlet on the opposite face at the cell's place (the cell's own velocity
/// where there is none); in front of an inlet, the inlet's velocity at the cell's own density.
/// Relaxing density and velocity together takes a sound wave out whole; relaxing one of them
/// alone would turn part of it around.
/// Pressure waves running into the face are damped instead of reflected (an absorbing layer as
/// analysed by Xu and Sagaut 2013, "Analysis of the absorbing layers for the weakly-compressible
/// lattice Boltzmann methods").
#[inline(always)]
pub(crate) fn absorb<L: Lat>(f: &mut [f32; MAX_Q], flag: u8, pos: [usize; 3], rho_m1: f32, u: [f32; 3], ctx: &Ctx) {
    let id = id_of(flag);
    let (axis, layer, width, rho_t, u_t) = if id & 8 == 0 {
        let o = &ctx.outlets[id & 7];
        let u_t = o.inflow.map_or(u, |i| ctx.inlets[i].velocity_at(pos, ctx.dims));
        (o.axis, o.layer, o.sponge, o.density - 1.0, u_t)
    } else {
        let b = &ctx.inlets[id & 7];
        (b.axis, b.layer, b.sponge, rho_m1, b.velocity_at(pos, ctx.dims))
    };
    let s = sponge_strength(pos[axis].abs_diff(layer), width);
    let (mut a, mut b) = ([0.0f32; MAX_Q], [0.0f32; MAX_Q]);
    equilibrium::<L>(rho_m1, u, &mut a);
    equilibrium::<L>(rho_t, u_t, &mut b);
    for i in 0..L::Q {
        f[i] -= s * (a[i] - b[i]);
    }
}

/// Density and velocity a cell's incoming DDFs stand for (what the next collision sees).
#[inline(always)]
pub(crate) fn cell_moments<L: Lat>(f: &[f32; MAX_Q], flag: u8, pos: [usize; 3], ctx: &Ctx) -> (f32, [f32; 3]) {
    let k = kind_of(flag);
    if k == kind::INLET || k == kind::OUTLET {
        let (r, u) = boundary_moments::<L>(f, flag, pos, ctx);
        (r + 1.0, u)
    } else {
        let (r, u) = moments::<L>(f, ctx.p.force);
        (r + 1.0, u)
    }
}
