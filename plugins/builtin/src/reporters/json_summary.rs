//! `json_summary`: writes the run facts and the whole summary as one JSON document
//! (also after Ctrl+C, with `"interrupted": true`).

use batchbench_contract::plugin::{PluginError, Reporter};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::Summary;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Config of [`JsonSummary`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSummaryConfig {
    /// Output file (replaced atomically).
    pub path: PathBuf,
}

/// Writes `{"run": RunInfo, "summary": Summary}`.
#[derive(Debug)]
pub struct JsonSummary {
    cfg: JsonSummaryConfig,
}

impl JsonSummary {
    /// A reporter with this config.
    pub fn new(cfg: JsonSummaryConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg })
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "json_summary".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }
}

impl Reporter for JsonSummary {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, _run: &RunInfo) -> Result<(), PluginError> {
        // Fail before anything is sent when the file cannot be written.
        let dir = self
            .cfg
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            return Err(self.fail("the directory does not exist"));
        }
        Ok(())
    }

    fn on_finish(&mut self, info: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let doc = serde_json::json!({ "run": info, "summary": summary });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| self.fail(e))?;
        let tmp = self.cfg.path.with_extension("json.part");
        std::fs::write(&tmp, text + "\n").map_err(|e| self.fail(e))?;
        std::fs::rename(&tmp, &self.cfg.path).map_err(|e| self.fail(e))?;
        Ok(())
    }
}

batchbench_contract::register_reporter! {
    name: "json_summary",
    description: "the run facts and the complete summary as one JSON document",
    example: r#"{"path": "summary.json"}"#,
    config: JsonSummaryConfig,
    build: JsonSummary::new,
}
