//! Token sampling: a chain of small logits processors in llama.cpp's default order
//! (penalties -> top-k -> top-p -> min-p -> temperature -> dist), or plain argmax when greedy.
//!
//! Every buffer is owned by the [`Sampler`] and reused, so a call allocates nothing once the
//! buffers have grown to the vocabulary size.

use crate::draft::Distribution;
pub use ishizuki_core::backend::Candidate;
use ishizuki_core::backend::{by_logit_desc, top_candidates};
use std::time::{SystemTime, UNIX_EPOCH};

/// Sampling parameters; the neutral value of each filter turns it off.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// `<= 0` means greedy (argmax after penalties).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; `0` = off.
    pub top_k: usize,
    /// Keep the smallest most-likely prefix whose probability reaches `top_p`; `>= 1.0` = off.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p * max_probability`; `<= 0` = off.
    pub min_p: f32,
    /// Divides positive logits and multiplies negative ones of recent tokens; `1.0` = off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every recent token.
    pub presence_penalty: f32,
    /// Subtracted from the logit of a recent token once per occurrence.
    pub frequency_penalty: f32,
    /// How many of the most recent history tokens the penalties look at; `0` = off.
    pub penalty_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: seed_from_time(),
        }
    }
}

impl SamplerConfig {
    /// Deterministic argmax decoding with every filter and penalty off.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.temperature.is_nan()
    }

    pub(crate) fn penalties_active(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

/// A seed that differs between runs, for when the user gives none.
pub fn seed_from_time() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut state = nanos ^ (u64::from(std::process::id()) << 32);
    splitmix64(&mut state)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman & Vigna), state filled by splitmix64 so any seed (even 0) is valid.
#[derive(Clone, Debug)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        Self {
            state: std::array::from_fn(|_| splitmix64(&mut sm)),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The candidate list the processors narrow down; `sorted` = descending by logit.
#[derive(Debug, Default)]
pub struct Candidates {
    pub items: Vec<Candidate>,
    pub sorted: bool,
}

impl Candidates {
    /// Refill from raw logits. NaN and -inf can never be drawn and are left out; if any logit is
    /// +inf, those tokens take all the mass (in the limit) and share it evenly.
    pub fn fill_from(&mut self, logits: &[f32]) {
        self.items.clear();
        self.sorted = false;
        let has_infinite = logits.contains(&f32::INFINITY);
        let keep = |l: f32| {
            if has_infinite {
                l == f32::INFINITY
            } else {
                l > f32::NEG_INFINITY
            }
        };
        let kept = logits.iter().enumerate().filter(|(_, &l)| keep(l));
        self.items.extend(kept.map(|(id, &logit)| Candidate {
            id: id as u32,
            logit: if has_infinite { 0.0 } else { logit },
        }));
    }

    fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.items.first().map_or(f32::NEG_INFINITY, |c| c.logit);
        }
        self.items
            .iter()
            .fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
    }

    /// `fill_from` followed by [`top_k`], fused: [`top_candidates`]' one pass, unless the
    /// row holds +inf (whose tokens share all the mass).
    pub fn fill_top_k(&mut self, logits: &[f32], k: usize) {
        if k == 0 || logits.contains(&f32::INFINITY) {
            self.fill_from(logits);
            top_k(self, k);
            return;
        }
        top_candidates(logits, k, &mut self.items);
        self.sorted = true;
    }

    /// The same list `fill_top_k(row, k)` makes, from a backend's `top_k(row, k)`.
    pub fn fill_from_top(&mut self, top: &[Candidate]) {
        self.items.clear();
        if top.first().is_some_and(|c| c.logit == f32::INFINITY) {
            let infinite = top.iter().take_while(|c| c.logit == f32::INFINITY);
            self.items.extend(infinite.map(|c| Candidate {
                id: c.id,
                logit: 0.0,
            }));
        } else {
            self.items.extend_from_slice(top);
        }
        self.sorted = true;
    }

    /// Sort the `n` best candidates to the front (descending); the rest stay unordered.
    fn sort_prefix(&mut self, n: usize) {
        let n = n.min(self.items.len());
        if n == 0 {
            return;
        }
        if n < self.items.len() {
            self.items.select_nth_unstable_by(n - 1, by_logit_desc);
        }
        self.items[..n].sort_unstable_by(by_logit_desc);
        if n == self.items.len() {
            self.sorted = true;
        }
    }

    /// Sum of `exp(logit - max_logit)` over all candidates, accumulated in f64.
    fn softmax_denominator(&self, max_logit: f32) -> f64 {
        self.items
            .iter()
            .map(|c| f64::from((c.logit - max_logit).exp()))
            .sum()
    }
}

