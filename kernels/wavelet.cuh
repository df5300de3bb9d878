// The mass-conserving 5/3 lifting wavelet on one block in shared memory (Flint et al. 2024), used by the
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

// Per axis a: samples of a full block, wavelet levels, stride in the block buffer.
__host__ __device__ constexpr int wl_n_of(int a) { return a == 0 ? WL_NX : (a == 1 ? WL_NY : WL_NZ); }
__host__ __device__ constexpr int wl_levels_of(int a) { return a == 0 ? WL_LX : (a == 1 ? WL_LY : WL_LZ); }
__host__ __device__ constexpr int wl_stride_of(int a) { return a == 0 ? 1 : (a == 1 ? WL_NX : WL_NX * WL_NY); }

// Levels a line of n samples gets (it stops below 5 samples on its lattice): line_levels().
__host__ __device__ constexpr int wl_line_levels(int n, int levels) {
    int l = 0;
    while (l < levels && ((n - 1) >> l) >= 4) l++;
    return l;
}

// The level that made coordinate p a detail on a line of n samples, or -1 (approximation to the
// end, including dangling last samples): axis_class().
__host__ __device__ constexpr int wl_axis_detail(int p, int n, int levels) {
    const int ll = wl_line_levels(n, levels);
    for (int l = 0; l < ll; l++) {
        if ((p >> l) & 1) return p + (1 << l) < n ? l : -1;
    }
    return -1;
}

// Every coordinate's wl_axis_detail for a block's extents, one table per axis (x, then y, then
// z), filled once per block so that the per-sample and per-line tests are lookups: the
// instruction count, not memory, bounds these kernels.
struct WlAxisLevels {
    signed char v[WL_NX + WL_NY + WL_NZ];
};

// Fill the tables (all threads of the block; a barrier must follow before they are read).
__device__ __forceinline__ void wl_levels_fill(WlAxisLevels* t, const int ext[3]) {
    for (int i = threadIdx.x; i < WL_NX + WL_NY + WL_NZ; i += WL_THREADS) {
        const int a = i < WL_NX ? 0 : (i < WL_NX + WL_NY ? 1 : 2);
        const int p = i - (a == 0 ? 0 : (a == 1 ? WL_NX : WL_NX + WL_NY));
        t->v[i] = (signed char)wl_axis_detail(p, ext[a], wl_levels_of(a));
    }
}

// wl_axis_detail of coordinate p along axis a, from the tables.
__device__ __forceinline__ int wl_axis_detail_t(const WlAxisLevels* t, int a, int p) {
    return t->v[(a == 0 ? 0 : (a == 1 ? WL_NX : WL_NX + WL_NY)) + p];
}

// The level at which sample (x, y, z) became a detail, or -1 (detail_level()), from the
// tables: the smallest non-negative level of the three (as unsigned,
// -1 is the largest), or -1.
__device__ __forceinline__ int wl_detail_level_t(const WlAxisLevels* t, int x, int y, int z) {
    const unsigned d0 = (unsigned)(int)t->v[x], d1 = (unsigned)(int)t->v[WL_NX + y], d2 = (unsigned)(int)t->v[WL_NX + WL_NY + z];
    return (int)min(d0, min(d1, d2));
}

__device__ __forceinline__ float wl_weight(int k, int m) { return (k == 0 || k + 1 == m) ? 0.5f : 0.25f; }

__host__ __device__ constexpr int wl_details_on_line(int c) {
    const int odd = (c & 1) ? c : c - 1;
    return odd > 1 ? (odd - 1) / 2 : 0;
}

// One level of lifting on the line s[base + i * stride], i < c: lift_line(). Partial blocks
// use these run-time loops; full blocks use wl_line_rt, the same operations with the length as
// a template argument (a template per length for partial blocks too was slower: code size).
__device__ __forceinline__ void wl_lift_line(float* s, int base, int stride, int c) {
    const int m = wl_details_on_line(c);
    for (int k = 0; k < m; k++) {
        const float p = __fmul_rn(__fadd_rn(s[base + 2 * k * stride], s[base + (2 * k + 2) * stride]), 0.5f);
        s[base + (2 * k + 1) * stride] = __fsub_rn(s[base + (2 * k + 1) * stride], p);
    }
    for (int k = 1; k < m; k++) {
        const float t = __fadd_rn(__fmul_rn(wl_weight(k - 1, m), s[base + (2 * k - 1) * stride]),
                                  __fmul_rn(wl_weight(k, m), s[base + (2 * k + 1) * stride]));
        s[base + 2 * k * stride] = __fadd_rn(s[base + 2 * k * stride], t);
    }
}

