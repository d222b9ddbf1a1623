//! The hybrid path with a toy embedder whose vectors know a few synonyms: a fact said in other
//! words must be found, each unit embedded once, pins must not override the fusion, kept
//! messages carry their times, and the budget holds.

use bib_embed::fake::FakeEmbedder;
use bib_pack::{output_tokens, Message, PackMode, PackOptions, Packer};

const DIM: usize = 64;

/// Bag of concepts: a word of a synonym group counts for the group, any other word for a
/// hashed bucket. Counts every text it embeds.
fn concepts() -> FakeEmbedder {
    FakeEmbedder::new("concepts", DIM, |t, _| concept_vector(t))
}

const GROUPS: [&[&str]; 3] = [
    &["macadamia", "nut", "nuts", "walnut"],
    &["allergic", "allergy", "eat", "can't"],
    &["parked", "car", "vehicle", "garage"],
];

fn bucket(word: &str) -> usize {
    if let Some(g) = GROUPS.iter().position(|g| g.contains(&word)) {
        return g;
    }
    GROUPS.len()
        + word
            .bytes()
            .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize))
            % (DIM - GROUPS.len())
}

fn concept_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIM];
    for w in text
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
    {
        v[bucket(w)] += 1.0;
    }
    bib_text::vectors::unit(&v)
}

/// Filler that shares the question's word "match" (so BM25 pins it) and says nothing else.
fn filler(n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            Message::new(
                if i % 2 == 0 { "user" } else { "assistant" },
                format!("we watched match {i} on television, great goal {i}"),
            )
        })
        .collect()
}

fn history(question: &str) -> Vec<Message> {
    let mut h = filler(40);
    h.push(Message::new("user", "my son is allergic to macadamia"));
    h.extend(filler(80));
    h.push(Message::new("user", question));
    h
}

fn joined(p: &bib_pack::Packed) -> String {
    bib_pack::probes::packed_text(p)
}

#[test]
fn a_fact_in_other_words_wins_over_pinned_word_matches() {
    let e = concepts();
    let h = history("which nut can't he eat at the match?");
    let no_pins = PackOptions {
        pin_hybrid: false,
        ..PackOptions::default()
    };
    let p = Packer::new(no_pins).pack_hybrid(&h, 200, &e);
    assert_eq!(p.stats.mode, PackMode::Hybrid);
    assert!(joined(&p).contains("macadamia"), "{}", joined(&p));
    assert!(output_tokens(&p.messages) <= 200);
    // By default only lines near the best BM25 are pinned: with one line that names more of
    // the question, the filler that shares one common word is not pinned, and the fact wins.
    let mut strong = h.clone();
    strong.insert(20, Message::new("user", "they eat hot dogs at every match"));
    let p = Packer::new(PackOptions::default()).pack_hybrid(&strong, 200, &e);
    let text = joined(&p);
    assert!(
        text.contains("macadamia") && text.contains("hot dogs"),
        "{text}"
    );
    assert!(p.stats.pinned < 5, "{}", p.stats.pinned);
    // Pinning every line that says "match" first crowds the fact out.
    let pinned = PackOptions {
        pin_hybrid: true,
        pin_hybrid_min_bm: 0.0,
        ..PackOptions::default()
    };
    let p = Packer::new(pinned).pack_hybrid(&h, 200, &e);
    assert!(!joined(&p).contains("macadamia"), "{}", joined(&p));
}

#[test]
fn each_unit_is_embedded_once_across_packs() {
    let e = concepts();
    let o = PackOptions {
        sem_units: true,
        sem_blocks: false,
        ..PackOptions::default()
    };
    let mut packer = Packer::new(o);
    let h = history("which nut can't he eat?");
    packer.pack_hybrid(&h, 300, &e);
    let first = e.texts_embedded();
    // one text per distinct old message (the two filler runs repeat 40 texts), the question
    assert!((70..=82).contains(&first), "{first}");
    // Same history, another question: only the new question is embedded.
    let mut h2 = h.clone();
    h2.last_mut().unwrap().content = "where is the car parked?".into();
    packer.pack_hybrid(&h2, 300, &e);
    assert_eq!(e.texts_embedded(), first + 1, "{first}");
    assert_eq!(packer.embedded_texts(), first + 1);
}

