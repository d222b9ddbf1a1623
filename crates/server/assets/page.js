// The ask page of `bib serve`: asks POST /ask (or POST /answer, which streams an answer,
// when the server has an [llm] endpoint) and shows every source as a card with its
// citation, the sentences trimming kept (the whole passage one click away) and the tokens.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var form = $("ask"), q = $("q"), go = $("go"), trim = $("trim"), coll = $("collection");
  var summary = $("summary"), nomatch = $("nomatch"), cards = $("cards");
  var answer = $("answer"), answerText = $("answer-text"), sourcesH = $("sources-h");
  var synthesis = document.body.dataset.synthesis === "on";
  var fmt = function (n) { return Number(n).toLocaleString("en-US"); };

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  }

  function docLink(r) {
    var path = r.path.split("/").map(encodeURIComponent).join("/");
    var u = "docs/" + path + "?format=html&collection=" + encodeURIComponent(r.collection);
    if (r.line_start > 0) u += "&from=" + r.line_start + "&to=" + r.line_end + "#L" + r.line_start;
    return u;
  }

  function citation(r) {
    if (r.line_start <= 0) return r.path;
    return r.path + ":" + r.line_start + (r.line_end !== r.line_start ? "-" + r.line_end : "");
  }

  // "1,377 → 412 tokens, −70 %": the model's own counts when it has them.
  function tokens(out) {
    var before = out.exact_tokens_before != null ? out.exact_tokens_before : out.tokens_before;
    var after = out.exact_tokens_in_context != null ? out.exact_tokens_in_context : out.tokens_in_context;
    if (!out.trim || before === 0) return fmt(before) + " tokens";
    var saved = Math.round((1 - after / before) * 100);
    return fmt(before) + " → " + fmt(after) + " tokens, −" + saved + " %";
  }

  // One piece of a chunk's text; a Markdown heading ("## Setup") shows as a bold line.
  function piece(cls, text) {
    var span = el("span", { class: cls });
    var h = /^(\s*)#{1,6}\s+([\s\S]*)$/.exec(text);
    if (h) {
      span.appendChild(document.createTextNode(h[1]));
      span.appendChild(el("strong", { class: "md-h", text: h[2] }));
    } else {
      span.textContent = text;
    }
    return span;
  }

  // The chunk's text: kept pieces shown, removed ones hidden behind "show the whole passage"
  // (a […] mark stands where they were).
  function passageText(r, id) {
    var box = el("div", { class: "text", id: id });
    var pieces = r.passage ? r.passage.pieces : [{ text: r.content, kept: true }];
    var hidden = false, shown = false;
    pieces.forEach(function (p, i) {
      var text = i === 0 ? p.text.replace(/^\s+/, "") : p.text;
      if (p.kept) {
        // The first kept piece after a leading […] goes on its line.
        if (!shown && hidden) text = text.replace(/^\s+/, " ");
        if (hidden) box.appendChild(el("span", { class: "gap", text: shown ? " […]" : "[…]" }));
        hidden = false;
        shown = true;
        box.appendChild(piece("kept", text));
      } else {
        hidden = true;
        box.appendChild(piece("removed", text));
      }
    });
    if (hidden) box.appendChild(el("span", { class: "gap", text: shown ? " […]" : "[…]" }));
    return box;
  }

  function card(r) {
    var n = r.rank, textId = "text-" + n;
    var heading = (r.heading_path || []).length
      ? el("span", { class: "heading", text: "\u00a0› " + r.heading_path.join(" › ") }) : null;
    var h3 = el("h3", { id: "cite-" + n }, [
      el("span", { class: "num", "aria-hidden": "true", text: String(n) }),
      el("a", { href: docLink(r), title: "Open the document at these lines", text: citation(r) }),
      heading,
    ]);
    var foot = [];
    var p = r.passage;
    var removed = p ? p.pieces.some(function (x) { return !x.kept; }) : false;
    if (p && r.sentences_total != null) {
      foot.push(el("span", { class: "kept-count",
        text: r.sentences_kept + " of " + r.sentences_total + " sentences · " +
              fmt(p.tokens_kept) + " of " + fmt(p.tokens_whole) + " tokens" }));
    } else if (p) {
      foot.push(el("span", { text: fmt(p.tokens_whole) + " tokens" }));
    }
    var li = el("li", { class: "card", id: "source-" + n });
    if (removed) {
      var b = el("button", { type: "button", class: "whole-toggle", "aria-expanded": "false",
                             "aria-controls": textId, text: "Show the whole passage" });
      b.addEventListener("click", function () {
        var open = li.classList.toggle("whole");
        b.setAttribute("aria-expanded", String(open));
        b.textContent = open ? "Show only the kept sentences" : "Show the whole passage";
      });
      foot.push(b);
    }
    li.appendChild(el("article", { "aria-labelledby": "cite-" + n }, [
      el("header", {}, [h3, el("span", { class: "coll", title: "collection", text: r.collection })]),
      passageText(r, textId),
      el("footer", {}, foot),
    ]));
    return li;
  }

  function showResults(out) {
    cards.replaceChildren.apply(cards, out.results.map(card));
    sourcesH.hidden = out.results.length === 0;
    nomatch.hidden = !out.no_good_match;
    // Spans do not wrap inside; the line may break at the separators.
    var dot = function () { return document.createTextNode(" · "); };
    var s = [el("span", { text: out.results.length + (out.results.length === 1 ? " source" : " sources") }),
             dot(), el("span", { class: "tokens", text: tokens(out) }),
             dot(), el("span", { text: Math.round(out.took_ms) + " ms" })];
    if (out.results.length === 0) s = [el("span", { text: "Nothing found for this question." })];
    // Words searched as another word (typos): say so, as a search box does.
    if (out.corrections && out.corrections.length) {
      var fixed = out.corrections.map(function (c) { return c.from + " → " + c.to; }).join(", ");
      s.push(dot(), el("span", { class: "corrected", text: "typos corrected: " + fixed }));
    }
    // Phrases the owner's synonym rules added to the keyword search.
    if (out.synonyms && out.synonyms.length) {
      var added = out.synonyms.map(function (x) { return x.added.join(", ") + " (for " + x.matched + ")"; }).join("; ");
      s.push(dot(), el("span", { class: "corrected", text: "also searched for: " + added }));
    }
    summary.className = "summary";
    summary.replaceChildren.apply(summary, s);
  }

  // The answer with its [n] marks as links to the cards.
  function renderAnswer(text) {
    var nodes = [], re = /\[(\d+)\]/g, last = 0, m;
    while ((m = re.exec(text))) {
      nodes.push(document.createTextNode(text.slice(last, m.index)));
      nodes.push(el("a", { class: "ref", href: "#source-" + m[1], text: "[" + m[1] + "]",
                           "aria-label": "source " + m[1] }));
      last = re.lastIndex;
    }
    nodes.push(document.createTextNode(text.slice(last)));
    answerText.replaceChildren.apply(answerText, nodes);
  }

  function fail(message) {
    summary.className = "summary error";
    summary.textContent = message;
  }

  function errorOf(resp, body) {
    var e = body && body.error;
    return e ? e.message : "The server answered HTTP " + resp.status + ".";
  }

  // Read POST /answer's server-sent events: results, delta…, done | error.
  function readEvents(resp, on) {
    var reader = resp.body.getReader(), dec = new TextDecoder(), buf = "";
    function pump() {
      return reader.read().then(function (r) {
        if (r.done) return;
        buf += dec.decode(r.value, { stream: true });
        var i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          var block = buf.slice(0, i), name = "message", data = "";
          buf = buf.slice(i + 2);
          block.split("\n").forEach(function (line) {
            if (line.indexOf("event:") === 0) name = line.slice(6).trim();
            else if (line.indexOf("data:") === 0) data += line.slice(5).trim();
          });
          on(name, data ? JSON.parse(data) : null);
        }
        return pump();
      });
    }
    return pump();
  }

  function ask(question) {
    var body = { query: question, trim: trim.checked, passages: true };
    if (coll.value) body.collections = [coll.value];
    go.disabled = true;
    summary.className = "summary";
    summary.textContent = "Searching…";
    answer.hidden = true;
    var url = synthesis ? "answer" : "ask";
    return fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
                        body: JSON.stringify(body) })
      .then(function (resp) {
        if (!resp.ok) {
          return resp.json().catch(function () { return null; })
            .then(function (b) { fail(errorOf(resp, b)); });
        }
        if (!synthesis) return resp.json().then(showResults);
        var text = "";
        return readEvents(resp, function (name, data) {
          if (name === "results") {
            showResults(data);
            if (!data.no_good_match && data.results.length) {
              answer.hidden = false;
              answerText.classList.add("writing");
              renderAnswer("");
            }
          } else if (name === "delta") {
            text += data.text;
            renderAnswer(text);
          } else if (name === "done") {
            answerText.classList.remove("writing");
          } else if (name === "error") {
            answerText.classList.remove("writing");
            renderAnswer(text + (text ? "\n\n" : "") + "(The answer could not be written: " +
                         data.error.message + ")");
          }
        });
      })
      .catch(function (e) { fail("The server could not be reached: " + e.message); })
      .finally(function () { go.disabled = false; });
  }

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var question = q.value.trim();
    if (!question) return;
    var params = new URLSearchParams({ q: question });
    if (coll.value) params.set("collection", coll.value);
    if (!trim.checked) params.set("trim", "off");
    history.replaceState(null, "", "?" + params.toString());
    ask(question);
  });

  // The collections of the knowledge base for the filter, then a question from the URL.
  var params = new URLSearchParams(location.search);
  if (params.get("trim") === "off") trim.checked = false;
  fetch("status").then(function (r) { return r.ok ? r.json() : null; }).then(function (st) {
    (st && st.collections || []).forEach(function (c) {
      coll.appendChild(el("option", { value: c.name,
        text: c.name + " (" + fmt(c.documents) + (c.documents === 1 ? " document)" : " documents)") }));
    });
  }).catch(function () {}).finally(function () {
    if (params.get("collection")) coll.value = params.get("collection");
    if (params.get("q")) { q.value = params.get("q"); ask(q.value); }
  });
})();
