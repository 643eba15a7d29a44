//! The original 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml-common.h).
use super::{check_blocks, dequantize_blocks, f16_to_f32, f32_to_f16};
use crate::{dtype::GgmlType, Result};
use bytemuck::{Pod, Zeroable};

pub const QK4_0: usize = 32;
pub const QK4_1: usize = 32;
pub const QK5_0: usize = 32;
pub const QK5_1: usize = 32;
pub const QK8_0: usize = 32;
pub const QK8_1: usize = 32;

/// x = d * (q - 8); element j in the low nibble of qs[j], element j+16 in the high nibble.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK4_0 / 2],
}

/// x = d * q + m, nibbles as Q4_0.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK4_1 / 2],
}

/// x = d * (q - 16); the fifth bit of element j is bit j of the little-endian u32 qh.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK5_0 / 2],
}

/// x = d * q + m, bits as Q5_0.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK5_1 / 2],
}

/// x = d * q.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK8_0],
}

/// Activation blocks for Q4_1 / Q5_1 dot products: x = d * q, and s = d * sum(q) so the
/// min term of the weight block folds into one multiply.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; QK8_1],
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<BlockQ4_0>() == GgmlType::Q4_0.type_size());
    assert!(size_of::<BlockQ4_1>() == GgmlType::Q4_1.type_size());
    assert!(size_of::<BlockQ5_0>() == GgmlType::Q5_0.type_size());
    assert!(size_of::<BlockQ5_1>() == GgmlType::Q5_1.type_size());
    assert!(size_of::<BlockQ8_0>() == GgmlType::Q8_0.type_size());
    assert!(size_of::<BlockQ8_1>() == GgmlType::Q8_1.type_size());
    assert!(QK4_0 == GgmlType::Q4_0.block_size() && QK8_0 == GgmlType::Q8_0.block_size());
};

pub(super) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4_0, y: &mut [f32; QK4_0]| {
        let d = f16_to_f32(b.d);
        let (lo, hi) = y.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b.qs) {
            *l = ((q & 0x0f) as i32 - 8) as f32 * d;
            *h = ((q >> 4) as i32 - 8) as f32 * d;
        }
    });
}

pub(super) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ4_1, y: &mut [f32; QK4_1]| {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        let (lo, hi) = y.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b.qs) {
            *l = (q & 0x0f) as f32 * d + m;
            *h = (q >> 4) as f32 * d + m;
        }
    });
}

/// Byte k of entry b is 0x10 when bit k of b is set: spreads Q5 high bits to bytes.
const HIGH_BIT_BYTES: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 8 {
            if (b >> k) & 1 == 1 {
                table[b] |= 0x10 << (8 * k);
            }
            k += 1;
        }
        b += 1;
    }
    table
};

/// The fifth bit (0 or 0x10) of each of the 32 elements of a Q5 block.
#[inline(always)]
fn q5_high_bits(qh: [u8; 4]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, &b) in out.chunks_exact_mut(8).zip(&qh) {
        o.copy_from_slice(&HIGH_BIT_BYTES[b as usize].to_le_bytes());
    }
    out
}

pub(super) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5_0, y: &mut [f32; QK5_0]| {
        let d = f16_to_f32(b.d);
        let high = q5_high_bits(b.qh);
        let (lo, hi) = y.split_at_mut(16);
        let (hb0, hb1) = high.split_at(16);
        for ((((l, h), &q), &h0), &h1) in lo.iter_mut().zip(hi).zip(&b.qs).zip(hb0).zip(hb1) {
            *l = (((q & 0x0f) | h0) as i32 - 16) as f32 * d;
            *h = (((q >> 4) | h1) as i32 - 16) as f32 * d;
        }
    });
}

pub(super) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ5_1, y: &mut [f32; QK5_1]| {
        let (d, m) = (f16_to_f32(b.d), f16_to_f32(b.m));
        let high = q5_high_bits(b.qh);
        let (lo, hi) = y.split_at_mut(16);
        let (hb0, hb1) = high.split_at(16);
        for ((((l, h), &q), &h0), &h1) in lo.iter_mut().zip(hi).zip(&b.qs).zip(hb0).zip(hb1) {
            *l = ((q & 0x0f) | h0) as f32 * d + m;
            *h = ((q >> 4) | h1) as f32 * d + m;
        }
    });
}

