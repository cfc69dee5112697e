//! `dp_rank`: deterministic data-parallel routing, `X-SMG-Target-Worker:
//! routing_slot % ranks`.

use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpRankConfig {
    /// Number of data-parallel ranks.
    pub ranks: u64,
}

/// Adds `X-SMG-Target-Worker: <routing_slot % ranks>`. Initial agents take
/// consecutive slots and a replacement inherits the slot it frees, so the active
/// load per rank stays balanced.
#[derive(Debug, Clone)]
pub struct DpRank {
    ranks: u64,
}

impl DpRank {
    /// Validates the config.
    pub fn new(cfg: DpRankConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if cfg.ranks == 0 {
            return Err(PluginError::Config {
                plugin: "dp_rank".into(),
                message: "ranks must be at least 1".into(),
            });
        }
        Ok(Self { ranks: cfg.ranks })
    }
}

impl Router for DpRank {
    fn decorate(&self, ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        out.headers.push((
            "X-SMG-Target-Worker".into(),
            (ctx.routing_slot % self.ranks).to_string(),
        ));
        Ok(())
    }

    fn dp_rank(&self, routing_slot: u64) -> Option<u64> {
        Some(routing_slot % self.ranks)
    }
}

batchbench_contract::register_router! {
    name: "dp_rank",
    description: "X-SMG-Target-Worker: routing_slot % ranks (deterministic data-parallel routing)",
    example: r#"{"ranks": 4}"#,
    config: DpRankConfig,
    build: DpRank::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(agent_id: u64, slot: u64) -> RouteContext<'static> {
        RouteContext {
            seed: 9,
            agent_id,
            routing_slot: slot,
            trajectory_id: "t",
            request_index: 0,
        }
    }

    #[test]
    fn dp_rank_is_slot_modulo_ranks() {
        let r = DpRank::new(DpRankConfig { ranks: 4 }, &BuildContext::default()).unwrap();
        let mut out = RouteExtras::default();
        r.decorate(&ctx(0, 6), &mut out).unwrap();
        assert_eq!(
            out.headers,
            vec![("X-SMG-Target-Worker".to_owned(), "2".to_owned())]
        );
        assert_eq!(r.dp_rank(6), Some(2));
        assert!(DpRank::new(DpRankConfig { ranks: 0 }, &BuildContext::default()).is_err());
    }
}
