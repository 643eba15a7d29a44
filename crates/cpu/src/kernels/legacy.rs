//! Kernels for the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL.
use super::QKernel;
use crate::simd::Tier;
use ishizuki_core::GgmlType;

pub fn kernel(_ty: GgmlType, _tier: Tier) -> Option<QKernel> {
    None
}
