//! A reporter as a component of contract 1.1.0 (`live-reporter-plugin`): it
//! checks the live views it hears (they come, their counters never fall) and
//! fails the run at its end unless the last one is the summary's.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit/v1.1", world: "live-reporter-plugin" });

use exports::batchbench::plugin::{live_reporter, meta, reporter};
use serde_json::Value;
use std::cell::RefCell;

#[derive(Default)]
struct Seen {
    views: u64,
    last: Option<Value>,
    problem: Option<String>,
}

thread_local! {
    static SEEN: RefCell<Seen> = RefCell::new(Seen::default());
}

struct LiveCheck;

fn field(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

impl meta::Guest for LiveCheck {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "wasm_live_check".into(),
            description: "checks the live views against the run's summary (test fixture)".into(),
            example_config: "{}".into(),
        }
    }
}

impl reporter::Guest for LiveCheck {
    fn init(_config: String, _context: String) -> Result<(), String> {
        Ok(())
    }
    fn on_start(_run: String) -> Result<(), String> {
        Ok(())
    }
    fn on_request(_record: String) -> Result<(), String> {
        Ok(())
    }
    fn on_trajectory(_record: String) -> Result<(), String> {
        Ok(())
    }
    fn on_finish(_run: String, summary: String) -> Result<(), String> {
        let s: Value = serde_json::from_str(&summary).map_err(|e| e.to_string())?;
        SEEN.with_borrow_mut(|seen| {
            if let Some(p) = seen.problem.take() {
                return Err(p);
            }
            let last = seen.last.as_ref().ok_or("no live view came")?;
            let (ok, tokens) = (field(last, "ok"), field(last, "completion_tokens"));
            let (want_ok, want_tokens) = (
                field(&s, "successful_requests"),
                field(&s, "total_completion_tokens"),
            );
            if (ok, tokens) != (want_ok, want_tokens) {
                return Err(format!(
                    "after {} live views, the last ({ok} ok, {tokens} completion tokens) is not the summary ({want_ok} ok, {want_tokens} tokens)",
                    seen.views
                ));
            }
            Ok(())
        })
    }
}

impl live_reporter::Guest for LiveCheck {
    fn on_live(live: String) -> Result<(), String> {
        let v: Value = serde_json::from_str(&live).map_err(|e| e.to_string())?;
        SEEN.with_borrow_mut(|seen| {
            seen.views += 1;
            if let Some(prev) = &seen.last
                && (field(&v, "sent") < field(prev, "sent") || field(&v, "ok") < field(prev, "ok"))
                && seen.problem.is_none()
            {
                seen.problem = Some(format!("a live view went back: {prev} then {v}"));
            }
            seen.last = Some(v);
        });
        Ok(())
    }
}

// Only a wasm build exports the component's functions.
#[cfg(target_arch = "wasm32")]
export!(LiveCheck);
