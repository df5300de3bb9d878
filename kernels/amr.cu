// Adaptive octree blocks on the GPU (Jaber, Essel & Sullivan 2025; sim-core/src/backend/cuda/amr/mod.rs). One
// level-step of the block LBM as sim-core/src/amr/lbm.rs does it on the CPU (the reference these
// kernels are tested against): ghost interpolation from the coarser level, collision and
// streaming with bounce-back and outflows fused into one pass between the two DDF buffers, and
// restriction of the interface cells into their parents. Collision, moments and equilibria are common.cuh's, the
// dense kernels' device functions.
//
// Layout (as AmrLbm stores it; capacity C blocks, B = 4^D cells a block, ND = 3^D directions):
//   fa, fb         C * Q * B values (fpxx), value i of cell c of block id at (id * Q + i) * B + c; a
//                  level's data is in one of the two (it moves to the other with each step)
//   pos            C * 3 ints, the block's position in blocks of its level
//   parent, child  C u32, NONE for roots / leaves; children are child .. child + 2^D
//   nbr            C * ND u32 links: a same-level ID, COARSER | id, or NONE (outside)
//   cmask, solid   C * B bytes: cell masks (amr/forest.rs cell_mask) and obstacle flags
//   prm            per level l at 4 l: tau, fx, fy, fz; walls (6 faces x 3) at 4 * 16; outflow
//                  density of the 6 faces at 4 * 16 + 18 (NaN: a wall)
//   walls          with AMR_CURVED only: the interpolated walls' table ("Interpolated walls")
// A kernel gets a list of block IDs (one level's, or its blocks next to a level jump) and runs
// one thread per (listed block, cell).

#define AMR_NONE 0xffffffffu
#define AMR_COARSER 0x80000000u
#define CM_GHOST 1
#define CM_POG 4
#define CM_POI 5
#if DEF_D == 3
#define AMR_B 64
#define AMR_ND 27
#else
#define AMR_B 16
#define AMR_ND 9
#endif
#define AMR_WALLS 64
#define AMR_OUTFLOW 82

// Which cells hold data for interpolation and restriction (amr_cell_at): AMR_OK_MASKS by the
// masks (stepping), AMR_OK_FLUID every fluid cell (the old children of a block being
// coarsened), AMR_OK_VALID the `valid` flags (refreshing exposed cells after an adaptation),
// AMR_OK_FRESH every fluid cell of a block flagged in `fresh` (the parents just refined, whose
// cells held leaf data a moment ago) and the masks elsewhere.
#define AMR_OK_MASKS 0
#define AMR_OK_FLUID 1
#define AMR_OK_VALID 2
#define AMR_OK_FRESH 3

// Offsets into a DDF buffer: 32 bits unless the forest's capacity needs more (the host defines
// AMR_IDX64 then).
#ifdef AMR_IDX64
typedef u64 amr_ix;
#else
typedef u32 amr_ix;
#endif

// In-place (Esoteric-Pull) storage, AMR_INPLACE (the host defines it with AMR_HALO_BASE, the
// offset of the halo slots: capacity * Q * B, and the halo table AMR_H / amr_hidx; see
// "In-place storage" below): one DDF buffer, each level's values in the arrangement of its
// parity.
#ifndef AMR_INPLACE
#define AMR_INPLACE 0
#endif
#define AMR_NP ((DEF_Q - 1) / 2)

struct AmrMesh {
    const int* pos;
    const u32* parent;
    const u32* child;
    const u32* nbr;
    const unsigned char* cmask;
    const unsigned char* solid;
    int ok;
    const unsigned char* valid;
    const unsigned char* fresh;
    // The layout of the level read (amr_load_q): -1 plain (at rest, the two-buffer kernels), in
    // place 0 or 1 the stepping arrangement of that parity, 2 or 3 the halo form (an adaptation).
    int q;
};

__device__ __forceinline__ int amr_floor4(int k) { return k >= 0 ? k / 4 : (k - 3) / 4; }
__device__ __forceinline__ int amr_cell(int x, int y, int z) { return x + 4 * (y + 4 * z); }
__device__ __forceinline__ void amr_coords(int cell, int* c) {
    c[0] = cell & 3;
    c[1] = DEF_D >= 2 ? (cell >> 2) & 3 : 0;
    c[2] = DEF_D == 3 ? (cell >> 4) & 3 : 0;
}
// The cell at local coordinates c + d (d a lattice velocity): its block's offset e (-1, 0, 1
// per axis) and its local coordinates s in that block.
__device__ __forceinline__ void amr_offset(const int* c, const int* d, int* e, int* s) {
    e[0] = e[1] = e[2] = 0;
    s[0] = s[1] = s[2] = 0;
#pragma unroll
    for (int a = 0; a < DEF_D; a++) {
        const int tt = c[a] + d[a];
        e[a] = amr_floor4(tt);
        s[a] = tt - 4 * e[a];
    }
}
__device__ __forceinline__ int amr_dir(const int* e) {
    int d = 0, m = 1;
#pragma unroll
    for (int a = 0; a < DEF_D; a++) { d += (e[a] + 1) * m; m *= 3; }
    return d;
}

// The child (0 .. 2^D) of a block under its cell `cell`, and in f0 the block coordinates of the
// lowest of the 2^D fine cells under it (lbm.rs children_of).
__device__ __forceinline__ u32 amr_child_under(int cell, int* f0) {
    int c[3];
    amr_coords(cell, c);
    u32 j = 0;
    f0[0] = f0[1] = f0[2] = 0;
    for (int a = 0; a < DEF_D; a++) {
        j |= (u32)(c[a] / 2) << a;
        f0[a] = 2 * (c[a] % 2);
    }
    return j;
}

// Block and cell of local coordinates k of block p (at most one block outside it, in a
// same-level neighbour): the slot id * B + cell, or -1 where no same-level block is there.
__device__ __forceinline__ long long amr_locate(const AmrMesh& m, u32 p, const int* k) {
    int e[3] = {0, 0, 0}, s[3] = {0, 0, 0};
#pragma unroll
    for (int a = 0; a < DEF_D; a++) { e[a] = amr_floor4(k[a]); s[a] = k[a] - 4 * e[a]; }
    const u32 link = m.nbr[(u64)p * AMR_ND + amr_dir(e)];
    if (link == AMR_NONE || (link & AMR_COARSER)) return -1;
    return (long long)link * AMR_B + amr_cell(s[0], s[1], s[2]);
}

// The slot of the cell at local coordinates k of block p if it holds data (lbm.rs cell_at):
// fluid cells of leaves (their ghost cells only with `ghosts`), the stepped or averaged fluid
// cells of non-leaves; -1 otherwise.
__device__ __forceinline__ long long amr_cell_at(const AmrMesh& m, u32 p, const int* k, bool ghosts) {
    const long long at = amr_locate(m, p, k);
    if (at < 0 || m.solid[at]) return -1;
    const u32 n = (u32)(at / AMR_B);
    if (m.ok == AMR_OK_FLUID || (m.ok == AMR_OK_FRESH && m.fresh[n])) return at;
    if (m.ok == AMR_OK_VALID) return m.valid[at] ? at : -1;
    const int mk = m.cmask[at];
    const bool ok = m.child[n] == AMR_NONE ? (ghosts || mk != CM_GHOST) : (mk == CM_POG || mk == CM_POI);
    return ok ? at : -1;
}

// The DDF buffers hold shifted DDFs in the storage format (fpxx, common.cuh DEF_STORE: FP32,
// FP16S or FP16C); arithmetic is FP32: values are decoded on load and encoded on store, and
// copied as they are where they only move (lbm.rs, "Storage precision").
__device__ __forceinline__ void amr_load(const fpxx* __restrict__ f, long long at, float* g) {
    const u64 base = (u64)(at / AMR_B) * DEF_Q * AMR_B + (u64)(at % AMR_B);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) g[i] = dec(f[base + (u64)i * AMR_B]);
}
__device__ __forceinline__ void amr_store(fpxx* __restrict__ f, long long at, const float* g) {
    const u64 base = (u64)(at / AMR_B) * DEF_Q * AMR_B + (u64)(at % AMR_B);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[base + (u64)i * AMR_B] = enc(g[i]);
}

// ---- In-place storage (AMR_INPLACE; docs/amr-gpu.md): one DDF buffer, each level's values in
// the Esoteric-Pull arrangement of its parity q (the level's step count mod 2, 0 after an
// upload). Pairs (i, i + 1), i odd, c_{i+1} = -c_i; n a cell, P = n + c_i:
//   q = 0: f_i(n) in slot i of n,     f_{i+1}(n) in slot i + 1 of P;
//   q = 1: f_i(n) in slot i + 1 of n, f_{i+1}(n) in slot i of P;
//   f_0(n) in slot 0 of n.
// A step at parity q loads by that rule and stores by the rule of q ^ 1 into exactly the slots
// it loaded (amr_step). Where P lies in no block of the level (a coarser level or outside the
// domain), its two slots are one halo slot of n's block (amr_hidx: per cell and pair, the
// AMR_H slots of a block whose P is outside it), at AMR_HALO_BASE + id * AMR_H; it serves both
// parities. Obstacle cells keep their slots (a fluid neighbour stores its bounce-back there).
// At rest (AmrGpu::settle: before an adaptation, a host read or a frame) every level is in the
// plain layout, slot i of n holding f_i(n), through amr_ep_gather / amr_ep_local.
#if AMR_INPLACE
// Offset of P's slot `slot` for pair i of cell `cell` (local coordinates c) of block id: in the
// block (a constant offset from the cell's), a same-level neighbour's, else the halo slot.
// Without `links` (the halo form an adaptation works on, AmrGpu::settle_for_mesh: amr_ep_gather
// only), every P outside the block is the halo slot and `nbr` is not read.
__device__ __forceinline__ amr_ix amr_ep_p(const u32* __restrict__ nbr, u32 id, int cell, const int* c, int i, int slot, bool links = true) {
    const int t[3] = {c[0] + lat_cx(i), c[1] + lat_cy(i), c[2] + lat_cz(i)};
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B);
    if ((unsigned)t[0] < 4u && (DEF_D < 2 || (unsigned)t[1] < 4u) && (DEF_D < 3 || (unsigned)t[2] < 4u))
        return own + (amr_ix)(slot * AMR_B + cell + lat_cx(i) + 4 * lat_cy(i) + 16 * lat_cz(i));
    if (!links) return (amr_ix)AMR_HALO_BASE + (amr_ix)id * AMR_H + (amr_ix)amr_hidx[cell * AMR_NP + i / 2];
    int e[3], s[3];
    const int ci[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
    amr_offset(c, ci, e, s);
    const u32 link = nbr[(u64)id * AMR_ND + amr_dir(e)];
    if (link == AMR_NONE || (link & AMR_COARSER)) return (amr_ix)AMR_HALO_BASE + (amr_ix)id * AMR_H + (amr_ix)amr_hidx[cell * AMR_NP + i / 2];
    return (amr_ix)link * (DEF_Q * AMR_B) + (amr_ix)(slot * AMR_B + amr_cell(s[0], s[1], s[2]));
}
// Offset of value j of cell `cell` of block id at parity q.
__device__ __forceinline__ amr_ix amr_ep_ix(const u32* __restrict__ nbr, u32 id, int cell, int j, u32 q) {
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B);
    if (j == 0) return own + (amr_ix)cell;
    if (j & 1) return own + (amr_ix)((j + (int)q) * AMR_B + cell);
    int c[3];
    amr_coords(cell, c);
    return amr_ep_p(nbr, id, cell, c, j - 1, j - (int)q);
}
__device__ __forceinline__ void amr_load_ep(const fpxx* __restrict__ f, const u32* __restrict__ nbr, u32 id, int cell, u32 q, float* g, bool links = true) {
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B);
    int c[3];
    amr_coords(cell, c);
    g[0] = dec(f[own + (amr_ix)cell]);
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        g[i] = dec(f[own + (amr_ix)((i + (int)q) * AMR_B + cell)]);
        g[i + 1] = dec(f[amr_ep_p(nbr, id, cell, c, i, i + 1 - (int)q, links)]);
    }
}
__device__ __forceinline__ void amr_store_ep(fpxx* __restrict__ f, const u32* __restrict__ nbr, u32 id, int cell, u32 q, const float* g, bool links = true) {
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B);
    int c[3];
    amr_coords(cell, c);
    f[own + (amr_ix)cell] = enc(g[0]);
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        f[own + (amr_ix)((i + (int)q) * AMR_B + cell)] = enc(g[i]);
        f[amr_ep_p(nbr, id, cell, c, i, i + 1 - (int)q, links)] = enc(g[i + 1]);
    }
}
#endif
// The layout an in-place kernel reads a level in (`q`): -1 plain (at rest; always with two
// buffers), 0 or 1 the stepping arrangement of that parity, 2 or 3 the halo form of parity
// q - 2 (an adaptation's, AmrGpu::settle_for_mesh).
#define AMR_Q_PLAIN -1
#define AMR_Q_HALO 2
// Bit 31 of an adaptation's `form` word: the data is at rest (plain); else in halo form, level
// l at the parity of bit l. The layout of level l under that word.
#define AMR_FORM_PLAIN 0x80000000u
__device__ __forceinline__ int amr_form_q(u32 form, u32 l) {
    return (!AMR_INPLACE || (form & AMR_FORM_PLAIN)) ? AMR_Q_PLAIN : AMR_Q_HALO + (int)((form >> l) & 1u);
}
// A cell's DDFs (at = id * B + cell) in layout q, and stored in it.
__device__ __forceinline__ void amr_load_q(const fpxx* __restrict__ f, const u32* __restrict__ nbr, long long at, int q, float* g) {
#if AMR_INPLACE
    const u32 id = (u32)(at / AMR_B);
    const int cell = (int)(at % AMR_B);
    if (q >= 0) {
        amr_load_ep(f, nbr, id, cell, (u32)q & 1u, g, q < AMR_Q_HALO);
        return;
    }
#else
    (void)nbr;
    (void)q;
#endif
    amr_load(f, at, g);
}
__device__ __forceinline__ void amr_store_q(fpxx* __restrict__ f, const u32* __restrict__ nbr, long long at, int q, const float* g) {
#if AMR_INPLACE
    const u32 id = (u32)(at / AMR_B);
    const int cell = (int)(at % AMR_B);
    if (q >= 0) {
        amr_store_ep(f, nbr, id, cell, (u32)q & 1u, g, q < AMR_Q_HALO);
        return;
    }
#else
    (void)nbr;
    (void)q;
#endif
    amr_store(f, at, g);
}
// A cell's DDFs through the mesh's view of the data (m.q, as amr_load_q's q).
__device__ __forceinline__ void amr_load_m(const AmrMesh& m, const fpxx* __restrict__ f, long long at, float* g) {
    amr_load_q(f, m.nbr, at, m.q, g);
}

