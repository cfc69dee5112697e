//! `random`: a random endpoint per request, seeded by the run.

use super::NoConfig;
use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{derive, hash_str};

/// A uniformly random endpoint per request, drawn from the run seed and the
/// request's identity (equal seeds route equally, shards included).
#[derive(Debug)]
pub struct Random {
    seed: u64,
}

impl Random {
    /// The policy, seeded by the run.
    pub fn new(_cfg: NoConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { seed: ctx.seed })
    }
}

impl Router for Random {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let r = &ctx.route;
        let x = derive(
            self.seed,
            &[0x0A4D_0B1E, hash_str(r.trajectory_id), r.request_index],
        );
        Ok((x % ctx.in_flight.len().max(1) as u64) as usize)
    }
}

batchbench_contract::register_router! {
    name: "random",
    description: "routing policy: a random endpoint per request, seeded by the run",
    example: "{}",
    config: NoConfig,
    build: Random::new,
}
