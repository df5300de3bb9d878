// The mass-conserving 5/3 lifting wavelet on one block in shared memory (seed 000), used by the
// compression kernels (compress.cu) and, later, by the subgrid kernels. Mirrors
// sim-core/src/compress/wavelet.rs operation for operation: keep them in sync. Compile without
// fused multiply-adds (--fmad=false) so both give the same bits.
//
// The host prepends:
//   WL_NX WL_NY WL_NZ   samples of a full block per axis (33, 17, 17)
//   WL_LX WL_LY WL_LZ   wavelet levels per axis (3, 2, 2)
//   WL_THREADS          threads per CUDA block
//
// A block buffer holds WL_NX * WL_NY * WL_NZ floats, x fastest. Partial blocks (at a grid's far
// edges) use the same layout with smaller extents; samples outside them are zero.

#define WL_N (WL_NX * WL_NY * WL_NZ)
#define WL_MASK_WORDS ((WL_N + 31) / 32)
#define WL_MAX_LEVELS (WL_LX > WL_LY ? (WL_LX > WL_LZ ? WL_LX : WL_LZ) : (WL_LY > WL_LZ ? WL_LY : WL_LZ))

typedef unsigned int wl_u32;

__device__ __forceinline__ int wl_levels_of(int a) { return a == 0 ? WL_LX : (a == 1 ? WL_LY : WL_LZ); }
__device__ __forceinline__ int wl_stride_of(int a) { return a == 0 ? 1 : (a == 1 ? WL_NX : WL_NX * WL_NY); }

// Levels a line of n samples gets (it stops below 5 samples on its lattice): line_levels().
__device__ __forceinline__ int wl_line_levels(int n, int levels) {
    int l = 0;
    while (l < levels && ((n - 1) >> l) >= 4) l++;
    return l;
}

// The level that made coordinate p a detail on a line of n samples, or -1 (approximation to the
// end, including dangling last samples): axis_class().
__device__ __forceinline__ int wl_axis_detail(int p, int n, int levels) {
    const int ll = wl_line_levels(n, levels);
    for (int l = 0; l < ll; l++) {
        if ((p >> l) & 1) return p + (1 << l) < n ? l : -1;
    }
    return -1;
}

// Whether coordinate p is still an approximation along its axis when level l starts.
__device__ __forceinline__ bool wl_approx_before(int p, int n, int levels, int l) {
    const int d = wl_axis_detail(p, n, levels);
    return d < 0 || d >= l;
}

__device__ __forceinline__ float wl_weight(int k, int m) { return (k == 0 || k + 1 == m) ? 0.5f : 0.25f; }

__device__ __forceinline__ int wl_details_on_line(int c) {
    const int odd = (c & 1) ? c : c - 1;
    return odd > 1 ? (odd - 1) / 2 : 0;
}

// Per-block tables in shared memory, filled by wl_setup: for each axis and level the
// coordinates still approximations when the level starts (the lines of the other axes run
// through them), and each coordinate's detail level along its axis (-1: approximation).
struct WlTables {
    unsigned char coords[3][WL_MAX_LEVELS][WL_NX];
    int count[3][WL_MAX_LEVELS];
    signed char cls[3][WL_NX];
    int ext[3];
};

// Fill the tables for a block of extents ext (all threads call it; it ends with a barrier).
__device__ void wl_setup(WlTables* tab, const int ext[3]) {
    const int a = threadIdx.x;
    if (a < 3) {
        tab->ext[a] = ext[a];
        for (int p = 0; p < ext[a]; p++) tab->cls[a][p] = (signed char)wl_axis_detail(p, ext[a], wl_levels_of(a));
        for (int l = 0; l < WL_MAX_LEVELS; l++) {
            int c = 0;
            for (int p = 0; p < ext[a]; p++) {
                if (wl_approx_before(p, ext[a], wl_levels_of(a), l)) tab->coords[a][l][c++] = (unsigned char)p;
            }
            tab->count[a][l] = c;
        }
    }
    __syncthreads();
}

// Detail level of sample (x, y, z) from the tables: wl_detail_level.
__device__ __forceinline__ int wl_level_of(const WlTables* tab, int x, int y, int z) {
    int lv = 1 << 30;
    const int d0 = tab->cls[0][x], d1 = tab->cls[1][y], d2 = tab->cls[2][z];
    if (d0 >= 0 && d0 < lv) lv = d0;
    if (d1 >= 0 && d1 < lv) lv = d1;
    if (d2 >= 0 && d2 < lv) lv = d2;
    return lv == (1 << 30) ? -1 : lv;
}

