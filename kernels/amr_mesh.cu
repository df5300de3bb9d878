// The forest's mesh operations on the GPU (as in Jaber, Essel & Sullivan 2025: the mesh never leaves the device).
// sim-core/src/amr/forest.rs (BlockForest::adapt and its rebuild passes) is the reference these
// kernels are tested against, array for array; sim-core/src/amr/criterion.rs (targets,
// mark_to_targets) and backend/amr/mod.rs (the obstacle query) for the marks and the obstacle flags.
// Appended to kernels/amr.cu (its defines and AMR_* constants).
//
// Arrays besides amr.cu's (capacity C):
//   state     C bytes, refinement states (forest.rs `state`: 0 free, 1 keep, 2 refine,
//             3 coarsen, 4 frozen); marks are requested here
//   mk, aux   C bytes of scratch: the working marks, and bits SEED (a refine mark the caller
//             set) and BLOCKED (a coarser neighbour that cannot refine)
//   nbr_child C * ND u32, bmask C bytes, id_set C u32, gap C u32 (forest.rs)
//   rl        C u32: the refined blocks (ascending IDs)
//   xl        3 C u32: the coarsened blocks (ascending IDs), then per level the new children
//             and their parents (the transfer's lists, lbm.rs refined_by_level)
//   lists     3 C u32: the stepping's launch lists, per level all / near a coarser level /
//             feeding a coarser leaf
//   dirty     C bytes: the block's row (its entries in every per-block array, obstacle flags
//             included) changed since the host's copy last met the device's
//   ctr       256 u32 of counters and offsets (M_* below), read back by the host in one copy

#define ST_INACTIVE 0
#define ST_KEEP 1
#define ST_REFINE 2
#define ST_COARSEN 3
#define ST_FROZEN 4
#define MX_SEED 1
#define MX_BLOCKED 2
#define AMR_K (1 << DEF_D)
#define BM_LEAF 1
#define BM_NEAR_COARSER 2
#define BM_NEAR_FINER 4
#define BM_FEEDS 8
#define BM_BOUNDARY 16
#define CM_INTERIOR 0
#define CM_INTERFACE 2
#define CM_COVERED 3

// Counters (ctr): their offsets M_* come in the generated header, from the table in
// sim-core/src/backend/cuda/amr/mesh.rs (COUNTERS).

// Operations of amr_mesh (one thread each over n: blocks, or listed blocks x directions/cells;
// MO_REVERT: blocks x children; MO_FREE: freed children x (links + 1)).
#define MO_SANITISE 0
#define MO_CLOSURE 1
#define MO_CANCEL 2
#define MO_UNSEED 3
#define MO_COUNT 4
#define MO_REVERT 5
#define MO_FREE 6
#define MO_FREE_PARENT 7
#define MO_ALLOC 8
#define MO_CLEAR 9
#define MO_FRESH 10
#define MO_LINKS 11
#define MO_NBR_CHILD 12
#define MO_LEAF_MASKS 13
#define MO_PARENT_MASKS 14
#define MO_MARK 15

#define MESH_ARGS const u32 cap, const u32 max_level, const u32 frozen, unsigned char* level, int* pos, u32* parent, u32* child, unsigned char* state, u32* nbr, u32* nbr_child, unsigned char* bmask, unsigned char* cmask, u32* id_set, u32* gap, unsigned char* mk, unsigned char* aux, unsigned char* fresh, unsigned char* dirty, u32* rl, u32* xl, u32* ctr

__device__ __forceinline__ bool mesh_level_frozen(u32 frozen, u32 l) { return l < 32 && ((frozen >> l) & 1u); }

__device__ __forceinline__ void mesh_dir_offset(int d, int* e) {
    e[0] = e[1] = e[2] = 0;
    for (int a = 0; a < DEF_D; a++) { e[a] = d % 3 - 1; d /= 3; }
}

