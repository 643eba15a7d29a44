//! Block layouts and scalar reference (de)quantisation, bit-exact with ggml / gguf-py.
use crate::{dtype::GgmlType, Error, Result};
use half::{bf16, f16};

/// Dequantises one row: `src` holds exactly `dst.len()` elements of `ty`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let need = ty
        .row_bytes(dst.len() as u64)
        .ok_or_else(|| Error::Shape(format!("{} elements are not whole {ty} blocks", dst.len())))?;
    if src.len() as u64 != need {
        return Err(Error::Shape(format!(
            "{ty} row of {} elements needs {need} bytes, got {}",
            dst.len(),
            src.len()
        )));
    }
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        _ => return Err(Error::UnsupportedType(ty, "dequantize")),
    }
    Ok(())
}