#[test]
fn kept_messages_carry_their_times_and_the_reference_output_does_not() {
    let e = concepts();
    let mut h = history("which nut can't he eat?");
    for (i, m) in h.iter_mut().enumerate() {
        m.ts = Some(1_786_104_000_000 + i as i64 * 60_000);
    }
    let p = Packer::new(PackOptions::default()).pack_hybrid(&h, 300, &e);
    let fact = p
        .messages
        .iter()
        .find(|m| m.content.contains("macadamia"))
        .expect("fact kept");
    assert_eq!(fact.ts, Some(1_786_104_000_000 + 40 * 60_000));
    assert_eq!(p.messages.last().unwrap().ts, h.last().unwrap().ts);
    assert!(p
        .messages
        .iter()
        .filter(|m| m.role == "system")
        .all(|m| m.ts.is_none()));
    let json = serde_json::to_value(fact).unwrap();
    assert!(json.get("ts").is_some(), "{json}");
    let r = Packer::new(PackOptions::reference()).pack(&h, 300);
    assert!(r.messages.iter().all(|m| m.ts.is_none()));
    let json = serde_json::to_value(r.messages.last().unwrap()).unwrap();
    assert!(json.get("ts").is_none(), "{json}");
}

#[test]
fn hybrid_with_units_keeps_the_budget() {
    let e = concepts();
    let o = PackOptions {
        sem_units: true,
        sem_unit_chars: 0,
        sem_unit_context: 1.0,
        pin_hybrid: false,
        ..PackOptions::default()
    };
    let mut h = history("which nut can't he eat?");
    h.insert(
        10,
        Message::new(
            "tool",
            format!(
                "[Tool result]: {}",
                "a long line. Another sentence here. ".repeat(200)
            ),
        ),
    );
    for budget in [0, 5, 40, 120, 400, 1500] {
        let p = Packer::new(o.clone()).pack_hybrid(&h, budget, &e);
        assert!(output_tokens(&p.messages) <= budget, "{budget}");
        assert_eq!(p.stats.output_tokens, output_tokens(&p.messages));
    }
}

