//! OpenAI-compatible endpoints and what they share: sampling fields, stop, tools, formats.
pub mod chat;
pub mod completions;
pub mod responses;

use crate::error::{ApiError, ApiResult, Protocol};
use crate::AppState;
use axum::extract::State;
use axum::Json;
use ishizuki_engine::events::TokenLogprob;
use ishizuki_engine::request::limits;
use ishizuki_engine::{Constraint, FinishReason, SamplerConfig, Tool, ToolChoice};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

const P: Protocol = Protocol::OpenAi;

pub async fn models(State(state): State<Arc<AppState>>) -> ApiResult<Json<Value>> {
    let engine = state.engine(P)?;
    Ok(Json(json!({"object": "list", "data": [{
        "id": engine.text.name,
        "object": "model",
        "created": 0,
        "owned_by": "ishizuki",
        "meta": {"n_ctx": engine.text.n_ctx, "n_vocab": engine.text.tokenizer.n_vocab()},
    }]})))
}

/// A string or a list of strings (`stop`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The sampling fields chat, completions and responses share (llama-server's defaults where a
/// field is absent, as local clients expect).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub seed: Option<i64>,
    /// `false` turns drafting off for this request (it never changes the output).
    pub draft: Option<bool>,
}

impl Sampling {
    pub fn config(&self) -> ApiResult<SamplerConfig> {
        let top_k = match self.top_k {
            None => 40,
            Some(k) if k <= 0 => 0,
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
        };
        let d = SamplerConfig::default();
        Ok(SamplerConfig {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k,
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self
                .repetition_penalty
                .or(self.repeat_penalty)
                .unwrap_or(1.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            penalty_last_n: 64,
            seed: self
                .seed
                .map_or_else(ishizuki_engine::sampler::seed_from_time, |s| s as u64),
        })
    }
}

/// A token limit field: present, non-negative and not absurd.
pub fn token_limit(param: &str, v: Option<i64>) -> ApiResult<Option<usize>> {
    match v {
        None => Ok(None),
        Some(n) if n < 0 => Err(
            ApiError::bad_request(P, format!("{param} must be >= 0, got {n}")).with_param(param),
        ),
        Some(n) if n > 1 << 24 => Err(ApiError::bad_request(
            P,
            format!("{param} must be at most {}, got {n}", 1 << 24),
        )
        .with_param(param)),
        Some(n) => Ok(Some(n as usize)),
    }
}

/// `{"type": "function", "function": {name, description, parameters}}` (chat) or the flat form
/// (responses); tools of other types are skipped.
pub fn function_tool(v: &Value) -> ApiResult<Option<Tool>> {
    if v.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "function")
    {
        return Ok(None);
    }
    let f = v.get("function").unwrap_or(v);
    let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request(P, "a function tool needs a `name`").with_param("tools")
    })?;
    let parameters = f
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    if !parameters.is_object() {
        return Err(ApiError::bad_request(
            P,
            format!("the parameters of tool `{name}` must be a JSON Schema object"),
        )
        .with_param("tools"));
    }
    let description = f
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Some(Tool {
        name: name.to_string(),
        description,
        parameters,
    }))
}

pub fn tools(list: Option<&Vec<Value>>) -> ApiResult<Vec<Tool>> {
    let list = list.map_or(&[][..], Vec::as_slice);
    if list.len() > limits::MAX_TOOLS {
        return Err(ApiError::bad_request(
            P,
            format!("at most {} tools, got {}", limits::MAX_TOOLS, list.len()),
        )
        .with_param("tools"));
    }
    Ok(list
        .iter()
        .map(function_tool)
        .collect::<ApiResult<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect())
}

/// `"auto" | "none" | "required" | {"type": "function", "function": {"name"}} | {"type": "function", "name"}`.
pub fn tool_choice(v: Option<&Value>) -> ApiResult<ToolChoice> {
    let bad = || {
        ApiError::bad_request(
            P,
            "tool_choice must be auto, none, required or a named function",
        )
        .with_param("tool_choice")
    };
    match v {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(bad()),
        },
        Some(obj) => {
            let name = obj
                .pointer("/function/name")
                .or_else(|| obj.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            Ok(ToolChoice::Named(name.to_string()))
        }
    }
}

/// `response_format` (chat) / `text.format` (responses), plus the `grammar` / `regex` extensions.
pub fn constraint(
    format: Option<&Value>,
    grammar: Option<&str>,
    regex: Option<&str>,
) -> ApiResult<Option<Constraint>> {
    if let Some(g) = grammar {
        return Ok(Some(Constraint::Lark(g.to_string())));
    }
    if let Some(r) = regex {
        return Ok(Some(Constraint::Regex(r.to_string())));
    }
    let Some(f) = format.filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let kind = f.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(Constraint::JsonObject)),
        "json_schema" => {
            let schema = f
                .pointer("/json_schema/schema")
                .or_else(|| f.get("schema"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            Ok(Some(Constraint::JsonSchema(schema)))
        }
        other => Err(ApiError::bad_request(
            P,
            format!("unknown response format type `{other}` (text, json_object or json_schema)"),
        )
        .with_param("response_format")),
    }
}

pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::EndOfTurn | FinishReason::StopSequence | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
    }
}

/// Chat-style logprobs entries (`{"token", "logprob", "bytes", "top_logprobs"}`).
pub fn chat_logprobs(entries: &[TokenLogprob]) -> Value {
    let items: Vec<Value> = entries
        .iter()
        .map(|e| {
            let top: Vec<Value> = e.top.iter().map(|t| json!({"token": t.text, "logprob": t.logprob, "bytes": t.bytes})).collect();
            json!({"token": e.text, "logprob": e.logprob.unwrap_or(0.0), "bytes": e.bytes, "top_logprobs": top})
        })
        .collect();
    json!({"content": items})
}

pub fn usage_json(u: &ishizuki_engine::Usage) -> Value {
    let mut v = json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    });
    crate::common::add_draft_usage(&mut v, u);
    v
}
