//! The seeded generator of the multilingual paraphrase probe set.
//!
//! Everything written in a language lives in `bench/probes/<lang>.json` (filler templates,
//! the planted facts, their corrections and their questions); what an agent reads and runs —
//! code, configuration, command output, search results — is language-neutral and lives in
//! `bench/probes/agent.json`. This module only draws from them: one session per language and
//! kind, filler composed from template parts and slot values, facts planted at random depths,
//! some corrected later, one probe per planted fact. The PRNG is a local SplitMix64, so a seed
//! names the same set on every machine and with every dependency version.

use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use bib_pack::probes::{normalize, Depth, Probe, ProbeTags, QuestionStyle, SessionKind};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::pack_common::{rfc3339_utc, utc_day, utc_ms};

/// The seed `bib bench probes` uses unless told otherwise.
pub const DEFAULT_SEED: u64 = 17;

/// Messages per session: at least this many ...
const MIN_MESSAGES: usize = 300;
/// ... plus up to this many more.
const EXTRA_MESSAGES: usize = 60;
/// Planted facts per session (inclusive range; never more than the language's pool).
const FACTS_PER_SESSION: (usize, usize) = (6, 8);
/// Facts corrected per session, at least (when the chosen facts allow it).
const MIN_CORRECTED: usize = 2;
/// Chance that a correctable fact is corrected, beyond the minimum.
const CORRECTION_CHANCE: f64 = 0.5;
/// Share of a session's probes asked as a paraphrase (rounded up).
const PARAPHRASE_SHARE: f64 = 0.65;
/// No planted message among a session's last this many: a fact in the recent turns is kept
/// by any packer and measures nothing.
const TAIL: usize = 20;
/// Attempts to draw a filler message that is new and holds no planted value.
const DRAWS: usize = 40;

const SHARED: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../bench/probes/agent.json"
));

/// The languages of the set and their template files.
const LANGS: [(&str, &str); 7] = [
    (
        "es",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/es.json"
        )),
    ),
    (
        "en",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/en.json"
        )),
    ),
    (
        "de",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/de.json"
        )),
    ),
    (
        "fr",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/fr.json"
        )),
    ),
    (
        "pt",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/pt.json"
        )),
    ),
    (
        "ru",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/ru.json"
        )),
    ),
    (
        "uk",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/probes/uk.json"
        )),
    ),
];

// ————— template files —————