/// Apply llama.cpp's `llama_sampler_penalties` to `logits` in place, counting each token in the
/// last `cfg.penalty_last_n` entries of `history`. `scratch` is a reused buffer.
pub fn apply_penalties(
    logits: &mut [f32],
    history: &[u32],
    cfg: &SamplerConfig,
    scratch: &mut Vec<u32>,
) {
    if !cfg.penalties_active() {
        return;
    }
    let recent = &history[history.len().saturating_sub(cfg.penalty_last_n)..];
    scratch.clear();
    scratch.extend_from_slice(recent);
    scratch.sort_unstable();
    for run in scratch.chunk_by(|a, b| a == b) {
        let Some(logit) = logits.get_mut(run[0] as usize) else {
            continue; // a history token outside this vocabulary has no logit to penalise
        };
        let count = run.len() as f32;
        if *logit <= 0.0 {
            *logit *= cfg.repeat_penalty;
        } else {
            *logit /= cfg.repeat_penalty;
        }
        *logit -= count * cfg.frequency_penalty + cfg.presence_penalty;
    }
}

/// Keep the `k` highest logits (lowest id wins ties); leaves the survivors sorted.
pub fn top_k(candidates: &mut Candidates, k: usize) {
    if k == 0 || candidates.items.is_empty() {
        return;
    }
    let k = k.min(candidates.items.len());
    candidates.sort_prefix(k);
    candidates.items.truncate(k);
    candidates.sorted = true;
}

/// Keep the smallest most-likely prefix whose softmax mass reaches `p` (at least one token).
/// Sorted input is scanned; unsorted input is narrowed by mass-weighted quickselect, expected
/// O(vocab), and stays unsorted.
pub fn top_p(candidates: &mut Candidates, p: f32) {
    if p >= 1.0 || candidates.items.is_empty() {
        return;
    }
    let max_logit = candidates.max_logit();
    let target = f64::from(p) * candidates.softmax_denominator(max_logit);
    let keep = if candidates.sorted {
        prefix_reaching(&candidates.items, max_logit, target)
    } else {
        select_prefix_reaching(&mut candidates.items, max_logit, target)
    };
    candidates.items.truncate(keep);
}

fn weight(c: &Candidate, max_logit: f32) -> f64 {
    f64::from((c.logit - max_logit).exp())
}

/// Length of the shortest prefix of `items` whose weight reaches `target`, at least 1.
fn prefix_reaching(items: &[Candidate], max_logit: f32, target: f64) -> usize {
    let mut cumulative = 0.0;
    for (i, c) in items.iter().enumerate() {
        cumulative += weight(c, max_logit);
        if cumulative >= target {
            return i + 1;
        }
    }
    items.len() // rounding kept the total just under the target: everything stays
}

/// Reorder `items` so the best `n` (in [`by_logit_desc`] order) come first, for the smallest `n`
/// whose weight reaches `target`, and return `n`. Invariant: `items[..lo]` are kept and better
/// than `items[lo..hi]`, which are better than `items[hi..]`, which are dropped.
fn select_prefix_reaching(items: &mut [Candidate], max_logit: f32, mut target: f64) -> usize {
    let (mut lo, mut hi) = (0, items.len());
    loop {
        let range = &mut items[lo..hi];
        if range.len() <= 64 {
            range.sort_unstable_by(by_logit_desc);
            return lo
                + prefix_reaching(range, max_logit, target)
                    .max(1)
                    .min(range.len());
        }
        let mid = range.len() / 2;
        range.select_nth_unstable_by(mid, by_logit_desc);
        let better: f64 = range[..mid].iter().map(|c| weight(c, max_logit)).sum();
        if better >= target {
            hi = lo + mid;
            continue;
        }
        let through_pivot = better + weight(&range[mid], max_logit);
        if through_pivot >= target {
            return lo + mid + 1;
        }
        target -= through_pivot;
        lo += mid + 1;
    }
}

