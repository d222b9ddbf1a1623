//! YAML front-matter. OWNER: text helper.
