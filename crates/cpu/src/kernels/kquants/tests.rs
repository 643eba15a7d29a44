//! Every tier against the scalar reference, and the scalar reference against an f32 dot of the
//! dequantized rows, for 1..=4 activation rows, several row lengths and edge-valued blocks.
use super::kernel;
use crate::kernels::MAX_ROWS;
use crate::simd::{available_tiers, detected_tier, Tier};
use crate::test_rng::Rng;
use ishizuki_core::quant::{dequantize_row, f32_to_f16, quantize_row, QK_K};
use ishizuki_core::GgmlType;

const TYPES: &[GgmlType] = &[
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q5_K,
    GgmlType::Q3_K,
    GgmlType::Q2_K,
    GgmlType::IQ4_XS,
];

/// Byte offsets of the f16 scale fields inside one block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::Q3_K => &[108],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::IQ4_XS => &[0],
        _ => unreachable!("not a k-quant: {ty}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fill {
    Random,
    AllOnes,
    AllZeros,
    /// Gaussian-ish weights through the reference quantizer (types it supports).
    Quantized,
}

/// A weight row of `nb` blocks: data bytes per `fill`, finite f16 scales of either sign.
fn weight_row(ty: GgmlType, nb: usize, fill: Fill, rng: &mut Rng) -> Vec<u8> {
    let size = ty.type_size();
    if fill == Fill::Quantized {
        let x: Vec<f32> = (0..nb * QK_K)
            .map(|_| (0..4).map(|_| rng.unit()).sum::<f32>() * 0.02)
            .collect();
        let mut w = vec![0u8; nb * size];
        quantize_row(ty, &x, &mut w).unwrap();
        return w;
    }
    let mut w: Vec<u8> = (0..nb * size)
        .map(|_| match fill {
            Fill::Random => rng.next() as u8,
            Fill::AllOnes => 0xff,
            Fill::AllZeros | Fill::Quantized => 0,
        })
        .collect();
    for block in w.chunks_exact_mut(size) {
        for &at in f16_fields(ty) {
            let scale = rng.unit() * 0.05;
            block[at..at + 2].copy_from_slice(&f32_to_f16(scale));
        }
    }
    w
}

/// An activation row quantized to Q8_K; `saturate` gives +-max everywhere (quants of +-127).
fn act_row(n: usize, saturate: bool, rng: &mut Rng) -> Vec<u8> {
    let x: Vec<f32> = (0..n)
        .map(|i| match saturate {
            true if i % 3 == 0 => -1.0,
            true => 1.0,
            false => rng.unit() * 3.0,
        })
        .collect();
    let mut q = vec![0u8; GgmlType::Q8_K.row_bytes(n as u64).unwrap() as usize];
    quantize_row(GgmlType::Q8_K, &x, &mut q).unwrap();
    q
}

fn dequantized(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    dequantize_row(ty, bytes, &mut out).unwrap();
    out
}

fn run(ty: GgmlType, tier: Tier, n: usize, w: &[u8], xs: &[&[u8]]) -> Vec<f32> {
    let k = kernel(ty, tier).expect("kernel");
    assert_eq!(k.act, GgmlType::Q8_K);
    let mut out = vec![f32::NAN; xs.len()];
    // SAFETY: `tier` comes from available_tiers(); slices hold whole rows of n elements.
    unsafe { (k.dot)(n, w, xs, &mut out) };
    out
}

