//! Q5_K x Q8_K: Q4_K with a fifth bit per element (bit 2j / 2j+1 of `qh[l]` for element l of
//! the low / high nibbles of the j-th 32 bytes), so q is 0..31.
use super::{dot_i8, k4_scales_mins, vec_dot};
use crate::kernels::VecDot;
use crate::simd::Tier;
use ishizuki_core::quant::{f16_to_f32, BlockQ5K, BlockQ8K, QK_K};

#[cfg(target_arch = "x86_64")]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[
    (Tier::Scalar, dot_scalar),
    (Tier::Avx2, dot_avx2),
    (Tier::Avx512, dot_avx512),
];
#[cfg(not(target_arch = "x86_64"))]
pub(super) const KERNELS: &[(Tier, VecDot)] = &[(Tier::Scalar, dot_scalar)];

vec_dot!(dot_scalar, BlockQ5K, rows_scalar);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx2, BlockQ5K, rows_avx2);
#[cfg(target_arch = "x86_64")]
vec_dot!(dot_avx512, BlockQ5K, rows_avx512);

/// Scalar reference, as ggml's `ggml_vec_dot_q5_K_q8_K_generic`: nibbles unpacked once per block,
/// then exact integer sums per sub-block for every activation row.
fn rows_scalar<const R: usize>(w: &[BlockQ5K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    let mut sums = [0f32; R];
    let mut aux8 = [0i8; QK_K];
    for (i, b) in w.iter().enumerate() {
        // 32 bytes hold 64 elements: low nibbles first, then high nibbles
        for (j, (a, q)) in aux8
            .chunks_exact_mut(64)
            .zip(b.qs.chunks_exact(32))
            .enumerate()
        {
            let (lo, hi) = a.split_at_mut(32);
            for (((l, h), &qv), &hv) in lo.iter_mut().zip(hi.iter_mut()).zip(q).zip(&b.qh) {
                *l = ((qv & 0x0f) | (((hv >> (2 * j)) & 1) << 4)) as i8;
                *h = ((qv >> 4) | (((hv >> (2 * j + 1)) & 1) << 4)) as i8;
            }
        }
        let sm = k4_scales_mins(&b.scales);
        let (d, dmin) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (sum, y) in sums.iter_mut().zip(ys) {
            let y = &y[i];
            let mins: i32 = (0..QK_K / 16)
                .map(|j| y.bsum(j) as i32 * sm[8 + j / 2] as i32)
                .sum();
            let sumi: i32 = aux8
                .chunks_exact(32)
                .zip(y.qs.chunks_exact(32))
                .zip(&sm[..8])
                .map(|((a, q), &sc)| sc as i32 * dot_i8(a, q))
                .sum();
            *sum += d * y.d() * sumi as f32;
            *sum -= dmin * y.d() * mins as f32;
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = s);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2<const R: usize>(w: &[BlockQ5K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{bcast16, f16_pair, hsum_ps, k4_scales_mins};
    use std::arch::x86_64::*;
    let m4 = _mm256_set1_epi8(0x0f);
    let (m1, m2) = (_mm256_set1_epi8(1), _mm256_set1_epi8(2));
    // bytes 8..16 (the mins), each twice: one per 16-element bsum
    let dup_mins = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut acc_m = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let sm = k4_scales_mins(std::ptr::from_ref(b).cast::<u8>().add(4));
        let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup_mins));
        let mut sumi = [_mm256_setzero_si256(); R];
        // bits 2j and 2j+1 of each byte move down by 2 per step (epi16 shifts only pull
        // neighbouring bits into positions above the two read)
        let mut hbits = _mm256_loadu_si256(b.qh.as_ptr().cast());
        for j in 0..QK_K / 64 {
            let bits = _mm256_loadu_si256(b.qs.as_ptr().add(32 * j).cast());
            let h_lo = _mm256_slli_epi16(_mm256_and_si256(hbits, m1), 4);
            let h_hi = _mm256_slli_epi16(_mm256_and_si256(hbits, m2), 3);
            hbits = _mm256_srli_epi16(hbits, 2);
            let lo = _mm256_or_si256(_mm256_and_si256(bits, m4), h_lo);
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), h_hi);
            let sc_lo = _mm256_shuffle_epi8(scales, bcast16(2 * j as i32));
            let sc_hi = _mm256_shuffle_epi8(scales, bcast16(2 * j as i32 + 1));
            for (s, y) in sumi.iter_mut().zip(ys) {
                let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * j);
                let p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(q8.cast()));
                let p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(q8.add(32).cast()));
                let p = _mm256_add_epi32(
                    _mm256_madd_epi16(sc_lo, p_lo),
                    _mm256_madd_epi16(sc_hi, p_hi),
                );
                *s = _mm256_add_epi32(*s, p);
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

/// 64 elements per step j: the 32 low and 32 high nibbles of qs[32j..32j+32], plus 16 where
/// the qh bit is set (a masked add), form one 512-bit vector matching 64 consecutive
/// activations; dpbusd sums 4 products per lane, dpwssd multiplies each lane by its sub-block
/// scale (lanes stay below 2^15, so the high i16 half of every lane is just sign and meets a
/// zero).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_avx512<const R: usize>(w: &[BlockQ5K], ys: [&[BlockQ8K]; R], out: &mut [f32]) {
    use super::x86::{f16_pair, hsum_ps, idx_halves, join, k4_scales_mins, lanes_u8};
    use std::arch::x86_64::*;
    let m4 = _mm512_set1_epi8(0x0f);
    let sixteen = _mm512_set1_epi8(16);
    // step j reads bit 2j of qh for its low-nibble half, bit 2j+1 for its high-nibble half
    let hmask: [__m512i; 4] = std::array::from_fn(|j| {
        join(
            _mm256_set1_epi8(1 << (2 * j)),
            _mm256_set1_epi8(2 << (2 * j)),
        )
    });
    let dup_mins = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    let idx: [__m512i; 4] = std::array::from_fn(|j| idx_halves(2 * j as i32, 2 * j as i32 + 1));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut acc_m = [_mm256_setzero_ps(); R];
    for (i, b) in w.iter().enumerate() {
        let sm = k4_scales_mins(std::ptr::from_ref(b).cast::<u8>().add(4));
        let scales = _mm512_cvtepu8_epi32(sm);
        let mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup_mins));
        let mut sumi = [_mm512_setzero_si512(); R];
        let qh = _mm256_loadu_si256(b.qh.as_ptr().cast());
        let qh = join(qh, qh);
        for half in 0..2 {
            let bits = _mm512_loadu_si512(b.qs.as_ptr().add(64 * half).cast());
            let lo = _mm512_and_si512(bits, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
            // step j = 2 half + k: 256-bit half k of `lo`, then the same half of `hi`
            let q4 = [
                _mm512_shuffle_i64x2(lo, hi, 0b01_00_01_00),
                _mm512_shuffle_i64x2(lo, hi, 0b11_10_11_10),
            ];
            for (k, q4) in q4.iter().enumerate() {
                let j = 2 * half + k;
                let fifth = _mm512_test_epi8_mask(qh, hmask[j]);
                let q5 = _mm512_mask_add_epi8(*q4, fifth, *q4, sixteen);
                let sc = lanes_u8(scales, idx[j]);
                for (s, y) in sumi.iter_mut().zip(ys) {
                    let q8 = y.get_unchecked(i).qs.as_ptr().add(64 * j);
                    let dot = _mm512_dpbusd_epi32(
                        _mm512_setzero_si512(),
                        q5,
                        _mm512_loadu_si512(q8.cast()),
                    );
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
