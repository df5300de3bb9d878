// Esoflow dense-grid kernels. Prepended by the generated header and common.cuh.
// Bricks: BX x BY x BZ cells, one CUDA block each; x fastest so a warp reads 32 consecutive
// cells (coalesced SoA). Bricks are classified on the host: all-solid bricks are skipped,
// plain-fluid bricks run `stream_collide_lean` (no flag reads), the rest `stream_collide_boundary`.

#define BX 32
#if DEF_D == 3
#define BY 2
#define BZ 2
#else
#define BY 4
#define BZ 1
#endif
#define BRICK_THREADS (BX * BY * BZ)
// Minimum resident bricks per SM for the lean kernel (caps its registers; tuned per card).
#ifndef DEF_MIN_BLOCKS
#define DEF_MIN_BLOCKS 1
#endif
#define NBX ((DEF_NX + BX - 1) / BX)
#define NBY ((DEF_NY + BY - 1) / BY)

__device__ __forceinline__ bool brick_cell(u32 brick, u32& x, u32& y, u32& z) {
    const u32 bx = brick % NBX, r = brick / NBX, by = r % NBY, bz = r / NBY;
    const u32 t = threadIdx.x;
    x = bx * BX + t % BX;
    y = by * BY + (t / BX) % BY;
    z = bz * BZ + t / (BX * BY);
    return x < DEF_NX && y < DEF_NY && z < DEF_NZ;
}

// Plain fluid bricks: no flag reads, fewest registers.
extern "C" __global__ void __launch_bounds__(BRICK_THREADS, DEF_MIN_BLOCKS) stream_collide_lean(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ bricks, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz) {
    u32 x, y, z;
    if (!brick_cell(bricks[blockIdx.x], x, y, z)) return;
    const idx_t n = idx3(x, y, z);
    idx_t j[DEF_Q];
    neighbours(x, y, z, j);
    const bool odd = t & 1ull;
    float f[DEF_Q];
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) f[i] = dec(ldf(fi + load_slot(i, n, j, odd)));
    const Params p = {tau, cs, fx, fy, fz};
    collide(f, p);
#pragma unroll
    for (int i = 0; i < DEF_Q; i++) stf(fo + store_slot(i, n, j, odd), enc(f[i]));
}

// Bricks with boundaries: bounce-back, moving walls, inlets/outlets, obstacle forces.
extern "C" __global__ void __launch_bounds__(BRICK_THREADS) stream_collide_boundary(fpxx* __restrict__ fi, fpxx* __restrict__ fo, const u32* __restrict__ bricks, const unsigned char* __restrict__ flags, const u64 t, const float tau, const float cs, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, double* __restrict__ forces) {
    __shared__ double acc[16 * 3];
    if (threadIdx.x < 48) acc[threadIdx.x] = 0.0;
    __syncthreads();
    u32 x, y, z;
    const bool inside = brick_cell(bricks[blockIdx.x], x, y, z);
    const idx_t n = inside ? idx3(x, y, z) : (idx_t)0;
    const unsigned char flag = inside ? flags[n] : (unsigned char)KIND_SOLID;
    if (!is_solid(flag)) {
        idx_t j[DEF_Q];
        neighbours(x, y, z, j);
        const bool odd = t & 1ull;
        const bool near = flag & FLAG_NEAR;
        float f[DEF_Q];
        load_incoming(fi, n, j, odd, near, flags, f);
        const Params p = {tau, cs, fx, fy, fz};
        if (near) {
            moving_walls(f, flags, j, walls);
            const u32 k = flag & FLAG_KIND;
            if (k == KIND_INLET || k == KIND_OUTLET) {
                float rho_m1, u[3];
                boundary_moments(f, flag, x, y, z, inlets, outlets, rho_m1, u);
                equilibrium(rho_m1, u[0], u[1], u[2], f);
            } else {
                collide(f, p);
            }
#pragma unroll
            for (int i = 1; i < DEF_Q; i++) {
                const unsigned char df = flags[j[i]];
                if ((df & FLAG_KIND) == KIND_SOLID && (df >> 4) > 0) {
                    const double v = 2.0 * (double)(f[i] + lat_w(i));
                    const u32 id = df >> 4;
                    if (lat_cx(i)) atomicAdd(&acc[3 * id], (double)lat_cx(i) * v);
                    if (lat_cy(i)) atomicAdd(&acc[3 * id + 1], (double)lat_cy(i) * v);
                    if (lat_cz(i)) atomicAdd(&acc[3 * id + 2], (double)lat_cz(i) * v);
                }
            }
        } else {
            collide(f, p);
        }
#pragma unroll
        for (int i = 0; i < DEF_Q; i++) stf(fo + store_slot(i, n, j, odd), enc(f[i]));
    }
    __syncthreads();
    if (threadIdx.x < 48 && acc[threadIdx.x] != 0.0) atomicAdd(&forces[threadIdx.x], acc[threadIdx.x]);
}

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

