//! `bib pack` — pack a chat/agent history (JSON on stdin) into a token budget (JSON on stdout).
//!
//! Input: OpenAI-style `[{role, content, ts?}]` or Anthropic-style content blocks (also
//! wrapped as `{"messages": [...]}`), read by `bib_pack::input::history_from_value`, the same
//! reader HTTP `/pack` and MCP `bib_pack` use. Output: `{"messages": [{role, content}],
//! "stats": {...}}` — a stable shape; `--stats` also prints a one-line summary to stderr.

use std::io::{Read, Write};

use anyhow::Context;
use bib_app::pack::PackSemantics;
use bib_pack::{parse_history, PackOptions};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Input (stdin or --input), the same for `bib pack`, HTTP POST /pack and MCP bib_pack:
  a JSON array of messages, or {\"messages\": [...]}; each message is
  {\"role\": \"user\", \"content\": \"...\", \"ts\": 1786104000000}
  - role: any non-empty string (user, assistant, system, tool ...)
  - content: a string, null, or Anthropic-style blocks (text, tool_use, tool_result);
    OpenAI tool_calls and role \"tool\" messages are read too
  - ts or timestamp (optional, one of them): the message's time, an RFC 3339 date-time
    (\"2026-08-07T12:00:00Z\") or epoch milliseconds. Epoch seconds are refused (the error
    gives the milliseconds), so a time is never misread as 1970.

Output: {\"messages\": [{role, content, ts?}], \"stats\": {...}}. Left-out lines become a note in
their message; left-out messages become `system` notes in their place (one per run when the
budget has room, else one where the first run was), in the history's language
(\"[…7 earlier messages omitted…]\"). Kept lines keep their words; a relative date in a
message with a time gets a note at the end of its line (\"… yesterday [yesterday = 2026-08-06]\").

Vectors: --hybrid keeps the vectors of what it embedded in ~/.cache/bibliotecario/pack-vectors.sqlite
(at most 50,000, the least recently used dropped first), so the next call on the same growing
history embeds only its new lines. BIB_PACK_VECTORS=PATH puts the file elsewhere; BIB_PACK_VECTORS=off
keeps nothing.

Examples:
  bib pack --budget 2000 < chat.json
  bib pack --budget 800 --hybrid --stats --input session.json
  bib pack --budget 1500 --hybrid --model e5-small --input session-uk.json
  echo '[{\"role\":\"user\",\"content\":\"where is the vault?\"}]' | bib pack --budget 100")]
pub struct Args {
    /// Token budget (packer's own estimate, +4 per message).
    #[arg(long)]
    budget: usize,
    /// Fuse BM25 with embeddings of `--model` (falls back to lexical when the model cannot
    /// be loaded, saying why in `stats.semantic_error`).
    #[arg(long)]
    hybrid: bool,
    /// The embedding model of `--hybrid`: auto (e5-small when it is installed, else use-m3),
    /// use-m3 or e5-small (installed with `bib model install NAME`), or openai:<name> of the
    /// endpoint BIB_EMBED_BASE_URL. e5-small finds more of what was said in other words and
    /// in more languages (Ukrainian among them); it embeds ~8x slower than use-m3, which the
    /// vectors kept between calls make up for from the second call on (BENCHMARKS.md).
    #[arg(long, default_value = bib_app::pack::AUTO_MODEL, requires = "hybrid")]
    model: String,
    /// Print a one-line summary of the stats to stderr.
    #[arg(long)]
    stats: bool,
    /// Fallback time for messages without a timestamp (RFC 3339 or epoch milliseconds, as
    /// `ts`), used to annotate relative dates. Without it such messages are not annotated.
    #[arg(long)]
    now: Option<String>,
    /// Count tokens like the JavaScript packer bib's packer was ported from, to compare the
    /// two side by side. The output can then exceed the budget, most at small budgets
    /// (measured: +35 % at 20 tokens, +22 % at 100, +5 % at 400). Without this flag the
    /// output never exceeds it.
    #[arg(long)]
    reference_budget: bool,
    /// Add the tally card (files read/edited, commands, errors).
    #[arg(long)]
    card: bool,
    /// Read the history from this file instead of stdin.
    #[arg(long)]
    input: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // as HTTP /pack and MCP bib_pack: a budget of 0 can hold nothing
    anyhow::ensure!(args.budget >= 1, "--budget: must be at least 1");
    // A model id that names nothing is the user's mistake, said before any input is read; a
    // known model that cannot be loaded (not installed, no endpoint) still leaves a lexical
    // pack.
    let model = bib_app::pack::pack_model(&args.model);
    bib_app::model::ModelSpec::parse(&model).context("--model")?;
    let text = match &args.input {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the history from stdin")?;
            s
        }
    };
    let history = parse_history(&text).context("reading the history")?;
    let mut opts = PackOptions::default();
    if let Some(now) = &args.now {
        let v = match now.parse::<i64>() {
            Ok(n) => serde_json::json!(n),
            Err(_) => serde_json::json!(now),
        };
        opts.now =
            Some(bib_pack::input::timestamp_ms(&v).map_err(|e| anyhow::anyhow!("--now: {e}"))?);
    }
    opts.strict_budget = !args.reference_budget;
    opts.summary = args.card;
    // Only a hybrid pack reads the settings (the endpoint of an `openai:` model).
    let (semantics, embed) = if args.hybrid {
        let settings = crate::settings::ConfigArg { config: None }.resolve(|_| ())?;
        (PackSemantics::Hybrid(model), settings.embed)
    } else {
        (PackSemantics::Lexical, bib_app::EmbedSettings::default())
    };
    let vectors = bib_app::pack::pack_vectors_path();
    let packed = bib_app::pack::pack_history(
        &history,
        args.budget,
        opts,
        &semantics,
        &embed,
        vectors.as_deref(),
    );
    if args.stats {
        let s = &packed.stats;
        eprintln!(
            "mode={}{} budget={} history_tokens={} output_tokens={} messages={}→{} pinned={} deduped={} dropped_msgs={}{}",
            s.mode,
            s.model.as_deref().map(|m| format!(" model={m}")).unwrap_or_default(),
            s.budget,
            s.history_tokens,
            s.output_tokens,
            s.input_messages,
            s.output_messages,
            s.pinned,
            s.deduped,
            s.dropped_msgs,
            s.semantic_error.as_deref().map(|e| format!(" fallback=\"{e}\"")).unwrap_or_default()
        );
    }
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &packed).context("writing the packed history")?;
    writeln!(out)?;
    Ok(())
}
