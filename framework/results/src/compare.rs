//! `batchbench compare BASE NEW`: the change of every figure from one run to
//! another, a significance test on the per-request distributions, and
//! thresholds (`--fail-if 'ttft_p99>+10%,goodput<-5%'`) that make it a CI gate.
//!
//! Each latency figure has its own test, computed on the runs' histograms
//! (every sample counts, ties are the histogram's buckets, and shards merged by
//! adding counts are tested the same way): a percentile by splitting both runs
//! at the pooled percentile and comparing the shares above it ([`quantile_test`]),
//! the mean by Welch's test ([`mean_test`]). A latency threshold is breached only
//! when its change is past the threshold *and* its test says the change is
//! significant (p below `alpha`), so that noise between two runs of one
//! configuration does not fail the gate; the max (one sample) and the rates
//! (throughput, goodput) are judged on the figure.

use crate::RunDir;
use batchbench_contract::record::{IntervalMethod, LatencyStats, Summary};
use std::fmt::Write as _;

/// The latency families compared, with their names in thresholds.
const FAMILIES: [(&str, &str); 9] = [
    ("e2e", "latency"),
    ("ttft", "ttft"),
    ("ttfat", "ttfat"),
    ("itl", "itl"),
    ("tpot", "tpot"),
    ("tpot_reasoning", "tpot_reasoning"),
    ("tpot_answer", "tpot_answer"),
    ("itl_reasoning", "itl_reasoning"),
    ("itl_answer", "itl_answer"),
];
const FIGURES: [&str; 5] = ["p50", "p90", "p99", "mean", "max"];

/// How a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Lower,
    Higher,
}

/// One figure of both runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    /// Its name in thresholds (`ttft_p99`, `throughput`).
    pub metric: String,
    /// Units, for the table.
    pub unit: &'static str,
    /// The base run's value.
    pub base: f64,
    /// The new run's value.
    pub new: f64,
    /// The two-sided p-value of the family's distributions (latency figures).
    pub p_value: Option<f64>,
    /// Lower is better, or higher.
    pub lower_is_better: bool,
}

impl Row {
    /// The relative change, new against base (`None` when the base is zero).
    pub fn change(&self) -> Option<f64> {
        (self.base != 0.0).then(|| (self.new - self.base) / self.base)
    }
}

/// A threshold of `--fail-if`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Threshold {
    /// The metric.
    pub metric: String,
    /// `>`: fail when it rose by more than `pct`; `<`: when it fell by more.
    pub rises: bool,
    /// The relative change allowed, as a fraction (0.10 for 10%).
    pub fraction: f64,
    /// As written.
    pub text: String,
}