// Exclusive prefix of v over the threads of a block of 1024 (s: 1024 shared words, of which
// it uses 33); the total in *total. Every thread must call it. Warp scans by shuffles, then a
// scan of the 32 warp sums: three barriers (the plain shared-memory scan took twenty, and
// the lists and ID sets run several scans an adaptation).
__device__ u32 mesh_block_scan(u32* s, u32 v, u32* total) {
    const u32 t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    u32 x = v;
#pragma unroll
    for (u32 off = 1; off < 32; off <<= 1) {
        const u32 y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    if (lane == 31) s[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u32 w = s[lane];
#pragma unroll
        for (u32 off = 1; off < 32; off <<= 1) {
            const u32 y = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += y;
        }
        s[lane] = w;
        if (lane == 31) s[32] = w;
    }
    __syncthreads();
    const u32 incl = x + (warp > 0 ? s[warp - 1] : 0u);
    *total = s[32];
    __syncthreads();
    return incl - v;
}

__device__ __forceinline__ unsigned char mesh_epoch(const u32* ctr) { return (unsigned char)max(ctr[M_EPOCH], 1u); }

extern "C" __global__ void amr_mesh(const u32 op, const u32 n, const u32 arg, MESH_ARGS) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    // forest.rs refinable / coarsenable (on the states, not the working marks).
    auto refinable = [&](u32 b) {
        const unsigned char s = state[b];
        return s != ST_INACTIVE && s != ST_FROZEN && child[b] == AMR_NONE && level[b] < max_level && !mesh_level_frozen(frozen, level[b] + 1u);
    };
    auto coarsenable = [&](u32 b) {
        const unsigned char s = state[b];
        const u32 c = child[b];
        if (s == ST_INACTIVE || s == ST_FROZEN || c == AMR_NONE || mesh_level_frozen(frozen, level[b] + 1u)) return false;
        for (u32 j = 0; j < AMR_K; j++)
            if (child[c + j] != AMR_NONE || state[c + j] == ST_FROZEN) return false;
        return true;
    };
    auto keeps_children = [&](u32 b) { return mk[b] == ST_REFINE || (child[b] != AMR_NONE && mk[b] != ST_COARSEN); };
    switch (op) {
    case MO_SANITISE: {
        const unsigned char s = state[t];
        const unsigned char m = (s == ST_REFINE && refinable(t)) ? ST_REFINE : (s == ST_COARSEN && coarsenable(t)) ? ST_COARSEN : ST_KEEP;
        mk[t] = m;
        aux[t] = m == ST_REFINE ? MX_SEED : 0;
        if (m != ST_KEEP) ctr[M_ANY] = 1;
        if (s == ST_REFINE || s == ST_COARSEN) ctr[M_MARKED] = 1;
        if (t == 0) ctr[M_EPOCH] = arg;
        break;
    }
    case MO_CLOSURE: {
        // A refining leaf's coarser neighbours refine too (or are noted as blocked).
        if (mk[t] != ST_REFINE) return;
        for (u32 d = 0; d < AMR_ND; d++) {
            const u32 v = nbr[(u64)t * AMR_ND + d];
            if (v == AMR_NONE || !(v & AMR_COARSER)) continue;
            const u32 x = v & ~AMR_COARSER;
            if (refinable(x)) {
                if (mk[x] != ST_REFINE) { mk[x] = ST_REFINE; ctr[M_CHANGED] = 1; }
            } else {
                aux[x] |= MX_BLOCKED;
                ctr[M_BLOCKED] = 1;
            }
        }
        break;
    }
    case MO_CANCEL: {
        if (mk[t] != ST_REFINE) return;
        for (u32 d = 0; d < AMR_ND; d++) {
            const u32 v = nbr[(u64)t * AMR_ND + d];
            if (v == AMR_NONE || !(v & AMR_COARSER)) continue;
            const u32 x = v & ~AMR_COARSER;
            if ((aux[x] & MX_BLOCKED) || mk[x] != ST_REFINE) { mk[t] = ST_KEEP; ctr[M_CHANGED] = 1; return; }
        }
        break;
    }
    case MO_UNSEED:
        if (mk[t] == ST_REFINE && !(aux[t] & MX_SEED)) mk[t] = ST_KEEP;
        aux[t] &= MX_SEED;
        break;
    case MO_COUNT: {
        const bool seed = aux[t] & MX_SEED;
        if (seed && mk[t] != ST_REFINE) atomicAdd(&ctr[M_CANCELLED], 1u);
        if (!seed && mk[t] == ST_REFINE) atomicAdd(&ctr[M_ADDED], 1u);
        if (mk[t] == ST_COARSEN) atomicAdd(&ctr[M_REQUESTED], 1u);
        break;
    }
    case MO_REVERT: {
        // A block keeps its children when a child, or a child's same-level neighbour, will
        // have children after the adaptation. One thread per (block t / K, child t % K).
        const u32 b = t / AMR_K;
        if (mk[b] != ST_COARSEN) return;
        const u32 c = child[b] + t % AMR_K;
        bool bad = keeps_children(c);
        for (u32 d = 0; d < AMR_ND && !bad; d++) {
            const u32 v = nbr[(u64)c * AMR_ND + d];
            if (v != AMR_NONE && !(v & AMR_COARSER)) bad = keeps_children(v);
        }
        if (bad) { mk[b] = ST_KEEP; ctr[M_CHANGED] = 1; }
        break;
    }
    case MO_FREE: {
        // Child j of coarsened block i goes back to the gap set (arg: its length before). One
        // thread per (child, link d) clears the links, one more (d = ND) the rest: a thread a
        // child ran on a few SMs, bound by their scattered stores (24 us on the sphere).
        const u32 r = t / (AMR_ND + 1), d = t % (AMR_ND + 1);
        const u32 i = r / AMR_K, j = r % AMR_K;
        const u32 c0 = child[xl[i]], c = c0 + j;
        if (d < AMR_ND) {
            nbr[(u64)c * AMR_ND + d] = AMR_NONE;
            nbr_child[(u64)c * AMR_ND + d] = AMR_NONE;
            return;
        }
        state[c] = ST_INACTIVE;
        parent[c] = AMR_NONE;
        child[c] = AMR_NONE;
        level[c] = 0;
        pos[3 * c] = pos[3 * c + 1] = pos[3 * c + 2] = 0;
        bmask[c] = 0;
        gap[arg + i * AMR_K + j] = c0 + (AMR_K - 1 - j);
        dirty[c] = mesh_epoch(ctr);
        break;
    }
    case MO_FREE_PARENT:
        child[xl[t]] = AMR_NONE;
        dirty[xl[t]] = mesh_epoch(ctr);
        break;
    case MO_ALLOC: {
        // Refined block i takes the group whose first ID is gap[arg - 1 - i K] (arg: the gap
        // set's length after the frees).
        const u32 i = t / AMR_K, j = t % AMR_K;
        const u32 c0 = gap[arg - 1 - i * AMR_K], b = rl[i], c = c0 + j;
        if (j == 0) { child[b] = c0; dirty[b] = mesh_epoch(ctr); atomicMax(&ctr[M_HW], c0 + AMR_K); }
        dirty[c] = mesh_epoch(ctr);
        level[c] = level[b] + 1;
        parent[c] = b;
        child[c] = AMR_NONE;
        state[c] = ST_KEEP;
        pos[3 * c] = pos[3 * c + 1] = pos[3 * c + 2] = 0;
        for (int a = 0; a < DEF_D; a++) pos[3 * c + a] = 2 * pos[3 * b + a] + (int)((j >> a) & 1u);
        break;
    }
    case MO_MARK: {
        // Active block id_set[t] towards the target levels in aux (criterion.rs
        // mark_to_targets): a leaf below its target refines; a block whose children are all
        // leaves and all content with its level coarsens. Frozen blocks keep their state.
        const u32 b = id_set[t], c0 = child[b];
        if (state[b] == ST_FROZEN) return;
        if (c0 == AMR_NONE) {
            if ((aux[b] & 15u) > level[b]) state[b] = ST_REFINE;
            return;
        }
        // Targets pack the level asked for (low 4 bits) and the finest kept (high 4 bits).
        for (u32 j = 0; j < AMR_K; j++)
            if (child[c0 + j] != AMR_NONE || max(aux[c0 + j] & 15u, (u32)aux[c0 + j] >> 4) > level[b]) return;
        state[b] = ST_COARSEN;
        break;
    }
    case MO_CLEAR:
        if (state[t] == ST_REFINE || state[t] == ST_COARSEN) state[t] = ST_KEEP;
        break;
    case MO_FRESH:
        // amr.cu's `fresh`: refined by this adaptation.
        fresh[t] = mk[t] == ST_REFINE;
        break;
    case MO_LINKS:
    case MO_NBR_CHILD: {
        // Level arg's blocks x directions (forest.rs rebuild_links / child_link).
        const u32 ls = ctr[M_LEVEL_START + arg], nl = ctr[M_LEVEL_START + arg + 1] - ls;
        if (t >= nl * AMR_ND) return;
        const u32 b = id_set[ls + t / AMR_ND], d = t % AMR_ND;
        if (op == MO_NBR_CHILD) {
            const u32 v = nbr[(u64)b * AMR_ND + d];
            const u32 nc = (v != AMR_NONE && !(v & AMR_COARSER)) ? child[v] : AMR_NONE;
            if (nbr_child[(u64)b * AMR_ND + d] != nc) { nbr_child[(u64)b * AMR_ND + d] = nc; dirty[b] = mesh_epoch(ctr); }
            return;
        }
        const u32 p = parent[b];
        int e[3], pe[3] = {0, 0, 0};
        mesh_dir_offset((int)d, e);
        u32 j = 0;
        for (int a = 0; a < DEF_D; a++) {
            const int s = (pos[3 * b + a] & 1) + e[a];
            pe[a] = s >> 1;
            j |= (u32)(s & 1) << a;
        }
        const u32 v = nbr[(u64)p * AMR_ND + amr_dir(pe)];
        u32 out = AMR_NONE;
        if (v != AMR_NONE && !(v & AMR_COARSER)) {
            const u32 fc = nbr_child[(u64)p * AMR_ND + amr_dir(pe)];
            out = fc != AMR_NONE ? fc + j : (v | AMR_COARSER);
        }
        if (nbr[(u64)b * AMR_ND + d] != out) { nbr[(u64)b * AMR_ND + d] = out; dirty[b] = mesh_epoch(ctr); }
        break;
    }
    case MO_LEAF_MASKS:
    case MO_PARENT_MASKS: {
        // Active block t / B (id_set order), cell t % B (forest.rs rebuild_masks): leaves
        // first, then non-leaves from their children's cell masks.
        const u32 b = id_set[t / AMR_B], cell = t % AMR_B;
        const bool leaf = child[b] == AMR_NONE;
        // The block's 3^D links, one a thread of the block (its cells are one warp in 3D and
        // half of one in 2D; n is a multiple of B, so every thread of a block is here), put
        // together with ballots: outside, coarser (as bits by direction), finer, leaf.
        const u32 am = __activemask();
        const u32 lane = threadIdx.x & 31u, d_mine = cell % 32u;
        const u32 sh = AMR_B >= 32 ? 0u : lane / AMR_B * AMR_B;
        const u32 grp = AMR_B >= 32 ? 0xffffffffu : ((1u << AMR_B) - 1u) << sh;
        const bool has = d_mine < AMR_ND;
        const u32 v = has ? nbr[(u64)b * AMR_ND + d_mine] : AMR_NONE;
        const bool same = has && v != AMR_NONE && !(v & AMR_COARSER);
        const bool v_leaf = same && child[v] == AMR_NONE;
        const u32 outside = __ballot_sync(am, has && v == AMR_NONE) & grp;
        const u32 coarser = (__ballot_sync(am, has && v != AMR_NONE && (v & AMR_COARSER)) & grp) >> sh;
        const u32 finer = __ballot_sync(am, same && !v_leaf) & grp;
        const u32 leaves = __ballot_sync(am, v_leaf) & grp;
        if (leaf != (op == MO_LEAF_MASKS)) return;
        unsigned char bits = leaf ? BM_LEAF : 0;
        if (outside) bits |= BM_BOUNDARY;
        if (leaf && coarser) bits |= BM_NEAR_COARSER;
        if (leaf && finer) bits |= BM_NEAR_FINER;
        if (!leaf && leaves) bits |= BM_FEEDS;
        if (cell == 0 && bmask[b] != bits) { bmask[b] = bits; dirty[b] = mesh_epoch(ctr); }
        int c[3];
        amr_coords((int)cell, c);
        unsigned char out;
        if (leaf) {
            int g_min = 0x7fffffff;
            if (bits & BM_NEAR_COARSER) {
                for (u32 d = 0; d < AMR_ND; d++) {
                    if (!((coarser >> d) & 1u)) continue;
                    int e[3];
                    mesh_dir_offset((int)d, e);
                    int g = 0;
                    for (int a = 0; a < DEF_D; a++) {
                        const int ga = e[a] == -1 ? c[a] + 1 : e[a] == 1 ? 4 - c[a] : 0;
                        g = max(g, ga);
                    }
                    g_min = min(g_min, g);
                }
            }
            out = g_min <= 2 ? CM_GHOST : g_min <= 4 ? CM_INTERFACE : CM_INTERIOR;
        } else {
            int f0[3];
            const u32 ch = child[b] + amr_child_under((int)cell, f0);
            out = CM_COVERED;
            if (child[ch] == AMR_NONE) {
                const unsigned char m = cmask[(u64)ch * AMR_B + amr_cell(f0[0], f0[1], f0[2])];
                out = m == CM_GHOST ? CM_POG : m == CM_INTERFACE ? CM_POI : CM_COVERED;
            }
        }
        if (cmask[(u64)b * AMR_B + cell] != out) { cmask[(u64)b * AMR_B + cell] = out; dirty[b] = mesh_epoch(ctr); }
        break;
    }
    }
}

