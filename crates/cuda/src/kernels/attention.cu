// Causal attention (optional sliding window and soft-cap, grouped KV heads) over one layer's f16
// K and V planes (capacity, n_head_kv * head_dim). Key j sits at position j; the visible keys
// (n_kv) come from the forward's metadata, so a captured step replays at any depth.
//
// Split-K: block (head, row, split) takes keys [split * chunk, + chunk), its warps a key in
// turn with an online softmax each, then merged. With one split the block writes the output;
// with more it writes (max, sum, unnormalised acc) to `part` and attention_merge combines the
// splits in order, skipping empty ones, so a row's bits do not depend on how many splits (or
// rows) its forward had. head_dim <= 256; lane l holds elements l, l + 32, ...
#define ATTN_WARPS 4
#define ATTN_MAX_CHUNKS 8

extern "C" __global__ void attention_f32_f16(const float* q, const u16* k_plane,
                                             const u16* v_plane, float* out, float* part,
                                             const u32* positions, const u32* n_kv_at,
                                             int capacity, int n_head, int n_head_kv,
                                             int head_dim, float scale, int window,
                                             float softcap, int chunk) {
    PDL_ENTER();
    __shared__ float s_m[ATTN_WARPS], s_l[ATTN_WARPS];
    __shared__ float s_acc[ATTN_WARPS][32 * ATTN_MAX_CHUNKS];
    int h = blockIdx.x, r = blockIdx.y, split = blockIdx.z, rows = gridDim.y;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int kvh = h / (n_head / n_head_kv);
    int kv_width = n_head_kv * head_dim;
    int n_kv = min((int)*n_kv_at, capacity);
    int pos = positions[r];
    int last = min(min(pos, n_kv - 1), split * chunk + chunk - 1);
    int first = max(window > 0 ? max(0, pos + 1 - window) : 0, split * chunk);
    const float* qr = q + ((u64)r * n_head + h) * head_dim;
    float qv[ATTN_MAX_CHUNKS], acc[ATTN_MAX_CHUNKS];
#pragma unroll
    for (int c = 0; c < ATTN_MAX_CHUNKS; c++) {
        qv[c] = 32 * c + lane < head_dim ? qr[32 * c + lane] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = first + warp; j <= last; j += ATTN_WARPS) {
        const u16* kr = k_plane + (u64)j * kv_width + kvh * head_dim;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < ATTN_MAX_CHUNKS; c++)
            if (32 * c + lane < head_dim) dot = fmaf(qv[c], f16_to_f32(kr[32 * c + lane]), dot);
        float s = warp_sum(dot) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        float m_new = fmaxf(m, s);
        float corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        const u16* vr = v_plane + (u64)j * kv_width + kvh * head_dim;
#pragma unroll
        for (int c = 0; c < ATTN_MAX_CHUNKS; c++)
            if (32 * c + lane < head_dim) acc[c] = acc[c] * corr + p * f16_to_f32(vr[32 * c + lane]);
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < ATTN_MAX_CHUNKS; c++)
        if (32 * c + lane < head_dim) s_acc[warp][32 * c + lane] = acc[c];
    __syncthreads();
    float big = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++) big = fmaxf(big, s_m[w]);
    float total = 0.0f;
    for (int w = 0; w < ATTN_WARPS; w++)
        if (s_l[w] > 0.0f) total += s_l[w] * expf(s_m[w] - big);
    bool alone = gridDim.z == 1;
    u64 head = (u64)r * n_head + h;
    float* outr = out + head * head_dim;
    float* pr = part + ((u64)split * rows * n_head + head) * (head_dim + 2);
    if (!alone && threadIdx.x == 0) {
        pr[0] = big;
        pr[1] = total;
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            if (s_l[w] > 0.0f) sum += s_acc[w][d] * expf(s_m[w] - big);
        if (alone)
            outr[d] = total > 0.0f ? sum / total : 0.0f;
        else
            pr[2 + d] = sum;
    }
}

// block per (head, row): the splits' partials of attention_f32_f16 merged in split order
extern "C" __global__ void attention_merge_f32(const float* part, float* out, int n_head,
                                               int head_dim, int n_split) {
    PDL_ENTER();
    int h = blockIdx.x, r = blockIdx.y, rows = gridDim.y;
    u64 head = (u64)r * n_head + h;
    u64 stride = (u64)rows * n_head * (head_dim + 2);
    const float* p0 = part + head * (head_dim + 2);
    float big = -INFINITY;
    for (int s = 0; s < n_split; s++)
        if (p0[s * stride + 1] > 0.0f) big = fmaxf(big, p0[s * stride]);
    float total = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float* p = p0 + s * stride;
        if (p[1] > 0.0f) total += p[1] * expf(p[0] - big);
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float* p = p0 + s * stride;
            if (p[1] > 0.0f) sum += p[2 + d] * expf(p[0] - big);
        }
        out[head * head_dim + d] = total > 0.0f ? sum / total : 0.0f;
    }
}
