// Esoflow dense-grid kernels in WGSL. The host prepends a generated prelude (wgpu-solver/src/wgsl.rs)
// that defines, from sim-core's Rust tables:
//   D, Q                         dimensions and velocities
//   CX, CY, CZ, W, OPP           velocity components, weights, opposite directions
//   SLIP_B, SLIP_S, SLIP_M       free-slip reflection directions per wall axis and direction
//   COLLISION_*                  collision operator codes (compared with the override COLLISION)
//   KIND_*, FLAG_NEAR            flag kinds and the boundary bit (sim-core/src/domain.rs)
//   SPONGE_STRENGTH, SQRT_2, CS2 constants of the absorbing layer, Smagorinsky and regularized
//   WG, MAX_WALLS, MAX_FACES, MAX_OBSTACLE_IDS
//   struct Inlet, Outlet, Params the parameter struct, mirrored by GpuParams in Rust
// Every function mirrors sim-core (collision.rs, backend/cell.rs, backend/cpu.rs), with the same
// order of floating-point operations, so results agree with the CPU reference to rounding.
//
// State: shifted DDFs (f - w) in one copy (FP32, or FP16S: the prelude's `Ddf`, `dec` and `enc`),
// structure of arrays F[i * cells + n], streamed in
// place by Esoteric Pull (Lehmann 2022): every cell reads and writes its own slots and those of
// its neighbours along the lower member of each pair, so concurrent cells never share a slot.
// The cell index n = x + nx (y + ny z) comes from a two-dimensional dispatch (at most 65,535
// workgroups per dimension): n = (workgroup.y * P.ctl.y + workgroup.x) * WG + local index.

// The step kernel is specialised per collision operator when its pipeline is made (as the CUDA
// kernels are by DEF_COLLISION): the compiler drops the other operators' code. The other kernels
// do not collide.
override COLLISION: u32 = COLLISION_BGK;

// Whether the Guo source term is added: a body force is set (as the CPU reference, which skips
// the term where the force is zero).
fn forced() -> bool {
    return P.opt.z != 0u;
}

@group(0) @binding(0) var<storage, read_write> F: array<Ddf>;
// One flag byte per cell, four to a word.
@group(0) @binding(1) var<storage, read> FLAGS: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
// Scratch: the field planes (4 x cells), the statistics' partials and results, obstacle forces.
@group(0) @binding(3) var<storage, read_write> OUT: array<f32>;
// Obstacle force lists: MAX_OBSTACLE_IDS + 1 offsets, then the cells of each obstacle's links.
@group(0) @binding(4) var<storage, read> LIST: array<u32>;
// The statistics' first non-finite cell per workgroup, then overall.
@group(0) @binding(5) var<storage, read_write> OUTU: array<u32>;
// Interpolated walls, per link: f*_k(x) kept from the step before (the first P.ctl.w floats),
// then the momentum the link exchanged in the last step. The links themselves are in LIST
// from P.opt.w on (0: none).
@group(0) @binding(6) var<storage, read_write> LS: array<f32>;

const BIG: f32 = 3.0e38;
const NONE: u32 = 0xffffffffu;

fn flag_at(n: u32) -> u32 {
    return (FLAGS[n >> 2u] >> ((n & 3u) * 8u)) & 0xffu;
}
fn kind_of(f: u32) -> u32 {
    return f & 7u;
}
fn id_of(f: u32) -> u32 {
    return f >> 4u;
}
fn is_solid(f: u32) -> bool {
    let k = f & 7u;
    return k == KIND_SOLID || k == KIND_MOVING || k == KIND_SLIP;
}
// Finite test on the bits (a shader compiler may assume floats are never NaN or infinite).
fn finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn cell_of(wid: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * P.ctl.y + wid.x) * WG + lid;
}
fn group_of(wid: vec3<u32>) -> u32 {
    return wid.y * P.ctl.y + wid.x;
}

fn coords(n: u32) -> vec3<u32> {
    let r = n / P.n.x;
    return vec3<u32>(n % P.n.x, r % P.n.y, r / P.n.y);
}

fn wrap(v: u32, d: i32, len: u32) -> u32 {
    if d > 0 {
        return select(v + 1u, 0u, v + 1u == len);
    }
    if d < 0 {
        return select(v - 1u, len - 1u, v == 0u);
    }
    return v;
}

// Neighbour of cell p along every velocity (periodic wrap on every axis).
fn neighbours(p: vec3<u32>, j: ptr<function, array<u32, Q>>) {
    for (var i = 0u; i < Q; i++) { // unroll
        let x = wrap(p.x, CX[i], P.n.x);
        let y = wrap(p.y, CY[i], P.n.y);
        let z = wrap(p.z, CZ[i], P.n.z);
        (*j)[i] = x + P.n.x * (y + P.n.y * z);
    }
}