type Lists = BTreeMap<String, Vec<String>>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Shared {
    #[allow(dead_code)]
    about: String,
    /// Entity fields bound once per agent episode (`Entity`, `entity`, `module`, …).
    entities: Vec<BTreeMap<String, String>>,
    slots: Lists,
    files: Vec<FileTemplate>,
    commands: Vec<CommandTemplate>,
    searches: Vec<SearchTemplate>,
    edits: Vec<EditTemplate>,
    edit_results: Vec<String>,
    /// Tool results that carry planted facts (`{{v}}` is the value).
    blobs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTemplate {
    path: String,
    text: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandTemplate {
    command: String,
    output: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchTemplate {
    pattern: String,
    path: String,
    output: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditTemplate {
    path: String,
    old: String,
    new: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LangFile {
    lang: String,
    dialogue: DialogueText,
    agent: AgentText,
    facts: Facts,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DialogueText {
    slots: Lists,
    openers: Vec<String>,
    user_tails: Vec<String>,
    assistant_heads: Vec<String>,
    topics: Vec<Topic>,
    acks: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Topic {
    #[allow(dead_code)]
    name: String,
    user: Vec<String>,
    assistant: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentText {
    tasks: Vec<String>,
    followups: Vec<String>,
    /// Per tool name, what the assistant says before calling it.
    narration: Lists,
    findings: Vec<String>,
    summaries: Vec<String>,
    acks: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Facts {
    dialogue: Vec<Fact>,
    agent: Vec<Fact>,
}

/// A fact that can be planted: its messages, an optional correction, and its questions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fact {
    id: String,
    /// Alternatives, each `[value]` or `[value, corrected value]`.
    values: Vec<Vec<String>>,
    plant: Vec<FactMessage>,
    #[serde(default)]
    correction: Vec<FactMessage>,
    direct: String,
    paraphrase: Vec<Paraphrase>,
}

/// One planted message: text, a tool call, or a tool result (`text` or a shared `blob`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FactMessage {
    role: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    call: Option<CallTemplate>,
    #[serde(default)]
    blob: Option<String>,
    /// `w`: the blob shows the corrected value.
    #[serde(default)]
    with: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallTemplate {
    name: String,
    args: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Paraphrase {
    how: String,
    q: String,
}

// ————— output —————

/// One generated session: `bib pack` input messages and the probes asked against them.
#[derive(Debug, Clone)]
pub struct GeneratedSession {
    /// `<lang>-<kind>`, e.g. `es-dialogue`.
    pub name: String,
    pub lang: String,
    pub kind: SessionKind,
    /// OpenAI-style messages with `ts` (RFC 3339), assistant `tool_calls` and `tool` results.
    pub messages: Vec<Value>,
    pub probes: Vec<Probe>,
    /// What each message is (same length as `messages`).
    pub origins: Vec<Origin>,
}

/// What a generated message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Filler,
    /// A message planting fact `n` of the session's probes.
    Plant(usize),
    /// A message of fact `n`'s correction.
    Correction(usize),
    /// The assistant's acknowledgement after a planted group.
    Ack,
}

/// The whole set for a seed: one session per language and kind.
pub fn generate(seed: u64) -> anyhow::Result<Vec<GeneratedSession>> {
    let shared: Shared = serde_json::from_str(SHARED).context("parsing bench/probes/agent.json")?;
    let mut out = Vec::new();
    for (lang, text) in LANGS {
        let file: LangFile = serde_json::from_str(text)
            .with_context(|| format!("parsing bench/probes/{lang}.json"))?;
        anyhow::ensure!(
            file.lang == lang,
            "bench/probes/{lang}.json says lang {}",
            file.lang
        );
        for kind in [SessionKind::Dialogue, SessionKind::Agent] {
            let name = format!("{lang}-{}", kind.as_str());
            let mut rng = Rng::new(seed ^ fnv1a(name.as_bytes()));
            out.push(Builder::new(&shared, &file, kind, &mut rng).build(name));
        }
    }
    Ok(out)
}

// ————— the generator —————

/// A fact chosen for a session, with its drawn values.
struct Chosen<'a> {
    fact: &'a Fact,
    value: String,
    corrected: Option<String>,
    style: QuestionStyle,
    question: String,
    how: String,
}

/// A message before rendering.
enum Raw {
    Text {
        role: &'static str,
        text: String,
    },
    Call {
        text: Option<String>,
        name: String,
        args: Value,
    },
    Result {
        text: String,
    },
}

/// A group of messages to insert at a point of the session.
struct Event {
    /// Target position as a fraction of the session's length.
    at: f64,
    fact: usize,
    correction: bool,
}

struct Builder<'a, 'r> {
    shared: &'a Shared,
    file: &'a LangFile,
    kind: SessionKind,
    rng: &'r mut Rng,
    /// Normalized planted values: no filler message may contain one.
    forbidden: Vec<String>,
    seen: HashSet<String>,
    /// How often each dialogue template was used, by address (counts only, never iterated).
    uses: std::collections::HashMap<usize, usize>,
}

impl<'a, 'r> Builder<'a, 'r> {
    fn new(shared: &'a Shared, file: &'a LangFile, kind: SessionKind, rng: &'r mut Rng) -> Self {
        Self {
            shared,
            file,
            kind,
            rng,
            forbidden: Vec::new(),
            seen: HashSet::new(),
            uses: std::collections::HashMap::new(),
        }
    }

    fn build(mut self, name: String) -> GeneratedSession {
        let chosen = self.choose_facts();
        for c in &chosen {
            self.forbidden.push(normalize(&c.value));
            if let Some(w) = &c.corrected {
                self.forbidden.push(normalize(w));
            }
        }
        let events = self.plan_events(&chosen);
        let target = MIN_MESSAGES + self.rng.below(EXTRA_MESSAGES + 1);

        let mut raws: Vec<(Raw, Origin)> = Vec::new();
        let mut next = 0;
        let mut last_planted = 0;
        while next < events.len() || raws.len() < target.max(last_planted + TAIL) {
            if next < events.len() && events[next].at * target as f64 <= raws.len() as f64 {
                let e = &events[next];
                self.plant(&chosen[e.fact], e.fact, e.correction, &mut raws);
                last_planted = raws.len();
                next += 1;
                continue;
            }
            let episode = match self.kind {
                SessionKind::Dialogue => self.dialogue_episode(),
                SessionKind::Agent => self.agent_episode(),
            };
            raws.extend(episode.into_iter().map(|r| (r, Origin::Filler)));
        }
        let (messages, times) = self.render(&raws);
        let origins: Vec<Origin> = raws.iter().map(|(_, o)| *o).collect();
        let probes = chosen
            .iter()
            .enumerate()
            .map(|(i, c)| self.probe(c, i, &messages, &origins, &times))
            .collect();
        GeneratedSession {
            name,
            lang: self.file.lang.clone(),
            kind: self.kind,
            messages,
            probes,
            origins,
        }
    }

    /// The facts of this session, their values, corrections and question styles.
    fn choose_facts(&mut self) -> Vec<Chosen<'a>> {
        let pool: &'a [Fact] = match self.kind {
            SessionKind::Dialogue => &self.file.facts.dialogue,
            SessionKind::Agent => &self.file.facts.agent,
        };
        let mut order: Vec<usize> = (0..pool.len()).collect();
        self.rng.shuffle(&mut order);
        let n = self
            .rng
            .range(FACTS_PER_SESSION.0, FACTS_PER_SESSION.1)
            .min(pool.len());
        order.truncate(n);
        order.sort_unstable();
        let facts: Vec<&'a Fact> = order.iter().map(|&i| &pool[i]).collect();

        // corrections: each correctable fact with some chance, at least MIN_CORRECTED
        let correctable: Vec<usize> = (0..n)
            .filter(|&i| !facts[i].correction.is_empty())
            .collect();
        let mut corrected: Vec<bool> = (0..n)
            .map(|i| correctable.contains(&i) && self.rng.chance(CORRECTION_CHANCE))
            .collect();
        let mut rest: Vec<usize> = correctable
            .iter()
            .copied()
            .filter(|&i| !corrected[i])
            .collect();
        self.rng.shuffle(&mut rest);
        while corrected.iter().filter(|c| **c).count() < MIN_CORRECTED {
            match rest.pop() {
                Some(i) => corrected[i] = true,
                None => break,
            }
        }

        // styles: ceil(share · n) paraphrased, chosen at random
        let paraphrased = (PARAPHRASE_SHARE * n as f64).ceil() as usize;
        let mut styles: Vec<QuestionStyle> = (0..n)
            .map(|i| {
                if i < paraphrased {
                    QuestionStyle::Paraphrase
                } else {
                    QuestionStyle::Direct
                }
            })
            .collect();
        self.rng.shuffle(&mut styles);

        let mut out = Vec::with_capacity(n);
        for (i, fact) in facts.into_iter().enumerate() {
            let values = self.rng.pick(&fact.values);
            let value = values[0].clone();
            let corrected = if corrected[i] {
                values.get(1).cloned()
            } else {
                None
            };
            let (question, how) = match styles[i] {
                QuestionStyle::Direct => (fact.direct.clone(), String::new()),
                QuestionStyle::Paraphrase => {
                    let p = self.rng.pick(&fact.paraphrase);
                    (p.q.clone(), p.how.clone())
                }
            };
            out.push(Chosen {
                fact,
                value,
                corrected,
                style: styles[i],
                question,
                how,
            });
        }
        out
    }

    /// Where each plant and correction goes, as fractions of the session, sorted.
    fn plan_events(&mut self, chosen: &[Chosen<'_>]) -> Vec<Event> {
        let mut thirds: Vec<usize> = (0..chosen.len()).map(|i| i % 3).collect();
        self.rng.shuffle(&mut thirds);
        let mut events = Vec::new();
        for (i, c) in chosen.iter().enumerate() {
            let (lo, hi) = [(0.03, 0.30), (0.36, 0.62), (0.68, 0.84)][thirds[i]];
            let at = self.rng.uniform(lo, hi);
            events.push(Event {
                at,
                fact: i,
                correction: false,
            });
            if c.corrected.is_some() {
                let later = (at + self.rng.uniform(0.06, 0.25)).min(0.9);
                events.push(Event {
                    at: later,
                    fact: i,
                    correction: true,
                });
            }
        }
        events.sort_by(|a, b| a.at.total_cmp(&b.at));
        events
    }

    /// Append a fact's plant or correction, and the assistant's acknowledgement if the group
    /// does not end with the assistant speaking.
    fn plant(
        &mut self,
        c: &Chosen<'_>,
        index: usize,
        correction: bool,
        raws: &mut Vec<(Raw, Origin)>,
    ) {
        let (group, origin) = if correction {
            (&c.fact.correction, Origin::Correction(index))
        } else {
            (&c.fact.plant, Origin::Plant(index))
        };
        let mut bound = BTreeMap::new();
        bound.insert("v".to_owned(), c.value.clone());
        if let Some(w) = &c.corrected {
            bound.insert("w".to_owned(), w.clone());
        }
        for m in group {
            let raw = self.fact_message(m, &bound);
            raws.push((raw, origin));
        }
        let ends_with_assistant_text = matches!(
            raws.last(),
            Some((
                Raw::Text {
                    role: "assistant",
                    ..
                },
                _
            ))
        );
        if !ends_with_assistant_text {
            let file: &'a LangFile = self.file;
            let acks = match self.kind {
                SessionKind::Dialogue => &file.dialogue.acks,
                SessionKind::Agent => &file.agent.acks,
            };
            let text = self.rng.pick(acks).clone();
            raws.push((
                Raw::Text {
                    role: "assistant",
                    text,
                },
                Origin::Ack,
            ));
        }
    }

    fn fact_message(&mut self, m: &FactMessage, bound: &BTreeMap<String, String>) -> Raw {
        let shared: &'a Shared = self.shared;
        let mut drawn = BTreeMap::new();
        if let Some(call) = &m.call {
            let args: serde_json::Map<String, Value> = call
                .args
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(self.expand(v, bound, &mut drawn))))
                .collect();
            return Raw::Call {
                text: m.text.as_ref().map(|t| self.expand(t, bound, &mut drawn)),
                name: call.name.clone(),
                args: Value::Object(args),
            };
        }
        if let Some(blob) = &m.blob {
            let mut b = bound.clone();
            if m.with.as_deref() == Some("w") {
                if let Some(w) = bound.get("w") {
                    b.insert("v".to_owned(), w.clone());
                }
            }
            let tpl = shared.blobs.get(blob).map_or("", String::as_str);
            return Raw::Result {
                text: self.expand(tpl, &b, &mut drawn),
            };
        }
        let text = self.expand(m.text.as_deref().unwrap_or(""), bound, &mut drawn);
        match m.role.as_str() {
            "tool" => Raw::Result { text },
            "assistant" => Raw::Text {
                role: "assistant",
                text,
            },
            _ => Raw::Text { role: "user", text },
        }
    }

    /// A few turns on one everyday topic, user first.
    fn dialogue_episode(&mut self) -> Vec<Raw> {
        let file: &'a LangFile = self.file;
        let d = &file.dialogue;
        let topic = self.rng.pick(&d.topics);
        let pairs = self
            .rng
            .range(1, 3)
            .min(topic.user.len())
            .min(topic.assistant.len() / 2);
        let none = BTreeMap::new();
        let mut taken: Vec<&'a String> = Vec::new();
        let mut out = Vec::new();
        for _ in 0..pairs {
            let u = self.least_used(&topic.user, &taken);
            let r = self.least_used(&topic.assistant, &taken);
            taken.extend([u, r]);
            let user = self.fresh(|g| {
                let opener = g.rng.pick(&d.openers);
                let tail = g.rng.pick(&d.user_tails);
                let body = g.expand(u, &none, &mut BTreeMap::new());
                // after an opener the sentence goes on in lower case, unless it starts with a
                // slot (a name keeps its capital) or is English "I"
                let body = if opener.is_empty() || u.starts_with("{{") {
                    body
                } else {
                    decapitalize(&body)
                };
                capitalize(&format!("{opener}{body}{tail}"))
            });
            out.push(Raw::Text {
                role: "user",
                text: user,
            });
            // now and then a longer answer: a second reply of the same topic
            let extra = if self.rng.chance(0.3) {
                let x = self.least_used(&topic.assistant, &taken);
                taken.push(x);
                Some(x)
            } else {
                None
            };
            let reply = self.fresh(|g| {
                let head = g.rng.pick(&d.assistant_heads);
                let mut drawn = BTreeMap::new();
                let mut text = format!("{head}{}", g.expand(r, &none, &mut drawn));
                if let Some(x) = extra {
                    text.push(' ');
                    text.push_str(&g.expand(x, &none, &mut drawn));
                }
                capitalize(&text)
            });
            out.push(Raw::Text {
                role: "assistant",
                text: reply,
            });
        }
        out
    }

    /// A task: the user asks, the assistant reads, runs, searches and edits, and reports.
    fn agent_episode(&mut self) -> Vec<Raw> {
        let file: &'a LangFile = self.file;
        let a = &file.agent;
        let entity = self.rng.pick(&self.shared.entities).clone();
        let say = |g: &mut Self, list: &'a [String]| {
            let t = g.rng.pick(list);
            g.expand(t, &entity, &mut BTreeMap::new())
        };
        let mut out = Vec::new();
        let task = self.fresh(|g| say(g, &a.tasks));
        out.push(Raw::Text {
            role: "user",
            text: task,
        });
        let steps = self.rng.range(2, 6);
        for _ in 0..steps {
            out.extend(self.tool_step(&entity));
            if self.rng.chance(0.25) {
                let text = self.fresh(|g| say(g, &a.findings));
                out.push(Raw::Text {
                    role: "assistant",
                    text,
                });
            }
        }
        let last: &'a [String] = if self.rng.chance(0.6) {
            &a.summaries
        } else {
            &a.findings
        };
        let text = self.fresh(|g| say(g, last));
        out.push(Raw::Text {
            role: "assistant",
            text,
        });
        if self.rng.chance(0.35) {
            let text = self.fresh(|g| say(g, &a.followups));
            out.push(Raw::Text { role: "user", text });
            let reply: &'a [String] = if self.rng.chance(0.5) {
                &a.summaries
            } else {
                &a.acks
            };
            let text = self.fresh(|g| say(g, reply));
            out.push(Raw::Text {
                role: "assistant",
                text,
            });
        }
        out
    }

    /// One tool call and its result (with the assistant's narration, sometimes).
    fn tool_step(&mut self, entity: &BTreeMap<String, String>) -> Vec<Raw> {
        let shared: &'a Shared = self.shared;
        let file: &'a LangFile = self.file;
        for _ in 0..DRAWS {
            let mut drawn = BTreeMap::new();
            let (name, args, result, key, target) = match self.rng.below(20) {
                0..=6 => {
                    let f = self.rng.pick(&shared.files);
                    let path = self.expand(&f.path, entity, &mut drawn);
                    let text = self.expand(&f.text, entity, &mut drawn);
                    ("read_file", json!({ "path": path }), text, "path", path)
                }
                7..=12 => {
                    let c = self.rng.pick(&shared.commands);
                    let command = self.expand(&c.command, entity, &mut drawn);
                    let output = self.expand(&c.output, entity, &mut drawn);
                    let args = json!({ "command": command });
                    ("run_command", args, output, "command", command)
                }
                13..=16 => {
                    let q = self.rng.pick(&shared.searches);
                    let pattern = self.expand(&q.pattern, entity, &mut drawn);
                    let path = self.expand(&q.path, entity, &mut drawn);
                    let output = self.expand(&q.output, entity, &mut drawn);
                    let args = json!({ "pattern": pattern, "path": path });
                    ("search", args, output, "pattern", pattern)
                }
                _ => {
                    let e = self.rng.pick(&shared.edits);
                    let path = self.expand(&e.path, entity, &mut drawn);
                    let old = self.expand(&e.old, entity, &mut drawn);
                    let new = self.expand(&e.new, entity, &mut drawn);
                    let mut b = entity.clone();
                    b.insert("path".to_owned(), path.clone());
                    let template = self.rng.pick(&shared.edit_results);
                    let result = self.expand(template, &b, &mut drawn);
                    let args = json!({ "path": path, "old": old, "new": new });
                    ("edit_file", args, result, "path", path)
                }
            };
            let mut b = entity.clone();
            b.insert(key.to_owned(), target);
            let list: &'a [String] = file.agent.narration.get(name).map_or(&[], Vec::as_slice);
            let narration = if !list.is_empty() && self.rng.chance(0.55) {
                let template = self.rng.pick(list);
                Some(self.expand(template, &b, &mut drawn))
            } else {
                None
            };
            let call_text = args.to_string();
            let texts = [narration.as_deref().unwrap_or(""), &call_text, &result];
            if texts.iter().any(|t| self.holds_planted(t)) {
                continue;
            }
            let mut out = Vec::new();
            let inline = self.rng.chance(0.5);
            let call_note = match narration {
                Some(n) if inline => Some(n),
                Some(n) => {
                    out.push(Raw::Text {
                        role: "assistant",
                        text: n,
                    });
                    None
                }
                None => None,
            };
            out.push(Raw::Call {
                text: call_note,
                name: name.to_owned(),
                args,
            });
            out.push(Raw::Result { text: result });
            return out;
        }
        Vec::new()
    }

    /// One of `xs` not in `taken`, among those this session used least (ties at random), so a
    /// template comes back as late as possible.
    fn least_used<'x>(&mut self, xs: &'x [String], taken: &[&String]) -> &'x String {
        let free: Vec<&'x String> = xs
            .iter()
            .filter(|x| !taken.iter().any(|t| std::ptr::eq(*t, *x)))
            .collect();
        let free = if free.is_empty() {
            xs.iter().collect()
        } else {
            free
        };
        let uses = |x: &String| {
            self.uses
                .get(&(x as *const String as usize))
                .copied()
                .unwrap_or(0)
        };
        let least = free.iter().map(|x| uses(x)).min().unwrap_or(0);
        let candidates: Vec<&'x String> = free.into_iter().filter(|x| uses(x) == least).collect();
        let x = *self.rng.pick(&candidates);
        *self.uses.entry(x as *const String as usize).or_default() += 1;
        x
    }

    /// A filler text from `draw` that is new in this session and holds no planted value
    /// (the last draw is taken if none is).
    fn fresh(&mut self, mut draw: impl FnMut(&mut Self) -> String) -> String {
        let mut text = String::new();
        for i in 0..DRAWS {
            text = draw(self);
            let clean = !self.holds_planted(&text);
            if clean && (self.seen.insert(text.clone()) || i + 1 == DRAWS) {
                return text;
            }
        }
        text
    }

    fn holds_planted(&self, text: &str) -> bool {
        let t = normalize(text);
        self.forbidden.iter().any(|v| t.contains(v.as_str()))
    }

    /// Fill `{{slot}}`s: `bound` first (entity fields, fact values, the step's target), then
    /// what this message already drew, then a fresh draw (numbers, hex, the lists of the
    /// language and of agent.json, themselves expanded). Unknown slots stay as written.
    fn expand(
        &mut self,
        template: &str,
        bound: &BTreeMap<String, String>,
        drawn: &mut BTreeMap<String, String>,
    ) -> String {
        self.expand_depth(template, bound, drawn, 0)
    }

    fn expand_depth(
        &mut self,
        template: &str,
        bound: &BTreeMap<String, String>,
        drawn: &mut BTreeMap<String, String>,
        depth: usize,
    ) -> String {
        let mut out = String::with_capacity(template.len() + 16);
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find("}}") else {
                out.push_str(&rest[start..]);
                return out;
            };
            let token = &after[..end];
            let valid = !token.is_empty()
                && token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'));
            if !valid {
                out.push_str("{{");
                rest = after;
                continue;
            }
            let value = if let Some(v) = bound.get(token) {
                Some(v.clone())
            } else if let Some(v) = drawn.get(token) {
                Some(v.clone())
            } else {
                let v = self.draw(token, bound, drawn, depth);
                if let Some(v) = &v {
                    drawn.insert(token.to_owned(), v.clone());
                }
                v
            };
            match value {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("{{");
                    out.push_str(token);
                    out.push_str("}}");
                }
            }
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// A fresh value for a slot token (`name`, `name.2`, `num:LO-HI`, `hex`).
    fn draw(
        &mut self,
        token: &str,
        bound: &BTreeMap<String, String>,
        drawn: &mut BTreeMap<String, String>,
        depth: usize,
    ) -> Option<String> {
        let name = token.split('.').next().unwrap_or(token);
        if let Some(range) = name.strip_prefix("num:") {
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
            return Some(self.rng.range(lo, hi.max(lo)).to_string());
        }
        if name == "hex" {
            return Some(format!("{:07x}", self.rng.next() & 0xfff_ffff));
        }
        let (file, shared): (&'a LangFile, &'a Shared) = (self.file, self.shared);
        let list = file
            .dialogue
            .slots
            .get(name)
            .or_else(|| shared.slots.get(name))?;
        if list.is_empty() {
            return None;
        }
        let picked = self.rng.pick(list).clone();
        if depth < 3 && picked.contains("{{") {
            Some(self.expand_depth(&picked, bound, drawn, depth + 1))
        } else {
            Some(picked)
        }
    }

    /// Messages as `bib pack` reads them, with times: a few minutes apart, tool results
    /// seconds after their call, and a new day every 40 to 90 messages.
    fn render(&mut self, raws: &[(Raw, Origin)]) -> (Vec<Value>, Vec<i64>) {
        let start_day = self.rng.below(28);
        let mut t = utc_ms(2026, 3, 2, 9, 0) + start_day as i64 * 86_400_000;
        let mut today = 0usize;
        let mut day_len = self.rng.range(40, 90);
        let mut call_id = 0usize;
        let mut messages = Vec::with_capacity(raws.len());
        let mut times = Vec::with_capacity(raws.len());
        for (i, (raw, _)) in raws.iter().enumerate() {
            let starts_turn = matches!(raw, Raw::Text { role: "user", .. });
            if starts_turn && today >= day_len {
                // next morning, 08:00 to 10:00
                let day = t.div_euclid(86_400_000) + 1;
                t = day * 86_400_000 + 8 * 3_600_000 + self.rng.below(120) as i64 * 60_000;
                today = 0;
                day_len = self.rng.range(40, 90);
            } else if i > 0 {
                let secs = match raw {
                    Raw::Result { .. } => self.rng.range(1, 20),
                    _ => self.rng.range(20, 240),
                };
                t += secs as i64 * 1000;
            }
            today += 1;
            times.push(t);
            let ts = rfc3339_utc(t);
            messages.push(match raw {
                Raw::Text { role, text } => json!({"role": role, "content": text, "ts": ts}),
                Raw::Call { text, name, args } => {
                    call_id += 1;
                    json!({
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [{
                            "id": format!("call_{call_id}"),
                            "type": "function",
                            "function": {"name": name, "arguments": args.to_string()},
                        }],
                        "ts": ts,
                    })
                }
                Raw::Result { text } => json!({
                    "role": "tool",
                    "tool_call_id": format!("call_{call_id}"),
                    "content": text,
                    "ts": ts,
                }),
            });
        }
        (messages, times)
    }

    /// The probe of chosen fact `i`: its question, the current value, and its tags.
    fn probe(
        &self,
        c: &Chosen<'_>,
        i: usize,
        messages: &[Value],
        origins: &[Origin],
        times: &[i64],
    ) -> Probe {
        let current = c.corrected.as_ref().unwrap_or(&c.value);
        let key = normalize(current);
        // the message that holds the current value: in the correction, else in the plant
        let group = |o: &Origin| match (o, c.corrected.is_some()) {
            (Origin::Correction(n), true) | (Origin::Plant(n), false) => *n == i,
            _ => false,
        };
        let at = (0..origins.len())
            .find(|&j| group(&origins[j]) && normalize(&message_text(&messages[j])).contains(&key))
            .or_else(|| origins.iter().position(group))
            .unwrap_or(0);
        Probe {
            q: c.question.clone(),
            expect: vec![current.clone()],
            absent: Vec::new(),
            tags: ProbeTags {
                fact: c.fact.id.clone(),
                lang: self.file.lang.clone(),
                kind: Some(self.kind),
                style: Some(c.style),
                how: c.how.clone(),
                superseded: c.corrected.is_some(),
                old: c
                    .corrected
                    .as_ref()
                    .map(|_| vec![c.value.clone()])
                    .unwrap_or_default(),
                date: times.get(at).map(|&t| utc_day(t)),
                depth: Some(Depth::of(at, origins.len())),
            },
        }
    }
}

