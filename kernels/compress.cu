// Compression kernels (Flint et al. 2024): one CUDA block per 33x17x17 block of a field, in shared
// memory: load, lifting wavelet (wavelet.cuh), hard threshold per level, compaction into the
// record of sim-core/src/compress/coding.rs (bit mask, COO or dense: the smallest), and the
// reverse. The host prepends the WL_* defines (see wavelet.cuh).
//
// Fields are x-fastest f32 grids of nx * ny * nz samples, `gridDim.y` of them one after another
// (the DDF planes of a subgrid); blockIdx.x is the block (x fastest), blockIdx.y the field.
// Sample (x, y, z) of field k lies at x + px * (y + py * z) + k * plane: a field may be a
// window of a larger grid (the core of a subgrid's working box, px x py per layer).
// Records of field f, block b start at word offsets[f * gridDim.x + b] of `out`.

#define FMT_DENSE 0u
#define FMT_MASK 1u
#define FMT_COO 2u
#define COUNT_BITS 30u
#define NO_RECORD 0xffffffffffffffffull

typedef unsigned long long wl_u64;

__device__ __forceinline__ wl_u64 record_words(unsigned f, unsigned kept) {
    if (f == FMT_DENSE) return 1ull + WL_N;
    if (f == FMT_MASK) return 1ull + WL_MASK_WORDS + kept;
    return 1ull + (kept + 1) / 2 + kept;
}

// The smallest format for `kept` values: choose().
__device__ __forceinline__ unsigned choose_format(unsigned kept) {
    unsigned best = FMT_MASK;
    if (record_words(FMT_COO, kept) < record_words(best, kept)) best = FMT_COO;
    if (record_words(FMT_DENSE, kept) < record_words(best, kept)) best = FMT_DENSE;
    return best;
}

// First sample and extents of this CUDA block's block.
__device__ __forceinline__ void block_box(unsigned nx, unsigned ny, unsigned nz, int origin[3], int ext[3]) {
    const unsigned cx = (nx + WL_NX - 1) / WL_NX, cy = (ny + WL_NY - 1) / WL_NY;
    const unsigned b = blockIdx.x;
    const unsigned bx = b % cx, by = (b / cx) % cy, bz = b / (cx * cy);
    origin[0] = bx * WL_NX;
    origin[1] = by * WL_NY;
    origin[2] = bz * WL_NZ;
    ext[0] = min((int)nx - origin[0], WL_NX);
    ext[1] = min((int)ny - origin[1], WL_NY);
    ext[2] = min((int)nz - origin[2], WL_NZ);
}

// Coordinates of sample i of a block buffer (unsigned: the divisions by constants stay cheap).
__device__ __forceinline__ void block_xyz(unsigned i, unsigned& x, unsigned& y, unsigned& z) {
    x = i % WL_NX;
    const unsigned r = i / WL_NX;
    y = r % WL_NY;
    z = r / WL_NY;
}

// Offset of sample (x, y, z) of a block from the block's first sample; NARROW when a block's
// span (px * py * WL_NZ) fits 32 bits, which skips the 64-bit multiplies.
template <bool NARROW>
__device__ __forceinline__ wl_u64 block_offset(unsigned x, unsigned y, unsigned z, wl_u64 px, wl_u64 py) {
    if (NARROW) return (wl_u64)(x + (unsigned)px * (y + (unsigned)py * z));
    return (wl_u64)x + px * ((wl_u64)y + py * (wl_u64)z);
}

// Offsets within one block's span: 32-bit when NARROW.
template <bool NARROW>
struct WlOffset {
    typedef wl_u64 type;
};
template <>
struct WlOffset<true> {
    typedef unsigned type;
};

// Samples a thread moves per batch: its loads are all issued before the first use, so a
// block keeps several global loads in flight per thread (the loops are latency-bound).
#define IO_BATCH 8u

