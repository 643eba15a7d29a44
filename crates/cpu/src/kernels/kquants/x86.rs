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
