//! The second stage of [`Retriever::search`]: the fused list's best `signals.depth`
//! candidates re-scored by the ranking signals of [`crate::signals`]. Each signal adds
//! `weight × value` to the fused score and records its part in the hit's [`Explain`]; the
//! candidates below the depth keep their fused score.

use std::collections::HashMap;
use std::sync::Arc;

use bib_embed::{EmbedKind, Embedder};
use bib_text::bm25::{Bm25Index, Bm25Params};
use bib_text::terms::{term_sequence_with, terms_with, TermConfig};

use crate::chunk_text::ChunkText;
use crate::error::RetrieveError;
use crate::index::{ChunkId, ChunkRecord};
use crate::prf;
use crate::retrieve::{RetrieveOptions, Retriever, ScoredHit};
use crate::signals::{
    best_other_of_doc, field_text, file_stem_text, min_max, phrase_score, ExactItem, NameQuery,
    QueryTerms, SignalPart, Signals,
};
use crate::trim::Prepared;

/// A candidate's best sentence, `(score, text)`, by cosine to the question and by BM25.
#[derive(Debug, Clone, Default)]
struct SentenceEvidence {
    cosine: Option<(f64, String)>,
    lexical: Option<(f64, String)>,
}

impl Retriever<'_> {
    /// Re-score the best `opts.signals.depth` of `fused` with the ranking signals and sort
    /// them again; `items` are the question's exact items, `qv` its vector. The depth does not
    /// grow with `top_k`: the signals' scaling is over the same candidates whatever the number
    /// asked for, so the first results of `-k 5` are the first of `-k 50`, and those past the
    /// depth follow in fused order.
    pub(crate) fn rescore(
        &self,
        query: &str,
        opts: &RetrieveOptions,
        cfg: &TermConfig,
        mut fused: Vec<ScoredHit>,
        items: &[ExactItem],
        qv: Option<&[f32]>,
    ) -> Result<Vec<ScoredHit>, RetrieveError> {
        let sig = opts.signals;
        let depth = sig.depth.min(fused.len());
        let ids: Vec<ChunkId> = fused[..depth].iter().map(|h| h.id).collect();
        let records = self.index.chunks(&ids)?;
        let by_id: HashMap<ChunkId, &ChunkRecord> = records.iter().map(|r| (r.id, r)).collect();
        let recs: Vec<Option<&ChunkRecord>> = ids.iter().map(|id| by_id.get(id).copied()).collect();
        let texts = ChunkText::of_all(recs.iter().map(|r| r.map(ChunkRecord::text)).collect());
        self.lexical_parts(query, &sig, cfg, &recs, &mut fused[..depth])?;
        phrase_parts(&sig, items, &texts, &mut fused[..depth]);
        self.sentence_parts(query, &sig, qv, cfg, &texts, &mut fused[..depth])?;
        for h in fused[..depth].iter_mut() {
            h.score = h.explain.fused + h.explain.contributions();
        }
        if sig.prf > 0.0 || sig.prf_vec > 0.0 {
            self.feedback_parts(query, &sig, cfg, &recs, &mut fused[..depth])?;
        }
        if sig.doc > 0.0 {
            doc_parts(sig.doc, &recs, &mut fused[..depth]);
        }
        for h in fused.iter_mut() {
            h.explain.final_score = h.score;
        }
        for h in fused[depth..].iter_mut() {
            h.explain.past_depth = true;
        }
        fused[..depth].sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        Ok(fused)
    }

    /// The field and name parts of each hit (`recs[i]` is the record of `hits[i]`).
    fn lexical_parts(
        &self,
        query: &str,
        sig: &Signals,
        cfg: &TermConfig,
        recs: &[Option<&ChunkRecord>],
        hits: &mut [ScoredHit],
    ) -> Result<(), RetrieveError> {
        let qterms = if sig.field > 0.0 {
            let t = terms_with(query, cfg);
            let (n, dfs) = self.index.doc_freqs(&t)?;
            Some(QueryTerms::new(t, n, &dfs))
        } else {
            None
        };
        let name_query = (sig.name > 0.0).then(|| NameQuery::new(query, cfg));
        for (h, rec) in hits.iter_mut().zip(recs) {
            let Some(rec) = rec else { continue };
            if let Some(q) = &name_query {
                let (v, m) = q.score(&file_stem_text(&rec.path), &rec.title);
                h.explain.name = Some(SignalPart::new(v, sig.name, m, None));
            }
            if let Some(q) = &qterms {
                let (v, m) = q.field_score(&terms_with(&field_text(rec), cfg));
                h.explain.field = Some(SignalPart::new(v, sig.field, m, None));
            }
        }
        Ok(())
    }

    /// The sentence parts of each hit: its best sentence's cosine (min-max scaled over the
    /// hits) and its best sentence's BM25 (over the best of all).
    fn sentence_parts(
        &self,
        query: &str,
        sig: &Signals,
        qv: Option<&[f32]>,
        cfg: &TermConfig,
        texts: &[Option<Arc<ChunkText>>],
        hits: &mut [ScoredHit],
    ) -> Result<(), RetrieveError> {
        let space = match sig.sentence > 0.0 {
            true => self.sentence_space(query, qv)?,
            false => None,
        };
        let want_cos = space.as_ref().map(|(e, v)| (*e, v.as_ref()));
        let want_lex = (sig.sentence_lex > 0.0).then_some(cfg);
        if want_cos.is_none() && want_lex.is_none() {
            return Ok(());
        }
        let evidence = self.sentence_evidence(query, want_cos, want_lex, texts)?;
        let raw = |f: fn(&SentenceEvidence) -> &Option<(f64, String)>| -> Vec<f64> {
            evidence
                .iter()
                .map(|e| f(e).as_ref().map_or(f64::NAN, |c| c.0))
                .collect()
        };
        let cos_scaled = min_max(&raw(|e| &e.cosine));
        let lex_top = raw(|e| &e.lexical)
            .into_iter()
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        let part = |weight: f64, value: f64, best: &Option<(f64, String)>| {
            let matched = best.iter().map(|c| c.1.clone()).collect();
            SignalPart::new(value, weight, matched, best.as_ref().map(|c| c.0))
        };
        for (i, (h, ev)) in hits.iter_mut().zip(&evidence).enumerate() {
            if want_cos.is_some() {
                h.explain.sentence = Some(part(sig.sentence, cos_scaled[i], &ev.cosine));
            }
            if want_lex.is_some() {
                let v = match &ev.lexical {
                    Some((b, _)) if lex_top > 0.0 => b / lex_top,
                    _ => 0.0,
                };
                h.explain.sentence_lex = Some(part(sig.sentence_lex, v, &ev.lexical));
            }
        }
        Ok(())
    }

    /// Per text: its best sentence by cosine to the question when `qv` is given (only the
    /// sentence vectors the cache already holds, under the trimmer's split and keys), and its
    /// best sentence by BM25 over all the texts' sentences when `lexical` is.
    fn sentence_evidence(
        &self,
        query: &str,
        qv: Option<(&dyn Embedder, &[f32])>,
        lexical: Option<&TermConfig>,
        texts: &[Option<Arc<ChunkText>>],
    ) -> Result<Vec<SentenceEvidence>, RetrieveError> {
        let prepared: Vec<Option<Prepared<'_>>> = texts
            .iter()
            .map(|t| t.as_deref().map(ChunkText::prepared))
            .collect();
        let all: Vec<&str> = prepared
            .iter()
            .flatten()
            .flat_map(|p| (0..p.sentences.len()).map(move |i| p.sentence(i)))
            .collect();
        // Ranking never embeds a sentence: a store without sentence vectors costs nothing here
        // and gets no sentence signal.
        let cos: Vec<f64> = match qv {
            Some((e, qv)) if !all.is_empty() => self
                .cache
                .cached(e.model_id(), &all, EmbedKind::Passage)
                .iter()
                .map(|v| {
                    v.as_ref()
                        .map_or(f64::NAN, |v| f64::from(bib_embed::cosine(v, qv)))
                })
                .collect(),
            _ => Vec::new(),
        };
        let lex: Vec<f64> = match lexical {
            Some(cfg) if !all.is_empty() => {
                let ix = Bm25Index::new(
                    all.iter().map(|t| term_sequence_with(t, cfg)),
                    Bm25Params::default(),
                );
                let q = terms_with(query, cfg);
                (0..all.len()).map(|i| ix.score(i, &q)).collect()
            }
            _ => Vec::new(),
        };
        let mut at = 0;
        let mut out = Vec::with_capacity(texts.len());
        for p in &prepared {
            let Some(p) = p else {
                out.push(SentenceEvidence::default());
                continue;
            };
            let m = p.sentences.len();
            let pick = |scores: &[f64]| {
                best_in(scores, at, m).map(|(v, i)| (v, p.sentence(i).to_string()))
            };
            out.push(SentenceEvidence {
                cosine: pick(&cos),
                // A sentence sharing no term with the question is no lexical evidence.
                lexical: pick(&lex).filter(|(s, _)| *s > 0.0),
            });
            at += m;
        }
        Ok(out)
    }

    /// The pseudo-relevance feedback parts ([`crate::prf`]): the `sig.prf_docs` best hits by
    /// their scores so far are the feedback; every hit gains `prf ×` its BM25 of their
    /// expansion terms and `prf_vec ×` its scaled cosine to their mean vector.
    fn feedback_parts(
        &self,
        query: &str,
        sig: &Signals,
        cfg: &TermConfig,
        recs: &[Option<&ChunkRecord>],
        hits: &mut [ScoredHit],
    ) -> Result<(), RetrieveError> {
        let mut order: Vec<usize> = (0..hits.len()).filter(|&i| recs[i].is_some()).collect();
        order.sort_by(|&a, &b| hits[b].score.total_cmp(&hits[a].score).then(a.cmp(&b)));
        let fb: Vec<usize> = order.into_iter().take(sig.prf_docs.max(1)).collect();
        if fb.is_empty() {
            return Ok(());
        }
        let mut parts: Vec<(Option<SignalPart>, Option<SignalPart>)> =
            vec![(None, None); hits.len()];
        if sig.prf > 0.0 {
            let seqs: Vec<Vec<String>> = recs
                .iter()
                .map(|r| r.map_or_else(Vec::new, |r| term_sequence_with(&r.text(), cfg)))
                .collect();
            let mut vocab: Vec<String> = fb.iter().flat_map(|&i| seqs[i].iter().cloned()).collect();
            vocab.sort();
            vocab.dedup();
            let (n, dfs) = self.index.doc_freqs(&vocab)?;
            let df_of: HashMap<&str, usize> = vocab
                .iter()
                .map(String::as_str)
                .zip(dfs.iter().copied())
                .collect();
            let df = |t: &str| (n, df_of.get(t).copied().unwrap_or(0));
            let feedback: Vec<(&[String], f64)> = fb
                .iter()
                .map(|&i| (seqs[i].as_slice(), hits[i].score))
                .collect();
            let model = prf::feedback_terms(&feedback, &terms_with(query, cfg), sig.prf_terms, &df);
            let cands: Vec<&[String]> = seqs.iter().map(Vec::as_slice).collect();
            for (i, (v, held)) in prf::feedback_scores(&model, &cands, &df)
                .into_iter()
                .enumerate()
            {
                if recs[i].is_some() {
                    parts[i].0 = Some(SignalPart::new(v, sig.prf, held, None));
                }
            }
        }
        if sig.prf_vec > 0.0 {
            let ids: Vec<ChunkId> = hits.iter().map(|h| h.id).collect();
            let vecs: HashMap<ChunkId, Vec<f32>> = self.index.vectors(&ids)?.into_iter().collect();
            let fb_vecs: Vec<&[f32]> = fb
                .iter()
                .filter_map(|&i| vecs.get(&hits[i].id).map(Vec::as_slice))
                .collect();
            if let Some(c) = prf::centroid(&fb_vecs) {
                let raw: Vec<f64> = hits
                    .iter()
                    .map(|h| {
                        vecs.get(&h.id)
                            .map_or(f64::NAN, |v| f64::from(bib_embed::cosine(v, &c)))
                    })
                    .collect();
                for (i, v) in min_max(&raw).into_iter().enumerate() {
                    if raw[i].is_finite() {
                        parts[i].1 =
                            Some(SignalPart::new(v, sig.prf_vec, Vec::new(), Some(raw[i])));
                    }
                }
            }
        }
        for (h, (lex, dense)) in hits.iter_mut().zip(parts) {
            h.score += lex.as_ref().map_or(0.0, |p| p.contribution)
                + dense.as_ref().map_or(0.0, |p| p.contribution);
            h.explain.prf = lex;
            h.explain.prf_vec = dense;
        }
        Ok(())
    }
}

