//! Preallocated f16 KV cache, written in place; `truncate` rolls it back (drafting needs it).
use crate::config::TransformerConfig;
use half::f16;

pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    len: usize,
    /// Per layer: keys and values, each `(n_ctx, n_head_kv, head_dim)`.
    layers: Vec<(Vec<f16>, Vec<f16>)>,
}

impl KvCache {
    pub fn new(c: &TransformerConfig, n_ctx: usize) -> KvCache {
        let kv_dim = c.kv_dim();
        let layers = (0..c.n_layer)
            .map(|_| {
                (
                    vec![f16::ZERO; n_ctx * kv_dim],
                    vec![f16::ZERO; n_ctx * kv_dim],
                )
            })
            .collect();
        KvCache {
            n_ctx,
            kv_dim,
            len: 0,
            layers,
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position at or after `len`.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.n_ctx);
        self.len = len;
    }

    /// Stores rows `(rows, kv_dim)` of keys and values for `layer` starting at `pos`.
    pub(crate) fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (kc, vc) = &mut self.layers[layer];
        let at = pos * self.kv_dim;
        for (d, s) in kc[at..at + k.len()].iter_mut().zip(k) {
            *d = f16::from_f32(*s);
        }
        for (d, s) in vc[at..at + v.len()].iter_mut().zip(v) {
            *d = f16::from_f32(*s);
        }
    }

    pub(crate) fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        let (k, v) = &self.layers[layer];
        (k, v)
    }
}
