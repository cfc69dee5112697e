//! Service-level objectives: the latency bounds a run is judged by, and goodput.
//!
//! A bound is `METRIC<=DURATION` (per request: every request is checked) or
//! `METRIC_pNN<=DURATION` (an aggregate percentile of the run), for example
//! `ttft_p99<=500ms,tpot_p90<=50ms,e2e<=20s`. Metrics: `ttft`, `ttfat`, `itl`,
//! `tpot`, `e2e`, `queue_wait`. Time to first token, time to first answer token
//! (after any reasoning) and end-to-end latency count from the request's
//! intended send time, which is what a user arriving on schedule waited (in a
//! closed loop it is when the request was ready, so the two agree). A request's
//! `itl` is its longest gap between tokens; one whose output cap was spent on
//! reasoning has no first answer token, and misses a per-request `ttfat` bound.
//!
//! In a run of several models (`--model-mix`) a bound may name one:
//! `ttft_p99{model=sql-lora}<=300ms` judges that model's requests alone.
//!
//! Goodput is the rate of measured requests that succeeded and met every
//! per-request bound (the DistServe definition), over the same time as the
//! run's request rate. Without per-request bounds it is the success rate.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// What a bound measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SloMetric {
    /// Time to first token, from the intended send time.
    Ttft,
    /// Time to the first answer token (after any reasoning), from the
    /// intended send time.
    Ttfat,
    /// Inter-token latency (per request: the longest gap).
    Itl,
    /// Time per output token after the first.
    Tpot,
    /// End-to-end latency, from the intended send time to the last byte.
    E2e,
    /// Wait for a concurrency slot in the client queue.
    QueueWait,
}

impl SloMetric {
    const ALL: [(&'static str, Self); 6] = [
        ("ttft", Self::Ttft),
        ("ttfat", Self::Ttfat),
        ("itl", Self::Itl),
        ("tpot", Self::Tpot),
        ("e2e", Self::E2e),
        ("queue_wait", Self::QueueWait),
    ];

    /// The name in a bound.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }
}

/// One bound of an SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SloBound {
    /// What is bounded.
    pub metric: SloMetric,
    /// The percentile (0 to 100] of an aggregate bound; `None`: every request.
    pub percentile: Option<f64>,
    /// The largest allowed value.
    pub max: Duration,
    /// The model of a mix whose requests alone it judges (`None`: all).
    pub model: Option<std::sync::Arc<str>>,
}

impl SloBound {
    /// Whether it judges a request sent to `model` (of a mix, if any).
    pub fn applies_to(&self, model: Option<&str>) -> bool {
        self.model.as_deref().is_none_or(|m| Some(m) == model)
    }
}

impl FromStr for SloBound {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let shape = || {
            format!(
                "malformed SLO bound '{s}': expected METRIC<=DURATION or METRIC_pNN<=DURATION, such as ttft_p99<=500ms or e2e<=20s"
            )
        };
        let (left, right) = s.split_once("<=").ok_or_else(shape)?;
        let (left, right) = (left.trim(), right.trim());
        // `{model=NAME}`: the model of a mix it judges alone.
        let (left, model) = match left.strip_suffix('}').and_then(|l| l.split_once('{')) {
            Some((l, label)) => {
                let name = label
                    .strip_prefix("model=")
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| {
                        format!("SLO bound '{s}': '{{{label}}}' is not a model label, such as {{model=sql-lora}}")
                    })?;
                (l.trim(), Some(std::sync::Arc::from(name)))
            }
            None => (left, None),
        };
        let (name, percentile) = match left.rsplit_once("_p") {
            Some((name, p))
                if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit() || b == b'.') =>
            {
                let p: f64 = p.parse().map_err(|_| shape())?;
                if !(p > 0.0 && p <= 100.0) {
                    return Err(format!(
                        "SLO bound '{s}': the percentile must be above 0 and at most 100, got {p}"
                    ));
                }
                (name, Some(p))
            }
            _ => (left, None),
        };
        let metric = SloMetric::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!(
                    "SLO bound '{s}': unknown metric '{name}' (expected ttft, ttfat, itl, tpot, e2e or queue_wait)"
                )
            })?;
        let max = parse_duration(right)
            .ok_or_else(|| format!("SLO bound '{s}': '{right}' is not a positive duration with a unit (us, ms or s), such as 500ms"))?;
        Ok(Self {
            metric,
            percentile,
            max,
            model,
        })
    }
}

/// `500ms`, `1.5s`, `250us`: a positive duration.
fn parse_duration(s: &str) -> Option<Duration> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return None;
    };
    let v: f64 = num.trim().parse().ok()?;
    let secs = v * scale;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

impl fmt::Display for SloBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.metric.name())?;
        if let Some(p) = self.percentile {
            write!(f, "_p{p}")?;
        }
        if let Some(m) = &self.model {
            write!(f, "{{model={m}}}")?;
        }
        let ms = self.max.as_secs_f64() * 1000.0;
        write!(f, "<={ms}ms")
    }
}

