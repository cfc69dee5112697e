//! `request_ids`: this client's own id for every request, in a request-id
//! header (`X-Request-Id` by default), and a W3C `traceparent`, so that a
//! server's logs and traces can be joined with the run's records. Both are
//! drawn from the run's seed and the request's identity (agent, trajectory,
//! index): a rerun with the same seed sends the same ids, and a sharded run
//! sends the ids of the whole run. A retried request keeps its ids.

use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{derive, hash_str};
use batchbench_contract::spec::RequestIdSpec;
use serde::{Deserialize, Serialize};

/// Config of [`RequestIds`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestIdsConfig {
    /// The header that carries the request's id (absent: `X-Request-Id`).
    #[serde(default)]
    pub header: Option<String>,
    /// Send the request's id in `header`.
    #[serde(default = "yes")]
    pub ids: bool,
    /// Send a W3C `traceparent` (version 00, sampled).
    #[serde(default)]
    pub trace_context: bool,
}

fn yes() -> bool {
    true
}

/// The header a request's id goes in by default.
pub const DEFAULT_HEADER: &str = "X-Request-Id";

/// Adds a request id and a trace context to every request.
#[derive(Debug, Clone)]
pub struct RequestIds {
    header: Option<String>,
    trace_context: bool,
}

impl RequestIds {
    /// Checks the config: a header name HTTP accepts.
    pub fn new(cfg: RequestIdsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let header = cfg.header.unwrap_or_else(|| DEFAULT_HEADER.to_owned());
        if let Err(e) = RequestIdSpec::check_header(&header) {
            return Err(PluginError::Config {
                plugin: "request_ids".into(),
                message: e,
            });
        }
        if !cfg.ids && !cfg.trace_context {
            return Err(PluginError::Config {
                plugin: "request_ids".into(),
                message: "neither ids nor trace_context: the router would add nothing".into(),
            });
        }
        Ok(Self {
            header: cfg.ids.then_some(header),
            trace_context: cfg.trace_context,
        })
    }
}

/// 128 bits of the request's identity under `tag`, as 32 lowercase hex digits.
fn bits128(ctx: &RouteContext<'_>, tag: u64) -> String {
    let coords = [
        tag,
        ctx.agent_id,
        hash_str(ctx.trajectory_id),
        ctx.request_index,
    ];
    let hi = derive(ctx.seed, &coords);
    let lo = derive(hi, &coords);
    format!("{hi:016x}{lo:016x}")
}

/// The request's id: a version 4 (random) UUID drawn from its identity.
pub fn request_id(ctx: &RouteContext<'_>) -> String {
    let mut h = bits128(ctx, 1).into_bytes();
    // Version 4 and the RFC 4122 variant, as any UUID parser expects.
    h[12] = b'4';
    h[16] = b"89ab"[usize::from(h[16] % 4)];
    let h = String::from_utf8(h).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The request's `traceparent`: version 00, a trace id and a parent span id
/// drawn from its identity (never all zeros), sampled.
pub fn traceparent(ctx: &RouteContext<'_>) -> String {
    let mut trace = bits128(ctx, 2);
    if trace.bytes().all(|b| b == b'0') {
        trace.replace_range(31..32, "1");
    }
    let span = derive(
        ctx.seed,
        &[
            3,
            ctx.agent_id,
            hash_str(ctx.trajectory_id),
            ctx.request_index,
        ],
    )
    .max(1);
    format!("00-{trace}-{span:016x}-01")
}

impl Router for RequestIds {
    fn decorate(&self, ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        if let Some(h) = &self.header {
            out.headers.push((h.clone(), request_id(ctx)));
        }
        if self.trace_context {
            out.headers.push(("traceparent".into(), traceparent(ctx)));
        }
        Ok(())
    }
}

batchbench_contract::register_router! {
    name: "request_ids",
    description: "this client's id for every request (X-Request-Id) and a W3C traceparent, drawn from the seed: a rerun sends the same",
    example: r#"{"header": "X-Request-Id", "ids": true, "trace_context": true}"#,
    config: RequestIdsConfig,
    build: RequestIds::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(seed: u64, agent_id: u64, index: u64) -> RouteContext<'static> {
        RouteContext {
            seed,
            agent_id,
            routing_slot: 0,
            trajectory_id: "user-3",
            request_index: index,
        }
    }

    fn router(json: &str) -> Result<RequestIds, PluginError> {
        let cfg: RequestIdsConfig = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        RequestIds::new(cfg, &BuildContext::default())
    }

    #[test]
    fn ids_are_uuids_drawn_from_the_seed_and_the_request() {
        let a = request_id(&ctx(7, 3, 0));
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'4', "{a}");
        assert!(b"89ab".contains(&a.as_bytes()[19]), "{a}");
        assert_eq!(a, request_id(&ctx(7, 3, 0)), "a rerun sends the same id");
        assert_ne!(a, request_id(&ctx(8, 3, 0)), "another seed, another id");
        assert_ne!(a, request_id(&ctx(7, 4, 0)));
        assert_ne!(a, request_id(&ctx(7, 3, 1)));
    }

    #[test]
    fn a_traceparent_is_version_00_sampled_with_nonzero_ids() {
        let t = traceparent(&ctx(7, 3, 0));
        let parts: Vec<&str> = t.split('-').collect();
        assert_eq!(parts.len(), 4, "{t}");
        assert_eq!((parts[0], parts[3]), ("00", "01"));
        assert_eq!((parts[1].len(), parts[2].len()), (32, 16));
        assert!(
            parts[1]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(parts[1], "0".repeat(32));
        assert_ne!(parts[2], "0".repeat(16));
        assert_eq!(t, traceparent(&ctx(7, 3, 0)));
    }

    #[test]
    fn the_router_adds_what_its_config_asks_for() {
        let mut out = RouteExtras::default();
        router(r#"{"trace_context": true}"#)
            .unwrap()
            .decorate(&ctx(1, 0, 0), &mut out)
            .unwrap();
        let names: Vec<&str> = out.headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["X-Request-Id", "traceparent"]);
        let mut out = RouteExtras::default();
        router(r#"{"header": "x-correlation-id", "ids": true}"#)
            .unwrap()
            .decorate(&ctx(1, 0, 0), &mut out)
            .unwrap();
        assert_eq!(out.headers[0].0, "x-correlation-id");
    }

    #[test]
    fn a_header_name_http_refuses_is_a_config_error() {
        for (json, needle) in [
            (r#"{"header": ""}"#, "empty"),
            (r#"{"header": "x request"}"#, "' '"),
            (r#"{"ids": false}"#, "would add nothing"),
        ] {
            let e = router(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