/// Drop tokens whose probability is below `min_p` times the top probability, i.e. whose logit is
/// below `max_logit + ln(min_p)`.
pub fn min_p(candidates: &mut Candidates, min_p: f32) {
    if min_p <= 0.0 || candidates.items.is_empty() {
        return;
    }
    let threshold = candidates.max_logit() + min_p.ln();
    let best = candidates.items.iter().copied().min_by(by_logit_desc);
    candidates.items.retain(|c| c.logit >= threshold);
    if candidates.items.is_empty() {
        candidates.items.extend(best); // min_p > 1 would empty the list; keep the top token
    }
}

/// Scale logits by `1 / temperature`, after shifting them so the maximum is 0: softmax is
/// unchanged by the shift and a huge logit divided by a small temperature cannot overflow.
pub fn temperature(candidates: &mut Candidates, temperature: f32) {
    let max_logit = candidates.max_logit();
    // clamped so that 0 * inverse and -inf * inverse are never NaN
    let inverse = (1.0 / temperature).clamp(f32::MIN_POSITIVE, f32::MAX);
    for c in &mut candidates.items {
        c.logit = (c.logit - max_logit) * inverse;
    }
}

/// Draw one candidate with probability softmax(logit); `None` when there is no candidate.
pub fn draw(candidates: &Candidates, rng: &mut Rng) -> Option<u32> {
    let last = candidates.items.last()?;
    let max_logit = candidates.max_logit();
    let mut remaining = rng.next_f64() * candidates.softmax_denominator(max_logit);
    for c in &candidates.items {
        remaining -= f64::from((c.logit - max_logit).exp());
        if remaining < 0.0 {
            return Some(c.id);
        }
    }
    Some(last.id) // rounding left a sliver of mass past the end
}

pub use ishizuki_core::backend::{argmax, TOP_K_MAX};

/// A configured sampler with its RNG and reused buffers.
#[derive(Debug)]
pub struct Sampler {
    config: SamplerConfig,
    rng: Rng,
    candidates: Candidates,
    penalty_scratch: Vec<u32>,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Self {
        Self {
            rng: Rng::new(config.seed),
            config,
            candidates: Candidates::default(),
            penalty_scratch: Vec::new(),
        }
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Pick the next token. Penalties are applied to `logits` in place. `history` holds the
    /// tokens so far (prompt and generated), most recent last. Empty `logits` yield token 0.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        apply_penalties(logits, history, &self.config, &mut self.penalty_scratch);
        if self.config.is_greedy() {
            return argmax(logits);
        }
        let k = self.config.top_k;
        self.narrow(|c| c.fill_top_k(logits, k));
        draw(&self.candidates, &mut self.rng).unwrap_or_else(|| argmax(logits))
    }

    /// Whether `sample_top` and `distribution_top` may stand in for `sample` and `distribution`:
    /// a stochastic draw from at most [`TOP_K_MAX`] candidates, no penalties.
    pub fn top_suffices(&self) -> bool {
        let c = &self.config;
        !c.is_greedy() && !c.penalties_active() && (1..=TOP_K_MAX).contains(&c.top_k)
    }

    /// `sample` from a backend's `top_k(row, config.top_k)` (when `top_suffices`): the same
    /// token and the same draw from the generator. `None` when the row had no finite logit.
    pub fn sample_top(&mut self, top: &[Candidate]) -> Option<u32> {
        self.narrow(|c| c.fill_from_top(top));
        draw(&self.candidates, &mut self.rng)
    }

