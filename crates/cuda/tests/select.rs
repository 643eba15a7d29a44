//! The device's top-k selection against the CPU's `top_candidates`, bit for bit: widths from
//! 5 to a 262,144-token vocabulary, k from 1 to TOP_K_MAX, rows of ties, signed zeros,
//! infinities and NaN. Without a GPU these skip, unless ISHIZUKI_REQUIRE_CUDA is set.
use ishizuki_core::backend::{top_k_rows, Candidate, TOP_K_MAX};
use ishizuki_core::Backend;
use ishizuki_cuda::CudaBackend;
use std::sync::OnceLock;

mod common;
use common::{open_gpu, Rng};

fn gpu() -> Option<&'static CudaBackend> {
    static GPU: OnceLock<Option<CudaBackend>> = OnceLock::new();
    GPU.get_or_init(|| open_gpu(false)).as_ref()
}

/// One row of each kind: random, tie-rich with the special values, all equal, nearly all
/// NaN (fewer finite values than most k), all NaN.
fn rows_of_every_kind(width: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = rng.vec(width);
    x.extend((0..width).map(|_| match rng.next() % 16 {
        0 => f32::NAN,
        1 => f32::NEG_INFINITY,
        2 => -0.0,
        3 => 0.0,
        4 => f32::INFINITY,
        r => ((rng.next() >> 40) % 24) as f32 * 0.5 - 6.0 + r as f32 * 0.25,
    }));
    x.extend(std::iter::repeat_n(-0.0, width));
    x.extend((0..width).map(|i| if i % 97 == 5 { i as f32 } else { f32::NAN }));
    x.extend(std::iter::repeat_n(f32::NAN, width));
    x
}

fn bits(rows: &[Vec<Candidate>]) -> Vec<Vec<(u32, u32)>> {
    rows.iter()
        .map(|r| r.iter().map(|c| (c.id, c.logit.to_bits())).collect())
        .collect()
}

#[test]
fn top_k_selects_what_the_cpu_selects() {
    let Some(cuda) = gpu() else { return };
    let mut rng = Rng(29);
    for width in [5, 1000, 1024, 1025, 32_000, 151_936, 262_144] {
        let x = rows_of_every_kind(width, &mut rng);
        let rows = x.len() / width;
        let xb = cuda.load_vector(&x).unwrap();
        for k in [1, 2, 40, 64, 1000, TOP_K_MAX] {
            let got = cuda.top_k(&xb, rows, width, k).unwrap();
            let want = top_k_rows(&x, rows, width, k);
            for (r, (g, w)) in bits(&got).iter().zip(bits(&want)).enumerate() {
                assert_eq!(g, &w, "width {width}, k {k}, row {r}");
            }
        }
    }
}

#[test]
fn top_k_of_nothing_and_too_wide_a_k() {
    let Some(cuda) = gpu() else { return };
    let xb = cuda.load_vector(&[1.0, 2.0, 3.0]).unwrap();
    assert_eq!(cuda.top_k(&xb, 1, 3, 0).unwrap(), vec![Vec::new()]);
    assert!(cuda.top_k(&xb, 0, 3, 5).unwrap().is_empty());
    assert!(cuda.top_k(&xb, 1, 3, TOP_K_MAX + 1).is_err());
    assert!(cuda.top_k(&xb, 2, 3, 1).is_err(), "past the buffer's end");
}