// Density and velocity of every cell from its incoming DDFs (parity-aware); only when a frame
// or the stats need them. Output: rho, ux, uy, uz as four planes of N floats.
extern "C" __global__ void fields(const fpxx* __restrict__ fi, const unsigned char* __restrict__ flags, const u64 t, const float fx, const float fy, const float fz, const float* __restrict__ walls, const Inlet* __restrict__ inlets, const Outlet* __restrict__ outlets, float* __restrict__ out) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= DEF_N) return;
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

// Vorticity magnitude and Q criterion from the velocity planes (central differences, periodic).
extern "C" __global__ void derived(const float* __restrict__ fl, const unsigned char* __restrict__ flags, float* __restrict__ out) {
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= DEF_N) return;
    if (is_solid(flags[n])) { out[n] = 0.0f; out[DEF_N + n] = 0.0f; return; }
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
    const float wx = g[2][1] - g[1][2], wy = g[0][2] - g[2][0], wz = g[1][0] - g[0][1];
    float s2 = 0.0f, o2 = 0.0f;
#pragma unroll
    for (int a = 0; a < 3; a++)
#pragma unroll
        for (int b = 0; b < 3; b++) {
            const float s = 0.5f * (g[a][b] + g[b][a]), o = 0.5f * (g[a][b] - g[b][a]);
            s2 += s * s; o2 += o * o;
        }
    out[n] = sqrtf(wx * wx + wy * wy + wz * wz);
    out[DEF_N + n] = 0.5f * (o2 - s2);
}

// Mass, largest speed and the first non-finite cell, from the field planes.
extern "C" __global__ void stats(const float* __restrict__ fl, const unsigned char* __restrict__ flags, double* __restrict__ mass, u32* __restrict__ max_u_bits, u64* __restrict__ first_bad) {
    __shared__ double sm[256];
    __shared__ float su[256];
    const idx_t n = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    double m = 0.0;
    float s = 0.0f;
    if (n < DEF_N && !is_solid(flags[n])) {
        const float r = fl[n], ux = fl[DEF_N + n], uy = fl[2 * DEF_N + n], uz = fl[3 * DEF_N + n];
        const float sp = sqrtf(ux * ux + uy * uy + uz * uz);
        if (!isfinite(r) || !isfinite(sp)) {
            atomicMin(first_bad, (u64)n);
        } else {
            m = (double)r;
            s = sp;
        }
    }
    sm[threadIdx.x] = m;
    su[threadIdx.x] = s;
    __syncthreads();
    for (u32 k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            sm[threadIdx.x] += sm[threadIdx.x + k];
            su[threadIdx.x] = fmaxf(su[threadIdx.x], su[threadIdx.x + k]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(mass, sm[0]);
        atomicMax(max_u_bits, __float_as_uint(su[0]));
    }
}
