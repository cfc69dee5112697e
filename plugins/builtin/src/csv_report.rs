//! `csv`: appends one row per run to a CSV file, writing the header when the file
//! is new. Columns are the ones existing notebooks read, then our additions.

use crate::timefmt::rfc3339;
use batchbench_core::engine::RunInfo;
use batchbench_core::metrics::{LatencyStats, Summary};
use batchbench_core::plugin::{PluginError, Reporter};
use batchbench_core::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;

/// The columns of a `batchbench` results CSV, in order.
pub const BATCHBENCH_COLUMNS: &[&str] = &[
    "timestamp",
    "model",
    "dataset_path",
    "dataset_size",
    "users",
    "requests_per_user",
    "total_requests",
    "successful_requests",
    "failed_requests",
    "total_prompt_tokens",
    "total_completion_tokens",
    "total_duration_seconds",
    "requests_per_second",
    "prompt_tokens_per_second",
    "completion_tokens_per_second",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "output_tokens",
    "output_vary",
    "output_lognorm_mu",
    "output_lognorm_sigma",
    "output_lognorm_max",
    "sglang",
    "request_timeout_secs",
    "max_retries",
    "retry_delay_ms",
    "host",
    "endpoint",
    // Additions.
    "retries",
    "interrupted",
    "seed",
    "tokenizer_model",
    "input_tokens",
    "input_vary",
    "input_prefix_overlap",
    "input_lognorm_mu",
    "input_lognorm_sigma",
    "input_lognorm_max",
    "ignore_eos",
    "stream",
    "failures_by_kind",
    "server_cached_tokens",
    "planned_prompt_tokens",
    "counted_prompt_tokens",
    "worst_prompt_drift_tokens",
    "latency_mean_ms",
    "latency_max_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
];

/// The columns of a `batchbench-agent` results CSV, in order.
pub const AGENT_COLUMNS: &[&str] = &[
    "timestamp",
    "model",
    "workload_mode",
    "agent_plans_jsonl",
    "agent_plans_sha256",
    "trajectory_schema_version",
    "admission_mode",
    "time_scale",
    "agents",
    "requested_max_active_agents",
    "max_active_agents",
    "late_admissions",
    "max_admission_lag_ms",
    "live_block_fallbacks",
    "completed_agents",
    "planned_tool_invocations",
    "total_requests",
    "successful_requests",
    "failed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "estimated_cached_input_tokens",
    "total_tool_call_latency_seconds",
    "total_duration_seconds",
    "last_agent_admitted_seconds",
    "final_drain_seconds",
    "requests_per_second",
    "input_tokens_per_second",
    "output_tokens_per_second",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "agent_end_to_end_latency_p50_ms",
    "agent_end_to_end_latency_p90_ms",
    "agent_end_to_end_latency_p99_ms",
    "host",
    "endpoint",
    "sglang",
    "ignore_eos",
    "user_tagging",
    "dp_rank_perfect_routing",
    "dp_rank_perfect_routing_num",
    "seed",
    "replay_initial_overhead_tokens",
    "replay_turn_overhead_tokens",
    "agent_events_jsonl",
    "tool_call_latency_ms",
    "tool_call_latency_lognorm_mu",
    "tool_call_latency_lognorm_median_ms",
    "tool_call_latency_lognorm_sigma",
    "tool_call_latency_lognorm_max_ms",
    // Additions.
    "retries",
    "interrupted",
    "tokenizer_model",
    "stream",
    "failures_by_kind",
    "server_cached_tokens",
    "server_cached_ratio",
    "planned_prompt_tokens",
    "counted_prompt_tokens",
    "worst_prompt_drift_tokens",
    "latency_mean_ms",
    "latency_max_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
];

/// Config of [`CsvReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// Output file; created with a header, or appended to.
    pub path: PathBuf,
    /// Column set: `batchbench` or `agent`.
    #[serde(default = "default_schema")]
    pub schema: String,
}

fn default_schema() -> String {
    "batchbench".into()
}

/// Writes the CSV row.
#[derive(Debug)]
pub struct CsvReport {
    cfg: CsvConfig,
    columns: &'static [&'static str],
}

impl CsvReport {
    /// Validates the config.
    pub fn new(cfg: CsvConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let columns = match cfg.schema.as_str() {
            "batchbench" => BATCHBENCH_COLUMNS,
            "agent" => AGENT_COLUMNS,
            other => {
                return Err(PluginError::Config {
                    plugin: "csv".into(),
                    message: format!(
                        "schema: unknown column set '{other}' (known: batchbench, agent)"
                    ),
                });
            }
        };
        Ok(Self { cfg, columns })
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "csv".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }
}

