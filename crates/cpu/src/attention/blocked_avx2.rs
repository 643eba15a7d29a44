//! AVX2 attention for blocks of query rows (prefill, draft verification), the AVX2 form of
//! `blocked`: a task takes consecutive rows and one KV head with their queries transposed, one
//! lane per (row, head of the group), so each key and value row is converted from f16 and
//! loaded once per 16 queries instead of once per query row.
use super::blocked::{BlockInput, Passes, Scratch, MAX_LANES};
use half::f16;
use ishizuki_core::backend::AttnParams;
use std::arch::x86_64::*;

/// Queries per task: two f32 vectors of lanes.
const LANES: usize = 16;
/// f32 vectors of lanes.
const V: usize = LANES / 8;
/// Keys scored at once (independent FMA chains; 4 x 2 accumulators fit the 16 registers).
const KEYS: usize = 4;

/// The AVX2 passes.
pub(super) struct Avx2;

impl_passes!(Avx2);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn passes<const HD: usize>(s: &mut Scratch, a: &BlockInput) -> [f32; MAX_LANES] {
    // per lane, the keys it sees as i32 vectors
    let lo: [__m256i; V] =
        std::array::from_fn(|i| _mm256_loadu_si256(a.lo[8 * i..].as_ptr().cast()));
    let hi: [__m256i; V] =
        std::array::from_fn(|i| _mm256_loadu_si256(a.hi[8 * i..].as_ptr().cast()));
    scores::<HD>(&s.qt, a.k, &mut s.rows, &mut s.scores);
    let sum = softmax(&mut s.scores, a.j_lo, lo, hi, a.p);
    values::<HD>(&s.scores, a.v, a.lanes, &mut s.rows, &mut s.acc);
    let mut sums = [0f32; MAX_LANES];
    for (i, s) in sum.iter().enumerate() {
        _mm256_storeu_ps(sums[8 * i..].as_mut_ptr(), *s);
    }
    sums
}

/// Converts `rows` f16 rows of `HD` at `src` into `dst`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn convert<const HD: usize>(src: &[f16], dst: &mut [f32], rows: usize) {
    let (sp, dp) = (src.as_ptr().cast::<__m128i>(), dst.as_mut_ptr());
    for i in 0..rows * HD / 8 {
        _mm256_storeu_ps(dp.add(8 * i), _mm256_cvtph_ps(_mm_loadu_si128(sp.add(i))));
    }
}

/// `scores[jj][l] = q_l . k_jj` for the keys `k (n, HD)`, `KEYS` keys at a time.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores<const HD: usize>(qt: &[f32], k: &[f16], rows: &mut [f32], scores: &mut [f32]) {
    let n = k.len() / HD;
    let (qp, rp) = (qt.as_ptr(), rows.as_ptr());
    for j0 in (0..n).step_by(KEYS) {
        let m = (n - j0).min(KEYS);
        convert::<HD>(&k[j0 * HD..], rows, m);
        let mut acc = [[_mm256_setzero_ps(); V]; KEYS];
        for d in 0..HD {
            let qd: [__m256; V] =
                std::array::from_fn(|h| _mm256_loadu_ps(qp.add(d * LANES + 8 * h)));
            for (i, a) in acc.iter_mut().enumerate() {
                // rows past `m` hold earlier keys: finite, and not stored
                let kd = _mm256_broadcast_ss(&*rp.add(i * HD + d));
                for (a, q) in a.iter_mut().zip(qd) {
                    *a = _mm256_fmadd_ps(q, kd, *a);
                }
            }
        }
        for (i, a) in acc.iter().enumerate().take(m) {
            for (h, a) in a.iter().enumerate() {
                _mm256_storeu_ps(scores.as_mut_ptr().add((j0 + i) * LANES + 8 * h), *a);
            }
        }
    }
}

