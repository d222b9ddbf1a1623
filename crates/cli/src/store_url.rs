//! Opening a knowledge base from one string: a file path (the embedded SQLite store) or a
//! `postgres://` / `postgresql://` URL (the PostgreSQL + pgvector store, see `bib-store-pg`).
//!
//! Where the string comes from, strongest first: `--store`, `BIB_STORE`, `store = "…"` at the
//! top of `bib.toml` (or `path = "…"` in its `[store]` section), then `.bib/kb.sqlite`.
//! [`resolve`] applies that order; [`open`] opens the result.

use std::path::Path;

use anyhow::Context;
use bib_store::{SqliteStore, Store, DEFAULT_STORE_PATH};
use bib_store_pg::{is_postgres_url, PgStore};

/// Whether `spec` names a PostgreSQL store.
pub fn is_url(spec: &str) -> bool {
    is_postgres_url(spec)
}

/// Whether a knowledge base is there to read: a URL always counts (the server says), a path
/// must be an existing file.
pub fn exists(spec: &str) -> bool {
    is_url(spec) || Path::new(spec).is_file()
}

/// Open (creating when needed) the store named by `spec`.
pub fn open(spec: &str) -> anyhow::Result<Box<dyn Store>> {
    if is_url(spec) {
        let s = PgStore::connect(spec).with_context(|| {
            format!(
                "opening the knowledge base {}",
                bib_store_pg::url::redact(spec)
            )
        })?;
        Ok(Box::new(s))
    } else {
        let s = SqliteStore::open(spec)
            .with_context(|| format!("opening the knowledge base {spec}"))?;
        Ok(Box::new(s))
    }
}

/// Resolve the store from `--store` (else BIB_STORE, `store` in bib.toml, the default) and open
/// it, refusing to create one: commands that read a knowledge base (`runs`, `status`, `rm`) say
/// how to make one instead of leaving an empty file behind.
pub fn open_existing(flag: Option<&str>) -> anyhow::Result<Box<dyn Store>> {
    let spec = resolve(flag, None)?;
    if !exists(&spec) {
        anyhow::bail!(
            "no knowledge base at {spec} (run `bib ingest <dir>` first, or pass --store)"
        );
    }
    open(&spec)
}

/// Open a PostgreSQL store (for operations beyond the `Store` trait, such as `bib migrate`).
pub fn open_postgres(spec: &str) -> anyhow::Result<PgStore> {
    PgStore::connect(spec).with_context(|| format!("opening {}", bib_store_pg::url::redact(spec)))
}

/// The config file in use: `explicit` (`--config`), else `BIB_CONFIG`, else `./bib.toml` when it
/// exists; `None` when there is none.
pub fn config_path(explicit: Option<&Path>) -> Option<std::path::PathBuf> {
    match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => match std::env::var("BIB_CONFIG") {
            Ok(p) if !p.is_empty() => Some(p.into()),
            _ => Some(std::path::PathBuf::from("bib.toml")).filter(|p| p.is_file()),
        },
    }
}

/// The store setting of a `bib.toml` text: top-level `store`, else `[store] path`.
pub fn from_config(text: &str, origin: &str) -> anyhow::Result<Option<String>> {
    let v: toml::Table = text
        .parse()
        .with_context(|| format!("{origin}: not valid TOML"))?;
    match v.get("store") {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(toml::Value::Table(t)) => match t.get("path").or_else(|| t.get("url")) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => anyhow::bail!("{origin}: [store] path must be a string"),
        },
        Some(_) => {
            anyhow::bail!("{origin}: `store` must be a string (a path or a postgres:// URL)")
        }
    }
}

/// Resolve the store string: `flag` (`--store`), else `BIB_STORE`, else the config file
/// (`config`, else `BIB_CONFIG`, else `./bib.toml` when present), else `.bib/kb.sqlite`.
pub fn resolve(flag: Option<&str>, config: Option<&Path>) -> anyhow::Result<String> {
    if let Some(f) = flag.filter(|s| !s.is_empty()) {
        return Ok(f.to_string());
    }
    if let Ok(e) = std::env::var("BIB_STORE") {
        if !e.is_empty() {
            return Ok(e);
        }
    }
    if let Some(p) = config_path(config) {
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("cannot read config file {}", p.display()))?;
        if let Some(s) = from_config(&text, &p.display().to_string())? {
            return Ok(s);
        }
    }
    Ok(DEFAULT_STORE_PATH.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_forms() {
        let f = |t: &str| from_config(t, "bib.toml").unwrap();
        assert_eq!(
            f("store = \"postgres://u@h/db\"\n[ask]\ntop_k = 3\n").as_deref(),
            Some("postgres://u@h/db")
        );
        assert_eq!(
            f("[store]\npath = \"kb/x.sqlite\"\n").as_deref(),
            Some("kb/x.sqlite")
        );
        assert_eq!(f("[ask]\ntop_k = 3\n"), None);
        assert!(from_config("store = 3", "bib.toml").is_err());
        assert!(from_config("store = [", "bib.toml").is_err());
        assert!(is_url("postgresql://h/db") && !is_url("kb.sqlite"));
        assert!(exists("postgres://h/db"));
        assert!(!exists("/definitely/not/here.sqlite"));
    }

    #[test]
    fn flag_wins() {
        assert_eq!(resolve(Some("a.sqlite"), None).unwrap(), "a.sqlite");
    }
}
