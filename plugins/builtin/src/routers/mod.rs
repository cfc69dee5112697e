//! Routers: decorators that add a request's identity (headers, body fields),
//! and routing policies that pick the endpoint of a fleet (several
//! `--host`s) for each request, as the router in front of a fleet of replicas
//! would. A policy is a
//! [`Router`](batchbench_contract::plugin::Router) whose
//! [`choose_endpoint`](batchbench_contract::plugin::Router::choose_endpoint) is called when
//! the request goes out (after its due time and its concurrency permit), with
//! this client's requests in flight per endpoint and the prompt's block hashes.
//!
//! | router | kind | what |
//! |---|---|---|
//! | `user_tag` | decorator | `user` + `X-SMG-Routing-Key`, stable per agent |
//! | `dp_rank` | decorator | `X-SMG-Target-Worker: slot % ranks` |
//! | `round_robin` | policy | each request to the next endpoint |
//! | `random` | policy | a seeded random endpoint per request |
//! | `least_outstanding` | policy | the fewest of this client's requests in flight |
//! | `session_affinity` | policy | a conversation stays on one endpoint |
//! | `prefix_affinity` | policy | a shared prompt prefix goes to one endpoint |
//! | `request_ids` | decorator | a seeded `X-Request-Id` and W3C `traceparent` per request |
//! | `body_fields` | decorator | fixed fields in every body, for a server's own parameters |
//!
//! Which policies depend on the client's own state: `round_robin` (a counter)
//! and `least_outstanding` (this client's in-flight counts), and
//! `prefix_affinity` with a load bound, pick differently when a run is split
//! into shards; `random`, `session_affinity` and `prefix_affinity` without a
//! load bound pick from the request alone, so a sharded run routes every
//! request as the whole run would.

pub mod body_fields;
pub mod dp_rank;
pub mod least_outstanding;
pub mod prefix_affinity;
pub mod random;
pub mod request_ids;
pub mod round_robin;
pub mod session_affinity;
pub mod user_tag;

use batchbench_contract::rng::mix64;
use serde::{Deserialize, Serialize};

/// The config of a policy that takes none.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

/// The endpoint ranked first for `key` by rendezvous (highest random weight)
/// hashing, and the rest in order: a consistent hash, under which a key
/// keeps its endpoint and only a removed endpoint's keys move.
pub(crate) fn ranked(key: u64, n: usize) -> impl Iterator<Item = usize> {
    let mut order: Vec<(u64, usize)> = (0..n)
        .map(|i| (mix64(key ^ mix64(i as u64 + 0x51AB_1E00)), i))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.into_iter().map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::least_outstanding::LeastOutstanding;
    use super::prefix_affinity::{PrefixAffinity, PrefixAffinityConfig};
    use super::random::Random;
    use super::round_robin::RoundRobin;
    use super::session_affinity::SessionAffinity;
    use super::*;
    use batchbench_contract::plugin::{EndpointContext, Router};
    use batchbench_contract::registry::BuildContext;

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
