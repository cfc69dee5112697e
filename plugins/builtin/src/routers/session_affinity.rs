//! `session_affinity`: each conversation (trajectory) stays on one endpoint.

use super::{NoConfig, ranked};
use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{derive, hash_str};

/// A conversation stays on one endpoint: the trajectory's id, hashed with
/// the run seed, picks it (consistent hashing), whatever the load.
#[derive(Debug)]
pub struct SessionAffinity {
    seed: u64,
}

impl SessionAffinity {
    /// The policy, seeded by the run.
    pub fn new(_cfg: NoConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { seed: ctx.seed })
    }
}

impl Router for SessionAffinity {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let key = derive(self.seed, &[0x5E55_1011, hash_str(ctx.route.trajectory_id)]);
        Ok(ranked(key, ctx.in_flight.len().max(1)).next().unwrap_or(0))
    }
}

batchbench_contract::register_router! {
    name: "session_affinity",
    description: "routing policy: each conversation (trajectory) stays on one endpoint",
    example: "{}",
    config: NoConfig,
    build: SessionAffinity::new,
}
