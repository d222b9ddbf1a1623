//! The project's own probe set (multilingual and agent sessions), through the packer.

use bib_pack::probes::{run_probes, ProbeSet};
use bib_pack::{PackOptions, Packer};

const PROBES: &str = include_str!("data/probes.json");

#[test]
fn probe_set_parses_and_lexical_defaults_pass_at_least_nine_in_ten() {
    let set = ProbeSet::parse(PROBES).expect("probes.json parses");
    assert!(set.sessions.len() >= 8);
    let results = run_probes(&set, |h, b| Packer::new(PackOptions::default()).pack(h, b));
    let failed: Vec<_> = results.iter().filter(|r| !r.passed).collect();
    for r in &results {
        assert!(r.output_tokens <= r.budget, "{r:?}");
    }
    // Known lexical miss: «alérgica» vs «alergia» share no term (accents are not folded, on
    // purpose: folding cost −3.6 points on real sessions). The hybrid path is there for it.
    assert!(
        failed.len() * 10 <= results.len(),
        "failed probes: {failed:#?}"
    );
}

#[test]
fn probes_need_the_packer_not_just_the_tail() {
    // keeping only the last turns answers (almost) nothing: the probes do measure retrieval
    let set = ProbeSet::parse(PROBES).unwrap();
    let results = run_probes(&set, |h, b| {
        let o = PackOptions {
            pin_query_terms: false,
            ..PackOptions::default()
        };
        let mut p = Packer::new(o);
        let mut r = p.pack(&h[h.len().saturating_sub(3)..], b);
        r.stats.output_tokens = bib_pack::output_tokens(&r.messages);
        r
    });
    let passed = results.iter().filter(|r| r.passed).count();
    assert!(
        passed * 4 < results.len(),
        "tail-only passed {passed}/{}",
        results.len()
    );
}
