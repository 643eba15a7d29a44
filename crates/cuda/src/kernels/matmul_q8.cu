// The few-row matmul on 8-bit activations (what llama.cpp's mmvq does): x is first quantized
// per 32-element block to int8 with one f32 scale (`quantize_q8_f32_i8` in ops.cu), then a warp
// (or a few) owns one output row and walks its weight row once for up to R (1, 2, 4 or 8, a
// template so the row loops unroll) activation rows, consecutive lanes reading consecutive
// words of each block and multiplying four int8 pairs per instruction (dp4a). A lane first
// loads Q8_AHEAD steps of weights, then uses them, so several loads are in flight per lane. A
// row's sum is formed by the same operations (rounding intrinsics, never contracted
// differently) whatever R and the other rows are.
#define Q8_WARPS 4
// weight steps a lane loads before using the first: matmul_q8 (whose `parts` warps share an
// output row, the fewest whose shares fit one such round), and per weight of the glu pair
#define Q8_AHEAD 4
#ifndef Q8_AHEAD_GLU
#define Q8_AHEAD_GLU 2
#endif
// 1: a row that takes more than one round of loads is asked of L2 whole first, so the later
// rounds wait on L2, not DRAM (bench/cuda-run.sh's TUNES measures 0 against it)
#ifndef Q8_PREFETCH
#define Q8_PREFETCH 1
#endif

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// byte k (0..3) of w
__device__ __forceinline__ u32 byte_of(u32 w, int k) { return (w >> (8 * k)) & 0xFF; }

// acc += dx * t, one rounding, the same instruction in every instantiation
__device__ __forceinline__ float acc_fma(float acc, float dx, float t) {
    return __fmaf_rn(dx, t, acc);
}

// Two 16-element groups of a lane: int8 weights lo against x[0..16), hi against
// x[gap..gap + 16) (four words each), and the plain sums of those x, for the offsets.
struct Dot16x2 {
    int lo, hi, sum_lo, sum_hi;
};
__device__ __forceinline__ Dot16x2 dot16x2(const int* lo, const int* hi, const i8* x, int gap) {
    int4 x0 = *(const int4*)x, x1 = *(const int4*)(x + gap);
    int xa[4] = {x0.x, x0.y, x0.z, x0.w}, xb[4] = {x1.x, x1.y, x1.z, x1.w};
    const int ones = 0x01010101;
    Dot16x2 t = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        t.lo = dp4a(lo[k], xa[k], t.lo);
        t.hi = dp4a(hi[k], xb[k], t.hi);
        t.sum_lo = dp4a(ones, xa[k], t.sum_lo);
        t.sum_hi = dp4a(ones, xb[k], t.sum_hi);
    }
    return t;
}

// A lane's weights of one step, as loaded (ok: the lane has a unit in this step), and the
// step's geometry: `per_step` units (blocks) a warp step of `elems` elements each.
template <int TY> struct Q8Frag;

// Q4_K super-blocks (144 B, 16-byte aligned: rows are whole blocks), four a warp step: lanes
// 8k .. 8k + 7 take block k, lane chunk c = lane % 8 its qs bytes 16c .. 16c + 15 (one 16-byte
// load): elements 16 (c % 2) .. +15 of sub-blocks 2p (low nibbles) and 2p + 1 (high), p = c / 2.
// The block's 16-byte header (d, dmin, 6-bit scales and mins) is one load too.
template <> struct Q8Frag<T_Q4_K> {
    static const int per_step = 4, elems = 256, bytes = 144;
    uint4 h, q;
    bool ok;
    __device__ __forceinline__ void load(const u8* wr, int step, int lane, int n_units) {
        int u = per_step * step + lane / 8;
        ok = u < n_units;
        if (ok) {
            const u8* b = wr + (u64)u * bytes;
            h = *(const uint4*)b;
            q = *(const uint4*)(b + 16 + 16 * (lane % 8));
        }
    }
    template <int R>
    __device__ __forceinline__ void dot(int step, int lane, const i8* xq, const float* xd,
                                        int n_rows, int n_in, float* acc) const {
        if (!ok) return;
        int u = per_step * step + lane / 8;
        int c = lane % 8, p = c / 2, e0 = 16 * (c % 2);
        float d = f16_to_f32((u16)(h.x & 0xFFFF)), dmin = f16_to_f32((u16)(h.x >> 16));
        // scale and min of sub-block j = 2p + t: bytes j, j + 4 (j < 4), else j + 4 with the
        // top bits of j - 4 and j
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
        float ds0 = __fmul_rn(d, s[0]), dm0 = __fmul_rn(dmin, m[0]);
        float ds1 = __fmul_rn(d, s[1]), dm1 = __fmul_rn(dmin, m[1]);
        int qw[4] = {(int)q.x, (int)q.y, (int)q.z, (int)q.w};
        int v_lo[4], v_hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v_lo[k] = qw[k] & 0x0F0F0F0F;
            v_hi[k] = (qw[k] >> 4) & 0x0F0F0F0F;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            const i8* xr = xq + (u64)r * n_in + elems * u + 64 * p + e0;
            const float* dr = xd + (u64)r * (n_in / 32) + 8 * u + 2 * p;
            Dot16x2 t = dot16x2(v_lo, v_hi, xr, 32);
            float t0 = __fmaf_rn(ds0, (float)t.lo, -__fmul_rn(dm0, (float)t.sum_lo));
            float t1 = __fmaf_rn(ds1, (float)t.hi, -__fmul_rn(dm1, (float)t.sum_hi));
            acc[r] = acc_fma(acc_fma(acc[r], dr[0], t0), dr[1], t1);
        }
    }
};

