//! AMX-BF16 microkernel: the tiles' weights are dequantized once per call to bf16 (AMX's B
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

/// Weight tiles per call: 2 x 2 blocks of 16 x 16 results (2 row groups x 2 weight tiles)
/// load each activation and weight tile once per two products, which halves the activation
/// traffic from L2 that bounds a 2 x 1 block.
pub(super) const TILES: usize = super::MAX_TILES;

/// tmm0-3: f32 results (group g, weight tile t at `2g + t`); tmm4/tmm5: the groups'
/// activations (16 x 32 bf16); tmm6/tmm7: the weight tiles (16 pair rows x 16 x 2 bf16).
static CONFIG: TileConfig = {
    let t = (16, 64);
    TileConfig::new([t; 8])
};

/// One block's results: 16 rows of 16 f32.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Results([[f32; NR]; MR]);

thread_local! {
    static WEIGHTS: RefCell<Vec<u16>> = const { RefCell::new(Vec::new()) };
}

/// `Microkernel` entry: up to 2 row groups x `tiles.len()` weight tiles per step. Activations
/// must be bf16, padded to whole groups of `MR` rows.
pub(super) unsafe fn tile_rows(
    tiles: &[Tile],
    a: &Acts,
    rows: Range<usize>,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let k = a.k;
    WEIGHTS.with_borrow_mut(|w| {
        w.resize(TILES * k * NR, 0);
        for (i, t) in tiles.iter().enumerate() {
            weights_to_bf16(t, &mut w[i * k * NR..][..k * NR]);
        }
        let b = [w.as_ptr(), w.as_ptr().add(k * NR)];
        CONFIG.load();
        let mut results = [Results([[0.0; NR]; MR]); 4];
        let mut m0 = rows.start;
        while m0 < rows.end {
            let groups = if rows.end - m0 > MR { 2 } else { 1 };
            // each group's tiles in one piece, one 1 KiB tile per step of k
            let x = [
                a.bf16.as_ptr().add(tiled_at(m0, 0, k)),
                a.bf16.as_ptr().add(tiled_at(m0 + MR, 0, k)),
            ];
            let c: [*mut Results; 4] = std::array::from_fn(|i| &mut results[i] as *mut _);
            match (groups, tiles.len()) {
                (2, 2) => products_2x2(x, b, k, c),
                (1, 2) => products_1x2([x[0]], b, k, [c[0], c[1]]),
                (2, _) => products_2x1(x, [b[0]], k, [c[0], c[2]]),
                _ => products_1x1([x[0]], [b[0]], k, [c[0]]),
            }
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

/// Tile products over all of `k` (one 32-element step per loop turn): `$loads` fetch the first
/// product's two tiles, `$dots` run the products with the other loads between them (each
/// product starts once its own tiles are in, not after every load of the step), `$stores`
/// write the results out.
macro_rules! products {
    ($name:ident, [$($a:ident),+], [$($b:ident),+], [$($c:ident),+],
     [$($zero:literal),+], [$($load:literal),+], [$($dot:literal),+], [$($store:literal),+]) => {
        #[inline(always)]
        unsafe fn $name(
            x: [*const u16; products!(@count $($a)+)],
            w: [*const u16; products!(@count $($b)+)],
            k: usize,
            c: [*mut Results; products!(@count $($c)+)],
        ) {
            let [$($a),+] = x;
            let [$($b),+] = w;
            let [$($c),+] = c;
            asm!(
                $(concat!("tilezero ", $zero),)+
                "2:",
                $($load,)+
                $($dot,)+
                $(concat!("add {", stringify!($a), "}, 1024"),)+
                $(concat!("add {", stringify!($b), "}, 1024"),)+
                "dec {n}",
                "jnz 2b",
                $($store,)+
                $($a = inout(reg) $a => _,)+
                $($b = inout(reg) $b => _,)+
                $($c = in(reg) $c,)+
                n = inout(reg) k / KSTEP => _,
                l64 = in(reg) 64usize,
                options(nostack),
            );
        }
    };
    (@count $($t:ident)+) => { 0 $(+ products!(@one $t))+ };
    (@one $t:ident) => { 1 };
}

products!(
    products_2x2,
    [a0, a1],
    [b0, b1],
    [c0, c1, c2, c3],
    ["tmm0", "tmm1", "tmm2", "tmm3"],
    [
        "tileloadd tmm4, [{a0} + {l64}*1]",
        "tileloadd tmm6, [{b0} + {l64}*1]"
    ],
    [
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm7, [{b1} + {l64}*1]",
        "tdpbf16ps tmm1, tmm4, tmm7",
        "tileloadd tmm5, [{a1} + {l64}*1]",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "tdpbf16ps tmm3, tmm5, tmm7"
    ],
    [
        "tilestored [{c0} + {l64}*1], tmm0",
        "tilestored [{c1} + {l64}*1], tmm1",
        "tilestored [{c2} + {l64}*1], tmm2",
        "tilestored [{c3} + {l64}*1], tmm3"
    ]
);
products!(
    products_1x2,
    [a0],
    [b0, b1],
    [c0, c1],
    ["tmm0", "tmm1"],
    [
        "tileloadd tmm4, [{a0} + {l64}*1]",
        "tileloadd tmm6, [{b0} + {l64}*1]"
    ],
    [
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm7, [{b1} + {l64}*1]",
        "tdpbf16ps tmm1, tmm4, tmm7"
    ],
    [
        "tilestored [{c0} + {l64}*1], tmm0",
        "tilestored [{c1} + {l64}*1], tmm1"
    ]
);
products!(
    products_2x1,
    [a0, a1],
    [b0],
    [c0, c2],
    ["tmm0", "tmm2"],
    [
        "tileloadd tmm6, [{b0} + {l64}*1]",
        "tileloadd tmm4, [{a0} + {l64}*1]"
    ],
    [
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm5, [{a1} + {l64}*1]",
        "tdpbf16ps tmm2, tmm5, tmm6"
    ],
    [
        "tilestored [{c0} + {l64}*1], tmm0",
        "tilestored [{c2} + {l64}*1], tmm2"
    ]
);
products!(
    products_1x1,
    [a0],
    [b0],
    [c0],
    ["tmm0"],
    [
        "tileloadd tmm6, [{b0} + {l64}*1]",
        "tileloadd tmm4, [{a0} + {l64}*1]"
    ],
    ["tdpbf16ps tmm0, tmm4, tmm6"],
    ["tilestored [{c0} + {l64}*1], tmm0"]
);

/// The first `n_rows` rows (group 0's, then group 1's) to `out`, `n_valid` columns each
/// (weight tile 0's 16, then tile 1's).
#[target_feature(enable = "avx512f")]
unsafe fn copy_out(
    results: &[Results; 4],
    n_rows: usize,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    for t in 0..n_valid.div_ceil(NR) {
        let valid = (n_valid - t * NR).min(NR);
        let mask: __mmask16 = if valid == NR { !0 } else { (1u16 << valid) - 1 };
        for r in 0..n_rows {
            let row = &results[2 * (r / MR) + t].0[r % MR];
            _mm512_mask_storeu_ps(
                out.add(r * ld + t * NR),
                mask,
                _mm512_loadu_ps(row.as_ptr()),
            );
        }
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
/// `vcvtne2ps2bf16` rounds to nearest even as `round_bf16` does; it also flushes f32
/// denormals, which no weight is (the smallest f16 scale is 6e-8) and AMX ignores anyway.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn weights_to_bf16(t: &Tile, out: &mut [u16]) {
    let k = t.q.len() / NR;
    debug_assert!(out.len() >= k * NR);
    let byte = _mm512_set1_epi32(0xff);
    // 16-bit element 2n of the result from `b`'s lane n, 2n + 1 from `a`'s lane n
    let interleave = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
    for j in 0..k / 4 {
        // lane n: elements 4j..4j + 4 of weight row n
        let quads = _mm512_loadu_si512(t.q.as_ptr().add(64 * j).cast());
        let s = 4 * j / t.sub;
        let scale = _mm512_loadu_ps(t.scale.as_ptr().add(s * NR));
        let min = _mm512_loadu_ps(t.min.as_ptr().add(s * NR));
        let element = |i: i32| {
            let q = _mm512_and_si512(_mm512_srlv_epi32(quads, _mm512_set1_epi32(8 * i)), byte);
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), scale, min)
        };
        let pair = |i: i32| {
            let both: __m512i =
                std::mem::transmute(_mm512_cvtne2ps_pbh(element(i + 1), element(i)));
            _mm512_permutexvar_epi16(interleave, both)
        };
        _mm512_storeu_si512(out.as_mut_ptr().add(64 * j).cast(), pair(0));
        _mm512_storeu_si512(out.as_mut_ptr().add(64 * j + 32).cast(), pair(2));
    }
}

/// Where element `e` of activation row `m` goes in `Acts::bf16` for rows of `k`: row group
/// `m / MR`, then 32-element step `e / 32`, then the tile's row `m % MR`.
pub(super) fn tiled_at(m: usize, e: usize, k: usize) -> usize {
    ((m / MR * (k / KSTEP) + e / KSTEP) * MR + m % MR) * KSTEP + e % KSTEP
}

/// Row `m` of the activations, `x`, rounded to bf16 into the tiled `out` (`tiled_at`).
/// Unsafe: `out` must hold row `m`'s tiles.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_to_bf16_tiled(x: &[f32], m: usize, out: *mut u16) {
    let k = x.len();
    for (s, x) in x.chunks_exact(KSTEP).enumerate() {
        let o = out.add(tiled_at(m, s * KSTEP, k));
        for h in 0..2 {
            let b = round_bf16(_mm512_loadu_ps(x.as_ptr().add(16 * h)));
            _mm256_storeu_si256(o.add(16 * h).cast(), _mm512_cvtepi32_epi16(b));
        }
    }
}
