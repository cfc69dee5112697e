//! The llm-d Benchmark Report (schema v0.2.1) of one run's results directory:
//! `batchbench export --format llm-d DIR -o report.yaml`.
//!
//! What maps, and from where:
//!
//! | report | from |
//! |---|---|
//! | `run` | a digest of `run.json` as the uid, the start, end and duration, the model and target in the description |
//! | `scenario.load` | `batchbench` and its version as the tool; prompt and output lengths as measured (`fixed` when every request had one length, else `other` with mean, spread and range); the rate, the concurrency cap or closed-loop users, agent turns; the complete run spec as the native config |
//! | `results.request_performance.aggregate` | requests and failures; input and output lengths over the successes; TTFT, ITL, TPOT and request latency from the histograms (every sample, in seconds); request and token rates |
//! | `results.request_performance.time_series` | the request and output-token rates and the mean TTFT per interval of `timeseries.json` |
//! | `results.observability` | each common metric scraped with `--server-metrics` (the server's, a GPU exporter's), per URL with its statistics and series, and the GPUs' energy |
//! | `results.observability.components` | the schema's resource metrics (KV cache usage, prefix-cache hit rate, GPU utilization, memory and power, running and waiting requests), per URL scraped and per GPU, statistics and series |
//!
//! Left out because a client cannot know it: the serving stack
//! (`scenario.stack`: engine, accelerators, parallelism). Left out because
//! the schema has no room: the time to the first answer token of reasoning
//! replies (the latency block takes only its own fields); the run's
//! description gives its p50 and p99 instead.

use crate::RunDir;
use batchbench_contract::results::bucket_quantile;
use batchbench_contract::timefmt::rfc3339;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The schema version written.
pub const SCHEMA_VERSION: &str = "0.2.1";

/// The quantiles of a Statistics block, by field name.
const QUANTILES: [(&str, f64); 11] = [
    ("p0p1", 0.001),
    ("p1", 0.01),
    ("p5", 0.05),
    ("p10", 0.10),
    ("p25", 0.25),
    ("p50", 0.50),
    ("p75", 0.75),
    ("p90", 0.90),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99p9", 0.999),
];

/// A Statistics block of `values` (unsorted), or `None` when empty.
fn stats_of(units: &str, mut values: Vec<f64>) -> Option<Value> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
    let mut m = Map::new();
    m.insert("units".into(), json!(units));
    m.insert("mean".into(), json!(mean));
    m.insert("stddev".into(), json!(var.sqrt()));
    m.insert("min".into(), json!(values[0]));
    for (name, q) in QUANTILES {
        // The nearest rank: the smallest value at or above the share q.
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        m.insert(name.into(), json!(values[rank - 1]));
    }
    m.insert("max".into(), json!(values[n - 1]));
    Some(Value::Object(m))
}

/// A Statistics block of a histogram family (microsecond buckets), in
/// units of `per` microseconds.
fn stats_of_buckets(units: &str, buckets: &[[u64; 2]], per: f64) -> Option<Value> {
    let total: u64 = buckets.iter().map(|[_, c]| c).sum();
    if total == 0 {
        return None;
    }
    let value = |v: u64| v as f64 / per;
    let mean = buckets
        .iter()
        .map(|[v, c]| value(*v) * *c as f64)
        .sum::<f64>()
        / total as f64;
    let var = buckets
        .iter()
        .map(|[v, c]| (value(*v) - mean).powi(2) * *c as f64)
        .sum::<f64>()
        / total as f64;
    let at = |q: f64| value(bucket_quantile(buckets, q).unwrap_or(0));
    let mut m = Map::new();
    m.insert("units".into(), json!(units));
    m.insert("mean".into(), json!(mean));
    m.insert("stddev".into(), json!(var.sqrt()));
    m.insert("min".into(), json!(value(buckets[0][0])));
    for (name, q) in QUANTILES {
        m.insert(name.into(), json!(at(q)));
    }
    m.insert("max".into(), json!(value(buckets[buckets.len() - 1][0])));
    Some(Value::Object(m))
}

/// A mean-only Statistics block.
fn mean(units: &str, v: f64) -> Value {
    json!({"units": units, "mean": v})
}