/// The best finite score of `scores[at..at + m]` and its offset from `at`.
fn best_in(scores: &[f64], at: usize, m: usize) -> Option<(f64, usize)> {
    (0..m)
        .filter_map(|i| scores.get(at + i).map(|&s| (s, i)))
        .filter(|(s, _)| s.is_finite())
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The phrase part of each hit: the question's exact items found in its text (`texts[i]` is
/// the text of `hits[i]`).
fn phrase_parts(
    sig: &Signals,
    items: &[ExactItem],
    texts: &[Option<Arc<ChunkText>>],
    hits: &mut [ScoredHit],
) {
    if sig.phrase <= 0.0 || items.is_empty() {
        return;
    }
    for (h, text) in hits.iter_mut().zip(texts) {
        if let Some(text) = text {
            let (v, m) = phrase_score(items, text.normalized());
            h.explain.phrase = Some(SignalPart::new(v, sig.phrase, m, None));
        }
    }
}

/// Document aggregation: each hit gains `weight ×` the best score of another hit of the same
/// file, relative to the best hit (scores so far: fused plus the other signals).
fn doc_parts(weight: f64, recs: &[Option<&ChunkRecord>], hits: &mut [ScoredHit]) {
    let paths: Vec<&str> = recs
        .iter()
        .map(|r| r.map_or("", |r| r.path.as_str()))
        .collect();
    let scores: Vec<f64> = hits.iter().map(|h| h.score).collect();
    let top = scores.iter().copied().fold(0.0, f64::max);
    let other = best_other_of_doc(&paths, &scores);
    for (h, o) in hits.iter_mut().zip(other) {
        let v = if top > 0.0 { o / top } else { 0.0 };
        let part = SignalPart::new(v, weight, Vec::new(), None);
        h.score += part.contribution;
        h.explain.doc = Some(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::{bag_of_words, FakeEmbedder};
    use crate::cache::EmbeddingCache;
    use crate::filter::Filter;
    use crate::index::{ChunkIndex, Hit, MemoryIndex};
    use crate::retrieve::{convex_fuse, Mode, RetrievalResult, DEFAULT_CONVEX_ALPHA};
    use serde_json::json;

    /// Long (so plain BM25 ranks it low), with the identifier and an error message.
    const NU1101_PAGE: &str = "Unable to find package Foo. NU1101 is raised then. Lorem ipsum dolor \
        sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore \
        magna aliqua ut enim ad minim veniam quis nostrud exercitation ullamco laboris nisi ut \
        aliquip ex ea commodo consequat duis aute irure dolor in reprehenderit in voluptate velit \
        esse cillum dolore eu fugiat nulla pariatur excepteur sint occaecat cupidatat non proident.";

    /// A small wiki where the question's identifier and title words sit in a chunk that plain
    /// fusion ranks low.
    fn wiki(e: &FakeEmbedder) -> MemoryIndex {
        let docs: [(&str, &str, &str); 5] = [
            ("errors/nu1101.md", "NU1101", NU1101_PAGE),
            (
                "guides/restore.md",
                "Restore",
                "Restore packages restore restore from every source; restore the packages.",
            ),
            (
                "guides/sources.md",
                "Sources",
                "A package source is a feed; restore reads every package source.",
            ),
            (
                "reference/nuspec.md",
                "nuspec reference",
                "The manifest lists metadata such as id and version.",
            ),
            (
                "guides/create.md",
                "Create a package",
                "Write a nuspec, then pack the nuspec into a package with nuspec tools.",
            ),
        ];
        let mut ix = MemoryIndex::new();
        for (i, (p, t, c)) in docs.into_iter().enumerate() {
            let content = format!("[Doc: {t}]\n{c}");
            let v = e
                .embed(&[content.as_str()], EmbedKind::Passage)
                .unwrap()
                .remove(0);
            ix.add(
                ChunkRecord {
                    id: i as i64 + 1,
                    path: p.into(),
                    chunk_index: 0,
                    title: t.into(),
                    heading_path: vec![],
                    content,
                    metadata: json!({}),
                    ..Default::default()
                },
                Some(v),
            )
            .unwrap();
        }
        ix
    }

    fn paths(r: &RetrievalResult) -> Vec<&str> {
        r.chunks.iter().map(|c| c.chunk.path.as_str()).collect()
    }

    #[test]
    fn field_and_phrase_signals_lift_their_pages() {
        let e = bag_of_words();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let run = |q: &str, signals: Signals| {
            let opts = RetrieveOptions {
                top_k: 5,
                signals,
                ..Default::default()
            };
            r.retrieve(q, &opts, &Filter::default()).unwrap()
        };
        let field = Signals {
            field: 1.0,
            ..Signals::OFF
        };
        // `page` is below the top without the signal and first with it.
        let lifts = |without: &RetrievalResult, with: &RetrievalResult, page: &str| {
            let rank_of = |r: &RetrievalResult| paths(r).iter().position(|x| *x == page);
            assert!(rank_of(without) > Some(0), "{:?}", paths(without));
            assert_eq!(rank_of(with), Some(0), "{:?}", paths(with));
        };
        let boosted = run("nuspec", field);
        lifts(
            &run("nuspec", Signals::OFF),
            &boosted,
            "reference/nuspec.md",
        );
        // The name signal, as the default weighs it: `nuspec` is the name of `nuspec.md` and
        // only a word of `create.md`.
        let named = run("nuspec", Signals::default());
        let unnamed = run(
            "nuspec",
            Signals {
                name: 0.0,
                ..Signals::default()
            },
        );
        lifts(&unnamed, &named, "reference/nuspec.md");
        let name_of = |r: &RetrievalResult, p: &str| {
            let c = r.chunks.iter().find(|c| c.chunk.path == p).unwrap();
            c.explain.name.as_ref().unwrap().value
        };
        assert_eq!(name_of(&named, "reference/nuspec.md"), 1.0);
        assert_eq!(name_of(&named, "guides/create.md"), 0.0);
        let phrase = Signals {
            phrase: 1.5,
            exact_candidates: 5,
            ..Signals::OFF
        };
        let q = "restore says \"Unable to find package\" for my package source";
        let boosted = run(q, phrase);
        lifts(&run(q, Signals::OFF), &boosted, "errors/nu1101.md");
        let p = boosted.chunks[0].explain.phrase.as_ref().unwrap();
        assert!(
            p.matched.contains(&"unable to find package".to_string()),
            "{p:?}"
        );
    }

    #[test]
    fn explain_adds_up_and_off_is_the_fusion_alone() {
        let e = bag_of_words();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let run = |q: &str, signals: Signals| {
            let opts = RetrieveOptions {
                top_k: 5,
                signals,
                ..Default::default()
            };
            r.retrieve(q, &opts, &Filter::default()).unwrap()
        };
        let q = "restore says \"Unable to find package\" for my package source";
        let all = Signals {
            field: 0.3,
            name: 0.3,
            phrase: 0.3,
            sentence: 0.3,
            sentence_lex: 0.3,
            doc: 0.3,
            prf: 0.3,
            prf_vec: 0.3,
            prf_docs: 2,
            prf_terms: 5,
            depth: 10,
            exact_candidates: 5,
            typo: 0,
        };
        for res in [run(q, all), run("nuspec", all)] {
            for c in &res.chunks {
                let x = &c.explain;
                let parts: f64 = [
                    &x.field,
                    &x.name,
                    &x.phrase,
                    &x.sentence,
                    &x.sentence_lex,
                    &x.doc,
                    &x.prf,
                    &x.prf_vec,
                ]
                .iter()
                .filter_map(|p| p.as_ref().map(|p| p.contribution))
                .sum();
                assert!((x.fused + parts - c.score).abs() < 1e-12, "{x:?}");
                assert_eq!(x.final_score, c.score);
                assert!(x.field.is_some() && x.name.is_some() && x.sentence.is_some());
                assert!(x.doc.is_some());
                assert!(x.sentence_lex.is_some() && x.prf.is_some() && x.prf_vec.is_some());
                assert_eq!(
                    x.phrase.is_some(),
                    res.query == q,
                    "only {q:?} has exact items"
                );
                let b = x.bm25_norm.unwrap_or(0.0);
                let cn = x.cosine_norm.unwrap_or(0.0);
                assert!(
                    (x.alpha.unwrap() * b + (1.0 - x.alpha.unwrap()) * cn - x.fused).abs() < 1e-12
                );
            }
            assert!(res.chunks.windows(2).all(|w| w[0].score >= w[1].score));
        }
        // Off: nothing but the fusion, and the same order as before the signals existed.
        let off = run(q, Signals::OFF);
        assert!(off
            .chunks
            .iter()
            .all(|c| c.explain.field.is_none() && c.explain.doc.is_none()));
        let bm = ix.bm25_top(q, 50, &Filter::default()).unwrap();
        let qv = r.embed_query(q).unwrap();
        let ve = ix.vector_top(&qv, 50, &Filter::default()).unwrap();
        let missing: Vec<ChunkId> = bm
            .iter()
            .map(|h| h.id)
            .filter(|id| !ve.iter().any(|v| v.id == *id))
            .collect();
        let extra: Vec<Hit> = ix
            .vectors(&missing)
            .unwrap()
            .into_iter()
            .map(|(id, v)| Hit {
                id,
                score: f64::from(bib_embed::cosine(&v, &qv)),
            })
            .collect();
        let want: Vec<ChunkId> = convex_fuse(&bm, &ve, &extra, DEFAULT_CONVEX_ALPHA, 5)
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(
            off.chunks.iter().map(|c| c.chunk.id).collect::<Vec<_>>(),
            want
        );
    }

    #[test]
    fn exact_items_pull_their_own_candidates() {
        let e = bag_of_words();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        // One BM25 candidate, and it is not the NU1101 page, unless its identifier pulls it in.
        let q = "NU1101 restore";
        let top = ix.bm25_top(q, 1, &Filter::default()).unwrap();
        assert_ne!(
            top[0].id, 1,
            "the fixture's long NU1101 page must not lead plain BM25"
        );
        let opts = |exact_candidates| RetrieveOptions {
            top_k: 1,
            candidates: 1,
            mode: Mode::Bm25,
            signals: Signals {
                phrase: 2.0,
                exact_candidates,
                ..Signals::OFF
            },
            ..Default::default()
        };
        let without = r.retrieve(q, &opts(0), &Filter::default()).unwrap();
        let with = r.retrieve(q, &opts(3), &Filter::default()).unwrap();
        assert!(
            !paths(&without).contains(&"errors/nu1101.md"),
            "{:?}",
            paths(&without)
        );
        assert!(
            paths(&with).contains(&"errors/nu1101.md"),
            "{:?}",
            paths(&with)
        );
        let c = with.chunks.iter().find(|c| c.chunk.id == 1).unwrap();
        assert_eq!(c.explain.fusion, "bm25");
        assert!(
            c.bm25.is_none(),
            "pulled in: not in the question's BM25 list"
        );
        let p = c.explain.phrase.as_ref().unwrap();
        assert!(p.matched.contains(&"nu1101".to_string()), "{p:?}");
    }

    #[test]
    fn sentence_signal_reads_known_vectors_and_never_embeds() {
        let e = bag_of_words();
        let ix = wiki(&e);
        let cache = EmbeddingCache::default();
        let r = Retriever::new(&ix, Some(&e), &cache);
        let q = "which metadata does the manifest list";
        let opts = RetrieveOptions {
            top_k: 5,
            signals: Signals {
                sentence: 1.0,
                ..Signals::OFF
            },
            ..Default::default()
        };
        let calls = e.calls();
        let cold = r.retrieve(q, &opts, &Filter::default()).unwrap();
        assert_eq!(e.calls(), calls + 1, "the query only");
        assert!(cold.chunks.iter().all(|c| c
            .explain
            .sentence
            .as_ref()
            .is_some_and(|p| p.raw.is_none())));
        let sentence = "The manifest lists metadata such as id and version.";
        cache.embed(&e, &[sentence], EmbedKind::Passage).unwrap();
        let warm = r.retrieve(q, &opts, &Filter::default()).unwrap();
        let top = &warm.chunks[0];
        assert_eq!(top.chunk.path, "reference/nuspec.md");
        let p = top.explain.sentence.as_ref().unwrap();
        assert_eq!(p.matched, [sentence]);
        assert!(p.raw.is_some_and(|c| c > 0.0) && p.value == 1.0, "{p:?}");
    }
}
