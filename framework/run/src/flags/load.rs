//! The Load flags: a rate and its arrival process, stages, concurrency, warmup,
//! a duration, convergence and the SLO.

use super::{finite, positive, positive_number, secs};
use crate::exit::Failure;
use batchbench_contract::slo::{SloBound, SloMetric};
use batchbench_contract::spec::{Arrival, AtDeadline, Release, RunSpec, Stage};

/// A parsed `--stages` list.
#[derive(Debug, Clone, PartialEq)]
pub struct Stages(pub Vec<Stage>);

/// Parses a stage list: `DURATION@RATE` steps separated by commas, such as
/// `60s@10,60s@20,2m@40`.
pub fn stages(s: &str) -> Result<Stages, String> {
    s.split(',')
        .enumerate()
        .map(|(i, step)| {
            let (d, r) = step.split_once('@').ok_or_else(|| {
                format!(
                    "step {} '{step}' is not DURATION@RATE (such as 60s@10)",
                    i + 1
                )
            })?;
            Ok(Stage {
                secs: secs(d).map_err(|e| format!("step {}: {e}", i + 1))?,
                rate: positive_number(r).map_err(|e| format!("step {}: rate {e}", i + 1))?,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Stages)
}

/// An SLO: comma-separated bounds (see [`batchbench_contract::slo`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SloBounds(pub Vec<SloBound>);

/// `ttft_p99<=500ms,tpot_p90<=50ms,e2e<=20s`.
fn slo_bounds(s: &str) -> Result<SloBounds, String> {
    let bounds = s
        .split(',')
        .filter(|b| !b.trim().is_empty())
        .map(str::parse)
        .collect::<Result<Vec<SloBound>, String>>()?;
    if bounds.is_empty() {
        return Err("no bounds: give METRIC<=DURATION or METRIC_pNN<=DURATION, comma-separated, such as ttft_p99<=500ms,tpot_p90<=50ms".into());
    }
    Ok(SloBounds(bounds))
}

/// `constant`, `poisson` or `gamma`.
fn arrival(s: &str) -> Result<Arrival, String> {
    match s {
        "constant" => Ok(Arrival::Constant),
        "poisson" => Ok(Arrival::Poisson),
        "gamma" => Ok(Arrival::Gamma),
        _ => Err(format!("'{s}': one of constant, poisson, gamma")),
    }
}

/// `finish` or `cancel`.
fn at_deadline(s: &str) -> Result<AtDeadline, String> {
    match s {
        "finish" => Ok(AtDeadline::Finish),
        "cancel" => Ok(AtDeadline::Cancel),
        _ => Err(format!("'{s}': finish or cancel")),
    }
}

/// The load-model flags both commands share (each names its own rate flag).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoadArgs {
    /// How gaps between arrivals are drawn: constant, poisson or gamma (with
    /// --burstiness) [default: poisson].
    #[arg(long, value_parser = arrival, value_name = "KIND", help_heading = "Load")]
    pub arrival: Option<Arrival>,
    /// Gamma shape of the arrival gaps: 1 is Poisson, below 1 burstier, above 1
    /// more regular (with --arrival gamma).
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub burstiness: Option<f64>,
    /// Ramp the rate up linearly from 0 over this many seconds.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub ramp_up_secs: Option<f64>,
    /// A rate schedule instead of one rate: DURATION@RATE steps, such as
    /// 60s@10,60s@20,60s@40; arrivals end with the last step.
    #[arg(long, value_parser = stages, value_name = "STEPS", help_heading = "Load")]
    pub stages: Option<Stages>,
    /// Requests in flight at most; arrivals beyond it wait in a client queue whose
    /// wait is measured.
    #[arg(long, value_parser = positive, help_heading = "Load")]
    pub max_concurrency: Option<u64>,
    /// Drop an arrival, unsent, once it has waited this many seconds for a
    /// --max-concurrency slot, and count it (`dropped_waiting`): the load the
    /// server could not take in time is not sent late [default: wait].
    #[arg(long, value_parser = positive_number, value_name = "SECS", help_heading = "Load")]
    pub max_queue_wait_secs: Option<f64>,
    /// The first N requests sent are warmup: sent, excluded from the statistics,
    /// reported apart.
    #[arg(long, value_parser = positive, help_heading = "Load")]
    pub warmup_requests: Option<u64>,
    /// Requests due in the first S seconds are warmup.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub warmup_secs: Option<f64>,
    /// auto: find where the run's transient ends, from its own time series
    /// (MSER-5 on e2e latency, TTFT, send rate and prefix-cache hits), and
    /// leave the requests due before it out as warmup. The summary gives the
    /// steady window; records reach reporters once it is known.
    #[arg(long, value_name = "MODE", help_heading = "Load")]
    pub warmup: Option<batchbench_contract::spec::Warmup>,
    /// Run for S seconds, drawing the workload for as long as needed.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub duration_secs: Option<f64>,
    /// Requests in flight at the deadline of --duration-secs: finish (counted) or
    /// cancel (counted apart, not as failures) [default: finish].
    #[arg(long, value_parser = at_deadline, value_name = "POLICY", help_heading = "Load")]
    pub at_deadline: Option<AtDeadline>,
    /// Stop once every figure the run is judged by (the percentile bounds of
    /// --slo, else e2e p50 and p99) has a 95% interval within PCT percent of
    /// it; --duration-secs is the cap. The summary says after how many
    /// requests it converged, or what kept it from converging.
    #[arg(long, value_parser = positive_number, value_name = "PCT", help_heading = "Load")]
    pub target_ci: Option<f64>,
    /// Latency bounds the run is judged by, comma-separated: per request
    /// (ttft<=500ms: goodput counts the requests that met every one) or an
    /// aggregate percentile (ttft_p99<=500ms). Metrics: ttft, itl, tpot, e2e,
    /// queue_wait; TTFT and e2e count from the intended send time.
    #[arg(long, value_parser = slo_bounds, value_name = "BOUNDS", help_heading = "Load")]
    pub slo: Option<SloBounds>,
    /// Exit 1 when more than this share (0.0-1.0) of the measured requests
    /// failed. A run in which no request succeeded exits 1 regardless.
    #[arg(long, value_parser = finite, value_name = "SHARE", help_heading = "Load")]
    pub max_failure_rate: Option<f64>,
    /// Exit 1 when the client, not the server, limited the run: it dropped
    /// arrivals, sent late by a material share of the latency, or kept its
    /// threads busy (the summary's client_bound says which).
    #[arg(long, help_heading = "Load")]
    pub fail_if_client_bound: bool,
}

impl LoadArgs {
    /// Sets the load fields these flags (and the command's `rate` flag, named
    /// `rate_flag`) name; then checks the whole load spec, naming flags.
    pub fn apply(
        &self,
        spec: &mut RunSpec,
        rate: Option<f64>,
        rate_flag: &str,
        release: Release,
    ) -> Result<(), Failure> {
        if let Some(b) = &self.slo {
            spec.slo.clone_from(&b.0);
        }
        if self.max_failure_rate.is_some() {
            spec.max_failure_rate = self.max_failure_rate;
        }
        if self.fail_if_client_bound {
            spec.fail_if_client_bound = true;
        }
        // TTFT, TTFAT, ITL and TPOT exist only for streamed replies: without
        // --stream every request would miss such a bound, silently.
        let timed = spec.slo.iter().find(|b| {
            matches!(
                b.metric,
                SloMetric::Ttft | SloMetric::Ttfat | SloMetric::Itl | SloMetric::Tpot
            )
        });
        if let (Some(b), false) = (timed, spec.target.stream) {
            return Err(Failure::bad(format!(
                "--slo {b}: TTFT, TTFAT, ITL and TPOT are measured on streamed replies only: add --stream (or bound e2e)"
            )));
        }
        let l = &mut spec.load;
        l.release = release;
        if let Some(r) = rate {
            l.rate = Some(r);
            l.stages.clear();
        }
        if let Some(st) = &self.stages {
            if rate.is_some() {
                return Err(Failure::bad(format!(
                    "{rate_flag} and --stages: give one (each step carries its rate)"
                )));
            }
            l.stages.clone_from(&st.0);
            l.rate = None;
        }
        if let Some(a) = self.arrival {
            l.arrival = a;
        }
        if self.burstiness.is_some() {
            l.burstiness = self.burstiness;
            if self.arrival.is_none() && l.arrival != Arrival::Gamma {
                return Err(Failure::bad(
                    "--burstiness is the gamma shape: add --arrival gamma",
                ));
            }
        }
        for (v, field) in [
            (self.ramp_up_secs, &mut l.ramp_up_secs),
            (self.warmup_secs, &mut l.warmup_secs),
            (self.duration_secs, &mut l.duration_secs),
            (self.target_ci, &mut l.target_ci),
            (self.max_queue_wait_secs, &mut l.max_queue_wait_secs),
        ] {
            if v.is_some() {
                *field = v;
            }
        }
        for (v, field) in [
            (self.max_concurrency, &mut l.max_concurrency),
            (self.warmup_requests, &mut l.warmup_requests),
        ] {
            if v.is_some() {
                *field = v;
            }
        }
        if self.warmup.is_some() {
            l.warmup = self.warmup;
        }
        if let Some(p) = self.at_deadline {
            l.at_deadline = p;
        }
        l.check()
            .map_err(|e| Failure::bad(load_flag_names(&e, rate_flag)))
    }
}

/// A load-spec message in terms of flags: `load.rate` is the command's rate
/// flag, `load.x_y` is `--x-y`.
pub fn load_flag_names(message: &str, rate_flag: &str) -> String {
    let mut out = message.replace("load.rate", rate_flag);
    for field in [
        "arrival",
        "burstiness",
        "ramp_up_secs",
        "stages",
        "max_queue_wait_secs",
        "max_concurrency",
        "warmup_requests",
        "warmup_secs",
        "duration_secs",
        "at_deadline",
        "target_ci",
        "warmup",
    ] {
        out = out.replace(
            &format!("load.{field}"),
            &format!("--{}", field.replace('_', "-")),
        );
    }
    out
}
