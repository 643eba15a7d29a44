//! Chat templates (`tokenizer.chat_template`) rendered the way transformers' `apply_chat_template`
//! renders them: Jinja2 with `trim_blocks`, `lstrip_blocks`, loop controls, no autoescape, HF's
//! `tojson` / `raise_exception` / `strftime_now`, and Python string methods. Rendering is sandboxed
//! by an instruction budget (fuel) and an output-size cap.

mod builtins;
mod isolate;
mod pyfmt;

use minijinja::{AutoEscape, Environment, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as JsonValue};
use std::cell::Cell;
use std::io;

const TEMPLATE_NAME: &str = "chat_template";

/// Upper bounds that keep a hostile template from looping forever or exhausting memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateLimits {
    /// Largest rendered prompt, in bytes.
    pub max_output_bytes: usize,
    /// Template instructions one render may execute.
    pub fuel: u64,
    /// Memory one render may allocate; `None` renders in this process, unbounded.
    pub max_memory_bytes: Option<usize>,
}

impl TemplateLimits {
    /// Real templates spend roughly 50-150 instructions per message, so 10M covers ~100k
    /// messages while capping a runaway template at about a second of work.
    pub const DEFAULT: TemplateLimits = TemplateLimits {
        max_output_bytes: 4 << 20,
        fuel: 10_000_000,
        max_memory_bytes: Some(256 << 20),
    };
}

impl Default for TemplateLimits {
    fn default() -> Self {
        TemplateLimits::DEFAULT
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    #[error("chat template ran out of fuel after {limit} instructions")]
    Fuel { limit: u64 },
    #[error("chat template output exceeds {limit} bytes")]
    OutputTooLarge { limit: usize },
    #[error("chat template needed more than {limit} bytes of memory")]
    MemoryExceeded { limit: usize },
    #[error("invalid chat template input: {0}")]
    InvalidInput(String),
    #[error("chat template failed to render: {0}")]
    Render(String),
}

/// One chat turn; convertible to the `{"role", "content"}` object a template sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

impl From<ChatMessage> for JsonValue {
    fn from(message: ChatMessage) -> JsonValue {
        serde_json::json!({ "role": message.role, "content": message.content })
    }
}

impl From<&ChatMessage> for JsonValue {
    fn from(message: &ChatMessage) -> JsonValue {
        serde_json::json!({ "role": message.role, "content": message.content })
    }
}

/// A compiled chat template plus the special tokens it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    limits: TemplateLimits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_formatter(builtins::python_formatter);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", builtins::tojson);
        env.add_filter("string", builtins::string_filter);
        env.add_function("raise_exception", builtins::raise_exception);
        env.add_function("strftime_now", builtins::strftime_now);
        env.set_fuel(Some(TemplateLimits::DEFAULT.fuel));
        env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))
            .map_err(|err| TemplateError::Syntax(err.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            limits: TemplateLimits::DEFAULT,
        })
    }

    pub fn with_limits(mut self, limits: TemplateLimits) -> ChatTemplate {
        self.env.set_fuel(Some(limits.fuel));
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> TemplateLimits {
        self.limits
    }

    /// Renders `messages` (objects with at least `role` and `content`). `extra` is an object of
    /// further template variables, e.g. `{"tools": [...]}`; its keys may override the special tokens.
    pub fn render(
        &self,
        messages: &[JsonValue],
        add_generation_prompt: bool,
        extra: Option<&JsonValue>,
    ) -> Result<String, TemplateError> {
        let context = self.context(messages, add_generation_prompt, extra)?;
        match self.limits.max_memory_bytes {
            Some(budget) => isolate::render_isolated(budget, || self.render_context(context)),
            None => self.render_context(context),
        }
    }

    fn render_context(&self, context: JsonValue) -> Result<String, TemplateError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|err| TemplateError::Render(err.to_string()))?;
        let overflowed = Cell::new(false);
        let mut writer = BoundedWriter {
            buffer: Vec::new(),
            limit: self.limits.max_output_bytes,
            overflowed: &overflowed,
        };
        match template.render_captured_to(context, &mut writer) {
            Ok(_) => String::from_utf8(writer.buffer)
                .map_err(|_| TemplateError::Render("output is not UTF-8".to_string())),
            Err(_) if overflowed.get() => Err(TemplateError::OutputTooLarge {
                limit: self.limits.max_output_bytes,
            }),
            Err(err) => Err(self.classify(&err)),
        }
    }

    /// [`render`](Self::render) for plain `{role, content}` turns.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let messages: Vec<JsonValue> = messages.iter().map(JsonValue::from).collect();
        self.render(&messages, add_generation_prompt, None)
    }

    /// The variables HF passes: special tokens, then the caller's extras, then the fixed ones.
    fn context(
        &self,
        messages: &[JsonValue],
        add_generation_prompt: bool,
        extra: Option<&JsonValue>,
    ) -> Result<JsonValue, TemplateError> {
        if messages.is_empty() {
            return Err(TemplateError::InvalidInput(
                "the conversation is empty".to_string(),
            ));
        }
        let mut context = Map::new();
        context.insert("bos_token".into(), self.bos_token.clone().into());
        context.insert("eos_token".into(), self.eos_token.clone().into());
        context.insert("tools".into(), JsonValue::Null);
        context.insert("documents".into(), JsonValue::Null);
        match extra {
            None | Some(JsonValue::Null) => {}
            Some(JsonValue::Object(vars)) => context.extend(vars.clone()),
            Some(other) => {
                return Err(TemplateError::InvalidInput(format!(
                    "extra template variables must be an object, got {other}"
                )))
            }
        }
        let normalized = messages
            .iter()
            .map(normalize_message)
            .collect::<Result<Vec<_>, _>>()?;
        context.insert("messages".into(), JsonValue::Array(normalized));
        context.insert("add_generation_prompt".into(), add_generation_prompt.into());
        Ok(JsonValue::Object(context))
    }

    fn classify(&self, err: &minijinja::Error) -> TemplateError {
        if let Some(raised) = find_source::<builtins::RaisedByTemplate>(err) {
            return TemplateError::Raised(raised.0.clone());
        }
        match err.kind() {
            ErrorKind::OutOfFuel => TemplateError::Fuel {
                limit: self.limits.fuel,
            },
            ErrorKind::SyntaxError => TemplateError::Syntax(err.to_string()),
            _ => TemplateError::Render(err.to_string()),
        }
    }
}