// Move DDFs from a level with force fs to one with fd, the non-equilibrium part scaled by r
// (lbm.rs rescale).
__device__ __forceinline__ void amr_rescale(float* g, const float* fs, const float* fd, float r) {
    float rm1, ux, uy, uz;
    moments(g, 0.0f, 0.0f, 0.0f, rm1, ux, uy, uz);
    const float rho = rm1 + 1.0f;
    float feq[DEF_Q], feq_d[DEF_Q];
    equilibrium(rm1, ux, uy, uz, feq);
    equilibrium(rm1, ux + 0.5f * (fs[0] - fd[0]) / rho, uy + 0.5f * (fs[1] - fd[1]) / rho, uz + 0.5f * (fs[2] - fd[2]) / rho, feq_d);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) g[i] = feq_d[i] + r * (g[i] - feq[i]);
}

// Per-axis taps (offset, weight), up to four.
struct AmrTaps {
    int o[3][4];
    float w[3][4];
    int n[3];
};
__device__ __forceinline__ void taps_one(AmrTaps& t) {
#pragma unroll
    for (int a = 0; a < 3; a++) { t.o[a][0] = 0; t.w[a][0] = 1.0f; t.n[a] = 1; }
}
__device__ __forceinline__ void taps_set(AmrTaps& t, int a, int n, int o0, float w0, int o1, float w1, int o2, float w2, int o3, float w3) {
    t.n[a] = n;
    t.o[a][0] = o0; t.w[a][0] = w0;
    t.o[a][1] = o1; t.w[a][1] = w1;
    t.o[a][2] = o2; t.w[a][2] = w2;
    t.o[a][3] = o3; t.w[a][3] = w3;
}
__device__ __forceinline__ void taps_plain(AmrTaps& t) {
    taps_one(t);
#pragma unroll
    for (int a = 0; a < DEF_D; a++) taps_set(t, a, 2, 0, 0.5f, 1, 0.5f, 0, 0.0f, 0, 0.0f);
}

// Where interpolation and restriction read the cells of one level: `has(k)` says whether the
// cell at local coordinates k holds data, `get(k, g)` loads its DDFs if so (false if not).
// AmrGlobalCells reads them through the mesh (amr_cell_at: block p and its same-level
// neighbours), AmrRegionCells from a 4^D tile of cells in shared memory (amr_interpolate).
struct AmrGlobalCells {
    const AmrMesh& m;
    const fpxx* __restrict__ f;
    u32 p;
    bool ghosts;
    __device__ bool has(const int* k) const { return amr_cell_at(m, p, k, ghosts) >= 0; }
    __device__ bool get(const int* k, float* g) const {
        const long long at = amr_cell_at(m, p, k, ghosts);
        if (at < 0) return false;
        amr_load_m(m, f, at, g);
        return true;
    }
};
// A tile cell's values are AMR_TQ floats (DEF_Q padded to a multiple of 4, so that a cell
// loads in 16-byte pieces; a quarter warp's 16-byte accesses at that stride hit distinct banks).
#define AMR_TQ ((DEF_Q + 3) / 4 * 4)
struct AmrRegionCells {
    const float* v;          // value i of tile cell c at v[c * AMR_TQ + i] (16-byte aligned)
    const unsigned char* h;  // per tile cell: holds data
    int lo[3];               // local coordinates of the tile's lowest cell
    __device__ int at(const int* k) const {
        return amr_cell(k[0] - lo[0], DEF_D >= 2 ? k[1] - lo[1] : 0, DEF_D == 3 ? k[2] - lo[2] : 0);
    }
    __device__ bool has(const int* k) const { return h[at(k)] != 0; }
    __device__ bool get(const int* k, float* g) const {
        const int c = at(k);
        if (!h[c]) return false;
        const float4* p = reinterpret_cast<const float4*>(v + c * AMR_TQ);
#pragma unroll
        for (int j = 0; j < AMR_TQ / 4; j++) {
            const float4 q = p[j];
            g[4 * j] = q.x;
            if (4 * j + 1 < DEF_Q) g[4 * j + 1] = q.y;
            if (4 * j + 2 < DEF_Q) g[4 * j + 2] = q.z;
            if (4 * j + 3 < DEF_Q) g[4 * j + 3] = q.w;
        }
        return true;
    }
};

// The weighted sum over the tensor product of the taps around `org` (lbm.rs tensor_sum): each
// cell from `cells`, or `fallback` where it has no data (null: the sum fails); the sum
// rescaled from force fs to fd by r. False if a cell had no data.
template <class Cells>
__device__ bool amr_tensor_sum(const Cells& cells, const AmrTaps& t, const int* org, const float* fallback, const float* fs, const float* fd, float r, float* acc) {
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) acc[i] = 0.0f;
    for (int tz = 0; tz < t.n[2]; tz++) {
        for (int ty = 0; ty < t.n[1]; ty++) {
            for (int tx = 0; tx < t.n[0]; tx++) {
                const int k[3] = {org[0] + t.o[0][tx], org[1] + t.o[1][ty], org[2] + t.o[2][tz]};
                float g[DEF_Q];
                if (!cells.get(k, g)) {
                    if (!fallback) return false;
#pragma unroll
                    for (int i = 0; i < DEF_Q; i++) g[i] = fallback[i];
                }
                const float w = t.w[0][tx] * t.w[1][ty] * t.w[2][tz];
#pragma unroll
                for (int i = 0; i < DEF_Q; i++) acc[i] += w * g[i];
            }
        }
    }
    amr_rescale(acc, fs, fd, r);
    return true;
}
__device__ bool amr_tensor_sum(const AmrMesh& m, const fpxx* __restrict__ f, const AmrTaps& t, u32 p, const int* org, bool ghosts, const float* fallback, const float* fs, const float* fd, float r, float* acc) {
    return amr_tensor_sum(AmrGlobalCells{m, f, p, ghosts}, t, org, fallback, fs, fd, r, acc);
}

// The mean of the cells with data among `count` offsets from org (mode 0: the 3^D cells around
// org; mode 1: the 2^D cells from org up), then rescaled (lbm.rs mean_of_available). False if
// none.
template <class Cells>
__device__ bool amr_mean(const Cells& cells, const int* org, int mode, const float* fs, const float* fd, float r, float* acc) {
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) acc[i] = 0.0f;
    const int count = mode == 0 ? AMR_ND : (1 << DEF_D);
    u32 n = 0;
    for (int j = 0; j < count; j++) {
        int k[3] = {org[0], org[1], org[2]};
        int q3 = j;
        for (int a = 0; a < DEF_D; a++) {
            if (mode == 0) { k[a] += q3 % 3 - 1; q3 /= 3; } else { k[a] += (j >> a) & 1; }
        }
        float g[DEF_Q];
        if (!cells.get(k, g)) continue;
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) acc[i] += g[i];
        n++;
    }
    if (n == 0) return false;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) acc[i] = acc[i] / (float)n;
    amr_rescale(acc, fs, fd, r);
    return true;
}
__device__ bool amr_mean(const AmrMesh& m, const fpxx* __restrict__ f, u32 p, const int* org, int mode, bool ghosts, const float* fs, const float* fd, float r, float* acc) {
    return amr_mean(AmrGlobalCells{m, f, p, ghosts}, org, mode, fs, fd, r, acc);
}

__device__ __forceinline__ void amr_level(const float* __restrict__ prm, u32 l, float& tau, float* force) {
    tau = prm[4 * l];
    force[0] = prm[4 * l + 1];
    force[1] = prm[4 * l + 2];
    force[2] = prm[4 * l + 3];
}

#define AMR_ARGS const int* __restrict__ pos, const u32* __restrict__ parent, const u32* __restrict__ child, const u32* __restrict__ nbr, const unsigned char* __restrict__ cmask, const unsigned char* __restrict__ solid
#define AMR_MESH AmrMesh m = {pos, parent, child, nbr, cmask, solid, AMR_OK_MASKS, nullptr, nullptr, -1}

// What a cell of a level-step does with each of its values (amr_codes works it out once per
// mesh, amr_step reads it), one 64-bit word a cell: bit k (k < Q <= 27) set where the cell
// pushes its post-collision value k into the streamed cell c + c_k (of its block or of a
// same-level neighbour); bit 32 + k set where the cell itself fills its value opposite(k)
// because that value's source is no collided cell of its level. Which way it fills it follows
// from the link towards c + c_k: no block there (outside the domain: walls and outflows, which
// amr_step works out), a coarser block (the value keeps its pre-step value), else a same-level
// block whose cell is an obstacle (half-way bounce-back). Bits 30 and 31: the cell is
// streamed, collided. Bit 29: the cell holds data, which moves to the other buffer with its
// level (every cell but the covered ones: fluid cells of non-leaves that are neither
// parent-of-ghost nor parent-of-interface; no kernel reads those, an adaptation refills them
// from their children where they come to hold data, amr_transfer XF_PARENT, and the CPU keeps
// them as stale as this). Bit 29 alone: the cell's values are copied as they are. Bit 28: some
// bit 32 + k is set (the cell fills a value itself).
// With AMR_CODES_SPLIT (the default for FP32 storage) the words are two planes of 32-bit words,
// the low halves at codes[id * B + cell] and the high halves `cells` words after them: the step
// reads the low word of every cell and the high one only where bit 28 says it fills a value
// (boundary cells), 4 bytes a cell instead of 8. Faster for FP32 storage, slower for 16-bit
// storage (docs/performance.md, kernel choices). A flag per 32 cells saying they all have the
// open flow's code was slower: its shared-memory round trip in front of every cell costs more
// than the code it saves.
#ifndef AMR_CODES_SPLIT
#if DEF_STORE == STORE_FP32
#define AMR_CODES_SPLIT 1
#else
#define AMR_CODES_SPLIT 0
#endif
#endif
#define AMR_C_HASFILL 28
#define AMR_C_KEEP 29
#define AMR_C_STREAMED 30
#define AMR_C_COLLIDED 31
#define AMR_C_FILL 32

// The codes of every cell of blocks `ids` into codes[id * B + cell], from the
// masks, links and obstacle flags (which amr_step's comment describes in words). With `epoch`
// nonzero only blocks whose own row or a same-level neighbour's carries that adaptation's
// number in `dirty` (amr_mesh.cu M_EPOCH): the codes of the others did not change.
extern "C" __global__ void amr_codes(const u32* __restrict__ ids, const u32 count, AMR_ARGS, const unsigned char* __restrict__ dirty, const u32 epoch, u32* __restrict__ codes, const u64 cells) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool in = t < (u64)count * AMR_B;
    const u32 id = in ? ids[t / AMR_B] : 0;
    if (epoch != 0) {
        // The threads of a block (one warp in 3D, half of one in 2D) each look at one of its
        // 3^D links (the block itself after them).
        const int lane = threadIdx.x & 31, d = (int)(t % AMR_B) % 32;
        bool hit = false;
        if (in && d < AMR_ND) {
            const u32 link = nbr[(u64)id * AMR_ND + d];
            hit = link != AMR_NONE && !(link & AMR_COARSER) && dirty[link] == epoch;
        } else if (in && d == AMR_ND) {
            hit = dirty[id] == epoch;
        }
        const u32 mine = AMR_B >= 32 ? 0xffffffffu : ((1u << AMR_B) - 1u) << (lane / AMR_B * AMR_B);
        if ((__ballot_sync(0xffffffffu, hit) & mine) == 0) return;
    }
    if (!in) return;
    const int cell = (int)(t % AMR_B);
    const u64 at = (u64)id * AMR_B + cell;
    const bool leaf = child[id] == AMR_NONE;
    const int mk = cmask[at];
    const bool fluid = !solid[at];
    const bool collided = fluid && (leaf || mk == CM_POG || mk == CM_POI);
    const bool streamed = fluid && (leaf || mk == CM_POG);
    (void)pos;
    (void)parent;
    const bool covered = fluid && !leaf && mk != CM_POG && mk != CM_POI;
    unsigned long long w = covered ? 0ull : 1ull << AMR_C_KEEP;
    if (collided) {
        w |= (unsigned long long)streamed << AMR_C_STREAMED | 1ull << AMR_C_COLLIDED;
        int c[3];
        amr_coords(cell, c);
#pragma unroll
        for (int k = 0; k < DEF_Q; k++) {
            const int ck[3] = {lat_cx(k), lat_cy(k), lat_cz(k)};
            int e[3], sv[3];
            amr_offset(c, ck, e, sv);
            const u32 link = nbr[(u64)id * AMR_ND + amr_dir(e)];
            // Outside the domain, a coarser block or an obstacle cell: the cell fills the value
            // itself (if streamed); a streamed fluid cell of the level: a push.
            bool fill = true;
            if (link != AMR_NONE && !(link & AMR_COARSER)) {
                const u64 nat = (u64)link * AMR_B + amr_cell(sv[0], sv[1], sv[2]);
                if (!solid[nat]) {
                    fill = false;
                    if (child[link] == AMR_NONE || cmask[nat] == CM_POG) w |= 1ull << k;
                }
            }
            if (fill && streamed) w |= 1ull << (AMR_C_FILL + k) | 1ull << AMR_C_HASFILL;
        }
    }
#if AMR_CODES_SPLIT
    codes[at] = (u32)w;
    codes[cells + at] = (u32)(w >> 32);
#else
    (void)cells;
    ((unsigned long long*)codes)[at] = w;
#endif
}

