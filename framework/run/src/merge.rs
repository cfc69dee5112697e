//! `batchbench merge DIR... -o DIR`: the results directories of a run's shards
//! (`--shard I/N`) joined into the results of the one run they split, exactly.
//!
//! Nothing is averaged. Every shard's per-request and per-trajectory records
//! are moved onto one clock (the earliest shard's start, by each shard's
//! recorded wall-clock start) and replayed, in shard order, through the same
//! metrics and the same reporters a run feeds: the merged counts are the sums,
//! the merged percentiles those of one histogram of every request, the time
//! series one series over wall-clock time, and the files a run's. The
//! distributions no record carries (inter-token latency, time per output token,
//! admission lag) add bucket by bucket from the shards' histograms; counts no
//! record carries (trajectories started, think time, requests cut at the
//! deadline, arrivals, late admissions) add from the shards' summaries.

use crate::assemble::{self, Profile};
use crate::exit::{self, Failure};
use batchbench_contract::plugin::{PluginError, Reporter, TrajectoryRecord, WorkloadInfo};
use batchbench_contract::record::{ClientBound, Delivery, MergedShard, RunInfo, Summary};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::results::{Histograms, RunDoc, ServerScrape, files};
use batchbench_contract::spec::{OutputSpec, RunSpec};
use batchbench_engine::measurement::metrics::{Latency, Metrics};
use batchbench_engine::run::{Tally, summarize};
use batchbench_plugins::reporters::requests_jsonl::RecordLine;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

/// `merge --help`.
pub const LONG_ABOUT: &str = "\
Join the results directories of a run's shards (--shard I/N) into the one run's, exactly.

Counts add, histograms add (no percentile is averaged), time series align on wall-clock
time and per-request records concatenate; the merged directory works with report and
compare like a single run's, and the merged summary is printed.

Exit codes: 0 merged, 1 the merged run failed (as the run would have) or it could not be
written, 2 bad input (a directory unreadable, not a shard's, missing, given twice, or of
another run; the message names it; nothing is written).";

/// The flags of `merge`.
#[derive(Debug, Clone, clap::Args)]
pub struct MergeArgs {
    /// The shards' results directories (each shard's --output-dir): all N
    /// shards of one run, in any order.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// The merged results directory (created; one that holds a run is refused).
    #[arg(short = 'o', long = "output-dir", value_name = "DIR", required = true)]
    pub output_dir: PathBuf,
    /// Also write the merged summary and run record as JSON.
    #[arg(long, value_name = "PATH")]
    pub summary_json: Option<PathBuf>,
    /// Also append the merged run's CSV row (the columns of a run's).
    #[arg(long, value_name = "PATH")]
    pub results_csv: Option<PathBuf>,
    /// Also write every request's line, on the merged clock.
    #[arg(long, value_name = "PATH")]
    pub requests_jsonl: Option<PathBuf>,
}

/// One shard's directory, read.
struct ShardDir {
    dir: PathBuf,
    doc: RunDoc,
    spec: RunSpec,
    index: u32,
}

/// What a merge wrote.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged run record.
    pub info: RunInfo,
    /// The merged summary.
    pub summary: Summary,
}

/// Runs `PROGRAM merge` from its parsed flags; the exit code a run of the
/// merged figures would have (1 when the merged run failed).
pub fn main(profile: &Profile, args: &MergeArgs) -> i32 {
    let out = OutputSpec {
        output_dir: Some(args.output_dir.clone()),
        summary_json: args.summary_json.clone(),
        results_csv: args.results_csv.clone(),
        requests_jsonl: args.requests_jsonl.clone(),
        ..OutputSpec::default()
    };
    let prog = format!("{} merge", profile.command);
    let result = merge(&args.dirs, out, profile, true).map(|m| {
        eprintln!(
            "merged {} shards into {}",
            m.info.merged_shards.len(),
            args.output_dir.display()
        );
        match &m.summary.run_failed {
            Some(why) if !m.summary.interrupted => {
                eprintln!("{prog}: the merged run failed: {why}");
                exit::EXIT_FAILED
            }
            _ => exit::EXIT_OK,
        }
    });
    exit::exit_code(&prog, result)
}

