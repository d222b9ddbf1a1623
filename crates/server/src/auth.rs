//! Bearer tokens.
//!
//! The policy (documented in the README's server section):
//! - **Mutating operations** (`bib_register_doc`, `bib_index_chunks`, `POST /docs`,
//!   `POST /chunks`) need the server's token (`BIB_TOKEN` or `--token-file`). A server started
//!   without a token refuses them all: nothing can be written by accident.
//! - **HTTP** callers present it as `Authorization: Bearer <token>` (MCP tool calls over
//!   streamable HTTP may also pass a `token` argument).
//! - **stdio MCP**: the client started the process, but the model driving that client should
//!   still not write without being handed the secret, so mutating tools need the `token`
//!   argument to equal the process's `BIB_TOKEN`.
//! - **Non-loopback binds** refuse to start without a token, and then every request (reads
//!   included, `/healthz` excepted) needs it.
//!
//! Tokens are compared by SHA-256 digest in constant time.

use sha2::{Digest, Sha256};

use crate::error::ServiceError;

/// The server's token, if any, and whether reads need it too.
#[derive(Clone)]
pub struct TokenCheck {
    digest: Option<[u8; 32]>,
    reads_need_token: bool,
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCheck")
            .field("configured", &self.digest.is_some())
            .field("reads_need_token", &self.reads_need_token)
            .finish()
    }
}

fn digest(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Minimum token length accepted at start-up.
pub const MIN_TOKEN_LEN: usize = 16;

impl TokenCheck {
    /// `token`: the configured secret (empty strings count as none).
    pub fn new(token: Option<&str>, reads_need_token: bool) -> Result<Self, ServiceError> {
        let token = token.map(str::trim).filter(|t| !t.is_empty());
        if let Some(t) = token {
            if t.len() < MIN_TOKEN_LEN {
                return Err(ServiceError::invalid(
                    "BIB_TOKEN",
                    format!("is {} characters; use at least {MIN_TOKEN_LEN}", t.len()),
                ));
            }
        }
        if reads_need_token && token.is_none() {
            return Err(ServiceError::unauthorized(
                "binding to a non-loopback address needs a token: set BIB_TOKEN (or --token-file)",
            ));
        }
        Ok(Self {
            digest: token.map(digest),
            reads_need_token,
        })
    }

    /// No token: reads open, mutations refused.
    pub fn none() -> Self {
        Self {
            digest: None,
            reads_need_token: false,
        }
    }

    pub fn mutations_enabled(&self) -> bool {
        self.digest.is_some()
    }

    pub fn reads_need_token(&self) -> bool {
        self.reads_need_token
    }

    fn matches(&self, presented: &str) -> bool {
        let Some(want) = &self.digest else {
            return false;
        };
        let got = digest(presented.trim());
        // Constant-time comparison of the digests.
        want.iter()
            .zip(got.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Whether a mutating call may proceed with `presented`.
    pub fn check_mutation(&self, presented: Option<&str>) -> Result<(), ServiceError> {
        if self.digest.is_none() {
            return Err(ServiceError::unauthorized(
                "writes are disabled: the server was started without a token (set BIB_TOKEN)",
            ));
        }
        match presented {
            None => Err(ServiceError::unauthorized(
                "this operation writes to the knowledge base and needs the server's token \
                 (HTTP: `Authorization: Bearer <token>`; MCP: the `token` argument)",
            )),
            Some(t) if self.matches(t) => Ok(()),
            Some(_) => Err(ServiceError::unauthorized("wrong token")),
        }
    }

    /// Whether a read may proceed (only checked on non-loopback binds).
    pub fn check_read(&self, presented: Option<&str>) -> Result<(), ServiceError> {
        if !self.reads_need_token {
            return Ok(());
        }
        match presented {
            Some(t) if self.matches(t) => Ok(()),
            Some(_) => Err(ServiceError::unauthorized("wrong token")),
            None => Err(ServiceError::unauthorized(
                "this server listens on a public address: every request needs `Authorization: Bearer <token>`",
            )),
        }
    }
}

/// The token of an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim();
    let (scheme, rest) = h.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    const T: &str = "0123456789abcdef-secret";

    #[test]
    fn mutations_need_the_exact_token() {
        let c = TokenCheck::new(Some(T), false).unwrap();
        assert!(c.check_mutation(Some(T)).is_ok());
        assert_eq!(
            c.check_mutation(None).unwrap_err().code,
            ErrorCode::Unauthorized
        );
        assert!(c.check_mutation(Some("0123456789abcdef-secreT")).is_err());
        assert!(c.check_read(None).is_ok());
    }

    #[test]
    fn no_token_means_no_writes() {
        let c = TokenCheck::none();
        let e = c.check_mutation(Some(T)).unwrap_err();
        assert!(e.message.contains("BIB_TOKEN"));
    }

    #[test]
    fn public_bind_needs_a_token_for_reads() {
        assert!(TokenCheck::new(None, true).is_err());
        let c = TokenCheck::new(Some(T), true).unwrap();
        assert!(c.check_read(None).is_err());
        assert!(c.check_read(Some(T)).is_ok());
    }

    #[test]
    fn short_tokens_are_refused() {
        assert!(TokenCheck::new(Some("short"), false).is_err());
        assert!(TokenCheck::new(Some("   "), false)
            .unwrap()
            .digest
            .is_none());
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer   abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