impl TryFrom<String> for SloBound {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<SloBound> for String {
    fn from(b: SloBound) -> Self {
        b.to_string()
    }
}

/// One request's figures, as the per-request bounds see them.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFigures {
    /// Time to first token from the intended send time (streamed replies).
    pub ttft: Option<Duration>,
    /// Time to the first answer token from the intended send time (streamed
    /// replies that answered).
    pub ttfat: Option<Duration>,
    /// The longest gap between two tokens (streamed replies).
    pub itl_max: Option<Duration>,
    /// Time per output token after the first (streamed, two tokens or more).
    pub tpot: Option<Duration>,
    /// From the intended send time to the last byte.
    pub e2e: Duration,
    /// Wait for a concurrency slot.
    pub queue_wait: Duration,
}

impl RequestFigures {
    fn get(&self, m: SloMetric) -> Option<Duration> {
        match m {
            SloMetric::Ttft => self.ttft,
            SloMetric::Ttfat => self.ttfat,
            SloMetric::Itl => self.itl_max,
            SloMetric::Tpot => self.tpot,
            SloMetric::E2e => Some(self.e2e),
            SloMetric::QueueWait => Some(self.queue_wait),
        }
    }
}

/// Whether a successful request meets every per-request bound. A request
/// without the figure a bound needs (no TTFT without streaming, no TPOT for a
/// one-token reply) meets it only where the figure cannot exist for any
/// request of that kind: `itl` and `tpot` for replies under two tokens.
pub fn meets(bounds: &[SloBound], f: &RequestFigures, completion_tokens: u64) -> bool {
    bounds
        .iter()
        .filter(|b| b.percentile.is_none())
        .all(|b| match f.get(b.metric) {
            Some(v) => v <= b.max,
            None => {
                matches!(b.metric, SloMetric::Itl | SloMetric::Tpot)
                    && completion_tokens < 2
                    && f.ttft.is_some()
            }
        })
}

/// The verdict of one bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SloResult {
    /// The bound as written canonically (`ttft_p99<=500ms`).
    pub bound: String,
    /// An aggregate bound: the run's percentile, in milliseconds (absent
    /// without samples).
    pub observed_ms: Option<f64>,
    /// A per-request bound: the share of measured successes that met it.
    pub share_met: Option<f64>,
    /// Whether the bound held (a per-request bound holds when every measured
    /// request met it; without samples nothing holds).
    pub met: bool,
    /// An aggregate bound: the 95% interval of the observed percentile, in
    /// milliseconds (absent while the sample is too small for one: a p99
    /// needs 368 requests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<[f64; 2]>,
    /// An aggregate bound whose interval reaches across the bound, or that
    /// has none: `met` says which side the percentile fell on, not which side
    /// the server's is on. A per-request bound is always decided.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
    /// An aggregate bound whose run had too few requests for any interval of
    /// its percentile, however independent (a p99 needs 368): only a longer
    /// run can decide it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub too_few: bool,
}

impl SloResult {
    /// Judges an aggregate bound of `max_ms` on its observed percentile,
    /// that percentile's interval, and `sure`: whether the server's
    /// percentile is at most the bound, decided at the 95% level (`None`:
    /// the sample cannot tell).
    pub fn percentile(
        bound: String,
        observed_ms: Option<f64>,
        interval_ms: Option<[f64; 2]>,
        max_ms: f64,
        sure: Option<bool>,
    ) -> Self {
        let met = observed_ms.is_some_and(|v| v <= max_ms);
        let decided = sure == Some(met);
        Self {
            bound,
            observed_ms,
            share_met: None,
            met,
            interval_ms,
            // Without samples the verdict (not met) is no estimate at all.
            undecided: observed_ms.is_some() && !decided,
            too_few: false,
        }
    }

    /// `met`, `missed` or `undecided`.
    pub fn verdict(&self) -> &'static str {
        match (self.undecided, self.met) {
            (true, _) => "undecided",
            (false, true) => "met",
            (false, false) => "missed",
        }
    }
}

/// How a run fared against its SLO.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SloReport {
    /// Every bound, in the order given.
    pub bounds: Vec<SloResult>,
    /// Every bound held.
    pub passed: bool,
    /// Measured successes that met every per-request bound.
    pub good_requests: u64,
    /// Those per second, over the time of the run's request rate.
    pub goodput: f64,
}

/// Per-request bound counts, folded in as requests end.
#[derive(Debug, Clone, Default)]
pub struct SloCounts {
    /// Measured successes that met every per-request bound.
    pub good: u64,
    /// Per bound (in the SLO's order): measured successes that met it.
    pub met: Vec<u64>,
}

