//! One generation: chunked prefill, then decode until an end-of-generation token, the token
//! budget, the context end, or cancellation.
use crate::sampler::{Sampler, SamplerConfig};
use crate::EngineError;
use ishizuki_core::Backend;
use ishizuki_models::{KvCache, Logits, Model};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate; `None` = until an end token or the context is full.
    pub max_tokens: Option<usize>,
    pub sampler: SamplerConfig,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: usize,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: Some(256),
            sampler: SamplerConfig::default(),
            prefill_chunk: 512,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    EndOfGeneration,
    MaxTokens,
    ContextFull,
    Cancelled,
    /// The token callback asked to stop (e.g. a stop string matched).
    Callback,
}

#[derive(Clone, Debug)]
pub struct Generation {
    /// Generated ids, including the end-of-generation id when generation stopped on it.
    pub tokens: Vec<u32>,
    pub n_prompt: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub stop: StopReason,
}

impl Generation {
    pub fn prefill_tps(&self) -> f64 {
        rate(self.n_prompt, self.prefill_secs)
    }

    /// Decode rate over the tokens produced by decode forwards (the first comes from prefill).
    pub fn decode_tps(&self) -> f64 {
        rate(self.tokens.len().saturating_sub(1), self.decode_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

/// A model, the backend it runs on, and its KV cache.
pub struct Session<'a> {
    pub model: &'a Model,
    pub be: &'a dyn Backend,
    pub cache: KvCache,
}

impl<'a> Session<'a> {
    pub fn new(model: &'a Model, be: &'a dyn Backend, n_ctx: usize) -> Session<'a> {
        Session {
            model,
            be,
            cache: model.new_cache(n_ctx),
        }
    }

    /// Fills the cache with `prompt` from empty, in chunks; returns the last row's logits, or
    /// `None` when cancelled between chunks.
    fn prefill(
        &mut self,
        prompt: &[u32],
        chunk: usize,
        cancel: &AtomicBool,
    ) -> Result<Option<Vec<f32>>, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let n_ctx = self.cache.n_ctx();
        if prompt.len() > n_ctx {
            let overflow = ishizuki_core::Error::ContextOverflow {
                n_prompt: prompt.len(),
                n_ctx,
            };
            return Err(overflow.into());
        }
        self.cache.clear();
        let chunk = chunk.max(1);
        let mut logits = Vec::new();
        for (i, part) in prompt.chunks(chunk).enumerate() {
            if cancel.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let want = if (i + 1) * chunk >= prompt.len() {
                Logits::Last
            } else {
                Logits::None
            };
            logits = self.model.forward(self.be, part, &mut self.cache, want)?;
        }
        Ok(Some(logits))
    }

    /// Runs `prompt` from an empty cache and samples a continuation.
    /// `on_token` sees each new id and returns false to stop.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        is_eog: &dyn Fn(u32) -> bool,
        cancel: &AtomicBool,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Generation, EngineError> {
        let t0 = Instant::now();
        let Some(mut logits) = self.prefill(prompt, params.prefill_chunk, cancel)? else {
            return Ok(stopped(prompt.len(), t0, StopReason::Cancelled));
        };
        if params.max_tokens == Some(0) {
            return Ok(stopped(prompt.len(), t0, StopReason::MaxTokens));
        }
        let (model, be, cache) = (self.model, self.be, &mut self.cache);
        let prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut sampler = Sampler::new(params.sampler.clone());
        let mut history = prompt.to_vec();
        let mut out = Vec::new();
        let stop = loop {
            let id = sampler.sample(&mut logits, &history);
            out.push(id);
            history.push(id);
            if is_eog(id) {
                break StopReason::EndOfGeneration;
            }
            if !on_token(id) {
                break StopReason::Callback;
            }
            if params.max_tokens.is_some_and(|m| out.len() >= m) {
                break StopReason::MaxTokens;
            }
            if cache.len() >= cache.n_ctx() {
                break StopReason::ContextFull;
            }
            if cancel.load(Ordering::Relaxed) {
                break StopReason::Cancelled;
            }
            logits = model.forward(be, &[id], cache, Logits::Last)?;
        };
        Ok(Generation {
            tokens: out,
            n_prompt: prompt.len(),
            prefill_secs,
            decode_secs: t1.elapsed().as_secs_f64(),
            stop,
        })
    }
}

/// A generation that ended before decoding.
fn stopped(n_prompt: usize, t0: Instant, stop: StopReason) -> Generation {
    Generation {
        tokens: Vec::new(),
        n_prompt,
        prefill_secs: t0.elapsed().as_secs_f64(),
        decode_secs: 0.0,
        stop,
    }
}
