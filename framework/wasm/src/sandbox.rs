//! What a plugin instance may touch: the `sandbox` object of its config.

use batchbench_contract::plugin::PluginError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use wasmtime_wasi::{FsPerms, WasiCtx};

/// The host's part of a plugin config (`"sandbox": {...}`); the rest goes to the
/// plugin's `init`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// Files and directories the plugin may read, under their own paths.
    #[serde(default)]
    pub allow_read: Vec<PathBuf>,
    /// Linear memory limit, MiB.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// Deadline of each call, milliseconds.
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// Deadline of `init` (which may read a whole trace), milliseconds.
    #[serde(default = "default_init_timeout_ms")]
    pub init_timeout_ms: u64,
}

fn default_memory_mb() -> u64 {
    512
}

fn default_call_timeout_ms() -> u64 {
    5_000
}

fn default_init_timeout_ms() -> u64 {
    60_000
}

impl Default for Sandbox {
    fn default() -> Self {
        Self {
            allow_read: Vec::new(),
            memory_mb: default_memory_mb(),
            call_timeout_ms: default_call_timeout_ms(),
            init_timeout_ms: default_init_timeout_ms(),
        }
    }
}

impl Sandbox {
    /// Splits a plugin config into the sandbox settings and the plugin's own
    /// config (a JSON object without `sandbox`).
    pub fn split(
        plugin: &str,
        config: &serde_json::Value,
    ) -> Result<(Self, serde_json::Value), PluginError> {
        let bad = |message: String| PluginError::Config {
            plugin: plugin.to_owned(),
            message,
        };
        let mut config = match config {
            serde_json::Value::Null => serde_json::Map::new(),
            serde_json::Value::Object(m) => m.clone(),
            other => {
                return Err(bad(format!(
                    "the config must be a JSON object, got {other}"
                )));
            }
        };
        let sandbox = match config.remove("sandbox") {
            None => Self::default(),
            Some(v) => Self::deserialize(&v).map_err(|e| bad(format!("sandbox: {e}")))?,
        };
        if sandbox.memory_mb == 0 || sandbox.memory_mb > 4096 {
            return Err(bad(format!(
                "sandbox.memory_mb must be between 1 and 4096, got {}",
                sandbox.memory_mb
            )));
        }
        if sandbox.call_timeout_ms == 0 || sandbox.init_timeout_ms == 0 {
            return Err(bad("sandbox timeouts must be at least 1 ms".into()));
        }
        Ok((sandbox, serde_json::Value::Object(config)))
    }

