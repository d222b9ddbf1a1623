//! Every settings key, documented once: [`KEYS`]. `bib config --defaults` prints them as a
//! commented `bib.toml` ([`defaults_toml`]), `--help` names each flag's key and variable from
//! them, the environment is read through them, and tests hold README.md's table to them.

use super::{ConfigError, Settings};

/// How an environment variable's text becomes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvKind {
    /// Taken as written (a path, a URL, a name).
    Text,
    /// One of a few names, any case (`RRF` = `rrf`).
    Name,
    /// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`.
    Switch,
    /// A non-negative integer.
    Count,
    /// A number.
    Number,
}

impl EnvKind {
    /// The TOML value of `raw`, or an error naming `var`.
    pub fn parse(self, var: &'static str, raw: &str) -> Result<toml::Value, ConfigError> {
        let raw = raw.trim();
        let bad = |what: &str| ConfigError::Env {
            var,
            reason: format!("`{raw}` is not {what}"),
        };
        Ok(match self {
            EnvKind::Text => toml::Value::String(raw.to_string()),
            EnvKind::Name => toml::Value::String(raw.to_ascii_lowercase()),
            EnvKind::Switch => match raw.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => toml::Value::Boolean(true),
                "0" | "false" | "no" | "off" => toml::Value::Boolean(false),
                _ => return Err(bad("1 or 0")),
            },
            EnvKind::Count => toml::Value::Integer(
                raw.parse::<u32>()
                    .map_err(|_| bad("a non-negative integer"))?
                    .into(),
            ),
            EnvKind::Number => toml::Value::Float(
                raw.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| bad("a number"))?,
            ),
        })
    }
}

/// One key of `bib.toml`.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Dotted name: `store`, `ask.top_k`.
    pub name: &'static str,
    /// The environment variable that sets it, and how its text is read.
    pub env: Option<(&'static str, EnvKind)>,
    /// A variable read (the same way) when `env` is unset: an older or more general name
    /// (`BIB_OPENAI_BASE_URL`, `OPENAI_API_KEY`).
    pub env_fallback: Option<&'static str>,
    /// The long flags that set it (without `--`), on every command that has them.
    pub flags: &'static [&'static str],
    /// A value shown, commented out, where the default is "unset" (TOML syntax).
    pub example: Option<&'static str>,
    /// What "unset" means, where it is not "none": `--help` shows it as the default.
    pub unset_means: Option<&'static str>,
    /// What it does, in one or two sentences.
    pub doc: &'static str,
}

impl Key {
    const fn new(name: &'static str, doc: &'static str) -> Self {
        Key {
            name,
            env: None,
            env_fallback: None,
            flags: &[],
            example: None,
            unset_means: None,
            doc,
        }
    }
    const fn env(mut self, var: &'static str, kind: EnvKind) -> Self {
        self.env = Some((var, kind));
        self
    }
    const fn env_fallback(mut self, var: &'static str) -> Self {
        self.env_fallback = Some(var);
        self
    }
    const fn flags(mut self, flags: &'static [&'static str]) -> Self {
        self.flags = flags;
        self
    }
    const fn example(mut self, example: &'static str) -> Self {
        self.example = Some(example);
        self
    }
    const fn unset_means(mut self, meaning: &'static str) -> Self {
        self.unset_means = Some(meaning);
        self
    }

    /// The table it lives in (`ask`), or `None` at the top.
    pub fn table(&self) -> Option<&'static str> {
        self.name.split_once('.').map(|(t, _)| t)
    }

    /// Its name inside its table (`top_k`).
    pub fn leaf(&self) -> &'static str {
        self.name.split_once('.').map_or(self.name, |(_, k)| k)
    }
}