// The refine and coarsen lists from the working marks, ascending (one block of 1024 threads;
// forest.rs compact): coarsened blocks into xl, refined ones into rl, their numbers into ctr.
extern "C" __global__ void amr_mesh_compact(const u32 cap, const unsigned char* __restrict__ mk, u32* xl, u32* rl, u32* ctr) {
    __shared__ u32 s[1024];
    const u32 n = min(cap, ctr[M_HW]);
    const u32 chunk = (n + 1023) / 1024, lo = min(threadIdx.x * chunk, n), hi = min(lo + chunk, n);
    u32 nc = 0, nr = 0;
    for (u32 b = lo; b < hi; b++) { nc += mk[b] == ST_COARSEN; nr += mk[b] == ST_REFINE; }
    u32 tc, tr;
    u32 oc = mesh_block_scan(s, nc, &tc);
    u32 orf = mesh_block_scan(s, nr, &tr);
    for (u32 b = lo; b < hi; b++) {
        if (mk[b] == ST_COARSEN) xl[oc++] = b;
        if (mk[b] == ST_REFINE) rl[orf++] = b;
    }
    if (threadIdx.x == 0) { ctr[M_NC] = tc; ctr[M_NR] = tr; }
}

// The active IDs by level, ascending within a level (forest.rs rebuild_id_sets: a histogram, a
// scan and a scatter), and the level starts into ctr. One block of 1024 threads.
extern "C" __global__ void amr_mesh_id_sets(const u32 cap, const u32 maxl, const unsigned char* __restrict__ level, const unsigned char* __restrict__ state, u32* id_set, u32* ctr) {
    __shared__ u32 s[1024];
    const u32 n = min(cap, ctr[M_HW]);
    const u32 chunk = (n + 1023) / 1024, lo = min(threadIdx.x * chunk, n), hi = min(lo + chunk, n);
    u32 cnt[M_LEVELS], at[M_LEVELS];
    for (int l = 0; l < M_LEVELS; l++) cnt[l] = 0;
    for (u32 b = lo; b < hi; b++)
        if (state[b] != ST_INACTIVE) cnt[level[b]]++;
    // Levels above the finest allowed (maxl) hold no blocks: one scan per level in use.
    u32 base = 0;
    for (u32 l = 0; l <= maxl && l < M_LEVELS; l++) {
        u32 total;
        at[l] = base + mesh_block_scan(s, cnt[l], &total);
        if (threadIdx.x == 0) ctr[M_LEVEL_START + l] = base;
        base += total;
    }
    if (threadIdx.x == 0)
        for (u32 l = maxl + 1; l <= M_LEVELS; l++) ctr[M_LEVEL_START + l] = base;
    for (u32 b = lo; b < hi; b++)
        if (state[b] != ST_INACTIVE) id_set[at[level[b]]++] = b;
}