// Inverse of wl_lift_line: unlift_line().
__device__ __forceinline__ void wl_unlift_line(float* s, int base, int stride, int c) {
    const int m = wl_details_on_line(c);
    for (int k = 1; k < m; k++) {
        const float t = __fadd_rn(__fmul_rn(wl_weight(k - 1, m), s[base + (2 * k - 1) * stride]),
                                  __fmul_rn(wl_weight(k, m), s[base + (2 * k + 1) * stride]));
        s[base + 2 * k * stride] = __fsub_rn(s[base + 2 * k * stride], t);
    }
    for (int k = 0; k < m; k++) {
        const float p = __fmul_rn(__fadd_rn(s[base + 2 * k * stride], s[base + (2 * k + 2) * stride]), 0.5f);
        s[base + (2 * k + 1) * stride] = __fadd_rn(s[base + (2 * k + 1) * stride], p);
    }
}

// Every line of level l along axis a, spread over the CUDA block's threads; consecutive threads
// take consecutive coordinates of the next axis, which puts their lines in different shared
// memory banks (the 2^k + 1 sizes).
template <bool INVERSE>
__device__ __forceinline__ void wl_axis_pass(float* s, const int ext[3], const WlAxisLevels* lv, int l, int a) {
    const int b = (a + 1) % 3, c = (a + 2) % 3;
    const int step = 1 << l;
    const int count = (ext[a] - 1) / step + 1;
    const int stride = wl_stride_of(a) * step;
    const int lines = ext[b] * ext[c];
    for (int t = threadIdx.x; t < lines; t += WL_THREADS) {
        const int qb = t % ext[b], qc = t / ext[b];
        const int db = wl_axis_detail_t(lv, b, qb), dc = wl_axis_detail_t(lv, c, qc);
        if ((db >= 0 && db < l) || (dc >= 0 && dc < l)) continue;  // not an approximation any more
        const int base = qb * wl_stride_of(b) + qc * wl_stride_of(c);
        if (INVERSE) wl_unlift_line(s, base, stride, count);
        else wl_lift_line(s, base, stride, count);
    }
}

// One level of lifting on a line with M details (2M + 1 samples, plus a dangling last sample
// on even lines, left alone) at s[base + i * stride], in registers: lift_line(), or with INV
// its inverse unlift_line().
template <int M, bool INV>
__device__ __forceinline__ void wl_line_rt(float* s, int base, int stride) {
    if constexpr (M > 0) {
        float v[2 * M + 1];
#pragma unroll
        for (int i = 0; i <= 2 * M; i++) v[i] = s[base + i * stride];
        if (!INV) {
#pragma unroll
            for (int k = 0; k < M; k++) v[2 * k + 1] = __fsub_rn(v[2 * k + 1], __fmul_rn(__fadd_rn(v[2 * k], v[2 * k + 2]), 0.5f));
        }
#pragma unroll
        for (int k = 1; k < M; k++) {
            const float t = __fadd_rn(__fmul_rn(k == 1 ? 0.5f : 0.25f, v[2 * k - 1]), __fmul_rn(k + 1 == M ? 0.5f : 0.25f, v[2 * k + 1]));
            v[2 * k] = INV ? __fsub_rn(v[2 * k], t) : __fadd_rn(v[2 * k], t);
        }
        if (INV) {
#pragma unroll
            for (int k = 0; k < M; k++) v[2 * k + 1] = __fadd_rn(v[2 * k + 1], __fmul_rn(__fadd_rn(v[2 * k], v[2 * k + 2]), 0.5f));
        }
#pragma unroll
        for (int i = 1; i < 2 * M; i++) s[base + i * stride] = v[i];
    }
}


// ---- Full blocks: every line length is known at compile time ----
// A block with the full extents WL_N* (all but the far-edge blocks of a field) has lines of
// 2^k + 1 samples on every level, so the lines' strides are constants too, and only the lines
// still on the approximation lattice are enumerated (no per-line table test).

// Levels along axis a of a full block.
__host__ __device__ constexpr int wl_full_levels(int a) { return wl_line_levels(wl_n_of(a), wl_levels_of(a)); }
// Whether full blocks have odd lines without a dangling sample on every level (2^k + 1 sizes).
__host__ __device__ constexpr bool wl_axis_regular(int a) { return ((wl_n_of(a) - 1) % (1 << wl_full_levels(a))) == 0; }
#define WL_FULL_FAST (wl_axis_regular(0) && wl_axis_regular(1) && wl_axis_regular(2))

