//! The acceptance rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023): a
//! drafted token x is kept with probability min(1, p(x)/q(x)); on rejection the token is drawn
//! from the normalised residual max(0, p - q). Whatever q is, the emitted tokens are distributed
//! exactly as draws from p, the target's sampler after its whole chain.
use crate::sampler::Rng;

/// A sparse distribution over token ids: `(id, probability)` pairs summing to 1.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Distribution(pub Vec<(u32, f64)>);

impl Distribution {
    pub fn one_hot(id: u32) -> Self {
        Distribution(vec![(id, 1.0)])
    }

    pub fn prob(&self, id: u32) -> f64 {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(0.0, |(_, p)| *p)
    }

    /// One draw; `None` when empty.
    pub fn draw(&self, rng: &mut Rng) -> Option<u32> {
        let total: f64 = self.0.iter().map(|(_, p)| p).sum();
        let mut left = rng.next_f64() * total;
        for &(id, p) in &self.0 {
            left -= p;
            if left < 0.0 {
                return Some(id);
            }
        }
        self.0
            .iter()
            .rev()
            .find(|(_, p)| *p > 0.0)
            .map(|(id, _)| *id)
    }
}

/// What proposed a drafted token: lookup proposes one token for certain (q is one-hot), a draft
/// model samples from its own distribution.
#[derive(Clone, Debug)]
pub enum Proposal {
    Certain,
    Sampled(Distribution),
}

/// min(1, p(x) / q(x)) for a drafted `x`.
pub fn accept_probability(p: &Distribution, q: &Proposal, x: u32) -> f64 {
    let px = p.prob(x);
    let qx = match q {
        Proposal::Certain => 1.0,
        Proposal::Sampled(q) => q.prob(x),
    };
    if qx <= 0.0 {
        // a draft model never proposes what it gives no mass; keep it only if p wants it
        return if px > 0.0 { 1.0 } else { 0.0 };
    }
    (px / qx).min(1.0)
}

/// The normalised max(0, p - q) to draw from after rejecting `x`.
pub fn residual(p: &Distribution, q: &Proposal, x: u32) -> Distribution {
    let q_of = |id: u32| match q {
        Proposal::Certain => f64::from(u8::from(id == x)),
        Proposal::Sampled(q) => q.prob(id),
    };
    let mut r: Vec<(u32, f64)> =
        p.0.iter()
            .map(|&(id, pid)| (id, (pid - q_of(id)).max(0.0)))
            .filter(|&(_, w)| w > 0.0)
            .collect();
    let total: f64 = r.iter().map(|(_, w)| w).sum();
    if total <= 0.0 {
        // p == q up to rounding: any draw from p is right
        return p.clone();
    }
    r.iter_mut().for_each(|(_, w)| *w /= total);
    Distribution(r)
}

/// The outcome of verifying one draft.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// Drafted tokens kept.
    pub accepted: usize,
    /// The token after them: the residual draw on a rejection, else a draw from the last row.
    pub next: u32,
}

/// Verifies one drafted token `x` (proposed by `q`) against the target's distribution `p` for
/// its position: `None` keeps it, `Some(y)` rejects it for `y`, drawn from the residual.
pub fn verify_one(p: &Distribution, q: &Proposal, x: u32, rng: &mut Rng) -> Option<u32> {
    let a = accept_probability(p, q, x);
    // a = 1 accepts without spending a draw, so greedy verification uses no randomness
    if a >= 1.0 || (a > 0.0 && rng.next_f64() < a) {
        return None;
    }
    Some(residual(p, q, x).draw(rng).unwrap_or(x))
}

