//! `prefix_affinity`: requests that share a prompt prefix go to one endpoint.

use super::ranked;
use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{derive, hash_str, mix64};
use serde::{Deserialize, Serialize};

/// Config of [`PrefixAffinity`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrefixAffinityConfig {
    /// Blocks of the prompt's start that pick the endpoint.
    pub blocks: u32,
    /// Tokens per block (absent: the run's cache block size,
    /// `--cache-block-tokens`). The prefix that picks is `blocks x
    /// block_tokens` tokens, rounded down to the run's blocks.
    pub block_tokens: Option<u32>,
    /// The load bound: an endpoint takes a request only while it has fewer
    /// than `load_bound x` the mean in flight (plus this one), else the next
    /// endpoint of the prefix's order does (consistent hashing with bounded
    /// loads); 0: no bound, the prefix alone picks.
    pub load_bound: f64,
}

impl Default for PrefixAffinityConfig {
    fn default() -> Self {
        Self {
            blocks: 4,
            block_tokens: None,
            load_bound: 1.25,
        }
    }
}

/// The first `blocks` blocks of the prompt pick the endpoint (consistent
/// hashing), so that prompts sharing that prefix meet the same prefix cache;
/// with a load bound, a hot prefix spills to the next endpoint of its order
/// rather than drowning one. A prompt shorter than one block is placed by
/// its trajectory.
#[derive(Debug)]
pub struct PrefixAffinity {
    cfg: PrefixAffinityConfig,
    seed: u64,
}

impl PrefixAffinity {
    /// Validates the config.
    pub fn new(cfg: PrefixAffinityConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        let bad = |message: String| PluginError::Config {
            plugin: "prefix_affinity".into(),
            message,
        };
        if cfg.blocks == 0 {
            return Err(bad("blocks must be at least 1".into()));
        }
        if cfg.block_tokens == Some(0) {
            return Err(bad("block_tokens must be at least 1".into()));
        }
        if !(cfg.load_bound == 0.0 || (cfg.load_bound.is_finite() && cfg.load_bound >= 1.0)) {
            return Err(bad(format!(
                "load_bound must be 0 (no bound) or at least 1, got {}",
                cfg.load_bound
            )));
        }
        Ok(Self {
            cfg,
            seed: ctx.seed,
        })
    }

    /// The key of the request: the hash of its first blocks, else its
    /// trajectory's.
    fn key(&self, ctx: &EndpointContext<'_>) -> u64 {
        let run_block = u64::from(ctx.block_tokens.max(1));
        let tokens = u64::from(self.cfg.blocks)
            * u64::from(self.cfg.block_tokens.unwrap_or(ctx.block_tokens).max(1));
        let want = usize::try_from((tokens / run_block).max(1)).unwrap_or(usize::MAX);
        let have = ctx.block_hashes.len().min(want);
        match have.checked_sub(1) {
            Some(last) => mix64(ctx.block_hashes[last] ^ 0x9F1E_71C5),
            None => derive(self.seed, &[0x9F1E_71C5, hash_str(ctx.route.trajectory_id)]),
        }
    }
}

impl Router for PrefixAffinity {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let n = ctx.in_flight.len().max(1);
        let mut order = ranked(self.key(ctx), n);
        let first = order.next().unwrap_or(0);
        if self.cfg.load_bound == 0.0 {
            return Ok(first);
        }
        let load = |i: usize| u64::from(ctx.in_flight.get(i).copied().unwrap_or(0));
        let total: u64 = (0..n).map(load).sum();
        // Counting this request: an endpoint may hold up to the bound's share.
        let cap = (self.cfg.load_bound * (total + 1) as f64 / n as f64).ceil() as u64;
        Ok(std::iter::once(first)
            .chain(order)
            .find(|&i| load(i) < cap)
            .unwrap_or(first))
    }
}

batchbench_contract::register_router! {
    name: "prefix_affinity",
    description: "routing policy: the prompt's first blocks pick the endpoint (consistent hashing), within a load bound",
    example: r#"{"blocks": 4, "load_bound": 1.25}"#,
    config: PrefixAffinityConfig,
    build: PrefixAffinity::new,
}
