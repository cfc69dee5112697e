//! `least_outstanding`: the endpoint with the fewest of this client's
//! requests in flight.

use super::NoConfig;
use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use std::sync::atomic::{AtomicU64, Ordering};

/// The endpoint with the fewest of this client's requests in flight; among
/// equals, the next in turn (so that a light load spreads too).
#[derive(Debug, Default)]
pub struct LeastOutstanding {
    next: AtomicU64,
}

impl LeastOutstanding {
    /// The policy (it has no settings).
    pub fn new(_cfg: NoConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self::default())
    }
}

impl Router for LeastOutstanding {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let n = ctx.in_flight.len().max(1);
        let start = (self.next.fetch_add(1, Ordering::Relaxed) % n as u64) as usize;
        Ok((0..n)
            .map(|k| (start + k) % n)
            .min_by_key(|&i| ctx.in_flight.get(i).copied().unwrap_or(0))
            .unwrap_or(0))
    }
}

batchbench_contract::register_router! {
    name: "least_outstanding",
    description: "routing policy: the endpoint with the fewest of this client's requests in flight",
    example: "{}",
    config: NoConfig,
    build: LeastOutstanding::new,
}