// Every line of level L along axis A of a full block: the lines whose other two coordinates
// are still approximations, i.e. multiples of 2^min(L, that axis's levels).
template <int L, int A, bool INV>
__device__ __forceinline__ void wl_full_pass(float* s) {
    constexpr int B = (A + 1) % 3, K = (A + 2) % 3;
    constexpr int LB = L < wl_full_levels(B) ? L : wl_full_levels(B);
    constexpr int LK = L < wl_full_levels(K) ? L : wl_full_levels(K);
    constexpr int NB = ((wl_n_of(B) - 1) >> LB) + 1, NK = ((wl_n_of(K) - 1) >> LK) + 1;
    constexpr int COUNT = ((wl_n_of(A) - 1) >> L) + 1;
    for (int t = threadIdx.x; t < NB * NK; t += WL_THREADS) {
        const int qb = (t % NB) << LB, qk = (t / NB) << LK;
        wl_line_rt<wl_details_on_line(COUNT), INV>(s, qb * wl_stride_of(B) + qk * wl_stride_of(K), wl_stride_of(A) << L);
    }
}

template <int L, int A, bool INV>
__device__ __forceinline__ void wl_full_step(float* s) {
    if constexpr (L < wl_full_levels(A)) {
        wl_full_pass<L, A, INV>(s);
        __syncthreads();
    }
}

template <int L>
__device__ __forceinline__ void wl_forward_full(float* s) {
    if constexpr (L < WL_MAX_LEVELS) {
        wl_full_step<L, 0, false>(s);
        wl_full_step<L, 1, false>(s);
        wl_full_step<L, 2, false>(s);
        wl_forward_full<L + 1>(s);
    }
}

template <int L>
__device__ __forceinline__ void wl_inverse_full(float* s) {
    if constexpr (L >= 0) {
        wl_full_step<L, 2, true>(s);
        wl_full_step<L, 1, true>(s);
        wl_full_step<L, 0, true>(s);
        wl_inverse_full<L - 1>(s);
    }
}

// The detail level of every sample of a full block (WL_MAX_LEVELS for the approximations),
// built at compile time: the full blocks' keep test is a table read instead of index math.
struct WlLevelTable {
    unsigned char v[WL_N];
};
__host__ __device__ constexpr WlLevelTable wl_make_level_table() {
    WlLevelTable t{};
    for (int z = 0; z < WL_NZ; z++) {
        const unsigned c = (unsigned)wl_axis_detail(z, WL_NZ, WL_LZ);
        for (int y = 0; y < WL_NY; y++) {
            const unsigned b = (unsigned)wl_axis_detail(y, WL_NY, WL_LY);
            for (int x = 0; x < WL_NX; x++) {
                const unsigned a = (unsigned)wl_axis_detail(x, WL_NX, WL_LX);
                unsigned m = a < b ? a : b;
                m = m < c ? m : c;
                t.v[x + WL_NX * (y + WL_NY * z)] = (unsigned char)(m == 0xffffffffu ? WL_MAX_LEVELS : m);
            }
        }
    }
    return t;
}
__device__ const WlLevelTable wl_level_table = wl_make_level_table();

// Whether a block has the full extents (and the shape allows the register path).
__device__ __forceinline__ bool wl_is_full(const int ext[3]) {
    return WL_FULL_FAST && ext[0] == WL_NX && ext[1] == WL_NY && ext[2] == WL_NZ;
}

// Forward transform of the block in s (all threads of the CUDA block call it): forward().
__device__ void wl_forward(float* s, const int ext[3], const WlAxisLevels* lv) {
    if (wl_is_full(ext)) {
        wl_forward_full<0>(s);
        return;
    }
    for (int l = 0; l < WL_MAX_LEVELS; l++) {
        for (int a = 0; a < 3; a++) {
            if (l < wl_line_levels(ext[a], wl_levels_of(a))) {
                wl_axis_pass<false>(s, ext, lv, l, a);
                __syncthreads();
            }
        }
    }
}

// Inverse of wl_forward: inverse().
__device__ void wl_inverse(float* s, const int ext[3], const WlAxisLevels* lv) {
    if (wl_is_full(ext)) {
        wl_inverse_full<WL_MAX_LEVELS - 1>(s);
        return;
    }
    for (int l = WL_MAX_LEVELS - 1; l >= 0; l--) {
        for (int a = 2; a >= 0; a--) {
            if (l < wl_line_levels(ext[a], wl_levels_of(a))) {
                wl_axis_pass<true>(s, ext, lv, l, a);
                __syncthreads();
            }
        }
    }
}
