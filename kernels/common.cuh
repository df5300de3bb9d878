// Esoflow device functions shared by every kernel (dense, and later subgrid and block kernels):
// lattice tables, storage formats, the streaming schemes' slot maps, collision and boundaries.
// The host prepends a generated header that defines:
//   DEF_NX DEF_NY DEF_NZ DEF_N   grid size and cell count
//   DEF_D DEF_Q                  dimensions and velocities
//   DEF_CX DEF_CY DEF_CZ DEF_W   velocity components and weights as brace lists
//   DEF_SCHEME                   SCHEME_ONE_STEP_PULL, _AA, _ESOTERIC_PULL, _ESOTERIC_PUSH, _SWAP, _GHOST
//   DEF_STORE                    STORE_FP32, STORE_FP16S, STORE_FP16C
//   DEF_COLLISION                COLLISION_BGK, _TRT, _SMAGORINSKY, _REGULARIZED (codes from the tables in nvrtc.rs)
//   DEF_TRT_MAGIC DEF_TRT_MAX_ODD_RATIO   TRT's magic parameter and the bound of its odd rate (collision.rs)
//   DEF_FORCE                    1 if a body force is applied (Guo)
//   DEF_SLIP                     1 if the grid has free-slip walls (kind SLIP)
//   DEF_SLOTS                    DDF slots of the state buffer (q x cells, more with ghost layers)
//   DEF_GB0..2 DEF_GNB0..2 DEF_GPD0..2 DEF_GPV
//                                LBM-Ghost: block edge, blocks and padded block edge per axis,
//                                padded block volume (see sim-core/src/backend/ghost.rs)
// Every function here mirrors sim-core/src (collision.rs, backend/cpu.rs): keep them in sync.

#define FLAG_KIND 7u
#define KIND_FLUID 0u
#define KIND_SOLID 1u
#define KIND_MOVING 2u
#define KIND_INLET 3u
#define KIND_OUTLET 4u
#define KIND_SPONGE 5u
#define KIND_SLIP 6u
#define SPONGE_STRENGTH 0.2f
#define FLAG_NEAR 8u

typedef unsigned long long u64;
typedef unsigned int u32;

// Lattice tables as constexpr functions: in unrolled loops the index is a constant and the
// value folds into the instruction; with a run-time index they still work.
__device__ __forceinline__ constexpr int lat_cx(int i) { constexpr int t[DEF_Q] = DEF_CX; return t[i]; }
__device__ __forceinline__ constexpr int lat_cy(int i) { constexpr int t[DEF_Q] = DEF_CY; return t[i]; }
__device__ __forceinline__ constexpr int lat_cz(int i) { constexpr int t[DEF_Q] = DEF_CZ; return t[i]; }
__device__ __forceinline__ constexpr float lat_w(int i) { constexpr float t[DEF_Q] = DEF_W; return t[i]; }

// Slot indices fit 32 bits on most grids (fewer registers and integer instructions).
#if (DEF_SLOTS * 2ull) < 4294967296ull
typedef unsigned int idx_t;
#else
typedef unsigned long long idx_t;
#endif

__device__ __forceinline__ u32 opposite(u32 i) { return i == 0u ? 0u : ((i & 1u) ? i + 1u : i - 1u); }
#if DEF_SLIP
__device__ __forceinline__ bool is_solid(unsigned char f) { u32 k = f & FLAG_KIND; return k == KIND_SOLID || k == KIND_MOVING || k == KIND_SLIP; }
#else
__device__ __forceinline__ bool is_solid(unsigned char f) { u32 k = f & FLAG_KIND; return k == KIND_SOLID || k == KIND_MOVING; }
#endif

// ---------------------------------------------------------------- storage formats
#if DEF_STORE == STORE_FP32
typedef float fpxx;
__device__ __forceinline__ float dec(fpxx v) { return v; }
__device__ __forceinline__ fpxx enc(float x) { return x; }
#elif DEF_STORE == STORE_FP16S
typedef unsigned short fpxx;
// IEEE half of (f - w) * 32768.
__device__ __forceinline__ float dec(fpxx v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f * (1.0f / 32768.0f); }
__device__ __forceinline__ fpxx enc(float x) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x * 32768.0f)); return h; }
#else
typedef unsigned short fpxx;
// FP16C: sign, 4 exponent bits (bias 15), 11 mantissa bits; see sim-core/src/precision.rs.
__device__ __forceinline__ float dec(fpxx v) {
    const u32 h = v, e = (h >> 11) & 0xFu, m = h & 0x7FFu;
    const float mag = e == 0u ? (float)m * (1.0f / 33554432.0f) : __uint_as_float(((e + 112u) << 23) | (m << 12));
    return __uint_as_float(__float_as_uint(mag) | ((h & 0x8000u) << 16));
}
__device__ __forceinline__ fpxx enc(float x) {
    const u32 b = __float_as_uint(x), sign = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu, m = a & 0x7FFFFFu;
    const int e = (int)(a >> 23) - 112;
    const u32 base = ((u32)max(e, 0) << 11) | (m >> 12), rem = m & 0xFFFu;
    const u32 up = (rem > 0x800u || (rem == 0x800u && (base & 1u))) ? 1u : 0u;
    const u32 normal = min(base + up, 0x7FFFu);
    const u32 sub = __float_as_uint(__uint_as_float(a) + 0.25f) - 0x3E800000u;
    return (fpxx)(sign | (e >= 1 ? normal : sub));
}
#endif

