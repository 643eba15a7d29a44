// Norms, element-wise ops, rope, the KV write, row gathers and argmax, all f32 activations
// (KV f16). Every kernel takes its sizes as arguments; none depends on a model's shape.

// The 8-bit form of a 32-block whose largest magnitude is amax: its scale d (x ~ d * q, q in
// -127..127), and v's q under that scale, rounded to nearest even. One formula for both
// quantizers, so their bits agree.
__device__ __forceinline__ float q8_scale(float amax) { return amax / 127.0f; }
__device__ __forceinline__ i8 q8_round(float v, float scale) {
    float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    return (i8)__float2int_rn(v * inv);
}

// out's 32-blocks to int8 as quantize_q8_f32_i8 does, `per` (4 or 1) consecutive values a
// thread, the block's threads consecutive lanes; every lane calls it
__device__ __forceinline__ void quantize_q8_part(const float* v, int per, bool on, u64 at,
                                                 i8* q, float* qd) {
    float amax = 0.0f;
    for (int j = 0; j < per; j++) amax = fmaxf(amax, on ? fabsf(v[j]) : 0.0f);
    for (int o = 32 / per / 2; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float scale = q8_scale(amax);
    if (!on) return;
    for (int j = 0; j < per; j++) q[at + j] = q8_round(v[j], scale);
    if (at % 32 == 0) qd[at / 32] = scale;
}

// element i of n of a norm weight (four of them when vec), as the norm scales by it: w or
// 1 + w; zeros past the end
__device__ __forceinline__ float4 norm_weight(const float* w, int i, int n, bool vec,
                                              int plus_one) {
    float4 g = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (i >= n) return g;
    if (vec) g = ((const float4*)w)[i];
    else g.x = w[i];
    if (plus_one) g.x += 1.0f, g.y += 1.0f, g.z += 1.0f, g.w += 1.0f;
    return g;
}

// block per row; x += delta when given (written back), then out = x * rsqrt(mean(x^2) + eps) *
// (w or 1 + w). out may be x. With q (width a multiple of 32), out is also quantized into
// q, qd, the decode matmul's 8-bit activations, sparing it a launch.
extern "C" __global__ void rms_norm_f32_f32(float* x, const float* delta, float* out,
                                            const float* w, int width, float eps, int plus_one,
                                            i8* q, float* qd) {
    __shared__ float partial[32];
    float* xr = x + (u64)blockIdx.x * width;
    float* outr = out + (u64)blockIdx.x * width;
    const float* dr = delta ? delta + (u64)blockIdx.x * width : nullptr;
    // rows of a multiple of 4 wide are 16-byte aligned: a float4 per thread and step, so a
    // 4096-wide row is one step of 1024 threads instead of 32 dependent loads per thread
    bool vec = width % 4 == 0 && ((u64)x | (u64)out | (u64)w | (u64)delta) % 16 == 0;
    int n = vec ? width / 4 : width;
    // the weight does not depend on the kernel before: its first pass loads before waiting
    float4 g0 = norm_weight(w, threadIdx.x, n, vec, plus_one);
    PDL_ENTER();
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        if (vec) {
            float4 v = ((float4*)xr)[i];
            if (dr) {
                float4 e = ((const float4*)dr)[i];
                v.x += e.x, v.y += e.y, v.z += e.z, v.w += e.w;
                ((float4*)xr)[i] = v;
            }
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        } else {
            float v = xr[i];
            if (dr) {
                v += dr[i];
                xr[i] = v;
            }
            ss += v * v;
        }
    }
    ss = warp_sum(ss);
    if (threadIdx.x % WARP == 0) partial[threadIdx.x / WARP] = ss;
    __syncthreads();
    if (threadIdx.x < WARP) {
        float t = threadIdx.x < blockDim.x / WARP ? partial[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0) partial[0] = t;
    }
    __syncthreads();
    float scale = rsqrtf(partial[0] / width + eps);
    u64 row0 = (u64)blockIdx.x * width;
    // every thread walks every pass, so the quantizer's shuffles see whole warps
    for (int base = 0; base < n; base += blockDim.x) {
        int i = base + threadIdx.x;
        bool on = i < n;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float4 g = base == 0 ? g0 : norm_weight(w, i, n, vec, plus_one);
        if (on && vec) {
            float4 xv = ((float4*)xr)[i];
            v[0] = xv.x * scale * g.x, v[1] = xv.y * scale * g.y;
            v[2] = xv.z * scale * g.z, v[3] = xv.w * scale * g.w;
            ((float4*)outr)[i] = make_float4(v[0], v[1], v[2], v[3]);
        } else if (on) {
            v[0] = xr[i] * scale * g.x;
            outr[i] = v[0];
        }
        if (q) quantize_q8_part(v, vec ? 4 : 1, on, row0 + (u64)i * (vec ? 4 : 1), q, qd);
    }
}

