//! The Distributed flags: a shard of a run, or its shards started together.

use crate::exit::Failure;
use batchbench_contract::spec::RunSpec;

/// The flags that split a run over several processes and start them together.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ShardArgs {
    /// Run shard I of N (such as 0/4): the trajectories (users, agents) whose
    /// position in the workload is I modulo N, with their share of the arrivals
    /// and of the caps. The N shards of one --seed together send exactly the
    /// requests of the unsharded run; `merge` joins their --output-dir.
    #[arg(long, value_parser = batchbench_contract::shard::Shard::parse, value_name = "I/N", help_heading = "Distributed", conflicts_with = "shards")]
    pub shard: Option<batchbench_contract::shard::Shard>,
    /// Run shard $JOB_COMPLETION_INDEX of N: the index a Kubernetes Indexed Job
    /// gives each pod.
    #[arg(long, value_parser = shard_count, value_name = "N", help_heading = "Distributed")]
    pub shards: Option<u32>,
    /// Start the benchmark clock at this time, RFC 3339 with a zone (such as
    /// 2026-12-04T10:00:00Z), so that every shard begins together; each records
    /// how late it started. Empty: as soon as the run is ready.
    #[arg(long, value_name = "TIME", help_heading = "Distributed")]
    pub start_at: Option<String>,
}

/// The environment variable of a Kubernetes Indexed Job's pod index.
pub const JOB_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

fn shard_count(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("expected a whole number of shards, got {s:?}"))?;
    batchbench_contract::shard::Shard::new(0, n)?;
    Ok(n)
}

impl ShardArgs {
    /// Sets the spec's shard and start time; `--shards` reads the index from
    /// the environment.
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), Failure> {
        if let Some(s) = self.shard {
            spec.shard = Some(s);
        }
        if let Some(n) = self.shards {
            let index = std::env::var(JOB_INDEX_ENV).ok();
            let s = batchbench_contract::shard::Shard::from_job_index(n, index.as_deref())
                .map_err(Failure::bad)?;
            spec.shard = Some(s);
        }
        if let Some(at) = &self.start_at {
            // Empty: start when ready (what a template leaves unset).
            spec.start_at = (!at.trim().is_empty()).then(|| at.clone());
        }
        spec.start_at_ms().map_err(Failure::bad)?;
        Ok(())
    }
}
