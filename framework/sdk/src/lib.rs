//! Write a native batchbench plugin.
//!
//! Implement [`WorkloadSource`], [`RequestCodec`], [`Router`] or [`Reporter`] exactly as a
//! built-in plugin does, then export the implementations from a `cdylib` with
//! [`export_plugins!`]. The macro writes the C ABI of [`abi`] for you: the version
//! symbol, the function table, JSON across the boundary, panics caught at every
//! export, and errors through `last_error`.
//!
//! ```ignore
//! use batchbench_plugin_sdk::plugin::{PluginError, RouteContext, RouteExtras, Router};
//! use batchbench_plugin_sdk::BuildContext;
//!
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Config { team: String }
//!
//! struct Team(String);
//!
//! impl Router for Team {
//!     fn decorate(&self, _: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
//!         out.headers.push(("X-Team".into(), self.0.clone()));
//!         Ok(())
//!     }
//! }
//!
//! batchbench_plugin_sdk::export_plugins! {
//!     router {
//!         name: "team_header",
//!         description: "adds X-Team to every request",
//!         example: r#"{"team": "inference"}"#,
//!         config: Config,
//!         build: |c: Config, _ctx: &BuildContext| Ok::<_, PluginError>(Team(c.team)),
//!     },
//! }
//! ```
//!
//! Native plugins run in the batchbench process with its rights: load only code you
//! trust. For code you do not, write a WebAssembly component instead.

#![allow(unsafe_code)] // the C ABI boundary; every block states its contract

pub use batchbench_contract::abi;
pub use batchbench_contract::plan;
pub use batchbench_contract::plugin;
pub use batchbench_contract::record::RunInfo;
pub use batchbench_contract::record::Summary;
pub use batchbench_contract::registry::{BuildContext, parse_config};
pub use batchbench_contract::wire;

use abi::{OwnedBytes, PluginTable, method, status};
use batchbench_contract::plugin::{
    BodyWriter, EncodeRequest, LiveStats, PluginError, Reporter, RequestCodec, RouteExtras, Router,
    StreamDecoder, WorkloadSource,
};
use batchbench_contract::wire::{
    WireEncodeRequest, WireEndpointContext, WireReply, WireRequestRecord, WireRouteContext,
    WireRouteExtras, WireTrajectory,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// One open stream: its decoder and the arrival of each of its feeds.
type OpenStream = (Box<dyn StreamDecoder>, Vec<Instant>);

/// The open streams of a codec instance.
#[doc(hidden)]
#[derive(Default)]
pub struct Streams {
    next: AtomicU64,
    open: Mutex<HashMap<u64, OpenStream>>,
}

/// A built plugin instance.
#[doc(hidden)]
pub enum Built {
    Workload(Box<dyn WorkloadSource>),
    Codec(Box<dyn RequestCodec>, Streams),
    Router(Box<dyn Router>),
    Reporter(Box<dyn Reporter>),
}

/// One exported plugin (written by [`export_plugins!`]).
#[doc(hidden)]
pub struct Entry {
    pub kind: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub example: &'static str,
    pub build: fn(&serde_json::Value, &BuildContext) -> Result<Built, PluginError>,
}

static ENTRIES: OnceLock<&'static [Entry]> = OnceLock::new();

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_error(m: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = m);
}

