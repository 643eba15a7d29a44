// The few-row matmul on 8-bit activations (what llama.cpp's mmvq does): x is first quantized
// per 32-element block to int8 with one f32 scale (`quantize_q8_f32_i8` in ops.cu), then a warp
// owns one output row and walks its weight row once for up to Q8_ROWS activation rows,
// consecutive lanes reading consecutive words of each block and multiplying four int8 pairs per
// instruction (dp4a). A row's sum is formed the same way whatever the other rows are.
#define Q8_ROWS 8
#define Q8_WARPS 4
// warps sharing one output row of matmul_q8 (each a share of its blocks), so a 4096-row
// weight keeps twice the warps (and loads) in flight
#define Q8_SPLIT 2

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// 4 bytes at a 2-byte aligned address
__device__ __forceinline__ int ld_i32_a2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

__device__ __forceinline__ int ld_i32_a4(const u8* p) { return *(const int*)p; }

// byte k (0..3) of w
__device__ __forceinline__ u32 byte_of(u32 w, int k) { return (w >> (8 * k)) & 0xFF; }

// Q4_K super-blocks (144 B, 16-byte aligned: rows are whole blocks), four a warp step: lanes
// 8k .. 8k + 7 take block k, lane chunk c = lane % 8 its qs bytes 16c .. 16c + 15 (one 16-byte
// load): elements 16 (c % 2) .. +15 of sub-blocks 2p (low nibbles) and 2p + 1 (high), p = c / 2.
// The block's 16-byte header (d, dmin, 6-bit scales and mins) is one load too.
__device__ __forceinline__ void q4_k_lane(const u8* b, int lane, const i8* xq, const float* xd,
                                          int rows, int n_in, float* acc) {
    uint4 h = *(const uint4*)b;
    int c = lane % 8, p = c / 2, e0 = 16 * (c % 2);
    uint4 q = *(const uint4*)(b + 16 + 16 * c);
    float d = f16_to_f32((u16)(h.x & 0xFFFF)), dmin = f16_to_f32((u16)(h.x >> 16));
    // scale and min of sub-block j = 2p + t: bytes j, j + 4 (j < 4), else j + 4 with the top
    // bits of j - 4 and j
    float s[2], m[2];
#pragma unroll
    for (int t = 0; t < 2; t++) {
        int j = 2 * p + t;
        if (j < 4) {
            s[t] = (float)(byte_of(h.y, j) & 63);
            m[t] = (float)(byte_of(h.z, j) & 63);
        } else {
            u32 hi8 = byte_of(h.w, j - 4);
            s[t] = (float)((hi8 & 0xF) | ((byte_of(h.y, j - 4) >> 6) << 4));
            m[t] = (float)((hi8 >> 4) | ((byte_of(h.z, j - 4) >> 6) << 4));
        }
    }
    float ds0 = d * s[0], dm0 = dmin * m[0], ds1 = d * s[1], dm1 = dmin * m[1];
    const int ones = 0x01010101;
    int qw[4] = {(int)q.x, (int)q.y, (int)q.z, (int)q.w};
    for (int r = 0; r < Q8_ROWS; r++) {
        if (r >= rows) break;
        const i8* xr = xq + (u64)r * n_in + 64 * p + e0;
        const float* dr = xd + (u64)r * (n_in / 32) + 2 * p;
        int4 x0 = *(const int4*)xr, x1 = *(const int4*)(xr + 32);
        int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
        int dot0 = 0, dot1 = 0, sum0 = 0, sum1 = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            dot0 = dp4a(qw[k] & 0x0F0F0F0F, xa[k], dot0);
            dot1 = dp4a((qw[k] >> 4) & 0x0F0F0F0F, xb[k], dot1);
            sum0 = dp4a(ones, xa[k], sum0);
            sum1 = dp4a(ones, xb[k], sum1);
        }
        acc[r] += dr[0] * (ds0 * dot0 - dm0 * sum0) + dr[1] * (ds1 * dot1 - dm1 * sum1);
    }
}