    /// The candidates a stochastic draw chooses from: `fill`, then top-p, min-p, temperature.
    fn narrow(&mut self, fill: impl FnOnce(&mut Candidates)) {
        let (cfg, candidates) = (&self.config, &mut self.candidates);
        fill(candidates);
        top_p(candidates, cfg.top_p);
        min_p(candidates, cfg.min_p);
        temperature(candidates, cfg.temperature);
    }

    /// The distribution `sample` draws from (one-hot when greedy), for draft verification.
    pub fn distribution(&mut self, logits: &mut [f32], history: &[u32]) -> Distribution {
        apply_penalties(logits, history, &self.config, &mut self.penalty_scratch);
        if self.config.is_greedy() {
            return Distribution::one_hot(argmax(logits));
        }
        let k = self.config.top_k;
        self.narrow(|c| c.fill_top_k(logits, k));
        self.narrowed()
            .unwrap_or_else(|| Distribution::one_hot(argmax(logits)))
    }

    /// `distribution` from a backend's `top_k` (when `top_suffices`); `None` as `sample_top`.
    pub fn distribution_top(&mut self, top: &[Candidate]) -> Option<Distribution> {
        self.narrow(|c| c.fill_from_top(top));
        self.narrowed()
    }

    /// The softmax of the narrowed candidates; `None` when none is left.
    fn narrowed(&self) -> Option<Distribution> {
        let c = &self.candidates;
        if c.items.is_empty() {
            return None;
        }
        let max_logit = c.max_logit();
        let z = c.softmax_denominator(max_logit);
        let p = |l: f32| f64::from((l - max_logit).exp()) / z;
        Some(Distribution(
            c.items.iter().map(|x| (x.id, p(x.logit))).collect(),
        ))
    }