fn owned(v: Vec<u8>) -> OwnedBytes {
    let mut v = std::mem::ManuallyDrop::new(v);
    OwnedBytes {
        ptr: v.as_mut_ptr(),
        len: v.len(),
        cap: v.capacity(),
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// # Safety
/// `ptr` must be null or valid for `len` bytes for the duration of the call.
unsafe fn slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the host passes a pointer to `len` live bytes (the ABI contract).
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

unsafe extern "C" fn describe() -> OwnedBytes {
    let list: Vec<serde_json::Value> = ENTRIES
        .get()
        .map(|e| e.iter())
        .into_iter()
        .flatten()
        .map(|e| {
            serde_json::json!({
                "kind": e.kind, "name": e.name, "description": e.description, "example": e.example,
            })
        })
        .collect();
    owned(serde_json::to_vec(&list).unwrap_or_default())
}

struct Handle {
    built: Built,
}

unsafe extern "C" fn create(
    name: *const u8,
    name_len: usize,
    config: *const u8,
    config_len: usize,
    ctx: *const u8,
    ctx_len: usize,
) -> *mut c_void {
    // SAFETY: the host passes valid (pointer, length) pairs.
    let (name, config, ctx) = unsafe {
        (
            slice(name, name_len),
            slice(config, config_len),
            slice(ctx, ctx_len),
        )
    };
    let r = catch_unwind(|| -> Result<Built, String> {
        let name = std::str::from_utf8(name).map_err(|e| e.to_string())?;
        let entry = ENTRIES
            .get()
            .and_then(|e| e.iter().find(|e| e.name == name))
            .ok_or_else(|| format!("this library has no plugin named '{name}'"))?;
        let config: serde_json::Value =
            serde_json::from_slice(config).map_err(|e| format!("config is not JSON: {e}"))?;
        let ctx: BuildContext =
            serde_json::from_slice(ctx).map_err(|e| format!("context is not JSON: {e}"))?;
        (entry.build)(&config, &ctx).map_err(|e| e.to_string())
    });
    match r {
        Ok(Ok(built)) => Box::into_raw(Box::new(Handle { built })).cast(),
        Ok(Err(m)) => {
            set_error(m);
            std::ptr::null_mut()
        }
        Err(p) => {
            set_error(format!("panicked: {}", panic_text(p.as_ref())));
            std::ptr::null_mut()
        }
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, String> {
    serde_json::to_vec(v).map_err(|e| e.to_string())
}

fn parse<'a, T: serde::Deserialize<'a>>(input: &'a [u8], what: &str) -> Result<T, String> {
    serde_json::from_slice(input).map_err(|e| format!("invalid {what} from the host: {e}"))
}

fn dispatch(h: &mut Handle, m: u32, input: &[u8]) -> Result<Vec<u8>, String> {
    match (&mut h.built, m) {
        (Built::Workload(w), method::INFO) => json(&w.info()),
        (Built::Workload(w), method::FINAL_INFO) => json(&w.final_info()),
        (Built::Workload(w), method::NEXT_TRAJECTORY) => match w.next_trajectory() {
            None => Ok(b"null".to_vec()),
            Some(Err(e)) => Err(e.to_string()),
            Some(Ok(t)) => json(&WireTrajectory {
                id: t.id.to_string(),
                start_after_ms: t.start_after_ms,
                requests: t.requests.collect(),
            }),
        },
        (Built::Reporter(r), method::ON_START) => {
            let run: RunInfo = parse(input, "run info")?;
            r.on_start(&run).map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        (Built::Reporter(r), method::ON_REQUEST) => {
            let rec: WireRequestRecord = parse(input, "request record")?;
            r.on_request(&rec.record()).map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        (Built::Reporter(r), method::ON_TRAJECTORY) => {
            r.on_trajectory(&parse(input, "trajectory record")?)
                .map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        (Built::Reporter(r), method::WANTS_LIVE) => json(&r.wants_live()),
        (Built::Reporter(r), method::ON_LIVE) => {
            let live: LiveStats = parse(input, "live view")?;
            r.on_live(&live).map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        (Built::Reporter(r), method::ON_FINISH) => {
            let f: abi::FinishInput = parse(input, "run summary")?;
            r.on_finish(&f.run, &f.summary).map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        (_, m) => Err(format!("method {m} is not one of this plugin's kind")),
    }
}

/// The stream id at the start of a stream method's input, and the rest.
fn stream_id(input: &[u8]) -> Result<(u64, &[u8]), String> {
    let (id, rest) = input
        .split_first_chunk::<8>()
        .ok_or("a stream call without its 8-byte stream id")?;
    Ok((u64::from_le_bytes(*id), rest))
}

fn codec_call(
    codec: &dyn RequestCodec,
    streams: &Streams,
    m: u32,
    input: &[u8],
) -> Result<Vec<u8>, String> {
    let lock = || {
        streams
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    match m {
        method::ENCODE => {
            let req: WireEncodeRequest = parse(input, "encode request")?;
            let conversation = req.conversation()?;
            let mut out = BodyWriter::default();
            codec
                .encode(
                    &EncodeRequest {
                        model: &req.model,
                        conversation: &conversation,
                        output: req.output,
                        stream: req.stream,
                        extra_fields: &req.extra_fields,
                        raw_body: req.raw_body.as_ref(),
                    },
                    &mut out,
                )
                .map_err(|e| e.to_string())?;
            Ok(out.finish().concat())
        }
        method::DECODE => json(&WireReply::from_reply(
            codec.decode(input).map_err(|e| e.to_string())?,
            &[],
        )),
        method::STREAM_OPEN => {
            let id = streams.next.fetch_add(1, Ordering::Relaxed);
            lock().insert(id, (codec.stream_decoder(), Vec::new()));
            json(&id)
        }
        method::STREAM_FEED => {
            let (id, bytes) = stream_id(input)?;
            let mut open = lock();
            let (decoder, feeds) = open.get_mut(&id).ok_or("no such stream")?;
            let now = Instant::now();
            feeds.push(now);
            decoder.feed(bytes, now).map_err(|e| e.to_string())?;
            Ok(b"null".to_vec())
        }
        method::STREAM_FINISH => {
            let (id, _) = stream_id(input)?;
            let (mut decoder, feeds) = lock().remove(&id).ok_or("no such stream")?;
            let reply = decoder.finish().map_err(|e| e.to_string())?;
            json(&WireReply::from_reply(reply, &feeds))
        }
        method::STREAM_CLOSE => {
            let (id, _) = stream_id(input)?;
            lock().remove(&id);
            Ok(b"null".to_vec())
        }
        m => Err(format!("method {m} is not one of this plugin's kind")),
    }
}

/// Whether the host may call method `m` from many threads at once (router and
/// codec methods): the instance is then reached through a shared reference only.
fn is_shared(m: u32) -> bool {
    matches!(
        m,
        method::DECORATE | method::DP_RANK | method::CHOOSES_ENDPOINT | method::CHOOSE_ENDPOINT
    ) || (method::ENCODE..=method::STREAM_CLOSE).contains(&m)
}

/// A router's or codec's methods, which the host calls from many threads at
/// once: through a shared reference only (`Router: Sync`, `RequestCodec: Sync`).
fn dispatch_shared(h: &Handle, m: u32, input: &[u8]) -> Result<Vec<u8>, String> {
    if let Built::Codec(c, streams) = &h.built {
        return codec_call(c.as_ref(), streams, m, input);
    }
    match (&h.built, m) {
        (Built::Router(r), method::DECORATE) => {
            let ctx: WireRouteContext = parse(input, "route context")?;
            let mut out = RouteExtras::default();
            r.decorate(&ctx.context(), &mut out)
                .map_err(|e| e.to_string())?;
            json(&WireRouteExtras {
                headers: out.headers,
                body_fields: out.body_fields,
            })
        }
        (Built::Router(r), method::DP_RANK) => json(&r.dp_rank(parse(input, "routing slot")?)),
        (Built::Router(r), method::CHOOSES_ENDPOINT) => json(&r.chooses_endpoint()),
        (Built::Router(r), method::CHOOSE_ENDPOINT) => {
            let ctx: WireEndpointContext = parse(input, "endpoint context")?;
            json(
                &r.choose_endpoint(&ctx.context())
                    .map_err(|e| e.to_string())?,
            )
        }
        (_, m) => Err(format!("method {m} is not one of this plugin's kind")),
    }
}

unsafe extern "C" fn call(
    instance: *mut c_void,
    m: u32,
    input: *const u8,
    input_len: usize,
    output: *mut OwnedBytes,
) -> i32 {
    if instance.is_null() || output.is_null() {
        set_error("null instance or output".into());
        return status::ERROR;
    }
    let h = instance.cast::<Handle>();
    // SAFETY: the host passes a valid (pointer, length) pair.
    let input = unsafe { slice(input, input_len) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        if is_shared(m) {
            // SAFETY: `instance` came from `create` and is not destroyed; router
            // and codec methods may run on many threads at once, so only a shared
            // reference is formed (`Router: Sync`, `RequestCodec: Sync`).
            dispatch_shared(unsafe { &*h }, m, input)
        } else {
            // SAFETY: as above; the host calls every other method of an instance
            // from one thread at a time, so this reference is unique.
            dispatch(unsafe { &mut *h }, m, input)
        }
    }));
    match r {
        Ok(Ok(bytes)) => {
            // SAFETY: `output` is non-null and points to the host's OwnedBytes.
            unsafe { output.write(owned(bytes)) };
            status::OK
        }
        Ok(Err(e)) => {
            set_error(e);
            status::ERROR
        }
        Err(p) => {
            set_error(format!("panicked: {}", panic_text(p.as_ref())));
            status::PANIC
        }
    }
}

unsafe extern "C" fn destroy(instance: *mut c_void) {
    if !instance.is_null() {
        // SAFETY: `instance` came from `create` and is destroyed once.
        let h = unsafe { Box::from_raw(instance.cast::<Handle>()) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(h)));
    }
}

unsafe extern "C" fn free(b: OwnedBytes) {
    if !b.ptr.is_null() {
        // SAFETY: `b` was made by `owned` from a Vec of this library's allocator.
        drop(unsafe { Vec::from_raw_parts(b.ptr, b.len, b.cap) });
    }
}

unsafe extern "C" fn last_error() -> OwnedBytes {
    owned(LAST_ERROR.with(|e| e.borrow().clone().into_bytes()))
}

static TABLE: PluginTable = PluginTable {
    abi_version: abi::ABI_VERSION,
    describe,
    create,
    call,
    destroy,
    free,
    last_error,
};

/// The table the generated `batchbench_plugin_table` returns.
#[doc(hidden)]
pub fn table(entries: &'static [Entry]) -> *const PluginTable {
    let _ = ENTRIES.set(entries);
    &TABLE
}

/// Builds an [`Entry`] constructor for a config type and a build function.
#[doc(hidden)]
pub fn built<C, P, E>(
    name: &str,
    value: &serde_json::Value,
    ctx: &BuildContext,
    build: impl FnOnce(C, &BuildContext) -> Result<P, E>,
    wrap: impl FnOnce(P) -> Built,
) -> Result<Built, PluginError>
where
    C: serde::de::DeserializeOwned,
    E: Into<PluginError>,
{
    let config: C = parse_config(name, value)?;
    build(config, ctx).map(wrap).map_err(Into::into)
}

/// Exports plugins from a `cdylib`, one block per plugin:
/// `workload { ... }`, `codec { ... }`, `router { ... }` or `reporter { ... }`, each with the
/// fields of the built-in registration macros (`name`, `description`, `example`,
/// `config`, `build`). See the [crate documentation](crate).
#[macro_export]
macro_rules! export_plugins {
    ($($kind:ident { name: $name:expr, description: $desc:expr, example: $ex:expr, config: $cfg:ty, build: $build:expr $(,)? }),+ $(,)?) => {
        static __BATCHBENCH_ENTRIES: &[$crate::Entry] = &[
            $($crate::Entry {
                kind: $crate::__kind!($kind),
                name: $name,
                description: $desc,
                example: $ex,
                build: |value, ctx| {
                    $crate::built::<$cfg, _, _>($name, value, ctx, $build, |p| $crate::__wrap!($kind, p))
                },
            }),+
        ];

        /// The plugin ABI version this library was built for.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub extern "C" fn batchbench_plugin_abi_version() -> u32 {
            $crate::abi::ABI_VERSION
        }

        /// The plugin function table.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub extern "C" fn batchbench_plugin_table() -> *const $crate::abi::PluginTable {
            $crate::table(__BATCHBENCH_ENTRIES)
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kind {
    (workload) => {
        "workload"
    };
    (codec) => {
        "codec"
    };
    (router) => {
        "router"
    };
    (reporter) => {
        "reporter"
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __wrap {
    (workload, $p:expr) => {
        $crate::Built::Workload(::std::boxed::Box::new($p))
    };
    (codec, $p:expr) => {
        $crate::Built::Codec(::std::boxed::Box::new($p), $crate::Streams::default())
    };
    (router, $p:expr) => {
        $crate::Built::Router(::std::boxed::Box::new($p))
    };
    (reporter, $p:expr) => {
        $crate::Built::Reporter(::std::boxed::Box::new($p))
    };
}
