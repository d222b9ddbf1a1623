//! Similarity helpers: dedup keys, Jaccard over code-ish tokens (MMR), reciprocal rank fusion.

use std::sync::OnceLock;

use regex::Regex;
use rustc_hash::FxHashSet;

/// The token set MMR and redundancy measurement compare: lowercase runs of `[a-z0-9_./-]`, ≥ 2.
pub fn sim_tokens(s: &str) -> FxHashSet<String> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"[a-z0-9_./-]{2,}").expect("valid regex"));
    let lower = s.to_lowercase();
    re.find_iter(&lower)
        .map(|m| m.as_str().to_owned())
        .collect()
}

/// Jaccard similarity of two sets (0 when either is empty).
pub fn jaccard(a: &FxHashSet<String>, b: &FxHashSet<String>) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (small, big) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let inter = small.iter().filter(|t| big.contains(*t)).count();
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The identity of a line for dedup: whitespace collapsed and lowercased, with a leading line
/// number kept apart from the gutter style.
///
/// The number is part of the identity: `grep -n` prints "10:  return 42;" and "87:  return
/// 42;", and «where is X defined?» — an agent's most common question — is answered by the
/// number; collapsing them gives one site of three, an incomplete answer that looks complete.
/// The gutter style is noise: `42→foo` (a read tool) and `42: foo` (a search) are the same
/// line of the same file and do collapse.
pub fn dedup_key(s: &str) -> String {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"^\s*(\d+)\s*[:→]").expect("valid regex"));
    let (num, body) = match re.captures(s) {
        Some(c) => (
            c.get(1).map(|m| m.as_str()),
            &s[c.get(0).map_or(0, |m| m.end())..],
        ),
        None => (None, s),
    };
    let mut norm = String::with_capacity(body.len());
    for w in body
        .split(crate::tokens::is_js_space)
        .filter(|w| !w.is_empty())
    {
        if !norm.is_empty() {
            norm.push(' ');
        }
        norm.push_str(w);
    }
    let norm = norm.to_lowercase();
    match num {
        Some(n) => format!("{n}|{norm}"),
        None => norm,
    }
}

/// Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): each ranking adds
/// `1 / (k + rank + 1)` to its ids. Positions are fused, not scores, so an unbounded BM25 and a
/// cosine in [-1, 1] need no calibration — it measured better than a weighted sum (0.706 vs
/// 0.685 evidence recall). Ids are indices below `n`; the result holds each id's sum (0 for
/// an id in no ranking).
pub fn rrf_fuse(rankings: &[Vec<usize>], k: f64, n: usize) -> Vec<f64> {
    let weighted: Vec<(&[usize], f64)> = rankings.iter().map(|l| (l.as_slice(), 1.0)).collect();
    rrf_fuse_weighted(&weighted, k, n)
}

/// [`rrf_fuse`] with a weight per ranking: each adds `w / (k + rank + 1)`.
///
/// # Panics
/// If a ranking holds an id `>= n`.
pub fn rrf_fuse_weighted(rankings: &[(&[usize], f64)], k: f64, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; n];
    for &(list, w) in rankings {
        for (r, &id) in list.iter().enumerate() {
            out[id] += bib_text::fusion::rrf(w, k, r + 1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grep_lines_with_same_body_keep_their_numbers() {
        assert_ne!(dedup_key("10:  return 42;"), dedup_key("87:  return 42;"));
        // same line, different gutter style: collapses
        assert_eq!(dedup_key("42→foo()"), dedup_key("42: foo()"));
        // whitespace and case are noise
        assert_eq!(dedup_key("  Foo   bar "), dedup_key("foo bar"));
        assert_eq!(dedup_key("   "), "");
    }

    #[test]
    fn jaccard_basics() {
        let a = sim_tokens("src/a.rs fn main");
        let b = sim_tokens("src/a.rs fn other");
        assert!((jaccard(&a, &a) - 1.0).abs() < 1e-12);
        let j = jaccard(&a, &b);
        assert!(j > 0.0 && j < 1.0);
        assert_eq!(jaccard(&a, &FxHashSet::default()), 0.0);
    }

    #[test]
    fn rrf_rewards_agreement() {
        let f = rrf_fuse(&[vec![1, 2, 3], vec![2, 1, 3]], 60.0, 5);
        assert!((f[1] - f[2]).abs() < 1e-15);
        assert!(f[1] > f[3]);
        assert!((f[3] - 2.0 / 63.0).abs() < 1e-15);
        assert_eq!((f[0], f[4]), (0.0, 0.0), "ids in no ranking sum to 0");
    }
}
