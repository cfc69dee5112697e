//! The native plugin host: loads a shared library that exports the C ABI of
//! [`batchbench_contract::abi`] (written by `batchbench-plugin-sdk`'s
//! `export_plugins!`) and registers its plugins beside the built-ins.
//!
//! The ABI version symbol is resolved and checked before anything else in the
//! library is touched, so a library built for another version is a clear error,
//! not a crash. Libraries are never unloaded (their code may be running on any
//! thread until the process exits). A native plugin runs with the process's
//! rights: it is for trusted code; untrusted plugins should be WebAssembly
//! components.

#![allow(unsafe_code)] // the C ABI boundary; every block states its contract

use batchbench_contract::abi::{
    ABI_VERSION, OwnedBytes, PluginTable, TABLE_SYMBOL, VERSION_SYMBOL, method, status,
};
use batchbench_contract::plan::Trajectory;
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, EndpointContext, LiveStats, PluginError, Reply,
    Reporter, RequestCodec, RequestRecord, RouteContext, RouteExtras, Router, StreamDecoder,
    TrajectoryRecord, WorkloadInfo, WorkloadSource,
};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::Summary;
use batchbench_contract::registry::{self, BuildContext, Kind, Loaded, LoadedPlugin, PluginInfo};
use batchbench_contract::wire::{
    WireEncodeRequest, WireEndpointContext, WireReply, WireRequestRecord, WireRouteContext,
    WireRouteExtras, WireTrajectory,
};
use serde::Deserialize;
use std::ffi::c_void;
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn failed(plugin: &str, message: String) -> PluginError {
    PluginError::Failed {
        plugin: plugin.to_owned(),
        message,
    }
}

/// A library's table; the library is leaked, so the table lives for the process.
#[derive(Clone, Copy)]
struct Table(&'static PluginTable);

impl Table {
    fn take(&self, b: OwnedBytes) -> Vec<u8> {
        let v = if b.ptr.is_null() || b.len == 0 {
            Vec::new()
        } else {
            // SAFETY: the library returned `len` initialised bytes at `ptr`, valid
            // until we free them below.
            unsafe { std::slice::from_raw_parts(b.ptr, b.len) }.to_vec()
        };
        // SAFETY: `b` came from this library and is freed once.
        unsafe { (self.0.free)(b) };
        v
    }

    fn last_error(&self) -> String {
        // SAFETY: `last_error` takes no arguments and returns owned bytes.
        let b = unsafe { (self.0.last_error)() };
        let text = String::from_utf8_lossy(&self.take(b)).into_owned();
        if text.is_empty() {
            "failed without a message".into()
        } else {
            text
        }
    }
}

#[derive(Deserialize)]
struct Described {
    kind: String,
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    example: String,
}

/// One plugin instance inside a library.
struct Instance {
    table: Table,
    handle: *mut c_void,
    name: String,
    /// The panic that broke the instance: it is not called again, and every later
    /// call reports this root cause.
    broken: OnceLock<String>,
}

// SAFETY: the handle is only used through the table, which the ABI requires to be
// callable from any thread; exclusive methods are serialised by the adapters
// (`&mut self`), and a router's shared methods are `Router: Sync` in the library.
unsafe impl Send for Instance {}
// SAFETY: as above.
unsafe impl Sync for Instance {}

impl Instance {
    fn new(
        table: Table,
        name: &str,
        config: &serde_json::Value,
        ctx: &BuildContext,
    ) -> Result<Self, PluginError> {
        let config = config.to_string();
        let ctx = serde_json::to_string(ctx).unwrap_or_default();
        // SAFETY: valid (pointer, length) pairs that outlive the call.
        let handle = unsafe {
            (table.0.create)(
                name.as_ptr(),
                name.len(),
                config.as_ptr(),
                config.len(),
                ctx.as_ptr(),
                ctx.len(),
            )
        };
        if handle.is_null() {
            let message = table.last_error();
            // A refused config is bad input; a panic is the plugin's own failure.
            return Err(if message.starts_with("panicked:") {
                failed(name, format!("create failed: the plugin {message}"))
            } else {
                PluginError::Config {
                    plugin: name.to_owned(),
                    message,
                }
            });
        }
        Ok(Self {
            table,
            handle,
            name: name.to_owned(),
            broken: OnceLock::new(),
        })
    }

    fn call(&self, call: &str, m: u32, input: &[u8]) -> Result<Vec<u8>, PluginError> {
        if let Some(e) = self.broken.get() {
            return Err(failed(&self.name, e.clone()));
        }
        let mut out = OwnedBytes::EMPTY;
        // SAFETY: `handle` is live; input and output are valid for the call.
        let st =
            unsafe { (self.table.0.call)(self.handle, m, input.as_ptr(), input.len(), &mut out) };
        match st {
            status::OK => Ok(self.table.take(out)),
            status::PANIC => {
                let e = format!("{call} failed: the plugin {}", self.table.last_error());
                let _ = self.broken.set(e.clone());
                Err(failed(&self.name, e))
            }
            _ => Err(failed(
                &self.name,
                format!("{call} returned an error: {}", self.table.last_error()),
            )),
        }
    }

    fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        call: &str,
        m: u32,
        input: &[u8],
    ) -> Result<T, PluginError> {
        let out = self.call(call, m, input)?;
        serde_json::from_slice(&out)
            .map_err(|e| failed(&self.name, format!("{call} returned invalid JSON: {e}")))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: `handle` came from `create` and is destroyed once.
        unsafe { (self.table.0.destroy)(self.handle) };
    }
}

