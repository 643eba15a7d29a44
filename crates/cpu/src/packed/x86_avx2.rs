//! AVX2 kernels over packed tiles: each 64-byte run of a sub-block's quants is two halves of 8
//! rows; `vpmaddubsw` multiplies a half's 4 quants per row with the activation row's 4 bytes
//! broadcast and `vpmaddwd` sums the pairs (AVX2 has no `vpdpbusd`). 4- and 5-bit quants stay
//! far from the 16-bit pair sums' saturation; Q8_0's bytes (`q + 128`) go in signed, with
//! the activation's sign moved onto them by `vpsignb`, which also cancels its min.
use super::{k_mins_at, k_scales_at, Ahead, Kind, Packed, K_SUBS, NR, SUB};
use crate::gemm::Acts;
use crate::matmul::{prefetch_lines, PREFETCH_BYTES};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per kernel call (accumulators of both halves held in registers).
const MR: usize = 2;
/// Rows per half tile (one 256-bit vector of i32 lanes).
const HALF: usize = NR / 2;

tile_kernel_entry!([1]);

/// 32 bytes of 0x10 where bit `b` of `bits` is set (byte `b`), else 0: the fifth bits of a
/// half's 32 quants.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// `sum(pairs of u8 x i8)` per 32-bit lane, added to `acc`.
#[inline(always)]
unsafe fn dot_add(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(w, x);
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Activation rows `m0..m0 + R` against one tile of `BITS`-bit quants, as the AVX-512 kernel
/// (`KQ`: K-quant heads per super-block; `MINS`: legacy heads with mins, else the min is
/// `-2^(BITS-1)` scales); `out` at the tile's first column of row `m0`, rows `n_out` apart.
#[target_feature(enable = "avx2,fma,f16c")]
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
    let (subs, group_bytes, quant_bytes) = (
        if KQ { K_SUBS } else { 1 },
        kind.group_bytes(),
        kind.quant_bytes(),
    );
    debug_assert_eq!(subs, kind.group_subs());
    let ahead = Ahead::for_tile::<BITS, KQ, MINS>(p, base);
    let (mut d, mut neg_dmin) = ([_mm256_setzero_ps(); 2], [_mm256_setzero_ps(); 2]);
    let (aq, ad, asum) = a.row_ptrs::<R>(m0, SUB);
    let aq = aq.map(<*const i8>::cast::<i32>);
    let low4 = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for s in 0..n_sub {
        let group = base.add(s / subs * group_bytes);
        let sb = group.add(s % subs * quant_bytes);
        if m0 == 0 {
            ahead.fetch(s);
        }
        let mut dot = [[_mm256_setzero_si256(); 2]; R];
        // activation quad `j` of this sub-block, broadcast
        let x = |r: usize, j: usize| _mm256_set1_epi32(aq[r].add(s * SUB / 4 + j).read_unaligned());
        for (half, offset) in [0, 32].into_iter().enumerate() {
            if BITS == 8 {
                for j in 0..8 {
                    let w = _mm256_loadu_si256(sb.add(64 * j + offset).cast());
                    let w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                    let w_abs = _mm256_abs_epi8(w);
                    for (r, dot) in dot.iter_mut().enumerate() {
                        dot[half] = dot_add(dot[half], w_abs, _mm256_sign_epi8(x(r, j), w));
                    }
                }
                continue;
            }
            // per row, the 16-bit pair sums of the low and of the high quants
            let mut pairs = [(_mm256_setzero_si256(), _mm256_setzero_si256()); R];
            for j in 0..4 {
                let v = _mm256_loadu_si256(sb.add(64 * j + offset).cast());
                let mut lo = _mm256_and_si256(v, low4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low4);
                if BITS == 5 {
                    let fifth = |jq: usize| {
                        let mask = sb.add(256 + 8 * jq).cast::<u64>().read_unaligned();
                        fifth_bits((mask >> offset) as u32)
                    };
                    lo = _mm256_or_si256(lo, fifth(j));
                    hi = _mm256_or_si256(hi, fifth(j + 4));
                }
                for (r, (low, high)) in pairs.iter_mut().enumerate() {
                    *low = _mm256_add_epi16(*low, _mm256_maddubs_epi16(lo, x(r, j)));
                    *high = _mm256_add_epi16(*high, _mm256_maddubs_epi16(hi, x(r, j + 4)));
                }
            }
            // widen the pair sums once per half: 4 of them are at most 4 * 2 * 31 * 128 in
            // size (5-bit quants), 8 of 4-bit ones 8 * 2 * 15 * 128, both inside i16
            for (dot, (low, high)) in dot.iter_mut().zip(pairs) {
                let ones = _mm256_set1_epi16(1);
                dot[half] = if BITS == 4 {
                    _mm256_madd_epi16(_mm256_add_epi16(low, high), ones)
                } else {
                    _mm256_add_epi32(_mm256_madd_epi16(low, ones), _mm256_madd_epi16(high, ones))
                };
            }
        }
        let heads = group.add(subs * quant_bytes);
        let f16s =
            |at: usize, h: usize| _mm256_cvtph_ps(_mm_loadu_si128(heads.add(at + 16 * h).cast()));
        for h in 0..2 {
            let (scale, min) = if KQ {
                // d and -dmin once per super-block, times this sub-block's 6-bit scale and min
                let j = s % subs;
                if j == 0 {
                    (d[h], neg_dmin[h]) = (f16s(0, h), f16s(2 * NR, h));
                }
                let bytes = |at: usize| {
                    let b = _mm_loadl_epi64(heads.add(at + HALF * h).cast());
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b))
                };
                (
                    _mm256_mul_ps(d[h], bytes(k_scales_at(j))),
                    _mm256_mul_ps(neg_dmin[h], bytes(k_mins_at(j))),
                )
            } else {
                let scale = f16s(0, h);
                let min = if MINS {
                    f16s(2 * NR, h)
                } else if BITS == 8 {
                    // the signed dots already hold Q8_0's min (-128 scale)
                    _mm256_setzero_ps()
                } else {
                    _mm256_mul_ps(scale, _mm256_set1_ps(-kind.offset()))
                };
                (scale, min)
            };
            for r in 0..R {
                let d = _mm256_mul_ps(scale, _mm256_set1_ps(*ad[r].add(s)));
                let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][h]), d, acc[r][h]);
                acc[r][h] = _mm256_fmadd_ps(min, _mm256_set1_ps(*asum[r].add(s)), a);
            }
        }
    }
    let valid = (p.n_out - tile * NR).min(NR);
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (r, halves) in acc.iter().enumerate() {
        for (h, v) in halves.iter().enumerate() {
            let n = valid.saturating_sub(HALF * h) as i32;
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
            _mm256_maskstore_ps(out.add(r * p.n_out + HALF * h), mask, *v);
        }
    }
}
