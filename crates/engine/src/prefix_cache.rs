//! KV cache slots keyed by the tokens they hold: a request takes the slot sharing the longest
//! prefix with its prompt (a chat's next turn prefills only its new tokens), else a fresh slot,
//! else the least recently used one.
use ishizuki_models::{KvCache, Model, ModelError};

pub struct Slot {
    pub cache: KvCache,
    /// The tokens whose KV the cache holds, position by position (always `cache.len()` long).
    pub tokens: Vec<u32>,
    last_used: u64,
}

pub struct PrefixCache {
    slots: Vec<Slot>,
    max_slots: usize,
    n_ctx: usize,
    clock: u64,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    pub fn new(max_slots: usize, n_ctx: usize) -> PrefixCache {
        PrefixCache {
            slots: Vec::new(),
            max_slots: max_slots.max(1),
            n_ctx,
            clock: 0,
        }
    }

    /// A slot for `prompt` with its cache cut back to the reusable prefix, and that prefix's
    /// length. At least `min_rows` prompt tokens are always left to run: with the prefill's
    /// forwards never smaller either, a cached prompt answers exactly as an uncached one
    /// (`Backend::batch_invariant_rows`).
    pub fn acquire(
        &mut self,
        model: &Model,
        prompt: &[u32],
        min_rows: usize,
    ) -> Result<(&mut Slot, usize), ModelError> {
        self.clock += 1;
        let limit = prompt.len().saturating_sub(min_rows.max(1));
        let best = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, common_prefix(&s.tokens, prompt).min(limit)))
            .max_by_key(|&(i, n)| (n, self.slots[i].last_used));
        let index = match best {
            Some((i, n)) if n > 0 => i,
            _ if self.slots.len() < self.max_slots => {
                self.slots.push(Slot {
                    cache: model.new_cache(self.n_ctx)?,
                    tokens: Vec::new(),
                    last_used: 0,
                });
                self.slots.len() - 1
            }
            _ => (0..self.slots.len())
                .min_by_key(|&i| self.slots[i].last_used)
                .unwrap_or(0),
        };
        let slot = &mut self.slots[index];
        let reuse = common_prefix(&slot.tokens, prompt).min(limit);
        slot.tokens.truncate(reuse);
        slot.cache.truncate(reuse);
        slot.last_used = self.clock;
        Ok((slot, reuse))
    }

    /// Forgets everything (after a fault left a slot's contents in doubt).
    pub fn clear(&mut self) {
        for s in &mut self.slots {
            s.tokens.clear();
            s.cache.clear();
        }
    }

    /// Tokens whose KV the most recently used slot holds (a chat's warm context).
    pub fn warm_tokens(&self) -> usize {
        self.slots
            .iter()
            .max_by_key(|s| s.last_used)
            .map_or(0, |s| s.tokens.len())
    }

    /// Slots allocated so far (each holds a whole context of KV).
    pub fn slots_in_use(&self) -> usize {
        self.slots.len()
    }

    pub fn max_slots(&self) -> usize {
        self.max_slots
    }
}

/// Slots that fit `budget_bytes` of KV at `n_ctx` positions each, between 1 and 16.
pub fn slots_for_budget(model: &Model, n_ctx: usize, budget_bytes: usize) -> usize {
    (budget_bytes / slot_bytes(model, n_ctx).max(1)).clamp(1, 16)
}

/// Bytes of one slot's KV cache at `n_ctx` positions (f16 keys and values).
pub fn slot_bytes(model: &Model, n_ctx: usize) -> usize {
    let c = &model.config;
    c.n_layer * 2 * c.kv_dim() * 2 * n_ctx
}