/// A generated message's own text: its content and its tool calls' arguments.
pub fn message_text(m: &Value) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if let Some(c) = m["content"].as_str() {
        parts.push(c);
    }
    if let Some(calls) = m["tool_calls"].as_array() {
        parts.extend(
            calls
                .iter()
                .filter_map(|c| c["function"]["arguments"].as_str()),
        );
    }
    parts.join("\n")
}

/// The first letter in upper case (slot values start sentences in lower case).
fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The first letter in lower case, unless the first word is English "I" ("I'm", "I've").
fn decapitalize(s: &str) -> String {
    let Some((i, c)) = s.char_indices().find(|(_, c)| c.is_alphabetic()) else {
        return s.to_owned();
    };
    let word = &s[i..];
    if word == "I" || word.starts_with("I ") || word.starts_with("I'") {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..i]);
    out.extend(c.to_lowercase());
    out.push_str(&s[i + c.len_utf8()..]);
    out
}

/// FNV-1a of a name: a session's stream is the seed mixed with its name, so adding a session
/// does not change the others.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64: small, fast, and the same numbers everywhere for a seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; the modulo bias is below 2⁻⁵⁰ for the sizes used here).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn pick<'x, T>(&mut self, xs: &'x [T]) -> &'x T {
        &xs[self.below(xs.len())]
    }

    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few seeds, the default first: every property must hold for any seed.
    const SEEDS: [u64; 4] = [DEFAULT_SEED, 1, 2, 0xdead_beef];

    fn sets() -> Vec<Vec<GeneratedSession>> {
        SEEDS.iter().map(|&s| generate(s).unwrap()).collect()
    }

    fn texts(s: &GeneratedSession) -> Vec<String> {
        s.messages
            .iter()
            .map(|m| normalize(&message_text(m)))
            .collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_set() {
        let (a, b) = (
            generate(DEFAULT_SEED).unwrap(),
            generate(DEFAULT_SEED).unwrap(),
        );
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.name, y.name);
            assert_eq!(x.messages, y.messages);
            assert_eq!(x.probes, y.probes);
        }
        let other = generate(DEFAULT_SEED + 1).unwrap();
        assert_ne!(
            a[0].messages, other[0].messages,
            "another seed, another set"
        );
    }

    #[test]
    fn sessions_are_long_cover_six_languages_and_both_kinds_and_read_as_bib_pack_input() {
        for set in sets() {
            assert!(set.len() >= 10, "{} sessions", set.len());
            let langs: HashSet<&str> = set.iter().map(|s| s.lang.as_str()).collect();
            assert!(langs.len() >= 6, "{langs:?}");
            for kind in [SessionKind::Dialogue, SessionKind::Agent] {
                assert!(set.iter().any(|s| s.kind == kind));
            }
            for s in &set {
                assert!(
                    s.messages.len() >= MIN_MESSAGES,
                    "{}: {}",
                    s.name,
                    s.messages.len()
                );
                assert_eq!(s.origins.len(), s.messages.len());
                let history =
                    bib_pack::input::history_from_value(&Value::Array(s.messages.clone()))
                        .unwrap_or_else(|e| panic!("{}: {e}", s.name));
                assert!(history.len() >= MIN_MESSAGES);
                assert!(
                    history.iter().all(|m| m.ts.is_some()),
                    "{}: a message without ts",
                    s.name
                );
                assert!(
                    history.windows(2).all(|w| w[0].ts <= w[1].ts),
                    "{}: times go back",
                    s.name
                );
                for t in texts(s) {
                    assert!(!t.contains("{{"), "{}: unfilled slot in {t}", s.name);
                }
                if s.kind == SessionKind::Agent {
                    let calls = s
                        .messages
                        .iter()
                        .filter(|m| m["tool_calls"].is_array())
                        .count();
                    let results = s.messages.iter().filter(|m| m["role"] == "tool").count();
                    assert!(
                        calls >= 50 && calls == results,
                        "{}: {calls} calls, {results} results",
                        s.name
                    );
                    assert!(history
                        .iter()
                        .any(|m| m.content.starts_with("[Tool result]: ")));
                }
            }
        }
    }

    #[test]
    fn filler_varies() {
        for set in sets() {
            for s in &set {
                let all = texts(s);
                let distinct: HashSet<&String> = all.iter().collect();
                // an agent re-reads files and reruns `npm run build` as real ones do; short
                // acknowledgements repeat in both kinds
                let share = match s.kind {
                    SessionKind::Dialogue => 9,
                    SessionKind::Agent => 8,
                };
                assert!(
                    distinct.len() * 10 >= all.len() * share,
                    "{}: {} distinct of {}",
                    s.name,
                    distinct.len(),
                    all.len()
                );
            }
        }
    }

    #[test]
    fn probes_are_tagged_and_at_least_sixty_percent_paraphrased() {
        for set in sets() {
            let (mut total, mut para) = (0, 0);
            for s in &set {
                let n = s.probes.len();
                assert!((5..=8).contains(&n), "{}: {n} probes", s.name);
                let p = s
                    .probes
                    .iter()
                    .filter(|p| p.tags.style == Some(QuestionStyle::Paraphrase))
                    .count();
                assert!(p * 10 >= n * 6, "{}: {p} of {n} paraphrased", s.name);
                let superseded = s.probes.iter().filter(|p| p.tags.superseded).count();
                assert!(
                    superseded >= MIN_CORRECTED,
                    "{}: {superseded} superseded",
                    s.name
                );
                for p in &s.probes {
                    let t = &p.tags;
                    assert_eq!(t.lang, s.lang);
                    assert_eq!(t.kind, Some(s.kind));
                    assert!(t.style.is_some() && t.depth.is_some() && t.date.is_some());
                    assert_eq!(
                        t.how.is_empty(),
                        t.style == Some(QuestionStyle::Direct),
                        "{p:?}"
                    );
                    assert_eq!(t.old.is_empty(), !t.superseded);
                    assert_eq!(p.expect.len(), 1);
                }
                total += n;
                para += p;
            }
            assert!(para * 10 >= total * 6);
        }
    }

    #[test]
    fn expected_values_occur_in_the_history_only_where_their_fact_was_planted() {
        for set in sets() {
            for s in &set {
                let history =
                    bib_pack::input::history_from_value(&Value::Array(s.messages.clone())).unwrap();
                let flat = normalize(
                    &history
                        .iter()
                        .map(|m| m.content.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
                let texts = texts(s);
                for (i, p) in s.probes.iter().enumerate() {
                    for e in p.expect.iter().chain(&p.tags.old) {
                        let e = normalize(e);
                        assert!(flat.contains(&e), "{}: `{e}` not in the history", s.name);
                        assert!(
                            !normalize(&p.q).contains(&e),
                            "{}: the question gives the answer away: {}",
                            s.name,
                            p.q
                        );
                        for (j, t) in texts.iter().enumerate() {
                            if t.contains(&e) {
                                assert!(
                                    matches!(s.origins[j], Origin::Plant(n) | Origin::Correction(n) if n == i),
                                    "{}: `{e}` (fact {}) also in message {j} ({:?}): {t}",
                                    s.name,
                                    p.tags.fact,
                                    s.origins[j]
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn superseded_facts_have_a_later_dated_correction_with_the_current_value() {
        for set in sets() {
            for s in &set {
                let texts = texts(s);
                let ts = |j: usize| s.messages[j]["ts"].as_str().unwrap().to_owned();
                for (i, p) in s.probes.iter().enumerate() {
                    let plants: Vec<usize> = (0..texts.len())
                        .filter(|&j| s.origins[j] == Origin::Plant(i))
                        .collect();
                    let fixes: Vec<usize> = (0..texts.len())
                        .filter(|&j| s.origins[j] == Origin::Correction(i))
                        .collect();
                    assert!(
                        !plants.is_empty(),
                        "{}: fact {} not planted",
                        s.name,
                        p.tags.fact
                    );
                    assert_eq!(
                        p.tags.superseded,
                        !fixes.is_empty(),
                        "{}: {}",
                        s.name,
                        p.tags.fact
                    );
                    let current = normalize(&p.expect[0]);
                    let holder = if p.tags.superseded {
                        assert!(fixes[0] > *plants.last().unwrap());
                        assert!(ts(fixes[0]) > ts(*plants.last().unwrap()));
                        let old = normalize(&p.tags.old[0]);
                        assert!(plants.iter().any(|&j| texts[j].contains(&old)));
                        assert!(!plants.iter().any(|&j| texts[j].contains(&current)));
                        fixes.iter().copied().find(|&j| texts[j].contains(&current))
                    } else {
                        plants
                            .iter()
                            .copied()
                            .find(|&j| texts[j].contains(&current))
                    };
                    let holder = holder.unwrap_or_else(|| panic!("{}: {:?}", s.name, p));
                    assert_eq!(p.tags.date.as_deref(), Some(&ts(holder)[..10]));
                    assert_eq!(p.tags.depth, Some(Depth::of(holder, texts.len())));
                }
            }
        }
    }

    #[test]
    fn facts_sit_at_every_depth_and_never_in_the_recent_turns() {
        for set in sets() {
            let depths: HashSet<Depth> = set
                .iter()
                .flat_map(|s| &s.probes)
                .filter_map(|p| p.tags.depth)
                .collect();
            assert_eq!(depths.len(), 3, "{depths:?}");
            for s in &set {
                let last = s
                    .origins
                    .iter()
                    .rposition(|o| matches!(o, Origin::Plant(_) | Origin::Correction(_)))
                    .unwrap();
                assert!(
                    last + TAIL <= s.origins.len(),
                    "{}: planted at {last} of {}",
                    s.name,
                    s.origins.len()
                );
            }
        }
    }

    #[test]
    fn every_language_file_has_both_pools_with_paraphrases_and_corrections() {
        let shared: Shared = serde_json::from_str(SHARED).unwrap();
        for (lang, text) in LANGS {
            let file: LangFile = serde_json::from_str(text).unwrap();
            for pool in [&file.facts.dialogue, &file.facts.agent] {
                assert!(
                    pool.len() >= FACTS_PER_SESSION.1,
                    "{lang}: {} facts",
                    pool.len()
                );
                assert!(pool.iter().filter(|f| !f.correction.is_empty()).count() >= MIN_CORRECTED);
                for f in pool.iter() {
                    assert!(!f.paraphrase.is_empty(), "{lang}/{}", f.id);
                    let n = if f.correction.is_empty() { 1 } else { 2 };
                    assert!(
                        f.values.iter().all(|v| v.len() == n),
                        "{lang}/{}: values",
                        f.id
                    );
                    for m in f.plant.iter().chain(&f.correction) {
                        if let Some(b) = &m.blob {
                            assert!(shared.blobs.contains_key(b), "{lang}/{}: blob {b}", f.id);
                        }
                    }
                }
            }
            for tool in ["read_file", "run_command", "search", "edit_file"] {
                assert!(
                    file.agent.narration.contains_key(tool),
                    "{lang}: narration for {tool}"
                );
            }
        }
    }

    #[test]
    fn sentences_go_on_in_lower_case_after_an_opener() {
        assert_eq!(decapitalize("¿Merece la pena?"), "¿merece la pena?");
        assert_eq!(decapitalize("I want soup"), "I want soup");
        assert_eq!(decapitalize("I'm tired"), "I'm tired");
        assert_eq!(decapitalize("Ich habe"), "ich habe");
        assert_eq!(capitalize("über"), "Über");
    }

    #[test]
    fn splitmix_is_the_reference_sequence() {
        // SplitMix64 from seed 0 (Vigna's reference implementation)
        let mut r = Rng::new(0);
        assert_eq!(r.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next(), 0x6e78_9e6a_a1b9_65f4);
    }
}
