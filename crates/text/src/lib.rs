//! ishizuki-text

pub mod template;
pub use template::{ChatMessage, ChatTemplate, TemplateError, TemplateLimits};

pub mod stream;
pub mod tokenizer;
pub use stream::StreamDecoder;
pub use tokenizer::{
    SpmFlavor, TokenType, Tokenizer, TokenizerError, TokenizerModel, TokenizerSpec,
};

pub mod prompt;
pub mod stops;
pub mod tools;
pub use stops::{StopMatcher, StopScan};
pub use tools::{ParsedCall, ToolCallStream, ToolOutput, ToolSyntax};
