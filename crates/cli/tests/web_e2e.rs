//! The ask page (`GET /`) and the help widget (`GET /widget.js`) of `bib serve`, in a real
//! headless Chromium (issue 19): a question typed and sent with the keyboard returns cards
//! with citations and token counts, "show the whole passage" expands a trimmed card, the
//! citation opens the document at its lines, the collection filter and the trim toggle
//! work, "no good match" reads as such; the widget on a page of another origin opens and
//! answers when that origin is allowed (`--allow-origin`) and cannot read answers when it is
//! not; with an `[llm]` endpoint (a fake one here) the answer streams above the sources with
//! its citations linked to the cards. Also checked: every control has a label, no console
//! errors, the page and the script under 100 KB together, and the focus order. Screenshots
//! at desktop and phone width, light and dark, go to `target/tmp/web/`.
//!
//! Needs the default model (`bib model install`; skipped with BIB_SKIP_MODEL_TESTS=1) and
//! Debian's `chromium` (skipped with BIB_SKIP_BROWSER_TESTS=1).

mod browser_support;
mod server_support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use browser_support::{chromium, Browser, StaticSite};
use serde_json::{json, Value};
use server_support::*;

/// Two collections. The restore section is long and mostly about other things, so trimming
/// removes sentences from it and the card has a whole passage to show.
fn wiki(root: &Path) -> (PathBuf, PathBuf) {
    let handbook = root.join("handbook");
    write(
        &handbook,
        "guides/restore.md",
        "---\ntitle: Restoring packages\n---\n# Restoring packages\n\n## How restore works\n\n\
         Packages are restored from the local cache first. \
         The project was started in 2009 by a small team in Redmond. \
         Its logo is a blue box with rounded corners. \
         When a package is missing from the local cache, it is downloaded from the configured feed. \
         The documentation is translated into fourteen languages. \
         Meetings of the steering group happen every second Tuesday. \
         The local cache lives in the user profile, under the packages folder. \
         Contributors sign a license agreement before their first change is merged. \
         The gallery had its first outage in the winter of 2012. \
         Release notes are published on the blog.\n\n\
         ## Clearing the cache\n\nRun the clear command to empty the local cache. \
         The next restore downloads every package again.\n",
    );
    write(
        &handbook,
        "guides/publish.md",
        "---\ntitle: Publishing packages\n---\n# Publishing packages\n\n\
         To publish a package you need an API key from the gallery. Push the package file with \
         the key. Symbols can be pushed to the symbol server.\n",
    );
    let notes = root.join("notes");
    write(
        &notes,
        "meetings/offline.md",
        "---\ntitle: Offline restore notes\n---\n# Offline restore\n\n\
         We agreed that an offline restore must only read the local cache. \
         A package missing from the cache fails the restore with a clear message.\n",
    );
    (handbook, notes)
}

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web")
}

/// Every form control on the page (and in the widget's shadow root) has a label, every
/// button a name: returns those that do not.
const UNLABELLED: &str = "(() => {
  const roots = [document];
  document.querySelectorAll('[data-bib-help]').forEach(h => h.shadowRoot && roots.push(h.shadowRoot));
  const bad = [];
  for (const r of roots) {
    r.querySelectorAll('input, select, textarea').forEach(e => {
      if (!(e.labels && e.labels.length) && !e.getAttribute('aria-label')) bad.push(e.outerHTML);
    });
    r.querySelectorAll('button, a[href]').forEach(e => {
      if (!e.textContent.trim() && !e.getAttribute('aria-label')) bad.push(e.outerHTML);
    });
  }
  return bad;
})()";

