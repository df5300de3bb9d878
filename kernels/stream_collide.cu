// Esoflow dense-grid kernels. Prepended by the generated header and common.cuh.
// Bricks: BX x BY x BZ cells, one CUDA block each; x fastest so a warp reads consecutive cells
// (coalesced SoA). Bricks are classified on the host: all-solid bricks are skipped, plain-fluid
// bricks run the lean path (no flag reads), the rest the boundary path; either as two kernels
// (`stream_collide_lean` + `stream_collide_boundary`) or one (`stream_collide_fused`).

// Brick shape: DEF_BX x DEF_BY x DEF_BZ from the generated header (the host classifies bricks
// with the same shape).
#define BX DEF_BX
#define BY DEF_BY
#define BZ DEF_BZ
#define BRICK_THREADS (BX * BY * BZ)
// Minimum resident bricks per SM for the lean kernel (caps its registers; tuned per card).
#ifndef DEF_MIN_BLOCKS
#define DEF_MIN_BLOCKS 1
#endif
#define NBX ((DEF_NX + BX - 1) / BX)
#define NBY ((DEF_NY + BY - 1) / BY)
// In the list of all bricks (fused dispatch), this bit marks a brick with boundaries.
#define BRICK_BOUNDARY 0x80000000u

__device__ __forceinline__ bool brick_cell(u32 brick, u32& x, u32& y, u32& z) {
    brick &= ~BRICK_BOUNDARY;
    const u32 bx = brick % NBX, r = brick / NBX, by = r % NBY, bz = r / NBY;
    const u32 t = threadIdx.x;
    x = bx * BX + t % BX;
    y = by * BY + (t / BX) % BY;
    z = bz * BZ + t / (BX * BY);
    return x < DEF_NX && y < DEF_NY && z < DEF_NZ && in_box(x, y, z);
}

// A plain fluid cell: no flag reads.
__device__ __forceinline__ void lean_cell(fpxx* __restrict__ fi, fpxx* __restrict__ fo, u32 x, u32 y, u32 z, bool odd, const Params& p, float* __restrict__ mom) {
    const idx_t n = idx3(x, y, z);
    idx_t j[DEF_Q];
    neighbours(x, y, z, j);
    float f[DEF_Q];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[i] = dec(ldf(fi + load_slot(i, n, j, odd)));
    if (mom) store_cell_moments(mom, n, f, p);
    collide(f, p);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) stf(fo + store_slot(i, n, j, odd), enc(f[i]));
}

// A brick with boundaries: bounce-back (interpolated on the `links`, see common.cuh), moving
// walls, inlets/outlets, obstacle forces (summed per brick in shared memory `acc`, then once
// into `forces`). Every thread of the block calls it.
// With `mom`, every fluid cell's fields go there too (store_moments).
__device__ __forceinline__ void boundary_brick(fpxx* __restrict__ fi, fpxx* __restrict__ fo, u32 brick, const unsigned char* __restrict__ flags, bool odd, const Params& p, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* __restrict__ forces, const u32* __restrict__ links, float* __restrict__ lsave, double* acc, float* __restrict__ mom) {
    if (threadIdx.x < 48) acc[threadIdx.x] = 0.0;
    __syncthreads();
    u32 x, y, z;
    const bool inside = brick_cell(brick, x, y, z);
    const idx_t n = inside ? idx3(x, y, z) : (idx_t)0;
    const unsigned char flag = inside ? flags[n] : (unsigned char)KIND_SOLID;
    if (!is_solid(flag)) {
        idx_t j[DEF_Q];
        neighbours(x, y, z, j);
        const bool near = flag & FLAG_NEAR;
        float f[DEF_Q];
        load_incoming(fi, n, j, odd, near, flags, f);
        const u32 cmask = links[1];
        const int l0 = near && cmask ? link_first(links, n) : -1;
        if (l0 >= 0) curved_walls(f, l0, j, flags, links, lsave, acc);
        if (near) {
            update_boundary_cell(f, flag, x, y, z, j, flags, p, walls, inlets, outlets, acc, mom, n, cmask);
        } else {
            if (mom) store_cell_moments(mom, n, f, p);
            collide(f, p);
        }
        if (l0 >= 0) keep_links(f, l0, j, flags, cmask, lsave);
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) stf(fo + store_slot(i, n, j, odd), enc(f[i]));
    }
    __syncthreads();
    if (threadIdx.x < 48 && acc[threadIdx.x] != 0.0) atomicAdd(&forces[threadIdx.x], acc[threadIdx.x]);
}

// The step kernels' last argument `mom`: null, or four planes of DEF_N floats where every fluid
// cell's density and velocity before this step go (store_moments), for a frame taken after it.

