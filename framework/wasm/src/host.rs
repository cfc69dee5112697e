//! Loading components, instantiating them in a sandbox, and mapping them onto the
//! plugin traits.

use crate::sandbox::Sandbox;
use batchbench_contract::plan::Trajectory;
use batchbench_contract::plugin::{
    EndpointContext, LiveStats, PluginError, Reporter, RequestRecord, RouteContext, RouteExtras,
    Router, TrajectoryRecord, WorkloadInfo, WorkloadSource,
};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::Summary;
use batchbench_contract::registry::{self, BuildContext, Loaded, LoadedPlugin, PluginInfo};
use batchbench_contract::wire::{WireRequestRecord, WireRouteExtras, WireTrajectory};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod bindings {
    pub mod workload {
        wasmtime::component::bindgen!({ path: "../wit", world: "workload-plugin" });
    }
    pub mod router {
        wasmtime::component::bindgen!({ path: "../wit", world: "router-plugin" });
    }
    pub mod reporter {
        wasmtime::component::bindgen!({ path: "../wit", world: "reporter-plugin" });
    }
    /// Version 1.1.0: a router that also picks endpoints.
    pub mod fleet_router {
        wasmtime::component::bindgen!({ path: "../wit/v1.1", world: "fleet-router-plugin" });
    }
    /// Version 1.1.0: a reporter that also hears the run as it goes.
    pub mod live_reporter {
        wasmtime::component::bindgen!({ path: "../wit/v1.1", world: "live-reporter-plugin" });
    }
}

use bindings::fleet_router::FleetRouterPlugin;
use bindings::live_reporter::LiveReporterPlugin;
use bindings::reporter::ReporterPlugin;
use bindings::router::RouterPlugin;
use bindings::router::exports::batchbench::plugin::router::RouteContext as GuestRouteContext;
use bindings::workload::WorkloadPlugin;

/// The interface name prefix of the contract's exports.
const PACKAGE: &str = "batchbench:plugin/";
/// The contract version of the workload, router and reporter worlds.
const VERSION: &str = "@1.0.0";
/// The contract version of the fleet-router and live-reporter worlds (1.1.0
/// adds them).
const VERSION_1_1: &str = "@1.1.0";
/// Epoch tick: the resolution of call deadlines.
const TICK: Duration = Duration::from_millis(5);

/// Which world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorldKind {
    /// `workload-plugin`.
    Workload,
    /// `router-plugin`.
    Router,
    /// `fleet-router-plugin` (1.1.0): a router that picks endpoints.
    FleetRouter,
    /// `reporter-plugin`.
    Reporter,
    /// `live-reporter-plugin` (1.1.0): a reporter that hears live views.
    LiveReporter,
}

impl WorldKind {
    /// The plugin kind's name: `workload`, `router` or `reporter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workload => "workload",
            Self::Router | Self::FleetRouter => "router",
            Self::Reporter | Self::LiveReporter => "reporter",
        }
    }
}

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    _grants: Vec<tempfile::TempDir>,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

struct Runtime {
    engine: Engine,
    linker: Linker<State>,
}

/// The process-wide engine (epoch interruption on, ticked by one thread) and the
/// linker providing WASI.
fn runtime() -> Result<&'static Runtime, PluginError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let mut config = Config::new();
            config.epoch_interruption(true);
            config.wasm_component_model(true);
            let engine = Engine::new(&config).map_err(|e| format!("{e:#}"))?;
            let mut linker = Linker::new(&engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
            let ticker = engine.weak();
            std::thread::Builder::new()
                .name("batchbench-wasm-epoch".into())
                .spawn(move || {
                    while let Some(engine) = ticker.upgrade() {
                        drop(engine);
                        std::thread::sleep(TICK);
                        match ticker.upgrade() {
                            Some(e) => e.increment_epoch(),
                            None => break,
                        }
                    }
                })
                .map_err(|e| format!("cannot start the epoch thread: {e}"))?;
            Ok(Runtime { engine, linker })
        })
        .as_ref()
        .map_err(|e| PluginError::Failed {
            plugin: "wasm".into(),
            message: format!("cannot start the WebAssembly engine: {e}"),
        })
}

fn ticks(ms: u64) -> u64 {
    ms.div_ceil(TICK.as_millis() as u64) + 1
}