/// WCAG contrast of the text of every visible element that has its own text, against the
/// first opaque background behind it: returns those under 4.5:1.
const LOW_CONTRAST: &str = "((root) => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => { const v = c.slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const bg = e => { for (; e && e.nodeType === 1; e = e.parentElement || (e.getRootNode() && e.getRootNode().host)) {
      const c = rgb(getComputedStyle(e).backgroundColor); if (c.length >= 3 && (c.length < 4 || c[3] > 0.9)) return c; }
    return rgb(getComputedStyle(document.documentElement).backgroundColor).length ? rgb(getComputedStyle(document.body).backgroundColor) : [255,255,255]; };
  const bad = [];
  root.querySelectorAll('*').forEach(e => {
    if (!e.offsetParent && getComputedStyle(e).position !== 'fixed') return;
    const own = [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) return;
    const fg = rgb(getComputedStyle(e).color), b = bg(e);
    const l1 = lum(fg), l2 = lum(b);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) bad.push(e.tagName + '.' + e.className + ' ' + ratio.toFixed(2) + ' ' + e.textContent.trim().slice(0, 40));
  });
  return bad;
})";

/// A fake OpenAI-compatible chat endpoint: every request answers the same streamed answer,
/// a few words at a time, citing source 1.
fn fake_llm() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                // Read the request head and its body (Content-Length).
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                loop {
                    let n = s.read(&mut tmp).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .and_then(|v| v.trim().parse::<usize>().ok())
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                );
                for piece in [
                    "Packages come ",
                    "from the local cache first [1]; ",
                    "a missing one is downloaded ",
                    "from the feed [1][2].",
                ] {
                    let ev = json!({"choices": [{"delta": {"content": piece}}]});
                    let _ = s.write_all(format!("data: {ev}\n\n").as_bytes());
                    let _ = s.flush();
                    std::thread::sleep(Duration::from_millis(150));
                }
                let _ = s.write_all(b"data: [DONE]\n\n");
            });
        }
    });
    url
}

fn assert_no_errors(b: &mut Browser, when: &str) {
    let errors = b.take_errors();
    assert!(errors.is_empty(), "console errors {when}: {errors:#?}");
}

