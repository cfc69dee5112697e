//! The GPUs' energy, read from a DCGM exporter scraped during a run: a
//! synthetic exporter on loopback serves a power gauge that changes over time
//! and the energy counter that integrates it, as the real one does.

use batchbench_tests::{cmd, http, run_batchbench, tokenizer_path};

/// A DCGM exporter of two GPUs whose power rises and falls (300 W ± 150 W
/// over a 2-second period), with their energy counters, in millijoules since
/// the exporter started, integrating it exactly.
fn exporter() -> String {
    http::serve_metrics(|t| {
        let w = std::f64::consts::PI;
        let mut body = String::new();
        for (gpu, base) in [(0, 300.0), (1, 250.0)] {
            let watts = base + 150.0 * (w * t).sin();
            // The integral of base + 150 sin(w t) from 0 to t, in mJ.
            let joules = base * t + 150.0 / w * (1.0 - (w * t).cos());
            body.push_str(&format!(
                "DCGM_FI_DEV_POWER_USAGE{{gpu=\"{gpu}\",Hostname=\"test\"}} {watts:.3}\n\
                 DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu=\"{gpu}\",Hostname=\"test\"}} {}\n",
                (joules * 1000.0).round()
            ));
        }
        body
    })
}

#[test]
fn energy_from_the_counter_agrees_with_integrated_power_and_is_per_token() {
    let url = exporter();
    let tok = tokenizer_path("qwen").display().to_string();
    let r = run_batchbench(&cmd(
        "--host sim://?ttft-base-ms=5&decode-ms-per-token=2 --tokenizer-model {} --users 4 --input-tokens 32 --output-tokens 16 --duration-secs 3 --server-metrics {} --metrics-interval 0.05",
        &[&tok, &url],
    ));
    assert_eq!(r.code, 0);
    let e = &r.summary("server_metrics")["energy"];
    assert_eq!(e["source"], "counter", "{e}");
    let joules = e["joules"].as_f64().unwrap_or_default();
    let integrated = e["integrated_power_joules"].as_f64().unwrap_or_default();
    // About (300 + 250) W for 3 s.
    assert!((1200.0..2200.0).contains(&joules), "{e}");
    assert!(
        (integrated - joules).abs() <= 0.02 * joules,
        "integrated power {integrated} J against the counter's {joules} J"
    );
    let peak = e["peak_power_watts"].as_f64().unwrap_or_default();
    assert!(
        peak > e["mean_power_watts"].as_f64().unwrap_or(f64::MAX),
        "{e}"
    );
    let tokens = r.count("total_completion_tokens") as f64;
    let per_token = e["joules_per_output_token"].as_f64().unwrap_or_default();
    assert!((per_token * tokens - joules).abs() < 1e-6 * joules, "{e}");
    // The CSV's appended columns carry the same.
    let row = &r.csv[0];
    assert_eq!(row["energy_source"], "counter");
    let csv_joules: f64 = row["energy_joules"].parse().unwrap_or_default();
    assert!((csv_joules - joules).abs() < 1e-3, "{row:?}");
    // Each GPU's power is kept apart.
    let m = &r.summary("server_metrics")["metrics"];
    assert!(
        m["gpu_power_watts{gpu=\"1\"}"]["max"].as_f64() > Some(0.0),
        "{m}"
    );
}
