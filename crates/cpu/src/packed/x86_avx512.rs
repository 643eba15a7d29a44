//! AVX-512 VNNI kernels over packed tiles: per sub-block, each 64-byte load of quants is one
//! `vpdpbusd` operand for all 16 rows (nibbles split by a shift and a mask), against the
//! activation row's 4 bytes broadcast; the 16 scales and mins convert from f16 as one vector.
use super::{k_mins_at, k_scales_at, Ahead, Kind, Packed, K_SUBS, NR, SUB};
use crate::gemm::Acts;
use crate::matmul::{prefetch_lines, PREFETCH_BYTES};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per kernel call (accumulators held in registers).
const MR: usize = 8;

tile_kernel_entry!([1, 2, 3, 4, 5, 6, 7]);

/// Activation rows `m0..m0 + R` against one tile of `BITS`-bit quants, with K-quant heads
/// per super-block when `KQ`, legacy heads with mins when `MINS` (else the min is
/// `-2^(BITS-1)` scales); `out` at the tile's first column of row `m0`, rows `n_out` apart.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")]
unsafe fn tile_rows<const BITS: u8, const KQ: bool, const MINS: bool, const R: usize>(
    p: &Packed,
    tile: usize,
    a: &Acts,
    m0: usize,
    out: *mut f32,
) {
    let n_sub = p.n_in / SUB;
    let kind = p.kind;
    let base = p.bytes().as_ptr().add(tile * p.tile_bytes());
    // `Kind::quants_at` and `heads_at` with the group's sub-blocks a constant (no division)
    let (subs, group_bytes, quant_bytes) = (
        if KQ { K_SUBS } else { 1 },
        kind.group_bytes(),
        kind.quant_bytes(),
    );
    debug_assert_eq!(subs, kind.group_subs());
    let ahead = Ahead::for_tile::<BITS, KQ, MINS>(p, base);
    let (mut d, mut neg_dmin) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (aq, ad, asum) = a.row_ptrs::<R>(m0, SUB);
    let aq = aq.map(<*const i8>::cast::<i32>);
    let low4 = _mm512_set1_epi8(0x0f);
    let high4 = _mm512_set1_epi8(0xf0_u8 as i8);
    let mut acc = [_mm512_setzero_ps(); R];
    for s in 0..n_sub {
        let group = base.add(s / subs * group_bytes);
        let sb = group.add(s % subs * quant_bytes);
        if m0 == 0 {
            ahead.fetch(s);
        }
        // two partial sums per row halve the chain of dependent `vpdpbusd`s
        let mut dot = [_mm512_setzero_si512(); R];
        let mut dot2 = [_mm512_setzero_si512(); R];
        // activation quad `j` of this sub-block, broadcast
        let x = |r: usize, j: usize| _mm512_set1_epi32(aq[r].add(s * SUB / 4 + j).read_unaligned());
        if BITS == 8 {
            for j in 0..4 {
                let w = _mm512_loadu_si512(sb.add(64 * j).cast());
                let w2 = _mm512_loadu_si512(sb.add(64 * (j + 4)).cast());
                for r in 0..R {
                    dot[r] = _mm512_dpbusd_epi32(dot[r], w, x(r, j));
                    dot2[r] = _mm512_dpbusd_epi32(dot2[r], w2, x(r, j + 4));
                }
            }
        } else {
            for j in 0..4 {
                let v = _mm512_loadu_si512(sb.add(64 * j).cast());
                let mut lo = _mm512_and_si512(v, low4);
                // 4-bit high nibbles stay in place, 16 times their value: one shift of the
                // sum below instead of one per load (5-bit ones take their fifth bit as 16)
                let mut hi = if BITS == 4 {
                    _mm512_and_si512(v, high4)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4)
                };
                if BITS == 5 {
                    let fifth = |jq: usize| sb.add(256 + 8 * jq).cast::<u64>().read_unaligned();
                    lo = _mm512_mask_add_epi8(lo, fifth(j), lo, _mm512_set1_epi8(16));
                    hi = _mm512_mask_add_epi8(hi, fifth(j + 4), hi, _mm512_set1_epi8(16));
                }
                for r in 0..R {
                    dot[r] = _mm512_dpbusd_epi32(dot[r], lo, x(r, j));
                    dot2[r] = _mm512_dpbusd_epi32(dot2[r], hi, x(r, j + 4));
                }
            }
        }
        let heads = group.add(subs * quant_bytes);
        let (scale, min) = if KQ {
            // d and -dmin once per super-block, times this sub-block's 6-bit scale and min
            let j = s % subs;
            if j == 0 {
                d = _mm512_cvtph_ps(_mm256_load_si256(heads.cast()));
                neg_dmin = _mm512_cvtph_ps(_mm256_load_si256(heads.add(2 * NR).cast()));
            }
            let bytes = |at: usize| {
                _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(heads.add(at).cast())))
            };
            (
                _mm512_mul_ps(d, bytes(k_scales_at(j))),
                _mm512_mul_ps(neg_dmin, bytes(k_mins_at(j))),
            )
        } else {
            let scale = _mm512_cvtph_ps(_mm256_load_si256(heads.cast()));
            let min = if MINS {
                _mm512_cvtph_ps(_mm256_load_si256(heads.add(2 * NR).cast()))
            } else {
                _mm512_mul_ps(scale, _mm512_set1_ps(-kind.offset()))
            };
            (scale, min)
        };
        for r in 0..R {
            let d = _mm512_mul_ps(scale, _mm512_set1_ps(*ad[r].add(s)));
            // a sum of 16x high nibbles is a multiple of 16: the shift is exact
            let high = if BITS == 4 {
                _mm512_srai_epi32::<4>(dot2[r])
            } else {
                dot2[r]
            };
            let dot = _mm512_add_epi32(dot[r], high);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[r]);
            acc[r] = _mm512_fmadd_ps(min, _mm512_set1_ps(*asum[r].add(s)), acc[r]);
        }
    }
    let valid = (p.n_out - tile * NR).min(NR);
    let mask: __mmask16 = if valid == NR { !0 } else { (1u16 << valid) - 1 };
    for (r, v) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(r * p.n_out), mask, *v);
    }
}
