// Compressed subgrids on the GPU (Flint et al. 2024; backend/cuda/subgrid.rs). This module is compiled
// with the dense kernels for one working-box size: DEF_NX x DEF_NY x DEF_NZ is a subgrid plus a
// one-cell ghost frame (DEF_BOX = 1), and the dense stream-collide kernels update only the
// cells inside the frame (in_box). A subgrid's **shell** (its outermost cell layer) is kept
// exact in one array of all shells; its **core** (the rest) is compressed. These kernels move
// values between the box and the shells, gather the box's flags and pack the core for the
// uncompressed mode. Box cell b = x + NX (y + NY z); box x = subgrid x + 1.

// Where a grid cell lives: per axis, `axis_map[a-offset + coordinate]` packs the subgrid index
// along the axis (high 16 bits) and the coordinate inside it (low 16 bits); `slab_len` holds
// the subgrid lengths of the three axes one after another.
struct SubgridMap {
    const u32* axis_map;
    const u32* slab_len;
    const u64* shell_off;
    u32 n0, n1, n2;
    u32 c0, c1;
};

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

// Shell slot (direction 0) and plane stride of the grid cell at box cell (x, y, z) of the
// subgrid at `o`; false for a core cell.
__device__ __forceinline__ bool shell_slot(const SubgridMap& m, u32 o0, u32 o1, u32 o2, u32 x, u32 y, u32 z, u64& slot, u64& stride) {
    const u32 g0 = (o0 + x + m.n0 - 1u) % m.n0, g1 = (o1 + y + m.n1 - 1u) % m.n1, g2 = (o2 + z + m.n2 - 1u) % m.n2;
    const u32 a0 = m.axis_map[g0], a1 = m.axis_map[m.n0 + g1], a2 = m.axis_map[m.n0 + m.n1 + g2];
    const u32 k0 = a0 >> 16, k1 = a1 >> 16, k2 = a2 >> 16;
    const u32 s0 = m.slab_len[k0], s1 = m.slab_len[m.c0 + k1], s2 = m.slab_len[m.c0 + m.c1 + k2];
    const u32 k = shell_index_of(a0 & 0xffffu, a1 & 0xffffu, a2 & 0xffffu, s0, s1, s2);
    if (k == 0xffffffffu) return false;
    const u32 id = k0 + m.c0 * (k1 + m.c1 * k2);
    stride = shell_cells_of(s0, s1, s2);
    slot = m.shell_off[id] + k;
    return true;
}

// Distance of a box cell to the box's edge (0: ghost frame, 1: the subgrid's shell).
__device__ __forceinline__ u32 box_depth(u32 x, u32 y, u32 z) {
    return min(min(min(x, DEF_NX - 1u - x), min(y, DEF_NY - 1u - y)), min(z, DEF_NZ - 1u - z));
}

// The box's flags from the grid's (periodic wrap, as the dense solver's neighbours).
extern "C" __global__ void box_flags(const unsigned char* __restrict__ grid, unsigned char* __restrict__ out, const u32 o0, const u32 o1, const u32 o2, const u32 n0, const u32 n1, const u32 n2) {
    const idx_t b = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= DEF_N) return;
    const u32 x = (u32)(b % DEF_NX), y = (u32)((b / DEF_NX) % DEF_NY), z = (u32)(b / ((idx_t)DEF_NX * DEF_NY));
    const u32 g0 = (o0 + x + n0 - 1u) % n0, g1 = (o1 + y + n1 - 1u) % n1, g2 = (o2 + z + n2 - 1u) % n2;
    out[b] = grid[(idx_t)g0 + (idx_t)n0 * ((idx_t)g1 + (idx_t)n1 * (idx_t)g2)];
}

// The box's two outer layers (ghost frame and shell) and the shells.
//   mode 0: fill the layers from the shells;
//   mode 1: mark in `changed` (a bit per direction) the values the step changed;
//   mode 2: write the marked values back to their owners' shells;
//   mode 3: write the subgrid's own shell layer (depth 1) to its shell (building a state).
// Marking before writing matters where a subgrid spans a periodic axis alone: its ghost frame
// and its shell are then two copies of the same cells, and only the copy a cell wrote changed.
extern "C" __global__ void box_outer(float* __restrict__ box, float* __restrict__ shells, u32* __restrict__ changed, const u32* __restrict__ axis_map, const u32* __restrict__ slab_len, const u64* __restrict__ shell_off, const u32 n0, const u32 n1, const u32 n2, const u32 c0, const u32 c1, const u32 o0, const u32 o1, const u32 o2, const u32 mode) {
    const idx_t b = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= DEF_N) return;
    const u32 x = (u32)(b % DEF_NX), y = (u32)((b / DEF_NX) % DEF_NY), z = (u32)(b / ((idx_t)DEF_NX * DEF_NY));
    const u32 d = box_depth(x, y, z);
    if (d > 1u || (mode == 3u && d != 1u)) return;
    const SubgridMap m = {axis_map, slab_len, shell_off, n0, n1, n2, c0, c1};
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
