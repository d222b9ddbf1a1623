// The bibliotecario help widget. One tag adds a help button and panel to any page:
//
//   <script src="HOST/widget.js" data-collection="kb-en" defer></script>
//
// data-collection (optional): ask only this collection; data-title: the panel's title
// (default "Help"); data-trim="off": whole passages instead of the relevant sentences.
// It asks POST /ask on the server it was loaded from; a page on another origin can read the
// answer only if that server allows the origin (bib serve --allow-origin ORIGIN).
// Everything lives in a shadow root, so the page's styles and the widget's do not mix.
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || window.bibHelpWidget) return;
  var base = new URL(".", script.src);
  var collection = script.dataset.collection || "";
  var title = script.dataset.title || "Help";
  var trim = script.dataset.trim !== "off";
  var fmt = function (n) { return Number(n).toLocaleString("en-US"); };

  var css = [
    ":host{all:initial;--bg:#fff;--fg:#1a1a1a;--muted:#595959;--line:#d5d9e0;--card:#f6f7f9;",
    "--accent:#0b57d0;--accent-fg:#fff;--warn:#fff4d6;--warn-line:#b26b00;",
    "font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg)}",
    "@media (prefers-color-scheme:dark){:host{--bg:#1c1f24;--fg:#e8eaed;--muted:#a9adb3;",
    "--line:#3a3f47;--card:#121417;--accent:#8ab4f8;--accent-fg:#0b1a33;--warn:#3a2d05;--warn-line:#f2b84b}}",
    "*{box-sizing:border-box}",
    ":focus-visible{outline:3px solid var(--accent);outline-offset:2px}",
    ".launch{position:fixed;right:1rem;bottom:1rem;z-index:2147483000;font:inherit;font-weight:600;",
    "background:var(--accent);color:var(--accent-fg);border:0;border-radius:2rem;padding:.6rem 1.1rem;",
    "cursor:pointer;box-shadow:0 2px 8px rgba(0,0,0,.25)}",
    ".panel{position:fixed;right:1rem;bottom:4.2rem;z-index:2147483000;width:min(24rem,calc(100vw - 2rem));",
    "max-height:min(36rem,calc(100vh - 6rem));display:flex;flex-direction:column;background:var(--bg);",
    "color:var(--fg);border:1px solid var(--line);border-radius:.7rem;box-shadow:0 6px 24px rgba(0,0,0,.3)}",
    ".panel[hidden]{display:none}",
    ".head{display:flex;align-items:center;justify-content:space-between;padding:.6rem .8rem;border-bottom:1px solid var(--line)}",
    "h2{font-size:1.05rem;margin:0}",
    ".close{font:inherit;background:transparent;color:var(--fg);border:1px solid var(--line);border-radius:.4rem;cursor:pointer;padding:0 .5rem}",
    "form{padding:.7rem .8rem;display:grid;gap:.35rem}",
    "label{font-weight:600;font-size:.95rem}",
    ".row{display:flex;gap:.4rem}",
    "input{flex:1;min-width:0;font:inherit;color:var(--fg);background:var(--bg);border:1px solid var(--line);border-radius:.4rem;padding:.4rem .5rem}",
    ".go{font:inherit;font-weight:600;background:var(--accent);color:var(--accent-fg);border:0;border-radius:.4rem;padding:.4rem .9rem;cursor:pointer}",
    ".body{overflow-y:auto;padding:0 .8rem .8rem}",
    ".status{color:var(--muted);margin:.2rem 0 .5rem;font-size:.9rem}",
    ".nomatch{background:var(--warn);border-left:4px solid var(--warn-line);padding:.4rem .6rem;margin:.3rem 0 .6rem;font-size:.95rem}",
    "ol{list-style:none;margin:0;padding:0;display:grid;gap:.6rem}",
    "li{background:var(--card);border:1px solid var(--line);border-radius:.5rem;padding:.5rem .6rem}",
    ".cite{font-weight:600;overflow-wrap:anywhere;font-size:.95rem}",
    ".cite a{color:var(--accent)}",
    ".coll{color:var(--muted);font-weight:400}",
    ".text{white-space:pre-wrap;overflow-wrap:anywhere;margin:.3rem 0 0;font-size:.95rem}",
  ].join("");

  var host = document.createElement("div");
  host.setAttribute("data-bib-help", "");
  var root = host.attachShadow({ mode: "open" });
  root.innerHTML =
    "<style>" + css + "</style>" +
    "<button class='launch' type='button' aria-expanded='false' aria-controls='panel'></button>" +
    "<div class='panel' id='panel' role='dialog' aria-labelledby='title' hidden>" +
    "<div class='head'><h2 id='title'></h2>" +
    "<button class='close' type='button' aria-label='Close help'>×</button></div>" +
    "<form><label for='q'>Ask the documentation</label><div class='row'>" +
    "<input id='q' type='search' required maxlength='4000' autocomplete='off' enterkeyhint='search'>" +
    "<button class='go' type='submit'>Ask</button></div></form>" +
    "<div class='body'><p class='status' role='status' aria-live='polite'></p>" +
    "<div class='nomatch' hidden><strong>No good match.</strong> Nothing here is close to " +
    "this question; the nearest passages are below.</div><ol></ol></div></div>";
  var $ = function (s) { return root.querySelector(s); };
  var launch = $(".launch"), panel = $(".panel"), input = $("#q"), status = $(".status");
  var list = $("ol"), nomatch = $(".nomatch");
  var mark = el("span", null, "? ");
  mark.setAttribute("aria-hidden", "true");
  launch.append(mark, title);
  $("#title").textContent = title;

  function setOpen(open) {
    panel.hidden = !open;
    launch.setAttribute("aria-expanded", String(open));
    if (open) input.focus(); else launch.focus();
  }
  launch.addEventListener("click", function () { setOpen(panel.hidden); });
  $(".close").addEventListener("click", function () { setOpen(false); });
  // Escape closes the panel (and does not clear the question, as a search box would).
  panel.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { e.preventDefault(); setOpen(false); }
  });

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  function item(r) {
    var li = el("li");
    var cite = el("div", "cite");
    var a = el("a", null, r.path + (r.line_start > 0 ? ":" + r.line_start +
      (r.line_end !== r.line_start ? "-" + r.line_end : "") : ""));
    var path = r.path.split("/").map(encodeURIComponent).join("/");
    var href = "docs/" + path + "?format=html&collection=" + encodeURIComponent(r.collection);
    if (r.line_start > 0) href += "&from=" + r.line_start + "&to=" + r.line_end + "#L" + r.line_start;
    a.href = new URL(href, base).href;
    a.target = "_blank";
    a.rel = "noopener";
    cite.appendChild(a);
    if ((r.heading_path || []).length) cite.appendChild(document.createTextNode(" › " + r.heading_path.join(" › ")));
    cite.appendChild(el("span", "coll", " · " + r.collection));
    li.appendChild(cite);
    // The kept sentences, with […] where trimming left some out.
    var text = "", gap = false;
    (r.passage ? r.passage.pieces : [{ text: r.content, kept: true }]).forEach(function (p) {
      if (!p.kept) { gap = true; return; }
      text += (gap ? (text ? " […]" : "[…] ") : "") + p.text.replace(/^(\s*)#{1,6}\s+/, "$1");
      gap = false;
    });
    li.appendChild(el("p", "text", text.trim() + (gap ? " […]" : "")));
    return li;
  }

  $("form").addEventListener("submit", function (e) {
    e.preventDefault();
    var q = input.value.trim();
    if (!q) return;
    var body = { query: q, trim: trim, passages: true, top_k: 3 };
    if (collection) body.collections = [collection];
    status.textContent = "Searching…";
    fetch(new URL("ask", base).href, { method: "POST", headers: { "Content-Type": "application/json" },
                                       body: JSON.stringify(body) })
      .then(function (resp) {
        return resp.json().then(function (out) {
          if (!resp.ok) throw new Error(out && out.error ? out.error.message : "HTTP " + resp.status);
          return out;
        });
      })
      .then(function (out) {
        nomatch.hidden = !out.no_good_match;
        list.replaceChildren.apply(list, out.results.map(item));
        var before = out.exact_tokens_before != null ? out.exact_tokens_before : out.tokens_before;
        var after = out.exact_tokens_in_context != null ? out.exact_tokens_in_context : out.tokens_in_context;
        status.textContent = out.results.length === 0 ? "Nothing found." :
          out.results.length + (out.results.length === 1 ? " source · " : " sources · ") +
          (out.trim && before > 0 ? fmt(before) + " → " + fmt(after) + " tokens" : fmt(before) + " tokens");
      })
      .catch(function (err) {
        list.replaceChildren();
        nomatch.hidden = true;
        status.textContent = "No answer: " + err.message;
      });
  });

  window.bibHelpWidget = { open: function () { setOpen(true); }, close: function () { setOpen(false); } };
  (document.body || document.documentElement).appendChild(host);
})();
