//! AVX2 tier: u8 x i8 products through `maddubs` (pairs to i16) and `madd` (pairs to i32), as
//! ggml's AVX2 kernels. Weight values stay within |w| <= 128 and activations within
//! |y| <= 127, so the i16 pair sums cannot saturate.
use super::x86::*;
use crate::kernels::VecDot;
use ishizuki_core::GgmlType;
use std::arch::x86_64::*;

pub(super) fn dot(ty: GgmlType) -> Option<VecDot> {
    use GgmlType::*;
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

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_maddubs(weights: __m256i, acts: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(weights, acts), _mm256_set1_epi16(1))
}

/// Q4_0 block (d, 16 nibble bytes): nibble - 8.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q4_0(b: *const u8) -> __m256i {
    _mm256_sub_epi8(nibbles(b.add(2)), _mm256_set1_epi8(8))
}

/// Q4_1 block (d, m, 16 nibble bytes): the nibble.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q4_1(b: *const u8) -> __m256i {
    nibbles(b.add(4))
}

/// Q5_0 block (d, qh, 16 nibble bytes): (nibble | fifth bit << 4) - 16, which is the nibble
/// where the fifth bit is set and `0xF0 | nibble` as i8 where it is clear.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q5_0(b: *const u8) -> __m256i {
    let clear = _mm256_andnot_si256(bit_bytes(b.add(2)), _mm256_set1_epi8(0xf0u8 as i8));
    _mm256_or_si256(nibbles(b.add(6)), clear)
}

/// Q5_1 block (d, m, qh, 16 nibble bytes): nibble | fifth bit << 4.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn unpack_q5_1(b: *const u8) -> __m256i {
    let high = _mm256_and_si256(bit_bytes(b.add(4)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles(b.add(8)), high)
}

/// Q8_0 block (d, 32 i8).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_q8_0(b: *const u8) -> __m256i {
    _mm256_loadu_si256(b.add(2).cast())
}

/// IQ4_NL block (d, 16 nibble bytes): table level of the nibble.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn unpack_iq4_nl(b: *const u8) -> __m256i {
    _mm256_shuffle_epi8(iq4nl_table(), nibbles(b.add(2)))
}

block_kernel!(q4_0, "avx2,fma,f16c", weight_bytes: 18, min: false, signed: true,
    unpack: unpack_q4_0, dot: dot_maddubs);
block_kernel!(q4_1, "avx2,fma,f16c", weight_bytes: 20, min: true, signed: false,
    unpack: unpack_q4_1, dot: dot_maddubs);
block_kernel!(q5_0, "avx2,fma,f16c", weight_bytes: 22, min: false, signed: true,
    unpack: unpack_q5_0, dot: dot_maddubs);
block_kernel!(q5_1, "avx2,fma,f16c", weight_bytes: 24, min: true, signed: false,
    unpack: unpack_q5_1, dot: dot_maddubs);
block_kernel!(q8_0, "avx2,fma,f16c", weight_bytes: 34, min: false, signed: true,
    unpack: unpack_q8_0, dot: dot_maddubs);
block_kernel!(iq4_nl, "avx2,fma,f16c", weight_bytes: 18, min: false, signed: true,
    unpack: unpack_iq4_nl, dot: dot_maddubs);