    /// The sampler's generator, shared with verification so one seed fixes a whole request.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stochastic(temperature: f32, seed: u64) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplerConfig::greedy()
        }
    }

    fn frequencies(cfg: SamplerConfig, logits: &[f32], draws: usize) -> Vec<f64> {
        let mut sampler = Sampler::new(cfg);
        let mut counts = vec![0usize; logits.len()];
        for _ in 0..draws {
            let mut scratch = logits.to_vec();
            counts[sampler.sample(&mut scratch, &[]) as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    fn softmax(logits: &[f32], temperature: f32) -> Vec<f64> {
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        let weights: Vec<f64> = logits
            .iter()
            .map(|&l| f64::from((l - max) / temperature).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    fn random_logits(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
        (0..n)
            .map(|_| ((rng.next_f64() - 0.5) * scale) as f32)
            .collect()
    }

    fn surviving_ids(candidates: &Candidates) -> Vec<u32> {
        let mut ids: Vec<u32> = candidates.items.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    }

    /// ln of probabilities 0.5, 0.25, 0.15, 0.1 (already a normalised distribution).
    fn four_token_logits() -> Vec<f32> {
        [0.5f32, 0.25, 0.15, 0.1].iter().map(|p| p.ln()).collect()
    }

    #[test]
    fn same_seed_and_logits_give_same_tokens() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let run = |seed| {
            let mut sampler = Sampler::new(stochastic(1.0, seed));
            (0..300)
                .map(|_| sampler.sample(&mut logits.clone(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn distribution_is_what_sample_draws_from() {
        let logits = [1.0f32, 2.0, 0.5, -1.0, 0.7];
        let cfg = SamplerConfig {
            top_k: 4,
            min_p: 0.05,
            ..stochastic(0.8, 3)
        };
        let dist = Sampler::new(cfg.clone()).distribution(&mut logits.clone(), &[]);
        let seen = frequencies(cfg, &logits, 40_000);
        for (id, &got) in seen.iter().enumerate() {
            let want = dist.prob(id as u32);
            assert!((got - want).abs() < 0.012, "token {id}: {got} vs {want}");
        }
        let greedy = Sampler::new(SamplerConfig::greedy()).distribution(&mut logits.clone(), &[]);
        assert_eq!(greedy, Distribution::one_hot(1));
    }

    #[test]
    fn frequencies_at_temperature_one_match_softmax() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let seen = frequencies(stochastic(1.0, 7), &logits, 20_000);
        for (got, want) in seen.iter().zip(softmax(&logits, 1.0)) {
            assert!((got - want).abs() < 0.015, "got {seen:?}, want {want}");
        }
    }

    #[test]
    fn temperature_sharpens_the_distribution() {
        let logits = [1.0f32, 2.0, 0.5, -1.0];
        let seen = frequencies(stochastic(0.5, 11), &logits, 20_000);
        for (got, want) in seen.iter().zip(softmax(&logits, 0.5)) {
            assert!((got - want).abs() < 0.015, "got {seen:?}, want {want}");
        }
    }

    #[test]
    fn top_k_one_equals_greedy() {
        let mut rng = Rng::new(3);
        for trial in 0..40 {
            // coarse values so ties occur and the lowest-index tie-break is exercised
            let logits: Vec<f32> = random_logits(&mut rng, 1000, 20.0)
                .iter()
                .map(|l| l.round())
                .collect();
            let cfg = SamplerConfig {
                top_k: 1,
                seed: trial,
                ..stochastic(1.0, trial)
            };
            let mut sampler = Sampler::new(cfg);
            assert_eq!(sampler.sample(&mut logits.clone(), &[]), argmax(&logits));
        }
    }

    #[test]
    fn top_k_keeps_the_k_largest_sorted() {
        let mut candidates = Candidates::default();
        candidates.fill_from(&[0.1, 5.0, -2.0, 3.0, 5.0, 4.0]);
        top_k(&mut candidates, 3);
        let ids: Vec<u32> = candidates.items.iter().map(|c| c.id).collect();
        assert_eq!(ids, [1, 4, 5]);
        assert!(candidates.sorted);
    }

    #[test]
    fn fused_fill_top_k_matches_fill_then_top_k() {
        let mut rng = Rng::new(8);
        for (trial, k) in [1usize, 3, 40, 500, 5000].into_iter().enumerate() {
            let mut logits: Vec<f32> = random_logits(&mut rng, 20_000, 30.0)
                .iter()
                .map(|l| (l * 4.0).round() / 4.0)
                .collect();
            logits[trial * 7] = f32::NAN;
            logits[trial * 11 + 1] = f32::NEG_INFINITY;
            let (mut fused, mut reference) = (Candidates::default(), Candidates::default());
            fused.fill_top_k(&logits, k);
            reference.fill_from(&logits);
            top_k(&mut reference, k);
            assert_eq!(fused.items, reference.items, "k {k}");
            assert_eq!(fused.items.len(), k);
            assert!(fused.sorted);
        }
    }

    /// A backend's `top_k` row stands in for the whole row: the same tokens from the same seed,
    /// the same distributions, on rows with ties, NaN and infinities.
    #[test]
    fn sampling_a_backends_top_k_equals_sampling_the_row() {
        let mut rng = Rng::new(12);
        let configs = [
            (1, 1.0, 0.0, 0.8),
            (3, 0.5, 0.0, 1.5),
            (40, 0.95, 0.05, 0.8),
        ];
        let configs = configs
            .into_iter()
            .chain([(1024, 0.9, 0.0, 0.3), (700, 1.0, 0.2, 1.0)]);
        for (trial, (top_k, top_p, min_p, temperature)) in configs.enumerate() {
            let cfg = SamplerConfig {
                top_k,
                top_p,
                min_p,
                ..stochastic(temperature, trial as u64)
            };
            let (mut whole, mut top) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
            assert!(top.top_suffices());
            for row_index in 0..12 {
                let mut row: Vec<f32> = random_logits(&mut rng, 5_000, 12.0)
                    .iter()
                    .map(|l| (l * 2.0).round() / 2.0)
                    .collect();
                row[row_index * 13] = f32::NAN;
                row[row_index * 17 + 1] = f32::NEG_INFINITY;
                if row_index % 4 == 3 {
                    row[row_index * 19 + 2] = f32::INFINITY;
                    row[row_index * 23 + 3] = f32::INFINITY;
                }
                let selected = &ishizuki_core::backend::top_k_rows(&row, 1, row.len(), top_k)[0];
                let dist = whole.distribution(&mut row.clone(), &[]);
                assert_eq!(top.distribution_top(selected), Some(dist), "trial {trial}");
                for _ in 0..20 {
                    let want = whole.sample(&mut row.clone(), &[]);
                    assert_eq!(top.sample_top(selected), Some(want), "trial {trial}");
                }
            }
        }
        let nothing = [f32::NAN, f32::NEG_INFINITY];
        let mut top = Sampler::new(SamplerConfig::default());
        assert_eq!(
            top.sample_top(&ishizuki_core::backend::top_k_rows(&nothing, 1, 2, 40)[0]),
            None
        );
        let penalised = SamplerConfig {
            repeat_penalty: 1.1,
            ..SamplerConfig::default()
        };
        assert!(!Sampler::new(penalised).top_suffices());
        assert!(!Sampler::new(SamplerConfig {
            top_k: 0,
            ..SamplerConfig::default()
        })
        .top_suffices());
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_p() {
        let cases: [(f32, &[u32]); 4] = [
            (0.4, &[0]),
            (0.7, &[0, 1]),
            (0.8, &[0, 1, 2]),
            (0.99, &[0, 1, 2, 3]),
        ];
        for (p, want) in cases {
            let mut candidates = Candidates::default();
            candidates.fill_from(&four_token_logits());
            top_p(&mut candidates, p);
            assert_eq!(surviving_ids(&candidates), want, "top_p {p}");
        }
    }

    #[test]
    fn top_p_over_a_large_vocab_matches_a_full_sort() {
        let mut rng = Rng::new(5);
        let logits = random_logits(&mut rng, 262_144, 16.0);
        let p = 0.9f32;
        let probs = softmax(&logits, 1.0);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let mut cumulative = 0.0;
        let keep = 1 + order
            .iter()
            .position(|&i| {
                cumulative += probs[i];
                cumulative >= f64::from(p)
            })
            .unwrap();
        assert!(
            keep > 1000,
            "the test needs a prefix longer than one selection round"
        );
        let mut want: Vec<u32> = order[..keep].iter().map(|&i| i as u32).collect();
        want.sort_unstable();

        let mut candidates = Candidates::default();
        candidates.fill_from(&logits);
        top_p(&mut candidates, p);
        assert_eq!(surviving_ids(&candidates), want);
    }

    #[test]
    fn top_p_selection_matches_a_full_sort_for_many_p() {
        let mut rng = Rng::new(12);
        let logits = random_logits(&mut rng, 5_000, 24.0);
        for p in [0.0f32, 1e-4, 0.05, 0.5, 0.9, 0.999] {
            let mut sorted = Candidates::default();
            sorted.fill_from(&logits);
            sorted.sort_prefix(logits.len());
            top_p(&mut sorted, p);
            let mut selected = Candidates::default();
            selected.fill_from(&logits);
            top_p(&mut selected, p);
            assert!(!selected.items.is_empty(), "p {p}");
            assert_eq!(surviving_ids(&selected), surviving_ids(&sorted), "p {p}");
        }
    }

    #[test]
    fn top_p_sampling_only_draws_from_the_prefix() {
        let cfg = SamplerConfig {
            top_p: 0.7,
            ..stochastic(1.0, 9)
        };
        let seen = frequencies(cfg, &four_token_logits(), 20_000);
        assert_eq!((seen[2], seen[3]), (0.0, 0.0));
        assert!((seen[0] - 2.0 / 3.0).abs() < 0.015, "{seen:?}");
    }

    #[test]
    fn min_p_filters_below_fraction_of_max_probability() {
        let cases: [(f32, &[u32]); 3] = [(0.25, &[0, 1, 2]), (0.35, &[0, 1]), (0.6, &[0])];
        for (threshold, want) in cases {
            let mut candidates = Candidates::default();
            candidates.fill_from(&four_token_logits());
            min_p(&mut candidates, threshold);
            assert_eq!(surviving_ids(&candidates), want, "min_p {threshold}");
        }
    }

    #[test]
    fn penalties_match_llama_cpp_on_a_hand_computed_example() {
        let cfg = SamplerConfig {
            repeat_penalty: 2.0,
            frequency_penalty: 0.1,
            presence_penalty: 0.5,
            penalty_last_n: 5,
            ..SamplerConfig::greedy()
        };
        let mut logits = [2.0f32, -1.0, 0.5, 3.0];
        // token 3 falls outside the last 5; 99 is outside the vocabulary
        let history = [3, 0, 1, 1, 99, 1];
        apply_penalties(&mut logits, &history, &cfg, &mut Vec::new());
        // token 0 (x1): 2/2 - (1*0.1 + 0.5); token 1 (x3): -1*2 - (3*0.1 + 0.5)
        let want = [0.4f32, -2.8, 0.5, 3.0];
        for (got, want) in logits.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "got {logits:?}");
        }
    }

    #[test]
    fn repeat_penalty_changes_the_greedy_choice() {
        let cfg = SamplerConfig {
            repeat_penalty: 1.5,
            ..SamplerConfig::greedy()
        };
        let mut sampler = Sampler::new(cfg);
        assert_eq!(sampler.sample(&mut [1.0, 0.9], &[0]), 1);
        assert_eq!(sampler.sample(&mut [1.0, 0.9], &[]), 0);
    }

    #[test]
    fn greedy_takes_lowest_index_on_ties_and_ignores_nan() {
        assert_eq!(argmax(&[1.0, 3.0, f32::NAN, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, -5.0, -7.0]), 1);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
        let mut sampler = Sampler::new(SamplerConfig::greedy());
        assert_eq!(sampler.sample(&mut [0.0, f32::NAN, 2.0, 2.0], &[]), 2);
    }

    #[test]
    fn non_finite_logits_do_not_panic() {
        let mut sampler = Sampler::new(SamplerConfig {
            seed: 1,
            ..SamplerConfig::default()
        });
        let mut mixed = [f32::NAN, 1.0, f32::INFINITY, f32::NEG_INFINITY, 2.0];
        for _ in 0..20 {
            assert_eq!(sampler.sample(&mut mixed.clone(), &[1, 2]), 2);
        }
        let two_infinite = [f32::INFINITY, 0.0, f32::INFINITY];
        let seen = frequencies(stochastic(0.3, 2), &two_infinite, 2_000);
        assert_eq!(seen[1], 0.0);
        assert!(seen[0] > 0.4 && seen[2] > 0.4, "{seen:?}");
        assert_eq!(sampler.sample(&mut [f32::NAN; 3], &[]), 0);
        assert_eq!(sampler.sample(&mut [f32::NEG_INFINITY; 3], &[]), 0);
        assert_eq!(sampler.sample(&mut [], &[5]), 0);
        mixed[1] = f32::MAX;
        assert_eq!(sampler.sample(&mut mixed, &[]), 2);
    }

    #[test]
    fn extreme_temperatures_stay_well_defined() {
        let logits = [1.0f32, 1.5, -f32::MAX, f32::MAX / 2.0];
        let tiny = frequencies(stochastic(1e-30, 4), &logits, 200);
        assert_eq!(tiny[3], 1.0, "{tiny:?}");
        let logits = [1.0f32, 1.5, 0.0];
        let huge = frequencies(stochastic(f32::INFINITY, 4), &logits, 6_000);
        assert!(
            huge.iter().all(|&f| (f - 1.0 / 3.0).abs() < 0.03),
            "{huge:?}"
        );
    }

    #[test]
    fn default_and_greedy_configs() {
        let cfg = SamplerConfig::default();
        assert_eq!((cfg.top_k, cfg.top_p, cfg.min_p), (40, 0.95, 0.05));
        assert_eq!((cfg.temperature, cfg.penalty_last_n), (0.8, 64));
        assert!(!cfg.is_greedy());
        assert!(SamplerConfig::greedy().is_greedy());
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut rng = Rng::new(0);
        let mut buckets = [0usize; 10];
        for _ in 0..100_000 {
            buckets[(rng.next_f64() * 10.0) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&b| (9_500..10_500).contains(&b)),
            "{buckets:?}"
        );
    }
}
