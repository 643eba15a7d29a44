//! One generation request as every front hands it to the engine, validated in one place so that
//! every protocol rejects the same things with the same messages.
use crate::sampler::SamplerConfig;
use serde_json::Value;

/// Bounds on request fields; a value past one is a bad request, never clamped silently.
pub mod limits {
    pub const MAX_MESSAGES: usize = 4096;
    pub const MAX_TOOLS: usize = 128;
    pub const MAX_STOPS: usize = 16;
    pub const MAX_STOP_BYTES: usize = 256;
    pub const MAX_TOP_LOGPROBS: usize = 20;
    pub const MAX_TOP_K: usize = 1 << 20;
    pub const MAX_TEMPERATURE: f32 = 100.0;
    pub const MAX_PENALTY: f32 = 2.0;
    pub const MAX_REPEAT_PENALTY: f32 = 10.0;
    pub const MAX_SCHEMA_BYTES: usize = 256 << 10;
    pub const MAX_PROMPT_BATCH: usize = 256;
    pub const MAX_NAME_BYTES: usize = 256;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text of an object (what OpenAI's `arguments` carries).
    pub arguments: String,
}

/// One chat turn. `role` is system, developer, user, assistant or tool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers, and the tool's name where known.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.to_string(),
            content: content.into(),
            ..Message::default()
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
    Named(String),
}

/// A constraint on the generated text (after any reasoning).
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    JsonObject,
    JsonSchema(Value),
    Lark(String),
    Regex(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Rendered with the model's chat template.
    Chat {
        messages: Vec<Message>,
        tools: Vec<Tool>,
        tool_choice: ToolChoice,
        /// None = the template's default.
        enable_thinking: Option<bool>,
        /// Further template variables (`chat_template_kwargs`); an object.
        template_kwargs: Option<Value>,
    },
    /// Raw text (completions): the spelling of control tokens is parsed; BOS per the model.
    Text(String),
    /// Token ids as given.
    Tokens(Vec<u32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub prompt: Prompt,
    pub sampler: SamplerConfig,
    /// Most tokens to generate; `None` = until the context is full.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// Logprobs of each generated token with this many alternatives (`Some(0)` = the token's only).
    pub logprobs: Option<usize>,
    /// Score and return the prompt tokens too (completions `echo` with logprobs).
    pub prompt_logprobs: bool,
    pub constraint: Option<Constraint>,
    /// Whether the output is parsed for tool calls (chat-shaped APIs with tools).
    pub parse_tool_calls: bool,
    /// Whether a required call may be several calls.
    pub parallel_tool_calls: bool,
    /// Whether the engine may draft tokens to verify (it never changes the output).
    pub draft: bool,
}

impl Request {
    pub fn new(prompt: Prompt) -> Request {
        Request {
            prompt,
            sampler: SamplerConfig::greedy(),
            max_tokens: Some(256),
            stop: Vec::new(),
            logprobs: None,
            prompt_logprobs: false,
            constraint: None,
            parse_tool_calls: true,
            parallel_tool_calls: true,
            draft: true,
        }
    }
}

/// A request the engine refuses before running it; `param` names the field where one is at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidRequest {
    pub message: String,
    pub param: Option<String>,
    /// The prompt and limit do not fit the context (OpenAI code `context_length_exceeded`).
    pub context_exceeded: bool,
}

impl InvalidRequest {
    pub fn new(param: &str, message: impl Into<String>) -> InvalidRequest {
        InvalidRequest {
            message: message.into(),
            param: (!param.is_empty()).then(|| param.to_string()),
            context_exceeded: false,
        }
    }
}

fn check(ok: bool, param: &str, message: impl FnOnce() -> String) -> Result<(), InvalidRequest> {
    if ok {
        Ok(())
    } else {
        Err(InvalidRequest::new(param, message()))
    }
}

fn check_range(param: &str, v: f32, lo: f32, hi: f32) -> Result<(), InvalidRequest> {
    check(v.is_finite() && (lo..=hi).contains(&v), param, || {
        format!("{param} must be a number in [{lo}, {hi}], got {v}")
    })
}

