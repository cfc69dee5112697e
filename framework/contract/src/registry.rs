//! Plugin registries: filled at link time by `inventory` (built-ins and any crate
//! linked into the binary) and at run time by the plugin hosts ([`register_loaded`]).
//!
//! A built-in plugin registers exactly as an external crate would:
//!
//! ```ignore
//! batchbench_contract::register_router! {
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
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BuildContext {
    /// The run seed (a random one when the user gave none).
    pub seed: u64,
    /// The run admits open-loop, each trajectory at its start offset: a source
    /// that can should yield trajectories in start-offset order.
    pub order_by_start: bool,
    /// The run lasts a duration (`load.duration_secs`): a source that can should
    /// draw its workload without end and say so in [`WorkloadInfo::endless`]; the
    /// run refuses a finite one.
    ///
    /// [`WorkloadInfo::endless`]: crate::plugin::WorkloadInfo::endless
    pub endless: bool,
    /// Where a plugin reports the progress of long preparation (reading a
    /// large manifest), for the host to show; never sent to external plugins.
    #[serde(skip)]
    pub progress: Preparation,
    /// Encodes and counts text with the run's tokenizer: for a source that
    /// plans from recorded text (a dataset's recorded replies as output
    /// lengths), or a codec that sends token ids. Loads the tokenizer on first
    /// use: make that first call while the plugin is built, not from a
    /// source's iterator. Never sent to external plugins.
    #[serde(skip)]
    pub tokens: TokenCounter,
}

/// Encodes and counts a text with the run's tokenizer (see
/// [`BuildContext::tokens`]).
#[derive(Clone, Default)]
pub struct TokenCounter(Option<std::sync::Arc<EncodeFn>>);

/// What [`TokenCounter`] calls: the text's token ids, special tokens left out.
type EncodeFn = dyn Fn(&str) -> Result<Vec<u32>, String> + Send + Sync;

impl TokenCounter {
    /// Encodes with `f`.
    pub fn new(f: impl Fn(&str) -> Result<Vec<u32>, String> + Send + Sync + 'static) -> Self {
        Self(Some(std::sync::Arc::new(f)))
    }

    /// The token ids of `text` (no special tokens); an error when the host has
    /// no tokenizer to give. After a first call made while the plugin is
    /// built, later calls may come from anywhere (a codec's `encode`).
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, String> {
        match &self.0 {
            Some(f) => f(text),
            None => Err("this host has no tokenizer to give".into()),
        }
    }

    /// The tokens of `text`.
    pub fn count(&self, text: &str) -> Result<u64, String> {
        self.ids(text).map(|ids| ids.len() as u64)
    }
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "TokenCounter(tokenizer)"
        } else {
            "TokenCounter(none)"
        })
    }
}

/// The progress of a plugin's preparation: `(what, done, total)`, such as
/// `("reading plans.jsonl", bytes read, file size)`. The host decides whether
/// and how to show it (a bar on a terminal); reporting costs a call.
#[derive(Clone, Default)]
pub struct Preparation(Option<std::sync::Arc<ReportFn>>);

/// What [`Preparation`] calls: `(what, done, total)`.
type ReportFn = dyn Fn(&str, u64, u64) + Send + Sync;

impl Preparation {
    /// Reports to `f`.
    pub fn new(f: impl Fn(&str, u64, u64) + Send + Sync + 'static) -> Self {
        Self(Some(std::sync::Arc::new(f)))
    }

    /// Reports `done` of `total` of `what`.
    pub fn report(&self, what: &str, done: u64, total: u64) {
        if let Some(f) = &self.0 {
            f(what, done, total);
        }
    }
}

impl std::fmt::Debug for Preparation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Preparation(reported)"
        } else {
            "Preparation(none)"
        })
    }
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
    pub name: String,
    /// Description.
    pub description: String,
    /// Example config.
    pub example: String,
    /// `built-in`, or the file a loaded plugin came from.
    pub origin: String,
}

/// A constructor of a loaded (external) plugin.
pub type LoadedBuilder<T> =
    Box<dyn Fn(&serde_json::Value, &BuildContext) -> Result<Box<T>, PluginError> + Send + Sync>;

