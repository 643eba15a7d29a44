//! Kernels for the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL.
//!
//! Every tier computes, per block, an exact integer dot product of the 32 weight values with
//! the 32 activation values and scales it in f32 as ggml does, so tiers differ only in the
//! order the per-block f32 terms are summed.
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
mod x86_gemv512;

#[cfg(test)]
mod tests;

use super::{QKernel, VecDot, MAX_ROWS};
use crate::simd::Tier;
use ishizuki_core::GgmlType;

/// Elements per block of every type here.
const QK: usize = 32;

pub fn kernel(ty: GgmlType, tier: Tier) -> Option<QKernel> {
    use GgmlType::*;
    let act = match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        _ => return None,
    };
    let (dot, tier) = best_dot(ty, tier)?;
    Some(QKernel { act, dot, tier })
}

/// `out[r] = dot(w_r, x)` for `out.len()` (1..=`ROWS`) consecutive weight rows `w` of `n`
/// elements and activations in the GEMM's form: quants `q` with per-32 scales `d` and scaled
/// sums `sum32`. Unsafe: the tier's instructions must exist; slices that do not hold exactly
/// those rows give NaN.
pub type RowDot =
    unsafe fn(n: usize, w: &[u8], q: &[i8], d: &[f32], sum32: &[f32], out: &mut [f32]);

/// Weight rows one `RowDot` call handles (sharing activation loads and the final reduction).
pub const ROWS: usize = 4;

/// The single-row kernel against GEMM-form activations for weights of `ty`, if this tier has
/// one (AVX-512 only; lower tiers keep the block-format kernels).
pub fn row_dot(ty: GgmlType, tier: Tier) -> Option<RowDot> {
    #[cfg(target_arch = "x86_64")]
    if tier >= Tier::Avx512 {
        return x86_gemv512::row_dot(ty);
    }
    let _ = (ty, tier);
    None
}

fn best_dot(ty: GgmlType, tier: Tier) -> Option<(VecDot, Tier)> {
    #[cfg(target_arch = "x86_64")]
    {
        if tier >= Tier::Avx512 {
            if let Some(dot) = x86_avx512::dot(ty) {
                return Some((dot, Tier::Avx512));
            }
        }
        if tier >= Tier::Avx2 {
            if let Some(dot) = x86_avx2::dot(ty) {
                return Some((dot, Tier::Avx2));
            }
        }
    }
    scalar::dot(ty).map(|dot| (dot, Tier::Scalar))
}

/// Blocks per row when `w` and every activation row hold exactly one row of `n` elements
/// (blocks of `w_block` and `x_block` bytes) and `out` has room for every activation row.
fn blocks_per_row(
    n: usize,
    w: &[u8],
    xs: &[&[u8]],
    out: &[f32],
    w_block: usize,
    x_block: usize,
) -> Option<usize> {
    if !n.is_multiple_of(QK) || xs.is_empty() || xs.len() > MAX_ROWS || out.len() < xs.len() {
        return None;
    }
    let nb = n / QK;
    let rows_fit = xs.iter().all(|x| x.len() == nb * x_block);
    (w.len() == nb * w_block && rows_fit).then_some(nb)
}

/// Marks every output of a call whose slices broke the kernel contract, instead of reading
/// outside them or panicking.
fn poison(out: &mut [f32]) {
    out.iter_mut().for_each(|o| *o = f32::NAN);
}
