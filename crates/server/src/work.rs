//! Cancellation of one request's work when its deadline passes.
//!
//! The HTTP guard gives every request a [`Work`]. When the timeout fires it calls
//! [`Work::cancel`]; the operation, running on the blocking pool, checks [`Work::check`]
//! between phases (before each embedding batch, between eval questions through
//! [`CancelEmbedder`]) and claims the right to write with [`Work::begin_commit`] right before
//! its store transaction. The two race on one atomic, so exactly one of them wins:
//! - cancel first: the operation stops at its next check and writes nothing; the client got
//!   `504 timeout` and nothing was committed;
//! - commit first: the cancel is refused and the guard waits for the (short) commit to finish
//!   and answers its real result instead of a 504. A 504 therefore always means "not written".

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bib_embed::{EmbedError, EmbedKind, Embedder};
use bib_text::tokens::TokenCounter;

use crate::error::{ErrorCode, ServiceError};

const RUNNING: u8 = 0;
const CANCELLED: u8 = 1;
const COMMITTING: u8 = 2;

/// The cancellation state of one request.
#[derive(Debug, Default)]
pub struct Work {
    state: AtomicU8,
    /// When the request's time runs out, and the timeout it came from (for the message).
    deadline: Option<(Instant, Duration)>,
}

impl Work {
    /// Work with no deadline (stdio MCP, library callers).
    pub fn unbounded() -> Self {
        Self::default()
    }

    /// Work that must finish within `timeout` from now. The deadline is carried so that work
    /// which outlives its HTTP exchange (an MCP tool call answered on an SSE stream, whose
    /// response headers go out before the call runs) can still enforce it.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            state: AtomicU8::new(RUNNING),
            deadline: Instant::now().checked_add(timeout).map(|d| (d, timeout)),
        }
    }

    /// When this work's time runs out, if it has a deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.map(|(d, _)| d)
    }

    /// The error a caller answers once the deadline passed and [`Work::cancel`] succeeded.
    pub fn timeout_error(&self) -> ServiceError {
        match self.deadline {
            Some((_, t)) => ServiceError::new(
                ErrorCode::Timeout,
                format!(
                    "the request took longer than {} s; its work was stopped and nothing was \
                     written",
                    t.as_secs_f64()
                ),
            ),
            None => cancelled_error(),
        }
    }

    /// Whether the deadline passed and the work was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) == CANCELLED
    }

    /// `Err(timeout)` once cancelled: call between phases.
    pub fn check(&self) -> Result<(), ServiceError> {
        if self.is_cancelled() {
            Err(cancelled_error())
        } else {
            Ok(())
        }
    }

    /// Claim the right to write; fails when the work was cancelled first. After this, a
    /// [`Work::cancel`] is refused.
    pub fn begin_commit(&self) -> Result<(), ServiceError> {
        match self
            .state
            .compare_exchange(RUNNING, COMMITTING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(COMMITTING) => Ok(()),
            Err(_) => Err(cancelled_error()),
        }
    }

    /// Cancel the work. `false` when a commit already started (the caller must then wait for
    /// the result instead of reporting a timeout).
    pub fn cancel(&self) -> bool {
        match self
            .state
            .compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(s) => s == CANCELLED,
        }
    }
}

fn cancelled_error() -> ServiceError {
    ServiceError::new(
        ErrorCode::Timeout,
        "the request's deadline passed; its work was stopped and nothing was written",
    )
}

/// An embedder that refuses to embed once `work` is cancelled, so long operations built on
/// embedding (eval over many questions, trimming, indexing) stop at their next batch.
pub struct CancelEmbedder<'a> {
    pub inner: &'a dyn Embedder,
    pub work: &'a Work,
}

impl Embedder for CancelEmbedder<'_> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }
    fn max_input_tokens(&self) -> usize {
        self.inner.max_input_tokens()
    }
    fn tokenizer(&self) -> &dyn TokenCounter {
        self.inner.tokenizer()
    }
    fn embed(&self, texts: &[&str], kind: EmbedKind) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.work.is_cancelled() {
            return Err(EmbedError::Other(
                "cancelled: the request's deadline passed".into(),
            ));
        }
        self.inner.embed(texts, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_first_refuses_the_commit() {
        let w = Work::unbounded();
        assert!(w.check().is_ok());
        assert!(w.cancel());
        assert!(w.is_cancelled());
        assert_eq!(w.check().unwrap_err().code, ErrorCode::Timeout);
        assert_eq!(w.begin_commit().unwrap_err().code, ErrorCode::Timeout);
        assert!(w.cancel(), "cancelling twice still reports cancelled");
    }

    #[test]
    fn a_deadline_is_carried_and_named() {
        assert!(Work::unbounded().deadline().is_none());
        let before = Instant::now();
        let w = Work::with_timeout(Duration::from_millis(1500));
        let d = w.deadline().unwrap();
        assert!(d >= before + Duration::from_millis(1500));
        assert!(d <= Instant::now() + Duration::from_millis(1500));
        let e = w.timeout_error();
        assert_eq!(e.code, ErrorCode::Timeout);
        assert!(e.message.contains("1.5 s"), "{}", e.message);
        // A deadline too far to represent is no deadline.
        assert!(Work::with_timeout(Duration::MAX).deadline().is_none());
    }

    #[test]
    fn commit_first_refuses_the_cancel() {
        let w = Work::unbounded();
        assert!(w.begin_commit().is_ok());
        assert!(!w.cancel());
        assert!(!w.is_cancelled());
        assert!(
            w.begin_commit().is_ok(),
            "a second commit of the same work is fine"
        );
    }
}
