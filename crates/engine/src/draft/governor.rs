//! Never slower: what a draft earns (tokens per verification, from the acceptance rate seen so
//! far) against what it costs (the verify forward relative to a plain one-row step, measured,
//! plus the drafter's own time). The draft length is the one that earns most per unit of time;
//! when none earns more than a plain step, the request drafts nothing.

/// Rows of the largest verification forward the costs track.
const MAX_ROWS: usize = super::MAX_DRAFT + 1;
/// Extra cost of each verification row over a plain step until measured (weight-bound decode).
const PRIOR_SLOPE: f64 = 0.05;
/// Weight of the newest timing in each row count's average.
const COST_EMA: f64 = 0.2;

/// Seconds per decode forward by row count, averaged over recent steps.
#[derive(Clone, Debug, Default)]
pub struct RowCosts {
    secs: [Option<f64>; MAX_ROWS + 1],
}

impl RowCosts {
    pub fn record(&mut self, rows: usize, secs: f64) {
        let Some(slot) = self.secs.get_mut(rows) else {
            return;
        };
        if !(secs.is_finite() && secs > 0.0) {
            return;
        }
        *slot = Some(slot.map_or(secs, |old| old + COST_EMA * (secs - old)));
    }

    /// Seconds of a plain one-row step: timed, else estimated from the fewest rows timed (a
    /// request that always drafts may never run a plain step); +inf before any timing.
    pub fn plain_secs(&self) -> f64 {
        if let Some(s) = self.secs[1] {
            return s;
        }
        (2..=MAX_ROWS)
            .find_map(|r| self.secs[r].map(|s| s / (1.0 + PRIOR_SLOPE * (r - 1) as f64)))
            .unwrap_or(f64::INFINITY)
    }

    /// Cost of a forward of `rows` rows in plain steps: measured where timed, interpolated
    /// between timed counts, extrapolated past the largest (never below the prior slope).
    pub fn relative(&self, rows: usize) -> f64 {
        let rows = rows.clamp(1, MAX_ROWS);
        let Some(plain) = self.secs[1] else {
            return 1.0 + PRIOR_SLOPE * (rows - 1) as f64;
        };
        let rel = |r: usize| self.secs[r].map(|s| s / plain);
        if let Some(x) = rel(rows) {
            return x;
        }
        let below = (1..rows)
            .rev()
            .find(|&r| self.secs[r].is_some())
            .unwrap_or(1);
        let above = (rows + 1..=MAX_ROWS).find(|&r| self.secs[r].is_some());
        let (rb, xb) = (below as f64, rel(below).unwrap_or(1.0));
        let slope = match above {
            Some(a) => (rel(a).unwrap_or(1.0) - xb) / (a as f64 - rb),
            None if below > 1 => ((xb - 1.0) / (rb - 1.0)).max(PRIOR_SLOPE),
            None => PRIOR_SLOPE,
        };
        xb + slope * (rows as f64 - rb)
    }
}

/// Weight kept by the acceptance counts at each verification: recent text counts most.
const DECAY: f64 = 0.9;
/// The rate assumed before any verification: one of two drafted tokens kept.
const PRIOR_KEPT: f64 = 1.0;
const PRIOR_TRIALS: f64 = 2.0;
/// Plain steps skipped after drafting stopped paying, doubling up to this, before one probe.
const MAX_PAUSE: usize = 64;
/// Drafted tokens in a probe.
const PROBE_LEN: usize = 2;
/// Verifications before a source's rate is trusted enough to switch it off.
pub const MIN_EVIDENCE: usize = 4;

/// One request's drafting: its acceptance rate and what it decided.
#[derive(Clone, Debug)]
pub struct Governor {
    kept_w: f64,
    trials_w: f64,
    pause_left: usize,
    backoff: usize,
    probe: bool,
    /// Totals for the stats: tokens drafted, kept, verification forwards.
    pub drafted: usize,
    pub kept: usize,
    pub verifies: usize,
}

impl Default for Governor {
    fn default() -> Self {
        Governor {
            kept_w: 0.0,
            trials_w: 0.0,
            pause_left: 0,
            backoff: 1,
            probe: false,
            drafted: 0,
            kept: 0,
            verifies: 0,
        }
    }
}

impl Governor {
    /// The chance that a drafted token is kept given the one before it was: kept tokens over
    /// kept tokens plus rejections (a draft stops at its first rejection).
    pub fn rate(&self) -> f64 {
        (self.kept_w + PRIOR_KEPT) / (self.trials_w + PRIOR_TRIALS)
    }

    /// One verification: `kept` of `drafted` tokens survived.
    pub fn record(&mut self, drafted: usize, kept: usize) {
        if drafted == 0 {
            return;
        }
        let kept = kept.min(drafted);
        let rejected = usize::from(kept < drafted);
        self.kept_w = DECAY * self.kept_w + kept as f64;
        self.trials_w = DECAY * self.trials_w + (kept + rejected) as f64;
        self.drafted += drafted;
        self.kept += kept;
        self.verifies += 1;
    }

