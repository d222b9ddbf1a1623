//! The one error type of the service layer, with stable machine-readable codes.
//!
//! Every transport maps it the same way: HTTP answers `{"error": {"code", "message", "field"?}}`
//! with the status of [`ErrorCode::http_status`]; MCP answers `invalid_params` for
//! [`ErrorCode::InvalidArgument`] (naming the field in the message and in `data.field`) and a
//! tool result with `isError: true` and the same JSON object for everything else.

use serde::Serialize;
use serde_json::{json, Value};

/// Stable error codes (part of the API: clients match on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A request argument is missing, unknown, of the wrong type or out of range (`field` says
    /// which).
    InvalidArgument,
    /// A mutating call without the right token, or any call on a public bind without one.
    Unauthorized,
    /// The `Host` header is not on the allow-list (DNS-rebinding protection).
    Forbidden,
    /// The document (or route) does not exist.
    NotFound,
    /// The feature is not available in this server (no model installed, no LLM configured …).
    NotAvailable,
    /// The request body is over the size limit.
    PayloadTooLarge,
    /// The request took longer than the per-request timeout.
    Timeout,
    /// Too many requests in flight; retry later.
    Overloaded,
    /// Anything else (store or model failure); the message says what.
    Internal,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotAvailable => "not_available",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status that carries this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::NotAvailable => 501,
            ErrorCode::Overloaded => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Internal => 500,
        }
    }
}

/// An error of any service operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub code: ErrorCode,
    pub message: String,
    /// The offending argument, when there is one (`top_k`, `chunks[3].node_id`, …).
    pub field: Option<String>,
}

impl ServiceError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// A bad argument: the message names the field.
    pub fn invalid(field: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        let field = field.into();
        Self {
            code: ErrorCode::InvalidArgument,
            message: format!("invalid argument `{field}`: {reason}"),
            field: Some(field),
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn not_available(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotAvailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// The JSON body `{"error": {"code", "message", "field"?}}`.
    pub fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code.as_str(), "message": self.message});
        if let Some(f) = &self.field {
            e["field"] = json!(f);
        }
        json!({ "error": e })
    }
}

impl From<bib_store::StoreError> for ServiceError {
    fn from(e: bib_store::StoreError) -> Self {
        ServiceError::internal(format!("store: {}", bib_store::error_chain(&e)))
    }
}

impl From<bib_store::read::GetError> for ServiceError {
    fn from(e: bib_store::read::GetError) -> Self {
        use bib_store::read::GetError as G;
        match e {
            G::UnknownPath { .. } => ServiceError::not_found(e.to_string()),
            G::BadRange { field, reason } => ServiceError::invalid(field, reason),
            G::NoSource(_) => ServiceError::not_available(e.to_string()),
            G::Store(s) => s.into(),
        }
    }
}

impl From<bib_retrieve::RetrieveError> for ServiceError {
    fn from(e: bib_retrieve::RetrieveError) -> Self {
        use bib_retrieve::RetrieveError as R;
        match e {
            R::InvalidOption { name, reason } => ServiceError::invalid(name, reason),
            R::InvalidFilter(f) => {
                ServiceError::invalid("filters", format!("`{f}`: expected key=value"))
            }
            R::Synthesis(_) | R::SynthesisFailed { .. } => {
                ServiceError::not_available(bib_store::error_chain(&e))
            }
            R::Store(s) => s.into(),
            R::Embed(bib_embed::EmbedError::NotInstalled { model, .. }) => {
                ServiceError::not_available(format!(
                    "the embedding model `{model}` is not installed: run `bib model install`"
                ))
            }
            _ => ServiceError::internal(bib_store::error_chain(&e)),
        }
    }
}

impl From<bib_app::ConfigError> for ServiceError {
    /// A value out of range names its field as the request spells it (`trim_threshold`).
    fn from(e: bib_app::ConfigError) -> Self {
        match e {
            bib_app::ConfigError::Invalid { key, reason } => {
                let field = key.rsplit('.').next().unwrap_or(&key).to_string();
                ServiceError::invalid(field, reason)
            }
            other => ServiceError::internal(bib_store::error_chain(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_names_the_field() {
        let e = ServiceError::invalid("top_k", "must be at least 1");
        let v = e.to_json();
        assert_eq!(v["error"]["code"], "invalid_argument");
        assert_eq!(v["error"]["field"], "top_k");
        assert!(v["error"]["message"].as_str().unwrap().contains("top_k"));
        assert_eq!(e.code.http_status(), 400);
        let e = ServiceError::not_found("no document 7");
        assert!(e.to_json()["error"].get("field").is_none());
    }

    #[test]
    fn retrieve_errors_keep_the_option_name() {
        let e: ServiceError = bib_retrieve::RetrieveError::InvalidOption {
            name: "trim_threshold".into(),
            reason: "2 is not a cosine".into(),
        }
        .into();
        assert_eq!(e.field.as_deref(), Some("trim_threshold"));
    }
}
