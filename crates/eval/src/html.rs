//! A self-contained HTML report: settings, verdicts, aggregates, the calibration chart (inline
//! SVG, one point per threshold and window, the chosen operating point marked) and its table,
//! and the per-question metrics. No external assets; the only script records JavaScript errors
//! into the page (`data-js-errors`) and marks it rendered (`data-report-ready`), so a headless
//! browser test can check both.

use std::fmt::Write as _;

use crate::report::{EvalReport, Status};
use crate::sweep::SweepReport;

/// Escape text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), |x| format!("{x:.3}"))
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}\
tr.chosen td{background:#fff3c4;font-weight:600}.pass{color:#1a7f37}.fail{color:#c62828}.inconclusive{color:#8a6d00}\
svg text{font:12px system-ui,sans-serif}.muted{color:#666}details{margin:4px 0}";

/// Render the report as one HTML document.
pub fn render(r: &EvalReport) -> String {
    let s = &r.settings;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>bib eval report</title><style>{STYLE}</style>\
         <script>window.addEventListener('error',function(e){{var d=document.documentElement;\
         d.setAttribute('data-js-errors',(d.getAttribute('data-js-errors')||'')+e.message+';');}});</script>\
         </head><body>"
    );
    let _ = write!(
        h,
        "<h1>bib eval — retrieval A/B report</h1><p class=\"muted\">{} questions from <code>{}</code> · \
         top_k {} · mode {} · trim threshold {:.2}, window {}, min sentences {} · model {} · \
         small-to-big hits {} · quality tolerance {:.2}</p>",
        s.questions,
        esc(&s.source),
        s.top_k,
        esc(&s.mode),
        s.trim_threshold,
        s.trim_window,
        s.trim_min_sentences,
        esc(s.model.as_deref().unwrap_or("none")),
        s.small_to_big_hits,
        s.quality_tolerance
    );

    h.push_str("<h2>Verdict (reduction &gt; 20%, overlap &gt; 70%, quality not worse)</h2><table id=\"verdicts\"><tr><th>variant</th><th>status</th><th>numbers</th></tr>");
    for v in &r.verdicts {
        let cls = match v.status {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Inconclusive => "inconclusive",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"{cls}\">{cls}</td><td style=\"text-align:left\">{}</td></tr>",
            v.variant,
            esc(&v.text)
        );
    }
    h.push_str("</table>");

    h.push_str("<h2>Aggregates</h2><table id=\"aggregates\"><tr><th>variant</th><th>avg tokens</th>\
        <th>avg tokens before</th><th>reduction %</th><th>overlap</th><th>evidence before</th>\
        <th>evidence after</th><th>answer before</th><th>answer after</th><th>file recall</th><th>ms</th></tr>");
    for a in &r.aggregates {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.3}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>",
            a.variant,
            a.avg_tokens,
            a.avg_tokens_before,
            a.token_reduction_pct,
            a.avg_overlap_vs_baseline,
            opt(a.evidence_recall_before),
            opt(a.evidence_recall_after),
            opt(a.answer_recall_before),
            opt(a.answer_recall_after),
            opt(a.file_recall),
            a.avg_ms
        );
    }
    h.push_str("</table>");

    if let Some(sw) = &r.sweep {
        h.push_str("<h2>Calibration sweep</h2>");
        h.push_str(&chart(sw));
        let _ = write!(h, "<p id=\"rule\">{}</p>", esc(&sw.rule));
        h.push_str("<table id=\"sweep-table\"><tr><th>threshold</th><th>window</th><th>avg tokens</th>\
            <th>reduction %</th><th>evidence after</th><th>answer after</th><th>quality ok</th></tr>");
        for (i, p) in sw.points.iter().enumerate() {
            let cls = if Some(i) == sw.chosen {
                " class=\"chosen\""
            } else {
                ""
            };
            let _ = write!(
                h,
                "<tr{cls} id=\"pt-row-{i}\"><td>{:.2}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                p.threshold,
                p.window,
                p.avg_tokens,
                p.token_reduction_pct,
                opt(p.evidence_recall_after),
                opt(p.answer_recall_after),
                p.quality_ok.map_or("–", |b| if b { "yes" } else { "no" })
            );
        }
        h.push_str("</table>");
    }

    h.push_str("<h2>Per question</h2>");
    for (i, q) in r.questions.iter().enumerate() {
        let _ = write!(
            h,
            "<details><summary>[{}] {}</summary><table><tr><th>variant</th><th>tokens</th><th>before</th>\
             <th>overlap</th><th>top score</th><th>evidence before</th><th>evidence after</th><th>answer kept</th><th>sources</th></tr>",
            i + 1,
            esc(&q.question)
        );
        for (v, m) in &q.variants {
            let _ = write!(
                h,
                "<tr><td>{v}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                m.tokens,
                m.tokens_before,
                m.overlap_vs_baseline,
                m.top_score.map_or_else(|| "–".into(), |x| format!("{x:.4}")),
                opt(m.evidence_in_topk),
                opt(m.evidence_kept),
                m.answer_kept.map_or("–", |b| if b { "yes" } else { "no" }),
                esc(&m.sources.join(", "))
            );
        }
        h.push_str("</table></details>");
    }
    h.push_str(
        "<script>(function(){var pts=document.querySelectorAll('#sweep-chart .pt');\
         pts.forEach(function(p){p.addEventListener('mouseenter',function(){var r=document.getElementById('pt-row-'+p.getAttribute('data-index'));\
         if(r){r.style.outline='2px solid #1f77b4';}});p.addEventListener('mouseleave',function(){\
         var r=document.getElementById('pt-row-'+p.getAttribute('data-index'));if(r){r.style.outline='';}});});\
         document.documentElement.setAttribute('data-report-ready',String(pts.length));})();</script>",
    );
    h.push_str("</body></html>\n");
    h
}

