//! `round_robin`: each request to the next endpoint in turn.

use super::NoConfig;
use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use std::sync::atomic::{AtomicU64, Ordering};

/// Endpoints in turn: request `k` of the run goes to endpoint `k mod n`, in
/// the order requests go out.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicU64,
}

impl RoundRobin {
    /// The policy (it has no settings).
    pub fn new(_cfg: NoConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self::default())
    }
}

impl Router for RoundRobin {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let n = ctx.in_flight.len().max(1) as u64;
        Ok((self.next.fetch_add(1, Ordering::Relaxed) % n) as usize)
    }
}

batchbench_contract::register_router! {
    name: "round_robin",
    description: "routing policy: each request to the next endpoint in turn",
    example: "{}",
    config: NoConfig,
    build: RoundRobin::new,
}