// DDF memory access. DEF_HINTS (an experiment: ESOFLOW_CUDA_DEFINES=DEF_HINTS) marks the
// streaming DDF traffic evict-first (.cs), as each value is touched once per step.
#if defined(DEF_HINTS) && DEF_STORE == STORE_FP32
__device__ __forceinline__ fpxx ldf(const fpxx* p) { float v; asm volatile("ld.global.cs.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v; }
__device__ __forceinline__ void stf(fpxx* p, fpxx v) { asm volatile("st.global.cs.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory"); }
#elif defined(DEF_HINTS)
__device__ __forceinline__ fpxx ldf(const fpxx* p) { unsigned short v; asm volatile("ld.global.cs.u16 %0, [%1];" : "=h"(v) : "l"(p)); return v; }
__device__ __forceinline__ void stf(fpxx* p, fpxx v) { asm volatile("st.global.cs.u16 [%0], %1;" :: "l"(p), "h"(v) : "memory"); }
#else
__device__ __forceinline__ fpxx ldf(const fpxx* p) { return *p; }
__device__ __forceinline__ void stf(fpxx* p, fpxx v) { *p = v; }
#endif

// ---------------------------------------------------------------- grid
// A subgrid's working box (DEF_BOX, kernels/subgrid.cu): the grid is the subgrid plus a
// one-cell ghost frame, and only the cells inside the frame are updated.
#ifndef DEF_BOX
#define DEF_BOX 0
#endif
// A multi-GPU slab (DEF_HALO = 1 + the cut axis, backend/cuda/multi.rs): the first and last
// layer along the cut axis are copies of the neighbouring GPUs' cells, read and written by this
// slab's cells but not updated.
#ifndef DEF_HALO
#define DEF_HALO 0
#endif
__device__ __forceinline__ bool in_box(u32 x, u32 y, u32 z) {
#if DEF_BOX
    return x >= 1u && x + 1u < DEF_NX && y >= 1u && y + 1u < DEF_NY && z >= 1u && z + 1u < DEF_NZ;
#elif DEF_HALO == 2
    (void)x; (void)z;
    return y >= 1u && y + 1u < DEF_NY;
#elif DEF_HALO == 3
    (void)x; (void)y;
    return z >= 1u && z + 1u < DEF_NZ;
#else
    (void)x; (void)y; (void)z;
    return true;
#endif
}
__device__ __forceinline__ idx_t idx3(u32 x, u32 y, u32 z) { return (idx_t)x + (idx_t)DEF_NX * ((idx_t)y + (idx_t)DEF_NY * (idx_t)z); }

// Neighbour of every direction (periodic wrap on every axis), from nine offsets.
__device__ __forceinline__ void neighbours(u32 x, u32 y, u32 z, idx_t* j) {
    const idx_t x0 = x, xp = x + 1u == DEF_NX ? 0u : x + 1u, xm = x == 0u ? DEF_NX - 1u : x - 1u;
    const idx_t y0 = (idx_t)y * DEF_NX, yp = (idx_t)(y + 1u == DEF_NY ? 0u : y + 1u) * DEF_NX, ym = (idx_t)(y == 0u ? DEF_NY - 1u : y - 1u) * DEF_NX;
    const idx_t s = (idx_t)DEF_NX * DEF_NY;
    const idx_t z0 = (idx_t)z * s, zp = (idx_t)(z + 1u == DEF_NZ ? 0u : z + 1u) * s, zm = (idx_t)(z == 0u ? DEF_NZ - 1u : z - 1u) * s;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        j[i] = (lat_cx(i) == 0 ? x0 : lat_cx(i) > 0 ? xp : xm) + (lat_cy(i) == 0 ? y0 : lat_cy(i) > 0 ? yp : ym) + (lat_cz(i) == 0 ? z0 : lat_cz(i) > 0 ? zp : zm);
    }
}

// ---------------------------------------------------------------- streaming schemes
#if DEF_SCHEME == SCHEME_GHOST
// LBM-Ghost: blocks of GB cells, each stored padded by one ghost layer (GPD = GB + 2 on the
// lattice's axes), direction-major within a block. Slot of direction 0 of a cell's own copy.
__device__ __forceinline__ idx_t ghost_base(idx_t n) {
    const u32 x = (u32)(n % DEF_NX), y = (u32)((n / DEF_NX) % DEF_NY), z = (u32)(n / ((idx_t)DEF_NX * DEF_NY));
    const u32 blk = x / DEF_GB0 + DEF_GNB0 * (y / DEF_GB1 + DEF_GNB1 * (z / DEF_GB2));
    const u32 lx = x % DEF_GB0 + (DEF_GPD0 > 1 ? 1u : 0u), ly = y % DEF_GB1 + (DEF_GPD1 > 1 ? 1u : 0u), lz = z % DEF_GB2 + (DEF_GPD2 > 1 ? 1u : 0u);
    return (idx_t)blk * DEF_Q * DEF_GPV + lx + DEF_GPD0 * (ly + DEF_GPD1 * lz);
}
#endif

// Slot of incoming DDF i of cell n before the step of parity `odd` (see backend/cpu.rs).
__device__ __forceinline__ idx_t load_slot(int i, idx_t n, const idx_t* j, bool odd) {
#if DEF_SCHEME == SCHEME_GHOST
    // The value the neighbour upstream stored for direction i, in its own block.
    return ghost_base(j[opposite(i)]) + (idx_t)i * DEF_GPV;
#else
    const idx_t N = (idx_t)DEF_N;
#endif
#if DEF_SCHEME == SCHEME_GHOST
#elif DEF_SCHEME == SCHEME_ONE_STEP_PULL
    return (idx_t)i * N + j[opposite(i)];
#elif DEF_SCHEME == SCHEME_AA
    return odd ? (idx_t)opposite(i) * N + n : (idx_t)i * N + j[opposite(i)];
#elif DEF_SCHEME == SCHEME_ESOTERIC_PULL
    if (i == 0) return n;
    if (i & 1) return odd ? (idx_t)i * N + n : (idx_t)(i + 1) * N + n;
    return odd ? (idx_t)i * N + j[i - 1] : (idx_t)(i - 1) * N + j[i - 1];
#elif DEF_SCHEME == SCHEME_ESOTERIC_PUSH
    if (i == 0) return n;
    if (!(i & 1)) return odd ? (idx_t)i * N + n : (idx_t)(i - 1) * N + n;
    return odd ? (idx_t)i * N + j[i + 1] : (idx_t)(i + 1) * N + j[i + 1];
#else
    return (idx_t)i * N + n;
#endif
}
// Slot of the halfway bounce-back value when the source of DDF i is solid.
__device__ __forceinline__ idx_t bb_slot(int i, idx_t n, const idx_t* j, bool odd) {
#if DEF_SCHEME == SCHEME_GHOST
    return ghost_base(n) + (idx_t)opposite(i) * DEF_GPV;
#elif DEF_SCHEME == SCHEME_ONE_STEP_PULL
    return (idx_t)opposite(i) * DEF_N + n;
#else
    return load_slot(i, n, j, !odd);
#endif
}
// Slot the outgoing DDF i is stored to.
__device__ __forceinline__ idx_t store_slot(int i, idx_t n, const idx_t* j, bool odd) {
#if DEF_SCHEME == SCHEME_GHOST
    return ghost_base(n) + (idx_t)i * DEF_GPV;
#elif DEF_SCHEME == SCHEME_ONE_STEP_PULL
    return (idx_t)i * DEF_N + n;
#elif DEF_SCHEME == SCHEME_SWAP
    return (idx_t)opposite(i) * DEF_N + n;
#else
    return load_slot(opposite(i), n, j, odd);
#endif
}

// ---------------------------------------------------------------- collision (shifted DDFs)
struct Params {
    float tau;
    float cs;
    float fx, fy, fz;
};

__device__ __forceinline__ void moments(const float* f, float fx, float fy, float fz, float& rho_m1, float& ux, float& uy, float& uz) {
    float r = 0.0f, jx = 0.0f, jy = 0.0f, jz = 0.0f;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        r += f[i];
        if (lat_cx(i) > 0) jx += f[i]; else if (lat_cx(i) < 0) jx -= f[i];
        if (lat_cy(i) > 0) jy += f[i]; else if (lat_cy(i) < 0) jy -= f[i];
        if (lat_cz(i) > 0) jz += f[i]; else if (lat_cz(i) < 0) jz -= f[i];
    }
    const float inv = 1.0f / (r + 1.0f);
    rho_m1 = r;
    ux = (jx + 0.5f * fx) * inv;
    uy = (jy + 0.5f * fy) * inv;
    uz = (jz + 0.5f * fz) * inv;
}

