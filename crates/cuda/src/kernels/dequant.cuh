// dq_sub<TY>(row, s, n_sub, v): the 32 values of sub-block s (elements 32s..32s+31) of a
// weight row of n_sub sub-blocks stored in ggml type TY (its GgmlType number), in f32.
// Formulas are ggml's (see ishizuki-core's quant blocks). Q6_K and Q8_0 rows are planar here
// (the planes below, repacked at load).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_Q8_K 15
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_BF16 30

// kvalues_iq4nl (ggml-common.h): the levels IQ4_NL and IQ4_XS nibbles index
__constant__ signed char IQ4NL_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

// the 32 values of one IQ4_NL group of scale d: element j in the low nibble of qs[j], j + 16 in
// the high one
__device__ __forceinline__ void iq4_group(const u8* qs, float d, float* v) {
#pragma unroll
    for (int j = 0; j < 16; j++) {
        v[j] = d * IQ4NL_LEVELS[qs[j] & 0xF];
        v[j + 16] = d * IQ4NL_LEVELS[qs[j] >> 4];
    }
}

// Q4_K / Q5_K 6-bit scale and min of sub-block j (0..8) from the 12 packed bytes
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, float* sc, float* m) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Planar rows (`repack_planar_body`), so lanes load 16 aligned bytes: a Q6_K row of nb blocks
// is every block's ql (128 B), then every qh (64 B), scales (16 B) and d (2 B); a Q8_0 row
// every block's qs (32 B), then every d. Device rows are padded to 16 bytes.
__device__ __forceinline__ const u8* q6k_ql(const u8* row, int b) { return row + 128 * b; }
__device__ __forceinline__ const u8* q6k_qh(const u8* row, int nb, int b) {
    return row + 128 * nb + 64 * b;
}
__device__ __forceinline__ const u8* q6k_sc(const u8* row, int nb, int b) {
    return row + 192 * nb + 16 * b;
}
__device__ __forceinline__ const u8* q6k_d(const u8* row, int nb, int b) {
    return row + 208 * nb + 2 * b;
}
__device__ __forceinline__ const u8* q80_qs(const u8* row, int b) { return row + 32 * b; }
__device__ __forceinline__ const u8* q80_d(const u8* row, int nb, int b) {
    return row + 32 * nb + 2 * b;
}

// block b of row r
template <int TY>
__device__ __forceinline__ void repack_block(const u8* src, u8* dst, int r, int nb, int b,
                                             u64 src_row, u64 dst_row) {
    u8* row = dst + (u64)r * dst_row;
    if constexpr (TY == T_Q6_K) {
        const u8* s = src + (u64)r * src_row + 210 * (u64)b;
        u8 *ql = row + 128 * b, *qh = (u8*)q6k_qh(row, nb, b), *sc = (u8*)q6k_sc(row, nb, b);
        u8* d = (u8*)q6k_d(row, nb, b);
        for (int j = 0; j < 128; j++) ql[j] = s[j];
        for (int j = 0; j < 64; j++) qh[j] = s[128 + j];
        for (int j = 0; j < 16; j++) sc[j] = s[192 + j];
        d[0] = s[208], d[1] = s[209];
    } else if constexpr (TY == T_Q8_0) {
        const u8* s = src + (u64)r * src_row + 34 * (u64)b;
        u8 *qs = row + 32 * b, *d = (u8*)q80_d(row, nb, b);
        d[0] = s[0], d[1] = s[1];
        for (int j = 0; j < 32; j++) qs[j] = s[2 + j];
    }
}

// ggml's rows (src, src_row bytes apart) of a planar type into planes (dst, dst_row apart), a
// thread per block
template <int TY>
__device__ void repack_planar_body(const u8* __restrict__ src, u8* __restrict__ dst, int n_rows,
                                   int nb, u64 src_row, u64 dst_row) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (u64)n_rows * nb;
         i += (u64)gridDim.x * blockDim.x)
        repack_block<TY>(src, dst, (int)(i / nb), nb, (int)(i % nb), src_row, dst_row);
}