/// Every key, in the order `bib config --defaults` prints them.
pub const KEYS: &[Key] = &[
    Key::new(
        "store",
        "The knowledge base: a SQLite file, or a postgres:// URL (PostgreSQL + pgvector).",
    )
    .env("BIB_STORE", EnvKind::Text)
    .flags(&["store"]),
    Key::new("ask.top_k", "Chunks returned per question.").flags(&["top-k"]),
    Key::new(
        "ask.mode",
        "Retrieval: hybrid (keywords and vectors), bm25 (keywords only, loads no model) or vector.",
    )
    .flags(&["mode"]),
    Key::new(
        "ask.candidates",
        "Length of the keyword and the vector list before they are combined.",
    ),
    Key::new(
        "ask.fusion",
        "How hybrid combines its two lists: convex (weighted normalised scores) or rrf (reciprocal rank fusion).",
    )
    .env("RETRIEVAL_FUSION", EnvKind::Name)
    .flags(&["fusion"]),
    Key::new(
        "ask.fusion_alpha",
        "Keyword (BM25) weight of convex fusion, from 0 to 1. Unset: the value calibrated for \
         the knowledge base's model (use-m3 0.7, e5-small 0.5; any other, such as an `openai:` \
         endpoint's, use-m3's 0.7).",
    )
    .env("RETRIEVAL_FUSION_ALPHA", EnvKind::Number)
    .example("0.7")
    .unset_means("calibrated per model: use-m3 0.7, e5-small 0.5, others 0.7")
    .flags(&["fusion-alpha"]),
    Key::new(
        "ask.rrf_k",
        "Constant k of reciprocal rank fusion (--fusion rrf, and the hybrid trim scorer).",
    )
    .flags(&["rrf-k"]),
    Key::new(
        "ask.signals",
        "Ranking signals over the fused list: off, default, or weights over the defaults such as \"field=0.2,phrase=0,doc=0\" (over none after a leading off: \"off,name=1\"; field, name, phrase, sentence, sentence_lex, doc, prf, prf_vec; depth, exact_candidates, prf_docs, prf_terms).",
    )
    .env("RETRIEVAL_SIGNALS", EnvKind::Text)
    .flags(&["signals"]),
    Key::new(
        "ask.trim",
        "Trim every chunk to the sentences relevant to the question.",
    )
    .env("RETRIEVAL_TRIM", EnvKind::Switch)
    .flags(&["trim", "no-trim"]),
    Key::new(
        "ask.trim_threshold",
        "Lowest sentence-to-question similarity (cosine) that trimming keeps. Unset: the value \
         calibrated for the knowledge base's model (use-m3 0.214, e5-small 0.82; any other, such \
         as an `openai:` endpoint's, use-m3's 0.214).",
    )
    .env("RETRIEVAL_TRIM_THRESHOLD", EnvKind::Number)
    .example("0.214")
    .unset_means("calibrated per model: use-m3 0.214, e5-small 0.82, others 0.214")
    .flags(&["trim-threshold"]),
    Key::new(
        "ask.trim_window",
        "Neighbouring sentences kept on each side of a kept sentence.",
    )
    .env("RETRIEVAL_TRIM_WINDOW", EnvKind::Count)
    .flags(&["trim-window"]),
    Key::new(
        "ask.trim_min_sentences",
        "Sentences kept per chunk even when none is similar enough.",
    )
    .flags(&["trim-min-sentences"]),
    Key::new(
        "ask.trim_lexical_top",
        "Sentences of all results always kept for their keyword (BM25) rank; 0 keeps by similarity only.",
    )
    .env("RETRIEVAL_TRIM_LEXICAL_TOP", EnvKind::Count)
    .flags(&["trim-lexical-top"]),
    Key::new(
        "ask.trim_scorer",
        "How trimming ranks sentences: cosine (similarity), or hybrid (keyword rank fused with similarity).",
    )
    .flags(&["trim-scorer"]),
    Key::new(
        "ask.filters",
        "Metadata filters key=value (a front-matter field, or path=<prefix>); all must hold.",
    )
    .flags(&["filter"]),
    Key::new(
        "ask.synonyms",
        "Synonym rules, as in Elasticsearch: \"a, b => c\" (a question with a or b also \
         searches c by keywords) or \"a, b, c\" (any of them searches the others too). For \
         the words your users ask with that your pages do not use; the answer says what was \
         added.",
    )
    .example("[\"biblioteca, librería => paquete\", \"betas, versiones preliminares\"]")
    .flags(&["synonym"]),
    Key::new(
        "ask.log",
        "Record every ask in the query log, which `bib eval` replays.",
    )
    .env("BIB_QUERY_LOG", EnvKind::Switch)
    .flags(&["no-log"]),
    Key::new(
        "ask.fallback",
        "When the knowledge base's embedding model cannot be loaded: none (fail and say how to install it) or bm25 (keywords only, untrimmed, with a warning).",
    )
    .flags(&["fallback-bm25"]),
    Key::new(
        "ask.rerank",
        "Rerank the best candidates with the [llm] chat model (one request per ask; off by default, not measured here). Any failure leaves the usual ranking, with a warning.",
    )
    .env("RETRIEVAL_RERANK", EnvKind::Switch)
    .flags(&["rerank", "no-rerank"]),
    Key::new(
        "ask.rerank_depth",
        "Candidates (the best after the ranking signals) the reranker judges.",
    )
    .env("RETRIEVAL_RERANK_DEPTH", EnvKind::Count)
    .flags(&["rerank-depth"]),
    Key::new(
        "ask.rerank_weight",
        "What the reranker's top judgement (10 of 10) adds to a score; the signals' scores are about 0 to 2.",
    ),
    Key::new(
        "ask.rerank_timeout_s",
        "Seconds the reranker's request may take before the ask goes on without it.",
    ),
    Key::new(
        "llm.base_url",
        "OpenAI-compatible chat endpoint that --synthesize sends the question and context to (and --rerank the candidates).",
    )
    .env("BIB_LLM_BASE_URL", EnvKind::Text)
    .example("\"http://localhost:11434/v1\""),
    Key::new("llm.model", "Chat model of that endpoint.")
        .env("BIB_LLM_MODEL", EnvKind::Text)
        .example("\"qwen2.5:3b\""),
    Key::new(
        "llm.api_key",
        "API key of that endpoint (better kept in the environment than in a file).",
    )
    .env("BIB_LLM_API_KEY", EnvKind::Text)
    .example("\"sk-...\""),
    Key::new(
        "embed.base_url",
        "OpenAI-compatible embeddings endpoint (Ollama, TEI, vLLM, OpenAI) of the `openai:<name>` models, with or without the trailing /v1.",
    )
    .env("BIB_EMBED_BASE_URL", EnvKind::Text)
    .env_fallback("BIB_OPENAI_BASE_URL")
    .example("\"http://localhost:11434\""),
    Key::new(
        "embed.api_key",
        "API key of that endpoint, sent as a bearer token (better kept in the environment than in a file).",
    )
    .env("BIB_EMBED_API_KEY", EnvKind::Text)
    .env_fallback("OPENAI_API_KEY")
    .example("\"sk-...\""),
    Key::new(
        "embed.dimensions",
        "Vector width asked of that endpoint when a knowledge base is built with `--model openai:<name>` (models that can shorten theirs); recorded in its model id as `openai:<name>@<width>`, so it changes nothing for one already built. Unset: the model's own.",
    )
    .env("BIB_EMBED_DIMENSIONS", EnvKind::Count)
    .example("768"),
    Key::new(
        "embed.model",
        "Another name of ingest.model (the embedding model a knowledge base is built with); set one of the two.",
    )
    .example("\"e5-small\""),
    Key::new(
        "ingest.model",
        "Embedding model to build the knowledge base with: `use-m3` (the default) or `e5-small`, installed, or `openai:<name>`, model <name> of the [embed] endpoint; an existing knowledge base keeps the one it was built with unless this is set.",
    )
    .flags(&["model"])
    .example("\"e5-small\""),
    Key::new(
        "ingest.exclude",
        "Files and folders left out, gitignore syntax relative to the ingested folder (.gitignore and .bibignore always apply).",
    )
    .flags(&["exclude"])
    .example("[\"drafts/\", \"*.tmp.md\"]"),
    Key::new(
        "ingest.max_file_bytes",
        "Files larger than this many bytes are skipped and reported.",
    )
    .flags(&["max-file-bytes"]),
    Key::new(
        "ingest.window_chunks",
        "Chunks embedded before their documents are committed (smaller loses less work to a crash).",
    )
    .flags(&["window-chunks"]),
    Key::new(
        "ingest.sentence_vectors",
        "Embed every chunk sentence at ingest, so trimming never embeds at ask time.",
    )
    .flags(&["no-sentence-vectors"]),
    Key::new(
        "ingest.debounce_ms",
        "--watch: milliseconds of quiet after a change before the next run.",
    )
    .flags(&["debounce-ms"]),
    Key::new(
        "serve.allow_origins",
        "Origins (scheme://host:port) whose pages may read answers across origins, as the help widget embedded in another site does; only the read routes answer them, and none are allowed by default.",
    )
    .flags(&["allow-origin"])
    .example("[\"http://localhost:3000\"]"),
];