/// A compiled component, shared by its instances.
struct Plugin {
    /// Its plugin name (a probe during loading: the file).
    name: String,
    kind: WorldKind,
    component: Component,
}

enum Bound {
    Workload(WorkloadPlugin),
    Router(RouterPlugin),
    FleetRouter(FleetRouterPlugin),
    Reporter(ReporterPlugin),
    LiveReporter(LiveReporterPlugin),
}

/// A store and what was instantiated in it.
struct Inner {
    store: Store<State>,
    bound: Option<Bound>,
}

type Job = Box<dyn FnOnce(&mut Inner) + Send>;

/// Where an instance's calls run.
enum Exec {
    /// On the calling thread (routers: the request path, where a thread hop would
    /// cost more than the call).
    Direct(Inner),
    /// On the instance's own thread, which the caller waits for with a timeout: a
    /// call blocked in a host function (a sleep, a blocking read), which epoch
    /// interruption cannot stop, is abandoned there instead of hanging the run.
    Thread(std::sync::mpsc::Sender<Job>),
}

/// One sandboxed instance of a plugin.
struct Instance {
    plugin: Arc<Plugin>,
    exec: Exec,
    sandbox: Sandbox,
    /// Set after a trap or deadline: the instance's state is gone.
    broken: Option<String>,
}

/// How long past its deadline a call may take to come back (a trap unwinds in
/// microseconds; this covers a busy machine) before it is abandoned.
const GRACE: Duration = Duration::from_secs(2);

fn failed(plugin: &str, message: String) -> PluginError {
    PluginError::Failed {
        plugin: plugin.to_owned(),
        message,
    }
}

