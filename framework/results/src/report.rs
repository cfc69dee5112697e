//! `batchbench report`: one self-contained HTML file from results directories.
//! Every chart is inline SVG ([`crate::svg`]); the one inline script only lets
//! legend entries hide their series and records, for tests, that every chart
//! laid out. Several directories overlay: one colour per run.

use crate::svg::{Band, Chart, PALETTE, Rule, Scale, Series, Style, esc, short};
use crate::{Loaded, RequestLine, RunDir, SeriesDir};
use batchbench_contract::record::LatencyStats;
use batchbench_contract::results::series::Estimate;
use batchbench_contract::slo::{SloBound, SloMetric};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One directory given to the report, with the name it is shown under.
#[derive(Debug)]
pub struct Input {
    /// The label (the directory's name, made unique).
    pub label: String,
    /// What was read.
    pub loaded: Loaded,
}

/// The most points of a time series drawn per run (adjacent intervals merged).
const MAX_SERIES_POINTS: usize = 400;
/// The most requests drawn per run in a scatter (evenly strided).
const MAX_SCATTER: usize = 1500;

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
                &endpoint_charts(&shown),
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

fn cdf(buckets: &[[u64; 2]]) -> Vec<(f64, f64)> {
    let total: u64 = buckets.iter().map(|[_, c]| c).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut acc = 0;
    buckets
        .iter()
        .map(|[v, c]| {
            acc += c;
            (*v as f64 / 1000.0, 100.0 * acc as f64 / total as f64)
        })
        .collect()
}

