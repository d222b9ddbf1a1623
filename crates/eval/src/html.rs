//! A self-contained HTML report: settings, verdicts, aggregates, a chart of tokens sent against
//! evidence kept per variant, the calibration chart (inline SVG, one point per threshold and
//! window, the chosen operating point marked) and its table, and per question the metrics, the
//! sources (linked to their files when the caller can say where they are) and the trimmed text
//! with the removed sentences struck through. No external assets; the only script records
//! JavaScript errors into the page (`data-js-errors`) and marks it rendered
//! (`data-report-ready`), so a headless browser test can check both.

use std::fmt::Write as _;

use crate::passage::Passage;
use crate::report::{EvalReport, VariantMetrics};
use crate::sweep::SweepReport;

/// Where a source document can be opened: `path` (as stored) to a URL, when known.
pub type Links<'a> = &'a dyn Fn(&str) -> Option<String>;

/// No links (sources are shown as text).
pub fn no_links(_: &str) -> Option<String> {
    None
}

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
tr.chosen td{background:#fff3c4;font-weight:600}.pass{color:#1a7f37}.fail{color:#c62828}.unknown{color:#8a6d00}\
svg text{font:12px system-ui,sans-serif}.muted{color:#666}details{margin:4px 0}\
.passage{border-left:3px solid #d0d7de;padding:2px 10px;margin:6px 0;white-space:pre-wrap}\
.passage del{color:#9a9a9a;text-decoration:line-through}.passage .prefix{color:#666;font-size:12px}\
body.hide-removed .passage del{display:none}";

/// Render the report as one HTML document; `links` turns a source path into a URL.
pub fn render(r: &EvalReport, links: Links<'_>) -> String {
    let mut h = String::new();
    write_document_head(&mut h);
    write_settings_summary(&mut h, r);
    write_verdicts_table(&mut h, r);
    write_aggregates_table(&mut h, r);
    h.push_str(&variants_chart(r));
    if let Some(sw) = &r.sweep {
        write_calibration_sweep_section(&mut h, sw);
    }
    per_question(&mut h, r, links);
    write_point_highlighting_script_and_close_document(&mut h);
    h
}

/// The doctype, the style sheet, and the script that records JavaScript errors into the page
/// (`data-js-errors`), so a headless browser test can check there were none.
fn write_document_head(h: &mut String) {
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>bib eval report</title><style>{STYLE}</style>\
         <script>window.addEventListener('error',function(e){{var d=document.documentElement;\
         d.setAttribute('data-js-errors',(d.getAttribute('data-js-errors')||'')+e.message+';');}});</script>\
         </head><body>"
    );
}

/// The title and one muted line with the settings the evaluation ran with.
fn write_settings_summary(h: &mut String, r: &EvalReport) {
    let s = &r.settings;
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
}

/// One row per variant: its status against the spec's criteria and the numbers behind it.
fn write_verdicts_table(h: &mut String, r: &EvalReport) {
    h.push_str("<h2>Verdict (reduction &gt; 20%, overlap &gt; 70%, quality not worse)</h2><table id=\"verdicts\"><tr><th>variant</th><th>status</th><th>numbers</th></tr>");
    for v in &r.verdicts {
        let cls = v.status.as_str();
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"{cls}\">{cls}</td><td style=\"text-align:left\">{}</td></tr>",
            v.variant,
            esc(&v.text)
        );
    }
    h.push_str("</table>");
}

/// One row per variant: averages over the questions, before and after trimming.
fn write_aggregates_table(h: &mut String, r: &EvalReport) {
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
}

/// The calibration chart, the rule that chose the operating point, and the table of points
/// (the chosen row highlighted; each row's id lets the chart's points outline it).
fn write_calibration_sweep_section(h: &mut String, sw: &SweepReport) {
    h.push_str("<h2>Calibration sweep</h2>");
    h.push_str(&chart(sw));
    let _ = write!(h, "<p id=\"rule\">{}</p>", esc(&sw.rule));
    h.push_str(
        "<table id=\"sweep-table\"><tr><th>threshold</th><th>window</th><th>avg tokens</th>\
        <th>reduction %</th><th>evidence after</th><th>answer after</th><th>quality ok</th></tr>",
    );
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

/// The page's only script (hovering a sweep point outlines its table row; the page is then
/// marked rendered with `data-report-ready`), and the end of the document.
fn write_point_highlighting_script_and_close_document(h: &mut String) {
    h.push_str(
        "<script>(function(){var pts=document.querySelectorAll('#sweep-chart .pt');\
         pts.forEach(function(p){p.addEventListener('mouseenter',function(){var r=document.getElementById('pt-row-'+p.getAttribute('data-index'));\
         if(r){r.style.outline='2px solid #1f77b4';}});p.addEventListener('mouseleave',function(){\
         var r=document.getElementById('pt-row-'+p.getAttribute('data-index'));if(r){r.style.outline='';}});});\
         document.documentElement.setAttribute('data-report-ready',String(pts.length));})();</script>",
    );
    h.push_str("</body></html>\n");
}

/// Per question: its metrics per variant, the sources linked, and the trimmed text.
fn per_question(h: &mut String, r: &EvalReport, links: Links<'_>) {
    h.push_str(
        "<h2>Per question</h2><p><label><input type=\"checkbox\" id=\"hide-removed\" \
         onchange=\"document.body.classList.toggle('hide-removed',this.checked)\"> hide the \
         sentences trimming removed</label></p>",
    );
    for (i, q) in r.questions.iter().enumerate() {
        // The first question open, so the report shows at once what trimming does.
        let open = if i == 0 { " open" } else { "" };
        let _ = write!(
            h,
            "<details class=\"question\"{open}><summary>[{}] {}</summary><table><tr><th>variant</th><th>tokens</th><th>before</th>\
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
                sources(m, links)
            );
        }
        h.push_str("</table>");
        for (v, m) in q.variants.iter().filter(|(_, m)| !m.passages.is_empty()) {
            trimmed_text(h, &v.to_string(), m, links, i == 0);
        }
        h.push_str("</details>");
    }
}

/// `path#chunk` sources, each a link when its file is known.
fn sources(m: &VariantMetrics, links: Links<'_>) -> String {
    m.sources
        .iter()
        .map(|src| {
            let path = src.rsplit_once('#').map_or(src.as_str(), |(p, _)| p);
            match links(path) {
                Some(url) => format!("<a href=\"{}\">{}</a>", esc(&url), esc(src)),
                None => esc(src),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The context a trimming variant sent, chunk by chunk: kept sentences as text, removed ones
/// struck through (hidden by the checkbox), each chunk under its citation.
fn trimmed_text(h: &mut String, variant: &str, m: &VariantMetrics, links: Links<'_>, open: bool) {
    let (kept, total) = m
        .passages
        .iter()
        .map(Passage::kept_of_total)
        .fold((0, 0), |(a, b), (k, t)| (a + k, b + t));
    let _ = write!(
        h,
        "<details class=\"trimmed\" data-variant=\"{}\"{}><summary>trimmed text ({}): {kept} of {total} sentences kept, {} of {} tokens</summary>",
        esc(variant),
        if open { " open" } else { "" },
        esc(variant),
        m.tokens,
        m.tokens_before
    );
    for p in &m.passages {
        let cite = if p.line_start > 0 {
            format!("{}:{}-{}", p.path, p.line_start, p.line_end)
        } else {
            p.path.clone()
        };
        let cite = match links(&p.path) {
            Some(url) => format!("<a href=\"{}\">{}</a>", esc(&url), esc(&cite)),
            None => esc(&cite),
        };
        let _ = write!(
            h,
            "<div class=\"passage\"><div class=\"prefix\">{cite} · {}</div>",
            esc(&p.prefix)
        );
        for piece in &p.pieces {
            if piece.kept {
                h.push_str(&esc(&piece.text));
            } else {
                let _ = write!(h, "<del>{}</del>", esc(&piece.text));
            }
        }
        h.push_str("</div>");
    }
    h.push_str("</details>");
}

/// The canvas of a chart: its size, its left and top margins, and the size of the plot area
/// inside the margins (the right margin holds the legend or labels).
#[derive(Debug, Clone, Copy)]
struct PlotArea {
    w: f64,
    hgt: f64,
    ml: f64,
    mt: f64,
    pw: f64,
    ph: f64,
}

impl PlotArea {
    /// A `w` × `hgt` canvas with margins left, right, top and bottom.
    fn with_margins(w: f64, hgt: f64, ml: f64, mr: f64, mt: f64, mb: f64) -> Self {
        Self {
            w,
            hgt,
            ml,
            mt,
            pw: w - ml - mr,
            ph: hgt - mt - mb,
        }
    }
}

/// What the variants chart plots on its y axis: a label and how to read the value off an
/// aggregate.
type VariantsQualityAxis = (&'static str, fn(&crate::report::VariantAggregate) -> f64);

/// Tokens sent against quality, one point per variant: evidence kept (else answers kept; else,
/// with no quality data, overlap with the baseline's chunks, and the axis says so).
pub fn variants_chart(r: &EvalReport) -> String {
    let chart = VariantsChart::new(&r.aggregates);
    let mut s = String::from("<h2>Tokens sent and evidence kept, per variant</h2>");
    chart.write_frame_grid_and_axis_labels(&mut s);
    let labels = chart.write_points_and_group_labels_by_spot(&mut s);
    write_variant_labels_alternating_sides(&mut s, labels);
    s.push_str("</svg>");
    s
}

/// The quality axis of the variants chart: evidence kept when any variant has evidence data,
/// else answers kept, else overlap with the baseline's chunks (and the label says quality is
/// unknown).
fn variants_chart_quality_axis(aggs: &[crate::report::VariantAggregate]) -> VariantsQualityAxis {
    let ev = aggs.iter().any(|a| a.evidence_recall_after.is_some());
    let ans = aggs.iter().any(|a| a.answer_recall_after.is_some());
    if ev {
        ("evidence kept (recall)", |a| {
            a.evidence_recall_after.unwrap_or(0.0)
        })
    } else if ans {
        ("answers kept (recall)", |a| {
            a.answer_recall_after.unwrap_or(0.0)
        })
    } else {
        (
            "overlap with the baseline's chunks (quality unknown)",
            |a| a.avg_overlap_vs_baseline,
        )
    }
}

/// The variants chart's data and scales: x from 0 to 10 % past the largest average token
/// count (at least 1), y a recall or overlap clamped to [0, 1].
struct VariantsChart<'r> {
    aggs: &'r [crate::report::VariantAggregate],
    ylabel: &'static str,
    y_of: fn(&crate::report::VariantAggregate) -> f64,
    area: PlotArea,
    x1: f64,
}

impl<'r> VariantsChart<'r> {
    fn new(aggs: &'r [crate::report::VariantAggregate]) -> Self {
        let (ylabel, y_of) = variants_chart_quality_axis(aggs);
        let area = PlotArea::with_margins(820.0, 360.0, 70.0, 150.0, 20.0, 50.0);
        let x1 = aggs.iter().map(|a| a.avg_tokens).fold(1.0, f64::max) * 1.1;
        Self {
            aggs,
            ylabel,
            y_of,
            area,
            x1,
        }
    }

    fn sx(&self, x: f64) -> f64 {
        let PlotArea { ml, pw, .. } = self.area;
        ml + x / self.x1 * pw
    }

    fn sy(&self, y: f64) -> f64 {
        let PlotArea { mt, ph, .. } = self.area;
        mt + ph - y.clamp(0.0, 1.0) * ph
    }

    /// The `<svg>` opening, the plot area, five grid lines per axis with their values, and
    /// the two axis titles.
    fn write_frame_grid_and_axis_labels(&self, s: &mut String) {
        let PlotArea {
            w,
            hgt,
            ml,
            mt,
            pw,
            ph,
        } = self.area;
        let x1 = self.x1;
        let _ = write!(
            s,
            "<svg id=\"variants-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" \
             viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"{} against average tokens sent\">\
             <rect x=\"{ml}\" y=\"{mt}\" width=\"{pw}\" height=\"{ph}\" fill=\"#fafafa\" stroke=\"#999\"/>",
            esc(self.ylabel)
        );
        for i in 0..=5 {
            let (fx, fy) = (x1 * f64::from(i) / 5.0, f64::from(i) / 5.0);
            let _ = write!(
                s,
                "<line x1=\"{0:.1}\" y1=\"{mt}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#e3e3e3\"/>\
                 <text x=\"{0:.1}\" y=\"{2:.1}\" text-anchor=\"middle\">{3:.0}</text>\
                 <line x1=\"{ml}\" y1=\"{4:.1}\" x2=\"{5:.1}\" y2=\"{4:.1}\" stroke=\"#e3e3e3\"/>\
                 <text x=\"{6:.1}\" y=\"{7:.1}\" text-anchor=\"end\">{8:.1}</text>",
                self.sx(fx),
                mt + ph,
                mt + ph + 16.0,
                fx,
                self.sy(fy),
                ml + pw,
                ml - 6.0,
                self.sy(fy) + 4.0,
                fy
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">average tokens sent per question</text>\
             <text transform=\"translate(16,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            ml + pw / 2.0,
            hgt - 10.0,
            mt + ph / 2.0,
            esc(self.ylabel)
        );
    }

    /// One circle per variant (with a tooltip). Returns the labels to draw: variants at the
    /// same spot share one label ("baseline, bm25, hybrid"), in order of first appearance.
    fn write_points_and_group_labels_by_spot(
        &self,
        s: &mut String,
    ) -> Vec<(f64, f64, Vec<String>)> {
        let y_of = self.y_of;
        // Variants at the same spot share one label ("baseline, bm25, hybrid").
        let mut labels: Vec<(f64, f64, Vec<String>)> = Vec::new();
        for (i, a) in self.aggs.iter().enumerate() {
            let (x, y) = (self.sx(a.avg_tokens), self.sy(y_of(a)));
            let color = COLORS[i % COLORS.len()];
            let _ = write!(
                s,
                "<circle class=\"variant-pt\" data-variant=\"{v}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"6\" fill=\"{color}\" fill-opacity=\"0.8\">\
                 <title>{v}: {:.0} tokens, {}: {:.3}</title></circle>",
                a.avg_tokens,
                esc(self.ylabel),
                y_of(a),
                v = a.variant,
            );
            match labels
                .iter_mut()
                .find(|(lx, ly, _)| (lx - x).abs() < 12.0 && (ly - y).abs() < 12.0)
            {
                Some((_, _, names)) => names.push(a.variant.to_string()),
                None => labels.push((x, y, vec![a.variant.to_string()])),
            }
        }
        labels
    }
}

/// The variants chart's labels, so that neighbours do not overlap.
fn write_variant_labels_alternating_sides(
    s: &mut String,
    mut labels: Vec<(f64, f64, Vec<String>)>,
) {
    // Left to right, a label close to the one before goes on the other side of its point.
    labels.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut last_x, mut last_above) = (f64::NEG_INFINITY, false);
    for (x, y, names) in &labels {
        let above = if x - last_x < 120.0 {
            !last_above
        } else {
            true
        };
        (last_x, last_above) = (*x, above);
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 9.0,
            if above { y - 8.0 } else { y + 18.0 },
            esc(&names.join(", "))
        );
    }
}

/// The sweep chart: x = token reduction %, y = evidence recall after trimming (answer recall
/// when there is no evidence; token reduction against the threshold when there is neither).
pub fn chart(sw: &SweepReport) -> String {
    let chart = SweepChart::new(sw);
    let mut s = String::new();
    chart.write_frame_grid_and_axis_labels(&mut s);
    chart.write_reference_lines(&mut s);
    chart.write_one_series_per_window(&mut s);
    chart.write_chosen_point(&mut s);
    s.push_str("</svg>");
    s
}

/// The sweep chart's data and scales: the axes chosen by what the points carry, each point's
/// (x, y), and the value ranges the plot area spans.
struct SweepChart<'s> {
    sw: &'s SweepReport,
    /// Some point carries evidence recall (the y axis is evidence).
    has_ev: bool,
    /// Some point carries answer recall (the y axis is answers when there is no evidence).
    has_ans: bool,
    xlabel: &'static str,
    ylabel: &'static str,
    /// Per point of `sw.points`, in order.
    xy: Vec<(f64, f64)>,
    area: PlotArea,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl<'s> SweepChart<'s> {
    fn new(sw: &'s SweepReport) -> Self {
        let has_ev = sw.points.iter().any(|p| p.evidence_recall_after.is_some());
        let has_ans = sw.points.iter().any(|p| p.answer_recall_after.is_some());
        let (xlabel, ylabel) = sweep_chart_axis_labels(has_ev, has_ans);
        let xy = sweep_chart_point_coordinates(sw, has_ev, has_ans);
        let area = PlotArea::with_margins(820.0, 440.0, 70.0, 150.0, 20.0, 50.0);
        let ((x0, x1), (y0, y1)) = sweep_chart_value_ranges(&xy, has_ev || has_ans);
        Self {
            sw,
            has_ev,
            has_ans,
            xlabel,
            ylabel,
            xy,
            area,
            x0,
            x1,
            y0,
            y1,
        }
    }

    fn sx(&self, x: f64) -> f64 {
        let PlotArea { ml, pw, .. } = self.area;
        let (x0, x1) = (self.x0, self.x1);
        ml + (x - x0) / (x1 - x0) * pw
    }

    fn sy(&self, y: f64) -> f64 {
        let PlotArea { mt, ph, .. } = self.area;
        let (y0, y1) = (self.y0, self.y1);
        mt + ph - (y - y0) / (y1 - y0) * ph
    }

    /// The `<svg>` opening, the plot area, five grid lines per axis with their values, and
    /// the two axis titles.
    fn write_frame_grid_and_axis_labels(&self, s: &mut String) {
        let PlotArea {
            w,
            hgt,
            ml,
            mt,
            pw,
            ph,
        } = self.area;
        let (x0, x1, y0, y1) = (self.x0, self.x1, self.y0, self.y1);
        let _ = write!(
            s,
            "<svg id=\"sweep-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" \
             viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"{} against {}\">",
            esc(self.ylabel),
            esc(self.xlabel)
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
                self.sx(fx),
                mt + ph,
                mt + ph + 16.0,
                fx,
                self.sy(fy),
                ml + pw,
                ml - 6.0,
                self.sy(fy) + 4.0,
                fy
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text transform=\"translate(16,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            ml + pw / 2.0,
            hgt - 10.0,
            esc(self.xlabel),
            mt + ph / 2.0,
            esc(self.ylabel)
        );
    }

    /// Reference lines, on a quality axis only: the 20% criterion and the baseline's recall.
    fn write_reference_lines(&self, s: &mut String) {
        let PlotArea { ml, mt, pw, ph, .. } = self.area;
        // Reference lines: the 20% criterion and the baseline's recall.
        if self.has_ev || self.has_ans {
            let x20 = self.sx(crate::report::MIN_REDUCTION_PCT);
            let _ = write!(
                s,
                "<line class=\"criterion\" x1=\"{x20:.1}\" y1=\"{mt}\" x2=\"{x20:.1}\" y2=\"{:.1}\" stroke=\"#888\" stroke-dasharray=\"4 4\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#666\">20%</text>",
                mt + ph,
                x20 + 3.0,
                mt + 12.0
            );
            let base = if self.has_ev {
                self.sw.baseline_evidence_recall
            } else {
                self.sw.baseline_answer_recall
            };
            if let Some(b) = base {
                let yb = self.sy(b);
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
    }

    /// Per window (ascending, one colour each): a line through its points, a circle per point
    /// (with its index, for the table highlighting, and a tooltip), and a legend entry.
    fn write_one_series_per_window(&self, s: &mut String) {
        let mut windows: Vec<usize> = self.sw.points.iter().map(|p| p.window).collect();
        windows.sort_unstable();
        windows.dedup();
        for (wi, win) in windows.iter().enumerate() {
            let color = COLORS[wi % COLORS.len()];
            let series: Vec<(usize, (f64, f64))> = self
                .sw
                .points
                .iter()
                .enumerate()
                .filter(|(_, p)| p.window == *win)
                .map(|(i, _)| (i, self.xy[i]))
                .collect();
            self.write_window_line_and_points(s, color, series);
            self.write_window_legend_entry(s, color, wi, *win);
        }
    }

    /// One window's polyline and its points' circles, in the window's colour.
    fn write_window_line_and_points(
        &self,
        s: &mut String,
        color: &str,
        series: Vec<(usize, (f64, f64))>,
    ) {
        let path: Vec<String> = series
            .iter()
            .map(|(_, (x, y))| format!("{:.1},{:.1}", self.sx(*x), self.sy(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-opacity=\"0.5\"/>",
            path.join(" ")
        );
        for (i, (x, y)) in series {
            let p = &self.sw.points[i];
            let _ = write!(
                s,
                "<circle class=\"pt\" data-index=\"{i}\" data-threshold=\"{:.2}\" data-window=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{color}\">\
                 <title>threshold {:.2}, window {}: −{:.1}% tokens, evidence {}, answer {}</title></circle>",
                p.threshold,
                p.window,
                self.sx(x),
                self.sy(y),
                p.threshold,
                p.window,
                p.token_reduction_pct,
                opt(p.evidence_recall_after),
                opt(p.answer_recall_after)
            );
        }
    }

    /// The legend entry of the `wi`-th window, in the right margin.
    fn write_window_legend_entry(&self, s: &mut String, color: &str, wi: usize, win: usize) {
        let PlotArea { ml, mt, pw, .. } = self.area;
        let ly = mt + 10.0 + 20.0 * wi as f64;
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{ly:.1}\" r=\"5\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">window {win}</text>",
            ml + pw + 16.0,
            ml + pw + 26.0,
            ly + 4.0
        );
    }

    /// A ring around the chosen operating point, labelled, when one was chosen.
    fn write_chosen_point(&self, s: &mut String) {
        if let Some(i) = self.sw.chosen {
            let p = &self.sw.points[i];
            let (x, y) = self.xy[i];
            let _ = write!(
                s,
                "<g id=\"chosen-point\" data-threshold=\"{:.2}\" data-window=\"{}\"><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"10\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">chosen: {:.2} / w{}</text></g>",
                p.threshold,
                p.window,
                self.sx(x),
                self.sy(y),
                self.sx(x) + 12.0,
                self.sy(y) - 12.0,
                p.threshold,
                p.window
            );
        }
    }
}

/// The sweep chart's axis titles (x, y): reduction against evidence recall, else against
/// answer recall, else reduction against the threshold.
fn sweep_chart_axis_labels(has_ev: bool, has_ans: bool) -> (&'static str, &'static str) {
    if has_ev {
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
    }
}

/// Each sweep point's (x, y) on the axes [`sweep_chart_axis_labels`] names; a missing recall
/// counts as 0.
fn sweep_chart_point_coordinates(sw: &SweepReport, has_ev: bool, has_ans: bool) -> Vec<(f64, f64)> {
    sw.points
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
        .collect()
}

/// The value ranges ((x0, x1), (y0, y1)) the sweep chart spans. A recall axis is [0, 1] and
/// its reduction axis reaches from 0 to at least [`MIN_X_SPAN`]; otherwise the data's extent.
/// No points: [0, 1]. The x range is padded by 5 % either side, a flat y range widened to 1.
fn sweep_chart_value_ranges(xy: &[(f64, f64)], recall_axis: bool) -> ((f64, f64), (f64, f64)) {
    let fmin = |f: fn(&(f64, f64)) -> f64| xy.iter().map(f).fold(f64::INFINITY, f64::min);
    let fmax = |f: fn(&(f64, f64)) -> f64| xy.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
    let (mut x0, mut x1) = (fmin(|p| p.0), fmax(|p| p.0));
    let (mut y0, mut y1) = if recall_axis {
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
    if recall_axis {
        x0 = x0.min(0.0);
        x1 = x1.max(MIN_X_SPAN);
    }
    let pad = ((x1 - x0) * 0.05).max(1e-3);
    x0 -= pad;
    x1 += pad;
    if (y1 - y0).abs() < 1e-9 {
        y1 = y0 + 1.0;
    }
    ((x0, x1), (y0, y1))
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
    fn trimmed_text_strikes_removed_sentences_and_links_sources() {
        use crate::passage::Piece;
        use crate::report::QuestionReport;
        use crate::variant::Variant;
        let p = Passage {
            path: "push.md".into(),
            line_start: 3,
            line_end: 9,
            prefix: "[Doc: Push]".into(),
            pieces: vec![
                Piece {
                    text: "Kept <one>.".into(),
                    kept: true,
                },
                Piece {
                    text: " Gone.".into(),
                    kept: false,
                },
            ],
        };
        let m = VariantMetrics {
            chunk_ids: vec![1],
            sources: vec!["push.md#0".into()],
            top_score: None,
            tokens: 5,
            tokens_before: 9,
            exact_tokens: None,
            exact_tokens_before: None,
            overlap_vs_baseline: 1.0,
            evidence_in_topk: None,
            evidence_kept: None,
            answer_in_topk: None,
            answer_kept: None,
            file_hit: None,
            answer: None,
            passages: vec![p],
            ms: 1.0,
        };
        let links = |path: &str| (path == "push.md").then(|| "file:///kb/push.md".to_string());
        let mut h = String::new();
        trimmed_text(&mut h, "trim", &m, &links, false);
        assert!(h.contains("Kept &lt;one&gt;.<del> Gone.</del>"), "{h}");
        assert!(h.contains("1 of 2 sentences kept, 5 of 9 tokens"), "{h}");
        assert!(
            h.contains("<a href=\"file:///kb/push.md\">push.md:3-9</a>"),
            "{h}"
        );
        assert_eq!(
            sources(&m, &links),
            "<a href=\"file:///kb/push.md\">push.md#0</a>"
        );
        assert_eq!(sources(&m, &no_links), "push.md#0");
        // The variants chart has one point per variant, on a quality axis that says what it is.
        let q = QuestionReport {
            id: None,
            question: "q".into(),
            variants: [(Variant::Baseline, m.clone()), (Variant::Trim, m)]
                .into_iter()
                .collect(),
        };
        let aggregates = crate::report::aggregate(&[q], &[Variant::Baseline, Variant::Trim]);
        let r = EvalReport {
            settings: crate::report::EvalSettings {
                source: "questions".into(),
                model: None,
                top_k: 5,
                mode: "hybrid".into(),
                trim_threshold: 0.2,
                trim_window: 0,
                trim_min_sentences: 0,
                small_to_big_hits: 10,
                quality_tolerance: 0.05,
                filters: vec![],
                variants: vec![Variant::Baseline, Variant::Trim],
                synthesize: false,
                questions: 1,
            },
            summary: serde_json::Value::Null,
            aggregates,
            verdicts: vec![],
            questions: vec![],
            sweep: None,
            unknown_words: vec![],
        };
        let svg = variants_chart(&r);
        assert_eq!(svg.matches("class=\"variant-pt\"").count(), 2);
        assert!(
            svg.contains("quality unknown"),
            "no evidence: the axis says so"
        );
    }

    #[test]
    fn escaping() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
