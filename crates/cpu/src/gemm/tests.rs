//! The unpacked affine form against the reference dequantizer, the activation quantizer's
//! error bound, and the GEMM against an f64 dot of dequantized weights and activations.
use super::*;
use crate::simd::available_tiers;
use crate::test_rng::Rng;
use ishizuki_core::quant::{dequantize_row, f32_to_f16};
use ishizuki_core::GgmlType;

pub(crate) const TYPES: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Byte offsets of the f16 fields inside one block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q6_K => &[208],
        Q3_K => &[108],
        Q2_K => &[80, 82],
        _ => unreachable!("no unpacker: {ty}"),
    }
}

/// `rows` weight rows of `n` elements: random bytes (every pattern is a valid block) with
/// finite f16 scales of either sign.
pub(crate) fn weights(ty: GgmlType, rows: usize, n: usize, rng: &mut Rng) -> Vec<u8> {
    let size = ty.type_size();
    let mut w: Vec<u8> = (0..rows * n / ty.block_size() * size)
        .map(|_| rng.next() as u8)
        .collect();
    for block in w.chunks_exact_mut(size) {
        for &at in f16_fields(ty) {
            block[at..at + 2].copy_from_slice(&f32_to_f16(rng.unit() * 0.05));
        }
    }
    w
}

pub(crate) fn dequantized(ty: GgmlType, w: &[u8], rows: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * n];
    let rb = w.len() / rows;
    for (r, o) in out.chunks_exact_mut(n).enumerate() {
        dequantize_row(ty, &w[r * rb..][..rb], o).unwrap();
    }
    out
}

#[test]
fn unpacked_rows_reproduce_the_reference_dequantizer() {
    let n = 512;
    for &ty in TYPES {
        let mut rng = Rng(0x5eed ^ ty as u64);
        let w = weights(ty, 1, n, &mut rng);
        let sub = unpack::sub_block(ty).unwrap();
        let (mut q, mut scale, mut min) = (vec![0u8; n], vec![0f32; n / sub], vec![0f32; n / sub]);
        assert!(
            unpack::unpack_row(ty, &w, &mut q, &mut scale, &mut min),
            "{ty}"
        );
        let reference = dequantized(ty, &w, 1, n);
        let amax = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(amax > 0.0, "{ty}: degenerate test row");
        for (k, &want) in reference.iter().enumerate() {
            let got = scale[k / sub] * q[k] as f32 + min[k / sub];
            assert!(
                (got - want).abs() <= 1e-5 * amax,
                "{ty} element {k}: unpacked {got}, reference {want}"
            );
        }
    }
}

#[test]
fn malformed_rows_are_refused() {
    let (mut q, mut scale, mut min) = (vec![0u8; 256], vec![0f32; 8], vec![0f32; 8]);
    let short = vec![0u8; GgmlType::Q4_K.type_size() - 1];
    assert!(!unpack::unpack_row(
        GgmlType::Q4_K,
        &short,
        &mut q,
        &mut scale,
        &mut min
    ));
    let f16_row = vec![0u8; 512];
    assert!(!unpack::unpack_row(
        GgmlType::F16,
        &f16_row,
        &mut q,
        &mut scale,
        &mut min
    ));
    // 256 elements of Q4_K need 8 (scale, min) pairs, not 7
    let row = vec![0u8; GgmlType::Q4_K.type_size()];
    assert!(!unpack::unpack_row(
        GgmlType::Q4_K,
        &row,
        &mut q,
        &mut scale[..7],
        &mut min[..7]
    ));
}

#[test]
fn activation_quantization_error_is_half_a_step() {
    let (rows, k) = (3, 96);
    let mut rng = Rng(7);
    let mut x: Vec<f32> = (0..rows * k).map(|_| rng.unit() * 3.0).collect();
    x[32..64].fill(0.0); // an all-zero block gets scale 0
    let pool = ThreadPool::new(2);
    let mut acts = Acts::default();
    acts.quantize(&pool, &x, rows, k);
    for (i, &v) in x.iter().enumerate() {
        let (m, kk) = (i / k, i % k);
        let d = acts.d[m * k / 32 + kk / 32];
        let back = d * acts.q[i] as f32;
        assert!(
            (back - v).abs() <= d * 0.5 + 1e-6,
            "element {i}: {v} -> {back}"
        );
    }
    for (b, s) in acts.sum16.iter().enumerate() {
        let q: i32 = acts.q[b * 16..][..16].iter().map(|&v| v as i32).sum();
        assert_eq!(*s, acts.d[b / 2] * q as f32);
    }
    assert_eq!(acts.d[1], 0.0);
    assert!(acts.d[0] > 0.0 && acts.d[2] > 0.0);
}

