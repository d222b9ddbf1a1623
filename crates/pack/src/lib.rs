//! # bib-pack — TODO: overview (see ARCHITECTURE.md)
