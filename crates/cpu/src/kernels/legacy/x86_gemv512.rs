//! AVX-512 single-row (decode) kernels for the 32-element block types against the GEMM's
//! activation form (i8 quants contiguous, f32 scale and scaled sum per 32). Two blocks fill one
//! 512-bit vector: weights unpack to u8 (signed types carry an offset), one `vpdpbusd` per pair,
//! and the pair's two scales come from one permute of the group's scale products. Offsets and
//! mins go through the activation sums once per group of 8 blocks.
use super::x86::{f16_halves, heads_vector, GROUP};
use super::{RowDot, QK, ROWS};
use std::arch::x86_64::*;

pub(super) fn row_dot(ty: ishizuki_core::GgmlType) -> Option<RowDot> {
    use ishizuki_core::GgmlType::*;
    Some(match ty {
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        Q8_0 => q8_0,
        IQ4_NL => iq4_nl,
        _ => return None,
    })
}

/// 32 bytes: the 16 at `a` then the 16 at `b`, as low and high nibbles per block:
/// `[lo(a), hi(a), lo(b), hi(b)]`, matching two blocks of 32 consecutive elements.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn nibble_pair(a: *const u8, b: *const u8) -> __m512i {
    let both = _mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(a.cast())),
        _mm_loadu_si128(b.cast()),
    );
    let z = _mm512_castsi256_si512(both);
    let spread = _mm512_shuffle_i64x2::<0b01_01_00_00>(z, z);
    let shifted = _mm512_srlv_epi64(spread, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f))
}

/// Bit j of the two little-endian u32 at `a` and `b` as bits j and 32 + j.
#[inline(always)]
unsafe fn high_bits(a: *const u8, b: *const u8) -> __mmask64 {
    let lo = a.cast::<u32>().read_unaligned() as u64;
    let hi = b.cast::<u32>().read_unaligned() as u64;
    lo | (hi << 32)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q4_0(a: *const u8, b: *const u8) -> __m512i {
    nibble_pair(a.add(2), b.add(2))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q4_1(a: *const u8, b: *const u8) -> __m512i {
    nibble_pair(a.add(4), b.add(4))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q5_0(a: *const u8, b: *const u8) -> __m512i {
    let low = nibble_pair(a.add(6), b.add(6));
    _mm512_mask_add_epi8(
        low,
        high_bits(a.add(2), b.add(2)),
        low,
        _mm512_set1_epi8(16),
    )
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q5_1(a: *const u8, b: *const u8) -> __m512i {
    let low = nibble_pair(a.add(8), b.add(8));
    _mm512_mask_add_epi8(
        low,
        high_bits(a.add(4), b.add(4)),
        low,
        _mm512_set1_epi8(16),
    )
}

/// i8 quants + 128 as u8.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q8_0(a: *const u8, b: *const u8) -> __m512i {
    let lo = _mm256_loadu_si256(a.add(2).cast());
    let both = _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(lo),
        _mm256_loadu_si256(b.add(2).cast()),
    );
    _mm512_xor_si512(both, _mm512_set1_epi8(-128))
}

/// IQ4_NL table levels + 128, as u8.
const IQ4NL_LEVELS_U8: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = ishizuki_core::quant::KVALUES_IQ4NL[i] as u8 ^ 0x80;
        i += 1;
    }
    t
};

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn unpack_iq4_nl(a: *const u8, b: *const u8) -> __m512i {
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4NL_LEVELS_U8.as_ptr().cast()));
    _mm512_shuffle_epi8(table, nibble_pair(a.add(2), b.add(2)))
}

