//! Reporters: what a run writes as it goes and when it ends. One file per
//! plugin, named as the registry names it.

pub mod agent_events;
pub mod console_summary;
pub mod csv;
pub mod json_summary;
pub mod metrics_listen;
pub mod otlp_spans;
pub mod requests_jsonl;
pub mod results_dir;