// Equilibrium value i (rho_m1 = rho - 1); `equilibrium` gives all of them with the same
// arithmetic.
__device__ __forceinline__ float equilibrium_one(int i, float rho_m1, float ux, float uy, float uz) {
    const float usq = 1.5f * (ux * ux + uy * uy + uz * uz), rho = rho_m1 + 1.0f;
    const float cu = 3.0f * ((float)lat_cx(i) * ux + (float)lat_cy(i) * uy + (float)lat_cz(i) * uz);
    return lat_w(i) * (rho_m1 + rho * (cu + 0.5f * cu * cu - usq));
}

__device__ __forceinline__ void equilibrium(float rho_m1, float ux, float uy, float uz, float* feq) {
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) feq[i] = equilibrium_one(i, rho_m1, ux, uy, uz);
}

__device__ __forceinline__ float guo_source(int i, float ux, float uy, float uz, float fx, float fy, float fz) {
    const float cx = (float)lat_cx(i), cy = (float)lat_cy(i), cz = (float)lat_cz(i);
    const float cu = cx * ux + cy * uy + cz * uz;
    return lat_w(i) * ((3.0f * (cx - ux) + 9.0f * cu * cx) * fx + (3.0f * (cy - uy) + 9.0f * cu * cy) * fy + (3.0f * (cz - uz) + 9.0f * cu * cz) * fz);
}

// acc += m a where the multiplier is not zero. In the unrolled direction loop m is a constant,
// so the test is resolved at compile time and the terms of vanishing Hermite polynomials vanish
// (a multiplication by 0.0f cannot be dropped by the compiler on its own).
__device__ __forceinline__ void reg_term(float& acc, const float m, const float a) {
    if (m != 0.0f) acc += m * a;
}