// A partial block (at a field's far edges) into shared memory, zero outside its extents.
template <bool NARROW>
__device__ __forceinline__ void load_block(float* s, const float* __restrict__ f, wl_u64 px, wl_u64 py, const int ext[3]) {
    for (unsigned i0 = threadIdx.x; i0 < WL_N; i0 += IO_BATCH * WL_THREADS) {
        float v[IO_BATCH];
#pragma unroll
        for (unsigned j = 0; j < IO_BATCH; j++) {
            const unsigned i = i0 + j * WL_THREADS;
            unsigned x, y, z;
            block_xyz(i, x, y, z);
            const bool inside = i < WL_N && x < (unsigned)ext[0] && y < (unsigned)ext[1] && z < (unsigned)ext[2];
            v[j] = inside ? f[block_offset<NARROW>(x, y, z, px, py)] : 0.0f;
        }
#pragma unroll
        for (unsigned j = 0; j < IO_BATCH; j++) {
            if (i0 + j * WL_THREADS < WL_N) s[i0 + j * WL_THREADS] = v[j];
        }
    }
}

template <bool NARROW>
__device__ __forceinline__ void store_block(const float* s, float* __restrict__ f, wl_u64 px, wl_u64 py, const int ext[3]) {
    for (unsigned i = threadIdx.x; i < WL_N; i += WL_THREADS) {
        unsigned x, y, z;
        block_xyz(i, x, y, z);
        if (x < (unsigned)ext[0] && y < (unsigned)ext[1] && z < (unsigned)ext[2]) f[block_offset<NARROW>(x, y, z, px, py)] = s[i];
    }
}

// Loads of a full block, row by row: warp w reads the x-rows w, w + WARPS, ... (lane = x) in
// batches of IO_BATCH rows, all issued before the first is stored; the last column (x = 32)
// is read by one thread per row. Per sample this is a row offset, a load and a shared store,
// against a division into coordinates per sample for load_block.
template <bool NARROW>
__device__ __forceinline__ void load_rows_full(float* s, const float* __restrict__ f, wl_u64 px, wl_u64 py) {
    typedef typename WlOffset<NARROW>::type off_t;
    constexpr unsigned ROWS = WL_NY * WL_NZ, WARPS = WL_THREADS / 32u, LAST = WL_NX - 1u;
    constexpr unsigned PER_WARP = (ROWS + WARPS - 1) / WARPS, BATCHES = (PER_WARP + IO_BATCH - 1) / IO_BATCH;
    static_assert(WL_NX == 33u && WARPS < WL_NY, "load_rows_full: 32 lanes plus one column; one y-step per row step");
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    __builtin_assume(warp < WARPS);
    // The block's first sample as an opaque pointer: each load is then one wide multiply-add
    // from a 32-bit offset (the compiler otherwise re-adds the block's base per load).
    const float* g = f;
    asm("" : "+l"(g));
    float* srow = s + warp * WL_NX + lane;
    // Row r = y + NY * z starts at y * px + z * px * py; the next row of this warp is WARPS
    // further in y, wrapping into the next z.
    const off_t step = (off_t)WARPS * (off_t)px, wrap = (off_t)px * (off_t)py - (off_t)WL_NY * (off_t)px;
    unsigned y = warp;
    off_t at = (off_t)warp * (off_t)px + lane;
#pragma unroll
    for (unsigned b = 0; b < BATCHES; b++) {
        float v[IO_BATCH];
#pragma unroll
        for (unsigned j = 0; j < IO_BATCH; j++) {
            const unsigned k = b * IO_BATCH + j;
            v[j] = warp + k * WARPS < ROWS ? __ldg(g + at) : 0.0f;
            y += WARPS;
            at += step;
            if (y >= WL_NY) {
                y -= WL_NY;
                at += wrap;
            }
        }
#pragma unroll
        for (unsigned j = 0; j < IO_BATCH; j++) {
            const unsigned k = b * IO_BATCH + j;
            if (warp + k * WARPS < ROWS) srow[k * WARPS * WL_NX] = v[j];
        }
    }
    for (unsigned r = threadIdx.x; r < ROWS; r += WL_THREADS) s[r * WL_NX + LAST] = __ldg(g + block_offset<NARROW>(LAST, r % WL_NY, r / WL_NY, px, py));
}

