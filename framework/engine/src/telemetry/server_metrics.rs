//! Scraping a server's Prometheus metrics during a run (`--server-metrics`):
//! the text format read line by line with `nom-openmetrics`, the known names of
//! vLLM, SGLang, llama.cpp and NVIDIA's DCGM exporter mapped to common ones,
//! counters turned into rates between scrapes, and the GPUs' energy over the
//! run. A scrape that fails is recorded and counted, never
//! fatal to the run.

use batchbench_contract::record::{EnergyReport, ServerMetricsReport};
use batchbench_contract::results::ServerScrape;
use std::collections::BTreeMap;
use std::time::Duration;

/// How a known metric becomes a common one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A gauge, summed over its label sets (requests of every engine).
    Sum,
    /// A gauge, averaged over its label sets (a usage share per engine).
    Mean,
    /// A counter: its rise per second since the previous scrape, summed.
    Rate,
}

/// Known names: (server metric, common name, rule).
const KNOWN: &[(&str, &str, Rule)] = &[
    // vLLM
    ("vllm:num_requests_running", "requests_running", Rule::Sum),
    ("vllm:num_requests_waiting", "requests_waiting", Rule::Sum),
    ("vllm:kv_cache_usage_perc", "kv_cache_usage", Rule::Mean),
    ("vllm:gpu_cache_usage_perc", "kv_cache_usage", Rule::Mean),
    (
        "vllm:prompt_tokens_total",
        "prompt_tokens_per_second",
        Rule::Rate,
    ),
    (
        "vllm:generation_tokens_total",
        "generation_tokens_per_second",
        Rule::Rate,
    ),
    (
        "vllm:num_preemptions_total",
        "preemptions_per_second",
        Rule::Rate,
    ),
    // SGLang
    ("sglang:num_running_reqs", "requests_running", Rule::Sum),
    ("sglang:num_queue_reqs", "requests_waiting", Rule::Sum),
    ("sglang:token_usage", "kv_cache_usage", Rule::Mean),
    ("sglang:cache_hit_rate", "prefix_cache_hit_rate", Rule::Mean),
    (
        "sglang:prompt_tokens_total",
        "prompt_tokens_per_second",
        Rule::Rate,
    ),
    (
        "sglang:generation_tokens_total",
        "generation_tokens_per_second",
        Rule::Rate,
    ),
    // llama.cpp
    (
        "llamacpp:requests_processing",
        "requests_running",
        Rule::Sum,
    ),
    ("llamacpp:requests_deferred", "requests_waiting", Rule::Sum),
    (
        "llamacpp:kv_cache_usage_ratio",
        "kv_cache_usage",
        Rule::Mean,
    ),
    (
        "llamacpp:prompt_tokens_total",
        "prompt_tokens_per_second",
        Rule::Rate,
    ),
    (
        "llamacpp:tokens_predicted_total",
        "generation_tokens_per_second",
        Rule::Rate,
    ),
];

/// How the GPUs of an exporter add up to one figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// Summed (power, energy, memory).
    Sum,
    /// Averaged (utilization, clocks).
    Mean,
    /// The largest (temperature, the last XID error code).
    Max,
}

/// NVIDIA's DCGM exporter: (metric, common name, scale to the common unit,
/// how GPUs add up). Each GPU's value is kept under the common name with its
/// `gpu` label (`gpu_power_watts{gpu="0"}`), the total under the name alone.
const GPU: &[(&str, &str, f64, Over)] = &[
    ("DCGM_FI_DEV_GPU_UTIL", "gpu_utilization", 0.01, Over::Mean),
    ("DCGM_FI_DEV_POWER_USAGE", "gpu_power_watts", 1.0, Over::Sum),
    // Millijoules since the driver loaded.
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gpu_energy_joules",
        0.001,
        Over::Sum,
    ),
    // MiB.
    (
        "DCGM_FI_DEV_FB_USED",
        "gpu_memory_used_bytes",
        1_048_576.0,
        Over::Sum,
    ),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", 1.0, Over::Mean),
    ("DCGM_FI_DEV_GPU_TEMP", "gpu_temperature_c", 1.0, Over::Max),
    ("DCGM_FI_DEV_XID_ERRORS", "gpu_xid_error", 1.0, Over::Max),
];

/// Counters whose rate adds to a common rate already mapped.
const ADDED_RATES: &[(&str, &str)] = &[(
    "llamacpp:prompt_tokens_cached_total",
    "prompt_tokens_per_second",
)];