template <int TY>
__device__ __forceinline__ void dq_sub(const u8* row, int s, int n_sub, float* v) {
    if constexpr (TY == T_F32) {
        const float* p = (const float*)row + 32 * s;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = p[i];
    } else if constexpr (TY == T_F16) {
        const u16* p = (const u16*)row + 32 * s;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = f16_to_f32(p[i]);
    } else if constexpr (TY == T_BF16) {
        const u16* p = (const u16*)row + 32 * s;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = bf16_to_f32(p[i]);
    } else if constexpr (TY == T_Q4_0) {
        const u8* b = row + 18 * s;
        float d = ld_f16(b);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = ((int)(b[2 + j] & 0xF) - 8) * d;
            v[j + 16] = ((int)(b[2 + j] >> 4) - 8) * d;
        }
    } else if constexpr (TY == T_Q4_1) {
        const u8* b = row + 20 * s;
        float d = ld_f16(b), m = ld_f16(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = (b[4 + j] & 0xF) * d + m;
            v[j + 16] = (b[4 + j] >> 4) * d + m;
        }
    } else if constexpr (TY == T_Q5_0) {
        const u8* b = row + 22 * s;
        float d = ld_f16(b);
        u32 qh = ld_u32(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int lo = (b[6 + j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            v[j] = (lo - 16) * d;
            v[j + 16] = (hi - 16) * d;
        }
    } else if constexpr (TY == T_Q5_1) {
        const u8* b = row + 24 * s;
        float d = ld_f16(b), m = ld_f16(b + 2);
        u32 qh = ld_u32(b + 4);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int lo = (b[8 + j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            v[j] = lo * d + m;
            v[j + 16] = hi * d + m;
        }
    } else if constexpr (TY == T_Q8_0) {
        const i8* q = (const i8*)q80_qs(row, s);
        float d = f16_to_f32(*(const u16*)q80_d(row, n_sub, s));
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (float)q[j] * d;
    } else if constexpr (TY == T_Q4_K) {
        // block: d, dmin (f16), scales[12], qs[128]; sub-block t uses nibbles (t&1) of qs[32(t/2)..]
        const u8* b = row + 144 * (s / 8);
        int t = s % 8;
        float sc, mn;
        scale_min_k4(t, b + 4, &sc, &mn);
        float d = ld_f16(b) * sc, m = ld_f16(b + 2) * mn;
        const u8* q = b + 16 + 32 * (t / 2);
        int shift = 4 * (t & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = d * ((q[l] >> shift) & 0xF) - m;
    } else if constexpr (TY == T_Q5_K) {
        // block: d, dmin, scales[12], qh[32], qs[128]; bit t of qh[l] is the fifth bit
        const u8* b = row + 176 * (s / 8);
        int t = s % 8;
        float sc, mn;
        scale_min_k4(t, b + 4, &sc, &mn);
        float d = ld_f16(b) * sc, m = ld_f16(b + 2) * mn;
        const u8* qh = b + 16;
        const u8* q = b + 48 + 32 * (t / 2);
        int shift = 4 * (t & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int x = ((q[l] >> shift) & 0xF) | (((qh[l] >> t) & 1) << 4);
            v[l] = d * x - m;
        }
    } else if constexpr (TY == T_Q2_K || TY == T_Q3_K) {
        // 16-element groups i = 2t + h of the block: quants bits 2j of qs[32n + 16h + l] with
        // n = t / 4, j = t % 4 (Q3_K: high bit 4n + j of hmask[16h + l], else minus 4)
        const int B = TY == T_Q2_K ? 84 : 110, QS = TY == T_Q2_K ? 16 : 32;
        const u8* b = row + B * (s / 8);
        int t = s % 8, n = t / 4, j = t % 4;
        float d = ld_f16(b + (TY == T_Q2_K ? 80 : 108));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int i = 2 * t + h;
            const u8* q = b + QS + 32 * n + 16 * h;
            if constexpr (TY == T_Q2_K) {
                u8 sc = b[i];
                float dl = d * (sc & 0xF), ml = ld_f16(b + 82) * (sc >> 4);
#pragma unroll
                for (int l = 0; l < 16; l++) v[16 * h + l] = dl * ((q[l] >> (2 * j)) & 3) - ml;
            } else {
                const u8* sc = b + 96;
                int low = i < 8 ? sc[i] & 0xF : sc[i - 8] >> 4;
                int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
                float dl = d * ((low | (high << 4)) - 32);
                const u8* hm = b + 16 * h;
                int bit = 1 << (4 * n + j);
#pragma unroll
                for (int l = 0; l < 16; l++) {
                    int x = ((q[l] >> (2 * j)) & 3) - ((hm[l] & bit) ? 0 : 4);
                    v[16 * h + l] = dl * x;
                }
            }
        }
    } else if constexpr (TY == T_Q8_K) {
        // block: d (f32), qs[256], bsums
        const u8* b = row + 292 * (s / 8);
        float d = __uint_as_float(ld_u32(b));
        const i8* q = (const i8*)(b + 4) + 32 * (s % 8);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = d * q[l];
    } else if constexpr (TY == T_IQ4_NL) {
        const u8* b = row + 18 * s;
        iq4_group(b + 2, ld_f16(b), v);
    } else if constexpr (TY == T_IQ4_XS) {
        // block: d, scales_h (u16), scales_l[4], qs[128]; sub-block ib's 6-bit scale minus 32
        const u8* b = row + 136 * (s / 8);
        int ib = s % 8;
        int low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
        int high = (ld_u16(b + 2) >> (2 * ib)) & 3;
        iq4_group(b + 8 + 16 * ib, ld_f16(b) * ((low | (high << 4)) - 32), v);
    } else if constexpr (TY == T_Q6_K) {
        // halves of 128, quarters of 32, on the planes
        int nb = n_sub / 8, b = s / 8, t = s % 8, n = t / 4, qq = t % 4;
        const u8* ql = q6k_ql(row, b) + 64 * n + (qq & 1) * 32;
        const u8* qh = q6k_qh(row, nb, b) + 32 * n;
        const i8* sc = (const i8*)q6k_sc(row, nb, b) + 8 * n + 2 * qq;
        float d = f16_to_f32(*(const u16*)q6k_d(row, nb, b));
        int lshift = 4 * (qq / 2), hshift = 2 * qq;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int x = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4);
            v[l] = d * sc[l / 16] * (x - 32);
        }
    }
}
