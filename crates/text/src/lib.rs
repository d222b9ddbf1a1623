//! # bib-text — pure text processing for bibliotecario
//!
//! Everything here is a pure function of its input: no files, no network, no clocks.
//! It turns Markdown into the units the rest of the system works with:
//!
//! - [`frontmatter`]: YAML front-matter split off a document and parsed tolerantly.
//! - [`markdown`]: Markdown structure (blocks with byte spans) on top of pulldown-cmark.
//! - [`sentences`]: the Markdown-aware sentence splitter of spec 000, with byte spans.
//! - [`chunk`]: Markdown-aware chunks with the `[Doc: title › heading]` prefix.
//! - [`tokens`]: the spec's token estimate and the [`tokens::TokenCounter`] seam for exact counts.
//! - [`terms`]: the one term function that feeds every BM25 in the system (spec 003).
//! - [`vectors`]: the one dot product every vector score adds up the same way.
//! - [`fusion`]: the one reciprocal-rank-fusion formula every fused ranking adds up.
//!
//! **Invariant:** nothing in this crate does I/O or panics on any input (the vector helpers
//! panic only when a caller breaks their documented length contract).

pub mod bm25;
pub mod chunk;
pub mod frontmatter;
pub mod fusion;
pub mod markdown;
pub mod sentences;
pub mod terms;
pub mod tokens;
pub mod vectors;