/// Prefix-cache hit rate from counters: (hits, lookups), each summed over
/// label sets. llama.cpp counts cached and uncached prompt tokens apart, so its
/// lookups are their sum.
const HIT_RATES: &[(&str, &[&str])] = &[
    (
        "vllm:prefix_cache_hits_total",
        &["vllm:prefix_cache_queries_total"],
    ),
    (
        "vllm:gpu_prefix_cache_hits_total",
        &["vllm:gpu_prefix_cache_queries_total"],
    ),
    (
        "llamacpp:prompt_tokens_cached_total",
        &[
            "llamacpp:prompt_tokens_cached_total",
            "llamacpp:prompt_tokens_total",
        ],
    ),
];

/// One sample: its metric name, its labels and its value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// The samples of one response, and the lines that did not parse. Comments
/// and blank lines are skipped; a trailing timestamp is dropped.
pub fn parse(text: &str) -> (Vec<Sample>, u64) {
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        match sample(line).or_else(|| {
            // `name{labels} value timestamp`: try without the timestamp.
            let (head, tail) = line.trim_end().rsplit_once(' ')?;
            tail.parse::<i64>().ok()?;
            sample(head)
        }) {
            Some(s) => out.push(s),
            None => skipped += 1,
        }
    }
    (out, skipped)
}

fn sample(line: &str) -> Option<Sample> {
    let input = format!("{}\n", line.trim());
    let (rest, family) = nom_openmetrics::parser::family(&input).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let s = family.samples.first()?;
    Some((
        s.name().to_owned(),
        s.labels()
            .iter()
            .map(|l| (l.name.to_owned(), l.value.to_string()))
            .collect(),
        s.number(),
    ))
}

