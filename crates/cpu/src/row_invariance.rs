//! Draft verification runs several decode rows in one forward; its logits must equal the
//! one-row forwards bit for bit, so greedy output is the same with drafting on and off.
//! These tests hold every matmul path to that for 1..=VERIFY_ROWS rows.
use crate::gemm::tests::{weights, TYPES};
use crate::pool::ThreadPool;
use crate::test_rng::Rng;
use crate::VERIFY_ROWS;
use ishizuki_core::huge::HugeArena;
use ishizuki_core::WeightView;

fn row_by_row(pool: &ThreadPool, w: &WeightView, x: &[f32], k: usize) -> Vec<f32> {
    let mut all = Vec::new();
    for row in x.chunks_exact(k) {
        let mut out = vec![f32::NAN; w.n_out];
        crate::matmul::matmul(pool, w, row, 1, &mut out, false).unwrap();
        all.extend(out);
    }
    all
}

/// First row count whose matmul differs from one-row matmuls, with the weight as the engine
/// has it: through `pack` (a packed or a resident copy). Unpacked weights of the packable types
/// exist only at the scalar tier, which has one path for every row count.
fn first_difference(ty: ishizuki_core::GgmlType) -> Option<usize> {
    let pool = ThreadPool::new(2);
    let (k, n_out) = (512usize, 72usize);
    let mut rng = Rng(0x5eed ^ ty as u64);
    let wq = weights(ty, n_out, k, &mut rng);
    let mut view = WeightView::new(ty, n_out, k, &wq);
    let copy = crate::packed::pack(&view, &HugeArena::default(), &mut |_| {});
    view.packed = copy.as_ref();
    let x: Vec<f32> = (0..VERIFY_ROWS * k).map(|_| rng.unit()).collect();
    let single = row_by_row(&pool, &view, &x, k);
    (2..=VERIFY_ROWS).find(|&rows| {
        let mut out = vec![f32::NAN; rows * n_out];
        crate::matmul::matmul(&pool, &view, &x[..rows * k], rows, &mut out, false).unwrap();
        out.iter()
            .zip(&single)
            .any(|(a, b)| a.to_bits() != b.to_bits())
    })
}

#[test]
fn matmul_rows_equal_one_row_matmuls() {
    let mut bad = Vec::new();
    for &ty in TYPES {
        if let Some(rows) = first_difference(ty) {
            bad.push(format!("{ty}: first differs at {rows} rows"));
        }
    }
    assert!(
        bad.is_empty(),
        "tier {}:\n{}",
        crate::simd::tier().name(),
        bad.join("\n")
    );
}
