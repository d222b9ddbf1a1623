//! `bib bench probes` — recall of the history packer on the project's own multilingual
//! paraphrase probe set, generated from a seed.
//!
//! The set: one session per language (es, en, de, fr, pt, ru, uk) and kind (a `dialogue`
//! between a user and an assistant, an `agent` at work with tool calls and results), each of
//! 300 to 360 messages of composed everyday or coding filler with 6 to 8 facts planted at
//! random depths; at least two facts per session are corrected later (a rescheduled
//! appointment, a configuration file read again with a new value), and then the probe expects
//! the current value. Every fact gets one question; at least 65 % of them (rounded up, per
//! session) are paraphrases — synonyms, hypernyms, another word order, another register, or no
//! content word shared with the fact — and the rest reuse the fact's words. The facts and the
//! questions were written before the packer ever ran on them and are not adjusted to its
//! results (`bench/probes/README.md`).
//!
//! Protocol: each session is read with `bib_pack::input::history_from_value` (what `bib pack`
//! reads), indexed once as a `Session`, and each probe packs `history + {user: question}` into
//! the budget, as `bib bench locomo` does. A probe passes when every `expect` string is in the
//! packed output, both compared by `bib_pack::probes::normalize` (lower case, whitespace runs
//! as one space). `--write DIR` writes the sessions as `bib pack` input and the probes as
//! JSONL, for inspection.

mod generate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use bib_pack::probes::{judge, Probe, ProbeResult, QuestionStyle};
use bib_pack::{Message, PackOptions, Session};
use serde::Serialize;
use serde_json::Value;

use crate::pack_common::{
    load_hybrid_embedder, pack_question, parse_budgets, parse_variant, PackFn, MODELS,
};
pub use generate::{generate, message_text, GeneratedSession, Origin, DEFAULT_SEED};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seed of the generator: the same seed gives the same sessions and probes.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Comma-separated token budgets.
    #[arg(long, default_value = "1000,1500,3000")]
    budgets: String,
    /// Also run the hybrid packer (BM25 + embeddings of `--model`).
    #[arg(long)]
    hybrid: bool,
    /// The embedding model of `--hybrid` (installed with `bib model install`); `auto` picks
    /// as `bib pack` does: e5-small when installed, else use-m3.
    #[arg(long, default_value = "auto", value_parser = MODELS)]
    model: String,
    /// Also run these packer variants (hybrid with `--hybrid`, else lexical), each as
    /// space-separated `field=value` pairs of `PackOptions` (`--variant "sem_units=true"`);
    /// repeatable.
    #[arg(long)]
    variant: Vec<String>,
    /// Write the summary rows and every probe's result as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the generated sessions (one `bib pack` input file each) and probes.jsonl here.
    #[arg(long)]
    write: Option<PathBuf>,
    /// List the probes that failed.
    #[arg(long)]
    failures: bool,
}

/// One probe's result under one packer and budget.
#[derive(Debug, Clone, Serialize)]
struct Outcome {
    packer: String,
    #[serde(flatten)]
    result: ProbeResult,
}

/// Recall and tokens of one packer at one budget.
#[derive(Debug, Clone, Serialize)]
struct Row {
    packer: String,
    budget: usize,
    probes: usize,
    passed: usize,
    recall_pct: f64,
    /// Recall per breakdown (`lang:es`, `kind:agent`, `style:paraphrase`, …).
    by: BTreeMap<String, Share>,
    avg_output_tokens: f64,
    max_output_tokens: usize,
    over_budget: usize,
    /// Superseded probes that kept the old value too, and that kept the current value's date.
    superseded_old_kept: usize,
    superseded_date_kept: usize,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Share {
    passed: usize,
    of: usize,
}

impl Share {
    fn pct(self) -> f64 {
        100.0 * self.passed as f64 / self.of.max(1) as f64
    }

