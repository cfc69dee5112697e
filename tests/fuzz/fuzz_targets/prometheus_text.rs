//! A server's Prometheus metrics response, through the scraper's reader and
//! name mapping, twice (so that counters become rates): a scrape, never a panic.
#![no_main]

use batchbench_engine::telemetry::server_metrics::Mapper;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut m = Mapper::default();
    let first = m.scrape("fuzz", 0.0, &text);
    let second = m.scrape("fuzz", 1.0, &text);
    // The same text reads the same both times.
    assert_eq!(first.raw.len(), second.raw.len());
    assert_eq!(first.skipped_lines, second.skipped_lines);
});
