//! # bib-store — TODO: overview (see ARCHITECTURE.md)