/// Every metric a threshold may name.
pub fn metric_names() -> Vec<String> {
    let mut v: Vec<String> = [
        "throughput",
        "output_tokens_per_second",
        "goodput",
        "failure_rate",
        "structured_valid_share",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for (name, _) in FAMILIES {
        for f in FIGURES {
            v.push(format!("{name}_{f}"));
        }
    }
    v
}

/// The metrics a run of several models has per model, named
/// `METRIC{model=NAME}` in thresholds (`ttft_p99{model=sql-lora}>+10%`).
pub fn model_metric_names() -> Vec<String> {
    let mut v: Vec<String> = ["throughput", "output_tokens_per_second", "failure_rate"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for (name, _) in MODEL_FAMILIES {
        for f in FIGURES {
            v.push(format!("{name}_{f}"));
        }
    }
    v
}

/// The latency families a model's figures have.
const MODEL_FAMILIES: [(&str, &str); 2] = [("e2e", "latency"), ("ttft", "ttft")];

/// A metric's name without its `{model=NAME}`.
fn base_metric(metric: &str) -> &str {
    metric.split('{').next().unwrap_or(metric)
}

/// Whether `metric` names a known figure: one of [`metric_names`], or one of
/// [`model_metric_names`] with `{model=NAME}`.
fn known_metric(metric: &str) -> Result<(), String> {
    match metric.split_once('{') {
        None if metric_names().iter().any(|n| n == metric) => Ok(()),
        None => Err(format!(
            "unknown metric '{metric}'; one of {}, or per model METRIC{{model=NAME}}",
            metric_names().join(", ")
        )),
        Some((base, rest)) => {
            let model = rest
                .strip_prefix("model=")
                .and_then(|r| r.strip_suffix('}'))
                .filter(|m| !m.is_empty() && !m.contains(['{', '}']));
            if model.is_none() {
                return Err(format!(
                    "'{metric}': a model's figure is METRIC{{model=NAME}}"
                ));
            }
            if !model_metric_names().iter().any(|n| n == base) {
                return Err(format!(
                    "'{base}' has no per-model figure; one of {}",
                    model_metric_names().join(", ")
                ));
            }
            Ok(())
        }
    }
}

/// Parses `ttft_p99>+10%,goodput<-5%`.
pub fn parse_thresholds(s: &str) -> Result<Vec<Threshold>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let bad = |m: &str| format!("--fail-if '{t}': {m}");
            let (metric, rises, rest) = if let Some((m, r)) = t.split_once('>') {
                (m, true, r)
            } else if let Some((m, r)) = t.split_once('<') {
                (m, false, r)
            } else {
                return Err(bad("expected METRIC>+N% or METRIC<-N%"));
            };
            let metric = metric.trim();
            known_metric(metric).map_err(|e| bad(&e))?;
            let rest = rest.trim();
            let num = rest
                .strip_suffix('%')
                .ok_or_else(|| bad("the change is a percentage, such as +10%"))?;
            let v: f64 = num
                .trim()
                .parse()
                .map_err(|_| bad(&format!("'{num}' is not a number")))?;
            if !v.is_finite() || (rises && v < 0.0) || (!rises && v > 0.0) {
                return Err(bad("a rise is >+N%, a fall <-N% (N a positive number)"));
            }
            Ok(Threshold {
                metric: metric.to_owned(),
                rises,
                fraction: v.abs() / 100.0,
                text: t.to_owned(),
            })
        })
        .collect()
}

/// The standard normal CDF (Abramowitz and Stegun 7.1.26, error below 1.5e-7).
fn phi(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    if z >= 0.0 {
        0.5 * (1.0 + y)
    } else {
        0.5 * (1.0 - y)
    }
}

/// The two-sided p-value that two distributions (rising `[value, count]`
/// buckets) have the same `q`-quantile: both are split at the pooled
/// `q`-quantile, and the shares above it are compared (a two-proportion z
/// test, the quantile form of Mood's median test). A shift in the tail moves
/// its quantile's test even when the bulk of the distribution, and so a
/// rank test, stays put. `inflation` is, per run, how many of its samples
/// count as one independent sample ([`inflation`]): correlated samples widen
/// the test. `None` when either is empty.
pub fn quantile_test(a: &[[u64; 2]], b: &[[u64; 2]], q: f64, inflation: (f64, f64)) -> Option<f64> {
    let n1: u64 = a.iter().map(|[_, c]| c).sum();
    let n2: u64 = b.iter().map(|[_, c]| c).sum();
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let mut pooled: Vec<[u64; 2]> = a.iter().chain(b).copied().collect();
    pooled.sort_unstable_by_key(|[v, _]| *v);
    let threshold = batchbench_contract::results::bucket_quantile(&pooled, q)?;
    let above = |x: &[[u64; 2]]| -> u64 {
        x.iter()
            .filter(|[v, _]| *v > threshold)
            .map(|[_, c]| c)
            .sum()
    };
    let (k1, k2) = (above(a) as f64, above(b) as f64);
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let p = (k1 + k2) / (n1f + n2f);
    let var = p * (1.0 - p) * (inflation.0 / n1f + inflation.1 / n2f);
    if var <= 0.0 {
        return Some(1.0);
    }
    let z = (k2 / n2f - k1 / n1f).abs() / var.sqrt();
    Some((2.0 * (1.0 - phi(z))).clamp(0.0, 1.0))
}