/// `(rows, n_out)` f64 products of the dequantized weights and the dequantized activations.
/// `out (rows, n_out)` within 1e-4 of the largest output of the f64 product of the
/// dequantized weights `wf` and `x` quantized as the GEMM quantizes it.
pub(crate) fn assert_matches_reference(
    pool: &ThreadPool,
    out: &[f32],
    wf: &[f32],
    x: &[f32],
    rows: usize,
    n_out: usize,
    what: &str,
) {
    let mut acts = Acts::default();
    acts.quantize(pool, x, rows, x.len() / rows);
    let want = reference_gemm(wf, &acts, n_out);
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
        assert!(
            (got as f64 - want).abs() <= 1e-4 * scale,
            "{what} output {i}: {got} vs {want}"
        );
    }
}

fn reference_gemm(w: &[f32], acts: &Acts, n_out: usize) -> Vec<f64> {
    let k = acts.k;
    let x: Vec<f64> = (0..acts.rows * k)
        .map(|i| acts.d[i / 32] as f64 * acts.q[i] as f64)
        .collect();
    let mut out = vec![0f64; acts.rows * n_out];
    for m in 0..acts.rows {
        for n in 0..n_out {
            out[m * n_out + n] = (0..k).map(|kk| w[n * k + kk] as f64 * x[m * k + kk]).sum();
        }
    }
    out
}

/// `out (rows, n_out)` within 1e-4 of the largest output of the f64 product of what the bf16
/// kernel multiplies: weights `scale * q + min` and activations, each rounded to bf16.
fn assert_matches_bf16_reference(out: &[f32], w: &WeightView, x: &[f32], rows: usize, what: &str) {
    let (k, n_out) = (w.n_in, w.n_out);
    let bf = |v: f32| half::bf16::from_f32(v).to_f64();
    let sub = unpack::sub_block(w.ty).unwrap();
    let (mut q, mut scale, mut min) = (vec![0u8; k], vec![0f32; k / sub], vec![0f32; k / sub]);
    let row_bytes = w.data.len() / n_out;
    let mut wb = vec![0f64; n_out * k];
    for n in 0..n_out {
        assert!(unpack::unpack_row(
            w.ty,
            &w.data[n * row_bytes..][..row_bytes],
            &mut q,
            &mut scale,
            &mut min
        ));
        for e in 0..k {
            wb[n * k + e] = bf(scale[e / sub].mul_add(q[e] as f32, min[e / sub]));
        }
    }
    let want: Vec<f64> = (0..rows * n_out)
        .map(|i| {
            let (m, n) = (i / n_out, i % n_out);
            (0..k).map(|e| wb[n * k + e] * bf(x[m * k + e])).sum()
        })
        .collect();
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
        assert!(
            (got as f64 - want).abs() <= 1e-4 * scale,
            "{what} output {i}: {got} vs {want}"
        );
    }
}

/// The AMX-BF16 kernel's conversions (plain AVX-512, so they run without AMX): weights into
/// AMX's B layout and activations, both rounded as `half` rounds to bf16.
#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_conversions_round_to_nearest_even() {
    if tier() < Tier::Avx512 || !is_x86_feature_detected!("avx512bf16") {
        return;
    }
    let k = 256;
    let mut rng = Rng(0xbf16);
    for ty in [GgmlType::Q4_1, GgmlType::Q4_K] {
        let w = weights(ty, 11, k, &mut rng);
        let view = WeightView::new(ty, 11, k, &w);
        let mut t = Tile::default();
        assert!(t.unpack(&view, 0));
        let mut out = vec![0u16; k * NR];
        // SAFETY: the tier has AVX-512 and the CPU AVX512-BF16.
        unsafe { x86_amx::weights_to_bf16(&t, &mut out) };
        for n in 0..NR {
            for e in 0..k {
                let q = t.q[(e / 4 * NR + n) * 4 + e % 4] as f32;
                let v = t.scale[e / t.sub * NR + n].mul_add(q, t.min[e / t.sub * NR + n]);
                let got = out[(e / 2 * NR + n) * 2 + e % 2];
                assert_eq!(
                    got,
                    half::bf16::from_f32(v).to_bits(),
                    "{ty} row {n} element {e}"
                );
            }
        }
    }
    let mut x: Vec<f32> = (0..64).map(|_| rng.unit() * 1e3).collect();
    x[..6].copy_from_slice(&[
        f32::NAN,
        f32::INFINITY,
        -0.0,
        1.0 + f32::EPSILON,
        f32::MAX,
        1e-40,
    ]);
    // row 17 of 64 elements: the second row group's second row, in two steps of k
    let mut out = vec![0u16; 2 * MR * 64];
    // SAFETY: the tier has AVX-512; `out` holds two groups of 16 rows.
    unsafe { x86_amx::row_to_bf16_tiled(&x, 17, out.as_mut_ptr()) };
    assert_eq!(x86_amx::tiled_at(17, 33, 64), (2 + 1) * MR * 32 + 32 + 1);
    for (i, &v) in x.iter().enumerate() {
        let want = half::bf16::from_f32(v);
        let got = half::bf16::from_bits(out[x86_amx::tiled_at(17, i, 64)]);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "element {i}: {v} -> {got} vs {want}"
        );
    }
}

