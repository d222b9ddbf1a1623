//! The packing pipeline: prepare (dates, card, reserves, live question, BM25), score
//! (lexical or hybrid), select (dedup, pin, MMR, elastic fill), emit (budget contract).
//!
//! Per-line work (terms, token estimates, dedup keys) and per-message date annotation are
//! cached by content inside [`Packer`], so a long-lived packer indexes each line once — "index
//! at write time" — and a pack costs one pass of integer work over the history.

use std::sync::{Arc, OnceLock};

use bib_embed::{EmbedKind, Embedder};
use bib_text::vectors::quantized::{DotKernel, QuantizedVectors};
use regex::Regex;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::dates::annotate_dates_with;
use crate::lang::Lang;
use crate::ledger::{build_ledger_pairs, render_card};
use crate::options::{autotune, PackOptions};
use crate::sim::{dedup_key, jaccard, rrf_fuse_weighted, sim_tokens};
use crate::tokens::{
    estimate_from, estimate_tokens, pieces_and_len, prefix_to_fit, slice16, tail16,
    truncate_to_fit, truncate_to_tokens, utf16_len,
};
use crate::{Message, PackedMessage};
use bib_embed::EmbeddingCache;

/// Relevant lines live in the stratum [10, 11]; filler below 1. The gap is wider than any MMR
/// penalty (≤ 0.8), so diversity reorders within a stratum and never lifts filler above
/// evidence.
const RELEVANT: f64 = 10.0;

/// A line's score: `RELEVANT` + its relevance in [0, 1] when it has one; else its recency when
/// recency breaks ties, else 0. The first line of a message (its provenance header) outranks
/// plain filler.
fn stratum_score(it: &Item, relevance: Option<f64>, rec_tie: bool) -> f64 {
    let s = match relevance {
        Some(r) => RELEVANT + r,
        None if rec_tie => it.rec,
        None => 0.0,
    };
    if it.first {
        s.max(0.5)
    } else {
        s
    }
}

/// How a pack chose its lines (stats field `mode`: `lexical`, `hybrid` or `none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PackMode {
    /// An empty history: nothing to choose.
    #[default]
    None,
    /// BM25 only.
    Lexical,
    /// BM25 and embeddings, fused by rank.
    Hybrid,
}

impl PackMode {
    /// The name in the stats.
    pub fn as_str(self) -> &'static str {
        match self {
            PackMode::None => "none",
            PackMode::Lexical => "lexical",
            PackMode::Hybrid => "hybrid",
        }
    }
}

impl std::fmt::Display for PackMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Statistics of one pack. Field names are stable (external checks read them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PackStats {
    pub mode: PackMode,
    /// The budget asked for.
    pub budget: usize,
    /// Tokens of the input history (packer's estimate, +4 per message).
    pub history_tokens: usize,
    /// Tokens of the output (packer's estimate, +4 per message). Never above `budget` when
    /// `strict_budget` is on.
    pub output_tokens: usize,
    /// Tokens accounted by the selection (reference bookkeeping).
    pub used: usize,
    /// Emitted size as the reference estimates it.
    pub realized: usize,
    /// Messages in the input / output.
    pub input_messages: usize,
    pub output_messages: usize,
    /// Messages kept verbatim at the tail / head.
    pub recent: usize,
    pub head: usize,
    /// Lines collapsed as duplicates, lines pinned for naming a query term.
    pub deduped: usize,
    pub pinned: usize,
    /// Old messages with no line kept.
    pub dropped_msgs: usize,
    /// Tokens spent on the tally card (0 = none).
    pub card: usize,
    /// Compression pressure (budget / history), when autotune is on.
    pub pressure: Option<f64>,
    /// Blocks embedded (hybrid).
    pub blocks: Option<usize>,
    /// Why the hybrid path fell back to lexical, if it did.
    pub semantic_error: Option<String>,
    /// The embedding model of a hybrid pack (`None` when the pack is lexical).
    pub model: Option<String>,
}

/// The packer's result: the packed messages and what happened.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Packed {
    pub messages: Vec<PackedMessage>,
    pub stats: PackStats,
}

/// (UTC day number, annotated content or `None` when unchanged).
type DayAnnotation = (i64, Option<Arc<str>>);

struct LineInfo {
    text: Box<str>,
    terms: Box<[u32]>,
    tok: u32,
    pieces: u32,
    len16: u32,
    /// Interned dedup key; 0 = empty key (never deduplicated).
    dkey: u32,
    /// Holds a moment (`kinds::holds_a_time`).
    timed: bool,
    /// Holds a number (`kinds::holds_a_number`).
    numbered: bool,
    /// Names a place (`kinds::holds_a_place`).
    placed: bool,
}

struct MsgInfo {
    tok: u32,
    lines: Box<[u32]>,
    /// Bytes of the `Name` of a `Name: text` message ([`speaker_of`]), found once.
    speaker_len: Option<u32>,
    /// Whether the message is a tool result (`PackOptions::is_tool`), found once.
    tool: bool,
    /// The message's function words (`lang::Counts`), counted on first use: the history's
    /// language is decided on every pack ([`Packer::history_lang`]).
    lang_counts: Option<crate::lang::Counts>,
    /// The message's semantic units as (first line, end line, unit id), built on first use.
    units: Option<Box<[(u32, u32, u32)]>>,
}

impl MsgInfo {
    /// The message's semantic units (none until `Packer::build_units` has run for it).
    fn units(&self) -> &[(u32, u32, u32)] {
        self.units.as_deref().unwrap_or(&[])
    }
}

/// One distinct unit text and the row of its vector under `Packer::unit_model` in
/// `Packer::unit_rows` (filled on first use from the packer's embedding cache, so a pack does
/// no hashing for units already seen).
struct UnitInfo {
    text: Box<str>,
    row: Option<u32>,
}

/// A vector and its squared norm.
type NormedVector = (Arc<[f32]>, f32);

/// A history packer with content caches. Reuse one per session: each line is tokenised,
/// estimated and keyed once, each message's dates resolved once, each block embedded once.
pub struct Packer {
    opts: PackOptions,
    vocab: FxHashMap<Box<str>, u32>,
    dkeys: FxHashMap<Box<str>, u32>,
    line_ids: FxHashMap<Box<str>, u32>,
    lines: Vec<LineInfo>,
    msg_ids: FxHashMap<Box<str>, u32>,
    msgs: Vec<MsgInfo>,
    /// content → [(UTC day, annotated content)] (None = unchanged).
    annotations: FxHashMap<Box<str>, Vec<DayAnnotation>>,
    qmark: Vec<u16>,
    embed_cache: EmbeddingCache,
    unit_ids: FxHashMap<Box<str>, u32>,
    units: Vec<UnitInfo>,
    /// The units' vectors, 8 bits per component: every pack compares the question with every
    /// unit of the history, and a quarter of the bytes keeps a long session's vectors in the
    /// core's cache (`None` until the first unit is embedded).
    unit_rows: Option<QuantizedVectors>,
    /// The integer dot product this CPU runs best (all give the same scores).
    dot_kernel: DotKernel,
    /// The model the vectors in `units` and `blocks` come from.
    unit_model: String,
    /// The last pack's blocks (their lines' ids) with their vectors and squared norms: a
    /// history packed again for another question has the same blocks, and finds them here
    /// without joining and hashing their text. Only the last pack's are kept, so it cannot
    /// grow with the session.
    blocks: FxHashMap<Box<[u32]>, NormedVector>,
    /// The mean of the last pack's history units, for `sem_unit_center`.
    center: UnitMean,
}

/// The mean vector of a history's distinct units and each row's dot product with it, kept
/// from one pack to the next: packed again for another question the history has the same
/// old messages and reuses all of it; when they differ (the history grew, another budget
/// kept other turns verbatim), only the messages past the common prefix are taken away and
/// added. The sum is kept in fixed point, so it does not depend on that order: a history
/// gets the same scores whatever was packed before it.
#[derive(Debug, Default)]
struct UnitMean {
    /// The messages summed, in history order.
    msgs: Vec<u32>,
    /// How many units of `msgs` have each row: a row is in the sum while it is above 0.
    uses: Vec<u32>,
    /// The rows in use, summed in fixed point (`bib_text::vectors::quantized::FIXED_ONE`).
    sum: Vec<i64>,
    count: usize,
    /// The mean, and every row's dot product with it (`None` when it must be computed
    /// again).
    mean: Vec<f32>,
    row_dots: Option<Vec<f32>>,
}

impl std::fmt::Debug for Packer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("opts", &self.opts)
            .field("lines", &self.lines.len())
            .field("messages", &self.msgs.len())
            .field("embed_cache", &self.embed_cache.len())
            .finish()
    }
}

/// Per-line state of one pack.
#[derive(Clone)]
struct Item {
    line: u32,
    first: bool,
    stale: bool,
    bm: f64,
    sem: f64,
    rec: f64,
    score: f64,
    q_hit: bool,
    dup: bool,
    pin: bool,
    /// Said by the one speaker the question names.
    by_named: bool,
    /// Holds the kind of fact the question asks for (a moment, a quantity, a place).
    kind_hit: bool,
}

/// How [`Packer::render`] notes fully omitted messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notes {
    /// One `system` note per run of omitted messages, in its place.
    PerGap,
    /// One `system` note for them all, in the place of the first run ("… omitted from here
    /// on"): what the selection's bookkeeping charges, and what a tight budget falls back to.
    /// Charging a note per run in the selection cost 2 points of LoCoMo recall at 3,000 and
    /// 8,000 tokens (68.15 → 66.11 %, 75.70 → 73.53 %): the notes crowd out evidence.
    One,
    /// None (the last thing the budget contract gives up before kept turns).
    Off,
}

/// What `prepare` hands to scoring and selection.
struct Ctx {
    /// Effective budget (after the card).
    budget: usize,
    used: usize,
    recent: Vec<PackedMessage>,
    head: Vec<PackedMessage>,
    card: Option<PackedMessage>,
    card_tok: usize,
    /// Indices into the history of the old messages (between head and recent).
    old: Vec<usize>,
    /// Message ids (cache) of the old messages, parallel to `old`.
    old_msg: Vec<u32>,
    items: Vec<Item>,
    query: String,
    rec_tie: bool,
    pressure: Option<f64>,
    history_tokens: usize,
    done: bool,
    keep: Vec<bool>,
    per_line_cap: usize,
    /// Tokens of the last render (exact, from cached per-line counts).
    rendered_tokens: Option<usize>,
    /// The language of the omission notes.
    lang: Lang,
    /// Whether the lines were scored by fusing BM25 with embeddings.
    hybrid: bool,
}

/// The history `prepare` works on: the messages, their contents with dates annotated, and
/// their message ids in the packer's cache, all parallel.
#[derive(Clone, Copy)]
struct PreparedHistory<'a> {
    messages: &'a [Message],
    contents: &'a [&'a str],
    msg_ids: &'a [u32],
}