// One level-step of level l's blocks `ids` in a single pass (the fused step of Meneghin & Mahmoud 2025; lbm.rs
// collide_level + stream_level give the same numbers): the DDFs of the level are read from
// `src` and written to `dst` (fa or fb by sel: bit 0 set, src is fb and dst fa), so each value
// crosses the memory bus twice, as in the dense kernels. Which cells do what (lbm.rs):
//   collided  fluid cells of leaves, and the parent-of-ghost and parent-of-interface cells of
//             non-leaves (a coarse leaf next to them streams from them);
//   streamed  fluid cells of leaves and parent-of-ghost cells: value i comes from the cell
//             behind along c_i. A collided cell pushes its post-collision value k to the
//             streamed cell ahead along c_k; the streamed cell itself fills the values whose
//             source is no collided cell of its level: half-way bounce-back off obstacles,
//             walls (moving ones with 6 w_i c_i.u_w, the mean of the walls the link crosses),
//             the outflow equilibrium where every face the link crosses is an outflow, and
//             the pre-step value where the source is coarser (ghost cells: stale until the
//             next interpolation);
//   the rest  (parent-of-interface and solid cells) keep their values; covered cells
//             (AMR_C_KEEP) are left as they are in both buffers.
// Every value of dst in these blocks but the covered cells' is written exactly once.
// What each cell does, direction by direction, comes from its codes (amr_codes), worked out
// once per mesh: the step reads one word a cell instead of each target's masks and flags.
// Minimum resident thread blocks of 256 threads per SM for the stepping kernels (register caps:
// 3 -> 80 registers, which D3Q19 with the codes needs; at 4, 64 registers, it spills and is
// slower; NVRTC defines override them, ESOFLOW_AMR_DEFINES). In place 3 as well, since its
// pushes' sums are worked out again after the collision (AMR_EP_RECOMPUTE), 2 for D3Q27 (it
// spills 80 bytes at 3). Measurements: docs/performance.md, kernel choices.
#ifndef AMR_STEP_MINB
#if AMR_INPLACE && DEF_Q > 19
#define AMR_STEP_MINB 2
#else
#define AMR_STEP_MINB 3
#endif
#endif
// The step's warps take rows of 8 cells across two consecutive blocks of the list (see amr_step)
// for FP32 storage, where it is faster; for 16-bit storage it is slower (docs/performance.md,
// kernel choices).
#ifndef AMR_STEP_PAIRS
#if DEF_STORE == STORE_FP32
#define AMR_STEP_PAIRS 1
#else
#define AMR_STEP_PAIRS 0
#endif
#endif
// Interpolation: 3 (80 registers, no spills for D3Q19) gives slightly shorter launches than 2;
// D3Q27 needs more registers.
#ifndef AMR_INTERP_MINB
#if DEF_Q > 19
#define AMR_INTERP_MINB 2
#else
#define AMR_INTERP_MINB 3
#endif
#endif
// In place, 2 as well: its taps' loads go through the in-place accessor and need the registers.
#ifndef AMR_AVG_MINB
#if DEF_Q > 19 || AMR_INPLACE
#define AMR_AVG_MINB 2
#else
#define AMR_AVG_MINB 3
#endif
#endif
// Store v at p (a global address) where `on` is nonzero: a predicated store, so that the
// address arithmetic of a step's pushes runs without branches around each of them.
__device__ __forceinline__ void amr_store_if(const char* p, fpxx v, u32 on) {
#if DEF_STORE == STORE_FP32
    asm volatile("{\n\t.reg .pred q;\n\t.reg .u64 a;\n\tsetp.ne.u32 q, %2, 0;\n\tcvta.to.global.u64 a, %0;\n\t@q st.global.f32 [a], %1;\n\t}" :: "l"(p), "f"(v), "r"(on));
#else
    asm volatile("{\n\t.reg .pred q;\n\t.reg .u64 a;\n\tsetp.ne.u32 q, %2, 0;\n\tcvta.to.global.u64 a, %0;\n\t@q st.global.u16 [a], %1;\n\t}" :: "l"(p), "h"(v), "r"(on));
#endif
}
// amr_step's loads of a cell's code (the low word; with 8-byte codes the high word too, into
// `hi`) and of its values.
__device__ __forceinline__ void amr_step_code(const u32* __restrict__ codes, u64 at, u32& w, u32& hi) {
#if AMR_CODES_SPLIT
    w = codes[at];
#else
    const unsigned long long w64 = ((const unsigned long long*)codes)[at];
    w = (u32)w64;
    hi = (u32)(w64 >> 32);
#endif
}
__device__ __forceinline__ void amr_step_values(const fpxx* __restrict__ mine, fpxx* v) {
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) v[i] = mine[i * AMR_B];
}
__device__ __forceinline__ void amr_step_load(const u32* __restrict__ codes, u64 at, const fpxx* __restrict__ mine, u32& w, u32& hi, fpxx* v) {
    amr_step_code(codes, at, w, hi);
    amr_step_values(mine, v);
}
// AMR_STEP_EARLY: amr_step loads a cell's code and values before it sets up its thread block's
// links (1), only the code before them (2), or both after them (0): early loads help 16-bit
// storage and hurt FP32 (docs/performance.md, kernel choices).
#ifndef AMR_STEP_EARLY
#if DEF_STORE == STORE_FP32
#define AMR_STEP_EARLY 0
#else
#define AMR_STEP_EARLY 1
#endif
#endif
// The direction (0 .. 3^D) of the block holding c + c_k and that block's offset e per axis.
__device__ __forceinline__ int amr_step_dir(const int* c, int k, int* e) {
    const int ck[3] = {lat_cx(k), lat_cy(k), lat_cz(k)};
    int d = 0;
    e[0] = e[1] = e[2] = 0;
#pragma unroll
    for (int a = 0, m = 1; a < DEF_D; a++, m *= 3) {
        e[a] = (c[a] + ck[a]) >> 2;
        d += (e[a] + 1) * m;
    }
    return d;
}
// The outflow equilibrium's density and velocity, once a link needs it (rho_out - 1 in eq[0]).
struct AmrOutflowEq {
    bool have = false;
    float eq[4];
};
// The value opposite(k) a cell of block id (level l) whose link c + c_k leaves the domain (block
// offset e) fills itself from its post-collision values g: half-way bounce-back off the walls
// the link crosses (moving ones adding 6 w_i c_i.u_w, the walls' mean), or where every face it
// crosses is an outflow the equilibrium at the outflow's density and the cell's velocity.
__device__ __forceinline__ float amr_edge_value(int k, const float* g, const int* e, const int* __restrict__ pos, u32 id, u32 l, const int* root, const float* __restrict__ prm, const float* force, AmrOutflowEq& oe) {
    const int i = (int)opposite((u32)k);
    const int ci[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
    float uw[3] = {0.0f, 0.0f, 0.0f};
    u32 walls = 0;
    float rho_out = 1.0f;
#pragma unroll
    for (int a = 0; a < DEF_D; a++) {
        const int np = pos[3 * (u64)id + a] + e[a];
        int side = -1;
        if (np < 0) side = 0; else if (np >= (root[a] << l)) side = 1;
        if (side >= 0) {
            const float rho = prm[AMR_OUTFLOW + 2 * a + side];
            if (rho == rho) {
                rho_out = rho;
            } else {
                walls++;
#pragma unroll
                for (int q = 0; q < 3; q++) uw[q] += prm[AMR_WALLS + 3 * (2 * a + side) + q];
            }
        }
    }
    if (walls == 0) {
        if (!oe.have) {
            float rm1;
            moments(g, force[0], force[1], force[2], rm1, oe.eq[1], oe.eq[2], oe.eq[3]);
            oe.eq[0] = rho_out - 1.0f;
            oe.have = true;
        }
        return equilibrium_one(i, oe.eq[0], oe.eq[1], oe.eq[2], oe.eq[3]);
    }
    float cu = 0.0f;
#pragma unroll
    for (int a = 0; a < DEF_D; a++) cu += (float)ci[a] * uw[a];
    cu = cu / (float)walls;
    return g[k] + 6.0f * lat_w(i) * cu;
}
// The step's per-axis parts of a push target's address (see amr_step's pushes): for axis a and
// offset o (-1, 0, 1), sum[a][o + 1] holds the axis's part of the byte offset of the target
// block's pointer in the thread block's table of ND pointers per block (high half; row lb's
// in axis 0's) and of the cell's byte offset in its block's array of one value (low half).
__device__ __forceinline__ void amr_push_sums(const int* c, int lb, u32 (&sum)[3][3]) {
#pragma unroll
    for (int a = 0, m = 1, sh = 1; a < 3; a++, m *= 3, sh *= 4) {
#pragma unroll
        for (int o = -1; o <= 1; o++) {
            const int tt = c[a] + o;
            const u32 hi = a < DEF_D ? (u32)(((tt >> 2) + 1) * m) * (u32)sizeof(fpxx*) : 0u;
            const u32 lo = a < DEF_D ? (u32)((tt & 3) * sh) * (u32)sizeof(fpxx) : 0u;
            sum[a][o + 1] = (hi + (a == 0 ? (u32)(lb * AMR_ND) * (u32)sizeof(fpxx*) : 0u)) << 16 | lo;
        }
    }
}
// The fill bits of a cell's step code (the second plane's word, or the high half read with the
// first: amr_step_code).
__device__ __forceinline__ u32 amr_step_fill(const u32* __restrict__ codes, u64 cells, u64 at, u32 hi) {
#if AMR_CODES_SPLIT
    (void)hi;
    return codes[cells + at];
#else
    (void)cells;
    (void)at;
    return hi;
#endif
}
// Which block of the thread block's list (lb) and which of its cells a step thread takes. With
// AMR_STEP_PAIRS two consecutive blocks of the list (x neighbours where the list has them in a
// row: siblings, roots along x) share their warps: a warp takes rows of 8 cells, 4 from each, so
// that one store instruction fills the x-pushes' sectors on both sides of their common face.
__device__ __forceinline__ void amr_step_lane_of(u32 t, int& lb, int& cell) {
#if AMR_STEP_PAIRS
    const int pu = t % (2 * AMR_B), px = pu % 8;
    lb = 2 * (int)(t / (2 * AMR_B)) + (px >> 2);
    cell = (px & 3) + 4 * (pu / 8);
#else
    lb = t / AMR_B;
    cell = t % AMR_B;
#endif
}
__device__ __forceinline__ void amr_step_lane(int& lb, int& cell) { amr_step_lane_of(threadIdx.x, lb, cell); }
// The step's collision of a cell's values g with level l's relaxation time and force (into
// `force`). The Guo source only where the level has a force, as the CPU (a uniform branch: every
// thread of a launch steps the same level).
__device__ __forceinline__ void amr_step_collide(const float* __restrict__ prm, u32 l, float* g, float* force) {
    Params p;
    amr_level(prm, l, p.tau, force);
    p.cs = 0.0f;
    p.fx = force[0]; p.fy = force[1]; p.fz = force[2];
    if (force[0] != 0.0f || force[1] != 0.0f || force[2] != 0.0f) collide_with<true>(g, p);
    else collide_with<false>(g, p);
}

// ---- Interpolated walls (AMR_CURVED; sim-core/src/amr/lbm/walls.rs): Bouzidi's bounce-back on
// the curved links of one level (the finest, whose cells are the scene's finest grid). The host
// defines AMR_CURVED only for a run with such links: without it the kernels are those of
// half-way walls alone. The table `walls` (CurvedWalls::packed): [count, level, n0, n1, n2,
// cells[count] (indices x + n0 (y + n1 z) on the level's grid, ascending), q[count * Q] (float
// bits: q of the link along c_d, 0 where c_d is no curved link)]; level 0xffffffff: no table.
// amr_step, amr_walls and amr_stats take it as their last argument.
#ifndef AMR_CURVED
#define AMR_CURVED 0
#endif
#if AMR_CURVED
#define AMR_CURVED_ARG , const u32* __restrict__ walls
// The row of the table of cell `cell` of block id (a block of the table's level: its cells are
// at 4 pos + c), -1 where the cell has no curved link.
__device__ __forceinline__ int amr_curved_row(const u32* __restrict__ walls, const int* __restrict__ pos, u32 id, int cell) {
    int c[3];
    amr_coords(cell, c);
    u32 g[3] = {0u, 0u, 0u};
#pragma unroll
    for (int a = 0; a < DEF_D; a++) g[a] = (u32)(4 * pos[3 * (u64)id + a] + c[a]);
    if (g[0] >= walls[2] || g[1] >= walls[3] || g[2] >= walls[4]) return -1;
    const u32 key = g[0] + walls[2] * (g[1] + walls[3] * g[2]);
    const u32 count = walls[0];
    const u32* __restrict__ cells = walls + 5;
    u32 lo = 0u, hi = count;
    while (lo < hi) {
        const u32 mid = (lo + hi) >> 1;
        if (cells[mid] < key) lo = mid + 1u;
        else hi = mid;
    }
    return (lo < count && cells[lo] == key) ? (int)lo : -1;
}
// q of the link along c_d of table row `row` (0: no curved link).
__device__ __forceinline__ float amr_curved_q(const u32* __restrict__ walls, int row, int d) {
    return __uint_as_float(walls[5u + walls[0] + (u64)row * DEF_Q + (u64)d]);
}
// The value opposite(k) = i a cell of block id (level l) fills where its link along c_k meets an
// obstacle cell of its level, from its post-collision values g: half-way g[k], or on the table's
// level where the link is curved with q >= 1/2, g[k] / (2q) + (1 - 1/(2q)) g[i] (walls.rs
// block_bouzidi; q < 1/2 keeps the half-way value, which amr_walls corrects after the step).
// `row`: the cell's row, looked up on the first bounced link (-2 until then).
__device__ __forceinline__ float amr_curved_back(const u32* __restrict__ walls, const int* __restrict__ pos, u32 id, int cell, u32 l, int& row, int k, int i, const float* g) {
    if (l != walls[1]) return g[k];
    if (row == -2) row = amr_curved_row(walls, pos, id, cell);
    if (row < 0) return g[k];
    const float q = amr_curved_q(walls, row, k);
    if (!(q >= 0.5f)) return g[k];
    const float s = 0.5f / q;
    return s * g[k] + (1.0f - s) * g[i];
}
#else
#define AMR_CURVED_ARG
#endif
#if !AMR_INPLACE
extern "C" __global__ void __launch_bounds__(256, AMR_STEP_MINB) amr_step(const u32* __restrict__ ids, const u32 count, const u32 l, const float* __restrict__ prm, const int r0, const int r1, const int r2, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel, const u32* __restrict__ codes, const u64 cells AMR_CURVED_ARG) {
    // The 3^D links of the thread block's 256 / B blocks (the block itself in the middle):
    // a push into this block or a same-level neighbour takes its target from here, one store
    // for both (no divergence between the cells that push inside the block and those at its
    // faces, no dependent load of the link from global memory).
    __shared__ u32 links[256 / AMR_B][AMR_ND];
    // The same as pointers to the linked blocks' DDFs in dst (unused where no same-level block
    // is linked).
    __shared__ fpxx* blocks[256 / AMR_B][AMR_ND];
    int lb, cell;
    amr_step_lane(lb, cell);
    const u64 jb = (u64)blockIdx.x * (256 / AMR_B) + lb;
    const bool in = jb < count;
    const u32 id = in ? ids[jb] : 0;
    const fpxx* __restrict__ src = (sel & 1u) ? fb : fa;
    fpxx* __restrict__ dst = (sel & 1u) ? fa : fb;
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B) + (amr_ix)cell;
    const fpxx* __restrict__ mine = src + own;
    const u64 wat = (u64)id * AMR_B + cell;
    // The cell's code and values (every load before the first store: src and dst may alias as
    // far as the compiler knows, and load-store pairs would wait on each other).
    u32 w = 0u, fill_hi = 0u;
    fpxx v[DEF_Q];
#if AMR_STEP_EARLY == 1
    // Before the links: the memory latencies of the code, the values and the links overlap.
    if (in) amr_step_load(codes, wat, mine, w, fill_hi, v);
#elif AMR_STEP_EARLY == 2
    if (in) amr_step_code(codes, wat, w, fill_hi);
#endif
    if (in && cell < AMR_ND) {
        const u32 link = cell == AMR_ND / 2 ? id : nbr[(u64)id * AMR_ND + cell];
        links[lb][cell] = link;
        // Less the row's byte offset in `blocks` times 2^16 (see the pushes below).
        blocks[lb][cell] = (fpxx*)((char*)(dst + (amr_ix)(link == AMR_NONE || (link & AMR_COARSER) ? 0u : link) * (DEF_Q * AMR_B)) - ((u64)((lb * AMR_ND + cell) * sizeof(fpxx*)) << 16));
    }
    __syncthreads();
    if (!in) return;
#if AMR_STEP_EARLY == 0
    amr_step_load(codes, wat, mine, w, fill_hi, v);
#elif AMR_STEP_EARLY == 2
    amr_step_values(mine, v);
#endif
    const bool streamed = (w >> AMR_C_STREAMED) & 1u;
    const bool collided = (w >> AMR_C_COLLIDED) & 1u;
    (void)parent;
    (void)cmask;
    (void)solid;
    (void)child;
    if (w == 0u) return;  // a covered cell (no AMR_C_KEEP, nothing else either)
    if (!streamed) {
        fpxx* __restrict__ to = dst + own;
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) to[i * AMR_B] = v[i];
        if (!collided) return;
    }
    float g[DEF_Q];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) g[i] = dec(v[i]);
    float force[3];
    amr_step_collide(prm, l, g, force);
    int c[3];
    amr_coords(cell, c);
    // The pushes, one predicated store each: the streamed cell c + c_k is in the block at
    // offset (c + c_k) >> 2 per axis (-1, 0, 1; its pointer from shared memory), cell
    // (c + c_k) & 3 there. Per axis and offset o, `sum[a][o + 1]` holds that axis's part of
    // the pointer's byte offset in `blocks` (high half; the thread block's row in axis 0's) and
    // of the cell's byte offset in its block's array of one value (low half): a direction adds
    // three of them into s, loads the pointer at byte s >> 16 of `blocks` and adds s to it
    // (the pointers there are biased by their own byte offset times 2^16, which leaves the
    // cell's offset).
    u32 sum[3][3];
    amr_push_sums(c, lb, sum);
    const u32 push = w;
