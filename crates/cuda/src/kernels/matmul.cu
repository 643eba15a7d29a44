// The quantized matmul `out (rows, n_out) = x (rows, n_in) . w^T` and the embedding gather for
// one weight type; the Rust side appends the extern "C" entry points, named by type and
// precisions. A warp owns one output row and walks the weight row once for MATMUL_ROWS
// activation rows; each row's sum is formed the same way whatever the others are, so a row's
// result does not depend on how many rows share the call.
#define MATMUL_ROWS 8
#define MATMUL_WARPS 4

template <int TY>
__device__ void matmul_body(const u8* __restrict__ w, const float* __restrict__ x,
                            float* __restrict__ out, int n_out, int n_in, int rows,
                            u64 row_bytes) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int o = blockIdx.x * MATMUL_WARPS + warp;
    if (o >= n_out) return;
    int r0 = blockIdx.y * MATMUL_ROWS;
    int n_rows = min(MATMUL_ROWS, rows - r0);
    const u8* wr = w + (u64)o * row_bytes;
    float acc[MATMUL_ROWS];
#pragma unroll
    for (int r = 0; r < MATMUL_ROWS; r++) acc[r] = 0.0f;
    int n_sub = n_in / 32;
    for (int s = lane; s < n_sub; s += WARP) {
        float v[32];
        dq_sub<TY>(wr, s, n_sub, v);
#pragma unroll
        for (int r = 0; r < MATMUL_ROWS; r++) {
            if (r < n_rows) {
                const float4* xr = (const float4*)(x + (u64)(r0 + r) * n_in + 32 * s);
                float a = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float4 q = xr[i];
                    a = fmaf(v[4 * i], q.x, a);
                    a = fmaf(v[4 * i + 1], q.y, a);
                    a = fmaf(v[4 * i + 2], q.z, a);
                    a = fmaf(v[4 * i + 3], q.w, a);
                }
                acc[r] += a;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MATMUL_ROWS; r++) {
        float total = warp_sum(acc[r]);
        if (lane == 0 && r < n_rows) out[(u64)(r0 + r) * n_out + o] = total;
    }
}

// one block per token: row tokens[r] of the table, dequantised into out (rows, n_in)
template <int TY>
__device__ void embed_body(const u8* __restrict__ table, const u32* __restrict__ tokens,
                           float* __restrict__ out, int n_in, u64 row_bytes) {
    int r = blockIdx.x;
    const u8* wr = table + (u64)tokens[r] * row_bytes;
    for (int s = threadIdx.x; s < n_in / 32; s += blockDim.x) {
        float v[32];
        dq_sub<TY>(wr, s, n_in / 32, v);
#pragma unroll
        for (int i = 0; i < 32; i++) out[(u64)r * n_in + 32 * s + i] = v[i];
    }
}

// rows [row0, row0 + n_rows) of the weight, dequantised to f16 into out (n_rows, n_in): a thread
// per 32-element sub-block (the prefill GEMM's operand).
template <int TY>
__device__ void dequant_f16_body(const u8* __restrict__ w, u16* __restrict__ out, int row0,
                                 int n_rows, int n_in, u64 row_bytes) {
    int n_sub = n_in / 32;
    u64 total = (u64)n_rows * n_sub;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total;
         i += (u64)gridDim.x * blockDim.x) {
        int r = (int)(i / n_sub), s = (int)(i % n_sub);
        float v[32];
        dq_sub<TY>(w + (u64)(row0 + r) * row_bytes, s, n_sub, v);
        // 64 contiguous bytes as four 16-byte stores
        uint4* o = (uint4*)(out + (u64)r * n_in + 32 * s);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float* e = v + 8 * j;
            uint4 q;
            q.x = (u32)f32_to_f16(e[0]) | ((u32)f32_to_f16(e[1]) << 16);
            q.y = (u32)f32_to_f16(e[2]) | ((u32)f32_to_f16(e[3]) << 16);
            q.z = (u32)f32_to_f16(e[4]) | ((u32)f32_to_f16(e[5]) << 16);
            q.w = (u32)f32_to_f16(e[6]) | ((u32)f32_to_f16(e[7]) << 16);
            o[j] = q;
        }
    }
}
