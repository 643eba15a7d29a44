//! The engine: generation at the text level shared by every front (requests in, events out),
//! sampling, perplexity.
pub mod constraint;
mod decode;
pub mod draft;
pub mod engine;
pub mod events;
pub mod output;
pub mod perplexity;
pub mod prefix_cache;
pub mod prompt;
pub mod queue;
pub mod request;
pub mod sampler;
pub mod stats;

pub use engine::Engine;
pub use events::{Done, DraftUsage, Event, FailureKind, FinishReason, TokenLogprob, Usage};
pub use perplexity::{perplexity, Perplexity};
pub use prompt::{Prepared, TextModel};
pub use queue::{CancelOnDrop, EngineHandle};
pub use request::{
    Constraint, InvalidRequest, Message, Prompt, Request, Tool, ToolCall, ToolChoice,
};
pub use sampler::{Sampler, SamplerConfig};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    BadArgument(String),
    #[error(transparent)]
    Model(#[from] ishizuki_models::ModelError),
    #[error(transparent)]
    Core(#[from] ishizuki_core::Error),
}
