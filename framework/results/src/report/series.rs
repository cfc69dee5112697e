//! A series' section: its points, their figures and verdicts, and its charts.

//! `batchbench report`: one self-contained HTML file from results directories.
//! Every chart is inline SVG ([`crate::svg`]); the one inline script only lets
//! legend entries hide their series and records, for tests, that every chart
//! laid out. Several directories overlay: one colour per run.

use super::charts::rule;
use super::grid;
use crate::SeriesDir;
use crate::svg::{Chart, Scale, Series, Style, esc, short};
use batchbench_contract::results::series::Estimate;
use batchbench_contract::slo::SloMetric;
use std::fmt::Write as _;

pub(super) fn series_section(label: &str, s: &SeriesDir) -> String {
    let d = &s.doc;
    let x = format!("{} ({})", d.dimension, d.unit);
    let points = &d.points;
    let by =
        |f: fn(&batchbench_contract::results::series::Point) -> Option<f64>| -> Vec<(f64, f64)> {
            points
                .iter()
                .map(|p| (p.value, f(p).unwrap_or(f64::NAN)))
                .collect()
        };
    let mut tput = Chart::new(
        "series-throughput",
        "Throughput and goodput against load",
        &x,
        "requests per second",
    );
    let errors = |f: &dyn Fn(&batchbench_contract::results::series::Point) -> Option<[f64; 2]>| {
        points.iter().map(f).collect::<Vec<_>>()
    };
    tput.series.push(
        Series::line("throughput", 0, by(|p| Some(p.requests_per_second.mean)))
            .styled(Style::LineMarkers)
            .with_errors(errors(&|p| p.requests_per_second.interval)),
    );
    tput.series.push(
        Series::line("goodput", 2, by(|p| p.goodput.as_ref().map(|g| g.mean)))
            .styled(Style::LineMarkers)
            .dashed(),
    );
    tput.series.push(
        Series::line(
            "achieved arrival rate",
            4,
            by(|p| p.achieved_rate.as_ref().map(|g| g.mean)),
        )
        .styled(Style::LineMarkers)
        .dashed(),
    );
    let mut lat = Chart::new("series-latency", "Latency against load", &x, "milliseconds");
    lat.y_scale = Scale::Log;
    type Fig = (
        &'static str,
        SloMetric,
        fn(&batchbench_contract::results::series::Point) -> Option<&Estimate>,
    );
    let figs: [Fig; 4] = [
        ("e2e p50", SloMetric::E2e, |p| p.e2e_p50_ms.as_ref()),
        ("e2e p99", SloMetric::E2e, |p| p.e2e_p99_ms.as_ref()),
        ("TTFT p99", SloMetric::Ttft, |p| p.ttft_p99_ms.as_ref()),
        ("TPOT p99", SloMetric::Tpot, |p| p.tpot_p99_ms.as_ref()),
    ];
    let mut curve = Chart::new(
        "series-curve",
        "Throughput against latency",
        "requests per second",
        "milliseconds",
    );
    curve.y_scale = Scale::Log;
    for (i, (name, metric, f)) in figs.iter().enumerate() {
        let mean = |p: &batchbench_contract::results::series::Point| f(p).map(|e| e.mean);
        let ys: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.value, mean(p).unwrap_or(f64::NAN)))
            .collect();
        if ys.iter().all(|(_, y)| y.is_nan()) {
            continue;
        }
        let bars = errors(&|p| f(p).and_then(|e| e.interval));
        lat.series.push(
            Series::line(*name, i, ys)
                .styled(Style::LineMarkers)
                .with_errors(bars.clone()),
        );
        curve.series.push(
            Series::line(
                *name,
                i,
                points
                    .iter()
                    .map(|p| (p.requests_per_second.mean, mean(p).unwrap_or(f64::NAN)))
                    .collect(),
            )
            .styled(Style::LineMarkers)
            .with_errors(bars),
        );
        for b in &d.slo {
            if let Some(r) = rule(b, *metric)
                && !lat.rules.iter().any(|x| x.label == r.label)
            {
                lat.rules.push(r.clone());
                curve.rules.push(r);
            }
        }
    }
    let mut table = String::from(
        "<table class=\"points\"><thead><tr><th>load</th><th>req/s</th><th>goodput</th><th>e2e p50 ms</th><th>e2e p99 ms</th><th>TTFT p99 ms</th><th>failed</th><th>SLO</th><th></th></tr></thead><tbody>",
    );
    let cell = |e: Option<f64>| e.map_or_else(|| "&ndash;".to_owned(), |v| format!("{v:.2}"));
    for p in points {
        let mark = [
            (p.capacity, "capacity"),
            (p.saturated, "saturated"),
            (p.remeasured, "remeasured"),
            (p.interrupted, "interrupted"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, t)| *t)
        .collect::<Vec<_>>()
        .join(", ");
        let _ = write!(
            table,
            "<tr{}><td>{} {}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if p.capacity {
                " class=\"capacity\""
            } else {
                ""
            },
            short(p.value),
            esc(&d.unit),
            p.requests_per_second.mean,
            cell(p.goodput.as_ref().map(|g| g.mean)),
            cell(p.e2e_p50_ms.as_ref().map(|g| g.mean)),
            cell(p.e2e_p99_ms.as_ref().map(|g| g.mean)),
            cell(p.ttft_p99_ms.as_ref().map(|g| g.mean)),
            p.failed_requests,
            match p.passed {
                _ if p.client_bound.is_some() => "<span class=\"bad\">client-bound</span>",
                Some(true) => "<span class=\"ok\">met</span>",
                Some(false) if p.undecided => "<span class=\"undecided\">undecided</span>",
                Some(false) => "<span class=\"bad\">missed</span>",
                None => "&ndash;",
            },
            esc(&mark)
        );
    }
    table.push_str("</tbody></table>");
    let mut head = format!(
        "<p>{} over <strong>{}</strong>, {} point(s), {} run(s) per point{}.</p>",
        esc(&d.kind),
        esc(&d.dimension),
        points.len(),
        d.trials,
        if d.slo.is_empty() {
            String::new()
        } else {
            format!("; SLO {}", esc(&d.slo.join(", ")))
        }
    );
    if let Some(c) = &d.capacity {
        let _ = write!(head, "<p class=\"verdict\">{}</p>", esc(&c.message));
    }
    head.push_str(
        "<p class=\"note\">Error bars: 95% intervals. A point of one run shows the run's own (batch means over time; a percentile with too few requests for one has none); a point of several runs (--trials, or a re-measure near a bound) the interval over them (Student's t).</p>",
    );
    if let Some(why) = &d.stopped_early {
        let _ = write!(head, "<p class=\"note\">{}</p>", esc(why));
    }
    let charts = grid(&[
        (tput, "no point measured"),
        (lat, "no latency measured"),
        (curve, "no latency measured"),
    ]);
    format!(
        "<section id=\"series-0\" class=\"series\"><h2>{}: {} over {}</h2>{head}{charts}<div class=\"scroll\">{table}</div></section>",
        esc(label),
        esc(&d.kind),
        esc(&d.dimension)
    )
}