// Plain fluid bricks: no flag reads, fewest registers.
extern "C" __global__ void __launch_bounds__(BRICK_THREADS, DEF_MIN_BLOCKS) stream_collide_lean(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ bricks, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, float* __restrict__ mom) {
    u32 x, y, z;
    if (!brick_cell(bricks[blockIdx.x], x, y, z)) return;
    const Params p = {tau, cs, fx, fy, fz};
    lean_cell(fi, fo, x, y, z, t & 1ull, p, mom);
}

// Bricks with boundaries.
extern "C" __global__ void __launch_bounds__(BRICK_THREADS) stream_collide_boundary(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ bricks, const unsigned char* __restrict__ flags, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* __restrict__ forces, const u32* __restrict__ links, float* __restrict__ lsave, float* __restrict__ mom) {
    __shared__ double acc[16 * 3];
    const Params p = {tau, cs, fx, fy, fz};
    boundary_brick(fi, fo, bricks[blockIdx.x], flags, t & 1ull, p, walls, inlets, outlets, forces, links, lsave, acc, mom);
}

// Every brick in one launch, in memory order: each block takes the lean or the boundary path by
// its brick's class (a block-uniform branch: no divergence, plain bricks read no flags).
extern "C" __global__ void __launch_bounds__(BRICK_THREADS) stream_collide_fused(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ bricks, const unsigned char* __restrict__ flags, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* __restrict__ forces, const u32* __restrict__ links, float* __restrict__ lsave, float* __restrict__ mom) {
    __shared__ double acc[16 * 3];
    const Params p = {tau, cs, fx, fy, fz};
    const u32 brick = bricks[blockIdx.x];
    if (brick & BRICK_BOUNDARY) {
        boundary_brick(fi, fo, brick, flags, t & 1ull, p, walls, inlets, outlets, forces, links, lsave, acc, mom);
    } else {
        u32 x, y, z;
        if (brick_cell(brick, x, y, z)) lean_cell(fi, fo, x, y, z, t & 1ull, p, mom);
    }
}

// ---------------------------------------------------------------- whole rows (DEF_ROWS)
// One block per x row of plain fluid cells (ROWW >= NX threads). Every DDF array is accessed at
// a uniform x shift per step (0 or +-1, the row wraps periodically), so a block loads and stores
// whole aligned rows and moves the shifted values through shared memory: no partial 32-byte
// sectors at brick edges, which is what holds narrow bricks below the copy ceiling.
#if DEF_ROWS
#define ROWW (((DEF_NX + 31u) / 32u) * 32u)
// Threads per row block: one per cell, or one per pair of cells (DEF_ROW_PAIRS).
#if DEF_ROW_PAIRS
#define ROWT (((DEF_NX / 2u + 31u) / 32u) * 32u)
#else
#define ROWT ROWW
#endif
// Rank of direction i among the directions with an x component (their shared-memory row). The
// table is built in a constant expression, so an unrolled loop's lookups fold to constants.
struct XRanks { int r[DEF_Q + 1]; };
__device__ __forceinline__ constexpr XRanks make_xranks() {
    XRanks x{};
    for (int k = 0; k < DEF_Q; k++) x.r[k + 1] = x.r[k] + (lat_cx(k) != 0 ? 1 : 0);
    return x;
}
__device__ __forceinline__ constexpr int xrank(int i) {
    constexpr XRanks x = make_xranks();
    return x.r[i];
}
__device__ __forceinline__ constexpr int xdirs() { return xrank(DEF_Q); }

// x step of the cell whose slot load_slot (LOAD) or store_slot picks for direction i, relative
// to this cell: the same choices as those two functions, as constants the compiler folds.
__device__ __forceinline__ constexpr int opp_c(int i) { return i == 0 ? 0 : ((i & 1) ? i + 1 : i - 1); }
__device__ __forceinline__ constexpr int load_dx(int i, bool odd) {
#if DEF_SCHEME == SCHEME_ONE_STEP_PULL
    return lat_cx(opp_c(i));
#elif DEF_SCHEME == SCHEME_AA
    return odd ? 0 : lat_cx(opp_c(i));
#elif DEF_SCHEME == SCHEME_ESOTERIC_PULL
    return (i == 0 || (i & 1)) ? 0 : lat_cx(i - 1);
#elif DEF_SCHEME == SCHEME_ESOTERIC_PUSH
    return (i == 0 || !(i & 1)) ? 0 : lat_cx(i + 1);
#else
    return 0;
#endif
}
template <bool ODD, bool LOAD>
__device__ __forceinline__ constexpr int slot_sx(int i) {
#if DEF_SCHEME == SCHEME_ONE_STEP_PULL || DEF_SCHEME == SCHEME_SWAP
    return LOAD ? load_dx(i, ODD) : 0;
#else
    return LOAD ? load_dx(i, ODD) : load_dx(opp_c(i), ODD);
#endif
}

