//! What every protocol handler shares: reading a bounded JSON body, submitting a prepared request
//! to the engine, and gathering its events into a whole reply or a stream.
use crate::error::{ApiError, ApiResult, Protocol};
use crate::AppState;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use ishizuki_engine::{
    CancelOnDrop, Done, EngineHandle, Event, Prepared, Request, TokenLogprob, ToolCall,
};
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Token counts a handler leaves on its response for the request log.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenCounts {
    pub prompt: usize,
    pub cached: usize,
    pub generated: usize,
}

pub fn with_counts(mut response: Response, done: &Done) -> Response {
    let u = done.usage;
    response.extensions_mut().insert(TokenCounts {
        prompt: u.prompt_tokens,
        cached: u.cached_tokens,
        generated: u.completion_tokens,
    });
    response
}

/// Drafting's numbers on a usage object (an extension: `usage.draft`), where the request drafted.
pub fn add_draft_usage(v: &mut serde_json::Value, u: &ishizuki_engine::Usage) {
    if let (Some(d), Some(obj)) = (u.draft, v.as_object_mut()) {
        obj.insert("draft".into(), d.json(u.completion_tokens));
    }
}

/// The body as `T`: 413 past the size limit, 400 naming what is wrong with the JSON.
pub async fn read_json<T: DeserializeOwned>(protocol: Protocol, body: Body) -> ApiResult<T> {
    let bytes = axum::body::to_bytes(body, crate::MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            ApiError::new(
                protocol,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is larger than {} bytes",
                    crate::MAX_BODY_BYTES
                ),
            )
        })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(protocol, format!("invalid request body: {e}")))
}

pub fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `prefix` + 24 hex digits, unique in this process.
pub fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = (t ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    format!("{prefix}{mixed:016x}{:08x}", n as u32)
}

/// Validates and tokenizes off the async workers (templates render in a forked sandbox and long
/// prompts take milliseconds to tokenize); a panic in there is this request's 500.
pub async fn prepare(
    engine: &EngineHandle,
    protocol: Protocol,
    request: Request,
) -> ApiResult<Prepared> {
    let text = engine.text.clone();
    let job = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| text.prepare(request)))
    });
    match job.await {
        Ok(Ok(Ok(p))) => Ok(p),
        Ok(Ok(Err(e))) => Err(ApiError::invalid(protocol, e)),
        _ => Err(ApiError::new(
            protocol,
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error while preparing the prompt",
        )),
    }
}

/// A request in the engine: its events, and the guard that cancels it when dropped.
pub struct Submitted {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub guard: CancelOnDrop,
    pub protocol: Protocol,
}

pub fn submit(
    state: &Arc<AppState>,
    protocol: Protocol,
    prepared: Prepared,
) -> ApiResult<Submitted> {
    let engine = state.engine(protocol)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let metrics_state = state.clone();
    let arrived = Instant::now();
    let mut last_token: Option<Instant> = None;
    let sink = Box::new(move |event: Event| {
        let m = &metrics_state.metrics;
        match &event {
            Event::Text { .. } | Event::Reasoning(_) | Event::ToolCall(_) => {
                let now = Instant::now();
                match last_token {
                    None => m.time_to_first_token(now.duration_since(arrived).as_secs_f64()),
                    Some(t) => m.inter_token(now.duration_since(t).as_secs_f64()),
                }
                last_token = Some(now);
            }
            Event::Done(d) => {
                m.e2e(arrived.elapsed().as_secs_f64());
                if d.finish == ishizuki_engine::FinishReason::Cancelled {
                    m.cancelled();
                }
            }
            _ => {}
        }
        tx.send(event).is_ok()
    });
    let cancel = engine
        .submit(prepared, sink)
        .map_err(|e| ApiError::new(protocol, StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Submitted {
        events: rx,
        guard: CancelOnDrop(cancel),
        protocol,
    })
}

/// Everything one request produced, for the non-streaming replies.
#[derive(Debug, Default)]
pub struct Collected {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub logprobs: Vec<TokenLogprob>,
    pub prompt_logprobs: Vec<TokenLogprob>,
    pub done: Option<Done>,
}

impl Collected {
    pub fn done(&self) -> &Done {
        self.done
            .as_ref()
            .expect("collect returns only with a Done")
    }
}

/// Waits for the whole reply. The handler future owning `sub` is dropped if the client goes
/// away, and the guard then cancels the request.
pub async fn collect(mut sub: Submitted) -> ApiResult<Collected> {
    let mut c = Collected::default();
    while let Some(event) = sub.events.recv().await {
        match event {
            Event::Started { .. } | Event::Progress { .. } => {}
            Event::PromptLogprobs(lp) => c.prompt_logprobs = lp,
            Event::Text { text, logprobs } => {
                c.text.push_str(&text);
                c.logprobs.extend(logprobs);
            }
            Event::Reasoning(r) => c.reasoning.push_str(&r),
            Event::ToolCall(call) => c.tool_calls.push(call),
            Event::Done(d) => {
                c.done = Some(d);
                return Ok(c);
            }
            Event::Failed { kind, message } => {
                return Err(ApiError::failure(sub.protocol, kind, message))
            }
        }
    }
    Err(ApiError::new(
        sub.protocol,
        StatusCode::INTERNAL_SERVER_ERROR,
        "the engine stopped before finishing the request",
    ))
}

/// An SSE reply: `convert` turns each engine event into the protocol's SSE events; `end` adds
/// the closing ones (e.g. `[DONE]`). The guard lives as long as the stream: a client that goes
/// away drops the body, which cancels the request.
pub fn sse<F>(sub: Submitted, path: &'static str, mut convert: F) -> Response
where
    F: FnMut(Event) -> Vec<SseEvent> + Send + 'static,
{
    let Submitted { events, guard, .. } = sub;
    let t0 = Instant::now();
    let body = stream::unfold((events, Some(guard)), move |(mut rx, guard)| async move {
        let event = rx.recv().await?;
        if let Event::Done(d) = &event {
            let u = d.usage;
            eprintln!(
                "POST {path} stream done {:.3}s prompt={} cached={} gen={} finish={:?}",
                t0.elapsed().as_secs_f64(),
                u.prompt_tokens,
                u.cached_tokens,
                u.completion_tokens,
                d.finish
            );
        }
        Some((event, (rx, guard)))
    })
    .flat_map(move |event| stream::iter(convert(event).into_iter().map(Ok::<_, Infallible>)));
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// A JSON SSE event with an `event:` name (Anthropic, Responses) or without (chat, completions).
pub fn sse_json(name: Option<&str>, data: &serde_json::Value) -> SseEvent {
    let e = SseEvent::default().data(data.to_string());
    match name {
        Some(n) => e.event(n),
        None => e,
    }
}
