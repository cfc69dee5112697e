//! One line of a ClickHouse rows file (`export-plans --rows-jsonl`): a row or
//! an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = batchbench_clickhouse::rows::parse_row(text);
    }
});