// One cell's collision. FORCE: whether the Guo source is added (the dense kernels fix it at
// compile time with DEF_FORCE; the block kernels pick it per level at run time, as the CPU
// reference skips the source where a level's force is zero).
template <bool FORCE>
__device__ __forceinline__ void collide_with(float* f, const Params& p) {
    float rho_m1, ux, uy, uz;
#if DEF_FORCE
    moments(f, p.fx, p.fy, p.fz, rho_m1, ux, uy, uz);
#else
    moments(f, 0.0f, 0.0f, 0.0f, rho_m1, ux, uy, uz);
#endif
    float feq[DEF_Q];
    equilibrium(rho_m1, ux, uy, uz, feq);
#if DEF_COLLISION == COLLISION_TRT
    // The odd rate as `collision::trt_tau_minus` gives it: Lambda = DEF_TRT_MAGIC with tau- - 1/2
    // at most DEF_TRT_MAX_ODD_RATIO times tau+ - 1/2.
    const float e = p.tau - 0.5f;
    const float wp = 1.0f / p.tau, wm = 1.0f / (0.5f + fminf(DEF_TRT_MAGIC / e, DEF_TRT_MAX_ODD_RATIO * e));
    f[0] += wp * (feq[0] - f[0]);
    if constexpr (FORCE) f[0] += (1.0f - 0.5f * wp) * guo_source(0, ux, uy, uz, p.fx, p.fy, p.fz);
#pragma unroll
    for (int i = 1; i < DEF_Q; i += 2) {
        const float a = f[i], b = f[i + 1];
        const float sp = 0.5f * (a + b) - 0.5f * (feq[i] + feq[i + 1]);
        const float sm = 0.5f * (a - b) - 0.5f * (feq[i] - feq[i + 1]);
        f[i] = a - wp * sp - wm * sm;
        f[i + 1] = b - wp * sp + wm * sm;
        if constexpr (FORCE) {
            const float si = guo_source(i, ux, uy, uz, p.fx, p.fy, p.fz), sj = guo_source(i + 1, ux, uy, uz, p.fx, p.fy, p.fz);
            const float gp = 0.5f * (si + sj), gm = 0.5f * (si - sj);
            f[i] += (1.0f - 0.5f * wp) * gp + (1.0f - 0.5f * wm) * gm;
            f[i + 1] += (1.0f - 0.5f * wp) * gp - (1.0f - 0.5f * wm) * gm;
        }
    }
#elif DEF_COLLISION == COLLISION_REGULARIZED
    // Recursive regularized BGK, as regularized_w in collision.rs (the comment there has the
    // formulae): the non-equilibrium part is rebuilt from its stress, the equilibrium gets the
    // same higher-order Hermite terms, then f_i = feq_i + w_i sum_n H_i^(n) : b^(n) / (n! cs^2n)
    // with b = a_eq + (1 - omega) a_neq.
    float pxx = 0.0f, pyy = 0.0f, pxy = 0.0f;
#if DEF_D == 3
    float pzz = 0.0f, pxz = 0.0f, pyz = 0.0f;
#endif
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const float d = f[i] - feq[i], cx = (float)lat_cx(i), cy = (float)lat_cy(i);
        pxx += cx * cx * d; pyy += cy * cy * d; pxy += cx * cy * d;
#if DEF_D == 3
        const float cz = (float)lat_cz(i);
        pzz += cz * cz * d; pxz += cx * cz * d; pyz += cy * cz * d;
#endif
    }
    const float omega = 1.0f / p.tau, k = 1.0f - omega, r = rho_m1 + 1.0f;
    // b = (1 - omega) a_neq + a_eq: the non-equilibrium coefficients come from the stress (sums
    // over index pairs, as in collision.rs), the equilibrium ones are rho u...u. Every group
    // exists only on the lattices that carry its polynomials.
    const float x = ux, y = uy;
    const float bxx = pxx * k, byy = pyy * k, bxy = pxy * k;
    const float a_xxyy = y * y * pxx + x * x * pyy + 4.0f * x * y * pxy;
    const float b_xxy = (y * pxx + 2.0f * x * pxy) * k + r * x * x * y;
    const float b_xyy = (x * pyy + 2.0f * y * pxy) * k + r * x * y * y;
    const float b_xxyy = a_xxyy * k + r * x * x * y * y;
#if DEF_D == 3
    const float z = uz;
    const float bzz = pzz * k, bxz = pxz * k, byz = pyz * k;
    const float a_xxzz = z * z * pxx + x * x * pzz + 4.0f * x * z * pxz;
    const float a_yyzz = z * z * pyy + y * y * pzz + 4.0f * y * z * pyz;
    const float b_xxz = (z * pxx + 2.0f * x * pxz) * k + r * x * x * z;
    const float b_yyz = (z * pyy + 2.0f * y * pyz) * k + r * y * y * z;
    const float b_xzz = (x * pzz + 2.0f * z * pxz) * k + r * x * z * z;
    const float b_yzz = (y * pzz + 2.0f * z * pyz) * k + r * y * z * z;
    const float b_xxzz = a_xxzz * k + r * x * x * z * z;
    const float b_yyzz = a_yyzz * k + r * y * y * z * z;
