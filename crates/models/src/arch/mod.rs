//! Architecture adapters: GGUF metadata -> `TransformerConfig`.
mod gemma3;
mod llama;

use crate::config::TransformerConfig;
use crate::ModelError;
use ishizuki_formats::GgufFile;

/// Typed access to `{arch}.key` metadata.
pub(crate) struct Meta<'a> {
    pub file: &'a GgufFile,
    pub arch: &'a str,
}

impl Meta<'_> {
    pub fn u(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_u(key)?
            .ok_or_else(|| ModelError::MissingKey(format!("{}.{key}", self.arch)))
    }

    pub fn opt_u(&self, key: &str) -> Result<Option<usize>, ModelError> {
        let full = format!("{}.{key}", self.arch);
        match self.file.get(&full) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or(ModelError::BadKey(full, "an unsigned integer")),
        }
    }

    pub fn opt_f(&self, key: &str) -> Result<Option<f32>, ModelError> {
        let full = format!("{}.{key}", self.arch);
        match self.file.get(&full) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|f| Some(f as f32))
                .ok_or(ModelError::BadKey(full, "a number")),
        }
    }
}

pub fn config_from_gguf(file: &GgufFile) -> Result<TransformerConfig, ModelError> {
    let arch = file
        .get("general.architecture")
        .and_then(|v| v.as_str())
        .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?;
    let meta = Meta { file, arch };
    let cfg = match arch {
        "llama" | "mistral" | "qwen2" | "qwen3" | "granite" => llama::config(&meta)?,
        "gemma3" => gemma3::config(&meta)?,
        other => return Err(ModelError::UnsupportedArch(other.to_string())),
    };
    validate(&cfg)?;
    Ok(cfg)
}

fn validate(c: &TransformerConfig) -> Result<(), ModelError> {
    let bad = |what: &str| Err(ModelError::BadConfig(what.to_string()));
    if c.n_embd == 0 || c.n_head == 0 || c.n_head_kv == 0 || c.n_layer == 0 || c.n_ff == 0 {
        return bad("dimensions must be positive");
    }
    if !c.n_head.is_multiple_of(c.n_head_kv) {
        return bad("n_head must be a multiple of n_head_kv");
    }
    if c.head_dim == 0 || !c.head_dim.is_multiple_of(2) {
        return bad("head_dim must be positive and even");
    }
    if c.layers.len() != c.n_layer {
        return bad("per-layer attention table does not match n_layer");
    }
    Ok(())
}

/// The vocabulary size from the token list (or `{arch}.vocab_size`).
pub(crate) fn n_vocab(meta: &Meta) -> Result<usize, ModelError> {
    if let Some(n) = meta.opt_u("vocab_size")? {
        return Ok(n);
    }
    meta.file
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map(|a| a.len())
        .ok_or_else(|| ModelError::MissingKey(format!("{}.vocab_size", meta.arch)))
}