extern "C" __global__ void add_bias_f32(float* x, const float* b, int width, u64 n) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] += b[i % width];
}

extern "C" __global__ void add_f32(float* x, const float* y, u64 n) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] += y[i];
}

extern "C" __global__ void scale_f32(float* x, float s, u64 n) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] *= s;
}

extern "C" __global__ void softcap_f32(float* x, float cap, u64 n) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

extern "C" __global__ void glu_f32(float* gate, const float* up, u64 n, int act) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        gate[i] = glu_of(gate[i], up[i], act);
}

// the rotation of pair i of a head at position pos: the angle in double, as the CPU takes it
__device__ __forceinline__ void rope_angle(u32 pos, int i, int head_dim, float theta,
                                           float freq_scale, float* cs, float* sn) {
    double f = (double)freq_scale * pow((double)theta, -2.0 * i / head_dim);
    double s, c;
    sincos((double)pos * f, &s, &c);
    *cs = (float)c;
    *sn = (float)s;
}

// pair i of head h (head_dim) rotated in place; its two elements' offsets in a, b
__device__ __forceinline__ void rope_pair(float* h, int i, int head_dim, int neox, float cs,
                                          float sn, int* a, int* b) {
    int half_dim = head_dim / 2;
    *a = neox ? i : 2 * i;
    *b = neox ? i + half_dim : 2 * i + 1;
    float x0 = h[*a], x1 = h[*b];
    h[*a] = x0 * cs - x1 * sn;
    h[*b] = x0 * sn + x1 * cs;
}

// x (rows, n_head, head_dim) rotated in place; thread per (row, head, pair); angles in f64 as
// the CPU's tables are. neox: element i pairs with i + head_dim/2, else 2i with 2i + 1.
extern "C" __global__ void rope_f32(float* x, const u32* positions, int rows, int n_head,
                                    int head_dim, float theta, float freq_scale, int neox) {
    PDL_ENTER();
    int half_dim = head_dim / 2;
    u64 total = (u64)rows * n_head * half_dim;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < total; t += (u64)gridDim.x * blockDim.x) {
        int i = t % half_dim, a, b;
        u64 rh = t / half_dim;
        float cs, sn;
        rope_angle(positions[rh / n_head], i, head_dim, theta, freq_scale, &cs, &sn);
        rope_pair(x + rh * head_dim, i, head_dim, neox, cs, sn, &a, &b);
    }
}

// rope_f32 on q (rows, n_head, head_dim) and k (rows, n_head_kv, head_dim), and k with v
// stored as f16 at row positions[r] of the K and V planes: the three ops in one launch, a
// thread per rotated pair (q's heads, then k's)
extern "C" __global__ void rope_kv_f32_f16(float* q, float* k, const float* v, u16* k_plane,
                                           u16* v_plane, const u32* positions, int rows,
                                           int n_head, int n_head_kv, int head_dim, float theta,
                                           float freq_scale, int neox) {
    int half_dim = head_dim / 2, heads = n_head + n_head_kv, kv_width = n_head_kv * head_dim;
    u64 total = (u64)rows * heads * half_dim, t0 = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    // the first pass's angle before waiting: positions are uploaded before a forward's first
    // kernel and no kernel writes them
    float cs0 = 1.0f, sn0 = 0.0f;
    if (t0 < total)
        rope_angle(positions[t0 / half_dim / heads], t0 % half_dim, head_dim, theta, freq_scale,
                   &cs0, &sn0);
    PDL_ENTER();
    for (u64 t = t0; t < total; t += (u64)gridDim.x * blockDim.x) {
        int i = t % half_dim, a, b;
        u64 rh = t / half_dim;
        int r = rh / heads, hh = rh % heads;
        float cs = cs0, sn = sn0;
        if (t != t0) rope_angle(positions[r], i, head_dim, theta, freq_scale, &cs, &sn);
        if (hh < n_head) {
            rope_pair(q + ((u64)r * n_head + hh) * head_dim, i, head_dim, neox, cs, sn, &a, &b);
            continue;
        }
        u64 row = (u64)r * kv_width + (hh - n_head) * head_dim;
        rope_pair(k + row, i, head_dim, neox, cs, sn, &a, &b);
        u64 at = (u64)positions[r] * kv_width + (row - (u64)r * kv_width);
        k_plane[at + a] = f32_to_f16(k[row + a]);
        k_plane[at + b] = f32_to_f16(k[row + b]);
        v_plane[at + a] = f32_to_f16(v[row + a]);
        v_plane[at + b] = f32_to_f16(v[row + b]);
    }
}

