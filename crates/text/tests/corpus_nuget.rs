//! Whole-corpus check on the real NuGet wikis (nuget-es: 368 files, nuget-en: 461).
//!
//! Ignored by default because it reads `../shared/bench/data` (tests must carry their own
//! data). Run with:
//! `cargo test -p bib-text --test corpus_nuget -- --ignored --nocapture`
//! It asserts that every file's front-matter parses, every include resolves (or is reported as
//! a missing target outside the corpus), and that chunking and splitting succeed.

use std::path::{Path, PathBuf};

use bib_text::chunk::{chunk_markdown, ChunkOptions};
use bib_text::frontmatter::{
    find_includes, parse_document, resolve_includes, IncludeError, IncludeLimits,
};
use bib_text::markdown::has_unclosed_fence;
use bib_text::sentences::split_sentences;

fn data_dir() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bench/data/wiki");
    p.is_dir().then_some(p)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut v: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    v.sort();
    for p in v {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "md")
            && p.file_name().is_some_and(|n| n != "SOURCE.md")
        {
            out.push(p);
        }
    }
}

#[test]
#[ignore = "reads ../shared/bench/data (run explicitly)"]
fn nuget_wikis_parse_completely() {
    let Some(root) = data_dir() else {
        panic!("benchmark data not found next to the repository");
    };
    for (name, expected) in [("nuget-es", 368usize), ("nuget-en", 461usize)] {
        let dir = root.join(name);
        let mut files = Vec::new();
        collect(&dir, &mut files);
        let mut parsed = 0;
        let mut with_fm = 0;
        let mut titled_by_fm = 0;
        let mut includes_ok = 0;
        let mut includes_missing = Vec::new();
        let mut includes_other = Vec::new();
        let mut chunks = 0;
        let mut directives = 0;
        let mut sentences = 0;
        let mut errors = Vec::new();
        for f in &files {
            let src = std::fs::read_to_string(f).expect("utf-8");
            let rel = f
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            match parse_document(&src, &stem) {
                Ok(doc) => {
                    parsed += 1;
                    with_fm += usize::from(doc.has_front_matter);
                    titled_by_fm += usize::from(doc.metadata.get("title").is_some());
                    directives += find_includes(doc.body).len();
                    let mut loader = |p: &str, _max: usize| -> Result<String, String> {
                        std::fs::read_to_string(dir.join(p)).map_err(|e| e.to_string())
                    };
                    match resolve_includes(doc.body, &rel, &mut loader, &IncludeLimits::default()) {
                        Ok(_) => includes_ok += 1,
                        Err(e @ IncludeError::Load { .. }) => {
                            includes_missing.push(format!("{rel}: {e}"))
                        }
                        Err(e) => includes_other.push(format!("{rel}: {e}")),
                    }
                    let c = chunk_markdown(
                        &doc.title,
                        doc.body,
                        doc.body_offset,
                        &ChunkOptions::default(),
                    );
                    for ch in &c {
                        assert!(
                            !has_unclosed_fence(&ch.content),
                            "unbalanced fence in a chunk of {rel}: {}",
                            ch.content
                        );
                    }
                    chunks += c.len();
                    sentences += split_sentences(doc.body).len();
                }
                Err(e) => errors.push(format!("{rel}: {e}")),
            }
        }
        println!(
            "{name}: {} files, {parsed} parsed ({:.1}%), {with_fm} with front-matter, {titled_by_fm} with a title field, \
             {directives} include directives, resolved in {includes_ok} files, {} with missing targets, {} other include errors, {chunks} chunks, {sentences} sentences",
            files.len(),
            100.0 * parsed as f64 / files.len().max(1) as f64,
            includes_missing.len(),
            includes_other.len()
        );
        for m in includes_missing.iter().take(10) {
            println!("  missing: {m}");
        }
        for m in &includes_other {
            println!("  include error: {m}");
        }
        assert!(
            errors.is_empty(),
            "front-matter errors in {name}: {errors:#?}"
        );
        assert_eq!(files.len(), expected, "{name} file count");
        assert!(
            includes_other.is_empty(),
            "include cycles/depth errors in {name}"
        );
    }
}