thread_local! {
    /// Set while this thread runs a guest call whose panics are caught and
    /// reported as plugin errors.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, whose panics the caller catches and reports, without the panic
/// hook's message and backtrace: a router doing I/O on the request path panics
/// inside WASI, and the user should read one clear line, not a backtrace. The hook
/// installed once here defers to the previous one everywhere else.
fn quiet_panics<R>(f: impl FnOnce() -> R) -> R {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let r = f();
    QUIET.with(|q| q.set(false));
    r
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

fn new_store(sandbox: &Sandbox, plugin: &str) -> Result<Store<State>, PluginError> {
    let rt = runtime()?;
    let (wasi, grants) = sandbox.wasi(plugin)?;
    // Linear memory is what a guest allocates; tables and instances are bounded
    // too, so that growing them is no way around the limit.
    let limits = StoreLimitsBuilder::new()
        .memory_size((sandbox.memory_mb as usize) << 20)
        .memories(8)
        .tables(32)
        .table_elements(100_000)
        .instances(64)
        .trap_on_grow_failure(true)
        .build();
    let mut store = Store::new(
        &rt.engine,
        State {
            wasi,
            table: ResourceTable::new(),
            limits,
            _grants: grants,
        },
    );
    store.limiter(|s| &mut s.limits);
    Ok(store)
}

impl Instance {
    /// Instantiates `plugin` in a fresh sandbox; `threaded`: calls run on the
    /// instance's own thread.
    fn start(plugin: &Arc<Plugin>, sandbox: Sandbox, threaded: bool) -> Result<Self, PluginError> {
        let inner = Inner {
            store: new_store(&sandbox, &plugin.name)?,
            bound: None,
        };
        let exec = if threaded {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("wasm-{}", plugin.name))
                .spawn(move || {
                    let mut inner = inner;
                    while let Ok(job) = rx.recv() {
                        job(&mut inner);
                    }
                })
                .map_err(|e| failed(&plugin.name, format!("cannot start its thread: {e}")))?;
            Exec::Thread(tx)
        } else {
            Exec::Direct(inner)
        };
        let mut inst = Self {
            plugin: plugin.clone(),
            exec,
            sandbox,
            broken: None,
        };
        let p = plugin.clone();
        let timeout = inst.sandbox.init_timeout_ms;
        inst.run("instantiate", timeout, move |inner| {
            let rt = runtime().map_err(|e| wasmtime::Error::msg(e.to_string()))?;
            let store = &mut inner.store;
            inner.bound =
                Some(match p.kind {
                    WorldKind::Workload => Bound::Workload(WorkloadPlugin::instantiate(
                        store,
                        &p.component,
                        &rt.linker,
                    )?),
                    WorldKind::Router => {
                        Bound::Router(RouterPlugin::instantiate(store, &p.component, &rt.linker)?)
                    }
                    WorldKind::FleetRouter => Bound::FleetRouter(FleetRouterPlugin::instantiate(
                        store,
                        &p.component,
                        &rt.linker,
                    )?),
                    WorldKind::Reporter => Bound::Reporter(ReporterPlugin::instantiate(
                        store,
                        &p.component,
                        &rt.linker,
                    )?),
                    WorldKind::LiveReporter => Bound::LiveReporter(
                        LiveReporterPlugin::instantiate(store, &p.component, &rt.linker)?,
                    ),
                });
            Ok(())
        })?;
        Ok(inst)
    }

    /// A plugin instance built from the user's config: the sandbox part
    /// configures the host, the rest goes to the plugin's `init`.
    fn new(
        plugin: &Arc<Plugin>,
        config: &serde_json::Value,
        ctx: &BuildContext,
    ) -> Result<Self, PluginError> {
        let (sandbox, own) = Sandbox::split(&plugin.name, config)?;
        let routes = matches!(plugin.kind, WorldKind::Router | WorldKind::FleetRouter);
        let mut inst = Self::start(plugin, sandbox, !routes)?;
        let config_text = own.to_string();
        let ctx_text = serde_json::to_string(ctx).unwrap_or_default();
        let timeout = inst.sandbox.init_timeout_ms;
        let r = inst.call("init", timeout, move |store, bound| match bound {
            Bound::Workload(b) => {
                b.batchbench_plugin_workload()
                    .call_init(store, &config_text, &ctx_text)
            }
            Bound::Router(b) => {
                b.batchbench_plugin_router()
                    .call_init(store, &config_text, &ctx_text)
            }
            Bound::FleetRouter(b) => {
                b.batchbench_plugin_router()
                    .call_init(store, &config_text, &ctx_text)
            }
            Bound::Reporter(b) => {
                b.batchbench_plugin_reporter()
                    .call_init(store, &config_text, &ctx_text)
            }
            Bound::LiveReporter(b) => {
                b.batchbench_plugin_reporter()
                    .call_init(store, &config_text, &ctx_text)
            }
        })?;
        r.map_err(|message| PluginError::Config {
            plugin: plugin.name.clone(),
            message,
        })?;
        Ok(inst)
    }

    /// Calls an export of the instantiated plugin under the deadline.
    fn call<R: Send + 'static>(
        &mut self,
        call: &'static str,
        timeout_ms: u64,
        f: impl FnOnce(&mut Store<State>, &Bound) -> wasmtime::Result<R> + Send + 'static,
    ) -> Result<R, PluginError> {
        self.run(call, timeout_ms, move |inner| match &inner.bound {
            Some(b) => f(&mut inner.store, b),
            None => Err(wasmtime::Error::msg("called before instantiation")),
        })
    }

    /// Runs `job` under the deadline, where this instance's calls run.
    fn run<R: Send + 'static>(
        &mut self,
        call: &'static str,
        timeout_ms: u64,
        job: impl FnOnce(&mut Inner) -> wasmtime::Result<R> + Send + 'static,
    ) -> Result<R, PluginError> {
        let name = &self.plugin.name;
        if let Some(e) = &self.broken {
            // The instance's state is gone: every later call reports the root cause
            // (concurrent callers of a router see the same error as the first).
            return Err(failed(name, e.clone()));
        }
        let guarded = move |inner: &mut Inner| {
            inner.store.set_epoch_deadline(ticks(timeout_ms));
            catch_unwind(AssertUnwindSafe(|| job(inner)))
        };
        let out = match &mut self.exec {
            Exec::Direct(inner) => quiet_panics(|| guarded(inner)),
            Exec::Thread(tx) => {
                let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
                let sent = tx.send(Box::new(move |inner: &mut Inner| {
                    let _ = done_tx.send(guarded(inner));
                }));
                let wait = Duration::from_millis(timeout_ms) + GRACE;
                match sent.map(|()| done_rx.recv_timeout(wait)) {
                    Ok(Ok(out)) => out,
                    Ok(Err(_)) | Err(_) => {
                        // Blocked in a host call: abandon the thread (it ends when
                        // the call returns, or with the process).
                        let (dead_tx, _) = std::sync::mpsc::channel();
                        self.exec = Exec::Thread(dead_tx);
                        let err = format!(
                            "{call} failed: exceeded its {timeout_ms} ms deadline (blocked in a host call; the instance was abandoned)"
                        );
                        self.broken = Some(err.clone());
                        return Err(failed(name, err));
                    }
                }
            }
        };
        let err = match out {
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(e)) => {
                let text = if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    format!("exceeded its {timeout_ms} ms deadline")
                } else {
                    describe_error(&e, &self.sandbox)
                };
                format!("{call} failed: {text}")
            }
            Err(p) => {
                let text = panic_text(p.as_ref());
                if text.contains("runtime from within a runtime") {
                    format!(
                        "{call} failed: the plugin did I/O (console, files or sockets) on the request path, which a {} may not do",
                        self.plugin.kind.as_str()
                    )
                } else {
                    format!("{call} failed: the host panicked: {text}")
                }
            }
        };
        self.broken = Some(err.clone());
        Err(failed(name, err))
    }
}

