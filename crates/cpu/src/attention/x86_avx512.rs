//! AVX-512 score and value passes for `G` query heads sharing one KV head `(capacity, hd)`: each f16 key or
//! value chunk is converted once and used by every head of the group, with the per-head sums
//! held in registers (keys: one vector per head; values: 32 dimensions per head at a time).
use super::{x86_avx2, MAX_GROUP};
use half::f16;
use std::arch::x86_64::*;

/// Whether these passes take a head of `hd` dimensions and `group` query heads.
pub(super) fn fits(hd: usize, group: usize) -> bool {
    hd.is_multiple_of(32) && (1..=MAX_GROUP).contains(&group)
}

/// `scores[g * n + jj] = q_g . k_{j0 + jj}` for `qs (group, hd)`, `n = j1 - j0`.
/// Unsafe: AVX-512F and F16C must exist, `fits(hd, group)`, and every position is in `k`.
pub(super) unsafe fn scores(
    qs: &[f32],
    k: &[f16],
    hd: usize,
    j0: usize,
    j1: usize,
    out: &mut [f32],
) {
    by_group!(qs.len() / hd, scores_g(qs, k, hd, j0, j1, out))
}

/// `acc[g * hd + d] = sum_jj p[g * n + jj] * v_{j0 + jj}[d]`.
/// Unsafe: as `scores`.
pub(super) unsafe fn values(
    p: &[f32],
    v: &[f16],
    hd: usize,
    j0: usize,
    j1: usize,
    acc: &mut [f32],
) {
    by_group!(acc.len() / hd, values_g(p, v, hd, j0, j1, acc))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn scores_g<const G: usize>(
    qs: &[f32],
    k: &[f16],
    hd: usize,
    j0: usize,
    j1: usize,
    out: &mut [f32],
) {
    let n = j1 - j0;
    assert!(qs.len() == G * hd && out.len() >= G * n && k.len() >= j1 * hd);
    let q = qs.as_ptr();
    // as the AVX2 pass: a few keys at a time, their sums reduced together
    let step = const { super::keys_per_step(G, 32) };
    let halves =
        |v: __m512| _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
    let mut jj = 0;
    while jj + step <= n {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for c in 0..hd / 16 {
            for key in 0..step {
                let kp = k
                    .as_ptr()
                    .add((j0 + jj + key) * hd + 16 * c)
                    .cast::<__m256i>();
                let kc = _mm512_cvtph_ps(_mm256_loadu_si256(kp));
                for (g, a) in acc.iter_mut().enumerate() {
                    let qc = _mm512_loadu_ps(q.add(g * hd + 16 * c));
                    a[key] = _mm512_fmadd_ps(qc, kc, a[key]);
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            let [a0, a1, a2, a3] = a.map(halves);
            let sums = x86_avx2::sum8x4(a0, a1, a2, a3);
            x86_avx2::store_lanes(out.as_mut_ptr().add(g * n + jj), sums, step);
        }
        jj += step;
    }
    for (jj, j) in (j0 + jj..j1).enumerate().map(|(i, j)| (jj + i, j)) {
        let kp = k.as_ptr().add(j * hd).cast::<__m256i>();
        let mut acc = [_mm512_setzero_ps(); G];
        for c in 0..hd / 16 {
            let kc = _mm512_cvtph_ps(_mm256_loadu_si256(kp.add(c)));
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(q.add(g * hd + 16 * c)), kc, *a);
            }
        }
        for (g, a) in acc.iter().enumerate() {
            *out.get_unchecked_mut(g * n + jj) = _mm512_reduce_add_ps(*a);
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,fma")]
unsafe fn values_g<const G: usize>(
    p: &[f32],
    v: &[f16],
    hd: usize,
    j0: usize,
    j1: usize,
    acc: &mut [f32],
) {
    let n = j1 - j0;
    assert!(acc.len() == G * hd && p.len() >= G * n && v.len() >= j1 * hd);
    for c in (0..hd).step_by(32) {
        let mut sums = [[_mm512_setzero_ps(); 2]; G];
        for jj in 0..n {
            let vp = v.as_ptr().add((j0 + jj) * hd + c).cast::<__m256i>();
            let v0 = _mm512_cvtph_ps(_mm256_loadu_si256(vp));
            let v1 = _mm512_cvtph_ps(_mm256_loadu_si256(vp.add(1)));
            for (g, s) in sums.iter_mut().enumerate() {
                let w = _mm512_set1_ps(*p.get_unchecked(g * n + jj));
                s[0] = _mm512_fmadd_ps(w, v0, s[0]);
                s[1] = _mm512_fmadd_ps(w, v1, s[1]);
            }
        }
        for (g, s) in sums.iter().enumerate() {
            _mm512_storeu_ps(acc.as_mut_ptr().add(g * hd + c), s[0]);
            _mm512_storeu_ps(acc.as_mut_ptr().add(g * hd + c + 16), s[1]);
        }
    }
}