template <bool ODD>
__device__ __forceinline__ void row_cells(fpxx* __restrict__ fi, fpxx* __restrict__ fo, u32 y, u32 z, const Params& p, fpxx (*sh)[ROWT], float* __restrict__ mom) {
    const u32 x = threadIdx.x;
    const bool inside = x < DEF_NX;
    const u32 xc = inside ? x : 0u;
    const idx_t n = idx3(xc, y, z);
    idx_t j[DEF_Q], j0[DEF_Q];
    neighbours(xc, y, z, j);
    // The same neighbours without their x step: the aligned slot of this thread's position.
#pragma unroll
    for (int k = 0; k < DEF_Q; k++) j0[k] = j[k] - (idx_t)((xc + DEF_NX + lat_cx(k)) % DEF_NX) + (idx_t)xc;
    float f[DEF_Q];
    fpxx raw[DEF_Q];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        raw[i] = inside ? ldf(fi + load_slot(i, n, j0, ODD)) : (fpxx)0;
        if (slot_sx<ODD, true>(i) != 0) sh[xrank(i)][x] = raw[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const int sx = slot_sx<ODD, true>(i);
        f[i] = dec(sx == 0 ? raw[i] : sh[xrank(i)][(xc + DEF_NX + sx) % DEF_NX]);
    }
    __syncthreads();
    if (mom && inside) store_cell_moments(mom, n, f, p);
    collide(f, p);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const int sx = slot_sx<ODD, false>(i);
        if (sx == 0) {
            if (inside) stf(fo + store_slot(i, n, j0, ODD), enc(f[i]));
        } else if (inside) {
            sh[xrank(i)][(xc + DEF_NX + sx) % DEF_NX] = enc(f[i]);
        }
    }
    __syncthreads();
    if (inside) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) {
            if (slot_sx<ODD, false>(i) != 0) stf(fo + store_slot(i, n, j0, ODD), sh[xrank(i)][x]);
        }
    }
}

#if DEF_ROW_PAIRS
// Two cells per thread (NX even): every DDF row moves as aligned pairs (one 32-bit access for
// 16-bit storage, 64-bit for FP32), halving the load/store and shared-memory instructions per
// cell. A shifted direction needs one value from the neighbouring thread (the row wraps).
#if DEF_STORE == STORE_FP32
typedef float2 fpair;
__device__ __forceinline__ fpxx pair_lo(fpair v) { return v.x; }
__device__ __forceinline__ fpxx pair_hi(fpair v) { return v.y; }
__device__ __forceinline__ fpair make_pair(fpxx lo, fpxx hi) { return make_float2(lo, hi); }
#else
typedef u32 fpair;
__device__ __forceinline__ fpxx pair_lo(fpair v) { return (fpxx)(v & 0xFFFFu); }
__device__ __forceinline__ fpxx pair_hi(fpair v) { return (fpxx)(v >> 16); }
__device__ __forceinline__ fpair make_pair(fpxx lo, fpxx hi) { return (u32)lo | ((u32)hi << 16); }
#endif
// Two values encoded into one pair (FP16S: one packed conversion).
__device__ __forceinline__ fpair enc_pair(float lo, float hi) {
#if DEF_STORE == STORE_FP16S
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi * 32768.0f), "f"(lo * 32768.0f));
    return r;
#else
    return make_pair(enc(lo), enc(hi));
#endif
}
#define PAIRS (DEF_NX / 2u)

