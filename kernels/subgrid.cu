// Compressed subgrids on the GPU (Flint et al. 2024; backend/cuda/subgrid.rs). This module is compiled
// with the dense kernels for one working-box size: DEF_NX x DEF_NY x DEF_NZ is a subgrid plus a
// one-cell ghost frame (DEF_BOX = 1), and the dense stream-collide kernels update only the
// cells inside the frame (in_box). A subgrid's **shell** (its outermost cell layer) is kept
// exact in one array of all shells; its **core** (the rest) is compressed. These kernels move
// values between the box and the shells, gather the box's flags and pack the core for the
// uncompressed mode. Box cell b = x + NX (y + NY z); box x = subgrid x + 1.

// Where a grid cell lives: per axis, `axis_map[a-offset + coordinate]` packs the subgrid index
// along the axis (high 16 bits) and the coordinate inside it (low 16 bits); `slab_len` holds
// the subgrid lengths of the three axes one after another. On several GPUs a GPU keeps, of a
// subgrid across a cut, only its two faces across the shared axis `ax` (those are all its boxes
// reach): its offset then has the top bit set, and a face cell's slot counts along the other
// two axes (lower one fastest), the low face first.
struct SubgridMap {
    const u32* axis_map;
    const u32* slab_len;
    const u64* shell_off;
    u32 n0, n1, n2;
    u32 c0, c1;
    u32 ax;
};

#define FACES_ONLY (1ull << 63)

__device__ __forceinline__ u32 shell_cells_of(u32 a, u32 b, u32 c) { return a * b * c - (a - 2u) * (b - 2u) * (c - 2u); }

// Index of cell u of a box of size s among its shell cells (order of subgrid.rs shell_index),
// or 0xffffffff for a core cell.
__device__ __forceinline__ u32 shell_index_of(u32 ux, u32 uy, u32 uz, u32 a, u32 b, u32 c) {
    const u32 face = a * b;
    if (uz == 0u) return ux + a * uy;
    if (uz == c - 1u) return face + ux + a * uy;
    const u32 base = 2u * face + (uz - 1u) * (2u * a + 2u * (b - 2u));
    if (uy == 0u) return base + ux;
    if (uy == b - 1u) return base + a + ux;
    if (ux == 0u) return base + 2u * a + 2u * (uy - 1u);
    if (ux == a - 1u) return base + 2u * a + 2u * (uy - 1u) + 1u;
    return 0xffffffffu;
}

// Shell slot (direction 0) and plane stride of the grid cell (g0, g1, g2); false for a core cell.
__device__ __forceinline__ bool shell_slot_at(const SubgridMap& m, u32 g0, u32 g1, u32 g2, u64& slot, u64& stride) {
    const u32 a0 = m.axis_map[g0], a1 = m.axis_map[m.n0 + g1], a2 = m.axis_map[m.n0 + m.n1 + g2];
    const u32 k0 = a0 >> 16, k1 = a1 >> 16, k2 = a2 >> 16;
    const u32 s0 = m.slab_len[k0], s1 = m.slab_len[m.c0 + k1], s2 = m.slab_len[m.c0 + m.c1 + k2];
    const u32 k = shell_index_of(a0 & 0xffffu, a1 & 0xffffu, a2 & 0xffffu, s0, s1, s2);
    if (k == 0xffffffffu) return false;
    const u32 id = k0 + m.c0 * (k1 + m.c1 * k2);
    const u64 off = m.shell_off[id];
    if (off & FACES_ONLY) {
        const u32 l[3] = {a0 & 0xffffu, a1 & 0xffffu, a2 & 0xffffu};
        const u32 s[3] = {s0, s1, s2};
        const u32 ua = m.ax == 0u ? 1u : 0u, va = m.ax == 2u ? 1u : 2u;
        const u32 face = s[ua] * s[va];
        if (l[m.ax] != 0u && l[m.ax] != s[m.ax] - 1u) return false;
        stride = 2ull * face;
        slot = (off & ~FACES_ONLY) + (l[m.ax] == 0u ? 0u : face) + l[ua] + s[ua] * l[va];
        return true;
    }
    stride = shell_cells_of(s0, s1, s2);
    slot = off + k;
    return true;
}

