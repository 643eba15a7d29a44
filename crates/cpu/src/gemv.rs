//! Decode and verification matmuls (1..=VERIFY_ROWS activation rows) at the AVX-512 tier for
//! the 32-element block types: the rows are quantized once to the GEMM's activation form, and
//! each task streams one long contiguous range of weight rows through the two-blocks-per-vector
//! row kernels, each weight block meeting every activation row while it is in cache. Each row's
//! arithmetic is the one-row case's, so verification rows equal decode rows bit for bit.
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
    (1..=crate::VERIFY_ROWS).contains(&rows)
        && ws
            .iter()
            .all(|w| row_dot(w.ty, tier()).is_some() && w.n_in == ws[0].n_in)
}

/// `outs[i] (rows, n_out_i) = x (rows, k) . ws[i]^T` for weights that `applies` accepted, with
/// shapes checked by the caller (so every row fits its kernel).
pub fn gemv(pool: &ThreadPool, ws: &[WeightView], x: &[f32], rows: usize, outs: &mut [&mut [f32]]) {
    let k = ws[0].n_in;
    let kernels: Vec<RowDot> = ws
        .iter()
        .map(|w| row_dot(w.ty, tier()).expect("applies"))
        .collect();
    let outs: Vec<SharedMut<f32>> = outs.iter_mut().map(|o| SharedMut(o.as_mut_ptr())).collect();
    // split as for one row whatever `rows`: each output element is then computed exactly as in
    // a one-row call
    let tasks = RowTasks::new(ws.iter().map(|w| w.n_out), 1, pool.n_threads());
    ACTS.with_borrow_mut(|acts| {
        acts.quantize(pool, x, rows, k);
        let acts: &Acts = acts;
        pool.run(tasks.len(), &|task| {
            let (ji, range) = tasks.get(task);
            let w = &ws[ji];
            let w_row = w.data.len() / w.n_out;
            let r1 = range.end;
            let (blocks, n_out) = (k / 32, w.n_out);
            for r in range.step_by(ROWS) {
                let n = (r1 - r).min(ROWS);
                prefetch(w.data, r * w_row + PREFETCH_BYTES, n * w_row);
                let block = &w.data[r * w_row..][..n * w_row];
                for m in 0..rows {
                    // SAFETY: this task alone writes these elements of this output.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(outs[ji].ptr().add(m * n_out + r), n)
                    };
                    let (q, d) = (&acts.q[m * k..][..k], &acts.d[m * blocks..][..blocks]);
                    let sum32 = &acts.sum32[m * blocks..][..blocks];
                    // SAFETY: the tier has AVX-512; `acts` holds `rows` rows of k.
                    unsafe { (kernels[ji])(k, block, q, d, sum32, out) };
                }
            }
        });
    });
}
