//! AMX-INT8 microkernel: 16 activation rows x 16 weight rows per tile product. Per sub-block of
//! `S` elements, `tdpbsud` multiplies the activations' i8 (16 rows x S bytes, read in place) by
//! the tile's u8 weights, which the unpacker already lays out as AMX's B operand `(S / 4, 16, 4)`.
//! The i32 products go through memory to AVX-512, which applies the (scale, min) pairs as the
//! VNNI kernel does; two tile register sets alternate so that one sub-block's product runs
//! while the previous one is scaled.
use super::{Acts, Tile, MR, NR};
use crate::amx::{tile_release, TileConfig};
use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;

/// tmm0/tmm1: i32 products (16 x 16); tmm2/tmm3: activations (16 x S i8); tmm4/tmm5: weights
/// (S / 4 x 64 u8).
const fn config(s: usize) -> TileConfig {
    let (c, a, b) = ((16, 64), (16, s as u16), ((s / 4) as u8, 64));
    TileConfig::new([c, c, a, a, b, b, (0, 0), (0, 0)])
}
static CONFIG_16: TileConfig = config(16);
static CONFIG_32: TileConfig = config(32);

/// One tile product: 16 rows of 16 i32, a row per activation row.
#[repr(C, align(64))]
struct Products([[i32; NR]; MR]);

macro_rules! tile_product {
    ($name:ident, $c:literal, $a:literal, $b:literal) => {
        /// `c = a . b` for `a` 16 x S i8 with rows `lda` bytes apart and `b` the tile's
        /// S / 4 x 64 u8 of one sub-block.
        #[inline(always)]
        unsafe fn $name(a: *const i8, lda: usize, b: *const u8, c: *mut Products) {
            asm!(
                concat!("tilezero ", $c),
                concat!("tileloadd ", $a, ", [{a} + {lda}*1]"),
                concat!("tileloadd ", $b, ", [{b} + {ldb}*1]"),
                concat!("tdpbsud ", $c, ", ", $a, ", ", $b),
                concat!("tilestored [{c} + {ldc}*1], ", $c),
                a = in(reg) a,
                lda = in(reg) lda,
                b = in(reg) b,
                ldb = in(reg) 64usize,
                c = in(reg) c,
                ldc = in(reg) 64usize,
                options(nostack),
            );
        }
    };
}
tile_product!(product_even, "tmm0", "tmm2", "tmm4");
tile_product!(product_odd, "tmm1", "tmm3", "tmm5");

/// `Microkernel` entry: the thread's tiles are configured once per call (a panel of rows) and
/// released at its end, so an idle worker carries no tile state.
pub(super) unsafe fn tile_rows(
    t: &Tile,
    a: &Acts,
    rows: Range<usize>,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let config = if t.sub == 16 { &CONFIG_16 } else { &CONFIG_32 };
    config.load();
    for m0 in rows.clone().step_by(MR) {
        let (mr, out) = ((rows.end - m0).min(MR), out.add((m0 - rows.start) * ld));
        if t.sub == 16 {
            group::<16>(t, a, m0, mr, out, ld, n_valid);
        } else {
            group::<32>(t, a, m0, mr, out, ld, n_valid);
        }
    }
    tile_release();
}

/// Rows `m0..m0 + mr` (`mr <= MR`; the activations are padded to whole groups of `MR`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
unsafe fn group<const S: usize>(
    t: &Tile,
    a: &Acts,
    m0: usize,
    mr: usize,
    out: *mut f32,
    ld: usize,
    n_valid: usize,
) {
    let (k, n_sub) = (a.k, a.k / S);
    let aq = a.q.as_ptr().add(m0 * k);
    let ad = a.d.as_ptr().add(m0 * (k / 32));
    let sums = if S == 16 { &a.sum16 } else { &a.sum32 };
    let asum = sums.as_ptr().add(m0 * n_sub);
    let mut products = [Products([[0; NR]; MR]), Products([[0; NR]; MR])];
    let p: [*mut Products; 2] = [&mut products[0], &mut products[1]];
    let product = |s: usize| {
        let (x, w) = (aq.add(s * S), t.q.as_ptr().add(s * S * NR));
        if s.is_multiple_of(2) {
            product_even(x, k, w, p[0]);
        } else {
            product_odd(x, k, w, p[1]);
        }
    };
    let mut acc = [_mm512_setzero_ps(); MR];
    product(0);
    for s in 0..n_sub {
        if s + 1 < n_sub {
            product(s + 1);
        }
        let dots = &(*p[s % 2]).0;
        let scale = _mm512_loadu_ps(t.scale.as_ptr().add(s * NR));
        let min = _mm512_loadu_ps(t.min.as_ptr().add(s * NR));
        for (r, acc) in acc.iter_mut().enumerate() {
            let f = _mm512_cvtepi32_ps(_mm512_load_si512(dots[r].as_ptr().cast()));
            let d = _mm512_set1_ps(*ad.add(r * (k / 32) + s * S / 32));
            *acc = _mm512_fmadd_ps(f, _mm512_mul_ps(scale, d), *acc);
            *acc = _mm512_fmadd_ps(min, _mm512_set1_ps(*asum.add(r * n_sub + s)), *acc);
        }
    }
    let mask: __mmask16 = if n_valid >= NR {
        !0
    } else {
        (1u16 << n_valid) - 1
    };
    for (r, v) in acc.iter().take(mr).enumerate() {
        _mm512_mask_storeu_ps(out.add(r * ld), mask, *v);
    }
}
