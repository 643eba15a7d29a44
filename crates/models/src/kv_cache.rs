//! One sequence's KV cache: storage the backend allocated, written in place by its ops, and
//! the bookkeeping here; `truncate` rolls it back (drafting needs it).
use crate::config::TransformerConfig;
use ishizuki_core::{Backend, KvShape, KvStore, Result};

pub struct KvCache {
    len: usize,
    pub(crate) store: KvStore,
}

impl KvCache {
    pub fn new(be: &dyn Backend, c: &TransformerConfig, n_ctx: usize) -> Result<KvCache> {
        let shape = KvShape {
            n_layer: c.n_layer,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            capacity: n_ctx,
        };
        Ok(KvCache {
            len: 0,
            store: be.alloc_kv(shape)?,
        })
    }

    pub fn n_ctx(&self) -> usize {
        self.store.shape.capacity
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory the storage holds.
    pub fn bytes(&self) -> usize {
        self.store.bytes
    }

    /// Forgets every position at or after `len`.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.n_ctx());
        self.len = len;
    }
}
