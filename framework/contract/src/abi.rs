//! The C ABI of native (shared-library) plugins.
//!
//! A library exports two symbols. The host resolves and calls
//! [`VERSION_SYMBOL`] first and refuses the library unless it returns
//! [`ABI_VERSION`]; only then does it call [`TABLE_SYMBOL`] for the
//! [`PluginTable`]. Everything else crosses the boundary as UTF-8 JSON bytes (the
//! documents of [`crate::wire`]), so no Rust type layout, allocator or trait object
//! is shared between the host and the library. Bytes a library returns are
//! released with its own [`PluginTable::free`]. Libraries are never unloaded.
//!
//! Plugin authors do not write this by hand: `batchbench-plugin-sdk` exports Rust
//! implementations of the plugin traits through this table with one macro.

use std::ffi::c_void;

/// The ABI version this host speaks. Adding a method or a plugin kind is
/// compatible (a library that does not export it never describes it); changing
/// anything that exists is a new version.
pub const ABI_VERSION: u32 = 1;

/// `extern "C" fn() -> u32`: the library's ABI version.
pub const VERSION_SYMBOL: &str = "batchbench_plugin_abi_version";

/// `extern "C" fn() -> *const PluginTable`: the library's function table.
pub const TABLE_SYMBOL: &str = "batchbench_plugin_table";

/// Bytes allocated by the library; the host hands them back to
/// [`PluginTable::free`].
#[repr(C)]
#[derive(Debug)]
pub struct OwnedBytes {
    /// Start (null when empty).
    pub ptr: *mut u8,
    /// Length.
    pub len: usize,
    /// Allocation capacity (the library's business).
    pub cap: usize,
}

impl OwnedBytes {
    /// No bytes.
    pub const EMPTY: Self = Self {
        ptr: std::ptr::null_mut(),
        len: 0,
        cap: 0,
    };
}

/// The functions of a plugin library.
#[repr(C)]
#[derive(Debug)]
pub struct PluginTable {
    /// Must equal [`ABI_VERSION`] too.
    pub abi_version: u32,
    /// A JSON array describing every plugin of the library:
    /// `[{"kind": "workload"|"codec"|"router"|"reporter", "name", "description", "example"}]`.
    pub describe: unsafe extern "C" fn() -> OwnedBytes,
    /// Builds the plugin named `name` from its JSON `config` and the JSON
    /// [`BuildContext`](crate::registry::BuildContext). Returns an instance, or null
    /// with the reason in [`PluginTable::last_error`].
    pub create: unsafe extern "C" fn(
        name: *const u8,
        name_len: usize,
        config: *const u8,
        config_len: usize,
        ctx: *const u8,
        ctx_len: usize,
    ) -> *mut c_void,
    /// Calls [`method`] `method` of `instance` with JSON `input`; writes the JSON
    /// result to `output` and returns a [`status`].
    pub call: unsafe extern "C" fn(
        instance: *mut c_void,
        method: u32,
        input: *const u8,
        input_len: usize,
        output: *mut OwnedBytes,
    ) -> i32,
    /// Drops an instance.
    pub destroy: unsafe extern "C" fn(instance: *mut c_void),
    /// Releases bytes returned by `describe`, `call` or `last_error`.
    pub free: unsafe extern "C" fn(bytes: OwnedBytes),
    /// The message of the calling thread's last failure (UTF-8).
    pub last_error: unsafe extern "C" fn() -> OwnedBytes,
}

/// Method numbers of [`PluginTable::call`], with their input and output JSON.
pub mod method {
    /// Workload: `null` → [`WorkloadInfo`](crate::plugin::WorkloadInfo).
    pub const INFO: u32 = 1;
    /// Workload: `null` → a [`WireTrajectory`](crate::wire::WireTrajectory) or
    /// `null` when exhausted.
    pub const NEXT_TRAJECTORY: u32 = 2;
    /// Workload: `null` → [`WorkloadInfo`](crate::plugin::WorkloadInfo).
    pub const FINAL_INFO: u32 = 3;
    /// Router: [`WireRouteContext`](crate::wire::WireRouteContext) →
    /// [`WireRouteExtras`](crate::wire::WireRouteExtras).
    pub const DECORATE: u32 = 10;
    /// Router: a routing slot (number) → a rank or `null`.
    pub const DP_RANK: u32 = 11;
    /// Router: `null` → whether it picks endpoints (a routing policy). A
    /// library built before this method existed answers an error, which the
    /// host reads as `false`: its routers still load, and only decorate.
    pub const CHOOSES_ENDPOINT: u32 = 12;
    /// Router: [`WireEndpointContext`](crate::wire::WireEndpointContext) → the
    /// endpoint's index (a number).
    pub const CHOOSE_ENDPOINT: u32 = 13;
    /// Reporter: [`RunInfo`](crate::record::RunInfo) → `null`.
    pub const ON_START: u32 = 20;
    /// Reporter: [`WireRequestRecord`](crate::wire::WireRequestRecord) → `null`.
    pub const ON_REQUEST: u32 = 21;
    /// Reporter: [`TrajectoryRecord`](crate::plugin::TrajectoryRecord) → `null`.
    pub const ON_TRAJECTORY: u32 = 22;
    /// Reporter: `{"run": RunInfo, "summary": Summary}` → `null`.
    pub const ON_FINISH: u32 = 23;
    /// Reporter: [`LiveStats`](crate::plugin::LiveStats) → `null`, about four
    /// times a second and once at the end of the run.
    pub const ON_LIVE: u32 = 24;
    /// Reporter: `null` → whether it takes [`ON_LIVE`] (the SDK answers
    /// the reporter's [`wants_live`](crate::plugin::Reporter::wants_live)). A library built before this method existed answers an error,
    /// which the host reads as `false`: its reporters still load, and never
    /// hear of live views.
    pub const WANTS_LIVE: u32 = 25;
    /// Codec: [`WireEncodeRequest`](crate::wire::WireEncodeRequest) → the request
    /// body's bytes (not a JSON document of their own).
    pub const ENCODE: u32 = 30;
    /// Codec: a response body's bytes → [`WireReply`](crate::wire::WireReply).
    pub const DECODE: u32 = 31;
    /// Codec: `null` → a stream id (a number): a decoder for one streamed response.
    pub const STREAM_OPEN: u32 = 32;
    /// Codec: the stream id (8 bytes, little-endian) followed by the next bytes of
    /// the body → `null`. The host stamps each feed's arrival itself.
    pub const STREAM_FEED: u32 = 33;
    /// Codec: the stream id (8 bytes, little-endian) → [`WireReply`](crate::wire::WireReply),
    /// whose timings name feeds by their index; the stream is closed.
    pub const STREAM_FINISH: u32 = 34;
    /// Codec: the stream id (8 bytes, little-endian) → `null`: a stream dropped
    /// before it finished.
    pub const STREAM_CLOSE: u32 = 35;
}

/// Return codes of [`PluginTable::call`].
pub mod status {
    /// Success: `output` holds the result.
    pub const OK: i32 = 0;
    /// The plugin returned an error: see `last_error`.
    pub const ERROR: i32 = 1;
    /// The plugin panicked (caught at the boundary): see `last_error`. The instance
    /// must not be called again.
    pub const PANIC: i32 = 2;
}

/// The `{"run": ..., "summary": ...}` input of [`method::ON_FINISH`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FinishInput {
    /// Run facts.
    pub run: crate::record::RunInfo,
    /// The summary.
    pub summary: crate::record::Summary,
}

/// A raw instance pointer; only the host that created it dereferences it.
pub type Instance = *mut c_void;
