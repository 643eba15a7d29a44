//! AVX-512 tier: VNNI `vpdpbusd` does the u8 x i8 products and the sums of four into i32 in
//! one instruction; the Q5 fifth bits go through a mask register.
use super::x86::*;
use super::x86_avx2::{unpack_iq4_nl, unpack_q4_0, unpack_q4_1, unpack_q8_0};
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

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
unsafe fn dot_vnni(weights: __m256i, acts: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), weights, acts)
}

/// Bit j of the little-endian u32 at `p`, as a byte mask.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
unsafe fn bit_mask(p: *const u8) -> __mmask32 {
    p.cast::<u32>().read_unaligned()
}

/// Q5_0 block (d, qh, 16 nibble bytes): (nibble | fifth bit << 4) - 16.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
unsafe fn unpack_q5_0(b: *const u8) -> __m256i {
    let low = nibbles(b.add(6));
    _mm256_mask_sub_epi8(low, !bit_mask(b.add(2)), low, _mm256_set1_epi8(16))
}

/// Q5_1 block (d, m, qh, 16 nibble bytes): nibble | fifth bit << 4.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
#[inline]
unsafe fn unpack_q5_1(b: *const u8) -> __m256i {
    let low = nibbles(b.add(8));
    _mm256_mask_add_epi8(low, bit_mask(b.add(4)), low, _mm256_set1_epi8(16))
}

block_kernel!(q4_0, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 18, min: false, signed: true, unpack: unpack_q4_0, dot: dot_vnni);
block_kernel!(q4_1, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 20, min: true, signed: false, unpack: unpack_q4_1, dot: dot_vnni);
block_kernel!(q5_0, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 22, min: false, signed: true, unpack: unpack_q5_0, dot: dot_vnni);
block_kernel!(q5_1, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 24, min: true, signed: false, unpack: unpack_q5_1, dot: dot_vnni);
block_kernel!(q8_0, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 34, min: false, signed: true, unpack: unpack_q8_0, dot: dot_vnni);
block_kernel!(iq4_nl, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni",
    weight_bytes: 18, min: false, signed: true, unpack: unpack_iq4_nl, dot: dot_vnni);
