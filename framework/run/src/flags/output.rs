//! The Output flags: result files, the results directory, the client's own
//! metrics, and the server metrics and GPUs scraped beside the run.

use super::non_negative_number;
use batchbench_contract::spec::RunSpec;
use std::path::PathBuf;

/// Output flags, shared by `batchbench` and `batchbench-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Print truncated request and response payloads to stderr (never the API key).
    #[arg(short, long, help_heading = "Output")]
    pub verbose: bool,
    /// Print the plan (one JSON line per request) and send nothing.
    #[arg(long, help_heading = "Output")]
    pub dry_run: bool,
    /// Append a CSV row of totals, percentiles and configuration to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub results_csv: Option<PathBuf>,
    /// Write the complete summary (and the run's configuration) as JSON to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub summary_json: Option<PathBuf>,
    /// Write one JSON line per request (outcome, latency, TTFT, planned vs
    /// server-counted prompt tokens, cached tokens) to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_jsonl: Option<PathBuf>,
    /// Also write each streamed request's token arrival times (`token_ms`:
    /// milliseconds from its send, one per chunk that carried tokens) into
    /// --requests-jsonl and the results directory.
    #[arg(long, help_heading = "Output")]
    pub token_times: bool,
    /// Write the run's results directory here (created with its parents): the run
    /// record, one line per request and per trajectory, latency histograms and
    /// time series, for `batchbench report`. For sweep and capacity, the series'
    /// directory [default there: ./sweep-TIME or ./capacity-TIME, UTC].
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub output_dir: Option<PathBuf>,
    /// Serve the client's own live metrics during the run, a Prometheus
    /// exposition at http://ADDR/metrics: requests sent, ok and failed by
    /// kind, in flight, retries, tokens, send lag, TTFT, ITL and e2e
    /// histograms, the target rate and stage.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    pub metrics_listen: Option<String>,
    /// Go on serving --metrics-listen this many seconds after the run ends,
    /// so that a scraper reads the final figures (`batchbench_run_finished`
    /// is 1 then) [default: 0, close with the run].
    #[arg(long, value_name = "SECS", value_parser = non_negative_number, help_heading = "Output")]
    pub metrics_linger: Option<f64>,
    /// Send one OpenTelemetry span per request (send, first token, first
    /// answer token and end as events; endpoint, model, token counts and
    /// failure kind as attributes) to this OTLP/HTTP collector, e.g.
    /// http://localhost:4318 (`/v1/traces` is added to a URL with no path).
    /// Batched off the requests' path; spans a collector that is down or slow
    /// does not take are counted as dropped in the summary, never fatal.
    /// With --trace-context each span is the parent of the server's.
    #[arg(long, value_name = "URL", help_heading = "Output")]
    pub otlp_endpoint: Option<String>,
    /// No progress bar.
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
    /// Scrape the server's Prometheus metrics at this URL during the run
    /// (repeatable); `target` is the target server's own /metrics. Known vLLM,
    /// SGLang and llama.cpp metrics are summarised under common names; the
    /// results directory keeps every scrape. A failed scrape is counted, never
    /// fatal.
    #[arg(
        long = "server-metrics",
        value_name = "URL",
        help_heading = "Server metrics"
    )]
    pub server_metrics: Vec<String>,
    /// Seconds between scrapes of --server-metrics [default: 1].
    #[arg(long, value_name = "SECS", help_heading = "Server metrics")]
    pub metrics_interval: Option<f64>,
    /// Sample the GPUs beside the client during the run, at --metrics-interval:
    /// nvml (NVIDIA's management library, loaded at run time). Power, energy,
    /// utilization, memory, clocks and temperature, as a DCGM exporter's.
    #[arg(long, value_name = "SOURCE", help_heading = "Server metrics")]
    pub gpu_telemetry: Option<batchbench_contract::spec::GpuTelemetry>,
}

impl OutputArgs {
    /// Sets the output fields these flags name.
    pub fn apply(&self, spec: &mut RunSpec) {
        let o = &mut spec.output;
        o.verbose |= self.verbose;
        o.dry_run |= self.dry_run;
        o.quiet |= self.quiet;
        o.token_times |= self.token_times;
        for (flag, field) in [
            (&self.results_csv, &mut o.results_csv),
            (&self.summary_json, &mut o.summary_json),
            (&self.requests_jsonl, &mut o.requests_jsonl),
            (&self.output_dir, &mut o.output_dir),
        ] {
            if flag.is_some() {
                field.clone_from(flag);
            }
        }
        if self.metrics_listen.is_some() {
            o.metrics_listen.clone_from(&self.metrics_listen);
        }
        if self.otlp_endpoint.is_some() {
            o.otlp_endpoint.clone_from(&self.otlp_endpoint);
        }
        if self.metrics_linger.is_some() {
            o.metrics_linger_secs = self.metrics_linger;
        }
        if !self.server_metrics.is_empty() {
            spec.server_metrics.urls.clone_from(&self.server_metrics);
        }
        if let Some(i) = self.metrics_interval {
            spec.server_metrics.interval_secs = i;
        }
        if self.gpu_telemetry.is_some() {
            spec.server_metrics.gpu_telemetry = self.gpu_telemetry;
        }
    }
}
