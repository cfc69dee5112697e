//! Helpers shared by the end-to-end tests: real tokenizer files, a simulator on
//! its own runtime, in-process runs of the CLIs, and result-file readers.

pub mod http;
pub mod otlp;
pub mod process;

use batchbench_engine::tokens::TokenizerHandle;
use batchbench_simulator::{RequestLog, Sim, SimConfig, SimStats};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Directory of the tokenizer files fetched by `examples/fetch-tokenizers.sh`:
/// `$BATCHBENCH_TOKENIZERS`, else the script's default cache.
pub fn tokenizer_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BATCHBENCH_TOKENIZERS") {
        return PathBuf::from(d);
    }
    batchbench_engine::tokens::cache::cache_dir().join("tokenizers")
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

/// The share of a core this thread gets now: its CPU time over the wall time
/// of a `probe` of busy work (about 1 on an idle core; about 0.5 where a busy
/// process, or another test's work, shares it). From the thread's own
/// counters (`/proc/thread-self/stat`, in ticks of 10 ms): 1 where they
/// cannot be read. A test whose figures are the machine's timing checks it
/// before it judges them, as the instructions gate does.
pub fn core_share(probe: std::time::Duration) -> f64 {
    fn ticks() -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        // The fields after the command (which may hold spaces): utime is the
        // 14th field, stime the 15th.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }
    let (Some(t0), start) = (ticks(), std::time::Instant::now()) else {
        return 1.0;
    };
    let mut x = 0u64;
    while start.elapsed() < probe {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let wall = start.elapsed().as_secs_f64();
    ticks().map_or(1.0, |t1| ((t1 - t0) as f64 / 100.0 / wall).min(1.0))
}

/// The share of a core each of this machine's cores gives a CPU-bound probe
/// now, averaged over one probe thread per core (see [`core_share`]): about 1
/// on an idle machine, 2/3 with one busy process on two cores (where one
/// probe alone would still get a whole core), 1/2 with two. What a client
/// and a server that need every core would get.
pub fn machine_share(probe: std::time::Duration) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let probes: Vec<_> = (0..cores)
        .map(|_| std::thread::spawn(move || core_share(probe)))
        .collect();
    let shares: Vec<f64> = probes
        .into_iter()
        .map(|p| p.join().unwrap_or(1.0))
        .collect();
    shares.iter().sum::<f64>() / shares.len() as f64
}

/// The Qwen tokenizer's path as a flag value (`--tokenizer-model`): the
/// tokenizer most tests run with.
pub fn qwen() -> String {
    tokenizer_path("qwen").display().to_string()
}

/// A file of `examples/trajectory-replay/` (the replay manifests the book
/// shows), as a flag value.
pub fn replay_example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/trajectory-replay")
        .join(name)
        .display()
        .to_string()
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

/// The property the proven synthesis path rests on, checked against the full
/// encoding: for `cases` random prompts (lengths from 1 to 3,000 tokens, with and
/// without a shared prefix of random length), the text `tok` makes encodes to
/// exactly its target and is byte-identical to what the per-piece checked path
/// (`checked`) makes; tool schemas and tool-call arguments of random lengths
/// encode exactly too. `name` labels the failures.
pub fn check_synthesis_property(
    name: &str,
    tok: &TokenizerHandle,
    checked: &TokenizerHandle,
    cases: u64,
) {
    use batchbench_contract::rng::Stream;
    let mut rng = Stream::new(0x7e57_0000 ^ cases);
    for case in 0..cases {
        let n = 1 + rng.below(if case % 10 == 0 { 3000 } else { 300 }) as usize;
        let prefix =
            (rng.below(2) == 0).then(|| (rng.next_u64(), rng.below(n as u64 + 8) as usize));
        let key = rng.next_u64();
        let ctx = || format!("{name} case {case}");
        let text = tok
            .exact_text_with_prefix(prefix, key, n, &ctx)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tok.count(&text).unwrap_or_else(|e| panic!("{e}")),
            n,
            "{name} case {case}: {n} tokens, prefix {prefix:?}"
        );
        assert_eq!(
            tok.proven_ids(&text),
            Some(tok.ids(&text).unwrap_or_else(|e| panic!("{e}"))),
            "{name} case {case}: table lookups and the full encoding differ"
        );
        let again = checked
            .exact_text_with_prefix(prefix, key, n, &ctx)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, again, "{name} case {case}: the two paths differ");
        if case % 8 == 0 {
            let m = 40 + rng.below(200) as usize;
            let schema = tok
                .tool_schema(key, m, &ctx)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                tok.count(&schema).ok(),
                Some(m),
                "{name} case {case}: schema"
            );
            let args = tok
                .tool_arguments(key, m / 4 + 6, &ctx)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                tok.count(&args).ok(),
                Some(m / 4 + 6),
                "{name} case {case}: call"
            );
        }
    }
}

