//! Kernels for the 256-element super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
use super::QKernel;
use crate::simd::Tier;
use ishizuki_core::GgmlType;

pub fn kernel(_ty: GgmlType, _tier: Tier) -> Option<QKernel> {
    None
}