#endif
#if DEF_Q == 27
    const float b_xyz = (x * pyz + y * pxz + z * pxy) * k + r * x * y * z;
    const float b_xxyz = (y * z * pxx + 2.0f * x * z * pxy + 2.0f * x * y * pxz + x * x * pyz) * k + r * x * x * y * z;
    const float b_xyyz = (x * z * pyy + 2.0f * y * z * pxy + 2.0f * x * y * pyz + y * y * pxz) * k + r * x * y * y * z;
    const float b_xyzz = (x * y * pzz + 2.0f * y * z * pxz + 2.0f * x * z * pyz + z * z * pxy) * k + r * x * y * z * z;
    const float b_xxyyz = (z * a_xxyy + 2.0f * x * y * (y * pxz + x * pyz)) * k + r * x * x * y * y * z;
    const float b_xxyzz = (y * a_xxzz + 2.0f * x * z * (z * pxy + x * pyz)) * k + r * x * x * y * z * z;
    const float b_xyyzz = (x * a_yyzz + 2.0f * y * z * (z * pxy + y * pxz)) * k + r * x * y * y * z * z;
    const float b_6 = (z * z * a_xxyy + x * x * y * y * pzz + 4.0f * x * y * z * (y * pxz + x * pyz)) * k + r * x * x * y * y * z * z;
#endif
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const float cx = (float)lat_cx(i), cy = (float)lat_cy(i), cs2 = 1.0f / 3.0f;
        const float hx = cx * cx - cs2, hy = cy * cy - cs2;
        // sum_n H^(n) : b^(n) / (n! cs^2n), each distinct index set once with its number of
        // permutations (4.5 = 1/(2 cs^4), 13.5 = 1/(2 cs^6), ... as in collision.rs).
        float acc = 0.0f;
        reg_term(acc, 4.5f * hx, bxx);
        reg_term(acc, 4.5f * hy, byy);
        reg_term(acc, 9.0f * cx * cy, bxy);
#if DEF_D == 3
        const float cz = (float)lat_cz(i), hz = cz * cz - cs2;
        reg_term(acc, 4.5f * hz, bzz);
        reg_term(acc, 9.0f * cx * cz, bxz);
        reg_term(acc, 9.0f * cy * cz, byz);
#endif
        reg_term(acc, 13.5f * hx * cy, b_xxy);
        reg_term(acc, 13.5f * hy * cx, b_xyy);
#if DEF_D == 3
        reg_term(acc, 13.5f * hx * cz, b_xxz);
        reg_term(acc, 13.5f * hy * cz, b_yyz);
        reg_term(acc, 13.5f * hz * cx, b_xzz);
        reg_term(acc, 13.5f * hz * cy, b_yzz);
#endif
#if DEF_Q == 27
        reg_term(acc, 27.0f * cx * cy * cz, b_xyz);
#endif
#if DEF_Q == 19
        // D3Q19: the fourth-order polynomials made orthogonal to the second-order ones.
        reg_term(acc, 20.25f * (hx * hy + hz / 6.0f), b_xxyy);
        reg_term(acc, 20.25f * (hx * hz + hy / 6.0f), b_xxzz);
        reg_term(acc, 20.25f * (hy * hz + hx / 6.0f), b_yyzz);
#else
        reg_term(acc, 20.25f * (hx * hy), b_xxyy);
#endif
#if DEF_Q == 27
        reg_term(acc, 20.25f * (hx * hz), b_xxzz);
        reg_term(acc, 20.25f * (hy * hz), b_yyzz);
        reg_term(acc, 40.5f * hx * cy * cz, b_xxyz);
        reg_term(acc, 40.5f * hy * cx * cz, b_xyyz);
        reg_term(acc, 40.5f * hz * cx * cy, b_xyzz);
        reg_term(acc, 60.75f * hx * hy * cz, b_xxyyz);
        reg_term(acc, 60.75f * hx * hz * cy, b_xxyzz);
        reg_term(acc, 60.75f * hy * hz * cx, b_xyyzz);
        reg_term(acc, 91.125f * hx * hy * hz, b_6);
#endif
        if constexpr (FORCE) {
            // The rebuilt part keeps the first moment -F/2 of f - feq; then the Guo source.
#if DEF_D == 3
            const float first = -1.5f * (cx * p.fx + cy * p.fy + cz * p.fz);
#else
            const float first = -1.5f * (cx * p.fx + cy * p.fy);
#endif
            f[i] = feq[i] + lat_w(i) * (acc + k * first) + (1.0f - 0.5f * omega) * guo_source(i, ux, uy, uz, p.fx, p.fy, p.fz);
        } else {
            f[i] = feq[i] + lat_w(i) * acc;
        }
    }
#else
#if DEF_COLLISION == COLLISION_SMAGORINSKY
    float pxx = 0.0f, pyy = 0.0f, pzz = 0.0f, pxy = 0.0f, pxz = 0.0f, pyz = 0.0f;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const float d = f[i] - feq[i], cx = (float)lat_cx(i), cy = (float)lat_cy(i), cz = (float)lat_cz(i);
        pxx += cx * cx * d; pyy += cy * cy * d; pzz += cz * cz * d;
        pxy += cx * cy * d; pxz += cx * cz * d; pyz += cy * cz * d;
    }
    const float q = sqrtf(pxx * pxx + pyy * pyy + pzz * pzz + 2.0f * (pxy * pxy + pxz * pxz + pyz * pyz));
    const float tau = 0.5f * (p.tau + sqrtf(p.tau * p.tau + 18.0f * 1.41421356f * p.cs * p.cs * q / (rho_m1 + 1.0f)));
    const float omega = 1.0f / tau;
#else
    const float omega = 1.0f / p.tau;
#endif
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[i] += omega * (feq[i] - f[i]);
    if constexpr (FORCE) {
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) f[i] += (1.0f - 0.5f * omega) * guo_source(i, ux, uy, uz, p.fx, p.fy, p.fz);
    }
