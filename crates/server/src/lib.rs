//! `ishizuki serve`: OpenAI (chat completions, completions, responses) and Anthropic (messages,
//! count_tokens) over one engine. Protocol modules convert their serde types into the engine's
//! request and its events into their responses; none of them touches tensors.
pub mod anthropic;
mod common;
pub mod error;
pub mod metrics;
pub mod openai;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::{ApiError, Protocol};
use futures_util::FutureExt;
use ishizuki_engine::EngineHandle;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 16 << 20;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub host: IpAddr,
    pub port: u16,
    pub api_key: Option<String>,
    /// Allow a non-loopback bind without a key.
    pub insecure_no_auth: bool,
    /// Stored responses kept for `previous_response_id`.
    pub response_store_entries: usize,
}

impl ServerConfig {
    /// Refuses a configuration that would expose an unauthenticated engine to the network.
    pub fn check(&self) -> Result<(), String> {
        if !self.host.is_loopback() && self.api_key.is_none() && !self.insecure_no_auth {
            return Err(format!(
                "refusing to listen on {} without --api-key: anyone on the network could use it (pass --insecure-no-auth to allow it)",
                self.host
            ));
        }
        if self.api_key.as_deref() == Some("") {
            return Err("--api-key must not be empty".into());
        }
        Ok(())
    }
}

pub struct AppState {
    /// Set once the model has loaded; `/health` is 503 until then.
    pub engine: OnceLock<EngineHandle>,
    pub config: ServerConfig,
    pub metrics: metrics::Metrics,
    pub responses: openai::responses::Store,
}

impl AppState {
    pub fn new(config: ServerConfig) -> Arc<AppState> {
        let entries = config.response_store_entries;
        Arc::new(AppState {
            engine: OnceLock::new(),
            config,
            metrics: metrics::Metrics::default(),
            responses: openai::responses::Store::new(entries, 64 << 20),
        })
    }

    pub(crate) fn engine(&self, protocol: Protocol) -> Result<&EngineHandle, ApiError> {
        self.engine.get().ok_or_else(|| {
            ApiError::new(
                protocol,
                StatusCode::SERVICE_UNAVAILABLE,
                "the model is still loading",
            )
        })
    }

    /// The served model, checked against the name a request asks for.
    pub(crate) fn model_for(
        &self,
        protocol: Protocol,
        requested: Option<&str>,
    ) -> Result<&EngineHandle, ApiError> {
        let engine = self.engine(protocol)?;
        match requested {
            Some(name) if !name.is_empty() && name != engine.text.name => Err(ApiError::new(
                protocol,
                StatusCode::NOT_FOUND,
                format!(
                    "the model `{name}` does not exist; this server serves `{}`",
                    engine.text.name
                ),
            )),
            _ => Ok(engine),
        }
    }
}

pub fn protocol_of(path: &str) -> Protocol {
    if path.starts_with("/v1/messages") {
        Protocol::Anthropic
    } else {
        Protocol::OpenAi
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::chat::handle))
        .route("/v1/completions", post(openai::completions::handle))
        .route("/v1/responses", post(openai::responses::handle))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .merge(api)
        .layer(middleware::from_fn_with_state(state.clone(), log_request))
        .with_state(state)
}

async fn not_found(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::new(
        protocol_of(&path),
        StatusCode::NOT_FOUND,
        format!("no route for {} {path}", req.method()),
    )
}

async fn method_not_allowed(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::new(
        protocol_of(&path),
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {path}", req.method()),
    )
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.engine.get() {
        Some(_) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({"status": "ok"})),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"status": "loading"})),
        )
            .into_response(),
    }
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    let engine = state.engine.get().map(|e| &*e.stats);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(engine),
    )
        .into_response()
}

/// The key from `Authorization: Bearer` or `x-api-key`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    bearer
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

fn keys_match(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    // equal lengths compare in constant time; a length difference says nothing about the key
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

async fn authenticate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(expected) = &state.config.api_key else {
        return next.run(req).await;
    };
    match presented_key(req.headers()) {
        Some(given) if keys_match(given, expected) => next.run(req).await,
        _ => ApiError::new(
            protocol_of(req.uri().path()),
            StatusCode::UNAUTHORIZED,
            "invalid or missing API key",
        )
        .into_response(),
    }
}

/// One log line per request, and the per-endpoint counters.
async fn log_request(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = Instant::now();
    // a handler that panics fails its own request with a 500; the server keeps serving
    let response = match std::panic::AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .await
    {
        Ok(r) => r,
        Err(_) => ApiError::new(
            protocol_of(&path),
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error",
        )
        .into_response(),
    };
    let status = response.status().as_u16();
    let endpoint = match path.as_str() {
        "/health"
        | "/metrics"
        | "/v1/models"
        | "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/responses"
        | "/v1/messages"
        | "/v1/messages/count_tokens" => path.as_str(),
        _ => "other",
    };
    state.metrics.request(endpoint, status);
    let tokens = response.extensions().get::<common::TokenCounts>().copied();
    let tokens = tokens.map_or(String::new(), |t| {
        format!(
            " prompt={} cached={} gen={}",
            t.prompt, t.cached, t.generated
        )
    });
    eprintln!(
        "{method} {path} {status} {:.3}s{tokens}",
        t0.elapsed().as_secs_f64()
    );
    response
}

/// Runs a server on its own runtime: binds first (so `/health` answers 503 while loading), then
/// loads the engine with `load` on a thread of its own. A failed load stops the server.
pub fn run(
    config: ServerConfig,
    load: Box<dyn FnOnce() -> Result<EngineHandle, String> + Send>,
) -> Result<(), String> {
    config.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("start the runtime: {e}"))?;
    runtime.block_on(async move {
        let state = AppState::new(config);
        let addr = SocketAddr::new(state.config.host, state.config.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("bind {addr}: {e}"))?;
        eprintln!(
            "listening on http://{}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
        let loading = state.clone();
        std::thread::spawn(move || match load() {
            Ok(engine) => {
                let _ = loading.engine.set(engine);
                eprintln!("ready");
            }
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        });
        let server = axum::serve(listener, router(state)).with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        });
        tokio::select! {
            r = server => r.map_err(|e| e.to_string()),
            Ok(e) = failed_rx => Err(e),
        }
    })
}
