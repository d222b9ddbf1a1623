//! `bib bench locomo` — evidence recall of the history packer on LoCoMo, side by side with the
//! JavaScript reference (run through node in the same invocation).
//!
//! Protocol (identical to the header of `shared/bench/reference/locomo_pack.mjs`):
//! one message per dialog turn; role `user` for speaker_a and `assistant` for speaker_b;
//! content `"<speaker>: <text>"` plus `" [shares <blip_caption>]"`; `ts` = the session's
//! date_time as UTC. Each QA with evidence packs `history + {user: question}` into the budget.
//! A piece of evidence is recalled when the first 60 characters of its turn's text (whitespace
//! collapsed) appear in the packed output; recall is the mean over QAs of found / evidence.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use bib_pack::{Message, PackOptions, Session};
use serde_json::Value;

use crate::pack_common::{
    load_hybrid_embedder, pack_question, parse_budgets, parse_variant, utc_ms, PackFn, MODELS,
};

const PROBES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../pack/tests/data/probes.json"
));

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Comma-separated token budgets.
    #[arg(long, default_value = "1000,1500,3000,8000")]
    budgets: String,
    /// Also run the hybrid path (BM25 + embeddings of `--model`).
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
    /// Hybrid variants to compare, as `sem_budget:rrf_k` pairs (comma-separated); empty = the
    /// defaults only. Every variant shares one embedding cache, so a turn is embedded once.
    #[arg(long, value_delimiter = ',')]
    hybrid_variants: Vec<String>,
    /// Conversations to run, as `first-last` (0-based, inclusive).
    #[arg(long, default_value = "0-9")]
    convs: String,
    /// Folder holding locomo10.json and locomo10_qa.jsonl.
    #[arg(
        long,
        env = "BIB_LOCOMO_DATA",
        default_value = "/work/shared/bench/data/locomo"
    )]
    data: PathBuf,
    /// The reference benchmark script (run with node).
    #[arg(long, default_value = "/work/shared/bench/reference/locomo_pack.mjs")]
    reference: PathBuf,
    /// Skip running the reference.
    #[arg(long)]
    no_reference: bool,
    /// Also run this port in reference-compatible mode (`strict_budget` off).
    #[arg(long)]
    compat: bool,
    /// Write the full report as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write every question whose evidence was not all recalled here, as JSONL (packer,
    /// budget, category, question, the missed turns' ids and text), to see what is missed.
    #[arg(long)]
    failures: Option<PathBuf>,
}

/// One question whose evidence was not all in the pack.
#[derive(Debug, Clone, serde::Serialize)]
struct Miss {
    packer: String,
    budget: usize,
    category: String,
    question: String,
    missed: Vec<(String, String)>,
}

/// One packer configuration's result at one budget.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    packer: String,
    budget: usize,
    questions: usize,
    recall_pct: f64,
    evidence_micro_pct: f64,
    by_category: BTreeMap<String, f64>,
    avg_output_tokens: f64,
    max_output_tokens: usize,
    over_budget: usize,
    ms_per_pack: f64,
    #[serde(skip)]
    misses: Vec<Miss>,
}

struct Qa {
    question: String,
    category: String,
    evidence: Vec<String>,
}

struct Conv {
    history: Vec<Message>,
    text_of: BTreeMap<String, String>,
    qas: Vec<Qa>,
}

