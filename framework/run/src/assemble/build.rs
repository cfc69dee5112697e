//! Building what a run is made of besides its workload: the routers (with
//! the routing policy of a fleet), the reporters, and the spec as the run
//! record keeps it.

use super::Profile;
use crate::exit::{Failure, plugin_failure};
use batchbench_contract::plugin::{Reporter, Router};
use batchbench_contract::registry::{self, BuildContext};
use batchbench_contract::spec::{PluginSpec, RunSpec};
use std::path::Path;
use std::sync::Arc;

/// Against a fleet (`endpoints` of 2 or more), the routers must hold exactly one routing policy (a
/// router that picks endpoints): none given, `round_robin` is added (and
/// recorded in the spec); two are refused. Returns the policy's name.
pub(super) fn routing_policy(
    spec: &mut RunSpec,
    routers: &mut Vec<Arc<dyn Router>>,
    ctx: &BuildContext,
    endpoints: u32,
) -> Result<Option<String>, Failure> {
    let choosers: Vec<&str> = spec
        .routers
        .iter()
        .zip(routers.iter())
        .filter(|(_, r)| r.chooses_endpoint())
        .map(|(s, _)| s.name.as_str())
        .collect();
    if let [a, b, ..] = choosers.as_slice() {
        return Err(Failure::bad(format!(
            "--router: {a} and {b} both pick endpoints; give one routing policy"
        )));
    }
    if let Some(name) = choosers.first() {
        return Ok(Some((*name).to_owned()));
    }
    if endpoints < 2 {
        return Ok(None);
    }
    let policy = PluginSpec::new("round_robin", serde_json::json!({}));
    routers.push(Arc::from(
        registry::router(&policy.name, &policy.config, ctx).map_err(plugin_failure)?,
    ));
    spec.routers.push(policy);
    Ok(Some("round_robin".to_owned()))
}

/// Against a fleet whose model map makes `pools` pools of endpoints: an
/// instance of the run's routing policy `name` (with its config in the spec)
/// for each, so that each pool is balanced on its own, as a gateway's
/// balancer per model is (a round robin's counter, a least-outstanding
/// count). The run and `analyze` both take them from here.
pub(super) fn pool_policies(
    spec: &RunSpec,
    name: &str,
    pools: usize,
    ctx: &BuildContext,
) -> Result<Vec<Arc<dyn Router>>, Failure> {
    let config = spec
        .routers
        .iter()
        .find(|r| r.name == name)
        .map_or_else(|| serde_json::json!({}), |r| r.config.clone());
    (0..pools)
        .map(|_| {
            registry::router(name, &config, ctx)
                .map(Arc::from)
                .map_err(plugin_failure)
        })
        .collect()
}

/// The spec as the run record keeps it: the credentials of its URLs (the
/// target's, the metrics endpoints') replaced by `***`; the API key is never in
/// a spec at all.
pub(super) fn recorded_spec(spec: &RunSpec) -> RunSpec {
    use batchbench_contract::record::redact_url;
    let mut s = spec.clone();
    s.target.host = s.target.host.map(redact_url);
    for u in &mut s.server_metrics.urls {
        *u = redact_url(u);
    }
    s
}

fn build_reporter(
    name: &str,
    config: serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Reporter>, Failure> {
    registry::reporter(name, &config, ctx).map_err(plugin_failure)
}

fn path_config(path: &Path) -> serde_json::Value {
    serde_json::Value::Object(
        [(
            "path".to_owned(),
            serde_json::Value::String(path.display().to_string()),
        )]
        .into_iter()
        .collect(),
    )
}

/// The reporters of a spec, in event order: the console summary, the result
/// files, then the spec's reporter plugins.
pub(crate) fn reporters(
    spec: &RunSpec,
    profile: &Profile,
    ctx: &BuildContext,
    console: bool,
) -> Result<Vec<Box<dyn Reporter>>, Failure> {
    let o = &spec.output;
    let mut v = Vec::new();
    if console {
        v.push(build_reporter(
            "console_summary",
            serde_json::Value::Object(serde_json::Map::new()),
            ctx,
        )?);
    }
    if let Some(p) = &o.summary_json {
        v.push(build_reporter("json_summary", path_config(p), ctx)?);
    }
    if let Some(p) = &o.requests_jsonl {
        v.push(build_reporter("requests_jsonl", path_config(p), ctx)?);
    }
    if let Some(p) = &o.output_dir {
        v.push(build_reporter("results_dir", path_config(p), ctx)?);
    }
    if let Some(p) = &o.results_csv {
        let cfg = batchbench_plugins::reporters::csv::CsvConfig {
            path: p.clone(),
            columns: crate::view::names(profile.csv_columns)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let cfg = serde_json::to_value(&cfg).map_err(Failure::failed)?;
        v.push(build_reporter("csv", cfg, ctx)?);
    }
    for r in &spec.reporters {
        v.push(build_reporter(&r.name, r.config.clone(), ctx)?);
    }
    if let Some(p) = &o.agent_events_jsonl {
        v.push(build_reporter("agent_events", path_config(p), ctx)?);
    }
    if let Some(url) = &o.otlp_endpoint {
        v.push(build_reporter(
            "otlp_spans",
            serde_json::json!({ "endpoint": url }),
            ctx,
        )?);
    }
    if let Some(addr) = &o.metrics_listen {
        v.push(build_reporter(
            "metrics_listen",
            serde_json::json!({
                "addr": addr,
                "linger_secs": o.metrics_linger_secs.unwrap_or(0.0),
            }),
            ctx,
        )?);
    }
    Ok(v)
}

pub(super) fn build_routers(
    specs: &[PluginSpec],
    ctx: &BuildContext,
) -> Result<Vec<Arc<dyn Router>>, Failure> {
    specs
        .iter()
        .map(|r| {
            registry::router(&r.name, &r.config, ctx)
                .map(Arc::from)
                .map_err(plugin_failure)
        })
        .collect()
}