template <bool ODD>
__device__ __forceinline__ void row_pairs(fpxx* __restrict__ fi, fpxx* __restrict__ fo, u32 y, u32 z, const Params& p, fpxx (*sh)[ROWT], float* __restrict__ mom) {
    const u32 t = threadIdx.x;
    const bool inside = t < PAIRS;
    const u32 xc = inside ? 2u * t : 0u;
    const idx_t n = idx3(xc, y, z);
    idx_t j[DEF_Q], j0[DEF_Q];
    neighbours(xc, y, z, j);
#pragma unroll
    for (int k = 0; k < DEF_Q; k++) j0[k] = j[k] - (idx_t)((xc + DEF_NX + lat_cx(k)) % DEF_NX) + (idx_t)xc;
    const u32 left = (t + PAIRS - 1u) % PAIRS, right = (t + 1u) % PAIRS;
    float a[DEF_Q], b[DEF_Q];
    fpair raw[DEF_Q];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        raw[i] = inside ? *(const fpair*)(fi + load_slot(i, n, j0, ODD)) : make_pair((fpxx)0, (fpxx)0);
        // Shift -1 needs the left thread's high cell, +1 the right thread's low cell.
        const int sx = slot_sx<ODD, true>(i);
        if (sx < 0) sh[xrank(i)][t] = pair_hi(raw[i]);
        if (sx > 0) sh[xrank(i)][t] = pair_lo(raw[i]);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const int sx = slot_sx<ODD, true>(i);
        if (sx == 0) {
            a[i] = dec(pair_lo(raw[i]));
            b[i] = dec(pair_hi(raw[i]));
        } else if (sx < 0) {
            a[i] = dec(sh[xrank(i)][left]);
            b[i] = dec(pair_lo(raw[i]));
        } else {
            a[i] = dec(pair_hi(raw[i]));
            b[i] = dec(sh[xrank(i)][right]);
        }
    }
    __syncthreads();
    if (mom && inside) {
        store_cell_moments(mom, n, a, p);
        store_cell_moments(mom, n + 1, b, p);
    }
    collide(a, p);
    collide(b, p);
    // Outgoing values bound for a shifted slot: shift +1 sends the high cell to the right
    // thread's low slot, shift -1 the low cell to the left thread's high slot.
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const int sx = slot_sx<ODD, false>(i);
        if (sx > 0) sh[xrank(i)][t] = enc(b[i]);
        if (sx < 0) sh[xrank(i)][t] = enc(a[i]);
    }
    __syncthreads();
    if (inside) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) {
            const int sx = slot_sx<ODD, false>(i);
            fpair v;
            if (sx == 0) v = enc_pair(a[i], b[i]);
            else if (sx > 0) v = make_pair(sh[xrank(i)][left], enc(a[i]));
            else v = make_pair(enc(b[i]), sh[xrank(i)][right]);
            *(fpair*)(fo + store_slot(i, n, j0, ODD)) = v;
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(ROWT) stream_collide_rows(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ rows, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, float* __restrict__ mom) {
    __shared__ fpxx sh[xdirs() > 0 ? xdirs() : 1][ROWT];
    const u32 r = rows[blockIdx.x], y = r % DEF_NY, z = r / DEF_NY;
    const Params p = {tau, cs, fx, fy, fz};
#if DEF_ROW_PAIRS
    if (t & 1ull) row_pairs<true>(fi, fo, y, z, p, sh, mom);
    else row_pairs<false>(fi, fo, y, z, p, sh, mom);
#else
    if (t & 1ull) row_cells<true>(fi, fo, y, z, p, sh, mom);
    else row_cells<false>(fi, fo, y, z, p, sh, mom);
#endif
}
#endif

// LBM-Swap streaming pass: swap each outgoing DDF with the neighbour's opposite one.
extern "C" __global__ void swap_stream(fpxx* __restrict__ f, const unsigned char* __restrict__ flags) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= DEF_N || is_solid(flags[n])) return;
    const u32 x = (u32)(n % DEF_NX), y = (u32)((n / DEF_NX) % DEF_NY), z = (u32)(n / ((idx_t)DEF_NX * DEF_NY));
    idx_t j[DEF_Q];
    neighbours(x, y, z, j);
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        if (is_solid(flags[j[i]])) continue;
        const idx_t a = (idx_t)(i + 1) * (idx_t)DEF_N + n, b = (idx_t)i * (idx_t)DEF_N + j[i];
        const fpxx tmp = f[a];
        f[a] = f[b];
        f[b] = tmp;
    }
}

#if DEF_SCHEME == SCHEME_GHOST
// ---------------------------------------------------------------- LBM-Ghost (Valero-Lara et al. 2017)
// Step 1: refresh every block's ghost layer from the neighbouring blocks' own cells. One thread
// per ghost cell: `dst` is the ghost's slot of direction 0, `src` the source cell's.
extern "C" __global__ void ghost_refresh(fpxx* __restrict__ f, const u64* __restrict__ dst, const u64* __restrict__ src, const u32 count) {
    const u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    const idx_t d = (idx_t)dst[k], s = (idx_t)src[k];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[d + (idx_t)i * DEF_GPV] = f[s + (idx_t)i * DEF_GPV];
}

// Padded-storage offset of the upstream neighbour along c_i (a constant in unrolled loops).
__device__ __forceinline__ constexpr int ghost_off(int i) { return lat_cx(i) + DEF_GPD0 * (lat_cy(i) + DEF_GPD1 * lat_cz(i)); }

