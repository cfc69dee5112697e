//! A native plugin that panics where its config says: the host must contain
//! it; and a routing policy that picks the endpoint its config names, in range
//! or not.

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

/// Config of [`FixedEndpoint`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// The endpoint index it always picks (out of range on purpose, in the
    /// bad-input test).
    pub endpoint: usize,
}

/// A routing policy that sends every request to one endpoint.
pub struct FixedEndpoint(usize);

impl batchbench_plugin_sdk::plugin::Router for FixedEndpoint {
    fn chooses_endpoint(&self) -> bool {
        true
    }

    fn choose_endpoint(
        &self,
        _ctx: &batchbench_plugin_sdk::plugin::EndpointContext<'_>,
    ) -> Result<usize, PluginError> {
        Ok(self.0)
    }
}

fn fixed(c: EndpointConfig, _ctx: &BuildContext) -> Result<FixedEndpoint, PluginError> {
    Ok(FixedEndpoint(c.endpoint))
}

batchbench_plugin_sdk::export_plugins! {
    reporter {
        name: "panicking_reporter",
        description: "panics in create or on_request (test fixture)",
        example: r#"{"panic_in": "on_request"}"#,
        config: Config,
        build: build,
    },
    router {
        name: "fixed_endpoint",
        description: "a routing policy: every request to the endpoint its config names (test fixture)",
        example: r#"{"endpoint": 0}"#,
        config: EndpointConfig,
        build: fixed,
    },
}