fn check_type(ty: GgmlType) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ty as u64);
    for nb in [1, 2, 7] {
        let n = nb * QK_K;
        let quantizable = matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K);
        let fills = [Fill::Random, Fill::AllOnes, Fill::AllZeros, Fill::Quantized];
        for fill in fills
            .into_iter()
            .filter(|f| *f != Fill::Quantized || quantizable)
        {
            let w = weight_row(ty, nb, fill, &mut rng);
            let wf = dequantized(ty, &w, n);
            let acts: Vec<Vec<u8>> = (0..MAX_ROWS)
                .map(|r| act_row(n, r == 1, &mut rng))
                .collect();
            for rows in 1..=MAX_ROWS {
                let xs: Vec<&[u8]> = acts[..rows].iter().map(|a| a.as_slice()).collect();
                let scalar = run(ty, Tier::Scalar, n, &w, &xs);
                for (r, x) in xs.iter().enumerate() {
                    let xf = dequantized(GgmlType::Q8_K, x, n);
                    let exact: f64 = wf.iter().zip(&xf).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let mag: f64 = wf
                        .iter()
                        .zip(&xf)
                        .map(|(a, b)| (*a as f64 * *b as f64).abs())
                        .sum();
                    let what = format!("{ty} n={n} {fill:?} rows={rows} row {r}");
                    assert!(
                        (scalar[r] as f64 - exact).abs() <= 1e-4 * mag + 1e-30,
                        "{what}: scalar {} vs f32 {exact} (|terms| {mag})",
                        scalar[r]
                    );
                    for &tier in &available_tiers()[1..] {
                        let got = run(ty, tier, n, &w, &xs)[r];
                        assert!(
                            (got as f64 - scalar[r] as f64).abs() <= 1e-5 * mag + 1e-30,
                            "{what} {}: {got} vs scalar {} (|terms| {mag})",
                            tier.name(),
                            scalar[r]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn q4_k_all_tiers() {
    check_type(GgmlType::Q4_K);
}

#[test]
fn q6_k_all_tiers() {
    check_type(GgmlType::Q6_K);
}

#[test]
fn q5_k_all_tiers() {
    check_type(GgmlType::Q5_K);
}

#[test]
fn q3_k_all_tiers() {
    check_type(GgmlType::Q3_K);
}

#[test]
fn q2_k_all_tiers() {
    check_type(GgmlType::Q2_K);
}

#[test]
fn iq4_xs_all_tiers() {
    check_type(GgmlType::IQ4_XS);
}

#[test]
fn odd_addresses() {
    let mut rng = Rng(7);
    for &ty in TYPES {
        let n = 3 * QK_K;
        let w = weight_row(ty, 3, Fill::Random, &mut rng);
        let acts: Vec<Vec<u8>> = (0..MAX_ROWS).map(|_| act_row(n, false, &mut rng)).collect();
        let shifted = |bytes: &[u8]| {
            let mut v = vec![0u8; bytes.len() + 1];
            v[1..].copy_from_slice(bytes);
            v
        };
        let w_odd = shifted(&w);
        let acts_odd: Vec<Vec<u8>> = acts.iter().map(|a| shifted(a)).collect();
        let xs: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
        let xs_odd: Vec<&[u8]> = acts_odd.iter().map(|a| &a[1..]).collect();
        for tier in available_tiers() {
            let aligned = run(ty, tier, n, &w, &xs);
            let odd = run(ty, tier, n, &w_odd[1..], &xs_odd);
            assert_eq!(aligned, odd, "{ty} {}", tier.name());
        }
    }
}

#[test]
fn bad_lengths_give_nan() {
    let mut rng = Rng(11);
    for &ty in TYPES {
        let w = weight_row(ty, 2, Fill::Random, &mut rng);
        let x = act_row(2 * QK_K, false, &mut rng);
        for tier in available_tiers() {
            assert!(run(ty, tier, QK_K, &w, &[&x])[0].is_nan());
            assert!(run(ty, tier, 2 * QK_K, &w[1..], &[&x])[0].is_nan());
            assert!(run(ty, tier, 2 * QK_K, &w, &[&x[1..]])[0].is_nan());
            assert!(run(ty, tier, 2 * QK_K + 1, &w, &[&x])[0].is_nan());
        }
    }
}

#[test]
fn tiers_resolve() {
    for &ty in TYPES {
        assert_eq!(kernel(ty, Tier::Scalar).unwrap().tier, Tier::Scalar);
        for tier in available_tiers() {
            assert_eq!(kernel(ty, tier).unwrap().tier, tier.vector_tier(), "{ty}");
        }
        let best = detected_tier().vector_tier();
        assert_eq!(kernel(ty, detected_tier()).unwrap().tier, best);
    }
    assert!(kernel(GgmlType::Q4_0, Tier::Avx512).is_none());
}

/// Single-thread throughput in GB/s of weight bytes for 4096-wide rows, 1 and 4 activation
/// rows, over an L2-sized matrix (256 rows) and a 4096x4096 one:
/// `cargo test --release -p ishizuki-cpu kquants::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    let pool = crate::pool::ThreadPool::new(1);
    for mb in [1, 16] {
        let bw = crate::membw::read_bandwidth(&pool, mb << 20, 5);
        println!("single-thread read bandwidth over {mb} MiB: {bw:.1} GB/s");
    }
    let mut rng = Rng(3);
    let n = 4096;
    let only = std::env::var("KQ_TYPE").ok();
    for &ty in TYPES
        .iter()
        .filter(|t| only.as_ref().is_none_or(|o| *o == t.to_string()))
    {
        for n_out in [256, 4096] {
            let w = weight_row(ty, n_out * n / QK_K, Fill::Random, &mut rng);
            let acts: Vec<Vec<u8>> = (0..MAX_ROWS).map(|_| act_row(n, false, &mut rng)).collect();
            for tier in available_tiers() {
                let mut line = format!("{ty:7} {n_out:4}x{n} {:12}", tier.name());
                for rows in [1, MAX_ROWS] {
                    let gbs = w.len() as f64 / best_pass_secs(ty, tier, n, &w, &acts[..rows]) / 1e9;
                    line += &format!("  {rows} row(s): {gbs:6.1} GB/s");
                }
                println!("{line}");
            }
        }
    }
}

/// Fastest of many timed passes over every weight row (the minimum filters out time lost to
/// other processes on a shared machine).
fn best_pass_secs(ty: GgmlType, tier: Tier, n: usize, w: &[u8], acts: &[Vec<u8>]) -> f64 {
    let k = kernel(ty, tier).unwrap();
    let row_bytes = ty.row_bytes(n as u64).unwrap() as usize;
    let xs: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
    let mut out = [0f32; MAX_ROWS];
    let mut best = f64::INFINITY;
    let start = std::time::Instant::now();
    while start.elapsed().as_secs_f64() < 0.5 {
        let t = std::time::Instant::now();
        for row in w.chunks_exact(row_bytes) {
            // SAFETY: available tier, whole rows.
            unsafe { (k.dot)(n, row, &xs, &mut out[..xs.len()]) };
            std::hint::black_box(&out);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}
