//! AVX2 score and value passes for `G` query heads sharing one KV head `(capacity, hd)`, the
//! AVX-512 passes' shape on 8 lanes: each f16 key or value chunk is converted once for every
//! head of the group, and the per-head sums stay in registers across keys (summing values into
//! memory key after key chains every key on the last one's store).
use super::MAX_GROUP;
use half::f16;
use std::arch::x86_64::*;

/// Whether these passes take a head of `hd` dimensions and `group` query heads.
pub(super) fn fits(hd: usize, group: usize) -> bool {
    hd.is_multiple_of(16) && (1..=MAX_GROUP).contains(&group)
}

/// `scores[g * n + jj] = q_g . k_{j0 + jj}` for `qs (group, hd)`, `n = j1 - j0`.
/// Unsafe: AVX2, FMA and F16C must exist, `fits(hd, group)`, and every position is in `k`.
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
    let group = acc.len() / hd;
    // 16 dimensions a pass while two vectors a head fit the registers, else 8
    if group <= 4 {
        by_group!(group, values_g::<2>(p, v, hd, j0, j1, acc))
    } else {
        by_group!(group, values_g::<1>(p, v, hd, j0, j1, acc))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
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
    // a few keys at a time, their sums reduced together: one horizontal sum per key costs
    // more than the key's multiplies
    let step = const { super::keys_per_step(G, 16) };
    let mut jj = 0;
    while jj + step <= n {
        let mut acc = [[_mm256_setzero_ps(); 4]; G];
        for c in 0..hd / 8 {
            for key in 0..step {
                let kp = k
                    .as_ptr()
                    .add((j0 + jj + key) * hd + 8 * c)
                    .cast::<__m128i>();
                let kc = _mm256_cvtph_ps(_mm_loadu_si128(kp));
                for (g, a) in acc.iter_mut().enumerate() {
                    let qc = _mm256_loadu_ps(q.add(g * hd + 8 * c));
                    a[key] = _mm256_fmadd_ps(qc, kc, a[key]);
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            let sums = sum8x4(a[0], a[1], a[2], a[3]);
            store_lanes(out.as_mut_ptr().add(g * n + jj), sums, step);
        }
        jj += step;
    }
    for (jj, j) in (j0 + jj..j1).enumerate().map(|(i, j)| (jj + i, j)) {
        let kp = k.as_ptr().add(j * hd).cast::<__m128i>();
        let mut acc = [_mm256_setzero_ps(); G];
        for c in 0..hd / 8 {
            let kc = _mm256_cvtph_ps(_mm_loadu_si128(kp.add(c)));
            for (g, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(g * hd + 8 * c)), kc, *a);
            }
        }
        for (g, a) in acc.iter().enumerate() {
            *out.get_unchecked_mut(g * n + jj) = sum8(*a);
        }
    }
}

/// The sum of the 8 lanes of `v`.
#[inline(always)]
unsafe fn sum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The lane sums of `a`, `b`, `c` and `d`, in that order.
#[inline(always)]
pub(super) unsafe fn sum8x4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    // lanes 0-3: each vector's sum of its lanes 0-3; lanes 4-7: of its lanes 4-7
    let h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
}

/// Stores the first `n` (1, 2 or 4) lanes of `v` at `at`.
#[inline(always)]
pub(super) unsafe fn store_lanes(at: *mut f32, v: __m128, n: usize) {
    match n {
        4 => _mm_storeu_ps(at, v),
        2 => _mm_storel_epi64(at.cast(), _mm_castps_si128(v)),
        _ => _mm_store_ss(at, v),
    }
}

/// `values` for `G` heads, `8 * W` dimensions of every head per pass over the keys.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_g<const W: usize, const G: usize>(
    p: &[f32],
    v: &[f16],
    hd: usize,
    j0: usize,
    j1: usize,
    acc: &mut [f32],
) {
    let n = j1 - j0;
    assert!(acc.len() == G * hd && p.len() >= G * n && v.len() >= j1 * hd);
    for c in (0..hd).step_by(8 * W) {
        let mut sums = [[_mm256_setzero_ps(); W]; G];
        for jj in 0..n {
            let vp = v.as_ptr().add((j0 + jj) * hd + c).cast::<__m128i>();
            let vs: [__m256; W] =
                std::array::from_fn(|i| _mm256_cvtph_ps(_mm_loadu_si128(vp.add(i))));
            for (g, s) in sums.iter_mut().enumerate() {
                let w = _mm256_set1_ps(*p.get_unchecked(g * n + jj));
                for (s, x) in s.iter_mut().zip(vs) {
                    *s = _mm256_fmadd_ps(w, x, *s);
                }
            }
        }
        for (g, s) in sums.iter().enumerate() {
            for (i, s) in s.iter().enumerate() {
                _mm256_storeu_ps(acc.as_mut_ptr().add(g * hd + c + 8 * i), *s);
            }
        }
    }
}
