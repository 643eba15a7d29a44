// Each row's k best logits (the CPU's `top_candidates`): descending by total order (+0 above
// -0), ties to the lower id, NaN and -inf left out. A block of SELECT_THREADS per row finds the
// k-th best key by radix select (digits of 11, 11 and 10 bits), collects the keys above it and
// the first ties by id, and sorts them. Out, per row (1 + 2k) u32: count, ids, logit bits.
#define SELECT_THREADS 1024
#define SELECT_MAX_K 1024
#define SELECT_BINS 2048

// float bits -> a key whose unsigned order is the floats' total order; 0 for NaN and -inf
__device__ __forceinline__ u32 select_key(float v) {
    u32 bits = __float_as_uint(v);
    if (isnan(v) || v == -INFINITY) return 0;
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

__device__ __forceinline__ u32 select_key_bits(u32 key) {
    return (key & 0x80000000u) ? key ^ 0x80000000u : ~key;
}

// exclusive prefix sum of v over the block's threads in thread order, and the block's total
__device__ __forceinline__ u32 select_block_scan(u32 v, u32* warp_sums, u32* total) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    u32 incl = v;
#pragma unroll
    for (int o = 1; o < WARP; o <<= 1) {
        u32 n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
    }
    if (lane == WARP - 1) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        u32 s = lane < SELECT_THREADS / WARP ? warp_sums[lane] : 0;
        u32 si = s;
#pragma unroll
        for (int o = 1; o < WARP; o <<= 1) {
            u32 n = __shfl_up_sync(0xffffffffu, si, o);
            if (lane >= o) si += n;
        }
        warp_sums[lane] = si - s;
        if (lane == WARP - 1) *total = si;
    }
    __syncthreads();
    u32 out = warp_sums[warp] + incl - v;
    __syncthreads();  // warp_sums free for the next scan
    return out;
}

extern "C" __global__ void __launch_bounds__(SELECT_THREADS)
    top_k_f32(const float* x, u32* out, int width, int k) {
    PDL_ENTER();
    __shared__ u32 hist[SELECT_BINS];
    __shared__ unsigned long long sorted[SELECT_MAX_K];
    __shared__ u32 warp_sums[WARP];
    __shared__ u32 total, found_bin, found_above;
    const float* xr = x + (u64)blockIdx.x * width;
    u32* o = out + (u64)blockIdx.x * (1 + 2 * (u64)k);
    const int tid = threadIdx.x;
    // the selection: every key >= lo, then the first `need` keys == tie by id
    u32 prefix = 0, remaining = (u32)k, lo = 1, tie = 0, need = 0;
    bool settled = false;
    for (int pass = 0; pass < 3 && !settled; pass++) {
        const int bits = pass == 2 ? 10 : 11, shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const int high = shift + bits;
        const u32 bins = 1u << bits;
        for (int b = tid; b < SELECT_BINS; b += SELECT_THREADS) hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < width; base += SELECT_THREADS) {
            int i = base + tid;
            u32 key = i < width ? select_key(xr[i]) : 0;
            bool in = key != 0 && ((u64)key >> high) == ((u64)prefix >> high);
            u32 bin = in ? (key >> shift) & (bins - 1) : 0xffffffffu;
            // lanes of one bin add once, by their lowest lane
            u32 peers = __match_any_sync(0xffffffffu, bin);
            if (in && (__ffs(peers) - 1) == tid % WARP) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        // thread t holds the two bins 2t', 2t'+1 counted from the top (t' = t), scanned so each
        // knows how many keys lie in the bins above its own
        u32 hi_bin = bins - 1 - 2 * tid, lo_bin = hi_bin - 1;
        bool owns = 2 * (u32)tid < bins;
        u32 h_hi = owns ? hist[hi_bin] : 0, h_lo = owns ? hist[lo_bin] : 0;
        u32 above = select_block_scan(h_hi + h_lo, warp_sums, &total);
        if (tid == 0) found_bin = 0xffffffffu;
        __syncthreads();
        if (owns) {
            if (above < remaining && remaining <= above + h_hi) {
                found_bin = hi_bin;
                found_above = above;
            } else if (above + h_hi < remaining && remaining <= above + h_hi + h_lo) {
                found_bin = lo_bin;
                found_above = above + h_hi;
            }
        }
        __syncthreads();
        u32 fb = found_bin, fa = found_above;
        __syncthreads();
        if (fb == 0xffffffffu) {
            // fewer than `remaining` keys match: all of them (only the first pass: later ones
            // are entered with at least `remaining` keys under the prefix)
            lo = pass == 0 ? 1 : prefix;
            settled = true;
        } else {
            prefix |= fb << shift;
            remaining -= fa;
            if (remaining == hist[fb]) {
                // the whole bin is taken: every key at or above its lowest
                lo = prefix;
                settled = true;
            } else if (pass == 2) {
                lo = prefix + 1;
                tie = prefix;
                need = remaining;
                settled = true;
            }
        }
        __syncthreads();  // hist read before the next pass clears it
    }
    const u32 n_above_lo = (u32)k - need;
    // collect: keys >= lo into slots by a shared counter, ties in id order after them
    __shared__ u32 n_taken;
    if (tid == 0) n_taken = 0;
    __syncthreads();
    u32 ties_before = 0;
    for (int base = 0; base < width; base += SELECT_THREADS) {
        int i = base + tid;
        u32 key = i < width ? select_key(xr[i]) : 0;
        if (key != 0 && key >= lo) {
            u32 slot = atomicAdd(&n_taken, 1u);
            sorted[slot] = ((unsigned long long)key << 32) | (0xffffffffu - (u32)i);
        }
        if (need > 0) {
            bool is_tie = key != 0 && key == tie;
            u32 rank = ties_before + select_block_scan(is_tie, warp_sums, &total);
            u32 tile_ties = total;
            if (is_tie && rank < need)
                sorted[n_above_lo + rank] = ((unsigned long long)key << 32) | (0xffffffffu - (u32)i);
            ties_before += tile_ties;
        }
    }
    __syncthreads();
    u32 count = n_taken + (need > 0 ? min(need, ties_before) : 0);
    // bitonic sort of the count entries, descending (key, then lower id), padded with zeros
    u32 n = 1;
    while (n < count) n <<= 1;
    for (u32 i = count + tid; i < n; i += SELECT_THREADS) sorted[i] = 0;
    __syncthreads();
    for (u32 size = 2; size <= n; size <<= 1) {
        for (u32 stride = size / 2; stride > 0; stride >>= 1) {
            u32 i = tid, j = tid ^ stride;
            if (i < n && j > i) {
                unsigned long long a = sorted[i], b = sorted[j];
                bool descending = (i & size) == 0;
                if ((a < b) == descending) {
                    sorted[i] = b;
                    sorted[j] = a;
                }
            }
            __syncthreads();
        }
    }
    if (tid == 0) o[0] = count;
    for (u32 i = tid; i < count; i += SELECT_THREADS) {
        unsigned long long e = sorted[i];
        o[1 + i] = 0xffffffffu - (u32)e;
        o[1 + k + i] = select_key_bits((u32)(e >> 32));
    }
}
