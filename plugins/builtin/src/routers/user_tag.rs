//! `user_tag`: a per-agent identity on every request, the `user` field and
//! `X-SMG-Routing-Key`, stable per agent (a UUID, or `<prefix>-<agent>`).

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
}