// Step 2: one CUDA block per LBM block, one thread per (x, y) column of it, walking up the
// block's z layers (2D: one layer). A cell pulls from its own block only (own cells and
// ghosts); the new values of layer z are written back after a barrier in the next layer's
// turn, once every thread has read layer z for its pulls: the scratch block is the registers.
extern "C" __global__ void __launch_bounds__(DEF_GB0 * DEF_GB1) stream_collide_ghost(fpxx* __restrict__ f, const unsigned char* __restrict__ flags, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* __restrict__ forces) {
    __shared__ double acc[16 * 3];
    if (threadIdx.x < 48) acc[threadIdx.x] = 0.0;
    const Params p = {tau, cs, fx, fy, fz};
    const u32 blk = blockIdx.x, bx = blk % DEF_GNB0, by = (blk / DEF_GNB0) % DEF_GNB1, bz = blk / (DEF_GNB0 * DEF_GNB1);
    const u32 tx = threadIdx.x % DEF_GB0, ty = threadIdx.x / DEF_GB0;
    const u32 x = bx * DEF_GB0 + tx, y = by * DEF_GB1 + ty, z0 = bz * DEF_GB2;
    const bool column = x < DEF_NX && y < DEF_NY;
    const u32 layers = min((u32)DEF_GB2, DEF_NZ - z0);
    const idx_t base = (idx_t)blk * DEF_Q * DEF_GPV;
    const u32 lx = tx + (DEF_GPD0 > 1 ? 1u : 0u), ly = ty + (DEF_GPD1 > 1 ? 1u : 0u), lz0 = DEF_GPD2 > 1 ? 1u : 0u;
    float prev[DEF_Q];
    bool prev_live = false;
    idx_t prev_li = 0;
    __syncthreads();
    for (u32 l = 0; l < layers; l++) {
        const u32 z = z0 + l;
        const idx_t li = lx + DEF_GPD0 * (ly + DEF_GPD1 * (lz0 + l));
        float fn[DEF_Q] = {};
        bool live = false;
        if (column) {
            const idx_t n = idx3(x, y, z);
            const unsigned char flag = flags[n];
            if (!is_solid(flag)) {
                live = true;
#pragma unroll
                for (int i = 0; i < DEF_Q; i++) fn[i] = dec(f[base + (idx_t)i * DEF_GPV + li - ghost_off(i)]);
                if (flag & FLAG_NEAR) {
                    idx_t j[DEF_Q];
                    neighbours(x, y, z, j);
#pragma unroll
                    for (int i = 1; i < DEF_Q; i++) {
                        if (is_solid(flags[j[opposite(i)]])) fn[i] = dec(f[base + (idx_t)opposite(i) * DEF_GPV + li]);
                    }
                    update_boundary_cell(fn, flag, x, y, z, j, flags, p, walls, inlets, outlets, acc);
                } else {
                    collide(fn, p);
                }
            }
        }
        // Every thread has read layer l - 1 (and l) for its pulls: layer l - 1 may be written.
        __syncthreads();
        if (prev_live) {
#pragma unroll
            for (int i = 0; i < DEF_Q; i++) f[base + (idx_t)i * DEF_GPV + prev_li] = enc(prev[i]);
        }
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) prev[i] = fn[i];
        prev_live = live;
        prev_li = li;
    }
    if (prev_live) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) f[base + (idx_t)i * DEF_GPV + prev_li] = enc(prev[i]);
    }
    __syncthreads();
    if (threadIdx.x < 48 && acc[threadIdx.x] != 0.0) atomicAdd(&forces[threadIdx.x], acc[threadIdx.x]);
}
#endif

// Cell t of the box with corner (x0, y0, z0) and extents e (x fastest), wrapped around the
// grid (a box may start at -1, given as n - 1, and run across a periodic edge).
__device__ __forceinline__ idx_t box_cell(const u64 t, const u32 x0, const u32 y0, const u32 z0, const u32 ex, const u32 ey) {
    const u32 x = (u32)(t % ex), y = (u32)((t / ex) % ey), z = (u32)(t / ((u64)ex * ey));
    return idx3((x0 + x) % DEF_NX, (y0 + y) % DEF_NY, (z0 + z) % DEF_NZ);
}

// Density and velocity of cell n from its incoming DDFs (parity-aware) into the four planes
// rho, ux, uy, uz of N floats each.
__device__ __forceinline__ void cell_fields(const idx_t n, const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u64 t, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, const u32* __restrict__ links, const float* __restrict__ lsave, float* __restrict__ out) {
    const unsigned char flag = flags[n];
    if (is_solid(flag)) {
        out[n] = 1.0f; out[DEF_N + n] = 0.0f; out[2 * DEF_N + n] = 0.0f; out[3 * DEF_N + n] = 0.0f;
        return;
    }
    const u32 x = (u32)(n % DEF_NX), y = (u32)((n / DEF_NX) % DEF_NY), z = (u32)(n / ((idx_t)DEF_NX * DEF_NY));
    idx_t j[DEF_Q];
    neighbours(x, y, z, j);
    float f[DEF_Q];
    const bool near = flag & FLAG_NEAR;
    load_incoming(fi, n, j, t & 1ull, near, flags, f);
    if (near && links[1]) {
        const int l0 = link_first(links, n);
        if (l0 >= 0) curved_walls(f, l0, j, flags, links, lsave, nullptr);
    }
    if (near) moving_walls(f, flags, j, walls);
    float rho_m1, u[3];
    const u32 k = flag & FLAG_KIND;
    if (k == KIND_INLET || k == KIND_OUTLET) {
        boundary_moments(f, flag, x, y, z, inlets, outlets, rho_m1, u);
    } else {
        moments(f, fx, fy, fz, rho_m1, u[0], u[1], u[2]);
    }
    out[n] = rho_m1 + 1.0f;
    out[DEF_N + n] = u[0];
    out[2 * DEF_N + n] = u[1];
    out[3 * DEF_N + n] = u[2];
}

