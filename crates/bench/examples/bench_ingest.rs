//! Release-mode ingest benchmark without building the whole CLI:
//! `cargo run --release -p bib-bench --example bench_ingest -- [WIKI_DIR ...]`
//! (same report as `bib bench ingest`).

use std::path::PathBuf;
use std::time::Instant;

use bib_embed::Embedder;

fn main() {
    let mut wikis: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if wikis.is_empty() {
        let base = PathBuf::from("../shared/bench/data/wiki");
        wikis = vec![base.join("nuget-es"), base.join("nuget-en")];
    }
    let t = Instant::now();
    let embedder = match bib_embed::UseM3::load_default() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench_ingest: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "model {} loaded in {:.2} s (not counted below)\n",
        embedder.model_id(),
        t.elapsed().as_secs_f64()
    );
    let tmp = std::env::temp_dir().join(format!("bib-bench-ingest-{}", std::process::id()));
    match bib_bench::ingest::report(&wikis, &embedder, &tmp) {
        Ok(r) => println!("{r}"),
        Err(e) => {
            eprintln!("bench_ingest: {e:#}");
            std::process::exit(1);
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