// ---------------------------------------------------------------- Esoteric Pull slots
// Slot of incoming DDF i of cell n before a step of parity `odd`; m is n's neighbour along
// c_{i-1} (used for even i only).
fn ep_slot(i: u32, n: u32, m: u32, odd: bool) -> u32 {
    let N = P.n.w;
    if i == 0u {
        return n;
    }
    if (i & 1u) == 1u {
        return select((i + 1u) * N + n, i * N + n, odd);
    }
    return select((i - 1u) * N + m, i * N + m, odd);
}
fn load_slot(i: u32, n: u32, j: ptr<function, array<u32, Q>>, odd: bool) -> u32 {
    return ep_slot(i, n, (*j)[max(i, 1u) - 1u], odd);
}
// Slot of incoming DDF i of cell n whose source is the wall cell with flag `wall`: the
// bounce-back slot (where n stored its outgoing DDF opposite(i) in the step before), or for a
// free-slip wall the slot of the reflected DDF (sim-core's `slip_source`).
fn wall_slot(i: u32, wall: u32, n: u32, j: ptr<function, array<u32, Q>>, odd: bool) -> u32 {
    let bb = load_slot(i, n, j, !odd);
    if kind_of(wall) != KIND_SLIP {
        return bb;
    }
    // One call per normal axis, each with a constant table index once inlined and unrolled: a
    // neighbour table indexed at run time would keep `j` out of registers for every cell.
    let a = id_of(wall);
    if a == 0u {
        return slip_slot(i, i, wall, j, odd, bb);
    }
    if a == 1u {
        return slip_slot(i, Q + i, wall, j, odd, bb);
    }
    if a == 2u {
        return slip_slot(i, 2u * Q + i, wall, j, odd, bb);
    }
    return bb;
}

// The reflected DDF's slot for direction i and slip table entry k (normal axis * Q + i), or
// `bb` where the DDF bounces back instead (struck head-on, x_s solid, b another wall).
fn slip_slot(i: u32, k: u32, wall: u32, j: ptr<function, array<u32, Q>>, odd: bool, bb: u32) -> u32 {
    if SLIP_B[k] < 0 {
        return bb;
    }
    let b = (*j)[u32(SLIP_B[k])];
    let xs = (*j)[u32(SLIP_S[k])];
    if (flag_at(b) & ~FLAG_NEAR) != (wall & ~FLAG_NEAR) || is_solid(flag_at(xs)) {
        return bb;
    }
    return ep_slot(OPP[u32(SLIP_M[k])], xs, b, !odd);
}

// The incoming DDFs of cell n, with bounce-back (or free-slip reflection) where `flag` has the
// boundary bit.
fn load_incoming(n: u32, flag: u32, j: ptr<function, array<u32, Q>>, odd: bool, f: ptr<function, array<f32, Q>>) {
    for (var i = 0u; i < Q; i++) { // unroll
        (*f)[i] = dec(F[load_slot(i, n, j, odd)]);
    }
    if (flag & FLAG_NEAR) != 0u {
        for (var i = 1u; i < Q; i++) { // unroll
            let sf = flag_at((*j)[OPP[i]]);
            if is_solid(sf) {
                (*f)[i] = dec(F[wall_slot(i, sf, n, j, odd)]);
            }
        }
    }
}

// ---------------------------------------------------------------- interpolated walls
// The links of the cells beside curved walls, packed as sim-core's `Links::packed` from
// LIST[P.opt.w]: the number c of cells with links, the mask of obstacle ids with exact shapes,
// the c cell indices ascending, the c + 1 first links, then each link's wall fraction q (f32
// bits). A cell's links follow the directions d towards the wall in increasing order. The rule
// is sim-core's `walls::bouzidi` (Bouzidi, Firdaouss and Lallemand 2001).

fn curved_link(mask: u32, f: u32) -> bool {
    return kind_of(f) == KIND_SOLID && ((mask >> id_of(f)) & 1u) != 0u;
}

fn link_mask() -> u32 {
    if P.opt.w == 0u {
        return 0u;
    }
    return LIST[P.opt.w + 1u];
}

