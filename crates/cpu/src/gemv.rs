//! Decode matmuls (one activation row) at the AVX-512 tier for the 32-element block types: the
//! row is quantized once to the GEMM's activation form, and each task streams one long
//! contiguous range of weight rows through the two-blocks-per-vector row kernels.
use crate::gemm::Acts;
use crate::kernels::legacy::{row_dot, RowDot, ROWS};
use crate::matmul::{prefetch, RowTasks, PREFETCH_BYTES};
use crate::pool::{SharedMut, ThreadPool};
use crate::simd::tier;
use ishizuki_core::WeightView;
use std::cell::RefCell;

thread_local! {
    static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
}

/// Whether `matmul` should take this path for these weights and rows.
pub fn applies(ws: &[WeightView], rows: usize) -> bool {
    rows == 1
        && ws
            .iter()
            .all(|w| row_dot(w.ty, tier()).is_some() && w.n_in == ws[0].n_in)
}

/// `outs[i] (n_out_i) = ws[i] . x` for weights that `applies` accepted, with shapes checked by
/// the caller (so every row fits its kernel).
pub fn gemv(pool: &ThreadPool, ws: &[WeightView], x: &[f32], outs: &mut [&mut [f32]]) {
    let k = ws[0].n_in;
    let kernels: Vec<RowDot> = ws
        .iter()
        .map(|w| row_dot(w.ty, tier()).expect("applies"))
        .collect();
    let outs: Vec<SharedMut<f32>> = outs.iter_mut().map(|o| SharedMut(o.as_mut_ptr())).collect();
    let tasks = RowTasks::new(ws.iter().map(|w| w.n_out), 1, pool.n_threads());
    ACTS.with_borrow_mut(|acts| {
        acts.quantize(pool, x, 1, k);
        let acts: &Acts = acts;
        pool.run(tasks.len(), &|task| {
            let (ji, range) = tasks.get(task);
            let w = &ws[ji];
            let w_row = w.data.len() / w.n_out;
            let r1 = range.end;
            for r in range.step_by(ROWS) {
                let rows = (r1 - r).min(ROWS);
                prefetch(w.data, r * w_row + PREFETCH_BYTES, rows * w_row);
                let block = &w.data[r * w_row..][..rows * w_row];
                // SAFETY: this task alone writes these elements of this output.
                let out = unsafe { std::slice::from_raw_parts_mut(outs[ji].ptr().add(r), rows) };
                // SAFETY: the tier has AVX-512; `acts` holds one row of k.
                unsafe { (kernels[ji])(k, block, &acts.q, &acts.d, &acts.sum32, out) };
            }
        });
    });
}
