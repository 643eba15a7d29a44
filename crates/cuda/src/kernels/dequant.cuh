// dq_sub<TY>(row, s, v): the 32 values of sub-block s (elements 32s..32s+31) of a weight row
// stored in ggml type TY (its GgmlType number), in f32. Formulas are ggml's (see
// ishizuki-core's quant blocks).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30

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

template <int TY>
__device__ __forceinline__ void dq_sub(const u8* row, int s, float* v) {
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
        const u8* b = row + 34 * s;
        float d = ld_f16(b);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (float)(i8)b[2 + j] * d;
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
    } else if constexpr (TY == T_Q6_K) {
        // block: ql[128], qh[64], scales[16] (i8), d; halves of 128, quarters of 32
        const u8* b = row + 210 * (s / 8);
        int t = s % 8, n = t / 4, qq = t % 4;
        const u8* ql = b + 64 * n + (qq & 1) * 32;
        const u8* qh = b + 128 + 32 * n;
        const i8* sc = (const i8*)(b + 192) + 8 * n + 2 * qq;
        float d = ld_f16(b + 208);
        int lshift = 4 * (qq / 2), hshift = 2 * qq;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int x = ((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4);
            v[l] = d * sc[l / 16] * (x - 32);
        }
    }
}
