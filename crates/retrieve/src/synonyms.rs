//! Synonyms the knowledge base's owner declares (`ask.synonyms`), as search engines let them
//! (Elasticsearch's synonym rules, Meilisearch's synonyms): the words users ask with next to
//! the words the pages use. A question holding one side of a rule is also searched by keywords
//! for the other side.
//!
//! Rules are written as in Elasticsearch's synonym files:
//! - `biblioteca, librería => paquete`: one way — a question with *biblioteca* or *librería*
//!   also searches *paquete*; a question with *paquete* is left alone;
//! - `betas, prerelease, versiones preliminares`: equivalent — a question with any of them
//!   also searches the others.
//!
//! Matching goes through the one term function, word by word, so *bibliotecas* and
//! *Biblioteca* match *biblioteca* and *subo* matches *subir* (a word matches when the question
//! shares one of its terms: its form or a stem); a phrase of several words matches when the
//! question holds every one of its words (stop words aside), in any order.
//! Only the keyword list (BM25) searches the added words: the question's vector and the ranking
//! signals see the question as asked. The added words count as the question's own: a rule is
//! the owner's statement that the words mean the same here.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bib_text::terms::{terms_with, TermConfig};
use serde::{Deserialize, Serialize};

use crate::error::RetrieveError;

/// One parsed rule: a question holding one of `from` also searches those of `to` it does not
/// hold (an equivalence rule is every phrase to all of them, so the one that matched adds the
/// others).
#[derive(Debug, Clone, PartialEq)]
struct Rule {
    from: Vec<String>,
    to: Vec<String>,
}

/// Words a rule added to the question's keyword search, for the answer to say so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansion {
    /// The phrase of the rule the question holds.
    pub matched: String,
    /// The phrases searched besides it.
    pub added: Vec<String>,
}

/// The question's keyword search after the rules: the question with the added phrases after
/// it, and what was added.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    pub query: String,
    pub expansions: Vec<Expansion>,
}

impl Expanded {
    /// The question searched as asked.
    pub fn unchanged(query: &str) -> Self {
        Expanded {
            query: query.to_string(),
            expansions: Vec::new(),
        }
    }
}

/// Phrases of one side of a rule: comma-separated, trimmed, none empty.
fn phrases(side: &str) -> Option<Vec<String>> {
    let out: Vec<String> = side.split(',').map(|p| p.trim().to_string()).collect();
    (!out.iter().any(String::is_empty)).then_some(out)
}

fn parse(rule: &str) -> Result<Rule, String> {
    let rule = rule.trim();
    if rule.is_empty() {
        return Err("the rule is empty".into());
    }
    match rule.split_once("=>") {
        Some((left, right)) => {
            if right.contains("=>") {
                return Err("more than one `=>`".into());
            }
            let from = phrases(left).ok_or("an empty phrase before `=>`")?;
            let to = phrases(right).ok_or("an empty phrase after `=>`")?;
            Ok(Rule { from, to })
        }
        None => {
            let all = phrases(rule).ok_or("an empty phrase between commas")?;
            if all.len() < 2 {
                return Err("one phrase alone: write `a, b` or `a => b`".into());
            }
            Ok(Rule {
                from: all.clone(),
                to: all,
            })
        }
    }
}

/// Check every rule, naming the first bad one (1-based) and why.
pub fn validate(rules: &[String]) -> Result<(), RetrieveError> {
    for (i, r) in rules.iter().enumerate() {
        parse(r).map_err(|reason| invalid(i, r, reason))?;
    }
    Ok(())
}

fn invalid(i: usize, rule: &str, reason: String) -> RetrieveError {
    RetrieveError::InvalidOption {
        name: "synonyms".into(),
        reason: format!("rule {} `{rule}`: {reason}", i + 1),
    }
}

/// A phrase of a rule with the terms of each of its words under the knowledge base's term
/// function (words without terms, such as stop words, left out).
#[derive(Debug)]
struct Phrase {
    text: String,
    words: Vec<Vec<String>>,
}