#pragma unroll
    for (int k = 0; k < DEF_Q; k++) {
        const u32 s = sum[0][lat_cx(k) + 1] + sum[1][lat_cy(k) + 1] + sum[2][lat_cz(k) + 1];
        const char* b = (const char*)*(fpxx* const*)((const char*)&blocks[0][0] + (s >> 16));
        amr_store_if(b + (s + (u32)(k * AMR_B * (int)sizeof(fpxx))), enc(g[k]), push & (1u << k));
    }
    if (!((w >> AMR_C_HASFILL) & 1u)) return;
    const u32 fill = amr_step_fill(codes, cells, wat, fill_hi);
    // The values the cell fills itself (boundary cells only): from the link towards c + c_k,
    // half-way bounce-back (a same-level block: its cell there is an obstacle), the pre-step
    // value (a coarser block), walls and outflows (no block: outside the domain).
    const int root[3] = {r0, r1, r2};
    AmrOutflowEq oe;
#if AMR_CURVED
    int row = -2;
#endif
#pragma unroll
    for (int k = 0; k < DEF_Q; k++) {
        if (!((fill >> k) & 1u)) continue;
        const int i = (int)opposite((u32)k);
        const amr_ix out = own + (amr_ix)(i * AMR_B);
        int e[3];
        const u32 link = links[lb][amr_step_dir(c, k, e)];
        if (link != AMR_NONE) {
#if AMR_CURVED
            dst[out] = (link & AMR_COARSER) ? src[out] : enc(amr_curved_back(walls, pos, id, cell, l, row, k, i, g));
#else
            dst[out] = (link & AMR_COARSER) ? src[out] : enc(g[k]);
#endif
            continue;
        }
        dst[out] = enc(amr_edge_value(k, g, e, pos, id, l, root, prm, force, oe));
    }
}

#else
// The in-place step's loads and stores of its slots (plain loads and stores: global ones with
// cache operators, .nc, .ca, .cg, .cs, measured no different on the H100).
__device__ __forceinline__ fpxx amr_ep_ld(const fpxx* p) { return *p; }
__device__ __forceinline__ void amr_ep_st(fpxx* p, fpxx v) { *p = v; }
// AMR_EP_RECOMPUTE: the step works its pushes' address sums out again after the collision
// instead of keeping the loads' ones (ptxas, D3Q19 FP32: 96 registers instead of 128, no spills
// at 80 against 60 bytes).
#ifndef AMR_EP_RECOMPUTE
#define AMR_EP_RECOMPUTE 1
#endif
// The in-place step's address of slot `slot` of P = c + c_i (through the thread block's table of
// block pointers, as the two-buffer step's pushes): `table` holds per linked block its DDFs'
// address biased by its own byte offset in the table times 2^16, plus 1 where no same-level
// block is linked; there the halo slot of the cell and pair.
// HALO false: the caller knows that every block P can fall in is linked (no halo branch).
template <bool HALO = true>
__device__ __forceinline__ fpxx* amr_ep_slot(const u32 (&sum)[3][3], fpxx* const* table, int i, int slot, fpxx* f, u32 id, int cell) {
    const u32 s = sum[0][lat_cx(i) + 1] + sum[1][lat_cy(i) + 1] + sum[2][lat_cz(i) + 1];
    const char* b = (const char*)*(fpxx* const*)((const char*)table + (s >> 16));
    const char* a = b + (s + (u32)(slot * AMR_B * (int)sizeof(fpxx)));
    if (HALO && ((u64)a & 1u)) return f + (amr_ix)AMR_HALO_BASE + (amr_ix)id * AMR_H + (amr_ix)amr_hidx[cell * AMR_NP + i / 2];
    return (fpxx*)a;
}
// Whether the block at offset direction d (0 .. 3^D) can hold P = n + c_i (i odd) of one of a
// block's cells: each axis's offset is 0 or c_i's.
__device__ __forceinline__ bool amr_ep_p_dir(int d) {
    int e[3] = {0, 0, 0};
#pragma unroll
    for (int a = 0; a < DEF_D; a++, d /= 3) e[a] = d % 3 - 1;
    if (e[0] == 0 && e[1] == 0 && e[2] == 0) return false;
    bool any = false;
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        const int ci[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
        bool fits = true;
#pragma unroll
        for (int a = 0; a < 3; a++) fits = fits && (e[a] == 0 || e[a] == ci[a]);
        any = any || fits;
    }
    return any;
}
// The in-place step's loads of a collided cell (rule of parity q) and its pushes (S1, S2 below,
// by the rule of q ^ 1), through the thread block's table; HALO as in amr_ep_slot.
template <bool HALO>
__device__ __forceinline__ void amr_ep_step_load(const u32 (&sum)[3][3], fpxx* const* table, fpxx* f, const fpxx* mine, u32 id, int cell, u32 q, float* g) {
    g[0] = dec(amr_ep_ld(mine));
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        g[i] = dec(amr_ep_ld(mine + (i + (int)q) * AMR_B));
        g[i + 1] = dec(amr_ep_ld(amr_ep_slot<HALO>(sum, table, i, i + 1 - (int)q, f, id, cell)));
    }
}
template <bool HALO>
__device__ __forceinline__ void amr_ep_step_push(const u32 (&sum)[3][3], fpxx* const* table, fpxx* f, fpxx* mine, u32 id, int cell, u32 q, u32 w, const float* g) {
    if ((w >> AMR_C_STREAMED) & 1u) amr_ep_st(mine, enc(g[0]));
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        if ((w >> (i + 1)) & 1u) amr_ep_st(mine + (i + (int)q) * AMR_B, enc(g[i + 1]));
        if ((w >> i) & 1u) amr_ep_st(amr_ep_slot<HALO>(sum, table, i, i + 1 - (int)q, f, id, cell), enc(g[i]));
    }
}
// AMR_EP_SPLIT: where no block of a thread block misses a neighbour that P can fall in (most
// blocks away from the domain's faces and level jumps), its loads and pushes skip the halo
// branch (a barrier's OR tells; the rest take the general path).
#ifndef AMR_EP_SPLIT
#define AMR_EP_SPLIT 1
#endif
// The in-place step (AMR_INPLACE): the same cells do the same as in the two-buffer step above,
// in the one buffer `fa` at level parity q = sel & 1 (see "In-place storage"): a collided cell
// loads its values from the slots of parity q and stores into the same slots by the rule of
// q ^ 1. Per pair (i, i + 1), P = n + c_i, M = n - c_i, four stores can fall to it:
//   S1  f_{i+1}* pushed to M (code bit i + 1)   into slot i + q of n;
//   S2  f_i* pushed to P (code bit i)           into P's slot i + 1 - q (or P's halo slot);
//   S3  f_i filled (fill bit i + 1, source M)   into slot i + 1 - q of n (M's, unused: M
//       is no stepped fluid cell of the level);
//   S4  f_{i+1} filled (fill bit i, source P)   into P's slot i + q (an obstacle's, or the halo
//       slot, where a coarser source keeps the value and nothing is stored).
// Non-streamed collided cells (parent-of-interface) only push: their own slots are their
// neighbours' stores, and the restriction refills them before anything reads them. Obstacle
// and covered cells do nothing (their slots carry their neighbours' values).
extern "C" __global__ void __launch_bounds__(256, AMR_STEP_MINB) amr_step(const u32* __restrict__ ids, const u32 count, const u32 l, const float* __restrict__ prm, const int r0, const int r1, const int r2, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel, const u32* __restrict__ codes, const u64 cells AMR_CURVED_ARG) {
    __shared__ u32 links[256 / AMR_B][AMR_ND];
    __shared__ fpxx* blocks[256 / AMR_B][AMR_ND];
    int lb, cell;
    amr_step_lane(lb, cell);
    const u64 jb = (u64)blockIdx.x * (256 / AMR_B) + lb;
    const bool in = jb < count;
    const u32 id = in ? ids[jb] : 0;
    (void)fb;
    (void)parent;
    (void)cmask;
    (void)solid;
    (void)child;
    fpxx* __restrict__ f = fa;
    const u32 q = sel & 1u;
    bool p_miss = false;
    if (in && cell < AMR_ND) {
        const u32 link = cell == AMR_ND / 2 ? id : nbr[(u64)id * AMR_ND + cell];
        const bool miss = link == AMR_NONE || (link & AMR_COARSER);
        p_miss = miss && amr_ep_p_dir(cell);
        links[lb][cell] = link;
        blocks[lb][cell] = (fpxx*)((char*)(f + (amr_ix)(miss ? 0u : link) * (DEF_Q * AMR_B)) - ((u64)((lb * AMR_ND + cell) * sizeof(fpxx*)) << 16) + (miss ? 1 : 0));
    }
#if AMR_EP_SPLIT
    const bool halo = __syncthreads_or(p_miss) != 0;
#else
    (void)p_miss;
    __syncthreads();
    const bool halo = true;
#endif
    if (!in) return;
    const u64 wat = (u64)id * AMR_B + cell;
    u32 w = 0u, fill_hi = 0u;
    amr_step_code(codes, wat, w, fill_hi);
    if (!((w >> AMR_C_COLLIDED) & 1u)) return;
    fpxx* const mine = f + ((amr_ix)id * (DEF_Q * AMR_B) + (amr_ix)cell);
    int c[3];
    amr_coords(cell, c);
    float g[DEF_Q];
    {
        u32 sum[3][3];
        amr_push_sums(c, lb, sum);
        if (halo) amr_ep_step_load<true>(sum, &blocks[0][0], f, mine, id, cell, q, g);
        else amr_ep_step_load<false>(sum, &blocks[0][0], f, mine, id, cell, q, g);
    }
    float force[3];
    amr_step_collide(prm, l, g, force);
#if AMR_EP_RECOMPUTE
    // The lane and its coordinates again from the thread index, read anew, so that the pushes'
    // address sums are recomputed rather than kept live through the collision (AMR_EP_RECOMPUTE).
    {
        u32 t;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
        amr_step_lane_of(t, lb, cell);
        amr_coords(cell, c);
    }
#endif
    u32 sum[3][3];
    amr_push_sums(c, lb, sum);
    if (halo) amr_ep_step_push<true>(sum, &blocks[0][0], f, mine, id, cell, q, w, g);
    else amr_ep_step_push<false>(sum, &blocks[0][0], f, mine, id, cell, q, w, g);
    if (!((w >> AMR_C_HASFILL) & 1u)) return;
    const u32 fill = amr_step_fill(codes, cells, wat, fill_hi);
    const int root[3] = {r0, r1, r2};
    AmrOutflowEq oe;
#if AMR_CURVED
    int row = -2;
#endif
#pragma unroll
    for (int k = 1; k < DEF_Q; k++) {
        if (!((fill >> k) & 1u)) continue;
        const int i = (k & 1) ? k : k - 1;
        int e[3];
        const u32 link = links[lb][amr_step_dir(c, k, e)];
        float v;
        if (link == AMR_NONE) v = amr_edge_value(k, g, e, pos, id, l, root, prm, force, oe);
#if AMR_CURVED
        else if (!(link & AMR_COARSER)) v = amr_curved_back(walls, pos, id, cell, l, row, k, (int)opposite((u32)k), g);
#else
        else if (!(link & AMR_COARSER)) v = g[k];
#endif
        else if (k & 1) continue;  // S4 from a coarser P: the halo slot keeps the value
        else {
            // S3 from a coarser M: the pre-step value, still in slot i + q (no push into it).
            mine[(i + 1 - (int)q) * AMR_B] = mine[(i + (int)q) * AMR_B];
            continue;
        }
        if (k & 1) {
            // S4: f_{i+1}, into P's slot i + q (the halo slot where P is in no block).
            amr_ep_st(amr_ep_slot(sum, &blocks[0][0], i, i + (int)q, f, id, cell), enc(v));
        } else {
            // S3: f_i, into slot i + 1 - q of n.
            mine[(i + 1 - (int)q) * AMR_B] = enc(v);
        }
    }
}
#endif

