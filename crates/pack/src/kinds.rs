//! What kind of fact a question asks for, and which lines can answer it: a question about a
//! moment ("when…", «¿a qué hora…?», «когда…») is answered by a line that holds one — a
//! clock time, a year, a date, or a relative date the packer resolved (`[ayer = 2026-08-06]`).
//! A question about a quantity ("how many…") is answered by a line with a number, one about a
//! place ("where…", «где…») by a line naming one (a locative word and a capitalised name). Pure
//! functions over text; [`crate::PackOptions::kind_weight`] says how much such a line gains.

use std::sync::OnceLock;

use regex::Regex;

/// Whether `text` matches `pattern`, compiled once into `cell`.
fn matches(cell: &'static OnceLock<Regex>, pattern: &str, text: &str) -> bool {
    cell.get_or_init(|| Regex::new(pattern).expect("valid regex"))
        .is_match(text)
}

/// Whether `question` asks when something happens or happened (in the packer's languages:
/// es en de fr pt ru uk).
pub fn asks_for_a_time(question: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    matches(
        &RE,
        r"(?i)\b(?:when|what time|what date|which day|what day|which year|what year|how long ago|cu[áa]ndo|a qu[ée] hora|qu[ée] d[íi]a|qu[ée] fecha|en qu[ée] año|quand|[àa] quelle heure|quel jour|quelle date|en quelle ann[ée]e|wann|um wie viel uhr|um wieviel uhr|an welchem tag|welches datum|in welchem jahr|quando|que horas|que dia|que data|em que ano|когда|во сколько|в котором часу|какого числа|в каком году|коли|о котрій|котра година|якого числа|в якому році)\b",
        question,
    )
}

/// Whether `line` holds a moment: a clock time (`10:30`, `9 am`, `18h`), a year, an ISO or
/// numeric date, or a resolved relative date's note.
pub fn holds_a_time(line: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    matches(
        &RE,
        r"(?i)\b\d{1,2}[:h]\d{2}\b|\b\d{1,2}\s?(?:am|pm|a\.m\.|p\.m\.|h|uhr|ч)(?:\W|$)|\b(?:19|20)\d{2}\b|\b\d{1,2}[./]\d{1,2}(?:[./]\d{2,4})?\b",
        line,
    )
}

/// Whether `question` asks how many or how much (a count, an amount, a duration, an age).
pub fn asks_for_a_quantity(question: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    matches(
        &RE,
        r"(?i)\b(?:how many|how much|how long|how old|how often|cu[áa]nt[oa]s?|combien|wie viele?|wie lange|wie alt|wie oft|quant[oa]s?|сколько|скільки)\b",
        question,
    )
}

/// Whether `question` asks where something is or happened.
pub fn asks_for_a_place(question: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    matches(
        &RE,
        r"(?i)\b(?:where|d[óo]nde|ad[óo]nde|o[ùu]|wo|wohin|woher|onde|aonde|где|куда|откуда|де|куди|звідки)\b",
        question,
    )
}

/// Whether `line` names a place: a locative word followed by a capitalised name (`in Paris`,
/// `at the Louvre`, `nach Berlin`, `в Москве`).
pub fn holds_a_place(line: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    matches(
        &RE,
        r"\b(?i:in|at|to|from|near|en|a|al|de|desde|à|au|aux|nach|bei|aus|em|no|na|para|в|во|на|из|у|до|з)\s+(?:(?i:the|la|el|le|les|der|die|dem|den|o)\s+)?\p{Lu}\p{Ll}+",
        line,
    )
}

/// Whether `line` holds a number written in digits.
pub fn holds_a_number(line: &str) -> bool {
    line.bytes().any(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_questions_in_every_language() {
        for q in [
            "When did Caroline go to the support group?",
            "What time is my flight?",
            "¿Cuándo es la cita?",
            "oye, ¿a qué hora era lo del dentista?",
            "Quand est-ce qu'on livre la version ?",
            "Wann fliege ich nach Lissabon?",
            "Que horas a gente sobe as novidades pro ar?",
            "Когда у меня стоматолог?",
            "Слухай, а до зубного мені о котрій там?",
        ] {
            assert!(asks_for_a_time(q), "{q}");
        }
        for q in [
            "Where is my car?",
            "¿Qué le puedo regalar a mamá?",
            "Which antihistamine am I on now?",
            "Где моя машина?",
        ] {
            assert!(!asks_for_a_time(q), "{q}");
        }
    }

    #[test]
    fn quantity_questions_and_numbered_lines() {
        for q in [
            "How many weeks passed between the two adoptions?",
            "¿Cuánto pago de alquiler?",
            "Combien de temps dure le vol ?",
            "Сколько стоит аренда?",
        ] {
            assert!(asks_for_a_quantity(q), "{q}");
        }
        assert!(!asks_for_a_quantity("Where did she move from?"));
        assert!(holds_a_number("the rent is 950 euros"));
        assert!(!holds_a_number("the rent is due soon"));
    }

    #[test]
    fn place_questions_and_lines_naming_a_place() {
        for q in [
            "Where did Caroline move from?",
            "¿Dónde dejé el coche?",
            "Où est la voiture ?",
            "Wo steht die Karre?",
            "Onde guardamos as credenciais?",
            "Где моя тачка?",
            "Де моя машина?",
        ] {
            assert!(asks_for_a_place(q), "{q}");
        }
        assert!(!asks_for_a_place("When is the dentist?"));
        for l in [
            "I moved here from Sweden four years ago",
            "we met at the Louvre",
            "Ich bin nach Berlin gezogen",
            "я оставил машину на Парковой улице",
        ] {
            assert!(holds_a_place(l), "{l}");
        }
        for l in [
            "I moved here four years ago",
            "Caroline: sounds great",
            "in the end it worked",
        ] {
            assert!(!holds_a_place(l), "{l}");
        }
    }

    #[test]
    fn lines_that_hold_a_moment() {
        for l in [
            "The dentist moved my appointment to 10:30.",
            "we land at 9 am",
            "Rendez-vous à 18h30",
            "I moved here in 2019",
            "we went to the fair [yesterday = 2023-05-07]",
            "la reunión es el 12/03",
        ] {
            assert!(holds_a_time(l), "{l}");
        }
        for l in [
            "I love hiking in the mountains",
            "version 3 of the package",
            "Melanie: that sounds great!",
        ] {
            assert!(!holds_a_time(l), "{l}");
        }
    }
}
