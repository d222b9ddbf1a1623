//! Progress bars on stderr, for `bib ingest` and `bib eval`, drawn only when stderr is a
//! terminal (and not with `--json`): one bar per step, its ETA computed from the work done so
//! far (elapsed × remaining ÷ done), and warnings printed above the bar instead of through it.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use bib_ingest::{FileIssue, Unit};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// Bars, one step at a time; silent when `enabled` is false (warnings still print, plainly).
pub struct Bars {
    enabled: bool,
    bar: Mutex<Option<ProgressBar>>,
}

impl Bars {
    /// Bars when stderr is a terminal and `quiet` (e.g. `--json`) is off.
    pub fn for_stderr(quiet: bool) -> Self {
        Self {
            enabled: !quiet && std::io::stderr().is_terminal(),
            bar: Mutex::new(None),
        }
    }

    /// Whether bars are drawn (and warnings printed as they happen).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A step of `total` units begins.
    pub fn begin(&self, step: &str, total: u64, unit: Unit) {
        if !self.enabled {
            return;
        }
        let counts = match unit {
            Unit::Files => "{pos}/{len}",
            Unit::Bytes => "{binary_bytes}/{binary_total_bytes}",
        };
        let b = ProgressBar::new(total);
        let template =
            format!("{{prefix:>9}} [{{bar:40}}] {counts} {{elapsed_precise}} eta {{eta_done}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            b.set_style(
                style
                    .progress_chars("=> ")
                    .with_key("eta_done", eta_from_work),
            );
        }
        self.show(step, b);
    }

    /// Make `b` the bar of `step`, replacing the previous step's.
    fn show(&self, step: &str, b: ProgressBar) {
        b.set_prefix(step.to_string());
        // Redraw twice a second, so elapsed time and ETA move while a batch is embedded.
        b.enable_steady_tick(Duration::from_millis(500));
        if let Some(old) = self.slot().replace(b) {
            old.finish_and_clear();
        }
    }

    /// A step whose total is not known: a count of `unit` done and the time elapsed.
    pub fn begin_open(&self, step: &str, unit: &str) {
        if !self.enabled {
            return;
        }
        let b = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template(&format!(
            "{{prefix:>9}} {{spinner}} {{pos}} {unit} {{elapsed_precise}}"
        )) {
            b.set_style(style);
        }
        self.show(step, b);
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = self.slot().as_ref() {
            b.inc(n);
        }
    }

    pub fn end(&self) {
        if let Some(b) = self.slot().take() {
            b.finish_and_clear();
        }
    }

    /// A line on stderr, above the bar when one is drawn.
    pub fn println(&self, line: &str) {
        match self.slot().as_ref() {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

/// Remaining time from the average rate so far: `elapsed × (len − pos) / pos`; `?` until
/// there is work done to measure.
fn eta_from_work(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = w.write_str(&eta_text(state.elapsed(), state.pos(), state.len()));
}

fn eta_text(elapsed: Duration, done: u64, total: Option<u64>) -> String {
    let Some(total) = total else {
        return "?".into();
    };
    if done == 0 || elapsed < Duration::from_millis(500) {
        return "?".into();
    }
    let left = total.saturating_sub(done) as f64 * elapsed.as_secs_f64() / done as f64;
    let secs = left.round() as u64;
    let mut out = String::new();
    if secs >= 3600 {
        let _ = write!(out, "{}h{:02}m", secs / 3600, secs % 3600 / 60);
    } else if secs >= 60 {
        let _ = write!(out, "{}m{:02}s", secs / 60, secs % 60);
    } else {
        let _ = write!(out, "{secs}s");
    }
    out
}

impl bib_ingest::Progress for Bars {
    fn start(&self, phase: &str, total: u64, unit: Unit) {
        self.begin(phase, total, unit);
    }
    fn advance(&self, n: u64) {
        self.inc(n);
    }
    fn finish(&self) {
        self.end();
    }
    fn warn(&self, issue: &FileIssue) {
        if self.enabled {
            self.println(&format!("warning: {}: {}", issue.path, issue.reason));
        }
    }
}

impl bib_eval::Progress for Bars {
    fn start(&self, step: &str, total: u64) {
        self.begin(step, total, Unit::Files);
    }
    fn advance(&self, n: u64) {
        self.inc(n);
    }
    fn finish(&self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_the_rate_so_far_applied_to_what_is_left() {
        let s = Duration::from_secs;
        assert_eq!(
            eta_text(s(60), 10, Some(40)),
            "3m00s",
            "30 left at 6 s each"
        );
        assert_eq!(eta_text(s(10), 50, Some(100)), "10s");
        assert_eq!(eta_text(s(1800), 1, Some(4)), "1h30m");
        assert_eq!(eta_text(s(5), 0, Some(10)), "?", "nothing done yet");
        assert_eq!(
            eta_text(Duration::from_millis(100), 5, Some(10)),
            "?",
            "too early"
        );
        assert_eq!(eta_text(s(5), 10, Some(10)), "0s");
        assert_eq!(eta_text(s(5), 3, None), "?");
    }
}
