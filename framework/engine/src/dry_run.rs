//! The dry run: the plan, one JSON line per request, with nothing sent.

use crate::options::EngineError;
use batchbench_contract::plan::PlannedRequest;
use batchbench_contract::plugin::WorkloadSource;
use serde::Serialize;
use std::io::Write;

/// One line of a dry run.
#[derive(Debug, Serialize)]
struct DryRunLine<'a> {
    agent_id: u64,
    trajectory_id: &'a str,
    request_index: u64,
    #[serde(flatten)]
    request: &'a PlannedRequest,
}

/// Totals of a dry run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DryRunStats {
    /// Trajectories planned.
    pub trajectories: u64,
    /// Requests planned.
    pub requests: u64,
    /// Sum of planned prompt tokens.
    pub prompt_tokens: u64,
    /// Sum of planned output tokens.
    pub output_tokens: u64,
}

/// Prints the plan, one JSON line per request, sending nothing.
pub fn dry_run(
    source: &mut dyn WorkloadSource,
    out: &mut dyn Write,
) -> Result<DryRunStats, EngineError> {
    let mut stats = DryRunStats::default();
    let io = |e: std::io::Error| EngineError::Internal(format!("cannot write the plan: {e}"));
    let mut agent_id = 0;
    while let Some(t) = source.next_trajectory() {
        let t = t?;
        stats.trajectories += 1;
        for (i, r) in t.requests.enumerate() {
            stats.requests += 1;
            stats.prompt_tokens += u64::from(r.prompt_tokens.unwrap_or(0));
            stats.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
            let line = DryRunLine {
                agent_id,
                trajectory_id: &t.id,
                request_index: i as u64,
                request: &r,
            };
            serde_json::to_writer(&mut *out, &line)
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            out.write_all(b"\n").map_err(io)?;
        }
        agent_id += 1;
    }
    out.flush().map_err(io)?;
    Ok(stats)
}