/// The two-sided p-value that two distributions have the same mean (Welch's
/// test, normal approximation), from their buckets; `inflation` as for
/// [`quantile_test`].
pub fn mean_test(a: &[[u64; 2]], b: &[[u64; 2]], inflation: (f64, f64)) -> Option<f64> {
    let moments = |x: &[[u64; 2]]| -> Option<(f64, f64, f64)> {
        let n: u64 = x.iter().map(|[_, c]| c).sum();
        if n < 2 {
            return None;
        }
        let nf = n as f64;
        let mean = x.iter().map(|[v, c]| *v as f64 * *c as f64).sum::<f64>() / nf;
        let var = x
            .iter()
            .map(|[v, c]| (*v as f64 - mean).powi(2) * *c as f64)
            .sum::<f64>()
            / (nf - 1.0);
        Some((nf, mean, var))
    };
    let ((n1, m1, v1), (n2, m2, v2)) = (moments(a)?, moments(b)?);
    let se = (inflation.0 * v1 / n1 + inflation.1 * v2 / n2).sqrt();
    if se <= 0.0 {
        return Some(if m1 == m2 { 1.0 } else { 0.0 });
    }
    let z = (m2 - m1).abs() / se;
    Some((2.0 * (1.0 - phi(z))).clamp(0.0, 1.0))
}

fn figure(s: &LatencyStats, f: &str) -> f64 {
    match f {
        "p50" => s.p50_ms,
        "p90" => s.p90_ms,
        "p99" => s.p99_ms,
        "mean" => s.mean_ms,
        _ => s.max_ms,
    }
}

fn family(s: &Summary, key: &str) -> Option<LatencyStats> {
    match key {
        "latency" => s.latency,
        "ttft" => s.ttft,
        "ttfat" => s.ttfat,
        "itl" => s.itl,
        "tpot" => s.tpot,
        "tpot_reasoning" => s.tpot_reasoning,
        "tpot_answer" => s.tpot_answer,
        "itl_reasoning" => s.itl_reasoning,
        "itl_answer" => s.itl_answer,
        _ => None,
    }
}

/// How many of a run's samples of a distribution count as one independent
/// sample: its count over the effective count its batch means over time gave
/// (at the median); 1 where the run took them as independent (a short run,
/// merged shards, or a run recorded before intervals existed). A loaded
/// server's latencies move together, and two runs of one configuration then
/// differ by more than independent samples would.
pub fn inflation(s: &LatencyStats) -> f64 {
    s.ci.filter(|c| c.method == IntervalMethod::BatchMeans && c.effective_count > 0.0)
        .map_or(1.0, |c| (s.count as f64 / c.effective_count).max(1.0))
}

fn failure_rate(s: &Summary) -> f64 {
    s.failed_requests as f64 / s.total_requests.max(1) as f64
}

