//! The device state's layout on the host: where Esoteric Pull keeps each cell's incoming DDFs
//! (`F[i * cells + n]`, the CPU reference's layout), so the host can write the initial state,
//! translate to and from the checkpoints' canonical order (every non-solid cell's incoming DDFs
//! in direction order, bounce-back resolved) and edit cells. The same rules as the kernels'
//! `load_slot` and `wall_slot` and sim-core's `backend/cpu.rs`.

use sim_core::collision::{equilibrium, moments};
use sim_core::domain::{id_of, is_solid, kind, kind_of, slip_source, Domain, Inlet, Outlet};
use sim_core::lattice::{opposite, Lat, MAX_Q};
use sim_core::walls::Links;

/// Neighbour of cell `n` along every velocity (periodic wrap).
pub(crate) fn neighbours<L: Lat>(dom: &Domain, n: usize) -> [usize; MAX_Q] {
    let p = dom.coords(n);
    let mut j = [0usize; MAX_Q];
    for i in 0..L::Q {
        j[i] = dom.neighbour(p, L::C[i]);
    }
    j
}

/// Slot of incoming DDF `i` of cell `n` before a step of parity `odd`; `m` is the neighbour
/// along `c_{i-1}` (even `i` only).
fn ep_slot(i: usize, n: usize, m: usize, odd: bool, nn: usize) -> usize {
    if i == 0 {
        n
    } else if i % 2 == 1 {
        if odd {
            i * nn + n
        } else {
            (i + 1) * nn + n
        }
    } else if odd {
        i * nn + m
    } else {
        (i - 1) * nn + m
    }
}

fn load_slot(i: usize, n: usize, j: &[usize; MAX_Q], odd: bool, nn: usize) -> usize {
    ep_slot(i, n, j[i.max(1) - 1], odd, nn)
}

/// Slot of incoming DDF `i` of non-solid cell `n` before a step of parity `odd`, bounce-back
/// (or free-slip reflection) resolved where its source is solid.
pub(crate) fn slot<L: Lat>(dom: &Domain, i: usize, n: usize, j: &[usize; MAX_Q], odd: bool) -> usize {
    let nn = dom.cells();
    let src = dom.flags[j[opposite(i)]];
    if i == 0 || !is_solid(src) {
        return load_slot(i, n, j, odd, nn);
    }
    match slip_source::<L>(i, src, j, &dom.flags) {
        Some((xs, m, b)) => ep_slot(opposite(m), xs, b, !odd, nn),
        None => load_slot(i, n, j, !odd, nn),
    }
}

/// The state every non-solid cell starts from: the equilibrium at the density and velocity
/// `init` gives (an inlet cell at its face's velocity), as `sim_core`'s CPU solver starts.
pub(crate) fn initial_state<L: Lat>(dom: &Domain, init: &dyn Fn([usize; 3]) -> (f32, [f32; 3])) -> Vec<f32> {
    let nn = dom.cells();
    let mut buf = vec![0.0f32; L::Q * nn];
    for n in 0..nn {
        let flag = dom.flags[n];
        if is_solid(flag) {
            continue;
        }
        let p = dom.coords(n);
        let (rho, mut u) = init(p);
        if kind_of(flag) == kind::INLET {
            u = dom.inlets[id_of(flag)].velocity_at(p, L::D);
        }
        let mut feq = [0.0f32; MAX_Q];
        equilibrium::<L>(rho - 1.0, u, &mut feq);
        let j = neighbours::<L>(dom, n);
        for i in 0..L::Q {
            buf[slot::<L>(dom, i, n, &j, false)] = feq[i];
        }
    }
    buf
}

/// The checkpoint's order of a state stored `w` bytes a value (`raw`, one value per slot before
/// a step of parity `odd`): every non-solid cell's incoming DDFs in direction order, bounce-back
/// resolved, as the stored bytes themselves.
pub(crate) fn gather_bytes<L: Lat>(dom: &Domain, raw: &[u8], w: usize, odd: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(L::Q * dom.fluid_cells() * w);
    for n in 0..dom.cells() {
        if is_solid(dom.flags[n]) {
            continue;
        }
        let j = neighbours::<L>(dom, n);
        for i in 0..L::Q {
            let s = slot::<L>(dom, i, n, &j, odd) * w;
            out.extend_from_slice(&raw[s..s + w]);
        }
    }
    out
}

/// The inverse of [`gather_bytes`]: a stored state (other slots zero) holding `data`.
pub(crate) fn scatter_bytes<L: Lat>(dom: &Domain, data: &[u8], w: usize, odd: bool) -> Vec<u8> {
    let mut raw = vec![0u8; L::Q * dom.cells() * w];
    let mut k = 0;
    for n in 0..dom.cells() {
        if is_solid(dom.flags[n]) {
            continue;
        }
        let j = neighbours::<L>(dom, n);
        for i in 0..L::Q {
            let s = slot::<L>(dom, i, n, &j, odd) * w;
            raw[s..s + w].copy_from_slice(&data[k..k + w]);
            k += w;
        }
    }
    raw
}

/// Density of a non-solid cell from its incoming DDFs `f` (moving walls `walls` applied), as the
/// statistics count it: an inlet or outlet cell has the density its face imposes.
pub(crate) fn density<L: Lat>(
    dom: &Domain,
    n: usize,
    mut f: [f32; MAX_Q],
    walls: &[[f32; 3]],
    force: [f32; 3],
    inlets: &[Inlet],
    outlets: &[Outlet],
) -> f32 {
    let j = neighbours::<L>(dom, n);
    let mut added = 0.0f32;
    for i in 1..L::Q {
        let sf = dom.flags[j[opposite(i)]];
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
    let flag = dom.flags[n];
    let k = kind_of(flag);
    if k != kind::INLET && k != kind::OUTLET {
        return moments::<L>(&f, force).0 + 1.0;
    }
    // Zou-He mass balance of the DDFs that arrived from inside (sim-core's boundary moments).
    let (axis, inward) = if k == kind::INLET {
        (inlets[id_of(flag)].axis, inlets[id_of(flag)].inward)
    } else {
        (outlets[id_of(flag)].axis, outlets[id_of(flag)].inward)
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
    // Density minus one first, then plus one: the CPU's rounding.
    let rho_m1 = if k == kind::INLET {
        let u = inlets[id_of(flag)].velocity_at(dom.coords(n), L::D);
        known / (1.0 - u[axis] * inward as f32) - 1.0
    } else {
        outlets[id_of(flag)].density - 1.0
    };
    rho_m1 + 1.0
}

/// Every interpolated-wall link's f*_k(x) in `state` before a step of parity `odd`: the value
/// x + c_k loads along c_k (k opposite the link's direction d), where the step before streamed
/// it.
pub(crate) fn kept_links<L: Lat>(dom: &Domain, links: &Links, state: &[f32], odd: bool) -> Vec<f32> {
    let nn = dom.cells();
    let mut kept = vec![0.0f32; links.len()];
    for (ci, &cell) in links.cells.iter().enumerate() {
        let j = neighbours::<L>(dom, cell as usize);
        let mut l = links.start[ci] as usize;
        for d in 1..L::Q {
            if Links::curved(links.mask, dom.flags[j[d]]) {
                let k = opposite(d);
                let m = j[k];
                kept[l] = state[load_slot(k, m, &neighbours::<L>(dom, m), odd, nn)];
                l += 1;
            }
        }
    }
    kept
}