#if AMR_CURVED
// The curved links with q < 1/2 after a step of level l (the table's) over blocks `ids` (sel as
// the step's): f_k(x) = 2q f_k(x) + (1 - 2q) f_d(x), k = opposite(d), on the values the step
// just stored (walls.rs block_bouzidi; the CPU reference rounds the same values the same way).
// f_k(x) is the half-way value the cell filled, f_d(x) the value its upstream neighbour pushed,
// which is why this runs after every part of the level's step (schedule.rs, OpKind::Walls).
// Only where the value bounced back off an obstacle this step: the cell fills it (its fill bit
// d) from a same-level link towards x + c_d (whose cell is then an obstacle). Each cell rewrites
// only its own values. Two buffers: in the one the step wrote; in place: at parity (sel & 1) ^ 1.
extern "C" __global__ void __launch_bounds__(256) amr_walls(const u32* __restrict__ ids, const u32 count, const u32 l, const int* __restrict__ pos, const u32* __restrict__ nbr, fpxx* fa, fpxx* fb, const u32 sel, const u32* __restrict__ codes, const u64 cells, const u32* __restrict__ walls) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)count * AMR_B || l != walls[1]) return;
    const u32 id = ids[t / AMR_B];
    const int cell = (int)(t % AMR_B);
    const u64 wat = (u64)id * AMR_B + cell;
    u32 w = 0u, hi = 0u;
    amr_step_code(codes, wat, w, hi);
    if (!((w >> AMR_C_HASFILL) & 1u)) return;
    const u32 fill = amr_step_fill(codes, cells, wat, hi);
    const int row = amr_curved_row(walls, pos, id, cell);
    if (row < 0) return;
    int c[3];
    amr_coords(cell, c);
#if AMR_INPLACE
    fpxx* __restrict__ f = fa;
    (void)fb;
    const u32 par = (sel & 1u) ^ 1u;
#else
    fpxx* __restrict__ f = (sel & 1u) ? fa : fb;
    const amr_ix own = (amr_ix)id * (DEF_Q * AMR_B) + (amr_ix)cell;
#endif
    for (int d = 1; d < DEF_Q; d++) {
        if (!((fill >> d) & 1u)) continue;
        const float q = amr_curved_q(walls, row, d);
        if (!(q > 0.0f && q < 0.5f)) continue;
        int e[3];
        const u32 link = nbr[(u64)id * AMR_ND + amr_step_dir(c, d, e)];
        if (link == AMR_NONE || (link & AMR_COARSER)) continue;
        const int k = (int)opposite((u32)d);
#if AMR_INPLACE
        const amr_ix at_k = amr_ep_ix(nbr, id, cell, k, par), at_d = amr_ep_ix(nbr, id, cell, d, par);
#else
        const amr_ix at_k = own + (amr_ix)(k * AMR_B), at_d = own + (amr_ix)(d * AMR_B);
#endif
        f[at_k] = enc(2.0f * q * dec(f[at_k]) + (1.0f - 2.0f * q) * dec(f[at_d]));
    }
}
#endif

// Copy the DDFs of blocks `ids` from `src` to `dst` (a level's data back into the buffer the
// rest of the forest is in; AmrGpu::settle).
extern "C" __global__ void amr_copy(const u32* __restrict__ ids, const u32 count, const fpxx* __restrict__ src, fpxx* __restrict__ dst) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 per = (u64)DEF_Q * AMR_B;
    if (t >= (u64)count * per) return;
    const u64 at = (u64)ids[t / per] * per + t % per;
    dst[at] = src[at];
}

// Cells a cell edit turned solid or fluid (AmrGpu::edit_solids, on the settled layout): each
// listed cell (id * B + cell, bit 63 set where it turned solid) goes to the rest state (zero in
// the shifted storage), as lbm.rs change_solids; a leaf cell that turned solid first adds its
// mass (density times its volume in cells of level 0) to out[0].
extern "C" __global__ void amr_edit(const u64* __restrict__ cells, const u32 count, const unsigned char* __restrict__ level, const u32* __restrict__ child, fpxx* f, double* out) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    const u64 w = cells[t];
    const u64 at = w & ~(1ull << 63);
    const u32 id = (u32)(at / AMR_B);
    const u64 base = (u64)id * DEF_Q * AMR_B + at % AMR_B;
    if ((w >> 63) && child[id] == AMR_NONE) {
        float g[DEF_Q];
        amr_load(f, (long long)at, g);
        float rho = 0.0f;
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) rho += g[i];
        atomicAdd(out, (double)(rho + 1.0f) / (double)(1u << (DEF_D * level[id])));
    }
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[base + (u64)i * AMR_B] = enc(0.0f);
}

#if AMR_INPLACE
// Settling in-place data (AmrGpu::settle) and taking it up again, over blocks `ids` of any
// levels, each at its level's parity (bit level[id] of `par`). amr_ep_gather with `back` 0
// copies the values a block's cells keep in a same-level neighbour's slots (f_{i+1}(n), P =
// n + c_i in that block) into the block's halo slots, with `back` 1 the other way; amr_ep_local
// (one thread block of B threads per listed block) with `back` 0 rearranges a block whose
// values are all in it or its halo into the plain layout (slot i of n holds f_i(n)), with
// `back` 1 the plain layout into the arrangement of the parity, its neighbours' part into the
// halo slots. settle = gather, local; taking up = local back, gather back.
extern "C" __global__ void amr_ep_gather(const u32* __restrict__ ids, const u32 count, const unsigned char* __restrict__ level, const u32* __restrict__ nbr, const u32 par, const u32 back, fpxx* f) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)count * AMR_B) return;
    const u32 id = ids[t / AMR_B];
    const int cell = (int)(t % AMR_B);
    const u32 q = (par >> level[id]) & 1u;
    int c[3];
    amr_coords(cell, c);
#pragma unroll
    for (int pi = 0; pi < AMR_NP; pi++) {
        const int i = 2 * pi + 1;
        int e[3];
        const int d = amr_step_dir(c, i, e);
        if (d == AMR_ND / 2) continue;
        const u32 link = nbr[(u64)id * AMR_ND + d];
        if (link == AMR_NONE || (link & AMR_COARSER)) continue;
        const int sc = amr_cell(c[0] + lat_cx(i) - 4 * e[0], c[1] + lat_cy(i) - 4 * e[1], c[2] + lat_cz(i) - 4 * e[2]);
        const amr_ix nb = (amr_ix)link * (DEF_Q * AMR_B) + (amr_ix)((i + 1 - (int)q) * AMR_B + sc);
        const amr_ix h = (amr_ix)AMR_HALO_BASE + (amr_ix)id * AMR_H + (amr_ix)amr_hidx[cell * AMR_NP + pi];
        if (back) f[nb] = f[h];
        else f[h] = f[nb];
    }
}
extern "C" __global__ void __launch_bounds__(AMR_B) amr_ep_local(const u32* __restrict__ ids, const unsigned char* __restrict__ level, const u32 par, const u32 back, fpxx* f) {
    __shared__ fpxx v[DEF_Q * AMR_B];
    const u32 id = ids[blockIdx.x];
    const int cell = threadIdx.x;
    const u32 q = (par >> level[id]) & 1u;
    const amr_ix base = (amr_ix)id * (DEF_Q * AMR_B);
#pragma unroll
    for (int j = 0; j < DEF_Q; j++) v[j * AMR_B + cell] = f[base + (amr_ix)(j * AMR_B + cell)];
    __syncthreads();
    int c[3];
    amr_coords(cell, c);
#pragma unroll
    for (int pi = 0; pi < AMR_NP; pi++) {
        const int i = 2 * pi + 1;
        int e[3];
        const bool inside = amr_step_dir(c, i, e) == AMR_ND / 2;
        const int sc = amr_cell(c[0] + lat_cx(i) - 4 * e[0], c[1] + lat_cy(i) - 4 * e[1], c[2] + lat_cz(i) - 4 * e[2]);
        const amr_ix h = (amr_ix)AMR_HALO_BASE + (amr_ix)id * AMR_H + (amr_ix)(inside ? 0 : amr_hidx[cell * AMR_NP + pi]);
        const amr_ix at_p = base + (amr_ix)((i + 1 - (int)q) * AMR_B + sc);
        if (back) {
            f[base + (amr_ix)((i + (int)q) * AMR_B + cell)] = v[i * AMR_B + cell];
            f[inside ? at_p : h] = v[(i + 1) * AMR_B + cell];
        } else {
            f[base + (amr_ix)(i * AMR_B + cell)] = v[(i + (int)q) * AMR_B + cell];
            f[base + (amr_ix)((i + 1) * AMR_B + cell)] = inside ? v[(i + 1 - (int)q) * AMR_B + sc] : f[h];
        }
    }
}
#endif

// Fill the fluid ghost cells of level l (>= 1) blocks `ids` (those next to the coarser level)
// from level l - 1 (lbm.rs prolong): per axis quadratic through the parent cell and both its
// neighbours where they hold data, else linear towards the fine centre, else constant;
// non-equilibrium rescaled by tau_l / (2 tau_{l-1}). Where the parent cell is solid, the mean of
// the fluid cells around it, or the rest state.
// The DDFs of cell `cell` of block id (level l >= 1) interpolated from its parent's level
// (lbm.rs prolong): per axis quadratic through the parent cell and both its neighbours where
// they hold data, else linear towards the fine centre, else constant; non-equilibrium rescaled
// by tau_l / (2 tau_{l-1}). Where the parent cell has no data, the mean of the cells around it
// that have, or the rest state.
// The same from the parent level's cells around k (the parent cell under the fine cell, its
// local coordinates in the parent block), the fine cell on `side` of it per axis.
template <class Cells>
__device__ void amr_prolong_from(const Cells& cells, const float* __restrict__ prm, u32 l, const int* k, const int* side, float* out) {
    float tf, tc, ff[3], fc[3];
    amr_level(prm, l, tf, ff);
    amr_level(prm, l - 1, tc, fc);
    const float r = tf / (2.0f * tc);
    float base[DEF_Q];
    if (!cells.get(k, base)) {
        if (!amr_mean(cells, k, 0, fc, ff, r, out)) {
#pragma unroll
            for (int i = 0; i < DEF_Q; i++) out[i] = 0.0f;
        }
        return;
    }
    AmrTaps taps;
    taps_one(taps);
    for (int a = 0; a < DEF_D; a++) {
        int km[3] = {k[0], k[1], k[2]}, kp[3] = {k[0], k[1], k[2]}, ks[3] = {k[0], k[1], k[2]};
        km[a] -= 1;
        kp[a] += 1;
        ks[a] += side[a];
        const float s = 0.25f * (float)side[a];
        if (cells.has(km) && cells.has(kp)) {
            taps_set(taps, a, 3, -1, s * (s - 1.0f) / 2.0f, 0, 1.0f - s * s, 1, s * (s + 1.0f) / 2.0f, 0, 0.0f);
        } else if (cells.has(ks)) {
            taps_set(taps, a, 2, 0, 0.75f, side[a], 0.25f, 0, 0.0f, 0, 0.0f);
        }
    }
    amr_tensor_sum(cells, taps, k, base, fc, ff, r, out);
}

// The parent cell's local coordinates k and the fine cell's side of its centre per axis, for
// cell `cell` of block id.
__device__ __forceinline__ void amr_parent_cell(const int* __restrict__ pos, u32 id, int cell, int* k, int* side) {
    int c[3];
    amr_coords(cell, c);
    k[0] = k[1] = k[2] = 0;
    side[0] = side[1] = side[2] = 0;
    for (int a = 0; a < DEF_D; a++) {
        k[a] = 2 * (pos[3 * (u64)id + a] & 1) + c[a] / 2;
        side[a] = c[a] % 2 == 0 ? -1 : 1;
    }
}

