//! One activation row quantized for the GEMM: symmetric 8-bit per 32 elements with the scale
//! kept in f32 (ggml's Q8_0 rule, rounding half to even as its SIMD quantizers do), and the
//! scaled sums of each 16 and 32 quants.
use crate::simd::{tier, Tier};

/// `q`, `d`, `sum16` and `sum32` hold exactly the blocks of `x` (a multiple of 32 long).
pub(super) fn quantize_row(
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    sum16: &mut [f32],
    sum32: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2; one dispatch per row, so the block helpers inline.
        return unsafe { x86::quantize_row(x, q, d, sum16, sum32) };
    }
    quantize_row_with(x, q, d, sum16, sum32, max_abs, quantize_block)
}

/// `quantize_row` with the block helpers given, so a SIMD instance can inline its own.
#[inline(always)]
fn quantize_row_with(
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    sum16: &mut [f32],
    sum32: &mut [f32],
    max_abs: impl Fn(&[f32]) -> f32,
    quantize_block: impl Fn(&[f32], f32, &mut [i8]) -> [i32; 2],
) {
    let blocks = x.chunks_exact(32).zip(q.chunks_exact_mut(32));
    for (b, (xb, qb)) in blocks.enumerate() {
        let amax = max_abs(xb);
        let db = amax / 127.0;
        let id = if db > 0.0 { 1.0 / db } else { 0.0 };
        let sums = quantize_block(xb, id, qb);
        d[b] = db;
        sum16[2 * b] = db * sums[0] as f32;
        sum16[2 * b + 1] = db * sums[1] as f32;
        sum32[b] = db * (sums[0] + sums[1]) as f32;
    }
}

fn max_abs(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2; x holds 32 values.
        return unsafe { x86::max_abs(x) };
    }
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// Writes `round(x * id)` into the 32 bytes of `q`; returns the sums of each half.
fn quantize_block(x: &[f32], id: f32, q: &mut [i8]) -> [i32; 2] {
    #[cfg(target_arch = "x86_64")]
    if tier() >= Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2; x and q hold 32 values.
        return unsafe { x86::quantize_block(x, id, q) };
    }
    quantize_block_scalar(x, id, q)
}