/// Every tier's microkernel on this CPU, lowest first.
fn microkernels() -> Vec<(Tier, Microkernel)> {
    let kernels: Vec<_> = available_tiers()
        .into_iter()
        .filter_map(|t| microkernel(t).map(|k| (t, k)))
        .collect();
    if kernels.is_empty() {
        eprintln!("skipped: no GEMM microkernel at tier {}", tier().name());
    }
    kernels
}

#[test]
fn gemm_matches_the_dequantized_product_for_every_type() {
    let pool = ThreadPool::new(2);
    let (k, n_out) = (512, 40); // two whole tiles and a partial one
    for (tier, kernel) in microkernels() {
        for &ty in TYPES {
            let mut rng = Rng(0xfeed ^ ty as u64);
            let wq = weights(ty, n_out, k, &mut rng);
            let wf = dequantized(ty, &wq, n_out, k);
            let view = WeightView::new(ty, n_out, k, &wq);
            for rows in [1, 3, 8, 13, 20, 37] {
                let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
                let mut out = vec![f32::NAN; rows * n_out];
                assert!(gemm_with(kernel, &pool, &[view], &x, rows, &mut [&mut out]));
                let what = format!("{} {ty} rows {rows}", tier.name());
                if kernel.bf16 {
                    assert_matches_bf16_reference(&out, &view, &x, rows, &what);
                } else {
                    assert_matches_reference(&pool, &out, &wf, &x, rows, n_out, &what);
                }
            }
        }
    }
}

/// The fused gate: every tier's `gemm_glu` equals its two products gated afterwards, bit for
/// bit, for whole and partial tiles, one and several panels, both activations.
#[test]
fn gemm_glu_is_the_two_products_then_the_gate() {
    let pool = ThreadPool::new(2);
    let k = 256;
    // the same type, and a K-quant gate with an up of another sub-block size
    let pairs = [
        (GgmlType::Q4_1, GgmlType::Q4_1),
        (GgmlType::Q4_K, GgmlType::Q6_K),
    ];
    for (tier, kernel) in microkernels() {
        for ((n_out, rows), (tg, tu)) in [(40, 9), (64, 37), (16, 200)]
            .into_iter()
            .flat_map(|shape| pairs.map(|pair| (shape, pair)))
        {
            let mut rng = Rng(0x91u64 ^ n_out as u64);
            let (wg, wu) = (
                weights(tg, n_out, k, &mut rng),
                weights(tu, n_out, k, &mut rng),
            );
            let gate = WeightView::new(tg, n_out, k, &wg);
            let up = WeightView::new(tu, n_out, k, &wu);
            let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
            for act in [Activation::SwiGlu, Activation::GeGluTanh] {
                let (mut g, mut u) = (vec![0f32; rows * n_out], vec![0f32; rows * n_out]);
                assert!(gemm_with(
                    kernel,
                    &pool,
                    &[gate, up],
                    &x,
                    rows,
                    &mut [&mut g, &mut u]
                ));
                crate::ops::glu(&mut g, &u, act);
                let mut fused = vec![f32::NAN; rows * n_out];
                assert!(gemm_glu_with(
                    kernel,
                    &pool,
                    [&gate, &up],
                    &x,
                    rows,
                    &mut fused,
                    act
                ));
                let what = format!("{} {tg}/{tu} {n_out}x{rows}, {act:?}", tier.name());
                assert_eq!(fused, g, "{what}");
            }
        }
    }
}

#[test]
fn gemm_fills_several_weights_of_one_input() {
    if microkernel(tier()).is_none() {
        return;
    }
    let pool = ThreadPool::new(2);
    let (k, rows) = (256, MIN_ROWS + 1);
    let mut rng = Rng(11);
    let (a, b) = (GgmlType::Q4_K, GgmlType::Q8_0);
    let (wa, wb) = (weights(a, 16, k, &mut rng), weights(b, 7, k, &mut rng));
    let views = [
        WeightView::new(a, 16, k, &wa),
        WeightView::new(b, 7, k, &wb),
    ];
    let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
    let (mut oa, mut ob) = (vec![0f32; rows * 16], vec![0f32; rows * 7]);
    assert!(applies(&views, rows));
    assert!(gemm(&pool, &views, &x, rows, &mut [&mut oa, &mut ob]));
    for (view, out) in views.iter().zip([&oa, &ob]) {
        let mut single = vec![0f32; out.len()];
        assert!(gemm(
            &pool,
            std::slice::from_ref(view),
            &x,
            rows,
            &mut [&mut single]
        ));
        assert_eq!(out, &single, "{}", view.ty);
    }
}

