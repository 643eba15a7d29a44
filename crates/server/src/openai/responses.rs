//! `POST /v1/responses` (stateless, or chained by `previous_response_id` through a bounded
//! in-memory store), streaming and not.
use super::{constraint, function_tool, token_limit, tool_choice, Sampling, P};
use crate::common::{
    collect, new_id, prepare, read_json, sse, sse_json, submit, unix_time, with_counts,
};
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use ishizuki_engine::{
    Done, Event, FailureKind, FinishReason, Message, Prompt, Request, ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub max_output_tokens: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub reasoning: Option<Value>,
    pub text: Option<Value>,
    #[serde(default)]
    pub stream: bool,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub metadata: Option<Value>,
}

/// Conversations of stored responses (input and output as messages), least recently used first
/// out, bounded in count and bytes.
pub struct Store {
    entries: Mutex<VecDeque<(String, Vec<Message>, usize)>>,
    max_entries: usize,
    max_bytes: usize,
}

fn size_of(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| {
            m.content.len()
                + m.reasoning.as_ref().map_or(0, String::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len())
                    .sum::<usize>()
                + 64
        })
        .sum()
}

impl Store {
    pub fn new(max_entries: usize, max_bytes: usize) -> Store {
        Store {
            entries: Mutex::new(VecDeque::new()),
            max_entries,
            max_bytes,
        }
    }

    fn get(&self, id: &str) -> Option<Vec<Message>> {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let at = e.iter().position(|(k, _, _)| k == id)?;
        let entry = e.remove(at)?;
        let messages = entry.1.clone();
        e.push_back(entry);
        Some(messages)
    }

    fn put(&self, id: String, messages: Vec<Message>) {
        let size = size_of(&messages);
        if self.max_entries == 0 || size > self.max_bytes {
            return;
        }
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.push_back((id, messages, size));
        while e.len() > self.max_entries || e.iter().map(|x| x.2).sum::<usize>() > self.max_bytes {
            e.pop_front();
        }
    }
}

fn bad(message: String) -> ApiError {
    ApiError::bad_request(P, message).with_param("input")
}

fn item_text(v: Option<&Value>, at: usize) -> ApiResult<String> {
    super::chat::content_text(v, at).map_err(|e| bad(format!("input[{at}]: {}", e.message)))
}

/// Input items as chat messages; consecutive function calls join one assistant message.
fn input_messages(input: &Value) -> ApiResult<Vec<Message>> {
    let items = match input {
        Value::String(s) => return Ok(vec![Message::new("user", s.clone())]),
        Value::Array(items) => items,
        _ => return Err(bad("input must be a string or a list of items".into())),
    };
    let mut out: Vec<Message> = Vec::new();
    let mut pending_reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let s = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_string);
        match kind {
            "message" => {
                let role = s("role").ok_or_else(|| bad(format!("input[{i}] needs a role")))?;
                if !matches!(role.as_str(), "user" | "assistant" | "system" | "developer") {
                    return Err(bad(format!("input[{i}]: unknown role `{role}`")));
                }
                let mut m = Message::new(&role, item_text(item.get("content"), i)?);
                if role == "assistant" {
                    m.reasoning = pending_reasoning.take();
                }
                out.push(m);
            }
            "function_call" => {
                let name = s("name")
                    .ok_or_else(|| bad(format!("input[{i}]: a function_call needs a name")))?;
                let arguments = s("arguments").unwrap_or_else(|| "{}".into());
                if !matches!(
                    serde_json::from_str::<Value>(&arguments),
                    Ok(Value::Object(_))
                ) {
                    return Err(bad(format!(
                        "input[{i}]: the function_call arguments are not a JSON object"
                    )));
                }
                let call = ToolCall {
                    id: s("call_id").or_else(|| s("id")).unwrap_or_default(),
                    name,
                    arguments,
                };
                match out.last_mut() {
                    Some(m)
                        if m.role == "assistant"
                            && (m.content.is_empty() || !m.tool_calls.is_empty()) =>
                    {
                        m.tool_calls.push(call)
                    }
                    _ => {
                        let mut m = Message::new("assistant", "");
                        m.reasoning = pending_reasoning.take();
                        m.tool_calls.push(call);
                        out.push(m);
                    }
                }
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    other => item_text(other, i)?,
                };
                let mut m = Message::new("tool", output);
                m.tool_call_id = s("call_id");
                out.push(m);
            }
            "reasoning" => {
                let texts = |k: &str| -> String {
                    item.get(k)
                        .and_then(Value::as_array)
                        .map_or(String::new(), |parts| {
                            parts
                                .iter()
                                .filter_map(|p| p.get("text").and_then(Value::as_str))
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                };
                let text = Some(texts("content"))
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| texts("summary"));
                pending_reasoning = Some(text).filter(|t| !t.is_empty());
            }
            // items of other kinds (web search results, ...) have no text the model can use
            _ => {}
        }
    }
    Ok(out)
}