/// Every figure both runs have.
pub fn rows(base: &RunDir, new: &RunDir) -> Vec<Row> {
    let (b, n) = (&base.doc.summary, &new.doc.summary);
    let mut rows = Vec::new();
    let mut rate = |metric: &str, unit, x: f64, y: f64, better: Better| {
        rows.push(Row {
            metric: metric.to_owned(),
            unit,
            base: x,
            new: y,
            p_value: None,
            lower_is_better: better == Better::Lower,
        });
    };
    rate(
        "throughput",
        "req/s",
        b.requests_per_second,
        n.requests_per_second,
        Better::Higher,
    );
    rate(
        "output_tokens_per_second",
        "tok/s",
        b.completion_tokens_per_second,
        n.completion_tokens_per_second,
        Better::Higher,
    );
    if let (Some(x), Some(y)) = (&b.slo, &n.slo) {
        rate("goodput", "req/s", x.goodput, y.goodput, Better::Higher);
    }
    rate(
        "failure_rate",
        "share",
        failure_rate(b),
        failure_rate(n),
        Better::Lower,
    );
    // Structured outputs, where both runs asked for a format.
    if let (Some(x), Some(y)) = (&b.structured, &n.structured) {
        rate(
            "structured_valid_share",
            "share",
            x.valid_share,
            y.valid_share,
            Better::Higher,
        );
    }
    // The GPUs' energy, where both runs scraped an exporter that reports it.
    let energy = |s: &batchbench_contract::record::Summary| {
        s.server_metrics.as_ref().and_then(|m| m.energy.clone())
    };
    if let (Some(x), Some(y)) = (energy(b), energy(n)) {
        if let (Some(jx), Some(jy)) = (x.joules_per_output_token, y.joules_per_output_token) {
            rate("joules_per_output_token", "J", jx, jy, Better::Lower);
        }
        rate(
            "mean_gpu_power",
            "W",
            x.mean_power_watts,
            y.mean_power_watts,
            Better::Lower,
        );
    }
    for (name, key) in FAMILIES {
        let (Some(x), Some(y)) = (family(b, key), family(n, key)) else {
            continue;
        };
        let buckets = (
            base.histograms.families.get(key),
            new.histograms.families.get(key),
        );
        let inflation = (inflation(&x), inflation(&y));
        for f in FIGURES {
            // Each figure is tested for its own kind of change: a quantile by
            // the split at that quantile, the mean by Welch's test; the max is
            // one sample and is judged on the figure alone.
            let p_value = match buckets {
                (Some(hb), Some(hn)) => match f {
                    "p50" => quantile_test(hb, hn, 0.50, inflation),
                    "p90" => quantile_test(hb, hn, 0.90, inflation),
                    "p99" => quantile_test(hb, hn, 0.99, inflation),
                    "mean" => mean_test(hb, hn, inflation),
                    _ => None,
                },
                _ => None,
            };
            rows.push(Row {
                metric: format!("{name}_{f}"),
                unit: "ms",
                base: figure(&x, f),
                new: figure(&y, f),
                p_value,
                lower_is_better: true,
            });
        }
    }
    rows.extend(model_rows(base, new));
    rows
}

/// The figures of each model of a mix that both runs served, named
/// `METRIC{model=NAME}`: its throughput and failure rate, and its latency and
/// TTFT figures, each tested on the model's own requests in the runs'
/// records (a run without records: judged on the figure alone).
fn model_rows(base: &RunDir, new: &RunDir) -> Vec<Row> {
    let (b, n) = (&base.doc.summary, &new.doc.summary);
    let mut rows = Vec::new();
    for mb in &b.models {
        let Some(mn) = n.models.iter().find(|m| m.model == mb.model) else {
            continue;
        };
        let (x, y) = (&mb.figures, &mn.figures);
        let name = |m: &str| format!("{m}{{model={}}}", mb.model);
        let share = |e: &batchbench_contract::record::EndpointSummary| {
            e.failed_requests as f64 / e.requests.max(1) as f64
        };
        for (metric, unit, bx, ny, better) in [
            (
                "throughput",
                "req/s",
                x.requests_per_second,
                y.requests_per_second,
                Better::Higher,
            ),
            (
                "output_tokens_per_second",
                "tok/s",
                x.completion_tokens_per_second,
                y.completion_tokens_per_second,
                Better::Higher,
            ),
            ("failure_rate", "share", share(x), share(y), Better::Lower),
        ] {
            rows.push(Row {
                metric: name(metric),
                unit,
                base: bx,
                new: ny,
                p_value: None,
                lower_is_better: better == Better::Lower,
            });
        }
        for (family_name, key) in MODEL_FAMILIES {
            let pick = |e: &batchbench_contract::record::EndpointSummary| match key {
                "latency" => e.latency,
                _ => e.ttft,
            };
            let (Some(sx), Some(sy)) = (pick(x), pick(y)) else {
                continue;
            };
            let (hb, hn) = (
                record_buckets(base, &mb.model, key),
                record_buckets(new, &mb.model, key),
            );
            // The run's own correlation of samples (its whole family's).
            let inflation = (
                family(b, key).map_or(1.0, |s| inflation(&s)),
                family(n, key).map_or(1.0, |s| inflation(&s)),
            );
            for f in FIGURES {
                let p_value = match f {
                    "p50" => quantile_test(&hb, &hn, 0.50, inflation),
                    "p90" => quantile_test(&hb, &hn, 0.90, inflation),
                    "p99" => quantile_test(&hb, &hn, 0.99, inflation),
                    "mean" => mean_test(&hb, &hn, inflation),
                    _ => None,
                };
                rows.push(Row {
                    metric: name(&format!("{family_name}_{f}")),
                    unit: "ms",
                    base: figure(&sx, f),
                    new: figure(&sy, f),
                    p_value,
                    lower_is_better: true,
                });
            }
        }
    }
    rows
}