// First link of cell n (binary search over the cells with links), or -1.
fn link_first(n: u32) -> i32 {
    let b = P.opt.w;
    if b == 0u {
        return -1;
    }
    let c = LIST[b];
    var lo = 0u;
    var hi = c;
    while lo < hi {
        let mid = (lo + hi) >> 1u;
        if LIST[b + 2u + mid] < n {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    if lo < c && LIST[b + 2u + lo] == n {
        return i32(LIST[b + 2u + c + lo]);
    }
    return -1;
}

// One link: a = f*_d(x) (the halfway value), up = f*_d(x - c_d), kept = f*_k(x); thin where
// x - c_d is solid (no upstream value: halfway for q < 1/2).
fn bouzidi(q: f32, a: f32, up: f32, kept: f32, thin: bool) -> f32 {
    if q < 0.5 {
        if thin {
            return a;
        }
        return 2.0 * q * a + (1.0 - 2.0 * q) * up;
    }
    let s = 0.5 / q;
    return s * a + (1.0 - s) * kept;
}

// Replace the values that came back from curved walls in a cell's incoming DDFs (halfway
// bounce-back applied), from its first link l0; with `record`, keep each link's momentum
// exchange c_d (f*_d(x) + f_k(x)) without its direction, (f*_d + w_d) + (f_k + w_k).
fn curved_walls(f: ptr<function, array<f32, Q>>, l0: u32, j: ptr<function, array<u32, Q>>, record: bool) {
    let b = P.opt.w;
    let mask = LIST[b + 1u];
    let qs = b + 3u + 2u * LIST[b];
    var l = l0;
    // Unrolled, as every loop over a cell's neighbours: `j` and `f` indexed by constants stay
    // in registers.
    for (var d = 1u; d < Q; d++) { // unroll
        let nf = flag_at((*j)[d]);
        if curved_link(mask, nf) {
            let k = OPP[d];
            let a = (*f)[k];
            let back = bouzidi(bitcast<f32>(LIST[qs + l]), a, (*f)[d], LS[l], is_solid(flag_at((*j)[k])));
            (*f)[k] = back;
            if record {
                LS[P.ctl.w + l] = (a + W[d]) + (back + W[k]);
            }
            l++;
        }
    }
}

// After the collision: keep f*_k(x) of each of the cell's links for the next step, rounded as
// the DDF buffer stores it.
fn keep_links(f: ptr<function, array<f32, Q>>, l0: u32, j: ptr<function, array<u32, Q>>) {
    let mask = LIST[P.opt.w + 1u];
    var l = l0;
    for (var d = 1u; d < Q; d++) { // unroll
        if curved_link(mask, flag_at((*j)[d])) {
            LS[l] = dec(enc((*f)[OPP[d]]));
            l++;
        }
    }
}

// ---------------------------------------------------------------- collision (shifted DDFs)
struct Mom {
    r: f32, // density minus one
    u: vec3<f32>,
}

fn moments(f: ptr<function, array<f32, Q>>, force: vec3<f32>) -> Mom {
    var r: f32 = 0.0;
    var jx: f32 = 0.0;
    var jy: f32 = 0.0;
    var jz: f32 = 0.0;
    for (var i = 0u; i < Q; i++) { // unroll
        let v = (*f)[i];
        r += v;
        if CX[i] > 0 {
            jx += v;
        } else if CX[i] < 0 {
            jx -= v;
        }
        if CY[i] > 0 {
            jy += v;
        } else if CY[i] < 0 {
            jy -= v;
        }
        if CZ[i] > 0 {
            jz += v;
        } else if CZ[i] < 0 {
            jz -= v;
        }
    }
    let inv = 1.0 / (r + 1.0);
    return Mom(r, vec3<f32>((jx + 0.5 * force.x) * inv, (jy + 0.5 * force.y) * inv, (jz + 0.5 * force.z) * inv));
}

fn equilibrium_one(i: u32, r: f32, u: vec3<f32>) -> f32 {
    let usq = 1.5 * (u.x * u.x + u.y * u.y + u.z * u.z);
    let cu = 3.0 * (f32(CX[i]) * u.x + f32(CY[i]) * u.y + f32(CZ[i]) * u.z);
    let rho = r + 1.0;
    return W[i] * (r + rho * (cu + 0.5 * cu * cu - usq));
}

fn guo_source(i: u32, u: vec3<f32>, g: vec3<f32>) -> f32 {
    let cx = f32(CX[i]);
    let cy = f32(CY[i]);
    let cz = f32(CZ[i]);
    let cu = cx * u.x + cy * u.y + cz * u.z;
    var s: f32 = 0.0;
    s += (3.0 * (cx - u.x) + 9.0 * cu * cx) * g.x;
    s += (3.0 * (cy - u.y) + 9.0 * cu * cy) * g.y;
    s += (3.0 * (cz - u.z) + 9.0 * cu * cz) * g.z;
    return W[i] * s;
}

// Non-equilibrium stress sum_i c_i c_i (f_i - feq_i): xx yy zz, then xy xz yz.
struct Stress {
    d: vec3<f32>,
    o: vec3<f32>,
}

fn neq_stress(f: ptr<function, array<f32, Q>>, feq: ptr<function, array<f32, Q>>) -> Stress {
    var d = vec3<f32>(0.0);
    var o = vec3<f32>(0.0);
    for (var i = 0u; i < Q; i++) { // unroll
        let cx = f32(CX[i]);
        let cy = f32(CY[i]);
        let cz = f32(CZ[i]);
        let v = (*f)[i] - (*feq)[i];
        d.x += cx * cx * v;
        d.y += cy * cy * v;
        d.z += cz * cz * v;
        o.x += cx * cy * v;
        o.y += cx * cz * v;
        o.z += cy * cz * v;
    }
    return Stress(d, o);
}

fn smagorinsky_omega(f: ptr<function, array<f32, Q>>, feq: ptr<function, array<f32, Q>>, r: f32) -> f32 {
    let pi = neq_stress(f, feq);
    let q = sqrt(pi.d.x * pi.d.x + pi.d.y * pi.d.y + pi.d.z * pi.d.z + 2.0 * (pi.o.x * pi.o.x + pi.o.y * pi.o.y + pi.o.z * pi.o.z));
    let rho = r + 1.0;
    let tau0 = P.coll.x;
    let cs = P.coll.y;
    let tau = 0.5 * (tau0 + sqrt(tau0 * tau0 + 18.0 * SQRT_2 * cs * cs * q / rho));
    return 1.0 / tau;
}

// acc + m a where the multiplier is not zero (as collision.rs skips vanishing Hermite terms).
fn term(acc: f32, m: f32, a: f32) -> f32 {
    if m != 0.0 {
        return acc + m * a;
    }
    return acc;
}

// Recursive regularized BGK (collision.rs, regularized_w, explains the terms): the
// non-equilibrium part is rebuilt from its stress, and f_i = feq_i + w_i sum_n H_i^(n) : b^(n) /
// (n! cs^2n) with b = a_eq + (1 - omega) a_neq.
fn regularized(f: ptr<function, array<f32, Q>>, feq: ptr<function, array<f32, Q>>, m: Mom) {
    let pi = neq_stress(f, feq);
    let pxx = pi.d.x;
    let pyy = pi.d.y;
    let pzz = pi.d.z;
    let pxy = pi.o.x;
    let pxz = pi.o.y;
    let pyz = pi.o.z;
    let omega = P.coll.z;
    let k = 1.0 - omega;
    let x = m.u.x;
    let y = m.u.y;
    let z = m.u.z;
    let r = m.r + 1.0;
    let b_xx = pxx * k;
    let b_yy = pyy * k;
    let b_zz = pzz * k;
    let b_xy = pxy * k;
    let b_xz = pxz * k;
    let b_yz = pyz * k;
    let a_xxyy = y * y * pxx + x * x * pyy + 4.0 * x * y * pxy;
    let b_xxy = (y * pxx + 2.0 * x * pxy) * k + r * x * x * y;
    let b_xyy = (x * pyy + 2.0 * y * pxy) * k + r * x * y * y;
    let b_xxyy = a_xxyy * k + r * x * x * y * y;
    let a_xxzz = z * z * pxx + x * x * pzz + 4.0 * x * z * pxz;
    let a_yyzz = z * z * pyy + y * y * pzz + 4.0 * y * z * pyz;
    let b_xxz = (z * pxx + 2.0 * x * pxz) * k + r * x * x * z;
    let b_yyz = (z * pyy + 2.0 * y * pyz) * k + r * y * y * z;
    let b_xzz = (x * pzz + 2.0 * z * pxz) * k + r * x * z * z;
    let b_yzz = (y * pzz + 2.0 * z * pyz) * k + r * y * z * z;
    let b_xxzz = a_xxzz * k + r * x * x * z * z;
    let b_yyzz = a_yyzz * k + r * y * y * z * z;
    let b_xyz = (x * pyz + y * pxz + z * pxy) * k + r * x * y * z;
    let b_xxyz = (y * z * pxx + 2.0 * x * z * pxy + 2.0 * x * y * pxz + x * x * pyz) * k + r * x * x * y * z;
    let b_xyyz = (x * z * pyy + 2.0 * y * z * pxy + 2.0 * x * y * pyz + y * y * pxz) * k + r * x * y * y * z;
    let b_xyzz = (x * y * pzz + 2.0 * y * z * pxz + 2.0 * x * z * pyz + z * z * pxy) * k + r * x * y * z * z;
    let b_xxyyz = (z * a_xxyy + 2.0 * x * y * (y * pxz + x * pyz)) * k + r * x * x * y * y * z;
    let b_xxyzz = (y * a_xxzz + 2.0 * x * z * (z * pxy + x * pyz)) * k + r * x * x * y * z * z;
    let b_xyyzz = (x * a_yyzz + 2.0 * y * z * (z * pxy + y * pxz)) * k + r * x * y * y * z * z;
    let b_6 = (z * z * a_xxyy + x * x * y * y * pzz + 4.0 * x * y * z * (y * pxz + x * pyz)) * k + r * x * x * y * y * z * z;
    let g = P.force.xyz;
    for (var i = 0u; i < Q; i++) { // unroll
        let cx = f32(CX[i]);
        let cy = f32(CY[i]);
        let cz = f32(CZ[i]);
        let hx = cx * cx - CS2;
        let hy = cy * cy - CS2;
        let hz = cz * cz - CS2;
        var acc: f32 = 0.0;
        acc = term(acc, 4.5 * hx, b_xx);
        acc = term(acc, 4.5 * hy, b_yy);
        acc = term(acc, 9.0 * cx * cy, b_xy);
        if D == 3u {
            acc = term(acc, 4.5 * hz, b_zz);
            acc = term(acc, 9.0 * cx * cz, b_xz);
            acc = term(acc, 9.0 * cy * cz, b_yz);
        }
        acc = term(acc, 13.5 * hx * cy, b_xxy);
        acc = term(acc, 13.5 * hy * cx, b_xyy);
        if D == 3u {
            acc = term(acc, 13.5 * hx * cz, b_xxz);
            acc = term(acc, 13.5 * hy * cz, b_yyz);
            acc = term(acc, 13.5 * hz * cx, b_xzz);
            acc = term(acc, 13.5 * hz * cy, b_yzz);
        }
        if Q == 27u {
            acc = term(acc, 27.0 * cx * cy * cz, b_xyz);
        }
        if Q == 19u {
            // D3Q19: the fourth-order polynomials made orthogonal to the second-order ones.
            acc = term(acc, 20.25 * (hx * hy + hz / 6.0), b_xxyy);
            acc = term(acc, 20.25 * (hx * hz + hy / 6.0), b_xxzz);
            acc = term(acc, 20.25 * (hy * hz + hx / 6.0), b_yyzz);
        } else {
            acc = term(acc, 20.25 * (hx * hy), b_xxyy);
        }
        if Q == 27u {
            acc = term(acc, 20.25 * (hx * hz), b_xxzz);
            acc = term(acc, 20.25 * (hy * hz), b_yyzz);
            acc = term(acc, 40.5 * hx * cy * cz, b_xxyz);
            acc = term(acc, 40.5 * hy * cx * cz, b_xyyz);
            acc = term(acc, 40.5 * hz * cx * cy, b_xyzz);
            acc = term(acc, 60.75 * hx * hy * cz, b_xxyyz);
            acc = term(acc, 60.75 * hx * hz * cy, b_xxyzz);
            acc = term(acc, 60.75 * hy * hz * cx, b_xyyzz);
            acc = term(acc, 91.125 * hx * hy * hz, b_6);
        }
        if forced() {
            let first = -1.5 * (cx * g.x + cy * g.y + cz * g.z);
            (*f)[i] = (*feq)[i] + W[i] * (acc + k * first) + (1.0 - 0.5 * omega) * guo_source(i, m.u, g);
        } else {
            (*f)[i] = (*feq)[i] + W[i] * acc;
        }
    }
}

fn trt(f: ptr<function, array<f32, Q>>, feq: ptr<function, array<f32, Q>>, m: Mom) {
    let wp = P.coll.z;
    let wm = P.coll.w;
    let g = P.force.xyz;
    (*f)[0] += wp * ((*feq)[0] - (*f)[0]);
    if forced() {
        (*f)[0] += (1.0 - 0.5 * wp) * guo_source(0u, m.u, g);
    }
    for (var i = 1u; i < Q; i += 2u) { // unroll
        let a = (*f)[i];
        let b = (*f)[i + 1u];
        let sp = 0.5 * (a + b) - 0.5 * ((*feq)[i] + (*feq)[i + 1u]);
        let sm = 0.5 * (a - b) - 0.5 * ((*feq)[i] - (*feq)[i + 1u]);
        (*f)[i] = a - wp * sp - wm * sm;
        (*f)[i + 1u] = b - wp * sp + wm * sm;
        if forced() {
            let si = guo_source(i, m.u, g);
            let sj = guo_source(i + 1u, m.u, g);
            let gp = 0.5 * (si + sj);
            let gm = 0.5 * (si - sj);
            (*f)[i] += (1.0 - 0.5 * wp) * gp + (1.0 - 0.5 * wm) * gm;
            (*f)[i + 1u] += (1.0 - 0.5 * wp) * gp - (1.0 - 0.5 * wm) * gm;
        }
    }
}

fn collide(f: ptr<function, array<f32, Q>>) {
    let g = P.force.xyz;
    let m = moments(f, g);
    var feq: array<f32, Q>;
    for (var i = 0u; i < Q; i++) { // unroll
        feq[i] = equilibrium_one(i, m.r, m.u);
    }
    if COLLISION == COLLISION_REGULARIZED {
        regularized(f, &feq, m);
        return;
    }
    if COLLISION == COLLISION_TRT {
        trt(f, &feq, m);
        return;
    }
    var omega = P.coll.z;
    if COLLISION == COLLISION_SMAGORINSKY {
        omega = smagorinsky_omega(f, &feq, m.r);
    }
    for (var i = 0u; i < Q; i++) { // unroll
        (*f)[i] += omega * (feq[i] - (*f)[i]);
    }
    if forced() {
        for (var i = 0u; i < Q; i++) { // unroll
            (*f)[i] += (1.0 - 0.5 * omega) * guo_source(i, m.u, g);
        }
    }
}

// ---------------------------------------------------------------- boundaries
fn c_along(i: u32, axis: u32) -> i32 {
    if axis == 0u {
        return CX[i];
    }
    if axis == 1u {
        return CY[i];
    }
    return CZ[i];
}

// Velocity of inlet k at cell p (sim-core's `Inlet::velocity_at`).
fn inlet_velocity(k: u32, p: vec3<u32>) -> vec3<f32> {
    let b = P.inlets[k];
    if b.shape.z == 0 {
        return b.u.xyz;
    }
    var s: f32 = 1.0;
    for (var a = 0u; a < D; a++) {
        if a == u32(b.shape.x) {
            continue;
        }
        let lo = b.lo[a];
        let len = f32(b.hi[a] - lo + 1);
        let t = (f32(p[a]) - f32(lo) + 0.5) / len;
        s *= max(4.0 * t * (1.0 - t), 0.0);
    }
    return vec3<f32>(b.u.x * s, b.u.y * s, b.u.z * s);
}

// Density minus one and velocity an inlet or outlet cell imposes (Zou-He mass balance of the
// DDFs that arrived from inside).
fn boundary_moments(f: ptr<function, array<f32, Q>>, flag: u32, p: vec3<u32>) -> Mom {
    let id = id_of(flag);
    let inlet = kind_of(flag) == KIND_INLET;
    var axis: u32;
    var inward: i32;
    if inlet {
        axis = u32(P.inlets[id].shape.x);
        inward = P.inlets[id].shape.y;
    } else {
        axis = u32(P.outlets[id].shape.x);
        inward = P.outlets[id].shape.y;
    }
    var s0: f32 = 0.0;
    var sk: f32 = 0.0;
    for (var i = 0u; i < Q; i++) { // unroll
        let cn = c_along(i, axis) * inward;
        let fi = (*f)[i] + W[i];
        if cn == 0 {
            s0 += fi;
        } else if cn < 0 {
            sk += fi;
        }
    }
    let known = s0 + 2.0 * sk;
    if inlet {
        let u = inlet_velocity(id, p);
        let un = u[axis] * f32(inward);
        return Mom(known / (1.0 - un) - 1.0, u);
    }
    let rho = P.outlets[id].density.x;
    var u = vec3<f32>(0.0);
    u[axis] = (1.0 - known / rho) * f32(inward);
    return Mom(rho - 1.0, u);
}

fn sponge_strength(d: u32, width: u32) -> f32 {
    if d == 0u || d > width {
        return 0.0;
    }
    let s = f32(width + 1u - d) / f32(width);
    return SPONGE_STRENGTH * s * s;
}

// The absorbing layer in front of an inlet or outlet, after the collision of a sponge cell whose
// incoming DDFs had moments m (sim-core's `absorb`).
fn absorb(f: ptr<function, array<f32, Q>>, flag: u32, p: vec3<u32>, m: Mom) {
    let id = id_of(flag);
    var axis: u32;
    var layer: u32;
    var width: u32;
    var rt: f32;
    var ut: vec3<f32>;
    if (id & 8u) == 0u {
        let o = P.outlets[id & 7u];
        axis = u32(o.shape.x);
        width = u32(o.shape.z);
        layer = u32(o.shape.w);
        rt = o.density.x - 1.0;
        ut = m.u;
        if o.inflow.x >= 0 {
            ut = inlet_velocity(u32(o.inflow.x), p);
        }
    } else {
        let b = P.inlets[id & 7u];
        axis = u32(b.shape.x);
        width = u32(b.shape.w);
        layer = u32(b.layer.x);
        rt = m.r;
        ut = inlet_velocity(id & 7u, p);
    }
    let pa = p[axis];
    let d = select(layer - pa, pa - layer, pa >= layer);
    let s = sponge_strength(d, width);
    for (var i = 0u; i < Q; i++) { // unroll
        (*f)[i] -= s * (equilibrium_one(i, m.r, m.u) - equilibrium_one(i, rt, ut));
    }
}

// Ladd's moving wall: f_i += 6 w_i (c_i . u_w) for DDFs that came from a moving wall, and the
// rest DDF gives back what that adds to the cell's mass (sim-core's `moving_walls`).
fn moving_walls(f: ptr<function, array<f32, Q>>, j: ptr<function, array<u32, Q>>) {
    var added: f32 = 0.0;
    for (var i = 1u; i < Q; i++) { // unroll
        let sf = flag_at((*j)[OPP[i]]);
        if kind_of(sf) == KIND_MOVING {
            let uw = P.walls[id_of(sf)];
            let cu = f32(CX[i]) * uw.x + f32(CY[i]) * uw.y + f32(CZ[i]) * uw.z;
            let d = 6.0 * W[i] * cu;
            (*f)[i] += d;
            added += d;
        }
    }
    (*f)[0] -= added;
}

// The update of a cell: for one with the boundary bit moving walls first, then the inlet/outlet
// equilibrium, or the collision (followed by the absorbing layer in a sponge cell). One call of
// `collide` for every kind of cell keeps the kernel small.
fn update_cell(f: ptr<function, array<f32, Q>>, flag: u32, p: vec3<u32>, j: ptr<function, array<u32, Q>>) {
    let near = (flag & FLAG_NEAR) != 0u;
    let k = kind_of(flag);
    if near {
        moving_walls(f, j);
        if k == KIND_INLET || k == KIND_OUTLET {
            let m = boundary_moments(f, flag, p);
            for (var i = 0u; i < Q; i++) { // unroll
                (*f)[i] = equilibrium_one(i, m.r, m.u);
            }
            return;
        }
    }
    let sponge = near && k == KIND_SPONGE;
    var m: Mom;
    if sponge {
        m = moments(f, P.force.xyz);
    }
    collide(f);
    if sponge {
        absorb(f, flag, p, m);
    }
}

// Density minus one and velocity of a non-solid cell's incoming DDFs as the next collision sees
// them (moving walls applied; inlets and outlets impose theirs).
fn cell_moments(n: u32, flag: u32) -> Mom {
    let odd = P.ctl.x == 1u;
    let p = coords(n);
    var j: array<u32, Q>;
    neighbours(p, &j);
    var f: array<f32, Q>;
    load_incoming(n, flag, &j, odd, &f);
    if (flag & FLAG_NEAR) != 0u {
        let l0 = link_first(n);
        if l0 >= 0 {
            curved_walls(&f, u32(l0), &j, false);
        }
    }
    moving_walls(&f, &j);
    let k = kind_of(flag);
    if k == KIND_INLET || k == KIND_OUTLET {
        return boundary_moments(&f, flag, p);
    }
    return moments(&f, P.force.xyz);
}

// ---------------------------------------------------------------- kernels
// One time step of every non-solid cell.
@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = cell_of(wid, lid);
    if n >= P.n.w {
        return;
    }
    let flag = flag_at(n);
    if is_solid(flag) {
        return;
    }
    let odd = P.ctl.x == 1u;
    let p = coords(n);
    var j: array<u32, Q>;
    neighbours(p, &j);
    var f: array<f32, Q>;
    load_incoming(n, flag, &j, odd, &f);
    var l0 = -1;
    if (flag & FLAG_NEAR) != 0u {
        l0 = link_first(n);
        if l0 >= 0 {
            curved_walls(&f, u32(l0), &j, true);
        }
    }
    update_cell(&f, flag, p, &j);
    if l0 >= 0 {
        keep_links(&f, u32(l0), &j);
    }
    for (var i = 0u; i < Q; i++) { // unroll
        F[load_slot(OPP[i], n, &j, odd)] = enc(f[i]);
    }
}

var<workgroup> red_sum: array<f32, WG>;
var<workgroup> red_max: array<f32, WG>;
var<workgroup> red_lo: array<f32, WG>;
var<workgroup> red_hi: array<f32, WG>;
var<workgroup> red_bad: array<u32, WG>;

// Halve the workgroup's partials down to element 0 (every invocation calls it).
fn reduce_stats(lid: u32) {
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if lid < s {
            red_sum[lid] += red_sum[lid + s];
            red_max[lid] = max(red_max[lid], red_max[lid + s]);
            red_lo[lid] = min(red_lo[lid], red_lo[lid + s]);
            red_hi[lid] = max(red_hi[lid], red_hi[lid + s]);
            red_bad[lid] = min(red_bad[lid], red_bad[lid + s]);
        }
    }
    workgroupBarrier();
}

