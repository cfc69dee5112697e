//! What one shard of a sharded run sends: the trajectories it owns (the
//! [`Shard`] arithmetic is the contract's).

use batchbench_contract::plan::Trajectory;
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::shard::Shard;

/// A workload source that yields only the trajectories one shard owns, in
/// their order; its description counts this shard's trajectories.
pub struct ShardedSource {
    inner: Box<dyn WorkloadSource>,
    shard: Shard,
    next_ordinal: u64,
}

impl ShardedSource {
    /// `inner`, keeping what `shard` owns.
    pub fn new(inner: Box<dyn WorkloadSource>, shard: Shard) -> Self {
        Self {
            inner,
            shard,
            next_ordinal: 0,
        }
    }

    fn describe(&self, mut info: WorkloadInfo) -> WorkloadInfo {
        let whole = info.planned_trajectories;
        info.planned_trajectories = whole.map(|t| self.shard.share(t));
        // Requests split with their trajectories: exact for equal
        // trajectories, a progress estimate otherwise.
        info.planned_requests = match (info.planned_requests, whole) {
            (Some(r), Some(t)) if t > 0 => {
                let share = self.shard.share(t);
                Some((u128::from(r) * u128::from(share) / u128::from(t)) as u64)
            }
            (r, _) => r,
        };
        info
    }
}

impl WorkloadSource for ShardedSource {
    fn info(&self) -> WorkloadInfo {
        self.describe(self.inner.info())
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        loop {
            let next = self.inner.next_trajectory()?;
            let ordinal = self.next_ordinal;
            self.next_ordinal += 1;
            // An error is every shard's: the unsharded run would stop on it too.
            if next.is_err() || self.shard.owns(ordinal) {
                return Some(next);
            }
        }
    }

    fn final_info(&mut self) -> WorkloadInfo {
        let info = self.inner.final_info();
        self.describe(info)
    }

    fn needs_tokenizer(&self) -> bool {
        self.inner.needs_tokenizer()
    }
}
