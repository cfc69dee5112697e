//! Plugin registries, filled at link time by `inventory`.
//!
//! A built-in plugin registers exactly as an external crate would:
//!
//! ```ignore
//! batchbench_core::register_router! {
//!     name: "user_tag",
//!     description: "user field and X-SMG-Routing-Key header per agent",
//!     example: r#"{"prefix": null}"#,
//!     config: UserTagConfig,
//!     build: UserTag::new,
//! }
//! ```
//!
//! `build` receives the deserialised config (unknown fields are rejected by the
//! config type's `#[serde(deny_unknown_fields)]`) and the [`BuildContext`].

use crate::plugin::{PluginError, Reporter, RequestCodec, Router, WorkloadSource};
use serde::de::DeserializeOwned;

/// Run-wide facts a plugin may need while it is built.
#[derive(Debug, Clone, Default)]
pub struct BuildContext {
    /// The run seed (a random one when the user gave none).
    pub seed: u64,
    /// The run admits open-loop, each trajectory at its start offset: a source
    /// that can should yield trajectories in start-offset order.
    pub order_by_start: bool,
}

/// The plugin kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// [`WorkloadSource`].
    Workload,
    /// [`RequestCodec`].
    Codec,
    /// [`Router`].
    Router,
    /// [`Reporter`].
    Reporter,
}

impl Kind {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workload => "workload",
            Self::Codec => "codec",
            Self::Router => "router",
            Self::Reporter => "reporter",
        }
    }
}

/// A constructor from a JSON config.
pub type Builder<T> = fn(&serde_json::Value, &BuildContext) -> Result<Box<T>, PluginError>;

/// One registered plugin of kind `T`.
pub struct Registration<T: ?Sized + 'static> {
    /// snake_case name used to select it.
    pub name: &'static str,
    /// One line for `batchbench plugins`.
    pub description: &'static str,
    /// An example config (JSON) that parses and builds.
    pub example: &'static str,
    /// The constructor.
    pub build: Builder<T>,
}

/// A registered workload source.
pub type WorkloadRegistration = Registration<dyn WorkloadSource>;
/// A registered codec.
pub type CodecRegistration = Registration<dyn RequestCodec>;
/// A registered router.
pub type RouterRegistration = Registration<dyn Router>;
/// A registered reporter.
pub type ReporterRegistration = Registration<dyn Reporter>;

inventory::collect!(WorkloadRegistration);
inventory::collect!(CodecRegistration);
inventory::collect!(RouterRegistration);
inventory::collect!(ReporterRegistration);

/// Deserialises a plugin config, naming the plugin and the field in the error.
pub fn parse_config<C: DeserializeOwned>(
    plugin: &str,
    value: &serde_json::Value,
) -> Result<C, PluginError> {
    C::deserialize(value).map_err(|e| PluginError::Config {
        plugin: plugin.to_owned(),
        message: e.to_string(),
    })
}

/// A plugin's listing, for `batchbench plugins` and the contract tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginInfo {
    /// Kind name.
    pub kind: &'static str,
    /// Plugin name.
    pub name: &'static str,
    /// Description.
    pub description: &'static str,
    /// Example config.
    pub example: &'static str,
}

fn sorted<T: ?Sized + 'static>(
    kind: Kind,
    it: impl Iterator<Item = &'static Registration<T>>,
) -> Vec<PluginInfo> {
    let mut v: Vec<PluginInfo> = it
        .map(|r| PluginInfo {
            kind: kind.as_str(),
            name: r.name,
            description: r.description,
            example: r.example,
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(b.name));
    v
}

/// Every registered plugin, by kind then name.
pub fn list() -> Vec<PluginInfo> {
    let mut all = sorted(
        Kind::Workload,
        inventory::iter::<WorkloadRegistration>.into_iter(),
    );
    all.extend(sorted(
        Kind::Codec,
        inventory::iter::<CodecRegistration>.into_iter(),
    ));
    all.extend(sorted(
        Kind::Router,
        inventory::iter::<RouterRegistration>.into_iter(),
    ));
    all.extend(sorted(
        Kind::Reporter,
        inventory::iter::<ReporterRegistration>.into_iter(),
    ));
    all
}

fn find<T: ?Sized + 'static>(
    kind: Kind,
    name: &str,
    it: impl Iterator<Item = &'static Registration<T>> + Clone,
) -> Result<&'static Registration<T>, PluginError> {
    it.clone().find(|r| r.name == name).ok_or_else(|| {
        let mut known: Vec<&str> = it.map(|r| r.name).collect();
        known.sort_unstable();
        PluginError::Unknown {
            kind: kind.as_str(),
            name: name.to_owned(),
            known: known.join(", "),
        }
    })
}

