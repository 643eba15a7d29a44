//! Kernels for the 256-element super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against
//! Q8_K activations. Each type has a scalar reference (integer sums per sub-block as ggml's
//! generic C), an AVX2 path (maddubs/madd) and an AVX-512 VNNI path (dpbusd, then dpwssd to apply
//! the sub-block scales). Every SIMD path feeds weights to the unsigned operand: offsets and mins
//! come back through the Q8_K `bsums` (sums of 16 activations).
use super::{QKernel, VecDot, MAX_ROWS};
use crate::simd::Tier;
use ishizuki_core::quant::{try_as_blocks, BlockQ8K, QK_K};
use ishizuki_core::{GgmlType, Result};

mod iq4xs;
mod q2k;
mod q3k;
mod q4k;
mod q5k;
mod q6k;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

/// The best kernel for weights of `ty` at or below `tier`, if `ty` is one of ours.
pub fn kernel(ty: GgmlType, tier: Tier) -> Option<QKernel> {
    let table: &[(Tier, VecDot)] = match ty {
        GgmlType::Q2_K => q2k::KERNELS,
        GgmlType::Q3_K => q3k::KERNELS,
        GgmlType::Q4_K => q4k::KERNELS,
        GgmlType::Q5_K => q5k::KERNELS,
        GgmlType::Q6_K => q6k::KERNELS,
        GgmlType::IQ4_XS => iq4xs::KERNELS,
        _ => return None,
    };
    let &(tier, dot) = table.iter().rev().find(|(t, _)| *t <= tier)?;
    Some(QKernel {
        act: GgmlType::Q8_K,
        dot,
        tier,
    })
}

/// One call's inputs as blocks: the weight row, `MAX_ROWS` activation rows (unused entries repeat
/// row 0) and the number of rows. Every length is checked here once so the kernels can index
/// without checks; a mismatch (a caller bug) turns the outputs into NaN rather than reading out
/// of bounds.
type View<'a, B> = (&'a [B], [&'a [BlockQ8K]; MAX_ROWS], usize);

fn view<'a, B>(
    n: usize,
    w: Result<&'a [B]>,
    xs: &[&'a [u8]],
    out: &mut [f32],
) -> Option<View<'a, B>> {
    let nb = n / QK_K;
    let rows = xs.len();
    let mut ys: [&[BlockQ8K]; MAX_ROWS] = [&[]; MAX_ROWS];
    let mut fits = n.is_multiple_of(QK_K)
        && (1..=MAX_ROWS).contains(&rows)
        && out.len() >= rows
        && w.as_ref().is_ok_and(|w| w.len() == nb);
    if fits {
        for (r, y) in ys.iter_mut().enumerate() {
            match try_as_blocks::<BlockQ8K>(xs[r.min(rows - 1)]) {
                Ok(blocks) if blocks.len() == nb => *y = blocks,
                _ => fits = false,
            }
        }
    }
    match w {
        Ok(w) if fits => Some((w, ys, rows)),
        _ => {
            out.fill(f32::NAN);
            None
        }
    }
}

/// Defines the `VecDot` entry point `$name`: validates lengths once, then runs
/// `$rows::<R>(weight_blocks, [activation rows; R], out)` for R = the number of rows, so each
/// unpacked weight block is reused by every row in registers.
macro_rules! vec_dot {
    ($name:ident, $block:ty, $rows:ident) => {
        pub(super) unsafe fn $name(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]) {
            let Some((w, ys, rows)) =
                super::view(n, ishizuki_core::quant::try_as_blocks::<$block>(w), xs, out)
            else {
                return;
            };
            // The caller guarantees the tier's instructions exist; `view` checked every length.
            #[allow(unused_unsafe)]
            unsafe {
                match rows {
                    1 => $rows::<1>(w, [ys[0]], out),
                    2 => $rows::<2>(w, [ys[0], ys[1]], out),
                    3 => $rows::<3>(w, [ys[0], ys[1], ys[2]], out),
                    _ => $rows::<4>(w, ys, out),
                }
            }
        }
    };
}
use vec_dot;

/// Q4_K / Q5_K 12-byte packed 6-bit (scale, min) pairs unpacked to 8 scales then 8 mins (ggml's
/// `utmp` shuffle).
#[inline(always)]
fn k4_scales_mins(packed: &[u8; 12]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (u0, u1, u2) = (word(0), word(1), word(2));
    let utmp = [
        u0 & KMASK1,
        (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4),
        u1 & KMASK1,
        ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, u) in out.chunks_exact_mut(4).zip(utmp) {
        o.copy_from_slice(&u.to_le_bytes());
    }
    out
}

/// Integer dot product of equally long i8 slices (weights already unpacked to signed values).
#[inline(always)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}