#[test]
fn the_ask_page_and_the_widget_in_chromium() {
    if !model_available() {
        return;
    }
    let Some(chrome) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (handbook, notes) = wiki(tmp.path());
    let store = tmp.path().join("kb.sqlite");
    ingest(&handbook, &store);
    ingest(&notes, &store);

    // Two sites on their own ports (origins): one allowed, one not.
    let (site, site_listener) = StaticSite::bind();
    let (other, other_listener) = StaticSite::bind();
    // The owner's synonym rules, which the summary line reports when they add words.
    let config = tmp.path().join("bib.toml");
    std::fs::write(
        &config,
        "[ask]\nsynonyms = [\"stash => local cache\", \"wipe => clear\"]\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let s = serve(
        &store,
        None,
        &["--allow-origin", &site.origin(), "--config", config],
    );
    let base = format!("http://127.0.0.1:{}", s.addr.port());
    let embed = |title: &str| {
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <link rel=\"icon\" href=\"data:,\"><title>{title}</title></head>\
             <body style=\"font-family: Georgia, serif; margin: 2rem\"><h1>{title}</h1>\
             <p>A product page that embeds the help widget with one script tag.</p>\
             <script src=\"{base}/widget.js\" data-collection=\"handbook\" data-title=\"Package help\" defer></script>\
             </body></html>"
        )
    };
    StaticSite::serve(site_listener, vec![("/".into(), embed("Example product"))]);
    StaticSite::serve(other_listener, vec![("/".into(), embed("Not allowed"))]);

    // Size: the page and the widget under 100 KB together.
    let (st, _, page) = http_raw(s.addr, "GET", "/", &[], None);
    assert_eq!(st, 200);
    let (st, head, widget) = http_raw(s.addr, "GET", "/widget.js", &[], None);
    assert_eq!(st, 200);
    assert!(
        head.to_ascii_lowercase().contains("text/javascript"),
        "{head}"
    );
    eprintln!(
        "page {} bytes + widget {} bytes = {} bytes",
        page.len(),
        widget.len(),
        page.len() + widget.len()
    );
    assert!(page.len() + widget.len() < 100 * 1024);

    let mut b = Browser::launch(&chrome);
    b.viewport(1280, 900, false);
    b.goto(&format!("{base}/"));
    b.wait_for(
        "document.querySelectorAll('#collection option').length === 3",
        20,
        "the collections from /status",
    );
    let options = b.eval("[...document.querySelectorAll('#collection option')].map(o => o.value)");
    assert_eq!(options, json!(["", "handbook", "notes"]));
    assert_eq!(b.eval(UNLABELLED), json!([]), "unlabelled controls");
    assert_no_errors(&mut b, "loading the page");

    // Keyboard: the focus order runs skip link, question, Ask, collection, trim.
    let mut order = Vec::new();
    for _ in 0..5 {
        b.press("Tab", false);
        order.push(b.eval(
            "document.activeElement.id || document.activeElement.className || document.activeElement.tagName",
        ));
    }
    assert_eq!(
        order,
        vec![
            json!("skip"),
            json!("q"),
            json!("go"),
            json!("collection"),
            json!("trim")
        ]
    );

    // A question typed and sent with Enter.
    b.click("document.getElementById('q')");
    b.type_text("how are packages restored from the local cache");
    b.press("Enter", false);
    b.wait_for(
        "document.querySelectorAll('#cards .card').length > 0",
        30,
        "result cards",
    );
    let first = b.eval(
        "(() => { const c = document.querySelector('#cards .card'); return {
            cite: c.querySelector('h3 a').textContent, href: c.querySelector('h3 a').getAttribute('href'),
            heading: (c.querySelector('.heading') || {}).textContent, coll: c.querySelector('.coll').textContent,
            kept: c.querySelector('.kept-count') && c.querySelector('.kept-count').textContent,
            text: c.querySelector('.text').innerText, toggle: !!c.querySelector('.whole-toggle') }; })()",
    );
    eprintln!("first card: {first:#}");
    let cite = first["cite"].as_str().unwrap();
    assert!(cite.starts_with("guides/restore.md:"), "{first}");
    assert!(cite.contains('-'), "a line range: {cite}");
    assert_eq!(first["coll"], "handbook");
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .contains("How restore works"),
        "{first}"
    );
    assert!(first["kept"].as_str().unwrap().contains(" of "), "{first}");
    assert!(
        first["text"].as_str().unwrap().contains("local cache"),
        "{first}"
    );
    assert!(
        !first["text"].as_str().unwrap().contains("Redmond"),
        "trimmed away: {first}"
    );
    let summary = b.eval("document.getElementById('summary').textContent");
    eprintln!("summary: {summary}");
    let summary = summary.as_str().unwrap();
    assert!(
        summary.contains(" → ") && summary.contains("tokens, −"),
        "{summary}"
    );
    assert_eq!(
        b.eval("document.getElementById('nomatch').hidden"),
        json!(true)
    );
    // What the cards say is what the API says.
    let (_, api) = post(
        s.addr,
        "/ask",
        &json!({"query": "how are packages restored from the local cache", "trim": true}),
        &[],
    );
    let before = api["exact_tokens_before"].as_u64().unwrap();
    let after = api["exact_tokens_in_context"].as_u64().unwrap();
    let fmt = |n: u64| {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    assert!(
        summary.contains(&format!("{} → {} tokens", fmt(before), fmt(after))),
        "{summary} vs {before} → {after}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#cards .card').length"),
        json!(api["results"].as_array().unwrap().len())
    );
    std::fs::create_dir_all(shots()).unwrap();
    b.screenshot(&shots().join("ask-desktop.png"));

    // "Show the whole passage" expands the trimmed card, and the button says so.
    assert_eq!(
        first["toggle"], true,
        "the restore card was trimmed: {first}"
    );
    let toggle = "document.querySelector('#cards .card .whole-toggle')";
    b.click(toggle);
    assert_eq!(
        b.eval(&format!("{toggle}.getAttribute('aria-expanded')")),
        json!("true")
    );
    let whole = b.eval("document.querySelector('#cards .card .text').innerText");
    assert!(whole.as_str().unwrap().contains("Redmond"), "{whole}");
    b.screenshot(&shots().join("ask-desktop-whole-passage.png"));
    assert_no_errors(&mut b, "asking");

    // The citation opens the document with those lines marked.
    let href = first["href"].as_str().unwrap().to_string();
    let (from, to) = {
        let range = cite.rsplit(':').next().unwrap();
        let (a, z) = range.split_once('-').unwrap();
        (a.parse::<u32>().unwrap(), z.parse::<u32>().unwrap())
    };
    b.goto(&format!("{base}/{href}"));
    let marked =
        b.eval("[...document.querySelectorAll('tr.mark')].map(r => Number(r.id.slice(1)))");
    let want: Vec<u32> = (from..=to).collect();
    assert_eq!(marked, json!(want), "{href}");
    assert!(!b
        .eval("document.querySelector('tr.mark').innerText")
        .as_str()
        .unwrap()
        .is_empty());
    b.screenshot(&shots().join("document-lines.png"));
    assert_no_errors(&mut b, "opening the document");

    // Filters: the collection narrows the cards; trim off gives whole chunks, no toggles.
    b.goto(&format!(
        "{base}/?q=offline+restore+from+the+local+cache&collection=notes"
    ));
    b.wait_for(
        "document.querySelectorAll('#cards .card').length > 0",
        30,
        "notes cards",
    );
    let colls = b.eval("[...document.querySelectorAll('#cards .coll')].map(e => e.textContent)");
    assert!(
        colls.as_array().unwrap().iter().all(|c| c == "notes"),
        "{colls}"
    );
    b.click("document.getElementById('trim')");
    assert_eq!(
        b.eval("document.getElementById('trim').checked"),
        json!(false)
    );
    b.click("document.getElementById('go')");
    b.wait_for(
        "!document.getElementById('go').disabled && !document.querySelector('.kept-count')",
        30,
        "untrimmed cards",
    );
    assert_eq!(
        b.eval("document.querySelectorAll('.whole-toggle').length"),
        json!(0)
    );
    let summary = b.eval("document.getElementById('summary').textContent");
    assert!(!summary.as_str().unwrap().contains('→'), "{summary}");

    // Typos corrected and words added by the synonym rules: the summary line says so.
    b.goto(&format!("{base}/?q=how+do+I+wipe+the+stash+of+pacakges"));
    b.wait_for(
        "document.querySelectorAll('#cards .card').length > 0",
        30,
        "cards of the typo'd question",
    );
    let summary = b.eval("document.getElementById('summary').textContent");
    let summary = summary.as_str().unwrap();
    assert!(
        summary.contains("typos corrected: pacakges → packages"),
        "{summary}"
    );
    assert!(
        summary.contains("also searched for: ")
            && summary.contains("local cache (for stash)")
            && summary.contains("clear (for wipe)"),
        "{summary}"
    );
    let cite = b.eval("document.querySelector('#cards .card h3 a').textContent");
    assert!(
        cite.as_str().unwrap().starts_with("guides/restore.md:"),
        "the clearing section answers: {cite}"
    );
    assert_no_errors(&mut b, "a typo and synonyms");

    // No good match reads as such.
    let off_topic = "best chocolate cake recipe with strawberries";
    let (_, api) = post(
        s.addr,
        "/ask",
        &json!({"query": off_topic, "trim": true}),
        &[],
    );
    assert_eq!(api["no_good_match"], true, "{api}");
    b.goto(&format!("{base}/?q={}", off_topic.replace(' ', "+")));
    b.wait_for(
        "!document.getElementById('nomatch').hidden",
        30,
        "the no-good-match notice",
    );
    let notice = b.eval("document.getElementById('nomatch').innerText");
    assert!(
        notice.as_str().unwrap().contains("No good match"),
        "{notice}"
    );
    assert_eq!(
        b.eval("document.getElementById('answer').hidden"),
        json!(true)
    );
    b.screenshot(&shots().join("ask-no-good-match.png"));
    assert_no_errors(&mut b, "filters and no good match");

    // Phone width, light and dark.
    b.viewport(390, 844, true);
    b.goto(&format!(
        "{base}/?q=how+are+packages+restored+from+the+local+cache"
    ));
    b.wait_for(
        "document.querySelectorAll('#cards .card').length > 0",
        30,
        "phone cards",
    );
    let overflow =
        b.eval("document.documentElement.scrollWidth - document.documentElement.clientWidth");
    assert_eq!(overflow, json!(0), "no sideways scrolling at phone width");
    assert_eq!(
        b.eval(&format!("{LOW_CONTRAST}(document)")),
        json!([]),
        "light contrast"
    );
    b.screenshot(&shots().join("ask-phone.png"));
    b.dark(true);
    b.click("document.querySelector('#cards .card .whole-toggle')");
    assert_eq!(
        b.eval(&format!("{LOW_CONTRAST}(document)")),
        json!([]),
        "dark contrast"
    );
    b.screenshot(&shots().join("ask-phone-dark.png"));
    b.dark(false);
    assert_no_errors(&mut b, "at phone width");

    // The widget on a page of an allowed origin: opens, answers, closes with Escape.
    b.viewport(1280, 900, false);
    b.goto(&format!("{}/", site.origin()));
    let w = "document.querySelector('[data-bib-help]').shadowRoot";
    b.wait_for(
        &format!("document.querySelector('[data-bib-help]') && {w}.querySelector('.launch')"),
        20,
        "the widget",
    );
    assert_eq!(
        b.eval(&format!("{w}.querySelector('.panel').hidden")),
        json!(true)
    );
    b.click(&format!("{w}.querySelector('.launch')"));
    assert_eq!(
        b.eval(&format!("{w}.querySelector('.panel').hidden")),
        json!(false)
    );
    assert_eq!(
        b.eval(&format!("{w}.activeElement && {w}.activeElement.id")),
        json!("q"),
        "opening the panel focuses the question"
    );
    assert_eq!(
        b.eval(UNLABELLED),
        json!([]),
        "unlabelled controls in the widget"
    );
    b.type_text("how are packages restored from the local cache");
    b.press("Enter", false);
    b.wait_for(
        &format!("{w}.querySelectorAll('li').length > 0"),
        30,
        "widget answers",
    );
    let item = b.eval(&format!(
        "(() => {{ const li = {w}.querySelector('li'); return {{cite: li.querySelector('.cite').textContent,
           href: li.querySelector('a').href, text: li.querySelector('.text').textContent,
           status: {w}.querySelector('.status').textContent}}; }})()"
    ));
    eprintln!("widget: {item:#}");
    assert!(
        item["cite"]
            .as_str()
            .unwrap()
            .starts_with("guides/restore.md:"),
        "{item}"
    );
    assert!(
        item["cite"].as_str().unwrap().contains("handbook"),
        "{item}"
    );
    assert!(
        item["href"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{base}/docs/guides/restore.md?format=html")),
        "{item}"
    );
    assert!(
        item["status"].as_str().unwrap().contains("tokens"),
        "{item}"
    );
    assert_eq!(
        b.eval(&format!("{LOW_CONTRAST}({w})")),
        json!([]),
        "widget contrast"
    );
    b.screenshot(&shots().join("widget-desktop.png"));
    b.dark(true);
    assert_eq!(
        b.eval(&format!("{LOW_CONTRAST}({w})")),
        json!([]),
        "widget contrast, dark"
    );
    b.screenshot(&shots().join("widget-desktop-dark.png"));
    b.dark(false);
    assert_no_errors(&mut b, "in the widget on an allowed origin");
    b.press("Escape", false);
    assert_eq!(
        b.eval(&format!("{w}.querySelector('.panel').hidden")),
        json!(true)
    );
    b.viewport(390, 844, true);
    b.click(&format!("{w}.querySelector('.launch')"));
    b.wait_for(
        &format!("{w}.querySelectorAll('li').length > 0"),
        5,
        "widget answers kept",
    );
    assert_eq!(
        b.eval(&format!("{w}.querySelector('#q').value")),
        json!("how are packages restored from the local cache"),
        "Escape closed the panel without clearing the question"
    );
    b.screenshot(&shots().join("widget-phone.png"));
    b.viewport(1280, 900, false);

    // The same widget on an origin that is not allowed loads but cannot read answers.
    b.goto(&format!("{}/", other.origin()));
    b.wait_for(
        &format!("document.querySelector('[data-bib-help]') && {w}.querySelector('.launch')"),
        20,
        "the widget elsewhere",
    );
    b.click(&format!("{w}.querySelector('.launch')"));
    b.type_text("how are packages restored from the local cache");
    b.press("Enter", false);
    b.wait_for(
        &format!("{w}.querySelector('.status').textContent.startsWith('No answer')"),
        20,
        "a refusal",
    );
    assert_eq!(
        b.eval(&format!("{w}.querySelectorAll('li').length")),
        json!(0)
    );
    // The browser reports the block (how depends on its version; the headers themselves
    // are checked in `cross_origin_reads_only_for_allowed_origins`).
    eprintln!("refused origin, browser said: {:#?}", b.take_errors());
    drop(b);
    drop(s);
}

