//! x86 helpers shared by the k-quant kernels.
use std::arch::x86_64::*;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `pshufb` control that broadcasts 16-bit lane `k` (0..8) across each 128-bit half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast16(k: i32) -> __m256i {
    _mm256_set1_epi16((((2 * k + 1) << 8) | (2 * k)) as i16)
}

/// 16 i32 lanes from 16 bytes, lane l = `bytes[idx[l]]` zero-extended: `idx` picks which scale
/// each group of dpbusd lanes is multiplied by.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn lanes_u8(all: __m512i, idx: __m512i) -> __m512i {
    _mm512_permutexvar_epi32(idx, all)
}

/// Index vector for `lanes_u8`: lanes 0..8 take `a`, lanes 8..16 take `b`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn idx_halves(a: i32, b: i32) -> __m512i {
    _mm512_inserti64x4(_mm512_set1_epi32(a), _mm256_set1_epi32(b), 1)
}

/// Index vector for `lanes_u8`: four groups of four lanes take `k`, `k+1`, `k+2`, `k+3`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn idx_quarters(k: i32) -> __m512i {
    _mm512_add_epi32(
        _mm512_set1_epi32(k),
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
    )
}

/// `[lo, hi]` as one 512-bit vector.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// Two consecutive little-endian f16 values (e.g. `d`, `dmin`) as lanes 0 and 1, via F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_pair(bytes: &[u8; 2], next: &[u8; 2]) -> __m128 {
    let bits = u32::from_le_bytes([bytes[0], bytes[1], next[0], next[1]]);
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))
}

/// One little-endian f16 value, via F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_one(bytes: &[u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
        u16::from_le_bytes(*bytes) as i32
    )))
}

/// SIMD form of `k4_scales_mins`: the 12 packed bytes of Q4_K / Q5_K to 8 scales then 8 mins.
/// Scales/mins 0..4 are bytes 0..4 / 4..8 masked to 6 bits; 4..8 take 4 bits from bytes
/// 8..12 (low nibble for scales, high for mins) and their top 2 bits from bits 6-7 of bytes
/// 0..4 / 4..8. Reads 16 bytes at `packed`; the last 4 are ignored (callers point inside a
/// block whose scales are followed by quants).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn k4_scales_mins(packed: *const u8) -> __m128i {
    let s = _mm_loadu_si128(packed.cast());
    let low = _mm_shuffle_epi8(
        s,
        _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
    );
    let high = _mm_shuffle_epi8(
        s,
        _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7),
    );
    // mins 4..8 use the high nibble of bytes 8..12
    let low = _mm_blend_epi32(low, _mm_srli_epi16(low, 4), 0b1000);
    let low = _mm_and_si128(
        low,
        _mm_setr_epi8(
            63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15,
        ),
    );
    let high = _mm_and_si128(_mm_srli_epi16(high, 2), _mm_set1_epi8(0x30));
    _mm_or_si128(low, high)
}

/// `pshufb` control giving byte `2k` in bytes 0..8 and byte `2k+1` in bytes 8..16: after
/// widening to i16, the scales of the two 16-element sub-blocks of a 32-element step.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn pair_pattern(k: usize) -> __m128i {
    let s = 2 * k as u8;
    _mm_set_epi64x(i64::from_ne_bytes([s + 1; 8]), i64::from_ne_bytes([s; 8]))
}