// amr_mesh_id_sets over many blocks, the same ID sets and level starts: tiles of 1024 IDs of
// [0, min(cap, high-water)); amr_mesh_id_tiles counts each level's active IDs per tile into cnt
// (one word per (level, tile), levels 0..maxl), amr_mesh_id_offsets scans them per level (one
// block of 1024 threads) and writes the level starts, amr_mesh_id_write places each active ID
// at its level's start plus the tiles before plus the IDs of its level before it in its tile.
extern "C" __global__ void __launch_bounds__(1024) amr_mesh_id_tiles(const u32 cap, const u32 maxl, const unsigned char* __restrict__ level, const unsigned char* __restrict__ state, const u32* __restrict__ ctr, const u32 tiles, u32* cnt) {
    __shared__ u32 c[M_LEVELS];
    const u32 n = min(cap, ctr[M_HW]);
    const u32 t = blockIdx.x, b = t * 1024u + threadIdx.x;
    if (threadIdx.x < M_LEVELS) c[threadIdx.x] = 0;
    __syncthreads();
    if (b < n && state[b] != ST_INACTIVE) atomicAdd(&c[level[b]], 1u);
    __syncthreads();
    if (threadIdx.x <= maxl && threadIdx.x < M_LEVELS) cnt[(u64)threadIdx.x * tiles + t] = c[threadIdx.x];
}
extern "C" __global__ void amr_mesh_id_offsets(const u32 maxl, const u32 tiles, u32* cnt, u32* ctr) {
    __shared__ u32 s[1024];
    u32 base = 0;
    for (u32 l = 0; l <= maxl && l < M_LEVELS; l++) {
        if (threadIdx.x == 0) ctr[M_LEVEL_START + l] = base;
        for (u32 t0 = 0; t0 < tiles; t0 += 1024) {
            const u32 t = t0 + threadIdx.x;
            const u64 at = (u64)l * tiles + t;
            const u32 v = t < tiles ? cnt[at] : 0u;
            u32 sum;
            const u32 ex = mesh_block_scan(s, v, &sum);
            if (t < tiles) cnt[at] = base + ex;
            base += sum;
        }
    }
    if (threadIdx.x == 0)
        for (u32 l = maxl + 1; l <= M_LEVELS; l++) ctr[M_LEVEL_START + l] = base;
}
extern "C" __global__ void __launch_bounds__(1024) amr_mesh_id_write(const u32 cap, const u32 maxl, const unsigned char* __restrict__ level, const unsigned char* __restrict__ state, const u32* __restrict__ ctr, const u32 tiles, const u32* __restrict__ cnt, u32* id_set) {
    __shared__ u32 s[1024];
    const u32 n = min(cap, ctr[M_HW]);
    const u32 t = blockIdx.x, b = t * 1024u + threadIdx.x;
    if (t * 1024u >= n) return;
    const bool on = b < n && state[b] != ST_INACTIVE;
    const u32 lb = on ? level[b] : 0xffffffffu;
    u32 at = 0;
    for (u32 l = 0; l <= maxl && l < M_LEVELS; l++) {
        u32 sum;
        const u32 ex = mesh_block_scan(s, lb == l ? 1u : 0u, &sum);
        if (lb == l) at = cnt[(u64)l * tiles + t] + ex;
    }
    if (on) id_set[at] = b;
}

