//! Row selections a sampler reads instead of a whole row of logits: the argmax, the top k.
use std::cmp::Ordering;

/// The largest `k` a backend's `top_k` serves; a sampler keeping more reads the whole row.
pub const TOP_K_MAX: usize = 1024;

/// One token of a row: its id and logit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Descending logit (`total_cmp`, so +0 beats -0), then ascending id: a total order, so every
/// selection of the best `k` is the same set in the same order.
pub fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Index of the largest value, lowest index on ties, NaN ignored; 0 when nothing is comparable
/// (greedy sampling's choice, which a backend's `argmax` must equal).
pub fn argmax(x: &[f32]) -> u32 {
    let Some(start) = x.iter().position(|v| !v.is_nan()) else {
        return 0;
    };
    let (mut best_index, mut best) = (start, x[start]);
    // a NaN compares false, so it can never replace the best
    for (i, &v) in x.iter().enumerate().skip(start + 1) {
        if v > best {
            (best_index, best) = (i, v);
        }
    }
    best_index as u32
}

/// The `k` best of `x` in [`by_logit_desc`] order into `out`, NaN and -inf left out (a backend's
/// `top_k` must equal it). One pass that keeps at most `2k` candidates, pruning back to the
/// best `k` whenever the buffer fills.
pub fn top_candidates(x: &[f32], k: usize, out: &mut Vec<Candidate>) {
    out.clear();
    if k == 0 {
        return;
    }
    let capacity = k.saturating_mul(2).max(64);
    // ids ascend, so a later token equal to the threshold loses the tie: strictly better only
    let mut threshold = f32::NEG_INFINITY;
    for (id, &logit) in x.iter().enumerate() {
        // `==` then `total_cmp`: +0 beats a -0 threshold; NaN fails both
        if logit > threshold || (logit == threshold && logit.total_cmp(&threshold).is_gt()) {
            out.push(Candidate {
                id: id as u32,
                logit,
            });
            if out.len() == capacity {
                out.select_nth_unstable_by(k - 1, by_logit_desc);
                out.truncate(k);
                threshold = out[k - 1].logit;
            }
        }
    }
    if k < out.len() {
        out.select_nth_unstable_by(k - 1, by_logit_desc);
        out.truncate(k);
    }
    out.sort_unstable_by(by_logit_desc);
}

/// `top_candidates` of each row of `x (rows, width)`: a backend's default `top_k`.
pub fn top_k_rows(x: &[f32], rows: usize, width: usize, k: usize) -> Vec<Vec<Candidate>> {
    (0..rows)
        .map(|r| {
            let mut out = Vec::new();
            top_candidates(&x[r * width..(r + 1) * width], k, &mut out);
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_sort(x: &[f32], k: usize) -> Vec<Candidate> {
        let mut all: Vec<Candidate> = (0..x.len())
            .filter(|&i| !x[i].is_nan() && x[i] != f32::NEG_INFINITY)
            .map(|i| Candidate {
                id: i as u32,
                logit: x[i],
            })
            .collect();
        all.sort_by(by_logit_desc);
        all.truncate(k);
        all
    }

    /// Rows rich in ties, signed zeros, infinities and NaN, from a fixed linear congruence.
    fn awkward_row(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match (s >> 33) % 16 {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    2 => -0.0,
                    3 => 0.0,
                    4 if seed.is_multiple_of(3) => f32::INFINITY,
                    r => ((s >> 40) % 24) as f32 * 0.5 - 6.0 + r as f32 * 0.25,
                }
            })
            .collect()
    }

    #[test]
    fn top_candidates_equals_a_full_sort_for_awkward_rows() {
        let mut out = Vec::new();
        for seed in 0..24 {
            let x = awkward_row(3000, seed);
            for k in [1, 2, 7, 40, 64, 100, 1024, 5000] {
                top_candidates(&x, k, &mut out);
                assert_eq!(out, full_sort(&x, k), "seed {seed} k {k}");
            }
        }
    }

    #[test]
    fn a_positive_zero_beats_a_negative_zero_threshold() {
        // the buffer fills at 64 with -0 as the k-th best; a later +0 must still get in
        let mut x = vec![-0.0f32; 64];
        x[0] = 1.0;
        x.push(0.0);
        let mut out = Vec::new();
        top_candidates(&x, 2, &mut out);
        let ids: Vec<u32> = out.iter().map(|c| c.id).collect();
        assert_eq!(ids, [0, 64]);
    }

    #[test]
    fn rows_without_a_finite_or_infinite_value_select_nothing() {
        let rows = top_k_rows(&[f32::NAN, f32::NEG_INFINITY, 2.0, 1.0], 2, 2, 3);
        assert!(rows[0].is_empty());
        assert_eq!(
            rows[1],
            [
                Candidate { id: 0, logit: 2.0 },
                Candidate { id: 1, logit: 1.0 }
            ]
        );
    }

    #[test]
    fn argmax_ignores_nan_and_takes_the_first_of_equals() {
        assert_eq!(argmax(&[f32::NAN, 1.0, 3.0, 3.0]), 2);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    }
}