fn put_latency(map: &mut HashMap<String, String>, prefix: &str, s: Option<LatencyStats>) {
    if let Some(s) = s {
        map.insert(format!("{prefix}_p50_ms"), format!("{:.3}", s.p50_ms));
        map.insert(format!("{prefix}_p90_ms"), format!("{:.3}", s.p90_ms));
        map.insert(format!("{prefix}_p99_ms"), format!("{:.3}", s.p99_ms));
        map.insert(format!("{prefix}_mean_ms"), format!("{:.3}", s.mean_ms));
        map.insert(format!("{prefix}_max_ms"), format!("{:.3}", s.max_ms));
    }
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The values of one row: the run's configuration, then the summary.
pub fn row_values(info: &RunInfo, s: &Summary) -> HashMap<String, String> {
    let mut map = HashMap::new();
    if let serde_json::Value::Object(cfg) = &info.config {
        for (k, v) in cfg {
            map.insert(k.clone(), scalar(v));
        }
    }
    if let Ok(serde_json::Value::Object(sum)) = serde_json::to_value(s) {
        for (k, v) in sum {
            if !v.is_object() && !v.is_array() {
                map.insert(k, scalar(&v));
            }
        }
    }
    map.insert("timestamp".into(), rfc3339(info.started_unix));
    map.insert("model".into(), info.model.clone());
    map.insert("seed".into(), info.seed.to_string());
    map.insert(
        "total_duration_seconds".into(),
        format!("{:.6}", s.total_duration_seconds),
    );
    map.insert(
        "requests_per_second".into(),
        format!("{:.6}", s.requests_per_second),
    );
    map.insert(
        "prompt_tokens_per_second".into(),
        format!("{:.6}", s.prompt_tokens_per_second),
    );
    map.insert(
        "completion_tokens_per_second".into(),
        format!("{:.6}", s.completion_tokens_per_second),
    );
    map.insert(
        "failures_by_kind".into(),
        s.failures_by_kind
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";"),
    );
    // The agent column set names some totals differently.
    let w = &info.workload;
    let aliases: [(&str, String); 14] = [
        ("workload_mode", w.mode.clone()),
        (
            "agent_plans_jsonl",
            w.manifest_path.clone().unwrap_or_default(),
        ),
        (
            "agent_plans_sha256",
            w.manifest_sha256.clone().unwrap_or_default(),
        ),
        (
            "trajectory_schema_version",
            w.schema_version.map(|v| v.to_string()).unwrap_or_default(),
        ),
        (
            "planned_tool_invocations",
            w.planned_requests
                .map(|v| v.to_string())
                .unwrap_or_default(),
        ),
        ("completed_agents", s.trajectories_completed.to_string()),
        ("max_active_agents", s.max_active_observed.to_string()),
        ("total_input_tokens", s.total_prompt_tokens.to_string()),
        ("total_output_tokens", s.total_completion_tokens.to_string()),
        (
            "input_tokens_per_second",
            format!("{:.6}", s.prompt_tokens_per_second),
        ),
        (
            "output_tokens_per_second",
            format!("{:.6}", s.completion_tokens_per_second),
        ),
        (
            "total_tool_call_latency_seconds",
            format!("{:.6}", s.total_delay_seconds),
        ),
        (
            "last_agent_admitted_seconds",
            format!("{:.6}", s.last_admitted_seconds),
        ),
        (
            "server_cached_ratio",
            match s.server_cached_tokens {
                Some(c) if s.estimated_cached_input_tokens > 0 => {
                    format!("{:.6}", c as f64 / s.estimated_cached_input_tokens as f64)
                }
                _ => String::new(),
            },
        ),
    ];
    for (k, v) in aliases {
        map.insert(k.to_owned(), v);
    }
    put_latency(&mut map, "latency", s.latency);
    put_latency(&mut map, "ttft", s.ttft);
    put_latency(&mut map, "itl", s.itl);
    put_latency(&mut map, "tpot", s.tpot);
    put_latency(&mut map, "agent_end_to_end_latency", s.trajectory_e2e);
    map
}

impl Reporter for CsvReport {
    fn on_start(&mut self, _run: &RunInfo) -> Result<(), PluginError> {
        // Fail before anything is sent when the file cannot take our row.
        if let Ok(f) = std::fs::File::open(&self.cfg.path) {
            let mut first = String::new();
            std::io::BufReader::new(f)
                .read_line(&mut first)
                .map_err(|e| self.fail(e))?;
            let first = first.trim_end();
            if !first.is_empty() && first != self.columns.join(",") {
                return Err(self.fail("the file exists with other columns; choose a new path"));
            }
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cfg.path)
            .map_err(|e| self.fail(e))?;
        Ok(())
    }

    fn on_finish(&mut self, info: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let values = row_values(info, summary);
        let empty = std::fs::metadata(&self.cfg.path).map_or(true, |m| m.len() == 0);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cfg.path)
            .map_err(|e| self.fail(e))?;
        let mut w = csv::Writer::from_writer(file);
        if empty {
            w.write_record(self.columns).map_err(|e| self.fail(e))?;
        }
        let row: Vec<&str> = self
            .columns
            .iter()
            .map(|c| values.get(*c).map_or("", String::as_str))
            .collect();
        w.write_record(&row).map_err(|e| self.fail(e))?;
        w.flush().map_err(|e| self.fail(e))?;
        Ok(())
    }
}

batchbench_core::register_reporter! {
    name: "csv",
    description: "appends one CSV row per run (header on a new file): totals, percentiles and the run's configuration",
    example: r#"{"path": "results.csv", "schema": "batchbench"}"#,
    config: CsvConfig,
    build: CsvReport::new,
}