// Stores of a full block, row by row: a warp writes whole x-rows (lane = x, in chunks of 32),
// so the per-sample work is one shared load and one global store. (The stores as
// load_rows_full, from an opaque pointer, are generic stores and made decompression slower.)
template <bool NARROW>
__device__ __forceinline__ void store_rows_full(const float* s, float* __restrict__ f, wl_u64 px, wl_u64 py) {
    constexpr unsigned ROWS = WL_NY * WL_NZ, WARPS = WL_THREADS / 32u, CHUNKS = (WL_NX + 31u) / 32u;
    const unsigned lane = threadIdx.x & 31u;
    for (unsigned r = threadIdx.x >> 5; r < ROWS; r += WARPS) {
        const wl_u64 g = block_offset<NARROW>(0u, r % WL_NY, r / WL_NY, px, py);
#pragma unroll
        for (unsigned c = 0; c < CHUNKS; c++) {
            const unsigned x = lane + 32u * c;
            if (x < WL_NX) f[g + x] = s[r * WL_NX + x];
        }
    }
}

// First sample of the block in field k, and whether block offsets fit 32 bits.
__device__ __forceinline__ wl_u64 block_base(const int origin[3], wl_u64 px, wl_u64 py, wl_u64 plane, bool* narrow) {
    *narrow = px * py * (wl_u64)WL_NZ < (1ull << 32);
    return (wl_u64)blockIdx.y * plane + (wl_u64)origin[0] + px * ((wl_u64)origin[1] + py * (wl_u64)origin[2]);
}

// Exclusive prefix of the kept counts of the mask words, by warp 0.
__device__ __forceinline__ void mask_prefix(const unsigned* mask, unsigned* prefix) {
    if (threadIdx.x >= 32) return;
    const unsigned lane = threadIdx.x;
    unsigned carry = 0;
    for (unsigned g = 0; g < WL_MASK_WORDS; g += 32) {
        const unsigned w = g + lane;
        const unsigned v = w < WL_MASK_WORDS ? __popc(mask[w]) : 0u;
        unsigned incl = v;
        for (unsigned d = 1; d < 32; d <<= 1) {
            const unsigned o = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += o;
        }
        if (w < WL_MASK_WORDS) prefix[w] = carry + incl - v;
        carry += __shfl_sync(0xffffffffu, incl, 31);
    }
}