/// Builds the workload source `name`.
pub fn workload(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn WorkloadSource>, PluginError> {
    (find(
        Kind::Workload,
        name,
        inventory::iter::<WorkloadRegistration>.into_iter(),
    )?
    .build)(config, ctx)
}

/// Builds the codec `name`.
pub fn codec(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn RequestCodec>, PluginError> {
    (find(
        Kind::Codec,
        name,
        inventory::iter::<CodecRegistration>.into_iter(),
    )?
    .build)(config, ctx)
}

/// Builds the router `name`.
pub fn router(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Router>, PluginError> {
    (find(
        Kind::Router,
        name,
        inventory::iter::<RouterRegistration>.into_iter(),
    )?
    .build)(config, ctx)
}

/// Builds the reporter `name`.
pub fn reporter(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Reporter>, PluginError> {
    (find(
        Kind::Reporter,
        name,
        inventory::iter::<ReporterRegistration>.into_iter(),
    )?
    .build)(config, ctx)
}

/// Builds every registered plugin from its example config: the contract every
/// plugin, built-in or external, must keep.
pub fn check_examples() -> Vec<(PluginInfo, Result<(), PluginError>)> {
    let ctx = BuildContext::default();
    list()
        .into_iter()
        .map(|info| {
            let r = serde_json::from_str::<serde_json::Value>(info.example)
                .map_err(|e| PluginError::Config {
                    plugin: info.name.to_owned(),
                    message: format!("example is not JSON: {e}"),
                })
                .and_then(|cfg| match info.kind {
                    "workload" => workload(info.name, &cfg, &ctx).map(drop),
                    "codec" => codec(info.name, &cfg, &ctx).map(drop),
                    "router" => router(info.name, &cfg, &ctx).map(drop),
                    _ => reporter(info.name, &cfg, &ctx).map(drop),
                });
            (info, r)
        })
        .collect()
}

#[doc(hidden)]
#[macro_export]
macro_rules! __register {
    ($reg:ident, $tr:path, name: $name:expr, description: $desc:expr, example: $ex:expr, config: $cfg:ty, build: $build:expr $(,)?) => {
        $crate::__private::inventory::submit! {
            $crate::registry::$reg {
                name: $name,
                description: $desc,
                example: $ex,
                build: |value, ctx| {
                    let config: $cfg = $crate::registry::parse_config($name, value)?;
                    let plugin = ($build)(config, ctx)?;
                    Ok(::std::boxed::Box::new(plugin) as ::std::boxed::Box<dyn $tr>)
                },
            }
        }
    };
}

/// Registers a [`WorkloadSource`](crate::plugin::WorkloadSource).
/// `build: fn(Config, &BuildContext) -> Result<impl WorkloadSource, PluginError>`.
#[macro_export]
macro_rules! register_workload {
    ($($t:tt)*) => { $crate::__register!(WorkloadRegistration, $crate::plugin::WorkloadSource, $($t)*); };
}

/// Registers a [`RequestCodec`](crate::plugin::RequestCodec).
#[macro_export]
macro_rules! register_codec {
    ($($t:tt)*) => { $crate::__register!(CodecRegistration, $crate::plugin::RequestCodec, $($t)*); };
}

/// Registers a [`Router`](crate::plugin::Router).
#[macro_export]
macro_rules! register_router {
    ($($t:tt)*) => { $crate::__register!(RouterRegistration, $crate::plugin::Router, $($t)*); };
}

/// Registers a [`Reporter`](crate::plugin::Reporter).
#[macro_export]
macro_rules! register_reporter {
    ($($t:tt)*) => { $crate::__register!(ReporterRegistration, $crate::plugin::Reporter, $($t)*); };
}