#[test]
fn a_search_for_another_pattern_in_the_same_folder_does_not_hide_the_first() {
    let call = |pattern: &str| {
        Message::new(
            "assistant",
            format!(r#"{{"tool": "search", "path": "src", "pattern": "{pattern}"}}"#),
        )
    };
    let mut h = vec![
        call("checkout"),
        Message::new(
            "user",
            "[Tool result]: src/flags.ts:14: NEW_CHECKOUT_FLAG default false",
        ),
    ];
    for i in 0..30 {
        h.push(call(&format!("helper{i}")));
        h.push(Message::new(
            "user",
            format!("[Tool result]: src/util{i}.ts:3: export function helper{i}()"),
        ));
    }
    h.extend(filler(10));
    h.push(Message::new("user", "which checkout flag is new?"));
    let p = Packer::new(PackOptions::default()).pack(&h, 300);
    assert!(joined(&p).contains("NEW_CHECKOUT_FLAG"), "{}", joined(&p));
    // The reference keys a call by its path alone: the later searches of src supersede it.
    let r = Packer::new(PackOptions::reference()).pack(&h, 300);
    assert!(!joined(&r).contains("NEW_CHECKOUT_FLAG"), "{}", joined(&r));
}

#[test]
fn the_turn_after_a_match_is_lifted_by_unit_context() {
    let e = concepts();
    let mut h = filler(60);
    h.push(Message::new("assistant", "where did you leave the car?"));
    h.push(Message::new("user", "behind the old bakery on Elm street"));
    h.extend(filler(60));
    h.push(Message::new("user", "where is my vehicle parked?"));
    // Only scored lines in the BM25 list: no filler line earns rank credit by its position.
    let o = |c: f64| PackOptions {
        sem_units: true,
        sem_blocks: false,
        sem_unit_context: c,
        // the toy vectors are scored as they are: this is about the lift alone
        sem_unit_center: false,
        pin_hybrid: false,
        rrf_scored_only: true,
        ..PackOptions::default()
    };
    let with = Packer::new(o(1.0)).pack_hybrid(&h, 120, &e);
    assert!(joined(&with).contains("Elm street"), "{}", joined(&with));
    let without = Packer::new(o(0.0)).pack_hybrid(&h, 120, &e);
    assert!(
        !joined(&without).contains("Elm street"),
        "{}",
        joined(&without)
    );
}

/// Words of the Russian small talk of [`scripted`]'s tests.
const CHAT_WORDS: [&str; 8] = [
    "вчера",
    "смотрели",
    "футбол",
    "потом",
    "ужин",
    "дома",
    "гуляли",
    "парк",
];

/// A toy multilingual model: one dimension per word of a small vocabulary (`лимит` is
/// `limit` and `минуту` `minute`: the same meaning in two languages), and one more that every
/// text in Cyrillic shares, strongly, as real encoders put every text of one language near
/// every other. Digits and other words count for nothing.
fn scripted() -> FakeEmbedder {
    const OTHER_WORDS: [&str; 6] = ["какой", "настроен", "limit", "minute", "rate", "config"];
    FakeEmbedder::new("scripted", DIM, |t, _| {
        let mut v = vec![0f32; DIM];
        let text = t.replace("лимит", "limit").replace("минуту", "minute");
        for w in text.split(|c: char| !c.is_alphanumeric()) {
            let known = CHAT_WORDS.iter().chain(&OTHER_WORDS);
            if let Some(k) = known.into_iter().position(|x| *x == w) {
                v[k] += 1.0;
            }
        }
        if t.chars().any(|c| ('а'..='я').contains(&c)) {
            v[DIM - 1] += 3.0;
        }
        bib_text::vectors::unit(&v)
    })
}

#[test]
fn centering_lets_a_fact_in_another_language_beat_chatter_in_the_question_s() {
    let e = scripted();
    let chat = |i: usize| {
        let w = CHAT_WORDS;
        format!("{} {} {} {i}", w[i % 8], w[(i + 3) % 8], w[(i + 5) % 8])
    };
    let mut h: Vec<Message> = (0..50).map(|i| Message::new("user", chat(i))).collect();
    h.push(Message::new("user", "config: rate limit per_minute 480"));
    h.extend((50..100).map(|i| Message::new("assistant", chat(i))));
    h.push(Message::new("user", "какой лимит в минуту настроен?"));
    let o = |center: bool| PackOptions {
        sem_unit_center: center,
        sem_block_center: center,
        pin_hybrid: false,
        ..PackOptions::default()
    };
    let centered = Packer::new(o(true)).pack_hybrid(&h, 200, &e);
    assert!(joined(&centered).contains("480"), "{}", joined(&centered));
    let plain = Packer::new(o(false)).pack_hybrid(&h, 200, &e);
    assert!(!joined(&plain).contains("480"), "{}", joined(&plain));
}

#[test]
fn one_packer_packs_with_a_second_model_of_another_dimension() {
    // The units' 8-bit rows are per model: a session packed with a 64-dimension model, then
    // a 32-dimension one (its vectors the first's halves added), then the first again must
    // give what a fresh packer gives with each model, and not panic.
    let folded = FakeEmbedder::new("concepts-32", DIM / 2, |t, _| {
        let v = concept_vector(t);
        (0..DIM / 2).map(|i| v[i] + v[i + DIM / 2]).collect()
    });
    let o = PackOptions {
        sem_units: true,
        pin_hybrid: false,
        ..PackOptions::default()
    };
    let h = history("which nut can't he eat?");
    let mut packer = Packer::new(o.clone());
    for (i, e) in [&concepts(), &folded, &concepts()].into_iter().enumerate() {
        let p = packer.pack_hybrid(&h, 200, e);
        let fresh = Packer::new(o.clone()).pack_hybrid(&h, 200, e);
        assert_eq!(p.stats.mode, PackMode::Hybrid);
        assert_eq!(joined(&p), joined(&fresh), "pack {i}");
    }
    assert!(joined(&packer.pack_hybrid(&h, 200, &concepts())).contains("macadamia"));
}

#[test]
fn a_history_packs_the_same_whatever_one_packer_packed_before() {
    // The units' mean is kept between packs and updated by the messages that changed; in
    // fixed point, so taking messages away and adding others ends at the same sum.
    let e = scripted();
    let chat = |i: usize| format!("вчера смотрели футбол {i}, потом ужин дома");
    let mut long: Vec<Message> = (0..60).map(|i| Message::new("user", chat(i))).collect();
    long.insert(
        30,
        Message::new("user", "config: rate limit per_minute 480"),
    );
    long.push(Message::new("user", "какой лимит в минуту настроен?"));
    let mut short = long[..45].to_vec();
    short.push(long[long.len() - 1].clone());
    let fresh = Packer::new(PackOptions::default()).pack_hybrid(&short, 150, &e);
    let mut reused = Packer::new(PackOptions::default());
    reused.pack_hybrid(&long, 150, &e);
    reused.pack_hybrid(&long, 400, &e);
    let again = reused.pack_hybrid(&short, 150, &e);
    assert_eq!(joined(&fresh), joined(&again));
    assert_eq!(fresh.stats.output_tokens, again.stats.output_tokens);
}

#[test]
fn without_an_embedder_the_pack_is_lexical_and_says_why() {
    let h = history("which nut can't he eat at the match?");
    let opts = PackOptions::default();
    let e = concepts();
    let hybrid = bib_pack::pack_hybrid_or_lexical(&h, 200, &opts, Ok(&e));
    assert_eq!(hybrid.stats.mode, PackMode::Hybrid);
    assert_eq!(hybrid.stats.semantic_error, None);
    assert_eq!(
        hybrid.messages,
        bib_pack::pack_hybrid(&h, 200, &opts, &e).messages
    );

    let lexical =
        bib_pack::pack_hybrid_or_lexical(&h, 200, &opts, Err("no model installed".into()));
    assert_eq!(lexical.stats.mode, PackMode::Lexical);
    assert_eq!(
        lexical.stats.semantic_error.as_deref(),
        Some("no model installed")
    );
    assert_eq!(lexical.messages, bib_pack::pack(&h, 200, &opts).messages);
}
