//! # bib-store-pg — the knowledge base on PostgreSQL + pgvector
//!
//! [`PgStore`] implements [`bib_store::Store`] for users who outgrow one SQLite file (several
//! writers, millions of chunks, several query servers). It keeps every guarantee of the
//! embedded store and passes the same [`bib_store::conformance`] suite:
//!
//! - **Same lexical scores.** Postings hold `bib_store::lexical::term_counts` of each chunk
//!   (the shared `bib_text::terms` function) with the chunk length; `lex_stats` (chunk count,
//!   total length) and `term_df` (each term's document frequency) are kept by triggers inside
//!   the writing transaction, so no read counts a posting list. A query is scored in
//!   the database: one statement (one snapshot) aggregates its terms' postings with the
//!   statistics by the formula of `bib_text::bm25::{idf, tf_factor}` and returns only the best
//!   `limit` chunks. Scores equal the embedded store's to 1e-12 (the sums run in the
//!   database's order, so ties may differ in their last bits). Every writing transaction
//!   counts itself in `meta.changes`, so a process remembers its answers while that count
//!   holds and answers a repeated question without scoring it again ([`memo`]).
//! - **Vectors** live in a pgvector `vector` column; cosine search is approximate through a
//!   partial HNSW index per dimension (`vector_cosine_ops`, default) or exact
//!   (`?vector_search=exact`, the same top-k as SQLite).
//! - **Atomic documents.** A document's row, chunk upserts, postings and tail prune are one
//!   transaction; removals too. The document row is upserted first, so two writers of the same
//!   document serialise on it.
//! - **Migrations on connect** (see [`schema`]); each knowledge base is one PostgreSQL schema
//!   (`?schema=name`, default `bib`), so a database can hold several.
//!
//! A store URL looks like `postgres://bib:bib@127.0.0.1:55432/bib?schema=bib`; see [`url`].
//! `scripts/postgres-dev.sh start` sets up such a server on one machine.

mod memo;
pub mod schema;
mod store;
pub mod testing;
pub mod url;

pub use store::PgStore;
pub use url::{is_postgres_url, PgOptions, VectorSearch, DEFAULT_EF_SEARCH, DEFAULT_SCHEMA};