// How many of src[0..n) keep(i) holds for, inside one block of 1024 threads.
template <typename F>
__device__ u32 mesh_count(u32* s, const u32* src, u32 n, F keep) {
    const u32 chunk = (n + 1023) / 1024, lo = min(threadIdx.x * chunk, n), hi = min(lo + chunk, n);
    u32 c = 0;
    for (u32 i = lo; i < hi; i++) c += keep(src[i]);
    u32 total;
    mesh_block_scan(s, c, &total);
    return total;
}

// Order-keeping partition of src[0..n) inside one block of 1024 threads (one scan): those keep(i)
// holds for into dst, in order; with `all`, the others after them, else nowhere (a compaction).
// Returns the count of the first part.
template <typename F>
__device__ u32 mesh_partition_into(u32* s, const u32* src, u32 n, u32* dst, bool all, F keep) {
    const u32 chunk = (n + 1023) / 1024, lo = min(threadIdx.x * chunk, n), hi = min(lo + chunk, n);
    u32 c = 0;
    for (u32 i = lo; i < hi; i++) c += keep(src[i]);
    u32 total;
    u32 o = mesh_block_scan(s, c, &total);
    // Before lo, lo - o entries went to the second part.
    u32 r = total + (lo - o);
    for (u32 i = lo; i < hi; i++) {
        if (keep(src[i])) dst[o++] = src[i];
        else if (all) dst[r++] = src[i];
    }
    return total;
}

// Order-keeping compaction of src[0..n) by keep(i) into dst; returns the count.
template <typename F>
__device__ u32 mesh_compact_into(u32* s, const u32* src, u32 n, u32* dst, F keep) {
    return mesh_partition_into(s, src, n, dst, false, keep);
}

// A level's core blocks: leaves with no non-leaf among their same-level neighbours (the finer
// level's interpolation reads none of their cells; schedule.rs Part::Core).
__device__ __forceinline__ bool mesh_core(unsigned char m) { return (m & BM_LEAF) && !(m & BM_NEAR_FINER); }

