//! Block layouts and scalar reference (de)quantisation, bit-exact with ggml / gguf-py.
//!
//! Every block struct holds only byte arrays (alignment 1), so a byte slice at any address,
//! such as a tensor inside an mmapped GGUF file, casts to a block slice without copying.
mod iquants;
mod kquantize;
mod kquants;
mod legacy;

use crate::{dtype::GgmlType, Error, Result};
use bytemuck::Pod;

pub use iquants::{BlockIQ4NL, BlockIQ4XS, KVALUES_IQ4NL};
pub use kquantize::{quantize_row_q4_k, quantize_row_q6_k, quantize_row_q8_k};
pub use kquants::{
    get_scale_min_k4, q3k_scale, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K,
};
pub use legacy::{
    quantize_row_q4_0, quantize_row_q4_1, quantize_row_q5_0, quantize_row_q5_1, quantize_row_q8_0,
    quantize_row_q8_1, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK4_0,
    QK4_1, QK5_0, QK5_1, QK8_0, QK8_1,
};

/// Dequantises one row: `src` holds exactly `dst.len()` elements of `ty`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    use GgmlType::*;
    let dequantize: fn(&[u8], &mut [f32]) = match ty {
        F32 => dequantize_f32,
        F16 => dequantize_f16,
        BF16 => dequantize_bf16,
        Q4_0 => legacy::dequantize_q4_0,
        Q4_1 => legacy::dequantize_q4_1,
        Q5_0 => legacy::dequantize_q5_0,
        Q5_1 => legacy::dequantize_q5_1,
        Q8_0 => legacy::dequantize_q8_0,
        Q2_K => kquants::dequantize_q2_k,
        Q3_K => kquants::dequantize_q3_k,
        Q4_K => kquants::dequantize_q4_k,
        Q5_K => kquants::dequantize_q5_k,
        Q6_K => kquants::dequantize_q6_k,
        Q8_K => kquants::dequantize_q8_k,
        IQ4_NL => iquants::dequantize_iq4_nl,
        IQ4_XS => iquants::dequantize_iq4_xs,
        _ => return Err(Error::UnsupportedType(ty, "dequantize")),
    };
    check_row(ty, src.len(), dst.len())?;
    dequantize(src, dst);
    Ok(())
}

/// Quantises one row of `src.len()` elements into `dst`, which must hold exactly that row.
/// Uses ggml's reference (`quantize_row_*_ref`) quantisers, without importance weights.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    use GgmlType::*;
    check_row(ty, dst.len(), src.len())?;
    match ty {
        F32 => quantize_f32(src, dst),
        F16 => quantize_f16(src, dst),
        BF16 => quantize_bf16(src, dst),
        Q4_0 => quantize_row_q4_0(src, as_blocks_mut(dst))?,
        Q4_1 => quantize_row_q4_1(src, as_blocks_mut(dst))?,
        Q5_0 => quantize_row_q5_0(src, as_blocks_mut(dst))?,
        Q5_1 => quantize_row_q5_1(src, as_blocks_mut(dst))?,
        Q8_0 => quantize_row_q8_0(src, as_blocks_mut(dst))?,
        Q8_1 => quantize_row_q8_1(src, as_blocks_mut(dst))?,
        Q4_K => quantize_row_q4_k(src, as_blocks_mut(dst))?,
        Q6_K => quantize_row_q6_k(src, as_blocks_mut(dst))?,
        Q8_K => quantize_row_q8_k(src, as_blocks_mut(dst))?,
        _ => return Err(Error::UnsupportedType(ty, "quantize")),
    }
    Ok(())
}

/// Checks that `n_bytes` is exactly a row of `n_elements` elements of `ty`.
fn check_row(ty: GgmlType, n_bytes: usize, n_elements: usize) -> Result<()> {
    let need = ty
        .row_bytes(n_elements as u64)
        .ok_or_else(|| Error::Shape(format!("{n_elements} elements are not whole {ty} blocks")))?;
    if n_bytes as u64 != need {
        return Err(Error::Shape(format!(
            "{ty} row of {n_elements} elements needs {need} bytes, got {n_bytes}"
        )));
    }
    Ok(())
}

