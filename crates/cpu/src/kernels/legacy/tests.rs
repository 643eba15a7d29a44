use super::kernel;
use crate::kernels::MAX_ROWS;
use crate::simd::{available_tiers, detected_tier, Tier};
use crate::test_rng::Rng;
use ishizuki_core::quant::{dequantize_row, f16_to_f32, f32_to_f16, quantize_row};
use ishizuki_core::GgmlType::{self, *};

const TYPES: [GgmlType; 6] = [Q4_1, Q8_0, Q5_0, Q4_0, Q5_1, IQ4_NL];

fn has_min(ty: GgmlType) -> bool {
    matches!(ty, Q4_1 | Q5_1)
}

/// Random block bytes with finite f16 scales (and mins) of mixed sign and magnitude.
fn random_weights(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mut w: Vec<u8> = (0..n / 32 * ty.type_size())
        .map(|_| rng.next() as u8)
        .collect();
    for block in w.chunks_exact_mut(ty.type_size()) {
        let magnitude = [0.001, 0.02, 0.5][(rng.next() % 3) as usize];
        block[..2].copy_from_slice(&f32_to_f16(rng.unit() * magnitude));
        if has_min(ty) {
            block[2..4].copy_from_slice(&f32_to_f16(rng.unit() * magnitude * 8.0));
        }
    }
    w
}

fn random_activations(act: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let scale = [0.01, 1.0, 30.0][(rng.next() % 3) as usize];
    let x: Vec<f32> = (0..n).map(|_| rng.unit() * scale).collect();
    let mut q = vec![0u8; n / 32 * act.type_size()];
    quantize_row(act, &x, &mut q).unwrap();
    q
}

/// Activation values d * q; Q8_1 blocks are Q8_0 blocks with `s` inserted after `d`.
fn dequantize_activations(act: GgmlType, q: &[u8], n: usize) -> Vec<f32> {
    let q8_0: Vec<u8> = match act {
        Q8_1 => q
            .chunks_exact(36)
            .flat_map(|b| b[..2].iter().chain(&b[4..]))
            .copied()
            .collect(),
        _ => q.to_vec(),
    };
    let mut x = vec![0f32; n];
    dequantize_row(Q8_0, &q8_0, &mut x).unwrap();
    x
}

/// (f64 dot of the dequantized rows, bound on the f32 kernels' rounding): 1e-4 of the sum of
/// |terms| plus, for Q8_1, the f16 rounding of each stored `s = d * sum(q)` times |m|.
fn reference(ty: GgmlType, w: &[u8], x: &[u8], n: usize) -> (f64, f64) {
    let act = kernel(ty, Tier::Scalar).unwrap().act;
    let mut wf = vec![0f32; n];
    dequantize_row(ty, w, &mut wf).unwrap();
    let xf = dequantize_activations(act, x, n);
    let dot: f64 = wf.iter().zip(&xf).map(|(a, b)| *a as f64 * *b as f64).sum();
    let mut bound: f64 = wf
        .iter()
        .zip(&xf)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    bound *= 1e-4;
    if has_min(ty) {
        for (wb, xb) in w.chunks_exact(ty.type_size()).zip(x.chunks_exact(36)) {
            let (m, s) = (f16_to_f32([wb[2], wb[3]]), f16_to_f32([xb[2], xb[3]]));
            bound += (m as f64 * s as f64).abs() * 2f64.powi(-10);
        }
    }
    (dot, bound)
}

/// `bytes` copied to `shift` bytes into a fresh buffer, so the slice starts at an odd address.
fn shifted(bytes: &[u8], shift: usize) -> Vec<u8> {
    let mut buf = vec![0u8; bytes.len() + shift];
    buf[shift..].copy_from_slice(bytes);
    buf
}