// The stepping's launch lists (cuda/amr/mod.rs Lists) per level: all its blocks, those that feed no
// coarser leaf first (the core blocks first among them, their count at M_CORE + l) and those
// that do (the restriction's targets) after them, so that the parts step by themselves
// (schedule.rs) and the feeding blocks are the list's tail; then those
// next to a coarser level (the ghost interpolation's); (offset, count) pairs into ctr at
// M_LISTS + 6 l: all, near-coarser, feeding. (Stepping the blocks next to a coarser level by
// themselves too, so that the others need not wait for the interpolation, was slower: their
// neighbours' pushes into them come a whole launch earlier.)
// With `id_part` 0 only the transfer's lists (xl) are made here: amr_mesh_lists_tiles,
// amr_mesh_lists_offsets and amr_mesh_lists_write made the launch lists over many blocks.
extern "C" __global__ void amr_mesh_lists(const unsigned char* __restrict__ level, const u32* __restrict__ child, const unsigned char* __restrict__ bmask, const u32* __restrict__ id_set, const u32* __restrict__ rl, u32* xl, u32* lists, u32* ctr, const u32 id_part) {
    __shared__ u32 s[1024];
    // Levels are contiguous from 0: the first empty one ends both loops (the refined blocks
    // lie below the finest level), so an empty level costs no scans.
    int levels = 0;
    while (levels < M_LEVELS && ctr[M_LEVEL_START + levels + 1] > ctr[M_LEVEL_START + levels]) levels++;
    u32 o = 0;
    for (int l = 0; l < levels && id_part; l++) {
        const u32 ls = ctr[M_LEVEL_START + l], nl = ctr[M_LEVEL_START + l + 1] - ls;
        const u32 core = mesh_compact_into(s, id_set + ls, nl, lists + o, [&](u32 b) { return mesh_core(bmask[b]); });
        const u32 rim = mesh_compact_into(s, id_set + ls, nl, lists + o + core, [&](u32 b) { return (bmask[b] & BM_FEEDS) == 0 && !mesh_core(bmask[b]); });
        const u32 far = core + rim;
        mesh_compact_into(s, id_set + ls, nl, lists + o + far, [&](u32 b) { return (bmask[b] & BM_FEEDS) != 0; });
        const u32 nc = mesh_compact_into(s, id_set + ls, nl, lists + o + nl, [&](u32 b) { return (bmask[b] & BM_NEAR_COARSER) != 0; });
        if (threadIdx.x == 0) {
            u32* r = ctr + M_LISTS + 6 * l;
            r[0] = o; r[1] = nl; r[2] = o + nl; r[3] = nc; r[4] = o + far; r[5] = nl - far;
            ctr[M_CORE + l] = core;
        }
        o += nl + nc;
    }
    const u32 nr = ctr[M_NR];
    u32 x = ctr[M_NC];
    for (int l = 0; l < levels; l++) {
        auto on_level = [&](u32 p) { return level[p] == l; };
        const u32 g = mesh_count(s, rl, nr, on_level);
        mesh_compact_into(s, rl, nr, xl + x + g * AMR_K, on_level);
        __syncthreads();
        for (u32 i = threadIdx.x; i < g * AMR_K; i += 1024) xl[x + i] = child[xl[x + g * AMR_K + i / AMR_K]] + i % AMR_K;
        if (threadIdx.x == 0) {
            u32* r = ctr + M_XGROUPS + 3 * l;
            r[0] = x; r[1] = g * AMR_K; r[2] = g;
        }
        x += g * (AMR_K + 1);
    }
}

