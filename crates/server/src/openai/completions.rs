//! `POST /v1/completions`: text or token-id prompts, one or a batch; `echo` with `logprobs`
//! scores every prompt token as lm-evaluation-harness's `local-completions` reads it.
use super::{finish_reason, token_limit, usage_json, OneOrMany, Sampling, P};
use crate::common::{
    collect, new_id, prepare, read_json, sse, sse_json, submit, unix_time, Collected,
};
use crate::error::{ApiError, ApiResult};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use ishizuki_engine::request::limits;
use ishizuki_engine::{Event, Prompt, Request, TokenLogprob, Usage};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Value,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub max_tokens: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub n: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub echo: bool,
    pub logprobs: Option<i64>,
    pub suffix: Option<String>,
}

/// `"text" | ["text", …] | [1, 2, …] | [[1, 2], …]` as a list of prompts.
fn prompts(v: &Value) -> ApiResult<Vec<Prompt>> {
    let bad = || {
        ApiError::bad_request(P, "prompt must be a string, a list of strings, a list of token ids, or a list of such lists").with_param("prompt")
    };
    let ids = |items: &[Value]| -> ApiResult<Vec<u32>> {
        items
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(bad)
            })
            .collect()
    };
    let list = match v {
        Value::String(s) => return Ok(vec![Prompt::Text(s.clone())]),
        Value::Array(items) => items,
        _ => return Err(bad()),
    };
    if list.is_empty() {
        return Err(bad());
    }
    if list.iter().all(Value::is_number) {
        return Ok(vec![Prompt::Tokens(ids(list)?)]);
    }
    if list.len() > limits::MAX_PROMPT_BATCH {
        return Err(ApiError::bad_request(
            P,
            format!(
                "at most {} prompts in one request",
                limits::MAX_PROMPT_BATCH
            ),
        )
        .with_param("prompt"));
    }
    list.iter()
        .map(|p| match p {
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(items) => Ok(Prompt::Tokens(ids(items)?)),
            _ => Err(bad()),
        })
        .collect()
}

impl CompletionRequest {
    fn requests(&self) -> ApiResult<Vec<Request>> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request(P, "only n = 1 is supported").with_param("n"));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_request(P, "suffix is not supported").with_param("suffix"));
        }
        let logprobs = token_limit("logprobs", self.logprobs)?;
        let sampler = self.sampling.config()?;
        let max_tokens = token_limit("max_tokens", self.max_tokens)?.unwrap_or(16);
        let stop = self
            .stop
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        Ok(prompts(&self.prompt)?
            .into_iter()
            .map(|prompt| {
                let mut r = Request::new(prompt);
                r.sampler = sampler.clone();
                r.draft = self.sampling.draft.unwrap_or(true);
                r.max_tokens = Some(max_tokens);
                r.stop = stop.clone();
                r.logprobs = logprobs;
                r.prompt_logprobs = self.echo && logprobs.is_some();
                r.parse_tool_calls = false;
                r
            })
            .collect())
    }
}

