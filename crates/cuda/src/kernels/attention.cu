// Causal attention (optional sliding window and soft-cap, grouped KV heads) over one layer's f16
// K and V planes (capacity, n_head_kv * head_dim). Key j sits at position j; the visible keys
// (n_kv) come from the forward's metadata, so a captured step replays at any depth.
//
// Block (kv head x head group, row, split) takes keys [split * chunk, + chunk) for up to G
// query heads of one KV head (an entry point per G), so each K and V row is read once for all.
// Keys go in tiles of ATTN_TILE: scores (a lane group of `tpr` lanes per key, 8 f16 per lane,
// one 16-byte load), the tile's online softmax (a warp per head), then P.V (a thread group of
// `tpr` per key, 8 dims per thread). With one split the block writes the output (for decode
// also its 8-bit form, sparing the next matmul its quantize launch); with more it
// writes (max, sum, unnormalised acc) to `part` and attention_merge combines the splits in
// fixed slots, skipping empty ones, so a row's bits do not depend on how many splits (or rows)
// its forward had. head_dim <= 256.
#define ATTN_THREADS 128
#define ATTN_WARPS (ATTN_THREADS / WARP)
#define ATTN_TILE 64
#define ATTN_MAX_DIM 256
// a merge thread per split: at most MERGE_THREADS
#define ATTN_MAX_SPLITS 128
// the merge's threads: 16 warps, so each walks few splits (its latency is a warp's chain)
#define MERGE_THREADS 512
#define MERGE_WARPS (MERGE_THREADS / WARP)
// K or V rows a lane loads at once: 2 keeps the registers at four heads under 100, so a
// long context's splits fit in one wave
#ifndef ATTN_AHEAD
#define ATTN_AHEAD 2
#endif

// 8 f16 of a row from element 8 * sub, zeros past head_dim, where a 16-byte load cannot go
__device__ __noinline__ uint4 kv_load8_edge(const u16* p, int n) {
    u32 w[4] = {0, 0, 0, 0};
    for (int e = 0; e < 8 && e < n; e++) w[e / 2] |= (u32)p[e] << (16 * (e % 2));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// 8 f16 of a K or V row from element 8 * sub: one 16-byte load where the row allows it
__device__ __forceinline__ uint4 kv_load8(const u16* row, int sub, int head_dim) {
    const u16* p = row + 8 * sub;
    int n = head_dim - 8 * sub;
    if (n >= 8 && ((u64)p & 15) == 0) return *(const uint4*)p;
    return kv_load8_edge(p, n);
}

// out[at] = v and, given q (head_dim a multiple of 32, so a warp's 32 consecutive values are
// one block), its 8-bit form for the matmul that reads out next: quantize_q8_f32_i8's bits
__device__ __forceinline__ void attn_store(float* out, i8* q, float* qd, u64 at, float v) {
    out[at] = v;
    if (q) quantize_q8_part(&v, 1, true, at, q, qd);
}

// ATTN_AHEAD rows t0 + k0, + step, ... of a K or V plane, zeros from k = n_tile on: a lane's
// loads in flight together
__device__ __forceinline__ void kv_group(uint4* w, const u16* head, int t0, int k0, int step,
                                         int n_tile, int kv_width, int sub, int head_dim) {
#pragma unroll
    for (int u = 0; u < ATTN_AHEAD; u++) {
        int k = k0 + u * step;
        w[u] = k < n_tile ? kv_load8(head + (u64)(t0 + k) * kv_width, sub, head_dim)
                          : make_uint4(0, 0, 0, 0);
    }
}

__device__ __forceinline__ void unpack8(uint4 w, float* v) {
    u32 x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = f16_to_f32((u16)(x[i] & 0xffff));
        v[2 * i + 1] = f16_to_f32((u16)(x[i] >> 16));
    }
}