struct DylibWorkload {
    inst: Instance,
    info: WorkloadInfo,
}

impl WorkloadSource for DylibWorkload {
    fn info(&self) -> WorkloadInfo {
        self.info.clone()
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        let out = match self
            .inst
            .call("next_trajectory", method::NEXT_TRAJECTORY, b"null")
        {
            Ok(o) => o,
            Err(e) => return Some(Err(e)),
        };
        if out.as_slice() == b"null" {
            return None;
        }
        Some(WireTrajectory::parse(&self.inst.name, &out).map(WireTrajectory::into_trajectory))
    }

    fn final_info(&mut self) -> WorkloadInfo {
        self.inst
            .call_json("final_info", method::FINAL_INFO, b"null")
            .unwrap_or_else(|_| self.info.clone())
    }
}

struct DylibRouter(Instance, bool);

impl DylibRouter {
    /// The router, asked once whether it picks endpoints (a library built
    /// before routers could answers an error: it does not).
    fn new(inst: Instance) -> Self {
        let chooses = inst
            .call_json::<bool>("chooses_endpoint", method::CHOOSES_ENDPOINT, b"null")
            .unwrap_or(false);
        Self(inst, chooses)
    }
}

impl Router for DylibRouter {
    fn decorate(&self, ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        let input = serde_json::to_vec(&WireRouteContext::from_context(ctx)).unwrap_or_default();
        let extras: WireRouteExtras = self.0.call_json("decorate", method::DECORATE, &input)?;
        extras.append_to(&self.0.name, out)
    }

    fn chooses_endpoint(&self) -> bool {
        self.1
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        let input = serde_json::to_vec(&WireEndpointContext::from_context(ctx)).unwrap_or_default();
        self.0
            .call_json("choose_endpoint", method::CHOOSE_ENDPOINT, &input)
    }

    fn dp_rank(&self, routing_slot: u64) -> Option<u64> {
        self.0
            .call_json(
                "dp_rank",
                method::DP_RANK,
                routing_slot.to_string().as_bytes(),
            )
            .ok()
            .flatten()
    }
}

/// A native codec. Its instance is shared by every request of the run and by
/// the stream decoders it opens.
struct DylibCodec(Arc<Instance>);

impl RequestCodec for DylibCodec {
    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let input = serde_json::to_vec(&WireEncodeRequest::from_request(req))
            .map_err(|e| CodecError(e.to_string()))?;
        let body = self
            .0
            .call("encode", method::ENCODE, &input)
            .map_err(|e| CodecError(e.to_string()))?;
        out.write(&body);
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let r: WireReply = self
            .0
            .call_json("decode", method::DECODE, body)
            .map_err(|e| CodecError(e.to_string()))?;
        Ok(r.into_reply(&[]))
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        let id = self
            .0
            .call_json::<u64>("stream_open", method::STREAM_OPEN, b"null");
        Box::new(DylibStream {
            inst: self.0.clone(),
            id,
            feeds: Vec::new(),
            finished: false,
        })
    }
}