/// The configured shape of a length, as measured: `fixed` when every value is
/// one, else `other` with its mean, spread and range.
fn seq_len(values: &[f64]) -> Option<Value> {
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
    if values.is_empty() {
        return None;
    }
    if lo == hi {
        return Some(json!({"distribution": "fixed", "value": lo as u64}));
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    Some(json!({
        "distribution": "other",
        "value": mean,
        "std_dev": sd,
        "min": lo as u64,
        "max": (hi as u64).max(1),
    }))
}

/// `PT12.5S`.
/// What the description adds for a run whose replies reasoned: the schema's
/// latency block has no field for the time to the first answer token (and
/// takes no other), so its TTFT is the first token of either kind, and the
/// wait for the answer is said here, in seconds as the block's figures are.
fn reasoning_note(s: &batchbench_contract::record::Summary) -> String {
    match (&s.ttfrt, &s.ttfat) {
        (Some(_), Some(a)) => format!(
            "; its replies reasoned: time_to_first_token is the first token of either kind, and the first answer token (TTFAT, no field in schema {SCHEMA_VERSION}) came at p50 {:.4} s, p99 {:.4} s",
            a.p50_ms / 1000.0,
            a.p99_ms / 1000.0
        ),
        _ => String::new(),
    }
}

fn iso_duration(secs: f64) -> String {
    format!("PT{}S", (secs.max(0.0) * 1e6).round() / 1e6)
}

fn insert_some(m: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(key.to_owned(), v);
    }
}

/// The top-level keys in the order the schema lists them.
pub const KEY_ORDER: [&str; 4] = ["version", "run", "scenario", "results"];

/// The Benchmark Report of one run, as a JSON value (written as YAML by
/// [`crate::yaml`], its top level in [`KEY_ORDER`]).
pub fn report(r: &RunDir, tool_version: &str) -> Value {
    let run = &r.doc.run;
    let s = &r.doc.summary;
    let start = run.started_unix;
    let end = start + s.total_duration_seconds;
    let run_bytes = serde_json::to_vec(&r.doc).unwrap_or_default();
    let uid = hex(&Sha256::digest(&run_bytes)[..16]);
    let spec = run
        .spec
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let cfg_id = hex(&Sha256::digest(spec.to_string().as_bytes())[..16]);

    let measured: Vec<&crate::RequestLine> = r.requests.iter().filter(|q| !q.warmup).collect();
    let ok: Vec<&&crate::RequestLine> = measured.iter().filter(|q| q.ok).collect();
    let input: Vec<f64> = ok
        .iter()
        .filter_map(|q| {
            q.prompt_tokens
                .or(q.planned_prompt_tokens)
                .map(|t| t as f64)
        })
        .collect();
    let output: Vec<f64> = ok
        .iter()
        .filter_map(|q| q.completion_tokens.map(|t| t as f64))
        .collect();

    let mut standardized = Map::new();
    standardized.insert("tool".into(), json!("batchbench"));
    standardized.insert("tool_version".into(), json!(tool_version));
    let source = match run.workload.mode.as_str() {
        m if m.contains("replay") || m.contains("clickhouse") => "sampled",
        "finite_batch" | "synthetic_agents" | "synthetic" | "lognormal" => "random",
        _ => "unknown",
    };
    standardized.insert("source".into(), json!(source));
    standardized.insert(
        "input_seq_len".into(),
        seq_len(&input).unwrap_or_else(|| json!({"distribution": "other", "value": 0})),
    );
    insert_some(&mut standardized, "output_seq_len", seq_len(&output));
    if let Some(rate) = s
        .load
        .as_ref()
        .and_then(|l| l.target_rate)
        .filter(|r| *r > 0.0)
    {
        standardized.insert("rate_qps".into(), json!(rate));
    }
    let concurrency = run
        .spec
        .as_ref()
        .and_then(|sp| sp.load.max_concurrency)
        .or_else(|| (run.max_active > 0).then_some(run.max_active as u64));
    insert_some(
        &mut standardized,
        "concurrency",
        concurrency.map(|c| json!(c)),
    );
    let turns = r
        .requests
        .iter()
        .map(|q| q.request_index + 1)
        .max()
        .unwrap_or(1);
    // A user's requests of `finite_batch` are independent, not turns.
    if turns > 1 && run.workload.mode != "finite_batch" {
        standardized.insert(
            "multi_turn".into(),
            json!({"enabled": true, "max_turns": {"distribution": "other", "value": turns}}),
        );
    }

    let mut latency = Map::new();
    for (key, family, units) in [
        ("time_to_first_token", "ttft", "s"),
        ("inter_token_latency", "itl", "s/token"),
        ("time_per_output_token", "tpot", "s/token"),
        ("request_latency", "latency", "s"),
    ] {
        if let Some(b) = r.histograms.families.get(family) {
            insert_some(&mut latency, key, stats_of_buckets(units, b, 1e6));
        }
    }

    let mut requests = Map::new();
    requests.insert("total".into(), json!(s.total_requests));
    requests.insert("failures".into(), json!(s.failed_requests));
    insert_some(&mut requests, "input_length", stats_of("count", input));
    insert_some(&mut requests, "output_length", stats_of("count", output));

    let throughput = json!({
        "request_rate": mean("queries/s", s.requests_per_second),
        "input_token_rate": mean("tokens/s", s.prompt_tokens_per_second),
        "output_token_rate": mean("tokens/s", s.completion_tokens_per_second),
        "total_token_rate": mean("tokens/s", s.prompt_tokens_per_second + s.completion_tokens_per_second),
    });

    let ts = &r.timeseries;
    let at = |t: f64| rfc3339(start + t);
    let series = |values: &[f64], units: &str| {
        json!({
            "units": units,
            "series": ts.t.iter().zip(values).map(|(t, v)| json!({"ts": at(*t), "value": v})).collect::<Vec<_>>(),
        })
    };
    let ttft_series: Vec<Value> =
        ts.t.iter()
            .zip(&ts.ttft_mean_ms)
            .filter_map(|(t, v)| v.map(|v| json!({"ts": at(*t), "mean": v / 1000.0})))
            .collect();
    let mut ts_latency = Map::new();
    if !ttft_series.is_empty() {
        ts_latency.insert(
            "time_to_first_token".into(),
            json!({"units": "s", "series": ttft_series}),
        );
    }

    let observability = observability(r, &at);

    let mut report = json!({
        "version": SCHEMA_VERSION,
        "run": {
            "uid": uid,
            "time": {
                "start": rfc3339(start),
                "end": rfc3339(end),
                "duration": iso_duration(s.total_duration_seconds),
            },
            "description": format!(
                "batchbench {} run of {} against {}{}",
                run.workload.mode,
                run.model,
                run.url,
                reasoning_note(s)
            ),
            "keywords": ["batchbench", run.workload.mode],
        },
        "scenario": {
            "load": {
                "metadata": {
                    "schema_version": "0.0.1",
                    "cfg_id": cfg_id,
                    "description": format!("{} workload, seed {}", run.workload.mode, run.seed),
                },
                "standardized": standardized,
                "native": {"config": spec},
            },
        },
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": requests,
                    "latency": latency,
                    "throughput": throughput,
                },
                "time_series": {
                    "throughput": {
                        "request_rate": series(&ts.throughput, "queries/s"),
                        "output_token_rate": series(&ts.output_tokens_per_second, "tokens/s"),
                    },
                    "latency": ts_latency,
                },
            },
        },
    });
    if !observability.is_null() {
        report["results"]["observability"] = observability;
    }
    report
}

