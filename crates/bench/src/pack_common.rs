//! What the history-packer benchmarks (`bib bench locomo`, `bib bench probes`) share: their
//! options, the embedder of `--hybrid`, packing one question against a session, and the UTC
//! calendar arithmetic of their timestamps (no date dependency in the benchmarks).

use anyhow::{bail, Context};
use bib_pack::{Message, PackOptions, Packed, Session};
use serde_json::Value;

/// A way to pack a session into a budget (lexical, hybrid, a variant).
pub(crate) type PackFn<'a> = dyn FnMut(&mut Session, usize) -> Packed + 'a;

/// `--budgets`: comma-separated token budgets.
pub(crate) fn parse_budgets(budgets: &str) -> anyhow::Result<Vec<usize>> {
    budgets
        .split(',')
        .map(|b| {
            b.trim()
                .parse::<usize>()
                .with_context(|| format!("--budgets: `{b}` is not a number"))
        })
        .collect::<anyhow::Result<_>>()
}

/// `--model` of the packer benchmarks: the installed embedding model of `--hybrid`.
pub(crate) const MODELS: [&str; 3] = ["auto", "use-m3", "e5-small"];

/// With `--hybrid`, the installed `model` behind one embedding cache; else none.
pub(crate) fn load_hybrid_embedder(
    hybrid: bool,
    model: &str,
) -> anyhow::Result<Option<Box<dyn bib_embed::Embedder>>> {
    if !hybrid {
        return Ok(None);
    }
    // `auto` as `bib pack` resolves it, so the benchmark measures what the product does.
    let model = bib_app::pack::pack_model(model);
    let e = crate::load_embedder(&model)
        .with_context(|| format!("loading the embedding model {model} for --hybrid"))?;
    eprintln!("hybrid: embedding with {model}");
    // One cache across sessions and budgets: each turn and question is embedded once.
    Ok(Some(Box::new(bib_embed::CachedEmbedder::new(
        e,
        bib_embed::EmbeddingCache::with_capacity(1_000_000),
    ))))
}

/// `--variant`: packer options over the defaults, as space-separated `field=value` pairs of
/// [`PackOptions`] fields (`"sem_units=true rrf_k=20"`); a value is read as JSON, else as a
/// string. The spec itself names the variant.
pub(crate) fn parse_variant(spec: &str) -> anyhow::Result<PackOptions> {
    let mut v = serde_json::to_value(PackOptions::default())?;
    let fields = v
        .as_object_mut()
        .context("PackOptions serializes as an object")?;
    for pair in spec.split_whitespace() {
        let (k, val) = pair
            .split_once('=')
            .with_context(|| format!("--variant: `{pair}` is not field=value"))?;
        if !fields.contains_key(k) {
            bail!("--variant: `{k}` is not a packer option");
        }
        let val = serde_json::from_str(val).unwrap_or_else(|_| Value::String(val.to_owned()));
        fields.insert(k.to_owned(), val);
    }
    serde_json::from_value(v).with_context(|| format!("--variant `{spec}`"))
}

/// Pack `session` + `question` into `budget`, leaving the session as it was: the question is
/// pushed, packed and popped, as a live session would ask it.
pub(crate) fn pack_question(
    session: &mut Session,
    question: Message,
    budget: usize,
    pack: &mut PackFn<'_>,
) -> Packed {
    session.push(question);
    let packed = pack(session, budget);
    session.pop();
    packed
}

/// Epoch milliseconds of a UTC date and time.
pub(crate) fn utc_ms(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    days_from_civil(y, mo, d) * 86_400_000 + i64::from(h) * 3_600_000 + i64::from(mi) * 60_000
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i32, mo: u32, d: u32) -> i64 {
    let y = i64::from(if mo <= 2 { y - 1 } else { y });
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(mo) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD` of an epoch-milliseconds instant, in UTC.
pub(crate) fn utc_day(ms: i64) -> String {
    let mut day = rfc3339_utc(ms);
    day.truncate("YYYY-MM-DD".len());
    day
}

/// RFC 3339 (`YYYY-MM-DDTHH:MM:SSZ`) of an epoch-milliseconds instant, in UTC: the format
/// `bib runs` prints, from the same function.
pub(crate) fn rfc3339_utc(ms: i64) -> String {
    bib_store::read::iso_utc(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_and_name_the_bad_one() {
        assert_eq!(
            parse_budgets("1000, 1500,3000").unwrap(),
            [1000, 1500, 3000]
        );
        let err = parse_budgets("1000,x").unwrap_err().to_string();
        assert!(err.contains("`x`"), "{err}");
    }

    #[test]
    fn variants_set_fields_over_the_defaults_and_reject_unknown_ones() {
        let o = parse_variant("sem_units=true rrf_k=20 sem_unit_chars=0").unwrap();
        assert!(o.sem_units);
        assert_eq!((o.rrf_k, o.sem_unit_chars), (20.0, 0));
        assert_eq!(o.sem_budget, PackOptions::default().sem_budget);
        assert_eq!(parse_variant("").unwrap(), PackOptions::default());
        assert!(parse_variant("no_such_knob=1").is_err());
        assert!(parse_variant("rrf_k").is_err());
        assert!(parse_variant("rrf_k=fast").is_err());
    }

    #[test]
    fn calendar_round_trips() {
        // 2023-05-08 13:56 UTC, as LoCoMo's dates are read
        assert_eq!(utc_ms(2023, 5, 8, 13, 56), 1_683_554_160_000);
        assert_eq!(rfc3339_utc(1_683_554_160_000), "2023-05-08T13:56:00Z");
        assert_eq!(utc_day(utc_ms(2024, 2, 29, 23, 59)), "2024-02-29");
        assert_eq!(utc_day(utc_ms(2026, 3, 1, 0, 0)), "2026-03-01");
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        for days in [-1i64, 0, 59, 365 * 56 + 14, 2_000_000] {
            let day = utc_day(days * 86_400_000);
            let (y, m, d) = (&day[..4], &day[5..7], &day[8..10]);
            let (y, m, d) = (y.parse().unwrap(), m.parse().unwrap(), d.parse().unwrap());
            assert_eq!(days_from_civil(y, m, d), days, "{day}");
        }
    }
}