// the block's work for G query heads (ng of them real; the rest compute on zeros, written
// nowhere), G a constant so every head loop unrolls without a branch
template <int G>
__device__ __forceinline__ void attention_heads(
    const float* q, const u16* k_plane, const u16* v_plane, float* out, float* part,
    const u32* positions, const u32* n_kv_at, int capacity, int n_head, int n_head_kv,
    int head_dim, float scale, int window, float softcap, int chunk, i8* q8, float* q8d) {
    __shared__ __align__(16) float s_q[G][ATTN_MAX_DIM];
    __shared__ float s_p[2][G][ATTN_TILE];
    __shared__ float s_corr[2][G], s_m[G], s_l[G];
    __shared__ float s_red[ATTN_THREADS * 8];
    int group = n_head / n_head_kv, groups = (group + G - 1) / G;
    int kvh = blockIdx.x / groups, h0 = kvh * group + blockIdx.x % groups * G;
    int ng = min(G, group - blockIdx.x % groups * G);
    int r = blockIdx.y, split = blockIdx.z, rows = gridDim.y;
    int t = threadIdx.x, warp = t / WARP, lane = t % WARP;
    int tpr = 1;  // lanes per key row: 8 elements each
    while (tpr * 8 < head_dim) tpr <<= 1;
    int kv_width = n_head_kv * head_dim;
    // metadata before waiting: it is uploaded before a forward's first kernel, and no kernel
    // writes it
    int n_kv = min((int)*n_kv_at, capacity);
    int pos = positions[r];
    PDL_ENTER();
    int last = min(min(pos, n_kv - 1), split * chunk + chunk - 1);
    int first = max(window > 0 ? max(0, pos + 1 - window) : 0, split * chunk);
    const float* qr = q + ((u64)r * n_head + h0) * head_dim;
#pragma unroll 1
    for (int i = t; i < G * tpr * 8; i += ATTN_THREADS) {
        int g = i / (tpr * 8), d = i % (tpr * 8);
        s_q[g][d] = g < ng && d < head_dim ? qr[(u64)g * head_dim + d] : 0.0f;
    }
    if (t < G) {
        s_m[t] = -INFINITY;
        s_l[t] = 0.0f;
    }
    __syncthreads();
    const u16* k_head = k_plane + kvh * head_dim;
    const u16* v_head = v_plane + kvh * head_dim;
    // scores: lane group (warp, lane / tpr) takes a key per pass, ATTN_AHEAD passes loaded first
    int a_sub = lane % tpr, a_keys = WARP / tpr, a_step = ATTN_WARPS * a_keys;
    // P.V: thread group t / tpr takes keys kg, kg + n_kg, ...
    int c_sub = t % tpr, kg = t / tpr, n_kg = ATTN_THREADS / tpr;
    float acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    int buf = 0;
    for (int t0 = first; t0 <= last; t0 += ATTN_TILE, buf ^= 1) {
        int n_tile = min(ATTN_TILE, last - t0 + 1);
        for (int k0 = warp * a_keys + lane / tpr; k0 - lane / tpr < n_tile;
             k0 += ATTN_AHEAD * a_step) {
            uint4 kw[ATTN_AHEAD];
            kv_group(kw, k_head, t0, k0, a_step, n_tile, kv_width, a_sub, head_dim);
#pragma unroll
            for (int u = 0; u < ATTN_AHEAD; u++) {
                int k = k0 + u * a_step;
                float kf[8];
                unpack8(kw[u], kf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float4* qv = (const float4*)&s_q[g][8 * a_sub];
                    float4 q0 = qv[0], q1 = qv[1];
                    float dot = q0.x * kf[0];
                    dot = fmaf(q0.y, kf[1], dot);
                    dot = fmaf(q0.z, kf[2], dot);
                    dot = fmaf(q0.w, kf[3], dot);
                    dot = fmaf(q1.x, kf[4], dot);
                    dot = fmaf(q1.y, kf[5], dot);
                    dot = fmaf(q1.z, kf[6], dot);
                    dot = fmaf(q1.w, kf[7], dot);
                    for (int o = tpr / 2; o > 0; o >>= 1)
                        dot += __shfl_xor_sync(0xffffffffu, dot, o);
                    if (a_sub == 0 && k < n_tile) s_p[buf][g][k] = dot;
                }
            }
        }
        __syncthreads();
        // the tile's online softmax: warp g % ATTN_WARPS takes head g
        for (int g = warp; g < ng; g += ATTN_WARPS) {
            float sc[ATTN_TILE / WARP], big = -INFINITY;
#pragma unroll
            for (int i = 0; i < ATTN_TILE / WARP; i++) {
                int k = lane + WARP * i;
                float v = s_p[buf][g][k] * scale;
                if (softcap > 0.0f) v = softcap * tanhf(v / softcap);
                sc[i] = k < n_tile ? v : -INFINITY;
                big = fmaxf(big, sc[i]);
            }
            float m_old = s_m[g], m_new = fmaxf(m_old, warp_max(big)), sum = 0.0f;
#pragma unroll
            for (int i = 0; i < ATTN_TILE / WARP; i++) {
                float p = sc[i] == -INFINITY ? 0.0f : expf(sc[i] - m_new);
                s_p[buf][g][lane + WARP * i] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            if (lane == 0) {
                s_corr[buf][g] = corr;
                s_l[g] = s_l[g] * corr + sum;
                s_m[g] = m_new;
            }
        }
        __syncthreads();
#pragma unroll
        for (int g = 0; g < G; g++) {
            float c = g < ng ? s_corr[buf][g] : 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] *= c;
        }
        for (int k0 = kg; k0 < n_tile; k0 += ATTN_AHEAD * n_kg) {
            uint4 vw[ATTN_AHEAD];
            kv_group(vw, v_head, t0, k0, n_kg, n_tile, kv_width, c_sub, head_dim);
#pragma unroll
            for (int u = 0; u < ATTN_AHEAD; u++) {
                int k = min(k0 + u * n_kg, ATTN_TILE - 1);
                float vf[8];
                unpack8(vw[u], vf);  // zeros past the tile, whatever p they meet
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float p = s_p[buf][g][k];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] = fmaf(p, vf[e], acc[g][e]);
                }
            }
        }
    }
    bool alone = gridDim.z == 1;
    int width = tpr * 8;