impl ResponsesRequest {
    fn conversation(&self, state: &AppState) -> ApiResult<Vec<Message>> {
        let mut messages = match &self.previous_response_id {
            Some(id) => state.responses.get(id).ok_or_else(|| ApiError::bad_request(P, format!("previous response `{id}` was not found (it was not stored, or it was evicted)")).with_param("previous_response_id"))?,
            None => Vec::new(),
        };
        if let Some(input) = &self.input {
            messages.extend(input_messages(input)?);
        }
        // instructions replace any earlier system prompt rather than pile up across turns
        messages.retain(|m| m.role != "system" || self.instructions.is_none());
        if let Some(ins) = &self.instructions {
            messages.insert(0, Message::new("system", ins.clone()));
        }
        Ok(messages)
    }

    fn to_request(&self, messages: Vec<Message>) -> ApiResult<Request> {
        let tools: Vec<_> = self
            .tools
            .iter()
            .flatten()
            .map(function_tool)
            .collect::<ApiResult<Vec<_>>>()?
            .into_iter()
            .flatten()
            .collect();
        let has_tools = !tools.is_empty();
        let effort = self
            .reasoning
            .as_ref()
            .and_then(|r| r.get("effort"))
            .and_then(Value::as_str);
        let kwargs = effort.map(|e| json!({"reasoning_effort": e}));
        let enable_thinking = effort.map(|e| e != "none" && e != "minimal");
        let mut r = Request::new(Prompt::Chat {
            messages,
            tools,
            tool_choice: tool_choice(self.tool_choice.as_ref())?,
            enable_thinking,
            template_kwargs: kwargs,
        });
        r.sampler = self.sampling.config()?;
        r.draft = self.sampling.draft.unwrap_or(true);
        r.max_tokens = token_limit("max_output_tokens", self.max_output_tokens)?;
        r.constraint = constraint(self.text.as_ref().and_then(|t| t.get("format")), None, None)?;
        r.parse_tool_calls = has_tools;
        r.parallel_tool_calls = self.parallel_tool_calls.unwrap_or(true);
        Ok(r)
    }
}

/// The fixed parts of a response object.
struct Shell {
    id: String,
    created: u64,
    model: String,
    echo: Value,
}

impl Shell {
    fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<&Usage>,
        reasoning_tokens: usize,
    ) -> Value {
        let usage = usage.map(|u| {
            let mut v = json!({
                "input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": u.cached_tokens},
                "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": u.prompt_tokens + u.completion_tokens});
            crate::common::add_draft_usage(&mut v, u);
            v
        });
        let mut v = json!({"id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.model,
            "output": output, "error": null, "incomplete_details": null, "usage": usage});
        if let (Some(obj), Some(echo)) = (v.as_object_mut(), self.echo.as_object()) {
            obj.extend(echo.clone());
        }
        v
    }
}

fn incomplete(done: &Done) -> Option<Value> {
    (done.finish == FinishReason::Length).then(|| json!({"reason": "max_output_tokens"}))
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]})
}

fn call_item(id: &str, c: &ToolCall, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": c.id, "name": c.name, "arguments": c.arguments, "status": status})
}