/// The live question: the last user turn that is not a tool result. Scored against it,
/// not against the opening task — what matters changes every turn.
fn live_question(input: PreparedHistory<'_>, o: &PackOptions) -> String {
    input
        .messages
        .iter()
        .zip(input.contents)
        .rev()
        .find(|(m, c)| m.role == "user" && !o.is_tool(c))
        .map(|(_, c)| (*c).to_owned())
        .unwrap_or_default()
}

impl Default for Packer {
    fn default() -> Self {
        Self::new(PackOptions::default())
    }
}

fn mark_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#""tool"\s*:\s*"([^"]+)"[\s\S]{0,200}?"(?:path|file|command)"\s*:\s*"([^"]+)""#)
            .expect("valid regex")
    })
}

/// Indices (into `contents`) of tool results superseded by a newer result for the same target.
///
/// An agent reads `shell.js` at turn 3 and edits it at turn 20; BM25 finds both versions and
/// the old one scores as high — the model sees stale content with no sign it is stale. The
/// target comes from the assistant call just before the result (the result only names the
/// tool); "name + turn" identifies content, as "name + mtime" does for a folder watcher.
/// Demoted, not deleted — and, measured honestly, asking explicitly for the old value brings
/// it back 0 of 8 times: reachable is not retrievable.
pub fn mark_superseded(contents: &[&str], o: &PackOptions) -> FxHashSet<usize> {
    superseded_results(contents, |i| o.is_tool(contents[i]), o)
}

/// [`mark_superseded`] with whether `contents[i]` is a tool result given by `is_tool(i)`
/// (the packer remembers it per message).
fn superseded_results(
    contents: &[&str],
    is_tool: impl Fn(usize) -> bool,
    o: &PackOptions,
) -> FxHashSet<usize> {
    let mut last_for: FxHashMap<String, usize> = FxHashMap::default();
    let mut target_of: Vec<(usize, String)> = Vec::new();
    for i in 0..contents.len() {
        if i == 0 || !is_tool(i) {
            continue;
        }
        let key = if o.supersede_full_target {
            full_target_key(contents[i - 1])
        } else {
            None
        };
        let key = match key {
            Some(k) => k,
            None => {
                let Some(m) = mark_re().captures(contents[i - 1]) else {
                    continue;
                };
                let tool = m.get(1).map_or("", |x| x.as_str());
                format!(
                    "{}:{}",
                    tool.split('.').next().unwrap_or(""),
                    m.get(2).map_or("", |x| x.as_str())
                )
            }
        };
        last_for.insert(key.clone(), i);
        target_of.push((i, key));
    }
    target_of
        .into_iter()
        .filter(|(i, k)| last_for.get(k) != Some(i))
        .map(|(i, _)| i)
        .collect()
}

/// The arguments that name what a call looked at: a search's pattern is as much its target as
/// its folder.
const TARGET_ARGS: [&str; 7] = [
    "path", "file", "command", "pattern", "query", "regex", "glob",
];

/// The identity of a call written as one JSON object (`{"tool": …, "path": …, "pattern": …}`,
/// as `input` flattens tool calls): the tool's name and every target argument. `None` when the
/// call is not such an object or names no target. Two searches of `src` for different
/// patterns are different reads; with the path alone the later one hid the earlier result.
fn full_target_key(call: &str) -> Option<String> {
    // the call is the message's last line (narration may come before it)
    let line = call.trim().lines().last()?;
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    let obj = v.as_object()?;
    let tool = obj.get("tool")?.as_str()?;
    let mut key = tool.split('.').next().unwrap_or("").to_owned();
    let mut any = false;
    for a in TARGET_ARGS {
        if let Some(t) = obj.get(a).and_then(serde_json::Value::as_str) {
            key.push('\u{1f}');
            key.push_str(a);
            key.push('=');
            key.push_str(t);
            any = true;
        }
    }
    any.then_some(key)
}

/// A relevance `r` in [0, 1] lifted for a line of the speaker the question names
/// ([`PackOptions::speaker_weight`]) and for a line holding the kind of fact it asks for
/// ([`PackOptions::kind_weight`]), still in [0, 1].
fn lift(r: f64, it: &Item, o: &PackOptions) -> f64 {
    let (ws, wt) = (o.speaker_weight.max(0.0), o.kind_weight.max(0.0));
    if ws + wt <= 0.0 {
        return r;
    }
    let gain = if it.by_named { ws } else { 0.0 } + if it.kind_hit { wt } else { 0.0 };
    (r + gain) / (1.0 + ws + wt)
}

/// What each message is packed as: its content with date notes (`dated[i]`) or as given.
fn contents_of<'a>(history: &'a [Message], dated: &'a [Option<Arc<str>>]) -> Vec<&'a str> {
    history
        .iter()
        .zip(dated)
        .map(|(m, d)| d.as_deref().unwrap_or(m.content.as_str()))
        .collect()
}

/// The speaker of a `Name: text` message (a name of one to three capitalised words).
fn speaker_of(content: &str) -> Option<&str> {
    let (name, _) = content.split_once(": ")?;
    let words: Vec<&str> = name.split_whitespace().collect();
    let ok = !words.is_empty()
        && words.len() <= 3
        && name.len() <= 40
        && words
            .iter()
            .all(|w| w.chars().next().is_some_and(char::is_uppercase));
    ok.then_some(name)
}

/// The one speaker of the history the question names (none when it names several or none).
fn named_speaker<'a>(speakers: &[Option<&'a str>], query: &str) -> Option<&'a str> {
    let mut names: Vec<&str> = speakers.iter().flatten().copied().collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 2 {
        return None;
    }
    let q = query.to_lowercase();
    let words: Vec<&str> = q.split(|c: char| !c.is_alphanumeric()).collect();
    let hit: Vec<&str> = names
        .into_iter()
        .filter(|n| {
            let first = n.split_whitespace().next().unwrap_or("").to_lowercase();
            words.contains(&first.as_str())
        })
        .collect();
    (hit.len() == 1).then(|| hit[0])
}

/// `clampMsg`: cut messages longer than `max_chars` UTF-16 units in the middle (70 % head).
fn clamp_content(c: &str, max_chars: usize) -> Option<String> {
    let len = utf16_len(c);
    if len <= max_chars {
        return None;
    }
    let head = max_chars * 7 / 10;
    let tail = max_chars.saturating_sub(head + 40);
    let tail_s = if tail == 0 { "" } else { tail16(c, tail) };
    Some(format!(
        "{}\n… [recortado {} caracteres] …\n{}",
        slice16(c, 0, head),
        len - max_chars,
        tail_s
    ))
}

fn msg_tok(c: &str) -> usize {
    estimate_tokens(c) + 4
}

/// Total tokens of a message list by the packer's estimate (+4 per message).
pub fn output_tokens(msgs: &[PackedMessage]) -> usize {
    msgs.iter().map(|m| msg_tok(&m.content)).sum()
}

impl Packer {
    /// A packer with these options.
    pub fn new(opts: PackOptions) -> Self {
        let opts_units = opts.sem_units;
        Self {
            opts,
            vocab: FxHashMap::default(),
            dkeys: FxHashMap::default(),
            line_ids: FxHashMap::default(),
            lines: Vec::new(),
            msg_ids: FxHashMap::default(),
            msgs: Vec::new(),
            annotations: FxHashMap::default(),
            qmark: Vec::new(),
            // The reference keeps 4,000 vectors; units need one per message part.
            embed_cache: EmbeddingCache::with_capacity(if opts_units { 100_000 } else { 4000 }),
            unit_ids: FxHashMap::default(),
            units: Vec::new(),
            unit_rows: None,
            dot_kernel: DotKernel::detect(),
            unit_model: String::new(),
            blocks: FxHashMap::default(),
            center: UnitMean::default(),
        }
    }

    /// The options in use.
    pub fn options(&self) -> &PackOptions {
        &self.opts
    }

    /// Vectors encoded so far by the hybrid path (cache misses).
    pub fn embedded_texts(&self) -> usize {
        self.embed_cache.embedded()
    }

    /// Lexical pack: BM25 against the live question, IDF from this history, no heuristics.
    pub fn pack(&mut self, history: &[Message], budget: usize) -> Packed {
        self.run(history, budget, None)
    }

    /// Hybrid pack: BM25 and block embeddings fused by rank. Falls back to [`Packer::pack`]
    /// (recording why in `stats.semantic_error`) when embedding fails or `semantic` is off.
    pub fn pack_hybrid(
        &mut self,
        history: &[Message],
        budget: usize,
        embedder: &dyn Embedder,
    ) -> Packed {
        if !self.opts.semantic {
            return self.run(history, budget, None);
        }
        self.run(history, budget, Some(embedder))
    }

    fn maybe_trim_caches(&mut self) {
        // A long-lived packer must not grow without bound.
        if self.lines.len() > 500_000 || self.annotations.len() > 200_000 {
            self.vocab.clear();
            self.dkeys.clear();
            self.line_ids.clear();
            self.lines.clear();
            self.msg_ids.clear();
            self.msgs.clear();
            self.annotations.clear();
            self.qmark.clear();
            // Blocks are keyed by line ids, which now name other lines; the units' mean by
            // message ids.
            self.blocks.clear();
            self.center = UnitMean::default();
        }
        // ~2 KB per 512-d vector: at most ~100 MB of unit vectors
        if self.units.len() > 50_000 {
            self.unit_ids.clear();
            self.units.clear();
            self.unit_rows = None;
            self.center = UnitMean::default();
            for m in &mut self.msgs {
                m.units = None;
            }
        }
    }

    fn line_id(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.line_ids.get(text) {
            return id;
        }
        let ts = bib_text::terms::terms_with(text, &self.opts.terms);
        let mut ids = Vec::with_capacity(ts.len());
        for t in ts {
            let next = self.vocab.len() as u32;
            let id = *self.vocab.entry(t.into_boxed_str()).or_insert(next);
            ids.push(id);
        }
        let key = dedup_key(text);
        let dkey = if key.is_empty() {
            0
        } else {
            let next = self.dkeys.len() as u32 + 1;
            *self.dkeys.entry(key.into_boxed_str()).or_insert(next)
        };
        let id = self.lines.len() as u32;
        let (pieces, len16) = pieces_and_len(text);
        self.lines.push(LineInfo {
            text: text.into(),
            terms: ids.into_boxed_slice(),
            tok: estimate_from(pieces, len16) as u32,
            pieces: pieces as u32,
            len16: len16 as u32,
            dkey,
            timed: crate::kinds::holds_a_time(text),
            numbered: crate::kinds::holds_a_number(text),
            placed: crate::kinds::holds_a_place(text),
        });
        self.line_ids.insert(text.into(), id);
        id
    }

    fn msg_id(&mut self, content: &str) -> u32 {
        if let Some(&id) = self.msg_ids.get(content) {
            return id;
        }
        let lines: Vec<u32> = content.split('\n').map(|l| self.line_id(l)).collect();
        let id = self.msgs.len() as u32;
        self.msgs.push(MsgInfo {
            tok: msg_tok(content) as u32,
            lines: lines.into_boxed_slice(),
            speaker_len: speaker_of(content).map(|name| name.len() as u32),
            tool: self.opts.is_tool(content),
            lang_counts: None,
            units: None,
        });
        self.msg_ids.insert(content.into(), id);
        id
    }

