//! Quantized dot-product kernels: one weight row against up to `MAX_ROWS` activation rows that
//! were quantized to the weight type's paired activation format (Q8_0, Q8_1 or Q8_K, as ggml's
//! `vec_dot_type`). One explicit (weight type x tier) table; unsupported pairs fall back to the
//! f32 path in `matmul`.
pub mod kquants;
pub mod legacy;

use crate::simd::Tier;
use ishizuki_core::GgmlType;

/// Activation rows one kernel call handles, so an unpacked weight block is reused across rows.
pub const MAX_ROWS: usize = 4;

/// `out[i] = dot(w, xs[i])` for a weight row `w` of `n` elements and `xs.len() <= MAX_ROWS`
/// activation rows in the kernel's activation format. Unsafe: the caller guarantees the tier's
/// instructions exist (the table only hands out kernels at or below the detected tier) and
/// that every slice holds exactly one row of `n` elements.
pub type VecDot = unsafe fn(n: usize, w: &[u8], xs: &[&[u8]], out: &mut [f32]);

#[derive(Clone, Copy)]
pub struct QKernel {
    /// The activation format `xs` must be quantized to.
    pub act: GgmlType,
    pub dot: VecDot,
    /// The tier the kernel was written for (<= the requested tier).
    pub tier: Tier,
}

impl std::fmt::Debug for QKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QKernel({} activations, {})", self.act, self.tier.name())
    }
}

/// The best kernel for weights of `ty` at or below `tier`, if any.
pub fn kernel(ty: GgmlType, tier: Tier) -> Option<QKernel> {
    legacy::kernel(ty, tier).or_else(|| kquants::kernel(ty, tier))
}
