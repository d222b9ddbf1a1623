//! What the speed examples share: deterministic mixed Spanish/English texts of a given length,
//! CPU time and percentiles.
#![allow(dead_code)]

/// `n` texts of `words` words each, drawn from a small mixed vocabulary by a fixed pattern, so
/// every run (and every binary) embeds the same texts.
pub fn texts(words: usize, n: usize) -> Vec<String> {
    let vocab = [
        "package",
        "restore",
        "the",
        "feed",
        "credentials",
        "paquete",
        "versión",
        "de",
        "una",
        "source",
        "signing",
        "certificate",
        "build",
        "project",
        "dependency",
        "el",
        "servidor",
        "symbols",
        "push",
        "local",
        "cache",
        "configuración",
        "and",
        "with",
        "for",
        "nuget",
    ];
    (0..n)
        .map(|i| {
            (0..words)
                .map(|j| vocab[(i * 7 + j * 13 + j * j) % vocab.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// CPU seconds this process has used (user + system, from `/proc/self/stat`; 0 elsewhere):
/// on a machine shared with other jobs, CPU time per text moves less than wall time.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The value at index `round((n − 1) · p / 100)` of the sorted values (as `bib_eval::stats`).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[i]
}

/// The example query of the latency rows (about ten words).
pub const QUERY: &str = "how do I restore packages from a private feed";

/// Embed `texts` as passages after a two-text warm-up: the vectors, texts/s and CPU ms/text.
pub fn timed_passages(
    model: &dyn bib_embed::Embedder,
    texts: &[&str],
) -> Result<(Vec<Vec<f32>>, f64, f64), bib_embed::EmbedError> {
    use bib_embed::EmbedKind;
    model.embed(&texts[..2.min(texts.len())], EmbedKind::Passage)?;
    let (t, cpu) = (std::time::Instant::now(), cpu_seconds());
    let v = model.embed(texts, EmbedKind::Passage)?;
    let rate = texts.len() as f64 / t.elapsed().as_secs_f64();
    let per_text = (cpu_seconds() - cpu) / texts.len() as f64 * 1e3;
    Ok((v, rate, per_text))
}

/// Embed [`QUERY`] (`tokens` long, for the report) `runs` times after a warm-up and print the
/// p50 / p90 / minimum latency.
pub fn print_query_latency(model: &dyn bib_embed::Embedder, tokens: usize, runs: usize) {
    use bib_embed::EmbedKind;
    model.embed(&[QUERY], EmbedKind::Query).expect("embeds");
    let mut ms: Vec<f64> = (0..runs)
        .map(|_| {
            let t = std::time::Instant::now();
            model.embed(&[QUERY], EmbedKind::Query).expect("embeds");
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "query ({tokens} tokens) ×{runs}: p50 {:.3} ms  p90 {:.3} ms  min {:.3} ms",
        percentile(&ms, 50.0),
        percentile(&ms, 90.0),
        ms[0]
    );
}

/// The arguments of the speed examples: `[texts] [query runs] [products] [words]`.
pub struct SpeedArgs {
    /// 20-word texts (a tenth as many 200-word ones, at least 2).
    pub n: usize,
    pub runs: usize,
    /// `default`, `portable` (the portable integer kernel forced) or `f32`.
    pub products: bib_embed::qgemm::Products,
    /// Keep one text length (`20` or `200`).
    pub only: Option<usize>,
}

impl SpeedArgs {
    pub fn parse(n: usize, runs: usize) -> Result<Self, std::num::ParseIntError> {
        use bib_embed::qgemm::{Kernel, Products};
        let mut args = std::env::args().skip(1);
        let n = args.next().map_or(Ok(n), |a| a.parse())?;
        let runs = args.next().map_or(Ok(runs), |a| a.parse())?;
        let products = match args.next().as_deref() {
            Some("portable") => Products::Int8(Kernel::Portable),
            Some("f32") => Products::F32,
            _ => Products::default(),
        };
        let only = args.next().map(|a| a.parse()).transpose()?;
        Ok(Self {
            n,
            runs,
            products,
            only,
        })
    }

    /// The run's first line: the products and the threads.
    pub fn print_header(&self) {
        let threads = rayon::current_num_threads();
        println!("products {:?}, {threads} threads", self.products);
    }

    /// The text sets to time: `(words, texts)`.
    pub fn sets(&self) -> Vec<(usize, Vec<String>)> {
        [(20, self.n), (200, self.n.div_ceil(10).max(2))]
            .into_iter()
            .filter(|&(words, count)| {
                count > 0 && self.n > 0 && self.only.is_none_or(|w| w == words)
            })
            .map(|(words, count)| (words, texts(words, count)))
            .collect()
    }
}