#endif
}

__device__ __forceinline__ void collide(float* f, const Params& p) { collide_with<DEF_FORCE != 0>(f, p); }

// ---------------------------------------------------------------- boundaries
struct Inlet { int axis, inward, profile; float ux, uy, uz; int lo[3], hi[3]; int sponge, layer; };
struct Outlet { int axis, inward; float density; int sponge, layer, inflow; };

__device__ __forceinline__ void inlet_velocity(const Inlet& b, u32 x, u32 y, u32 z, float* u) {
    float s = 1.0f;
    if (b.profile == 1) {
        const u32 p[3] = {x, y, z};
#pragma unroll
        for (int a = 0; a < DEF_D; a++) {
            if (a == b.axis) continue;
            const float len = (float)(b.hi[a] - b.lo[a] + 1);
            const float t = ((float)p[a] - (float)b.lo[a] + 0.5f) / len;
            s *= fmaxf(4.0f * t * (1.0f - t), 0.0f);
        }
    }
    u[0] = b.ux * s; u[1] = b.uy * s; u[2] = b.uz * s;
}

// Density-1 and velocity an equilibrium boundary cell imposes (Zou-He mass balance of the DDFs
// that came from inside).
__device__ __forceinline__ void boundary_moments(const float* f, unsigned char flag, u32 x, u32 y, u32 z, const Inlet* inlets, const Outlet* outlets, float& rho_m1, float* u) {
    const u32 k = flag & FLAG_KIND, id = flag >> 4;
    const int axis = k == KIND_INLET ? inlets[id].axis : outlets[id].axis;
    const int inward = k == KIND_INLET ? inlets[id].inward : outlets[id].inward;
    float s0 = 0.0f, sk = 0.0f;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) {
        const int cn = (axis == 0 ? lat_cx(i) : axis == 1 ? lat_cy(i) : lat_cz(i)) * inward;
        const float fi = f[i] + lat_w(i);
        if (cn == 0) s0 += fi; else if (cn < 0) sk += fi;
    }
    const float known = s0 + 2.0f * sk;
    if (k == KIND_INLET) {
        inlet_velocity(inlets[id], x, y, z, u);
        const float un = u[axis] * (float)inward;
        rho_m1 = known / (1.0f - un) - 1.0f;
    } else {
        const float rho = outlets[id].density;
        u[0] = u[1] = u[2] = 0.0f;
        u[axis] = (1.0f - known / rho) * (float)inward;
        rho_m1 = rho - 1.0f;
    }
}

// The absorbing layer in front of an inlet or outlet, after the collision of a KIND_SPONGE cell
// whose incoming DDFs had density rho_m1 + 1 and velocity u (sim-core/src/backend/cell.rs,
// `absorb`): f_i -= s (feq_i(rho, u) - feq_i(rho_t, u_t)), s falling off quadratically over
// the layer; the target is the outlet's density with the opposite inlet's velocity (the cell's
// own where there is none), or the inlet's velocity at the cell's density.
__device__ __forceinline__ void absorb(float* f, unsigned char flag, u32 x, u32 y, u32 z, float rho_m1, float ux, float uy, float uz, const Inlet* inlets, const Outlet* outlets) {
    const u32 id = flag >> 4;
    const u32 p[3] = {x, y, z};
    int axis, layer, width;
    float rt = rho_m1, ut[3] = {ux, uy, uz};
    if (id & 8u) {
        const Inlet& b = inlets[id & 7u];
        axis = b.axis; layer = b.layer; width = b.sponge;
        inlet_velocity(b, x, y, z, ut);
    } else {
        const Outlet& o = outlets[id & 7u];
        axis = o.axis; layer = o.layer; width = o.sponge;
        rt = o.density - 1.0f;
        if (o.inflow >= 0) inlet_velocity(inlets[o.inflow], x, y, z, ut);
    }
    const int d = abs((int)p[axis] - layer);
    if (d < 1 || d > width) return;
    const float r = (float)(width + 1 - d) / (float)width;
    const float s = SPONGE_STRENGTH * r * r;
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[i] -= s * (equilibrium_one(i, rho_m1, ux, uy, uz) - equilibrium_one(i, rt, ut[0], ut[1], ut[2]));
}

// Ladd's moving wall: f_i += 6 w_i (c_i . u_w) for DDFs that came from a moving wall; the
// rest DDF gives back what that adds to the cell's mass (nonzero only where the wall ends;
// see moving_walls in sim-core/src/backend/cell.rs).
__device__ __forceinline__ void moving_walls(float* f, const unsigned char* flags, const idx_t* j, const float* walls) {
    float added = 0.0f;
#pragma unroll
    for (int i = 1; i < DEF_Q; i++) {
        const unsigned char sf = flags[j[opposite(i)]];
        if ((sf & FLAG_KIND) == KIND_MOVING) {
            const u32 id = sf >> 4;
            const float d = 6.0f * lat_w(i) * ((float)lat_cx(i) * walls[3 * id] + (float)lat_cy(i) * walls[3 * id + 1] + (float)lat_cz(i) * walls[3 * id + 2]);
            f[i] += d;
            added += d;
        }
    }
    f[0] -= added;
}

