//! Errors as the OpenAI API sends them: a status code and
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request the server answers with an error.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 for a field of the request.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param),
            code: None,
        }
    }

    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The queue of a model is full.
    pub fn overloaded(model: &str) -> Self {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("model {model:?} has a full queue; retry later"),
        )
        .code("overloaded")
    }

    /// An error of the library: the request's fault (400) or the server's (500).
    pub fn from_lmkit(e: lmkit::Error) -> Self {
        use lmkit::Error as E;
        match e {
            E::ContextTooLong { .. } => ApiError::new(StatusCode::BAD_REQUEST, e.to_string())
                .code("context_length_exceeded"),
            E::InvalidInput(_) | E::TokenIdOutOfRange { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, e.to_string())
            }
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The JSON body (also sent as an SSE event when a stream fails midway).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
