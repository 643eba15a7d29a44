//! AVX-512 VNNI kernels over packed tiles: per sub-block, each 64-byte load of quants is one
//! `vpdpbusd` operand for all 16 rows (nibbles split by a shift and a mask), against the
//! activation row's 4 bytes broadcast; the 16 scales and mins convert from f16 as one vector.
use super::{Kind, Packed, NR, SUB};
use crate::gemm::Acts;
use crate::matmul::{prefetch, PREFETCH_BYTES};
use std::arch::x86_64::*;
use std::ops::Range;

/// `TileKernel` entry: dispatches on the quant kind and the number of activation rows.
pub(super) unsafe fn tiles(p: &Packed, tiles: Range<usize>, a: &Acts, rows: usize, out: *mut f32) {
    macro_rules! go {
        ($kind:literal) => {
            match rows {
                1 => rows_k::<$kind, 1>(p, tiles, a, out),
                2 => rows_k::<$kind, 2>(p, tiles, a, out),
                3 => rows_k::<$kind, 3>(p, tiles, a, out),
                _ => rows_k::<$kind, 4>(p, tiles, a, out),
            }
        };
    }
    match p.kind {
        Kind::Nibbles => go!(4),
        Kind::Nibbles5 => go!(5),
        Kind::Bytes => go!(8),
    }
}

/// `R` activation rows against tiles of `BITS`-bit quants.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c")]
unsafe fn rows_k<const BITS: u8, const R: usize>(
    p: &Packed,
    tiles: Range<usize>,
    a: &Acts,
    out: *mut f32,
) {
    let (k, n_sub) = (p.n_in, p.n_in / SUB);
    let (sub_bytes, quant_bytes) = (p.kind.sub_bytes(), p.kind.quant_bytes());
    let tile_bytes = p.tile_bytes();
    let data = p.bytes();
    let aq: [*const i32; R] = std::array::from_fn(|r| a.q.as_ptr().add(r * k).cast());
    let ad: [*const f32; R] = std::array::from_fn(|r| a.d.as_ptr().add(r * n_sub));
    let asum: [*const f32; R] = std::array::from_fn(|r| a.sum32.as_ptr().add(r * n_sub));
    let low4 = _mm512_set1_epi8(0x0f);
    for tile in tiles.clone() {
        let base = data.as_ptr().add(tile * tile_bytes);
        prefetch(data, tile * tile_bytes + PREFETCH_BYTES, tile_bytes);
        let mut acc = [_mm512_setzero_ps(); R];
        for s in 0..n_sub {
            let sb = base.add(s * sub_bytes);
            let mut dot = [_mm512_setzero_si512(); R];
            // activation quad `j` of this sub-block, broadcast
            let x =
                |r: usize, j: usize| _mm512_set1_epi32(aq[r].add(s * SUB / 4 + j).read_unaligned());
            if BITS == 8 {
                for j in 0..8 {
                    let w = _mm512_load_si512(sb.add(64 * j).cast());
                    for (r, dot) in dot.iter_mut().enumerate() {
                        *dot = _mm512_dpbusd_epi32(*dot, w, x(r, j));
                    }
                }
            } else {
                for j in 0..4 {
                    let v = _mm512_load_si512(sb.add(64 * j).cast());
                    let mut lo = _mm512_and_si512(v, low4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low4);
                    if BITS == 5 {
                        let fifth = |jq: usize| sb.add(256 + 8 * jq).cast::<u64>().read_unaligned();
                        lo = _mm512_mask_add_epi8(lo, fifth(j), lo, _mm512_set1_epi8(16));
                        hi = _mm512_mask_add_epi8(hi, fifth(j + 4), hi, _mm512_set1_epi8(16));
                    }
                    for (r, dot) in dot.iter_mut().enumerate() {
                        *dot = _mm512_dpbusd_epi32(*dot, lo, x(r, j));
                        *dot = _mm512_dpbusd_epi32(*dot, hi, x(r, j + 4));
                    }
                }
            }
            let heads = sb.add(quant_bytes);
            let scale = _mm512_cvtph_ps(_mm256_load_si256(heads.cast()));
            let min = _mm512_cvtph_ps(_mm256_load_si256(heads.add(2 * NR).cast()));
            for r in 0..R {
                let d = _mm512_mul_ps(scale, _mm512_set1_ps(*ad[r].add(s)));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), d, acc[r]);
                acc[r] = _mm512_fmadd_ps(min, _mm512_set1_ps(*asum[r].add(s)), acc[r]);
            }
        }
        let col = (tile - tiles.start) * NR;
        let valid = (p.n_out - tile * NR).min(NR);
        let mask: __mmask16 = if valid == NR { !0 } else { (1u16 << valid) - 1 };
        for (r, v) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(out.add(r * p.n_out + col), mask, *v);
        }
    }
}
