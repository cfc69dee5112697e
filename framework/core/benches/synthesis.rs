//! Exact-length synthesis throughput: tokens per second per core, for prompts of
//! 128, 4,096 and 32,768 tokens with the Qwen tokenizer (generation plus the
//! re-encoding check that every piece gets).
//!
//! `cargo bench -p batchbench-core --bench synthesis -- TOKENIZER_JSON`
//! (`BENCH_SMOKE=1`: a few iterations, to prove it runs).

use batchbench_core::tokens::TokenizerHandle;
use std::time::{Duration, Instant};

fn main() {
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| {
            eprintln!("usage: synthesis TOKENIZER_JSON");
            std::process::exit(2);
        });
    let smoke = std::env::var_os("BENCH_SMOKE").is_some();
    let t = Instant::now();
    let tok = TokenizerHandle::from_file(&path, std::path::Path::new(&path)).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    println!(
        "tokenizer {path}: loaded in {:.2} s, {} single-token words",
        t.elapsed().as_secs_f64(),
        tok.word_count()
    );
    println!(
        "{:>8} {:>10} {:>14} {:>16}",
        "tokens", "pieces", "us/piece", "tokens/s/core"
    );
    let budget = if smoke {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(3)
    };
    for n in [128usize, 4096, 32_768] {
        let mut pieces = 0u64;
        let start = Instant::now();
        let mut key = 0u64;
        while start.elapsed() < budget || pieces < 3 {
            key += 1;
            let text = tok
                .exact_text(key, n, &|| format!("bench n={n}"))
                .unwrap_or_else(|e| {
                    eprintln!("{e}");
                    std::process::exit(1);
                });
            std::hint::black_box(text);
            pieces += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{n:>8} {pieces:>10} {:>14.1} {:>16.0}",
            secs * 1e6 / pieces as f64,
            (pieces as f64 * n as f64) / secs
        );
    }
}