/// The latencies (`latency`) or TTFTs (`ttft`) of a model's measured
/// successes in a run's records, in microseconds, as rising `[value, count]`
/// buckets (empty without records).
fn record_buckets(run: &RunDir, model: &str, key: &str) -> Vec<[u64; 2]> {
    let mut v: Vec<u64> = run
        .requests
        .iter()
        .filter(|r| r.ok && !r.warmup && r.model.as_deref() == Some(model))
        .filter_map(|r| match key {
            "latency" => Some(r.latency_ms),
            _ => r.ttft_ms,
        })
        .map(|ms| (ms.max(0.0) * 1000.0).round() as u64)
        .collect();
    v.sort_unstable();
    let mut out: Vec<[u64; 2]> = Vec::new();
    for x in v {
        match out.last_mut() {
            Some(last) if last[0] == x => last[1] += 1,
            _ => out.push([x, 1]),
        }
    }
    out
}

/// A threshold's verdict.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Breach {
    /// The threshold.
    pub threshold: Threshold,
    /// Why it was breached.
    pub message: String,
}

/// The thresholds breached: a change past the threshold, significant (p below
/// `alpha`) where the figure has a distribution. A threshold whose metric one
/// of the runs lacks is an error.
pub fn judge(rows: &[Row], thresholds: &[Threshold], alpha: f64) -> Result<Vec<Breach>, String> {
    let mut out = Vec::new();
    for t in thresholds {
        let row = rows.iter().find(|r| r.metric == t.metric).ok_or_else(|| {
            format!(
                "--fail-if '{}': the runs do not both have {} (streamed figures need --stream, goodput an --slo, structured_valid_share a --response-format, a model's figures that model in both runs' mixes)",
                t.text, t.metric
            )
        })?;
        let delta = if base_metric(&t.metric) == "failure_rate" {
            // A share: compared in percentage points.
            Some(row.new - row.base)
        } else {
            row.change()
        };
        let past = match delta {
            Some(d) if t.rises => d > t.fraction,
            Some(d) => d < -t.fraction,
            // From zero: any rise of a zero figure is past a rise threshold.
            None => t.rises && row.new > 0.0,
        };
        let significant = row.p_value.is_none_or(|p| p < alpha);
        if past && significant {
            out.push(Breach {
                threshold: t.clone(),
                message: format!(
                    "{}: {} -> {} ({}){}",
                    t.text,
                    num(row.base),
                    num(row.new),
                    change_text(row, &t.metric),
                    row.p_value
                        .map_or_else(String::new, |p| format!(", p = {}", pval(p)))
                ),
            });
        }
    }
    Ok(out)
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn pval(p: f64) -> String {
    if p < 1e-4 {
        "<0.0001".to_owned()
    } else {
        format!("{p:.4}")
    }
}

fn change_text(r: &Row, metric: &str) -> String {
    if metric == "failure_rate" {
        return format!("{:+.2} points", 100.0 * (r.new - r.base));
    }
    r.change()
        .map_or_else(|| "from zero".to_owned(), |c| format!("{:+.1}%", 100.0 * c))
}

/// The comparison as a table.
pub fn table(base: &str, new: &str, rows: &[Row], alpha: f64) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "batchbench compare\n  base  {base}\n  new   {new}\n");
    let _ = writeln!(
        o,
        "  {:<34} {:>12} {:>12} {:>16} {:>9}  verdict",
        "metric", "base", "new", "change", "p"
    );
    for r in rows {
        let change = change_text(r, &r.metric);
        let verdict = match (r.p_value, r.new - r.base) {
            (Some(p), d) if p < alpha && d != 0.0 => {
                if (d > 0.0) == r.lower_is_better {
                    "worse"
                } else {
                    "better"
                }
            }
            (Some(_), _) => "no significant change",
            _ => "",
        };
        let _ = writeln!(
            o,
            "  {:<34} {:>12} {:>12} {:>16} {:>9}  {verdict}",
            format!("{} ({})", r.metric, r.unit),
            num(r.base),
            num(r.new),
            change,
            r.p_value.map_or_else(String::new, pval),
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rank test over a whole distribution, to show what the per-figure
    /// tests see that it does not.
    /// The two-sided p-value of the Mann-Whitney U test of two distributions given
    /// as rising `[value, count]` buckets (ties within a bucket); `None` when either
    /// is empty.
    fn mann_whitney(a: &[[u64; 2]], b: &[[u64; 2]]) -> Option<f64> {
        let n1: u64 = a.iter().map(|[_, c]| c).sum();
        let n2: u64 = b.iter().map(|[_, c]| c).sum();
        if n1 == 0 || n2 == 0 {
            return None;
        }
        let (n1f, n2f) = (n1 as f64, n2 as f64);
        let n = n1f + n2f;
        let (mut i, mut j) = (0, 0);
        let (mut below, mut rank_sum_a, mut ties) = (0.0f64, 0.0f64, 0.0f64);
        while i < a.len() || j < b.len() {
            let v = match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) => x[0].min(y[0]),
                (Some(x), None) => x[0],
                (None, Some(y)) => y[0],
                (None, None) => break,
            };
            let ca = a.get(i).filter(|x| x[0] == v).map_or(0, |x| x[1]) as f64;
            let cb = b.get(j).filter(|y| y[0] == v).map_or(0, |y| y[1]) as f64;
            i += usize::from(a.get(i).is_some_and(|x| x[0] == v));
            j += usize::from(b.get(j).is_some_and(|y| y[0] == v));
            let t = ca + cb;
            rank_sum_a += ca * (below + (t + 1.0) / 2.0);
            ties += t * t * t - t;
            below += t;
        }
        let u = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
        let mean = n1f * n2f / 2.0;
        let var = n1f * n2f / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)).max(1.0));
        if var <= 0.0 {
            // Every sample in one bucket: the distributions do not differ.
            return Some(1.0);
        }
        let z = ((u - mean).abs() - 0.5).max(0.0) / var.sqrt();
        Some((2.0 * (1.0 - phi(z))).clamp(0.0, 1.0))
    }

    #[test]
    fn thresholds_parse_and_bad_ones_say_why() {
        let t = parse_thresholds("ttft_p99>+10%, goodput<-5%").unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert!(t[0].rises && (t[0].fraction - 0.10).abs() < 1e-12);
        assert!(!t[1].rises && (t[1].fraction - 0.05).abs() < 1e-12);
        for (bad, why) in [
            ("ttft_p98>+10%", "unknown metric"),
            ("ttft_p99>+10", "percentage"),
            ("ttft_p99=10%", "expected"),
            ("ttft_p99>-10%", "a rise is"),
            ("goodput<+5%", "a rise is"),
            ("goodput{model=a}<-5%", "no per-model figure"),
            ("ttft_p99{model=}>+10%", "METRIC{model=NAME}"),
            ("ttft_p99{lora=a}>+10%", "METRIC{model=NAME}"),
            ("ttft_p98{model=a}>+10%", "no per-model figure"),
        ] {
            let e = parse_thresholds(bad).err().unwrap_or_default();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // A model's figures by name.
        let t = parse_thresholds("ttft_p99{model=sql-lora}>+10%,failure_rate{model=base}>+1%")
            .unwrap_or_default();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].metric, "ttft_p99{model=sql-lora}");
        assert_eq!(base_metric(&t[1].metric), "failure_rate");
    }

    /// The p-value of the U test against a hand computation: samples 1..=5
    /// against 6..=10 rank-separate completely, U = 0, z = (12.5 - 0.5) /
    /// sqrt(25 * 11 / 12) = 2.5067, p = 0.0122.
    #[test]
    fn mann_whitney_matches_a_hand_computation() {
        let a: Vec<[u64; 2]> = (1..=5).map(|v| [v, 1]).collect();
        let b: Vec<[u64; 2]> = (6..=10).map(|v| [v, 1]).collect();
        let p = mann_whitney(&a, &b).unwrap_or(f64::NAN);
        assert!((p - 0.0122).abs() < 2e-4, "{p}");
        // The same distribution: no difference.
        let p = mann_whitney(&a, &a).unwrap_or(f64::NAN);
        assert!(p > 0.9, "{p}");
        // All in one bucket on both sides.
        assert_eq!(mann_whitney(&[[5, 10]], &[[5, 7]]), Some(1.0));
        assert_eq!(mann_whitney(&[], &a), None);
    }

    /// The worst 2% half as slow again, so the p99 rises by 50%: the p99 test
    /// sees it at once, the p50 test not at all, and a rank test over the whole
    /// distribution far less surely.
    #[test]
    fn a_tail_regression_moves_its_quantile_test() {
        let base: Vec<[u64; 2]> = (1..=10_000).map(|v| [v, 1]).collect();
        let mut new: Vec<[u64; 2]> = (1..=10_000)
            .map(|v| [if v > 9_800 { v * 3 / 2 } else { v }, 1])
            .collect();
        new.sort_unstable();
        let p99 = quantile_test(&base, &new, 0.99, (1.0, 1.0)).unwrap_or(f64::NAN);
        let p50 = quantile_test(&base, &new, 0.50, (1.0, 1.0)).unwrap_or(f64::NAN);
        let whole = mann_whitney(&base, &new).unwrap_or(f64::NAN);
        assert!(p99 < 0.001, "p99 test: {p99}");
        assert!(p50 > 0.5, "p50 test: {p50}");
        assert!(whole > 1000.0 * p99, "rank test: {whole}, p99 test: {p99}");
        // Samples that move together (each run worth a twentieth of its
        // count) tell less: the same shift is far less sure, and a smaller
        // one is within what two such runs differ by.
        let correlated = quantile_test(&base, &new, 0.99, (20.0, 20.0)).unwrap_or(0.0);
        assert!(
            correlated > 1000.0 * p99,
            "correlated p99 test: {correlated}"
        );
        let shift: Vec<[u64; 2]> = base.iter().map(|[v, c]| [v + 200, *c]).collect();
        let (apart, together) = (
            mean_test(&base, &shift, (1.0, 1.0)).unwrap_or(1.0),
            mean_test(&base, &shift, (20.0, 20.0)).unwrap_or(0.0),
        );
        assert!(apart < 0.01 && together > 0.05, "{apart}, {together}");
        // The same distribution: nothing.
        assert!(quantile_test(&base, &base, 0.99, (1.0, 1.0)).unwrap_or(0.0) > 0.9);
        assert!(mean_test(&base, &base, (1.0, 1.0)).unwrap_or(0.0) > 0.9);
    }

    #[test]
    fn a_breach_needs_the_change_and_significance() {
        let row = |metric: &str, base, new, p| Row {
            metric: metric.into(),
            unit: "ms",
            base,
            new,
            p_value: p,
            lower_is_better: true,
        };
        let rows = vec![
            row("ttft_p99", 100.0, 120.0, Some(0.5)),
            row("e2e_p50", 100.0, 130.0, Some(0.001)),
            row("goodput", 10.0, 9.0, None),
        ];
        let t = parse_thresholds("ttft_p99>+10%,e2e_p50>+10%,goodput<-5%").unwrap_or_default();
        let b = judge(&rows, &t, 0.05).unwrap_or_default();
        let hit: Vec<&str> = b.iter().map(|b| b.threshold.metric.as_str()).collect();
        assert_eq!(hit, ["e2e_p50", "goodput"]);
        assert!(b[0].message.contains("+30.0%"), "{}", b[0].message);
        let missing = parse_thresholds("tpot_p99>+10%").unwrap_or_default();
        assert!(judge(&rows, &missing, 0.05).is_err());
    }

    #[test]
    fn the_normal_cdf_is_accurate() {
        assert!((phi(0.0) - 0.5).abs() < 1e-7);
        assert!((phi(1.96) - 0.975).abs() < 1e-4);
        assert!((phi(-1.96) - 0.025).abs() < 1e-4);
    }
}