// The same for box cell (x, y, z) of the subgrid at `o`.
__device__ __forceinline__ bool shell_slot(const SubgridMap& m, u32 o0, u32 o1, u32 o2, u32 x, u32 y, u32 z, u64& slot, u64& stride) {
    const u32 g0 = (o0 + x + m.n0 - 1u) % m.n0, g1 = (o1 + y + m.n1 - 1u) % m.n1, g2 = (o2 + z + m.n2 - 1u) % m.n2;
    return shell_slot_at(m, g0, g1, g2, slot, stride);
}

// Distance of a box cell to the box's edge (0: ghost frame, 1: the subgrid's shell).
__device__ __forceinline__ u32 box_depth(u32 x, u32 y, u32 z) {
    return min(min(min(x, DEF_NX - 1u - x), min(y, DEF_NY - 1u - y)), min(z, DEF_NZ - 1u - z));
}

// The box's flags from the grid's (periodic wrap, as the dense solver's neighbours). `grid`
// holds the layers lo, lo + 1, ... (`len` of them, wrapping) along `axis`: the whole grid on one
// GPU, a GPU's slab and the layer beyond each cut on several.
extern "C" __global__ void box_flags(const unsigned char* __restrict__ grid, unsigned char* __restrict__ out, const u32 o0, const u32 o1, const u32 o2, const u32 n0, const u32 n1, const u32 n2, const u32 axis, const u32 lo, const u32 len) {
    const idx_t b = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= DEF_N) return;
    const u32 x = (u32)(b % DEF_NX), y = (u32)((b / DEF_NX) % DEF_NY), z = (u32)(b / ((idx_t)DEF_NX * DEF_NY));
    u32 g0 = (o0 + x + n0 - 1u) % n0, g1 = (o1 + y + n1 - 1u) % n1, g2 = (o2 + z + n2 - 1u) % n2;
    u32 m0 = n0, m1 = n1;
    if (axis == 0u) {
        g0 = (g0 + n0 - lo) % n0;
        m0 = len;
    } else if (axis == 1u) {
        g1 = (g1 + n1 - lo) % n1;
        m1 = len;
    } else {
        g2 = (g2 + n2 - lo) % n2;
    }
    out[b] = grid[(idx_t)g0 + (idx_t)m0 * ((idx_t)g1 + (idx_t)m1 * (idx_t)g2)];
}

// The box's two outer layers (ghost frame and shell) and the shells.
//   mode 0: fill the layers from the shells;
//   mode 1: mark in `changed` (a bit per direction) the values the step changed;
//   mode 2: write the marked values back to their owners' shells;
//   mode 3: write the subgrid's own shell layer (depth 1) to its shell (building a state).
// Marking before writing matters where a subgrid spans a periodic axis alone: its ghost frame
// and its shell are then two copies of the same cells, and only the copy a cell wrote changed.
extern "C" __global__ void box_outer(float* __restrict__ box, float* __restrict__ shells, u32* __restrict__ changed, const u32* __restrict__ axis_map, const u32* __restrict__ slab_len, const u64* __restrict__ shell_off, const u32 n0, const u32 n1, const u32 n2, const u32 c0, const u32 c1, const u32 ax, const u32 o0, const u32 o1, const u32 o2, const u32 mode) {
    const idx_t b = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= DEF_N) return;
    const u32 x = (u32)(b % DEF_NX), y = (u32)((b / DEF_NX) % DEF_NY), z = (u32)(b / ((idx_t)DEF_NX * DEF_NY));
    const u32 d = box_depth(x, y, z);
    if (d > 1u || (mode == 3u && d != 1u)) return;
    const SubgridMap m = {axis_map, slab_len, shell_off, n0, n1, n2, c0, c1, ax};
    u64 slot, stride;
    if (!shell_slot(m, o0, o1, o2, x, y, z, slot, stride)) return;
    if (mode == 0u) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) box[(idx_t)i * DEF_N + b] = shells[slot + (u64)i * stride];
    } else if (mode == 1u) {
        u32 bits = 0u;
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) {
            if (__float_as_uint(box[(idx_t)i * DEF_N + b]) != __float_as_uint(shells[slot + (u64)i * stride])) bits |= 1u << i;
        }
        changed[b] = bits;
    } else if (mode == 2u) {
        const u32 bits = changed[b];
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) {
            if (bits & (1u << i)) shells[slot + (u64)i * stride] = box[(idx_t)i * DEF_N + b];
        }
    } else {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) shells[slot + (u64)i * stride] = box[(idx_t)i * DEF_N + b];
    }
}