#[test]
fn with_an_llm_the_answer_streams_above_the_sources() {
    if !model_available() {
        return;
    }
    let Some(chrome) = chromium() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (handbook, _) = wiki(tmp.path());
    let store = tmp.path().join("kb.sqlite");
    ingest(&handbook, &store);
    let llm = fake_llm();
    let config = tmp.path().join("bib.toml");
    std::fs::write(
        &config,
        format!("[llm]\nbase_url = \"{llm}\"\nmodel = \"fake\"\n"),
    )
    .unwrap();
    let s = serve(&store, None, &["--config", config.to_str().unwrap()]);
    let base = format!("http://127.0.0.1:{}", s.addr.port());

    // The event stream itself: results, deltas, done.
    let (st, head, body) = http_raw(
        s.addr,
        "POST",
        "/answer",
        &[],
        Some(
            json!({"query": "how are packages restored from the local cache", "trim": true})
                .to_string()
                .as_bytes(),
        ),
    );
    let text = String::from_utf8_lossy(&body);
    assert_eq!(st, 200, "{head}\n{text}");
    assert!(head.contains("text/event-stream"), "{head}");
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"results"), "{text}");
    assert_eq!(events.last(), Some(&"done"), "{text}");
    assert!(
        events.iter().filter(|e| **e == "delta").count() >= 4,
        "{text}"
    );
    let done: Value = serde_json::from_str(
        text.lines()
            .skip_while(|l| *l != "event: done")
            .nth(1)
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    assert!(
        done["answer"]
            .as_str()
            .unwrap()
            .contains("local cache first [1]"),
        "{done}"
    );

    let mut b = Browser::launch(&chrome);
    b.viewport(1280, 900, false);
    b.goto(&format!("{base}/"));
    b.click("document.getElementById('q')");
    b.type_text("how are packages restored from the local cache");
    b.press("Enter", false);
    // The sources come first, the answer is written into the page as it streams.
    b.wait_for(
        "document.querySelectorAll('#cards .card').length > 0",
        30,
        "cards",
    );
    b.wait_for(
        "!document.getElementById('answer').hidden && document.getElementById('answer-text').textContent.length > 0",
        30,
        "the answer starting",
    );
    b.wait_for(
        "!document.getElementById('answer-text').classList.contains('writing')",
        30,
        "the answer finished",
    );
    let answer = b.eval("document.getElementById('answer-text').textContent");
    assert_eq!(
        answer,
        json!("Packages come from the local cache first [1]; a missing one is downloaded from the feed [1][2].")
    );
    let refs = b.eval(
        "[...document.querySelectorAll('#answer-text a.ref')].map(a => a.getAttribute('href'))",
    );
    assert_eq!(refs, json!(["#source-1", "#source-1", "#source-2"]));
    b.click("document.querySelector('#answer-text a.ref')");
    b.wait_for("location.hash === '#source-1'", 5, "the link to card 1");
    assert_eq!(
        b.eval("document.querySelector('.card:target').id"),
        json!("source-1")
    );
    b.eval("window.scrollTo(0, 0)");
    b.screenshot(&shots().join("ask-desktop-answer.png"));
    assert_no_errors(&mut b, "with an answer");

    // No good match: no answer is written from unrelated passages.
    b.goto(&format!(
        "{base}/?q=best+chocolate+cake+recipe+with+strawberries"
    ));
    b.wait_for(
        "!document.getElementById('nomatch').hidden",
        30,
        "no good match",
    );
    assert_eq!(
        b.eval("document.getElementById('answer').hidden"),
        json!(true)
    );
    assert_no_errors(&mut b, "no good match with an answer endpoint");
}