// Density and velocity of every cell into four planes of OUT (solid cells: 1 and 0), and the
// first pass of the statistics: per workgroup the sum of (density - 1), the largest squared
// speed, the density range and the first non-finite cell, at OUT[P.opt.x + 4 g ..] and OUTU[g].
@compute @workgroup_size(WG)
fn fields(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = group_of(wid);
    let n = g * WG + lid;
    let N = P.n.w;
    var sum: f32 = 0.0;
    var mx: f32 = 0.0;
    var lo: f32 = BIG;
    var hi: f32 = -BIG;
    var bad = NONE;
    if n < N {
        let flag = flag_at(n);
        var rho: f32 = 1.0;
        var u = vec3<f32>(0.0);
        if !is_solid(flag) {
            let m = cell_moments(n, flag);
            rho = m.r + 1.0;
            u = m.u;
            let s2 = u.x * u.x + u.y * u.y + u.z * u.z;
            if finite(rho) && finite(s2) {
                sum = rho - 1.0;
                mx = s2;
                lo = rho;
                hi = rho;
            } else {
                bad = n;
            }
        }
        OUT[n] = rho;
        OUT[N + n] = u.x;
        OUT[2u * N + n] = u.y;
        OUT[3u * N + n] = u.z;
    }
    red_sum[lid] = sum;
    red_max[lid] = mx;
    red_lo[lid] = lo;
    red_hi[lid] = hi;
    red_bad[lid] = bad;
    reduce_stats(lid);
    if lid == 0u && g < P.ctl.z {
        let o = P.opt.x + 4u * g;
        OUT[o] = red_sum[0];
        OUT[o + 1u] = red_max[0];
        OUT[o + 2u] = red_lo[0];
        OUT[o + 3u] = red_hi[0];
        OUTU[g] = red_bad[0];
    }
}