// The launch lists of amr_mesh_lists over many blocks, the same lists in the same order. The ID
// set (level-sorted) is cut into tiles of 1024 entries; an entry's place in its level's lists
// is the count of entries before it in its level with the same flag (feeds / not; next to a
// coarser level; core), the tiles before it counted by amr_mesh_lists_tiles and scanned by
// amr_mesh_lists_offsets, the entries before it in its tile by amr_mesh_lists_write's block
// scan. cnt holds 3 words per (level, tile): not feeding, next to a coarser level, core; `tiles`
// is the grid size of the first and last kernel (the capacity's tiles; tiles past the ID set
// do nothing).
__device__ __forceinline__ int mesh_level_of(const u32* ctr, u32 i, int levels) {
    int l = 0;
    while (l + 1 < levels && i >= ctr[M_LEVEL_START + l + 1]) l++;
    return l;
}
__device__ __forceinline__ int mesh_levels(const u32* ctr) {
    int levels = 0;
    while (levels < M_LEVELS && ctr[M_LEVEL_START + levels + 1] > ctr[M_LEVEL_START + levels]) levels++;
    return levels;
}
extern "C" __global__ void __launch_bounds__(1024) amr_mesh_lists_tiles(const unsigned char* __restrict__ bmask, const u32* __restrict__ id_set, const u32* __restrict__ ctr, const u32 tiles, u32* cnt) {
    __shared__ u32 c[M_LEVELS][3];
    const int levels = mesh_levels(ctr);
    const u32 total = ctr[M_LEVEL_START + levels];
    const u32 t = blockIdx.x, i = t * 1024u + threadIdx.x;
    if (threadIdx.x < 3 * M_LEVELS) c[threadIdx.x / 3][threadIdx.x % 3] = 0;
    __syncthreads();
    if (i < total) {
        const unsigned char m = bmask[id_set[i]];
        const int l = mesh_level_of(ctr, i, levels);
        if (!(m & BM_FEEDS)) atomicAdd(&c[l][0], 1u);
        if (m & BM_NEAR_COARSER) atomicAdd(&c[l][1], 1u);
        if (mesh_core(m)) atomicAdd(&c[l][2], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 3 * (u32)levels) cnt[((u64)(threadIdx.x / 3) * tiles + t) * 3 + threadIdx.x % 3] = c[threadIdx.x / 3][threadIdx.x % 3];
}
// One block of 1024 threads: cnt becomes the exclusive scan over the tiles of each (level,
// flag); the lists' counters into ctr as amr_mesh_lists writes them.
extern "C" __global__ void amr_mesh_lists_offsets(const u32 tiles, u32* cnt, u32* ctr) {
    __shared__ u32 s[1024];
    const int levels = mesh_levels(ctr);
    u32 o = 0;
    for (int l = 0; l < levels; l++) {
        u32 tot[3];
        for (int k = 0; k < 3; k++) {
            u32 base = 0;
            for (u32 t0 = 0; t0 < tiles; t0 += 1024) {
                const u32 t = t0 + threadIdx.x;
                const u64 at = ((u64)l * tiles + t) * 3 + k;
                const u32 v = t < tiles ? cnt[at] : 0u;
                u32 sum;
                const u32 ex = mesh_block_scan(s, v, &sum);
                if (t < tiles) cnt[at] = base + ex;
                base += sum;
            }
            tot[k] = base;
        }
        const u32 ls = ctr[M_LEVEL_START + l], nl = ctr[M_LEVEL_START + l + 1] - ls;
        const u32 far = tot[0], nc = tot[1];
        if (threadIdx.x == 0) {
            u32* r = ctr + M_LISTS + 6 * l;
            r[0] = o; r[1] = nl; r[2] = o + nl; r[3] = nc; r[4] = o + far; r[5] = nl - far;
            ctr[M_CORE + l] = tot[2];
        }
        o += nl + nc;
    }
}
extern "C" __global__ void __launch_bounds__(1024) amr_mesh_lists_write(const unsigned char* __restrict__ bmask, const u32* __restrict__ id_set, const u32* __restrict__ ctr, const u32 tiles, const u32* __restrict__ cnt, u32* lists) {
    __shared__ u32 s[1024];
    __shared__ u32 pre[3][1025];
    const int levels = mesh_levels(ctr);
    const u32 total = ctr[M_LEVEL_START + levels];
    const u32 t = blockIdx.x, t0 = t * 1024u, i = t0 + threadIdx.x;
    if (t0 >= total) return;
    const bool in = i < total;
    const u32 b = in ? id_set[i] : 0u;
    const unsigned char m = in ? bmask[b] : 0;
    const u32 f0 = in && !(m & BM_FEEDS), f1 = in && (m & BM_NEAR_COARSER), f2 = in && mesh_core(m);
    u32 sum;
    pre[0][threadIdx.x] = mesh_block_scan(s, f0, &sum);
    pre[1][threadIdx.x] = mesh_block_scan(s, f1, &sum);
    pre[2][threadIdx.x] = mesh_block_scan(s, f2, &sum);
    __syncthreads();
    if (!in) return;
    const int l = mesh_level_of(ctr, i, levels);
    const u32* r = ctr + M_LISTS + 6 * l;
    const u32 ls = ctr[M_LEVEL_START + l];
    // The level's first entry in this tile.
    const u32 j0 = ls > t0 ? ls - t0 : 0u, j = threadIdx.x;
    const u64 ct = ((u64)l * tiles + t) * 3;
    const u32 nf = cnt[ct] + pre[0][j] - pre[0][j0], nk = cnt[ct + 2] + pre[2][j] - pre[2][j0];
    // Core blocks first, then the rest of the far ones (rim), then the feeding ones.
    if (f2) lists[r[0] + nk] = b;
    else if (f0) lists[r[0] + ctr[M_CORE + l] + (nf - nk)] = b;
    else lists[r[4] + (i - ls) - nf] = b;
    if (f1) lists[r[2] + cnt[ct + 1] + pre[1][j] - pre[1][j0]] = b;
}

// Obstacle cells in the box of finest-grid cells [a0, a1) from the prefix sums (criterion.rs
// ObstacleSums::count; sums of (n0 + 1) (n1 + 1) (n2 + 1) words).
__device__ u32 mesh_obstacles_in(const u32* __restrict__ sums, const u32* n, const u32* a0, const u32* a1) {
    const u64 sx = n[0] + 1, sy = n[1] + 1;
    auto s = [&](u32 x, u32 y, u32 z) { return (long long)sums[x + sx * (y + sy * z)]; };
    const long long c = s(a1[0], a1[1], a1[2]) - s(a0[0], a1[1], a1[2]) - s(a1[0], a0[1], a1[2]) - s(a1[0], a1[1], a0[2]) + s(a0[0], a0[1], a1[2]) + s(a0[0], a1[1], a0[2]) + s(a1[0], a0[1], a0[2]) - s(a0[0], a0[1], a0[2]);
    return (u32)c;
}

// criterion.rs target_level.
__device__ u32 mesh_target_level(float value, float threshold, u32 max_level) {
    if (!(value > 0.0f) || !(threshold > 0.0f)) return 0;
    const double l = floor(log2((double)(value / threshold))) + 1.0;
    if (l <= 0.0) return 0;
    if (l >= (double)max_level) return max_level;
    return (u32)l;
}

// Target level of every leaf into tgt (0 for non-leaves and free IDs; criterion.rs targets):
// the criterion's block maximum through the log2 mapping, and near-wall refinement (nw_level
// < 0: none) where an obstacle cell lies within `margin` cells of the block's own level.
// sums: the obstacle prefix sums of an n0 x n1 x n2 grid of cells of level 0 scaled by `scale`.
extern "C" __global__ void amr_mesh_targets(const u32 cap, const float* __restrict__ values, const float threshold, const float coarsen, const u32 crit_max, const u32 forest_max, const int nw_level, const double margin, const u32* __restrict__ sums, const u32 n0, const u32 n1, const u32 n2, const double scale, const unsigned char* __restrict__ level, const int* __restrict__ pos, const u32* __restrict__ child, const unsigned char* __restrict__ state, unsigned char* tgt) {
    const u32 b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= cap) return;
    if (state[b] == ST_INACTIVE || child[b] != AMR_NONE) { tgt[b] = 0; return; }
    u32 t = mesh_target_level(values[b], threshold, crit_max);
    // The finest level the leaf keeps: its target under the coarsening threshold.
    u32 keep = mesh_target_level(values[b], threshold * coarsen, crit_max);
    const u32 l = level[b];
    if (nw_level >= 0 && l <= (u32)nw_level) {
        // The margin is in cells of the near-wall level, for blocks of every level.
        const double size = 4.0 / (double)(1u << l), m = margin / (double)(1u << nw_level);
        const u32 n[3] = {n0, n1, n2};
        u32 a0[3] = {0, 0, 0}, a1[3] = {1, 1, 1};
        bool any = true;
        for (int a = 0; a < DEF_D; a++) {
            const double lo = (double)pos[3 * b + a] * size;
            const double nn = (double)n[a];
            a0[a] = (u32)fmin(fmax(floor((lo - m) * scale), 0.0), nn);
            a1[a] = (u32)fmin(fmax(ceil((lo + size + m) * scale), 0.0), nn);
            if (a0[a] >= a1[a]) any = false;
        }
        if (any && mesh_obstacles_in(sums, n, a0, a1) > 0) {
            t = max(t, min((u32)nw_level, forest_max));
            keep = max(keep, t);
        }
    }
    tgt[b] = (unsigned char)(t | keep << 4);
}