/// A plugin registered at run time by a plugin host (a WebAssembly component or a
/// native library), selected exactly like a built-in.
pub struct Loaded<T: ?Sized + 'static> {
    /// Its listing: name, description, example config and the file it came from
    /// (`kind` is set from the [`LoadedPlugin`] variant when registered).
    pub info: PluginInfo,
    /// The constructor.
    pub build: LoadedBuilder<T>,
}

/// What a plugin host registers.
pub enum LoadedPlugin {
    /// A workload source.
    Workload(Loaded<dyn WorkloadSource>),
    /// A request codec.
    Codec(Loaded<dyn RequestCodec>),
    /// A router.
    Router(Loaded<dyn Router>),
    /// A reporter.
    Reporter(Loaded<dyn Reporter>),
}

impl LoadedPlugin {
    /// Its listing.
    pub fn info(&self) -> &PluginInfo {
        match self {
            Self::Workload(p) => &p.info,
            Self::Codec(p) => &p.info,
            Self::Router(p) => &p.info,
            Self::Reporter(p) => &p.info,
        }
    }
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.info();
        write!(f, "LoadedPlugin({} {} from {})", i.kind, i.name, i.origin)
    }
}

type Shelf<T> = std::sync::RwLock<Vec<std::sync::Arc<Loaded<T>>>>;

static LOADED_WORKLOADS: Shelf<dyn WorkloadSource> = std::sync::RwLock::new(Vec::new());
static LOADED_CODECS: Shelf<dyn RequestCodec> = std::sync::RwLock::new(Vec::new());
static LOADED_ROUTERS: Shelf<dyn Router> = std::sync::RwLock::new(Vec::new());
static LOADED_REPORTERS: Shelf<dyn Reporter> = std::sync::RwLock::new(Vec::new());

fn shelf_snapshot<T: ?Sized>(shelf: &Shelf<T>) -> Vec<std::sync::Arc<Loaded<T>>> {
    shelf
        .read()
        .map(|v| v.clone())
        .unwrap_or_else(|p| p.into_inner().clone())
}

fn shelve<T: ?Sized + 'static>(
    kind: Kind,
    shelf: &Shelf<T>,
    builtins: impl Iterator<Item = &'static Registration<T>>,
    mut p: Loaded<T>,
) -> Result<(), PluginError> {
    p.info.kind = kind.as_str();
    let info = &p.info;
    let valid = !info.name.is_empty()
        && info
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid {
        return Err(PluginError::Failed {
            plugin: info.origin.clone(),
            message: format!(
                "plugin name {:?} is not a lower-case identifier ([a-z0-9_-]+)",
                info.name
            ),
        });
    }
    if builtins.into_iter().any(|r| r.name == info.name) {
        return Err(PluginError::Failed {
            plugin: info.origin.clone(),
            message: format!(
                "a built-in {} plugin is already named '{}'",
                kind.as_str(),
                info.name
            ),
        });
    }
    let mut v = shelf.write().unwrap_or_else(|e| e.into_inner());
    if let Some(other) = v.iter().find(|o| o.info.name == info.name) {
        if other.info.origin == info.origin {
            // The same file loaded twice (two runs in one process): keep the first.
            return Ok(());
        }
        return Err(PluginError::Failed {
            plugin: info.origin.clone(),
            message: format!(
                "a {} plugin named '{}' was already loaded from {}",
                kind.as_str(),
                info.name,
                other.info.origin
            ),
        });
    }
    v.push(std::sync::Arc::new(p));
    Ok(())
}

/// Registers a loaded plugin beside the built-ins. A name already taken by a
/// plugin of the same kind (built-in, or loaded from another file) is an error;
/// the same file registering again is a no-op.
pub fn register_loaded(p: LoadedPlugin) -> Result<(), PluginError> {
    match p {
        LoadedPlugin::Workload(p) => shelve(
            Kind::Workload,
            &LOADED_WORKLOADS,
            inventory::iter::<WorkloadRegistration>.into_iter(),
            p,
        ),
        LoadedPlugin::Codec(p) => shelve(
            Kind::Codec,
            &LOADED_CODECS,
            inventory::iter::<CodecRegistration>.into_iter(),
            p,
        ),
        LoadedPlugin::Router(p) => shelve(
            Kind::Router,
            &LOADED_ROUTERS,
            inventory::iter::<RouterRegistration>.into_iter(),
            p,
        ),
        LoadedPlugin::Reporter(p) => shelve(
            Kind::Reporter,
            &LOADED_REPORTERS,
            inventory::iter::<ReporterRegistration>.into_iter(),
            p,
        ),
    }
}

