//! A native plugin that panics where its config says: the host must contain it.

use batchbench_plugin_sdk::BuildContext;
use batchbench_plugin_sdk::plugin::{PluginError, Reporter, RequestRecord};
use serde::Deserialize;

/// Config: where to panic.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `create` or `on_request`.
    pub panic_in: String,
}

/// Panics in `on_request`.
pub struct Panicky;

impl Reporter for Panicky {
    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        panic!(
            "hostile reporter: request {} of {}",
            rec.request_index, rec.trajectory_id
        );
    }
}

fn build(c: Config, _ctx: &BuildContext) -> Result<Panicky, PluginError> {
    if c.panic_in == "create" {
        panic!("hostile reporter: refusing to be built");
    }
    Ok(Panicky)
}

batchbench_plugin_sdk::export_plugins! {
    reporter {
        name: "panicking_reporter",
        description: "panics in create or on_request (test fixture)",
        example: r#"{"panic_in": "on_request"}"#,
        config: Config,
        build: build,
    },
}
