//! Anthropic `POST /v1/messages` (with `?beta=true`) and `/v1/messages/count_tokens`.
use crate::common::{collect, new_id, prepare, read_json, sse, sse_json, submit, with_counts};
use crate::error::{ApiError, ApiResult, Protocol};
use crate::openai::{token_limit, Sampling};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use ishizuki_engine::{
    Done, Event, FinishReason, Message, Prompt, Request, Tool, ToolCall, ToolChoice, Usage,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

const P: Protocol = Protocol::Anthropic;
/// Claude Code puts a per-request nonce in a system block; dropping it keeps the prefix cacheable.
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub messages: Vec<Value>,
    pub system: Option<Value>,
    pub max_tokens: Option<i64>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub thinking: Option<Value>,
    /// `false` turns drafting off for this request (an extension; it never changes the output).
    pub draft: Option<bool>,
}

fn bad(message: String) -> ApiError {
    ApiError::bad_request(P, message)
}

/// `system`: a string or text blocks; billing-header blocks are dropped.
fn system_text(v: &Value) -> ApiResult<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .map(|b| {
                    b.get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad("system blocks must be text blocks".into()))
                })
                .collect::<ApiResult<Vec<_>>>()?
                .into_iter()
                .filter(|t| !t.starts_with(BILLING_HEADER))
                .collect();
            Ok(texts.join("\n\n"))
        }
        Value::Null => Ok(String::new()),
        _ => Err(bad(
            "system must be a string or a list of text blocks".into()
        )),
    }
}

/// The text of a tool_result's `content` (a string or blocks).
fn result_text(v: Option<&Value>, at: usize) -> ApiResult<String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(
                        b.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ),
                    Some("image") => {
                        return Err(bad(format!(
                            "messages[{at}]: image content is not supported yet"
                        )))
                    }
                    _ => {
                        return Err(bad(format!(
                            "messages[{at}]: tool_result content must be text"
                        )))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
        Some(_) => Err(bad(format!(
            "messages[{at}]: tool_result content must be a string or blocks"
        ))),
    }
}

/// One Anthropic message as chat messages: tool results become `tool` turns of their own.
fn convert(v: &Value, at: usize, out: &mut Vec<Message>) -> ApiResult<()> {
    let role = v
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("messages[{at}] needs a role")))?;
    if !matches!(role, "user" | "assistant" | "system") {
        return Err(bad(format!(
            "messages[{at}]: role must be user or assistant, got `{role}`"
        )));
    }
    let blocks = match v.get("content") {
        Some(Value::String(s)) => {
            out.push(Message::new(role, s.clone()));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(bad(format!(
                "messages[{at}].content must be a string or a list of blocks"
            )))
        }
    };
    let mut m = Message::new(role, "");
    let mut texts = Vec::new();
    for b in blocks {
        let kind = b.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match kind {
            "text" => texts.push(s("text")),
            "thinking" => m.reasoning = Some(s("thinking")),
            "redacted_thinking" => {}
            "tool_use" => {
                let input = b.get("input").cloned().unwrap_or(json!({}));
                if !input.is_object() {
                    return Err(bad(format!(
                        "messages[{at}]: tool_use input must be an object"
                    )));
                }
                m.tool_calls.push(ToolCall {
                    id: s("id"),
                    name: s("name"),
                    arguments: input.to_string(),
                });
            }
            "tool_result" => {
                let mut r = Message::new("tool", result_text(b.get("content"), at)?);
                r.tool_call_id = Some(s("tool_use_id"));
                out.push(r);
            }
            "image" | "document" => {
                return Err(bad(format!(
                    "messages[{at}]: {kind} content is not supported yet"
                )))
            }
            other => {
                return Err(bad(format!(
                    "messages[{at}]: unknown content block type `{other}`"
                )))
            }
        }
    }
    m.content = texts.join("\n");
    if !m.content.is_empty()
        || !m.tool_calls.is_empty()
        || m.reasoning.is_some()
        || role == "assistant"
    {
        out.push(m);
    }
    Ok(())
}