    /// [`crate::lang::detect`] of `history`, with the counts of whole messages remembered by
    /// id. Message `i` has id `msg_ids[i]`, the id of `contents[i]`; only a message whose
    /// content is its text as given (no date note added) uses the remembered counts, so they
    /// are always that text's.
    fn history_lang(
        &mut self,
        history: &[Message],
        contents: &[&str],
        msg_ids: &[u32],
    ) -> crate::lang::Lang {
        crate::lang::detect_with(history, |i, text, whole| {
            let id = msg_ids
                .get(i)
                .filter(|_| whole && contents.get(i) == Some(&text));
            match id {
                Some(&id) => *self.msgs[id as usize]
                    .lang_counts
                    .get_or_insert_with(|| crate::lang::Counts::of(text)),
                None => crate::lang::Counts::of(text),
            }
        })
    }

    /// The time a packed copy of `m` carries (`message_times`).
    fn time_of(&self, m: &Message) -> Option<i64> {
        m.ts.filter(|_| self.opts.message_times)
    }

    /// One message's content with relative dates annotated (`None` = unchanged), cached per
    /// content and UTC day.
    fn dated_one(&mut self, m: &Message) -> Option<Arc<str>> {
        let o = &self.opts;
        let c = m.content.as_str();
        if !o.dates || c.is_empty() || o.is_tool(c) {
            return None;
        }
        let r = m.ts.or(o.now)?;
        let day = r.div_euclid(86_400_000);
        if let Some(v) = self.annotations.get(c) {
            if let Some((_, a)) = v.iter().find(|(d, _)| *d == day) {
                return a.clone();
            }
        }
        let a: Option<Arc<str>> = annotate_dates_with(c, r, o.date_notes).map(Arc::from);
        self.annotations
            .entry(c.into())
            .or_default()
            .push((day, a.clone()));
        a
    }

    fn run(
        &mut self,
        history: &[Message],
        budget: usize,
        embedder: Option<&dyn Embedder>,
    ) -> Packed {
        self.maybe_trim_caches();
        let dated: Vec<Option<Arc<str>>> = history.iter().map(|m| self.dated_one(m)).collect();
        let contents = contents_of(history, &dated);
        let msg_ids: Vec<u32> = contents.iter().map(|c| self.msg_id(c)).collect();
        self.run_prepared(history, &contents, &msg_ids, budget, embedder)
    }

    fn run_prepared(
        &mut self,
        history: &[Message],
        contents: &[&str],
        msg_ids: &[u32],
        budget: usize,
        embedder: Option<&dyn Embedder>,
    ) -> Packed {
        if history.is_empty() {
            return Packed {
                messages: Vec::new(),
                stats: PackStats {
                    mode: PackMode::None,
                    budget,
                    ..PackStats::default()
                },
            };
        }
        let mut ctx = self.prepare(history, contents, msg_ids, budget);
        let mut stats = PackStats {
            mode: PackMode::Lexical,
            budget,
            history_tokens: ctx.history_tokens,
            input_messages: history.len(),
            pressure: ctx.pressure,
            card: ctx.card_tok,
            ..PackStats::default()
        };
        if ctx.done {
            let mut messages: Vec<PackedMessage> = ctx.head.clone();
            messages.extend(ctx.card.clone());
            messages.extend(ctx.recent.clone());
            stats.used = ctx.used;
            stats.dropped_msgs = ctx.old.len();
            ctx.old.clear();
            ctx.old_msg.clear();
            return self.finish(messages, ctx, history, stats, budget);
        }

        let mut lexical = true;
        if let Some(e) = embedder {
            match self.semantic_scores(&mut ctx, e) {
                Ok(blocks) => {
                    lexical = false;
                    ctx.hybrid = true;
                    stats.mode = PackMode::Hybrid;
                    stats.blocks = Some(blocks);
                    stats.model = Some(e.model_id().to_string());
                }
                Err(err) => stats.semantic_error = Some(err),
            }
        }
        if lexical {
            let max_bm = ctx.items.iter().map(|it| it.bm).fold(0.0, f64::max);
            let max_bm = if max_bm == 0.0 { 1.0 } else { max_bm };
            let o = &self.opts;
            for it in &mut ctx.items {
                let rel = (it.bm > 0.0 && !it.stale).then(|| lift(it.bm / max_bm, it, o));
                it.score = stratum_score(it, rel, ctx.rec_tie);
            }
        }
        let (messages, sel) = self.select_and_emit(&mut ctx, history);
        stats.used = sel.used;
        stats.deduped = sel.deduped;
        stats.pinned = sel.pinned;
        stats.realized = sel.realized;
        stats.dropped_msgs = sel.dropped_msgs;
        self.finish(messages, ctx, history, stats, budget)
    }

    fn finish(
        &mut self,
        mut messages: Vec<PackedMessage>,
        mut ctx: Ctx,
        history: &[Message],
        mut stats: PackStats,
        budget: usize,
    ) -> Packed {
        let mut total = ctx
            .rendered_tokens
            .unwrap_or_else(|| output_tokens(&messages));
        debug_assert_eq!(total, output_tokens(&messages));
        if self.opts.strict_budget && total > budget {
            if ctx.keep.len() != ctx.items.len() {
                ctx.keep = vec![false; ctx.items.len()];
            }
            messages = self.enforce_budget(&mut ctx, history, budget);
            total = output_tokens(&messages);
        }
        stats.output_tokens = total;
        stats.output_messages = messages.len();
        stats.recent = ctx.recent.len();
        stats.head = ctx.head.len();
        Packed { messages, stats }
    }

    fn prepare(
        &mut self,
        history: &[Message],
        contents: &[&str],
        msg_ids: &[u32],
        budget: usize,
    ) -> Ctx {
        let input = PreparedHistory {
            messages: history,
            contents,
            msg_ids,
        };
        // The two write-time fixes come first: dates change the material (already applied to
        // `contents`), and the card is charged before the budget is split, which keeps it
        // unconditional without breaking the token contract.
        let (card, card_tok) = if self.opts.summary {
            self.tally_card(input, budget)
        } else {
            (None, 0)
        };
        let budget = 1usize.max(budget.saturating_sub(card_tok));

        let history_tokens: usize = msg_ids
            .iter()
            .map(|&id| self.msgs[id as usize].tok as usize)
            .sum();
        let tuned = autotune(history_tokens, budget, &self.opts);

        let (recent, used) = self.reserve_recent_turns(input, budget, tuned.recent_frac);
        let old_end = history.len() - recent.len();

        let mut ctx = Ctx {
            budget,
            used,
            recent,
            head: Vec::new(),
            card,
            card_tok,
            old: (0..old_end).collect(),
            old_msg: msg_ids[..old_end].to_vec(),
            items: Vec::new(),
            query: String::new(),
            rec_tie: tuned.recency_tiebreak,
            pressure: tuned.pressure,
            history_tokens,
            done: false,
            keep: Vec::new(),
            per_line_cap: 40,
            rendered_tokens: None,
            lang: self.history_lang(history, contents, msg_ids),
            hybrid: false,
        };
        if ctx.old.is_empty() || used >= budget {
            ctx.done = true;
            return ctx;
        }

        self.reserve_head_turns(&mut ctx, input, tuned.head_on);
        if ctx.old.is_empty() || ctx.used >= budget {
            ctx.done = true;
            return ctx;
        }

        ctx.query = live_question(input, &self.opts);
        self.score_old_lines_against_the_question(&mut ctx, contents);
        ctx
    }

    /// The tally card (`summary`), rendered from the ledger of the whole history within its
    /// ceiling (`summary_frac` of the budget, at least 24 tokens), and the tokens it costs.
    fn tally_card(
        &self,
        input: PreparedHistory<'_>,
        budget: usize,
    ) -> (Option<PackedMessage>, usize) {
        let o = &self.opts;
        let pairs: Vec<(&str, &str)> = input
            .messages
            .iter()
            .zip(input.contents)
            .map(|(m, c)| (m.role.as_str(), *c))
            .collect();
        let ledger = build_ledger_pairs(&pairs, o);
        let cap = 24usize.max((budget as f64 * o.summary_frac).floor() as usize);
        match render_card(&ledger, cap) {
            Some(text) => {
                let t = msg_tok(&text);
                (
                    Some(PackedMessage {
                        role: "user".into(),
                        content: text,
                        ts: None,
                    }),
                    t,
                )
            }
            None => (None, 0),
        }
    }

    /// The recent turns kept verbatim (in history order) and the tokens they use, newest
    /// first into the reserve (`recent_frac` of the budget), at most `recent` of them.
    ///
    /// Recent reserve — a FLOOR, not only a ceiling. Stopping at the first message that did
    /// not fit left the tail 3–5 % of the budget instead of ~38 % at 3,000 (one big tool
    /// result blocked everything before it). Below the floor a message that does not fit is
    /// cut in the middle instead of dropped.
    fn reserve_recent_turns(
        &self,
        input: PreparedHistory<'_>,
        budget: usize,
        recent_frac: f64,
    ) -> (Vec<PackedMessage>, usize) {
        let o = &self.opts;
        let PreparedHistory {
            messages: history,
            contents,
            msg_ids,
        } = input;
        let reserve = (budget as f64 * recent_frac).floor() as usize;
        let floor_tok = (budget as f64 * o.tail_min_frac).floor() as usize;
        let mut recent_rev: Vec<PackedMessage> = Vec::new();
        let mut used = 0usize;
        let n = history.len();
        let mut k = 0;
        while k < o.recent && k < n {
            let i = n - 1 - k;
            k += 1;
            let clamped = clamp_content(contents[i], o.max_msg_chars);
            let c: &str = clamped.as_deref().unwrap_or(contents[i]);
            let t = if clamped.is_some() {
                msg_tok(c)
            } else {
                self.msgs[msg_ids[i] as usize].tok as usize
            };
            if used + t <= reserve {
                recent_rev.push(PackedMessage {
                    role: history[i].role.clone(),
                    content: c.to_owned(),
                    ts: self.time_of(&history[i]),
                });
                used += t;
                continue;
            }
            if used >= floor_tok {
                break;
            }
            let room = 40usize.max(reserve.min(floor_tok).saturating_sub(used + 4));
            let content = if o.strict_budget {
                truncate_to_fit(c, room)
            } else {
                truncate_to_tokens(c, room)
            };
            recent_rev.push(PackedMessage {
                role: history[i].role.clone(),
                content,
                ts: self.time_of(&history[i]),
            });
            used += room + 4;
            if used >= floor_tok {
                break;
            }
        }
        recent_rev.reverse();
        (recent_rev, used)
    }

