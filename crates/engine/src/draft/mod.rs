//! Drafting: a source proposes the tokens that may come next, the target scores them all in one
//! forward, and `verify` keeps the longest prefix the target's own sampler would have produced
//! (exactly, in distribution, for sampled requests).
mod governor;
mod lookup;
mod model;
mod verify;

pub use governor::{Governor, RowCosts};
pub use lookup::PromptLookup;
pub use model::{check_vocab, DraftModel, VocabMismatch};
pub use verify::{
    accept_probability, residual, verify, verify_one, Distribution, Proposal, Verdict,
};

use crate::sampler::SamplerConfig;

/// Tokens proposed to follow the sequence, each with how it was proposed.
#[derive(Clone, Debug, Default)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub proposals: Vec<Proposal>,
}

impl Draft {
    /// Tokens proposed for certain (lookup, greedy drafting): q is one-hot.
    pub fn certain(tokens: Vec<u32>) -> Draft {
        let proposals = vec![Proposal::Certain; tokens.len()];
        Draft { tokens, proposals }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.proposals.truncate(n);
    }
}

/// Proposes tokens to verify. The source keeps its own copy of the sequence: `begin` gives the
/// prompt, and after each verification `accept` says how many drafted tokens were kept and
/// which token the target added after them. Fits lookup, a draft model (its KV cache truncated to
/// the kept prefix) and MTP or block drafters alike.
pub trait DraftSource: Send {
    /// Which source this is, for the stats (`lookup`, `model`).
    fn name(&self) -> &'static str;
    /// A new sequence starting with `prompt` (everything the target has seen), sampled with
    /// `sampling` (a drafter that samples proposes under the same chain).
    fn begin(&mut self, prompt: &[u32], sampling: &SamplerConfig);
    /// Up to `n_max` tokens that may follow the sequence; empty when there is no guess.
    fn draft(&mut self, n_max: usize) -> Draft;
    /// The first `n` tokens of the last draft were kept and `next` followed them.
    fn accept(&mut self, n: usize, next: u32);
    /// Seconds this source spends per drafted token (0 for lookup), for the governor.
    fn secs_per_token(&self) -> f64 {
        0.0
    }
    /// Why the source stopped working for this sequence (a draft model's error), if it did.
    fn failure(&self) -> Option<&str> {
        None
    }
}

/// Longest draft any source proposes: verification forwards have at most this many + 1 rows.
pub const MAX_DRAFT: usize = 16;