extern "C" __global__ void __launch_bounds__(WL_THREADS) compress_blocks(
    const float* __restrict__ field, unsigned nx, unsigned ny, unsigned nz, wl_u64 px, wl_u64 py, wl_u64 plane, float tau,
    unsigned* __restrict__ out, wl_u64* cursor, wl_u64 capacity, wl_u64* __restrict__ offsets,
    unsigned* overflow) {
    __shared__ float s[WL_N];
    __shared__ unsigned mask[WL_MASK_WORDS];
    __shared__ unsigned prefix[WL_MASK_WORDS];
    __shared__ unsigned total;
    __shared__ wl_u64 pos;
    __shared__ WlAxisLevels lv;
    __shared__ unsigned thr[WL_MAX_LEVELS + 1];
    int origin[3], ext[3];
    block_box(nx, ny, nz, origin, ext);
    wl_levels_fill(&lv, ext);
    // The keep test of Thresholds::keeps() (sim-core/src/compress/wavelet.rs): v != 0 and
    // !(|v| < tau_l), tau_l = tau * 2^(l+1), 0 for the approximations. As one integer compare:
    // the bits of |v| against those of tau_l, at least 1 (zero is dropped, NaN kept).
    if (threadIdx.x <= WL_MAX_LEVELS) {
        const float t = threadIdx.x < WL_MAX_LEVELS ? tau * (float)(2u << threadIdx.x) : 0.0f;
        thr[threadIdx.x] = t > 0.0f ? max(__float_as_uint(t), 1u) : 1u;
    }
    bool narrow;
    const float* f = field + block_base(origin, px, py, plane, &narrow);
    const bool full = wl_is_full(ext);
    if (full) {
        if (narrow) load_rows_full<true>(s, f, px, py);
        else load_rows_full<false>(s, f, px, py);
    } else if (narrow) load_block<true>(s, f, px, py, ext);
    else load_block<false>(s, f, px, py, ext);
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    wl_forward(s, ext, &lv);

    // Keep flags: one ballot per warp is one mask word (WL_THREADS is a multiple of 32).
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    __builtin_assume(warp < WL_THREADS / 32u);
    unsigned warp_kept = 0;
    // Mask word `word` from this warp's flags.
    auto vote = [&](bool keep, unsigned word) {
        const unsigned bal = __ballot_sync(0xffffffffu, keep);
        if (lane == 0 && word < WL_MASK_WORDS) mask[word] = bal;
        warp_kept += __popc(bal);
    };
    auto keeps = [&](unsigned i, unsigned level) { return (__float_as_uint(s[i]) & 0x7fffffffu) >= thr[level]; };
    if (full) {
        // Levels from the compile-time table; every iteration but the tail is whole mask words.
        constexpr unsigned ITER = WL_N / WL_THREADS, TAIL = WL_N % WL_THREADS, WORDS = WL_THREADS / 32u;
        const unsigned t = threadIdx.x;
#pragma unroll
        for (unsigned k = 0; k < ITER; k++) vote(keeps(t + k * WL_THREADS, wl_level_table.v[t + k * WL_THREADS]), k * WORDS + warp);
        if (TAIL) {
            const unsigned i = ITER * WL_THREADS + t;
            vote(t < TAIL && keeps(i, wl_level_table.v[i]), ITER * WORDS + warp);
        }
    } else {
#pragma unroll 8
        for (unsigned base = 0; base < WL_N; base += WL_THREADS) {
            const unsigned i = base + threadIdx.x;
            bool keep = false;
            if (i < WL_N) {
                unsigned x, y, z;
                block_xyz(i, x, y, z);
                const int l = wl_detail_level_t(&lv, x, y, z);
                keep = keeps(i, l < 0 ? WL_MAX_LEVELS : l);
            }
            vote(keep, base / 32u + warp);
        }
    }
    if (lane == 0) atomicAdd(&total, warp_kept);
    __syncthreads();
    const unsigned kept = total;
    const unsigned fmt = choose_format(kept);
    const unsigned slot = blockIdx.y * gridDim.x + blockIdx.x;
    // The record's place comes from warp 1 (warp 0 when the block has one) while warp 0 sums
    // the mask words.
    if (threadIdx.x == (WL_THREADS > 32 ? 32u : 0u)) {
        const wl_u64 words = record_words(fmt, kept);
        const wl_u64 p = atomicAdd(cursor, words);
        if (p + words > capacity) {
            offsets[slot] = NO_RECORD;
            atomicOr(overflow, 1u);
            pos = NO_RECORD;
        } else {
            offsets[slot] = p;
            out[p] = (fmt << COUNT_BITS) | (fmt == FMT_DENSE ? (unsigned)WL_N : kept);
            pos = p;
        }
    }
    mask_prefix(mask, prefix);
    __syncthreads();
    const wl_u64 p = pos;
    if (p == NO_RECORD) return;

    if (fmt == FMT_DENSE) {
        for (int i = threadIdx.x; i < WL_N; i += WL_THREADS) {
            const bool keep = (mask[i >> 5] >> (i & 31)) & 1u;
            out[p + 1 + i] = keep ? __float_as_uint(s[i]) : 0u;
        }
        return;
    }
    wl_u64 values = p + 1 + (fmt == FMT_MASK ? WL_MASK_WORDS : (kept + 1) / 2);
    unsigned short* index16 = reinterpret_cast<unsigned short*>(out + p + 1);
    if (fmt == FMT_MASK) {
        for (int w = threadIdx.x; w < WL_MASK_WORDS; w += WL_THREADS) out[p + 1 + w] = mask[w];
    } else if ((kept & 1u) && threadIdx.x == 0) {
        index16[kept] = 0;  // the unused half of the last index word
    }
    for (int i = threadIdx.x; i < WL_N; i += WL_THREADS) {
        const unsigned m = mask[i >> 5];
        const unsigned bit = i & 31;
        if ((m >> bit) & 1u) {
            const unsigned k = prefix[i >> 5] + __popc(m & ((1u << bit) - 1u));
            out[values + k] = __float_as_uint(s[i]);
            if (fmt == FMT_COO) index16[k] = (unsigned short)i;
        }
    }
}

