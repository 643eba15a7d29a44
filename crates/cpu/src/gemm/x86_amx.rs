//! AMX-BF16 microkernel: the tile's weights are dequantized once per call to bf16 (AMX's B
//! layout `(k / 2, 16, 2)`), the activations were rounded to bf16 once per GEMM, and
//! `tdpbf16ps` accumulates in f32 tile registers over the whole of k. Unlike the integer
//! kernels there is nothing to scale per sub-block, so AVX-512 only converts the weights and
//! copies out the finished 16 x 16 results.
use super::{Acts, Tile, MR, NR};
use crate::amx::{tile_release, TileConfig};
use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::ops::Range;

/// Elements of k per tile product (32 bf16 = one 64-byte tile row).
const KSTEP: usize = 32;

/// tmm0/tmm1: f32 results of two row groups; tmm2/tmm3: their activations (16 x 32 bf16);
/// tmm4: weights (16 pair rows x 16 columns x 2 bf16).
static CONFIG: TileConfig = {
    let t = (16, 64);
    TileConfig::new([t, t, t, t, t, (0, 0), (0, 0), (0, 0)])
};

/// One group's results: 16 rows of 16 f32.
#[repr(C, align(64))]
struct Results([[f32; NR]; MR]);

thread_local! {
    static WEIGHTS: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// `Microkernel` entry: pairs of 16-row groups share each weight tile load; a last single
/// group runs alone. Activations must be bf16, padded to whole groups of `MR` rows.
pub(super) unsafe fn tile_rows(
    t: &Tile,
    a: &Acts,
    rows: Range<usize>,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    WEIGHTS.with_borrow_mut(|w| {
        w.resize(a.k * NR, 0);
        weights_to_bf16(t, w);
        CONFIG.load();
        let mut results = [Results([[0.0; NR]; MR]), Results([[0.0; NR]; MR])];
        let mut m0 = rows.start;
        while m0 < rows.end {
            let pair = rows.end - m0 > MR;
            let x = a.bf16.as_ptr().add(m0 * a.k);
            let c: [*mut Results; 2] = [&mut results[0], &mut results[1]];
            if pair {
                products_pair(x, a.k, w.as_ptr(), c);
            } else {
                products_single(x, a.k, w.as_ptr(), c[0]);
            }
            let groups = if pair { 2 } else { 1 };
            let n_rows = (rows.end - m0).min(groups * MR);
            copy_out(
                &results,
                n_rows,
                out.add((m0 - rows.start) * ld),
                ld,
                n_valid,
            );
            m0 += groups * MR;
        }
        tile_release();
    });
}

/// Two groups of 16 activation rows (`x`, the second 16 rows below) times the bf16 weight
/// tile `w`, over all `k`, into `c[0]` and `c[1]`.
#[inline(always)]
unsafe fn products_pair(x: *const u16, k: usize, w: *const u16, c: [*mut Results; 2]) {
    let lda = 2 * k;
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "2:",
        "tileloadd tmm4, [{w} + {ldb}*1]",
        "tileloadd tmm2, [{a0} + {lda}*1]",
        "tileloadd tmm3, [{a1} + {lda}*1]",
        "tdpbf16ps tmm0, tmm2, tmm4",
        "tdpbf16ps tmm1, tmm3, tmm4",
        "add {w}, 1024",
        "add {a0}, 64",
        "add {a1}, 64",
        "dec {n}",
        "jnz 2b",
        "tilestored [{c0} + {ldc}*1], tmm0",
        "tilestored [{c1} + {ldc}*1], tmm1",
        w = inout(reg) w => _,
        a0 = inout(reg) x => _,
        a1 = inout(reg) x.add(MR * k) => _,
        n = inout(reg) k / KSTEP => _,
        lda = in(reg) lda,
        ldb = in(reg) 64usize,
        c0 = in(reg) c[0],
        c1 = in(reg) c[1],
        ldc = in(reg) 64usize,
        options(nostack),
    );
}