// The core (box cells at depth 2 and more) to packed planes (dir 0) or back (dir 1): the
// record of the uncompressed mode.
extern "C" __global__ void core_pack(float* __restrict__ box, unsigned* __restrict__ packed, const u32 dir) {
    const u32 cx = DEF_NX - 4u, cy = DEF_NY - 4u, cz = DEF_NZ - 4u;
    const idx_t cells = (idx_t)cx * cy * cz;
    const idx_t c = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cells) return;
    const u32 x = (u32)(c % cx) + 2u, y = (u32)((c / cx) % cy) + 2u, z = (u32)(c / ((idx_t)cx * cy)) + 2u;
    const idx_t b = (idx_t)x + (idx_t)DEF_NX * ((idx_t)y + (idx_t)DEF_NY * (idx_t)z);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        if (dir == 0u) packed[(idx_t)i * cells + c] = __float_as_uint(box[(idx_t)i * DEF_N + b]);
        else box[(idx_t)i * DEF_N + b] = __uint_as_float(packed[(idx_t)i * cells + c]);
    }
}

// The two cell planes at a cut between GPUs, each GPU holding its own subgrids and a copy of the
// shells of the subgrids across the cut (backend/cuda/subgrid/cuts.rs). Along `axis`, plane
// `own` (coordinate of this GPU's first or last layer) lies in its own shells and plane `halo`
// (the neighbour's layer next to it) in the copies. A step changes slots of both planes on both
// GPUs (each slot on one GPU only: in-place streaming gives every slot one writer a step), so
// after a step each GPU sends the neighbour both planes and keeps, of what it receives, the
// slots that changed there. A buffer holds plane 0 (own) then plane 1 (halo), each DEF_Q
// direction planes of `cells` = the plane's cells (the other two axes, the lower one fastest);
// `before` holds both planes as they were after the last exchange.
//   mode 0: pack both planes into `out`;
//   mode 1: merge: take the neighbour's value (its plane 1 for our plane 0 and the other way
//           round) where it differs from `before`, and keep the result in `before`;
//   mode 2: copy the neighbour's own plane into our halo plane and both into `before` (the
//           first exchange, after the state was built).
extern "C" __global__ void cut_planes(float* __restrict__ shells, float* __restrict__ out, float* __restrict__ before, const float* __restrict__ incoming, const u32* __restrict__ axis_map, const u32* __restrict__ slab_len, const u64* __restrict__ shell_off, const u32 n0, const u32 n1, const u32 n2, const u32 c0, const u32 c1, const u32 axis, const u32 own, const u32 halo, const u32 mode) {
    const u32 u_len = axis == 0u ? n1 : n0;
    const u32 v_len = axis == 2u ? n1 : n2;
    const idx_t cells = (idx_t)u_len * v_len;
    const idx_t j = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= 2 * cells) return;
    const u32 plane = (u32)(j / cells);
    const idx_t c = j - (idx_t)plane * cells;
    const u32 u = (u32)(c % u_len), v = (u32)(c / u_len);
    const u32 w = plane == 0u ? own : halo;
    const u32 g0 = axis == 0u ? w : u;
    const u32 g1 = axis == 1u ? w : (axis == 0u ? u : v);
    const u32 g2 = axis == 2u ? w : v;
    const SubgridMap m = {axis_map, slab_len, shell_off, n0, n1, n2, c0, c1, axis};
    u64 slot, stride;
    if (!shell_slot_at(m, g0, g1, g2, slot, stride)) return;
    const idx_t mine = (idx_t)plane * DEF_Q * cells + c, theirs = (idx_t)(1u - plane) * DEF_Q * cells + c;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        float* s = &shells[slot + (u64)i * stride];
        const idx_t k = mine + (idx_t)i * cells;
        if (mode == 0u) {
            out[k] = *s;
        } else if (mode == 1u) {
            const float in = incoming[theirs + (idx_t)i * cells];
            float now = *s;
            if (__float_as_uint(in) != __float_as_uint(before[k])) {
                now = in;
                *s = in;
            }
            before[k] = now;
        } else if (plane == 1u) {
            const float in = incoming[theirs + (idx_t)i * cells];
            *s = in;
            before[k] = in;
        } else {
            before[k] = *s;
        }
    }
}
