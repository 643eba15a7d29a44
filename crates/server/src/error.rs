//! Errors in each protocol's own shape: OpenAI `{"error": {message, type, param, code}}`,
//! Anthropic `{"type": "error", "error": {type, message}}`.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ishizuki_engine::{FailureKind, InvalidRequest};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

#[derive(Clone, Debug)]
pub struct ApiError {
    pub protocol: Protocol,
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    /// OpenAI `code` (e.g. `context_length_exceeded`).
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(protocol: Protocol, status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            protocol,
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub fn bad_request(protocol: Protocol, message: impl Into<String>) -> ApiError {
        ApiError::new(protocol, StatusCode::BAD_REQUEST, message)
    }

    pub fn invalid(protocol: Protocol, e: InvalidRequest) -> ApiError {
        let mut err = ApiError::bad_request(protocol, e.message);
        err.param = e.param;
        if e.context_exceeded {
            err.code = Some("context_length_exceeded");
        }
        err
    }

    pub fn failure(protocol: Protocol, kind: FailureKind, message: String) -> ApiError {
        match kind {
            FailureKind::InvalidRequest => ApiError::bad_request(protocol, message),
            FailureKind::ContextExceeded => {
                let mut e = ApiError::bad_request(protocol, message);
                e.code = Some("context_length_exceeded");
                e
            }
            FailureKind::Internal => {
                ApiError::new(protocol, StatusCode::INTERNAL_SERVER_ERROR, message)
            }
        }
    }

    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    /// OpenAI's `type` / Anthropic's `error.type` for this status.
    pub fn kind(&self) -> &'static str {
        match (self.protocol, self.status.as_u16()) {
            (Protocol::OpenAi, 400 | 405 | 413 | 422) => "invalid_request_error",
            (Protocol::OpenAi, 401) => "authentication_error",
            (Protocol::OpenAi, 404) => "not_found_error",
            (Protocol::OpenAi, 503) => "service_unavailable",
            (Protocol::OpenAi, _) => "server_error",
            (Protocol::Anthropic, 400 | 405 | 422) => "invalid_request_error",
            (Protocol::Anthropic, 401) => "authentication_error",
            (Protocol::Anthropic, 404) => "not_found_error",
            (Protocol::Anthropic, 413) => "request_too_large",
            (Protocol::Anthropic, 503 | 529) => "overloaded_error",
            (Protocol::Anthropic, _) => "api_error",
        }
    }

    pub fn body(&self) -> serde_json::Value {
        match self.protocol {
            Protocol::OpenAi => json!({"error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code.map(str::to_string).unwrap_or_else(|| self.status.as_u16().to_string()),
            }}),
            Protocol::Anthropic => {
                json!({"type": "error", "error": {"type": self.kind(), "message": self.message}})
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