/// One streamed response decoded by a native codec. The host stamps each feed's
/// arrival; the codec's timings come back as feed indices.
struct DylibStream {
    inst: Arc<Instance>,
    id: Result<u64, PluginError>,
    feeds: Vec<std::time::Instant>,
    finished: bool,
}

impl DylibStream {
    fn id(&self) -> Result<u64, CodecError> {
        self.id
            .as_ref()
            .map(|i| *i)
            .map_err(|e| CodecError(e.to_string()))
    }
}

impl StreamDecoder for DylibStream {
    fn feed(&mut self, bytes: &[u8], now: std::time::Instant) -> Result<(), CodecError> {
        let mut input = Vec::with_capacity(8 + bytes.len());
        input.extend_from_slice(&self.id()?.to_le_bytes());
        input.extend_from_slice(bytes);
        self.feeds.push(now);
        self.inst
            .call("stream_feed", method::STREAM_FEED, &input)
            .map(drop)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn finish(&mut self) -> Result<Reply, CodecError> {
        self.finished = true;
        let r: WireReply = self
            .inst
            .call_json(
                "stream_finish",
                method::STREAM_FINISH,
                &self.id()?.to_le_bytes(),
            )
            .map_err(|e| CodecError(e.to_string()))?;
        Ok(r.into_reply(&self.feeds))
    }
}

impl Drop for DylibStream {
    fn drop(&mut self) {
        if let (false, Ok(id)) = (self.finished, &self.id) {
            let _ = self
                .inst
                .call("stream_close", method::STREAM_CLOSE, &id.to_le_bytes());
        }
    }
}

/// A reporter in a shared library, and whether it reads live views.
struct DylibReporter(Instance, bool);

/// The `{"run", "summary"}` input of `on_finish` (the shape of
/// [`FinishInput`](batchbench_contract::abi::FinishInput)), serialised without copies.
#[derive(serde::Serialize)]
struct FinishRef<'a> {
    run: &'a RunInfo,
    summary: &'a Summary,
}

impl Reporter for DylibReporter {
    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        let input = serde_json::to_vec(run).unwrap_or_default();
        self.0.call("on_start", method::ON_START, &input).map(drop)
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        let input = serde_json::to_vec(&WireRequestRecord::from_record(rec)).unwrap_or_default();
        self.0
            .call("on_request", method::ON_REQUEST, &input)
            .map(drop)
    }

    fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
        let input = serde_json::to_vec(rec).unwrap_or_default();
        self.0
            .call("on_trajectory", method::ON_TRAJECTORY, &input)
            .map(drop)
    }

    fn wants_live(&self) -> bool {
        self.1
    }

    fn on_live(&mut self, live: &LiveStats) -> Result<(), PluginError> {
        if !self.1 {
            return Ok(());
        }
        let input = serde_json::to_vec(live).unwrap_or_default();
        self.0.call("on_live", method::ON_LIVE, &input).map(drop)
    }

    fn on_finish(&mut self, run: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let input = serde_json::to_vec(&FinishRef { run, summary }).unwrap_or_default();
        self.0
            .call("on_finish", method::ON_FINISH, &input)
            .map(drop)
    }
}

