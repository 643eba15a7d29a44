//! Preallocated f16 KV cache, written in place; `truncate` rolls it back (drafting needs it).
use crate::config::TransformerConfig;
use half::f16;
use half::slice::HalfFloatSliceExt;
use ishizuki_core::huge::HugeBuf;

pub struct KvCache {
    n_ctx: usize,
    head_dim: usize,
    kv_dim: usize,
    len: usize,
    /// `(n_layer, 2, n_head_kv, n_ctx, head_dim)` f16: per layer keys then values, head-major.
    /// Huge pages: decode at depth streams all of it once per token, as it does the weights.
    data: HugeBuf,
}

impl KvCache {
    pub fn new(c: &TransformerConfig, n_ctx: usize) -> KvCache {
        let kv_dim = c.kv_dim();
        // what a Vec does: a size past the address space is a capacity overflow
        let layout = std::alloc::Layout::array::<f16>(
            [c.n_layer, 2, n_ctx, kv_dim]
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .expect("KV cache capacity overflow"),
        )
        .expect("KV cache capacity overflow");
        // and one the kernel refuses is out of memory
        let data = HugeBuf::zeroed(layout.size())
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        KvCache {
            n_ctx,
            head_dim: c.head_dim,
            kv_dim,
            len: 0,
            data,
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
        let per = self.n_ctx * self.kv_dim;
        let all: &mut [f16] = bytemuck::cast_slice_mut(&mut self.data);
        let (kc, vc) = all[2 * layer * per..][..2 * per].split_at_mut(per);
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
        let per = self.n_ctx * self.kv_dim;
        let all: &[f16] = bytemuck::cast_slice(&self.data);
        all[2 * layer * per..][..2 * per].split_at(per)
    }
}
