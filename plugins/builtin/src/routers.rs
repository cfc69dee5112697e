//! Routers: per-agent identity (`user_tag`) and deterministic data-parallel
//! routing (`dp_rank`).

use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::Stream;
use serde::{Deserialize, Serialize};

/// Config of [`UserTag`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserTagConfig {
    /// Deterministic `<prefix>-<agent_id>` values instead of UUIDs.
    #[serde(default)]
    pub prefix: Option<String>,
}

/// Adds the `user` body field and the `X-SMG-Routing-Key` header, with the same
/// value for every request of an agent and a different one per agent: a UUID drawn
/// from the run seed (so equal seeds send equal bodies), or `<prefix>-<agent_id>`.
#[derive(Debug, Clone)]
pub struct UserTag {
    prefix: Option<String>,
}

impl UserTag {
    /// Validates the config.
    pub fn new(cfg: UserTagConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if let Some(p) = &cfg.prefix {
            if p.is_empty() || p.chars().any(|c| c.is_control()) {
                return Err(PluginError::Config {
                    plugin: "user_tag".into(),
                    message: "prefix must be non-empty printable text".into(),
                });
            }
        }
        Ok(Self { prefix: cfg.prefix })
    }

    /// The identity of `agent_id` in a run seeded with `seed`.
    pub fn identity(&self, seed: u64, agent_id: u64) -> String {
        match &self.prefix {
            Some(p) => format!("{p}-{agent_id}"),
            None => {
                let mut s = Stream::at(seed, &[0x05E7_7A60, agent_id]);
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&s.next_u64().to_le_bytes());
                bytes[8..].copy_from_slice(&s.next_u64().to_le_bytes());
                uuid::Builder::from_random_bytes(bytes)
                    .into_uuid()
                    .to_string()
            }
        }
    }
}

impl Router for UserTag {
    fn decorate(&self, ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        let id = self.identity(ctx.seed, ctx.agent_id);
        out.headers.push(("X-SMG-Routing-Key".into(), id.clone()));
        out.body_fields
            .push(("user".into(), serde_json::Value::String(id)));
        Ok(())
    }
}

batchbench_contract::register_router! {
    name: "user_tag",
    description: "user field and X-SMG-Routing-Key header, stable per agent (seeded UUID or <prefix>-<agent_id>)",
    example: r#"{"prefix": "bench"}"#,
    config: UserTagConfig,
    build: UserTag::new,
}

/// Config of [`DpRank`].
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
    fn user_tags_are_stable_per_agent_and_seeded() {
        let r = UserTag::new(UserTagConfig::default(), &BuildContext::default()).unwrap();
        let a = r.identity(9, 1);
        assert_eq!(a, r.identity(9, 1));
        assert_ne!(a, r.identity(9, 2));
        assert_ne!(a, r.identity(10, 1));
        assert_eq!(
            uuid::Uuid::parse_str(&a).map(|u| u.get_version_num()).ok(),
            Some(4)
        );
        let mut out = RouteExtras::default();
        r.decorate(&ctx(1, 0), &mut out).unwrap();
        assert_eq!(
            out.headers,
            vec![("X-SMG-Routing-Key".to_owned(), a.clone())]
        );
        assert_eq!(
            out.body_fields,
            vec![("user".to_owned(), serde_json::Value::String(a))]
        );
        let p = UserTag::new(
            UserTagConfig {
                prefix: Some("bench".into()),
            },
            &BuildContext::default(),
        )
        .unwrap();
        assert_eq!(p.identity(9, 7), "bench-7");
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
