//! Q2_K x Q8_K. Per super-block: x = d * sc[s] * q - dmin * m[s] over 16 sub-blocks of 16, q 2
//! bits, sc and m the low and high nibbles of `scales[s]`. Element n*128 + j*32 + c (c < 32)
//! takes bits 2j of qs[n*32 + c]; the mins come back as dmin * sum_s m[s] * bsum_s.
use super::{dot_i8, vec_dot};
use crate::kernels::VecDot;
use crate::simd::Tier;
use ishizuki_core::quant::{f16_to_f32, BlockQ2K, BlockQ8K, QK_K};

#[cfg(target_arch = "x86_64")]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[
    (Tier::Scalar, dot_scalar),
    (Tier::Avx2, dot_avx2),
    (Tier::Avx512, dot_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[(Tier::Scalar, dot_scalar)];

vec_dot!(dot_scalar, BlockQ2K, rows_scalar);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx2, BlockQ2K, rows_avx2);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx512, BlockQ2K, rows_avx512);

/// Scalar reference, as ggml's `ggml_vec_dot_q2_K_q8_K_generic`: the block unpacked once to
/// signed values, then exact integer sums per 16-element sub-block for every activation row.
fn rows_scalar<const R: usize>(w: &[BlockQ2K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    let mut sums = [0f32; R];
    let mut aux8 = [0i8; QK_K];
    for (i, b) in w.iter().enumerate() {
        for (k, a) in aux8.chunks_exact_mut(32).enumerate() {
            let (n, j) = (k / 4, k % 4);
            for (v, &q) in a.iter_mut().zip(&b.qs[32 * n..][..32]) {
                *v = ((q >> (2 * j)) & 3) as i8;
            }
        }
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (sum, y) in sums.iter_mut().zip(ys) {
            let y = &y[i];
            let mins: i32 = (0..QK_K / 16)
                .map(|s| y.bsum(s) as i32 * (b.scales[s] >> 4) as i32)
                .sum();
            let sumi: i32 = aux8
                .chunks_exact(16)
                .zip(y.qs.chunks_exact(16))
                .zip(&b.scales)
                .map(|((a, q), &sc)| (sc & 0x0f) as i32 * dot_i8(a, q))
                .sum();
            *sum += d * y.d() * sumi as f32;
            *sum -= dmin * y.d() * mins as f32;
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = s);
}

/// 32 elements per step (k = 4n + j): maddubs(q, q8) then madd with the step's two scales.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const R: usize>(w: &[BlockQ2K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_pair, hsum_ps, pair_pattern};
    use std::arch::x86_64::*;
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_m = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let packed = _mm_loadu_si128(b.scales.as_ptr().cast());
        let scales8 = _mm_and_si128(packed, m4);
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        let mut sumi = [_mm256_setzero_si256(); R];
        for n in 0..2 {
            // bits 2j of each byte reach bits 0-1 after j shifts by 2
            let mut qs = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n).cast());
            for j in 0..4 {
                let k = 4 * n + j;
                let q2 = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16(qs, 2);
                let sc = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales8, pair_pattern(k)));
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(32 * k);
                    let p = _mm256_maddubs_epi16(q2, _mm256_loadu_si256(q8.cast()));
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(sc, p));
                }
            }
        }
        let dm = f16_pair(&b.d, &b.dmin);
        for (((a, am), s), y) in acc.iter_mut().zip(&mut acc_m).zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let m = _mm256_madd_epi16(bsums, mins);
            let f = _mm_mul_ps(dm, _mm_set1_ps(y.d()));
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcastss_ps(f), *a);
            let fm = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
            *am = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), fm, *am);
        }
    }
    for ((o, a), am) in out.iter_mut().zip(acc).zip(acc_m) {
        *o = hsum_ps(_mm256_add_ps(a, am));
    }
}

/// 64 elements per step t (two 32-element runs, 2t and 2t+1); dpbusd then dpwssd with the four
/// 16-element sub-block scales of the step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_avx512<const R: usize>(w: &[BlockQ2K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_pair, hsum_ps, idx_quarters, join, lanes_u8};
    use std::arch::x86_64::*;
    let m3 = _mm512_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let idx: [__m512i; 4] = std::array::from_fn(|t| idx_quarters(4 * t as i32));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut acc_m = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let packed = _mm_loadu_si128(b.scales.as_ptr().cast());
        let scales = _mm512_cvtepu8_epi32(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        let mut sumi = [_mm512_setzero_si512(); R];
        for n in 0..2 {
            let qs = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n).cast());
            let mut qs = join(qs, _mm256_srli_epi16(qs, 2));
            for p in 0..2 {
                let t = 2 * n + p;
                let q2 = _mm512_and_si512(qs, m3);
                qs = _mm512_srli_epi16(qs, 4);
                let sc = lanes_u8(scales, idx[t]);
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * t);
                    let q8 = _mm512_loadu_si512(q8.cast());
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q2, q8);
                    *s = _mm512_dpwssd_epi32(*s, dot, sc);
                }
            }
        }
        let dm = f16_pair(&b.d, &b.dmin);
        for (((a, am), s), y) in acc.iter_mut().zip(&mut acc_m).zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let m = _mm256_madd_epi16(bsums, mins);
            let f = _mm_mul_ps(dm, _mm_set1_ps(y.d()));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_broadcastss_ps(f), *a);
            let fm = _mm256_broadcastss_ps(_mm_movehdup_ps(f));
            *am = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), fm, *am);
        }
    }
    for ((o, a), am) in out.iter_mut().zip(acc).zip(acc_m) {
        *o = _mm512_reduce_add_ps(a) + hsum_ps(am);
    }
}
