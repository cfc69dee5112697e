//! Checking a spec before anything is loaded or sent: numbers in range,
//! shards, hosts, and every result file creatable. Bad input names the field.

use super::target::Target;
use crate::exit::Failure;
use batchbench_contract::plugin::WorkloadInfo;
use batchbench_contract::spec::{AdmissionMode, ClientThreads, RunSpec};
use std::path::Path;

/// Checks what can be checked of a spec before anything is loaded: numbers in
/// range, and every result file creatable. Bad input names the field.
pub fn check(spec: &RunSpec) -> Result<Target, Failure> {
    if let ClientThreads::Fixed(threads) = spec.target.client_threads
        && !(1..=ClientThreads::MAX).contains(&threads)
    {
        return Err(Failure::bad(format!(
            "target.client_threads (--client-threads) must be `auto` or between 1 and {}, got {threads}",
            ClientThreads::MAX
        )));
    }
    let a = &spec.admission;
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        return Err(Failure::bad(format!(
            "admission.time_scale (--time-scale) must be a positive number, got {}",
            a.time_scale
        )));
    }
    if a.max_active == Some(0) {
        return Err(Failure::bad(
            "admission.max_active must be at least 1 (absent: no cap)",
        ));
    }
    spec.load.check().map_err(Failure::bad)?;
    if let Some(audio) = &spec.audio {
        audio.check().map_err(Failure::bad)?;
        if let Some(p) = audio.files.as_deref().filter(|p| !p.exists()) {
            return Err(Failure::bad(format!(
                "audio.files (--audio-files) {}: no such file or directory",
                p.display()
            )));
        }
    }
    if let Some(h) = &spec.target.ids.header {
        batchbench_contract::spec::RequestIdSpec::check_header(h)
            .map_err(|e| Failure::bad(format!("target.ids.header (--request-id-header): {e}")))?;
    }
    if let Some(url) = &spec.output.otlp_endpoint {
        batchbench_plugins::reporters::otlp_spans::Endpoint::parse(url)
            .map_err(|e| Failure::bad(format!("output.otlp_endpoint (--otlp-endpoint): {e}")))?;
    }
    response_formats(spec)?;
    if let Some(m) = &spec.target.mix {
        m.check()
            .map_err(|e| Failure::bad(format!("target.mix (--model-mix): {e}")))?;
    }
    model_bounds(spec)?;
    check_shard(spec)?;
    let converging = spec.load.target_ci.is_some() || spec.load.until_decided;
    if converging && spec.shard.is_some() {
        return Err(Failure::bad(
            "load.target_ci (--target-ci) and load.until_decided (a series' --min-requests, --point-max-secs) stop a run once its own figures are sure: each shard would stop on its share's alone; run it unsharded",
        ));
    }
    if spec.load.warmup.is_some() && spec.shard.is_some() {
        return Err(Failure::bad(
            "load.warmup auto (--warmup auto) finds a run's transient from its own time series: each shard would cut on its share alone; run it unsharded, or give load.warmup_secs",
        ));
    }
    if spec.load.until_decided && !spec.slo.iter().any(|b| b.percentile.is_some()) {
        return Err(Failure::bad(
            "load.until_decided runs until every percentile bound of the SLO is decided: give one in slo (--slo), such as e2e_p99<=2s",
        ));
    }
    if let Some(r) = spec.max_failure_rate
        && !(0.0..=1.0).contains(&r)
    {
        return Err(Failure::bad(format!(
            "max_failure_rate (--max-failure-rate) must be a share from 0.0 to 1.0, got {r}"
        )));
    }
    if spec.load.duration_secs.is_some() && spec.output.dry_run {
        return Err(Failure::bad(
            "load.duration_secs (--duration-secs) draws the workload without end: a dry run cannot list it",
        ));
    }
    let t = &spec.target;
    if !(t.request_timeout_secs.is_finite() && t.request_timeout_secs > 0.0) {
        return Err(Failure::bad(format!(
            "target.request_timeout_secs must be a positive number, got {}",
            t.request_timeout_secs
        )));
    }
    let target = Target::resolve(t)?;
    if let Some(m) = &t.mix {
        m.pools(target.endpoints() as usize)
            .map_err(|e| Failure::bad(format!("target.mix.endpoints (--endpoint-models): {e}")))?;
    }
    for (flag, path) in spec.output.files() {
        check_output(flag, path)?;
    }
    if let Some(dir) = &spec.output.output_dir {
        check_output_dir(dir)?;
    }
    if spec.target.max_response_bytes == Some(0) {
        return Err(Failure::bad(
            "target.max_response_bytes (--max-response-bytes) must be at least 1 (absent: 64 MiB)",
        ));
    }
    if let Some(ca) = &spec.target.ca_cert {
        batchbench_engine::transport::TlsConfig::read_ca(ca).map_err(|e| Failure::bad(e.0))?;
    }
    if let Some(l) = spec.output.metrics_linger_secs
        && !(l.is_finite() && l >= 0.0)
    {
        return Err(Failure::bad(format!(
            "output.metrics_linger_secs (--metrics-linger) must be a number of seconds, 0 or more, got {l}"
        )));
    }
    let m = &spec.server_metrics;
    if !(m.interval_secs.is_finite() && (0.05..=3600.0).contains(&m.interval_secs)) {
        return Err(Failure::bad(format!(
            "server_metrics.interval_secs (--metrics-interval) must be from 0.05 to 3600 seconds, got {}",
            m.interval_secs
        )));
    }
    for url in &m.urls {
        if url != "target" && !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Failure::bad(format!(
                "--server-metrics {url}: an http:// or https:// URL, or `target` for the target server's /metrics"
            )));
        }
    }
    Ok(target)
}

