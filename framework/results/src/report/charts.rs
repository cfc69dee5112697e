//! The charts of the runs shown: latency distributions, figures over time,
//! prompts, a fleet's endpoints, prefix caching and the server's metrics.

//! `batchbench report`: one self-contained HTML file from results directories.
//! Every chart is inline SVG ([`crate::svg`]); the one inline script only lets
//! legend entries hide their series and records, for tests, that every chart
//! laid out. Several directories overlay: one colour per run.

use super::{Shown, grid, p50_p99};
use crate::svg::{Band, Chart, Rule, Scale, Series, Style, esc};
use crate::{RequestLine, RunDir};
use batchbench_contract::slo::{SloBound, SloMetric};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The most points of a time series drawn per run (adjacent intervals merged).
const MAX_SERIES_POINTS: usize = 400;
/// The most requests drawn per run in a scatter (evenly strided).
const MAX_SCATTER: usize = 1500;

pub(super) fn cdf(buckets: &[[u64; 2]]) -> Vec<(f64, f64)> {
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

pub(super) fn cdf_charts(shown: &[Shown<'_>]) -> String {
    let mut families = vec![
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
    // Beside the TTFT, where replies reasoned: the wait for the answer.
    let reasoned = shown.iter().any(|s| {
        s.run
            .histograms
            .families
            .get("ttfrt")
            .is_some_and(|b| !b.is_empty())
    });
    if reasoned {
        families.insert(
            2,
            (
                "ttfat",
                "Time to first answer token (after the reasoning)",
                "not measured: no reply answered after reasoning",
            ),
        );
    }
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
pub(super) fn thin(t: &[f64], v: &[Option<f64>], max: bool) -> Vec<(f64, f64)> {
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

pub(super) fn some(v: &[f64]) -> Vec<Option<f64>> {
    v.iter().map(|x| Some(*x)).collect()
}

pub(super) fn time_charts(shown: &[Shown<'_>]) -> String {
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
pub(super) fn sample(reqs: &[RequestLine]) -> Vec<&RequestLine> {
    let ok: Vec<&RequestLine> = reqs.iter().filter(|r| r.ok && !r.warmup).collect();
    let step = ok.len().div_ceil(MAX_SCATTER).max(1);
    ok.into_iter().step_by(step).collect()
}

pub(super) fn prompt_charts(shown: &[Shown<'_>]) -> String {
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
/// How a run's requests split into groups of their own figures: a fleet's
/// endpoints, or the models of a mix.
#[derive(Clone, Copy)]
pub(super) enum Groups {
    /// The endpoints of a fleet, by index in the run's hosts.
    Endpoints,
    /// The models of a mix, in the mix's order.
    Models,
}

impl Groups {
    /// Each group's name and figures in a run's summary.
    fn of(
        self,
        s: &batchbench_contract::record::Summary,
    ) -> Vec<(String, &batchbench_contract::record::EndpointSummary)> {
        match self {
            Self::Endpoints => s
                .endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| (format!("[{i}] {}", e.url), e))
                .collect(),
            Self::Models => s
                .models
                .iter()
                .map(|m| (m.model.clone(), &m.figures))
                .collect(),
        }
    }

    /// The group of a request, by index among the run's groups.
    fn index(self, r: &RequestLine, names: &[String]) -> Option<usize> {
        match self {
            Self::Endpoints => r.endpoint.map(|e| e as usize),
            Self::Models => {
                let m = r.model.as_deref()?;
                names.iter().position(|n| n == m)
            }
        }
    }

    /// A group's tag in the charts' legends.
    fn tag(self, i: usize, name: &str) -> String {
        match self {
            Self::Endpoints => format!("[{i}]"),
            Self::Models => name.to_owned(),
        }
    }
}

/// A run's groups (a fleet's endpoints, or a mix's models): a table of each
/// one's figures, and its completions and mean latency over time (from the
/// request records, in one-second intervals), a line per group (coloured by
/// group).
pub(super) fn group_charts(shown: &[Shown<'_>], groups: Groups) -> String {
    let mut out = String::new();
    let (id, word) = match groups {
        Groups::Endpoints => ("endpoint", "endpoint"),
        Groups::Models => ("model", "model"),
    };
    let mut done = Chart::new(
        &format!("{id}-throughput"),
        &format!("Completions per second by {word}"),
        "seconds from start",
        "successes per second",
    );
    let mut lat = Chart::new(
        &format!("{id}-latency"),
        &format!("Mean latency by {word}"),
        "seconds from start",
        "milliseconds",
    );
    for s in shown {
        let summary = &s.run.doc.summary;
        let es = groups.of(summary);
        if es.is_empty() {
            continue;
        }
        let header = match groups {
            Groups::Endpoints => format!(
                "{}: {} endpoints, routed by {}",
                s.label,
                es.len(),
                summary.routing.as_deref().unwrap_or("a router")
            ),
            Groups::Models => format!("{}: {} models", s.label, es.len()),
        };
        let _ = write!(
            out,
            "<p class=\"sub\">{}</p><table><tr><th>{word}</th><th>requests</th><th>ok</th><th>failed</th><th>req/s</th><th>e2e p50 / p99 (ms)</th><th>TTFT p50 / p99 (ms)</th><th>cached prompt tokens: server / own perfect cache</th></tr>",
            esc(&header)
        );
        for (name, e) in &es {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{} / {}</td></tr>",
                esc(name),
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
        let names: Vec<String> = match groups {
            Groups::Endpoints => Vec::new(),
            Groups::Models => summary.models.iter().map(|m| m.model.clone()).collect(),
        };
        // group -> second -> (successes, latency sum)
        let mut bins: Vec<BTreeMap<u64, (f64, f64)>> = vec![BTreeMap::new(); es.len()];
        for r in s.run.requests.iter().filter(|r| r.ok && !r.warmup) {
            let Some(b) = groups.index(r, &names).and_then(|g| bins.get_mut(g)) else {
                continue;
            };
            let e = b.entry((r.end_ms.max(0.0) / 1000.0) as u64).or_default();
            e.0 += 1.0;
            e.1 += r.latency_ms;
        }
        let tag = |i: usize| {
            let own = groups.tag(i, es.get(i).map_or("", |e| e.0.as_str()));
            if shown.len() > 1 {
                format!("{} {own}", s.label)
            } else {
                own
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

pub(super) fn has_cache_data(r: &RunDir) -> bool {
    r.requests.iter().any(|q| {
        q.estimated_cached_tokens > 0
            || q.global_estimated_cached_tokens > 0
            || q.server_cached_tokens.is_some_and(|c| c > 0)
    })
}

pub(super) fn cache_charts(shown: &[Shown<'_>]) -> String {
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
pub(super) fn server_charts(shown: &[Shown<'_>]) -> String {
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
                for (j, url) in urls.iter().enumerate() {
                    // Several URLs of a run (a fleet's endpoints, an exporter
                    // beside the server): a colour each, an endpoint's the
                    // one the endpoint charts give it.
                    let colour = if urls.len() > 1 {
                        url_colour(url, &s.run.doc.summary.endpoints, j)
                    } else {
                        s.colour
                    };
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
                        let line = Series::line(name, colour, points);
                        c.series.push(if k > 0 { line.dashed() } else { line });
                    }
                }
            }
            (c, "")
        })
        .collect();
    grid(&charts)
}

/// The colour of the `j`th scraped URL of a run: the index of the endpoint
/// on the same server (scheme, host and port), as the endpoint charts colour
/// it, else one past every endpoint's.
pub(super) fn url_colour(
    url: &str,
    endpoints: &[batchbench_contract::record::EndpointSummary],
    j: usize,
) -> usize {
    fn origin(u: &str) -> &str {
        let rest = u.find("://").map_or(0, |i| i + 3);
        u[rest..].find('/').map_or(u, |i| &u[..rest + i])
    }
    endpoints
        .iter()
        .position(|e| origin(&e.url) == origin(url))
        .unwrap_or(endpoints.len() + j)
}

/// A bound's threshold as a rule on a latency-against-load chart.
pub(super) fn rule(bound: &str, metric: SloMetric) -> Option<Rule> {
    let b: SloBound = bound.parse().ok()?;
    (b.metric == metric).then(|| Rule {
        y: b.max.as_secs_f64() * 1000.0,
        label: format!("SLO {bound}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleets_scraped_urls_take_their_endpoints_colours() {
        let e = |url: &str| batchbench_contract::record::EndpointSummary {
            url: url.to_owned(),
            ..Default::default()
        };
        let es = [
            e("http://127.0.0.1:8001/v1/chat/completions"),
            e("http://127.0.0.1:8002/v1/chat/completions"),
        ];
        assert_eq!(url_colour("http://127.0.0.1:8002/metrics", &es, 0), 1);
        assert_eq!(url_colour("http://127.0.0.1:8001/metrics", &es, 1), 0);
        // An exporter beside them: a colour of its own.
        assert_eq!(url_colour("http://127.0.0.1:9400/metrics", &es, 2), 4);
        assert_eq!(url_colour("http://127.0.0.1:9400/metrics", &[], 1), 1);
    }

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