/// JavaScript's `s.replace(/\s+/g, ' ').trim()`.
fn norm(s: &str) -> String {
    s.split(|c: char| c.is_whitespace() || c == '\u{FEFF}')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first `n` UTF-16 units of `s`.
fn prefix16(s: &str, n: usize) -> &str {
    let mut u = 0;
    for (i, c) in s.char_indices() {
        u += c.len_utf16();
        if u > n {
            return &s[..i];
        }
    }
    s
}

/// "1:56 pm on 8 May, 2023" → epoch ms, UTC.
fn parse_locomo_date(s: &str) -> Option<i64> {
    let s = s.trim();
    let (time, rest) = s.split_once(" on ")?;
    let time = time.trim().to_lowercase();
    let (hm, ampm) = if let Some(t) = time.strip_suffix("pm") {
        (t.trim(), true)
    } else if let Some(t) = time.strip_suffix("am") {
        (t.trim(), false)
    } else {
        return None;
    };
    let (h, m) = hm.split_once(':')?;
    let mut h: u32 = h.trim().parse().ok()?;
    let m: u32 = m.trim().parse().ok()?;
    h %= 12;
    if ampm {
        h += 12;
    }
    let rest = rest.replace(',', " ");
    let parts: Vec<&str> = rest.split_whitespace().collect();
    if parts.len() < 3 {
        return None;
    }
    let day: u32 = parts[0].parse().ok()?;
    let month = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
    .iter()
    .position(|x| *x == parts[1].to_lowercase())? as u32
        + 1;
    let year: i32 = parts[2].parse().ok()?;
    Some(utc_ms(year, month, day, h, m))
}

fn load(data: &std::path::Path, c0: usize, c1: usize) -> anyhow::Result<Vec<Conv>> {
    let conv_path = data.join("locomo10.json");
    let qa_path = data.join("locomo10_qa.jsonl");
    let convs: Value = serde_json::from_str(
        &std::fs::read_to_string(&conv_path)
            .with_context(|| format!("reading {}", conv_path.display()))?,
    )
    .with_context(|| format!("parsing {}", conv_path.display()))?;
    let qa_text = std::fs::read_to_string(&qa_path)
        .with_context(|| format!("reading {}", qa_path.display()))?;
    let mut qas_by: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (i, line) in qa_text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}", qa_path.display(), i + 1))?;
        let sid = v["sample_id"].as_str().unwrap_or_default().to_owned();
        qas_by.entry(sid).or_default().push(v);
    }
    let arr = convs
        .as_array()
        .context("locomo10.json: expected an array")?;
    let mut out = Vec::new();
    for conv in arr.iter().take(c1 + 1).skip(c0) {
        let c = &conv["conversation"];
        let a = c["speaker_a"].as_str().unwrap_or_default();
        let mut history = Vec::new();
        let mut text_of = BTreeMap::new();
        let mut s = 1;
        while !c[format!("session_{s}")].is_null() || !c[format!("session_{s}_date_time")].is_null()
        {
            if let Some(turns) = c[format!("session_{s}")].as_array() {
                let ts =
                    parse_locomo_date(c[format!("session_{s}_date_time")].as_str().unwrap_or(""));
                for t in turns {
                    let speaker = t["speaker"].as_str().unwrap_or_default();
                    let text = t["text"].as_str().unwrap_or_default();
                    let mut content = format!("{speaker}: {text}");
                    if let Some(cap) = t["blip_caption"].as_str() {
                        if !cap.is_empty() {
                            content.push_str(&format!(" [shares {cap}]"));
                        }
                    }
                    let role = if speaker == a { "user" } else { "assistant" };
                    history.push(Message {
                        role: role.into(),
                        content,
                        ts,
                    });
                    if let Some(id) = t["dia_id"].as_str() {
                        text_of.insert(id.to_owned(), prefix16(&norm(text), 60).to_owned());
                    }
                }
            }
            s += 1;
        }
        let sid = conv["sample_id"].as_str().unwrap_or_default();
        let mut qas = Vec::new();
        for q in qas_by.get(sid).map(Vec::as_slice).unwrap_or(&[]) {
            let evidence: Vec<String> = q["evidence"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .filter(|d| text_of.contains_key(*d))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if evidence.is_empty() {
                continue;
            }
            let question = match &q["question"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            qas.push(Qa {
                question,
                category: q["category_name"].as_str().unwrap_or("?").to_owned(),
                evidence,
            });
        }
        out.push(Conv {
            history,
            text_of,
            qas,
        });
    }
    Ok(out)
}

fn run_ours(
    name: &str,
    convs: &[Conv],
    budget: usize,
    opts: &PackOptions,
    pack: &mut PackFn<'_>,
) -> Row {
    let (mut n, mut sum, mut ev_total, mut ev_found, mut tok_sum, mut max_tok, mut over) =
        (0usize, 0.0f64, 0usize, 0usize, 0usize, 0usize, 0usize);
    let mut ns = 0u128;
    let mut cats: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let mut misses = Vec::new();
    for conv in convs {
        // one session per conversation, indexed as it is written (outside the timing, as a
        // live session would have done turn by turn); the question is pushed, packed, popped
        let mut session = Session::new(opts.clone());
        for m in &conv.history {
            session.push(m.clone());
        }
        for qa in &conv.qas {
            let t0 = Instant::now();
            let r = pack_question(
                &mut session,
                Message::new("user", qa.question.clone()),
                budget,
                pack,
            );
            ns += t0.elapsed().as_nanos();
            let joined = r
                .messages
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let out = norm(&joined);
            let missed: Vec<(String, String)> = qa
                .evidence
                .iter()
                .filter(|d| !out.contains(conv.text_of[*d].as_str()))
                .map(|d| (d.clone(), conv.text_of[d].clone()))
                .collect();
            let found = qa.evidence.len() - missed.len();
            if !missed.is_empty() {
                misses.push(Miss {
                    packer: name.to_owned(),
                    budget,
                    category: qa.category.clone(),
                    question: qa.question.clone(),
                    missed,
                });
            }
            let rec = found as f64 / qa.evidence.len() as f64;
            n += 1;
            sum += rec;
            ev_total += qa.evidence.len();
            ev_found += found;
            let t = bib_pack::output_tokens(&r.messages);
            tok_sum += t;
            max_tok = max_tok.max(t);
            if t > budget {
                over += 1;
            }
            let e = cats.entry(qa.category.clone()).or_default();
            e.0 += rec;
            e.1 += 1;
        }
    }
    Row {
        packer: name.to_owned(),
        budget,
        questions: n,
        recall_pct: 100.0 * sum / n.max(1) as f64,
        evidence_micro_pct: 100.0 * ev_found as f64 / ev_total.max(1) as f64,
        by_category: cats
            .into_iter()
            .map(|(k, (s, c))| (k, 100.0 * s / c as f64))
            .collect(),
        avg_output_tokens: tok_sum as f64 / n.max(1) as f64,
        max_output_tokens: max_tok,
        over_budget: over,
        ms_per_pack: ns as f64 / 1e6 / n.max(1) as f64,
        misses,
    }
}

fn run_reference(args: &Args, budgets: &[usize]) -> anyhow::Result<Vec<Row>> {
    let b = budgets
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    eprintln!(
        "running the reference: node {} --budgets {b} --convs {}",
        args.reference.display(),
        args.convs
    );
    let out = Command::new("node")
        .arg(&args.reference)
        .args(["--budgets", &b, "--convs", &args.convs, "--mode", "lexical"])
        .output()
        .context("running node (is it installed?)")?;
    if !out.status.success() {
        bail!("reference failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut rows = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
    {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("reference output: {line}"))?;
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        rows.push(Row {
            packer: "reference-js".into(),
            budget: f("budget") as usize,
            questions: f("questions") as usize,
            recall_pct: f("recall_pct"),
            evidence_micro_pct: f("evidence_micro_pct"),
            by_category: v["by_category"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, x)| (k.clone(), x.as_f64().unwrap_or(f64::NAN)))
                        .collect()
                })
                .unwrap_or_default(),
            avg_output_tokens: f("avg_output_tokens"),
            max_output_tokens: 0,
            over_budget: 0,
            ms_per_pack: f("ms_per_pack"),
            misses: Vec::new(),
        });
    }
    Ok(rows)
}