/// A shard must be one of its count, of a run with a seed (every shard must
/// draw the same workload), and its caps must leave it something to run.
fn check_shard(spec: &RunSpec) -> Result<(), Failure> {
    spec.start_at_ms().map_err(Failure::bad)?;
    let Some(shard) = spec.shard else {
        return Ok(());
    };
    shard
        .check()
        .map_err(|e| Failure::bad(format!("shard (--shard): {e}")))?;
    if spec.seed.is_none() {
        return Err(Failure::bad(format!(
            "shard (--shard {shard}) needs a seed (--seed): every shard must draw the same workload"
        )));
    }
    let caps = [
        (
            "admission.max_active (--max-active-agents, or --users with a plugin workload)",
            spec.admission.max_active,
        ),
        (
            "load.max_concurrency (--max-concurrency)",
            spec.load.max_concurrency,
        ),
    ];
    for (name, cap) in caps {
        if let Some(n) = cap
            && shard.share(n) == 0
        {
            return Err(Failure::bad(format!(
                "{name} {n} leaves shard {shard} nothing: split a run over at most {n} shards"
            )));
        }
    }
    Ok(())
}

/// The answer formats of a run with `--response-format`, its schema files
/// read and checked: one that cannot be read, is not JSON or is not a JSON
/// Schema is bad input naming the file (and the line of a JSON error), as is
/// `--ignore-eos` beside a format (it would force text past the answer).
pub(crate) fn response_formats(
    spec: &RunSpec,
) -> Result<Option<Vec<batchbench_contract::spec::ResponseFormat>>, Failure> {
    use batchbench_contract::spec::{ResponseFormat, ResponseFormatSpec};
    let Some(asked) = &spec.target.response_format else {
        return Ok(None);
    };
    let flag = "target.response_format (--response-format)";
    if spec.codec.config.get("ignore_eos") == Some(&serde_json::Value::Bool(true)) {
        return Err(Failure::bad(format!(
            "{flag} and --ignore-eos: a structured answer ends where its JSON does, and --ignore-eos would force text past it: drop one"
        )));
    }
    let formats = match asked {
        ResponseFormatSpec::JsonObject => vec![ResponseFormat {
            name: "json_object".into(),
            schema: None,
        }],
        ResponseFormatSpec::JsonSchema { schemas } => schemas
            .iter()
            .map(|path| {
                let at = || format!("{flag}: {}", path.display());
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Failure::bad(format!("{}: {e}", at())))?;
                let schema: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    Failure::bad(format!(
                        "{}: line {}, column {}: not JSON: {e}",
                        at(),
                        e.line(),
                        e.column()
                    ))
                })?;
                batchbench_engine::measurement::structured::check_schema(&schema)
                    .map_err(|e| Failure::bad(format!("{}: {e}", at())))?;
                let name = path
                    .file_stem()
                    .map_or_else(|| "schema".into(), |s| s.to_string_lossy().into_owned());
                Ok(ResponseFormat {
                    name,
                    schema: Some(schema),
                })
            })
            .collect::<Result<Vec<_>, Failure>>()?,
    };
    Ok(Some(formats))
}

