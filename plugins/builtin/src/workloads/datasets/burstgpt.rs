//! `burstgpt`: the BurstGPT CSV (`Timestamp` in seconds, `Model`, `Request
//! tokens`, `Response tokens`, `Total tokens`, `Log Type`), each row one exact
//! synthetic request at its time.

use super::{CsvTraceConfig, Item, Listed, bad, csv_rows, existing, offsets, synthetic, tokens};
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;

/// Builds `burstgpt`.
pub fn burstgpt(cfg: CsvTraceConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("burstgpt", &cfg.path)?;
    let cols = ["Timestamp", "Model", "Request tokens", "Response tokens"];
    let mut items = Vec::new();
    let mut failed = 0usize;
    for (n, row) in csv_rows(&path, &cols)? {
        let secs = row[0]
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| bad(&path, n, format!("Timestamp: {:?} is not seconds", row[0])))?;
        if cfg
            .models
            .as_ref()
            .is_some_and(|m| !m.iter().any(|m| m == &row[1]))
        {
            continue;
        }
        let input = tokens(&path, n, cols[2], &row[2])?;
        let mut output = tokens(&path, n, cols[3], &row[3])?;
        if input == 0 {
            return Err(bad(&path, n, "Request tokens must be at least 1"));
        }
        if output == 0 {
            // A request that failed in production.
            if !cfg.keep_failed {
                failed += 1;
                continue;
            }
            output = 1;
        }
        items.push(Item {
            id: format!("line-{n}"),
            start_after_ms: Some((secs * 1000.0).round() as u64),
            requests: vec![synthetic(input, output)],
        });
    }
    if failed > 0 {
        eprintln!(
            "burstgpt: {}: left out {failed} failed requests (0 response tokens; keep them with \"keep_failed\": true)",
            path.display()
        );
    }
    offsets(&mut items);
    Listed::new("burstgpt", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "burstgpt",
    description: "the BurstGPT CSV (Timestamp, Model, Request tokens, Response tokens) as exact synthetic requests at their times",
    example: r#"{"path": "examples/datasets/burstgpt.csv", "models": ["ChatGPT"]}"#,
    config: CsvTraceConfig,
    build: burstgpt,
}
