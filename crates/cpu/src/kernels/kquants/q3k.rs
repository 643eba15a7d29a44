//! Q3_K x Q8_K. Per super-block: x = d * sc[s] * (q - 4 * !hbit) over 16 sub-blocks of 16, q 2
//! bits, sc signed 6 bits. Element n*128 + j*32 + c (c < 32) takes bits 2j of qs[n*32 + c] and
//! bit 4n+j of hmask[c]. The SIMD paths multiply the unsigned qu = q + 4 * hbit (0..8) and take
//! the offset back as 4 * sum_s sc[s] * bsum_s.
use super::{dot_i8, vec_dot};
use crate::kernels::VecDot;
use crate::simd::Tier;
use ishizuki_core::quant::{f16_to_f32, q3k_scale, BlockQ3K, BlockQ8K, QK_K};

#[cfg(target_arch = "x86_64")]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[
    (Tier::Scalar, dot_scalar),
    (Tier::Avx2, dot_avx2),
    (Tier::Avx512, dot_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[(Tier::Scalar, dot_scalar)];

vec_dot!(dot_scalar, BlockQ3K, rows_scalar);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx2, BlockQ3K, rows_avx2);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx512, BlockQ3K, rows_avx512);

/// Scalar reference, as ggml's `ggml_vec_dot_q3_K_q8_K_generic`: the block unpacked once to
/// signed values, then exact integer sums per 16-element sub-block for every activation row.
fn rows_scalar<const R: usize>(w: &[BlockQ3K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    let mut sums = [0f32; R];
    let mut aux8 = [0i8; QK_K];
    for (i, b) in w.iter().enumerate() {
        for (k, a) in aux8.chunks_exact_mut(32).enumerate() {
            let (n, j) = (k / 4, k % 4);
            let qs = &b.qs[32 * n..][..32];
            for ((v, &q), &h) in a.iter_mut().zip(qs).zip(&b.hmask) {
                let offset = if h & (1 << k) != 0 { 0 } else { 4 };
                *v = ((q >> (2 * j)) & 3) as i8 - offset;
            }
        }
        let scales: [i32; 16] = std::array::from_fn(|s| q3k_scale(s, &b.scales));
        let d = f16_to_f32(b.d);
        for (sum, y) in sums.iter_mut().zip(ys) {
            let y = &y[i];
            let sumi: i32 = aux8
                .chunks_exact(16)
                .zip(y.qs.chunks_exact(16))
                .zip(scales)
                .map(|((a, q), sc)| sc * dot_i8(a, q))
                .sum();
            *sum += d * y.d() * sumi as f32;
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = s);
}

/// The 16 signed scales of a block as bytes: low nibbles from bytes 0..8 (scales 0..8) and their
/// high nibbles (8..16), top 2 bits of scale j from bits 2*(j/4) of byte 8 + j%4, minus 32.
/// Reads the 16 bytes ending at the block's end (hmask/qs tail, 12 scale bytes, d).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales_i8(b: &BlockQ3K) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::*;
    let tail = std::ptr::from_ref(b)
        .cast::<u8>()
        .add(std::mem::size_of::<BlockQ3K>() - 16);
    let s = _mm_srli_si128(_mm_loadu_si128(tail.cast()), 2);
    let m4 = _mm_set1_epi8(0x0f);
    let low = _mm_unpacklo_epi64(
        _mm_and_si128(s, m4),
        _mm_and_si128(_mm_srli_epi16(s, 4), m4),
    );
    let top = _mm_shuffle_epi8(s, _mm_set1_epi32(0x0b0a_0908));
    let top = _mm_srlv_epi32(top, _mm_setr_epi32(0, 2, 4, 6));
    let top = _mm_slli_epi32(_mm_and_si128(top, _mm_set1_epi8(3)), 4);
    _mm_sub_epi8(_mm_or_si128(low, top), _mm_set1_epi8(32))
}

/// 32 elements per step (k = 4n + j): maddubs(qu, q8) then madd with the step's two scales.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const R: usize>(w: &[BlockQ3K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, hsum_ps, pair_pattern};
    use std::arch::x86_64::*;
    let m3 = _mm256_set1_epi8(3);
    let m1 = _mm256_set1_epi8(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales8 = scales_i8(b);
        let mut sumi = [_mm256_setzero_si256(); R];
        // bit 0 of each byte is the high bit of step k after k shifts (epi16 shifts pull
        // neighbouring bits in only from the top)
        let mut hbits = _mm256_loadu_si256(b.hmask.as_ptr().cast());
        for n in 0..2 {
            let mut qs = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n).cast());
            for j in 0..4 {
                let k = 4 * n + j;
                let high = _mm256_slli_epi16(_mm256_and_si256(hbits, m1), 2);
                let qu = _mm256_or_si256(_mm256_and_si256(qs, m3), high);
                hbits = _mm256_srli_epi16(hbits, 1);
                qs = _mm256_srli_epi16(qs, 2);
                let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pair_pattern(k)));
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(32 * k);
                    let p = _mm256_maddubs_epi16(qu, _mm256_loadu_si256(q8.cast()));
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(sc, p));
                }
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(scales8);
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 2);
            let s = _mm256_sub_epi32(s, offset);
            *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * y.d()), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum_ps(a);
    }
}

/// 64 elements per step t (two 32-element runs, 2t and 2t+1); dpbusd then dpwssd with the four
/// 16-element sub-block scales of the step (scales masked to 16 bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_avx512<const R: usize>(w: &[BlockQ3K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_one, idx_quarters, join, lanes_u8};
    use std::arch::x86_64::*;
    let m3 = _mm512_set1_epi8(3);
    let m1 = _mm512_set1_epi8(1);
    let low16 = _mm512_set1_epi32(0xffff);
    let idx: [__m512i; 4] = std::array::from_fn(|t| idx_quarters(4 * t as i32));
    let mut acc = [_mm512_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let scales8 = scales_i8(b);
        let scales = _mm512_and_si512(_mm512_cvtepi8_epi32(scales8), low16);
        let mut sumi = [_mm512_setzero_si512(); R];
        let hm = _mm256_loadu_si256(b.hmask.as_ptr().cast());
        // bit 0: the high bit of run 2t (low half) / 2t+1 (high half) after t shifts by 2
        let mut hbits = join(hm, _mm256_srli_epi16(hm, 1));
        for n in 0..2 {
            let qs = _mm256_loadu_si256(b.qs.as_ptr().add(32 * n).cast());
            let mut qs = join(qs, _mm256_srli_epi16(qs, 2));
            for p in 0..2 {
                let t = 2 * n + p;
                let high = _mm512_slli_epi16(_mm512_and_si512(hbits, m1), 2);
                let qu = _mm512_or_si512(_mm512_and_si512(qs, m3), high);
                hbits = _mm512_srli_epi16(hbits, 2);
                qs = _mm512_srli_epi16(qs, 4);
                let sc = lanes_u8(scales, idx[t]);
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * t);
                    let q8 = _mm512_loadu_si512(q8.cast());
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qu, q8);
                    *s = _mm512_dpwssd_epi32(*s, dot, sc);
                }
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(scales8);
        let d = f16_one(&b.d);
        for ((a, s), y) in acc.iter_mut().zip(sumi).zip(ys) {
            let y = y.get_unchecked(i);
            let bsums = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 2);
            let s = _mm512_sub_epi32(s, _mm512_zextsi256_si512(offset));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * y.d()), *a);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(a);
    }
}