fn sorted<T: ?Sized + 'static>(
    kind: Kind,
    it: impl Iterator<Item = &'static Registration<T>>,
    loaded: &Shelf<T>,
) -> Vec<PluginInfo> {
    let mut v: Vec<PluginInfo> = it
        .map(|r| PluginInfo {
            kind: kind.as_str(),
            name: r.name.to_owned(),
            description: r.description.to_owned(),
            example: r.example.to_owned(),
            origin: "built-in".to_owned(),
        })
        .collect();
    v.extend(shelf_snapshot(loaded).iter().map(|r| r.info.clone()));
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Every registered plugin (built-in and loaded), by kind then name.
pub fn list() -> Vec<PluginInfo> {
    let mut all = sorted(
        Kind::Workload,
        inventory::iter::<WorkloadRegistration>.into_iter(),
        &LOADED_WORKLOADS,
    );
    all.extend(sorted(
        Kind::Codec,
        inventory::iter::<CodecRegistration>.into_iter(),
        &LOADED_CODECS,
    ));
    all.extend(sorted(
        Kind::Router,
        inventory::iter::<RouterRegistration>.into_iter(),
        &LOADED_ROUTERS,
    ));
    all.extend(sorted(
        Kind::Reporter,
        inventory::iter::<ReporterRegistration>.into_iter(),
        &LOADED_REPORTERS,
    ));
    all
}

fn build<T: ?Sized + 'static>(
    kind: Kind,
    name: &str,
    it: impl Iterator<Item = &'static Registration<T>> + Clone,
    loaded: &Shelf<T>,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<T>, PluginError> {
    if let Some(r) = it.clone().find(|r| r.name == name) {
        return (r.build)(config, ctx);
    }
    let loaded = shelf_snapshot(loaded);
    if let Some(r) = loaded.iter().find(|r| r.info.name == name) {
        return (r.build)(config, ctx);
    }
    let mut known: Vec<&str> = it.map(|r| r.name).collect();
    known.extend(loaded.iter().map(|r| r.info.name.as_str()));
    known.sort_unstable();
    Err(PluginError::Unknown {
        kind: kind.as_str(),
        name: name.to_owned(),
        known: known.join(", "),
    })
}

/// Builds the workload source `name`.
pub fn workload(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn WorkloadSource>, PluginError> {
    build(
        Kind::Workload,
        name,
        inventory::iter::<WorkloadRegistration>.into_iter(),
        &LOADED_WORKLOADS,
        config,
        ctx,
    )
}

/// Builds the codec `name`.
pub fn codec(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn RequestCodec>, PluginError> {
    build(
        Kind::Codec,
        name,
        inventory::iter::<CodecRegistration>.into_iter(),
        &LOADED_CODECS,
        config,
        ctx,
    )
}

/// Builds the router `name`.
pub fn router(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Router>, PluginError> {
    build(
        Kind::Router,
        name,
        inventory::iter::<RouterRegistration>.into_iter(),
        &LOADED_ROUTERS,
        config,
        ctx,
    )
}

/// Builds the reporter `name`.
pub fn reporter(
    name: &str,
    config: &serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Reporter>, PluginError> {
    build(
        Kind::Reporter,
        name,
        inventory::iter::<ReporterRegistration>.into_iter(),
        &LOADED_REPORTERS,
        config,
        ctx,
    )
}

/// Builds every registered plugin from its example config: the contract every
/// plugin, built-in or external, must keep.
pub fn check_examples() -> Vec<(PluginInfo, Result<(), PluginError>)> {
    let ctx = BuildContext::default();
    list()
        .into_iter()
        .map(|info| {
            let r = serde_json::from_str::<serde_json::Value>(&info.example)
                .map_err(|e| PluginError::Config {
                    plugin: info.name.clone(),
                    message: format!("example is not JSON: {e}"),
                })
                .and_then(|cfg| match info.kind {
                    "workload" => workload(&info.name, &cfg, &ctx).map(drop),
                    "codec" => codec(&info.name, &cfg, &ctx).map(drop),
                    "router" => router(&info.name, &cfg, &ctx).map(drop),
                    _ => reporter(&info.name, &cfg, &ctx).map(drop),
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
