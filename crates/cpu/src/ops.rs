//! Elementwise and row ops: RMS norm, rotary embedding, gated activations.
use ishizuki_core::backend::{Activation, NormKind, RopeKind};

pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32, kind: NormKind) {
    let n = w.len();
    if n == 0 {
        return;
    }
    for row in x.chunks_exact_mut(n) {
        let mean_sq = sum_squares(row) / n as f64 + eps as f64;
        // An all-zero row with eps 0 stays zero instead of becoming 0 * inf.
        let scale = if mean_sq > 0.0 {
            (1.0 / mean_sq.sqrt()) as f32
        } else {
            0.0
        };
        match kind {
            NormKind::Rms => row
                .iter_mut()
                .zip(w)
                .for_each(|(v, wi)| *v = *v * scale * wi),
            NormKind::RmsPlusOne => row
                .iter_mut()
                .zip(w)
                .for_each(|(v, wi)| *v = *v * scale * (1.0 + wi)),
        }
    }
}

/// `sum(v^2)` accumulated in f64.
fn sum_squares(row: &[f32]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::tier() >= crate::simd::Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2 and FMA.
        return unsafe { sum_squares_avx2(row) };
    }
    row.iter().map(|v| (*v as f64) * (*v as f64)).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_squares_avx2(row: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_pd(); 4];
    let chunks = row.chunks_exact(16);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|v| (*v as f64) * (*v as f64))
        .sum();
    for c in chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            let v = _mm256_cvtps_pd(_mm_loadu_ps(c.as_ptr().add(4 * i)));
            *a = _mm256_fmadd_pd(v, v, *a);
        }
    }
    let s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    let mut lanes = [0f64; 4];
    _mm256_storeu_pd(lanes.as_mut_ptr(), s);
    lanes.iter().sum::<f64>() + tail
}