/// Without a browser: CORS answers only configured origins, only on read routes.
#[test]
fn cross_origin_reads_only_for_allowed_origins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kb.sqlite");
    {
        use bib_store::Store;
        let store = bib_store::SqliteStore::open(&path).unwrap();
        store
            .apply_document(&bib_store::conformance::sample_change(
                "guides/restore.md",
                &["Packages are restored from the local cache first."],
            ))
            .unwrap();
    }
    let allowed = "http://localhost:3000";
    let preflight = |addr, origin: &str, path: &str| {
        http_raw(
            addr,
            "OPTIONS",
            path,
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type"),
            ],
            None,
        )
    };
    let acao = |head: &str| {
        head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("access-control-allow-origin:")
                .map(|v| v.trim().to_string())
        })
    };

    // Nothing configured: no origin gets a permission, on any route.
    let s = serve(&path, None, &["--no-model"]);
    let (st, head, _) = preflight(s.addr, allowed, "/ask");
    assert_eq!(st, 403, "{head}");
    assert_eq!(acao(&head), None);
    let (st, head, _) = http_raw(
        s.addr,
        "POST",
        "/ask",
        &[("Origin", allowed)],
        Some(br#"{"query":"cache"}"#),
    );
    assert_eq!(st, 200);
    assert_eq!(acao(&head), None, "{head}");
    drop(s);

    // One configured: that origin only, read routes only.
    let s = serve(
        &path,
        None,
        &["--no-model", "--allow-origin", "http://LOCALHOST:3000/"],
    );
    let (st, head, _) = preflight(s.addr, allowed, "/ask");
    assert_eq!(st, 204, "{head}");
    assert_eq!(acao(&head).as_deref(), Some(allowed));
    let (st, head, _) = http_raw(
        s.addr,
        "POST",
        "/ask",
        &[("Origin", allowed)],
        Some(br#"{"query":"cache"}"#),
    );
    assert_eq!(st, 200);
    assert_eq!(acao(&head).as_deref(), Some(allowed));
    let (_, head, _) = http_raw(s.addr, "GET", "/status", &[("Origin", allowed)], None);
    assert_eq!(acao(&head).as_deref(), Some(allowed));
    let (_, head, _) = http_raw(
        s.addr,
        "GET",
        "/docs/guides/restore.md?from=1&to=1",
        &[("Origin", allowed)],
        None,
    );
    assert_eq!(acao(&head).as_deref(), Some(allowed));
    for other in [
        "http://localhost:3001",
        "http://127.0.0.1:3000",
        "https://localhost:3000",
        "null",
    ] {
        let (st, head, _) = preflight(s.addr, other, "/ask");
        assert_eq!(st, 403, "{other}: {head}");
        assert_eq!(acao(&head), None, "{other}");
        let (_, head, _) = http_raw(
            s.addr,
            "POST",
            "/ask",
            &[("Origin", other)],
            Some(br#"{"query":"cache"}"#),
        );
        assert_eq!(acao(&head), None, "{other}");
    }
    for (method, route) in [
        ("POST", "/docs"),
        ("POST", "/chunks"),
        ("POST", "/eval"),
        ("POST", "/pack"),
        ("GET", "/runs"),
        ("POST", "/mcp"),
    ] {
        let (st, head, _) = preflight(s.addr, allowed, route);
        assert_eq!(st, 403, "{method} {route}: {head}");
        let (_, head, _) = http_raw(s.addr, method, route, &[("Origin", allowed)], Some(b"{}"));
        assert_eq!(acao(&head), None, "{method} {route}");
    }
    drop(s);

    // A wildcard or a path is refused at start-up, naming the flag.
    for bad in ["*", "http://localhost:3000/app"] {
        let out = bib()
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--no-model",
                "--allow-origin",
                bad,
                "--store",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--allow-origin"), "{bad}: {err}");
    }
}