// Q6_K on the planes (dequant.cuh), four blocks a warp step: lanes 8k .. 8k + 7 take block k,
// lane chunk c8 = lane % 8 its ql bytes 16 c8 .. +15 (half n = c8 / 4, c = c8 % 4) and the 16
// qh bytes they share with chunk c8 ^ 2: the low nibbles are elements e .. e + 15 of the
// block, e = 128n + 32 (c / 2) + 16 (c % 2), the high ones e + 64 .. e + 79; the 2-bit highs
// sit at bits 2 (c / 2) and 2 (c / 2) + 4 of qh.
template <> struct Q8Frag<T_Q6_K> {
    static const int per_step = 4, elems = 256;
    uint4 ql, qh;
    uint2 sc;
    u16 d;
    bool ok;
    __device__ __forceinline__ void load(const u8* wr, int step, int lane, int nb) {
        int u = per_step * step + lane / 8, c8 = lane % 8, n = c8 / 4, c = c8 % 4;
        ok = u < nb;
        if (ok) {
            ql = *(const uint4*)(q6k_ql(wr, u) + 16 * c8);
            qh = *(const uint4*)(q6k_qh(wr, nb, u) + 32 * n + 16 * (c % 2));
            sc = *(const uint2*)(q6k_sc(wr, nb, u) + 8 * n);
            d = *(const u16*)q6k_d(wr, nb, u);
        }
    }
    template <int R>
    __device__ __forceinline__ void dot(int step, int lane, const i8* xq, const float* xd,
                                        int n_rows, int n_in, float* acc) const {
        if (!ok) return;
        int u = per_step * step + lane / 8, c8 = lane % 8, n = c8 / 4, c = c8 % 4;
        int e = 128 * n + 32 * (c / 2) + 16 * (c % 2), shift = 2 * (c / 2);
        // scales of the 16-element groups e / 16 and e / 16 + 4: bytes c of sc.x and sc.y
        float df = f16_to_f32(d);
        float s_lo = __fmul_rn(df, (float)(i8)byte_of(sc.x, c));
        float s_hi = __fmul_rn(df, (float)(i8)byte_of(sc.y, c));
        int lw[4] = {(int)ql.x, (int)ql.y, (int)ql.z, (int)ql.w};
        int hw[4] = {(int)qh.x, (int)qh.y, (int)qh.z, (int)qh.w};
        int v_lo[4], v_hi[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v_lo[k] = (lw[k] & 0x0F0F0F0F) | (((hw[k] >> shift) & 0x03030303) << 4);
            v_hi[k] = ((lw[k] >> 4) & 0x0F0F0F0F) | (((hw[k] >> (shift + 4)) & 0x03030303) << 4);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            const i8* xr = xq + (u64)r * n_in + elems * u + e;
            const float* dr = xd + (u64)r * (n_in / 32) + 8 * u + e / 32;
            Dot16x2 t = dot16x2(v_lo, v_hi, xr, 64);
            float t0 = __fmul_rn(s_lo, (float)(t.lo - 32 * t.sum_lo));
            float t1 = __fmul_rn(s_hi, (float)(t.hi - 32 * t.sum_hi));
            acc[r] = acc_fma(acc_fma(acc[r], dr[0], t0), dr[2], t1);
        }
    }
};

