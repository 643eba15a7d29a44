//! AVX-512 single-row (decode) kernels for the 32-element block types against the GEMM's
//! activation form (i8 quants contiguous, f32 scale and scaled sum per 32). Two blocks fill one
//! 512-bit vector: weights unpack to u8 (signed types carry an offset), one `vpdpbusd` per pair,
//! and the pair's two scales come from one permute of the group's scale products. Offsets and
//! mins go through the activation sums once per group of 8 blocks.
use super::x86::{f16_halves, heads_vector, hsum, GROUP};
use super::{RowDot, QK};
use std::arch::x86_64::*;

/// The kernel for `ty`; `gather` picks hardware gathers for the block scales (fast unless the
/// CPU's gather data sampling mitigation is on) over scalar loads and inserts.
pub(super) fn row_dot(ty: ishizuki_core::GgmlType, gather: bool) -> Option<RowDot> {
    use ishizuki_core::GgmlType::*;
    macro_rules! pick {
        ($k:ident) => {
            if gather {
                $k::<true>
            } else {
                $k::<false>
            }
        };
    }
    Some(match ty {
        Q4_0 => pick!(q4_0),
        Q4_1 => pick!(q4_1),
        Q5_0 => pick!(q5_0),
        Q5_1 => pick!(q5_1),
        Q8_0 => pick!(q8_0),
        IQ4_NL => pick!(iq4_nl),
        _ => return None,
    })
}

/// The f16 pairs at the start of `count` <= GROUP blocks of `stride` bytes at `p`, one block per
/// dword lane (lanes past `count` zero).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn block_heads<const GATHER: bool>(p: *const u8, stride: i32, count: usize) -> __m256i {
    if GATHER && count == GROUP {
        let offsets = _mm256_mullo_epi32(
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            _mm256_set1_epi32(stride),
        );
        return _mm256_i32gather_epi32::<1>(p.cast(), offsets);
    }
    heads_vector(p, stride as usize, count)
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
/// is a min (else the weights carry offset `$off`, whose term is `-off * d * sum`).
macro_rules! row_kernel {
    ($entry:ident, weight_bytes: $wb:literal, min: $min:literal, off: $off:literal, unpack: $unpack:ident) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        unsafe fn $entry<const GATHER: bool>(
            n: usize,
            w: &[u8],
            q: &[i8],
            d: &[f32],
            sum32: &[f32],
        ) -> f32 {
            let nb = n / QK;
            if !n.is_multiple_of(QK)
                || w.len() != nb * $wb
                || q.len() != n
                || d.len() != nb
                || sum32.len() != nb
            {
                return f32::NAN;
            }
            let (w, q) = (w.as_ptr(), q.as_ptr());
            let idx: [__m512i; GROUP / 2] = std::array::from_fn(|p| {
                let p = 2 * p as i32;
                _mm512_inserti64x4::<1>(_mm512_set1_epi32(p), _mm256_set1_epi32(p + 1))
            });
            let mut acc = [_mm512_setzero_ps(); 2];
            let mut acc_min = _mm256_setzero_ps();
            let mut g = 0;
            while g < nb {
                let count = (nb - g).min(GROUP);
                let lanes: __mmask8 = if count == GROUP {
                    !0
                } else {
                    (1u8 << count) - 1
                };
                let wg = w.add(g * $wb);
                let (dw, mw) = f16_halves(block_heads::<GATHER>(wg, $wb, count));
                let dx = _mm256_maskz_loadu_ps(lanes, d.as_ptr().add(g));
                let sx = _mm256_maskz_loadu_ps(lanes, sum32.as_ptr().add(g));
                let mw = if $min {
                    mw
                } else {
                    _mm256_mul_ps(dw, _mm256_set1_ps(-$off))
                };
                acc_min = _mm256_fmadd_ps(mw, sx, acc_min);
                let prod = _mm512_castps256_ps512(_mm256_mul_ps(dw, dx));
                for p in 0..count.div_ceil(2) {
                    let (k0, k1) = (2 * p, (2 * p + 1).min(count - 1));
                    let wv = $unpack(wg.add(k0 * $wb), wg.add(k1 * $wb));
                    let bytes: __mmask64 = if 2 * p + 1 < count {
                        !0
                    } else {
                        (1u64 << 32) - 1
                    };
                    let xv = _mm512_maskz_loadu_epi8(bytes, q.add((g + k0) * QK).cast());
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
                    let scale = _mm512_permutexvar_ps(idx[p], prod);
                    acc[p % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[p % 2]);
                }
                g += GROUP;
            }
            _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) + hsum(acc_min)
        }
    };
}

row_kernel!(q4_0, weight_bytes: 18, min: false, off: 8.0, unpack: unpack_q4_0);
row_kernel!(q4_1, weight_bytes: 20, min: true, off: 0.0, unpack: unpack_q4_1);
row_kernel!(q5_0, weight_bytes: 22, min: false, off: 16.0, unpack: unpack_q5_0);
row_kernel!(q5_1, weight_bytes: 24, min: true, off: 0.0, unpack: unpack_q5_1);
row_kernel!(q8_0, weight_bytes: 34, min: false, off: 128.0, unpack: unpack_q8_0);
row_kernel!(iq4_nl, weight_bytes: 18, min: false, off: 128.0, unpack: unpack_iq4_nl);
