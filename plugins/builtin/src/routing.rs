//! Routing policies: routers that pick the endpoint of a fleet (several
//! `--host`s) for each request, as the router in front of a fleet of replicas
//! would. Each is a [`Router`] whose [`Router::choose_endpoint`] is called when
//! the request goes out (after its due time and its concurrency permit), with
//! this client's requests in flight per endpoint and the prompt's block hashes.
//!
//! Which policies depend on the client's own state: `round_robin` (a counter)
//! and `least_outstanding` (this client's in-flight counts), and
//! `prefix_affinity` with a load bound, pick differently when a run is split
//! into shards; `random`, `session_affinity` and `prefix_affinity` without a
//! load bound pick from the request alone, so a sharded run routes every
//! request as the whole run would.

use batchbench_contract::plugin::{EndpointContext, PluginError, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{derive, hash_str, mix64};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// The config of a policy that takes none.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

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

/// The endpoint ranked first for `key` by rendezvous (highest random weight)
/// hashing, and the rest in order: a consistent hash, under which a key
/// keeps its endpoint and only a removed endpoint's keys move.
fn ranked(key: u64, n: usize) -> impl Iterator<Item = usize> {
    let mut order: Vec<(u64, usize)> = (0..n)
        .map(|i| (mix64(key ^ mix64(i as u64 + 0x51AB_1E00)), i))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.into_iter().map(|(_, i)| i)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn route(
        trajectory_id: &str,
        request_index: u64,
    ) -> batchbench_contract::plugin::RouteContext<'_> {
        batchbench_contract::plugin::RouteContext {
            seed: 9,
            agent_id: 0,
            routing_slot: 0,
            trajectory_id,
            request_index,
        }
    }

    fn ctx<'a>(
        trajectory_id: &'a str,
        in_flight: &'a [u32],
        block_hashes: &'a [u64],
    ) -> EndpointContext<'a> {
        EndpointContext {
            route: route(trajectory_id, 0),
            in_flight,
            block_hashes,
            block_tokens: 16,
        }
    }

    fn build() -> BuildContext {
        BuildContext {
            seed: 9,
            ..BuildContext::default()
        }
    }

    #[test]
    fn round_robin_takes_endpoints_in_turn() {
        let r = RoundRobin::new(NoConfig {}, &build()).unwrap();
        let picks: Vec<usize> = (0..6)
            .map(|_| r.choose_endpoint(&ctx("t", &[0, 0, 0], &[])).unwrap())
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn least_outstanding_picks_the_least_loaded_and_spreads_ties() {
        let r = LeastOutstanding::new(NoConfig {}, &build()).unwrap();
        for _ in 0..4 {
            assert_eq!(r.choose_endpoint(&ctx("t", &[3, 1, 2], &[])).unwrap(), 1);
        }
        let picks: std::collections::BTreeSet<usize> = (0..3)
            .map(|_| r.choose_endpoint(&ctx("t", &[0, 0, 0], &[])).unwrap())
            .collect();
        assert_eq!(picks.len(), 3, "ties go round");
    }

    #[test]
    fn session_affinity_keeps_a_conversation_and_spreads_conversations() {
        let r = SessionAffinity::new(NoConfig {}, &build()).unwrap();
        let mut seen = [0u32; 4];
        for t in 0..400 {
            let id = format!("traj-{t}");
            let e = r.choose_endpoint(&ctx(&id, &[0; 4], &[])).unwrap();
            for load in [[9, 0, 0, 0], [0, 9, 9, 9]] {
                assert_eq!(r.choose_endpoint(&ctx(&id, &load, &[])).unwrap(), e);
            }
            seen[e] += 1;
        }
        assert!(seen.iter().all(|&k| (60..140).contains(&k)), "{seen:?}");
    }

    #[test]
    fn random_is_seeded_by_the_request() {
        let r = Random::new(NoConfig {}, &build()).unwrap();
        let pick = |t: &str, i: u64| {
            r.choose_endpoint(&EndpointContext {
                route: route(t, i),
                ..ctx(t, &[0; 4], &[])
            })
            .unwrap()
        };
        assert_eq!(pick("a", 3), pick("a", 3));
        let all: std::collections::BTreeSet<usize> = (0..64).map(|i| pick("a", i)).collect();
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn prefix_affinity_follows_the_first_blocks_within_its_load_bound() {
        let unbounded = PrefixAffinity::new(
            PrefixAffinityConfig {
                blocks: 2,
                load_bound: 0.0,
                ..PrefixAffinityConfig::default()
            },
            &build(),
        )
        .unwrap();
        // Equal first two blocks: equal endpoint, whatever follows.
        let a = unbounded
            .choose_endpoint(&ctx("x", &[0; 4], &[1, 2, 3]))
            .unwrap();
        let b = unbounded
            .choose_endpoint(&ctx("y", &[50, 50, 50, 50], &[1, 2, 99, 7]))
            .unwrap();
        assert_eq!(a, b);
        // Different prefixes spread.
        let spread: std::collections::BTreeSet<usize> = (0..64u64)
            .map(|k| {
                unbounded
                    .choose_endpoint(&ctx("x", &[0; 4], &[k, k + 1]))
                    .unwrap()
            })
            .collect();
        assert_eq!(spread.len(), 4);
        // Bounded: a hot prefix whose endpoint holds more than its share
        // spills to the next of its order.
        let bounded = PrefixAffinity::new(PrefixAffinityConfig::default(), &build()).unwrap();
        let home = bounded
            .choose_endpoint(&ctx("x", &[0; 4], &[1, 2, 3, 4]))
            .unwrap();
        let mut load = [1u32; 4];
        load[home] = 10;
        let spilled = bounded
            .choose_endpoint(&ctx("x", &load, &[1, 2, 3, 4]))
            .unwrap();
        assert_ne!(spilled, home);
        assert!(
            PrefixAffinity::new(
                PrefixAffinityConfig {
                    load_bound: 0.5,
                    ..PrefixAffinityConfig::default()
                },
                &build()
            )
            .is_err()
        );
    }
}
