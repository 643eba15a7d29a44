//! Draft verification runs several decode rows in one forward; its logits must equal the
//! one-row forwards bit for bit, so greedy output is the same with drafting on and off.
//! These tests hold every matmul path to that for 1..=VERIFY_ROWS rows.
use crate::gemm::tests::{weights, TYPES};
use crate::pool::ThreadPool;
use crate::test_rng::Rng;
use ishizuki_core::huge::HugeArena;
use ishizuki_core::WeightView;

use crate::VERIFY_ROWS;

fn row_by_row(pool: &ThreadPool, w: &WeightView, x: &[f32], k: usize) -> Vec<f32> {
    let mut all = Vec::new();
    for row in x.chunks_exact(k) {
        let mut out = vec![f32::NAN; w.n_out];
        crate::matmul::matmul(pool, w, row, 1, &mut out, false).unwrap();
        all.extend(out);
    }
    all
}

/// First row count whose matmul differs from one-row matmuls, with `w` as the engine has it:
/// through `pack` (a packed or a resident copy) when `packed`.
fn first_difference(ty: ishizuki_core::GgmlType, packed: bool) -> Option<usize> {
    let pool = ThreadPool::new(2);
    let (k, n_out) = (512usize, 72usize);
    let mut rng = Rng(0x5eed ^ ty as u64);
    let wq = weights(ty, n_out, k, &mut rng);
    let mut view = WeightView::new(ty, n_out, k, &wq);
    let copy = packed.then(|| crate::packed::pack(&view, &HugeArena::default(), &mut |_| {}));
    if let Some(Some(c)) = &copy {
        view.packed = Some(c);
    }
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
        // unpacked weights of the packable types exist only at the scalar tier, which is exact
        for packed in [true] {
            if let Some(rows) = first_difference(ty, packed) {
                bad.push(format!(
                    "{ty} packed={packed}: first differs at {rows} rows"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "tier {}:\n{}",
        crate::simd::tier().name(),
        bad.join("\n")
    );
}