/// HF's message clean-up: drop `None`-valued keys and copy reasoning under the names templates read
/// (`{"thinking": r, **message, "reasoning_content": r}`).
fn normalize_message(message: &JsonValue) -> Result<JsonValue, TemplateError> {
    let JsonValue::Object(fields) = message else {
        return Err(TemplateError::InvalidInput(format!(
            "a chat message must be an object, got {message}"
        )));
    };
    let fields: Map<String, JsonValue> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let reasoning = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|key| fields.get(*key))
        .cloned();
    let Some(reasoning) = reasoning else {
        return Ok(JsonValue::Object(fields));
    };
    let mut aliased = Map::new();
    aliased.insert("thinking".into(), reasoning.clone());
    aliased.extend(fields);
    aliased.insert("reasoning_content".into(), reasoning);
    Ok(JsonValue::Object(aliased))
}

/// HF's `{% generation %}…{% endgeneration %}` only marks assistant spans for training masks; it
/// renders its body unchanged, which an always-true `if` reproduces (whitespace markers kept).
fn strip_generation_tags(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_string();
    }
    let open =
        fancy_regex::Regex::new(r"\{%([-+]?)\s*generation\s*([-+]?)%\}").expect("valid regex");
    let close =
        fancy_regex::Regex::new(r"\{%([-+]?)\s*endgeneration\s*([-+]?)%\}").expect("valid regex");
    let opened = open.replace_all(source, "{%${1} if true ${2}%}");
    close
        .replace_all(&opened, "{%${1} endif ${2}%}")
        .into_owned()
}

fn find_source<T: std::error::Error + 'static>(err: &minijinja::Error) -> Option<&T> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// Collects output and fails the write that would pass `limit` bytes.
struct BoundedWriter<'a> {
    buffer: Vec<u8>,
    limit: usize,
    overflowed: &'a Cell<bool>,
}

impl io::Write for BoundedWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buffer.len() + bytes.len() > self.limit {
            self.overflowed.set(true);
            return Err(io::Error::other("template output limit reached"));
        }
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
