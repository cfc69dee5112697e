//! `azure_trace`: the Azure LLM inference trace CSV (`TIMESTAMP`,
//! `ContextTokens`, `GeneratedTokens`), each row one exact synthetic request
//! at its time.

use super::{CsvTraceConfig, Item, Listed, bad, csv_rows, existing, offsets, synthetic, tokens};
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;

/// Builds `azure_trace`.
pub fn azure(cfg: CsvTraceConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("azure_trace", &cfg.path)?;
    if cfg.models.is_some() || cfg.keep_failed {
        return Err(PluginError::Config {
            plugin: "azure_trace".into(),
            message: "models and keep_failed are options of burstgpt".into(),
        });
    }
    let cols = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];
    let mut items = Vec::new();
    for (n, row) in csv_rows(&path, &cols)? {
        let ms = batchbench_contract::timefmt::parse_ms(&row[0])
            .map_err(|e| bad(&path, n, format!("TIMESTAMP: {e}")))?;
        let input = tokens(&path, n, cols[1], &row[1])?;
        let output = tokens(&path, n, cols[2], &row[2])?;
        if input == 0 || output == 0 {
            return Err(bad(
                &path,
                n,
                "ContextTokens and GeneratedTokens must be at least 1",
            ));
        }
        items.push(Item {
            id: format!("line-{n}"),
            start_after_ms: Some(u64::try_from(ms).unwrap_or(0)),
            requests: vec![synthetic(input, output)],
        });
    }
    offsets(&mut items);
    Listed::new("azure_trace", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "azure_trace",
    description: "the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens) as exact synthetic requests at their times",
    example: r#"{"path": "examples/datasets/azure.csv"}"#,
    config: CsvTraceConfig,
    build: azure,
}
