//! A workload component that attacks its sandbox from `next_trajectory`, as its
//! config says: `loop` (never returns), `sleep` (blocks in a host call for an
//! hour, where epoch interruption cannot reach it), `memory` (allocates without end),
//! `read_file` (opens `target`, which was not granted), `write_file` (writes
//! `target`, which may be granted read-only) or `connect` (opens a TCP
//! connection to `target`). Should an attack succeed, it returns a trajectory
//! whose id says so, and the test fails.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit", world: "workload-plugin" });

use exports::batchbench::plugin::{meta, workload};
use std::cell::RefCell;

thread_local! {
    static ATTACK: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
}

struct Hostile;

impl meta::Guest for Hostile {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "hostile_workload".into(),
            description: "attacks its sandbox (test fixture)".into(),
            example_config: r#"{"attack": "none"}"#.into(),
        }
    }
}

fn breach(what: &str) -> Result<Option<String>, String> {
    Ok(Some(format!(
        r#"{{"id": "sandbox-breached-{what}", "requests": [{{}}]}}"#
    )))
}

impl workload::Guest for Hostile {
    fn init(config: String, _context: String) -> Result<(), String> {
        let v: serde_json::Value = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        let attack = v["attack"].as_str().unwrap_or("none").to_owned();
        let target = v["target"].as_str().unwrap_or("").to_owned();
        ATTACK.with(|a| *a.borrow_mut() = (attack, target));
        Ok(())
    }

    fn info() -> String {
        r#"{"mode": "hostile"}"#.into()
    }

    fn next_trajectory() -> Result<Option<String>, String> {
        let (attack, target) = ATTACK.with(|a| a.borrow().clone());
        match attack.as_str() {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 16 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Ok(None)
            }
            "write_file" => match std::fs::write(&target, b"overwritten") {
                Ok(()) => breach("write_file"),
                Err(e) => Err(format!("cannot write {target}: {e}")),
            },
            "read_file" => match std::fs::read(&target) {
                Ok(_) => breach("read_file"),
                Err(e) => Err(format!("cannot read {target}: {e}")),
            },
            "connect" => match std::net::TcpStream::connect(&target) {
                Ok(_) => breach("connect"),
                Err(e) => Err(format!("cannot connect to {target}: {e}")),
            },
            _ => Ok(None),
        }
    }
}

// Only a wasm build exports the component's functions (a host build, as in
// `cargo test --workspace`, compiles the code and exports nothing).
#[cfg(target_arch = "wasm32")]
export!(Hostile);
