//! Gemma 3: five sliding-window layers (local rope base 10k) for every global one (base 1e6),
//! q/k RMSNorm, pre- and post-norms, GeGLU (tanh), embeddings scaled by sqrt(n_embd), tied
//! embeddings. GGUF norm weights already hold (1 + w), so the plain RMSNorm applies.
use super::{n_vocab, Meta};
use crate::config::{LayerAttn, TransformerConfig};
use crate::ModelError;
use ishizuki_core::backend::{Activation, NormKind, RopeKind};

/// Every `SWA_PERIOD`-th layer (il % 6 == 5) attends globally.
const SWA_PERIOD: usize = 6;
const LOCAL_ROPE_BASE: f32 = 10_000.0;

pub fn config(m: &Meta) -> Result<TransformerConfig, ModelError> {
    let n_embd = m.u("embedding_length")?;
    let n_head = m.u("attention.head_count")?;
    let head_dim = m.opt_u("attention.key_length")?.unwrap_or(256);
    let n_layer = m.u("block_count")?;
    let global_theta = m.opt_f("rope.freq_base")?.unwrap_or(1_000_000.0);
    let global_scale = match m.opt_f("rope.scaling.factor")? {
        Some(f) if f > 0.0 => f,
        _ => 1.0,
    };
    let window = m.opt_u("attention.sliding_window")?.unwrap_or(512);
    let layers = (0..n_layer)
        .map(|il| {
            if il % SWA_PERIOD == SWA_PERIOD - 1 {
                LayerAttn {
                    window: None,
                    rope_theta: global_theta,
                    rope_scale: global_scale,
                }
            } else {
                LayerAttn {
                    window: Some(window),
                    rope_theta: LOCAL_ROPE_BASE,
                    rope_scale: 1.0,
                }
            }
        })
        .collect();
    Ok(TransformerConfig {
        arch: m.arch.to_string(),
        n_embd,
        n_head,
        n_head_kv: m.opt_u("attention.head_count_kv")?.unwrap_or(n_head),
        head_dim,
        n_ff: m.u("feed_forward_length")?,
        n_layer,
        n_vocab: n_vocab(m)?,
        n_ctx_train: m.opt_u("context_length")?.unwrap_or(32_768),
        norm_eps: m.opt_f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-6),
        norm_kind: NormKind::Rms,
        activation: Activation::GeGluTanh,
        rope_kind: RopeKind::Neox,
        layers,
        qk_norm: true,
        post_norms: true,
        embd_scale: Some((n_embd as f32).sqrt()),
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: m.opt_f("attn_logit_softcapping")?,
        final_softcap: m.opt_f("final_logit_softcapping")?,
    })
}
