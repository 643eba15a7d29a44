//! Llama family (SmolLM2, Llama 2/3, Mistral, Qwen2): RMSNorm, SwiGLU, rope over adjacent pairs
//! (GGUF q/k are permuted for it) except Qwen, which uses the NeoX layout.
use super::{n_vocab, Meta};
use crate::config::{LayerAttn, TransformerConfig};
use crate::ModelError;
use ishizuki_core::backend::{Activation, NormKind, RopeKind};

pub fn config(m: &Meta) -> Result<TransformerConfig, ModelError> {
    let n_embd = m.u("embedding_length")?;
    let n_head = m.u("attention.head_count")?;
    let n_head_kv = m.opt_u("attention.head_count_kv")?.unwrap_or(n_head);
    let head_dim = match m.opt_u("attention.key_length")? {
        Some(d) => d,
        None if n_head > 0 => n_embd / n_head,
        None => 0,
    };
    let n_layer = m.u("block_count")?;
    let theta = m.opt_f("rope.freq_base")?.unwrap_or(10_000.0);
    let scale = match m.opt_f("rope.scaling.factor")? {
        Some(f) if f > 0.0 => f,
        _ => 1.0,
    };
    let window = m.opt_u("attention.sliding_window")?;
    let layer = LayerAttn {
        window,
        rope_theta: theta,
        rope_scale: scale,
    };
    let rope_kind = match m.arch {
        "qwen2" | "qwen3" => RopeKind::Neox,
        _ => RopeKind::Norm,
    };
    Ok(TransformerConfig {
        arch: m.arch.to_string(),
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_ff: m.u("feed_forward_length")?,
        n_layer,
        n_vocab: n_vocab(m)?,
        n_ctx_train: m.opt_u("context_length")?.unwrap_or(4096),
        norm_eps: m.opt_f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
        norm_kind: NormKind::Rms,
        activation: Activation::SwiGlu,
        rope_kind,
        layers: vec![layer; n_layer],
        qk_norm: m.arch == "qwen3",
        post_norms: false,
        embd_scale: None,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: None,
        final_softcap: None,
    })
}