/// The `logprobs` object over `entries`, whose text starts at `offset` in the choice's text.
fn logprobs_json(entries: &[TokenLogprob], mut offset: usize) -> Value {
    let (mut tokens, mut lps, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for e in entries {
        tokens.push(Value::from(e.text.clone()));
        lps.push(e.logprob.map_or(Value::Null, Value::from));
        let top = if e.logprob.is_none() {
            Value::Null
        } else {
            Value::Object(
                e.top
                    .iter()
                    .map(|t| (t.text.clone(), Value::from(t.logprob)))
                    .collect::<Map<_, _>>(),
            )
        };
        tops.push(top);
        offsets.push(Value::from(offset));
        offset += e.text.len();
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// One choice of the reply: the echoed prompt text (where asked) followed by the completion.
fn choice(index: usize, c: &Collected, echo_text: Option<&str>, want_logprobs: bool) -> Value {
    let prefix = echo_text.unwrap_or("");
    let text = format!("{prefix}{}", c.text);
    let logprobs = if want_logprobs {
        let all: Vec<TokenLogprob> = c
            .prompt_logprobs
            .iter()
            .chain(&c.logprobs)
            .cloned()
            .collect();
        logprobs_json(&all, 0)
    } else {
        Value::Null
    };
    json!({"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason(c.done().finish)})
}

pub async fn handle(State(state): State<Arc<AppState>>, body: Body) -> ApiResult<Response> {
    let req: CompletionRequest = read_json(P, body).await?;
    let engine = state.model_for(P, req.model.as_deref())?;
    let model = engine.text.name.clone();
    let requests = req.requests()?;
    // every prompt is checked before any runs: one bad prompt fails the batch with a 400
    let mut prepared = Vec::with_capacity(requests.len());
    for r in requests {
        prepared.push(prepare(engine, P, r).await?);
    }
    let (id, created) = (new_id("cmpl-"), unix_time());
    let echo_texts: Vec<Option<String>> = prepared
        .iter()
        .map(|p| {
            req.echo.then(|| match &p.request.prompt {
                Prompt::Text(t) => t.clone(),
                _ => engine.text.tokenizer.decode(&p.tokens, false),
            })
        })
        .collect();
    if req.stream {
        if prepared.len() != 1 {
            return Err(ApiError::bad_request(P, "streaming takes one prompt").with_param("prompt"));
        }
        let p = prepared.into_iter().next().expect("one prompt");
        let echo = echo_texts.into_iter().next().flatten();
        return Ok(stream_reply(
            submit(&state, P, p)?,
            id,
            model,
            created,
            echo,
        ));
    }
    let mut choices = Vec::new();
    let mut usage = Usage::default();
    for (i, p) in prepared.into_iter().enumerate() {
        let want_logprobs = p.request.logprobs.is_some();
        let c = collect(submit(&state, P, p)?).await?;
        let u = c.done().usage;
        usage.prompt_tokens += u.prompt_tokens;
        usage.cached_tokens += u.cached_tokens;
        usage.completion_tokens += u.completion_tokens;
        if let Some(d) = u.draft {
            let sum = usage.draft.get_or_insert(ishizuki_engine::DraftUsage {
                source: d.source,
                ..Default::default()
            });
            sum.drafted_tokens += d.drafted_tokens;
            sum.accepted_tokens += d.accepted_tokens;
            sum.decode_steps += d.decode_steps;
        }
        choices.push(choice(i, &c, echo_texts[i].as_deref(), want_logprobs));
    }
    let body = json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": choices, "usage": usage_json(&usage)});
    Ok(axum::Json(body).into_response())
}

fn stream_reply(
    sub: crate::common::Submitted,
    id: String,
    model: String,
    created: u64,
    echo: Option<String>,
) -> Response {
    let chunk = move |text: String, logprobs: Value, finish: Value| {
        json!({"id": id, "object": "text_completion", "created": created, "model": model,
               "choices": [{"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}]})
    };
    let mut offset = 0usize;
    let mut echo = echo;
    sse(sub, "/v1/completions", move |event| match event {
        Event::Started { .. } => match echo.take() {
            Some(t) if !t.is_empty() => {
                offset += t.len();
                vec![sse_json(None, &chunk(t, Value::Null, Value::Null))]
            }
            _ => Vec::new(),
        },
        Event::PromptLogprobs(_) | Event::Progress { .. } => Vec::new(),
        Event::Text { text, logprobs } => {
            let lp = if logprobs.is_empty() {
                Value::Null
            } else {
                logprobs_json(&logprobs, offset)
            };
            offset += text.len();
            vec![sse_json(None, &chunk(text, lp, Value::Null))]
        }
        Event::Reasoning(_) | Event::ToolCall(_) => Vec::new(),
        Event::Done(d) => {
            let mut last = chunk(String::new(), Value::Null, finish_reason(d.finish).into());
            last["usage"] = usage_json(&d.usage);
            vec![
                sse_json(None, &last),
                axum::response::sse::Event::default().data("[DONE]"),
            ]
        }
        Event::Failed { kind, message } => vec![
            sse_json(None, &ApiError::failure(P, kind, message).body()),
            axum::response::sse::Event::default().data("[DONE]"),
        ],
    })
}
