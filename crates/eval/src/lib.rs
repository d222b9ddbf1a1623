//! # bib-eval — TODO: overview (see ARCHITECTURE.md)