/// The sweep chart: x = token reduction %, y = evidence recall after trimming (answer recall
/// when there is no evidence; token reduction against the threshold when there is neither).
pub fn chart(sw: &SweepReport) -> String {
    let has_ev = sw.points.iter().any(|p| p.evidence_recall_after.is_some());
    let has_ans = sw.points.iter().any(|p| p.answer_recall_after.is_some());
    let (xlabel, ylabel) = if has_ev {
        (
            "token reduction vs baseline (%)",
            "evidence recall after trimming",
        )
    } else if has_ans {
        (
            "token reduction vs baseline (%)",
            "answer recall after trimming",
        )
    } else {
        ("trim threshold (cosine)", "token reduction vs baseline (%)")
    };
    let xy: Vec<(f64, f64)> = sw
        .points
        .iter()
        .map(|p| {
            if has_ev {
                (
                    p.token_reduction_pct,
                    p.evidence_recall_after.unwrap_or(0.0),
                )
            } else if has_ans {
                (p.token_reduction_pct, p.answer_recall_after.unwrap_or(0.0))
            } else {
                (f64::from(p.threshold), p.token_reduction_pct)
            }
        })
        .collect();
    let (w, hgt, ml, mr, mt, mb) = (820.0, 440.0, 70.0, 150.0, 20.0, 50.0);
    let pw = w - ml - mr;
    let ph = hgt - mt - mb;
    let fmin = |f: fn(&(f64, f64)) -> f64| xy.iter().map(f).fold(f64::INFINITY, f64::min);
    let fmax = |f: fn(&(f64, f64)) -> f64| xy.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
    let (mut x0, mut x1) = (fmin(|p| p.0), fmax(|p| p.0));
    let (mut y0, mut y1) = if has_ev || has_ans {
        (0.0, 1.0)
    } else {
        (fmin(|p| p.1), fmax(|p| p.1))
    };
    if !x0.is_finite() || !x1.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if !y0.is_finite() || !y1.is_finite() {
        (y0, y1) = (0.0, 1.0);
    }
    if has_ev || has_ans {
        x0 = x0.min(0.0);
        x1 = x1.max(MIN_X_SPAN);
    }
    let pad = ((x1 - x0) * 0.05).max(1e-3);
    x0 -= pad;
    x1 += pad;
    if (y1 - y0).abs() < 1e-9 {
        y1 = y0 + 1.0;
    }
    let sx = |x: f64| ml + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| mt + ph - (y - y0) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg id=\"sweep-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" \
         viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"{} against {}\">",
        esc(ylabel),
        esc(xlabel)
    );
    let _ = write!(
        s,
        "<rect x=\"{ml}\" y=\"{mt}\" width=\"{pw}\" height=\"{ph}\" fill=\"#fafafa\" stroke=\"#999\"/>"
    );
    for i in 0..=5 {
        let fx = x0 + (x1 - x0) * f64::from(i) / 5.0;
        let fy = y0 + (y1 - y0) * f64::from(i) / 5.0;
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{mt}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#e3e3e3\"/>\
             <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{3:.1}</text>\
             <line x1=\"{ml}\" y1=\"{4:.1}\" x2=\"{5:.1}\" y2=\"{4:.1}\" stroke=\"#e3e3e3\"/>\
             <text x=\"{6:.1}\" y=\"{7:.1}\" text-anchor=\"end\">{8:.2}</text>",
            sx(fx),
            mt + ph,
            mt + ph + 16.0,
            fx,
            sy(fy),
            ml + pw,
            ml - 6.0,
            sy(fy) + 4.0,
            fy
        );
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text transform=\"translate(16,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        ml + pw / 2.0,
        hgt - 10.0,
        esc(xlabel),
        mt + ph / 2.0,
        esc(ylabel)
    );
    // Reference lines: the 20% criterion and the baseline's recall.
    if has_ev || has_ans {
        let x20 = sx(crate::report::MIN_REDUCTION_PCT);
        let _ = write!(
            s,
            "<line class=\"criterion\" x1=\"{x20:.1}\" y1=\"{mt}\" x2=\"{x20:.1}\" y2=\"{:.1}\" stroke=\"#888\" stroke-dasharray=\"4 4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#666\">20%</text>",
            mt + ph,
            x20 + 3.0,
            mt + 12.0
        );
        let base = if has_ev {
            sw.baseline_evidence_recall
        } else {
            sw.baseline_answer_recall
        };
        if let Some(b) = base {
            let yb = sy(b);
            let _ = write!(
                s,
                "<line class=\"baseline\" x1=\"{ml}\" y1=\"{yb:.1}\" x2=\"{:.1}\" y2=\"{yb:.1}\" stroke=\"#444\" stroke-dasharray=\"6 3\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#444\">baseline {b:.3}</text>",
                ml + pw,
                ml + pw + 6.0,
                yb + 4.0
            );
        }
    }
    let mut windows: Vec<usize> = sw.points.iter().map(|p| p.window).collect();
    windows.sort_unstable();
    windows.dedup();
    for (wi, win) in windows.iter().enumerate() {
        let color = COLORS[wi % COLORS.len()];
        let series: Vec<(usize, (f64, f64))> = sw
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.window == *win)
            .map(|(i, _)| (i, xy[i]))
            .collect();
        let path: Vec<String> = series
            .iter()
            .map(|(_, (x, y))| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-opacity=\"0.5\"/>",
            path.join(" ")
        );
        for (i, (x, y)) in series {
            let p = &sw.points[i];
            let _ = write!(
                s,
                "<circle class=\"pt\" data-index=\"{i}\" data-threshold=\"{:.2}\" data-window=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{color}\">\
                 <title>threshold {:.2}, window {}: −{:.1}% tokens, evidence {}, answer {}</title></circle>",
                p.threshold,
                p.window,
                sx(x),
                sy(y),
                p.threshold,
                p.window,
                p.token_reduction_pct,
                opt(p.evidence_recall_after),
                opt(p.answer_recall_after)
            );
        }
        let ly = mt + 10.0 + 20.0 * wi as f64;
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{ly:.1}\" r=\"5\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">window {win}</text>",
            ml + pw + 16.0,
            ml + pw + 26.0,
            ly + 4.0
        );
    }
    if let Some(i) = sw.chosen {
        let p = &sw.points[i];
        let (x, y) = xy[i];
        let _ = write!(
            s,
            "<g id=\"chosen-point\" data-threshold=\"{:.2}\" data-window=\"{}\"><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"10\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">chosen: {:.2} / w{}</text></g>",
            p.threshold,
            p.window,
            sx(x),
            sy(y),
            sx(x) + 12.0,
            sy(y) - 12.0,
            p.threshold,
            p.window
        );
    }
    s.push_str("</svg>");
    s
}

