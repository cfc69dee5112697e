//! Loading external plugins (WebAssembly components and native libraries) into
//! the registries, beside the built-ins.

use crate::exit::Failure;
use std::path::{Path, PathBuf};

/// Loads the external plugin at `path` into the registries and returns the
/// `(kind, name)` of each plugin it registered. A missing file is bad input (exit
/// 2); a file that does not load is a failure (exit 1).
pub fn load_plugin(path: &Path) -> Result<Vec<(&'static str, String)>, Failure> {
    if !path.is_file() {
        return Err(Failure::bad(format!(
            "--plugin {}: no such file",
            path.display()
        )));
    }
    let is_wasm = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("wasm"));
    let r = if is_wasm {
        load_wasm(path)?
    } else {
        batchbench_dylib::load(path).map_err(|e| e.to_string())
    };
    r.map_err(|e| Failure::failed(anyhow::anyhow!("cannot load plugin {e}")))
}

/// The `(kind, name)` of each plugin a file registered.
type Loaded = Vec<(&'static str, String)>;

/// A WebAssembly component's plugin (the `wasm` feature's host).
#[cfg(feature = "wasm")]
fn load_wasm(path: &Path) -> Result<Result<Loaded, String>, Failure> {
    Ok(batchbench_wasm::load(path)
        .map(|l| vec![(l.kind.as_str(), l.name)])
        .map_err(|e| e.to_string()))
}

/// A build without the `wasm` feature has no WebAssembly host: bad input,
/// naming the feature.
#[cfg(not(feature = "wasm"))]
fn load_wasm(path: &Path) -> Result<Result<Loaded, String>, Failure> {
    Err(Failure::bad(format!(
        "--plugin {}: WebAssembly plugins need the `wasm` cargo feature, which this build of batchbench leaves out (it is on by default: cargo install --path bins/batchbench, or add --features wasm)",
        path.display()
    )))
}

/// Loads every plugin of `paths` ([`load_plugin`]).
pub fn load_plugins(paths: &[PathBuf]) -> Result<(), Failure> {
    paths.iter().try_for_each(|p| load_plugin(p).map(drop))
}
