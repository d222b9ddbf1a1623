//! The optional last stage of [`crate::Retriever::search`]: an LLM reranker (issue 15).
//!
//! The best `depth` candidates after the ranking signals go to the `[llm]` chat endpoint — the
//! one answer synthesis uses ([`crate::synth::SynthConfig`], called through the same helper) —
//! in ONE request: the question and the numbered passages (each cut to [`PASSAGE_CHARS`], all
//! of them to [`PROMPT_CHARS`]), asking for a JSON object of 0–10 relevance judgements,
//! `{"scores":[{"id":3,"score":9},…]}` (by the prompt and `response_format: json_object`; a
//! server that ignores the latter still works: the first JSON object of the reply is read,
//! code fences and prose around it skipped). Each judged candidate gains
//! `weight × score / 10`, recorded as the `llm` part of its [`crate::Explain`]; candidates the
//! model did not judge keep their score. The default weight is 2, not 1: with the default
//! signals a score reaches 1.8 (fused 1 + phrase 0.4 + sentence 0.3 + doc 0.1), so at weight 1
//! a passage judged 10 could stay below one judged 0; at 2 a judgement 10 points apart always
//! wins, nearer judgements blend with the signals, and equal judgements keep the signals'
//! order. On lists
//! the signals do not apply to (RRF ≈ 0.03, vector only, BM25 with `--signals off`: raw BM25)
//! the same weight acts on that list's own scale.
//!
//! A reranker failure never fails the ask: no endpoint configured, a timeout
//! ([`RerankOptions::timeout_s`] bounds the whole request), an HTTP error, a reply over
//! [`REPLY_BYTES`] or without one usable judgement leave the ranking as the signals made it and
//! add a warning to [`crate::RetrievalResult::warnings`].
//!
//! Off by default, and not measured on the benchmarks of BENCHMARKS.md: no LLM endpoint was
//! reachable where they ran.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::RetrieveError;
use crate::index::{ChunkId, ChunkRecord};
use crate::retrieve::{Retriever, ScoredHit};
use crate::signals::SignalPart;
use crate::synth::{post_chat, record_label, SynthConfig};

/// Candidates sent to the reranker by default.
pub const DEFAULT_DEPTH: usize = 20;
/// Weight of the LLM's judgement (score / 10) by default.
pub const DEFAULT_WEIGHT: f64 = 2.0;
/// Whole-request timeout of the rerank call by default, in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 30;
/// Characters of each passage sent.
pub const PASSAGE_CHARS: usize = 800;
/// Characters of the question sent.
pub const QUESTION_CHARS: usize = 1000;
/// Characters of all passages together: the passages past it are not sent (nor judged).
pub const PROMPT_CHARS: usize = 24_000;
/// Bytes of the reply read at most; a longer one is a failure.
pub const REPLY_BYTES: u64 = 256 * 1024;

/// How the reranker runs (the endpoint is the retriever's, [`Retriever::with_llm`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RerankOptions {
    /// Candidates judged (the best after the ranking signals).
    pub depth: usize,
    /// What a judgement of 10 adds to a score.
    pub weight: f64,
    /// Whole-request timeout in seconds.
    pub timeout_s: u64,
}

impl Default for RerankOptions {
    fn default() -> Self {
        Self {
            depth: DEFAULT_DEPTH,
            weight: DEFAULT_WEIGHT,
            timeout_s: DEFAULT_TIMEOUT_S,
        }
    }
}

impl RerankOptions {
    /// Refuse a weight that is negative or not a number.
    pub fn validate(&self) -> Result<(), RetrieveError> {
        if !self.weight.is_finite() || self.weight < 0.0 {
            return Err(RetrieveError::InvalidOption {
                name: "rerank_weight".into(),
                reason: format!("{} must be a number ≥ 0", self.weight),
            });
        }
        Ok(())
    }
}

