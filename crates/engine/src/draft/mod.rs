//! Drafting: a source proposes the tokens that may come next, the target scores them all in one
//! forward, and `verify` keeps the longest prefix the target's own sampler would have produced
//! (exactly, in distribution, for sampled requests).
mod lookup;
mod verify;

pub use lookup::PromptLookup;
pub use verify::{accept_probability, residual, verify, Distribution, Proposal, Verdict};

/// Proposes tokens to verify. The source keeps its own copy of the sequence: `begin` gives the
/// prompt, and after each verification `accept` says how many drafted tokens were kept and
/// which token the target added after them. Fits lookup, a draft model (its KV cache truncated to
/// the kept prefix) and MTP or block drafters alike.
pub trait DraftSource: Send {
    /// A new sequence starting with `prompt` (everything the target has seen).
    fn begin(&mut self, prompt: &[u32]);
    /// Up to `n_max` tokens that may follow the sequence; empty when there is no guess.
    fn draft(&mut self, n_max: usize) -> Vec<u32>;
    /// The first `n` tokens of the last draft were kept and `next` followed them.
    fn accept(&mut self, n: usize, next: u32);
}

/// Longest draft any source proposes: verification forwards have at most this many + 1 rows.
pub const MAX_DRAFT: usize = 16;
