//! The Plugins flags: a workload, codec, routers and reporters by name, their
//! configs, and plugin files; the codec's options the other flags set.

use super::json_config;
use crate::exit::Failure;
use batchbench_contract::spec::{PluginSpec, RunSpec};
use batchbench_plugins::codecs::openai_chat::OpenAiChatConfig;
use std::path::PathBuf;

/// External plugins and plugin selection, shared by both commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PluginArgs {
    /// Take the trajectories from a workload plugin (a built-in such as clickhouse,
    /// or one loaded with --plugin) instead of the synthetic workload; see
    /// `batchbench plugins`.
    #[arg(long, value_name = "NAME", help_heading = "Plugins")]
    pub workload: Option<String>,
    /// The --workload plugin's config, a JSON object.
    #[arg(
        long,
        value_name = "JSON",
        help_heading = "Plugins",
        requires = "workload"
    )]
    pub workload_config: Option<String>,
    /// Load an external plugin: a WebAssembly component (.wasm, sandboxed) or a
    /// native library (.so, .dylib, .dll; trusted code only). Repeatable; its plugins
    /// are then selected by name like the built-ins (see `batchbench plugins`).
    #[arg(long = "plugin", value_name = "PATH", help_heading = "Plugins")]
    pub plugins: Vec<PathBuf>,
    /// Add a router plugin (repeatable; after the built-in identity routers).
    #[arg(long = "router", value_name = "NAME", help_heading = "Plugins")]
    pub routers: Vec<String>,
    /// Config of the router of the same position, a JSON object (default {}).
    #[arg(long = "router-config", value_name = "JSON", help_heading = "Plugins")]
    pub router_configs: Vec<String>,
    /// Add a reporter plugin (repeatable).
    #[arg(long = "reporter", value_name = "NAME", help_heading = "Plugins")]
    pub reporters: Vec<String>,
    /// Config of the reporter of the same position, a JSON object (default {}).
    #[arg(
        long = "reporter-config",
        value_name = "JSON",
        help_heading = "Plugins"
    )]
    pub reporter_configs: Vec<String>,
}

impl PluginArgs {
    fn pairs(names: &[String], configs: &[String], flag: &str) -> Result<Vec<PluginSpec>, Failure> {
        if configs.len() > names.len() {
            return Err(Failure::bad(format!(
                "{} --{flag}-config values for {} --{flag} plugins: each config belongs to the --{flag} of the same position",
                configs.len(),
                names.len()
            )));
        }
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let cfg = json_config(
                    &format!("--{flag}-config of --{flag} {n}"),
                    configs.get(i).map(String::as_str),
                )?;
                Ok(PluginSpec::new(n.clone(), cfg))
            })
            .collect()
    }

    /// The `--workload` plugin, when one is named.
    pub fn workload(&self) -> Result<Option<PluginSpec>, Failure> {
        self.workload
            .as_ref()
            .map(|name| {
                let cfg = json_config("--workload-config", self.workload_config.as_deref())?;
                Ok(PluginSpec::new(name.clone(), cfg))
            })
            .transpose()
    }

    /// Adds the plugin files, routers and reporters these flags name (routers
    /// after those already in the spec).
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), Failure> {
        spec.plugin_files.extend(self.plugins.iter().cloned());
        spec.routers
            .extend(Self::pairs(&self.routers, &self.router_configs, "router")?);
        spec.reporters.extend(Self::pairs(
            &self.reporters,
            &self.reporter_configs,
            "reporter",
        )?);
        Ok(())
    }
}

/// The `plugins` part of a flat configuration view: the plugin files, and the
/// routers and reporters the user added (the built-in identity routers are
/// shown by their own fields).
#[derive(Debug, serde::Serialize)]
pub struct PluginsView<'a> {
    /// `--plugin` files.
    pub plugin_files: &'a [PathBuf],
    /// `--router` plugins with their configs.
    pub routers: Vec<&'a PluginSpec>,
    /// `--reporter` plugins with their configs.
    pub reporters: &'a [PluginSpec],
}

impl<'a> PluginsView<'a> {
    /// The view of `spec`, leaving out routers named in `builtin`.
    pub fn of(spec: &'a RunSpec, builtin: &[&str]) -> Self {
        Self {
            plugin_files: &spec.plugin_files,
            routers: spec
                .routers
                .iter()
                .filter(|r| !builtin.contains(&r.name.as_str()))
                .collect(),
            reporters: &spec.reporters,
        }
    }
}

/// Turns on the codec's own boolean option `field` (`sglang`, `ignore_eos`),
/// for every front end's shorthand of it; a codec without the option refuses
/// the field, naming it, when it is built.
pub fn set_codec_option(spec: &mut RunSpec, field: &str) -> Result<(), String> {
    match &mut spec.codec.config {
        serde_json::Value::Object(o) => {
            o.insert(field.to_owned(), serde_json::Value::Bool(true));
        }
        serde_json::Value::Null => spec.codec.config = serde_json::json!({ field: true }),
        _ => {
            return Err(format!(
                "the {} codec's config is not a JSON object; give the option in its config",
                spec.codec.name
            ));
        }
    }
    Ok(())
}

/// The `sglang` and `ignore_eos` options of a spec's codec, for the flat view
/// (`false` for a codec without them).
pub fn chat_options(spec: &RunSpec) -> OpenAiChatConfig {
    let on = |k: &str| {
        spec.codec
            .config
            .get(k)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    };
    OpenAiChatConfig {
        sglang: on("sglang"),
        ignore_eos: on("ignore_eos"),
        reasoning_tags: on("reasoning_tags"),
    }
}
