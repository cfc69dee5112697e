//! A routing policy as a component of contract 1.1.0 (`fleet-router-plugin`):
//! every request goes to the endpoint its config names (`{"endpoint": 1}`), in
//! range or not, and gets an `X-Fleet-Endpoint` header saying so. The host must
//! send each request there, and refuse an index out of range.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit/v1.1", world: "fleet-router-plugin" });

use exports::batchbench::plugin::{endpoint_router, meta, router};
use std::cell::Cell;

thread_local! {
    static ENDPOINT: Cell<u32> = const { Cell::new(0) };
}

struct FixedEndpoint;

impl meta::Guest for FixedEndpoint {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "wasm_fixed_endpoint".into(),
            description:
                "a routing policy: every request to the endpoint its config names (test fixture)"
                    .into(),
            example_config: r#"{"endpoint": 0}"#.into(),
        }
    }
}

impl router::Guest for FixedEndpoint {
    fn init(config: String, _context: String) -> Result<(), String> {
        let v: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let e = v["endpoint"]
            .as_u64()
            .and_then(|e| u32::try_from(e).ok())
            .ok_or("endpoint: a number is required")?;
        ENDPOINT.with(|c| c.set(e));
        Ok(())
    }

    fn decorate(_ctx: router::RouteContext) -> Result<router::RouteExtras, String> {
        Ok(router::RouteExtras {
            headers: vec![(
                "X-Fleet-Endpoint".into(),
                ENDPOINT.with(Cell::get).to_string(),
            )],
            body_fields: Vec::new(),
        })
    }

    fn dp_rank(_routing_slot: u64) -> Option<u64> {
        None
    }
}

impl endpoint_router::Guest for FixedEndpoint {
    fn choose_endpoint(_ctx: endpoint_router::EndpointContext) -> Result<u32, String> {
        Ok(ENDPOINT.with(Cell::get))
    }
}

// Only a wasm build exports the component's functions.
#[cfg(target_arch = "wasm32")]
export!(FixedEndpoint);