/// `drafted[i]` was proposed by `proposals[i]`; `targets[i]` is the target's distribution for
/// the position of `drafted[i]` (so `targets` has one more row, for the token after a full
/// accept). Greedy targets are one-hot and make this "accept while the argmax agrees".
pub fn verify(
    drafted: &[u32],
    proposals: &[Proposal],
    targets: &[Distribution],
    rng: &mut Rng,
) -> Verdict {
    assert_eq!(drafted.len(), proposals.len());
    assert_eq!(targets.len(), drafted.len() + 1);
    for (i, (&x, q)) in drafted.iter().zip(proposals).enumerate() {
        if let Some(next) = verify_one(&targets[i], q, x, rng) {
            return Verdict { accepted: i, next };
        }
    }
    let last = &targets[drafted.len()];
    let next = last.draw(rng).unwrap_or(0);
    Verdict {
        accepted: drafted.len(),
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(ps: &[f64]) -> Distribution {
        Distribution(ps.iter().enumerate().map(|(i, &p)| (i as u32, p)).collect())
    }

    /// P(first emitted token = y) = sum_x q(x) [a(x) 1{y=x} + (1 - a(x)) r_x(y)], exactly.
    fn first_token_law(p: &Distribution, q: &Distribution, n: usize) -> Vec<f64> {
        let mut law = vec![0.0; n];
        for &(x, qx) in &q.0 {
            let prop = Proposal::Sampled(q.clone());
            let a = accept_probability(p, &prop, x);
            law[x as usize] += qx * a;
            for (y, ry) in residual(p, &prop, x).0 {
                law[y as usize] += qx * (1.0 - a) * ry;
            }
        }
        law
    }

    #[test]
    fn the_rule_reproduces_p_exactly_for_any_q() {
        let p = dist(&[0.5, 0.2, 0.3, 0.0]);
        for q in [
            dist(&[0.25, 0.25, 0.25, 0.25]),
            dist(&[0.1, 0.6, 0.3, 0.0]),
            dist(&[0.0, 0.0, 0.0, 1.0]),
            p.clone(),
        ] {
            let law = first_token_law(&p, &q, 4);
            for (y, &want) in [0.5, 0.2, 0.3, 0.0].iter().enumerate() {
                assert!(
                    (law[y] - want).abs() < 1e-12,
                    "q {q:?}: P({y}) = {}",
                    law[y]
                );
            }
        }
    }

    #[test]
    fn a_certain_proposal_is_kept_with_probability_p() {
        let p = dist(&[0.5, 0.2, 0.3]);
        assert_eq!(accept_probability(&p, &Proposal::Certain, 1), 0.2);
        // after rejecting 1 the draw is from p without 1, renormalised
        let r = residual(&p, &Proposal::Certain, 1);
        let ids: Vec<u32> = r.0.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![0, 2]);
        assert!((r.prob(0) - 0.625).abs() < 1e-12 && (r.prob(2) - 0.375).abs() < 1e-12);
    }

    #[test]
    fn greedy_accepts_while_the_argmax_agrees() {
        let mut rng = Rng::new(1);
        let targets: Vec<Distribution> = [4, 5, 9, 7].map(Distribution::one_hot).to_vec();
        let certain = vec![Proposal::Certain; 3];
        let v = verify(&[4, 5, 6], &certain, &targets, &mut rng);
        assert_eq!(
            v,
            Verdict {
                accepted: 2,
                next: 9
            }
        );
        let v = verify(&[4, 5, 9], &certain, &targets, &mut rng);
        assert_eq!(
            v,
            Verdict {
                accepted: 3,
                next: 7
            }
        );
        let v = verify(&[], &[], &targets[..1], &mut rng);
        assert_eq!(
            v,
            Verdict {
                accepted: 0,
                next: 4
            }
        );
    }

    #[test]
    fn sampled_verification_matches_p_by_frequency() {
        let p = dist(&[0.5, 0.2, 0.3]);
        let q = Proposal::Sampled(dist(&[0.2, 0.7, 0.1]));
        let (mut rng, mut counts, draws) = (Rng::new(7), [0usize; 3], 200_000);
        for _ in 0..draws {
            // the draft model's proposal, then verification of that one token
            let Proposal::Sampled(qd) = &q else {
                unreachable!()
            };
            let x = qd.draw(&mut rng).unwrap();
            let v = verify(
                &[x],
                std::slice::from_ref(&q),
                &[p.clone(), p.clone()],
                &mut rng,
            );
            let first = if v.accepted == 1 { x } else { v.next };
            counts[first as usize] += 1;
        }
        for (y, want) in [0.5, 0.2, 0.3].iter().enumerate() {
            let got = counts[y] as f64 / draws as f64;
            // 5 standard deviations of a frequency over 200,000 draws
            assert!((got - want).abs() < 5.0 * (want * (1.0 - want) / draws as f64).sqrt());
        }
    }
}