impl SloCounts {
    /// Folds in one measured success; returns whether it met every
    /// per-request bound (it counts toward goodput).
    pub fn record(
        &mut self,
        bounds: &[SloBound],
        f: &RequestFigures,
        completion_tokens: u64,
        model: Option<&str>,
    ) -> bool {
        self.met.resize(bounds.len(), 0);
        let mut good = true;
        for (i, b) in bounds.iter().enumerate() {
            if b.percentile.is_some() || !b.applies_to(model) {
                continue;
            }
            if meets(std::slice::from_ref(b), f, completion_tokens) {
                self.met[i] += 1;
            } else {
                good = false;
            }
        }
        self.good += u64::from(good);
        good
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn bounds_parse_and_print_canonically() {
        let b: SloBound = "ttft_p99<=500ms".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            b,
            SloBound {
                metric: SloMetric::Ttft,
                percentile: Some(99.0),
                max: ms(500),
                model: None,
            }
        );
        assert_eq!(b.to_string(), "ttft_p99<=500ms");
        // A bound naming a model of a mix judges its requests alone.
        let b: SloBound = "ttft_p99{model=sql-lora}<=300ms"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.model.as_deref(), Some("sql-lora"));
        assert_eq!(b.to_string(), "ttft_p99{model=sql-lora}<=300ms");
        assert!(b.applies_to(Some("sql-lora")) && !b.applies_to(Some("base")));
        assert!(!b.applies_to(None));
        let e = "ttft_p99{lora=x}<=300ms"
            .parse::<SloBound>()
            .expect_err("refused");
        assert!(e.contains("is not a model label"), "{e}");
        let b: SloBound = " e2e <= 1.5s".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (b.metric, b.percentile, b.max),
            (SloMetric::E2e, None, ms(1500))
        );
        let b: SloBound = "queue_wait_p99.9<=250us"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.to_string(), "queue_wait_p99.9<=0.25ms");
        assert_eq!(b.to_string().parse::<SloBound>(), Ok(b));
    }

    #[test]
    fn bad_bounds_say_what_is_wrong() {
        for (text, needle) in [
            ("latency_p99<=1s", "unknown metric 'latency'"),
            ("ttft_p99<500ms", "malformed"),
            ("ttft_p0<=1s", "percentile"),
            ("ttft_p101<=1s", "percentile"),
            ("ttft<=500", "positive duration"),
            ("ttft<=-5ms", "positive duration"),
            ("ttft<=0s", "positive duration"),
        ] {
            let e = text.parse::<SloBound>().unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn a_request_is_good_only_when_it_meets_every_per_request_bound() {
        let bounds: Vec<SloBound> = ["ttft<=100ms", "tpot<=10ms", "e2e_p99<=1ms"]
            .iter()
            .map(|s| s.parse().unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let ok = RequestFigures {
            ttft: Some(ms(90)),
            ttfat: Some(ms(190)),
            tpot: Some(ms(9)),
            itl_max: Some(ms(30)),
            e2e: ms(500),
            queue_wait: Duration::ZERO,
        };
        assert!(
            meets(&bounds, &ok, 10),
            "the aggregate bound is not per request"
        );
        assert!(!meets(
            &bounds,
            &RequestFigures {
                ttft: Some(ms(101)),
                ..ok
            },
            10
        ));
        assert!(
            !meets(&bounds, &RequestFigures { ttft: None, ..ok }, 10),
            "no TTFT: not shown to meet it"
        );
        assert!(
            meets(&bounds, &RequestFigures { tpot: None, ..ok }, 1),
            "one token has no TPOT"
        );
        let mut counts = SloCounts::default();
        assert!(counts.record(&bounds, &ok, 10, None));
        assert!(!counts.record(
            &bounds,
            &RequestFigures {
                tpot: Some(ms(11)),
                ..ok
            },
            10,
            None,
        ));
        assert_eq!((counts.good, counts.met.clone()), (1, vec![2, 1, 0]));
    }

    #[test]
    fn a_reply_without_an_answer_misses_a_ttfat_bound() {
        let bounds: Vec<SloBound> = vec!["ttfat<=200ms".parse().unwrap_or_else(|e| panic!("{e}"))];
        let answered = RequestFigures {
            ttft: Some(ms(10)),
            ttfat: Some(ms(190)),
            ..RequestFigures::default()
        };
        assert!(meets(&bounds, &answered, 64));
        assert!(!meets(
            &bounds,
            &RequestFigures {
                ttfat: Some(ms(201)),
                ..answered
            },
            64
        ));
        // The cap was spent on reasoning: no answer, no first answer token.
        assert!(!meets(
            &bounds,
            &RequestFigures {
                ttfat: None,
                ..answered
            },
            64
        ));
        assert_eq!(
            "ttfat_p99<=2s".parse::<SloBound>().map(|b| b.metric),
            Ok(SloMetric::Ttfat)
        );
    }
}
