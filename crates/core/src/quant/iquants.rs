//! Non-linear 4-bit formats IQ4_NL and IQ4_XS: nibbles index a fixed table of levels.
use super::{dequantize_blocks, f16_to_f32};
use crate::dtype::GgmlType;
use bytemuck::{Pod, Zeroable};

/// kvalues_iq4nl (ggml-common.h).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// x = d * KVALUES_IQ4NL[q]; element j in the low nibble of qs[j], j+16 in the high one.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4NL {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

/// 8 sub-blocks of 32, each laid out as an IQ4_NL block, with 6-bit scales
/// (low 4 bits in `scales_l`, high 2 bits in the little-endian u16 `scales_h`), offset 32.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockIQ4XS {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}

impl BlockIQ4XS {
    /// Signed scale of 32-element sub-block `ib` (0..8): 4 low bits from `scales_l`, 2 high bits
    /// from `scales_h`, offset 32.
    #[inline(always)]
    pub fn scale(&self, ib: usize) -> i32 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let high = ((u16::from_le_bytes(self.scales_h) >> (2 * ib)) & 3) as u8;
        (low | (high << 4)) as i32 - 32
    }
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<BlockIQ4NL>() == GgmlType::IQ4_NL.type_size());
    assert!(size_of::<BlockIQ4XS>() == GgmlType::IQ4_XS.type_size());
};

#[inline(always)]
fn nl_level(nibble: u8) -> f32 {
    KVALUES_IQ4NL[(nibble & 0x0f) as usize] as f32
}

/// One 32-element IQ4_NL group with scale `d`.
#[inline(always)]
fn dequantize_group(d: f32, qs: &[u8], out: &mut [f32]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = d * nl_level(q);
        *h = d * nl_level(q >> 4);
    }
}

pub(super) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockIQ4NL, y: &mut [f32; 32]| {
        dequantize_group(f16_to_f32(b.d), &b.qs, y);
    });
}

pub(super) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockIQ4XS, y: &mut [f32; 256]| {
        let d = f16_to_f32(b.d);
        for (ib, (out, qs)) in y
            .chunks_exact_mut(32)
            .zip(b.qs.chunks_exact(16))
            .enumerate()
        {
            dequantize_group(d * b.scale(ib) as f32, qs, out);
        }
    });
}