// What amr_interpolate fills (mode): the fluid ghost cells of level l_step blocks `ids` from
// their parent level (stepping); every cell of new children, from the parents just refined
// (amr_transfer's XF_NEW: obstacle cells get zeros); the exposed cells of leaves of levels >= 1
// that hold no current data after an adaptation (XF_LEAF, current cells by `valid`). The latter
// two take each block's level from `level`.
#define AMR_PROLONG_GHOSTS 0
#define AMR_PROLONG_NEW 1
#define AMR_PROLONG_EXPOSED 2
// Fill the cells of `mode` in blocks `ids` from their parent level (amr_prolong_from). The
// parent level's cells a fine block's cells read lie in a tile of 4^D cells of its parent (and
// its neighbours) around the 2^D parent cells under it: each thread loads one tile cell into
// shared memory, then the cells interpolate from the tile (the same arithmetic as through the
// mesh, AmrGlobalCells, without its 27 mesh lookups and loads a cell). The parent level's
// DDFs are read from fa or fb (sel bit 0), the filled cells' written to fa or fb (sel bit 1);
// in place, ghosts at the parities in sel's bits 0 and 1, and in an adaptation's modes `sel` is
// its form word (amr_form_q: plain, or halo form at the levels' parities).
// Launched with 256 threads a thread block. amr_interpolate fills ghosts (the stepping's, `mode`
// not read), amr_interpolate_adapt the adaptation's modes: two kernels, so that the stepping's
// has none of the adaptation's registers.
template <bool ADAPT>
__device__ __forceinline__ void amr_interpolate_in(const u32* __restrict__ ids, const u32 count, const u32 l_step, const float* __restrict__ prm, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel, const u32 mode_arg, const unsigned char* __restrict__ level, const unsigned char* __restrict__ valid, const unsigned char* __restrict__ fresh) {
    const u32 mode = ADAPT ? mode_arg : AMR_PROLONG_GHOSTS;
    __shared__ __align__(16) float tile_v[256 / AMR_B][AMR_TQ * AMR_B];
    __shared__ unsigned char tile_h[256 / AMR_B][AMR_B];
    __shared__ unsigned char todo[256];
    __shared__ u32 todo_n[8];
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool in = t < (u64)count * AMR_B;
    const int lb = threadIdx.x / AMR_B;
    const int cell = threadIdx.x % AMR_B;
    const u32 id = in ? ids[t / AMR_B] : 0;
    AmrMesh m = {pos, parent, child, nbr, cmask, solid, mode == AMR_PROLONG_NEW ? AMR_OK_FRESH : mode == AMR_PROLONG_EXPOSED ? AMR_OK_VALID : AMR_OK_MASKS, valid, fresh, -1};
    const u64 at = (u64)id * AMR_B + cell;
    const u32 l = mode == AMR_PROLONG_GHOSTS ? l_step : level[id];
    bool mine = false;
    if (in) {
        const int mk = cmask[at];
        if (mode == AMR_PROLONG_GHOSTS) mine = mk == CM_GHOST && !solid[at];
        else if (mode == AMR_PROLONG_NEW) mine = true;
        else mine = child[id] == AMR_NONE && l > 0 && mk != CM_GHOST && !valid[at] && !solid[at];
    }
    // Thread blocks with nothing to fill (most of them in an adaptation's refresh) stop here.
    if (!__syncthreads_or(mine)) return;
    AmrRegionCells tile = {tile_v[lb], tile_h[lb], {0, 0, 0}};
    if (in) {
#if AMR_INPLACE
        const fpxx* f = fa;
#else
        const fpxx* f = (sel & 1u) ? fb : fa;
#endif
        int c[3], k[3] = {0, 0, 0};
        amr_coords(cell, c);
        for (int a = 0; a < DEF_D; a++) {
            tile.lo[a] = 2 * (pos[3 * (u64)id + a] & 1) - 1;
            k[a] = tile.lo[a] + c[a];
        }
        const long long src = amr_cell_at(m, parent[id], k, true);
        tile_h[lb][cell] = src >= 0;
        if (src >= 0) {
            float4* to = reinterpret_cast<float4*>(&tile_v[lb][cell * AMR_TQ]);
#if AMR_INPLACE
            const bool ghosts = mode == AMR_PROLONG_GHOSTS;
            if (ghosts || !(sel & AMR_FORM_PLAIN)) {
                // The parent level at its parity: stepping, or an adaptation's halo form.
                float g[DEF_Q];
                amr_load_ep(f, nbr, (u32)(src / AMR_B), (int)(src % AMR_B), ghosts ? sel & 1u : (sel >> (l - 1)) & 1u, g, ghosts);
#pragma unroll
                for (int j = 0; j < AMR_TQ / 4; j++) {
                    float4 q;
                    q.x = g[4 * j];
                    q.y = 4 * j + 1 < DEF_Q ? g[4 * j + 1] : 0.0f;
                    q.z = 4 * j + 2 < DEF_Q ? g[4 * j + 2] : 0.0f;
                    q.w = 4 * j + 3 < DEF_Q ? g[4 * j + 3] : 0.0f;
                    to[j] = q;
                }
            } else
#endif
            {
            const u64 base = (u64)(src / AMR_B) * DEF_Q * AMR_B + (u64)(src % AMR_B);
#pragma unroll
            for (int j = 0; j < AMR_TQ / 4; j++) {
                float4 q;
                q.x = dec(f[base + (u64)(4 * j) * AMR_B]);
                q.y = 4 * j + 1 < DEF_Q ? dec(f[base + (u64)(4 * j + 1) * AMR_B]) : 0.0f;
                q.z = 4 * j + 2 < DEF_Q ? dec(f[base + (u64)(4 * j + 2) * AMR_B]) : 0.0f;
                q.w = 4 * j + 3 < DEF_Q ? dec(f[base + (u64)(4 * j + 3) * AMR_B]) : 0.0f;
                to[j] = q;
            }
            }
        }
    }
    // The cells to fill, compacted to the thread block's first threads (ghost cells are a
    // layer or two of each block: spread over all 256 threads, a third of every warp's lanes
    // idled through the interpolation).
    const u32 bal = __ballot_sync(0xffffffffu, mine);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) todo_n[warp] = __popc(bal);
    __syncthreads();
    u32 before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        before += w < warp ? todo_n[w] : 0u;
        total += todo_n[w];
    }
    if (mine) todo[before + __popc(bal & ((1u << lane) - 1u))] = (unsigned char)threadIdx.x;
    __syncthreads();
    if (threadIdx.x >= total) return;
    // This thread now fills the cell of thread `me` (same block of the list, same arithmetic).
    const int me = todo[threadIdx.x];
    const u32 mid = ids[((u64)blockIdx.x * blockDim.x + me) / AMR_B];
    const int mlb = me / AMR_B, mcell = me % AMR_B;
    const u64 mat = (u64)mid * AMR_B + mcell;
    const u32 ml = mode == AMR_PROLONG_GHOSTS ? l_step : level[mid];
    float out[DEF_Q];
    if (mode == AMR_PROLONG_NEW && solid[mat]) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) out[i] = 0.0f;
    } else {
        AmrRegionCells mtile = {tile_v[mlb], tile_h[mlb], {0, 0, 0}};
        for (int a = 0; a < DEF_D; a++) mtile.lo[a] = 2 * (pos[3 * (u64)mid + a] & 1) - 1;
        int k[3], side[3];
        amr_parent_cell(pos, mid, mcell, k, side);
        amr_prolong_from(mtile, prm, ml, k, side, out);
    }
#if AMR_INPLACE
    const bool ghosts = mode == AMR_PROLONG_GHOSTS;
    if (ghosts || !(sel & AMR_FORM_PLAIN)) {
        amr_store_ep(fa, nbr, mid, mcell, ghosts ? (sel >> 1) & 1u : (sel >> ml) & 1u, out, ghosts);
        return;
    }
    amr_store(fa, (long long)mat, out);
#else
    amr_store((sel & 2u) ? fb : fa, (long long)mat, out);
#endif
}
extern "C" __global__ void __launch_bounds__(256, AMR_INTERP_MINB) amr_interpolate(const u32* __restrict__ ids, const u32 count, const u32 l_step, const float* __restrict__ prm, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel, const u32 mode, const unsigned char* __restrict__ level, const unsigned char* __restrict__ valid, const unsigned char* __restrict__ fresh) {
    amr_interpolate_in<false>(ids, count, l_step, prm, pos, parent, child, nbr, cmask, solid, fa, fb, sel, mode, level, valid, fresh);
}
extern "C" __global__ void __launch_bounds__(256, AMR_INTERP_MINB) amr_interpolate_adapt(const u32* __restrict__ ids, const u32 count, const u32 l_step, const float* __restrict__ prm, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel, const u32 mode, const unsigned char* __restrict__ level, const unsigned char* __restrict__ valid, const unsigned char* __restrict__ fresh) {
    amr_interpolate_in<true>(ids, count, l_step, prm, pos, parent, child, nbr, cmask, solid, fa, fb, sel, mode, level, valid, fresh);
}

// The restriction of cell `cell` of block id (level lc) from its children with the plain
// average (rescaled by 2 tau_lc / tau_{lc+1}), else the mean of its fine cells that hold data.
// False if none does.
__device__ bool amr_restrict_plain(const AmrMesh& m, const fpxx* __restrict__ f, const float* __restrict__ prm, u32 lc, u32 id, int cell, float* out) {
    float tf, tc, ff[3], fc[3];
    amr_level(prm, lc + 1, tf, ff);
    amr_level(prm, lc, tc, fc);
    const float r = 2.0f * tc / tf;
    int f0[3];
    const u32 j = amr_child_under(cell, f0);
    const u32 ch = m.child[id] + j;
    AmrTaps plain;
    taps_plain(plain);
    if (amr_tensor_sum(m, f, plain, ch, f0, false, nullptr, ff, fc, r, out)) return true;
    return amr_mean(m, f, ch, f0, 1, false, ff, fc, r, out);
}

// The restriction's taps along one axis, as a pattern: the offsets from the lowest child cell
// and their weights (amr_average's; lbm.rs average builds the same).
#define AMR_TAP_LINEAR 0  // 0, 1: 1/2, 1/2
#define AMR_TAP_DOWN 1    // -1, 0, 1: -1/8, 3/4, 3/8
#define AMR_TAP_UP 2      // 0, 1, 2: 3/8, 3/4, -1/8
#define AMR_TAP_CUBIC 3   // -1, 0, 1, 2: -1/16, 9/16, 9/16, -1/16
#define AMR_TAP_ONE 4     // 0: 1 (the axes a 2D lattice has not)
__device__ __forceinline__ int amr_tap_n(int p) { return p == AMR_TAP_CUBIC ? 4 : p == AMR_TAP_ONE ? 1 : p == AMR_TAP_LINEAR ? 2 : 3; }
__device__ __forceinline__ int amr_tap_o(int p, int t) { return (p == AMR_TAP_DOWN || p == AMR_TAP_CUBIC) ? t - 1 : t; }
__device__ __forceinline__ float amr_tap_w(int p, int t) {
    switch (p) {
    case AMR_TAP_LINEAR: return 0.5f;
    case AMR_TAP_DOWN: return t == 0 ? -0.125f : t == 1 ? 0.75f : 0.375f;
    case AMR_TAP_UP: return t == 0 ? 0.375f : t == 1 ? 0.75f : -0.125f;
    case AMR_TAP_CUBIC: return (t == 0 || t == 3) ? -1.0f / 16.0f : 9.0f / 16.0f;
    default: return 1.0f;
    }
}