/// Views bytes as blocks (e.g. `BlockQ4K`): a shape error unless the length is a whole number
/// of blocks. Every block type has alignment 1, so any address works.
pub fn try_as_blocks<B: Pod>(bytes: &[u8]) -> Result<&[B]> {
    bytemuck::try_cast_slice(bytes).map_err(|e| {
        let size = std::mem::size_of::<B>();
        Error::Shape(format!("{} bytes as blocks of {size}: {e}", bytes.len()))
    })
}

/// Infallible view for lengths already checked by `check_row` (alignment is 1).
fn as_blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

fn as_blocks_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(bytes)
}

/// Element count check shared by the typed quantisers.
fn check_blocks(what: &str, n_elements: usize, n_blocks: usize, block: usize) -> Result<()> {
    if n_elements != n_blocks * block {
        return Err(Error::Shape(format!(
            "{what}: {n_elements} elements do not fill {n_blocks} blocks of {block}"
        )));
    }
    Ok(())
}

/// Runs a per-block dequantiser over a row; lengths were checked by `check_row`.
#[inline(always)]
fn dequantize_blocks<B: Pod, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    block_fn: impl Fn(&B, &mut [f32; N]),
) {
    let blocks: &[B] = as_blocks(src);
    for (block, out) in blocks.iter().zip(dst.chunks_exact_mut(N)) {
        if let Ok(out) = <&mut [f32; N]>::try_from(out) {
            block_fn(block, out);
        }
    }
}

/// IEEE binary16 (little-endian bytes) to f32; exact for every non-NaN value, NaN payloads
/// kept. Branch-free selects, so loops over f16 data vectorise.
#[inline(always)]
pub fn f16_to_f32(bytes: [u8; 2]) -> f32 {
    const MAGIC: u32 = 113 << 23; // 2^-14, the smallest normal f16
    let h = u16::from_le_bytes(bytes) as u32;
    let sign = (h & 0x8000) << 16;
    let shifted = (h & 0x7fff) << 13; // exponent and mantissa in f32 position
    let exp = shifted & 0x0f80_0000;
    let normal = shifted + ((127 - 15) << 23);
    let inf_nan = normal + ((128 - 16) << 23);
    // subnormal m * 2^-24 computed exactly as (2^-14 + m * 2^-24) - 2^-14
    let subnormal = (f32::from_bits(shifted + MAGIC) - f32::from_bits(MAGIC)).to_bits();
    let bits = if exp == 0x0f80_0000 {
        inf_nan
    } else if exp == 0 {
        subnormal
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// f32 to IEEE binary16 bytes, round to nearest even (GGML_FP32_TO_FP16, numpy astype).
#[inline(always)]
pub fn f32_to_f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

/// Through an aligned stack buffer so half's runtime-dispatched (F16C) slice conversion
/// applies; exact for every non-NaN value like `f16_to_f32`.
fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let mut buf = [half::f16::ZERO; 64];
    for (s, d) in src.chunks(128).zip(dst.chunks_mut(64)) {
        let buf = &mut buf[..d.len()];
        bytemuck::cast_slice_mut::<_, u8>(buf).copy_from_slice(s);
        buf.convert_to_f32_slice(d);
    }
}

/// bf16 is the top half of an f32; a plain shift keeps NaN payloads as gguf-py does.
fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits((u16::from_le_bytes([s[0], s[1]]) as u32) << 16);
    }
}

fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_f16(*x));
    }
}

/// ggml_compute_fp32_to_bf16: NaN forced quiet, otherwise round to nearest even.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 64) as u16;
    }
    ((n as u64 + (0x7fff + ((n >> 16) & 1) as u64)) >> 16) as u16
}

fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16_bits(*x).to_le_bytes());
    }
}
