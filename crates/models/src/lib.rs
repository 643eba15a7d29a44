//! Models: configuration, weights, KV cache and the canonical decoder.
pub mod arch;
pub mod config;
pub mod kv_cache;
pub mod synth;
pub mod transformer;
pub mod weights;
mod workspace;

pub use config::TransformerConfig;
pub use kv_cache::KvCache;
pub use transformer::{Logits, Model};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unsupported architecture `{0}`")]
    UnsupportedArch(String),
    #[error("missing metadata key `{0}`")]
    MissingKey(String),
    #[error("metadata key `{0}` must be {1}")]
    BadKey(String, &'static str),
    #[error("bad model configuration: {0}")]
    BadConfig(String),
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    #[error("tensor `{name}` has dims {got:?}, expected {want:?}")]
    TensorShape {
        name: String,
        want: Vec<u64>,
        got: Vec<u64>,
    },
    #[error(transparent)]
    Core(#[from] ishizuki_core::Error),
}