pub(super) fn quantize_block_scalar(x: &[f32], id: f32, q: &mut [i8]) -> [i32; 2] {
    let mut sums = [0i32; 2];
    for (j, (o, &v)) in q.iter_mut().zip(x).enumerate() {
        *o = (v * id).round_ties_even() as i8;
        sums[j / 16] += *o as i32;
    }
    sums
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_row(
        x: &[f32],
        q: &mut [i8],
        d: &mut [f32],
        sum16: &mut [f32],
        sum32: &mut [f32],
    ) {
        let octets = x.len() / 256;
        for o in 0..octets {
            let (b, e) = (8 * o, 256 * o);
            quantize_octet(
                &x[e..e + 256],
                &mut q[e..e + 256],
                &mut d[b..b + 8],
                &mut sum16[2 * b..2 * b + 16],
                &mut sum32[b..b + 8],
            );
        }
        let (b, e) = (8 * octets, 256 * octets);
        let max_abs = |xb: &[f32]| max_abs(xb);
        let quantize_block = |xb: &[f32], id: f32, qb: &mut [i8]| quantize_block(xb, id, qb);
        let (d, sum16, sum32) = (&mut d[b..], &mut sum16[2 * b..], &mut sum32[b..]);
        super::quantize_row_with(
            &x[e..],
            &mut q[e..],
            d,
            sum16,
            sum32,
            max_abs,
            quantize_block,
        )
    }

    /// The 8 lanes' horizontal reductions of 8 vectors by `op` (lane `i`: vector `i`'s).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn reduce8(v: [__m256; 8], op: impl Fn(__m256, __m256) -> __m256) -> __m256 {
        // pairs of vectors interleaved then combined, three times: lane i ends up vector i's
        let l1 = |a: __m256, b: __m256| op(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        let (a01, a23, a45, a67) = (
            l1(v[0], v[1]),
            l1(v[2], v[3]),
            l1(v[4], v[5]),
            l1(v[6], v[7]),
        );
        let l2 = |a: __m256, b: __m256| {
            let (a, b) = (_mm256_castps_pd(a), _mm256_castps_pd(b));
            let lo = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
            let hi = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
            op(lo, hi)
        };
        let (a0123, a4567) = (l2(a01, a23), l2(a45, a67));
        // lanes: [0 1 2 3 | 0 1 2 3] of a0123 and a4567 in 128-bit halves
        let lo = _mm256_permute2f128_ps::<0x20>(a0123, a4567);
        let hi = _mm256_permute2f128_ps::<0x31>(a0123, a4567);
        op(lo, hi)
    }

    /// `quantize_row` of 8 blocks (256 values): their maxima, scales and sums as vectors, so
    /// the divisions and horizontal sums are one instruction per 8 blocks, not per block.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn quantize_octet(
        x: &[f32],
        q: &mut [i8],
        d: &mut [f32],
        sum16: &mut [f32],
        sum32: &mut [f32],
    ) {
        let p = x.as_ptr();
        let maxima: [__m256; 8] = std::array::from_fn(|b| block_abs_max(p.add(32 * b)));
        let amax = reduce8(maxima, |a, b| _mm256_max_ps(a, b));
        let db = _mm256_div_ps(amax, _mm256_set1_ps(127.0));
        let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(db, _mm256_setzero_ps());
        let id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0), db), positive);
        _mm256_storeu_ps(d.as_mut_ptr(), db);
        let mut ids = [0f32; 8];
        _mm256_storeu_ps(ids.as_mut_ptr(), id);
        let mut lo = [_mm256_setzero_ps(); 8];
        let mut hi = [_mm256_setzero_ps(); 8];
        for b in 0..8 {
            let (first, second) =
                quantize_block_lanes(p.add(32 * b), ids[b], q.as_mut_ptr().add(32 * b));
            // integer lane sums, exact in f32 (at most 16 x 127 in magnitude)
            lo[b] = _mm256_cvtepi32_ps(first);
            hi[b] = _mm256_cvtepi32_ps(second);
        }
        let (s_lo, s_hi) = (
            reduce8(lo, |a, b| _mm256_add_ps(a, b)),
            reduce8(hi, |a, b| _mm256_add_ps(a, b)),
        );
        _mm256_storeu_ps(
            sum32.as_mut_ptr(),
            _mm256_mul_ps(db, _mm256_add_ps(s_lo, s_hi)),
        );
        let (first, second) = (_mm256_mul_ps(db, s_lo), _mm256_mul_ps(db, s_hi));
        // sum16 interleaves each block's two halves: [first0 second0 first1 second1 ...]
        let (u, v) = (
            _mm256_unpacklo_ps(first, second),
            _mm256_unpackhi_ps(first, second),
        );
        _mm256_storeu_ps(sum16.as_mut_ptr(), _mm256_permute2f128_ps::<0x20>(u, v));
        _mm256_storeu_ps(
            sum16.as_mut_ptr().add(8),
            _mm256_permute2f128_ps::<0x31>(u, v),
        );
    }

    /// The lane maxima of `|x|` over the 32 values at `p`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block_abs_max(p: *const f32) -> __m256 {
        let abs = |i: usize| _mm256_andnot_ps(_mm256_set1_ps(-0.0), _mm256_loadu_ps(p.add(i)));
        _mm256_max_ps(
            _mm256_max_ps(abs(0), abs(8)),
            _mm256_max_ps(abs(16), abs(24)),
        )
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn max_abs(x: &[f32]) -> f32 {
        let m = block_abs_max(x.as_ptr());
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn quantize_block(x: &[f32], id: f32, q: &mut [i8]) -> [i32; 2] {
        let (first, second) = quantize_block_lanes(x.as_ptr(), id, q.as_mut_ptr());
        [hsum_i32(first), hsum_i32(second)]
    }

    /// Writes `round(x * id)` of the 32 values at `p` to the 32 bytes at `q`; returns the
    /// lane sums of each half's quants.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn quantize_block_lanes(p: *const f32, id: f32, q: *mut i8) -> (__m256i, __m256i) {
        let scale = _mm256_set1_ps(id);
        // cvtps rounds half to even under the default MXCSR mode
        let quant = |i: usize| _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p.add(i)), scale));
        let (q0, q1, q2, q3) = (quant(0), quant(8), quant(16), quant(24));
        // the packs interleave 128-bit lanes; the permute puts the dwords back in order
        let packed = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        let ordered =
            _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.cast(), ordered);
        (_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row quantizer of this CPU's tier (8 blocks at a time with AVX2) against the scalar
    /// rule block by block, for rows of whole and partial groups of 8 blocks.
    #[test]
    fn rows_equal_the_scalar_rule() {
        let scalar_max = |x: &[f32]| x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for n in [32, 256, 288, 576, 1536, 2048 + 96] {
            let mut x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.5)
                .collect();
            // an all-zero last block, and blocks of very different scales
            x[n - 32..].fill(0.0);
            x.iter_mut().skip(64).step_by(97).for_each(|v| *v *= 1e3);
            let b = n / 32;
            let mut got = (
                vec![0i8; n],
                vec![0f32; b],
                vec![0f32; 2 * b],
                vec![0f32; b],
            );
            let mut want = got.clone();
            quantize_row(&x, &mut got.0, &mut got.1, &mut got.2, &mut got.3);
            let (q, d, s16, s32) = (&mut want.0, &mut want.1, &mut want.2, &mut want.3);
            quantize_row_with(&x, q, d, s16, s32, scalar_max, quantize_block_scalar);
            assert_eq!(got, want, "{n} values");
        }
    }

    #[test]
    fn simd_blocks_equal_the_scalar_rule() {
        let mut x: Vec<f32> = (0..32 * 50)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.5)
            .collect();
        // exact ties of x * id at every half step
        for (j, v) in x[..32].iter_mut().enumerate() {
            *v = j as f32 - 15.5;
        }
        for xb in x.chunks_exact(32) {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(max_abs(xb), amax);
            let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            let (mut got, mut want) = ([0i8; 32], [0i8; 32]);
            let sums = quantize_block(xb, id, &mut got);
            assert_eq!(sums, quantize_block_scalar(xb, id, &mut want));
            assert_eq!(got, want);
        }
        let halves: Vec<f32> = (0..32).map(|j| j as f32 - 15.5).collect();
        let (mut got, mut want) = ([0i8; 32], [0i8; 32]);
        quantize_block(&halves, 1.0, &mut got);
        quantize_block_scalar(&halves, 1.0, &mut want);
        assert_eq!(got, want);
        assert_eq!(
            (got[0], got[15], got[16]),
            (-16, 0, 0),
            "halves round to even"
        );
    }
}
