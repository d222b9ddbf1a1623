//! Cross-origin reads for the help widget, and nothing more.
//!
//! A page on another origin (`https://docs.example` embedding `widget.js`) can only read an
//! answer if this server says so. It says so only to the origins `bib serve` was told to
//! allow (`--allow-origin`, `[serve] allow_origins`), only on the read routes the widget and
//! the ask page use ([`CORS_ROUTES`]: ask, answer, status, document lines), and never for
//! writes or the rest of the API. With no origin configured — the default — no response
//! carries an `Access-Control-Allow-Origin` header at all, so browsers keep every other
//! origin out, as before.
//!
//! Origins are compared exactly, as browsers send them: scheme, host and port (`http://
//! localhost:3000` and `http://127.0.0.1:3000` are two origins). `*` and `null` are refused
//! when the server starts.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Why a configured origin was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("origin `{origin}` {reason}")]
pub struct OriginError {
    pub origin: String,
    pub reason: String,
}

/// `scheme://host[:port]` as a browser writes it in `Origin`: lower case, no trailing slash,
/// the scheme's default port left out. Anything else (a path, a query, user info, `*`,
/// `null`, another scheme) is an error that says what to write instead.
pub fn normalize_origin(raw: &str) -> Result<String, OriginError> {
    let bad = |reason: &str| OriginError {
        origin: raw.to_string(),
        reason: reason.to_string(),
    };
    let v = raw.trim();
    if v == "*" {
        return Err(bad(
            "would let every site read the knowledge base; name each origin (http://host:port)",
        ));
    }
    let lower = v.to_ascii_lowercase();
    let (scheme, rest) = lower
        .split_once("://")
        .ok_or_else(|| bad("is not scheme://host[:port] (for example http://localhost:3000)"))?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return Err(bad("must start with http:// or https://")),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ', ',', '*']) {
        return Err(bad(
            "must be scheme://host[:port] only, without a path, query or user",
        ));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, Some(p)),
        _ => (rest, None),
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    match port {
        Some(p) if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 5 => {
            Err(bad("has a port that is not a number"))
        }
        Some(p) if p == default_port => Ok(format!("{scheme}://{host}")),
        Some(p) => Ok(format!("{scheme}://{host}:{p}")),
        None => Ok(format!("{scheme}://{host}")),
    }
}

/// The routes that answer allowed origins: what the widget and the page read. Writes
/// (`POST /docs`, `POST /chunks`), `/eval`, `/pack`, `/runs` and `/mcp` never do.
pub const CORS_ROUTES: &[&str] = &["/ask", "/answer", "/status", "/docs/{path}"];

fn is_cors_route(method: &Method, path: &str) -> bool {
    match path {
        "/ask" | "/answer" => method == Method::POST || method == Method::OPTIONS,
        "/status" => method == Method::GET || method == Method::OPTIONS,
        p if p.starts_with("/docs/") => method == Method::GET || method == Method::OPTIONS,
        _ => false,
    }
}

/// The allowed origins, normalised.
#[derive(Debug, Clone, Default)]
pub struct Origins(pub Arc<Vec<String>>);

impl Origins {
    /// Normalise every entry (errors name the first bad one).
    pub fn parse(list: &[String]) -> Result<Self, OriginError> {
        let mut out: Vec<String> = Vec::new();
        for o in list {
            let n = normalize_origin(o)?;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        Ok(Self(Arc::new(out)))
    }

    /// Whether the `Origin` a browser sent is one of them.
    pub fn allows(&self, origin: &str) -> bool {
        // A browser's Origin is already normalised; normalising again costs little and
        // tolerates a default port written out.
        normalize_origin(origin).is_ok_and(|o| self.0.contains(&o))
    }
}

/// The CORS layer: preflights of allowed origins on [`CORS_ROUTES`] answer 204 with the
/// permission; preflights of anyone else answer 403 without it; other requests run as usual
/// and an allowed origin's response gets `Access-Control-Allow-Origin`. It runs before the
/// token check, since a browser's preflight never carries credentials.
pub async fn layer(State(origins): State<Origins>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let allowed = is_cors_route(req.method(), req.uri().path()) && origins.allows(&origin);
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        if !allowed {
            tracing::info!(%origin, path = %req.uri().path(), "refused a cross-origin preflight");
            let mut r = crate::http::error_response(crate::error::ServiceError::new(
                crate::error::ErrorCode::Forbidden,
                format!(
                    "origin `{}` may not call {} (allow it with --allow-origin)",
                    origin.chars().take(200).collect::<String>(),
                    req.uri().path()
                ),
            ));
            vary(&mut r);
            return r;
        }
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        allow(h, &origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("content-type"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        vary(&mut r);
        return r;
    }
    let mut r = next.run(req).await;
    if allowed {
        allow(r.headers_mut(), &origin);
    }
    vary(&mut r);
    r
}

fn allow(h: &mut axum::http::HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
}

/// Responses differ by `Origin`: caches must not serve one origin's answer to another.
fn vary(r: &mut Response) {
    r.headers_mut()
        .append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalised_or_refused() {
        for (raw, want) in [
            ("http://localhost:3000", "http://localhost:3000"),
            ("HTTP://LocalHost:3000/", "http://localhost:3000"),
            ("https://docs.example", "https://docs.example"),
            ("https://docs.example:443", "https://docs.example"),
            ("http://127.0.0.1:80", "http://127.0.0.1"),
            ("http://[::1]:8081", "http://[::1]:8081"),
            ("http://[::1]", "http://[::1]"),
        ] {
            assert_eq!(normalize_origin(raw).as_deref(), Ok(want), "{raw}");
        }
        for bad in [
            "*",
            "null",
            "localhost:3000",
            "ftp://x",
            "http://",
            "http://x/path",
            "http://x?q",
            "http://u@x",
            "http://x:port",
            "http://x:",
            "http://*.example",
        ] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
        assert!(normalize_origin("*")
            .unwrap_err()
            .to_string()
            .contains("every site"));
    }

    #[test]
    fn only_read_routes_take_part() {
        assert!(is_cors_route(&Method::POST, "/ask"));
        assert!(is_cors_route(&Method::OPTIONS, "/ask"));
        assert!(is_cors_route(&Method::GET, "/status"));
        assert!(is_cors_route(&Method::GET, "/docs/a/b.md"));
        assert!(!is_cors_route(&Method::POST, "/docs"));
        assert!(!is_cors_route(&Method::POST, "/docs/x"));
        assert!(!is_cors_route(&Method::POST, "/chunks"));
        assert!(!is_cors_route(&Method::POST, "/eval"));
        assert!(!is_cors_route(&Method::GET, "/runs"));
        assert!(!is_cors_route(&Method::POST, "/mcp"));
        let o = Origins::parse(&["http://localhost:3000".into()]).unwrap();
        assert!(o.allows("http://localhost:3000"));
        assert!(!o.allows("http://localhost:3001"));
        assert!(!o.allows("http://127.0.0.1:3000"));
        assert!(!o.allows("null"));
        assert!(!Origins::default().allows("http://localhost:3000"));
    }
}
