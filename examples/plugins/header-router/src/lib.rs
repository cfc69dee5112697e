//! A router plugin as a WebAssembly component: adds one header (and optionally a
//! body field) whose value is a template over the request's identity, for
//! gateways that route or account by a header of their own.
//!
//! Build: `cargo build -p header-router --target wasm32-wasip2 --release`, then
//! `batchbench-agent --plugin .../header_router.wasm --router header_router
//! --router-config '{"header": "X-Tenant", "value": "team-a-{agent_id}"}'`.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit", world: "router-plugin" });

use exports::batchbench::plugin::{meta, router};
use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Header name.
    header: String,
    /// Value template: `{agent_id}`, `{trajectory_id}`, `{request_index}` and
    /// `{routing_slot}` are replaced.
    value: String,
    /// Also send the value as this top-level body field.
    #[serde(default)]
    body_field: Option<String>,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

struct HeaderRouter;

impl meta::Guest for HeaderRouter {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "header_router".into(),
            description: "adds a header (and optionally a body field) from a template over agent_id, trajectory_id, request_index, routing_slot".into(),
            example_config: r#"{"header": "X-Tenant", "value": "team-a-{agent_id}"}"#.into(),
        }
    }
}

fn render(template: &str, ctx: &router::RouteContext) -> String {
    template
        .replace("{agent_id}", &ctx.agent_id.to_string())
        .replace("{trajectory_id}", &ctx.trajectory_id)
        .replace("{request_index}", &ctx.request_index.to_string())
        .replace("{routing_slot}", &ctx.routing_slot.to_string())
}

impl router::Guest for HeaderRouter {
    fn init(config: String, _context: String) -> Result<(), String> {
        let c: Config = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if c.header.is_empty() || !c.header.bytes().all(token) {
            return Err(format!("header: {:?} is not an HTTP header name", c.header));
        }
        CONFIG.set(c).map_err(|_| "init called twice".to_owned())
    }

    fn decorate(ctx: router::RouteContext) -> Result<router::RouteExtras, String> {
        let c = CONFIG.get().ok_or("decorate before init")?;
        let value = render(&c.value, &ctx);
        let body_fields = match &c.body_field {
            Some(f) => vec![(
                f.clone(),
                serde_json::Value::String(value.clone()).to_string(),
            )],
            None => Vec::new(),
        };
        Ok(router::RouteExtras {
            headers: vec![(c.header.clone(), value)],
            body_fields,
        })
    }

    fn dp_rank(_routing_slot: u64) -> Option<u64> {
        None
    }
}

// Only a wasm build exports the component's functions (a host build, as in
// `cargo test --workspace`, compiles the code and exports nothing).
#[cfg(target_arch = "wasm32")]
export!(HeaderRouter);
