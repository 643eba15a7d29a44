//! K-quants: 256-element super-blocks with quantised sub-block scales (ggml-common.h).
use super::{dequantize_blocks, f16_to_f32};
use crate::dtype::GgmlType;
use bytemuck::{Pod, Zeroable};

pub const QK_K: usize = 256;

/// 16 sub-blocks of 16: x = d * (scales[i] & 0xF) * q - dmin * (scales[i] >> 4), q 2 bits.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// 16 sub-blocks of 16: x = d * (s - 32) * (q - 4 * !hbit), s 6 bits, q 2 bits + hmask bit.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

/// 8 sub-blocks of 32: x = d * sc * q - dmin * m, sc/m 6 bits packed in `scales`, q 4 bits.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// As Q4_K with a fifth bit per element in `qh`.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q = 4 low bits in ql + 2 high in qh.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// Activation blocks for k-quant dot products: x = d * q, d an f32, `bsums` the little-endian
/// i16 sums of each 16 quants.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8K {
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    pub bsums: [u8; QK_K / 16 * 2],
}

impl BlockQ8K {
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * i], self.bsums[2 * i + 1]])
    }
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<BlockQ2K>() == GgmlType::Q2_K.type_size());
    assert!(size_of::<BlockQ3K>() == GgmlType::Q3_K.type_size());
    assert!(size_of::<BlockQ4K>() == GgmlType::Q4_K.type_size());
    assert!(size_of::<BlockQ5K>() == GgmlType::Q5_K.type_size());
    assert!(size_of::<BlockQ6K>() == GgmlType::Q6_K.type_size());
    assert!(size_of::<BlockQ8K>() == GgmlType::Q8_K.type_size());
    assert!(QK_K == GgmlType::Q4_K.block_size());
};

/// (scale, min) of sub-block `j` (0..8) from the 12 packed bytes of Q4_K / Q5_K.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Signed 6-bit scale `j` (0..16) of Q3_K: 4 low bits in bytes 0..8, 2 high bits in 8..12.
#[inline(always)]
pub fn q3k_scale(j: usize, s: &[u8; 12]) -> i32 {
    let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

pub(super) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ2K, y: &mut [f32; QK_K]| {
        let (d, min) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        // element n*128 + j*32 + h*16 + l: bits 2j of qs[n*32 + h*16 + l], scale n*8 + j*2 + h
        for (i, (out, &sc)) in y.chunks_exact_mut(16).zip(b.scales.iter()).enumerate() {
            let (n, j, h) = (i / 8, (i / 2) % 4, i % 2);
            let q = &b.qs[n * 32 + h * 16..][..16];
            let dl = d * (sc & 0x0f) as f32;
            let ml = min * (sc >> 4) as f32;
            for (o, &qv) in out.iter_mut().zip(q) {
                *o = dl * ((qv >> (2 * j)) & 3) as f32 - ml;
            }
        }
    });
}

pub(super) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ3K, y: &mut [f32; QK_K]| {
        let d = f16_to_f32(b.d);
        // element n*128 + j*32 + h*16 + l: bits 2j of qs[n*32 + h*16 + l],
        // high bit (n*4 + j) of hmask[h*16 + l], scale n*8 + j*2 + h
        for (i, out) in y.chunks_exact_mut(16).enumerate() {
            let (n, j, h) = (i / 8, (i / 2) % 4, i % 2);
            let q = &b.qs[n * 32 + h * 16..][..16];
            let hm = &b.hmask[h * 16..][..16];
            let bit = 1u8 << (n * 4 + j);
            let dl = d * q3k_scale(i, &b.scales) as f32;
            for ((o, &qv), &hv) in out.iter_mut().zip(q).zip(hm) {
                let low = ((qv >> (2 * j)) & 3) as i32;
                let offset = if hv & bit != 0 { 0 } else { 4 };
                *o = dl * (low - offset) as f32;
            }
        }
    });
}

pub(super) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4K, y: &mut [f32; QK_K]| {
        let (d, min) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        // 64 elements per 32 bytes: low nibbles use sub-block 2j, high nibbles 2j + 1
        for (j, (out, q)) in y
            .chunks_exact_mut(64)
            .zip(b.qs.chunks_exact(32))
            .enumerate()
        {
            let (sc1, m1) = get_scale_min_k4(2 * j, &b.scales);
            let (sc2, m2) = get_scale_min_k4(2 * j + 1, &b.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (lo, hi) = out.split_at_mut(32);
            for ((l, h), &qv) in lo.iter_mut().zip(hi.iter_mut()).zip(q) {
                *l = d1 * (qv & 0x0f) as f32 - m1;
                *h = d2 * (qv >> 4) as f32 - m2;
            }
        }
    });
}

pub(super) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5K, y: &mut [f32; QK_K]| {
        let (d, min) = (f16_to_f32(b.d), f16_to_f32(b.dmin));
        for (j, (out, q)) in y
            .chunks_exact_mut(64)
            .zip(b.qs.chunks_exact(32))
            .enumerate()
        {
            let (sc1, m1) = get_scale_min_k4(2 * j, &b.scales);
            let (sc2, m2) = get_scale_min_k4(2 * j + 1, &b.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
            let (lo, hi) = out.split_at_mut(32);
            for (((l, h), &qv), &hv) in lo.iter_mut().zip(hi.iter_mut()).zip(q).zip(&b.qh) {
                let q1 = (qv & 0x0f) + if hv & u1 != 0 { 16 } else { 0 };
                let q2 = (qv >> 4) + if hv & u2 != 0 { 16 } else { 0 };
                *l = d1 * q1 as f32 - m1;
                *h = d2 * q2 as f32 - m2;
            }
        }
    });
}

pub(super) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ6K, y: &mut [f32; QK_K]| {
        let d = f16_to_f32(b.d);
        // each half of 128: ql 64 bytes, qh 32 bytes, 8 scales (one per 16 elements)
        let halves = y
            .chunks_exact_mut(128)
            .zip(b.ql.chunks_exact(64))
            .zip(b.qh.chunks_exact(32))
            .zip(b.scales.chunks_exact(8));
        for (((out, ql), qh), sc) in halves {
            let sc: [f32; 8] = std::array::from_fn(|i| d * sc[i] as f32);
            for l in 0..32 {
                let is = l / 16;
                let (a, c, h) = (ql[l], ql[l + 32], qh[l]);
                let q1 = ((a & 0x0f) | ((h & 3) << 4)) as i32 - 32;
                let q2 = ((c & 0x0f) | (((h >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((c >> 4) | (((h >> 6) & 3) << 4)) as i32 - 32;
                out[l] = sc[is] * q1 as f32;
                out[l + 32] = sc[is + 2] * q2 as f32;
                out[l + 64] = sc[is + 4] * q3 as f32;
                out[l + 96] = sc[is + 6] * q4 as f32;
            }
        }
    });
}

pub(super) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ8K, y: &mut [f32; QK_K]| {
        let d = b.d();
        for (o, &q) in y.iter_mut().zip(b.qs.iter()) {
            *o = d * q as f32;
        }
    });
}