fn run(ty: GgmlType, tier: Tier, n: usize, w: &[u8], xs: &[Vec<u8>], shift: usize) -> Vec<f32> {
    let k = kernel(ty, tier).unwrap();
    let w_buf = shifted(w, shift);
    let x_bufs: Vec<Vec<u8>> = xs.iter().map(|x| shifted(x, shift)).collect();
    let x_rows: Vec<&[u8]> = x_bufs.iter().map(|b| &b[shift..]).collect();
    let mut out = vec![f32::NAN; xs.len()];
    // SAFETY: `kernel` hands out tiers this CPU has; every slice holds one row of n elements.
    unsafe { (k.dot)(n, &w_buf[shift..], &x_rows, &mut out) };
    out
}

fn check_type(ty: GgmlType, seed: u64) {
    let act = kernel(ty, Tier::Scalar).unwrap().act;
    let mut rng = Rng(seed);
    for blocks in [1, 2, 7, 8, 9, 17] {
        let n = blocks * 32;
        for rows in 1..=MAX_ROWS {
            let w = random_weights(ty, n, &mut rng);
            let xs: Vec<Vec<u8>> = (0..rows)
                .map(|_| random_activations(act, n, &mut rng))
                .collect();
            let scalar = run(ty, Tier::Scalar, n, &w, &xs, 0);
            for (r, x) in xs.iter().enumerate() {
                let (exact, bound) = reference(ty, &w, x, n);
                let err = (scalar[r] as f64 - exact).abs();
                assert!(
                    err <= bound,
                    "{ty} scalar n={n} row {r}: {} vs {exact}",
                    scalar[r]
                );
                for tier in available_tiers() {
                    for shift in [0, 1] {
                        let got = run(ty, tier, n, &w, &xs, shift)[r];
                        let err = (got as f64 - scalar[r] as f64).abs();
                        assert!(
                            err <= bound * 0.1,
                            "{ty} {} n={n} rows={rows} row {r} shift {shift}: {got} vs scalar {}",
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
fn q4_1_tiers_match_reference() {
    check_type(Q4_1, 0x4141);
}

#[test]
fn q8_0_tiers_match_reference() {
    check_type(Q8_0, 0x8080);
}

#[test]
fn q5_0_tiers_match_reference() {
    check_type(Q5_0, 0x5050);
}

#[test]
fn q4_0_tiers_match_reference() {
    check_type(Q4_0, 0x4040);
}

#[test]
fn q5_1_tiers_match_reference() {
    check_type(Q5_1, 0x5151);
}

#[test]
fn iq4_nl_tiers_match_reference() {
    check_type(IQ4_NL, 0x1441);
}

/// Largest magnitudes everywhere: |w| = 128 (Q8_0) or the top level of each format against
/// |y| = 127 must not saturate any intermediate.
#[test]
fn extreme_values_do_not_saturate() {
    for ty in TYPES {
        let act = kernel(ty, Tier::Scalar).unwrap().act;
        let n = 64;
        for (wbyte, xval) in [(0x80u8, -1.0f32), (0xff, 1.0), (0x00, -1.0), (0x88, 1.0)] {
            let mut w = vec![wbyte; n / 32 * ty.type_size()];
            for block in w.chunks_exact_mut(ty.type_size()) {
                block[..2].copy_from_slice(&f32_to_f16(0.5));
                if has_min(ty) {
                    block[2..4].copy_from_slice(&f32_to_f16(-0.25));
                }
            }
            let mut x = vec![0u8; n / 32 * act.type_size()];
            quantize_row(act, &vec![xval; n], &mut x).unwrap();
            let xs = vec![x.clone(); MAX_ROWS];
            let (exact, bound) = reference(ty, &w, &x, n);
            for tier in available_tiers() {
                for got in run(ty, tier, n, &w, &xs, 0) {
                    let err = (got as f64 - exact).abs();
                    assert!(
                        err <= bound,
                        "{ty} {} byte {wbyte:#x}: {got} vs {exact}",
                        tier.name()
                    );
                }
            }
        }
    }
}

#[test]
fn tiers_are_reported() {
    for ty in TYPES {
        assert_eq!(kernel(ty, Tier::Scalar).unwrap().tier, Tier::Scalar);
        let best = kernel(ty, detected_tier()).unwrap().tier;
        let expected = if cfg!(target_arch = "x86_64") {
            detected_tier().vector_tier()
        } else {
            Tier::Scalar
        };
        assert_eq!(best, expected, "{ty}");
        let act = kernel(ty, Tier::Scalar).unwrap().act;
        assert_eq!(act, if has_min(ty) { Q8_1 } else { Q8_0 });
    }
    for ty in [Q4_K, Q6_K, F32, F16, IQ4_XS] {
        assert!(kernel(ty, detected_tier()).is_none(), "{ty}");
    }
}

/// (n, weight row, activation rows) of one call.
type Call<'a> = (usize, &'a [u8], Vec<&'a [u8]>);

/// Slices that break the contract give NaN outputs instead of reads past their ends.
#[test]
fn bad_lengths_poison_the_output() {
    for ty in TYPES {
        let act = kernel(ty, Tier::Scalar).unwrap().act;
        let n = 64;
        let w = vec![0u8; 2 * ty.type_size()];
        let short = vec![0u8; act.type_size()];
        let full = vec![0u8; 2 * act.type_size()];
        for tier in available_tiers() {
            let dot = kernel(ty, tier).unwrap().dot;
            let cases: [Call; 4] = [
                (n, &w, vec![&short]),
                (n, &w[1..], vec![&full]),
                (n + 1, &w, vec![&full]),
                (n, &w, vec![&full; MAX_ROWS + 1]),
            ];
            for (len, w, xs) in cases {
                let mut out = vec![0f32; xs.len()];
                // SAFETY: the kernels check lengths before reading.
                unsafe { dot(len, w, &xs, &mut out) };
                assert!(out.iter().all(|v| v.is_nan()), "{ty} {}", tier.name());
            }
        }
    }
}

/// Single-thread GB/s of weight bytes over a 4096 x 4096-equivalent matrix (L3-resident; set
/// LEGACY_BENCH_ROWS=256 for an L2-resident one, LEGACY_BENCH_N for other row lengths at the
/// same size), one and four activation rows, every tier in
/// the same run, best of 20 passes (LEGACY_BENCH_REPS):
/// `cargo test --release -p ishizuki-cpu legacy_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn legacy_throughput() {
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (n_rows, reps) = (env("LEGACY_BENCH_ROWS", 4096), env("LEGACY_BENCH_REPS", 20));
    let n = env("LEGACY_BENCH_N", 4096);
    let mut rng = Rng(7);
    for ty in TYPES {
        let act = kernel(ty, Tier::Scalar).unwrap().act;
        let row_bytes = n / 32 * ty.type_size();
        let w = random_weights(ty, 4096 * n_rows, &mut rng);
        let xs: Vec<Vec<u8>> = (0..MAX_ROWS)
            .map(|_| random_activations(act, n, &mut rng))
            .collect();
        for tier in available_tiers() {
            let dot = kernel(ty, tier).unwrap().dot;
            let mut line = format!("{ty:>6} {:>11}", tier.name());
            for rows in [1, MAX_ROWS] {
                let x_rows: Vec<&[u8]> = xs[..rows].iter().map(|x| x.as_slice()).collect();
                let mut out = [0f32; MAX_ROWS];
                let mut best = f64::MAX;
                for _ in 0..reps {
                    let start = std::time::Instant::now();
                    for wr in w.chunks_exact(row_bytes) {
                        // SAFETY: as in `run`.
                        unsafe { dot(n, wr, &x_rows, &mut out[..rows]) };
                    }
                    best = best.min(start.elapsed().as_secs_f64());
                    std::hint::black_box(&out);
                }
                line += &format!("  {rows} row(s): {:6.1} GB/s", w.len() as f64 / best / 1e9);
            }
            println!("{line}");
        }
        if let Some(dot) = super::row_dot(ty, detected_tier()) {
            let a = gemm_activations(n, &mut rng);
            // prefetching as `gemv` does
            for ahead in [0, crate::matmul::PREFETCH_BYTES] {
                let mut best = f64::MAX;
                for _ in 0..reps {
                    let start = std::time::Instant::now();
                    let mut out = [0f32; super::ROWS];
                    for (i, wr) in w.chunks_exact(row_bytes * super::ROWS).enumerate() {
                        if ahead > 0 {
                            crate::matmul::prefetch(&w, i * wr.len() + ahead, wr.len());
                        }
                        // SAFETY: as in `row_kernels_match_the_dequantized_dot`.
                        unsafe { dot(n, wr, &a.q, &a.d, &a.sum32, &mut out) };
                        std::hint::black_box(&out);
                    }
                    best = best.min(start.elapsed().as_secs_f64());
                }
                let gbs = w.len() as f64 / best / 1e9;
                println!("{ty:>6} row kernel, prefetch {ahead:4} B: {gbs:6.1} GB/s");
            }
        }
    }
}

/// GEMM-form activations of `n` random values: (quants, per-32 scales, scaled sums).
fn gemm_activations(n: usize, rng: &mut Rng) -> crate::gemm::Acts {
    let scale = [0.01, 1.0, 30.0][(rng.next() % 3) as usize];
    let x: Vec<f32> = (0..n).map(|_| rng.unit() * scale).collect();
    let mut acts = crate::gemm::Acts::default();
    acts.quantize(&crate::pool::ThreadPool::new(1), &x, 1, n);
    acts
}

#[test]
#[cfg(target_arch = "x86_64")]
fn row_kernels_match_the_dequantized_dot() {
    if super::row_dot(Q8_0, detected_tier()).is_none() {
        eprintln!("skipped: no row kernels at tier {}", detected_tier().name());
        return;
    }
    let mut rng = Rng(0xd0c0de);
    for ty in TYPES {
        let dot = super::row_dot(ty, detected_tier()).unwrap();
        // whole groups of 8 blocks, odd and even tails; 1..=ROWS weight rows per call
        for n in [32, 64, 96, 256, 288, 576, 640] {
            for rows in 1..=super::ROWS {
                let w = random_weights(ty, n * rows, &mut rng);
                let a = gemm_activations(n, &mut rng);
                let mut wf = vec![0f32; n * rows];
                dequantize_row(ty, &w, &mut wf).unwrap();
                let w_buf = shifted(&w, 3);
                let mut got = vec![f32::NAN; rows];
                // SAFETY: the tier was detected; w holds `rows` rows of n elements.
                unsafe { dot(n, &w_buf[3..], &a.q, &a.d, &a.sum32, &mut got) };
                for (r, got) in got.iter().enumerate() {
                    let xf = (0..n).map(|i| a.d[i / 32] as f64 * a.q[i] as f64);
                    let wr = &wf[r * n..][..n];
                    let terms: Vec<f64> = wr.iter().zip(xf).map(|(w, x)| *w as f64 * x).collect();
                    let want: f64 = terms.iter().sum();
                    let bound = 1e-4 * terms.iter().map(|t| t.abs()).sum::<f64>() + 1e-30;
                    assert!(
                        (*got as f64 - want).abs() <= bound,
                        "{ty} n {n} row {r}/{rows}: {got} vs {want} (bound {bound})"
                    );
                }
            }
        }
        let a = gemm_activations(64, &mut rng);
        let short = random_weights(ty, 32, &mut rng);
        let mut bad = [0f32; 1];
        // SAFETY: as above; the short weight row is reported, not read past.
        unsafe { dot(64, &short, &a.q, &a.d, &a.sum32, &mut bad) };
        assert!(bad[0].is_nan(), "{ty}: a short row gives NaN");
    }
}
