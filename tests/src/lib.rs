//! Helpers shared by the end-to-end tests: real tokenizer files, a simulator on
//! its own runtime, in-process runs of the CLIs, and result-file readers.

use batchbench_core::tokens::TokenizerHandle;
use batchbench_sim::{RequestLog, Sim, SimConfig, SimStats};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Directory of the tokenizer files fetched by `examples/fetch-tokenizers.sh`:
/// `$BATCHBENCH_TOKENIZERS`, else the script's default cache.
pub fn tokenizer_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BATCHBENCH_TOKENIZERS") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("BATCHBENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("batchbench")
        });
    cache.join("tokenizers")
}

/// Path of a real tokenizer (`qwen`, `llama3.2`, `deepseek`). Panics with the fix
/// when it is missing: these tests must not pass without real tokenizers.
pub fn tokenizer_path(name: &str) -> PathBuf {
    let p = tokenizer_dir().join(name).join("tokenizer.json");
    assert!(
        p.is_file(),
        "{} is missing: run examples/fetch-tokenizers.sh first",
        p.display()
    );
    p
}

/// A loaded tokenizer, shared across the tests of one process.
pub fn tokenizer(name: &str) -> Arc<TokenizerHandle> {
    static CACHE: OnceLock<std::sync::Mutex<HashMap<String, Arc<TokenizerHandle>>>> =
        OnceLock::new();
    let mut m = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    m.entry(name.to_owned())
        .or_insert_with(|| {
            let p = tokenizer_path(name);
            Arc::new(TokenizerHandle::from_file(name, &p).unwrap_or_else(|e| panic!("{e}")))
        })
        .clone()
}

/// A simulator serving on its own runtime while the test thread runs clients.
pub struct SimServer {
    rt: tokio::runtime::Runtime,
    sim: Option<Sim>,
}

impl SimServer {
    /// Starts a simulator with `cfg` and the named tokenizer on a free port.
    pub fn start(cfg: SimConfig, tok: &str) -> Self {
        batchbench_core::transport::install_crypto_provider();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let tok = tokenizer(tok);
        let sim = rt
            .block_on(Sim::start(
                cfg,
                tok,
                "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        Self { rt, sim: Some(sim) }
    }

    /// A simulator recording its requests, with defaults otherwise.
    pub fn recording(tok: &str) -> Self {
        Self::start(
            SimConfig {
                record_requests: true,
                ..SimConfig::default()
            },
            tok,
        )
    }

    fn sim(&self) -> &Sim {
        self.sim
            .as_ref()
            .unwrap_or_else(|| panic!("simulator stopped"))
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        self.sim().url()
    }

    /// The request log.
    pub fn requests(&self) -> Vec<RequestLog> {
        self.sim().requests()
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        self.sim().stats()
    }

    /// Runs a future on the simulator's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(sim) = self.sim.take() {
            self.rt.block_on(sim.stop());
        }
    }
}

/// The result of an in-process `batchbench` run.
#[derive(Debug)]
pub struct RunResult {
    /// Exit code.
    pub code: i32,
    /// The `--summary-json` document, when the run wrote one.
    pub json: Option<serde_json::Value>,
    /// CSV rows, when `--results-csv` was written.
    pub csv: Vec<HashMap<String, String>>,
}

impl RunResult {
    /// `summary.<key>` of the JSON report.
    pub fn summary(&self, key: &str) -> &serde_json::Value {
        self.json
            .as_ref()
            .map_or(&serde_json::Value::Null, |j| &j["summary"][key])
    }

    /// `summary.<key>` as an integer.
    pub fn count(&self, key: &str) -> u64 {
        self.summary(key)
            .as_u64()
            .unwrap_or_else(|| panic!("summary.{key} is not a count: {:?}", self.summary(key)))
    }
}

/// Runs `batchbench` in process with `args` plus a summary JSON and a CSV in a
/// temporary directory.
pub fn run_batchbench(args: &[&str]) -> RunResult {
    run_tool(batchbench::run, "batchbench", args)
}

/// Runs `batchbench-agent` in process, like [`run_batchbench`].
pub fn run_agent(args: &[&str]) -> RunResult {
    run_tool(batchbench_agent::run, "batchbench-agent", args)
}

fn run_tool(run: fn(Vec<String>) -> i32, name: &str, args: &[&str]) -> RunResult {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let json = dir.path().join("summary.json");
    let csv = dir.path().join("results.csv");
    let mut argv: Vec<String> = vec![name.into(), "--quiet".into()];
    argv.extend(args.iter().map(|s| (*s).to_owned()));
    argv.extend([
        "--summary-json".into(),
        json.display().to_string(),
        "--results-csv".into(),
        csv.display().to_string(),
    ]);
    let code = run(argv);
    RunResult {
        code,
        json: read_json(&json),
        csv: read_csv(&csv),
    }
}

/// Reads a JSON file, if present.
pub fn read_json(p: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(p).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

/// Reads a CSV with a header into maps (empty when the file is absent).
pub fn read_csv(p: &Path) -> Vec<HashMap<String, String>> {
    let Ok(mut r) = csv::Reader::from_path(p) else {
        return Vec::new();
    };
    let headers = r.headers().unwrap_or_else(|e| panic!("{e}")).clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// The target directory this test binary was built in (`.../target`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    // .../target/<profile>/deps/<test binary>
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("unexpected test binary path {}", exe.display()))
}

/// A plugin built by `examples/plugins/build.sh`: a WebAssembly component
/// (`header_router.wasm`) or a native library by crate name (`jsonl_reporter`).
/// Panics with the fix when it is missing.
pub fn plugin_artifact(name: &str) -> PathBuf {
    let target = target_dir();
    let p = if let Some(stem) = name.strip_suffix(".wasm") {
        target
            .join("wasm32-wasip2/release")
            .join(format!("{stem}.wasm"))
    } else {
        let file = format!(
            "{}{name}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        );
        target.join("debug").join(file)
    };
    assert!(
        p.is_file(),
        "{} is missing: run examples/plugins/build.sh first",
        p.display()
    );
    p
}
