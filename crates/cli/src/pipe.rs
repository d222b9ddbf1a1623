//! A closed stdout (`bib … | head -1`) ends every command quietly with exit status 0, the way
//! ripgrep and cargo do. Rust ignores SIGPIPE, so a write to a closed pipe is an `EPIPE` error:
//! returned by `write!`/`writeln!` (and `serde_json::to_writer`), or raised as a panic by
//! `println!`. [`run`] wraps the whole command and turns both into a quiet success; every other
//! error prints as `Error: …` with its causes (exit 1) and every other panic is untouched.

use std::any::Any;
use std::io::ErrorKind;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;

/// Whether `e`, or anything in its chain, is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(ErrorKind::BrokenPipe))
    })
}

/// Whether a panic payload is `println!`'s "failed printing to stdout: Broken pipe".
fn panic_is_broken_pipe(payload: &dyn Any) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    text.is_some_and(|t| {
        t.starts_with("failed printing to stdout")
            && (t.contains("Broken pipe") || t.contains("os error 32"))
    })
}

/// `Error: message` and its causes, the layout of `anyhow`'s `{:?}` without the stack trace it
/// adds whenever `RUST_BACKTRACE=1` is set: an error here is something the user can fix (a
/// missing knowledge base, a bad file), and many developers' shells set that variable for
/// other programs. `RUST_LIB_BACKTRACE=1` (anyhow's own switch) still appends it.
fn report(e: &anyhow::Error) -> String {
    let backtrace = std::env::var_os("RUST_LIB_BACKTRACE").is_some_and(|v| v == "1");
    report_with(e, backtrace)
}

/// [`report`], with the stack trace appended or not.
fn report_with(e: &anyhow::Error, backtrace: bool) -> String {
    let mut out = format!("Error: {e}");
    // A cause whose text its parent's message already quotes (`"not valid JSON: {0}"` over the
    // parser's error) is said once.
    let mut causes: Vec<String> = Vec::new();
    let mut parent = e.to_string();
    for c in e.chain().skip(1) {
        let text = c.to_string();
        if !parent.contains(&text) {
            causes.push(text.clone());
        }
        parent = text;
    }
    if !causes.is_empty() {
        out.push_str("\n\nCaused by:");
        for (i, c) in causes.iter().enumerate() {
            let c = c.replace('\n', "\n       ");
            if causes.len() == 1 {
                out.push_str(&format!("\n    {c}"));
            } else {
                out.push_str(&format!("\n    {i}: {c}"));
            }
        }
    }
    if backtrace {
        out.push_str(&format!("\n\nStack backtrace:\n{}", e.backtrace()));
    }
    out
}

/// Run a command: a closed stdout is a quiet success; other errors print `Error: …` (with their
/// causes) and exit 1.
pub fn run(command: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !panic_is_broken_pipe(info.payload()) {
            default_hook(info);
        }
    }));
    match std::panic::catch_unwind(AssertUnwindSafe(command)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("{}", report(&e));
            ExitCode::FAILURE
        }
        Err(p) if panic_is_broken_pipe(p.as_ref()) => ExitCode::SUCCESS,
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message quotes its source, as `#[error("…: {0}")]` over `#[from]` does.
    #[derive(Debug)]
    struct QuotesItsSource(std::io::Error);

    impl std::fmt::Display for QuotesItsSource {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "not valid JSON: {}", self.0)
        }
    }

    impl std::error::Error for QuotesItsSource {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn reports_the_message_and_its_causes_without_a_stack_trace() {
        let root = std::io::Error::from(ErrorKind::NotFound);
        let one = anyhow::Error::from(root).context("opening kb.sqlite");
        assert_eq!(
            report_with(&one, false),
            "Error: opening kb.sqlite\n\nCaused by:\n    entity not found"
        );
        let two = anyhow::anyhow!("line 2: bad\nsecond line")
            .context("parsing the history")
            .context("reading the history");
        assert_eq!(
            report_with(&two, false),
            "Error: reading the history\n\nCaused by:\n    0: parsing the history\n    \
             1: line 2: bad\n       second line"
        );
        assert_eq!(
            report_with(&anyhow::anyhow!("plain"), false),
            "Error: plain"
        );
        assert!(report_with(&one, true).contains("\n\nStack backtrace:\n"));
        // A cause the message already quotes is not repeated.
        let eof = std::io::Error::other("EOF at line 1 column 3");
        let quoted = anyhow::Error::from(QuotesItsSource(eof)).context("reading the history");
        assert_eq!(
            report_with(&quoted, false),
            "Error: reading the history\n\nCaused by:\n    \
             not valid JSON: EOF at line 1 column 3"
        );
    }

    #[test]
    fn recognises_broken_pipes_in_error_chains_and_panics() {
        let io = std::io::Error::from(ErrorKind::BrokenPipe);
        let e = anyhow::Error::from(io).context("printing results");
        assert!(is_broken_pipe(&e));
        let json = serde_json::Error::io(std::io::Error::from(ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&anyhow::Error::from(json)));
        let other = anyhow::Error::from(std::io::Error::from(ErrorKind::NotFound));
        assert!(!is_broken_pipe(&other));
        assert!(!is_broken_pipe(&anyhow::anyhow!("Broken pipe")));

        let msg = "failed printing to stdout: Broken pipe (os error 32)".to_string();
        assert!(panic_is_broken_pipe(&msg));
        assert!(!panic_is_broken_pipe(&"index out of bounds".to_string()));
        assert!(!panic_is_broken_pipe(&42u8));
    }
}
