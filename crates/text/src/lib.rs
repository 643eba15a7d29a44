//! ishizuki-text

pub mod template;
pub use template::{ChatMessage, ChatTemplate, TemplateError, TemplateLimits};
