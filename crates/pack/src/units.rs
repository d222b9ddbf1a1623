//! Semantic units: the pieces of a message the hybrid path embeds one by one and matches the
//! question against.
//!
//! Blocks of several turns blur a fact stated in other words into its neighbours; a unit is
//! small enough that the question meets the sentence that states the fact. A unit is a run of
//! consecutive short lines of one message (a tool result's lines, up to `max_chars` UTF-16
//! units together), or one sentence of a line longer than that (a long chat turn). Units never
//! cross messages, so each message's units depend on its content alone and are embedded once.

use crate::tokens::utf16_len;

/// One unit of a message: the lines it covers (`first..end`, indices into the message's
/// lines) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub first: usize,
    pub end: usize,
    pub text: String,
}

/// The units of a message's `lines`. A line longer than `max_chars` is split into sentences
/// (`bib_text::sentences::split_prose`), each its own unit covering that line; shorter lines
/// are grouped with their neighbours while the group stays within `max_chars`. Blank lines
/// join the group around them and add no text. `max_chars` 0 splits every line into
/// sentences.
pub fn message_units(lines: &[&str], max_chars: usize) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut group: Option<Unit> = None;
    let mut group_len = 0usize;
    for (i, line) in lines.iter().enumerate() {
        let text = line.trim();
        if text.is_empty() {
            if let Some(g) = group.as_mut() {
                g.end = i + 1;
            }
            continue;
        }
        let len = utf16_len(text);
        if len > max_chars {
            out.extend(group.take());
            group_len = 0;
            let sentences = bib_text::sentences::split_prose(text);
            if sentences.is_empty() {
                out.push(Unit {
                    first: i,
                    end: i + 1,
                    text: text.to_owned(),
                });
            }
            for s in sentences {
                out.push(Unit {
                    first: i,
                    end: i + 1,
                    text: s.text(text).to_owned(),
                });
            }
            continue;
        }
        match group.as_mut() {
            Some(g) if group_len + 1 + len <= max_chars => {
                g.text.push('\n');
                g.text.push_str(text);
                g.end = i + 1;
                group_len += 1 + len;
            }
            _ => {
                out.extend(group.take());
                group = Some(Unit {
                    first: i,
                    end: i + 1,
                    text: text.to_owned(),
                });
                group_len = len;
            }
        }
    }
    out.extend(group);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(u: &[Unit]) -> Vec<(usize, usize, &str)> {
        u.iter()
            .map(|u| (u.first, u.end, u.text.as_str()))
            .collect()
    }

    #[test]
    fn short_lines_group_and_long_lines_split_into_sentences() {
        let lines = [
            "DB_HOST=staging-db",
            "",
            "DB_PORT=5433",
            "a long line. It has two sentences, and it is longer than the limit.",
            "tail",
        ];
        let u = message_units(&lines, 40);
        assert_eq!(
            spans(&u),
            [
                (0, 3, "DB_HOST=staging-db\nDB_PORT=5433"),
                (3, 4, "a long line."),
                (
                    3,
                    4,
                    "It has two sentences, and it is longer than the limit."
                ),
                (4, 5, "tail"),
            ]
        );
    }

    #[test]
    fn zero_limit_splits_every_line_and_blank_messages_have_no_unit() {
        let u = message_units(&["Hola. ¿Qué tal?"], 0);
        assert_eq!(spans(&u), [(0, 1, "Hola."), (0, 1, "¿Qué tal?")]);
        assert!(message_units(&["", "  "], 300).is_empty());
        // every line of a group is covered exactly once
        let lines = ["a", "b", "c"];
        let u = message_units(&lines, 3);
        assert_eq!(spans(&u), [(0, 2, "a\nb"), (2, 3, "c")]);
    }
}
