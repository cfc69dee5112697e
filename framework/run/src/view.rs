//! Flat configuration views (`run.config`) and their CSV columns, declared
//! together by `flat_view!`, so that a column's name is written once: as a
//! field of the view, or as a field of the run record.

use batchbench_contract::spec::RunSpec;

/// A CSV column, or a shared group of them in its place.
#[derive(Debug, Clone, Copy)]
pub enum Column {
    /// `name` (a field of the run record, see
    /// [`RunInfo::fields`](batchbench_contract::record::RunInfo::fields)), or
    /// `name=field` (a column named differently from its field).
    Name(&'static str),
    /// A group, in place.
    Group(&'static [Column]),
}

/// The headers of `columns`, groups expanded, in order.
pub fn names(columns: &[Column]) -> Vec<&'static str> {
    let mut out = Vec::new();
    for c in columns {
        match c {
            Column::Name(n) => out.push(*n),
            Column::Group(g) => out.extend(names(g)),
        }
    }
    out
}

/// A view as the JSON of `run.config`.
pub fn json<T: serde::Serialize>(v: T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// A number as a flag gave it: whole numbers without a fraction.
pub fn whole(x: f64) -> serde_json::Value {
    if x.fract() == 0.0 && (0.0..9.0e15).contains(&x) {
        serde_json::Value::from(x as u64)
    } else {
        serde_json::Value::from(x)
    }
}

/// `records![a, b = field]`: columns the run record fills.
macro_rules! records {
    ($($n:ident $(= $f:ident)?),* $(,)?) => {
        &[$($crate::view::Column::Name(concat!(stringify!($n) $(, "=", stringify!($f))?))),*]
    };
}

/// A flat configuration view and its CSV columns, declared as one ordered
/// list of entries (`//` comments between them):
///
/// - `record a, b = field;` columns the run record fills (its figures, facts);
/// - `column name: Type;` a field of the view, and its column, here;
/// - `hidden name: Type;` a field of the view that is no column;
/// - `flatten name: Type;` another flat view, its fields inline, its columns here;
/// - `group PATH;` a shared group of columns here.
///
/// The struct derives `Serialize`; its `COLUMNS` are the columns in order.
macro_rules! flat_view {
    (@go $h:tt [$($f:tt)*] [$($c:tt)*] record $($n:ident $(= $fl:ident)?),+; $($r:tt)*) => {
        $crate::view::flat_view! { @go $h [$($f)*]
            [$($c)* $($crate::view::Column::Name(concat!(stringify!($n) $(, "=", stringify!($fl))?)),)+]
            $($r)* }
    };
    (@go $h:tt [$($f:tt)*] [$($c:tt)*] column $n:ident: $t:ty; $($r:tt)*) => {
        $crate::view::flat_view! { @go $h [$($f)* $n: $t,]
            [$($c)* $crate::view::Column::Name(stringify!($n)),] $($r)* }
    };
    (@go $h:tt [$($f:tt)*] [$($c:tt)*] hidden $n:ident: $t:ty; $($r:tt)*) => {
        $crate::view::flat_view! { @go $h [$($f)* $n: $t,] [$($c)*] $($r)* }
    };
    (@go $h:tt [$($f:tt)*] [$($c:tt)*] flatten $n:ident: $t:ty; $($r:tt)*) => {
        $crate::view::flat_view! { @go $h [$($f)* #[serde(flatten)] $n: $t,]
            [$($c)* $crate::view::Column::Group(<$t>::COLUMNS),] $($r)* }
    };
    (@go $h:tt [$($f:tt)*] [$($c:tt)*] group $g:path; $($r:tt)*) => {
        $crate::view::flat_view! { @go $h [$($f)*]
            [$($c)* $crate::view::Column::Group($g),] $($r)* }
    };
    (@go [$(#[$m:meta])* $v:vis $name:ident [$($lt:lifetime)?]] [$($f:tt)*] [$($c:tt)*]) => {
        $(#[$m])*
        #[derive(Debug, serde::Serialize)]
        $v struct $name<$($lt)?> { $($f)* }
        impl<$($lt)?> $name<$($lt)?> {
            /// Its CSV columns, in order.
            $v const COLUMNS: &'static [$crate::view::Column] = &[$($c)*];
        }
    };
    ($(#[$m:meta])* $v:vis struct $name:ident $(<$lt:lifetime>)?; $($body:tt)*) => {
        $crate::view::flat_view! { @go [$(#[$m])* $v $name [$($lt)?]] [] [] $($body)* }
    };
}
pub(crate) use flat_view;

flat_view! {
    /// The load flags in the flat configuration view, beside the command's
    /// rate, and the load model's columns after the rate's.
    pub struct LoadView;
    record arrival;
    column burstiness: Option<f64>;
    column ramp_up_secs: Option<f64>;
    // `DURATION@RATE` steps, as `--stages` takes them.
    column stages: Option<String>;
    column max_concurrency: Option<u64>;
    column duration_secs: Option<f64>;
    record at_deadline, achieved_rate, latency_from_intended_p50_ms,
        latency_from_intended_p90_ms, latency_from_intended_p99_ms,
        ttft_from_intended_p50_ms, ttft_from_intended_p99_ms, queue_wait_p50_ms,
        queue_wait_p99_ms, send_lag_p50_ms, send_lag_p99_ms, late_sends, warmup_requests,
        cut_at_deadline, load_verdict, dropped_arrivals;
    hidden warmup_secs: Option<f64>;
}

impl LoadView {
    /// The view of `spec`'s load.
    pub fn of(spec: &RunSpec) -> Self {
        let l = &spec.load;
        Self {
            burstiness: l.burstiness,
            ramp_up_secs: l.ramp_up_secs,
            stages: (!l.stages.is_empty()).then(|| {
                l.stages
                    .iter()
                    .map(|s| format!("{}s@{}", s.secs, s.rate))
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            max_concurrency: l.max_concurrency,
            duration_secs: l.duration_secs,
            warmup_secs: l.warmup_secs,
        }
    }
}

/// The load model's columns, after a command's own rate column.
pub const LOAD_COLUMNS: &[Column] = LoadView::COLUMNS;

/// The figures both commands report after their legacy columns.
pub const FIGURE_COLUMNS: &[Column] = records![
    planned_prompt_tokens,
    counted_prompt_tokens,
    worst_prompt_drift_tokens,
    latency_mean_ms,
    latency_max_ms,
    ttft_p50_ms,
    ttft_p90_ms,
    ttft_p99_ms,
    itl_p50_ms,
    itl_p90_ms,
    itl_p99_ms,
    tpot_p50_ms,
    tpot_p90_ms,
    tpot_p99_ms,
];

/// The columns of `--slo`, after the load model's: the bounds, whether all
/// held, the ones that failed, and goodput (empty without an SLO).
pub const SLO_COLUMNS: &[Column] =
    records![slo, slo_passed, slo_failed_bounds, good_requests, goodput];

/// The columns of the prefix-cache estimates that see sharing across
/// trajectories, after the SLO columns.
pub const CACHE_COLUMNS: &[Column] = records![
    global_estimated_cached_input_tokens,
    rank_estimated_cached_input_tokens,
    cache_block_tokens,
];

/// The columns of connection reuse, retries' cost and the server's own
/// timings, after every earlier group (empty where the server reports none).
pub const TRUTH_COLUMNS: &[Column] = records![
    reconnects,
    server_closes_connections,
    retry_seconds,
    latency_all_attempts_p50_ms,
    latency_all_attempts_p99_ms,
    server_prompt_p50_ms,
    server_predicted_p50_ms,
    client_minus_server_p50_ms,
    client_minus_server_p99_ms,
];

/// The 95% confidence intervals of the percentile columns before them, last
/// of all so that every earlier column keeps its position; empty where a
/// percentile has too few samples for a bound on both sides.
pub const INTERVAL_COLUMNS: &[Column] = records![
    latency_p50_ms_ci_low,
    latency_p50_ms_ci_high,
    latency_p90_ms_ci_low,
    latency_p90_ms_ci_high,
    latency_p99_ms_ci_low,
    latency_p99_ms_ci_high,
    latency_mean_ms_ci_low,
    latency_mean_ms_ci_high,
    ttft_p50_ms_ci_low,
    ttft_p50_ms_ci_high,
    ttft_p90_ms_ci_low,
    ttft_p90_ms_ci_high,
    ttft_p99_ms_ci_low,
    ttft_p99_ms_ci_high,
    itl_p50_ms_ci_low,
    itl_p50_ms_ci_high,
    itl_p90_ms_ci_low,
    itl_p90_ms_ci_high,
    itl_p99_ms_ci_low,
    itl_p99_ms_ci_high,
    tpot_p50_ms_ci_low,
    tpot_p50_ms_ci_high,
    tpot_p90_ms_ci_low,
    tpot_p90_ms_ci_high,
    tpot_p99_ms_ci_low,
    tpot_p99_ms_ci_high,
    latency_from_intended_p50_ms_ci_low,
    latency_from_intended_p50_ms_ci_high,
    latency_from_intended_p90_ms_ci_low,
    latency_from_intended_p90_ms_ci_high,
    latency_from_intended_p99_ms_ci_low,
    latency_from_intended_p99_ms_ci_high,
    ttft_from_intended_p50_ms_ci_low,
    ttft_from_intended_p50_ms_ci_high,
    ttft_from_intended_p99_ms_ci_low,
    ttft_from_intended_p99_ms_ci_high,
    requests_per_second_ci_low,
    requests_per_second_ci_high,
];

/// The GPUs' energy over the run, where an exporter reported it (a DCGM
/// exporter scraped with `--server-metrics`); empty otherwise. After the
/// intervals, so that every earlier column keeps its position.
pub const ENERGY_COLUMNS: &[Column] = records![
    energy_joules,
    energy_source,
    joules_per_output_token,
    joules_per_request,
    joules_per_1k_prompt_tokens,
    mean_power_watts,
    peak_power_watts,
];

/// The columns of reasoning models, after the energy's: the time to the
/// first answer token, the reasoning phase and the token split, then the time
/// per output token of each phase (empty for a run whose replies did not
/// reason).
pub const REASONING_COLUMNS: &[Column] = records![
    ttfat_p50_ms,
    ttfat_p90_ms,
    ttfat_p99_ms,
    reasoning_duration_p50_ms,
    reasoning_duration_p99_ms,
    total_reasoning_tokens,
    reasoning_tokens_source,
    total_answer_tokens,
    reasoning_only_replies,
    tpot_reasoning_p50_ms,
    tpot_reasoning_p99_ms,
    tpot_answer_p50_ms,
    tpot_answer_p99_ms,
];

/// The client's own load, last of all so that every earlier column keeps its
/// position: why the client limited the run (its reasons joined by `+`,
/// empty when it did not), its threads' busy share and its scheduling delay;
/// then the arrivals dropped after waiting too long for a concurrency slot.
pub const CLIENT_COLUMNS: &[Column] = records![
    client_bound,
    client_busy_share,
    scheduling_delay_p99_ms,
    dropped_waiting
];

/// The inter-token latency of each phase of replies that reasoned and then
/// answered, after the client's load so that every earlier column keeps its
/// position (empty for a run whose replies did not reason, or did not stream).
pub const PHASE_ITL_COLUMNS: &[Column] = records![
    itl_reasoning_p50_ms,
    itl_reasoning_p99_ms,
    itl_answer_p50_ms,
    itl_answer_p99_ms,
];

/// Structured outputs, last of all (empty for a run that asked for none):
/// the format, the answers checked and the valid share with its 95%
/// interval.
pub const STRUCTURED_COLUMNS: &[Column] = records![
    response_format,
    structured_checked,
    structured_valid_share,
    structured_valid_share_ci_low,
    structured_valid_share_ci_high,
];

/// A run of several models: each model's successes, `name=count;...` in
/// the mix's order (empty for a run of one model).
pub const MODEL_COLUMNS: &[Column] = records![models];

/// The columns after the load model's: the SLO's, the cache estimates', the
/// truth columns, the intervals, the energy, reasoning, the client's load
/// each phase's inter-token latency and the structured outputs.
pub const OUTCOME_COLUMNS: &[Column] = &[
    Column::Group(SLO_COLUMNS),
    Column::Group(CACHE_COLUMNS),
    Column::Group(TRUTH_COLUMNS),
    Column::Group(INTERVAL_COLUMNS),
    Column::Group(ENERGY_COLUMNS),
    Column::Group(REASONING_COLUMNS),
    Column::Group(CLIENT_COLUMNS),
    Column::Group(PHASE_ITL_COLUMNS),
    Column::Group(STRUCTURED_COLUMNS),
    Column::Group(MODEL_COLUMNS),
];

#[cfg(test)]
mod tests {
    use super::names;
    use crate::commands::{agent, batchbench};

    #[test]
    fn no_command_promises_a_column_twice() {
        for p in [&batchbench::PROFILE, &agent::PROFILE] {
            let n = names(p.csv_columns);
            let mut seen = std::collections::BTreeSet::new();
            for c in &n {
                let header = c.split('=').next().unwrap_or(c);
                assert!(seen.insert(header), "{}: {header} twice", p.command);
            }
        }
    }
}