    /// Move the first old messages that fit the head reserve into `ctx.head`, verbatim (after
    /// clamping), and charge them to `ctx.used`.
    ///
    /// Head reserve (off by default). The opening carries the task; in agent sessions it
    /// took the original request from 0/5 to 5/5 under a tight budget (StreamingLLM's
    /// attention sinks point the same way), but dialogue has no task to protect: on LoCoMo
    /// it cost 56.2 % vs 62.5 % for plain BM25. `head_frac` 0.05 turns it back on.
    fn reserve_head_turns(&self, ctx: &mut Ctx, input: PreparedHistory<'_>, head_on: bool) {
        let o = &self.opts;
        let PreparedHistory {
            messages: history,
            contents,
            ..
        } = input;
        let head_reserve = if head_on {
            (ctx.budget as f64 * o.head_frac).floor() as usize
        } else {
            0
        };
        let mut head_used = 0;
        let mut n_head = 0;
        for &i in &ctx.old {
            let clamped = clamp_content(contents[i], o.max_msg_chars);
            let c: &str = clamped.as_deref().unwrap_or(contents[i]);
            let t = msg_tok(c);
            if head_used + t > head_reserve {
                break;
            }
            ctx.head.push(PackedMessage {
                role: history[i].role.clone(),
                content: c.to_owned(),
                ts: self.time_of(&history[i]),
            });
            head_used += t;
            n_head += 1;
        }
        ctx.old.drain(..n_head);
        ctx.old_msg.drain(..n_head);
        ctx.used += head_used;
    }

    /// One item per line of the old messages, scored with BM25 against `ctx.query`; superseded
    /// tool results are marked stale, and the lines that name a query term (and are not stale)
    /// are marked `q_hit`, the candidates for pinning.
    fn score_old_lines_against_the_question(&mut self, ctx: &mut Ctx, contents: &[&str]) {
        let stale = if self.opts.supersede {
            let old_contents: Vec<&str> = ctx.old.iter().map(|&i| contents[i]).collect();
            let msgs = &self.msgs;
            superseded_results(
                &old_contents,
                |k| msgs[ctx.old_msg[k] as usize].tool,
                &self.opts,
            )
        } else {
            FxHashSet::default()
        };
        let n_msg = (ctx.old.len().saturating_sub(1)).max(1) as f64;
        // `old_msg[k]` is the id of `contents[old[k]]`, whose speaker it remembers.
        let speakers: Vec<Option<&str>> = ctx
            .old
            .iter()
            .zip(&ctx.old_msg)
            .map(|(&i, &mid)| {
                let len = self.msgs[mid as usize].speaker_len?;
                contents[i].get(..len as usize)
            })
            .collect();
        let named = named_speaker(&speakers, &ctx.query);
        let asks_time = crate::kinds::asks_for_a_time(&ctx.query);
        let asks_qty = crate::kinds::asks_for_a_quantity(&ctx.query);
        let asks_place = crate::kinds::asks_for_a_place(&ctx.query);
        let mut items = Vec::new();
        for (mi, &mid) in ctx.old_msg.iter().enumerate() {
            let is_stale = stale.contains(&mi);
            let by_named = named.is_some() && speakers[mi] == named;
            for (li, &line) in self.msgs[mid as usize].lines.iter().enumerate() {
                items.push(Item {
                    line,
                    first: li == 0,
                    stale: is_stale,
                    bm: 0.0,
                    sem: 0.0,
                    rec: mi as f64 / n_msg,
                    score: 0.0,
                    q_hit: false,
                    dup: false,
                    pin: false,
                    by_named,
                    kind_hit: (asks_time && self.lines[line as usize].timed)
                        || (asks_qty && self.lines[line as usize].numbered)
                        || (asks_place && self.lines[line as usize].placed),
                });
            }
        }
        self.bm25(&mut items, &ctx.query);
        for it in &mut items {
            // A pin must respect staleness: the old version names the same identifier as the
            // new one and would pin itself. Being named does not make it true.
            it.q_hit = it.bm > 0.0 && !it.stale;
        }
        ctx.items = items;
    }

    /// BM25 over the old lines with IDF from these lines (endogenous: what is everywhere weighs
    /// ~0 with no stoplist, in any language).
    fn bm25(&mut self, items: &mut [Item], query: &str) {
        let params = bib_text::bm25::Bm25Params {
            k1: self.opts.bm25_k1,
            b: self.opts.bm25_b,
        };
        let n_docs = items.len();
        let total_len: usize = items
            .iter()
            .map(|it| self.lines[it.line as usize].terms.len())
            .sum();
        let avgdl = total_len as f64 / n_docs.max(1) as f64;
        let avgdl = if avgdl == 0.0 { 1.0 } else { avgdl };
        let mut q_terms = bib_text::terms::terms_with(query, &self.opts.terms);
        if self.opts.latin_spellings {
            let mut seen: FxHashSet<String> = q_terms.iter().cloned().collect();
            for t in bib_text::terms::latin_spellings(query) {
                if seen.insert(t.clone()) {
                    q_terms.push(t);
                }
            }
        }
        let q_ids: Vec<Option<u32>> = q_terms
            .iter()
            .map(|t| self.vocab.get(t.as_str()).copied())
            .collect();
        if self.qmark.len() < self.vocab.len() {
            self.qmark.resize(self.vocab.len(), 0);
        }
        for (j, id) in q_ids.iter().enumerate() {
            if let Some(id) = id {
                // j + 1 fits: queries beyond 65k distinct terms are cut here
                if j < u16::MAX as usize {
                    self.qmark[*id as usize] = j as u16 + 1;
                }
            }
        }
        let mut df = vec![0usize; q_ids.len()];
        let mut hits: Vec<(u32, u16)> = Vec::new();
        for (ix, it) in items.iter().enumerate() {
            for &t in self.lines[it.line as usize].terms.iter() {
                let j = self.qmark[t as usize];
                if j != 0 {
                    df[j as usize - 1] += 1;
                    hits.push((ix as u32, j - 1));
                }
            }
        }
        for id in q_ids.iter().flatten() {
            self.qmark[*id as usize] = 0;
        }
        let idf: Vec<f64> = df.iter().map(|&d| bib_text::bm25::idf(n_docs, d)).collect();
        // hits are grouped by item; sum each item's terms in query order, as the reference.
        let mut s = 0;
        while s < hits.len() {
            let ix = hits[s].0;
            let mut e = s;
            while e < hits.len() && hits[e].0 == ix {
                e += 1;
            }
            let group = &mut hits[s..e];
            group.sort_by_key(|h| h.1);
            let it = &mut items[ix as usize];
            let dl = self.lines[it.line as usize].terms.len() as f64;
            // Terms are distinct per line: tf is 1.
            let tf = bib_text::bm25::tf_factor(1.0, dl, avgdl, params);
            let mut score = 0.0;
            for h in group.iter() {
                score += idf[h.1 as usize] * tf;
            }
            it.bm = score;
            s = e;
        }
    }

    /// Hybrid scoring. Returns the number of texts compared with the question (blocks and
    /// units), or why it could not.
    fn semantic_scores(&mut self, ctx: &mut Ctx, e: &dyn Embedder) -> Result<usize, String> {
        if self.unit_model != e.model_id() {
            for u in &mut self.units {
                u.row = None;
            }
            self.unit_rows = None;
            self.center = UnitMean::default();
            self.blocks.clear();
            self.unit_model = e.model_id().to_owned();
        }
        let n = ctx.items.len();
        let q = slice16(&ctx.query, 0, 2000).to_owned();
        let qv = self
            .embed_cache
            .embed(e, &[q.as_str()], EmbedKind::Query)
            .map_err(|err| err.to_string())?;
        let qv = qv.first().ok_or("no query vector")?.clone();
        let mut compared = 0;
        let mut lists: Vec<(Vec<usize>, f64)> = Vec::new();
        // With `rrf_scored_only`, the BM25 list ranks only the lines that match: a line with
        // no query term would otherwise earn rank credit by its position in the history.
        let items = &ctx.items;
        let by_lex = rank_descending(
            (0..n).filter(|&i| !self.opts.rrf_scored_only || items[i].bm > 0.0),
            |i| items[i].bm,
        );
        lists.push((by_lex, 1.0));
        if self.opts.sem_blocks || !self.opts.sem_units {
            compared += self.block_scores(ctx, e, &qv)?;
            let items = &ctx.items;
            lists.push((rank_descending(0..n, |i| items[i].sem), 1.0));
        }
        if self.opts.sem_units {
            let (usem, units) = self.unit_scores(ctx, e, &qv)?;
            compared += units;
            let by_unit = rank_descending(0..n, |i| usem[i]);
            lists.push((by_unit, self.opts.sem_unit_weight));
            for (it, u) in ctx.items.iter_mut().zip(&usem) {
                it.sem = it.sem.max(*u);
            }
        }
        // Rank fusion: sorted lists, positions fused.
        let weighted: Vec<(&[usize], f64)> =
            lists.iter().map(|(l, w)| (l.as_slice(), *w)).collect();
        let fused = rrf_fuse_weighted(&weighted, self.opts.rrf_k, n);
        let max_f = fused.iter().copied().fold(0.0, f64::max);
        let max_f = if max_f == 0.0 { 1.0 } else { max_f };
        let o = &self.opts;
        for (i, it) in ctx.items.iter_mut().enumerate() {
            let rel =
                (!it.stale && (it.bm > 0.0 || it.sem > 0.0)).then(|| lift(fused[i] / max_f, it, o));
            it.score = stratum_score(it, rel, ctx.rec_tie);
        }
        Ok(compared)
    }

