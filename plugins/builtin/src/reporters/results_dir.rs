//! `results_dir`: the versioned results directory of one run (`--output-dir`),
//! the files [`batchbench_contract::results`] describes. `requests.jsonl` and
//! `trajectories.jsonl` grow as requests and trajectories end; the histograms,
//! the time series and last `run.json` are written whole when the run ends (also
//! after Ctrl+C), so a directory without `run.json` is one whose run never
//! finished.

use super::agent_events::{AgentEvents, AgentEventsConfig};
use super::requests_jsonl::{RequestsJsonl, RequestsJsonlConfig};
use batchbench_contract::plugin::{PluginError, Reporter, RequestRecord, TrajectoryRecord};
use batchbench_contract::record::{RunInfo, Summary};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::results::{
    self, Histograms, RequestSpan, RunDoc, ServerScrape, TimeSeriesBuilder, files,
};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Config of [`ResultsDir`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultsDirConfig {
    /// The directory (created with its parents). One that already holds a
    /// complete run (`run.json`) is refused, so that no result is overwritten.
    pub path: PathBuf,
}

/// Writes a results directory.
#[derive(Debug)]
pub struct ResultsDir {
    cfg: ResultsDirConfig,
    requests: RequestsJsonl,
    trajectories: AgentEvents,
    series: TimeSeriesBuilder,
    histograms: Option<Histograms>,
    server: Option<std::io::BufWriter<std::fs::File>>,
}

impl ResultsDir {
    /// A reporter with this config.
    pub fn new(cfg: ResultsDirConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        let requests = RequestsJsonl::new(
            RequestsJsonlConfig {
                path: cfg.path.join(files::REQUESTS),
            },
            ctx,
        )?;
        let trajectories = AgentEvents::new(
            AgentEventsConfig {
                path: cfg.path.join(files::TRAJECTORIES),
            },
            ctx,
        )?;
        Ok(Self {
            cfg,
            requests,
            trajectories,
            series: TimeSeriesBuilder::default(),
            histograms: None,
            server: None,
        })
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "results_dir".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }

    /// Writes `name` whole: a temporary file, renamed over it.
    fn write_json(&self, name: &str, value: &impl Serialize) -> Result<(), PluginError> {
        let path = self.cfg.path.join(name);
        let text = serde_json::to_vec(value).map_err(|e| self.fail(e))?;
        write_whole(&path, &text).map_err(|e| self.fail(format!("{name}: {e}")))
    }
}

fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".part");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

impl Reporter for ResultsDir {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        let dir = &self.cfg.path;
        if dir.exists() && !dir.is_dir() {
            return Err(self.fail("exists and is not a directory"));
        }
        if dir.join(files::RUN).exists() {
            return Err(self.fail(format!(
                "already holds a run's results ({}): choose another directory or remove it",
                files::RUN
            )));
        }
        std::fs::create_dir_all(dir).map_err(|e| self.fail(e))?;
        self.requests.on_start(run)?;
        self.trajectories.on_start(run)
    }

    fn on_clock_start(&mut self, started_unix: f64) {
        self.requests.on_clock_start(started_unix);
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        let t = &rec.timing;
        self.series.add(&RequestSpan {
            sent: secs(t.sent),
            end: secs(t.last_attempt + rec.latency),
            first_token: rec.ttft.map(|f| secs(t.last_attempt + f)),
            ttft: rec.ttft.map(secs),
            ok: rec.failure.is_none(),
            output_tokens: rec.usage.as_ref().map_or(0, |u| u.completion_tokens),
        });
        self.requests.on_request(rec)
    }

    fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
        self.trajectories.on_trajectory(rec)
    }

    fn on_server_metrics(&mut self, scrape: &ServerScrape) -> Result<(), PluginError> {
        if self.server.is_none() {
            let path = self.cfg.path.join(files::SERVER_METRICS);
            let f = std::fs::File::create(&path).map_err(|e| self.fail(e))?;
            self.server = Some(std::io::BufWriter::new(f));
        }
        let mut line = serde_json::to_vec(scrape).map_err(|e| self.fail(e))?;
        line.push(b'\n');
        match self.server.as_mut().map(|f| f.write_all(&line)) {
            Some(Err(e)) => Err(self.fail(format!("{}: {e}", files::SERVER_METRICS))),
            _ => Ok(()),
        }
    }

    fn on_histograms(&mut self, h: &Histograms) -> Result<(), PluginError> {
        self.histograms = Some(h.clone());
        Ok(())
    }

    fn on_finish(&mut self, run: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        // Both line files are flushed even when one fails.
        let requests = self.requests.on_finish(run, summary);
        let trajectories = self.trajectories.on_finish(run, summary);
        requests.and(trajectories)?;
        if let Some(f) = self.server.as_mut() {
            f.flush().map_err(|e| PluginError::Failed {
                plugin: "results_dir".into(),
                message: format!("{}: {e}", files::SERVER_METRICS),
            })?;
        }
        self.write_json(
            files::HISTOGRAMS,
            &self.histograms.clone().unwrap_or_default(),
        )?;
        self.write_json(files::TIMESERIES, &self.series.build())?;
        let doc = RunDoc {
            format: results::FORMAT.to_owned(),
            version: results::VERSION,
            run: run.clone(),
            summary: summary.clone(),
        };
        let text = serde_json::to_vec_pretty(&doc).map_err(|e| self.fail(e))?;
        write_whole(&self.cfg.path.join(files::RUN), &text)
            .map_err(|e| self.fail(format!("{}: {e}", files::RUN)))
    }
}

batchbench_contract::register_reporter! {
    name: "results_dir",
    description: "a versioned results directory: run record, per-request and per-trajectory lines, histograms, time series",
    example: r#"{"path": "results/run-1"}"#,
    config: ResultsDirConfig,
    build: ResultsDir::new,
}