// Read every interpolated-wall link's f*_k(x) from the state before step t (after a start, a
// restore or an edit): the value x + c_k loads along c_k in that step (for LBM-Swap with a
// solid x + c_k, where the skipped swap left it at x). One thread per cell with links.
extern "C" __global__ void links_refresh(const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u32* __restrict__ links, float* __restrict__ lsave, const u64 t) {
    const u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    const u32 cells = links[0], mask = links[1];
    if (c >= cells) return;
    const idx_t n = links[2u + c];
    idx_t j[DEF_Q];
    neighbours((u32)(n % DEF_NX), (u32)((n / DEF_NX) % DEF_NY), (u32)(n / ((idx_t)DEF_NX * DEF_NY)), j);
    u32 l = links[2u + cells + c];
    for (int d = 1; d < DEF_Q; d++) {
        if (!curved_link(mask, flags[j[d]])) continue;
        const int k = (int)opposite((u32)d);
        const idx_t m = j[k];
        idx_t slot;
#if DEF_SCHEME == SCHEME_SWAP
        slot = is_solid(flags[m]) ? (idx_t)d * DEF_N + n : (idx_t)k * DEF_N + m;
#else
        idx_t jm[DEF_Q];
        neighbours((u32)(m % DEF_NX), (u32)((m / DEF_NX) % DEF_NY), (u32)(m / ((idx_t)DEF_NX * DEF_NY)), jm);
        slot = load_slot(k, m, jm, t & 1ull);
#endif
        lsave[l++] = dec(ldf(fi + slot));
    }
}

// Density and velocity of every cell; only when a frame or the stats need them.
extern "C" __global__ void fields(const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u64 t, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, const u32* __restrict__ links, const float* __restrict__ lsave, float* __restrict__ out) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n < DEF_N) cell_fields(n, fi, flags, t, fx, fy, fz, walls, inlets, outlets, links, lsave, out);
}

// The same for the cells of one box (box_cell): the slabs around the planes of a frame that
// shows slices only.
extern "C" __global__ void fields_box(const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u64 t, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, const u32* __restrict__ links, const float* __restrict__ lsave, float* __restrict__ out,
                                      const u32 x0, const u32 y0, const u32 z0, const u32 ex, const u32 ey, const u32 ez) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (u64)ex * ey * ez) cell_fields(box_cell(i, x0, y0, z0, ex, ey), fi, flags, t, fx, fy, fz, walls, inlets, outlets, links, lsave, out);
}

// Cell i of the lattice of every s-th cell along each axis (m[0] x m[1] x m[2] points, x
// fastest), what an isosurface marched on cubes of s cells reads.
__device__ __forceinline__ idx_t lattice_cell(const u64 i, const u32 s, const u32 mx, const u32 my) {
    return idx3((u32)(i % mx) * s, (u32)((i / mx) % my) * s, (u32)(i / ((u64)mx * my)) * s);
}

// Density and velocity at the lattice points and their six neighbours (the central differences
// of vorticity and Q read them; wrapped around the grid as derived_value wraps): thread i takes
// neighbour i / points (0 the point itself, then -x, +x, -y, +y, -z, +z) of point i % points.
extern "C" __global__ void fields_lattice(const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u64 t, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, const u32* __restrict__ links, const float* __restrict__ lsave, float* __restrict__ out,
                                          const u32 s, const u32 mx, const u32 my, const u32 mz) {
    const u64 points = (u64)mx * my * mz;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 7ull * points) return;
    const u32 k = (u32)(i / points);
    const idx_t c = lattice_cell(i % points, s, mx, my);
    u32 p[3] = {(u32)(c % DEF_NX), (u32)((c / DEF_NX) % DEF_NY), (u32)(c / ((idx_t)DEF_NX * DEF_NY))};
    const u32 dims[3] = {DEF_NX, DEF_NY, DEF_NZ};
    if (k > 0u) {
        const u32 a = (k - 1u) / 2u;
        p[a] = (k & 1u) ? (p[a] + dims[a] - 1u) % dims[a] : (p[a] + 1u) % dims[a];
    }
    cell_fields(idx3(p[0], p[1], p[2]), fi, flags, t, fx, fy, fz, walls, inlets, outlets, links, lsave, out);
}

