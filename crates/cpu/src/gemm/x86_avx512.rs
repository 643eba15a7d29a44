//! AVX-512 VNNI microkernel: `R` activation rows x 16 weight rows. Per 4 elements one weight
//! vector (16 rows x 4 u8) meets each row's 4 activation bytes broadcast from memory in one
//! `vpdpbusd`; per sub-block the i32 sums become f32 with the weights' scale vector times the
//! activation scale, plus the weights' min vector times the activation sum.
use super::{Acts, Tile, NR};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per call of the inner kernel (accumulators held in registers).
const MR: usize = 8;

/// `Microkernel` entry: groups of `MR` rows, dispatched on the sub-block size and row count.
pub(super) unsafe fn tile_rows(
    tiles: &[Tile],
    a: &Acts,
    rows: Range<usize>,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let t = &tiles[0];
    for m0 in rows.clone().step_by(MR) {
        let out = out.add((m0 - rows.start) * ld);
        group_rows(t, a, m0, (rows.end - m0).min(MR), out, ld, n_valid);
    }
}

unsafe fn group_rows(
    t: &Tile,
    a: &Acts,
    m0: usize,
    rows: usize,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    macro_rules! go {
        ($s:literal) => {
            match rows {
                1 => rows_s::<$s, 1>(t, a, m0, out, ld, n_valid),
                2 => rows_s::<$s, 2>(t, a, m0, out, ld, n_valid),
                3 => rows_s::<$s, 3>(t, a, m0, out, ld, n_valid),
                4 => rows_s::<$s, 4>(t, a, m0, out, ld, n_valid),
                5 => rows_s::<$s, 5>(t, a, m0, out, ld, n_valid),
                6 => rows_s::<$s, 6>(t, a, m0, out, ld, n_valid),
                7 => rows_s::<$s, 7>(t, a, m0, out, ld, n_valid),
                _ => rows_s::<$s, MR>(t, a, m0, out, ld, n_valid),
            }
        };
    }
    if t.sub == 16 {
        go!(16)
    } else {
        go!(32)
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn rows_s<const S: usize, const R: usize>(
    t: &Tile,
    a: &Acts,
    m0: usize,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let k = a.k;
    let (aq, ad, asum) = a.row_ptrs::<R>(m0, S);
    let (wq, ws, wm) = (t.q.as_ptr(), t.scale.as_ptr(), t.min.as_ptr());
    let mut acc = [_mm512_setzero_ps(); R];
    for s in 0..k / S {
        let mut dots = [_mm512_setzero_si512(); R];
        let w_sub = wq.add(s * S * NR);
        for kq in 0..S / 4 {
            let w = _mm512_loadu_si512(w_sub.add(kq * 4 * NR).cast());
            for r in 0..R {
                let x = aq[r].add(s * S + 4 * kq).cast::<i32>().read_unaligned();
                dots[r] = _mm512_dpbusd_epi32(dots[r], w, _mm512_set1_epi32(x));
            }
        }
        let scale = _mm512_loadu_ps(ws.add(s * NR));
        let min = _mm512_loadu_ps(wm.add(s * NR));
        for r in 0..R {
            let d = _mm512_set1_ps(*ad[r].add(s * S / 32));
            let f = _mm512_cvtepi32_ps(dots[r]);
            acc[r] = _mm512_fmadd_ps(f, _mm512_mul_ps(scale, d), acc[r]);
            acc[r] = _mm512_fmadd_ps(min, _mm512_set1_ps(*asum[r].add(s)), acc[r]);
        }
    }
    let mask: __mmask16 = if n_valid >= NR {
        !0
    } else {
        (1u16 << n_valid) - 1
    };
    for (r, v) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(r * ld), mask, *v);
    }
}