    fn cell(self) -> String {
        if self.of == 0 {
            "–".into()
        } else {
            format!("{:.1}", self.pct())
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let budgets = parse_budgets(&args.budgets)?;
    let sessions = generate(args.seed)?;
    if let Some(dir) = &args.write {
        write_sessions(dir, &sessions)?;
        eprintln!(
            "wrote {} sessions and probes.jsonl to {}",
            sessions.len(),
            dir.display()
        );
    }
    let histories = sessions
        .iter()
        .map(|s| {
            bib_pack::input::history_from_value(&Value::Array(s.messages.clone()))
                .with_context(|| format!("reading generated session {}", s.name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let probes: usize = sessions.iter().map(|s| s.probes.len()).sum();
    eprintln!(
        "probe set (seed {}): {} sessions, {} messages, {probes} probes",
        args.seed,
        sessions.len(),
        histories.iter().map(Vec::len).sum::<usize>()
    );

    let embedder = load_hybrid_embedder(args.hybrid, &args.model)?;
    let variants = args
        .variant
        .iter()
        .map(|v| Ok((v.clone(), parse_variant(v)?)))
        .collect::<anyhow::Result<Vec<(String, PackOptions)>>>()?;
    let defaults = PackOptions::default();
    let mut outcomes = Vec::new();
    for &budget in &budgets {
        let run = |name: String, opts: &PackOptions, pack: &mut PackFn<'_>| {
            run_packer(name, opts, &sessions, &histories, budget, pack)
        };
        outcomes.extend(run("lexical".into(), &defaults, &mut |s, b| s.pack(b)));
        if let Some(e) = embedder.as_deref() {
            outcomes.extend(run("hybrid".into(), &defaults, &mut |s, b| {
                s.pack_hybrid(b, e)
            }));
        }
        for (name, opts) in &variants {
            outcomes.extend(match embedder.as_deref() {
                Some(e) => run(format!("hybrid {name}"), opts, &mut |s, b| {
                    s.pack_hybrid(b, e)
                }),
                None => run(format!("lexical {name}"), opts, &mut |s, b| s.pack(b)),
            });
        }
        eprintln!("budget {budget}: done");
    }
    let rows = summarize(&outcomes);
    print_report(args.seed, &sessions, &rows);
    if args.failures {
        print_failures(&outcomes);
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "seed": args.seed,
            "rows": rows,
            "probes": outcomes,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Every probe of every session through one packer at one budget.
fn run_packer(
    packer: String,
    opts: &PackOptions,
    sessions: &[GeneratedSession],
    histories: &[Vec<Message>],
    budget: usize,
    pack: &mut PackFn<'_>,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for (s, history) in sessions.iter().zip(histories) {
        let mut session = Session::new(opts.clone());
        for m in history {
            session.push(m.clone());
        }
        let next_ts = history.last().and_then(|m| m.ts).map(|t| t + 60_000);
        for p in &s.probes {
            let mut q = Message::new("user", p.q.clone());
            q.ts = next_ts;
            let packed = pack_question(&mut session, q, budget, pack);
            out.push(Outcome {
                packer: packer.clone(),
                result: judge(p, &s.name, &packed, budget),
            });
        }
    }
    out
}

/// The breakdown keys of a probe: language, kind, style, superseded, depth, paraphrase kind.
fn keys(p: &ProbeResult) -> Vec<String> {
    let t = &p.tags;
    let mut k = vec![format!("lang:{}", t.lang)];
    if let Some(kind) = t.kind {
        k.push(format!("kind:{}", kind.as_str()));
    }
    if let Some(style) = t.style {
        k.push(format!("style:{}", style.as_str()));
        k.push(format!("lang:{}:{}", t.lang, style.as_str()));
    }
    k.push(format!("superseded:{}", t.superseded));
    if let Some(d) = t.depth {
        k.push(format!("depth:{}", d.as_str()));
    }
    if !t.how.is_empty() {
        k.push(format!("how:{}", t.how));
    }
    k
}

fn summarize(outcomes: &[Outcome]) -> Vec<Row> {
    let mut groups: Vec<((&str, usize), Vec<&ProbeResult>)> = Vec::new();
    for o in outcomes {
        let key = (o.packer.as_str(), o.result.budget);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(&o.result),
            None => groups.push((key, vec![&o.result])),
        }
    }
    groups
        .into_iter()
        .map(|((packer, budget), rs)| {
            let mut by: BTreeMap<String, Share> = BTreeMap::new();
            for r in &rs {
                for k in keys(r) {
                    let e = by.entry(k).or_default();
                    e.of += 1;
                    e.passed += usize::from(r.passed);
                }
            }
            let passed = rs.iter().filter(|r| r.passed).count();
            let tokens = rs.iter().map(|r| r.output_tokens as f64);
            let superseded: Vec<_> = rs.iter().filter(|r| r.tags.superseded).collect();
            Row {
                packer: packer.to_owned(),
                budget,
                probes: rs.len(),
                passed,
                recall_pct: 100.0 * passed as f64 / rs.len().max(1) as f64,
                by,
                avg_output_tokens: bib_eval::stats::mean(tokens).unwrap_or(0.0),
                max_output_tokens: rs.iter().map(|r| r.output_tokens).max().unwrap_or(0),
                over_budget: rs.iter().filter(|r| r.output_tokens > r.budget).count(),
                superseded_old_kept: superseded.iter().filter(|r| r.old_kept).count(),
                superseded_date_kept: superseded.iter().filter(|r| r.date_kept).count(),
            }
        })
        .collect()
}

fn share(row: &Row, key: &str) -> Share {
    row.by.get(key).copied().unwrap_or_default()
}

fn print_report(seed: u64, sessions: &[GeneratedSession], rows: &[Row]) {
    let probes: Vec<&Probe> = sessions.iter().flat_map(|s| &s.probes).collect();
    let paraphrased = probes
        .iter()
        .filter(|p| p.tags.style == Some(QuestionStyle::Paraphrase))
        .count();
    let superseded = probes.iter().filter(|p| p.tags.superseded).count();
    println!(
        "## Probe recall (seed {seed}: {} sessions, {} probes, {paraphrased} paraphrased, {superseded} superseded)\n",
        sessions.len(),
        probes.len()
    );
    println!(
        "| packer | budget | overall | direct | paraphrase | superseded | not superseded | dialogue | agent | avg tok | max tok | > budget |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {:.1} ({}/{}) | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
            r.packer,
            r.budget,
            r.recall_pct,
            r.passed,
            r.probes,
            share(r, "style:direct").cell(),
            share(r, "style:paraphrase").cell(),
            share(r, "superseded:true").cell(),
            share(r, "superseded:false").cell(),
            share(r, "kind:dialogue").cell(),
            share(r, "kind:agent").cell(),
            r.avg_output_tokens,
            r.max_output_tokens,
            r.over_budget
        );
    }

    let mut langs: Vec<&str> = sessions.iter().map(|s| s.lang.as_str()).collect();
    langs.dedup();
    println!("\n### By language: all / paraphrased (recall %)\n");
    print!("| packer | budget |");
    for l in &langs {
        print!(" {l} |");
    }
    println!();
    println!("|---|---:|{}", "---:|".repeat(langs.len()));
    for r in rows {
        print!("| {} | {} |", r.packer, r.budget);
        for l in &langs {
            print!(
                " {} / {} |",
                share(r, &format!("lang:{l}")).cell(),
                share(r, &format!("lang:{l}:paraphrase")).cell()
            );
        }
        println!();
    }

    let hows: Vec<String> = {
        let mut h: Vec<String> = probes
            .iter()
            .filter(|p| !p.tags.how.is_empty())
            .map(|p| p.tags.how.clone())
            .collect();
        h.sort();
        h.dedup();
        h
    };
    println!("\n### By depth of the answer and by kind of paraphrase (recall %)\n");
    print!("| packer | budget | early | middle | late |");
    for h in &hows {
        print!(" {h} |");
    }
    println!();
    println!("|---|---:|---:|---:|---:|{}", "---:|".repeat(hows.len()));
    for r in rows {
        print!(
            "| {} | {} | {} | {} | {} |",
            r.packer,
            r.budget,
            share(r, "depth:early").cell(),
            share(r, "depth:middle").cell(),
            share(r, "depth:late").cell()
        );
        for h in &hows {
            print!(" {} |", share(r, &format!("how:{h}")).cell());
        }
        println!();
    }

    println!("\n### Superseded facts: current value kept, old value also kept, current value with its date\n");
    println!("| packer | budget | probes | current kept | old also kept | with date |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in rows {
        let s = share(r, "superseded:true");
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.packer, r.budget, s.of, s.passed, r.superseded_old_kept, r.superseded_date_kept
        );
    }
}

fn print_failures(outcomes: &[Outcome]) {
    println!("\n### Failed probes\n");
    for o in outcomes.iter().filter(|o| !o.result.passed) {
        let t = &o.result.tags;
        println!(
            "- {} {} · {} · {} {}{}: {}",
            o.packer,
            o.result.budget,
            o.result.session,
            t.fact,
            t.style.map_or("", |s| s.as_str()),
            if t.superseded { " (superseded)" } else { "" },
            o.result.question
        );
    }
}

/// `DIR/<session>.json` (a `bib pack` input) per session and `DIR/probes.jsonl`.
fn write_sessions(dir: &Path, sessions: &[GeneratedSession]) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Line<'a> {
        session: &'a str,
        #[serde(flatten)]
        probe: &'a Probe,
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut jsonl = String::new();
    for s in sessions {
        let path = dir.join(format!("{}.json", s.name));
        std::fs::write(&path, serde_json::to_string_pretty(&s.messages)?)
            .with_context(|| format!("writing {}", path.display()))?;
        for p in &s.probes {
            jsonl.push_str(&serde_json::to_string(&Line {
                session: &s.name,
                probe: p,
            })?);
            jsonl.push('\n');
        }
    }
    let path = dir.join("probes.jsonl");
    std::fs::write(&path, jsonl).with_context(|| format!("writing {}", path.display()))
}
