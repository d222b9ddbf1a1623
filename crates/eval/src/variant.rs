//! The retrieval variants the harness compares.

use serde::{Deserialize, Serialize};

use crate::error::{invalid, EvalError};

/// One way of building the context for a question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Whole chunks from the base retrieval mode (what `bib ask` returns without trimming).
    Baseline,
    /// The baseline chunks trimmed to the sentences whose cosine passes the threshold (spec 000).
    Trim,
    /// Like `trim`, but which sentences are kept is decided by fusing the cosine rank with a
    /// sentence-level BM25 rank (the count still comes from the threshold).
    TrimHybrid,
    /// Whole chunks, BM25 list only.
    Bm25,
    /// Whole chunks, vector list only.
    Vector,
    /// Whole chunks, BM25 and vector fused (the default fusion of `bib ask`).
    Hybrid,
    /// Whole chunks, hybrid without the ranking signals (the fusion alone, as before issue 15).
    Plain,
    /// Sentence-level index; each hit expands to ±window sentences inside its parent chunk.
    SmallToBig,
}

impl Variant {
    /// Whether the variant exists to send fewer tokens (trimming, small-to-big): the spec's
    /// reduction and overlap criteria judge these; retrieval variants are judged on quality.
    pub fn saves_tokens(self) -> bool {
        matches!(
            self,
            Variant::Trim | Variant::TrimHybrid | Variant::SmallToBig
        )
    }

    /// Every variant, in report order.
    pub const ALL: [Variant; 8] = [
        Variant::Baseline,
        Variant::Trim,
        Variant::TrimHybrid,
        Variant::Bm25,
        Variant::Vector,
        Variant::Hybrid,
        Variant::Plain,
        Variant::SmallToBig,
    ];

    /// The name used on the command line and in reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Trim => "trim",
            Variant::TrimHybrid => "trim-hybrid",
            Variant::Bm25 => "bm25",
            Variant::Vector => "vector",
            Variant::Hybrid => "hybrid",
            Variant::Plain => "plain",
            Variant::SmallToBig => "small-to-big",
        }
    }

    /// Whether the variant cannot run without an embedding model.
    pub fn needs_embedder(&self, base_is_bm25: bool) -> bool {
        match self {
            Variant::Baseline => !base_is_bm25,
            Variant::Bm25 => false,
            _ => true,
        }
    }

    /// Parse a comma-separated list (`all` means every variant). Baseline is always included,
    /// first, because every other variant is measured against it.
    pub fn parse_list(s: &str) -> Result<Vec<Variant>, EvalError> {
        let mut out = vec![Variant::Baseline];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part.eq_ignore_ascii_case("all") {
                return Ok(Variant::ALL.to_vec());
            }
            let v: Variant = part.parse()?;
            if !out.contains(&v) {
                out.push(v);
            }
        }
        Ok(out)
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Variant {
    type Err = EvalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase().replace('_', "-");
        Variant::ALL
            .into_iter()
            .find(|v| v.as_str() == t || (t == "s2b" && *v == Variant::SmallToBig))
            .ok_or_else(|| {
                invalid(
                    "variants",
                    format!(
                        "`{s}` is not one of {}",
                        Variant::ALL.map(|v| v.as_str()).join(", ")
                    ),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_lists() {
        for v in Variant::ALL {
            assert_eq!(v.as_str().parse::<Variant>().unwrap(), v);
            let j = serde_json::to_string(&v).unwrap();
            assert_eq!(j, format!("\"{}\"", v.as_str()));
        }
        assert_eq!(
            Variant::parse_list("trim, bm25,trim").unwrap(),
            vec![Variant::Baseline, Variant::Trim, Variant::Bm25]
        );
        assert_eq!(
            Variant::parse_list("all").unwrap().len(),
            Variant::ALL.len()
        );
        let e = Variant::parse_list("trim,bogus").unwrap_err().to_string();
        assert!(e.contains("bogus") && e.contains("small-to-big"), "{e}");
    }
}