// Q6_K super-block (210 B, 2-byte aligned): lane l takes ql word l: half n = l / 16, quarters
// qq0 = (l / 8) % 2 (low nibbles) and qq0 + 2 (high), elements 4 (l % 8) .. +3 of each.
__device__ __forceinline__ void q6_k_lane(const u8* b, int lane, const i8* xq, const float* xd,
                                          int rows, int n_in, float* acc) {
    int n = lane / 16, qq0 = (lane / 8) % 2, l0 = 4 * (lane % 8);
    int ql = ld_i32_a2(b + 4 * lane);
    int qh = ld_i32_a2(b + 128 + 32 * n + l0);
    int v0 = (ql & 0x0F0F0F0F) | (((qh >> (2 * qq0)) & 0x03030303) << 4);
    int v1 = ((ql >> 4) & 0x0F0F0F0F) | (((qh >> (2 * qq0 + 4)) & 0x03030303) << 4);
    const i8* sc = (const i8*)(b + 192) + 8 * n + l0 / 16;
    float d = ld_f16(b + 208);
    float sc0 = d * sc[2 * qq0], sc1 = d * sc[2 * qq0 + 4];
    const int ones = 0x01010101;
    for (int r = 0; r < Q8_ROWS; r++) {
        if (r >= rows) break;
        const i8* xr = xq + (u64)r * n_in + 128 * n + l0;
        const float* dr = xd + (u64)r * (n_in / 32) + 4 * n;
        int x0 = ld_i32_a4((const u8*)(xr + 32 * qq0));
        int x1 = ld_i32_a4((const u8*)(xr + 32 * (qq0 + 2)));
        float t0 = sc0 * (dp4a(v0, x0, 0) - 32 * dp4a(ones, x0, 0));
        float t1 = sc1 * (dp4a(v1, x1, 0) - 32 * dp4a(ones, x1, 0));
        acc[r] += dr[qq0] * t0 + dr[qq0 + 2] * t1;
    }
}

// Q8_0: a unit is 8 blocks (34 B each, 2-byte aligned); lane l takes bytes 8 (l % 4) .. +7 of
// block l / 4.
__device__ __forceinline__ void q8_0_lane(const u8* b, int lane, const i8* xq, const float* xd,
                                          int rows, int n_in, float* acc) {
    const u8* blk = b + 34 * (lane / 4);
    int j = 8 * (lane % 4);
    int w0 = ld_i32_a2(blk + 2 + j), w1 = ld_i32_a2(blk + 6 + j);
    float d = ld_f16(blk);
    for (int r = 0; r < Q8_ROWS; r++) {
        if (r >= rows) break;
        const i8* xr = xq + (u64)r * n_in + 32 * (lane / 4) + j;
        float dx = xd[(u64)r * (n_in / 32) + lane / 4];
        int x0 = ld_i32_a4((const u8*)xr), x1 = ld_i32_a4((const u8*)(xr + 4));
        acc[r] += d * dx * (float)dp4a(w1, x1, dp4a(w0, x0, 0));
    }
}

// elements per unit of a warp's walk, and a unit's bytes
template <int TY> struct Q8Unit;
template <> struct Q8Unit<T_Q4_K> { static const int elems = 256, bytes = 144; };
template <> struct Q8Unit<T_Q6_K> { static const int elems = 256, bytes = 210; };
template <> struct Q8Unit<T_Q8_0> { static const int elems = 256, bytes = 272; };

