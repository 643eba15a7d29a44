//! Preallocated f16 KV cache, written in place; `truncate` rolls it back (drafting needs it).
use crate::config::TransformerConfig;
use half::f16;
use half::slice::HalfFloatSliceExt;

pub struct KvCache {
    n_ctx: usize,
    head_dim: usize,
    kv_dim: usize,
    len: usize,
    /// Per layer: keys and values, each head-major `(n_head_kv, n_ctx, head_dim)`.
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
            head_dim: c.head_dim,
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

    /// Stores rows `(rows, n_head_kv * head_dim)` of keys and values for `layer` starting at
    /// position `pos`.
    pub(crate) fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (kc, vc) = &mut self.layers[layer];
        let hd = self.head_dim;
        for (cache, rows) in [(kc, k), (vc, v)] {
            for (r, row) in rows.chunks_exact(self.kv_dim).enumerate() {
                for (h, src) in row.chunks_exact(hd).enumerate() {
                    let at = (h * self.n_ctx + pos + r) * hd;
                    // one F16C conversion per slice, not a feature check per element
                    cache[at..at + hd].convert_from_f32_slice(src);
                }
            }
        }
    }

    pub(crate) fn layer(&self, layer: usize) -> (&[f16], &[f16]) {
        let (k, v) = &self.layers[layer];
        (k, v)
    }
}