// One derived field at fluid cell `n` from the velocity planes of `fl`: which = 0 vorticity
// magnitude, 1 Q criterion (central differences, periodic), 2 speed.
__device__ float derived_value(const float* __restrict__ fl, const idx_t n, const u32 which) {
    if (which == 2u) {
        const float ux = fl[DEF_N + n], uy = fl[2 * DEF_N + n], uz = fl[3 * DEF_N + n];
        return sqrtf(ux * ux + uy * uy + uz * uz);
    }
    const u32 p[3] = {(u32)(n % DEF_NX), (u32)((n / DEF_NX) % DEF_NY), (u32)(n / ((idx_t)DEF_NX * DEF_NY))};
    const u32 dims[3] = {DEF_NX, DEF_NY, DEF_NZ};
    float g[3][3];
#pragma unroll
    for (int b = 0; b < 3; b++) {
        u32 hi[3] = {p[0], p[1], p[2]}, lo[3] = {p[0], p[1], p[2]};
        hi[b] = (p[b] + 1) % dims[b];
        lo[b] = (p[b] + dims[b] - 1) % dims[b];
        const idx_t nh = idx3(hi[0], hi[1], hi[2]), nl = idx3(lo[0], lo[1], lo[2]);
#pragma unroll
        for (int a = 0; a < 3; a++) g[a][b] = dims[b] < 3 ? 0.0f : 0.5f * (fl[(a + 1) * DEF_N + nh] - fl[(a + 1) * DEF_N + nl]);
    }
    if (which == 0u) {
        const float wx = g[2][1] - g[1][2], wy = g[0][2] - g[2][0], wz = g[1][0] - g[0][1];
        return sqrtf(wx * wx + wy * wy + wz * wz);
    }
    float s2 = 0.0f, o2 = 0.0f;
#pragma unroll
    for (int a = 0; a < 3; a++)
#pragma unroll
        for (int b = 0; b < 3; b++) {
            const float s = 0.5f * (g[a][b] + g[b][a]), o = 0.5f * (g[a][b] - g[b][a]);
            s2 += s * s; o2 += o * o;
        }
    return 0.5f * (o2 - s2);
}

// One derived field from the velocity planes of `fl` into `out` (N floats): which as in
// derived_value. Solid cells get 0.
extern "C" __global__ void derived(const float* __restrict__ fl, const unsigned char* __restrict__ flags, const u32 which, float* __restrict__ out) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= DEF_N) return;
    out[n] = is_solid(flags[n]) ? 0.0f : derived_value(fl, n, which);
}

// A float's order as an unsigned key (unsigned comparison of keys = comparison of floats).
__device__ __forceinline__ u32 float_key(const float v) {
    const u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One frame of a view: `nk` fields (4-bit codes packed in `kinds`, field k in bits 4k..4k+3:
// 0 rho, 1 ux, 2 uy, 3 uz, 4 speed, 5 |vorticity|, 6 Q) of every cell, from the field planes
// `fl`, into `out`: field k's plane starts at k * plane floats, its rows (x fastest) `pitch`
// floats apart. Derived fields are 0 in solid cells. Per field, range[2k] and range[2k + 1]
// take the keys (float_key) of the smallest and largest finite fluid value (start them at
// 0xffffffff and 0), and range[12] counts non-finite fluid values (at most 6 fields, as
// MAX_FRAME_FIELDS in sim-core/src/frame.rs).
// Every thread of a warp calls it (`live` false past the end), as the ranges are reduced
// across the warp.
__device__ __forceinline__ void frame_cell(const idx_t n, const bool live, const float* __restrict__ fl, const unsigned char* __restrict__ flags, const u32 kinds, const u32 nk,
                                           const u64 pitch, const u64 plane, float* __restrict__ out, u32* __restrict__ range) {
    const bool fluid = live && !is_solid(flags[n]);
    const u64 at = live ? (u64)(n / DEF_NX) * pitch + (u64)(n % DEF_NX) : 0ull;
    const u32 lane = threadIdx.x & 31u;
    u32 bad = 0u;
    for (u32 k = 0; k < nk; k++) {
        const u32 code = (kinds >> (4u * k)) & 15u;
        float v = 0.0f;
        if (live) {
            if (code < 4u) v = fl[(idx_t)code * DEF_N + n];
            else if (fluid) v = derived_value(fl, n, code == 4u ? 2u : code - 5u);
            out[(u64)k * plane + at] = v;
        }
        u32 lo = 0xffffffffu, hi = 0u;
        if (fluid) {
            if (isfinite(v)) { lo = float_key(v); hi = lo; } else bad = 1u;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
            hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
        }
        // Only a warp that improves on the range as read now takes the atomic: the range only
        // narrows toward its final value, so a stale read costs an atomic, never a wrong result,
        // and most warps of a frame skip the contended address.
        if (lane == 0u) {
            if (lo != 0xffffffffu && lo < __ldcg(&range[2 * k])) atomicMin(&range[2 * k], lo);
            if (hi != 0u && hi > __ldcg(&range[2 * k + 1])) atomicMax(&range[2 * k + 1], hi);
        }
    }
    bad = __any_sync(0xffffffffu, bad) ? 1u : 0u;
    if (lane == 0u && bad) atomicAdd(&range[12], 1u);
}

extern "C" __global__ void frame_fields(const float* __restrict__ fl, const unsigned char* __restrict__ flags, const u32 kinds, const u32 nk,
                                        const u64 pitch, const u64 plane, float* __restrict__ out, u32* __restrict__ range) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    frame_cell(n, n < DEF_N, fl, flags, kinds, nk, pitch, plane, out, range);
}

// The same for the cells of one box (a slice plane): a frame that shows slices only.
extern "C" __global__ void frame_box(const float* __restrict__ fl, const unsigned char* __restrict__ flags, const u32 kinds, const u32 nk,
                                     const u64 pitch, const u64 plane, float* __restrict__ out, u32* __restrict__ range,
                                     const u32 x0, const u32 y0, const u32 z0, const u32 ex, const u32 ey, const u32 ez) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = i < (u64)ex * ey * ez;
    frame_cell(live ? box_cell(i, x0, y0, z0, ex, ey) : 0, live, fl, flags, kinds, nk, pitch, plane, out, range);
}