// Statistics, second pass (one workgroup): the partials of all P.ctl.z workgroups into
// OUT[P.opt.x + 4 P.ctl.z ..] and OUTU[P.ctl.z].
@compute @workgroup_size(WG)
fn stats_final(@builtin(local_invocation_index) lid: u32) {
    let groups = P.ctl.z;
    var sum: f32 = 0.0;
    var mx: f32 = 0.0;
    var lo: f32 = BIG;
    var hi: f32 = -BIG;
    var bad = NONE;
    for (var g = lid; g < groups; g += WG) {
        let o = P.opt.x + 4u * g;
        sum += OUT[o];
        mx = max(mx, OUT[o + 1u]);
        lo = min(lo, OUT[o + 2u]);
        hi = max(hi, OUT[o + 3u]);
        bad = min(bad, OUTU[g]);
    }
    red_sum[lid] = sum;
    red_max[lid] = mx;
    red_lo[lid] = lo;
    red_hi[lid] = hi;
    red_bad[lid] = bad;
    reduce_stats(lid);
    if lid == 0u {
        let o = P.opt.x + 4u * groups;
        OUT[o] = red_sum[0];
        OUT[o + 1u] = red_max[0];
        OUT[o + 2u] = red_lo[0];
        OUT[o + 3u] = red_hi[0];
        OUTU[groups] = red_bad[0];
    }
}