// Q8_0 on the planes, sixteen blocks a warp step: lanes 2k, 2k + 1 take block k, 16 qs bytes
// each.
template <> struct Q8Frag<T_Q8_0> {
    static const int per_step = 16, elems = 32;
    uint4 q;
    u16 d;
    bool ok;
    __device__ __forceinline__ void load(const u8* wr, int step, int lane, int nb) {
        int u = per_step * step + lane / 2;
        ok = u < nb;
        if (ok) {
            q = *(const uint4*)(q80_qs(wr, u) + 16 * (lane % 2));
            d = *(const u16*)q80_d(wr, nb, u);
        }
    }
    template <int R>
    __device__ __forceinline__ void dot(int step, int lane, const i8* xq, const float* xd,
                                        int n_rows, int n_in, float* acc) const {
        if (!ok) return;
        int u = per_step * step + lane / 2;
        float df = f16_to_f32(d);
        int qw[4] = {(int)q.x, (int)q.y, (int)q.z, (int)q.w};
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r >= n_rows) break;
            int4 x = *(const int4*)(xq + (u64)r * n_in + 32 * u + 16 * (lane % 2));
            float dx = xd[(u64)r * (n_in / 32) + u];
            int dot = dp4a(qw[3], x.w, dp4a(qw[2], x.z, dp4a(qw[1], x.y, dp4a(qw[0], x.x, 0))));
            acc[r] = acc_fma(acc[r], __fmul_rn(df, dx), (float)dot);
        }
    }
};

// a row's units (blocks) and warp steps
template <int TY> __device__ __forceinline__ int q8_units(int n_in) {
    return n_in / Q8Frag<TY>::elems;
}
template <int TY> __device__ __forceinline__ int q8_steps(int n_in) {
    const int per = Q8Frag<TY>::per_step;
    return (q8_units<TY>(n_in) + per - 1) / per;
}

// N steps of a lane's weight row wr from step s0, `stride` apart. The weights do not depend
// on the kernel before, so a block loads its first round before PDL_ENTER: those loads
// overlap that kernel's tail instead of following it.
template <int TY, int N>
__device__ __forceinline__ void q8_load(Q8Frag<TY>* f, const u8* wr, int s0, int stride,
                                        int lane, int n_units) {
#pragma unroll
    for (int i = 0; i < N; i++) f[i].load(wr, s0 + i * stride, lane, n_units);
}

// Part `part` of `parts` of a weight row asked of L2 (rows of the 8-bit types are whole
// 16-byte units: Q4_K's 144-byte blocks, the planes' padding; others are left alone)
__device__ __forceinline__ void q8_prefetch_row(const u8* wr, u64 row_bytes, int part,
                                                int parts) {
    if (row_bytes % 16 != 0) return;
    u64 chunk = (row_bytes / parts + 15) / 16 * 16, at = (u64)part * chunk;
    if (at < row_bytes) prefetch_l2(wr + at, (u32)min(chunk, row_bytes - at));
}

// One lane's part of weight row wr (n_in elements) against activation rows xr, dr (n_rows of
// them), into acc: steps part, part + parts, ... of the row, Q8_AHEAD loaded at a time, the
// first round already in f.
template <int TY, int R>
__device__ __forceinline__ void row_q8(Q8Frag<TY>* f, const u8* __restrict__ wr,
                                       const i8* __restrict__ xr, const float* __restrict__ dr,
                                       int n_rows, int n_in, int lane, float* acc, int part,
                                       int parts) {
    int n_units = q8_units<TY>(n_in), n_steps = q8_steps<TY>(n_in);
    for (int s0 = part; s0 < n_steps; s0 += parts * Q8_AHEAD) {
        if (s0 != part) q8_load<TY, Q8_AHEAD>(f, wr, s0, parts, lane, n_units);
#pragma unroll
        for (int i = 0; i < Q8_AHEAD; i++)
            f[i].template dot<R>(s0 + i * parts, lane, xr, dr, n_rows, n_in, acc);
    }
}