/// Defines one `RowDot`: `$wb` bytes per weight block, `$min` whether the block's second f16
/// is a min (else the weights carry offset `$off`, whose term is `-off * d * sum`). Up to
/// `ROWS` weight rows share each activation load and one final reduction.
macro_rules! row_kernel {
    ($entry:ident, weight_bytes: $wb:literal, min: $min:literal, off: $off:literal, unpack: $unpack:ident) => {
        unsafe fn $entry(n: usize, w: &[u8], q: &[i8], d: &[f32], sum32: &[f32], out: &mut [f32]) {
            let (nb, n_rows) = (n / QK, out.len());
            if !n.is_multiple_of(QK)
                || !(1..=ROWS).contains(&n_rows)
                || w.len() != n_rows * nb * $wb
                || q.len() != n
                || d.len() != nb
                || sum32.len() != nb
            {
                return out.fill(f32::NAN);
            }

            #[target_feature(
                enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
            )]
            unsafe fn rows<const R: usize>(
                nb: usize,
                w: *const u8,
                q: *const i8,
                d: *const f32,
                sum32: *const f32,
            ) -> __m128 {
                let row_bytes = nb * $wb;
                let idx: [__m512i; GROUP / 2] = std::array::from_fn(|p| {
                    let p = 2 * p as i32;
                    _mm512_inserti64x4::<1>(_mm512_set1_epi32(p), _mm256_set1_epi32(p + 1))
                });
                let mut acc = [_mm512_setzero_ps(); R];
                let mut acc_min = [_mm256_setzero_ps(); R];
                let mut g = 0;
                while g + GROUP <= nb {
                    group::<R, true>(
                        GROUP,
                        g,
                        row_bytes,
                        w,
                        q,
                        d,
                        sum32,
                        &idx,
                        &mut acc,
                        &mut acc_min,
                    );
                    g += GROUP;
                }
                if g < nb {
                    group::<R, false>(
                        nb - g,
                        g,
                        row_bytes,
                        w,
                        q,
                        d,
                        sum32,
                        &idx,
                        &mut acc,
                        &mut acc_min,
                    );
                }
                let folded: [__m256; R] = std::array::from_fn(|r| {
                    let a = acc[r];
                    let halves = _mm256_add_ps(
                        _mm512_castps512_ps256(a),
                        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a))),
                    );
                    _mm256_add_ps(halves, acc_min[r])
                });
                sum_lanes4(std::array::from_fn(|r| folded[r.min(R - 1)]))
            }

            /// Blocks `g..g + count` of R rows; `FULL` (count == GROUP) makes every mask and
            /// trip count a constant.
            #[target_feature(
                enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
            )]
            #[inline]
            #[allow(clippy::too_many_arguments)]
            unsafe fn group<const R: usize, const FULL: bool>(
                count: usize,
                g: usize,
                row_bytes: usize,
                w: *const u8,
                q: *const i8,
                d: *const f32,
                sum32: *const f32,
                idx: &[__m512i; GROUP / 2],
                acc: &mut [__m512; R],
                acc_min: &mut [__m256; R],
            ) {
                let count = if FULL { GROUP } else { count };
                let lanes: __mmask8 = if FULL { !0 } else { (1u8 << count) - 1 };
                let dx = _mm256_maskz_loadu_ps(lanes, d.add(g));
                let sx = _mm256_maskz_loadu_ps(lanes, sum32.add(g));
                let mut prod = [_mm512_setzero_ps(); R];
                for r in 0..R {
                    let wg = w.add(r * row_bytes + g * $wb);
                    let (dw, mw) = f16_halves(heads_vector(wg, $wb, count));
                    let mw = if $min {
                        mw
                    } else {
                        _mm256_mul_ps(dw, _mm256_set1_ps(-$off))
                    };
                    acc_min[r] = _mm256_fmadd_ps(mw, sx, acc_min[r]);
                    prod[r] = _mm512_castps256_ps512(_mm256_mul_ps(dw, dx));
                }
                for p in 0..count.div_ceil(2) {
                    let (k0, k1) = (2 * p, (2 * p + 1).min(count - 1));
                    let bytes: __mmask64 = if FULL || 2 * p + 1 < count {
                        !0
                    } else {
                        (1u64 << 32) - 1
                    };
                    let xv = _mm512_maskz_loadu_epi8(bytes, q.add((g + k0) * QK).cast());
                    for r in 0..R {
                        let wg = w.add(r * row_bytes + g * $wb);
                        let wv = $unpack(wg.add(k0 * $wb), wg.add(k1 * $wb));
                        let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
                        let scale = _mm512_permutexvar_ps(idx[p], prod[r]);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
                    }
                }
            }

            let (w, q, d, s) = (w.as_ptr(), q.as_ptr(), d.as_ptr(), sum32.as_ptr());
            let mut sums = [0f32; ROWS];
            let v = match n_rows {
                1 => rows::<1>(nb, w, q, d, s),
                2 => rows::<2>(nb, w, q, d, s),
                3 => rows::<3>(nb, w, q, d, s),
                _ => rows::<4>(nb, w, q, d, s),
            };
            _mm_storeu_ps(sums.as_mut_ptr(), v);
            out.copy_from_slice(&sums[..n_rows]);
        }
    };
}

/// The lane sums of four vectors as one: `[sum(v0), sum(v1), sum(v2), sum(v3)]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn sum_lanes4(v: [__m256; 4]) -> __m128 {
    let s = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s))
}

row_kernel!(q4_0, weight_bytes: 18, min: false, off: 8.0, unpack: unpack_q4_0);
row_kernel!(q4_1, weight_bytes: 20, min: true, off: 0.0, unpack: unpack_q4_1);
row_kernel!(q5_0, weight_bytes: 22, min: false, off: 16.0, unpack: unpack_q5_0);
row_kernel!(q5_1, weight_bytes: 24, min: true, off: 0.0, unpack: unpack_q5_1);
row_kernel!(q8_0, weight_bytes: 34, min: false, off: 128.0, unpack: unpack_q8_0);
row_kernel!(iq4_nl, weight_bytes: 18, min: false, off: 128.0, unpack: unpack_iq4_nl);
