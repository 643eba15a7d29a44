//! Quantized matmul: each task dequantizes a chunk of weight rows once and reuses it for every
//! activation row, so a prefill reads the weights once.
use crate::pool::{SharedMut, ThreadPool};
use crate::simd::dot4;
use ishizuki_core::{quant::dequantize_row, Error, GgmlType, Result, WeightView};
use std::cell::RefCell;

/// Weight rows per task.
const CHUNK: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

pub fn check_supported(ty: GgmlType) -> Result<()> {
    let mut probe = vec![0f32; ty.block_size()];
    let zeros = vec![0u8; ty.type_size()];
    dequantize_row(ty, &zeros, &mut probe).map_err(|_| Error::UnsupportedType(ty, "cpu matmul"))
}

pub fn matmul(
    pool: &ThreadPool,
    w: &WeightView,
    x: &[f32],
    rows: usize,
    out: &mut [f32],
) -> Result<()> {
    let (n_in, n_out) = (w.n_in, w.n_out);
    let row_bytes = w.row_bytes()?;
    if w.data.len() != row_bytes * n_out || x.len() != rows * n_in || out.len() != rows * n_out {
        return Err(Error::Shape(format!(
            "matmul: weight {n_out}x{n_in} {} ({} bytes), x {} for {rows} rows, out {}",
            w.ty,
            w.data.len(),
            x.len(),
            out.len()
        )));
    }
    check_supported(w.ty)?;
    let out_ptr = SharedMut(out.as_mut_ptr());
    let n_tasks = n_out.div_ceil(CHUNK);
    pool.run(n_tasks, &|task| {
        let r0 = task * CHUNK;
        let r1 = (r0 + CHUNK).min(n_out);
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(CHUNK * n_in, 0.0);
            for r in r0..r1 {
                let src = &w.data[r * row_bytes..(r + 1) * row_bytes];
                let dst = &mut scratch[(r - r0) * n_in..(r - r0 + 1) * n_in];
                dequantize_row(w.ty, src, dst).expect("type checked above");
            }
            let wrow = |r: usize| &scratch[(r - r0) * n_in..(r - r0 + 1) * n_in];
            for i in 0..rows {
                let xi = &x[i * n_in..(i + 1) * n_in];
                // SAFETY: this task alone writes columns r0..r1 of every output row.
                let o =
                    unsafe { std::slice::from_raw_parts_mut(out_ptr.ptr().add(i * n_out), n_out) };
                let mut r = r0;
                while r + 4 <= r1 {
                    let d = dot4(xi, [wrow(r), wrow(r + 1), wrow(r + 2), wrow(r + 3)]);
                    o[r..r + 4].copy_from_slice(&d);
                    r += 4;
                }
                while r < r1 {
                    o[r] = crate::simd::dot(xi, wrow(r));
                    r += 1;
                }
            }
        });
    });
    Ok(())
}

pub fn embed(w: &WeightView, ids: &[u32], out: &mut [f32]) -> Result<()> {
    let row_bytes = w.row_bytes()?;
    if out.len() != ids.len() * w.n_in || w.data.len() != row_bytes * w.n_out {
        return Err(Error::Shape(format!(
            "embed: {} ids into {} floats of width {}",
            ids.len(),
            out.len(),
            w.n_in
        )));
    }
    for (i, &id) in ids.iter().enumerate() {
        let id = id as usize;
        if id >= w.n_out {
            return Err(Error::Model(format!(
                "token id {id} outside the vocabulary of {}",
                w.n_out
            )));
        }
        let src = &w.data[id * row_bytes..(id + 1) * row_bytes];
        dequantize_row(w.ty, src, &mut out[i * w.n_in..(i + 1) * w.n_in])?;
    }
    Ok(())
}