// Restrict the interface cells of level l (>= 1) into the parent-of-interface cells of level
// l - 1 blocks `ids` (those that feed a coarser leaf; lbm.rs average): per axis (-1, 9, 9,
// -1)/16 where all four fine cells hold data, one-sided (3/8, 3/4, -1/8) away from the stale
// ghosts, else the plain average; rescaled by 2 tau_{l-1} / tau_l.
// The fine level's DDFs are read from fa or fb (sel bit 0), the parents' written to fa or fb
// (sel bit 1).
// A thread block of 256 threads takes AMR_AVG_CELLS cells (whole blocks), lists the ones to
// restrict in shared memory, and gives each AMR_AVG_G threads (a group, inside one warp):
// the group's thread j sums the taps of rows j, j + G, ... (row ty + 4 tz: (ty, tz) of the
// tensor product) in order, the first 2 D threads check whether the fine cells beyond the
// children hold data (the taps per axis), and the threads' sums are added pairwise across the
// group (lowest bit of j first: lbm.rs tensor_sum_in_lanes adds them in the same order; the
// plain average, where a cell of the taps holds no data, goes through the group the same
// way). One thread a cell walked 64 taps of dependent mesh lookups and loads one after another (ncu:
// 69 us, 9 active threads a warp; 16 threads a cell, one row each: 40 us).
// Cells a thread block lists (64, 128 or 256: one to four blocks in 3D, four to sixteen in 2D):
// more than one block's keep more of its threads busy (a block's interface cells are a layer or
// two of it).
#ifndef AMR_AVG_CELLS
#define AMR_AVG_CELLS 128
#endif
#ifndef AMR_AVG_G
#if DEF_D == 3
#define AMR_AVG_G 8
#else
#define AMR_AVG_G 4
#endif
#endif
// A restricted parent cell's DDFs into fa or fb (sel bit 1), or in place at its level's parity.
__device__ __forceinline__ void amr_average_store(fpxx* fa, fpxx* fb, u32 sel, const u32* __restrict__ nbr, u32 id, int cell, const float* acc) {
#if AMR_INPLACE
    (void)fb;
    amr_store_ep(fa, nbr, id, cell, (sel >> 1) & 1u, acc);
#else
    (void)nbr;
    amr_store((sel & 2u) ? fb : fa, (long long)((u64)id * AMR_B + cell), acc);
#endif
}
extern "C" __global__ void __launch_bounds__(256, AMR_AVG_MINB) amr_average(const u32* __restrict__ ids, const u32 count, const u32 l, const float* __restrict__ prm, AMR_ARGS, fpxx* fa, fpxx* fb, const u32 sel) {
    __shared__ unsigned char todo[AMR_AVG_CELLS];
    __shared__ u32 wmask[AMR_AVG_CELLS / 32];
    // Launched with a thread block per 64 cells: with AMR_AVG_CELLS above that, the thread
    // blocks past the list's end have nothing to do.
    const u32 b0 = blockIdx.x * (AMR_AVG_CELLS / AMR_B);
    if (b0 >= count) return;
    const int tid = threadIdx.x;
    if (tid < AMR_AVG_CELLS) {
        const u32 j = b0 + tid / AMR_B;
        bool keep = false;
        if (j < count) {
            const u64 at = (u64)ids[j] * AMR_B + tid % AMR_B;
            keep = cmask[at] == CM_POI && !solid[at];
        }
        const u32 b = __ballot_sync(0xffffffffu, keep);
        if ((tid & 31) == 0) wmask[tid >> 5] = b;
    }
    __syncthreads();
    u32 n = 0, before = 0;
#pragma unroll
    for (int k = 0; k < AMR_AVG_CELLS / 32; k++) {
        before += k < (tid >> 5) ? __popc(wmask[k]) : 0u;
        n += __popc(wmask[k]);
    }
    if (tid < AMR_AVG_CELLS) {
        const u32 mine = wmask[tid >> 5], lt = (1u << (tid & 31)) - 1u;
        if ((mine >> (tid & 31)) & 1u) todo[before + __popc(mine & lt)] = (unsigned char)tid;
    }
    __syncthreads();
    if (n == 0) return;
    AMR_MESH;
#if AMR_INPLACE
    // The fine level at its parity; the parents written at theirs.
    m.q = (int)(sel & 1u);
    const fpxx* f = fa;
#else
    const fpxx* f = (sel & 1u) ? fb : fa;
#endif
    float tf, tc, ff[3], fc[3];
    amr_level(prm, l, tf, ff);
    amr_level(prm, l - 1, tc, fc);
    const float r = 2.0f * tc / tf;
    const int lane = tid % AMR_AVG_G;
    const int first = (tid & 31) - lane;  // the group's first lane in its warp
    for (u32 w0 = 0; w0 < n; w0 += 256 / AMR_AVG_G) {
        const u32 w = w0 + tid / AMR_AVG_G;
        const bool act = w < n;
        const int slot = act ? todo[w] : 0;
        const u32 id = act ? ids[b0 + slot / AMR_B] : 0;
        const int cell = slot % AMR_B;
        int f0[3];
        const u32 ch = act ? child[id] + amr_child_under(cell, f0) : 0;
        if (!act) f0[0] = f0[1] = f0[2] = 0;
        // Whether the fine cells one below and two above the children hold data, per axis.
        bool chk = false;
        if (act && lane < 2 * DEF_D) {
            int kk[3] = {f0[0], f0[1], f0[2]};
            kk[lane / 2] += (lane & 1) ? 2 : -1;
            chk = amr_cell_at(m, ch, kk, false) >= 0;
        }
        const u32 have = __ballot_sync(0xffffffffu, chk) >> first;
        // The taps per axis as a pattern (amr_tap): cubic where both cells beyond the children
        // hold data, one-sided away from the one that does not, else linear.
        int full[3] = {AMR_TAP_ONE, AMR_TAP_ONE, AMR_TAP_ONE};
#pragma unroll
        for (int a = 0; a < DEF_D; a++) {
            const bool lo = (have >> (2 * a)) & 1u, hi = (have >> (2 * a + 1)) & 1u;
            full[a] = lo && hi ? AMR_TAP_CUBIC : hi ? AMR_TAP_UP : lo ? AMR_TAP_DOWN : AMR_TAP_LINEAR;
        }
        // These taps, else (a cell of their tensor product holds no data: a ghost or obstacle
        // cell) the plain average of the 2^D children, both through the group; else the mean of
        // the fluid children (one thread).
        bool pending = act;
        float acc[DEF_Q];
        for (int attempt = 0; attempt < 2; attempt++) {
            if (!__any_sync(0xffffffffu, pending)) break;
            int pat[3] = {full[0], full[1], full[2]};
            if (attempt == 1) {
#pragma unroll
                for (int a = 0; a < DEF_D; a++) pat[a] = AMR_TAP_LINEAR;
            }
            // This thread's rows: the cells first (independent lookups), then their DDFs.
            constexpr int RPT = (DEF_D == 3 ? 16 : 4) / AMR_AVG_G;  // rows a thread
            u32 at[RPT][4];
            bool ok = true;
#pragma unroll
            for (int row = 0; row < RPT; row++) {
                const int j = lane + row * AMR_AVG_G, ty = j % 4, tz = j / 4;
                const bool in_taps = pending && ty < amr_tap_n(pat[1]) && tz < amr_tap_n(pat[2]);
#pragma unroll
                for (int tx = 0; tx < 4; tx++) {
                    at[row][tx] = AMR_NONE;
                    if (in_taps && tx < amr_tap_n(pat[0])) {
                        const int k[3] = {f0[0] + amr_tap_o(pat[0], tx), f0[1] + amr_tap_o(pat[1], ty), f0[2] + amr_tap_o(pat[2], tz)};
                        const long long c = amr_cell_at(m, ch, k, false);
                        at[row][tx] = c >= 0 ? (u32)c : AMR_NONE;
                        ok = ok && c >= 0;
                    }
                }
            }
            const bool all = ((__ballot_sync(0xffffffffu, !ok) >> first) & ((1u << (AMR_AVG_G - 1) << 1) - 1u)) == 0;
#pragma unroll
            for (int i = 0; i < DEF_Q; i++) acc[i] = 0.0f;
#pragma unroll
            for (int row = 0; row < RPT; row++) {
                const int j = lane + row * AMR_AVG_G, ty = j % 4, tz = j / 4;
                if (!all || !pending || ty >= amr_tap_n(pat[1]) || tz >= amr_tap_n(pat[2])) continue;
                const float wyz = amr_tap_w(pat[1], ty), wz = amr_tap_w(pat[2], tz);
#pragma unroll
                for (int tx = 0; tx < 4; tx++) {
                    if (tx < amr_tap_n(pat[0])) {
                        const float wt = amr_tap_w(pat[0], tx) * wyz * wz;
#if AMR_INPLACE
                        float g[DEF_Q];
                        amr_load_ep(f, nbr, at[row][tx] / AMR_B, (int)(at[row][tx] % AMR_B), (u32)m.q, g);
#pragma unroll
                        for (int i = 0; i < DEF_Q; i++) acc[i] += wt * g[i];
#else
                        const fpxx* src = f + ((u64)(at[row][tx] / AMR_B) * DEF_Q * AMR_B + at[row][tx] % AMR_B);
#pragma unroll
                        for (int i = 0; i < DEF_Q; i++) acc[i] += wt * dec(src[i * AMR_B]);
#endif
                    }
                }
            }
#pragma unroll
            for (int s = 1; s < AMR_AVG_G; s <<= 1) {
#pragma unroll
                for (int i = 0; i < DEF_Q; i++) acc[i] = acc[i] + __shfl_xor_sync(0xffffffffu, acc[i], s);
            }
            if (pending && all) {
                if (lane == 0) {
                    amr_rescale(acc, ff, fc, r);
                    amr_average_store(fa, fb, sel, nbr, id, cell, acc);
                }
                pending = false;
            }
        }
        if (pending && lane == 0 && amr_mean(m, f, ch, f0, 1, false, ff, fc, r, acc)) amr_average_store(fa, fb, sel, nbr, id, cell, acc);
    }
}

// The field planes of the finest grid (nx * ny * nz cells; plane p at p * N: rho, ux, uy, uz,
// velocity with half the level's force) from the leaves among blocks `ids` (level l, finest
// level lmax): each leaf cell fills the 2^(lmax - l) finest cells per axis it covers (the
// solver's fill_fields); the finest grid's obstacle cells (`flags` nonzero) get rho 1, u 0.
extern "C" __global__ void amr_planes(const u32* __restrict__ ids, const u32 count, const u32 l, const u32 lmax, const float* __restrict__ prm, const int* __restrict__ pos, const u32* __restrict__ child, const unsigned char* __restrict__ solid, const fpxx* __restrict__ f, const unsigned char* __restrict__ flags, const u32 nx, const u32 ny, const u32 nz, float* __restrict__ planes) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)count * AMR_B) return;
    const u32 id = ids[t / AMR_B];
    if (child[id] != AMR_NONE) return;
    const int cell = (int)(t % AMR_B);
    float rm1 = 0.0f, u[3] = {0.0f, 0.0f, 0.0f};
    // A solid cell of the forest shows the rest state (its slots may hold its neighbours'
    // values in place), also under finest cells the obstacles do not cover.
    if (!solid[(u64)id * AMR_B + cell]) {
        float tau, force[3], g[DEF_Q];
        amr_level(prm, l, tau, force);
        amr_load(f, (long long)((u64)id * AMR_B + cell), g);
        moments(g, force[0], force[1], force[2], rm1, u[0], u[1], u[2]);
    }
    int c[3];
    amr_coords(cell, c);
    const u32 s = 1u << (lmax - l);
    u32 lo[3] = {0, 0, 0}, ext[3] = {1, 1, 1};
    for (int a = 0; a < DEF_D; a++) {
        lo[a] = ((u32)pos[3 * (u64)id + a] * 4u + (u32)c[a]) * s;
        ext[a] = s;
    }
    const u64 n = (u64)nx * ny * nz;
    for (u32 z = lo[2]; z < lo[2] + ext[2] && z < nz; z++)
        for (u32 y = lo[1]; y < lo[1] + ext[1] && y < ny; y++)
            for (u32 x = lo[0]; x < lo[0] + ext[0] && x < nx; x++) {
                const u64 at = (u64)x + (u64)nx * ((u64)y + (u64)ny * z);
                const bool obstacle = flags[at] != 0;
                planes[at] = obstacle ? 1.0f : rm1 + 1.0f;
                planes[n + at] = obstacle ? 0.0f : u[0];
                planes[2 * n + at] = obstacle ? 0.0f : u[1];
                planes[3 * n + at] = obstacle ? 0.0f : u[2];
            }
}