/// Merges the shard directories `dirs` into the files `output` names (its
/// `output_dir`, and any of a run's other result files); with `console`, the
/// merged summary is printed as a run prints its own. Bad input (exit 2,
/// nothing written): a directory that cannot be read, one that is not a
/// shard's, a shard missing, given twice, or of another run.
pub fn merge(
    dirs: &[PathBuf],
    output: OutputSpec,
    profile: &Profile,
    console: bool,
) -> Result<Merged, Failure> {
    // The results directory is written under a staging name and renamed into
    // place at the end: a merge that fails leaves no partial directory.
    let staging = output.output_dir.as_deref().map(staging_dir);
    if let Some(st) = &staging
        && st.exists()
    {
        std::fs::remove_dir_all(st)
            .map_err(|e| Failure::failed_msg(format!("{}: {e}", st.display())))?;
    }
    let merged = merge_into(dirs, output.clone(), staging.clone(), profile, console);
    match (&merged, staging, &output.output_dir) {
        (Ok(_), Some(st), Some(dir)) => std::fs::rename(&st, dir).map_err(|e| {
            Failure::failed_msg(format!(
                "cannot move the merged results from {} to {}: {e}",
                st.display(),
                dir.display()
            ))
        })?,
        (Err(_), Some(st), _) => {
            let _ = std::fs::remove_dir_all(st);
        }
        _ => {}
    }
    if merged.is_err()
        && let Some(p) = &output.requests_jsonl
    {
        let _ = std::fs::remove_file(p);
    }
    merged
}

/// Where a merge into `dir` writes until it is done: `.NAME.merging` beside it.
fn staging_dir(dir: &std::path::Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or_else(|| "merged".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!(".{name}.merging"))
}