/// The cos/sin tables of the last rope calls: every layer rotates q and k at the same
/// positions, so a table serves the whole forward; models with a local and a global rope
/// theta (Gemma 3) alternate between two.
#[derive(Default)]
struct RopeTable {
    key: (u32, u32, usize),
    positions: Vec<u32>,
    /// `(positions.len(), head_dim / 2)` cosines and sines.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

/// Tables kept per thread, most recently used last.
const ROPE_TABLES: usize = 4;

thread_local! {
    static ROPE_CACHE: std::cell::RefCell<Vec<RopeTable>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl RopeTable {
    /// Angles `pos * freq_scale * theta^(-2i/head_dim)` in f64, so long contexts stay exact.
    fn new(key: (u32, u32, usize), positions: &[u32]) -> RopeTable {
        let (theta, freq_scale, head_dim) = (f32::from_bits(key.0), f32::from_bits(key.1), key.2);
        let inv_freq: Vec<f64> = (0..head_dim / 2)
            .map(|i| freq_scale as f64 * (theta as f64).powf(-2.0 * i as f64 / head_dim as f64))
            .collect();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for &pos in positions {
            for f in &inv_freq {
                let (s, c) = (pos as f64 * f).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        RopeTable {
            key,
            positions: positions.to_vec(),
            cos,
            sin,
        }
    }
}

/// Rotates pairs of `x (rows, n_head, head_dim)` by `pos * freq_scale * theta^(-2i/head_dim)`.
pub fn rope(
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    positions: &[u32],
    theta: f32,
    freq_scale: f32,
    kind: RopeKind,
) {
    with_rope_table(positions, theta, freq_scale, head_dim, |cos, sin| {
        rotate_rows(x, n_head, head_dim, cos, sin, kind)
    })
}

/// `f(cos, sin)` with the `(positions.len(), head_dim / 2)` tables of these positions, from
/// this thread's cache of recent ones.
pub fn with_rope_table<T>(
    positions: &[u32],
    theta: f32,
    freq_scale: f32,
    head_dim: usize,
    f: impl FnOnce(&[f32], &[f32]) -> T,
) -> T {
    let key = (theta.to_bits(), freq_scale.to_bits(), head_dim);
    ROPE_CACHE.with_borrow_mut(|tables| {
        match tables
            .iter()
            .position(|t| t.key == key && t.positions == positions)
        {
            Some(i) => {
                let t = tables.remove(i);
                tables.push(t);
            }
            None => {
                if tables.len() == ROPE_TABLES {
                    tables.remove(0);
                }
                tables.push(RopeTable::new(key, positions));
            }
        }
        let t = tables.last().expect("just pushed");
        f(&t.cos, &t.sin)
    })
}

/// Rotates the rows of `x (rows, n_head, head_dim)` by the rows of `cos` and `sin`
/// `(rows, head_dim / 2)`.
pub fn rotate_rows(
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
    kind: RopeKind,
) {
    let half = head_dim / 2;
    let rows = x.chunks_exact_mut(n_head * head_dim);
    for ((row, cos), sin) in rows.zip(cos.chunks_exact(half)).zip(sin.chunks_exact(half)) {
        for head in row.chunks_exact_mut(head_dim) {
            rotate_head(head, cos, sin, kind);
        }
    }
}

fn rotate_head(head: &mut [f32], cos: &[f32], sin: &[f32], kind: RopeKind) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::tier() >= crate::simd::Tier::Avx2 {
        // SAFETY: the tier guarantees AVX2 and FMA.
        return unsafe { rotate_head_avx2(head, cos, sin, kind) };
    }
    rotate_head_portable(head, cos, sin, kind)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rotate_head_avx2(head: &mut [f32], cos: &[f32], sin: &[f32], kind: RopeKind) {
    rotate_head_portable(head, cos, sin, kind)
}

/// Plain loops over contiguous halves (Neox) or pairs (Norm), which the compiler vectorizes
/// for the tier it is inlined into.
#[inline(always)]
fn rotate_head_portable(head: &mut [f32], cos: &[f32], sin: &[f32], kind: RopeKind) {
    let half = cos.len();
    match kind {
        RopeKind::Neox => {
            let (a, b) = head.split_at_mut(half);
            for (((x0, x1), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
                (*x0, *x1) = (*x0 * c - *x1 * s, *x0 * s + *x1 * c);
            }
        }
        RopeKind::Norm => {
            for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                let (x0, x1) = (pair[0], pair[1]);
                (pair[0], pair[1]) = (x0 * c - x1 * s, x0 * s + x1 * c);
            }
        }
    }
}

pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
}

pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub fn glu(gate: &mut [f32], up: &[f32], act: Activation) {
    match act {
        Activation::SwiGlu => crate::vmath::silu_mul(gate, up),
        Activation::GeGluTanh => crate::vmath::gelu_tanh_mul(gate, up),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_unit_rows() {
        let mut x = vec![3.0, 4.0, 0.0, 0.0];
        rms_norm(&mut x, &[1.0, 1.0], 0.0, NormKind::Rms);
        let r = (12.5f32).sqrt();
        assert!((x[0] - 3.0 / r).abs() < 1e-6 && (x[1] - 4.0 / r).abs() < 1e-6);
        assert_eq!(&x[2..], &[0.0, 0.0]);
        let mut y = vec![1.0, 1.0];
        rms_norm(&mut y, &[1.0, -0.5], 0.0, NormKind::RmsPlusOne);
        assert!((y[0] - 2.0).abs() < 1e-6 && (y[1] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn sum_of_squares_paths_agree() {
        let row: Vec<f32> = (0..1000)
            .map(|i| ((i * 37) % 101) as f32 * 0.37 - 17.0)
            .collect();
        for n in [0, 5, 16, 33, 1000] {
            let exact: f64 = row[..n].iter().map(|v| (*v as f64) * (*v as f64)).sum();
            assert!(
                (sum_squares(&row[..n]) - exact).abs() <= 1e-12 * exact.max(1.0),
                "{n}"
            );
        }
    }

    #[test]
    fn rope_rotates_pairs_by_position() {
        let mut x = vec![1.0, 0.0, 1.0, 0.0];
        rope(&mut x, 1, 4, &[1], 10000.0, 1.0, RopeKind::Norm);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6);
        let f = 10000f64.powf(-0.5);
        assert!((x[2] as f64 - f.cos()).abs() < 1e-6);
        let mut y = vec![1.0, 1.0, 0.0, 0.0];
        rope(&mut y, 1, 4, &[2], 10000.0, 1.0, RopeKind::Neox);
        assert!((y[0] - 2f32.cos()).abs() < 1e-6 && (y[2] - 2f32.sin()).abs() < 1e-6);
        let mut z = vec![0.5, -0.25];
        rope(&mut z, 1, 2, &[0], 10000.0, 1.0, RopeKind::Norm);
        assert_eq!(z, vec![0.5, -0.25]);
    }

    #[test]
    fn rope_tables_alternate_between_thetas() {
        let x: Vec<f32> = (0..3 * 2 * 8).map(|i| (i as f32 * 0.7).sin()).collect();
        let positions = [5, 6, 7];
        let rotated = |theta: f32, kind| {
            let mut y = x.clone();
            rope(&mut y, 2, 8, &positions, theta, 1.0, kind);
            y
        };
        for kind in [RopeKind::Norm, RopeKind::Neox] {
            let (local, global) = (rotated(10_000.0, kind), rotated(1e6, kind));
            assert_ne!(local, global);
            assert_eq!(rotated(10_000.0, kind), local);
            assert_eq!(rotated(1e6, kind), global);
            // element 1 of row 0, head 0: pair 0 (Norm: with element 0; Neox: element 1 is pair 1)
            let angle = |i: usize| 5.0 * 10_000f64.powf(-2.0 * i as f64 / 8.0);
            let want = match kind {
                RopeKind::Norm => x[0] as f64 * angle(0).sin() + x[1] as f64 * angle(0).cos(),
                RopeKind::Neox => x[1] as f64 * angle(1).cos() - x[5] as f64 * angle(1).sin(),
            };
            assert!((local[1] as f64 - want).abs() < 1e-5, "{kind:?}");
        }
    }

    #[test]
    fn activations_match_known_values() {
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    }
}