// One lane's part of weight row wr (n_in elements) against activation rows xr, dr (n_rows of
// them), into acc: share `part` of `parts` of the row's units, interleaved.
template <int TY>
__device__ __forceinline__ void row_q8(const u8* __restrict__ wr, const i8* __restrict__ xr,
                                       const float* __restrict__ dr, int n_rows, int n_in,
                                       int lane, float* acc, int part, int parts) {
    const int E = Q8Unit<TY>::elems, B = Q8Unit<TY>::bytes;
    int n_units = n_in / E;
    if constexpr (TY == T_Q4_K) {
        // four blocks a step, eight lanes each
        int k = lane / 8 + 4 * part;
#pragma unroll 2
        for (int u = k; u < n_units; u += 4 * parts)
            q4_k_lane(wr + (u64)u * B, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
        return;
    }
#pragma unroll 4
    for (int u = part; u < n_units; u += parts) {
        const u8* b = wr + (u64)u * B;
        if constexpr (TY == T_Q6_K) q6_k_lane(b, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
        if constexpr (TY == T_Q8_0) q8_0_lane(b, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
    }
    if constexpr (TY == T_Q8_0) {
        // rows of whole 32-blocks but not whole units: the last blocks, a lane per 8 bytes
        int tail = (n_in % E) / 32;
        if (part == 0 && lane / 4 < tail) {
            const u8* b = wr + (u64)n_units * B;
            q8_0_lane(b, lane, xr + n_units * E, dr + n_units * (E / 32), n_rows, n_in, acc);
        }
    }
}

// Up to three weights of this type and width, one launch (q, k and v): blockIdx.x runs over
// the blocks of w0's rows, then w1's, then w2's. Q8_SPLIT warps per output row, their sums
// added in shared memory in one order.
template <int TY>
__device__ void matmul_q8_body(const u8* w0, const u8* w1, const u8* w2, float* out0,
                               float* out1, float* out2, int n0, int n1, int n2,
                               const i8* __restrict__ xq, const float* __restrict__ xd,
                               int n_in, int rows, u64 row_bytes) {
    const int per_block = Q8_WARPS / Q8_SPLIT;
    __shared__ float sums[Q8_WARPS][Q8_ROWS];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, part = warp % Q8_SPLIT;
    int b = blockIdx.x, b0 = (n0 + per_block - 1) / per_block, b1 = (n1 + per_block - 1) / per_block;
    const u8* w = w0;
    float* out = out0;
    int n_out = n0;
    if (b >= b0 + b1) {
        w = w2, out = out2, n_out = n2, b -= b0 + b1;
    } else if (b >= b0) {
        w = w1, out = out1, n_out = n1, b -= b0;
    }
    int o = b * per_block + warp / Q8_SPLIT;
    int r0 = blockIdx.y * Q8_ROWS;
    int n_rows = min(Q8_ROWS, rows - r0);
    float acc[Q8_ROWS];
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) acc[r] = 0.0f;
    // no early return: every warp reaches the barrier
    if (o < n_out)
        row_q8<TY>(w + (u64)o * row_bytes, xq + (u64)r0 * n_in, xd + (u64)r0 * (n_in / 32),
                   n_rows, n_in, lane, acc, part, Q8_SPLIT);
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) {
        float total = warp_sum(acc[r]);
        if (lane == 0) sums[warp][r] = total;
    }
    __syncthreads();
    if (o < n_out && part == 0 && lane < n_rows) {
        float total = 0.0f;
        for (int p = 0; p < Q8_SPLIT; p++) total += sums[warp + p][lane];
        out[(u64)(r0 + lane) * n_out + o] = total;
    }
}

// The FFN's gated product: out = act(x . wg^T) * (x . wu^T), a warp per output row walking
// the gate row and the up row.
template <int TY>
__device__ void matmul_glu_q8_body(const u8* __restrict__ wg, const u8* __restrict__ wu,
                                   const i8* __restrict__ xq, const float* __restrict__ xd,
                                   float* __restrict__ out, int n_out, int n_in, int rows,
                                   u64 row_bytes, int act) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int o = blockIdx.x * Q8_WARPS + warp;
    if (o >= n_out) return;
    int r0 = blockIdx.y * Q8_ROWS;
    int n_rows = min(Q8_ROWS, rows - r0);
    const i8* xr = xq + (u64)r0 * n_in;
    const float* dr = xd + (u64)r0 * (n_in / 32);
    float g[Q8_ROWS], u[Q8_ROWS];
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) g[r] = u[r] = 0.0f;
    row_q8<TY>(wg + (u64)o * row_bytes, xr, dr, n_rows, n_in, lane, g, 0, 1);
    row_q8<TY>(wu + (u64)o * row_bytes, xr, dr, n_rows, n_in, lane, u, 0, 1);
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) {
        float gt = warp_sum(g[r]), ut = warp_sum(u[r]);
        if (lane == 0 && r < n_rows) out[(u64)(r0 + r) * n_out + o] = glu_of(gt, ut, act);
    }
}
