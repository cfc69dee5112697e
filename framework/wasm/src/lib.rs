//! The WebAssembly plugin host: loads a component implementing one of the worlds
//! of `framework/wit/batchbench.wit` and registers it beside the built-in plugins.
//!
//! Safety model, per plugin instance (one component instance each):
//! - no filesystem, network, environment or arguments; the config's
//!   `sandbox.allow_read` grants named files or directories read-only, under their
//!   own paths;
//! - a deadline per call (`sandbox.call_timeout_ms`, enforced by epoch
//!   interruption) and a memory limit (`sandbox.memory_mb`);
//! - a trap, a deadline or a host panic is an error naming the plugin and the
//!   call, and the instance is not called again.
//!
//! ```no_run
//! batchbench_wasm::load(std::path::Path::new("header_router.wasm"))?;
//! let router = batchbench_contract::registry::router(
//!     "header_router",
//!     &serde_json::json!({"header": "X-Team", "value": "a"}),
//!     &Default::default(),
//! )?;
//! # Ok::<(), batchbench_contract::plugin::PluginError>(())
//! ```

mod host;
mod sandbox;

pub use host::{WorldKind, load};
pub use sandbox::Sandbox;