/// `s` cut to `max` characters (an ellipsis marks the cut).
fn cut(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// The passage of a candidate as the model sees it: where it is from (labelled as synthesis
/// labels its sources), then its text.
pub fn passage_of(rec: &ChunkRecord) -> String {
    format!("{}\n{}", record_label(rec), rec.text())
}

/// The chat messages of one rerank request over `passages` (numbered from 1), and how many
/// of them fit: each is cut to [`PASSAGE_CHARS`], and passages stop before their total passes
/// [`PROMPT_CHARS`] (the first always goes).
pub fn build_messages(question: &str, passages: &[String]) -> (Value, usize) {
    let mut ctx = String::new();
    let (mut sent, mut chars) = (0, 0);
    for (i, p) in passages.iter().enumerate() {
        let block = format!("[{}] {}\n\n", i + 1, cut(p, PASSAGE_CHARS));
        let block_chars = block.chars().count();
        if sent > 0 && chars + block_chars > PROMPT_CHARS {
            break;
        }
        ctx.push_str(&block);
        chars += block_chars;
        sent += 1;
    }
    let messages = json!([
        {"role": "system", "content":
            "You judge how relevant numbered passages are to a question. Score every passage \
             from 0 (unrelated) to 10 (answers the question directly). Reply with only a JSON \
             object, no prose: {\"scores\":[{\"id\":1,\"score\":7},{\"id\":2,\"score\":0}]} \
             with one entry per passage."},
        {"role": "user", "content": format!(
            "Question: {}\n\nPassages:\n\n{ctx}Return the JSON scores for passages 1 to {sent}.",
            cut(question, QUESTION_CHARS)
        )}
    ]);
    (messages, sent)
}

/// The first JSON object in `text` (code fences and prose around it skipped).
pub fn first_json_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    for (at, _) in text.match_indices('{').take(64) {
        let mut it = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(m))) = it.next() {
            return Some(m);
        }
    }
    None
}

/// A number, or a string holding one.
fn number(v: &Value) -> Option<f64> {
    let x: Option<f64> = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    x.filter(|x| x.is_finite())
}

/// The judgements of a reply over `n` passages: `scores[i]` is passage `i + 1`'s score,
/// clamped to [0, 10]; `None` where the model gave none. Ids outside 1..=n, entries without a
/// number and repeats (after the first) are ignored. Accepts
/// `{"scores":[{"id":1,"score":7},…]}` and the map forms `{"scores":{"1":7}}` and `{"1":7}`.
/// An error when the reply has no JSON object or not one usable judgement.
pub fn parse_scores(reply: &str, n: usize) -> Result<Vec<Option<f64>>, String> {
    let obj = first_json_object(reply).ok_or_else(|| {
        format!(
            "the reply has no JSON object: {:?}",
            reply.chars().take(120).collect::<String>()
        )
    })?;
    let mut pairs: Vec<(Option<f64>, Option<f64>)> = Vec::new();
    match obj.get("scores") {
        Some(Value::Array(items)) => {
            for it in items {
                pairs.push((
                    it.get("id").and_then(number),
                    it.get("score").and_then(number),
                ));
            }
        }
        Some(Value::Object(m)) => {
            for (k, v) in m {
                pairs.push((number(&Value::String(k.clone())), number(v)));
            }
        }
        _ => {
            for (k, v) in &obj {
                pairs.push((number(&Value::String(k.clone())), number(v)));
            }
        }
    }
    let mut scores = vec![None; n];
    for (id, score) in pairs {
        let (Some(id), Some(score)) = (id, score) else {
            continue;
        };
        if id.fract() != 0.0 || id < 1.0 || id > n as f64 {
            continue;
        }
        let slot = &mut scores[id as usize - 1];
        if slot.is_none() {
            *slot = Some(score.clamp(0.0, 10.0));
        }
    }
    if scores.iter().all(Option::is_none) {
        return Err(format!("the reply judged none of passages 1 to {n}"));
    }
    Ok(scores)
}

/// Add each judged hit's `weight × score / 10` (its `llm` part) and sort the hits again, best
/// first; equal scores keep their order. `scores[i]` is `hits[i]`'s judgement.
pub fn combine(hits: &mut [ScoredHit], scores: &[Option<f64>], weight: f64) {
    for (h, s) in hits.iter_mut().zip(scores) {
        let Some(s) = *s else { continue };
        let part = SignalPart::new(s / 10.0, weight, Vec::new(), Some(s));
        h.score += part.contribution;
        h.explain.llm = Some(part);
        h.explain.final_score = h.score;
    }
    // Stable: ties keep the order the signals gave.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
}

