//! The engine: generation, sampling, perplexity.
pub mod generate;
pub mod perplexity;
pub mod sampler;

pub use generate::{GenerateParams, Generation, Session, StopReason};
pub use perplexity::{perplexity, Perplexity};
pub use sampler::{Sampler, SamplerConfig};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("{0}")]
    BadArgument(String),
    #[error(transparent)]
    Model(#[from] ishizuki_models::ModelError),
    #[error(transparent)]
    Core(#[from] ishizuki_core::Error),
}
