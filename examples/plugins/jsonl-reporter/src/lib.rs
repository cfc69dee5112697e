//! Native plugins built with `batchbench-plugin-sdk`: a reporter that writes one
//! JSON line per request, and a router that adds a fixed header.
//!
//! Build: `cargo build -p jsonl-reporter` (a `cdylib`: `libjsonl_reporter.so`,
//! `.dylib` on macOS), then `batchbench --plugin .../libjsonl_reporter.so
//! --reporter jsonl_requests --reporter-config '{"path": "requests.jsonl"}'`.

use batchbench_plugin_sdk::plugin::{
    PluginError, Reporter, RequestRecord, RouteContext, RouteExtras, Router,
};
use batchbench_plugin_sdk::wire::WireRequestRecord;
use batchbench_plugin_sdk::{BuildContext, RunInfo, Summary};
use serde::Deserialize;
use std::io::Write;

/// Config of [`JsonlRequests`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlConfig {
    /// Output file (created or truncated).
    pub path: String,
}

/// Writes every request outcome as a JSON line.
pub struct JsonlRequests {
    path: String,
    out: std::io::BufWriter<std::fs::File>,
}

impl JsonlRequests {
    /// Creates the file.
    pub fn new(c: JsonlConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let file = std::fs::File::create(&c.path).map_err(|e| PluginError::Config {
            plugin: "jsonl_requests".into(),
            message: format!("path: cannot create {}: {e}", c.path),
        })?;
        Ok(Self {
            path: c.path,
            out: std::io::BufWriter::new(file),
        })
    }

    fn fail(&self, e: std::io::Error) -> PluginError {
        PluginError::Failed {
            plugin: "jsonl_requests".into(),
            message: format!("cannot write {}: {e}", self.path),
        }
    }
}

impl Reporter for JsonlRequests {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        // One write per whole line.
        let mut line = serde_json::to_vec(&WireRequestRecord::from_record(rec)).unwrap_or_default();
        line.push(b'\n');
        self.out.write_all(&line).map_err(|e| self.fail(e))
    }

    fn on_finish(&mut self, _run: &RunInfo, _summary: &Summary) -> Result<(), PluginError> {
        self.out.flush().map_err(|e| self.fail(e))
    }
}

/// Config of [`StaticHeader`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticHeaderConfig {
    /// Header name.
    pub header: String,
    /// Header value.
    pub value: String,
}

/// Adds one fixed header to every request.
pub struct StaticHeader(StaticHeaderConfig);

impl Router for StaticHeader {
    fn decorate(&self, _ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        out.headers
            .push((self.0.header.clone(), self.0.value.clone()));
        Ok(())
    }
}

batchbench_plugin_sdk::export_plugins! {
    reporter {
        name: "jsonl_requests",
        description: "one JSON line per request (native plugin example)",
        example: r#"{"path": "requests.jsonl"}"#,
        config: JsonlConfig,
        build: JsonlRequests::new,
    },
    router {
        name: "static_header",
        description: "adds one fixed header to every request (native plugin example)",
        example: r#"{"header": "X-Team", "value": "inference"}"#,
        config: StaticHeaderConfig,
        build: |c: StaticHeaderConfig, _ctx: &BuildContext| Ok::<_, PluginError>(StaticHeader(c)),
    },
}