impl Phrase {
    fn new(text: String, cfg: &TermConfig) -> Self {
        let words = text
            .split_whitespace()
            .map(|w| terms_with(w, cfg))
            .filter(|t| !t.is_empty())
            .collect();
        Phrase { text, words }
    }

    /// Whether a question with the terms `asked` holds this phrase: each of its words shares
    /// a term with the question. A word's terms are its own form and its stems (both
    /// languages' when the term function stems both), and any one of them is the word.
    fn held_by(&self, asked: &HashSet<String>) -> bool {
        !self.words.is_empty()
            && self
                .words
                .iter()
                .all(|terms| terms.iter().any(|t| asked.contains(t)))
    }

    /// Whether the question already has every term of this phrase, so adding it would add
    /// nothing new (a looser test would drop *publicar* from a question saying *pública*:
    /// they share a stem, not the word).
    fn adds_nothing_to(&self, asked: &HashSet<String>) -> bool {
        self.words.iter().flatten().all(|t| asked.contains(t))
    }
}

/// A rule with its phrases analysed.
#[derive(Debug)]
struct Compiled {
    from: Vec<Phrase>,
    to: Vec<Phrase>,
}

/// The rule set last compiled, with the term function it was compiled under: every ask of a
/// process (a server's, a benchmark's) brings the same rules, and analysing thousands of
/// phrases per ask would cost milliseconds.
type Memo = Option<(Vec<String>, String, Arc<Vec<Compiled>>)>;

fn compiled(rules: &[String], cfg: &TermConfig) -> Result<Arc<Vec<Compiled>>, RetrieveError> {
    static LAST: Mutex<Memo> = Mutex::new(None);
    let cfg_id = cfg.id();
    // A poisoned memo is only a cache: start it over.
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((r, id, c)) = last.as_ref() {
        if r.as_slice() == rules && *id == cfg_id {
            return Ok(c.clone());
        }
    }
    let analyse = |texts: Vec<String>| -> Vec<Phrase> {
        texts
            .into_iter()
            .map(|text| Phrase::new(text, cfg))
            .collect()
    };
    let mut out = Vec::with_capacity(rules.len());
    for (i, text) in rules.iter().enumerate() {
        let rule = parse(text).map_err(|reason| invalid(i, text, reason))?;
        out.push(Compiled {
            from: analyse(rule.from),
            to: analyse(rule.to),
        });
    }
    let out = Arc::new(out);
    *last = Some((rules.to_vec(), cfg_id, out.clone()));
    Ok(out)
}

