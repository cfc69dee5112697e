//! `batchbench report`: one self-contained HTML file from results directories.
//! Every chart is inline SVG ([`crate::svg`]); the one inline script only lets
//! legend entries hide their series and records, for tests, that every chart
//! laid out. Several directories overlay: one colour per run.
//!
//! The sections are here; the charts of the runs in `charts`, a series'
//! section in `series`, and the page around them (its style sheet and
//! script, files of their own) in `page`.

mod charts;
mod page;
mod series;

use crate::svg::{Chart, PALETTE, esc, short};
use crate::{Loaded, RunDir, SeriesDir};
use batchbench_contract::record::LatencyStats;
use charts::{
    Groups, cache_charts, cdf_charts, group_charts, has_cache_data, prompt_charts, server_charts,
    time_charts,
};
pub(crate) use page::page;
use series::series_section;
use std::fmt::Write as _;

/// One directory given to the report, with the name it is shown under.
#[derive(Debug)]
pub struct Input {
    /// The label (the directory's name, made unique).
    pub label: String,
    /// What was read.
    pub loaded: Loaded,
}

/// A run to draw, with its label and colour.
struct Shown<'a> {
    label: String,
    run: &'a RunDir,
    colour: usize,
}

/// The report as one HTML document.
pub fn render(inputs: &[Input], generated: &str) -> String {
    let mut shown = Vec::new();
    let mut series = Vec::new();
    for input in inputs {
        match &input.loaded {
            Loaded::Run(r) => shown.push((input.label.clone(), r.as_ref())),
            Loaded::Series(s) => {
                series.push((input.label.as_str(), s.as_ref()));
                for (p, r) in s.doc.points.iter().zip(&s.runs) {
                    shown.push((
                        format!("{} {} {}", input.label, short(p.value), s.doc.unit),
                        r,
                    ));
                }
            }
        }
    }
    let shown: Vec<Shown<'_>> = shown
        .into_iter()
        .enumerate()
        .map(|(colour, (label, run))| Shown { label, run, colour })
        .collect();

    let mut body = String::new();
    // A fleet's run names its routing policy in the title.
    let titles: Vec<String> = inputs
        .iter()
        .map(|i| match &i.loaded {
            Loaded::Run(r) => match &r.doc.summary.routing {
                Some(p) => format!("{} (routed by {p})", i.label),
                None => i.label.clone(),
            },
            Loaded::Series(_) => i.label.clone(),
        })
        .collect();
    let _ = write!(
        body,
        "<header><h1>batchbench report</h1><p class=\"sub\">{} &middot; generated {}</p></header>",
        esc(&titles.join(", ")),
        esc(generated)
    );
    body.push_str(&nav(&series, &shown));
    for (label, s) in &series {
        body.push_str(&series_section(label, s));
    }
    if !shown.is_empty() {
        body.push_str(&summary_section(&shown));
        body.push_str(&section(
            "distributions",
            "Latency distributions",
            "Cumulative share of requests at or below each latency (HDR histograms, every sample).",
            &cdf_charts(&shown),
        ));
        body.push_str(&section(
            "time",
            "Over time",
            "From the benchmark clock start, in equal intervals: what the client sent, kept in flight and got back.",
            &time_charts(&shown),
        ));
        body.push_str(&section(
            "prompt-length",
            "Latency against prompt length",
            "Each dot a successful request (at most 1,500 per run, evenly chosen).",
            &prompt_charts(&shown),
        ));
        if shown
            .iter()
            .any(|s| !s.run.doc.summary.endpoints.is_empty())
        {
            body.push_str(&section(
                "endpoints",
                "Per endpoint",
                "A fleet's endpoints, one line each: what the routing policy sent each, and how each answered.",
                &group_charts(&shown, Groups::Endpoints),
            ));
        }
        if shown.iter().any(|s| !s.run.doc.summary.models.is_empty()) {
            body.push_str(&section(
                "models",
                "Per model",
                "A mix's models and adapters, one line each: the requests the mix sent each, and how each answered.",
                &group_charts(&shown, Groups::Models),
            ));
        }
        let cache = cache_charts(&shown);
        if !cache.is_empty() {
            body.push_str(&section(
                "cache",
                "Prefix cache per turn",
                "Mean cached prompt tokens per request at each turn: what the server reported (solid) against the perfect-prefix-cache estimate (dashed).",
                &cache,
            ));
        }
        if shown.iter().any(|s| !s.run.server.is_empty()) {
            body.push_str(&section(
                "server",
                "Server metrics",
                "Scraped from the server's Prometheus endpoint during the run (--server-metrics), under common names; rates are over each scrape interval.",
                &server_charts(&shown),
            ));
        }
        body.push_str(&spec_section(&shown));
    }
    page(&body)
}