impl MessagesRequest {
    fn into_request(self, counting: bool) -> ApiResult<Request> {
        let mut messages = Vec::new();
        if let Some(sys) = &self.system {
            let text = system_text(sys)?;
            if !text.is_empty() {
                messages.push(Message::new("system", text));
            }
        }
        for (i, m) in self.messages.iter().enumerate() {
            convert(m, i, &mut messages)?;
        }
        let tools: Vec<Tool> = self
            .tools
            .iter()
            .flatten()
            // server tools (web search, ...) have a `type` and no input_schema: skipped
            .filter(|t| t.get("input_schema").is_some())
            .map(|t| Tool {
                name: t
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                parameters: t.get("input_schema").cloned().unwrap_or(json!({})),
            })
            .collect();
        let choice = match self
            .tool_choice
            .as_ref()
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
        {
            None | Some("auto") => ToolChoice::Auto,
            Some("any") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("tool") => ToolChoice::Named(
                self.tool_choice
                    .as_ref()
                    .and_then(|c| c.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            ),
            Some(other) => return Err(bad(format!("unknown tool_choice type `{other}`"))),
        };
        let thinking = self
            .thinking
            .as_ref()
            .and_then(|t| t.get("type"))
            .and_then(Value::as_str)
            .map(|t| t == "enabled");
        let has_tools = !tools.is_empty();
        let mut r = Request::new(Prompt::Chat {
            messages,
            tools,
            tool_choice: choice,
            enable_thinking: thinking,
            template_kwargs: None,
        });
        let sampling = Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            ..Sampling::default()
        };
        r.sampler = sampling.config().map_err(|e| bad(e.message))?;
        r.draft = self.draft.unwrap_or(true);
        r.max_tokens = match (
            token_limit("max_tokens", self.max_tokens).map_err(|e| bad(e.message))?,
            counting,
        ) {
            (Some(n), _) => Some(n),
            (None, true) => Some(0),
            (None, false) => return Err(bad("max_tokens: field required".into())),
        };
        r.stop = self.stop_sequences.unwrap_or_default();
        r.parse_tool_calls = has_tools;
        r.parallel_tool_calls = !self
            .tool_choice
            .as_ref()
            .and_then(|c| c.get("disable_parallel_tool_use"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(r)
    }
}

fn stop_reason(d: &Done) -> &'static str {
    match d.finish {
        FinishReason::EndOfTurn | FinishReason::Cancelled => "end_turn",
        FinishReason::StopSequence => "stop_sequence",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
    }
}

/// Anthropic counts cache reads apart from `input_tokens`.
fn usage(u: &Usage) -> Value {
    let mut v = json!({"input_tokens": u.prompt_tokens - u.cached_tokens, "output_tokens": u.completion_tokens,
           "cache_read_input_tokens": u.cached_tokens, "cache_creation_input_tokens": 0});
    crate::common::add_draft_usage(&mut v, u);
    v
}

fn tool_use_id(call: &ToolCall) -> String {
    format!("toolu_{}", call.id.trim_start_matches("call_"))
}

pub async fn count_tokens(State(state): State<Arc<AppState>>, body: Body) -> ApiResult<Response> {
    let req: MessagesRequest = read_json(P, body).await?;
    let engine = state.model_for(P, req.model.as_deref())?;
    let mut request = req.into_request(true)?;
    request.max_tokens = Some(0);
    let prepared = prepare(engine, P, request).await?;
    Ok(axum::Json(json!({"input_tokens": prepared.tokens.len()})).into_response())
}

pub async fn messages(State(state): State<Arc<AppState>>, body: Body) -> ApiResult<Response> {
    let req: MessagesRequest = read_json(P, body).await?;
    let engine = state.model_for(P, req.model.as_deref())?;
    let model = engine.text.name.clone();
    let stream = req.stream;
    // max_tokens is a cap (Claude Code asks for 32000 whatever the context): generate at most
    // what fits after the prompt instead of refusing the request
    let mut request = req.into_request(false)?;
    let cap = request.max_tokens.take();
    let mut prepared = prepare(engine, P, request).await?;
    prepared.max_tokens = prepared.max_tokens.min(cap.unwrap_or(usize::MAX));
    let sub = submit(&state, P, prepared)?;
    let id = new_id("msg_");
    if stream {
        return Ok(sse(sub, "/v1/messages", Streamer::new(id, model).into_fn()));
    }
    let c = collect(sub).await?;
    let done = c.done();
    let mut content = Vec::new();
    if !c.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": c.reasoning, "signature": ""}));
    }
    if !c.text.is_empty() {
        content.push(json!({"type": "text", "text": c.text}));
    }
    for call in &c.tool_calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
        content.push(
            json!({"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": input}),
        );
    }
    let body = json!({"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason(done), "stop_sequence": done.stop_sequence, "usage": usage(&done.usage)});
    Ok(with_counts(axum::Json(body).into_response(), done))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Thinking,
    Text,
}

/// message_start, then content blocks opened, filled and stopped in order, then message_delta
/// and message_stop.
struct Streamer {
    id: String,
    model: String,
    block: Block,
    index: usize,
}

impl Streamer {
    fn new(id: String, model: String) -> Streamer {
        Streamer {
            id,
            model,
            block: Block::None,
            index: 0,
        }
    }

    fn into_fn(mut self) -> impl FnMut(Event) -> Vec<SseEvent> + Send {
        move |event| {
            let mut out = Vec::new();
            self.on(event, &mut out);
            out
        }
    }

    fn emit(out: &mut Vec<SseEvent>, kind: &str, mut data: Value) {
        data["type"] = kind.into();
        out.push(sse_json(Some(kind), &data));
    }

    fn open(&mut self, block: Block, out: &mut Vec<SseEvent>) {
        if self.block == block {
            return;
        }
        self.close(out);
        let content_block = match block {
            Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::Text => json!({"type": "text", "text": ""}),
            Block::None => return,
        };
        Self::emit(
            out,
            "content_block_start",
            json!({"index": self.index, "content_block": content_block}),
        );
        self.block = block;
    }

    fn close(&mut self, out: &mut Vec<SseEvent>) {
        if self.block == Block::None {
            return;
        }
        if self.block == Block::Thinking {
            Self::emit(
                out,
                "content_block_delta",
                json!({"index": self.index, "delta": {"type": "signature_delta", "signature": ""}}),
            );
        }
        Self::emit(out, "content_block_stop", json!({"index": self.index}));
        self.index += 1;
        self.block = Block::None;
    }

    fn on(&mut self, event: Event, out: &mut Vec<SseEvent>) {
        match event {
            Event::Started {
                prompt_tokens,
                cached_tokens,
            } => {
                let u = Usage {
                    prompt_tokens,
                    cached_tokens,
                    ..Usage::default()
                };
                let message = json!({"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                    "stop_reason": null, "stop_sequence": null, "usage": usage(&u)});
                Self::emit(out, "message_start", json!({"message": message}));
                Self::emit(out, "ping", json!({}));
            }
            Event::Reasoning(r) => {
                self.open(Block::Thinking, out);
                Self::emit(
                    out,
                    "content_block_delta",
                    json!({"index": self.index, "delta": {"type": "thinking_delta", "thinking": r}}),
                );
            }
            Event::Text { text, .. } if text.is_empty() => {}
            Event::Text { text, .. } => {
                self.open(Block::Text, out);
                Self::emit(
                    out,
                    "content_block_delta",
                    json!({"index": self.index, "delta": {"type": "text_delta", "text": text}}),
                );
            }
            Event::ToolCall(call) => {
                self.close(out);
                let start = json!({"type": "tool_use", "id": tool_use_id(&call), "name": call.name, "input": {}});
                Self::emit(
                    out,
                    "content_block_start",
                    json!({"index": self.index, "content_block": start}),
                );
                for fragment in json_fragments(&call.arguments) {
                    Self::emit(
                        out,
                        "content_block_delta",
                        json!({"index": self.index, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                    );
                }
                Self::emit(out, "content_block_stop", json!({"index": self.index}));
                self.index += 1;
            }
            Event::PromptLogprobs(_) | Event::Progress { .. } => {}
            Event::Done(d) => {
                self.close(out);
                let u = usage(&d.usage);
                Self::emit(
                    out,
                    "message_delta",
                    json!({"delta": {"stop_reason": stop_reason(&d), "stop_sequence": d.stop_sequence}, "usage": u}),
                );
                Self::emit(out, "message_stop", json!({}));
            }
            Event::Failed { kind, message } => {
                let e = ApiError::failure(P, kind, message);
                out.push(sse_json(Some("error"), &e.body()));
            }
        }
    }
}

/// A call's JSON in a few fragments, cut on char boundaries (clients must concatenate them).
fn json_fragments(json: &str) -> Vec<String> {
    const PIECE: usize = 64;
    let mut out = Vec::new();
    let mut current = String::new();
    for ch in json.chars() {
        current.push(ch);
        if current.len() >= PIECE {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || out.is_empty() {
        out.push(current);
    }
    out
}
