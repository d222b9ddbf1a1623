//! Metadata filters, applied by the index *before* the top-k cut: the store's one filter type
//! ([`bib_store::Filter`], with its `key=value` parser), so nothing is copied between layers.

pub use bib_store::{Filter, InvalidFilter};