// Up to three weights of this type and width, one launch (q, k and v): blockIdx.x runs over
// the blocks of w0's rows, then w1's, then w2's. `parts` (1, 2 or 4) warps per output row,
// their sums added in shared memory in one order.
template <int TY, int R>
__device__ void matmul_q8_body(const u8* w0, const u8* w1, const u8* w2, float* out0,
                               float* out1, float* out2, int n0, int n1, int n2,
                               const i8* __restrict__ xq, const float* __restrict__ xd,
                               int n_in, int rows, u64 row_bytes, int parts) {
    int per_block = Q8_WARPS / parts;
    __shared__ float sums[Q8_WARPS][R];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, part = warp % parts;
    int b = blockIdx.x, b0 = (n0 + per_block - 1) / per_block, b1 = (n1 + per_block - 1) / per_block;
    const u8* w = w0;
    float* out = out0;
    int n_out = n0;
    if (b >= b0 + b1) {
        w = w2, out = out2, n_out = n2, b -= b0 + b1;
    } else if (b >= b0) {
        w = w1, out = out1, n_out = n1, b -= b0;
    }
    int o = b * per_block + warp / parts;
    const u8* wr = w + (u64)o * row_bytes;
    Q8Frag<TY> f[Q8_AHEAD];
    if (o < n_out) q8_load<TY, Q8_AHEAD>(f, wr, part, parts, lane, q8_units<TY>(n_in));
    bool rounds = q8_steps<TY>(n_in) > parts * Q8_AHEAD;
    if (Q8_PREFETCH && rounds && lane == 0 && blockIdx.y == 0 && o < n_out)
        q8_prefetch_row(wr, row_bytes, part, parts);
    PDL_ENTER();
    int r0 = blockIdx.y * R;
    int n_rows = min(R, rows - r0);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    // no early return: every warp reaches the barrier
    if (o < n_out)
        row_q8<TY, R>(f, wr, xq + (u64)r0 * n_in, xd + (u64)r0 * (n_in / 32), n_rows, n_in,
                      lane, acc, part, parts);
#pragma unroll
    for (int r = 0; r < R; r++) {
        float total = warp_sum(acc[r]);
        if (lane == 0) sums[warp][r] = total;
    }
    __syncthreads();
    if (o < n_out && part == 0 && lane < n_rows) {
        float total = 0.0f;
        for (int p = 0; p < parts; p++) total += sums[warp + p][lane];
        out[(u64)(r0 + lane) * n_out + o] = total;
    }
}

// The FFN's gated product: out = act(x . wg^T) * (x . wu^T), a warp per output row walking
// the gate row and the up row together (both rows' loads in flight at once).
template <int TY, int R>
__device__ void matmul_glu_q8_body(const u8* __restrict__ wg, const u8* __restrict__ wu,
                                   const i8* __restrict__ xq, const float* __restrict__ xd,
                                   float* __restrict__ out, int n_out, int n_in, int rows,
                                   u64 row_bytes, int act) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int o = blockIdx.x * Q8_WARPS + warp;
    int n_units = q8_units<TY>(n_in), n_steps = q8_steps<TY>(n_in);
    const u8* gr = wg + (u64)o * row_bytes;
    const u8* ur = wu + (u64)o * row_bytes;
    Q8Frag<TY> fg[Q8_AHEAD_GLU], fu[Q8_AHEAD_GLU];
    if (o < n_out) {
        q8_load<TY, Q8_AHEAD_GLU>(fg, gr, 0, 1, lane, n_units);
        q8_load<TY, Q8_AHEAD_GLU>(fu, ur, 0, 1, lane, n_units);
    }
    // lane 0 the gate row, lane 1 the up row
    if (Q8_PREFETCH && n_steps > Q8_AHEAD_GLU && lane < 2 && blockIdx.y == 0 && o < n_out)
        q8_prefetch_row(lane == 0 ? gr : ur, row_bytes, 0, 1);
    PDL_ENTER();
    if (o >= n_out) return;
    int r0 = blockIdx.y * R;
    int n_rows = min(R, rows - r0);
    const i8* xr = xq + (u64)r0 * n_in;
    const float* dr = xd + (u64)r0 * (n_in / 32);
    float g[R], u[R];
#pragma unroll
    for (int r = 0; r < R; r++) g[r] = u[r] = 0.0f;
    for (int s0 = 0; s0 < n_steps; s0 += Q8_AHEAD_GLU) {
        if (s0 != 0) {
            q8_load<TY, Q8_AHEAD_GLU>(fg, gr, s0, 1, lane, n_units);
            q8_load<TY, Q8_AHEAD_GLU>(fu, ur, s0, 1, lane, n_units);
        }
#pragma unroll
        for (int i = 0; i < Q8_AHEAD_GLU; i++) {
            fg[i].template dot<R>(s0 + i, lane, xr, dr, n_rows, n_in, g);
            fu[i].template dot<R>(s0 + i, lane, xr, dr, n_rows, n_in, u);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float gt = warp_sum(g[r]), ut = warp_sum(u[r]);
        if (lane == 0 && r < n_rows) out[(u64)(r0 + r) * n_out + o] = glu_of(gt, ut, act);
    }
}