pub async fn handle(State(state): State<Arc<AppState>>, body: Body) -> ApiResult<Response> {
    let req: ResponsesRequest = read_json(P, body).await?;
    let engine = state.model_for(P, req.model.as_deref())?;
    let messages = req.conversation(&state)?;
    let prepared = prepare(engine, P, req.to_request(messages.clone())?).await?;
    let shell = Shell {
        id: new_id("resp_"),
        created: unix_time(),
        model: engine.text.name.clone(),
        echo: json!({"instructions": req.instructions, "previous_response_id": req.previous_response_id, "tools": req.tools.clone().unwrap_or_default(),
            "tool_choice": req.tool_choice.clone().unwrap_or("auto".into()), "parallel_tool_calls": req.parallel_tool_calls.unwrap_or(true),
            "temperature": req.sampling.temperature, "top_p": req.sampling.top_p, "max_output_tokens": req.max_output_tokens,
            "reasoning": req.reasoning.clone().unwrap_or(json!({"effort": null})), "text": req.text.clone().unwrap_or(json!({"format": {"type": "text"}})),
            "store": req.store.unwrap_or(true), "metadata": req.metadata.clone().unwrap_or(json!({}))}),
    };
    let store = req.store.unwrap_or(true).then(|| (state.clone(), messages));
    let sub = submit(&state, P, prepared)?;
    if req.stream {
        return Ok(sse(
            sub,
            "/v1/responses",
            Streamer::new(shell, store).into_fn(),
        ));
    }
    let c = collect(sub).await?;
    let done = c.done();
    let mut output = Vec::new();
    if !c.reasoning.is_empty() {
        output.push(reasoning_item(&new_id("rs_"), &c.reasoning));
    }
    if !c.text.is_empty() || c.tool_calls.is_empty() {
        output.push(message_item(&new_id("msg_"), &c.text, "completed"));
    }
    output.extend(
        c.tool_calls
            .iter()
            .map(|call| call_item(&new_id("fc_"), call, "completed")),
    );
    let status = if done.finish == FinishReason::Length {
        "incomplete"
    } else {
        "completed"
    };
    let mut body = shell.object(status, output, Some(&done.usage), 0);
    body["incomplete_details"] = incomplete(done).unwrap_or(Value::Null);
    if let Some((state, mut messages)) = store {
        let mut m = Message::new("assistant", c.text.clone());
        m.reasoning = Some(c.reasoning.clone()).filter(|r| !r.is_empty());
        m.tool_calls = c.tool_calls.clone();
        messages.push(m);
        state.responses.put(shell.id.clone(), messages);
    }
    Ok(with_counts(axum::Json(body).into_response(), done))
}

/// The open output item of a stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Reasoning,
    Message,
}

/// The streaming event machine: each output item is added, filled by deltas and done in order.
struct Streamer {
    shell: Shell,
    store: Option<(Arc<AppState>, Vec<Message>)>,
    seq: u64,
    open: Open,
    item_id: String,
    text: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    output: Vec<Value>,
}

impl Streamer {
    fn new(shell: Shell, store: Option<(Arc<AppState>, Vec<Message>)>) -> Streamer {
        Streamer {
            shell,
            store,
            seq: 0,
            open: Open::None,
            item_id: String::new(),
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            output: Vec::new(),
        }
    }

    fn into_fn(mut self) -> impl FnMut(Event) -> Vec<SseEvent> + Send {
        move |event| {
            let mut out = Vec::new();
            self.on(event, &mut out);
            out
        }
    }