const MIN_X_SPAN: f64 = 25.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::SweepPoint;

    fn sweep(chosen: Option<usize>) -> SweepReport {
        let points = (0..6)
            .map(|i| SweepPoint {
                threshold: 0.2 + 0.1 * (i % 3) as f32,
                window: i / 3,
                avg_tokens: 100.0 - 10.0 * i as f64,
                token_reduction_pct: 10.0 * i as f64,
                evidence_recall_after: Some(1.0 - 0.1 * i as f64),
                answer_recall_after: None,
                quality_ok: Some(i < 3),
            })
            .collect();
        SweepReport {
            scorer: "cosine".into(),
            baseline_avg_tokens: 100.0,
            baseline_evidence_recall: Some(1.0),
            baseline_answer_recall: None,
            tolerance: 0.05,
            points,
            chosen,
            rule: "rule <b>".into(),
        }
    }

    #[test]
    fn chart_has_one_circle_per_point_and_marks_the_choice() {
        let svg = chart(&sweep(Some(2)));
        assert_eq!(svg.matches("class=\"pt\"").count(), 6);
        assert!(svg.contains("id=\"chosen-point\" data-threshold=\"0.40\" data-window=\"0\""));
        assert!(svg.contains("baseline 1.000"));
        assert!(!chart(&sweep(None)).contains("chosen-point"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
