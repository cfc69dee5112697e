//! Where `analyze` places a request under a routing policy: the policy asked
//! as the run asks it, with the requests in service on each endpoint (those
//! sent within the assumed service time) as its in-flight counts, among the
//! endpoints of the request's model where a fleet's map narrows them.

use crate::options::EngineError;
use batchbench_contract::plugin::{EndpointContext, PluginError, RouteContext, Router};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One request to place.
pub(super) struct Placed<'a> {
    /// The policy (the pool's own instance, with a map).
    pub(super) router: &'a dyn Router,
    /// Its name, for errors.
    pub(super) name: &'a str,
    /// The endpoints of the request's model, where a map narrows them.
    pub(super) pool: Option<&'a [usize]>,
    /// When it is sent, and when it is taken to end (microseconds).
    pub(super) at: u64,
    pub(super) ends_at: u64,
}

impl Placed<'_> {
    /// The endpoint the policy picks; the request is then in service there
    /// until it ends. `in_service` holds, per endpoint, when its requests end.
    pub(super) fn place(
        &self,
        route: RouteContext<'_>,
        block_hashes: &[u64],
        block_tokens: u32,
        in_service: &mut [BinaryHeap<Reverse<u64>>],
    ) -> Result<u64, EngineError> {
        let endpoint = |i: usize| self.pool.map_or(i, |p| p[i]);
        let offered = self.pool.map_or(in_service.len(), <[usize]>::len);
        let in_flight: Vec<u32> = (0..offered)
            .map(|i| {
                let ends = &mut in_service[endpoint(i)];
                while ends.peek().is_some_and(|Reverse(e)| *e <= self.at) {
                    ends.pop();
                }
                u32::try_from(ends.len()).unwrap_or(u32::MAX)
            })
            .collect();
        let i = self.router.choose_endpoint(&EndpointContext {
            route,
            in_flight: &in_flight,
            block_hashes,
            block_tokens,
        })?;
        if i >= offered {
            return Err(EngineError::Plugin(PluginError::Config {
                plugin: self.name.to_owned(),
                message: format!("chose endpoint {i}, but was offered {offered}"),
            }));
        }
        let e = endpoint(i);
        in_service[e].push(Reverse(self.ends_at));
        Ok(e as u64)
    }
}
