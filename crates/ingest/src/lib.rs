//! # bib-ingest — TODO: overview (see ARCHITECTURE.md)