fn cdf_charts(shown: &[Shown<'_>]) -> String {
    let families = [
        ("latency", "End-to-end latency", "no successful request"),
        (
            "ttft",
            "Time to first token",
            "not measured: the runs did not stream (--stream)",
        ),
        (
            "itl",
            "Inter-token latency",
            "not measured: the runs did not stream, or replies were one token",
        ),
        (
            "tpot",
            "Time per output token",
            "not measured: the runs did not stream, or replies were one token",
        ),
    ];
    let charts: Vec<(Chart, &str)> = families
        .iter()
        .map(|(family, title, empty)| {
            let mut c = Chart::new(
                &format!("cdf-{family}"),
                title,
                "milliseconds (log)",
                "% of requests",
            );
            c.x_scale = Scale::Log;
            for s in shown {
                if let Some(b) = s.run.histograms.families.get(*family) {
                    c.series.push(Series::line(&s.label, s.colour, cdf(b)));
                }
            }
            (c, *empty)
        })
        .collect();
    grid(&charts)
}

/// Merges adjacent intervals so that at most [`MAX_SERIES_POINTS`] remain:
/// rates and means average, maxima take the largest.
fn thin(t: &[f64], v: &[Option<f64>], max: bool) -> Vec<(f64, f64)> {
    let k = t.len().div_ceil(MAX_SERIES_POINTS).max(1);
    t.chunks(k)
        .zip(v.chunks(k))
        .map(|(ts, vs)| {
            let present: Vec<f64> = vs.iter().flatten().copied().collect();
            let y = if present.is_empty() {
                f64::NAN
            } else if max {
                present.iter().copied().fold(f64::MIN, f64::max)
            } else {
                present.iter().sum::<f64>() / present.len() as f64
            };
            (ts[0], y)
        })
        .collect()
}

fn some(v: &[f64]) -> Vec<Option<f64>> {
    v.iter().map(|x| Some(*x)).collect()
}

fn time_charts(shown: &[Shown<'_>]) -> String {
    let mut rate = Chart::new(
        "ts-rate",
        "Send rate and throughput",
        "seconds from start",
        "requests per second",
    );
    let mut conc = Chart::new(
        "ts-concurrency",
        "Requests in flight",
        "seconds from start",
        "requests (mean per interval)",
    );
    let mut toks = Chart::new(
        "ts-tokens",
        "Output tokens per second",
        "seconds from start",
        "tokens per second",
    );
    let mut ttft = Chart::new(
        "ts-ttft",
        "Time to first token over time",
        "seconds from start",
        "milliseconds",
    );
    let mut errs = Chart::new(
        "ts-errors",
        "Failed requests",
        "seconds from start",
        "failures per second",
    );
    let any_errors = shown
        .iter()
        .any(|s| s.run.timeseries.error_rate.iter().any(|e| *e > 0.0));
    for s in shown {
        let ts = &s.run.timeseries;
        let l = &s.label;
        rate.series.push(Series::line(
            format!("{l} sent"),
            s.colour,
            thin(&ts.t, &some(&ts.send_rate), false),
        ));
        rate.series.push(
            Series::line(
                format!("{l} completed"),
                s.colour,
                thin(&ts.t, &some(&ts.throughput), false),
            )
            .dashed(),
        );
        conc.series.push(Series::line(
            l.clone(),
            s.colour,
            thin(&ts.t, &some(&ts.concurrency), false),
        ));
        toks.series.push(Series::line(
            l.clone(),
            s.colour,
            thin(&ts.t, &some(&ts.output_tokens_per_second), false),
        ));
        ttft.series.push(Series::line(
            format!("{l} mean"),
            s.colour,
            thin(&ts.t, &ts.ttft_mean_ms, false),
        ));
        ttft.series.push(
            Series::line(
                format!("{l} max"),
                s.colour,
                thin(&ts.t, &ts.ttft_max_ms, true),
            )
            .dashed(),
        );
        if any_errors {
            errs.series.push(Series::line(
                l.clone(),
                s.colour,
                thin(&ts.t, &some(&ts.error_rate), false),
            ));
        }
    }
    // A run whose warmup was found: its transient shaded on every chart.
    let bands: Vec<Band> = shown
        .iter()
        .filter_map(|s| {
            let st = s.run.doc.summary.load.as_ref()?.steady.as_ref()?;
            (st.from_secs > 0.0).then(|| Band {
                from: 0.0,
                to: st.from_secs,
                label: if shown.len() > 1 {
                    format!("{} transient", s.label)
                } else {
                    "transient (left out)".to_owned()
                },
            })
        })
        .collect();
    for c in [&mut rate, &mut conc, &mut toks, &mut ttft, &mut errs] {
        c.bands.clone_from(&bands);
    }
    let mut charts = vec![
        (rate, "no request was sent"),
        (conc, "no request was sent"),
        (toks, "no output tokens"),
        (ttft, "not measured: the runs did not stream (--stream)"),
    ];
    charts.push((
        errs,
        if any_errors {
            ""
        } else {
            "none: no request failed"
        },
    ));
    grid(&charts)
}

/// Every `step`-th measured success, at most [`MAX_SCATTER`].
fn sample(reqs: &[RequestLine]) -> Vec<&RequestLine> {
    let ok: Vec<&RequestLine> = reqs.iter().filter(|r| r.ok && !r.warmup).collect();
    let step = ok.len().div_ceil(MAX_SCATTER).max(1);
    ok.into_iter().step_by(step).collect()
}

fn prompt_charts(shown: &[Shown<'_>]) -> String {
    let mut e2e = Chart::new(
        "prompt-e2e",
        "End-to-end latency against prompt length",
        "prompt tokens (server-counted)",
        "milliseconds",
    );
    let mut ttft = Chart::new(
        "prompt-ttft",
        "Time to first token against prompt length",
        "prompt tokens (server-counted)",
        "milliseconds",
    );
    for s in shown {
        let picked = sample(&s.run.requests);
        let tokens = |r: &RequestLine| {
            r.prompt_tokens
                .or(r.planned_prompt_tokens)
                .map(|t| t as f64)
        };
        e2e.series.push(
            Series::line(
                s.label.clone(),
                s.colour,
                picked
                    .iter()
                    .filter_map(|r| Some((tokens(r)?, r.latency_ms)))
                    .collect(),
            )
            .styled(Style::Points),
        );
        ttft.series.push(
            Series::line(
                s.label.clone(),
                s.colour,
                picked
                    .iter()
                    .filter_map(|r| Some((tokens(r)?, r.ttft_ms?)))
                    .collect(),
            )
            .styled(Style::Points),
        );
    }
    grid(&[
        (e2e, "no successful request with a prompt token count"),
        (ttft, "not measured: the runs did not stream (--stream)"),
    ])
}

/// Whether a run cached anything, by the server's word or by the estimate.
/// A fleet's endpoints: a table of each one's figures, and its completions
/// and mean latency over time (from the request records, in one-second
/// intervals), a line per endpoint (coloured by endpoint).
fn endpoint_charts(shown: &[Shown<'_>]) -> String {
    let mut out = String::new();
    let mut done = Chart::new(
        "endpoint-throughput",
        "Completions per second by endpoint",
        "seconds from start",
        "successes per second",
    );
    let mut lat = Chart::new(
        "endpoint-latency",
        "Mean latency by endpoint",
        "seconds from start",
        "milliseconds",
    );
    for s in shown {
        let es = &s.run.doc.summary.endpoints;
        if es.is_empty() {
            continue;
        }
        let routing = s.run.doc.summary.routing.as_deref().unwrap_or("a router");
        let _ = write!(
            out,
            "<p class=\"sub\">{}: {} endpoints, routed by {}</p><table><tr><th>endpoint</th><th>requests</th><th>ok</th><th>failed</th><th>req/s</th><th>e2e p50 / p99 (ms)</th><th>TTFT p50 / p99 (ms)</th><th>cached prompt tokens: server / own perfect cache</th></tr>",
            esc(&s.label),
            es.len(),
            esc(routing)
        );
        for (i, e) in es.iter().enumerate() {
            let _ = write!(
                out,
                "<tr><td>[{i}] {}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{} / {}</td></tr>",
                esc(&e.url),
                e.requests,
                e.successful_requests,
                e.failed_requests,
                e.requests_per_second,
                p50_p99(e.latency),
                p50_p99(e.ttft),
                e.server_cached_tokens
                    .map_or_else(|| "not reported".to_owned(), |c| c.to_string()),
                e.estimated_cached_tokens
            );
        }
        out.push_str("</table>");
        // endpoint -> second -> (successes, latency sum)
        let mut bins: Vec<BTreeMap<u64, (f64, f64)>> = vec![BTreeMap::new(); es.len()];
        for r in s.run.requests.iter().filter(|r| r.ok && !r.warmup) {
            let Some(b) = r.endpoint.and_then(|e| bins.get_mut(e as usize)) else {
                continue;
            };
            let e = b.entry((r.end_ms.max(0.0) / 1000.0) as u64).or_default();
            e.0 += 1.0;
            e.1 += r.latency_ms;
        }
        let tag = |i: usize| {
            if shown.len() > 1 {
                format!("{} [{i}]", s.label)
            } else {
                format!("[{i}]")
            }
        };
        for (i, b) in bins.iter().enumerate() {
            done.series.push(Series::line(
                tag(i),
                i,
                b.iter().map(|(t, e)| (*t as f64 + 0.5, e.0)).collect(),
            ));
            lat.series.push(Series::line(
                tag(i),
                i,
                b.iter()
                    .map(|(t, e)| (*t as f64 + 0.5, e.1 / e.0))
                    .collect(),
            ));
        }
    }
    out.push_str(&grid(&[
        (done, "no request succeeded"),
        (lat, "no request succeeded"),
    ]));
    out
}

fn has_cache_data(r: &RunDir) -> bool {
    r.requests.iter().any(|q| {
        q.estimated_cached_tokens > 0
            || q.global_estimated_cached_tokens > 0
            || q.server_cached_tokens.is_some_and(|c| c > 0)
    })
}

fn cache_charts(shown: &[Shown<'_>]) -> String {
    let mut c = Chart::new(
        "cache-per-turn",
        "Cached prompt tokens per turn",
        "turn (request index)",
        "tokens (mean per request)",
    );
    for s in shown.iter().filter(|s| has_cache_data(s.run)) {
        // turn -> (server sum, server n, estimate sum, n, global estimate sum)
        let mut turns: BTreeMap<u64, (f64, u64, f64, u64, f64)> = BTreeMap::new();
        for r in s.run.requests.iter().filter(|r| r.ok && !r.warmup) {
            let e = turns.entry(r.request_index).or_default();
            if let Some(v) = r.server_cached_tokens {
                e.0 += v as f64;
                e.1 += 1;
            }
            e.2 += r.estimated_cached_tokens as f64;
            e.3 += 1;
            e.4 += r.global_estimated_cached_tokens as f64;
        }
        let server: Vec<(f64, f64)> = turns
            .iter()
            .filter(|(_, e)| e.1 > 0)
            .map(|(t, e)| (*t as f64, e.0 / e.1 as f64))
            .collect();
        let estimate = turns
            .iter()
            .map(|(t, e)| (*t as f64, e.2 / e.3.max(1) as f64))
            .collect();
        let global: Vec<(f64, f64)> = turns
            .iter()
            .map(|(t, e)| (*t as f64, e.4 / e.3.max(1) as f64))
            .collect();
        c.series.push(
            Series::line(format!("{} server", s.label), s.colour, server)
                .styled(Style::LineMarkers),
        );
        c.series.push(
            Series::line(format!("{} estimate", s.label), s.colour, estimate)
                .styled(Style::LineMarkers)
                .dashed(),
        );
        if global.iter().any(|p| p.1 > 0.0) {
            c.series.push(
                Series::line(format!("{} shared estimate", s.label), s.colour, global)
                    .styled(Style::Points),
            );
        }
    }
    if c.has_data() {
        grid(&[(c, "")])
    } else {
        String::new()
    }
}

/// One chart per group of common metrics, a line per run and URL (the second
/// metric of a group dashed).
fn server_charts(shown: &[Shown<'_>]) -> String {
    type Group = (
        &'static str,
        &'static str,
        &'static str,
        &'static [&'static str],
        f64,
    );
    let mut groups: Vec<Group> = vec![
        (
            "server-requests",
            "Requests on the server: running, waiting (dashed)",
            "requests",
            &["requests_running", "requests_waiting"],
            1.0,
        ),
        (
            "server-kv",
            "KV cache usage",
            "% of capacity",
            &["kv_cache_usage"],
            100.0,
        ),
        (
            "server-hit-rate",
            "Prefix cache hit rate",
            "% of prompt tokens",
            &["prefix_cache_hit_rate"],
            100.0,
        ),
        (
            "server-tokens",
            "Server token throughput: generation, prompt (dashed)",
            "tokens per second",
            &["generation_tokens_per_second", "prompt_tokens_per_second"],
            1.0,
        ),
        (
            "server-preemptions",
            "Preemptions",
            "per second",
            &["preemptions_per_second"],
            1.0,
        ),
    ];
    // A GPU exporter's figures (DCGM), beside the server's throughput.
    let has = |m: &str| {
        shown
            .iter()
            .any(|s| s.run.server.iter().any(|l| l.common.contains_key(m)))
    };
    if has("gpu_power_watts") {
        groups.push((
            "server-gpu-power",
            "GPU power (all GPUs scraped)",
            "watts",
            &["gpu_power_watts"],
            1.0,
        ));
    }
    if has("gpu_utilization") {
        groups.push((
            "server-gpu-util",
            "GPU utilization (mean over the GPUs)",
            "%",
            &["gpu_utilization"],
            100.0,
        ));
    }
    let charts: Vec<(Chart, &str)> = groups
        .iter()
        .map(|(id, title, unit, metrics, scale)| {
            let mut c = Chart::new(id, title, "seconds from start", unit);
            for s in shown {
                let mut urls: Vec<&str> = s.run.server.iter().map(|l| l.url.as_str()).collect();
                urls.sort_unstable();
                urls.dedup();
                for url in &urls {
                    for (k, m) in metrics.iter().enumerate() {
                        let points: Vec<(f64, f64)> = s
                            .run
                            .server
                            .iter()
                            .filter(|l| l.url == *url)
                            .map(|l| (l.t, l.common.get(*m).map_or(f64::NAN, |v| v * scale)))
                            .collect();
                        let name = match (urls.len(), k) {
                            (1, 0) => s.label.clone(),
                            (1, _) => format!("{} {}", s.label, m.replace('_', " ")),
                            _ => format!("{} {url} {}", s.label, m.replace('_', " ")),
                        };
                        let line = Series::line(name, s.colour, points);
                        c.series.push(if k > 0 { line.dashed() } else { line });
                    }
                }
            }
            (c, "")
        })
        .collect();
    grid(&charts)
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
    let rows: [Row; 23] = [
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
        ("server scrapes (failed)", |r| {
            r.doc.summary.server_metrics.as_ref().map_or_else(
                || "&ndash;".to_owned(),
                |m| format!("{} ({})", m.scrapes, m.failed_scrapes),
            )
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

/// A bound's threshold as a rule on a latency-against-load chart.
fn rule(bound: &str, metric: SloMetric) -> Option<Rule> {
    let b: SloBound = bound.parse().ok()?;
    (b.metric == metric).then(|| Rule {
        y: b.max.as_secs_f64() * 1000.0,
        label: format!("SLO {bound}"),
    })
}

fn series_section(label: &str, s: &SeriesDir) -> String {
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

const STYLE: &str = r#"
:root{--fg:#1d2125;--muted:#5f6b76;--line:#d8dde2;--bg:#fff;--ok:#1a7f37;--bad:#c62828}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:1420px;padding:18px 22px 60px}
h1{font-size:22px;margin:0}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub,.note{color:var(--muted);margin:2px 0 10px}
nav{position:sticky;top:0;background:var(--bg);padding:8px 0;border-bottom:1px solid var(--line);z-index:1}
nav a{margin-right:14px;color:#0b5cad;text-decoration:none}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:14px}
figure{margin:0;border:1px solid var(--line);border-radius:6px;padding:6px;background:#fff}
figure.empty{display:flex;align-items:center;padding:14px;color:var(--muted)}
svg.chart{width:100%;height:auto;display:block;font-size:11px}
svg .title{font-size:13px;font-weight:600;fill:var(--fg)}
svg .grid{stroke:#eef0f2;stroke-width:1}
svg .frame{fill:none;stroke:#aab3bb}
svg .tick{fill:var(--muted)}svg .label{fill:var(--fg)}
svg .band rect{fill:var(--fg);opacity:.07}svg .band text{fill:var(--muted);font-size:11px}svg .rule line{stroke:var(--bad);stroke-width:1.5;stroke-dasharray:3 3}svg .rule text{fill:var(--bad)}
svg .legend-item{cursor:pointer}svg .legend-item text{fill:var(--fg)}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:left;vertical-align:top}
tbody th{font-weight:500;color:var(--muted);white-space:nowrap}
tr.capacity td{background:#eaf5ec;font-weight:600}
.scroll{overflow-x:auto}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}
.ok{color:var(--ok)}.bad{color:var(--bad);font-weight:600}.undecided{color:#a15c00;font-weight:600}
.verdict{font-weight:600}
details{margin:6px 0}pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px}
"#;

/// Legend entries hide and show their series; after layout, the number of
/// charts and of charts that drew (laid out with a non-empty data path) is
/// recorded on `<body>` (`data-charts`, `data-charts-drawn`), and any script
/// error in `data-errors`.
const SCRIPT: &str = r#"
(function(){
  var errors=0;
  window.addEventListener('error',function(){errors++;document.body.setAttribute('data-errors',String(errors));});
  document.querySelectorAll('svg.chart .legend-item').forEach(function(item){
    item.addEventListener('click',function(){
      var svg=item.closest('svg');
      var s=svg.querySelector('.data .s'+item.getAttribute('data-series'));
      if(!s)return;
      var hide=s.style.display!=='none';
      s.style.display=hide?'none':'';
      item.style.opacity=hide?'0.35':'1';
    });
  });
  var charts=document.querySelectorAll('svg.chart'),drawn=0;
  charts.forEach(function(c){
    var r=c.getBoundingClientRect();
    var paths=c.querySelectorAll('.data path');
    var inked=Array.prototype.some.call(paths,function(p){return (p.getAttribute('d')||'').length>0;});
    if(r.width>0&&r.height>0&&inked)drawn++;
  });
  document.body.setAttribute('data-charts',String(charts.length));
  document.body.setAttribute('data-charts-drawn',String(drawn));
  document.body.setAttribute('data-errors',String(errors));
})();
"#;

pub(crate) fn page(body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>batchbench report</title><style>{STYLE}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_reaches_one_hundred_percent_in_order() {
        let c = cdf(&[[1000, 1], [2000, 2], [5000, 1]]);
        assert_eq!(c, vec![(1.0, 25.0), (2.0, 75.0), (5.0, 100.0)]);
        assert!(cdf(&[]).is_empty());
    }

    #[test]
    fn thinning_keeps_the_length_bounded_and_the_mean() {
        let t: Vec<f64> = (0..1000).map(f64::from).collect();
        let v: Vec<Option<f64>> = (0..1000).map(|_| Some(2.0)).collect();
        let out = thin(&t, &v, false);
        assert!(out.len() <= MAX_SERIES_POINTS);
        assert!(out.iter().all(|(_, y)| (*y - 2.0).abs() < 1e-12));
        let gaps = thin(&[0.0, 1.0], &[None, Some(1.0)], false);
        assert!(gaps[0].1.is_nan());
    }

    #[test]
    fn slo_bounds_become_rules_of_their_metric() {
        let r = rule("ttft_p99<=500ms", SloMetric::Ttft).map(|r| r.y);
        assert_eq!(r, Some(500.0));
        assert!(rule("ttft_p99<=500ms", SloMetric::E2e).is_none());
        assert_eq!(
            rule("e2e_p50<=2s", SloMetric::E2e).map(|r| r.y),
            Some(2000.0)
        );
    }
}