/// One group of 16 activation rows times the weight tile, into `c`.
#[inline(always)]
unsafe fn products_single(x: *const u16, k: usize, w: *const u16, c: *mut Results) {
    asm!(
        "tilezero tmm0",
        "2:",
        "tileloadd tmm4, [{w} + {ldb}*1]",
        "tileloadd tmm2, [{a0} + {lda}*1]",
        "tdpbf16ps tmm0, tmm2, tmm4",
        "add {w}, 1024",
        "add {a0}, 64",
        "dec {n}",
        "jnz 2b",
        "tilestored [{c0} + {ldc}*1], tmm0",
        w = inout(reg) w => _,
        a0 = inout(reg) x => _,
        n = inout(reg) k / KSTEP => _,
        lda = in(reg) 2 * k,
        ldb = in(reg) 64usize,
        c0 = in(reg) c,
        ldc = in(reg) 64usize,
        options(nostack),
    );
}

/// The first `n_rows` rows (of the two groups, in order) to `out`, `n_valid` columns each.
#[target_feature(enable = "avx512f")]
unsafe fn copy_out(
    results: &[Results; 2],
    n_rows: usize,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let mask: __mmask16 = if n_valid >= NR {
        !0
    } else {
        (1u16 << n_valid) - 1
    };
    for r in 0..n_rows {
        let row = &results[r / MR].0[r % MR];
        _mm512_mask_storeu_ps(out.add(r * ld), mask, _mm512_loadu_ps(row.as_ptr()));
    }
}

/// bf16 bits of 16 floats, rounded to nearest even (NaN stays a quiet NaN), in the low half
/// of each 32-bit lane.
#[inline(always)]
unsafe fn round_bf16(v: __m512) -> __m512i {
    let bits = _mm512_castps_si512(v);
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(bits), _mm512_set1_epi32(1));
    let rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    _mm512_mask_mov_epi32(
        _mm512_srli_epi32::<16>(rounded),
        nan,
        _mm512_set1_epi32(0x7fc0),
    )
}

/// The tile's weights `scale * q + min` (one rounding, then to bf16) in AMX's B layout: pair
/// row `p` holds, for each of the 16 weight rows, elements `2p` and `2p + 1`.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn weights_to_bf16(t: &Tile, out: &mut [u16]) {
    let k = t.q.len() / NR;
    debug_assert!(out.len() >= k * NR);
    let byte = _mm512_set1_epi32(0xff);
    for j in 0..k / 4 {
        // lane n: elements 4j..4j + 4 of weight row n
        let quads = _mm512_loadu_si512(t.q.as_ptr().add(64 * j).cast());
        let s = 4 * j / t.sub;
        let scale = _mm512_loadu_ps(t.scale.as_ptr().add(s * NR));
        let min = _mm512_loadu_ps(t.min.as_ptr().add(s * NR));
        let element = |i: u32| {
            let q = _mm512_and_si512(
                _mm512_srlv_epi32(quads, _mm512_set1_epi32(8 * i as i32)),
                byte,
            );
            round_bf16(_mm512_fmadd_ps(_mm512_cvtepi32_ps(q), scale, min))
        };
        let pair = |i: u32| _mm512_or_si512(element(i), _mm512_slli_epi32::<16>(element(i + 1)));
        _mm512_storeu_si512(out.as_mut_ptr().add(64 * j).cast(), pair(0));
        _mm512_storeu_si512(out.as_mut_ptr().add(64 * j + 32).cast(), pair(2));
    }
}

/// `x` rounded to bf16, as the GEMM stores the activations.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_to_bf16(x: &[f32], out: &mut [u16]) {
    for (x, o) in x.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        let b = round_bf16(_mm512_loadu_ps(x.as_ptr()));
        _mm256_storeu_si256(o.as_mut_ptr().cast(), _mm512_cvtepi32_epi16(b));
    }
}
