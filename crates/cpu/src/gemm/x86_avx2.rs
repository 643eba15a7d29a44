//! AVX2 microkernel: `R` activation rows x one half (8 rows) of a weight tile. AVX2 has no
//! `vpdpbusd`: per 4 elements `vpmaddubsw` multiplies the 8 rows' 4 weights with the row's 4
//! activation bytes and `vpmaddwd` sums the pairs. `vpmaddubsw` saturates its 16-bit pair sums,
//! so the weights go in signed (`q - 128`, at most 128 in magnitude, with the activation's sign
//! moved onto them by `vpsignb`): no pair sum passes 2 x 128 x 127, for every type, and the
//! offset moves into the min term (`min + 128 scale`).
use super::{Acts, Tile, NR};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per call of the inner kernel (accumulators held in registers).
const MR: usize = 4;
/// Weight rows per half tile (one 256-bit vector of i32 lanes).
const HALF: usize = NR / 2;

/// `Microkernel` entry: each half of the tile, groups of `MR` rows, dispatched on the sub-block
/// size and row count.
pub(super) unsafe fn tile_rows(
    tiles: &[Tile],
    a: &Acts,
    rows: Range<usize>,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let t = &tiles[0];
    for half in 0..n_valid.div_ceil(HALF).min(2) {
        let valid = (n_valid - half * HALF).min(HALF);
        for m0 in rows.clone().step_by(MR) {
            let out = out.add((m0 - rows.start) * ld + half * HALF);
            let n = (rows.end - m0).min(MR);
            macro_rules! go {
                ($s:literal) => {
                    match n {
                        1 => rows_s::<$s, 1>(t, a, half, m0, out, ld, valid),
                        2 => rows_s::<$s, 2>(t, a, half, m0, out, ld, valid),
                        3 => rows_s::<$s, 3>(t, a, half, m0, out, ld, valid),
                        _ => rows_s::<$s, MR>(t, a, half, m0, out, ld, valid),
                    }
                };
            }
            if t.sub == 16 {
                go!(16)
            } else {
                go!(32)
            }
        }
    }
}

/// Activation rows `m0..m0 + R` against weight rows `8 half..8 half + 8` of the tile, whose
/// first `valid` results are stored at `out` (rows `ld` apart).
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_s<const S: usize, const R: usize>(
    t: &Tile,
    a: &Acts,
    half: usize,
    m0: usize,
    out: *mut f32,
    ld: usize,
    valid: usize,
) {
    let k = a.k;
    let (aq, ad, asum) = a.row_ptrs::<R>(m0, S);
    // this half's 8 rows x 4 bytes of each quad, its 8 scales and mins of each sub-block
    let wq = t.q.as_ptr().add(4 * HALF * half);
    let (ws, wm) = (
        t.scale.as_ptr().add(HALF * half),
        t.min.as_ptr().add(HALF * half),
    );
    let (ones, offset) = (_mm256_set1_epi16(1), _mm256_set1_epi8(-128));
    let mut acc = [_mm256_setzero_ps(); R];
    for s in 0..k / S {
        let mut dots = [_mm256_setzero_si256(); R];
        let w_sub = wq.add(s * S * NR);
        for kq in 0..S / 4 {
            let w = _mm256_xor_si256(_mm256_loadu_si256(w_sub.add(kq * 4 * NR).cast()), offset);
            let w_abs = _mm256_abs_epi8(w);
            for r in 0..R {
                let x = _mm256_set1_epi32(aq[r].add(s * S + 4 * kq).cast::<i32>().read_unaligned());
                let pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
                dots[r] = _mm256_add_epi32(dots[r], _mm256_madd_epi16(pairs, ones));
            }
        }
        let scale = _mm256_loadu_ps(ws.add(s * NR));
        // the dots are of q - 128: the 128 goes into the min
        let min = _mm256_fmadd_ps(
            scale,
            _mm256_set1_ps(128.0),
            _mm256_loadu_ps(wm.add(s * NR)),
        );
        for r in 0..R {
            let d = _mm256_set1_ps(*ad[r].add(s * S / 32));
            let f = _mm256_cvtepi32_ps(dots[r]);
            acc[r] = _mm256_fmadd_ps(f, _mm256_mul_ps(scale, d), acc[r]);
            acc[r] = _mm256_fmadd_ps(min, _mm256_set1_ps(*asum[r].add(s)), acc[r]);
        }
    }
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid as i32), lanes);
    for (r, v) in acc.iter().enumerate() {
        _mm256_maskstore_ps(out.add(r * ld), mask, *v);
    }
}