impl SamplerConfig {
    /// The one place sampling parameters are bounded.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        check_range(
            "temperature",
            self.temperature,
            0.0,
            limits::MAX_TEMPERATURE,
        )?;
        check_range("top_p", self.top_p, 0.0, 1.0)?;
        check_range("min_p", self.min_p, 0.0, 1.0)?;
        let p = limits::MAX_PENALTY;
        check_range("presence_penalty", self.presence_penalty, -p, p)?;
        check_range("frequency_penalty", self.frequency_penalty, -p, p)?;
        check_range(
            "repeat_penalty",
            self.repeat_penalty,
            0.0,
            limits::MAX_REPEAT_PENALTY,
        )?;
        check(self.top_k <= limits::MAX_TOP_K, "top_k", || {
            format!(
                "top_k must be at most {}, got {}",
                limits::MAX_TOP_K,
                self.top_k
            )
        })
    }
}

impl Request {
    /// Field bounds that need no model; the context check happens once the prompt is tokenized.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        self.sampler.validate()?;
        check(self.stop.len() <= limits::MAX_STOPS, "stop", || {
            format!(
                "at most {} stop sequences, got {}",
                limits::MAX_STOPS,
                self.stop.len()
            )
        })?;
        for s in &self.stop {
            check(s.len() <= limits::MAX_STOP_BYTES, "stop", || {
                format!(
                    "a stop sequence is at most {} bytes, got {}",
                    limits::MAX_STOP_BYTES,
                    s.len()
                )
            })?;
        }
        if let Some(n) = self.logprobs {
            check(n <= limits::MAX_TOP_LOGPROBS, "top_logprobs", || {
                format!(
                    "top_logprobs must be at most {}, got {n}",
                    limits::MAX_TOP_LOGPROBS
                )
            })?;
        }
        if let Some(c) = &self.constraint {
            let size = match c {
                Constraint::JsonObject => 0,
                Constraint::JsonSchema(v) => v.to_string().len(),
                Constraint::Lark(s) | Constraint::Regex(s) => s.len(),
            };
            check(size <= limits::MAX_SCHEMA_BYTES, "response_format", || {
                format!(
                    "the schema or grammar is {size} bytes, at most {} allowed",
                    limits::MAX_SCHEMA_BYTES
                )
            })?;
        }
        match &self.prompt {
            Prompt::Chat {
                messages,
                tools,
                tool_choice,
                ..
            } => validate_chat(messages, tools, tool_choice),
            Prompt::Text(_) | Prompt::Tokens(_) => Ok(()),
        }
    }
}

fn validate_chat(
    messages: &[Message],
    tools: &[Tool],
    choice: &ToolChoice,
) -> Result<(), InvalidRequest> {
    check(!messages.is_empty(), "messages", || {
        "messages must not be empty".into()
    })?;
    check(messages.len() <= limits::MAX_MESSAGES, "messages", || {
        format!(
            "at most {} messages, got {}",
            limits::MAX_MESSAGES,
            messages.len()
        )
    })?;
    check(tools.len() <= limits::MAX_TOOLS, "tools", || {
        format!("at most {} tools, got {}", limits::MAX_TOOLS, tools.len())
    })?;
    for (i, t) in tools.iter().enumerate() {
        check(
            !t.name.is_empty() && t.name.len() <= limits::MAX_NAME_BYTES,
            "tools",
            || {
                format!(
                    "tools[{i}] needs a name of 1 to {} bytes",
                    limits::MAX_NAME_BYTES
                )
            },
        )?;
    }
    for (i, m) in messages.iter().enumerate() {
        for (j, call) in m.tool_calls.iter().enumerate() {
            let parsed = serde_json::from_str::<Value>(&call.arguments);
            check(matches!(parsed, Ok(Value::Object(_))), "messages", || {
                format!(
                    "messages[{i}].tool_calls[{j}].function.arguments is not a JSON object: {:?}",
                    truncated(&call.arguments)
                )
            })?;
        }
    }
    match choice {
        ToolChoice::Named(name) => {
            check(tools.iter().any(|t| &t.name == name), "tool_choice", || {
                format!("tool_choice names `{name}`, which is not among the tools")
            })
        }
        ToolChoice::Required => check(!tools.is_empty(), "tool_choice", || {
            "tool_choice requires a call but no tools are given".into()
        }),
        _ => Ok(()),
    }
}

fn truncated(s: &str) -> String {
    s.chars().take(80).collect()
}
