//! `--warmup auto`: what it cannot honour exits 2 with nothing sent. Where
//! the cut lands on real runs (a warming prefix cache, a run steady from the
//! start) is timed against the machine's clock: those cases run in the timing
//! suite (`tests/tests/timing.rs`), beside nothing.

use batchbench_tests::{SimServer, tokenizer_path};

#[test]
fn what_auto_cannot_honour_exits_2_with_nothing_sent() {
    let tok = tokenizer_path("qwen").display().to_string();
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    for (extra, needle) in [
        (&["--warmup-secs", "2"][..], "leave out --warmup-requests"),
        (&["--target-ci", "5"][..], "give --warmup-secs instead"),
        (&["--ramp-up-secs", "2"][..], "changes the load on purpose"),
        (
            &["--shard", "0/2"][..],
            "each shard would cut on its share alone",
        ),
        (&["--warmup", "sometimes"][..], "not a warmup mode"),
    ] {
        let mut args = vec![
            "--host",
            url.as_str(),
            "--tokenizer-model",
            &tok,
            "--request-rate",
            "10",
            "--duration-secs",
            "5",
            "--seed",
            "1",
        ];
        if !extra.contains(&"--warmup") {
            args.extend(["--warmup", "auto"]);
        }
        args.extend(extra);
        let message = batchbench_tests::refused_batchbench(&args);
        assert!(message.contains(needle), "{extra:?}: {message}");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}