    /// How many tokens to draft now, at most `max`, given the costs and the drafter's time per
    /// token in plain steps. 0 means a plain step; after a run of those, one short probe.
    pub fn choose(&mut self, max: usize, costs: &RowCosts, draft_cost: f64) -> usize {
        if max == 0 {
            return 0;
        }
        if self.pause_left > 0 {
            self.pause_left -= 1;
            self.probe = self.pause_left == 0;
            return 0;
        }
        let k = best_len(self.rate(), max, costs, draft_cost);
        if k > 0 {
            self.backoff = 1;
            return k;
        }
        if std::mem::take(&mut self.probe) {
            return max.min(PROBE_LEN);
        }
        self.pause_left = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_PAUSE);
        0
    }

    /// Whether drafting up to `max` tokens is expected to beat plain steps, once the rate rests
    /// on at least `MIN_EVIDENCE` verifications (before that: true).
    pub fn pays(&self, max: usize, costs: &RowCosts, draft_cost: f64) -> bool {
        self.verifies < MIN_EVIDENCE || best_len(self.rate(), max, costs, draft_cost) > 0
    }
}

/// The draft length k in 0..=max that maximises expected tokens per unit of time:
/// (1 + a + ... + a^k) / (cost(k + 1 rows) + k * draft_cost); 0 when nothing beats 1.
pub fn best_len(rate: f64, max: usize, costs: &RowCosts, draft_cost: f64) -> usize {
    let (mut best, mut best_gain) = (0, 1.0);
    let (mut expected, mut term) = (1.0, 1.0);
    for k in 1..=max.min(MAX_ROWS - 1) {
        term *= rate;
        expected += term;
        let gain = expected / (costs.relative(k + 1) + k as f64 * draft_cost);
        if gain > best_gain * (1.0 + 1e-9) {
            (best, best_gain) = (k, gain);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(per_row: f64) -> RowCosts {
        let mut c = RowCosts::default();
        for rows in 1..=MAX_ROWS {
            c.record(rows, 0.01 * (1.0 + per_row * (rows - 1) as f64));
        }
        c
    }

    #[test]
    fn costs_interpolate_and_extrapolate_from_what_was_timed() {
        let mut c = RowCosts::default();
        assert!((c.relative(5) - (1.0 + 4.0 * PRIOR_SLOPE)).abs() < 1e-12);
        c.record(1, 0.010);
        c.record(3, 0.012);
        c.record(5, 0.016);
        assert!((c.relative(3) - 1.2).abs() < 1e-9);
        assert!((c.relative(4) - 1.4).abs() < 1e-9, "between 3 and 5");
        assert!(
            (c.relative(9) - 2.2).abs() < 1e-9,
            "the slope from 1 to 5: 0.15 a row"
        );
        c.record(3, 0.022);
        assert!(
            (c.relative(3) - 1.4).abs() < 1e-9,
            "an average of recent timings"
        );
    }

    #[test]
    fn high_acceptance_drafts_long_and_low_acceptance_drafts_nothing() {
        let cheap = costs(0.02);
        assert_eq!(best_len(0.95, 15, &cheap, 0.0), 15);
        assert!((1..6).contains(&best_len(0.5, 15, &cheap, 0.0)));
        assert_eq!(best_len(0.01, 15, &cheap, 0.0), 0);
        // a drafter costing a third of a step per token needs a high rate to pay
        assert_eq!(best_len(0.3, 15, &cheap, 0.33), 0);
        assert!(best_len(0.9, 15, &cheap, 0.33) > 0);
        // verification as dear as separate steps never pays
        assert_eq!(best_len(0.99, 15, &costs(1.0), 0.0), 0);
    }

    #[test]
    fn rejections_pause_drafting_then_probe() {
        let (c, mut g) = (costs(0.1), Governor::default());
        assert!(g.choose(8, &c, 0.0) > 0, "the prior rate drafts");
        for _ in 0..30 {
            g.record(4, 0);
        }
        assert!(!g.pays(8, &c, 0.0));
        let picks: Vec<usize> = (0..8).map(|_| g.choose(8, &c, 0.0)).collect();
        // pause 1, probe; pause 2, probe; pause 4...
        assert_eq!(picks, vec![0, 0, PROBE_LEN, 0, 0, 0, PROBE_LEN, 0]);
        for _ in 0..30 {
            g.record(8, 8);
        }
        assert!(g.pays(8, &c, 0.0));
        assert!(g.rate() > 0.9);
        assert_eq!(g.drafted, 30 * 4 + 30 * 8);
        assert_eq!(g.kept, 30 * 8);
    }
}
