//! IQ4_XS x Q8_K. Per super-block: x = d * ls[ib] * KVALUES_IQ4NL[nibble] over 8 sub-blocks of
//! 32, ls a 6-bit scale minus 32; sub-block ib is an IQ4_NL block: element j (< 16) in the low
//! nibble of qs[16 ib + j], element j + 16 in the high one. The levels are signed, so the SIMD
//! paths multiply |level| (unsigned operand) by q8 with the level's sign moved onto it.
use super::{dot_i8, vec_dot};
use crate::kernels::VecDot;
use crate::simd::Tier;
use ishizuki_core::quant::{f16_to_f32, BlockIQ4XS, BlockQ8K, KVALUES_IQ4NL, QK_K};

#[cfg(target_arch = "x86_64")]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[
    (Tier::Scalar, dot_scalar),
    (Tier::Avx2, dot_avx2),
    (Tier::Avx512, dot_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[(Tier::Scalar, dot_scalar)];

vec_dot!(dot_scalar, BlockIQ4XS, rows_scalar);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx2, BlockIQ4XS, rows_avx2);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx512, BlockIQ4XS, rows_avx512);

/// |KVALUES_IQ4NL| as `pshufb` table bytes (all levels fit in u8).
#[cfg(target_arch = "x86_64")]
const ABS_LEVELS: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = KVALUES_IQ4NL[i].unsigned_abs();
        i += 1;
    }
    t
};

/// Scalar reference, as ggml's `ggml_vec_dot_iq4_xs_q8_K_generic` but with the sub-block scales
/// applied in integers (exact) before the one float scaling per block.
fn rows_scalar<const R: usize>(w: &[BlockIQ4XS], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    let mut sums = [0f32; R];
    let mut aux8 = [0i8; QK_K];
    for (i, b) in w.iter().enumerate() {
        for (a, qs) in aux8.chunks_exact_mut(32).zip(b.qs.chunks_exact(16)) {
            let (lo, hi) = a.split_at_mut(16);
            for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
                *l = KVALUES_IQ4NL[(q & 0x0f) as usize];
                *h = KVALUES_IQ4NL[(q >> 4) as usize];
            }
        }
        let scales: [i32; 8] = std::array::from_fn(|ib| b.scale(ib));
        let d = f16_to_f32(b.d);
        for (sum, y) in sums.iter_mut().zip(ys) {
            let y = &y[i];
            let sumi: i32 = aux8
                .chunks_exact(32)
                .zip(y.qs.chunks_exact(32))
                .zip(scales)
                .map(|((a, q), ls)| ls * dot_i8(a, q))
                .sum();
            *sum += d * y.d() * sumi as f32;
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = s);
}

/// The 8 scales as i32 lanes holding the scale in both i16 halves, so madd / dpwssd multiply
/// each i16 product pair by it.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_x2(b: &BlockIQ4XS) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let low = _mm256_set1_epi32(u32::from_le_bytes(b.scales_l) as i32);
    let low = _mm256_srlv_epi32(low, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    let high = _mm256_set1_epi32(u16::from_le_bytes(b.scales_h) as i32);
    let high = _mm256_srlv_epi32(high, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    let ls = _mm256_or_si256(
        _mm256_and_si256(low, _mm256_set1_epi32(0x0f)),
        _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4),
    );
    let ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
    _mm256_or_si256(
        _mm256_and_si256(ls, _mm256_set1_epi32(0xffff)),
        _mm256_slli_epi32(ls, 16),
    )
}

/// One 32-element sub-block per step: maddubs(|level|, sign(q8, level)) stays below 2^15 per
/// pair (q8 from Q8_K quantization is never -128); madd applies the sub-block scale.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const R: usize>(w: &[BlockIQ4XS], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, hsum_ps};
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0x0f);
    let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
    let abs_levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(ABS_LEVELS.as_ptr().cast()));
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales = scales_x2(b);
        let mut sumi = [_mm256_setzero_si256(); R];
        for t in 0..QK_K / 64 {
            let bits = _mm256_loadu_si256(b.qs.as_ptr().add(32 * t).cast());
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            // sub-block 2t: low then high nibbles of bytes 0..16; 2t+1: of bytes 16..32
            let nibbles = [
                _mm256_permute2x128_si256(lo, hi, 0x20),
                _mm256_permute2x128_si256(lo, hi, 0x31),
            ];
            for (k, nib) in nibbles.iter().enumerate() {
                let ib = 2 * t + k;
                let mag = _mm256_shuffle_epi8(abs_levels, *nib);
                let sign = _mm256_shuffle_epi8(levels, *nib);
                let sc = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(ib as i32));
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(32 * ib);
                    let q8 = _mm256_sign_epi8(_mm256_loadu_si256(q8.cast()), sign);
                    let p = _mm256_maddubs_epi16(mag, q8);
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(p, sc));
                }
            }
        }
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let f = _mm256_set1_ps(d * y.get_unchecked(i).d());
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum_ps(a);
    }
}

/// Two sub-blocks (64 elements) per step: q8 negated under the mask of negative levels
/// (nibble < 8), maddubs with |level|, dpwssd with the two sub-block scales.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_avx512<const R: usize>(w: &[BlockIQ4XS], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, idx_halves, join, lanes_u8};
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm512_set1_epi8(8);
    let abs_levels = _mm512_broadcast_i32x4(_mm_loadu_si128(ABS_LEVELS.as_ptr().cast()));
    let idx: [__m512i; 4] = std::array::from_fn(|t| idx_halves(2 * t as i32, 2 * t as i32 + 1));
    let mut acc = [_mm512_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales = _mm512_zextsi256_si512(scales_x2(b));
        let mut sumi = [_mm512_setzero_si512(); R];
        for (t, idx) in idx.iter().enumerate() {
            let bits = _mm256_loadu_si256(b.qs.as_ptr().add(32 * t).cast());
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            // 128-bit lanes [lo 2t, lo 2t+1, hi 2t, hi 2t+1] -> [lo 2t, hi 2t, lo 2t+1, hi 2t+1]
            let z = join(lo, hi);
            let nib = _mm512_shuffle_i64x2(z, z, 0b11_01_10_00);
            let mag = _mm512_shuffle_epi8(abs_levels, nib);
            let negative = _mm512_cmplt_epu8_mask(nib, eight);
            let sc = lanes_u8(scales, *idx);
            for (s, y) in sumi.iter_mut().zip(ys) {
                let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * t);
                let q8 = _mm512_loadu_si512(q8.cast());
                let q8 = _mm512_mask_sub_epi8(q8, negative, _mm512_setzero_si512(), q8);
                let p = _mm512_maddubs_epi16(mag, q8);
                *s = _mm512_dpwssd_epi32(*s, p, sc);
            }
        }
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let f = _mm512_set1_ps(d * y.get_unchecked(i).d());
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), f, *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(a);
    }
}