/// Microseconds to unpack one packed Q4_1 tile of SmolLM2's k (576) and to convert it to bf16:
/// `cargo test --release -p ishizuki-cpu unpack_cost -- --ignored --nocapture`.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore]
fn unpack_cost() {
    if tier() < Tier::Avx512 || !is_x86_feature_detected!("avx512bf16") {
        return;
    }
    let (ty, n_out, k) = (GgmlType::Q4_1, 1536, 576);
    let w = weights(ty, n_out, k, &mut Rng(3));
    let arena = ishizuki_core::huge::HugeArena::default();
    let copy = crate::packed::pack(
        &WeightView::new(ty, n_out, k, &w),
        &arena,
        &crate::pool::ThreadPool::new(2),
        &mut |_| {},
    );
    let view = WeightView {
        packed: copy.as_ref(),
        ..WeightView::new(ty, n_out, k, &w)
    };
    let mut t = Tile::default();
    let mut out = vec![0u16; k * NR];
    let tiles = n_out / NR;
    let start = std::time::Instant::now();
    for tile in 0..tiles {
        assert!(t.unpack(&view, tile * NR));
    }
    let unpack = start.elapsed().as_secs_f64() * 1e6 / tiles as f64;
    let start = std::time::Instant::now();
    for _ in 0..tiles {
        // SAFETY: checked above.
        unsafe { x86_amx::weights_to_bf16(&t, &mut out) };
    }
    let bf16 = start.elapsed().as_secs_f64() * 1e6 / tiles as f64;
    println!(
        "per tile: unpack {unpack:.2} us, to bf16 {bf16:.2} us (packed: {})",
        copy.is_some()
    );
}

/// GFLOP/s of this tier's GEMM on SmolLM2's gate (1536 x 576) and down (576 x 1536) shapes, 512
/// rows, packed Q4_1 weights, 1 and 2 threads, output aligned to a line and skewed; then the
/// gate and up apart (two products, then glu) against the fused `gemm_glu`:
/// `cargo test --release -p ishizuki-cpu gemm_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn gemm_throughput() {
    if microkernel(tier()).is_none() {
        return;
    }
    let ty = GgmlType::Q4_1;
    let arena = ishizuki_core::huge::HugeArena::default();
    for (n_out, k) in [(1536, 576), (576, 1536)] {
        let w = weights(ty, n_out, k, &mut Rng(5));
        let copy = crate::packed::pack(
            &WeightView::new(ty, n_out, k, &w),
            &arena,
            &crate::pool::ThreadPool::new(2),
            &mut |_| {},
        );
        let view = WeightView {
            packed: copy.as_ref(),
            ..WeightView::new(ty, n_out, k, &w)
        };
        let rows = 512;
        let x: Vec<f32> = (0..rows * k).map(|i| (i as f32 * 0.01).sin()).collect();
        let mut buf = vec![0f32; rows * n_out + 16];
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            // the output's first element on a cache line's start, then 16 bytes past one
            for skew in [0, 4] {
                let at = (buf.as_ptr() as usize / 4).wrapping_neg() % 16 + skew;
                let out = &mut buf[at..][..rows * n_out];
                let best = (0..20)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        assert!(gemm(&pool, &[view], &x, rows, &mut [&mut *out]));
                        start.elapsed().as_secs_f64()
                    })
                    .fold(f64::MAX, f64::min);
                let gflops = 2.0 * (rows * n_out * k) as f64 / best / 1e9;
                println!(
                    "{} {n_out}x{k}, {rows} rows, {threads} threads, output {}: {:.0} us, \
                     {gflops:.0} GFLOP/s",
                    tier().name(),
                    if skew == 0 { "aligned" } else { "skewed" },
                    best * 1e6
                );
            }
        }
        if n_out != 1536 {
            continue;
        }
        // SmolLM2's gate and up: both products then the gate, against the fused call
        let ws = [view, view];
        let (mut g, mut u) = (vec![0f32; rows * n_out], vec![0f32; rows * n_out]);
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            let time = |f: &mut dyn FnMut()| {
                (0..20)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        f();
                        start.elapsed().as_secs_f64() * 1e6
                    })
                    .fold(f64::MAX, f64::min)
            };
            let act = Activation::SwiGlu;
            let apart = time(&mut || {
                assert!(gemm(&pool, &ws, &x, rows, &mut [&mut g, &mut u]));
                crate::ops::glu(&mut g, &u, act);
            });
            let fused =
                time(&mut || assert!(gemm_glu(&pool, [&view, &view], &x, rows, &mut g, act)));
            println!(
                "gate+up {n_out}x{k}, {threads} threads: apart {apart:.0} us, fused {fused:.0} us"
            );
        }
    }
}