fn describe_error(e: &wasmtime::Error, sandbox: &Sandbox) -> String {
    let chain = format!("{e:#}");
    if chain.contains("forcing trap when growing memory") {
        return format!("exceeded its memory limit of {} MiB", sandbox.memory_mb);
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => "exceeded its deadline".into(),
        Some(t) => format!("trapped: {t}"),
        None => chain.lines().next().unwrap_or_default().to_owned(),
    }
}

fn guest_err(plugin: &str, call: &str, message: String) -> PluginError {
    failed(plugin, format!("{call} returned an error: {message}"))
}

// ---------------------------------------------------------------------------
// Workload

struct WasmWorkload {
    inst: Instance,
    info: WorkloadInfo,
}

impl WasmWorkload {
    fn new(
        p: &Arc<Plugin>,
        config: &serde_json::Value,
        ctx: &BuildContext,
    ) -> Result<Self, PluginError> {
        let mut inst = Instance::new(p, config, ctx)?;
        let info = Self::fetch_info(&mut inst)?;
        Ok(Self { inst, info })
    }

    fn fetch_info(inst: &mut Instance) -> Result<WorkloadInfo, PluginError> {
        let t = inst.sandbox.call_timeout_ms;
        let json = inst.call("info", t, |store, b| match b {
            Bound::Workload(b) => b.batchbench_plugin_workload().call_info(store),
            _ => unreachable_kind(),
        })?;
        serde_json::from_str(&json).map_err(|e| {
            failed(
                &inst.plugin.name,
                format!("info returned invalid JSON: {e}"),
            )
        })
    }
}

fn unreachable_kind<R>() -> wasmtime::Result<R> {
    Err(wasmtime::Error::msg(
        "internal error: call on a plugin of another kind",
    ))
}

impl WorkloadSource for WasmWorkload {
    fn info(&self) -> WorkloadInfo {
        self.info.clone()
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        let t = self.inst.sandbox.call_timeout_ms;
        let r = self.inst.call("next_trajectory", t, |store, b| match b {
            Bound::Workload(b) => b.batchbench_plugin_workload().call_next_trajectory(store),
            _ => unreachable_kind(),
        });
        let name = &self.inst.plugin.name;
        match r {
            Err(e) => Some(Err(e)),
            Ok(Err(m)) => Some(Err(guest_err(name, "next_trajectory", m))),
            Ok(Ok(None)) => None,
            Ok(Ok(Some(json))) => Some(
                WireTrajectory::parse(name, json.as_bytes()).map(WireTrajectory::into_trajectory),
            ),
        }
    }

    fn final_info(&mut self) -> WorkloadInfo {
        Self::fetch_info(&mut self.inst).unwrap_or_else(|_| self.info.clone())
    }
}

// ---------------------------------------------------------------------------
// Router