/// The flags and environment variable that set `key` besides `bib.toml`, as ` (--top-k,
/// RETRIEVAL_TOP_K)`; empty for a key only the file sets (or no key).
pub fn set_also_by(key: &str) -> String {
    let Some(k) = KEYS.iter().find(|k| k.name == key) else {
        return String::new();
    };
    let mut by: Vec<String> = k.flags.iter().map(|f| format!("--{f}")).collect();
    by.extend(k.env.map(|(var, _)| var.to_string()));
    if by.is_empty() {
        String::new()
    } else {
        format!(" ({})", by.join(", "))
    }
}

/// The key a long flag sets, if any.
pub fn key_of_flag(flag: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.flags.contains(&flag))
}

/// A commented `bib.toml` holding every key at its default (unset ones as commented examples);
/// it parses back into `Settings::default()`.
pub fn defaults_toml() -> String {
    let defaults = toml::Table::try_from(Settings::default()).unwrap_or_default();
    let mut out = String::from(
        "# bib.toml: every key at its default. Strongest first: command-line flags, then the\n\
         # environment variables named here, then this file, then these defaults. Keys this\n\
         # file does not know are an error. Found as --config FILE, else $BIB_CONFIG, else\n\
         # ./bib.toml.\n",
    );
    let mut table = None;
    for key in KEYS {
        if key.table() != table {
            table = key.table();
            if let Some(t) = table {
                out.push_str(&format!("\n[{t}]\n"));
            }
        }
        out.push('\n');
        for line in wrap(key.doc, 92) {
            out.push_str(&format!("# {line}\n"));
        }
        let mut set_by = Vec::new();
        if let Some((var, _)) = key.env {
            match key.env_fallback {
                Some(old) => set_by.push(format!("env {var} (else {old})")),
                None => set_by.push(format!("env {var}")),
            }
        }
        set_by.extend(key.flags.iter().map(|f| format!("--{f}")));
        if !set_by.is_empty() {
            out.push_str(&format!("# Also: {}.\n", set_by.join(", ")));
        }
        let value = match key.table() {
            Some(t) => defaults.get(t).and_then(|v| v.get(key.leaf())),
            None => defaults.get(key.name),
        };
        // An empty list with an example shows the example, commented (the default is none).
        let empty = value
            .and_then(|v| v.as_array())
            .is_some_and(|a| a.is_empty());
        match (value, key.example) {
            (Some(_), Some(e)) if empty => out.push_str(&format!("# {} = {e}\n", key.leaf())),
            (Some(v), _) => out.push_str(&format!("{} = {v}\n", key.leaf())),
            (None, Some(e)) => out.push_str(&format!("# {} = {e}\n", key.leaf())),
            (None, None) => out.push_str(&format!("# {} =\n", key.leaf())),
        }
    }
    out
}

/// Words of `text` in lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// The dotted key whose name or value covers byte `at` of a TOML text (`ask.top_k`).
pub(super) fn key_at(text: &str, at: usize) -> Option<String> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut path = Vec::new();
    find(doc.get_ref(), at, &mut path).then(|| path.join("."))
}

fn find(table: &toml::de::DeTable<'_>, at: usize, path: &mut Vec<String>) -> bool {
    for (k, v) in table {
        path.push(k.get_ref().to_string());
        if let Some(sub) = v.get_ref().as_table() {
            if find(sub, at, path) {
                return true;
            }
        }
        // A table's own span (its header) counts after its keys were searched.
        if k.span().contains(&at) || v.span().contains(&at) {
            return true;
        }
        path.pop();
    }
    false
}