fn merge_into(
    dirs: &[PathBuf],
    output: OutputSpec,
    staging: Option<PathBuf>,
    profile: &Profile,
    console: bool,
) -> Result<Merged, Failure> {
    let shards = read_shards(dirs)?;
    let first = &shards[0];
    let mut spec = first.spec.clone();
    spec.shard = None;
    spec.output = output;
    for (flag, path) in spec.output.files() {
        assemble::check_output(flag, path)?;
    }
    if let Some(dir) = &spec.output.output_dir {
        assemble::check_output_dir(dir)?;
    }

    // One clock: the earliest shard's start. Each shard's records move by
    // its start's lead over it.
    let zero = shards
        .iter()
        .map(|s| s.doc.run.started_unix)
        .fold(f64::INFINITY, f64::min);
    let elapsed_of = |s: &Summary| s.last_admitted_seconds + s.final_drain_seconds;
    let merged_shards: Vec<MergedShard> = shards
        .iter()
        .map(|s| MergedShard {
            index: s.index,
            dir: s.dir.display().to_string(),
            started_unix: s.doc.run.started_unix,
            start_skew_ms: s.doc.run.start_skew_ms,
            elapsed_seconds: elapsed_of(&s.doc.summary),
            requests: s.doc.summary.total_requests,
            offset_seconds: s.doc.run.started_unix - zero,
        })
        .collect();
    let elapsed = merged_shards
        .iter()
        .map(|m| m.offset_seconds + m.elapsed_seconds)
        .fold(0.0, f64::max);

    let workload = merged_workload(&shards);
    let info = RunInfo {
        model: first.doc.run.model.clone(),
        url: first.doc.run.url.clone(),
        seed: first.doc.run.seed,
        started_unix: zero,
        max_active: shards.iter().map(|s| s.doc.run.max_active).sum(),
        config: (profile.view)(&spec, &workload),
        workload,
        spec: Some(spec.clone()),
        start_skew_ms: None,
        merged_shards,
    };

    let ctx = BuildContext {
        seed: info.seed,
        ..BuildContext::default()
    };
    let mut writing = spec.clone();
    // Each shard sent its spans as it ran: the merge sends none again.
    writing.output.otlp_endpoint = None;
    if staging.is_some() {
        writing.output.output_dir = staging;
    }
    let mut reporters = assemble::reporters(&writing, profile, &ctx, console)?;
    let mut notify = |hook: &mut dyn FnMut(&mut dyn Reporter) -> Result<(), PluginError>| {
        reporters.iter_mut().try_for_each(|r| hook(r.as_mut()))
    };
    notify(&mut |r| r.on_start(&info)).map_err(exit::plugin_failure)?;
    // A reporter that fails while the records stream stops the merge with its
    // own error (exit 1), not as bad input.
    let failed: std::cell::Cell<Option<PluginError>> = std::cell::Cell::new(None);
    let stop = |e: PluginError| {
        let m = e.to_string();
        let first = failed.take().unwrap_or(e);
        failed.set(Some(first));
        m
    };
    let read_error = |e: batchbench_results::ResultsError| match failed.take() {
        Some(p) => exit::plugin_failure(p),
        None => Failure::bad_input(e),
    };

    // A fleet's shards tally each endpoint again from the records.
    let fleet: Vec<String> = first
        .doc
        .summary
        .endpoints
        .iter()
        .map(|e| e.url.clone())
        .collect();
    // So does a mix's, each model by its name in the records.
    let models = first
        .doc
        .summary
        .models
        .iter()
        .map(|m| batchbench_engine::measurement::endpoints::ModelTally::named(m.model.clone()))
        .collect();
    let mut metrics = Metrics {
        cache_block_tokens: spec.target.cache_block_tokens(),
        endpoints: fleet.iter().map(|_| Default::default()).collect(),
        models,
        ..Metrics::default()
    };
    let mut shard_histograms = Latencies::default();
    let mut servers_seen: BTreeSet<String> = BTreeSet::new();
    // The shards' requests are read and parsed on a thread of their own, in
    // order, while this one replays them: the merge's two halves in parallel.
    let request_files: Vec<PathBuf> = shards.iter().map(|s| s.dir.join(files::REQUESTS)).collect();
    std::thread::scope(|scope| -> Result<(), Failure> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Parsed>(PARSED_AHEAD);
        scope.spawn(move || parse_requests(&request_files, &tx));
        for (s, m) in shards.iter().zip(&info.merged_shards) {
            let offset = m.offset_seconds;
            // Trajectories first: a trajectory's record ends after its
            // requests', and the order within a file is kept.
            let path = s.dir.join(files::TRAJECTORIES);
            if path.exists() {
                batchbench_results::for_each_line(&path, |mut t: TrajectoryRecord| {
                    t.scheduled_at_seconds += offset;
                    t.admitted_at_seconds += offset;
                    t.finished_at_seconds += offset;
                    metrics.record_trajectory(&t);
                    notify(&mut |r| r.on_trajectory(&t)).map_err(stop)
                })
                .map_err(read_error)?;
            }
            loop {
                match rx.recv() {
                    Ok(Parsed::Lines(lines)) => {
                        for mut line in lines {
                            line.shift(offset * 1000.0);
                            let wire = line.into_wire();
                            let mut rec = wire.record();
                            metrics.record_outcome(&mut rec, &spec.load, &spec.slo);
                            notify(&mut |r| r.on_request(&rec)).map_err(exit::plugin_failure)?;
                        }
                    }
                    Ok(Parsed::EndOfShard) => break,
                    Ok(Parsed::Failed(e)) => return Err(Failure::bad_input(e)),
                    Err(_) => return Err(Failure::failed_msg("the request reader stopped")),
                }
            }
            // A server scraped by several shards is the same server: its
            // scrapes come from the first shard that has them.
            let path = s.dir.join(files::SERVER_METRICS);
            if path.exists() {
                let mut urls = BTreeSet::new();
                batchbench_results::for_each_line(&path, |mut scrape: ServerScrape| {
                    if servers_seen.contains(&scrape.url) {
                        return Ok(());
                    }
                    urls.insert(scrape.url.clone());
                    scrape.t += offset;
                    notify(&mut |r| r.on_server_metrics(&scrape)).map_err(stop)
                })
                .map_err(read_error)?;
                servers_seen.extend(urls);
            }
            let h: Histograms = batchbench_results::read_json(&s.dir.join(files::HISTOGRAMS))
                .map_err(Failure::bad_input)?;
            shard_histograms.add(&h);
        }
        Ok(())
    })?;

    // What no record carries: from the shards' histograms and summaries.
    metrics.itl = shard_histograms.family("itl");
    metrics.itl_reasoning = shard_histograms.family("itl_reasoning");
    metrics.itl_answer = shard_histograms.family("itl_answer");
    for m in &mut metrics.models {
        m.slo.itl = shard_histograms.family(
            &batchbench_engine::measurement::metrics::model_itl_family(&m.name),
        );
    }
    metrics.tpot = shard_histograms.family("tpot");
    metrics.scheduling_delay = shard_histograms.family("scheduling_delay");
    let admission_lag = shard_histograms.family("admission_lag");
    let sum = |f: fn(&Summary) -> u64| shards.iter().map(|s| f(&s.doc.summary)).sum::<u64>();
    metrics.trajectories_started = sum(|s| s.trajectories_started);
    metrics.cut_at_deadline = sum(|s| s.load.as_ref().map_or(0, |l| l.cut_at_deadline));
    metrics.dropped_arrivals = sum(|s| s.load.as_ref().map_or(0, |l| l.dropped_arrivals));
    metrics.dropped_waiting = sum(|s| s.load.as_ref().map_or(0, |l| l.dropped_waiting));
    metrics.delay_total = Duration::from_secs_f64(
        shards
            .iter()
            .map(|s| s.doc.summary.total_delay_seconds)
            .sum::<f64>()
            .max(0.0),
    );
    let interrupted = shards.iter().any(|s| s.doc.summary.interrupted);
    let mut summary = summarize(&Tally {
        metrics: &metrics,
        elapsed: Duration::from_secs_f64(elapsed.max(0.0)),
        load: &spec.load,
        slo: &spec.slo,
        max_failure_rate: spec.max_failure_rate,
        fail_if_client_bound: spec.fail_if_client_bound,
        arrivals: sum(|s| s.load.as_ref().map_or(0, |l| l.arrivals)),
        client_cpu: None,
        client_runtime: None,
        interrupted,
        max_active_observed: sum(|s| s.max_active_observed),
        late_admissions: sum(|s| s.late_admissions),
        admission_lag: &admission_lag,
        converged: None,
    });
    summary.prompt_synthesis = first.doc.summary.prompt_synthesis.clone();
    if !fleet.is_empty() {
        summary.routing.clone_from(&first.doc.summary.routing);
        let secs = elapsed.max(0.0);
        summary.endpoints = metrics
            .endpoints
            .iter()
            .zip(fleet)
            .map(|(e, url)| e.summary(url, secs))
            .collect();
    }
    summary.models = metrics.model_summaries(elapsed.max(0.0));
    summary.server_closes_connections = shards
        .iter()
        .any(|s| s.doc.summary.server_closes_connections);
    summary.server_metrics = shards
        .iter()
        .find_map(|s| s.doc.summary.server_metrics.clone());
    cpu_verdicts(&mut summary, &shards);
    client_bounds(&mut summary, &shards);
    summary.deliveries = deliveries(&shards);
    if spec.fail_if_client_bound
        && summary.run_failed.is_none()
        && let Some(b) = &summary.client_bound
    {
        summary.run_failed = Some(format!(
            "the client, not the server, limited this run ({}) and --fail-if-client-bound was given",
            b.reasons.join(", ")
        ));
    }

    let mut histograms = metrics.histograms();
    if !admission_lag.is_empty() {
        histograms
            .families
            .insert("admission_lag".to_owned(), admission_lag.buckets());
    }
    notify(&mut |r| r.on_histograms(&histograms)).map_err(exit::plugin_failure)?;
    notify(&mut |r| r.on_finish(&info, &summary)).map_err(exit::plugin_failure)?;
    Ok(Merged { info, summary })
}