/// A route context of 1.0.0 as 1.1.0's (the same record).
fn fleet_route(
    c: GuestRouteContext,
) -> bindings::fleet_router::exports::batchbench::plugin::router::RouteContext {
    bindings::fleet_router::exports::batchbench::plugin::router::RouteContext {
        seed: c.seed,
        agent_id: c.agent_id,
        routing_slot: c.routing_slot,
        trajectory_id: c.trajectory_id,
        request_index: c.request_index,
    }
}

struct WasmRouter {
    inst: Mutex<Instance>,
    name: String,
    /// A fleet router (1.1.0): it picks endpoints.
    chooses: bool,
}

impl Router for WasmRouter {
    fn decorate(&self, ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        let mut inst = self.inst.lock().unwrap_or_else(|p| p.into_inner());
        let t = inst.sandbox.call_timeout_ms;
        let gctx = GuestRouteContext {
            seed: ctx.seed,
            agent_id: ctx.agent_id,
            routing_slot: ctx.routing_slot,
            trajectory_id: ctx.trajectory_id.to_owned(),
            request_index: ctx.request_index,
        };
        let r = inst.call("decorate", t, move |store, b| match b {
            Bound::Router(b) => Ok(b
                .batchbench_plugin_router()
                .call_decorate(store, &gctx)?
                .map(|e| (e.headers, e.body_fields))),
            Bound::FleetRouter(b) => {
                let gctx = fleet_route(gctx);
                Ok(b.batchbench_plugin_router()
                    .call_decorate(store, &gctx)?
                    .map(|e| (e.headers, e.body_fields)))
            }
            _ => unreachable_kind(),
        })?;
        let (headers, body_fields) = r.map_err(|m| guest_err(&self.name, "decorate", m))?;
        let mut fields = Vec::with_capacity(body_fields.len());
        for (k, v) in body_fields {
            let value = serde_json::from_str(&v).map_err(|e| {
                failed(
                    &self.name,
                    format!("decorate: body field {k:?} is not JSON: {e}"),
                )
            })?;
            fields.push((k, value));
        }
        WireRouteExtras {
            headers,
            body_fields: fields,
        }
        .append_to(&self.name, out)
    }

    fn chooses_endpoint(&self) -> bool {
        self.chooses
    }

    fn choose_endpoint(&self, ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        use bindings::fleet_router::exports::batchbench::plugin::endpoint_router::EndpointContext as GuestEndpointContext;
        let mut inst = self.inst.lock().unwrap_or_else(|p| p.into_inner());
        let t = inst.sandbox.call_timeout_ms;
        let gctx = GuestEndpointContext {
            route: fleet_route(GuestRouteContext {
                seed: ctx.route.seed,
                agent_id: ctx.route.agent_id,
                routing_slot: ctx.route.routing_slot,
                trajectory_id: ctx.route.trajectory_id.to_owned(),
                request_index: ctx.route.request_index,
            }),
            in_flight: ctx.in_flight.to_vec(),
            block_hashes: ctx.block_hashes.to_vec(),
            block_tokens: ctx.block_tokens,
        };
        let r = inst.call("choose_endpoint", t, move |store, b| match b {
            Bound::FleetRouter(b) => b
                .batchbench_plugin_endpoint_router()
                .call_choose_endpoint(store, &gctx),
            _ => unreachable_kind(),
        })?;
        let i = r.map_err(|m| guest_err(&self.name, "choose_endpoint", m))?;
        Ok(i as usize)
    }

    fn dp_rank(&self, routing_slot: u64) -> Option<u64> {
        let mut inst = self.inst.lock().unwrap_or_else(|p| p.into_inner());
        let t = inst.sandbox.call_timeout_ms;
        inst.call("dp_rank", t, move |store, b| match b {
            Bound::Router(b) => b
                .batchbench_plugin_router()
                .call_dp_rank(store, routing_slot),
            Bound::FleetRouter(b) => b
                .batchbench_plugin_router()
                .call_dp_rank(store, routing_slot),
            _ => unreachable_kind(),
        })
        .ok()
        .flatten()
    }
}

// ---------------------------------------------------------------------------
// Reporter

struct WasmReporter {
    inst: Instance,
}

/// A reporter hook of either reporter world (their `reporter` interfaces are
/// the same, in two packages).
#[derive(Clone, Copy)]
enum Hook {
    Start,
    Request,
    Trajectory,
}

