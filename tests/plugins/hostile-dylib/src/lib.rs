//! A native plugin that panics where its config says: the host must contain
//! it; a routing policy that picks the endpoint its config names, in range
//! or not; and a reporter that checks the live views it is given against the
//! run's summary.

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

/// Checks the live views: they come, their counters never fall, and the last
/// one is the summary's; `on_finish` fails the run otherwise.
#[derive(Default)]
pub struct LiveCheck {
    last: Option<batchbench_plugin_sdk::plugin::LiveStats>,
    problem: Option<String>,
}

/// Config of [`LiveCheck`]: none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

impl Reporter for LiveCheck {
    fn on_live(
        &mut self,
        live: &batchbench_plugin_sdk::plugin::LiveStats,
    ) -> Result<(), PluginError> {
        if let Some(prev) = &self.last
            && (live.sent < prev.sent || live.ok < prev.ok || live.elapsed_secs < prev.elapsed_secs)
        {
            self.problem
                .get_or_insert_with(|| format!("a live view went back: {prev:?} then {live:?}"));
        }
        self.last = Some(live.clone());
        Ok(())
    }

    fn on_finish(
        &mut self,
        _run: &batchbench_plugin_sdk::RunInfo,
        s: &batchbench_plugin_sdk::Summary,
    ) -> Result<(), PluginError> {
        let fail = |message: String| {
            Err(PluginError::Failed {
                plugin: "live_check".into(),
                message,
            })
        };
        if let Some(p) = self.problem.take() {
            return fail(p);
        }
        let Some(last) = &self.last else {
            return fail("no live view came".into());
        };
        if last.ok != s.successful_requests || last.completion_tokens != s.total_completion_tokens {
            return fail(format!(
                "the last live view ({} ok, {} completion tokens) is not the summary ({} ok, {} tokens)",
                last.ok, last.completion_tokens, s.successful_requests, s.total_completion_tokens
            ));
        }
        Ok(())
    }
}

fn live_check(_c: NoConfig, _ctx: &BuildContext) -> Result<LiveCheck, PluginError> {
    Ok(LiveCheck::default())
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
    reporter {
        name: "live_check",
        description: "checks the live views against the run's summary (test fixture)",
        example: "{}",
        config: NoConfig,
        build: live_check,
    },
}