// Reverse of compress_blocks: records to fields. A missing or damaged record leaves its block
// unwritten and sets bit 0 of *bad.
extern "C" __global__ void __launch_bounds__(WL_THREADS) decompress_blocks(
    const unsigned* __restrict__ in, const wl_u64* __restrict__ offsets, float* __restrict__ field,
    unsigned nx, unsigned ny, unsigned nz, wl_u64 px, wl_u64 py, wl_u64 plane, unsigned* bad) {
    __shared__ float s[WL_N];
    __shared__ unsigned mask[WL_MASK_WORDS];
    __shared__ unsigned prefix[WL_MASK_WORDS];
    __shared__ unsigned head;
    __shared__ int ok;
    __shared__ WlAxisLevels lv;
    int origin[3], ext[3];
    block_box(nx, ny, nz, origin, ext);
    wl_levels_fill(&lv, ext);
    const wl_u64 p = offsets[blockIdx.y * gridDim.x + blockIdx.x];
    if (p == NO_RECORD) {
        if (threadIdx.x == 0) atomicOr(bad, 1u);
        return;
    }
    if (threadIdx.x == 0) {
        head = in[p];
        const unsigned f = head >> COUNT_BITS, c = head & ((1u << COUNT_BITS) - 1u);
        ok = f <= FMT_COO && c <= WL_N && (f != FMT_DENSE || c == WL_N);
        if (!ok) atomicOr(bad, 1u);
    }
    __syncthreads();
    if (!ok) return;
    const unsigned fmt = head >> COUNT_BITS, kept = head & ((1u << COUNT_BITS) - 1u);
    if (fmt == FMT_DENSE) {
#pragma unroll 8
        for (int i = threadIdx.x; i < WL_N; i += WL_THREADS) s[i] = __uint_as_float(in[p + 1 + i]);
    } else if (fmt == FMT_MASK) {
        for (int w = threadIdx.x; w < WL_MASK_WORDS; w += WL_THREADS) mask[w] = in[p + 1 + w];
        __syncthreads();
        mask_prefix(mask, prefix);
        __syncthreads();
        const wl_u64 values = p + 1 + WL_MASK_WORDS;
        for (unsigned i0 = threadIdx.x; i0 < WL_N; i0 += IO_BATCH * WL_THREADS) {
            float v[IO_BATCH];
#pragma unroll
            for (unsigned j = 0; j < IO_BATCH; j++) {
                const unsigned i = i0 + j * WL_THREADS;
                const unsigned m = i < WL_N ? mask[i >> 5] : 0u;
                const unsigned bit = i & 31;
                v[j] = ((m >> bit) & 1u) ? __uint_as_float(in[values + prefix[i >> 5] + __popc(m & ((1u << bit) - 1u))]) : 0.0f;
            }
#pragma unroll
            for (unsigned j = 0; j < IO_BATCH; j++) {
                if (i0 + j * WL_THREADS < WL_N) s[i0 + j * WL_THREADS] = v[j];
            }
        }
    } else {
        for (int i = threadIdx.x; i < WL_N; i += WL_THREADS) s[i] = 0.0f;
        __syncthreads();
        const unsigned short* index16 = reinterpret_cast<const unsigned short*>(in + p + 1);
        const wl_u64 values = p + 1 + (kept + 1) / 2;
        for (unsigned k0 = threadIdx.x; k0 < kept; k0 += IO_BATCH * WL_THREADS) {
            unsigned idx[IO_BATCH], val[IO_BATCH];
#pragma unroll
            for (unsigned j = 0; j < IO_BATCH; j++) {
                const unsigned k = k0 + j * WL_THREADS;
                idx[j] = k < kept ? index16[k] : 0u;
                val[j] = k < kept ? in[values + k] : 0u;
            }
#pragma unroll
            for (unsigned j = 0; j < IO_BATCH; j++) {
                if (k0 + j * WL_THREADS >= kept) continue;
                if (idx[j] < WL_N) s[idx[j]] = __uint_as_float(val[j]);
                else atomicOr(bad, 1u);
            }
        }
    }
    __syncthreads();
    wl_inverse(s, ext, &lv);
    bool narrow;
    float* f = field + block_base(origin, px, py, plane, &narrow);
    if (wl_is_full(ext)) {
        if (narrow) store_rows_full<true>(s, f, px, py);
        else store_rows_full<false>(s, f, px, py);
    } else if (narrow) store_block<true>(s, f, px, py, ext);
    else store_block<false>(s, f, px, py, ext);
}
