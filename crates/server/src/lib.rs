//! # bib-server — TODO: overview (see ARCHITECTURE.md)