#pragma unroll 1
    for (int g = 0; g < ng; g++) {
        __syncthreads();
#pragma unroll
        for (int gg = 0; gg < G; gg++)
            if (gg == g)
#pragma unroll
                for (int e = 0; e < 8; e++) s_red[kg * width + 8 * c_sub + e] = acc[gg][e];
        __syncthreads();
        u64 head = (u64)r * n_head + h0 + g;
        float* pr = part + ((u64)split * rows * n_head + head) * (head_dim + 2);
        float big = s_m[g], total = s_l[g];
        if (!alone && t == 0) {
            pr[0] = big;
            pr[1] = total;
        }
#pragma unroll 1
        for (int d = t; d < head_dim; d += ATTN_THREADS) {
            float sum = 0.0f;
            for (int i = 0; i < n_kg; i++) sum += s_red[i * width + d];
            if (alone)
                attn_store(out, q8, q8d, head * head_dim + d, total > 0.0f ? sum / total : 0.0f);
            else
                pr[2 + d] = sum;
        }
    }
}

// one entry point per query heads a block takes (ATTN_HEAD_VARIANTS on the host)
#define ATTENTION_HEADS(G)                                                                   \
    extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attention_f32_f16_g##G(      \
        const float* q, const u16* k_plane, const u16* v_plane, float* out, float* part,    \
        const u32* positions, const u32* n_kv_at, int capacity, int n_head, int n_head_kv,  \
        int head_dim, float scale, int window, float softcap, int chunk, i8* q8,             \
        float* q8d) {                                                                        \
        attention_heads<G>(q, k_plane, v_plane, out, part, positions, n_kv_at, capacity,   \
                           n_head, n_head_kv, head_dim, scale, window, softcap, chunk, q8,  \
                           q8d);                                                             \
    }
ATTENTION_HEADS(1)
ATTENTION_HEADS(2)
ATTENTION_HEADS(4)
ATTENTION_HEADS(8)

// block per (head, row): the splits' partials of attention_f32_f16 merged. Thread s weighs
// split s (n_split <= ATTN_MAX_SPLITS), warp w sums splits w, w + MERGE_WARPS, ... (lane l
// dims l, l + 32, ...): fixed slots, empty splits skipped, so a row's bits do not depend on
// how many empty splits follow it.
extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    attention_merge_f32(const float* part, float* out, int n_head, int head_dim, int n_split,
                        i8* q, float* qd) {
    PDL_ENTER();
    __shared__ float s_w[MERGE_THREADS], s_big[MERGE_WARPS], s_total[MERGE_WARPS];
    __shared__ float s_acc[MERGE_WARPS][ATTN_MAX_DIM];
    int h = blockIdx.x, r = blockIdx.y, rows = gridDim.y;
    int t = threadIdx.x, warp = t / WARP, lane = t % WARP;
    u64 head = (u64)r * n_head + h;
    u64 stride = (u64)rows * n_head * (head_dim + 2);
    const float* p0 = part + head * (head_dim + 2);
    float m = -INFINITY, l = 0.0f;
    if (t < n_split && p0[t * stride + 1] > 0.0f) {
        m = p0[t * stride];
        l = p0[t * stride + 1];
    }
    float big = warp_max(m);
    if (lane == 0) s_big[warp] = big;
    __syncthreads();
    big = s_big[0];
    for (int w = 1; w < MERGE_WARPS; w++) big = fmaxf(big, s_big[w]);
    float wt = l > 0.0f ? expf(m - big) : 0.0f;
    s_w[t] = wt;
    float total = warp_sum(l * wt);
    if (lane == 0) s_total[warp] = total;
    __syncthreads();
    total = s_total[0];
    for (int w = 1; w < MERGE_WARPS; w++) total += s_total[w];
    // a lane's dims: l + 32 c for c < n_c
    int n_c = (head_dim + WARP - 1) / WARP;
    float acc[ATTN_MAX_DIM / WARP];
#pragma unroll
    for (int c = 0; c < ATTN_MAX_DIM / WARP; c++) acc[c] = 0.0f;
#pragma unroll 4
    for (int s = warp; s < n_split; s += MERGE_WARPS) {
        float w = s_w[s];
        if (w <= 0.0f) continue;
        const float* p = p0 + s * stride + 2;
#pragma unroll
        for (int c = 0; c < ATTN_MAX_DIM / WARP; c++) {
            int d = WARP * c + lane;
            if (c < n_c) acc[c] = fmaf(d < head_dim ? p[d] : 0.0f, w, acc[c]);
        }
    }
#pragma unroll
    for (int c = 0; c < ATTN_MAX_DIM / WARP; c++) s_acc[warp][WARP * c + lane] = acc[c];
    __syncthreads();
    for (int d = t; d < head_dim; d += MERGE_THREADS) {
        float sum = s_acc[0][d];
        for (int w = 1; w < MERGE_WARPS; w++) sum += s_acc[w][d];
        attn_store(out, q, qd, head * head_dim + d, total > 0.0f ? sum / total : 0.0f);
    }
}