var<workgroup> red_force: array<vec3<f32>, WG>;

// Momentum exchange on obstacle k = workgroup x, after a step of parity P.ctl.x: the sum over
// the links from its fluid neighbours of c_i 2 f*_i, with f*_i the outgoing (post-collision,
// shifted) DDF the cell stored towards the obstacle, where the next step's bounce-back reads
// it; the host adds the shift's part, sum c_i 2 w_i, which only depends on the flags. Over the
// links of a curved wall, the exchange the step kept for each (with its shift).
@compute @workgroup_size(WG)
fn forces(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let k = wid.x;
    let odd = P.ctl.x == 1u;
    let first = LIST[k];
    let last = LIST[k + 1u];
    var acc = vec3<f32>(0.0);
    for (var e = first + lid; e < last; e += WG) {
        let n = LIST[MAX_OBSTACLE_IDS + 1u + e];
        var j: array<u32, Q>;
        neighbours(coords(n), &j);
        let mask = link_mask();
        var l = 0u;
        if mask != 0u {
            l = u32(max(link_first(n), 0));
        }
        for (var i = 1u; i < Q; i++) { // unroll
            let nf = flag_at(j[i]);
            if curved_link(mask, nf) {
                if id_of(nf) == k {
                    let v = LS[P.ctl.w + l];
                    acc += vec3<f32>(f32(CX[i]) * v, f32(CY[i]) * v, f32(CZ[i]) * v);
                }
                l++;
            } else if kind_of(nf) == KIND_SOLID && id_of(nf) == k {
                let v = 2.0 * dec(F[load_slot(OPP[i], n, &j, odd)]);
                acc += vec3<f32>(f32(CX[i]) * v, f32(CY[i]) * v, f32(CZ[i]) * v);
            }
        }
    }
    red_force[lid] = acc;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if lid < s {
            red_force[lid] += red_force[lid + s];
        }
    }
    workgroupBarrier();
    if lid == 0u {
        let o = P.opt.y + 3u * k;
        OUT[o] = red_force[0].x;
        OUT[o + 1u] = red_force[0].y;
        OUT[o + 2u] = red_force[0].z;
    }
}
