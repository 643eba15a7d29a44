//! Counters the engine keeps for `/metrics` (vLLM's names, tokens where they count tokens).
use std::sync::atomic::AtomicU64;

#[derive(Debug, Default)]
pub struct EngineStats {
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found.
    pub prefix_queries: AtomicU64,
    pub prefix_hits: AtomicU64,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub cancelled: AtomicU64,
    pub errors: AtomicU64,
    /// Tokens drafted and kept, and decode forwards (plain or verifying).
    pub draft_tokens: AtomicU64,
    pub draft_accepted: AtomicU64,
    pub decode_steps: AtomicU64,
    /// 1 while a draft model is loaded and drafting (0 once it turned itself off).
    pub draft_model_active: AtomicU64,
}