/// Parsed requests in flight between the reader and the replay, in batches.
const PARSED_AHEAD: usize = 16;
const BATCH: usize = 2048;

/// What the request reader hands over.
enum Parsed {
    /// The next requests of the current shard.
    Lines(Vec<RecordLine>),
    /// The current shard's requests are all read.
    EndOfShard,
    /// A file could not be read (the replay stops).
    Failed(batchbench_results::ResultsError),
}

/// Reads every shard's `requests.jsonl` in order, in batches; stops when the
/// replay does (the channel closes).
fn parse_requests(files: &[PathBuf], tx: &std::sync::mpsc::SyncSender<Parsed>) {
    for path in files {
        let mut batch = Vec::with_capacity(BATCH);
        let read = batchbench_results::for_each_line(path, |line: RecordLine| {
            batch.push(line);
            if batch.len() == BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                tx.send(Parsed::Lines(full))
                    .map_err(|_| "the merge stopped".to_owned())?;
            }
            Ok(())
        });
        let sent = match read {
            Ok(()) => tx
                .send(Parsed::Lines(batch))
                .and_then(|()| tx.send(Parsed::EndOfShard)),
            Err(e) => tx.send(Parsed::Failed(e)),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Reads and checks the shard directories: every one a shard of the same run
/// (its spec, seed and workload), each index once, none missing. In index
/// order.
fn read_shards(dirs: &[PathBuf]) -> Result<Vec<ShardDir>, Failure> {
    let mut shards: Vec<ShardDir> = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let doc = batchbench_results::load_doc(dir).map_err(Failure::bad_input)?;
        let run_json = dir.join(files::RUN);
        let Some(spec) = doc.run.spec.clone() else {
            return Err(Failure::bad(format!(
                "{}: the run record has no spec (written by an older batchbench): it cannot be checked against the other shards",
                run_json.display()
            )));
        };
        let Some(shard) = spec.shard.filter(|s| !s.is_whole()) else {
            return Err(Failure::bad(format!(
                "{}: not a shard's results (its run had no --shard I/N with N above 1); merge joins the shards of one run",
                run_json.display()
            )));
        };
        if let Some(other) = shards.iter().find(|s| s.index == shard.index) {
            return Err(Failure::bad(format!(
                "shard {shard} is given twice: {} and {}",
                other.dir.display(),
                dir.display()
            )));
        }
        if let Some(first) = shards.first() {
            let n = first.spec.shard().count;
            if shard.count != n {
                return Err(Failure::bad(format!(
                    "{}: shard {shard} is of a run split {} ways, and {} is of one split {n} ways",
                    run_json.display(),
                    shard.count,
                    first.dir.display()
                )));
            }
            if let Some((path, a, b)) = first_difference(
                &comparable(&first.spec, &first.doc),
                &comparable(&spec, &doc),
            ) {
                return Err(Failure::bad(format!(
                    "{}: shard {shard} is of another run than {} (shard {}): {path} is {b} there and {a} here; the shards of one run differ only in --shard",
                    run_json.display(),
                    first.dir.display(),
                    first.spec.shard(),
                )));
            }
        }
        shards.push(ShardDir {
            dir: dir.clone(),
            index: shard.index,
            doc,
            spec,
        });
    }
    shards.sort_by_key(|s| s.index);
    let n = shards[0].spec.shard().count;
    let missing: Vec<String> = (0..n)
        .filter(|i| !shards.iter().any(|s| s.index == *i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(10).map(String::as_str).collect();
        return Err(Failure::bad(format!(
            "{} of the {n} shards {} missing: {}{} (give every shard's directory)",
            missing.len(),
            if missing.len() == 1 { "is" } else { "are" },
            shown.join(", "),
            if missing.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        )));
    }
    Ok(shards)
}

/// What must be equal across the shards of one run: the spec but its shard
/// and its output files, and the workload's identity.
fn comparable(spec: &RunSpec, doc: &RunDoc) -> serde_json::Value {
    let mut spec = spec.clone();
    spec.shard = None;
    spec.output = OutputSpec::default();
    let w = &doc.run.workload;
    serde_json::json!({
        "spec": spec,
        "workload": {
            "mode": w.mode,
            "manifest_sha256": w.manifest_sha256,
        },
    })
}

/// The first path at which `a` and `b` differ, with both values.
fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
) -> Option<(String, String, String)> {
    use serde_json::Value;
    fn walk(a: &Value, b: &Value, path: &mut Vec<String>) -> Option<(String, String, String)> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    path.push(k.clone());
                    let found = walk(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        path,
                    );
                    path.pop();
                    if found.is_some() {
                        return found;
                    }
                }
                None
            }
            _ if a == b => None,
            _ => {
                let show = |v: &Value| {
                    let mut s = v.to_string();
                    if s.len() > 80 {
                        s.truncate(77);
                        s.push_str("...");
                    }
                    s
                };
                let name = path.join(".");
                let name = name.strip_prefix("spec.").unwrap_or(&name).to_owned();
                Some((name, show(a), show(b)))
            }
        }
    }
    walk(a, b, &mut Vec::new())
}

