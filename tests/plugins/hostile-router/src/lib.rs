//! A router component that misbehaves in `decorate`, as its config says: `loop`
//! (never returns) or `log` (writes to standard error, I/O that a router may not do
//! on the request path). The host must turn each into a clear error that stops the
//! run.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit", world: "router-plugin" });

use exports::batchbench::plugin::{meta, router};
use std::cell::RefCell;

thread_local! {
    static ATTACK: RefCell<String> = const { RefCell::new(String::new()) };
}

struct HostileRouter;

impl meta::Guest for HostileRouter {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "hostile_router".into(),
            description: "misbehaves in decorate (test fixture)".into(),
            example_config: r#"{"attack": "none"}"#.into(),
        }
    }
}

impl router::Guest for HostileRouter {
    fn init(config: String, _context: String) -> Result<(), String> {
        let v: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let attack = v["attack"].as_str().unwrap_or("none").to_owned();
        ATTACK.with(|a| *a.borrow_mut() = attack);
        Ok(())
    }

    fn decorate(ctx: router::RouteContext) -> Result<router::RouteExtras, String> {
        let attack = ATTACK.with(|a| a.borrow().clone());
        match attack.as_str() {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "log" => eprintln!("hostile router: request {}", ctx.request_index),
            _ => {}
        }
        Ok(router::RouteExtras {
            headers: Vec::new(),
            body_fields: Vec::new(),
        })
    }

    fn dp_rank(_routing_slot: u64) -> Option<u64> {
        None
    }
}

// Only a wasm build exports the component's functions.
#[cfg(target_arch = "wasm32")]
export!(HostileRouter);