impl Hook {
    fn name(self) -> &'static str {
        match self {
            Self::Start => "on_start",
            Self::Request => "on_request",
            Self::Trajectory => "on_trajectory",
        }
    }
}

/// Calls `$hook` (a [`Hook`]) with `$arg` on `$guest`, a `reporter` interface
/// of either version.
macro_rules! reporter_hook {
    ($guest:expr, $store:expr, $hook:expr, $arg:expr) => {
        match $hook {
            Hook::Start => $guest.call_on_start($store, $arg),
            Hook::Request => $guest.call_on_request($store, $arg),
            Hook::Trajectory => $guest.call_on_trajectory($store, $arg),
        }
    };
}

impl WasmReporter {
    fn hook(&mut self, hook: Hook, arg: String) -> Result<(), PluginError> {
        let t = self.inst.sandbox.call_timeout_ms;
        self.inst
            .call(hook.name(), t, move |store, b| match b {
                Bound::Reporter(b) => {
                    reporter_hook!(b.batchbench_plugin_reporter(), store, hook, &arg)
                }
                Bound::LiveReporter(b) => {
                    reporter_hook!(b.batchbench_plugin_reporter(), store, hook, &arg)
                }
                _ => unreachable_kind(),
            })?
            .map_err(|m| guest_err(&self.inst.plugin.name, hook.name(), m))
    }
}

impl Reporter for WasmReporter {
    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        let arg = serde_json::to_string(run).unwrap_or_default();
        self.hook(Hook::Start, arg)
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        let arg = serde_json::to_string(&WireRequestRecord::from_record(rec)).unwrap_or_default();
        self.hook(Hook::Request, arg)
    }

    fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
        let arg = serde_json::to_string(rec).unwrap_or_default();
        self.hook(Hook::Trajectory, arg)
    }

    fn wants_live(&self) -> bool {
        // Only a component of the live-reporter world hears them.
        self.inst.plugin.kind == WorldKind::LiveReporter
    }

    fn on_live(&mut self, live: &LiveStats) -> Result<(), PluginError> {
        if !self.wants_live() {
            return Ok(());
        }
        let t = self.inst.sandbox.call_timeout_ms;
        let arg = serde_json::to_string(live).unwrap_or_default();
        self.inst
            .call("on_live", t, move |store, b| match b {
                Bound::LiveReporter(b) => b
                    .batchbench_plugin_live_reporter()
                    .call_on_live(store, &arg),
                _ => unreachable_kind(),
            })?
            .map_err(|m| guest_err(&self.inst.plugin.name, "on_live", m))
    }

    fn on_finish(&mut self, run: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let t = self.inst.sandbox.call_timeout_ms;
        let (run, summary) = (
            serde_json::to_string(run).unwrap_or_default(),
            serde_json::to_string(summary).unwrap_or_default(),
        );
        self.inst
            .call("on_finish", t, move |store, b| match b {
                Bound::Reporter(b) => b
                    .batchbench_plugin_reporter()
                    .call_on_finish(store, &run, &summary),
                Bound::LiveReporter(b) => b
                    .batchbench_plugin_reporter()
                    .call_on_finish(store, &run, &summary),
                _ => unreachable_kind(),
            })?
            .map_err(|m| guest_err(&self.inst.plugin.name, "on_finish", m))
    }
}

// ---------------------------------------------------------------------------
// Loading

/// What a loaded component registered.
#[derive(Debug, Clone)]
pub struct LoadedInfo {
    /// The world it implements.
    pub kind: WorldKind,
    /// Its plugin name.
    pub name: String,
}

fn world_of(component: &Component, engine: &Engine) -> Option<WorldKind> {
    let ty = component.component_type();
    let mut kind = None;
    for (name, _) in ty.exports(engine) {
        let Some(rest) = name.strip_prefix(PACKAGE) else {
            continue;
        };
        match rest.strip_suffix(VERSION_1_1) {
            Some("endpoint-router") => return Some(WorldKind::FleetRouter),
            Some("live-reporter") => return Some(WorldKind::LiveReporter),
            _ => {}
        }
        kind = match rest.strip_suffix(VERSION) {
            Some("workload") => Some(WorldKind::Workload),
            Some("router") => Some(WorldKind::Router),
            Some("reporter") => Some(WorldKind::Reporter),
            _ => kind,
        };
    }
    kind
}