/// `results.observability` (a permissive section of the schema): each common
/// server metric scraped during the run (`--server-metrics`: the server's and
/// a GPU exporter's), per URL scraped with its statistics and series, and the
/// GPUs' energy where known; `null` when nothing was scraped.
fn observability(r: &RunDir, at: &dyn Fn(f64) -> String) -> Value {
    let Some(m) = &r.doc.summary.server_metrics else {
        return Value::Null;
    };
    let mut obs = Map::new();
    obs.insert(
        "time_series_interval".into(),
        json!({"scope": "run", "statistics_scope": "run", "interval_secs": m.interval_secs}),
    );
    let mut urls: Vec<&str> = r.server.iter().map(|l| l.url.as_str()).collect();
    urls.sort_unstable();
    urls.dedup();
    for name in m.metrics.keys() {
        let components: Vec<Value> = urls
            .iter()
            .filter_map(|url| {
                let points: Vec<(f64, f64)> = r
                    .server
                    .iter()
                    .filter(|l| l.url == *url)
                    .filter_map(|l| Some((l.t, *l.common.get(name)?)))
                    .collect();
                let values: Vec<f64> = points.iter().map(|p| p.1).collect();
                let n = values.len() as f64;
                (!values.is_empty()).then(|| {
                    json!({
                        "component_id": url,
                        "statistics": {
                            "units": "as named",
                            "mean": values.iter().sum::<f64>() / n,
                            "min": values.iter().copied().fold(f64::INFINITY, f64::min),
                            "max": values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        },
                        "time_series": points
                            .iter()
                            .map(|(t, v)| json!({"ts": at(*t), "value": v}))
                            .collect::<Vec<_>>(),
                    })
                })
            })
            .collect();
        if !components.is_empty() {
            obs.insert(name.clone(), json!({"components": components}));
        }
    }
    let components = resource_components(r, &urls, at);
    if !components.is_empty() {
        obs.insert("components".into(), Value::Array(components));
    }
    if let Some(e) = &m.energy {
        obs.insert(
            "gpu_energy".into(),
            serde_json::to_value(e).unwrap_or(Value::Null),
        );
    }
    Value::Object(obs)
}

