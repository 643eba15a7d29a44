//! The one configuration the canonical decoder reads; architecture adapters fill it in.
use ishizuki_core::backend::{Activation, NormKind, RopeKind};

#[derive(Clone, Debug)]
pub struct TransformerConfig {
    pub arch: String,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_vocab: usize,
    /// Context length the model was trained for.
    pub n_ctx_train: usize,
    pub norm_eps: f32,
    pub norm_kind: NormKind,
    pub activation: Activation,
    pub rope_kind: RopeKind,
    /// Per-layer attention: window and rope base.
    pub layers: Vec<LayerAttn>,
    pub qk_norm: bool,
    /// Gemma-style norms after attention and after the feed-forward block.
    pub post_norms: bool,
    /// Multiplies the token embeddings (Gemma: sqrt(n_embd)).
    pub embd_scale: Option<f32>,
    pub attn_scale: f32,
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerAttn {
    /// `Some(w)`: a query at position p sees keys at p-w+1..=p.
    pub window: Option<usize>,
    pub rope_theta: f32,
    pub rope_scale: f32,
}

impl TransformerConfig {
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}