// k, v (rows, kv_width) stored as f16 at rows positions[r] of one layer's K and V planes
// (capacity, kv_width) each
extern "C" __global__ void write_kv_f32_f16(u16* k_plane, u16* v_plane, const float* k,
                                            const float* v, const u32* positions, int rows,
                                            int kv_width) {
    PDL_ENTER();
    u64 total = (u64)rows * kv_width;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < total; t += (u64)gridDim.x * blockDim.x) {
        int r = t / kv_width, j = t % kv_width;
        u64 at = (u64)positions[r] * kv_width + j;
        k_plane[at] = f32_to_f16(k[t]);
        v_plane[at] = f32_to_f16(v[t]);
    }
}

// dst (n, width) = the rows `which` of src
extern "C" __global__ void gather_rows_f32(const float* src, float* dst, const u32* which, int n,
                                           int width) {
    PDL_ENTER();
    u64 total = (u64)n * width;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < total; t += (u64)gridDim.x * blockDim.x) {
        u64 i = t / width, j = t % width;
        dst[t] = src[(u64)which[i] * width + j];
    }
}

// block per row: the index of the largest value, the lowest of equals, NaN never chosen; 0 when
// the row holds only NaN (the CPU's `argmax`)
extern "C" __global__ void argmax_f32(const float* x, u32* out, int width) {
    PDL_ENTER();
    __shared__ float best_v[32];
    __shared__ u32 best_i[32];
    const float* xr = x + (u64)blockIdx.x * width;
    const u32 none = 0xffffffffu;
    float bv = 0.0f;
    u32 bi = none;
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        float v = xr[i];
        if (!isnan(v) && (bi == none || v > bv)) {
            bv = v;
            bi = i;
        }
    }
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        u32 oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != none && (bi == none || ov > bv || (ov == bv && oi < bi))) {
            bv = ov;
            bi = oi;
        }
    }
    if (threadIdx.x % WARP == 0) {
        best_v[threadIdx.x / WARP] = bv;
        best_i[threadIdx.x / WARP] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < blockDim.x / WARP; w++) {
            u32 oi = best_i[w];
            float ov = best_v[w];
            if (oi != none && (bi == none || ov > bv || (ov == bv && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        out[blockIdx.x] = bi == none ? 0 : bi;
    }
}

// x (n_blocks x 32) -> int8 q and one f32 scale d per 32-block (x ~ d * q, q in -127..127,
// rounded to nearest even); a warp per block, a lane per element.
extern "C" __global__ void quantize_q8_f32_i8(const float* x, i8* q, float* d, u64 n_blocks) {
    PDL_ENTER();
    int lane = threadIdx.x % WARP;
    u64 stride = (u64)gridDim.x * blockDim.x / WARP;
    for (u64 block = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / WARP; block < n_blocks;
         block += stride) {
        float v = x[block * WARP + lane];
        float scale = q8_scale(warp_max(fabsf(v)));
        q[block * WARP + lane] = q8_round(v, scale);
        if (lane == 0) d[block] = scale;
    }
}

// f32 -> f16, round to nearest even, saturating at f16's largest finite value (the prefill
// GEMM's activation operand: an outlier clips instead of turning the product into inf)
extern "C" __global__ void convert_f32_f16(const float* x, u16* out, u64 n) {
    PDL_ENTER();
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = f32_to_f16(fminf(fmaxf(x[i], -65504.0f), 65504.0f));
}