/// `query` with what `rules` add to it under the term function `cfg`. A phrase already in the
/// question is not added again; each added phrase is added once, whatever matched it.
pub fn expand(query: &str, rules: &[String], cfg: &TermConfig) -> Result<Expanded, RetrieveError> {
    let mut expanded = Expanded::unchanged(query);
    if rules.is_empty() {
        return Ok(expanded);
    }
    let rules = compiled(rules, cfg)?;
    let asked: HashSet<String> = terms_with(query, cfg).into_iter().collect();
    let mut added_words: HashSet<&[Vec<String>]> = HashSet::new();
    for rule in rules.iter() {
        for matched in rule.from.iter().filter(|p| p.held_by(&asked)) {
            let added: Vec<String> = rule
                .to
                .iter()
                .filter(|p| !p.adds_nothing_to(&asked) && added_words.insert(&p.words))
                .map(|p| p.text.clone())
                .collect();
            if added.is_empty() {
                continue;
            }
            for p in &added {
                expanded.query.push(' ');
                expanded.query.push_str(p);
            }
            expanded.expansions.push(Expansion {
                matched: matched.text.clone(),
                added,
            });
        }
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(query: &str, rules: &[&str]) -> Expanded {
        let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        expand(query, &rules, &TermConfig::default()).unwrap()
    }

    #[test]
    fn one_way_rules_add_their_right_side_only() {
        let e = run(
            "¿Cómo subo mi biblioteca?",
            &["biblioteca, librería => paquete"],
        );
        assert_eq!(e.query, "¿Cómo subo mi biblioteca? paquete");
        assert_eq!(
            e.expansions,
            [Expansion {
                matched: "biblioteca".into(),
                added: vec!["paquete".into()]
            }]
        );
        // The other way round: nothing.
        let e = run("¿Cómo subo mi paquete?", &["biblioteca => paquete"]);
        assert_eq!(e.query, "¿Cómo subo mi paquete?");
        assert!(e.expansions.is_empty());
    }

    #[test]
    fn equivalent_phrases_add_each_other_through_the_term_function() {
        let rules = ["betas, prerelease, versiones preliminares"];
        // Capitals match through the folding, other forms of a word through its stems.
        let e = run("No veo las Betas", &rules);
        assert_eq!(
            e.query,
            "No veo las Betas prerelease versiones preliminares"
        );
        assert_eq!(e.expansions[0].matched, "betas");
        let e = run("¿dónde está la beta?", &rules);
        assert_eq!(e.expansions[0].matched, "betas");
        let e = run(
            "¿Cómo subo mis bibliotecas?",
            &["subir => publicar", "biblioteca => paquete"],
        );
        assert_eq!(e.query, "¿Cómo subo mis bibliotecas? publicar paquete");
        // A word sharing only a stem with the question is still added.
        let e = run("subo a la galería pública", &["subir => publicar"]);
        assert_eq!(e.query, "subo a la galería pública publicar");
        // A phrase of two words matches when the question holds both.
        let e = run("mostrar versiones preliminares", &rules);
        assert_eq!(e.expansions[0].added, ["betas", "prerelease"]);
        assert!(run("versiones antiguas", &rules).expansions.is_empty());
    }

    #[test]
    fn nothing_is_added_twice_or_when_already_asked() {
        let rules = ["lib => package", "library, lib => package, nupkg"];
        let e = run("publish my lib", &rules);
        assert_eq!(e.query, "publish my lib package nupkg");
        // The question already says "package": only "nupkg" is added.
        let e = run("publish my lib package", &rules);
        assert_eq!(e.query, "publish my lib package nupkg");
    }

    #[test]
    fn bad_rules_are_named_with_their_number() {
        for (rule, why) in [
            ("", "empty"),
            ("  => x", "before `=>`"),
            ("a =>", "after `=>`"),
            ("a => b => c", "more than one"),
            ("a,, b", "between commas"),
            ("solo", "one phrase alone"),
        ] {
            let rules = vec!["x => y".to_string(), rule.to_string()];
            let e = validate(&rules).unwrap_err().to_string();
            assert!(e.contains("synonyms") && e.contains("rule 2"), "{e}");
            assert!(e.contains(why), "{rule:?}: {e}");
        }
        assert!(validate(&["a, b".into(), "c => d, e".into()]).is_ok());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any rule text is read or refused, never a panic; a refused one names its number.
            #[test]
            fn any_rule_is_read_or_refused(rules in prop::collection::vec("\\PC{0,30}", 1..4)) {
                if let Err(e) = validate(&rules) {
                    prop_assert!(e.to_string().contains("rule "), "{e}");
                }
            }

            /// Valid rules and any question: the question is kept as asked at the start of
            /// the keyword query, and every added phrase is reported once, after it.
            #[test]
            fn expansion_appends_what_it_reports(
                question in "\\PC{0,40}",
                extra in prop::sample::subsequence(
                    vec!["biblioteca", "subir", "galería pública", "betas"], 0..4),
            ) {
                let q = format!("{question} {}", extra.join(" "));
                let rules: Vec<String> = [
                    "biblioteca, librería => paquete",
                    "subir => publicar",
                    "galería pública => nuget.org",
                    "betas, versiones preliminares",
                ]
                .iter()
                .map(|r| r.to_string())
                .collect();
                let e = expand(&q, &rules, &TermConfig::default()).unwrap();
                prop_assert!(e.query.starts_with(&q));
                let added: Vec<&String> = e.expansions.iter().flat_map(|x| &x.added).collect();
                let tail = e.query[q.len()..].to_string();
                let want: String = added.iter().map(|p| format!(" {p}")).collect();
                prop_assert_eq!(tail, want);
                prop_assert!(expand(&q, &[], &TermConfig::default()).unwrap().query == q);
            }
        }
    }
}