/// Compiles the component at `path`, asks it to describe itself, and registers it
/// under its name beside the built-in plugins of its kind.
pub fn load(path: &Path) -> Result<LoadedInfo, PluginError> {
    // One file, one identity, however it is named.
    let origin = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    let rt = runtime()?;
    let bytes = std::fs::read(path).map_err(|e| failed(&origin, format!("cannot read: {e}")))?;
    let component = Component::new(&rt.engine, &bytes).map_err(|e| {
        failed(
            &origin,
            format!(
                "not a WebAssembly component: {}",
                format!("{e:#}").lines().next().unwrap_or_default()
            ),
        )
    })?;
    let kind = world_of(&component, &rt.engine).ok_or_else(|| {
        let exports: Vec<String> = component
            .component_type()
            .exports(&rt.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        failed(
            &origin,
            format!(
                "exports none of the worlds of batchbench:plugin{VERSION} (workload-plugin, router-plugin, reporter-plugin) or {VERSION_1_1} (fleet-router-plugin, live-reporter-plugin); it exports: {}",
                if exports.is_empty() { "nothing".into() } else { exports.join(", ") }
            ),
        )
    })?;
    // Describe runs in a throwaway instance with the default sandbox.
    let probe = Arc::new(Plugin {
        name: origin.clone(),
        kind,
        component: component.clone(),
    });
    let info = describe(&probe, kind, &origin)?;
    let p = Arc::new(Plugin {
        name: info.name.clone(),
        kind,
        component,
    });
    let name = info.name.clone();
    registry::register_loaded(match kind {
        WorldKind::Workload => LoadedPlugin::Workload(Loaded {
            info,
            build: Box::new(move |cfg, ctx| Ok(Box::new(WasmWorkload::new(&p, cfg, ctx)?))),
        }),
        WorldKind::Router | WorldKind::FleetRouter => LoadedPlugin::Router(Loaded {
            info,
            build: Box::new(move |cfg, ctx| {
                let inst = Instance::new(&p, cfg, ctx)?;
                Ok(Box::new(WasmRouter {
                    name: p.name.clone(),
                    inst: Mutex::new(inst),
                    chooses: p.kind == WorldKind::FleetRouter,
                }))
            }),
        }),
        WorldKind::Reporter | WorldKind::LiveReporter => LoadedPlugin::Reporter(Loaded {
            info,
            build: Box::new(move |cfg, ctx| {
                Ok(Box::new(WasmReporter {
                    inst: Instance::new(&p, cfg, ctx)?,
                }))
            }),
        }),
    })?;
    Ok(LoadedInfo { kind, name })
}

/// The plugin's own description, from a throwaway instance on its own thread with
/// the default sandbox and deadline.
fn describe(p: &Arc<Plugin>, kind: WorldKind, origin: &str) -> Result<PluginInfo, PluginError> {
    let mut inst = Instance::start(p, Sandbox::default(), true)?;
    let t = inst.sandbox.call_timeout_ms;
    let (name, description, example) = inst.call("describe", t, |store, b| {
        Ok(match b {
            Bound::Workload(b) => {
                let i = b.batchbench_plugin_meta().call_describe(store)?;
                (i.name, i.description, i.example_config)
            }
            Bound::Router(b) => {
                let i = b.batchbench_plugin_meta().call_describe(store)?;
                (i.name, i.description, i.example_config)
            }
            Bound::FleetRouter(b) => {
                let i = b.batchbench_plugin_meta().call_describe(store)?;
                (i.name, i.description, i.example_config)
            }
            Bound::Reporter(b) => {
                let i = b.batchbench_plugin_meta().call_describe(store)?;
                (i.name, i.description, i.example_config)
            }
            Bound::LiveReporter(b) => {
                let i = b.batchbench_plugin_meta().call_describe(store)?;
                (i.name, i.description, i.example_config)
            }
        })
    })?;
    if serde_json::from_str::<serde_json::Value>(&example).is_err() {
        return Err(failed(
            origin,
            format!("describe: example-config of '{name}' is not JSON"),
        ));
    }
    Ok(PluginInfo {
        kind: kind.as_str(),
        name,
        description,
        example,
        origin: origin.to_owned(),
    })
}
