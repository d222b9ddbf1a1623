//! A small probe format for packer regressions: sessions of filler with planted facts, and
//! questions whose answers must survive packing. The project's own set lives in
//! `crates/pack/tests/data/probes.json` (multilingual and agent sessions with tool calls).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

/// A question and what the packed output must (and must not) contain. Both are compared
/// after [`normalize`] (lower case, whitespace runs as one space).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Probe {
    pub q: String,
    pub expect: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<String>,
    /// What the probe measures; all empty in a hand-written file such as the project's.
    #[serde(flatten)]
    pub tags: ProbeTags,
}

/// The tags of a generated probe (`bib bench probes`), by which recall is broken down.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct ProbeTags {
    /// The planted fact the probe asks about.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fact: String,
    /// The session's language (ISO 639-1).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lang: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<SessionKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub style: Option<QuestionStyle>,
    /// How a paraphrase differs from the fact's words (`synonym`, `hypernym`, `order`,
    /// `register`, `no-overlap`); empty for a direct question.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub how: String,
    /// The answer changed: a later message corrected the fact, and `expect` holds the current
    /// value.
    pub superseded: bool,
    /// The values a correction replaced (not needed in the output; reported, never judged).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub old: Vec<String>,
    /// Day (`YYYY-MM-DD`, UTC) of the message that holds the current value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// Where in the history the current value sits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<Depth>,
}

/// A session's kind: a conversation, or an agent at work with tool calls and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    Dialogue,
    Agent,
}

/// Whether a question reuses the fact's words or says it differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuestionStyle {
    Direct,
    Paraphrase,
}

/// Thirds of a history, by the position of the message holding the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Depth {
    Early,
    Middle,
    Late,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dialogue => "dialogue",
            Self::Agent => "agent",
        }
    }
}

impl QuestionStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Paraphrase => "paraphrase",
        }
    }
}

impl Depth {
    /// The third of a history of `len` messages that message `index` falls in.
    pub fn of(index: usize, len: usize) -> Self {
        match (3 * index) / len.max(1) {
            0 => Self::Early,
            1 => Self::Middle,
            _ => Self::Late,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Early => "early",
            Self::Middle => "middle",
            Self::Late => "late",
        }
    }
}

/// Outcome of one probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeResult {
    pub session: String,
    pub question: String,
    /// Every `expect` is in the output and no `absent` is.
    pub passed: bool,
    /// Some value of `tags.old` is in the output too.
    pub old_kept: bool,
    /// Passed, and `tags.date` is in the output.
    pub date_kept: bool,
    /// Tokens of the output by the packer's estimate (+4 per message).
    pub output_tokens: usize,
    pub budget: usize,
    pub tags: ProbeTags,
}

/// Lower case with every run of whitespace as one space, trimmed: how a probe's strings and
/// the packed output are compared.
pub fn normalize(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The packed messages' text, one message per line.
pub fn packed_text(packed: &Packed) -> String {
    packed
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Judge one probe against a packed output (session name and budget are carried along).
pub fn judge(probe: &Probe, session: &str, packed: &Packed, budget: usize) -> ProbeResult {
    let text = normalize(&packed_text(packed));
    let has = |s: &String| text.contains(normalize(s).as_str());
    let passed = probe.expect.iter().all(has) && !probe.absent.iter().any(has);
    // The date is kept when the text names it, or when a message that holds an expected value
    // carries its time and that time falls on the date.
    let dated = |day: &String| {
        has(day)
            || packed.messages.iter().any(|m| {
                let on_day =
                    m.ts.and_then(crate::dates::date_of_ms)
                        .is_some_and(|d| d.to_string() == *day);
                let content = normalize(&m.content);
                on_day
                    && probe
                        .expect
                        .iter()
                        .any(|e| content.contains(normalize(e).as_str()))
            })
    };
    ProbeResult {
        session: session.to_owned(),
        question: probe.q.clone(),
        passed,
        old_kept: probe.tags.old.iter().any(has),
        date_kept: passed && probe.tags.date.as_ref().is_some_and(dated),
        output_tokens: crate::output_tokens(&packed.messages),
        budget,
        tags: probe.tags.clone(),
    }
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
            out.push(judge(p, &s.name, &r, s.budget));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PackStats, PackedMessage};

    fn packed(texts: &[&str]) -> Packed {
        Packed {
            messages: texts
                .iter()
                .map(|t| PackedMessage {
                    role: "user".into(),
                    content: (*t).into(),
                    ts: None,
                })
                .collect(),
            stats: PackStats::default(),
        }
    }

    #[test]
    fn answers_are_compared_without_case_or_whitespace_runs() {
        assert_eq!(normalize("  Vuelo\n  IB3106 \t hoy "), "vuelo ib3106 hoy");
        let probe = Probe {
            q: "¿qué vuelo?".into(),
            expect: vec!["vuelo ib3106".into()],
            tags: ProbeTags {
                old: vec!["TP1027".into()],
                date: Some("2026-03-20".into()),
                superseded: true,
                ..ProbeTags::default()
            },
            ..Probe::default()
        };
        let r = judge(
            &probe,
            "s",
            &packed(&["el Vuelo\nIB3106 (2026-03-20)"]),
            100,
        );
        assert!(r.passed && r.date_kept && !r.old_kept);
        assert_eq!(
            r.output_tokens,
            crate::output_tokens(&packed(&["el Vuelo\nIB3106 (2026-03-20)"]).messages)
        );
        let r = judge(&probe, "s", &packed(&["vuelo TP1027"]), 100);
        assert!(!r.passed && r.old_kept && !r.date_kept);
        // The time of the message holding the value dates it; another message's does not.
        let mut p = packed(&["lo de siempre", "el vuelo IB3106"]);
        p.messages[0].ts = Some(1_774_000_000_000); // 2026-03-20
        assert!(!judge(&probe, "s", &p, 100).date_kept);
        p.messages[1].ts = Some(1_774_000_000_000);
        assert!(judge(&probe, "s", &p, 100).date_kept);
    }

    #[test]
    fn hand_written_probes_read_without_tags_and_tagged_ones_round_trip() {
        let p: Probe = serde_json::from_str(r#"{"q": "where?", "expect": ["kv/x"]}"#).unwrap();
        assert_eq!(p.tags, ProbeTags::default());
        let tagged = Probe {
            q: "where?".into(),
            expect: vec!["kv/x".into()],
            absent: vec![],
            tags: ProbeTags {
                fact: "secret".into(),
                lang: "en".into(),
                kind: Some(SessionKind::Agent),
                style: Some(QuestionStyle::Paraphrase),
                how: "hypernym".into(),
                depth: Some(Depth::of(250, 300)),
                ..ProbeTags::default()
            },
        };
        let json = serde_json::to_string(&tagged).unwrap();
        assert!(
            json.contains(r#""kind":"agent""#) && json.contains(r#""depth":"late""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Probe>(&json).unwrap(), tagged);
        assert_eq!(Depth::of(0, 300), Depth::Early);
        assert_eq!(Depth::of(100, 300), Depth::Middle);
    }
}
