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

/// The cos/sin table of the last rope call: every layer rotates q and k at the same positions,
/// so one table serves the whole forward.
#[derive(Default)]
struct RopeTable {
    key: (u32, u32, usize),
    positions: Vec<u32>,
    /// `(positions.len(), head_dim / 2)` pairs of (cos, sin).
    cos_sin: Vec<(f32, f32)>,
}

thread_local! {
    static ROPE_TABLE: std::cell::RefCell<RopeTable> = std::cell::RefCell::new(RopeTable::default());
}

/// Rotates pairs by `pos * freq_scale * theta^(-2i/head_dim)`; angles in f64 so long contexts
/// stay exact.
pub fn rope(
    x: &mut [f32],
    n_head: usize,
    head_dim: usize,
    positions: &[u32],
    theta: f32,
    freq_scale: f32,
    kind: RopeKind,
) {
    let half = head_dim / 2;
    ROPE_TABLE.with_borrow_mut(|t| {
        let key = (theta.to_bits(), freq_scale.to_bits(), head_dim);
        if t.key != key || t.positions != positions {
            let inv_freq: Vec<f64> = (0..half)
                .map(|i| freq_scale as f64 * (theta as f64).powf(-2.0 * i as f64 / head_dim as f64))
                .collect();
            t.cos_sin.clear();
            for &pos in positions {
                t.cos_sin.extend(inv_freq.iter().map(|f| {
                    let (s, c) = (pos as f64 * f).sin_cos();
                    (c as f32, s as f32)
                }));
            }
            t.key = key;
            t.positions = positions.to_vec();
        }
        for (row, cos_sin) in x
            .chunks_exact_mut(n_head * head_dim)
            .zip(t.cos_sin.chunks_exact(half))
        {
            for head in row.chunks_exact_mut(head_dim) {
                rotate_head(head, cos_sin, kind);
            }
        }
    });
}

fn rotate_head(head: &mut [f32], cos_sin: &[(f32, f32)], kind: RopeKind) {
    let half = cos_sin.len();
    for (i, &(c, s)) in cos_sin.iter().enumerate() {
        let (a, b) = match kind {
            RopeKind::Norm => (2 * i, 2 * i + 1),
            RopeKind::Neox => (i, i + half),
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
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
    fn activations_match_known_values() {
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
    }
}
