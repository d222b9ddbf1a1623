//! Markdown structure on pulldown-cmark. OWNER: text helper.
