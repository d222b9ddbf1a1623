//! The pages `bib serve` shows people: the ask page (`GET /`), the help widget
//! (`GET /widget.js`) and the HTML view of a document's lines (`GET /docs/{path}?format=html`).
//!
//! Plain HTML, CSS and JavaScript written by hand, in `crates/server/assets/`, compiled into
//! the binary with `include_str!`: no build step, nothing fetched from anywhere else. They
//! only read, through the same JSON API as any client (`/ask`, `/answer`, `/status`,
//! `/docs/{path}`); nothing of the query log is ever shown.

use bib_store::read::Excerpt;

/// The ask page: markup, style and script in one document.
const PAGE_HTML: &str = include_str!("../assets/page.html");
const PAGE_CSS: &str = include_str!("../assets/page.css");
const PAGE_JS: &str = include_str!("../assets/page.js");
/// The help widget, one script that any page can include.
pub const WIDGET_JS: &str = include_str!("../assets/widget.js");

/// The ask page. `synthesis`: an `[llm]` endpoint is configured, so the page asks `/answer`
/// (sources, then the answer as it is written) instead of `/ask`.
pub fn page(synthesis: bool) -> String {
    PAGE_HTML
        .replace("/*PAGE_CSS*/", PAGE_CSS)
        .replace("/*PAGE_JS*/", PAGE_JS)
        .replace(
            "data-synthesis=\"off\"",
            if synthesis {
                "data-synthesis=\"on\""
            } else {
                "data-synthesis=\"off\""
            },
        )
}

/// Escape text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encode a path for a URL, keeping its `/`.
pub fn url_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A whole document as a page with numbered lines, the lines `mark` (from, to) highlighted;
/// the page opens at them (`#L{from}` in the link that leads here).
pub fn document_view(doc: &Excerpt, mark: Option<(u32, u32)>) -> String {
    let (from, to) = mark.unwrap_or((0, 0));
    let cited = match mark {
        Some((a, b)) if a == b => format!("{}:{a}", doc.path),
        Some((a, b)) => format!("{}:{a}-{b}", doc.path),
        None => doc.path.clone(),
    };
    let mut lines = String::new();
    for (i, line) in doc.content.lines().enumerate() {
        let n = doc.line_start as usize + i;
        let marked = mark.is_some() && (from as usize..=to as usize).contains(&n);
        lines.push_str(&format!(
            "<tr id=\"L{n}\"{}><td class=\"n\"><a href=\"#L{n}\" aria-label=\"line {n}\">{n}</a></td><td class=\"t\">{}</td></tr>\n",
            if marked { " class=\"mark\"" } else { "" },
            esc(line)
        ));
    }
    let title = if doc.title.trim().is_empty() {
        doc.path.clone()
    } else {
        doc.title.clone()
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<link rel=\"icon\" href=\"data:,\"><title>{title} · {cited}</title><style>{DOC_CSS}</style></head><body>\
<header><p><a href=\"/\">← Ask</a></p><h1>{title}</h1>\
<p class=\"meta\"><code>{cited}</code> · collection <code>{collection}</code> · {total} lines</p></header>\
<main><table aria-label=\"Lines of {path}\"><tbody>\n{lines}</tbody></table></main></body></html>\n",
        title = esc(&title),
        cited = esc(&cited),
        collection = esc(&doc.collection),
        total = doc.total_lines,
        path = esc(&doc.path),
    )
}

const DOC_CSS: &str = ":root{color-scheme:light dark;--bg:#fff;--fg:#1a1a1a;--muted:#595959;--mark:#fff3b0;--line:#e3e3e3;--link:#0b57d0}\
@media (prefers-color-scheme:dark){:root{--bg:#121212;--fg:#e8e8e8;--muted:#a8a8a8;--mark:#4a3f00;--line:#333;--link:#8ab4f8}}\
body{margin:0;font:16px/1.5 system-ui,sans-serif;background:var(--bg);color:var(--fg)}\
header{padding:1rem 1rem .5rem;border-bottom:1px solid var(--line)}h1{margin:.2rem 0;font-size:1.4rem}\
a{color:var(--link)}.meta{color:var(--muted);margin:.2rem 0;overflow-wrap:anywhere}\
main{overflow-x:auto}table{border-collapse:collapse;font:14px/1.45 ui-monospace,monospace;width:100%}\
td{vertical-align:top;padding:0 .6rem}td.n{text-align:right;user-select:none;width:1%;white-space:nowrap}\
td.n a{color:var(--muted);text-decoration:none}td.t{white-space:pre-wrap;overflow-wrap:anywhere}\
tr.mark{background:var(--mark)}tr:target td.n a{font-weight:bold;color:var(--fg)}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_whole_and_small() {
        let p = page(false);
        assert!(!p.contains("/*PAGE_CSS*/") && !p.contains("/*PAGE_JS*/"));
        assert!(p.contains("data-synthesis=\"off\""));
        assert!(page(true).contains("data-synthesis=\"on\""));
        // The acceptance bound of issue 19: page and widget under 100 KB together.
        assert!(p.len() + WIDGET_JS.len() < 100 * 1024, "{}", p.len());
        // Nothing is loaded from elsewhere.
        for asset in [p.as_str(), WIDGET_JS] {
            assert!(!asset.contains("https://"), "an asset names a remote URL");
            assert!(!asset.contains("http://"), "an asset names a remote URL");
        }
    }

    #[test]
    fn document_view_escapes_and_marks() {
        let doc = Excerpt {
            node_id: 1,
            path: "a <b>.md".into(),
            collection: "kb".into(),
            title: "T & U".into(),
            line_start: 1,
            line_end: 3,
            total_lines: 3,
            content: "one\n<script>x</script>\nthree\n".into(),
        };
        let h = document_view(&doc, Some((2, 3)));
        assert!(h.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(!h.contains("<script>"));
        assert!(h.contains("<tr id=\"L2\" class=\"mark\">"));
        assert!(h.contains("<tr id=\"L1\"><td"));
        assert!(h.contains("a &lt;b&gt;.md:2-3"));
        assert!(h.contains("T &amp; U"));
        assert_eq!(url_path("guides/a b#.md"), "guides/a%20b%23.md");
    }
}
