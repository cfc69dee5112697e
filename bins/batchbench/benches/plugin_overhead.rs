//! Per-call cost of a router: built-in, WebAssembly component and native library,
//! measured in one process, in nanoseconds per request.
//!
//! All three add the same fixed header (`X-Team: inference`): `static_header`
//! compiled in and registered exactly as an external crate would, the
//! `header_router` component with a fixed value, and the native `static_header`
//! of the `jsonl-reporter` example library. The built-in `user_tag` router (a
//! seeded UUID per agent) is shown for scale.
//!
//! `cargo bench -p batchbench --bench plugin_overhead -- HEADER_ROUTER_WASM JSONL_REPORTER_SO`
//! (`BENCH_SMOKE=1`: a short run, to prove it works). `bench/plugins.sh` builds
//! everything and runs it.

use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
use batchbench_contract::registry::{self, BuildContext};
use serde::Deserialize;
use serde_json::json;
use std::hint::black_box;
use std::time::Instant;

use batchbench_plugins as _;

#[derive(Deserialize)]
struct StaticHeaderConfig {
    header: String,
    value: String,
}

struct StaticHeader(StaticHeaderConfig);

impl Router for StaticHeader {
    fn decorate(&self, _ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        out.headers
            .push((self.0.header.clone(), self.0.value.clone()));
        Ok(())
    }
}

batchbench_contract::register_router! {
    name: "static_header_builtin",
    description: "adds one fixed header (benchmark reference)",
    example: r#"{"header": "X-Team", "value": "inference"}"#,
    config: StaticHeaderConfig,
    build: |c: StaticHeaderConfig, _ctx: &BuildContext| Ok::<_, PluginError>(StaticHeader(c)),
}

/// Median of `rounds` timings of `calls` decorations, in ns per call.
fn measure(r: &dyn Router, calls: u64, rounds: usize) -> f64 {
    let mut samples = Vec::with_capacity(rounds);
    let mut out = RouteExtras::default();
    for _ in 0..rounds {
        let t = Instant::now();
        for i in 0..calls {
            let ctx = RouteContext {
                seed: 7,
                agent_id: i % 64,
                routing_slot: i % 8,
                trajectory_id: "trajectory-0001",
                request_index: i,
            };
            out.headers.clear();
            out.body_fields.clear();
            r.decorate(black_box(&ctx), &mut out)
                .unwrap_or_else(|e| panic!("{e}"));
            black_box(&out);
        }
        samples.push(t.elapsed().as_nanos() as f64 / calls as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [wasm, dylib] = args.as_slice() else {
        eprintln!("usage: plugin_overhead HEADER_ROUTER_WASM JSONL_REPORTER_SO");
        std::process::exit(2);
    };
    let smoke = std::env::var_os("BENCH_SMOKE").is_some();
    let (calls, rounds) = if smoke { (2_000, 3) } else { (200_000, 9) };
    batchbench_wasm::load(std::path::Path::new(wasm)).unwrap_or_else(|e| panic!("{e}"));
    batchbench_dylib::load(std::path::Path::new(dylib)).unwrap_or_else(|e| panic!("{e}"));
    let ctx = BuildContext::default();
    let fixed = json!({"header": "X-Team", "value": "inference"});
    let build = |name: &str, cfg: &serde_json::Value| {
        registry::router(name, cfg, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let cases = [
        (
            "built-in static header",
            build("static_header_builtin", &fixed),
        ),
        ("built-in user_tag (UUID)", build("user_tag", &json!({}))),
        ("wasm header_router", build("header_router", &fixed)),
        ("dylib static_header", build("static_header", &fixed)),
    ];
    // Warm up every path (first calls fault in code and allocate).
    for (_, r) in &cases {
        measure(r.as_ref(), calls / 10 + 1, 1);
    }
    let figures: Vec<(&str, f64)> = cases
        .iter()
        .map(|(name, r)| (*name, measure(r.as_ref(), calls, rounds)))
        .collect();
    let reference = figures[0].1;
    println!(
        "router decorate, median of {rounds} rounds x {calls} calls{}",
        if smoke { " (smoke: noise)" } else { "" }
    );
    println!(
        "{:<26} {:>12} {:>22}",
        "router", "ns/request", "added vs built-in (ns)"
    );
    for (name, ns) in &figures {
        println!("{name:<26} {ns:>12.0} {:>22.0}", ns - reference);
    }
    let wasm_added = figures[2].1 - reference;
    let verdict = match (smoke, wasm_added < 5_000.0) {
        (true, _) => "not judged in a smoke run",
        (false, true) => "met",
        (false, false) => "NOT MET",
    };
    println!(
        "wasm router adds {:.2} us per request (target: under 5 us): {verdict}",
        wasm_added / 1000.0
    );
}