/// Scales, soft-caps and masks the scores of keys `j_lo..` (lane l sees `lo[l]..=hi[l]`),
/// then replaces them by `exp(score - max)` per lane; returns each lane's sum.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn softmax(
    scores: &mut [f32],
    j_lo: usize,
    lo: [__m256i; V],
    hi: [__m256i; V],
    p: &AttnParams,
) -> [__m256; V] {
    let n = scores.len() / LANES;
    let sp = scores.as_mut_ptr();
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut max = [neg_inf; V];
    for jj in 0..n {
        let j = _mm256_set1_epi32((j_lo + jj) as i32);
        let row = sp.add(jj * LANES);
        for h in 0..V {
            let x = _mm256_mul_ps(_mm256_loadu_ps(row.add(8 * h)), _mm256_set1_ps(p.scale));
            _mm256_storeu_ps(row.add(8 * h), x);
        }
        if let Some(cap) = p.softcap {
            let row = std::slice::from_raw_parts_mut(row, LANES);
            row.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
        }
        for h in 0..V {
            // unseen: lo > j or j > hi
            let unseen =
                _mm256_or_si256(_mm256_cmpgt_epi32(lo[h], j), _mm256_cmpgt_epi32(j, hi[h]));
            let s = _mm256_blendv_ps(
                _mm256_loadu_ps(row.add(8 * h)),
                neg_inf,
                _mm256_castsi256_ps(unseen),
            );
            _mm256_storeu_ps(row.add(8 * h), s);
            max[h] = _mm256_max_ps(max[h], s);
        }
    }
    // idle lanes saw no key: shift them by 0 rather than by -inf
    let max = max.map(|m| {
        let none = _mm256_cmp_ps::<_CMP_EQ_OQ>(m, neg_inf);
        _mm256_blendv_ps(m, _mm256_setzero_ps(), none)
    });
    let mut sum = [_mm256_setzero_ps(); V];
    for jj in 0..n {
        for h in 0..V {
            let at = sp.add(jj * LANES + 8 * h);
            let s = _mm256_loadu_ps(at);
            let seen = _mm256_cmp_ps::<_CMP_NEQ_OQ>(s, neg_inf);
            // the polynomial's clamp leaves exp(-inf) at 1e-38: masked keys weigh exactly 0
            let e = _mm256_and_ps(crate::vmath::exp8(_mm256_sub_ps(s, max[h])), seen);
            _mm256_storeu_ps(at, e);
            sum[h] = _mm256_add_ps(sum[h], e);
        }
    }
    sum
}

/// `acc[l] += sum_jj w[jj][l] * v_jj` for the values `v (n, HD)`, converted a chunk at a time.
/// Two lanes and 32 dims go together: 8 sums in registers share each value vector's load.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values<const HD: usize>(
    w: &[f32],
    v: &[f16],
    lanes: usize,
    rows: &mut [f32],
    acc: &mut [f32],
) {
    let (n, chunk) = (v.len() / HD, rows.len() / HD);
    for j0 in (0..n).step_by(chunk) {
        let m = (n - j0).min(chunk);
        convert::<HD>(&v[j0 * HD..], rows, m);
        // a lane past `lanes` weighs every value 0 and has its row in `acc`
        for l0 in (0..lanes).step_by(2) {
            for d0 in (0..HD).step_by(32) {
                let ap = [l0, l0 + 1].map(|l| acc.as_mut_ptr().add(l * HD + d0));
                let mut a: [[__m256; 4]; 2] =
                    ap.map(|p| std::array::from_fn(|c| _mm256_loadu_ps(p.add(8 * c))));
                for i in 0..m {
                    let wp = w.as_ptr().add((j0 + i) * LANES + l0);
                    let ws = [_mm256_broadcast_ss(&*wp), _mm256_broadcast_ss(&*wp.add(1))];
                    let r = rows.as_ptr().add(i * HD + d0);
                    for c in 0..4 {
                        let x = _mm256_loadu_ps(r.add(8 * c));
                        for (a, w) in a.iter_mut().zip(ws) {
                            a[c] = _mm256_fmadd_ps(w, x, a[c]);
                        }
                    }
                }
                for (a, p) in a.iter().zip(ap) {
                    for (c, a) in a.iter().enumerate() {
                        _mm256_storeu_ps(p.add(8 * c), *a);
                    }
                }
            }
        }
    }
}
