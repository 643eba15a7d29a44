//! A draft model: a smaller model of the same vocabulary runs ahead of the target one token at a
//! time, with its own KV cache kept in step with the target's sequence (truncated to the kept
//! prefix after each verification; what it has not seen yet is forwarded with the next draft).
use super::{Distribution, Draft, DraftSource, Proposal};
use crate::sampler::{argmax, Sampler, SamplerConfig};
use ishizuki_models::{KvCache, Logits, Model, ModelError};
use ishizuki_text::Tokenizer;
use std::time::Instant;

/// Tokens per prefill forward of the draft model.
const PREFILL_CHUNK: usize = 512;
/// Weight of the newest draft's timing in the seconds-per-token average.
const SECS_EMA: f64 = 0.2;

/// The draft model's vocabulary differs from the target's: its tokens would mean other text.
#[derive(Debug, thiserror::Error)]
#[error("the draft model's vocabulary differs from the model's: {0}")]
pub struct VocabMismatch(pub String);

pub struct DraftModel {
    model: Model,
    cache: KvCache,
    /// The tokens whose keys and values `cache` holds.
    cached: Vec<u32>,
    /// The sequence's tokens after `cached`, forwarded with the next draft.
    pending: Vec<u32>,
    /// The last draft, and the sequence length before it (the cache then holds all its tokens
    /// but the last).
    last: Vec<u32>,
    base: usize,
    /// Set for sampled requests: drafts are drawn from the draft's own distribution.
    sampler: Option<Sampler>,
    secs_per_token: f64,
    failure: Option<String>,
}

/// Checks that `draft` encodes text exactly as `target` does: same ids, same token text.
pub fn check_vocab(target: &Tokenizer, draft: &Tokenizer) -> Result<(), VocabMismatch> {
    if target.n_vocab() != draft.n_vocab() {
        return Err(VocabMismatch(format!(
            "{} tokens against {}",
            draft.n_vocab(),
            target.n_vocab()
        )));
    }
    let differs = (0..target.n_vocab() as u32).find(|&id| {
        target.token_bytes(id) != draft.token_bytes(id)
            || target.token_type(id) != draft.token_type(id)
    });
    if let Some(id) = differs {
        return Err(VocabMismatch(format!(
            "token {id} is {:?} there and {:?} here",
            String::from_utf8_lossy(draft.token_bytes(id)),
            String::from_utf8_lossy(target.token_bytes(id))
        )));
    }
    Ok(())
}

impl DraftModel {
    /// `model` with room for `n_ctx` tokens, like the target's context, in its backend.
    pub fn new(model: Model, n_ctx: usize) -> Result<DraftModel, ModelError> {
        let cache = model.new_cache(n_ctx)?;
        Ok(DraftModel {
            model,
            cache,
            cached: Vec::new(),
            pending: Vec::new(),
            last: Vec::new(),
            base: 0,
            sampler: None,
            secs_per_token: 0.0,
            failure: None,
        })
    }

    /// Forwards `tokens` into the cache in chunks; the last chunk's last logits.
    fn feed(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>, String> {
        let mut logits = Vec::new();
        let mut chunks = tokens.chunks(PREFILL_CHUNK).peekable();
        while let Some(chunk) = chunks.next() {
            let want = if chunks.peek().is_none() {
                want
            } else {
                Logits::None
            };
            logits = self
                .model
                .forward(chunk, &mut self.cache, want)
                .map_err(|e| format!("draft model: {e}"))?;
            self.cached.extend_from_slice(chunk);
        }
        Ok(logits)
    }

    /// The next draft token from `logits` and how it was proposed.
    fn pick(&mut self, logits: &mut [f32]) -> (u32, Proposal) {
        let history = &self.cached;
        match &mut self.sampler {
            None => (argmax(logits), Proposal::Certain),
            Some(s) => {
                let q: Distribution = s.distribution(logits, history);
                let x = q.draw(s.rng()).unwrap_or_else(|| argmax(logits));
                (x, Proposal::Sampled(q))
            }
        }
    }

    fn run_draft(&mut self, n_max: usize) -> Result<Draft, String> {
        let mut draft = Draft::default();
        let room = self.cache.n_ctx().saturating_sub(self.cached.len());
        if self.pending.is_empty() || self.pending.len() + n_max > room {
            return Ok(draft);
        }
        let mut t0 = Instant::now();
        let pending = std::mem::take(&mut self.pending);
        let mut logits = self.feed(&pending, Logits::Last)?;
        self.base = self.cached.len();
        if pending.len() > 2 {
            // catching up after lookup drafted or steps went plain: batched, not a per-token cost
            t0 = Instant::now();
        }
        for i in 0..n_max {
            let (x, q) = self.pick(&mut logits);
            draft.tokens.push(x);
            draft.proposals.push(q);
            if i + 1 < n_max {
                logits = self.feed(&[x], Logits::Last)?;
            }
        }
        let secs = t0.elapsed().as_secs_f64() / n_max.max(1) as f64;
        self.secs_per_token = if self.secs_per_token == 0.0 {
            secs
        } else {
            self.secs_per_token + SECS_EMA * (secs - self.secs_per_token)
        };
        Ok(draft)
    }
}

impl DraftSource for DraftModel {
    fn name(&self) -> &'static str {
        "model"
    }

    fn begin(&mut self, prompt: &[u32], sampling: &SamplerConfig) {
        self.failure = None;
        self.last.clear();
        self.sampler = (!sampling.is_greedy()).then(|| {
            let mut c = sampling.clone();
            c.seed ^= 0xd7af_7a11_5eed;
            Sampler::new(c)
        });
        // keep the longest cached prefix, less one token: a draft needs logits to start from
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len().saturating_sub(1));
        self.cache.truncate(common);
        self.cached.truncate(common);
        let (head, last) = prompt[common..].split_at(prompt.len() - common - 1);
        self.pending = last.to_vec();
        if let Err(e) = self.feed(head, Logits::None) {
            self.fail(e);
        }
    }

    fn draft(&mut self, n_max: usize) -> Draft {
        self.last.clear();
        if self.failure.is_some() || n_max == 0 {
            return Draft::default();
        }
        match self.run_draft(n_max) {
            Ok(d) => {
                self.last = d.tokens.clone();
                d
            }
            Err(e) => {
                self.fail(e);
                Draft::default()
            }
        }
    }

    fn accept(&mut self, n: usize, next: u32) {
        let n = n.min(self.last.len());
        if !self.last.is_empty() {
            let keep = n.min(self.last.len() - 1);
            self.cache.truncate(self.base + keep);
            self.cached.truncate(self.base + keep);
            self.pending.extend_from_slice(&self.last[keep..n]);
        }
        self.pending.push(next);
        self.last.clear();
    }

    fn secs_per_token(&self) -> f64 {
        self.secs_per_token
    }

    fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

impl DraftModel {
    fn fail(&mut self, message: String) {
        // the cache may hold a partial forward: start the next sequence from nothing
        self.cache.clear();
        self.cached.clear();
        self.pending.clear();
        self.failure = Some(message);
    }
}
