//! Exact-length synthesis throughput: tokens per second per core, for prompts of
//! 128, 4,096 and 32,768 tokens, on the path the tokenizer gets (proven at load
//! for the byte-level BPE tokenizers, see `tokens::proof`) and, for reference, on
//! the per-piece checked path a tokenizer outside the proof takes.
//!
//! `cargo bench -p batchbench-engine --bench synthesis -- TOKENIZER_JSON`
//! (`BENCH_SMOKE=1`: a few iterations, to prove it runs).

use batchbench_engine::tokens::TokenizerHandle;
use std::time::{Duration, Instant};

const TARGET: f64 = 50e6;

fn main() {
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .unwrap_or_else(|| {
            eprintln!("usage: synthesis TOKENIZER_JSON");
            std::process::exit(2);
        });
    let smoke = std::env::var_os("BENCH_SMOKE").is_some();
    let fail = |e: batchbench_engine::tokens::TokenError| -> ! {
        eprintln!("{e}");
        std::process::exit(1);
    };
    let file = std::path::Path::new(&path);
    let t = Instant::now();
    let cold = TokenizerHandle::from_file_uncached(&path, file).unwrap_or_else(|e| fail(e));
    println!(
        "tokenizer {path}: parsed, table built and proof made in {:.2} s: {} single-token words, path {}",
        t.elapsed().as_secs_f64(),
        cold.word_count(),
        cold.synthesis_path().as_str()
    );
    // Once through the cache (written if absent), then the timed warm load.
    TokenizerHandle::from_file(&path, file).unwrap_or_else(|e| fail(e));
    let t = Instant::now();
    let warm = TokenizerHandle::from_file(&path, file).unwrap_or_else(|e| fail(e));
    println!(
        "warm load (table from the cache: {}, tokenizer parsed: {}): {:.1} ms",
        warm.table_from_cache(),
        warm.full_loaded(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let budget = if smoke {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(3)
    };
    let checked = TokenizerHandle::from_file_uncached(&path, file)
        .and_then(TokenizerHandle::without_proof)
        .unwrap_or_else(|e| fail(e));
    for (label, tok) in [
        ("loaded path", &warm),
        ("checked path, for reference", &checked),
    ] {
        println!("{label} ({}):", tok.synthesis_path().as_str());
        println!(
            "{:>8} {:>10} {:>14} {:>16}",
            "tokens", "pieces", "us/piece", "tokens/s/core"
        );
        for n in [128usize, 4096, 32_768] {
            let mut pieces = 0u64;
            let start = Instant::now();
            let mut key = 0u64;
            while start.elapsed() < budget || pieces < 3 {
                key += 1;
                let text = tok
                    .exact_text(key, n, &|| format!("bench n={n}"))
                    .unwrap_or_else(|e| fail(e));
                std::hint::black_box(text);
                pieces += 1;
            }
            let secs = start.elapsed().as_secs_f64();
            let rate = (pieces as f64 * n as f64) / secs;
            let verdict = if std::ptr::eq(tok, &warm) {
                if rate >= TARGET {
                    "  target met (>= 50M)"
                } else {
                    "  target NOT met (>= 50M)"
                }
            } else {
                ""
            };
            println!(
                "{n:>8} {pieces:>10} {:>14.1} {rate:>16.0}{verdict}",
                secs * 1e6 / pieces as f64,
            );
        }
    }
}