// The same for the points of a lattice (lattice_cell): the isosurface's samples.
extern "C" __global__ void frame_lattice(const float* __restrict__ fl, const unsigned char* __restrict__ flags, const u32 kinds, const u32 nk,
                                         const u64 pitch, const u64 plane, float* __restrict__ out, u32* __restrict__ range,
                                         const u32 s, const u32 mx, const u32 my, const u32 mz) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = i < (u64)mx * my * mz;
    frame_cell(live ? lattice_cell(i, s, mx, my) : 0, live, fl, flags, kinds, nk, pitch, plane, out, range);
}

// Mass, largest speed, the density range (rho_keys[0] and [1]: float_key of the smallest and
// largest density; start them at 0xffffffff and 0) and the first non-finite cell, from the
// field planes.
extern "C" __global__ void stats(const float* __restrict__ fl, const unsigned char* __restrict__ flags, double* __restrict__ mass, u32* __restrict__ max_u_bits, u64* __restrict__ first_bad, u32* __restrict__ rho_keys) {
    __shared__ double sm[256];
    __shared__ float su[256];
    __shared__ u32 slo[256], shi[256];
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    double m = 0.0;
    float s = 0.0f;
    u32 lo = 0xffffffffu, hi = 0u;
    // A subgrid's working box (DEF_BOX) counts only its own cells, not the ghost frame.
    if (n < DEF_N && !is_solid(flags[n]) && in_box((u32)(n % DEF_NX), (u32)((n / DEF_NX) % DEF_NY), (u32)(n / ((idx_t)DEF_NX * DEF_NY)))) {
        const float r = fl[n], ux = fl[DEF_N + n], uy = fl[2 * DEF_N + n], uz = fl[3 * DEF_N + n];
        const float sp = sqrtf(ux * ux + uy * uy + uz * uz);
        if (!isfinite(r) || !isfinite(sp)) {
            atomicMin(first_bad, (u64)n);
        } else {
            m = (double)r;
            s = sp;
            lo = float_key(r);
            hi = lo;
        }
    }
    sm[threadIdx.x] = m;
    su[threadIdx.x] = s;
    slo[threadIdx.x] = lo;
    shi[threadIdx.x] = hi;
    __syncthreads();
    for (u32 k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            sm[threadIdx.x] += sm[threadIdx.x + k];
            su[threadIdx.x] = fmaxf(su[threadIdx.x], su[threadIdx.x + k]);
            slo[threadIdx.x] = min(slo[threadIdx.x], slo[threadIdx.x + k]);
            shi[threadIdx.x] = max(shi[threadIdx.x], shi[threadIdx.x + k]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(mass, sm[0]);
        atomicMax(max_u_bits, __float_as_uint(su[0]));
        atomicMin(&rho_keys[0], slo[0]);
        atomicMax(&rho_keys[1], shi[0]);
    }
}

// Cell edits (sim-core/src/edit.rs). The host works out, with the CPU solver's slot rules for
// this scheme and time-step parity, which slots hold the incoming DDFs of the cells around an
// edit; these two kernels read them before the flags change and write them (and the rest
// equilibrium of cells that become fluid) where the new flags put them.
extern "C" __global__ void gather_slots(const fpxx* __restrict__ f, const u64* __restrict__ slots, fpxx* __restrict__ out, const u32 count) {
    const u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) out[k] = f[slots[k]];
}
extern "C" __global__ void scatter_slots(fpxx* __restrict__ f, const u64* __restrict__ slots, const fpxx* __restrict__ vals, const u32 count) {
    const u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) f[slots[k]] = vals[k];
}
