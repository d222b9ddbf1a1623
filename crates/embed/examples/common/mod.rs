//! What the e5-small examples share: deterministic mixed Spanish/English texts of a given length.

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