/// A simulator serving on its own runtime while the test thread runs clients.
pub struct SimServer {
    rt: tokio::runtime::Runtime,
    sim: Option<Sim>,
    /// The tokenizer it counts with, as a `--tokenizer-model` value.
    tok: String,
}

impl SimServer {
    /// Starts a simulator with `cfg` and the named tokenizer on a free port.
    pub fn start(cfg: SimConfig, tok: &str) -> Self {
        Self::with_model_tokenizers(cfg, tok, &[])
    }

    /// Starts a simulator like [`SimServer::start`] that counts the prompts
    /// of the models named in `models` with their own tokenizers (`(model,
    /// tokenizer name)`).
    pub fn with_model_tokenizers(cfg: SimConfig, tok: &str, models: &[(&str, &str)]) -> Self {
        batchbench_engine::transport::install_crypto_provider();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let path = tokenizer_path(tok).display().to_string();
        let tok = tokenizer(tok);
        let own = models
            .iter()
            .map(|(m, t)| ((*m).to_owned(), tokenizer(t)))
            .collect();
        let sim = rt
            .block_on(Sim::start_with_models(
                cfg,
                tok,
                own,
                "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        Self {
            rt,
            sim: Some(sim),
            tok: path,
        }
    }

    /// `--host URL --tokenizer-model TOKENIZER` of this simulator, then the
    /// words of `line` (as [`cmd`] reads them).
    pub fn args(&self, line: &str, values: &[&str]) -> Vec<String> {
        let mut args = cmd("--host {} --tokenizer-model {}", &[&self.url(), &self.tok]);
        args.extend(cmd(line, values));
        args
    }

    /// Runs `batchbench` in process against this simulator with its
    /// tokenizer, and the flags of `line` (see [`SimServer::args`]).
    pub fn batchbench(&self, line: &str, values: &[&str]) -> RunResult {
        run_batchbench(&self.args(line, values))
    }

    /// Runs `batchbench-agent` in process like [`SimServer::batchbench`].
    pub fn agent(&self, line: &str, values: &[&str]) -> RunResult {
        run_agent(&self.args(line, values))
    }

    /// A simulator with the Qwen tokenizer that decodes a token every
    /// `ms_per_token` milliseconds, with defaults otherwise: a run that
    /// lasts long enough to be interrupted.
    pub fn decoding(ms_per_token: f64) -> Self {
        Self::start(
            SimConfig {
                decode_ms_per_token: ms_per_token,
                ..SimConfig::default()
            },
            "qwen",
        )
    }

    /// A simulator of `workers` data-parallel workers (each its own prefix
    /// cache, picked by `X-SMG-Target-Worker`) recording its requests.
    pub fn workers(workers: u32) -> Self {
        Self::start(
            SimConfig {
                workers,
                record_requests: true,
                ..SimConfig::default()
            },
            "qwen",
        )
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

    /// The request log by routing key (an agent's or a user's requests), each
    /// in the order the simulator received them.
    pub fn requests_by_key(&self) -> std::collections::BTreeMap<String, Vec<RequestLog>> {
        let mut m: std::collections::BTreeMap<String, Vec<RequestLog>> = Default::default();
        for e in self.requests() {
            m.entry(e.routing_key.clone().unwrap_or_default())
                .or_default()
                .push(e);
        }
        for v in m.values_mut() {
            v.sort_by_key(|e| e.seq);
        }
        m
    }

    /// The SHA-256 of every request body received, sorted: two runs that sent
    /// the same bodies in any order compare equal.
    pub fn sorted_body_hashes(&self) -> Vec<String> {
        let mut h: Vec<String> = self.requests().into_iter().map(|l| l.body_sha256).collect();
        h.sort();
        h
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

/// Waits until `sim` has received `n` requests, panicking after a minute.
///
/// Tests that interrupt a run wait on this rather than on a fixed sleep: a
/// loaded machine can take seconds to start the client.
pub fn wait_for_requests(sim: &SimServer, n: u64) {
    let start = std::time::Instant::now();
    while sim.stats().requests < n {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the simulator received {} of {n} requests in a minute",
            sim.stats().requests
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
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
    /// Where the CSV was written (gone once the result is dropped).
    pub csv_path: PathBuf,
    _dir: tempfile::TempDir,
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

/// A command line written as a user types it: the words of `line`, where each
/// `{}` word is the next of `values`, whole (a value may hold spaces). Panics
/// when the placeholders and the values do not pair up.
///
/// ```
/// let args = batchbench_tests::cmd("--host {} --users 4", &["http://127.0.0.1:8000"]);
/// assert_eq!(args, ["--host", "http://127.0.0.1:8000", "--users", "4"]);
/// ```
pub fn cmd(line: &str, values: &[&str]) -> Vec<String> {
    let mut values = values.iter();
    let args: Vec<String> = line
        .split_whitespace()
        .map(|w| match w {
            "{}" => values
                .next()
                .map(|v| (*v).to_owned())
                .unwrap_or_else(|| panic!("{line}: more {{}} than values")),
            _ => w.to_owned(),
        })
        .collect();
    assert!(values.next().is_none(), "{line}: more values than {{}}");
    args
}

/// The words of `line`: flags written as a user types them, borrowed from it.
///
/// ```
/// assert_eq!(batchbench_tests::words("--users 4 --stream"), ["--users", "4", "--stream"]);
/// ```
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Runs `batchbench` in process with `args` plus a summary JSON and a CSV in a
/// temporary directory.
pub fn run_batchbench<S: AsRef<str>>(args: &[S]) -> RunResult {
    run_tool(
        batchbench_run::commands::batchbench::run,
        "batchbench",
        args,
    )
}

/// Runs `batchbench ARGS`, which must be refused as bad input (exit 2), and
/// returns the message it is refused with (as resolving and checking the
/// run spec give it).
pub fn refused_batchbench<S: AsRef<str>>(args: &[S]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let r = run_batchbench(&args);
    assert_eq!(r.code, 2, "{args:?}");
    let mut argv = vec!["batchbench"];
    argv.extend(&args);
    let e = match batchbench_run::commands::batchbench::resolve_args(argv) {
        Err(e) => e,
        Ok(spec) => batchbench_run::assemble::check(&spec)
            .err()
            .unwrap_or_else(|| panic!("{args:?} was accepted")),
    };
    assert!(e.is_bad_input(), "{args:?}");
    format!("{:#}", e.error)
}

/// Runs `batchbench-agent` in process, like [`run_batchbench`].
pub fn run_agent<S: AsRef<str>>(args: &[S]) -> RunResult {
    run_tool(
        batchbench_run::commands::agent::run,
        "batchbench-agent",
        args,
    )
}

fn run_tool<S: AsRef<str>>(run: fn(Vec<String>) -> i32, name: &str, args: &[S]) -> RunResult {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let json = dir.path().join("summary.json");
    let csv = dir.path().join("results.csv");
    let mut argv: Vec<String> = vec![name.into(), "--quiet".into()];
    argv.extend(args.iter().map(|s| s.as_ref().to_owned()));
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
        csv_path: csv,
        _dir: dir,
    }
}

/// Reads a JSON-lines file (a `requests.jsonl`, a `trajectories.jsonl`),
/// panicking with the file or the line that cannot be read.
pub fn read_jsonl(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
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

/// The console summary with what varies between runs masked: measured figures
/// become `<t>` on the duration, throughput, think-time and latency lines, and the
/// simulator's loopback address becomes `<sim>`.
pub fn mask_console(text: &str) -> String {
    const MEASURED: &[&str] = &[
        "duration",
        "throughput",
        "tool / think time",
        "request ",
        "time to first token",
        "inter-token",
        "time per output token",
        "trajectory end-to-end",
        "95% interval",
    ];
    let mut out = String::new();
    for line in text.lines() {
        let body = line.trim_start();
        let mut l = line.to_owned();
        if MEASURED.iter().any(|m| body.starts_with(m)) {
            // Keep the label (the first 24 columns), mask every number after it.
            let (label, rest) = l.split_at(l.len().min(25));
            let mut masked = String::new();
            let mut in_num = false;
            for c in rest.chars() {
                if c.is_ascii_digit() || (in_num && c == '.') {
                    if !in_num {
                        masked.push_str("<t>");
                        in_num = true;
                    }
                } else {
                    in_num = false;
                    masked.push(c);
                }
            }
            l = format!("{label}{masked}");
            // Column widths vary with the numbers: fold runs of spaces.
            l = l
                .split(' ')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            l = format!("  {l}");
        }
        if let Some(at) = l.find("http://127.0.0.1:") {
            let end = l[at + 17..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(l.len(), |i| at + 17 + i);
            l.replace_range(at..end, "<sim>");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Compares `got` with the snapshot file `tests/golden/<name>`, or records it
/// when `BATCHBENCH_BLESS` is set.
pub fn check_snapshot(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    if std::env::var_os("BATCHBENCH_BLESS").is_some() {
        std::fs::write(&path, got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{name} changed at line {}:\nrecorded: {:?}\nnow:      {:?}\n--- whole output now ---\n{got}",
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

/// The result of an in-process series (`sweep` or `capacity`).
#[derive(Debug)]
pub struct SeriesResult {
    /// Exit code.
    pub code: i32,
    /// The series' `index.json`, when it wrote one.
    pub index: Option<serde_json::Value>,
    /// Its results directory (gone once the result is dropped).
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl SeriesResult {
    /// The points of the index.
    pub fn points(&self) -> Vec<serde_json::Value> {
        self.index
            .as_ref()
            .and_then(|i| i["points"].as_array().cloned())
            .unwrap_or_default()
    }

    /// One run's `summary.json` and its `requests.jsonl` lines.
    pub fn run(&self, name: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
        let d = self.dir.join(name);
        let summary = read_json(&d.join("summary.json"))
            .unwrap_or_else(|| panic!("{}: no summary.json", d.display()));
        let lines = std::fs::read_to_string(d.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        (summary, lines)
    }
}

/// Runs `program kind ...args` (`batchbench sweep ...`) in process, quiet, into
/// a fresh results directory.
pub fn run_series<S: AsRef<str>>(program: &str, kind: &str, args: &[S]) -> SeriesResult {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("series");
    let mut argv: Vec<String> = vec![program.into(), kind.into(), "--quiet".into()];
    argv.extend(args.iter().map(|s| s.as_ref().to_owned()));
    argv.extend(["--output-dir".into(), dir.display().to_string()]);
    let code = match program {
        "batchbench-agent" => batchbench_run::commands::agent::run(argv),
        _ => batchbench_run::commands::batchbench::run(argv),
    };
    SeriesResult {
        code,
        index: read_json(&dir.join("index.json")),
        dir,
        _tmp: tmp,
    }
}

/// A small JSON Schema for structured outputs: its strings an enum or bounded
/// by `maxLength`, a boolean, nothing else allowed.
pub fn pet_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["cat", "dog", "fish"]},
            "name": {"type": "string", "maxLength": 12},
            "friendly": {"type": "boolean"},
        },
        "required": ["kind", "name", "friendly"],
        "additionalProperties": false,
    })
}

/// The distinct stroke colours of the lines of the chart `id` in an HTML
/// report `page` (a line per series, each in its series' colour).
pub fn chart_colours(page: &str, id: &str) -> Vec<String> {
    let chart = page
        .split(&format!("id=\"{id}\""))
        .nth(1)
        .and_then(|c| c.split("</svg>").next())
        .unwrap_or_else(|| panic!("no {id} chart"));
    let mut colours: Vec<String> = chart
        .split("<path d=")
        .skip(1)
        .filter_map(|p| p.split("stroke=\"").nth(1)?.split('"').next())
        .map(str::to_owned)
        .collect();
    colours.sort_unstable();
    colours.dedup();
    colours
}