/// A results directory must be creatable and must not hold a complete run: no
/// result is overwritten.
pub fn check_output_dir(dir: &Path) -> Result<(), Failure> {
    let bad = |m: &str| Failure::bad(format!("--output-dir {}: {m}", dir.display()));
    if dir.as_os_str().is_empty() {
        return Err(bad("the path is empty"));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(bad("exists and is not a directory"));
    }
    if dir.join(batchbench_contract::results::files::RUN).exists() {
        return Err(bad(
            "already holds a run's results (run.json): choose another directory or remove it",
        ));
    }
    // The nearest existing ancestor must be a directory to create it in.
    match dir.ancestors().skip(1).find(|a| a.exists()) {
        Some(a) if !a.as_os_str().is_empty() && !a.is_dir() => Err(bad(&format!(
            "cannot be created: {} is not a directory",
            a.display()
        ))),
        _ => Ok(()),
    }
}
/// A result file must be creatable: its directory exists, and it is not itself a
/// directory.
pub fn check_output(flag: &str, path: &Path) -> Result<(), Failure> {
    if path.as_os_str().is_empty() {
        return Err(Failure::bad(format!("{flag}: the path is empty")));
    }
    if path.is_dir() {
        return Err(Failure::bad(format!(
            "{flag} {}: is a directory, not a file",
            path.display()
        )));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Failure::bad(format!(
            "{flag} {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// A duration run needs a workload drawn without end, and an endless workload
/// needs a duration.
pub(super) fn check_endless(spec: &RunSpec, info: &WorkloadInfo) -> Result<(), Failure> {
    match (spec.load.duration_secs, info.endless) {
        (Some(_), false) => Err(Failure::bad(format!(
            "load.duration_secs (--duration-secs) draws the workload for as long as needed, and the {} workload ({}) is finite: drop the duration, or use a workload that can go on (finite_batch, synthetic_agents)",
            spec.workload.name, info.mode
        ))),
        (None, true) => Err(Failure::bad(format!(
            "the {} workload goes on without end: give load.duration_secs (--duration-secs)",
            spec.workload.name
        ))),
        // A closed loop runs every trajectory at once unless capped: endless
        // trajectories need the cap.
        (Some(_), true)
            if info.planned_trajectories.is_none()
                && spec.admission.mode == AdmissionMode::ClosedLoop
                && !spec.load.is_open()
                && spec.admission.max_active.is_none() =>
        {
            Err(Failure::bad(format!(
                "the {} workload starts trajectories without end over the duration: cap how many run at once (admission.max_active, --max-active-agents) or give a session rate",
                spec.workload.name
            )))
        }
        _ => Ok(()),
    }
}

/// SLO bounds that name a model (`ttft_p99{model=NAME}<=300ms`): each names a
/// model of the run's mix.
fn model_bounds(spec: &RunSpec) -> Result<(), Failure> {
    for b in &spec.slo {
        let Some(name) = b.model.as_deref() else {
            continue;
        };
        let Some(mix) = &spec.target.mix else {
            return Err(Failure::bad(format!(
                "slo (--slo): {b} names model '{name}', but the run sends one model: give --model-mix"
            )));
        };
        if mix.index(name).is_none() {
            let names: Vec<&str> = mix.models.iter().map(|m| m.name.as_str()).collect();
            return Err(Failure::bad(format!(
                "slo (--slo): {b} names model '{name}', which is not in --model-mix ({})",
                names.join(", ")
            )));
        }
    }
    Ok(())
}

/// Every model the workload's requests name (a replayed trajectory's own) is
/// a model of the run's mix: a request for another would go to a model the
/// user did not ask for, or be refused by the server mid-run. Without a mix
/// the run has one model, `--model`, and every request goes to it (a
/// manifest exported with its recorded model aliases replays against any
/// server); the run says so.
pub(super) fn check_named_models(spec: &RunSpec, info: &WorkloadInfo) -> Result<(), Failure> {
    let Some(first) = info.models.first() else {
        return Ok(());
    };
    let at = |i: usize| {
        info.models_at
            .get(i)
            .map_or_else(String::new, |w| format!("{w}: "))
    };
    let Some(mix) = &spec.target.mix else {
        // Once a process: a capacity search runs many points.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
            "note: the workload names {} model(s) ('{first}'{}); without --model-mix every request goes to --model {}",
            info.models.len(),
            if info.models.len() > 1 { ", ..." } else { "" },
            spec.target.model
            );
        });
        return Ok(());
    };
    for (i, m) in info.models.iter().enumerate() {
        if mix.index(m).is_none() {
            let names: Vec<&str> = mix.models.iter().map(|x| x.name.as_str()).collect();
            return Err(Failure::bad(format!(
                "{}field model: '{m}' is not a model of --model-mix ({})",
                at(i),
                names.join(", ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_model_outside_the_mix_is_refused_where_it_is_named() {
        let mut spec = RunSpec::new(batchbench_contract::spec::default_codec());
        let info = WorkloadInfo {
            models: vec!["sql".into(), "chat".into()],
            models_at: vec![
                "plans.jsonl:1: trajectory t-a".into(),
                "plans.jsonl:2: trajectory t-b".into(),
            ],
            ..WorkloadInfo::default()
        };
        // Without a mix: the run's one model takes them (a note, no error).
        assert!(check_named_models(&spec, &info).is_ok());
        spec.target.mix = Some(batchbench_contract::models::ModelMixSpec {
            models: batchbench_contract::models::parse_mix("base=1,sql@base=1")
                .unwrap_or_else(|e| panic!("{e}")),
            ..Default::default()
        });
        let e = check_named_models(&spec, &info).expect_err("chat is not in the mix");
        assert_eq!(
            format!("{:#}", e.error),
            "plans.jsonl:2: trajectory t-b: field model: 'chat' is not a model of --model-mix (base, sql)"
        );
    }
}
