//! # bib-retrieve — TODO: overview (see ARCHITECTURE.md)
