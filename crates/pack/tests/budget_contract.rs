//! The budget contract, as a property: for any history and any budget, the packed output
//! never exceeds the budget by the packer's own estimate (+4 per message).

use bib_pack::{output_tokens, Message, PackOptions, Packer};
use proptest::prelude::*;

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,40}",
        "[a-zA-Z0-9_./(){};:→ -]{0,120}",
        "[а-яё ]{0,30}",
        "(ayer|hoy|mañana|last week|hace 2 días|`today()`) [a-z]{0,10}",
        "[0-9]{1,3}: return [a-z]{1,5};",
        Just(String::new()),
        "[(){}\\[\\];,.]{50,400}",
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (
        prop_oneof![Just("user"), Just("assistant"), Just("tool")],
        prop::collection::vec(line(), 1..8),
        prop::bool::ANY,
        prop::option::of(1_600_000_000_000i64..1_900_000_000_000),
    )
        .prop_map(|(role, lines, tool, ts)| {
            let mut content = lines.join("\n");
            if tool {
                content = format!("[Tool result]: {content}");
            }
            Message {
                role: role.into(),
                content,
                ts,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn output_never_exceeds_budget(
        history in prop::collection::vec(message(), 0..40),
        budget in 0usize..1500,
        summary in prop::bool::ANY,
        mmr in prop::bool::ANY,
        elastic in prop::bool::ANY,
    ) {
        let o = PackOptions { summary, mmr, elastic, ..PackOptions::default() };
        let p = Packer::new(o).pack(&history, budget);
        prop_assert!(output_tokens(&p.messages) <= budget,
            "{} > {budget}", output_tokens(&p.messages));
        prop_assert_eq!(p.stats.output_tokens, output_tokens(&p.messages));
    }

    #[test]
    fn huge_single_lines_still_fit(
        n in 1usize..6,
        width in 100usize..4000,
        budget in 0usize..400,
    ) {
        let h: Vec<Message> = (0..n)
            .map(|i| Message::new("user", format!("{i} ").repeat(width)))
            .collect();
        let p = Packer::default().pack(&h, budget);
        prop_assert!(output_tokens(&p.messages) <= budget);
    }
}