/// Common server-metric names and where the schema's resource metrics have
/// room for them: (common name, `aggregate` field, `time_series` field,
/// units). A fraction stays a fraction (the schema takes `fraction`).
const RESOURCES: &[(&str, &str, &str, &str)] = &[
    (
        "kv_cache_usage",
        "kv_cache_usage",
        "kv_cache_usage",
        "fraction",
    ),
    (
        "prefix_cache_hit_rate",
        "cache_hit_rate",
        "prefix_cache_hit_rate",
        "fraction",
    ),
    (
        "gpu_utilization",
        "gpu_utilization",
        "gpu_utilization",
        "fraction",
    ),
    (
        "gpu_memory_used_bytes",
        "gpu_memory_usage",
        "gpu_memory_usage",
        "bytes",
    ),
    (
        "gpu_power_watts",
        "power_consumption",
        "power_consumption",
        "Watts",
    ),
    (
        "requests_running",
        "running_requests",
        "num_requests_running",
        "count",
    ),
    (
        "requests_waiting",
        "waiting_requests",
        "num_requests_waiting",
        "count",
    ),
];

/// `observability.components`: the schema's own resource metrics, one
/// component per URL scraped (its label the URL) and, for a GPU exporter, one
/// per GPU beside it (`replica_id` `gpu N`), each with the statistics over the
/// run and the series of the metrics in [`RESOURCES`] it served.
fn resource_components(r: &RunDir, urls: &[&str], at: &dyn Fn(f64) -> String) -> Vec<Value> {
    let mut out = Vec::new();
    for url in urls {
        let lines: Vec<_> = r.server.iter().filter(|l| l.url == *url).collect();
        // The GPUs this URL reported apart, by their `gpu` label.
        let mut gpus: Vec<&str> = lines
            .iter()
            .flat_map(|l| l.common.keys())
            .filter_map(|k| k.strip_prefix("gpu_power_watts{gpu=\""))
            .filter_map(|k| k.strip_suffix("\"}"))
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        let scopes = std::iter::once(None).chain(gpus.into_iter().map(Some));
        for gpu in scopes {
            let mut aggregate = Map::new();
            let mut series = Map::new();
            for (common, agg_field, ts_field, units) in RESOURCES {
                let key = match gpu {
                    None => (*common).to_owned(),
                    Some(g) => format!("{common}{{gpu=\"{g}\"}}"),
                };
                let points: Vec<(f64, f64)> = lines
                    .iter()
                    .filter_map(|l| Some((l.t, *l.common.get(&key)?)))
                    .filter(|p| p.1.is_finite())
                    .collect();
                if points.is_empty() {
                    continue;
                }
                let values = points.iter().map(|p| p.1).collect();
                if let Some(st) = stats_of(units, values) {
                    aggregate.insert((*agg_field).into(), st);
                }
                series.insert(
                    (*ts_field).into(),
                    json!({
                        "units": units,
                        "series": points
                            .iter()
                            .map(|(t, v)| json!({"ts": at(*t), "value": v}))
                            .collect::<Vec<_>>(),
                    }),
                );
            }
            if aggregate.is_empty() {
                continue;
            }
            let mut c = json!({
                "component_label": url,
                "aggregate": aggregate,
                "time_series": series,
            });
            if let Some(g) = gpu {
                c["replica_id"] = json!(format!("gpu {g}"));
            }
            out.push(c);
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_use_the_nearest_rank() {
        let s = stats_of("count", (1..=100).map(f64::from).collect()).unwrap_or_default();
        assert_eq!(s["p50"], json!(50.0));
        assert_eq!(s["p99"], json!(99.0));
        assert_eq!(s["p0p1"], json!(1.0));
        assert_eq!(s["max"], json!(100.0));
        assert_eq!(s["mean"], json!(50.5));
        let b = stats_of_buckets("s", &[[1000, 1], [2000, 2], [4000, 1]], 1e6).unwrap_or_default();
        assert_eq!(b["p50"], json!(0.002));
        assert_eq!(b["p99"], json!(0.004));
        assert_eq!(b["min"], json!(0.001));
        assert!(stats_of("count", vec![]).is_none());
    }

    #[test]
    fn lengths_are_fixed_or_other() {
        assert_eq!(
            seq_len(&[32.0, 32.0]),
            Some(json!({"distribution": "fixed", "value": 32}))
        );
        let o = seq_len(&[10.0, 30.0]).unwrap_or_default();
        assert_eq!(o["distribution"], "other");
        assert_eq!(o["value"], json!(20.0));
        assert_eq!(iso_duration(1.5), "PT1.5S");
    }
}
