//! Draft verification runs several decode rows in one forward; its logits must equal the
//! one-row forwards bit for bit, so greedy output is the same with drafting on and off.
//! These tests hold every matmul path and attention to that for 1..=VERIFY_ROWS rows.
use crate::attention::attention;
use crate::gemm::tests::{weights, TYPES};
use crate::pool::ThreadPool;
use crate::test_rng::Rng;
use crate::VERIFY_ROWS;
use half::f16;
use ishizuki_core::backend::AttnParams;
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
    let copy = crate::packed::pack(
        &view,
        &HugeArena::default(),
        &crate::pool::ThreadPool::new(1),
        &mut |_| {},
    );
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

/// Attention of `rows` consecutive query rows ending at `n_kv` against the same rows one call
/// each; true when every output is bit for bit the same.
fn attention_rows_equal(p: &AttnParams, n_kv: usize, rows: usize, threads: usize) -> bool {
    let pool = ThreadPool::new(threads);
    let mut rng = Rng(0xa77e ^ (n_kv * 31 + rows) as u64);
    let width = p.n_head * p.head_dim;
    let cache = n_kv * p.n_head_kv * p.head_dim;
    let q: Vec<f32> = (0..rows * width).map(|_| rng.unit()).collect();
    let k: Vec<f16> = (0..cache).map(|_| f16::from_f32(rng.unit())).collect();
    let v: Vec<f16> = (0..cache).map(|_| f16::from_f32(rng.unit())).collect();
    let positions: Vec<u32> = (n_kv - rows..n_kv).map(|x| x as u32).collect();
    let mut together = vec![f32::NAN; q.len()];
    attention(&pool, &q, &k, &v, n_kv, &positions, p, &mut together).unwrap();
    positions.iter().enumerate().all(|(row, &pos)| {
        let mut alone = vec![f32::NAN; width];
        let qr = &q[row * width..][..width];
        attention(&pool, qr, &k, &v, n_kv, &[pos], p, &mut alone).unwrap();
        let got = &together[row * width..][..width];
        alone
            .iter()
            .zip(got)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    })
}

#[test]
fn attention_rows_equal_one_row_attention() {
    let mut bad = Vec::new();
    // SmolLM2, Gemma 3 (soft-capped here to cover the cap), Qwen2.5 0.5B, a group too large
    // for the register-held passes; short and split contexts, a sliding window
    let shapes = [
        (9, 3, 64, None, None),
        (4, 1, 256, Some(600), Some(2.0)),
        (14, 2, 64, None, None),
        (18, 2, 64, Some(100), None),
    ];
    for (n_head, n_head_kv, head_dim, window, softcap) in shapes {
        let p = AttnParams {
            n_head,
            n_head_kv,
            head_dim,
            scale: 0.125,
            window,
            softcap,
        };
        for threads in [1, 2, 3] {
            for n_kv in [20, 300, 1500] {
                for rows in 2..=VERIFY_ROWS {
                    if !attention_rows_equal(&p, n_kv, rows, threads) {
                        bad.push(format!("{n_head}/{n_head_kv}x{head_dim} {threads} threads, {n_kv} keys, {rows} rows"));
                    }
                }
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