// The fields of cell n as the `fields` kernel writes them (density, velocity; four planes of
// DEF_N floats at `mom`), from the moments of its incoming DDFs f. A step kernel given a
// `mom` pointer stores them on the way (a frame's fields at no extra read of the DDFs).
__device__ __forceinline__ void store_moments(float* __restrict__ mom, idx_t n, float rho_m1, float ux, float uy, float uz) {
    mom[n] = rho_m1 + 1.0f;
    mom[(idx_t)DEF_N + n] = ux;
    mom[2 * (idx_t)DEF_N + n] = uy;
    mom[3 * (idx_t)DEF_N + n] = uz;
}
__device__ __forceinline__ void store_cell_moments(float* __restrict__ mom, idx_t n, const float* f, const Params& p) {
    float rho_m1, ux, uy, uz;
    moments(f, p.fx, p.fy, p.fz, rho_m1, ux, uy, uz);
    store_moments(mom, n, rho_m1, ux, uy, uz);
}

// ---------------------------------------------------------------- free-slip walls
// Index of the lattice velocity (cx, cy, cz), -1 where the set has none (a constant where the
// arguments are).
__device__ __forceinline__ constexpr int lat_dir(int cx, int cy, int cz) {
    for (int k = 0; k < DEF_Q; k++) {
        if (lat_cx(k) == cx && lat_cy(k) == cy && lat_cz(k) == cz) return k;
    }
    return -1;
}
// A free-slip wall (kind SLIP, id = the axis A of its normal) reflects specularly, half-way
// (domain.rs, slip_source): the DDF entering cell n along c_i from it left x_s = n - c_i^t one
// step earlier along the mirror image c_m of c_i, towards the wall cell b = n - c_i^A e_A. Sets
// `slot` to where x_s stored it (bb_slot of x_s, whose neighbour along c_m is b) and returns
// true, or returns false where the DDF bounces back (struck head-on, x_s solid, b another wall).
template <int A>
__device__ __forceinline__ bool slip_slot_axis(int i, const idx_t* j, bool odd, const unsigned char* flags, unsigned char wall, idx_t& slot) {
    const int c[3] = {lat_cx(i), lat_cy(i), lat_cz(i)};
    if (c[A] == 0 || (A == 0 ? (c[1] | c[2]) : A == 1 ? (c[0] | c[2]) : (c[0] | c[1])) == 0) return false;
    const int kb = lat_dir(A == 0 ? -c[0] : 0, A == 1 ? -c[1] : 0, A == 2 ? -c[2] : 0);
    const int ks = lat_dir(A == 0 ? 0 : -c[0], A == 1 ? 0 : -c[1], A == 2 ? 0 : -c[2]);
    const int m = lat_dir(A == 0 ? -c[0] : c[0], A == 1 ? -c[1] : c[1], A == 2 ? -c[2] : c[2]);
    if (kb < 0 || ks < 0 || m < 0) return false;
    const idx_t b = j[kb], xs = j[ks];
    if ((flags[b] & ~FLAG_NEAR) != (wall & ~FLAG_NEAR) || is_solid(flags[xs])) return false;
    idx_t jb[DEF_Q];
#pragma unroll
    for (int k = 0; k < DEF_Q; k++) jb[k] = b;
    slot = bb_slot((int)opposite((u32)m), xs, jb, odd);
    return true;
}
// Slot of incoming DDF i of cell n whose source is the wall cell with flag `wall`.
__device__ __forceinline__ idx_t wall_slot(int i, idx_t n, const idx_t* j, bool odd, const unsigned char* flags, unsigned char wall) {
    idx_t slot = bb_slot(i, n, j, odd);
#if DEF_SLIP && DEF_SCHEME != SCHEME_GHOST
    if ((wall & FLAG_KIND) == KIND_SLIP) {
        const u32 a = wall >> 4;
        if (a == 0u) slip_slot_axis<0>(i, j, odd, flags, wall, slot);
        else if (a == 1u) slip_slot_axis<1>(i, j, odd, flags, wall, slot);
        else if (a == 2u) slip_slot_axis<2>(i, j, odd, flags, wall, slot);
    }
#endif
    return slot;
}

// Load the incoming DDFs of cell n (decoded; halfway bounce-back or free-slip reflection where
// `near`).
__device__ __forceinline__ void load_incoming(const fpxx* fi, idx_t n, const idx_t* j, bool odd, bool near, const unsigned char* flags, float* f) {
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[i] = dec(ldf(fi + load_slot(i, n, j, odd)));
#if DEF_SCHEME != SCHEME_SWAP
    if (near) {
#pragma unroll
        for (int i = 1; i < DEF_Q; i++) {
            const unsigned char sf = flags[j[opposite(i)]];
            if (is_solid(sf)) f[i] = dec(ldf(fi + wall_slot(i, n, j, odd, flags, sf)));
        }
    }
#endif
}

// ---------------------------------------------------------------- interpolated walls
// Interpolated bounce-back (Bouzidi, Firdaouss and Lallemand 2001) on the links from fluid cells
// into obstacles with an exact shape; sim-core/src/walls.rs explains the rule and mirrors it.
// `links` (never null): [C, mask, cells[C] ascending, first link[C + 1], q as float bits[L]];
// `mask` has bit k set for obstacle id k with interpolated walls. `lsave[l]` holds f*_k(x) of
// link l (the outgoing DDF away from the wall, as stored) from the step before.
__device__ __forceinline__ bool curved_link(u32 mask, unsigned char f) { return (f & FLAG_KIND) == KIND_SOLID && ((mask >> (f >> 4)) & 1u); }