/// What a library registered: `(kind, name)` of each plugin.
pub type LoadedNames = Vec<(&'static str, String)>;

/// Loads the library at `path`, checks its ABI version, and registers every
/// plugin it exports. The library is never unloaded.
pub fn load(path: &Path) -> Result<LoadedNames, PluginError> {
    // One file, one identity, however it is named.
    let origin = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    // SAFETY: loading a library runs its initialisers: native plugins are trusted
    // code (the documented safety model).
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| failed(&origin, format!("cannot load the library: {e}")))?;
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the symbol's type is fixed by the ABI, version 1 and later alike.
    let version = unsafe { lib.get::<unsafe extern "C" fn() -> u32>(VERSION_SYMBOL.as_bytes()) }
        .map_err(|_| {
            failed(
                &origin,
                format!(
                    "not a batchbench plugin: it exports no `{VERSION_SYMBOL}` (build it with batchbench-plugin-sdk's export_plugins!)"
                ),
            )
        })?;
    // SAFETY: as above; the function takes nothing and returns a number.
    let v = unsafe { version() };
    if v != ABI_VERSION {
        return Err(failed(
            &origin,
            format!(
                "built for plugin ABI version {v}, but this batchbench speaks version {ABI_VERSION}: rebuild the plugin against batchbench-plugin-sdk {}",
                env!("CARGO_PKG_VERSION")
            ),
        ));
    }
    // SAFETY: the version matched, so the table symbol has this type.
    let table_fn =
        unsafe { lib.get::<unsafe extern "C" fn() -> *const PluginTable>(TABLE_SYMBOL.as_bytes()) }
            .map_err(|_| failed(&origin, format!("exports no `{TABLE_SYMBOL}`")))?;
    // SAFETY: the function returns a pointer to a static table, or null.
    let table = unsafe { table_fn() };
    if table.is_null() {
        return Err(failed(&origin, "returned no plugin table".into()));
    }
    // SAFETY: non-null and static in a library that is never unloaded.
    let table = Table(unsafe { &*table });
    if table.0.abi_version != ABI_VERSION {
        return Err(failed(
            &origin,
            format!(
                "its table is of ABI version {}, this batchbench speaks {ABI_VERSION}",
                table.0.abi_version
            ),
        ));
    }
    // SAFETY: `describe` takes nothing and returns owned bytes.
    let described = table.take(unsafe { (table.0.describe)() });
    let list: Vec<Described> = serde_json::from_slice(&described)
        .map_err(|e| failed(&origin, format!("describe returned invalid JSON: {e}")))?;
    if list.is_empty() {
        return Err(failed(&origin, "exports no plugins".into()));
    }
    // Refuse the whole library before registering any of it.
    let mut plugins = Vec::with_capacity(list.len());
    for d in list {
        let kind = match d.kind.as_str() {
            "workload" => Kind::Workload,
            "codec" => Kind::Codec,
            "router" => Kind::Router,
            "reporter" => Kind::Reporter,
            other => {
                return Err(failed(
                    &origin,
                    format!("plugin '{}' has unknown kind '{other}'", d.name),
                ));
            }
        };
        plugins.push((kind, d));
    }
    let mut names = Vec::new();
    for (kind, d) in plugins {
        let name = Arc::<str>::from(d.name.as_str());
        let info = PluginInfo {
            kind: kind.as_str(),
            name: d.name,
            description: d.description,
            example: d.example,
            origin: origin.clone(),
        };
        names.push((kind.as_str(), info.name.clone()));
        registry::register_loaded(match kind {
            Kind::Workload => LoadedPlugin::Workload(Loaded {
                info,
                build: Box::new(move |cfg, ctx| {
                    let inst = Instance::new(table, &name, cfg, ctx)?;
                    let info = inst.call_json("info", method::INFO, b"null")?;
                    Ok(Box::new(DylibWorkload { inst, info }))
                }),
            }),
            Kind::Router => LoadedPlugin::Router(Loaded {
                info,
                build: Box::new(move |cfg, ctx| {
                    Ok(Box::new(DylibRouter::new(Instance::new(
                        table, &name, cfg, ctx,
                    )?)))
                }),
            }),
            Kind::Codec => LoadedPlugin::Codec(Loaded {
                info,
                build: Box::new(move |cfg, ctx| {
                    Ok(Box::new(DylibCodec(Arc::new(Instance::new(
                        table, &name, cfg, ctx,
                    )?))))
                }),
            }),
            Kind::Reporter => LoadedPlugin::Reporter(Loaded {
                info,
                build: Box::new(move |cfg, ctx| {
                    let inst = Instance::new(table, &name, cfg, ctx)?;
                    // Asked once: a plugin that cannot answer gets no live views.
                    let wants = inst
                        .call_json::<bool>("wants_live", method::WANTS_LIVE, b"null")
                        .unwrap_or(false);
                    Ok(Box::new(DylibReporter(inst, wants)))
                }),
            }),
        })?;
    }
    Ok(names)
}