/// The assistant's text of a chat-completions reply body.
fn reply_content(body: &str) -> Result<String, String> {
    let v: Value =
        serde_json::from_str(body).map_err(|e| format!("the endpoint's reply is not JSON: {e}"))?;
    if let Some(err) = v.get("error") {
        return Err(format!("the endpoint answered an error: {err}"));
    }
    v["choices"][0]["message"]["content"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the endpoint's reply has no choices[0].message.content".to_string())
}

/// Ask the model to judge `passages`: one request, bounded in time and in the reply read.
pub fn judge(
    cfg: &SynthConfig,
    opts: &RerankOptions,
    question: &str,
    passages: &[String],
) -> Result<Vec<Option<f64>>, String> {
    let (messages, sent) = build_messages(question, passages);
    let body = json!({
        "model": cfg.model,
        "messages": messages,
        "temperature": 0,
        "stream": false,
        "response_format": {"type": "json_object"},
    });
    let timeout = Duration::from_secs(opts.timeout_s.max(1));
    let resp = post_chat(cfg, &body, "application/json", timeout).map_err(|e| match e {
        RetrieveError::Synthesis(m) => m,
        RetrieveError::SynthesisFailed { reason, source } => format!("{reason}: {source}"),
        other => other.to_string(),
    })?;
    let mut raw = Vec::new();
    resp.into_reader()
        .take(REPLY_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading the reply: {e}"))?;
    if raw.len() as u64 > REPLY_BYTES {
        return Err(format!("the reply is larger than {REPLY_BYTES} bytes"));
    }
    let content = reply_content(&String::from_utf8_lossy(&raw))?;
    let mut scores = parse_scores(&content, sent)?;
    scores.resize(passages.len(), None);
    Ok(scores)
}

impl Retriever<'_> {
    /// Rerank the best `opts.depth` of `hits` with the LLM ([`judge`], [`combine`]). The
    /// reranker's failures are not errors: the hits stay as they were and the returned warning
    /// says why. Only the store (fetching the passages) can fail.
    pub(crate) fn rerank(
        &self,
        query: &str,
        opts: &RerankOptions,
        hits: &mut [ScoredHit],
    ) -> Result<Option<String>, RetrieveError> {
        let n = opts.depth.min(hits.len());
        if n == 0 || opts.weight == 0.0 {
            return Ok(None);
        }
        let Some(cfg) = self.llm else {
            return Ok(Some(
                "rerank: no [llm] endpoint configured (set BIB_LLM_BASE_URL and BIB_LLM_MODEL, \
                 or base_url and model under [llm] in bib.toml); ranked without the reranker"
                    .into(),
            ));
        };
        let ids: Vec<ChunkId> = hits[..n].iter().map(|h| h.id).collect();
        let records = self.index.chunks(&ids)?;
        let by_id: HashMap<ChunkId, &ChunkRecord> = records.iter().map(|r| (r.id, r)).collect();
        // A candidate whose chunk vanished is sent as an empty passage (and judged low).
        let passages: Vec<String> = ids
            .iter()
            .map(|id| by_id.get(id).map_or_else(String::new, |r| passage_of(r)))
            .collect();
        match judge(cfg, opts, query, &passages) {
            Ok(scores) => {
                combine(&mut hits[..n], &scores, opts.weight);
                Ok(None)
            }
            Err(why) => Ok(Some(format!("rerank: {why}; ranked without the reranker"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::EmbeddingCache;
    use crate::filter::Filter;
    use crate::index::MemoryIndex;
    use crate::retrieve::{Mode, RetrieveOptions};
    use crate::signals::Signals;
    use std::net::TcpListener;

    #[test]
    fn prompt_numbers_passages_and_stays_bounded() {
        let long = "word ".repeat(1000);
        let passages: Vec<String> = (0..100).map(|i| format!("p{i}.md\n{long}")).collect();
        let (m, sent) = build_messages("why?", &passages);
        let user = m[1]["content"].as_str().unwrap();
        assert!(user.starts_with("Question: why?"), "{user}");
        assert!(user.contains("[1] p0.md\n"));
        assert!(sent > 1 && sent < 100, "{sent}");
        assert!(user.contains(&format!("[{sent}] p{}.md", sent - 1)));
        assert!(!user.contains(&format!("[{}] ", sent + 1)));
        let bound = PROMPT_CHARS + QUESTION_CHARS + 200;
        assert!(user.chars().count() <= bound, "{}", user.chars().count());
        // Each passage is cut, with a mark.
        let first = user.split("[2] ").next().unwrap();
        assert!(first.chars().count() < PASSAGE_CHARS + 100);
        assert!(first.contains('…'));
        // A huge question is cut too; one huge passage still goes.
        let (m, sent) = build_messages(&"q".repeat(50_000), &["x".repeat(50_000)]);
        assert_eq!(sent, 1);
        assert!(m[1]["content"].as_str().unwrap().chars().count() < 3000);
        assert!(m[0]["content"].as_str().unwrap().contains("JSON"));
    }

    #[test]
    fn parses_plain_fenced_and_map_replies() {
        let s = parse_scores(r#"{"scores":[{"id":1,"score":9},{"id":2,"score":0}]}"#, 2).unwrap();
        assert_eq!(s, vec![Some(9.0), Some(0.0)]);
        let fenced = "Sure! Here you go:\n```json\n{\"scores\": [{\"id\": \"2\", \"score\": \"7.5\"}]}\n```\nDone.";
        assert_eq!(
            parse_scores(fenced, 3).unwrap(),
            vec![None, Some(7.5), None]
        );
        assert_eq!(
            parse_scores(r#"{"scores":{"1":3,"3":10}}"#, 3).unwrap(),
            vec![Some(3.0), None, Some(10.0)]
        );
        assert_eq!(
            parse_scores(r#"{"1": 4, "2": 6}"#, 2).unwrap(),
            vec![Some(4.0), Some(6.0)]
        );
        // A stray brace before the object is skipped.
        assert_eq!(
            parse_scores(r#"{oops {"scores":[{"id":1,"score":2}]}"#, 1).unwrap(),
            vec![Some(2.0)]
        );
    }

    #[test]
    fn ignores_bad_ids_and_clamps_scores() {
        let r = r#"{"scores":[{"id":0,"score":9},{"id":4,"score":9},{"id":1.5,"score":9},
                   {"id":2,"score":42},{"id":2,"score":1},{"id":3,"score":-3},{"id":1}]}"#;
        assert_eq!(
            parse_scores(r, 3).unwrap(),
            vec![None, Some(10.0), Some(0.0)]
        );
    }

    #[test]
    fn garbage_and_empty_judgements_are_errors() {
        for bad in [
            "",
            "I think passage 2 is best.",
            "{not json",
            "[1, 2, 3]",
            r#"{"scores":[]}"#,
            r#"{"scores":[{"id":9,"score":9}]}"#,
            r#"{"answer":"yes"}"#,
        ] {
            assert!(parse_scores(bad, 3).is_err(), "{bad:?}");
        }
    }

    fn hit(id: i64, score: f64) -> ScoredHit {
        ScoredHit::new(id, score, None, None, "convex")
    }

    #[test]
    fn combine_adds_the_weighted_judgement_and_keeps_ties_in_order() {
        let mut hits = vec![hit(1, 0.9), hit(2, 0.8), hit(3, 0.7), hit(4, 0.6)];
        combine(&mut hits, &[Some(2.0), Some(2.0), Some(10.0), None], 1.0);
        let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
        assert_eq!(ids, [3, 1, 2, 4]);
        let top = &hits[0];
        assert!((top.score - 1.7).abs() < 1e-12);
        let p = top.explain.llm.as_ref().unwrap();
        assert_eq!((p.value, p.weight, p.raw), (1.0, 1.0, Some(10.0)));
        assert_eq!(top.explain.final_score, top.score);
        assert!((top.explain.fused + top.explain.contributions() - top.score).abs() < 1e-12);
        // Unjudged: its score, no LLM part.
        assert_eq!(hits[3].score, 0.6);
        assert!(hits[3].explain.llm.is_none());
        // Equal judgements keep the old order.
        let mut hits = vec![hit(5, 0.5), hit(6, 0.4)];
        combine(&mut hits, &[Some(5.0), Some(5.0)], 2.0);
        assert_eq!(hits[0].id, 5);
        assert!((hits[1].score - 1.4).abs() < 1e-12);
    }

    /// A one-shot chat server answering `status` with `content` as the assistant's message
    /// (synthesis's fake server, with a chat-completions body).
    fn serve_once(status: &str, content: &str) -> (String, std::thread::JoinHandle<String>) {
        let body = if status.starts_with("200") {
            json!({"choices":[{"message":{"role":"assistant","content":content}}]}).to_string()
        } else {
            content.to_string()
        };
        crate::synth::tests::serve_once(format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    }

    fn index() -> MemoryIndex {
        let mut ix = MemoryIndex::new();
        let docs = [
            "Restore restore packages restore from the feed.",
            "Restore packages from sources.",
            "The cache keeps restore results. MARKER-42",
        ];
        for (i, c) in docs.iter().enumerate() {
            ix.add(
                ChunkRecord {
                    id: i as i64 + 1,
                    path: format!("d{}.md", i + 1),
                    content: c.to_string(),
                    ..Default::default()
                },
                None,
            )
            .unwrap();
        }
        ix
    }

    fn ask(ix: &MemoryIndex, llm: Option<&SynthConfig>) -> crate::RetrievalResult {
        let cache = EmbeddingCache::default();
        let r = Retriever::new(ix, None, &cache).with_llm(llm);
        let opts = RetrieveOptions {
            mode: Mode::Bm25,
            top_k: 3,
            signals: Signals::default(),
            rerank: Some(RerankOptions::default()),
            ..RetrieveOptions::default()
        };
        r.retrieve("restore packages", &opts, &Filter::default())
            .unwrap()
    }

    #[test]
    fn retrieval_reranks_through_the_endpoint_and_survives_its_failures() {
        let ix = index();
        let cfg = |url: String| {
            let mut c = SynthConfig::from_parts(Some(url), Some("judge".into()), None).unwrap();
            c.timeout_s = 10;
            c
        };
        let plain = {
            let cache = EmbeddingCache::default();
            let opts = RetrieveOptions {
                mode: Mode::Bm25,
                top_k: 3,
                signals: Signals::default(),
                ..RetrieveOptions::default()
            };
            Retriever::new(&ix, None, &cache)
                .retrieve("restore packages", &opts, &Filter::default())
                .unwrap()
        };
        let order = |r: &crate::RetrievalResult| -> Vec<i64> {
            r.chunks.iter().map(|c| c.chunk.id).collect()
        };
        assert_ne!(order(&plain)[0], 3, "the marker page must not already lead");
        assert!(plain.warnings.is_empty());

        // The model scores the marker's passage 10, the others 0.
        let at = order(&plain).iter().position(|&id| id == 3).unwrap() + 1;
        let others: Vec<String> = (1..=3)
            .filter(|&i| i != at)
            .map(|i| format!(r#"{{"id":{i},"score":0}}"#))
            .collect();
        let reply = format!(
            r#"```json
{{"scores":[{{"id":{at},"score":10}},{}]}}
```"#,
            others.join(",")
        );
        let (url, h) = serve_once("200 OK", &reply);
        let r = ask(&ix, Some(&cfg(url)));
        assert_eq!(order(&r)[0], 3, "{:?}", r.warnings);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let x = &r.chunks[0].explain;
        assert_eq!(x.llm.as_ref().unwrap().raw, Some(10.0));
        assert!((x.fused + x.contributions() - r.chunks[0].score).abs() < 1e-9);
        let req = h.join().unwrap();
        assert!(
            req.contains("\"response_format\":{\"type\":\"json_object\"}"),
            "{req}"
        );
        assert!(req.contains("MARKER-42") && req.contains("Question: restore packages"));

        // Garbage, HTTP 500, nothing listening, no endpoint at all: the plain order, warned.
        for (status, content) in [
            ("200 OK", "I cannot do that."),
            ("500 Internal Server Error", "boom"),
        ] {
            let (url, h) = serve_once(status, content);
            let r = ask(&ix, Some(&cfg(url)));
            assert_eq!(order(&r), order(&plain));
            assert!(r.chunks.iter().all(|c| c.explain.llm.is_none()));
            assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
            assert!(r.warnings[0].starts_with("rerank: "), "{:?}", r.warnings);
            h.join().unwrap();
        }
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/v1", l.local_addr().unwrap())
        };
        let r = ask(&ix, Some(&cfg(closed)));
        assert_eq!(order(&r), order(&plain));
        assert!(r.warnings[0].contains("cannot reach"), "{:?}", r.warnings);
        let r = ask(&ix, None);
        assert_eq!(order(&r), order(&plain));
        assert!(
            r.warnings[0].contains("BIB_LLM_BASE_URL"),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn a_silent_endpoint_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        // Accepts, reads, never answers.
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut tmp = [0u8; 8192];
            let _ = s.read(&mut tmp);
            std::thread::sleep(Duration::from_secs(3));
        });
        let cfg = SynthConfig::from_parts(Some(url), Some("m".into()), None).unwrap();
        let opts = RerankOptions {
            timeout_s: 1,
            ..RerankOptions::default()
        };
        let t = std::time::Instant::now();
        let e = judge(&cfg, &opts, "q", &["p".into()]).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(3), "{e}");
        h.join().unwrap();
    }
}