#define WL_NMAX (WL_NX > WL_NY ? (WL_NX > WL_NZ ? WL_NX : WL_NZ) : (WL_NY > WL_NZ ? WL_NY : WL_NZ))

// One level of lifting (or its inverse) on the line s[base + i * st], i < c, staged through
// registers: the line is loaded at once, lifted, and stored at once, so no shared memory load
// waits on a store. Same operations in the same order as lift_line / unlift_line.
template <bool INVERSE>
__device__ __forceinline__ void wl_line(float* s, int base, int st, int c) {
    float v[WL_NMAX];
#pragma unroll
    for (int i = 0; i < WL_NMAX; i++) {
        if (i < c) v[i] = s[base + i * st];
    }
    const int m = wl_details_on_line(c);
    if (!INVERSE) {
#pragma unroll
        for (int k = 0; k < (WL_NMAX - 1) / 2; k++) {
            if (k < m) v[2 * k + 1] = __fsub_rn(v[2 * k + 1], __fmul_rn(__fadd_rn(v[2 * k], v[2 * k + 2]), 0.5f));
        }
#pragma unroll
        for (int k = 1; k < (WL_NMAX - 1) / 2; k++) {
            if (k < m) {
                const float u = __fadd_rn(__fmul_rn(wl_weight(k - 1, m), v[2 * k - 1]), __fmul_rn(wl_weight(k, m), v[2 * k + 1]));
                v[2 * k] = __fadd_rn(v[2 * k], u);
            }
        }
    } else {
#pragma unroll
        for (int k = 1; k < (WL_NMAX - 1) / 2; k++) {
            if (k < m) {
                const float u = __fadd_rn(__fmul_rn(wl_weight(k - 1, m), v[2 * k - 1]), __fmul_rn(wl_weight(k, m), v[2 * k + 1]));
                v[2 * k] = __fsub_rn(v[2 * k], u);
            }
        }
#pragma unroll
        for (int k = 0; k < (WL_NMAX - 1) / 2; k++) {
            if (k < m) v[2 * k + 1] = __fadd_rn(v[2 * k + 1], __fmul_rn(__fadd_rn(v[2 * k], v[2 * k + 2]), 0.5f));
        }
    }
#pragma unroll
    for (int i = 0; i < WL_NMAX; i++) {
        if (i < c) s[base + i * st] = v[i];
    }
}

// Every line of level l along axis a, a line per thread, ending with a barrier. The lines run
// through the coordinates of the other two axes that are still approximations (the tables);
// consecutive threads take consecutive coordinates of the next axis, which puts their lines in
// different shared memory banks (the 2^k + 1 sizes).
template <bool INVERSE>
__device__ __forceinline__ void wl_axis_pass(float* s, const WlTables* tab, int l, int a) {
    const int b = (a + 1) % 3, c = (a + 2) % 3;
    const int step = 1 << l;
    const int count = (tab->ext[a] - 1) / step + 1;
    const int st = wl_stride_of(a) * step;
    const int nb = tab->count[b][l];
    const int lines = nb * tab->count[c][l];
    const int sb = wl_stride_of(b), sc = wl_stride_of(c);
    for (int t = threadIdx.x; t < lines; t += WL_THREADS) {
        const int base = tab->coords[b][l][t % nb] * sb + tab->coords[c][l][t / nb] * sc;
        wl_line<INVERSE>(s, base, st, count);
    }
    __syncthreads();
}

// Forward transform of the block in s (all threads of the CUDA block call it): forward().
__device__ void wl_forward(float* s, const WlTables* tab) {
    for (int l = 0; l < WL_MAX_LEVELS; l++) {
        for (int a = 0; a < 3; a++) {
            if (l < wl_line_levels(tab->ext[a], wl_levels_of(a))) wl_axis_pass<false>(s, tab, l, a);
        }
    }
}

// Inverse of wl_forward: inverse().
__device__ void wl_inverse(float* s, const WlTables* tab) {
    for (int l = WL_MAX_LEVELS - 1; l >= 0; l--) {
        for (int a = 2; a >= 0; a--) {
            if (l < wl_line_levels(tab->ext[a], wl_levels_of(a))) wl_axis_pass<true>(s, tab, l, a);
        }
    }
}

// Whether a coefficient is kept: Thresholds::keeps() with tau_l = tau * 2^(l+1).
__device__ __forceinline__ bool wl_keeps(float v, int level, float tau) {
    return v != 0.0f && (level < 0 || !(fabsf(v) < tau * (float)(2u << level)));
}