// First link of cell n (binary search over the cells with links), or -1.
__device__ __forceinline__ int link_first(const u32* __restrict__ links, idx_t n) {
    const u32 c = links[0];
    const u32* cells = links + 2;
    u32 lo = 0u, hi = c;
    while (lo < hi) {
        const u32 mid = (lo + hi) >> 1;
        if ((idx_t)cells[mid] < n) lo = mid + 1u; else hi = mid;
    }
    return (lo < c && (idx_t)cells[lo] == n) ? (int)links[2u + c + lo] : -1;
}

// One link: a = f*_d(x) (halfway value), up = f*_d(x - c_d), kept = f*_k(x); thin when x - c_d
// is solid (no upstream value: halfway for q < 1/2).
__device__ __forceinline__ float bouzidi(float q, float a, float up, float kept, bool thin) {
    if (q < 0.5f) return thin ? a : 2.0f * q * a + (1.0f - 2.0f * q) * up;
    const float s = 0.5f / q;
    return s * a + (1.0f - s) * kept;
}

// Replace the values that came back from curved walls in the incoming DDFs f (halfway
// bounce-back applied) of a cell whose first link is l0; with `acc`, add the momentum exchanged
// over those links, c_d (f*_d(x) + f_k(x)) (Wen et al. 2014 for walls at rest).
__device__ __forceinline__ void curved_walls(float* f, int l0, const idx_t* j, const unsigned char* __restrict__ flags, const u32* __restrict__ links, const float* __restrict__ lsave, double* acc) {
    const u32 mask = links[1], c = links[0];
    const float* q = (const float*)(links + 3u + 2u * c);
    int l = l0;
#pragma unroll
    for (int d = 1; d < DEF_Q; d++) {
        const unsigned char nf = flags[j[d]];
        if (!curved_link(mask, nf)) continue;
        const int k = (int)opposite((u32)d);
        const float a = f[k];
        const float back = bouzidi(q[l], a, f[d], lsave[l], is_solid(flags[j[k]]));
        f[k] = back;
        if (acc) {
            const double v = (double)(a + lat_w(d)) + (double)(back + lat_w(k));
            const u32 id = nf >> 4;
            if (lat_cx(d)) atomicAdd(&acc[3 * id], (double)lat_cx(d) * v);
            if (lat_cy(d)) atomicAdd(&acc[3 * id + 1], (double)lat_cy(d) * v);
            if (lat_cz(d)) atomicAdd(&acc[3 * id + 2], (double)lat_cz(d) * v);
        }
        l++;
    }
}

// After the collision: keep f*_k(x) of each link of the cell, rounded as the buffer stores it.
__device__ __forceinline__ void keep_links(const float* f, int l0, const idx_t* j, const unsigned char* __restrict__ flags, const u32 mask, float* __restrict__ lsave) {
    int l = l0;
#pragma unroll
    for (int d = 1; d < DEF_Q; d++) {
        if (!curved_link(mask, flags[j[d]])) continue;
        lsave[l++] = dec(enc(f[opposite((u32)d)]));
    }
}

// Collide one non-solid cell that touches a boundary (its incoming DDFs in f, halfway
// bounce-back already applied): moving walls, inlet/outlet equilibrium or the collision, then
// the momentum exchange with obstacles summed into `acc` (shared, 3 doubles per obstacle id),
// except over the links of obstacles in `cmask` (curved_walls sums those).
// With `mom`, the cell's fields go there first (store_moments; `n` is the cell's index).
__device__ __forceinline__ void update_boundary_cell(float* f, unsigned char flag, u32 x, u32 y, u32 z, const idx_t* j, const unsigned char* __restrict__ flags, const Params& p, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* acc, float* __restrict__ mom = nullptr, idx_t n = 0, u32 cmask = 0u) {
    moving_walls(f, flags, j, walls);
    const u32 k = flag & FLAG_KIND;
    if (k == KIND_INLET || k == KIND_OUTLET) {
        float rho_m1, u[3];
        boundary_moments(f, flag, x, y, z, inlets, outlets, rho_m1, u);
        if (mom) store_moments(mom, n, rho_m1, u[0], u[1], u[2]);
        equilibrium(rho_m1, u[0], u[1], u[2], f);
    } else if (k == KIND_SPONGE) {
        float rho_m1, ux, uy, uz;
        moments(f, p.fx, p.fy, p.fz, rho_m1, ux, uy, uz);
        if (mom) store_moments(mom, n, rho_m1, ux, uy, uz);
        collide(f, p);
        absorb(f, flag, x, y, z, rho_m1, ux, uy, uz, inlets, outlets);
    } else {
        if (mom) store_cell_moments(mom, n, f, p);
        collide(f, p);
    }
#pragma unroll
    for (int i = 1; i < DEF_Q; i++) {
        const unsigned char df = flags[j[i]];
        if ((df & FLAG_KIND) == KIND_SOLID && (df >> 4) > 0 && !curved_link(cmask, df)) {
            const double v = 2.0 * (double)(f[i] + lat_w(i));
            const u32 id = df >> 4;
            if (lat_cx(i)) atomicAdd(&acc[3 * id], (double)lat_cx(i) * v);
            if (lat_cy(i)) atomicAdd(&acc[3 * id + 1], (double)lat_cy(i) * v);
            if (lat_cz(i)) atomicAdd(&acc[3 * id + 2], (double)lat_cz(i) * v);
        }
    }
}