    /// The WASI context of one instance: the granted paths read-only, stderr
    /// inherited (plugin logs), nothing else. Files are granted through a private
    /// directory holding only them, mounted at their parent's path; the returned
    /// guard keeps it alive.
    pub(crate) fn wasi(
        &self,
        plugin: &str,
    ) -> Result<(WasiCtx, Vec<tempfile::TempDir>), PluginError> {
        let bad = |message: String| PluginError::Config {
            plugin: plugin.to_owned(),
            message,
        };
        let mut b = WasiCtx::builder();
        b.inherit_stderr();
        // Each grant is visible under its absolute path as written and, when
        // symbolic links make it differ, under its canonical path too.
        let mut dirs: Vec<(PathBuf, PathBuf)> = Vec::new(); // (host dir, guest path)
        // Files by the guest directory that shows them: name -> host file.
        let mut files: BTreeMap<PathBuf, BTreeMap<std::ffi::OsString, PathBuf>> = BTreeMap::new();
        for p in &self.allow_read {
            let real = std::fs::canonicalize(p)
                .map_err(|e| bad(format!("sandbox.allow_read: {}: {e}", p.display())))?;
            let written = std::path::absolute(p).unwrap_or_else(|_| real.clone());
            let mut names = vec![real.clone()];
            if written != real {
                names.push(written);
            }
            if real.is_dir() {
                for n in names {
                    if !dirs.iter().any(|(_, g)| *g == n) {
                        dirs.push((real.clone(), n));
                    }
                }
            } else {
                for n in names {
                    if let (Some(parent), Some(file)) = (n.parent(), n.file_name()) {
                        files
                            .entry(parent.to_path_buf())
                            .or_default()
                            .insert(file.to_owned(), real.clone());
                    }
                }
            }
        }
        for (host, guest) in &dirs {
            b.preopened_dir(host, guest_path(plugin, guest)?, FsPerms::ReadOnly)
                .map_err(|e| bad(format!("sandbox.allow_read: {}: {e}", guest.display())))?;
        }
        let mut guards = Vec::new();
        for (parent, list) in files {
            if dirs.iter().any(|(_, g)| parent.starts_with(g)) {
                continue; // already readable through a granted directory
            }
            let tmp = tempfile::Builder::new()
                .prefix("batchbench-grant-")
                .tempdir()
                .map_err(|e| bad(format!("sandbox.allow_read: cannot stage files: {e}")))?;
            for (name, src) in &list {
                stage(src, &tmp.path().join(name))
                    .map_err(|e| bad(format!("sandbox.allow_read: {}: {e}", src.display())))?;
            }
            b.preopened_dir(tmp.path(), guest_path(plugin, &parent)?, FsPerms::ReadOnly)
                .map_err(|e| bad(format!("sandbox.allow_read: {}: {e}", parent.display())))?;
            guards.push(tmp);
        }
        Ok((b.build(), guards))
    }
}

/// Makes `src` visible at `dst` (a new name in a fresh private directory): a hard
/// link, or a copy when the two are on different filesystems. Never writes to an
/// existing file: `dst` is created new.
fn stage(src: &Path, dst: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(src, dst) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(e),
        Err(_) => {
            let mut from = std::fs::File::open(src)?;
            let mut to = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dst)?;
            std::io::copy(&mut from, &mut to).map(drop)
        }
    }
}

fn guest_path(plugin: &str, p: &Path) -> Result<String, PluginError> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| PluginError::Config {
            plugin: plugin.to_owned(),
            message: format!("sandbox.allow_read: {} is not UTF-8", p.display()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_key_is_split_off_and_checked() {
        let cfg = serde_json::json!({"a": 1, "sandbox": {"memory_mb": 64}});
        let (s, rest) = Sandbox::split("p", &cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.memory_mb, 64);
        assert_eq!(s.call_timeout_ms, 5_000);
        assert_eq!(rest, serde_json::json!({"a": 1}));
        let err = Sandbox::split("p", &serde_json::json!({"sandbox": {"memroy_mb": 1}}))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("p: invalid configuration: sandbox: unknown field `memroy_mb`"),
            "{err}"
        );
        assert!(Sandbox::split("p", &serde_json::json!([1])).is_err());
        assert!(Sandbox::split("p", &serde_json::json!({"sandbox": {"memory_mb": 0}})).is_err());
    }

    #[test]
    fn a_file_granted_twice_is_staged_once_and_left_intact() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = dir.path().join("trace.jsonl");
        std::fs::write(&f, "content").unwrap_or_else(|e| panic!("{e}"));
        let link = dir.path().join("current.jsonl");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&f, &link).unwrap_or_else(|e| panic!("{e}"));
        #[cfg(not(unix))]
        std::fs::copy(&f, &link).unwrap_or_else(|e| panic!("{e}"));
        let s = Sandbox {
            allow_read: vec![f.clone(), f.clone(), link],
            ..Sandbox::default()
        };
        let (_ctx, guards) = s.wasi("p").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_to_string(&f).unwrap_or_default(), "content");
        // One private directory shows both names, each with the file's content.
        assert_eq!(guards.len(), 1);
        for name in ["trace.jsonl", "current.jsonl"] {
            let staged = guards[0].path().join(name);
            assert_eq!(
                std::fs::read_to_string(&staged).unwrap_or_default(),
                "content",
                "{name}"
            );
        }
    }
}