/// The workload as the whole run saw it: the shards' counts added.
fn merged_workload(shards: &[ShardDir]) -> WorkloadInfo {
    let mut w = shards[0].doc.run.workload.clone();
    let add = |f: fn(&WorkloadInfo) -> Option<u64>| -> Option<u64> {
        shards.iter().map(|s| f(&s.doc.run.workload)).sum()
    };
    w.planned_trajectories = add(|w| w.planned_trajectories);
    w.planned_requests = add(|w| w.planned_requests);
    w
}

/// The shards' distributions added, family by family.
#[derive(Default)]
struct Latencies(BTreeMap<String, Latency>);

impl Latencies {
    fn add(&mut self, h: &Histograms) {
        for (name, buckets) in &h.families {
            self.0
                .entry(name.clone())
                .or_default()
                .add(&Latency::from_buckets(buckets));
        }
    }

    fn family(&self, name: &str) -> Latency {
        self.0.get(name).cloned().unwrap_or_default()
    }
}

/// What the shards delivered elsewhere, added up by reporter and destination.
fn deliveries(shards: &[ShardDir]) -> Vec<Delivery> {
    let mut all: Vec<Delivery> = Vec::new();
    for d in shards.iter().flat_map(|s| &s.doc.summary.deliveries) {
        match all
            .iter_mut()
            .find(|a| (&a.reporter, &a.destination) == (&d.reporter, &d.destination))
        {
            Some(a) => a.add(d),
            None => all.push(d.clone()),
        }
    }
    all
}

