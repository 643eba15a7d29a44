//! `POST /v1/chat/completions`, streaming and not.
use super::{
    chat_logprobs, constraint, finish_reason, token_limit, tool_choice, tools, usage_json,
    OneOrMany, Sampling, P,
};
use crate::common::{
    collect, new_id, prepare, read_json, sse, sse_json, submit, unix_time, with_counts,
};
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use ishizuki_engine::request::limits;
use ishizuki_engine::{Event, Message, Prompt, Request, ToolCall};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<Value>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<i64>,
    pub response_format: Option<Value>,
    pub grammar: Option<String>,
    pub regex: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub chat_template_kwargs: Option<Value>,
    pub reasoning_effort: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Message `content`: a string, null, or a list of `{"type": "text", "text"}` parts.
pub fn content_text(v: Option<&Value>, at: usize) -> ApiResult<String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text" | "input_text" | "output_text") => out.push_str(part.get("text").and_then(Value::as_str).unwrap_or("")),
                    Some(t @ ("image_url" | "input_image" | "input_audio" | "file")) => {
                        return Err(ApiError::bad_request(P, format!("messages[{at}]: content of type `{t}` is not supported yet")).with_param("messages"))
                    }
                    _ => return Err(ApiError::bad_request(P, format!("messages[{at}]: a content part must be {{\"type\": \"text\", \"text\": ...}}")).with_param("messages")),
                }
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::bad_request(
            P,
            format!("messages[{at}].content must be a string or a list of parts, got {other}"),
        )
        .with_param("messages")),
    }
}

fn message(v: &Value, at: usize) -> ApiResult<Message> {
    let role = v.get("role").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request(P, format!("messages[{at}] needs a `role`")).with_param("messages")
    })?;
    if !matches!(role, "system" | "developer" | "user" | "assistant" | "tool") {
        return Err(
            ApiError::bad_request(P, format!("messages[{at}]: unknown role `{role}`"))
                .with_param("messages"),
        );
    }
    let mut m = Message::new(role, content_text(v.get("content"), at)?);
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    m.reasoning = text("reasoning_content").or_else(|| text("reasoning"));
    m.tool_call_id = text("tool_call_id");
    m.name = text("name");
    if let Some(calls) = v.get("tool_calls").filter(|c| !c.is_null()) {
        let calls = calls.as_array().ok_or_else(|| {
            ApiError::bad_request(P, format!("messages[{at}].tool_calls must be a list"))
                .with_param("messages")
        })?;
        for (j, c) in calls.iter().enumerate() {
            let name = c.pointer("/function/name").and_then(Value::as_str);
            let arguments = match c.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(obj @ Value::Object(_)) => obj.to_string(),
                _ => String::new(),
            };
            let Some(name) = name else {
                return Err(ApiError::bad_request(
                    P,
                    format!("messages[{at}].tool_calls[{j}] needs function.name"),
                )
                .with_param("messages"));
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            m.tool_calls.push(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            });
        }
    }
    Ok(m)
}

impl ChatRequest {
    pub fn into_request(self) -> ApiResult<(Request, bool)> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request(P, "only n = 1 is supported").with_param("n"));
        }
        if self.messages.len() > limits::MAX_MESSAGES {
            return Err(ApiError::bad_request(
                P,
                format!("at most {} messages", limits::MAX_MESSAGES),
            )
            .with_param("messages"));
        }
        let messages = self
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| message(m, i))
            .collect::<ApiResult<Vec<_>>>()?;
        let tools = tools(self.tools.as_ref())?;
        let has_tools = !tools.is_empty();
        let mut kwargs = self.chat_template_kwargs.clone();
        let enable_thinking = kwargs
            .as_ref()
            .and_then(|k| k.get("enable_thinking"))
            .and_then(Value::as_bool);
        if let Some(effort) = &self.reasoning_effort {
            let kw = kwargs.get_or_insert_with(|| json!({}));
            if let Some(obj) = kw.as_object_mut() {
                obj.insert("reasoning_effort".into(), effort.clone().into());
            }
        }
        let mut r = Request::new(Prompt::Chat {
            messages,
            tools,
            tool_choice: tool_choice(self.tool_choice.as_ref())?,
            enable_thinking,
            template_kwargs: kwargs,
        });
        r.sampler = self.sampling.config()?;
        r.draft = self.sampling.draft.unwrap_or(true);
        r.max_tokens = token_limit(
            "max_completion_tokens",
            self.max_completion_tokens.or(self.max_tokens),
        )?;
        r.stop = self.stop.map(OneOrMany::into_vec).unwrap_or_default();
        r.logprobs = if self.logprobs {
            Some(token_limit("top_logprobs", self.top_logprobs)?.unwrap_or(0))
        } else {
            None
        };
        r.constraint = constraint(
            self.response_format.as_ref(),
            self.grammar.as_deref(),
            self.regex.as_deref(),
        )?;
        r.parse_tool_calls = has_tools;
        r.parallel_tool_calls = self.parallel_tool_calls.unwrap_or(true);
        Ok((r, self.stream_options.is_some_and(|o| o.include_usage)))
    }
}

fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls.iter().map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})).collect()
}

pub async fn handle(State(state): State<Arc<AppState>>, body: Body) -> ApiResult<Response> {
    let req: ChatRequest = read_json(P, body).await?;
    let engine = state.model_for(P, req.model.as_deref())?;
    let model = engine.text.name.clone();
    let stream = req.stream;
    let (request, include_usage) = req.into_request()?;
    let prepared = prepare(engine, P, request).await?;
    let sub = submit(&state, P, prepared)?;
    let id = new_id("chatcmpl-");
    let created = unix_time();
    if stream {
        return Ok(stream_reply(sub, id, model, created, include_usage));
    }
    let c = collect(sub).await?;
    let done = c.done();
    let mut message = json!({"role": "assistant", "content": (!c.text.is_empty() || c.tool_calls.is_empty()).then(|| c.text.clone())});
    if !c.reasoning.is_empty() {
        message["reasoning_content"] = c.reasoning.clone().into();
    }
    if !c.tool_calls.is_empty() {
        message["tool_calls"] = tool_calls_json(&c.tool_calls);
    }
    let logprobs = if c.logprobs.is_empty() {
        Value::Null
    } else {
        chat_logprobs(&c.logprobs)
    };
    let body = json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish_reason(done.finish)}],
        "usage": usage_json(&done.usage),
    });
    Ok(with_counts(axum::Json(body).into_response(), done))
}

fn stream_reply(
    sub: crate::common::Submitted,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
) -> Response {
    let chunk = move |delta: Value, logprobs: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]})
    };
    let mut calls = 0usize;
    sse(sub, "/v1/chat/completions", move |event| match event {
        Event::Started { .. } => vec![sse_json(
            None,
            &chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
                Value::Null,
            ),
        )],
        Event::Text { text, logprobs } => {
            let lp = if logprobs.is_empty() {
                Value::Null
            } else {
                chat_logprobs(&logprobs)
            };
            vec![sse_json(
                None,
                &chunk(json!({"content": text}), lp, Value::Null),
            )]
        }
        Event::Reasoning(r) => vec![sse_json(
            None,
            &chunk(json!({"reasoning_content": r}), Value::Null, Value::Null),
        )],
        Event::ToolCall(c) => {
            let index = calls;
            calls += 1;
            // the id and name only on a call's first delta; the arguments follow as a string
            let first = json!({"tool_calls": [{"index": index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}]});
            let args =
                json!({"tool_calls": [{"index": index, "function": {"arguments": c.arguments}}]});
            vec![
                sse_json(None, &chunk(first, Value::Null, Value::Null)),
                sse_json(None, &chunk(args, Value::Null, Value::Null)),
            ]
        }
        Event::PromptLogprobs(_) | Event::Progress { .. } => Vec::new(),
        Event::Done(d) => {
            let mut out = vec![sse_json(
                None,
                &chunk(json!({}), Value::Null, finish_reason(d.finish).into()),
            )];
            if include_usage {
                let mut last = chunk(json!({}), Value::Null, Value::Null);
                last["choices"] = json!([]);
                last["usage"] = usage_json(&d.usage);
                out.push(sse_json(None, &last));
            }
            out.push(axum::response::sse::Event::default().data("[DONE]"));
            out
        }
        Event::Failed { kind, message } => {
            let e = ApiError::failure(P, kind, message);
            vec![
                sse_json(None, &e.body()),
                axum::response::sse::Event::default().data("[DONE]"),
            ]
        }
    })
}