// Statistics on the device (solver.rs stats, without a host copy): over blocks `ids` (any
// levels; level l's DDFs in fa or fb by bit l of `odd`): out[0] the mass of the leaves' fluid
// cells (rho times the cell volume 2^{-lD}), out[1] (the bits of a non-negative double) their
// largest |u|, out[2] (bits) nonzero where a density or speed is not finite; with `forces`,
// out[3 ..] the momentum exchanged with solid cells of same-level neighbours (lbm.rs
// obstacle_force); out[6] and out[7] (bits) the density range: the complement of the smallest
// density's order key and the largest's (amr_rho_key), both maxima so that zeros start them. The sums are double atomics: the host's numbers up to the order of the
// additions. 256 threads a thread block.
// A float's order as an unsigned key (unsigned comparison of keys = comparison of floats).
__device__ __forceinline__ unsigned long long amr_rho_key(const float v) {
    const u32 b = __float_as_uint(v);
    return (unsigned long long)((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}

// A cell's DDFs as amr_stats finds them: two buffers, f the level's; in place at the level's
// parity (bit l of `odd`), or plain where bit 31 says the data is at rest.
__device__ __forceinline__ void amr_stats_load(const fpxx* __restrict__ f, const u32* __restrict__ nbr, u32 id, int cell, u32 l, u32 odd, float* g) {
#if AMR_INPLACE
    if (odd >> 31) amr_load(f, (long long)id * AMR_B + cell, g);
    else amr_load_ep(f, nbr, id, cell, (odd >> l) & 1u, g);
#else
    (void)nbr;
    (void)l;
    (void)odd;
    amr_load(f, (long long)id * AMR_B + cell, g);
#endif
}
#if AMR_CURVED
#define AMR_STATS_CURVED_ARG , const int* __restrict__ pos, const u32* __restrict__ walls
// The momentum the next step exchanges over the curved links `curved` (bit i: along c_i, row
// `row` of the table) of cell `cell` of block id (level l), added to fr: c_i (f*_i(x) + w_i +
// b + w_k) times `scale`, k = opposite(i), with b the value the link brings back (walls.rs
// next_back): from the post-collision values f* of the cell and, for q < 1/2, of its upstream
// cell x - c_i where that is a fluid cell of the level (else half-way), collided now (lbm.rs
// obstacle_force_on). Not inlined: its collisions stay out of amr_stats' unrolled loop.
__device__ __noinline__ void amr_curved_force(const u32* __restrict__ walls, const float* __restrict__ prm, const u32* __restrict__ nbr, const unsigned char* __restrict__ solid, const fpxx* __restrict__ f, u32 odd, u32 id, int cell, u32 l, int row, u32 curved, double scale, double* fr) {
    float g[DEF_Q], force[3];
    amr_stats_load(f, nbr, id, cell, l, odd, g);
    amr_step_collide(prm, l, g, force);
    int c[3];
    amr_coords(cell, c);
#pragma unroll 1
    for (int i = 1; i < DEF_Q; i++) {
        if (!((curved >> i) & 1u)) continue;
        const float q = amr_curved_q(walls, row, i);
        const int k = (int)opposite((u32)i);
        float b;
        if (q >= 0.5f) {
            const float s = 0.5f / q;
            b = s * g[i] + (1.0f - s) * g[k];
        } else {
            b = g[i];
            const int mi[3] = {-lat_cx(i), -lat_cy(i), -lat_cz(i)};
            int e[3], sv[3];
            amr_offset(c, mi, e, sv);
            const u32 n = nbr[(u64)id * AMR_ND + amr_dir(e)];
            if (n != AMR_NONE && !(n & AMR_COARSER)) {
                const int sc = amr_cell(sv[0], sv[1], sv[2]);
                if (!solid[(u64)n * AMR_B + sc]) {
                    float up[DEF_Q];
                    amr_stats_load(f, nbr, n, sc, l, odd, up);
                    amr_step_collide(prm, l, up, force);
                    b = 2.0f * q * g[i] + (1.0f - 2.0f * q) * up[i];
                }
            }
        }
        const double v = (double)(g[i] + lat_w(i)) + (double)(b + lat_w(k));
        const int ci[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
        for (int a = 0; a < DEF_D; a++) fr[a] += v * (double)ci[a] * scale;
    }
}
#else
#define AMR_STATS_CURVED_ARG
#endif

extern "C" __global__ void __launch_bounds__(256) amr_stats(const u32* __restrict__ ids, const u32 count, const float* __restrict__ prm, const unsigned char* __restrict__ level, const u32* __restrict__ child, const u32* __restrict__ nbr, const unsigned char* __restrict__ cmask, const unsigned char* __restrict__ solid, const fpxx* __restrict__ fa, const fpxx* __restrict__ fb, const u32 odd, const u32 forces, double* out AMR_STATS_CURVED_ARG) {
    __shared__ double red[4][256];
    __shared__ double top[256];
    __shared__ unsigned long long rlo[256], rhi[256];
    __shared__ int any_bad;
    if (threadIdx.x == 0) any_bad = 0;
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    double m = 0.0, sp = 0.0, fr[3] = {0.0, 0.0, 0.0};
    unsigned long long klo = 0ull, khi = 0ull;
    __syncthreads();
    if (t < (u64)count * AMR_B) {
        const u32 id = ids[t / AMR_B];
        const int cell = (int)(t % AMR_B);
        const u64 at = (u64)id * AMR_B + cell;
        const u32 l = level[id];
#if AMR_INPLACE
        const fpxx* __restrict__ f = fa;
        (void)fb;
#else
        const fpxx* __restrict__ f = ((odd >> l) & 1u) ? fb : fa;
#endif
        const bool leaf = child[id] == AMR_NONE, fluid = !solid[at];
        const u64 own = (u64)id * DEF_Q * AMR_B + cell;
        if (leaf && fluid) {
            float tau, force[3], g[DEF_Q], rm1, u[3];
            amr_level(prm, l, tau, force);
#if AMR_INPLACE
            if (odd >> 31) amr_load(f, (long long)at, g);  // at rest: the plain layout
            else amr_load_ep(f, nbr, id, cell, (odd >> l) & 1u, g);
#else
            amr_load(f, (long long)at, g);
#endif
            moments(g, force[0], force[1], force[2], rm1, u[0], u[1], u[2]);
            const float rho = rm1 + 1.0f;
            const double s = sqrt((double)(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]));
            if (!isfinite(rho) || !isfinite(s)) {
                any_bad = 1;
            } else {
                m = (double)rho * (1.0 / (double)(1u << (l * DEF_D)));
                sp = s;
                khi = amr_rho_key(rho);
                klo = ~khi & 0xffffffffull;
            }
        }
        const int mk = cmask[at];
        if (forces && fluid && (leaf ? mk != CM_GHOST : mk == CM_POG)) {
            const double scale = 1.0 / (double)(1u << (l * (DEF_D - 1)));
            int c[3];
            amr_coords(cell, c);
#if AMR_CURVED
            // The links with interpolated walls (bit i), added by amr_curved_force below.
            int row = -2;
            u32 curved = 0u;
#endif
#pragma unroll
            for (int i = 1; i < DEF_Q; i++) {
                const int ci[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
                int e[3], sv[3];
                amr_offset(c, ci, e, sv);
                const u32 link = nbr[(u64)id * AMR_ND + amr_dir(e)];
                if (link == AMR_NONE || (link & AMR_COARSER) || !solid[(u64)link * AMR_B + amr_cell(sv[0], sv[1], sv[2])]) continue;
#if AMR_CURVED
                if (l == walls[1]) {
                    if (row == -2) row = amr_curved_row(walls, pos, id, cell);
                    if (row >= 0 && amr_curved_q(walls, row, i) > 0.0f) {
                        curved |= 1u << i;
                        continue;
                    }
                }
#endif
#if AMR_INPLACE
                const int o = (int)opposite((u32)i);
                const double back = (double)(dec(f[(odd >> 31) ? (amr_ix)(own + (u64)o * AMR_B) : amr_ep_ix(nbr, id, cell, o, (odd >> l) & 1u)]) + lat_w(i));
#else
                const double back = (double)(dec(f[own + (u64)opposite((u32)i) * AMR_B]) + lat_w(i));
#endif
#pragma unroll
                for (int a = 0; a < DEF_D; a++) fr[a] += 2.0 * back * (double)ci[a] * scale;
            }
#if AMR_CURVED
            if (curved != 0u) amr_curved_force(walls, prm, nbr, solid, f, odd, id, cell, l, row, curved, scale, fr);
#endif
        }
    }
    red[0][threadIdx.x] = m;
    red[1][threadIdx.x] = fr[0];
    red[2][threadIdx.x] = fr[1];
    red[3][threadIdx.x] = fr[2];
    top[threadIdx.x] = sp;
    rlo[threadIdx.x] = klo;
    rhi[threadIdx.x] = khi;
    __syncthreads();
    for (u32 k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            for (int r = 0; r < 4; r++) red[r][threadIdx.x] += red[r][threadIdx.x + k];
            top[threadIdx.x] = fmax(top[threadIdx.x], top[threadIdx.x + k]);
            rlo[threadIdx.x] = max(rlo[threadIdx.x], rlo[threadIdx.x + k]);
            rhi[threadIdx.x] = max(rhi[threadIdx.x], rhi[threadIdx.x + k]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&out[0], red[0][0]);
        atomicMax((unsigned long long*)&out[1], (unsigned long long)__double_as_longlong(top[0]));
        atomicMax((unsigned long long*)&out[6], rlo[0]);
        atomicMax((unsigned long long*)&out[7], rhi[0]);
        if (any_bad) atomicMax((unsigned long long*)&out[2], 1ull);
        if (forces)
            for (int a = 0; a < 3; a++) atomicAdd(&out[3 + a], red[1 + a][0]);
    }
}

// ---- Adaptation: the criterion and the data transfer (lbm.rs block_max_of_gradient,
// adapt_to, refresh_exposed). The forest's mesh passes still run on the host; these kernels
// keep the DDFs on the device through an adaptation.

// Block maximum of |vorticity| (q_crit = 0) or of the Q criterion (q_crit = 1) over the fluid
// cells of every leaf among `ids` (one thread block of B threads per listed block), per unit
// time of level 0, with velocity differences inside the block (central, one-sided at its
// faces; solid cells at rest). Non-leaves get 0.
// The DDFs are read where the steps left them (no settle first): level l's in fb where bit l
// of `par` is set (two buffers: an odd number of steps since the last settle), else in fa; in
// place (`ep` nonzero) through the accessor at parity bit l of `par`, or plain where `ep` is 0
// (at rest).
extern "C" __global__ void amr_block_max(const u32* __restrict__ ids, const u32 q_crit, const float* __restrict__ prm, const unsigned char* __restrict__ level, const u32* __restrict__ child, const unsigned char* __restrict__ solid, const u32* __restrict__ nbr, const fpxx* __restrict__ fa, const fpxx* __restrict__ fb, const u32 par, const u32 ep, float* __restrict__ out) {
    __shared__ float u[3][AMR_B];
    __shared__ float best[AMR_B];
    const u32 id = ids[blockIdx.x];
    const int cell = (int)threadIdx.x;
    if (child[id] != AMR_NONE) {
        if (cell == 0) out[id] = 0.0f;
        return;
    }
    const u32 l = level[id];
    float tau, force[3];
    amr_level(prm, l, tau, force);
    const u64 at = (u64)id * AMR_B + cell;
    const bool fluid = !solid[at];
    if (fluid) {
        float g[DEF_Q], rm1;
        const u32 odd = (par >> l) & 1u;
#if AMR_INPLACE
        (void)fb;
        if (ep) amr_load_ep(fa, nbr, id, cell, odd, g);
        else amr_load(fa, (long long)at, g);
#else
        (void)nbr;
        (void)ep;
        amr_load(odd ? fb : fa, (long long)at, g);
#endif
        moments(g, force[0], force[1], force[2], rm1, u[0][cell], u[1][cell], u[2][cell]);
    } else {
        u[0][cell] = 0.0f;
        u[1][cell] = 0.0f;
        u[2][cell] = 0.0f;
    }
    __syncthreads();
    float v = 0.0f;
    if (fluid) {
        const float scale = (float)(1u << l);
        int c[3];
        amr_coords(cell, c);
        float g[3][3] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
        for (int a = 0; a < DEF_D; a++) {
            int lo[3] = {c[0], c[1], c[2]}, hi[3] = {c[0], c[1], c[2]};
            lo[a] = max(c[a] - 1, 0);
            hi[a] = min(c[a] + 1, 3);
            const float d = (float)(hi[a] - lo[a]);
            const int cl = amr_cell(lo[0], lo[1], lo[2]), ch = amr_cell(hi[0], hi[1], hi[2]);
            for (int k = 0; k < 3; k++) g[a][k] = (u[k][ch] - u[k][cl]) / d * scale;
        }
        if (q_crit) {
            float s2 = 0.0f, o2 = 0.0f;
            for (int a = 0; a < 3; a++) {
                for (int b = 0; b < 3; b++) {
                    const float sv = 0.5f * (g[a][b] + g[b][a]), ov = 0.5f * (g[a][b] - g[b][a]);
                    s2 += sv * sv;
                    o2 += ov * ov;
                }
            }
            v = 0.5f * (o2 - s2);
        } else {
            const float w0 = g[1][2] - g[2][1], w1 = g[2][0] - g[0][2], w2 = g[0][1] - g[1][0];
            v = sqrtf(w0 * w0 + w1 * w1 + w2 * w2);
        }
    }
    best[cell] = fmaxf(0.0f, v);
    __syncthreads();
    for (int h = AMR_B / 2; h > 0; h >>= 1) {
        if (cell < h) best[cell] = fmaxf(best[cell], best[cell + h]);
        __syncthreads();
    }
    if (cell == 0) out[id] = best[0];
}

// Operations of amr_transfer, run in this order by AmrGpu::transfer around the host's mesh
// update (each over its own list of blocks, one thread per (block, cell)):
#define XF_VALID 0       // old mesh, every active block: whether each cell holds current data
#define XF_COARSEN 1     // old mesh, blocks being coarsened: every cell from its old children
#define XF_NEW 2         // new mesh, new children: interpolated from their parent's level (amr_interpolate_adapt)
#define XF_MASS 3        // new mesh, new children: shifted to their parent cell's mass (amr_mass_shift)
#define XF_CURRENT 4     // coarsened blocks and new children: every cell holds current data
#define XF_LEAF 5        // leaves of levels >= 1: exposed stale cells interpolated again (amr_interpolate_adapt)
#define XF_LEAF_MARK 6   // the same cells marked current (a pass of its own: XF_LEAF reads flags)
#define XF_PARENT 7      // non-leaves: stale stepped or averaged cells from their children

// XF_MASS over the new children `ids` (one thread per cell, 256 a thread block: whole
// children, each thread block's own), as lbm.rs shift_to_parent_mass: the fluid fine cells under
// a fluid parent cell get the parent cell's density minus their mean density, spread by the
// weights. Each thread sums its own cell's density into shared memory; the cells under one
// parent cell (all in one child) then add them up in the CPU's order (sub-cells ascending).
// `form`: the layout of the data (amr_form_q), `level` the blocks' levels.
extern "C" __global__ void __launch_bounds__(256) amr_mass_shift(const u32* __restrict__ ids, const u32 count, const u32* __restrict__ parent, const u32* __restrict__ child, const unsigned char* __restrict__ solid, const unsigned char* __restrict__ level, const u32* __restrict__ nbr, const u32 form, fpxx* f) {
    __shared__ float rho[256];
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool in = t < (u64)count * AMR_B;
    const int cell = (int)(threadIdx.x % AMR_B);
    const u32 ch = in ? ids[t / AMR_B] : 0;
    const u64 at = (u64)ch * AMR_B + cell;
    const bool fluid = in && !solid[at];
    const u32 lf = in ? level[ch] : 1u;
    float g[DEF_Q];
    if (fluid) {
        amr_load_q(f, nbr, (long long)at, amr_form_q(form, lf), g);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) sum += g[i];
        rho[threadIdx.x] = sum;
    }
    __syncthreads();
    if (!fluid) return;
    const u32 p = parent[ch];
    const u32 j = ch - child[p];
    int c[3], pc[3] = {0, 0, 0}, f0[3] = {0, 0, 0};
    amr_coords(cell, c);
    for (int a = 0; a < DEF_D; a++) {
        pc[a] = 2 * (int)((j >> a) & 1u) + c[a] / 2;
        f0[a] = 2 * (c[a] / 2);
    }
    const u64 pat = (u64)p * AMR_B + amr_cell(pc[0], pc[1], pc[2]);
    if (solid[pat]) return;
    const int first = (int)threadIdx.x - cell;
    float mean = 0.0f;
    int n = 0;
    for (int sub = 0; sub < (1 << DEF_D); sub++) {
        int k[3] = {f0[0], f0[1], f0[2]};
        for (int a = 0; a < DEF_D; a++) k[a] += (sub >> a) & 1;
        const int fc = amr_cell(k[0], k[1], k[2]);
        if (!solid[(u64)ch * AMR_B + fc]) {
            mean += rho[first + fc];
            n++;
        }
    }
    mean = mean / (float)n;
    float gp[DEF_Q];
    amr_load_q(f, nbr, (long long)pat, amr_form_q(form, lf - 1), gp);
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) d += gp[i];
    d = d - mean;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) g[i] += d * lat_w(i);
    amr_store_q(f, nbr, (long long)at, amr_form_q(form, lf), g);
}

// `form`: the layout of the data (amr_form_q).
extern "C" __global__ void amr_transfer(const u32* __restrict__ ids, const u32 count, const u32 op, const float* __restrict__ prm, const unsigned char* __restrict__ level, AMR_ARGS, unsigned char* valid, const unsigned char* __restrict__ fresh, const u32 form, fpxx* f) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)count * AMR_B) return;
    const u32 id = ids[t / AMR_B];
    const int cell = (int)(t % AMR_B);
    const u64 at = (u64)id * AMR_B + cell;
    const int mk = cmask[at];
    const bool leaf = child[id] == AMR_NONE;
    const u32 l = level[id];
    AmrMesh m = {pos, parent, child, nbr, cmask, solid, AMR_OK_MASKS, valid, fresh, -1};
    float out[DEF_Q];
    switch (op) {
    case XF_VALID:
        valid[at] = leaf ? mk != CM_GHOST : (mk == CM_POG || mk == CM_POI);
        return;
    case XF_COARSEN:
        m.ok = AMR_OK_FLUID;
        m.q = amr_form_q(form, l + 1);
        if (solid[at] || !amr_restrict_plain(m, f, prm, l, id, cell, out)) {
#pragma unroll
            for (int i = 0; i < DEF_Q; i++) out[i] = 0.0f;
        }
        amr_store_q(f, nbr, (long long)at, amr_form_q(form, l), out);
        return;
    case XF_CURRENT:
        valid[at] = 1;
        return;
    case XF_LEAF_MARK:
        if (!leaf || l == 0 || mk == CM_GHOST || valid[at] || solid[at]) return;
        valid[at] = 1;
        return;
    case XF_PARENT:
        if (leaf || (mk != CM_POG && mk != CM_POI) || valid[at] || solid[at]) return;
        m.ok = AMR_OK_VALID;
        m.q = amr_form_q(form, l + 1);
        if (amr_restrict_plain(m, f, prm, l, id, cell, out)) amr_store_q(f, nbr, (long long)at, amr_form_q(form, l), out);
        return;
    }
}