// Obstacle flags of the new children's cells (solver.rs install_solids: a cell is solid when
// at least half of the finest-grid cells under it are obstacle cells; domain level dl), over
// the refined blocks rl[0 .. count / (K B)); a cell whose flag changes is set to rest (zero), as
// lbm.rs update_solids does (its slots in the plain layout: in place, whatever the layout, the
// transfer then writes every cell of the new children through it, XF_NEW).
extern "C" __global__ void amr_mesh_solids(const u32 count, const u32* __restrict__ rl, const u32* __restrict__ sums, const u32 n0, const u32 n1, const u32 n2, const u32 dl, const unsigned char* __restrict__ level, const int* __restrict__ pos, const u32* __restrict__ child, unsigned char* solid, fpxx* f) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    const u32 cell = t % AMR_B, c = child[rl[t / (AMR_B * AMR_K)]] + (t / AMR_B) % AMR_K;
    const u32 l = level[c], sh = dl - min(l, dl), s = 1u << sh;
    const double size = 4.0 / (double)(1u << l), h = size / 4.0, fine = (double)(1u << dl);
    const u32 n[3] = {n0, n1, n2};
    u32 a0[3] = {0, 0, 0}, a1[3] = {1, 1, 1};
    int k[3];
    amr_coords((int)cell, k);
    for (int a = 0; a < DEF_D; a++) {
        const double centre = (double)pos[3 * c + a] * size + ((double)k[a] + 0.5) * h;
        const double first = fmax(round(centre * fine - (double)s / 2.0), 0.0);
        a0[a] = (u32)fmin(first, (double)n[a]);
        a1[a] = (u32)fmin(first + (double)s, (double)n[a]);
    }
    u32 obst = 0;
    bool empty = false;
    for (int a = 0; a < 3; a++) empty |= a0[a] >= a1[a];
    if (!empty) obst = mesh_obstacles_in(sums, n, a0, a1);
    const unsigned char sol = (u64)obst * 2 >= ((u64)1 << (sh * DEF_D));
    const u64 at = (u64)c * AMR_B + cell;
    if (solid[at] != sol) {
        solid[at] = sol;
        for (int i = 0; i < DEF_Q; i++) f[((u64)c * DEF_Q + i) * AMR_B + cell] = enc(0.0f);
    }
}

// The dirty blocks' IDs, ascending, into out and their number into ctr[M_DIRTY] (one block of
// 1024 threads), for the host copy's refresh.
extern "C" __global__ void amr_mesh_dirty(const u32 cap, const unsigned char* __restrict__ dirty, u32* out, u32* ctr) {
    __shared__ u32 s[1024];
    // Rows above the high-water mark never changed since the upload.
    const u32 n = min(cap, ctr[M_HW]);
    const u32 chunk = (n + 1023) / 1024, lo = min(threadIdx.x * chunk, n), hi = min(lo + chunk, n);
    u32 c = 0;
    for (u32 b = lo; b < hi; b++) c += dirty[b] != 0;
    u32 total;
    u32 o = mesh_block_scan(s, c, &total);
    for (u32 b = lo; b < hi; b++)
        if (dirty[b]) out[o++] = b;
    if (threadIdx.x == 0) ctr[M_DIRTY] = total;
}

// Gather the rows of the blocks ids[0..n) into packed arrays (one thread per block and row
// entry, the widest row: B cells): per block level, state, block mask, pos (3), parent, child,
// nbr and nbr_child (ND each), cell masks and obstacle flags (B each).
extern "C" __global__ void amr_mesh_gather(const u32 n, const u32* __restrict__ ids, const unsigned char* __restrict__ level, const int* __restrict__ pos, const u32* __restrict__ parent, const u32* __restrict__ child, const unsigned char* __restrict__ state, const u32* __restrict__ nbr, const u32* __restrict__ nbr_child, const unsigned char* __restrict__ bmask, const unsigned char* __restrict__ cmask, const unsigned char* __restrict__ solid, unsigned char* g_bytes, int* g_pos, u32* g_words, u32* g_links, unsigned char* g_cells) {
    const u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * AMR_B) return;
    const u32 i = t / AMR_B, k = t % AMR_B, b = ids[i];
    if (k == 0) {
        g_bytes[3 * i] = level[b];
        g_bytes[3 * i + 1] = state[b];
        g_bytes[3 * i + 2] = bmask[b];
        g_words[2 * i] = parent[b];
        g_words[2 * i + 1] = child[b];
    }
    if (k < 3) g_pos[3 * i + k] = pos[3 * b + k];
    if (k < AMR_ND) {
        g_links[(u64)i * 2 * AMR_ND + k] = nbr[(u64)b * AMR_ND + k];
        g_links[(u64)i * 2 * AMR_ND + AMR_ND + k] = nbr_child[(u64)b * AMR_ND + k];
    }
    g_cells[(u64)i * 2 * AMR_B + k] = cmask[(u64)b * AMR_B + k];
    g_cells[(u64)i * 2 * AMR_B + AMR_B + k] = solid[(u64)b * AMR_B + k];
}
