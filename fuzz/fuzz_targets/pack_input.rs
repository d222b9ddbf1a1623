#![no_main]
//! Fuzz `bib pack`'s input: the history parser (JSON in every accepted shape) and the packer
//! behind it. Besides "no panic", the packer's contract: with the default strict budget the
//! output never exceeds the budget by its own estimate.

use bib_pack::input::parse_history;
use bib_pack::{pack, Message, PackOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knob, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let budget = 1 + usize::from(knob) * 8;
    // Valid JSON goes through the parser; anything else becomes messages directly (one per
    // line, roles alternating), so the packer sees arbitrary text either way.
    let history = match parse_history(text) {
        Ok(h) => h,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            text.split('\n')
                .enumerate()
                .map(|(i, l)| {
                    let role = if i % 2 == 0 { "user" } else { "assistant" };
                    let m = Message::new(role, l);
                    if knob & 1 == 1 {
                        m.with_ts(i64::from(knob) * 86_400_000 * (i as i64))
                    } else {
                        m
                    }
                })
                .collect()
        }
    };
    let packed = pack(&history, budget, &PackOptions::default());
    assert!(
        packed.stats.output_tokens <= budget,
        "{} tokens over a budget of {budget}",
        packed.stats.output_tokens
    );
});
