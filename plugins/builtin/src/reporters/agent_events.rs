//! `agent_events`: one JSON line per trajectory (agent), written as each one ends,
//! so an interrupted run still leaves complete lines.

use batchbench_contract::plugin::{PluginError, Reporter, TrajectoryRecord};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::Summary;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// Config of [`AgentEvents`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEventsConfig {
    /// Output file (replaced).
    pub path: PathBuf,
}

/// Writes `agent_id, trajectory_id, routing_slot, dp_rank, scheduled_at_seconds,
/// admitted_at_seconds, queue_wait_seconds, finished_at_seconds, runtime_seconds,
/// completed` per trajectory.
#[derive(Debug)]
pub struct AgentEvents {
    cfg: AgentEventsConfig,
    file: Option<std::fs::File>,
}

impl AgentEvents {
    /// A reporter with this config.
    pub fn new(cfg: AgentEventsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg, file: None })
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "agent_events".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }
}

impl Reporter for AgentEvents {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, _run: &RunInfo) -> Result<(), PluginError> {
        self.file = Some(std::fs::File::create(&self.cfg.path).map_err(|e| self.fail(e))?);
        Ok(())
    }

    fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        // One write per line: a line is either wholly in the file or not at all.
        let mut line = serde_json::to_vec(rec).unwrap_or_default();
        line.push(b'\n');
        f.write_all(&line).map_err(|e| self.fail(e))
    }

    fn on_finish(&mut self, _run: &RunInfo, _summary: &Summary) -> Result<(), PluginError> {
        match self.file.as_mut().map(std::io::Write::flush) {
            Some(Err(e)) => Err(self.fail(e)),
            _ => Ok(()),
        }
    }
}

batchbench_contract::register_reporter! {
    name: "agent_events",
    description: "one JSON line per trajectory: admission, queue wait, routing slot, DP rank, runtime, completion",
    example: r#"{"path": "agent-events.jsonl"}"#,
    config: AgentEventsConfig,
    build: AgentEvents::new,
}
