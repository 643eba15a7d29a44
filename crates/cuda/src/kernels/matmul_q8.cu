// The few-row matmul on 8-bit activations (what llama.cpp's mmvq does): x is first quantized
// per 32-element block to int8 with one f32 scale (`quantize_q8_f32_i8` in ops.cu), then a warp
// owns one output row and walks its weight row once for up to Q8_ROWS activation rows,
// consecutive lanes reading consecutive words of each block and multiplying four int8 pairs per
// instruction (dp4a). A row's sum is formed the same way whatever the other rows are.
#define Q8_ROWS 8
#define Q8_WARPS 4

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// 4 bytes at a 2-byte aligned address
__device__ __forceinline__ int ld_i32_a2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

__device__ __forceinline__ int ld_i32_a4(const u8* p) { return *(const int*)p; }

// Q4_K super-block (144 B): lane l takes qs word l: nibbles of sub-blocks 2p and 2p+1
// (p = l / 8), elements 4 (l % 8) .. +3 of each.
__device__ __forceinline__ void q4_k_lane(const u8* b, int lane, const i8* xq, const float* xd,
                                          int rows, int n_in, float* acc) {
    int p = lane / 8, i0 = 4 * (lane % 8);
    int q = ld_i32_a4(b + 16 + 4 * lane);
    int lo = q & 0x0F0F0F0F, hi = (q >> 4) & 0x0F0F0F0F;
    float s0, m0, s1, m1;
    scale_min_k4(2 * p, b + 4, &s0, &m0);
    scale_min_k4(2 * p + 1, b + 4, &s1, &m1);
    float d = ld_f16(b), dmin = ld_f16(b + 2);
    const int ones = 0x01010101;
    for (int r = 0; r < Q8_ROWS; r++) {
        if (r >= rows) break;
        const i8* xr = xq + (u64)r * n_in + 64 * p + i0;
        const float* dr = xd + (u64)r * (n_in / 32) + 2 * p;
        int x0 = ld_i32_a4((const u8*)xr), x1 = ld_i32_a4((const u8*)(xr + 32));
        float t0 = d * s0 * dp4a(lo, x0, 0) - dmin * m0 * dp4a(ones, x0, 0);
        float t1 = d * s1 * dp4a(hi, x1, 0) - dmin * m1 * dp4a(ones, x1, 0);
        acc[r] += dr[0] * t0 + dr[1] * t1;
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

template <int TY>
__device__ void matmul_q8_body(const u8* __restrict__ w, const i8* __restrict__ xq,
                               const float* __restrict__ xd, float* __restrict__ out, int n_out,
                               int n_in, int rows, u64 row_bytes) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int o = blockIdx.x * Q8_WARPS + warp;
    if (o >= n_out) return;
    int r0 = blockIdx.y * Q8_ROWS;
    int n_rows = min(Q8_ROWS, rows - r0);
    const u8* wr = w + (u64)o * row_bytes;
    const i8* xr = xq + (u64)r0 * n_in;
    const float* dr = xd + (u64)r0 * (n_in / 32);
    float acc[Q8_ROWS];
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) acc[r] = 0.0f;
    const int E = Q8Unit<TY>::elems, B = Q8Unit<TY>::bytes;
    int n_units = n_in / E;
#pragma unroll 4
    for (int u = 0; u < n_units; u++) {
        const u8* b = wr + (u64)u * B;
        if constexpr (TY == T_Q4_K) q4_k_lane(b, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
        if constexpr (TY == T_Q6_K) q6_k_lane(b, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
        if constexpr (TY == T_Q8_0) q8_0_lane(b, lane, xr + u * E, dr + u * (E / 32), n_rows, n_in, acc);
    }
    if constexpr (TY == T_Q8_0) {
        // rows of whole 32-blocks but not whole units: the last blocks, a lane per 8 bytes
        int tail = (n_in % E) / 32;
        if (lane / 4 < tail) {
            const u8* b = wr + (u64)n_units * B;
            q8_0_lane(b, lane, xr + n_units * E, dr + n_units * (E / 32), n_rows, n_in, acc);
        }
    }
#pragma unroll
    for (int r = 0; r < Q8_ROWS; r++) {
        float total = warp_sum(acc[r]);
        if (lane == 0 && r < n_rows) out[(u64)(r0 + r) * n_out + o] = total;
    }
}