pub(super) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, |b: &BlockQ8_0, y: &mut [f32; QK8_0]| {
        let d = f16_to_f32(b.d);
        for (out, &q) in y.iter_mut().zip(b.qs.iter()) {
            *out = q as f32 * d;
        }
    });
}

/// (value with the largest magnitude, first one on ties) of a block.
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// quantize_row_q4_0_ref.
pub fn quantize_row_q4_0(x: &[f32], y: &mut [BlockQ4_0]) -> Result<()> {
    check_blocks("Q4_0", x.len(), y.len(), QK4_0)?;
    for (xb, b) in x.chunks_exact(QK4_0).zip(y.iter_mut()) {
        let d = signed_absmax(xb) / -8.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        for (j, q) in b.qs.iter_mut().enumerate() {
            // the C casts through int8_t, i.e. truncates toward zero
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + 16] * id + 8.5) as i8).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
    }
    Ok(())
}

/// quantize_row_q4_1_ref.
pub fn quantize_row_q4_1(x: &[f32], y: &mut [BlockQ4_1]) -> Result<()> {
    check_blocks("Q4_1", x.len(), y.len(), QK4_1)?;
    for (xb, b) in x.chunks_exact(QK4_1).zip(y.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        for (j, q) in b.qs.iter_mut().enumerate() {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
    }
    Ok(())
}

/// Packs 32 five-bit values: low nibbles into qs, fifth bits into the u32 qh.
fn pack_q5(q: &[u8; 32], qs: &mut [u8; 16]) -> [u8; 4] {
    let mut qh = 0u32;
    for (j, out) in qs.iter_mut().enumerate() {
        let (q0, q1) = (q[j], q[j + 16]);
        *out = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
        qh |= (((q0 & 0x10) >> 4) as u32) << j;
        qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
    }
    qh.to_le_bytes()
}

/// quantize_row_q5_0_ref.
pub fn quantize_row_q5_0(x: &[f32], y: &mut [BlockQ5_0]) -> Result<()> {
    check_blocks("Q5_0", x.len(), y.len(), QK5_0)?;
    for (xb, b) in x.chunks_exact(QK5_0).zip(y.iter_mut()) {
        let d = signed_absmax(xb) / -16.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        let mut q = [0u8; 32];
        for (qi, &v) in q.iter_mut().zip(xb) {
            *qi = ((v * id + 16.5) as i8).min(31) as u8;
        }
        b.qh = pack_q5(&q, &mut b.qs);
    }
    Ok(())
}

/// quantize_row_q5_1_ref.
pub fn quantize_row_q5_1(x: &[f32], y: &mut [BlockQ5_1]) -> Result<()> {
    check_blocks("Q5_1", x.len(), y.len(), QK5_1)?;
    for (xb, b) in x.chunks_exact(QK5_1).zip(y.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(min);
        let mut q = [0u8; 32];
        for (qi, &v) in q.iter_mut().zip(xb) {
            *qi = ((v - min) * id + 0.5) as u8;
        }
        b.qh = pack_q5(&q, &mut b.qs);
    }
    Ok(())
}

/// quantize_row_q8_0_ref: d = absmax / 127, q = round-half-away(x / d).
pub fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) -> Result<()> {
    check_blocks("Q8_0", x.len(), y.len(), QK8_0)?;
    for (xb, b) in x.chunks_exact(QK8_0).zip(y.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
        }
    }
    Ok(())
}

/// quantize_row_q8_1_ref: as Q8_0, plus s = fp16(sum(q) * d) with d before f16 rounding.
pub fn quantize_row_q8_1(x: &[f32], y: &mut [BlockQ8_1]) -> Result<()> {
    check_blocks("Q8_1", x.len(), y.len(), QK8_1)?;
    for (xb, b) in x.chunks_exact(QK8_1).zip(y.iter_mut()) {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse_or_zero(d);
        b.d = f32_to_f16(d);
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        b.s = f32_to_f16(sum as f32 * d);
    }
    Ok(())
}