/// A shard whose client was the limit limited the run as a whole: its
/// reasons join the merged verdict (which sees the dropped arrivals and the
/// send lag of all, but not each shard's busy threads).
fn client_bounds(summary: &mut Summary, shards: &[ShardDir]) {
    let bound: Vec<(String, &ClientBound)> = shards
        .iter()
        .filter_map(|s| {
            Some((
                s.spec.shard().to_string(),
                s.doc.summary.client_bound.as_ref()?,
            ))
        })
        .collect();
    if bound.is_empty() {
        return;
    }
    let merged = summary.client_bound.get_or_insert_with(|| ClientBound {
        reasons: Vec::new(),
        message: "the client, not the server, limited this run in a shard".to_owned(),
    });
    for (shard, b) in bound {
        for r in &b.reasons {
            if !merged.reasons.contains(r) {
                merged.reasons.push(r.clone());
            }
        }
        merged.message += &format!("; shard {shard}: {}", b.message);
    }
}

/// A shard whose own cores were busy limited the run as a whole: its verdict
/// on its CPU (which the merge cannot re-measure) joins the merged one.
fn cpu_verdicts(summary: &mut Summary, shards: &[ShardDir]) {
    let lines: Vec<String> = shards
        .iter()
        .filter_map(|s| {
            let v = s.doc.summary.load.as_ref()?.verdict.as_ref()?;
            let cpu = v
                .split("; ")
                .find(|p| p.starts_with(batchbench_engine::run::CLIENT_CPU_VERDICT))?;
            Some(format!("shard {}: {cpu}", s.spec.shard()))
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    if let Some(load) = summary.load.as_mut() {
        let mut all: Vec<String> = load.verdict.take().into_iter().collect();
        all.extend(lines);
        load.verdict = Some(all.join("; "));
    }
}