    /// Block similarity into each item's `sem`; returns the number of blocks.
    fn block_scores(
        &mut self,
        ctx: &mut Ctx,
        e: &dyn Embedder,
        qv: &[f32],
    ) -> Result<usize, String> {
        // Blocks, not lines: line-by-line encoding is prohibitive and the signal survives the
        // cut (~73 % at arbitrary boundaries). The block size follows from the encoding budget,
        // so a long history grows the blocks, not the number of model calls.
        let n = ctx.items.len();
        let sb = n.div_ceil(self.opts.sem_budget.max(1)).max(1);
        let keys: Vec<Box<[u32]>> = ctx
            .items
            .chunks(sb)
            .map(|chunk| chunk.iter().map(|it| it.line).collect())
            .collect();
        let mut last = std::mem::take(&mut self.blocks);
        let mut found: Vec<Option<NormedVector>> = keys.iter().map(|k| last.remove(k)).collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|&b| found[b].is_none()).collect();
        if !missing.is_empty() {
            let texts: Vec<String> = missing.iter().map(|&b| self.block_text(&keys[b])).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vecs = self
                .embed_cache
                .embed(e, &refs, EmbedKind::Passage)
                .map_err(|err| err.to_string())?;
            for (&b, v) in missing.iter().zip(vecs) {
                let nb = bib_text::vectors::dot(&v, &v);
                found[b] = Some((v, nb));
            }
        }
        let nq = bib_text::vectors::dot(qv, qv);
        let center = if self.opts.sem_block_center && found.len() > 1 {
            block_mean(&found, qv.len()).map(|m| {
                let (qm, mm) = (
                    bib_text::vectors::dot(qv, &m),
                    bib_text::vectors::dot(&m, &m),
                );
                (m, qm, mm)
            })
        } else {
            None
        };
        for (bi, f) in found.iter().enumerate() {
            let (v, nb) = f.as_ref().expect("every block has its vector");
            let s = match &center {
                // as a unit vector: v / |v|
                Some((m, qm, mm)) if *nb > 0.0 => {
                    let len = nb.sqrt();
                    let qu = bib_text::vectors::dot(qv, v) / len;
                    let mu = bib_text::vectors::dot(m, v) / len;
                    f64::from(bib_text::vectors::centered_cosine(
                        qu, *qm, mu, *mm, nq, 1.0,
                    ))
                }
                Some(_) => 0.0,
                None => f64::from(bib_embed::cosine_given_norms(qv, nq, v, *nb)),
            };
            for it in ctx.items.iter_mut().skip(bi * sb).take(sb) {
                it.sem = s;
            }
        }
        let count = found.len();
        self.blocks = keys.into_iter().zip(found.into_iter().flatten()).collect();
        Ok(count)
    }

    /// The text a block of lines is embedded as: its lines joined, cut at 4,000 UTF-16 units.
    fn block_text(&self, lines: &[u32]) -> String {
        let text = lines
            .iter()
            .map(|&l| &*self.lines[l as usize].text)
            .collect::<Vec<_>>()
            .join("\n");
        slice16(&text, 0, 4000).to_owned()
    }

    /// Build the units of message `mid` (interning their texts) unless it has them.
    fn build_units(&mut self, mid: u32) {
        if self.msgs[mid as usize].units.is_some() {
            return;
        }
        let line_ids = self.msgs[mid as usize].lines.clone();
        let texts: Vec<&str> = line_ids
            .iter()
            .map(|&l| &*self.lines[l as usize].text)
            .collect();
        let found = crate::units::message_units(&texts, self.opts.sem_unit_chars);
        let mut out = Vec::with_capacity(found.len());
        for u in found {
            let text = slice16(&u.text, 0, 2000);
            let id = match self.unit_ids.get(text) {
                Some(&id) => id,
                None => {
                    let id = self.units.len() as u32;
                    self.units.push(UnitInfo {
                        text: text.into(),
                        row: None,
                    });
                    self.unit_ids.insert(text.into(), id);
                    id
                }
            };
            out.push((u.first as u32, u.end as u32, id));
        }
        self.msgs[mid as usize].units = Some(out.into_boxed_slice());
    }

    /// The units of message `mid` ([`Packer::build_units`] has run for it).
    fn units_of(&self, mid: u32) -> &[(u32, u32, u32)] {
        self.msgs[mid as usize].units()
    }

    /// Each item's best unit similarity to the question (0 for a line in no unit), and how
    /// many units were compared. Units not yet embedded by this model are embedded in one
    /// call through the packer's content cache.
    fn unit_scores(
        &mut self,
        ctx: &Ctx,
        e: &dyn Embedder,
        qv: &[f32],
    ) -> Result<(Vec<f64>, usize), String> {
        for &mid in &ctx.old_msg {
            self.build_units(mid);
        }
        let mut missing: Vec<u32> = ctx
            .old_msg
            .iter()
            .flat_map(|&mid| self.units_of(mid).iter().map(|x| x.2))
            .filter(|&id| self.units[id as usize].row.is_none())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let texts: Vec<&str> = missing
                .iter()
                .map(|&id| &*self.units[id as usize].text)
                .collect();
            let vecs = self
                .embed_cache
                .embed(e, &texts, EmbedKind::Passage)
                .map_err(|err| err.to_string())?;
            let rows = self
                .unit_rows
                .get_or_insert_with(|| QuantizedVectors::new(vecs.first().map_or(0, |v| v.len())));
            for (&id, v) in missing.iter().zip(vecs) {
                self.units[id as usize].row = Some(rows.len() as u32);
                // A vector of another length than the model's others scores 0.
                let zeros;
                let v = if v.len() == rows.dims() {
                    &v[..]
                } else {
                    zeros = vec![0.0; rows.dims()];
                    &zeros[..]
                };
                rows.push(v);
            }
        }
        // Every row's score at once (rows are the units of this session's history), from 8-bit
        // codes: within ~0.002 of the exact cosine, the same LoCoMo and probe-set recall
        // (rescoring the best 64 rows exactly changed LoCoMo at 1,500 by +0.07 points and cost
        // a tenth of the time saved; BENCHMARKS.md).
        let mut row_scores = match &self.unit_rows {
            Some(rows) if rows.dims() == qv.len() => {
                let q = rows.quantize_query(qv);
                let mut out = vec![0f32; rows.len()];
                rows.scores(&q, 0..rows.len(), self.dot_kernel, &mut out);
                out
            }
            _ => Vec::new(),
        };
        if self.opts.sem_unit_center && !row_scores.is_empty() {
            self.center_unit_scores(ctx, qv, &mut row_scores);
        }
        let mut usem = vec![0.0f64; ctx.items.len()];
        let mut compared = 0;
        let mut ix = 0;
        for &mid in &ctx.old_msg {
            for &(first, end, id) in self.units_of(mid) {
                let row = self.units[id as usize].row;
                let s = row
                    .and_then(|r| row_scores.get(r as usize))
                    .map_or(0.0, |&x| f64::from(x));
                compared += 1;
                for u in &mut usem[ix + first as usize..ix + end as usize] {
                    *u = u.max(s);
                }
            }
            ix += self.msgs[mid as usize].lines.len();
        }
        let c = self.opts.sem_unit_context;
        if c > 0.0 {
            self.spread_to_neighbours(ctx, &mut usem, c);
        }
        Ok((usem, compared))
    }

    /// Turn the question's scores against this history's units (`scores`, by row) into
    /// cosines after centering: the mean `m` of the history's distinct unit vectors is
    /// subtracted from the question and from every unit, `cos(q − m, u − m)`. The mean is
    /// what all the session's lines share (their language, the register of the chat, its
    /// recurring topics); left in, it makes every line in the question's language look close
    /// to it, and a fact in another language or written as a config line loses to chatter.
    /// Centering per language is known to make multilingual encoders' cross-lingual retrieval
    /// work (Libovický et al., 2020). From dot products (`bib_text::vectors::centered_cosine`,
    /// with `|u| = 1`); `m·u` is one pass of the 8-bit kernel per new mean.
    fn center_unit_scores(&mut self, ctx: &Ctx, qv: &[f32], scores: &mut [f32]) {
        let Some(rows) = self.unit_rows.as_ref() else {
            return;
        };
        let c = &mut self.center;
        if c.sum.len() != rows.dims() {
            *c = UnitMean {
                sum: vec![0; rows.dims()],
                ..UnitMean::default()
            };
        }
        c.uses.resize(rows.len(), 0);
        let common = c
            .msgs
            .iter()
            .zip(&ctx.old_msg)
            .take_while(|(a, b)| a == b)
            .count();
        let (gone, new) = (&c.msgs[common..], &ctx.old_msg[common..]);
        if !gone.is_empty() || !new.is_empty() {
            c.row_dots = None;
        }
        for (messages, sign) in [(gone, -1i64), (new, 1)] {
            for &mid in messages {
                for &(_, _, id) in self.msgs[mid as usize].units() {
                    let Some(r) = self.units[id as usize].row else {
                        continue;
                    };
                    let r = r as usize;
                    if rows.is_zero_row(r) {
                        continue;
                    }
                    let before = c.uses[r];
                    c.uses[r] = before.saturating_add_signed(sign as i32);
                    if (before == 0) != (c.uses[r] == 0) {
                        rows.add_row_fixed(r, sign, &mut c.sum);
                        c.count = c.count.saturating_add_signed(sign as isize);
                    }
                }
            }
        }
        c.msgs.truncate(common);
        c.msgs.extend_from_slice(&ctx.old_msg[common..]);
        if c.count < 2 {
            return;
        }
        if c.row_dots.as_ref().is_none_or(|d| d.len() != rows.len()) {
            let scale = 1.0 / (bib_text::vectors::quantized::FIXED_ONE * c.count as f64);
            c.mean = c.sum.iter().map(|&x| (x as f64 * scale) as f32).collect();
            let m = rows.quantize_query(&c.mean);
            let mut dots = vec![0.0; rows.len()];
            rows.scores(&m, 0..rows.len(), self.dot_kernel, &mut dots);
            c.row_dots = Some(dots);
        }
        let row_dots = c.row_dots.as_deref().unwrap_or(&[]);
        let qm = bib_text::vectors::dot(qv, &c.mean);
        let mm = bib_text::vectors::dot(&c.mean, &c.mean);
        let qq = bib_text::vectors::dot(qv, qv);
        for ((s, &uses), &mu) in scores.iter_mut().zip(&c.uses).zip(row_dots) {
            if uses > 0 {
                *s = bib_text::vectors::centered_cosine(*s, qm, mu, mm, qq, 1.0);
            }
        }
    }

    /// A message's best unit score, times `c`, lifts the lines of the messages next to it: in
    /// a dialogue the answer follows the turn that shares the question's meaning, and a tool
    /// result the call or narration that names it.
    fn spread_to_neighbours(&self, ctx: &Ctx, usem: &mut [f64], c: f64) {
        let mut spans = Vec::with_capacity(ctx.old_msg.len());
        let mut ix = 0;
        for &mid in &ctx.old_msg {
            let nl = self.msgs[mid as usize].lines.len();
            spans.push(ix..ix + nl);
            ix += nl;
        }
        let best: Vec<f64> = spans
            .iter()
            .map(|r| usem[r.clone()].iter().copied().fold(0.0, f64::max))
            .collect();
        for (k, r) in spans.iter().enumerate() {
            let prev = if k > 0 { best[k - 1] } else { 0.0 };
            let next = best.get(k + 1).copied().unwrap_or(0.0);
            let lift = c * prev.max(next);
            for u in &mut usem[r.clone()] {
                *u = u.max(lift);
            }
        }
    }

    /// Dedup over the whole history, the verbatim head and tail included: what already
    /// travels literally is not paid for twice (the retrieved copy is the truncated, worse
    /// one). Of the items sharing a line's key, all but the best-scored are marked `dup`;
    /// returns how many were.
    fn mark_duplicates(
        &self,
        head: &[PackedMessage],
        recent: &[PackedMessage],
        items: &mut [Item],
    ) -> usize {
        let mut deduped = 0;
        // winner per key: usize::MAX = a verbatim line (infinite score)
        let mut best: FxHashMap<u32, usize> = FxHashMap::default();
        for m in head.iter().chain(recent.iter()) {
            for line in m.content.split('\n') {
                let k = dedup_key(line);
                if k.is_empty() {
                    continue;
                }
                if let Some(&id) = self.dkeys.get(k.as_str()) {
                    best.insert(id, usize::MAX);
                }
            }
        }
        for ix in 0..items.len() {
            if items[ix].first {
                continue;
            }
            let k = self.lines[items[ix].line as usize].dkey;
            if k == 0 {
                continue;
            }
            match best.get(&k).copied() {
                None => {
                    best.insert(k, ix);
                }
                Some(prev) => {
                    let prev_score = if prev == usize::MAX {
                        f64::INFINITY
                    } else {
                        items[prev].score
                    };
                    let (loser, winner) = if items[ix].score > prev_score {
                        (prev, ix)
                    } else {
                        (ix, prev)
                    };
                    if loser != usize::MAX {
                        items[loser].dup = true;
                    }
                    deduped += 1;
                    best.insert(k, winner);
                }
            }
        }
        deduped
    }

    fn select_and_emit(&mut self, ctx: &mut Ctx, history: &[Message]) -> (Vec<PackedMessage>, Sel) {
        let o = &self.opts;
        let deduped = if o.dedup {
            self.mark_duplicates(&ctx.head, &ctx.recent, &mut ctx.items)
        } else {
            0
        };
        let mut sel = LineSelection::start(ctx.budget, ctx.used, ctx.items.len(), o);
        // What the question names is never evicted (bounded by pin_max).
        let pinned = if o.pin_query_terms && (o.pin_hybrid || !ctx.hybrid) {
            self.pin_lines_naming_the_question(&mut ctx.items, &mut sel, ctx.hybrid)
        } else {
            0
        };
        let pool = unkept_candidates_by_score(&ctx.items, &sel.keep, o);
        if o.mmr {
            let spend = sel.spend();
            sel.used = mmr(&ctx.items, &self.lines, &pool, &mut sel.keep, spend, o);
        }
        self.fill_elastic_window(&mut ctx.items, &pool, &mut sel);
        let realized = self.give_back_lines_until_realized_size_fits(ctx, &mut sel);

        ctx.keep = sel.keep;
        ctx.per_line_cap = sel.per_line_cap;
        let (messages, dropped_msgs, total) = self.render_with_the_notes_that_fit(ctx, history);
        ctx.rendered_tokens = Some(total);
        (
            messages,
            Sel {
                used: sel.used,
                deduped,
                pinned,
                realized,
                dropped_msgs,
            },
        )
    }

    /// Keep the best-scored lines that name a query term (`q_hit`, not duplicates), at most
    /// `pin_max`, while they fit the budget; marks them `pin` and returns how many were.
    ///
    /// In the hybrid path (`pin_hybrid`) a line must also reach `pin_hybrid_min_bm` of the
    /// best BM25 score: one common word shared with the question is no reason to keep a line
    /// ahead of one that says what the question asks in other words.
    fn pin_lines_naming_the_question(
        &self,
        items: &mut [Item],
        sel: &mut LineSelection,
        hybrid: bool,
    ) -> usize {
        let mut pinned = 0;
        let floor = if hybrid {
            items.iter().map(|it| it.bm).fold(0.0, f64::max) * self.opts.pin_hybrid_min_bm
        } else {
            0.0
        };
        let mut cands: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].q_hit && !items[i].dup && items[i].bm >= floor)
            .collect();
        sort_by_score_descending(items, &mut cands);
        cands.truncate(self.opts.pin_max);
        for i in cands {
            let c = sel.cost(&self.lines, &items[i]);
            if sel.used + c > sel.budget {
                break;
            }
            sel.keep[i] = true;
            sel.used += c;
            pinned += 1;
            items[i].pin = true;
        }
        pinned
    }

    /// Elastic window: the budget is a ceiling, not a quota. Stop when relevance runs out
    /// (free at budgets 3,000–8,000; at 16,000 it saves 26 % of tokens for −1.8 facts).
    /// Without `elastic`, fill the budget in score order.
    fn fill_elastic_window(&self, items: &mut [Item], pool: &[usize], sel: &mut LineSelection) {
        if self.opts.outline {
            // The lines kept before the window (pins) bring their first children first.
            for i in (0..items.len())
                .filter(|&i| sel.keep[i])
                .collect::<Vec<_>>()
            {
                self.keep_first_child(items, i, sel);
            }
        }
        for &i in pool {
            if sel.keep[i] {
                continue;
            }
            if self.opts.elastic && items[i].score < RELEVANT {
                break;
            }
            let c = sel.cost(&self.lines, &items[i]);
            if sel.used + c > sel.budget {
                continue;
            }
            sel.keep[i] = true;
            sel.used += c;
            if self.opts.outline {
                self.keep_first_child(items, i, sel);
            }
            if sel.used >= sel.budget {
                break;
            }
        }
    }

    /// [`PackOptions::outline`]: when kept line `i` is followed, in its message, by a more
    /// indented non-blank line, keep that line too if it fits. A failing test's name, an
    /// error's location or a key's value sits one line under the line that shares the
    /// question's words, and means little without it (as a header means little alone).
    /// The child is worth its parent's score (and pin) from then on, so the budget contract
    /// gives the two back together rather than the child first.
    fn keep_first_child(&self, items: &mut [Item], i: usize, sel: &mut LineSelection) {
        let j = i + 1;
        if j >= items.len() || sel.keep[j] || items[j].first || items[j].dup {
            return;
        }
        let indent = |k: usize| {
            let t = &self.lines[items[k].line as usize].text;
            (!t.trim().is_empty()).then(|| t.len() - t.trim_start().len())
        };
        let (Some(parent), Some(child)) = (indent(i), indent(j)) else {
            return;
        };
        let c = sel.cost(&self.lines, &items[j]);
        if child > parent && sel.used + c <= sel.budget {
            sel.keep[j] = true;
            sel.used += c;
            items[j].score = items[j].score.max(items[i].score);
            // A pinned line's child is given back with it, last.
            items[j].pin = items[i].pin;
        }
    }

    /// Budget contract (reference bookkeeping): the per-line cost ignores message overhead
    /// and omission markers, so measure the emitted size and give back the worst-scored
    /// unpinned lines until it fits. With `strict_budget`, `enforce_budget` then checks the
    /// real rendered size. Returns the final realized size.
    fn give_back_lines_until_realized_size_fits(
        &self,
        ctx: &Ctx,
        sel: &mut LineSelection,
    ) -> usize {
        let items = &ctx.items;
        let budget = sel.budget;
        let per_line_cap = sel.per_line_cap;
        let mut realized = self.realized_size(ctx, &sel.keep, per_line_cap);
        if realized > budget {
            let mut kept: Vec<usize> = (0..items.len())
                .filter(|&i| sel.keep[i] && !items[i].pin)
                .collect();
            kept.sort_by(|&a, &b| {
                items[a]
                    .score
                    .partial_cmp(&items[b].score)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let mut p = 0;
            while realized > budget && p < kept.len() {
                let over = realized - budget;
                let mut freed = 0;
                while p < kept.len() && freed < over {
                    let i = kept[p];
                    p += 1;
                    sel.keep[i] = false;
                    freed += (self.lines[items[i].line as usize].tok as usize).min(per_line_cap);
                }
                realized = self.realized_size(ctx, &sel.keep, per_line_cap);
            }
        }
        realized
    }

    /// The emitted size as the reference estimates it: head and recent turns by the packer's
    /// estimate, each old message with a kept line at its capped line costs, 8 per run of
    /// omitted lines and 4 of overhead, and 12 for the one note on fully omitted messages.
    fn realized_size(&self, ctx: &Ctx, keep: &[bool], per_line_cap: usize) -> usize {
        let mut t: usize = ctx
            .recent
            .iter()
            .map(|m| msg_tok(&m.content))
            .sum::<usize>()
            + ctx.head.iter().map(|m| msg_tok(&m.content)).sum::<usize>();
        let mut open = 0;
        let mut ix = 0;
        for &mid in &ctx.old_msg {
            let nl = self.msgs[mid as usize].lines.len();
            let (mut any, mut run, mut sub) = (false, 0, 0);
            for (&kept, it) in keep[ix..ix + nl].iter().zip(&ctx.items[ix..ix + nl]) {
                if kept {
                    if run > 0 {
                        sub += 8;
                        run = 0;
                    }
                    sub += (self.lines[it.line as usize].tok as usize).min(per_line_cap);
                    any = true;
                } else {
                    run += 1;
                }
            }
            if any {
                if run > 0 {
                    sub += 8;
                }
                t += sub + 4;
                open += 1;
            }
            ix += nl;
        }
        if open < ctx.old_msg.len() {
            t += 12;
        }
        t
    }

    /// Render the selection. One note per run of omitted messages when that fits the budget
    /// (strict mode), else one note for them all, which is what the selection accounted for.
    /// The old messages are rendered once; only the notes differ between the two.
    fn render_with_the_notes_that_fit(
        &self,
        ctx: &Ctx,
        history: &[Message],
    ) -> (Vec<PackedMessage>, usize, usize) {
        let body = self.render_body(ctx, history);
        let one = || omission_notes(ctx.lang, Notes::One, &body.gaps, body.dropped);
        let notes = if self.opts.strict_budget {
            let per_gap = omission_notes(ctx.lang, Notes::PerGap, &body.gaps, body.dropped);
            let total = body.total + notes_tokens(&per_gap) + body.tail;
            if total <= ctx.budget + ctx.card_tok {
                per_gap
            } else {
                one()
            }
        } else {
            one()
        };
        assemble(ctx, body, notes)
    }

    /// Emit: head, the old messages with their kept lines (runs of omitted lines become one
    /// note inside the message), the card, the recent turns. Fully omitted messages become
    /// `system` notes where they were, so the packed history stays in order ([`Notes`]); notes
    /// are in the history's language ([`crate::lang`]).
    fn render(
        &self,
        ctx: &Ctx,
        history: &[Message],
        notes: Notes,
    ) -> (Vec<PackedMessage>, usize, usize) {
        let body = self.render_body(ctx, history);
        let notes = omission_notes(ctx.lang, notes, &body.gaps, body.dropped);
        assemble(ctx, body, notes)
    }

    /// The head and the old messages that keep a line, rendered, before any note.
    fn render_body(&self, ctx: &Ctx, history: &[Message]) -> RenderedHistory {
        let mut out = RenderedHistory {
            packed: ctx.head.clone(),
            total: ctx.head.iter().map(|m| msg_tok(&m.content)).sum(),
            tail: protected_tail_tokens(ctx),
            dropped: 0,
            gaps: Vec::new(),
        };
        self.render_old_messages(ctx, history, &mut out);
        out
    }

    /// Append the old messages that keep at least one line to `out.packed`, counting their
    /// tokens; count the fully omitted ones and record each run of them (its place and length)
    /// in `out.gaps`.
    fn render_old_messages(&self, ctx: &Ctx, history: &[Message], out: &mut RenderedHistory) {
        // Fully omitted messages since the last one kept; each run's place and length.
        let mut run = 0;
        let mut ix = 0;
        for (k, &mid) in ctx.old_msg.iter().enumerate() {
            let nl = self.msgs[mid as usize].lines.len();
            let kept = self.render_kept_lines(ctx, ix..ix + nl);
            ix += nl;
            if kept.lines == 0 {
                out.dropped += 1;
                run += 1;
                continue;
            }
            if run > 0 {
                out.gaps.push((out.packed.len(), run));
                run = 0;
            }
            // the newline joints add length, not pieces
            out.total += estimate_from(kept.pieces, kept.len + kept.lines - 1) + 4;
            out.packed.push(PackedMessage {
                role: history[ctx.old[k]].role.clone(),
                content: kept.text,
                ts: self.time_of(&history[ctx.old[k]]),
            });
        }
        if run > 0 {
            out.gaps.push((out.packed.len(), run));
        }
    }

    /// The kept lines of one old message (its items are `items`): each run of omitted lines
    /// becomes one note, and a line over the per-line cap is cut to it. Empty when no line of
    /// the message is kept.
    fn render_kept_lines(&self, ctx: &Ctx, items: std::ops::Range<usize>) -> KeptLines {
        let mut kept = KeptLines::default();
        let mut skipped = 0;
        for j in items {
            if ctx.keep[j] {
                if skipped > 0 {
                    kept.push_measured(&ctx.lang.lines_omitted(skipped));
                    skipped = 0;
                }
                let line = &self.lines[ctx.items[j].line as usize];
                if (line.tok as usize) <= ctx.per_line_cap {
                    kept.push(&line.text, line.pieces as usize, line.len16 as usize);
                } else {
                    let t = if self.opts.strict_budget {
                        truncate_to_fit(&line.text, ctx.per_line_cap)
                    } else {
                        truncate_to_tokens(&line.text, ctx.per_line_cap)
                    };
                    kept.push_measured(&t);
                }
            } else {
                skipped += 1;
            }
        }
        if skipped > 0 && kept.lines > 0 {
            kept.push_measured(&ctx.lang.lines_omitted(skipped));
        }
        kept
    }

    /// The strict budget contract on the real rendered size: give back kept lines (worst
    /// first, pinned last), then the card, the omission marker, the head, the oldest recent
    /// turns, and finally cut the last message. Holds for any history and budget.
    fn enforce_budget(
        &self,
        ctx: &mut Ctx,
        history: &[Message],
        budget: usize,
    ) -> Vec<PackedMessage> {
        let mut marker = true;
        loop {
            let notes = if marker { Notes::One } else { Notes::Off };
            let (mut msgs, _, total) = self.render(ctx, history, notes);
            if total <= budget {
                return msgs;
            }
            let over = total - budget;
            let mut kept: Vec<usize> = (0..ctx.items.len()).filter(|&i| ctx.keep[i]).collect();
            if !kept.is_empty() {
                kept.sort_by(|&a, &b| {
                    let (x, y) = (&ctx.items[a], &ctx.items[b]);
                    x.pin.cmp(&y.pin).then(
                        x.score
                            .partial_cmp(&y.score)
                            .unwrap_or(std::cmp::Ordering::Equal),
                    )
                });
                let mut freed = 0;
                for i in kept {
                    if freed >= over {
                        break;
                    }
                    ctx.keep[i] = false;
                    freed += (self.lines[ctx.items[i].line as usize].tok as usize)
                        .min(ctx.per_line_cap)
                        + 1;
                }
                continue;
            }
            if ctx.card.take().is_some() {
                continue;
            }
            if marker && msgs.len() > ctx.head.len() + ctx.recent.len() {
                marker = false;
                continue;
            }
            if !ctx.head.is_empty() {
                ctx.head.remove(0);
                continue;
            }
            if ctx.recent.len() > 1 {
                ctx.recent.remove(0);
                continue;
            }
            // one message left: cut it to fit, or nothing fits at all
            if let Some(last) = ctx.recent.last_mut() {
                if budget >= 4 {
                    let room = budget - 4;
                    let cut = truncate_to_fit(&last.content, room);
                    last.content = if estimate_tokens(&cut) <= room {
                        cut
                    } else {
                        prefix_to_fit(&last.content, room)
                    };
                    if output_tokens(&ctx.recent) <= budget {
                        msgs = ctx.recent.clone();
                        return msgs;
                    }
                }
                ctx.recent.clear();
                continue;
            }
            return Vec::new();
        }
    }
}

/// The mean of the blocks' `dims`-long vectors, each scaled to length 1 (`None` when no
/// block has a direction).
fn block_mean(found: &[Option<NormedVector>], dims: usize) -> Option<Vec<f32>> {
    let mut mean = vec![0f32; dims];
    let mut count = 0usize;
    for (v, nb) in found.iter().flatten() {
        if *nb <= 0.0 || v.len() != dims {
            continue;
        }
        let inv = 1.0 / nb.sqrt();
        for (m, x) in mean.iter_mut().zip(v.iter()) {
            *m += x * inv;
        }
        count += 1;
    }
    (count > 0).then(|| {
        let inv = 1.0 / count as f32;
        mean.iter().map(|m| m * inv).collect()
    })
}

/// Tokens of the `system` notes `notes` as packed messages.
fn notes_tokens(notes: &[(usize, String)]) -> usize {
    notes.iter().map(|(_, m)| msg_tok(m)).sum()
}

/// Tokens of what follows the old messages whatever is kept: the card and the recent turns.
fn protected_tail_tokens(ctx: &Ctx) -> usize {
    ctx.card.as_ref().map_or(0, |c| msg_tok(&c.content))
        + ctx
            .recent
            .iter()
            .map(|m| msg_tok(&m.content))
            .sum::<usize>()
}

/// The packed history: `body` with the notes at their places (`(place in body, text)`, in
/// order), then the card next to the live question, then the recent turns; with the count of
/// fully omitted old messages and the total tokens.
fn assemble(
    ctx: &Ctx,
    body: RenderedHistory,
    notes: Vec<(usize, String)>,
) -> (Vec<PackedMessage>, usize, usize) {
    debug_assert!(notes.windows(2).all(|w| w[0].0 <= w[1].0));
    let total = body.total + notes_tokens(&notes) + body.tail;
    let mut packed = Vec::with_capacity(body.packed.len() + notes.len() + 1 + ctx.recent.len());
    let mut notes = notes.into_iter().peekable();
    for (i, m) in body.packed.into_iter().enumerate() {
        while let Some((_, note)) = notes.next_if(|(at, _)| *at == i) {
            packed.push(system_note(note));
        }
        packed.push(m);
    }
    packed.extend(notes.map(|(_, note)| system_note(note)));
    // The card is protected like head and tail: a count shares vocabulary with nothing and
    // BM25 would always drop it. It sits next to the live question.
    packed.extend(ctx.card.iter().cloned());
    packed.extend(ctx.recent.iter().cloned());
    (packed, body.dropped, total)
}

fn system_note(content: String) -> PackedMessage {
    PackedMessage {
        role: "system".into(),
        content,
        ts: None,
    }
}

/// What [`Packer::render`] has emitted so far: the packed messages and their tokens, how
/// many old messages were fully omitted, and each run of them as (place in `packed`, length).
struct RenderedHistory {
    packed: Vec<PackedMessage>,
    total: usize,
    /// Tokens of the card and the recent turns, which follow whatever is kept (counted once
    /// per rendering, whichever notes are chosen).
    tail: usize,
    dropped: usize,
    gaps: Vec<(usize, usize)>,
}

/// The rendered lines of one old message, joined by newlines as it is packed, with their
/// count and the sums of their token pieces and UTF-16 lengths, so its token estimate needs
/// no second pass over the text.
#[derive(Default)]
struct KeptLines {
    text: String,
    lines: usize,
    pieces: usize,
    len: usize,
}

impl KeptLines {
    /// Add a line whose pieces and length are known (cached per line).
    fn push(&mut self, s: &str, p: usize, l: usize) {
        if self.lines > 0 {
            self.text.push('\n');
        }
        self.text.push_str(s);
        self.lines += 1;
        self.pieces += p;
        self.len += l;
    }

    /// Add a line measured now (a note or a truncated line).
    fn push_measured(&mut self, s: &str) {
        let (p, l) = pieces_and_len(s);
        self.push(s, p, l);
    }
}

/// The `system` notes for fully omitted messages, as (place, text): one per run
/// ([`Notes::PerGap`]); one for them all at the first run ([`Notes::One`]: a single run is
/// named by its length, several by the total from here on); or none.
fn omission_notes(
    lang: Lang,
    notes: Notes,
    gaps: &[(usize, usize)],
    dropped: usize,
) -> Vec<(usize, String)> {
    match (notes, gaps.first()) {
        (Notes::PerGap, _) => gaps
            .iter()
            .map(|&(at, n)| (at, lang.messages_omitted(n)))
            .collect(),
        (Notes::One, Some(&(at, n))) if gaps.len() == 1 => {
            vec![(at, lang.messages_omitted(n))]
        }
        (Notes::One, Some(&(at, _))) => {
            vec![(at, lang.messages_omitted_from_here(dropped))]
        }
        _ => Vec::new(),
    }
}

/// The running state of one selection: which items are kept, the tokens they are charged,
/// the budget, and the most one line is charged.
struct LineSelection {
    keep: Vec<bool>,
    used: usize,
    budget: usize,
    per_line_cap: usize,
}

impl LineSelection {
    /// Nothing kept yet; `used` tokens already spent (recent, head). No single line is charged
    /// more than `per_line_cap_frac` of what remains of the budget (40 tokens at least).
    fn start(budget: usize, used: usize, n_items: usize, o: &PackOptions) -> Self {
        let per_line_cap = 40usize
            .max(((budget.saturating_sub(used)) as f64 * o.per_line_cap_frac).floor() as usize);
        Self {
            keep: vec![false; n_items],
            used,
            budget,
            per_line_cap,
        }
    }

    /// What keeping `it` costs: its tokens up to the cap, plus one for the joint.
    fn cost(&self, lines: &[LineInfo], it: &Item) -> usize {
        (lines[it.line as usize].tok as usize).min(self.per_line_cap) + 1
    }

    /// The spend so far, for [`mmr`].
    fn spend(&self) -> Spend {
        Spend {
            used: self.used,
            budget: self.budget,
            per_line_cap: self.per_line_cap,
        }
    }
}

/// `ids` ordered by `key` descending (`f64::total_cmp`), equal keys by id: the order a stable
/// sort of ascending ids gives. The keys are mapped once to integers that sort the same way
/// and sorted next to their ids, so the sort reads contiguous pairs, not the items.
fn rank_descending(ids: impl Iterator<Item = usize>, key: impl Fn(usize) -> f64) -> Vec<usize> {
    let mut pairs: Vec<(u64, usize)> = ids.map(|i| (descending_order_key(key(i)), i)).collect();
    pairs.sort_unstable();
    pairs.into_iter().map(|(_, i)| i).collect()
}

/// An integer whose ascending order is `x`'s descending `f64::total_cmp` order: IEEE 754
/// total order on the bits (negative values' bits reversed, positive values' sign bit set),
/// then complemented.
fn descending_order_key(x: f64) -> u64 {
    let bits = x.to_bits();
    let ascending = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    !ascending
}

/// Sort item indices by score, best first (stable: equal scores keep their order). Stable on
/// purpose: the pools come in history order, in long runs the stable sort finds (an unstable
/// sort with the index as tie-break measured 25 % slower lexical packs).
fn sort_by_score_descending(items: &[Item], v: &mut [usize]) {
    v.sort_by(|&a, &b| {
        items[b]
            .score
            .partial_cmp(&items[a].score)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// The items selection may still keep (not duplicates, not pinned), best first.
fn unkept_candidates_by_score(items: &[Item], keep: &[bool], o: &PackOptions) -> Vec<usize> {
    let mut pool: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].dup && !keep[i])
        .collect();
    if o.elastic && !o.mmr {
        // Only the relevant stratum is ever visited: the fill stops at the first filler
        // line, so sorting the filler would be wasted work (same order, stable).
        pool.retain(|&i| items[i].score >= RELEVANT);
        sort_by_score_descending(items, &mut pool);
    } else {
        sort_by_score_descending(items, &mut pool);
    }
    pool
}

/// Tokens spent so far, the budget, and the most one line is charged.
#[derive(Debug, Clone, Copy)]
struct Spend {
    used: usize,
    budget: usize,
    per_line_cap: usize,
}

/// MMR (Carbonell & Goldstein 1998) within the relevant stratum, behind its flag. Returns the
/// new `used`.
fn mmr(
    items: &[Item],
    lines: &[LineInfo],
    pool: &[usize],
    keep: &mut [bool],
    spend: Spend,
    o: &PackOptions,
) -> usize {
    let Spend {
        mut used,
        budget,
        per_line_cap,
    } = spend;
    let cost = |i: usize| (lines[items[i].line as usize].tok as usize).min(per_line_cap) + 1;
    let text = |i: usize| &*lines[items[i].line as usize].text;
    // λ measured from the material's own redundancy: near-identical tool pages need a strong
    // penalty; a dialogue where every line differs, almost none.
    let lambda = o.mmr_lambda.unwrap_or_else(|| {
        (2.0 * measure_redundancy(pool.iter().map(|&i| text(i)))).clamp(0.15, 0.8)
    });
    let n_cand = o
        .mmr_cand
        .unwrap_or_else(|| ((budget as f64 / 6.0).round() as usize).clamp(400, 8000));
    if lambda <= 0.0 {
        return used;
    }
    let cand: Vec<usize> = pool.iter().copied().take(n_cand).collect();
    let toks: Vec<FxHashSet<String>> = cand.iter().map(|&i| sim_tokens(text(i))).collect();
    let mut max_sim = vec![0.0f64; cand.len()];
    for (i, &kept) in keep.iter().enumerate() {
        if kept {
            let ks = sim_tokens(text(i));
            for (c, t) in toks.iter().enumerate() {
                max_sim[c] = max_sim[c].max(jaccard(t, &ks));
            }
        }
    }
    let mut remaining: Vec<bool> = vec![true; cand.len()];
    let mut left = cand.len();
    while left > 0 {
        let mut best = usize::MAX;
        let mut best_val = f64::NEG_INFINITY;
        for (c, &r) in remaining.iter().enumerate() {
            if r {
                let v = items[cand[c]].score - lambda * max_sim[c];
                if v > best_val {
                    best_val = v;
                    best = c;
                }
            }
        }
        if best == usize::MAX {
            break;
        }
        remaining[best] = false;
        left -= 1;
        let i = cand[best];
        // The elastic window rules here too: MMR orders within the relevant, it is no back
        // door for filler (without this the gate measured identical on and off).
        if o.elastic && items[i].score < RELEVANT {
            continue;
        }
        let c = cost(i);
        if used + c > budget {
            continue;
        }
        keep[i] = true;
        used += c;
        for (c2, &r) in remaining.iter().enumerate() {
            if r {
                max_sim[c2] = max_sim[c2].max(jaccard(&toks[c2], &toks[best]));
            }
        }
        if used >= budget {
            break;
        }
    }
    used
}

/// Mean Jaccard of nearby line pairs over a sample of ≤ 240 lines.
fn measure_redundancy<'a>(lines: impl ExactSizeIterator<Item = &'a str>) -> f64 {
    let n = lines.len();
    if n < 4 {
        return 0.0;
    }
    let step = (n / 240).max(1);
    let picked: Vec<FxHashSet<String>> = lines.step_by(step).map(sim_tokens).collect();
    let (mut sum, mut pairs) = (0.0, 0usize);
    for i in 0..picked.len() {
        for j in i + 1..(i + 8).min(picked.len()) {
            sum += jaccard(&picked[i], &picked[j]);
            pairs += 1;
        }
    }
    if pairs == 0 {
        0.0
    } else {
        sum / pairs as f64
    }
}

struct Sel {
    used: usize,
    deduped: usize,
    pinned: usize,
    realized: usize,
    dropped_msgs: usize,
}

/// A session indexed at write time: each message is date-annotated, split, tokenised and
/// estimated when it is pushed, so packing does no hashing or term extraction at all. The
/// spec's principle — index when writing, not when reading — as an API.
#[derive(Debug)]
pub struct Session {
    packer: Packer,
    history: Vec<Message>,
    dated: Vec<Option<Arc<str>>>,
    ids: Vec<u32>,
}

impl Session {
    /// An empty session packed with these options.
    pub fn new(opts: PackOptions) -> Self {
        Self {
            packer: Packer::new(opts),
            history: Vec::new(),
            dated: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// Append a message (indexed now).
    pub fn push(&mut self, m: Message) {
        let d = self.packer.dated_one(&m);
        let id = self
            .packer
            .msg_id(d.as_deref().unwrap_or(m.content.as_str()));
        self.history.push(m);
        self.dated.push(d);
        self.ids.push(id);
    }

    /// Remove and return the last message.
    pub fn pop(&mut self) -> Option<Message> {
        self.dated.pop();
        self.ids.pop();
        self.history.pop()
    }

    /// The messages as pushed.
    pub fn messages(&self) -> &[Message] {
        &self.history
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.history.len()
    }

    /// Whether the session is empty.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// Lexical pack of the whole session (same result as [`Packer::pack`] on its messages).
    pub fn pack(&mut self, budget: usize) -> Packed {
        self.pack_with(budget, None)
    }

    /// Hybrid pack of the whole session (same result as [`Packer::pack_hybrid`]).
    pub fn pack_hybrid(&mut self, budget: usize, embedder: &dyn Embedder) -> Packed {
        let e = if self.packer.opts.semantic {
            Some(embedder)
        } else {
            None
        };
        self.pack_with(budget, e)
    }

    fn pack_with(&mut self, budget: usize, e: Option<&dyn Embedder>) -> Packed {
        let contents = contents_of(&self.history, &self.dated);
        self.packer
            .run_prepared(&self.history, &contents, &self.ids, budget, e)
    }
}

#[cfg(test)]
mod speaker_tests {
    use super::*;

    /// The packer's language (counts remembered per message, dated ones counted afresh)
    /// answers as `lang::detect` of the same history, however it grows.
    #[test]
    fn the_remembered_language_is_detects() {
        let mut p = Packer::new(PackOptions::default());
        let ts = 1_786_104_000_000;
        let texts = [
            "where is the staging password?".to_string(),
            "ayer dejé la clave en el cofre de la casa".to_string(),
            "¿dónde está la clave de la casa que usamos ayer?".to_string(),
            "the key is in the box, as you said yesterday ".repeat(300),
            "la clave está en el cofre".to_string(),
        ];
        let mut history = Vec::new();
        for t in &texts {
            history.push(Message::new("user", t.as_str()).with_ts(ts));
            let dated: Vec<Option<Arc<str>>> = history.iter().map(|m| p.dated_one(m)).collect();
            let contents = contents_of(&history, &dated);
            let ids: Vec<u32> = contents.iter().map(|c| p.msg_id(c)).collect();
            for _ in 0..2 {
                let got = p.history_lang(&history, &contents, &ids);
                assert_eq!(
                    got,
                    crate::lang::detect(&history),
                    "{} messages",
                    history.len()
                );
            }
        }
        assert!(p.msgs.iter().any(|m| m.lang_counts.is_some()));
    }

    #[test]
    fn a_speaker_is_a_short_capitalised_name_before_a_colon() {
        assert_eq!(
            speaker_of("Caroline: I went to the group"),
            Some("Caroline")
        );
        assert_eq!(speaker_of("Ana María López: hola"), Some("Ana María López"));
        assert_eq!(speaker_of("note: lower case is not a name"), None);
        assert_eq!(speaker_of("The build failed at 10: 30 today"), None);
        assert_eq!(speaker_of("no colon at all"), None);
    }

    #[test]
    fn only_one_named_speaker_of_several_counts() {
        let s = [Some("Caroline"), Some("Melanie"), None, Some("Caroline")];
        assert_eq!(
            named_speaker(&s, "What did Caroline paint?"),
            Some("Caroline")
        );
        assert_eq!(
            named_speaker(&s, "what did caroline paint"),
            Some("Caroline")
        );
        assert_eq!(named_speaker(&s, "Did Melanie and Caroline meet?"), None);
        assert_eq!(named_speaker(&s, "Who painted the sunrise?"), None);
        // A history with one speaker gives the name no information.
        assert_eq!(named_speaker(&[Some("Caroline")], "Caroline?"), None);
        // Part of a word is no name.
        assert_eq!(named_speaker(&s, "Carolines?"), None);
    }

    #[test]
    fn the_lift_keeps_relevance_in_the_unit_interval_and_the_order_otherwise() {
        let item = |by_named| Item {
            kind_hit: false,
            line: 0,
            first: false,
            stale: false,
            bm: 0.0,
            sem: 0.0,
            rec: 0.0,
            score: 0.0,
            q_hit: false,
            dup: false,
            pin: false,
            by_named,
        };
        let (named, other) = (item(true), item(false));
        let w = |speaker_weight, kind_weight| PackOptions {
            speaker_weight,
            kind_weight,
            ..PackOptions::default()
        };
        let (off, on) = (w(0.0, 0.0), w(0.2, 0.0));
        assert_eq!(lift(0.7, &other, &off), 0.7);
        assert_eq!(lift(0.7, &named, &off), 0.7);
        assert!((lift(1.0, &named, &on) - 1.0).abs() < 1e-12);
        assert!(lift(0.6, &named, &on) > lift(0.7, &other, &on));
        assert!(lift(0.5, &other, &on) < lift(0.6, &other, &on));
        assert!(lift(0.0, &other, &on) >= 0.0);
        let timed = Item {
            kind_hit: true,
            ..item(true)
        };
        let both = w(0.2, 0.3);
        assert!((lift(1.0, &timed, &both) - 1.0).abs() < 1e-12);
        assert!(lift(0.5, &timed, &both) > lift(0.5, &named, &both));
    }
}

#[cfg(test)]
mod rank_tests {
    use super::*;
    use proptest::prelude::*;

    fn special() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MIN_POSITIVE),
            Just(-f64::MIN_POSITIVE),
            Just(1.0),
            any::<f64>(),
        ]
    }

    proptest! {
        /// `rank_descending` gives the order of a stable sort by `total_cmp`, best first, for
        /// any keys (ties, signed zeros, infinities and NaNs included).
        #[test]
        fn rank_descending_is_the_stable_total_order(keys in prop::collection::vec(special(), 0..60)) {
            let got = rank_descending(0..keys.len(), |i| keys[i]);
            let mut want: Vec<usize> = (0..keys.len()).collect();
            want.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]));
            prop_assert_eq!(got, want);
        }
    }
}