/// `name{a="x",b="y"}` (no braces without labels).
fn series_key(name: &str, labels: &[(String, String)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let l: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect();
    format!("{name}{{{}}}", l.join(","))
}

/// Turns successive responses of one URL into scrapes.
#[derive(Debug, Default)]
pub struct Mapper {
    /// The previous scrape's counter sums by metric name, and its time.
    previous: Option<(f64, BTreeMap<String, f64>)>,
}

impl Mapper {
    /// The scrape of `text`, answered at `t` seconds.
    pub fn scrape(&mut self, url: &str, t: f64, text: &str) -> ServerScrape {
        let (samples, skipped) = parse(text);
        self.scrape_samples(url, t, &samples, skipped)
    }

    /// The scrape of samples read at `t` seconds (from a response, of which
    /// `skipped` lines did not parse, or from the GPUs themselves).
    pub fn scrape_samples(
        &mut self,
        url: &str,
        t: f64,
        samples: &[Sample],
        skipped: u64,
    ) -> ServerScrape {
        let mut raw = BTreeMap::new();
        // Per name: the sum and the count of its series.
        let mut by_name: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
        for (name, labels, v) in samples {
            raw.insert(series_key(name, labels), *v);
            if v.is_finite() {
                let e = by_name.entry(name.as_str()).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        let sums: BTreeMap<String, f64> = by_name
            .iter()
            .map(|(k, (s, _))| ((*k).to_owned(), *s))
            .collect();
        let mut common = BTreeMap::new();
        let prev = self.previous.as_ref();
        let rate = |name: &str| -> Option<f64> {
            let (t0, before) = prev?;
            let dt = t - t0;
            let now = *sums.get(name)?;
            let then = *before.get(name)?;
            // A counter that went down was reset: no rate for this interval.
            (dt > 0.0 && now >= then).then(|| (now - then) / dt)
        };
        for (metric, name, rule) in KNOWN {
            let Some((sum, n)) = by_name.get(metric) else {
                continue;
            };
            let v = match rule {
                Rule::Sum => Some(*sum),
                Rule::Mean => Some(sum / *n as f64),
                Rule::Rate => rate(metric),
            };
            // Aliases of one figure (vLLM's old and new KV-cache names, both
            // exposed for a while): the first listed wins, never their sum.
            if let Some(v) = v {
                common.entry((*name).to_owned()).or_insert(v);
            }
        }
        gpu_figures(samples, &mut common);
        // llama.cpp counts cached prompt tokens apart from the rest: its prompt
        // rate is both, as vLLM's and SGLang's are.
        for (metric, name) in ADDED_RATES {
            if let (Some(v), Some(total)) = (rate(metric), common.get_mut(*name)) {
                *total += v;
            }
        }
        if let Some((_, before)) = prev {
            let delta = |name: &str| Some(sums.get(name)? - before.get(name)?);
            for (hits, lookups) in HIT_RATES {
                let looked_up: Option<f64> = lookups.iter().map(|l| delta(l)).sum();
                if let (Some(dh), Some(dq)) = (delta(hits), looked_up)
                    && dq > 0.0
                    && dh >= 0.0
                {
                    common.insert("prefix_cache_hit_rate".to_owned(), (dh / dq).min(1.0));
                }
            }
        }
        self.previous = Some((t, sums));
        ServerScrape {
            t,
            url: url.to_owned(),
            error: (samples.is_empty()).then(|| {
                if skipped > 0 {
                    format!("no sample parsed ({skipped} lines did not parse)")
                } else {
                    "no sample in the response".to_owned()
                }
            }),
            common,
            raw,
            skipped_lines: skipped,
        }
    }
}

/// The GPU figures of an exporter's samples ([`GPU`]): each GPU's, and their
/// total.
fn gpu_figures(samples: &[Sample], common: &mut BTreeMap<String, f64>) {
    for (metric, name, scale, over) in GPU {
        let mut values = Vec::new();
        for (n, labels, v) in samples {
            if n != metric || !v.is_finite() {
                continue;
            }
            let v = v * scale;
            let gpu = labels
                .iter()
                .find(|(k, _)| k == "gpu")
                .map_or_else(|| values.len().to_string(), |(_, g)| g.clone());
            common.insert(
                format!("{name}{{gpu={}}}", serde_json::Value::String(gpu)),
                v,
            );
            values.push(v);
        }
        if values.is_empty() {
            continue;
        }
        let total = match over {
            Over::Sum => values.iter().sum(),
            Over::Mean => values.iter().sum::<f64>() / values.len() as f64,
            Over::Max => values.iter().copied().fold(f64::MIN, f64::max),
        };
        common.insert((*name).to_owned(), total);
    }
}

/// What a run's scrapes add up to.
#[derive(Debug, Default)]
pub struct Tally {
    report: ServerMetricsReport,
    /// Per URL: its GPUs' energy and power over the scrapes.
    energy: BTreeMap<String, EnergyTrack>,
}

/// One exporter's energy counter and power gauge over a run's scrapes.
#[derive(Debug, Default)]
struct EnergyTrack {
    /// The counter's first and last reading: (seconds, joules).
    counter: Option<((f64, f64), (f64, f64))>,
    /// The last power reading, (seconds, watts), and the power integrated
    /// up to it (trapezoids between scrapes), with the first reading's time.
    power: Option<(f64, f64)>,
    integral: f64,
    power_from: Option<f64>,
    peak: f64,
}

impl EnergyTrack {
    fn add(&mut self, t: f64, common: &BTreeMap<String, f64>) {
        if let Some(&j) = common.get("gpu_energy_joules") {
            self.counter = Some(match self.counter {
                None => ((t, j), (t, j)),
                Some((first, _)) => (first, (t, j)),
            });
        }
        if let Some(&w) = common.get("gpu_power_watts") {
            if let Some((t0, w0)) = self.power {
                self.integral += (t - t0).max(0.0) * (w + w0) / 2.0;
            }
            self.power = Some((t, w));
            self.power_from.get_or_insert(t);
            self.peak = self.peak.max(w);
        }
    }
}

/// Failures kept with their reason in the report.
const ERRORS_KEPT: usize = 5;

impl Tally {
    /// A tally for these URLs, scraped every `interval`.
    pub fn new(urls: &[String], interval: Duration) -> Self {
        Self {
            report: ServerMetricsReport {
                urls: urls.to_vec(),
                interval_secs: interval.as_secs_f64(),
                ..ServerMetricsReport::default()
            },
            energy: BTreeMap::new(),
        }
    }

    /// Counts one scrape.
    pub fn add(&mut self, s: &ServerScrape) {
        let r = &mut self.report;
        r.scrapes += 1;
        if let Some(e) = &s.error {
            r.failed_scrapes += 1;
            if r.errors.len() < ERRORS_KEPT {
                r.errors.push(format!("{}: {e}", s.url));
            }
            return;
        }
        for (k, v) in &s.common {
            r.metrics.entry(k.clone()).or_default().add(*v);
        }
        self.energy
            .entry(s.url.clone())
            .or_default()
            .add(s.t, &s.common);
    }

    /// The report.
    pub fn report(mut self) -> ServerMetricsReport {
        self.report.energy = self.energy_report();
        self.report
    }

    /// The GPUs' energy: from the counters' differences where every exporter
    /// with power exported one, else power integrated over the scrapes.
    fn energy_report(&self) -> Option<EnergyReport> {
        let tracks: Vec<&EnergyTrack> = self
            .energy
            .values()
            .filter(|e| e.counter.is_some() || e.power.is_some())
            .collect();
        if tracks.is_empty() {
            return None;
        }
        let powered: Vec<&&EnergyTrack> = tracks.iter().filter(|e| e.power.is_some()).collect();
        let integrated = (!powered.is_empty()).then(|| powered.iter().map(|e| e.integral).sum());
        let power_secs = powered
            .iter()
            .filter_map(|e| Some(e.power?.0 - e.power_from?))
            .fold(0.0, f64::max);
        let peak = (!powered.is_empty()).then(|| powered.iter().map(|e| e.peak).sum());
        let counted = tracks.iter().all(|e| e.counter.is_some());
        let (joules, seconds, source) = if counted {
            let spans = tracks.iter().filter_map(|e| e.counter);
            let joules = spans.clone().map(|((_, a), (_, b))| (b - a).max(0.0)).sum();
            let secs = spans.map(|((t0, _), (t1, _))| t1 - t0).fold(0.0, f64::max);
            (joules, secs, "counter")
        } else {
            (integrated?, power_secs, "integrated power")
        };
        if seconds <= 0.0 {
            return None;
        }
        Some(EnergyReport {
            joules,
            source: source.to_owned(),
            seconds,
            integrated_power_joules: if counted { integrated } else { None },
            mean_power_watts: joules / seconds,
            peak_power_watts: peak,
            ..EnergyReport::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = "# HELP vllm:num_requests_running Running.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n\
# TYPE vllm:kv_cache_usage_perc gauge\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n\
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.25\n\
# TYPE vllm:generation_tokens_total counter\n\
vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 100.0\n\
vllm:prefix_cache_queries_total{engine=\"0\"} 1000\n\
vllm:prefix_cache_hits_total{engine=\"0\"} 250\n\
# HELP vllm:empty_family A family with no sample yet.\n\
# TYPE vllm:empty_family histogram\n\
weird line here\n\
with_timestamp{a=\"x\\\"y\"} 7 1700000000000\n";

    #[test]
    fn samples_parse_line_by_line_and_bad_lines_are_counted() {
        let (s, skipped) = parse(VLLM);
        assert_eq!(skipped, 1);
        assert_eq!(s.len(), 8);
        assert_eq!(s[0].0, "vllm:num_requests_running");
        assert_eq!(s[0].1[0], ("engine".to_owned(), "0".to_owned()));
        let last = &s[7];
        assert_eq!((last.0.as_str(), last.2), ("with_timestamp", 7.0));
        assert_eq!(last.1[0].1, "x\"y");
    }

    #[test]
    fn known_names_map_and_counters_become_rates() {
        let mut m = Mapper::default();
        let first = m.scrape("u", 1.0, VLLM);
        assert_eq!(first.error, None);
        assert_eq!(first.common.get("requests_running"), Some(&5.0));
        assert_eq!(first.common.get("kv_cache_usage"), Some(&0.375));
        // No rate before a second scrape.
        assert!(!first.common.contains_key("generation_tokens_per_second"));
        assert_eq!(
            first
                .raw
                .get("vllm:num_requests_running{engine=\"0\",model_name=\"m\"}"),
            Some(&3.0)
        );
        let later = VLLM
            .replace("} 100.0", "} 300.0")
            .replace("} 1000", "} 1400")
            .replace("} 250", "} 350");
        let second = m.scrape("u", 3.0, &later);
        assert_eq!(
            second.common.get("generation_tokens_per_second"),
            Some(&100.0)
        );
        assert_eq!(second.common.get("prefix_cache_hit_rate"), Some(&0.25));
        let mut tally = Tally::new(&["u".into()], Duration::from_secs(1));
        tally.add(&first);
        tally.add(&second);
        tally.add(&m.scrape("u", 4.0, "garbage\n"));
        let r = tally.report();
        assert_eq!((r.scrapes, r.failed_scrapes), (3, 1));
        assert!(r.errors[0].contains("no sample parsed"), "{:?}", r.errors);
        assert_eq!(r.metrics["requests_running"].samples, 2);
    }

    /// A DCGM exporter page (two GPUs, written from the exporter's documented
    /// format) maps to every common GPU name, per GPU and in total.
    #[test]
    fn a_dcgm_exporter_page_maps_to_every_common_gpu_name() {
        let page = include_str!("../../../../tests/golden/dcgm-exporter.prom");
        let s = Mapper::default().scrape("dcgm", 1.0, page);
        assert_eq!(s.error, None);
        assert_eq!(s.skipped_lines, 0);
        let c = |k: &str| {
            *s.common
                .get(k)
                .unwrap_or_else(|| panic!("no {k}: {:?}", s.common))
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.abs().max(1.0);
        assert!(close(c("gpu_utilization"), 0.90));
        assert!(close(c("gpu_utilization{gpu=\"1\"}"), 0.83));
        assert!(close(c("gpu_power_watts"), 512.347 + 398.112));
        assert!(close(c("gpu_power_watts{gpu=\"0\"}"), 512.347));
        assert!(close(
            c("gpu_energy_joules"),
            (98_231_447_121.0 + 87_110_093_004.0) / 1000.0
        ));
        assert!(close(
            c("gpu_memory_used_bytes"),
            (76_450.0 + 76_354.0) * 1_048_576.0
        ));
        assert!(close(c("sm_clock_mhz"), (1980.0 + 1755.0) / 2.0));
        assert!(close(c("gpu_temperature_c"), 61.0));
        assert!(close(c("gpu_xid_error"), 79.0));
        assert!(close(c("gpu_xid_error{gpu=\"0\"}"), 0.0));
        // The raw series are kept as scraped.
        assert_eq!(s.raw.len(), 2 * 9);
    }

    /// Energy from the counter where the exporter has one, with the power
    /// integrated beside it; from integrated power where it has none.
    #[test]
    fn energy_comes_from_the_counter_else_from_integrated_power() {
        // Power rising linearly, 200 W + 100 W/s, and the counter that
        // integrates it exactly: the trapezoids agree with it.
        let page = |t: f64, counter: bool| {
            let w = 200.0 + 100.0 * t;
            let mut p = format!("DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\"}} {w}\n");
            if counter {
                let mj = 1000.0 * (5_000.0 + 200.0 * t + 50.0 * t * t);
                p.push_str(&format!(
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"0\"}} {mj}\n"
                ));
            }
            p
        };
        for counter in [true, false] {
            let mut m = Mapper::default();
            let mut tally = Tally::new(&["x".to_owned()], Duration::from_millis(500));
            for i in 0..=8 {
                let t = f64::from(i) * 0.5;
                tally.add(&m.scrape("x", t, &page(t, counter)));
            }
            let e = tally.report().energy.unwrap_or_else(|| panic!("no energy"));
            // 0 to 4 s: 200 x 4 + 50 x 16 = 1,600 J.
            assert!((e.joules - 1600.0).abs() < 1e-6, "{e:?}");
            assert_eq!(
                e.source,
                if counter {
                    "counter"
                } else {
                    "integrated power"
                }
            );
            assert!((e.seconds - 4.0).abs() < 1e-9);
            assert!((e.mean_power_watts - 400.0).abs() < 1e-6);
            assert_eq!(e.peak_power_watts, Some(600.0));
            if counter {
                let i = e.integrated_power_joules.unwrap_or_default();
                assert!((i - e.joules).abs() < 1e-6, "{e:?}");
            }
        }
        // Nothing of the kind: no energy.
        let mut tally = Tally::new(&["x".to_owned()], Duration::from_millis(500));
        tally.add(&Mapper::default().scrape("x", 0.0, VLLM));
        assert_eq!(tally.report().energy, None);
    }

    #[test]
    fn aliases_of_one_figure_are_not_added() {
        let text = "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n";
        let s = Mapper::default().scrape("u", 0.0, text);
        assert_eq!(s.common.get("kv_cache_usage"), Some(&0.5));
    }

    #[test]
    fn llama_cpp_hit_rate_counts_cached_and_uncached_prompt_tokens() {
        let text = |cached: u64, prompt: u64| {
            format!(
                "llamacpp:prompt_tokens_total {prompt}\nllamacpp:prompt_tokens_cached_total {cached}\nllamacpp:requests_processing 2\n"
            )
        };
        let mut m = Mapper::default();
        m.scrape("u", 0.0, &text(0, 0));
        let s = m.scrape("u", 2.0, &text(300, 100));
        assert_eq!(s.common.get("prefix_cache_hit_rate"), Some(&0.75));
        // Cached and uncached prompt tokens: 400 over 2 s.
        assert_eq!(s.common.get("prompt_tokens_per_second"), Some(&200.0));
        assert_eq!(s.common.get("requests_running"), Some(&2.0));
    }
}