fn nav(series: &[(&str, &SeriesDir)], shown: &[Shown<'_>]) -> String {
    let mut items = Vec::new();
    if !series.is_empty() {
        items.push(("series-0", "Series"));
    }
    if !shown.is_empty() {
        items.extend([
            ("summary", "Summary"),
            ("distributions", "Distributions"),
            ("time", "Over time"),
            ("prompt-length", "Prompt length"),
        ]);
        if shown.iter().any(|s| has_cache_data(s.run)) {
            items.push(("cache", "Prefix cache"));
        }
        if shown.iter().any(|s| !s.run.server.is_empty()) {
            items.push(("server", "Server metrics"));
        }
        items.push(("spec", "Run spec"));
    }
    let links: Vec<String> = items
        .iter()
        .map(|(id, t)| format!("<a href=\"#{id}\">{t}</a>"))
        .collect();
    format!("<nav>{}</nav>", links.join(" "))
}

pub(crate) fn section(id: &str, title: &str, note: &str, content: &str) -> String {
    format!(
        "<section id=\"{id}\"><h2>{}</h2><p class=\"note\">{}</p>{content}</section>",
        esc(title),
        esc(note)
    )
}

/// Charts in a grid; a chart with nothing to draw leaves a line saying so.
pub(crate) fn grid(charts: &[(Chart, &str)]) -> String {
    let mut o = String::from("<div class=\"grid\">");
    for (c, empty) in charts {
        match c.svg() {
            Some(svg) => {
                let _ = write!(o, "<figure>{svg}</figure>");
            }
            None if !empty.is_empty() => {
                let _ = write!(
                    o,
                    "<figure class=\"empty\"><p><strong>{}</strong>: {}</p></figure>",
                    esc(&c.title),
                    esc(empty)
                );
            }
            None => {}
        }
    }
    o.push_str("</div>");
    o
}

/// `p50 / p99` in milliseconds, or a dash.
fn p50_p99(v: Option<LatencyStats>) -> String {
    v.map_or_else(
        || "&ndash;".to_owned(),
        |s| format!("{:.1} / {:.1}", s.p50_ms, s.p99_ms),
    )
}

fn summary_section(shown: &[Shown<'_>]) -> String {
    type Row = (&'static str, fn(&RunDir) -> String);
    let rows: [Row; 28] = [
        ("model", |r| esc(&r.doc.run.model)),
        ("target", |r| esc(&r.doc.run.url)),
        ("workload", |r| esc(&r.doc.run.workload.mode)),
        ("started (UTC)", |r| {
            esc(&batchbench_contract::timefmt::rfc3339(
                r.doc.run.started_unix,
            ))
        }),
        ("duration (s)", |r| {
            format!("{:.2}", r.doc.summary.total_duration_seconds)
        }),
        ("requests ok / failed", |r| {
            format!(
                "{} / {}",
                r.doc.summary.successful_requests, r.doc.summary.failed_requests
            )
        }),
        ("retries / reconnects", |r| {
            let s = &r.doc.summary;
            let closes = if s.server_closes_connections {
                " (the server closes every connection after its response)"
            } else {
                ""
            };
            format!("{} / {}{closes}", s.retries, s.reconnects)
        }),
        ("requests per second", |r| {
            format!("{:.2}", r.doc.summary.requests_per_second)
        }),
        ("output tokens per second", |r| {
            format!("{:.1}", r.doc.summary.completion_tokens_per_second)
        }),
        ("latency p50 / p99 (ms)", |r| p50_p99(r.doc.summary.latency)),
        ("TTFT p50 / p99 (ms)", |r| p50_p99(r.doc.summary.ttft)),
        ("TTFAT p50 / p99 (ms)", |r| {
            // The first answer token, where replies reasoned (else the TTFT).
            match r.doc.summary.ttfrt {
                Some(_) => p50_p99(r.doc.summary.ttfat),
                None => "&ndash;".to_owned(),
            }
        }),
        ("ITL p50 / p99 (ms)", |r| p50_p99(r.doc.summary.itl)),
        ("TPOT p50 / p99 (ms)", |r| p50_p99(r.doc.summary.tpot)),
        ("client minus server p50 / p99 (ms)", |r| {
            p50_p99(
                r.doc
                    .summary
                    .server_timing
                    .as_ref()
                    .and_then(|t| t.client_minus_server),
            )
        }),
        ("prompt / output tokens", |r| {
            format!(
                "{} / {}",
                r.doc.summary.total_prompt_tokens, r.doc.summary.total_completion_tokens
            )
        }),
        ("cached tokens: server / estimate", |r| {
            format!(
                "{} / {}",
                r.doc
                    .summary
                    .server_cached_tokens
                    .map_or_else(|| "&ndash;".to_owned(), |c| c.to_string()),
                r.doc.summary.estimated_cached_input_tokens
            )
        }),
        ("arrivals", |r| {
            r.doc.summary.load.as_ref().map_or_else(
                || "closed loop".to_owned(),
                |l| {
                    format!(
                        "{} at {} req/s (achieved {:.2})",
                        esc(&l.arrival),
                        l.target_rate.map_or_else(|| "stages".to_owned(), short),
                        l.achieved_rate
                    )
                },
            )
        }),
        ("SLO", |r| {
            r.doc.summary.slo.as_ref().map_or_else(
                || "&ndash;".to_owned(),
                |s| {
                    let bounds: Vec<String> = s
                        .bounds
                        .iter()
                        .map(|b| {
                            format!(
                                "<span class=\"{}\">{}</span>",
                                if b.met { "ok" } else { "bad" },
                                esc(&b.bound)
                            )
                        })
                        .collect();
                    format!(
                        "{} {}",
                        if s.passed {
                            "met"
                        } else {
                            "<span class=\"bad\">missed</span>"
                        },
                        bounds.join(", ")
                    )
                },
            )
        }),
        ("goodput (req/s)", |r| {
            r.doc
                .summary
                .slo
                .as_ref()
                .map_or_else(|| "&ndash;".to_owned(), |s| format!("{:.2}", s.goodput))
        }),
        ("structured outputs valid", |r| {
            r.doc.summary.structured.as_ref().map_or_else(
                || "&ndash;".to_owned(),
                |s| {
                    let share = format!(
                        "{} of {} ({:.1}%{})",
                        s.valid,
                        s.checked,
                        100.0 * s.valid_share,
                        s.valid_share_ci
                            .map(|[lo, hi]| format!(", 95% {:.1}-{:.1}%", 100.0 * lo, 100.0 * hi))
                            .unwrap_or_default()
                    );
                    if s.invalid.is_empty() {
                        share
                    } else {
                        let why: Vec<String> =
                            s.invalid.iter().map(|(k, n)| format!("{k} {n}")).collect();
                        format!(
                            "<span class=\"bad\">{share}; invalid: {}</span>",
                            why.join(", ")
                        )
                    }
                },
            )
        }),
        ("failures by kind", |r| {
            let f = &r.doc.summary.failures_by_kind;
            if f.is_empty() {
                "none".to_owned()
            } else {
                esc(&f
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", "))
            }
        }),
        ("dropped arrivals", |r| {
            // Arrivals of the schedule never sent: at the deadline (the
            // client was behind) and after too long a wait for a slot.
            r.doc.summary.load.as_ref().map_or_else(
                || "&ndash;".to_owned(),
                |l| match (l.dropped_arrivals, l.dropped_waiting) {
                    (0, 0) => "none".to_owned(),
                    (d, w) => {
                        let mut parts = Vec::new();
                        if d > 0 {
                            parts.push(format!("{d} at the deadline"));
                        }
                        if w > 0 {
                            parts.push(format!("{w} after waiting for a slot"));
                        }
                        format!("<span class=\"bad\">{}</span>", parts.join(", "))
                    }
                },
            )
        }),
        ("deliveries", |r| {
            let d = &r.doc.summary.deliveries;
            if d.is_empty() {
                return "&ndash;".to_owned();
            }
            d.iter()
                .map(|d| {
                    let dropped = if d.dropped > 0 {
                        format!(", <span class=\"bad\">{} dropped</span>", d.dropped)
                    } else {
                        String::new()
                    };
                    format!(
                        "{} {}: {} delivered{dropped}",
                        esc(&d.items),
                        esc(&d.destination),
                        d.delivered
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        }),
        ("server scrapes (failed)", |r| {
            r.doc.summary.server_metrics.as_ref().map_or_else(
                || "&ndash;".to_owned(),
                |m| format!("{} ({})", m.scrapes, m.failed_scrapes),
            )
        }),
        ("client", |r| {
            let s = &r.doc.summary;
            let busy = s.client.as_ref().and_then(|c| {
                let d = c.scheduling_delay.map_or_else(String::new, |d| {
                    format!(", scheduling delay p99 {:.2} ms", d.p99_ms)
                });
                Some(format!("busy {:.0}%{d}", c.busy_share? * 100.0))
            });
            match (&s.client_bound, busy) {
                (Some(b), _) => format!(
                    "<span class=\"bad\">CLIENT-BOUND ({})</span>: {}",
                    esc(&b.reasons.join(", ")),
                    esc(&b.message)
                ),
                (None, Some(busy)) => esc(&busy),
                (None, None) => "&ndash;".to_owned(),
            }
        }),
        ("prompt synthesis", |r| {
            esc(r.doc.summary.prompt_synthesis.as_deref().unwrap_or("-"))
        }),
        ("verdict", |r| {
            let s = &r.doc.summary;
            if s.interrupted {
                "<span class=\"bad\">interrupted (partial)</span>".to_owned()
            } else if let Some(f) = &s.run_failed {
                format!("<span class=\"bad\">FAILED: {}</span>", esc(f))
            } else {
                "completed".to_owned()
            }
        }),
    ];
    let mut o = String::from("<table class=\"summary\"><thead><tr><th></th>");
    for s in shown {
        let _ = write!(
            o,
            "<th><span class=\"swatch\" style=\"background:{}\"></span>{}</th>",
            PALETTE[s.colour % PALETTE.len()],
            esc(&s.label)
        );
    }
    o.push_str("</tr></thead><tbody>");
    for (name, f) in rows {
        let _ = write!(o, "<tr><th>{}</th>", esc(name));
        for s in shown {
            let _ = write!(o, "<td>{}</td>", f(s.run));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>");
    section(
        "summary",
        "Summary",
        "Each run's figures, as its console summary gave them.",
        &format!("<div class=\"scroll\">{o}</div>"),
    )
}

fn spec_section(shown: &[Shown<'_>]) -> String {
    let mut o = String::new();
    for s in shown {
        let spec = s
            .run
            .doc
            .run
            .spec
            .as_ref()
            .and_then(|spec| serde_json::to_string_pretty(spec).ok())
            .unwrap_or_else(|| "(not recorded)".to_owned());
        let _ = write!(
            o,
            "<details><summary>{} <span class=\"note\">{}</span></summary><pre>{}</pre></details>",
            esc(&s.label),
            esc(&s.run.dir.display().to_string()),
            esc(&spec)
        );
    }
    section(
        "spec",
        "Run spec",
        "The complete spec of each run, its seed resolved: saved as a file, `--config FILE` repeats the run.",
        &o,
    )
}
