//! Q6_K x Q8_K. Per super-block: x = d * sc[s] * (q - 32) over 16 sub-blocks of 16, q 6 bits
//! (4 in `ql`, 2 in `qh`). The SIMD paths multiply the unsigned q and take the offset back as
//! 32 * sum_s sc[s] * bsum_s.
use super::{dot_i8, vec_dot};
use crate::kernels::VecDot;
use crate::simd::Tier;
use ishizuki_core::quant::{f16_to_f32, BlockQ6K, BlockQ8K, QK_K};

#[cfg(target_arch = "x86_64")]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[
    (Tier::Scalar, dot_scalar),
    (Tier::Avx2, dot_avx2),
    (Tier::Avx512, dot_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[(Tier::Scalar, dot_scalar)];

vec_dot!(dot_scalar, BlockQ6K, rows_scalar);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx2, BlockQ6K, rows_avx2);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx512, BlockQ6K, rows_avx512);

/// Scalar reference, as ggml's `ggml_vec_dot_q6_K_q8_K_generic`: the block unpacked once to
/// signed values, then exact integer sums per 16-element sub-block for every activation row.
fn rows_scalar<const R: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    let mut sums = [0f32; R];
    let mut aux8 = [0i8; QK_K];
    for (i, b) in w.iter().enumerate() {
        // each half of 128 elements: 64 bytes of ql, 32 of qh, four runs of 32 elements
        let halves = aux8
            .chunks_exact_mut(128)
            .zip(b.ql.chunks_exact(64))
            .zip(b.qh.chunks_exact(32));
        for ((a, ql), qh) in halves {
            for l in 0..32 {
                let (q0, q1, h) = (ql[l], ql[l + 32], qh[l]);
                a[l] = ((q0 & 0x0f) | ((h & 3) << 4)) as i8 - 32;
                a[l + 32] = ((q1 & 0x0f) | (((h >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((q0 >> 4) | (((h >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((q1 >> 4) | (((h >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let d = f16_to_f32(b.d);
        for (sum, y) in sums.iter_mut().zip(ys) {
            let y = &y[i];
            let sumi: i32 = aux8
                .chunks_exact(16)
                .zip(y.qs.chunks_exact(16))
                .zip(&b.scales)
                .map(|((a, q), &sc)| sc as i32 * dot_i8(a, q))
                .sum();
            *sum += d * y.d() * sumi as f32;
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = s);
}

/// 32 elements per step: maddubs(q unsigned 0..63, q8) stays below 2^15 per pair; madd applies
/// the two sub-block scales of the step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const R: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, hsum_ps, pair_pattern};
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales8 = _mm_loadu_si128(b.scales.as_ptr().cast());
        let mut sumi = [_mm256_setzero_si256(); R];
        for half in 0..2 {
            let ql0 = _mm256_loadu_si256(b.ql.as_ptr().add(64 * half).cast());
            let ql1 = _mm256_loadu_si256(b.ql.as_ptr().add(64 * half + 32).cast());
            let qh = _mm256_loadu_si256(b.qh.as_ptr().add(32 * half).cast());
            // qh bit pairs 0-1, 2-3, 4-5, 6-7 moved to bits 4-5 of each byte
            let q6 = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _mm256_and_si256(qh, m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                ),
            ];
            for (k, q6) in q6.iter().enumerate() {
                let pick = pair_pattern(4 * half + k);
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pick));
                let at = 128 * half + 32 * k;
                for (acc_i, y) in sumi.iter_mut().zip(ys) {
                    let q8 = _mm256_loadu_si256(y.get_unchecked(i).qs.as_ptr().add(at).cast());
                    let p = _mm256_madd_epi16(sc, _mm256_maddubs_epi16(*q6, q8));
                    *acc_i = _mm256_add_epi32(*acc_i, p);
                }
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(scales8);
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
            let s = _mm256_sub_epi32(s, offset);
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * y.d()), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum_ps(a);
    }
}

/// 64 elements per step (the A and B vectors of each 128-element half); dpbusd then dpwssd with
/// the four 16-element sub-block scales of the step (lanes below 2^15; scales masked to 16 bits
/// so the high i16 half of each scale lane is zero).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_avx512<const R: usize>(w: &[BlockQ6K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, idx_quarters, join, lanes_u8};
    use std::arch::x86_64::*;
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    let low16 = _mm512_set1_epi32(0xffff);
    let idx: [__m512i; 4] = std::array::from_fn(|k| idx_quarters(4 * k as i32));
    let mut acc = [_mm512_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales8 = _mm_loadu_si128(b.scales.as_ptr().cast());
        let scales = _mm512_and_si512(_mm512_cvtepi8_epi32(scales8), low16);
        let mut sumi = [_mm512_setzero_si512(); R];
        for half in 0..2 {
            let ql = _mm512_loadu_si512(b.ql.as_ptr().add(64 * half).cast());
            let qh = _mm256_loadu_si256(b.qh.as_ptr().add(32 * half).cast());
            let qh2 = join(qh, _mm256_srli_epi16(qh, 2));
            // A: elements 0..64 of the half (low nibbles), B: 64..128 (high nibbles)
            let q6 = [
                _mm512_or_si512(
                    _mm512_and_si512(ql, m4),
                    _mm512_and_si512(_mm512_slli_epi16(qh2, 4), m30),
                ),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                    _mm512_and_si512(qh2, m30),
                ),
            ];
            for (k, q6) in q6.iter().enumerate() {
                let step = 2 * half + k;
                let sc = lanes_u8(scales, idx[step]);
                for (acc_i, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * step);
                    let q8 = _mm512_loadu_si512(q8.cast());
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), *q6, q8);
                    *acc_i = _mm512_dpwssd_epi32(*acc_i, dot, sc);
                }
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(scales8);
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
            let s = _mm512_sub_epi32(s, _mm512_zextsi256_si512(offset));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * y.d()), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(a);
    }
}