    fn emit(&mut self, out: &mut Vec<SseEvent>, kind: &str, mut data: Value) {
        data["type"] = kind.into();
        data["sequence_number"] = self.seq.into();
        self.seq += 1;
        out.push(sse_json(Some(kind), &data));
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    fn open(&mut self, kind: Open, out: &mut Vec<SseEvent>) {
        if self.open == kind {
            return;
        }
        self.close(out);
        self.open = kind;
        let i = self.index();
        match kind {
            Open::Reasoning => {
                self.item_id = new_id("rs_");
                let item =
                    json!({"type": "reasoning", "id": self.item_id, "summary": [], "content": []});
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": i, "item": item}),
                );
            }
            Open::Message => {
                self.item_id = new_id("msg_");
                let item = json!({"type": "message", "id": self.item_id, "status": "in_progress", "role": "assistant", "content": []});
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": i, "item": item}),
                );
                let part =
                    json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                self.emit(out, "response.content_part.added", json!({"item_id": self.item_id, "output_index": i, "content_index": 0, "part": part}));
            }
            Open::None => {}
        }
    }

    fn close(&mut self, out: &mut Vec<SseEvent>) {
        let i = self.index();
        let id = self.item_id.clone();
        match self.open {
            Open::Reasoning => {
                let item = reasoning_item(&id, &self.reasoning);
                self.emit(out, "response.reasoning_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": self.reasoning}));
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": i, "item": item}),
                );
                self.output.push(item);
            }
            Open::Message => {
                let item = message_item(&id, &self.text, "completed");
                self.emit(out, "response.output_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": self.text, "logprobs": []}));
                let part = json!({"type": "output_text", "text": self.text, "annotations": [], "logprobs": []});
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                );
                self.emit(
                    out,
                    "response.output_item.done",
                    json!({"output_index": i, "item": item}),
                );
                self.output.push(item);
            }
            Open::None => {}
        }
        self.open = Open::None;
    }

    fn on(&mut self, event: Event, out: &mut Vec<SseEvent>) {
        match event {
            Event::Started { .. } => {
                let created = self.shell.object("in_progress", Vec::new(), None, 0);
                self.emit(out, "response.created", json!({"response": created}));
                let progress = self.shell.object("in_progress", Vec::new(), None, 0);
                self.emit(out, "response.in_progress", json!({"response": progress}));
            }
            Event::Reasoning(r) => {
                self.open(Open::Reasoning, out);
                self.reasoning.push_str(&r);
                let (id, i) = (self.item_id.clone(), self.index());
                self.emit(
                    out,
                    "response.reasoning_text.delta",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "delta": r}),
                );
            }
            Event::Text { text, .. } if text.is_empty() => {}
            Event::Text { text, .. } => {
                self.open(Open::Message, out);
                self.text.push_str(&text);
                let (id, i) = (self.item_id.clone(), self.index());
                self.emit(out, "response.output_text.delta", json!({"item_id": id, "output_index": i, "content_index": 0, "delta": text, "logprobs": []}));
            }
            Event::ToolCall(c) => self.call(c, out),
            Event::PromptLogprobs(_) | Event::Progress { .. } => {}
            Event::Done(d) => self.done(&d, out),
            Event::Failed { kind, message } => {
                self.close(out);
                let code = if kind == FailureKind::ContextExceeded {
                    "context_length_exceeded"
                } else {
                    "server_error"
                };
                let mut failed =
                    self.shell
                        .object("failed", std::mem::take(&mut self.output), None, 0);
                failed["error"] = json!({"code": code, "message": message});
                self.emit(out, "response.failed", json!({"response": failed}));
            }
        }
    }

    fn call(&mut self, c: ToolCall, out: &mut Vec<SseEvent>) {
        self.close(out);
        let (id, i) = (new_id("fc_"), self.index());
        self.emit(out, "response.output_item.added", json!({"output_index": i, "item": call_item(&id, &ToolCall { arguments: String::new(), ..c.clone() }, "in_progress")}));
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": i, "delta": c.arguments}),
        );
        self.emit(
            out,
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": i, "name": c.name, "arguments": c.arguments}),
        );
        let item = call_item(&id, &c, "completed");
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
        self.output.push(item);
        self.calls.push(c);
    }

    fn done(&mut self, d: &Done, out: &mut Vec<SseEvent>) {
        if self.output.is_empty() && self.open == Open::None && d.finish != FinishReason::Cancelled
        {
            self.open(Open::Message, out);
        }
        self.close(out);
        let status = if d.finish == FinishReason::Length {
            "incomplete"
        } else {
            "completed"
        };
        let mut full = self
            .shell
            .object(status, self.output.clone(), Some(&d.usage), 0);
        full["incomplete_details"] = incomplete(d).unwrap_or(Value::Null);
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.emit(out, kind, json!({"response": full}));
        if let Some((state, mut messages)) = self.store.take() {
            let mut m = Message::new("assistant", std::mem::take(&mut self.text));
            m.reasoning = Some(std::mem::take(&mut self.reasoning)).filter(|r| !r.is_empty());
            m.tool_calls = std::mem::take(&mut self.calls);
            messages.push(m);
            state.responses.put(self.shell.id.clone(), messages);
        }
    }
}