/// A named hybrid variant (`--hybrid-variants`) and its options.
type HybridVariant = (String, PackOptions);

pub fn run(args: Args) -> anyhow::Result<()> {
    let budgets = parse_budgets(&args.budgets)?;
    let (c0, c1) = parse_conversation_range(&args.convs)?;
    let convs = load(&args.data, c0, c1)?;
    let nq: usize = convs.iter().map(|c| c.qas.len()).sum();
    eprintln!(
        "LoCoMo: {} conversations, {nq} questions with evidence",
        convs.len()
    );

    let embedder = load_hybrid_embedder(args.hybrid, &args.model)?;
    let variants = parse_hybrid_variants(&args)?;
    let warm_up = embedder
        .as_deref()
        .zip(budgets.first())
        .map(|(e, &b)| embed_everything_once(&convs, b, e));

    let mut rows =
        run_ours_at_every_budget(&args, &convs, &budgets, embedder.as_deref(), &variants);
    if !args.no_reference {
        rows.extend(run_reference(&args, &budgets)?);
    }
    print_report(&rows, &budgets);
    if let Some(WarmUp {
        row: w,
        question_ms,
    }) = warm_up
    {
        println!(
            "\nHybrid ms/pack is the packer's with every turn and question already embedded: a \
             first hybrid pass at {} tokens embedded them ({:.1} s, {:.3} ms/pack). A live \
             session embeds each turn once when it arrives, and each question when it is \
             asked: {question_ms:.3} ms per question with {} (one text per call).",
            w.budget,
            w.ms_per_pack * w.questions as f64 / 1000.0,
            w.ms_per_pack,
            embedder.as_ref().map_or("no model", |e| e.model_id())
        );
    }

    run_own_probe_set(embedder.as_deref(), &variants)?;
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.failures {
        let mut text = String::new();
        for m in rows.iter().flat_map(|r| &r.misses) {
            text.push_str(&serde_json::to_string(m)?);
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Pack every question once with the hybrid packer at `budget`, so the shared embedding cache
/// holds every turn and question before anything is timed; returns that pass's row (its
/// ms/pack is the cold cost).
fn embed_everything_once(convs: &[Conv], budget: usize, e: &dyn bib_embed::Embedder) -> WarmUp {
    eprintln!("hybrid: embedding every turn and question once (not timed)");
    // A live pack embeds its question: one text per call, timed here on its own.
    let t0 = Instant::now();
    let mut n = 0usize;
    for qa in convs.iter().flat_map(|c| &c.qas) {
        // an error shows in the packs themselves (they fall back to lexical)
        let _ = e.embed(&[qa.question.as_str()], bib_embed::EmbedKind::Query);
        n += 1;
    }
    let question_ms = t0.elapsed().as_secs_f64() * 1000.0 / n.max(1) as f64;
    let row = run_ours(
        "hybrid warm-up",
        convs,
        budget,
        &PackOptions::default(),
        &mut |s, b| s.pack_hybrid(b, e),
    );
    WarmUp { row, question_ms }
}

/// What [`embed_everything_once`] measured: its pass (cold ms/pack) and the mean time to
/// embed one question on its own.
struct WarmUp {
    row: Row,
    question_ms: f64,
}

/// `--convs`: `first-last`, both inclusive.
fn parse_conversation_range(convs: &str) -> anyhow::Result<(usize, usize)> {
    convs
        .split_once('-')
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
        .context("--convs must look like 0-9")
}

/// `--hybrid-variants`: each `sem_budget:rrf_k`, named `bib hybrid sb=… k=…`.
fn parse_hybrid_variants(args: &Args) -> anyhow::Result<Vec<HybridVariant>> {
    let mut variants: Vec<HybridVariant> = Vec::new();
    for v in &args.hybrid_variants {
        let (sb, k) = v
            .split_once(':')
            .with_context(|| format!("--hybrid-variants: `{v}` is not sem_budget:rrf_k"))?;
        let opts = PackOptions {
            sem_budget: sb.trim().parse().context("--hybrid-variants: sem_budget")?,
            rrf_k: k.trim().parse().context("--hybrid-variants: rrf_k")?,
            ..PackOptions::default()
        };
        variants.push((format!("bib hybrid sb={sb} k={k}"), opts));
    }
    for v in &args.variant {
        variants.push((format!("bib [{v}]"), parse_variant(v)?));
    }
    Ok(variants)
}

/// Our packer's rows: per budget, lexical, compat (with `--compat`), then hybrid and its
/// variants (with an embedder).
fn run_ours_at_every_budget(
    args: &Args,
    convs: &[Conv],
    budgets: &[usize],
    embedder: Option<&dyn bib_embed::Embedder>,
    variants: &[HybridVariant],
) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for &budget in budgets {
        let opts = PackOptions::default();
        rows.push(run_ours(
            "bib lexical",
            convs,
            budget,
            &opts,
            &mut |s, b| s.pack(b),
        ));
        if args.compat {
            let opts = PackOptions::reference();
            rows.push(run_ours("bib compat", convs, budget, &opts, &mut |s, b| {
                s.pack(b)
            }));
        }
        if let Some(e) = embedder {
            rows.push(run_ours("bib hybrid", convs, budget, &opts, &mut |s, b| {
                s.pack_hybrid(b, e)
            }));
        }
        for (name, vo) in variants {
            rows.push(match embedder {
                Some(e) => run_ours(name, convs, budget, vo, &mut |s, b| s.pack_hybrid(b, e)),
                None => run_ours(name, convs, budget, vo, &mut |s, b| s.pack(b)),
            });
        }
        let last = rows
            .last()
            .map(|r| format!("{:.2}%", r.recall_pct))
            .unwrap_or_default();
        eprintln!("budget {budget}: done ({last})");
    }
    rows
}

/// Run and print the project's own probe set with lexical and (with an embedder) hybrid
/// packing and its variants.
fn run_own_probe_set(
    embedder: Option<&dyn bib_embed::Embedder>,
    variants: &[HybridVariant],
) -> anyhow::Result<()> {
    // The project's own probe set (multilingual + agent sessions): a default may only change
    // if this does not lose.
    let set = bib_pack::probes::ProbeSet::parse(PROBES).context("parsing the probe set")?;
    let mut configs: Vec<(String, bool, PackOptions)> =
        vec![("bib lexical".into(), false, PackOptions::default())];
    if embedder.is_some() {
        configs.push(("bib hybrid".into(), true, PackOptions::default()));
        for (name, o) in variants {
            configs.push((name.clone(), true, o.clone()));
        }
    }
    println!("\nOwn probe set (crates/pack/tests/data/probes.json)");
    for (name, hybrid, o) in configs {
        let res = bib_pack::probes::run_probes(&set, |h, b| {
            let mut p = bib_pack::Packer::new(o.clone());
            match (embedder, hybrid) {
                (Some(e), true) => p.pack_hybrid(h, b, e),
                _ => p.pack(h, b),
            }
        });
        let passed = res.iter().filter(|r| r.passed).count();
        let failed: Vec<String> = res
            .iter()
            .filter(|r| !r.passed)
            .map(|r| format!("{}: {}", r.session, r.question))
            .collect();
        println!(
            "  {name:<12} {passed}/{} passed{}",
            res.len(),
            if failed.is_empty() {
                String::new()
            } else {
                format!("; failed: {}", failed.join(" | "))
            }
        );
    }
    Ok(())
}

fn print_report(rows: &[Row], budgets: &[usize]) {
    println!(
        "LoCoMo evidence recall ({} questions)",
        rows.first().map_or(0, |r| r.questions)
    );
    println!(
        "{:>6}  {:<14} {:>8} {:>7} {:>9} {:>8} {:>6} {:>10} {:>8}",
        "budget", "packer", "recall%", "Δref", "avg tok", "max tok", ">bud", "ms/pack", "speed×"
    );
    let mut seen = std::collections::HashSet::new();
    for &b in budgets.iter().filter(|&&b| seen.insert(b)) {
        let reference = rows
            .iter()
            .find(|r| r.budget == b && r.packer == "reference-js");
        for r in rows.iter().filter(|r| r.budget == b) {
            let (d, speed) = match reference {
                Some(x) if r.packer != x.packer => (
                    format!("{:+.2}", r.recall_pct - x.recall_pct),
                    format!("{:.0}×", x.ms_per_pack / r.ms_per_pack.max(1e-9)),
                ),
                _ => (String::new(), String::new()),
            };
            println!(
                "{:>6}  {:<14} {:>8.2} {:>7} {:>9.0} {:>8} {:>6} {:>10.3} {:>8}",
                b,
                r.packer,
                r.recall_pct,
                d,
                r.avg_output_tokens,
                r.max_output_tokens,
                r.over_budget,
                r.ms_per_pack,
                speed
            );
        }
    }
    println!("\nBy category (recall %)");
    let cats: Vec<String> = rows
        .iter()
        .flat_map(|r| r.by_category.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    print!("{:>6}  {:<14}", "budget", "packer");
    for c in &cats {
        print!(" {c:>12}");
    }
    println!();
    for &b in budgets {
        for r in rows.iter().filter(|r| r.budget == b) {
            print!("{:>6}  {:<14}", b, r.packer);
            for c in &cats {
                print!(
                    " {:>12.1}",
                    r.by_category.get(c).copied().unwrap_or(f64::NAN)
                );
            }
            println!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locomo_dates_parse_as_utc() {
        // 2023-05-08 13:56 UTC
        assert_eq!(
            parse_locomo_date("1:56 pm on 8 May, 2023"),
            Some(1_683_554_160_000)
        );
        assert_eq!(
            parse_locomo_date("12:05 am on 1 January, 2024"),
            Some(1_704_067_500_000)
        );
        assert_eq!(parse_locomo_date("garbage"), None);
    }

    #[test]
    fn norm_and_prefix() {
        assert_eq!(norm("  a \n b\t c "), "a b c");
        assert_eq!(prefix16("abcdef", 3), "abc");
        assert_eq!(prefix16("a😀b", 2), "a");
    }
}
