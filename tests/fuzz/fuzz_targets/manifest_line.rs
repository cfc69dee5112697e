//! One replay manifest line (v1 or v2), validated as a run validates it: an
//! error or a plan, never a panic.
#![no_main]

use batchbench_contract::manifest::{ReplayConfig, check_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for (initial, turn) in [(0, 0), (5, 3)] {
        let cfg = ReplayConfig {
            path: "fuzz.jsonl".into(),
            order_by_start: false,
            initial_overhead_tokens: initial,
            turn_overhead_tokens: turn,
        };
        let _ = check_line(text.trim(), &cfg);
    }
});
