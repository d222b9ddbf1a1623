//! A small probe format for packer regressions: sessions of filler with planted facts, and
//! questions whose answers must survive packing. The project's own set lives in
//! `crates/pack/tests/data/probes.json` (multilingual and agent sessions with tool calls).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{Message, Packed};

/// A probe file.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeSet {
    /// Filler lines per pool name.
    pub filler: BTreeMap<String, Vec<String>>,
    pub sessions: Vec<ProbeSession>,
}

/// One session: `filler_turns` filler messages with `messages` inserted at their positions.
#[derive(Debug, Clone, Deserialize)]
pub struct ProbeSession {
    pub name: String,
    pub filler: String,
    pub filler_turns: usize,
    pub budget: usize,
    /// Time of the first message (RFC 3339); each next message is one minute later.
    pub ts: Option<String>,
    pub messages: Vec<PlantedMessage>,
    pub probes: Vec<Probe>,
}

/// A planted message.
#[derive(Debug, Clone, Deserialize)]
pub struct PlantedMessage {
    pub at: usize,
    pub role: String,
    pub content: String,
}

/// A question and what the packed output must (and must not) contain.
#[derive(Debug, Clone, Deserialize)]
pub struct Probe {
    pub q: String,
    pub expect: Vec<String>,
    #[serde(default)]
    pub absent: Vec<String>,
}

/// Outcome of one probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    pub session: String,
    pub question: String,
    pub passed: bool,
    pub output_tokens: usize,
    pub budget: usize,
}

impl ProbeSet {
    /// Parse a probe file's text.
    pub fn parse(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

impl ProbeSession {
    /// The session's history (without a question).
    pub fn history(&self, filler: &BTreeMap<String, Vec<String>>) -> Vec<Message> {
        let empty = Vec::new();
        let pool = filler.get(&self.filler).unwrap_or(&empty);
        let base = self
            .ts
            .as_deref()
            .and_then(|t| crate::dates::time_value(&serde_json::Value::String(t.into())));
        let total = self.filler_turns + self.messages.len();
        let mut out = Vec::with_capacity(total);
        let mut f = 0usize;
        for i in 0..total {
            let (role, content) = match self.messages.iter().find(|m| m.at == i) {
                Some(m) => (m.role.clone(), m.content.clone()),
                None => {
                    let line = if pool.is_empty() {
                        format!("filler {f}")
                    } else {
                        pool[f % pool.len()].clone()
                    };
                    f += 1;
                    let role = if line.starts_with("[Tool result]") || i % 2 == 0 {
                        "user"
                    } else {
                        "assistant"
                    };
                    (role.to_owned(), line)
                }
            };
            out.push(Message {
                role,
                content,
                ts: base.map(|b| b + i as i64 * 60_000),
            });
        }
        out
    }
}

/// Run every probe through `pack` (history including the question, budget) → packed output.
pub fn run_probes(
    set: &ProbeSet,
    mut pack: impl FnMut(&[Message], usize) -> Packed,
) -> Vec<ProbeResult> {
    let mut out = Vec::new();
    for s in &set.sessions {
        let mut h = s.history(&set.filler);
        let last_ts = h.last().and_then(|m| m.ts);
        for p in &s.probes {
            h.push(Message {
                role: "user".into(),
                content: p.q.clone(),
                ts: last_ts.map(|t| t + 60_000),
            });
            let r = pack(&h, s.budget);
            h.pop();
            let text = r
                .messages
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let passed = p.expect.iter().all(|e| text.contains(e.as_str()))
                && !p.absent.iter().any(|a| text.contains(a.as_str()));
            out.push(ProbeResult {
                session: s.name.clone(),
                question: p.q.clone(),
                passed,
                output_tokens: r.stats.output_tokens,
                budget: s.budget,
            });
        }
    }
    out
}
