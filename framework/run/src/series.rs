//! Series of runs over one load dimension: `sweep` (a list or a geometric
//! range of loads, stopped early at saturation) and `capacity` (the highest load
//! that meets the SLO: bracketing, then bisection).
//!
//! A point of a series is an ordinary run: the series' own flags are taken out
//! of the command line, the dimension's flag is added with the point's value
//! (`--request-rate 40`), and that command line resolves into a spec exactly as
//! if it had been typed. The spec then goes to [`assemble::execute`] with its
//! result files pointed into the series' directory. So a point means what its
//! command line means, and the index records that command line.
//!
//! The results directory (`--output-dir`) holds `index.json` (the series: its
//! points and their figures, rewritten after every point), `results.csv` (a row
//! per run, unless `--results-csv` names another file) and, per run, a results
//! directory (`run-000`, ...; see [`batchbench_contract::results`]) with the run's
//! `summary.json` beside it.

use crate::assemble::{self, Host, Outcome, Profile};
use crate::exit::{self, Failure};
use crate::flags;
use batchbench_contract::record::Summary;
use batchbench_contract::slo::SloResult;
use batchbench_contract::spec::RunSpec;
use clap::{Args, FromArgMatches};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// A load dimension a series can vary: the flag of a command that sets it.
#[derive(Debug, Clone, Copy)]
pub struct Dimension {
    /// Its name in `--over`, which is also its flag without the dashes
    /// (`request-rate`).
    pub name: &'static str,
    /// The unit of its values (`req/s`, `users`).
    pub unit: &'static str,
    /// Whole numbers only (users, agents, a concurrency cap).
    pub whole: bool,
}

impl Dimension {
    /// A dimension named `name` (its flag without the dashes), of `unit`,
    /// `whole` numbers only or not.
    pub const fn new(name: &'static str, unit: &'static str, whole: bool) -> Self {
        Self { name, unit, whole }
    }

    fn flag(&self) -> String {
        format!("--{}", self.name)
    }

    fn id(&self) -> String {
        self.name.replace('-', "_")
    }

    /// A value as its flag takes it.
    fn arg(&self, v: f64) -> String {
        if self.whole {
            format!("{}", v.round() as u64)
        } else {
            format!("{}", round_sig(v))
        }
    }
}

/// Rounds to 6 significant digits, so that bisected rates print short.
fn round_sig(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(5 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// What a command gives a series: its run flags, how a command line becomes a
/// spec, its reports, and the dimensions it can vary.
#[derive(Debug, Clone, Copy)]
pub struct Front {
    /// The command (`batchbench`).
    pub program: &'static str,
    /// The command's run flags as a clap command (the series' flags are added).
    pub command: fn() -> clap::Command,
    /// A command line (program name first) into its run spec.
    pub resolve: fn(Vec<OsString>) -> Result<RunSpec, Failure>,
    /// How the command's runs report.
    pub profile: &'static Profile,
    /// The dimensions, the default first.
    pub dimensions: &'static [Dimension],
}

/// The flags every series takes.
#[derive(Debug, Clone, Args)]
pub struct SeriesArgs {
    /// The load dimension to vary: one of those the description above lists.
    #[arg(long, value_name = "DIMENSION", help_heading = "Series")]
    pub over: String,
    /// Runs per point; figures are their mean with a 95% interval.
    #[arg(long, default_value = "1", value_parser = flags::positive, help_heading = "Series")]
    pub trials: u64,
    /// Run each point until every percentile bound of --slo is decided (its
    /// 95% interval wholly on one side of the bound), and not before this many
    /// measured requests; --point-max-secs (or --duration-secs) is the cap.
    #[arg(long, value_name = "N", value_parser = flags::positive, help_heading = "Series")]
    pub min_requests: Option<u64>,
    /// Run each point until every percentile bound of --slo is decided, for
    /// at most this many seconds (it replaces --duration-secs); a point still
    /// undecided then is reported as such, never as met.
    #[arg(long, value_name = "SECS", value_parser = flags::positive_number, help_heading = "Series")]
    pub point_max_secs: Option<f64>,
}

/// The flags of `sweep`.
#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Dimension, directory and trials.
    #[command(flatten)]
    pub series: SeriesArgs,
    /// The loads, rising: a list (1,2,4,8) or a geometric range FROM..TO
    /// (doubling from FROM, TO included; --points N spaces N points instead).
    #[arg(long, value_name = "VALUES", help_heading = "Series")]
    pub values: String,
    /// Points of a FROM..TO range, spaced geometrically, both ends included.
    #[arg(long, value_name = "N", value_parser = flags::positive, help_heading = "Series")]
    pub points: Option<u64>,
    /// Run every point, also past saturation (by default the sweep stops at
    /// the first point whose throughput stopped rising while latency rose).
    #[arg(long, help_heading = "Series")]
    pub no_early_stop: bool,
}

/// The flags of `capacity`.
#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// Dimension, directory and trials.
    #[command(flatten)]
    pub series: SeriesArgs,
    /// The first load measured; the search doubles (or halves) from here
    /// [default: 1].
    #[arg(long, value_name = "LOAD", value_parser = flags::positive_number, help_heading = "Series")]
    pub start: Option<f64>,
    /// The highest load tried: a capacity at or above it is reported as such.
    #[arg(long, value_name = "LOAD", value_parser = flags::positive_number, help_heading = "Series")]
    pub max_load: Option<f64>,
    /// Bisect until the failing load is within this share above the passing
    /// one (whole dimensions: until they are 1 apart).
    #[arg(long, default_value = "0.05", value_parser = flags::positive_number, help_heading = "Series")]
    pub tolerance: f64,
    /// Measure at most this many points.
    #[arg(long, default_value = "24", value_parser = flags::positive, help_heading = "Series")]
    pub max_points: u64,
    /// A point whose percentile lands within this share of its bound is
    /// measured once more and judged on the mean of its runs.
    #[arg(long, default_value = "0.05", value_parser = flags::finite, help_heading = "Series")]
    pub near: f64,
}

/// Which series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `sweep`.
    Sweep,
    /// `capacity`.
    Capacity,
}

impl Kind {
    /// The subcommand of a command line's first argument.
    pub fn of(arg: Option<&OsString>) -> Option<Self> {
        match arg?.to_str()? {
            "sweep" => Some(Self::Sweep),
            "capacity" => Some(Self::Capacity),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Sweep => "sweep",
            Self::Capacity => "capacity",
        }
    }
}

pub use batchbench_contract::results::series::{
    BoundVerdict, Capacity, Estimate, Point, SERIES_VERSION, SeriesDoc,
};

/// Runs `batchbench sweep ...` or `capacity ...`, parsed into `matches` (of
/// [`command`]): `args` are the arguments after the subcommand's name.
/// Returns the exit code.
pub fn main(
    front: &Front,
    kind: Kind,
    matches: &clap::ArgMatches,
    args: &[OsString],
    cancel: Option<CancellationToken>,
) -> i32 {
    let prog = format!("{} {}", front.program, kind.name());
    exit::exit_code(&prog, run(front, kind, matches, args, cancel))
}

/// The clap command of a series (for `--help` and parsing).
pub fn command(front: &Front, kind: Kind) -> clap::Command {
    let dims = front
        .dimensions
        .iter()
        .map(|d| format!("{} ({})", d.name, d.unit))
        .collect::<Vec<_>>()
        .join(", ");
    let base =
        (front.command)()
            .name(kind.name())
            .bin_name(format!("{} {}", front.program, kind.name()));
    match kind {
        Kind::Sweep => SweepArgs::augment_args(base)
            .about("Run a series of benchmarks over one load dimension")
            .long_about(format!(
                "Run the benchmark the other flags describe once per load value, varying one dimension \
                 (--over: {dims}), into a results directory: index.json, results.csv and a directory \
                 per run. A table of throughput, goodput and latency per point ends it. The sweep \
                 stops early at saturation: at the first point whose throughput rose by less than a \
                 quarter of the load's rise while its median latency rose by more than 10%.\n\n\
                 Exit codes: 0 done, 1 a run could not complete, 2 bad input (nothing sent), 130 interrupted."
            )),
        Kind::Capacity => CapacityArgs::augment_args(base)
            .about("Find the highest load that meets the SLO")
            .long_about(format!(
                "Find the highest load of one dimension (--over: {dims}) at which the run the other \
                 flags describe meets its --slo: doubling from --start until a point misses it \
                 (halving when the first does), then bisection until the bracket is within \
                 --tolerance. A point whose percentile lands within --near of its bound is measured once \
                 more. A point meets the SLO only when each percentile bound is decided at the 95% level \
                 (its interval on one side of the bound); an undecided point counts as not met, and \
                 --min-requests with --point-max-secs run each point until it is decided. Prints the \
                 capacity, every point and both brackets (the search's and the statistical one); \
                 --summary-json holds a capacity object.\n\n\
                 Exit codes: 0 done (also when no load met the SLO: see the verdict), 1 a run could \
                 not complete, 2 bad input (nothing sent), 130 interrupted."
            )),
    }
}

/// The series' own long flags, and whether each takes a value.
fn series_flags(kind: Kind) -> Vec<(String, bool)> {
    let base = clap::Command::new("series");
    let cmd = match kind {
        Kind::Sweep => SweepArgs::augment_args(base),
        Kind::Capacity => CapacityArgs::augment_args(base),
    };
    flags::command_flags(&cmd)
}

/// Every long flag of a series subcommand (the run's and the series'), for
/// hosts that build argument lists.
pub fn long_flags(front: &Front, kind: Kind) -> Vec<(String, bool)> {
    flags::command_flags(&command(front, kind))
}

/// The run's arguments: `args` without the series' flags.
fn run_args(kind: Kind, args: &[OsString]) -> Vec<OsString> {
    flags::without(&series_flags(kind), args)
}

/// The loads of `--values` (with `--points`).
fn sweep_values(s: &SweepArgs, dim: &Dimension) -> Result<Vec<f64>, Failure> {
    let bad = |m: String| Failure::bad(format!("--values {}: {m}", s.values));
    let num = |t: &str| -> Result<f64, Failure> {
        let v: f64 = t
            .trim()
            .parse()
            .map_err(|_| bad(format!("'{}' is not a number", t.trim())))?;
        if !(v.is_finite() && v > 0.0) {
            return Err(bad(format!("{v} is not a positive load")));
        }
        Ok(v)
    };
    let mut values = if let Some((from, to)) = s.values.split_once("..") {
        let (from, to) = (num(from)?, num(to)?);
        if to <= from {
            return Err(bad(
                "the range must rise (FROM..TO with TO above FROM)".into()
            ));
        }
        match s.points {
            Some(1) => return Err(bad("--points must be at least 2 for a range".into())),
            Some(n) => (0..n)
                .map(|i| from * (to / from).powf(i as f64 / (n - 1) as f64))
                .collect::<Vec<_>>(),
            None => {
                let mut v = Vec::new();
                let mut x = from;
                while x < to * (1.0 - 1e-9) {
                    v.push(x);
                    x *= 2.0;
                }
                v.push(to);
                v
            }
        }
    } else {
        if s.points.is_some() {
            return Err(Failure::bad(
                "--points spaces a FROM..TO range: give --values FROM..TO, or drop --points",
            ));
        }
        s.values
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(num)
            .collect::<Result<Vec<_>, _>>()?
    };
    if dim.whole {
        let range = s.values.contains("..");
        for v in &mut values {
            if !range && v.fract() != 0.0 {
                return Err(bad(format!("{} takes whole numbers, got {v}", dim.name)));
            }
            *v = v.round().max(1.0);
        }
        values.dedup();
    } else {
        for v in &mut values {
            *v = round_sig(*v);
        }
    }
    if values.is_empty() {
        return Err(bad(
            "no values: give a list (1,2,4) or a range (1..64)".into()
        ));
    }
    if values.windows(2).any(|w| w[1] <= w[0]) {
        return Err(bad("the values must rise".into()));
    }
    Ok(values)
}

/// The default results directory: `./sweep-20261202T171500Z`.
fn default_dir(kind: Kind) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let stamp: String = batchbench_contract::timefmt::rfc3339(now)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(15)
        .collect();
    PathBuf::from(format!("{}-{stamp}Z", kind.name()))
}

/// What every point of a series shares.
struct Series<'a> {
    front: &'a Front,
    dim: Dimension,
    /// The run's arguments (program name first), without the series' flags.
    argv: Vec<OsString>,
    /// The base spec's result files, where the user wants them.
    user_csv: Option<PathBuf>,
    user_summary: Option<PathBuf>,
    events: bool,
    seed: u64,
    trials: u64,
    dir: PathBuf,
    cancel: CancellationToken,
    api_key: Option<String>,
    doc: SeriesDoc,
    runs: usize,
    /// Points run until their SLO is decided: the least requests, and the cap.
    decide: Option<(Option<u64>, Option<f64>)>,
}

fn io_failure(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::failed_msg(format!("{}: {e}", path.display()))
}

impl Series<'_> {
    /// A point's command line.
    fn point_argv(&self, value: f64) -> Vec<OsString> {
        let mut argv = self.argv.clone();
        argv.push(self.dim.flag().into());
        argv.push(self.dim.arg(value).into());
        argv
    }

    /// A point's spec, its result files not yet pointed anywhere.
    fn spec(&self, value: f64) -> Result<RunSpec, Failure> {
        let spec = (self.front.resolve)(self.point_argv(value)).map_err(|f| Failure {
            code: f.code,
            error: f.error.context(format!(
                "the point {} {}",
                self.dim.flag(),
                self.dim.arg(value)
            )),
        })?;
        let mut spec = spec;
        if let Some((min_requests, max_secs)) = self.decide {
            if !spec.slo.iter().any(|b| b.percentile.is_some()) {
                return Err(Failure::bad(
                    "--min-requests and --point-max-secs run each point until the percentile bounds of its SLO are decided: give one in --slo, such as e2e_p99<=2s",
                ));
            }
            let l = &mut spec.load;
            if max_secs.is_some() {
                l.duration_secs = max_secs;
            }
            if l.duration_secs.is_none() {
                return Err(Failure::bad(
                    "--min-requests runs each point until its SLO is decided: give --point-max-secs (or --duration-secs), the longest a point may run",
                ));
            }
            l.until_decided = true;
            l.min_requests = min_requests;
        }
        assemble::check(&spec)?;
        Ok(spec)
    }

    /// Runs one run of a point; `trial` counts from 0.
    fn run_once(&mut self, spec: &RunSpec, trial: u64) -> Result<(String, u64, Summary), Failure> {
        let mut spec = spec.clone();
        let seed = if trial == 0 {
            self.seed
        } else {
            batchbench_contract::rng::derive(self.seed, &[trial])
        };
        spec.seed = Some(seed);
        let name = format!("run-{:03}", self.runs);
        self.runs += 1;
        let d = self.dir.join(&name);
        std::fs::create_dir_all(&d).map_err(|e| io_failure(&d, e))?;
        let o = &mut spec.output;
        o.summary_json = Some(d.join("summary.json"));
        o.output_dir = Some(d.clone());
        o.results_csv = Some(
            self.user_csv
                .clone()
                .unwrap_or_else(|| self.dir.join("results.csv")),
        );
        if self.events {
            o.agent_events_jsonl = Some(d.join("agent-events.jsonl"));
        }
        let host = Host {
            cancel: Some(self.cancel.clone()),
            api_key: self.api_key.clone(),
            quiet_summary: true,
            ..Host::default()
        };
        match assemble::execute(spec, self.front.profile, host)? {
            Outcome::Ran(out) => Ok((name, seed, out.summary)),
            Outcome::DryRun { .. } => Err(Failure::failed_msg("a series point made a dry run")),
        }
    }

    /// Measures the point `value` of the resolved `spec`: `trials` runs, and
    /// one more when `remeasure_near` and a percentile landed near its bound.
    fn measure(
        &mut self,
        value: f64,
        spec: &RunSpec,
        judge: &Judge,
        remeasure_near: bool,
    ) -> Result<Point, Failure> {
        let (mut summaries, mut runs, mut seeds) = (Vec::new(), Vec::new(), Vec::new());
        let mut target = self.trials;
        let mut remeasured = false;
        while (summaries.len() as u64) < target {
            let (name, seed, summary) = self.run_once(spec, summaries.len() as u64)?;
            runs.push(name);
            seeds.push(seed);
            let stop = summary.interrupted;
            summaries.push(summary);
            if stop {
                break;
            }
            if summaries.len() as u64 == target
                && remeasure_near
                && !remeasured
                && figures(value, &summaries, judge).near
            {
                remeasured = true;
                target += 1;
            }
        }
        Ok(Point {
            command: redacted(&self.point_argv(value)),
            runs,
            seeds,
            remeasured,
            ..figures(value, &summaries, judge).point
        })
    }

    /// Prints a point's line and rewrites the index.
    fn record(&mut self, point: Point, of: Option<usize>) -> Result<(), Failure> {
        let n = self.doc.points.len() + 1;
        let count = of.map_or_else(|| format!("{n}"), |of| format!("{n}/{of}"));
        eprintln!("[{count}] {}", point_line(&self.dim, &point));
        self.doc.points.push(point);
        self.write_index()
    }

    /// Writes the index (and the `--summary-json` copy) whole: a temporary
    /// file renamed over the old one, so a reader never sees half of it.
    fn write_index(&self) -> Result<(), Failure> {
        let text = serde_json::to_string_pretty(&self.doc).map_err(Failure::failed)?;
        let index = self.dir.join("index.json");
        for path in std::iter::once(&index).chain(self.user_summary.as_ref()) {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".part");
            let tmp = PathBuf::from(tmp);
            std::fs::write(&tmp, format!("{text}\n")).map_err(|e| io_failure(&tmp, e))?;
            std::fs::rename(&tmp, path).map_err(|e| io_failure(path, e))?;
        }
        Ok(())
    }

    /// A run of the series could not complete: the index says so and keeps
    /// every point measured; the series exits 1 (requests were sent).
    fn abort(&mut self, f: Failure) -> Failure {
        let message = format!("{:#}", f.error);
        self.doc.error = Some(message.clone());
        let _ = self.write_index();
        Failure::failed_msg(message)
    }
}

/// A command line as the index records it: an API key given with `--api-key`
/// is never written.
fn redacted(argv: &[OsString]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    for a in argv {
        let a = a.to_string_lossy();
        if out.last().is_some_and(|p| p == "--api-key") {
            out.push("<redacted>".into());
        } else if a.starts_with("--api-key=") {
            out.push("--api-key=<redacted>".into());
        } else {
            out.push(a.into_owned());
        }
    }
    out
}

/// How a point is judged: the SLO and the failures allowed.
#[derive(Debug, Clone)]
struct Judge {
    bounds: Vec<batchbench_contract::slo::SloBound>,
    max_failure_rate: f64,
    near: f64,
}

/// A point's figures, and whether one is near its bound.
struct Figures {
    point: Point,
    near: bool,
}

fn figures(value: f64, runs: &[Summary], judge: &Judge) -> Figures {
    let load = |f: fn(&batchbench_contract::record::LoadReport) -> Option<f64>| {
        Estimate::of_some(runs.iter().map(|s| s.load.as_ref().and_then(f)))
    };
    // One run's own interval of a figure (several runs have theirs over them).
    let own = |f: &dyn Fn(&Summary) -> Option<[f64; 2]>| runs.first().and_then(f);
    let e2e_stats = |s: &Summary| {
        s.load
            .as_ref()
            .and_then(|l| l.latency_from_intended)
            .or(s.latency)
    };
    let e2e = |p99: bool| {
        Estimate::of_some(
            runs.iter()
                .map(|s| e2e_stats(s).map(|l| if p99 { l.p99_ms } else { l.p50_ms })),
        )
        .map(|e| {
            e.or_own(own(&|s| {
                let ci = e2e_stats(s)?.ci?;
                if p99 { ci.p99_ms } else { ci.p50_ms }
            }))
        })
    };
    let mut p = Point {
        value,
        requests: runs.iter().map(|s| s.total_requests).sum(),
        failed_requests: runs.iter().map(|s| s.failed_requests).sum(),
        requests_per_second: Estimate::of(runs.iter().map(|s| s.requests_per_second).collect())
            .or_own(own(&|s| s.requests_per_second_ci)),
        completion_tokens_per_second: Estimate::of(
            runs.iter()
                .map(|s| s.completion_tokens_per_second)
                .collect(),
        ),
        achieved_rate: load(|l| l.target_rate.map(|_| l.achieved_rate)),
        goodput: Estimate::of_some(runs.iter().map(|s| s.slo.as_ref().map(|r| r.goodput))),
        e2e_p50_ms: e2e(false),
        e2e_p99_ms: e2e(true),
        ttft_p99_ms: load(|l| l.ttft_from_intended.map(|t| t.p99_ms))
            .map(|e| e.or_own(own(&|s| s.load.as_ref()?.ttft_from_intended?.ci?.p99_ms))),
        tpot_p99_ms: Estimate::of_some(runs.iter().map(|s| s.tpot.map(|t| t.p99_ms))),
        interrupted: runs.iter().any(|s| s.interrupted),
        ..Point::default()
    };
    let mut near = false;
    if !judge.bounds.is_empty() {
        let results: Vec<Vec<SloResult>> = runs
            .iter()
            .map(|s| s.slo.as_ref().map(|r| r.bounds.clone()).unwrap_or_default())
            .collect();
        for (i, b) in judge.bounds.iter().enumerate() {
            let of = |f: fn(&SloResult) -> Option<f64>| {
                Estimate::of_some(results.iter().map(|r| r.get(i).and_then(f)))
            };
            let max_ms = b.max.as_secs_f64() * 1000.0;
            let v = match b.percentile {
                Some(_) => {
                    let observed = of(|r| r.observed_ms);
                    let met = observed.as_ref().is_some_and(|o| o.mean <= max_ms);
                    near |= observed
                        .as_ref()
                        .is_some_and(|o| (o.mean - max_ms).abs() <= judge.near * max_ms);
                    let (interval_ms, decided) = decided_by(&observed, &results, i, max_ms);
                    let too_few = results.iter().any(|r| r.get(i).is_some_and(|r| r.too_few));
                    BoundVerdict {
                        bound: b.to_string(),
                        undecided: observed.is_some() && !decided,
                        too_few: observed.is_some() && !decided && too_few,
                        observed_ms: observed,
                        share_met: None,
                        met,
                        interval_ms,
                    }
                }
                None => {
                    let share = of(|r| r.share_met);
                    let met = results.iter().all(|r| r.get(i).is_some_and(|r| r.met));
                    near |= share
                        .as_ref()
                        .is_some_and(|s| s.mean < 1.0 && s.mean >= 1.0 - judge.near);
                    BoundVerdict {
                        bound: b.to_string(),
                        observed_ms: None,
                        share_met: share,
                        met,
                        ..BoundVerdict::default()
                    }
                }
            };
            p.bounds.push(v);
        }
        let failure_share = if p.requests > 0 {
            p.failed_requests as f64 / p.requests as f64
        } else {
            1.0
        };
        let served = failure_share <= judge.max_failure_rate
            && runs.iter().any(|s| s.successful_requests > 0);
        let missed = p.bounds.iter().any(|b| !b.met && !b.undecided);
        p.undecided = served && !missed && p.bounds.iter().any(|b| b.undecided);
        p.passed = Some(served && p.bounds.iter().all(|b| b.met && !b.undecided));
    }
    Figures { point: p, near }
}

/// A percentile bound's interval at a point, and whether it is decided. One
/// run decides by its own verdict (its share of requests over the bound).
/// Several decide when each run decided and all agree, or else by the
/// interval over their percentiles, `observed`, when every run had an
/// interval of its own: the percentile of a run too short for one is its
/// largest samples (a p99 of 22 requests is their maximum), and no mean of
/// such tells the server's.
fn decided_by(
    observed: &Option<Estimate>,
    results: &[Vec<SloResult>],
    bound: usize,
    max_ms: f64,
) -> (Option<[f64; 2]>, bool) {
    let Some(observed) = observed.as_ref() else {
        return (None, false);
    };
    let Some(runs) = results
        .iter()
        .map(|r| r.get(bound))
        .collect::<Option<Vec<&SloResult>>>()
    else {
        return (None, false);
    };
    if let [one] = runs.as_slice() {
        return (one.interval_ms, !one.undecided);
    }
    let ci = runs
        .iter()
        .all(|r| r.interval_ms.is_some())
        .then_some(observed.interval)
        .flatten();
    let agree = !runs.is_empty()
        && runs.iter().all(|r| !r.undecided)
        && runs.iter().all(|r| r.met == runs[0].met);
    let by_interval = ci.is_some_and(|[lo, hi]| hi <= max_ms || lo > max_ms);
    (ci, agree || by_interval)
}

/// A figure with its interval, for the console.
fn show(e: Option<&Estimate>, unit: &str) -> String {
    match e {
        None => "-".into(),
        Some(e) => match e.ci95 {
            Some(ci) => format!("{:.2}±{:.2}{unit}", e.mean, ci),
            None => format!("{:.2}{unit}", e.mean),
        },
    }
}

fn point_line(dim: &Dimension, p: &Point) -> String {
    let mut line = format!(
        "{} {} {}: {} req/s",
        dim.name,
        dim.arg(p.value),
        dim.unit,
        show(Some(&p.requests_per_second), "")
    );
    if let Some(g) = &p.goodput {
        line += &format!(", goodput {} req/s", show(Some(g), ""));
    }
    line += &format!(
        ", e2e p50 {} p99 {}",
        show(p.e2e_p50_ms.as_ref(), " ms"),
        show(p.e2e_p99_ms.as_ref(), " ms")
    );
    if p.ttft_p99_ms.is_some() {
        line += &format!(", ttft p99 {}", show(p.ttft_p99_ms.as_ref(), " ms"));
    }
    if p.failed_requests > 0 {
        line += &format!(", {} failed", p.failed_requests);
    }
    match p.passed {
        Some(true) => line += ", SLO met",
        Some(false) if p.undecided => {
            let open: Vec<String> = p
                .bounds
                .iter()
                .filter(|b| b.undecided)
                .map(|b| match b.interval_ms {
                    Some([lo, hi]) => format!("{}: interval {lo:.1}-{hi:.1} ms", b.bound),
                    None => format!("{}: too few requests for an interval", b.bound),
                })
                .collect();
            line += &format!(", SLO undecided ({})", open.join("; "));
        }
        Some(false) => {
            let missed: Vec<&str> = p
                .bounds
                .iter()
                .filter(|b| !b.met)
                .map(|b| b.bound.as_str())
                .collect();
            line += &if missed.is_empty() {
                ", SLO missed (failed requests)".to_owned()
            } else {
                format!(", SLO missed ({})", missed.join(", "))
            };
        }
        None => {}
    }
    if p.remeasured {
        line += &format!(" [near a bound: {} runs]", p.runs.len());
    }
    line
}

/// The console table of a series.
fn table(doc: &SeriesDoc, dim: &Dimension) -> String {
    let slo = !doc.slo.is_empty();
    let mut rows = vec![{
        let mut h = vec![
            format!("{} ({})", dim.name, dim.unit),
            "req/s".into(),
            "tok/s".into(),
        ];
        if slo {
            h.push("goodput".into());
        }
        h.extend([
            "e2e p50 ms".into(),
            "e2e p99 ms".into(),
            "ttft p99 ms".into(),
        ]);
        h.extend(["tpot p99 ms".into(), "failed".into()]);
        if slo {
            h.push("SLO".into());
        }
        h
    }];
    for p in &doc.points {
        let mut r = vec![
            dim.arg(p.value),
            show(Some(&p.requests_per_second), ""),
            show(Some(&p.completion_tokens_per_second), ""),
        ];
        if slo {
            r.push(show(p.goodput.as_ref(), ""));
        }
        r.extend([
            show(p.e2e_p50_ms.as_ref(), ""),
            show(p.e2e_p99_ms.as_ref(), ""),
            show(p.ttft_p99_ms.as_ref(), ""),
            show(p.tpot_p99_ms.as_ref(), ""),
            p.failed_requests.to_string(),
        ]);
        if slo {
            let mut v = match p.passed {
                Some(true) => "met".to_owned(),
                _ if p.undecided => "undecided".to_owned(),
                _ => "missed".to_owned(),
            };
            if p.capacity {
                v += " <- capacity";
            }
            if p.saturated {
                v += " (saturated)";
            }
            r.push(v);
        } else if p.saturated {
            r.push("saturated".into());
        }
        rows.push(r);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:>w$}", w = widths[i]))
            .collect();
        out += "  ";
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

/// Saturation: the throughput rose by less than a quarter of the load's rise
/// while the median latency rose by more than 10%.
pub fn saturated(prev: &Point, cur: &Point) -> bool {
    let load_gain = cur.value / prev.value - 1.0;
    let before = prev.requests_per_second.mean;
    if load_gain <= 0.0 || before <= 0.0 {
        return false;
    }
    let gain = cur.requests_per_second.mean / before - 1.0;
    let rise = match (&prev.e2e_p50_ms, &cur.e2e_p50_ms) {
        (Some(a), Some(b)) if a.mean > 0.0 => b.mean / a.mean - 1.0,
        // No latency at all: nothing succeeded.
        (Some(_), None) => f64::INFINITY,
        _ => 0.0,
    };
    gain < 0.25 * load_gain && rise > 0.10
}

/// A series checked and ready: nothing created, nothing sent.
pub struct Plan<'a> {
    front: &'a Front,
    kind: Kind,
    dim: Dimension,
    argv: Vec<OsString>,
    series: SeriesArgs,
    sweep: Option<SweepArgs>,
    cap: Option<CapacityArgs>,
    values: Vec<f64>,
    base: RunSpec,
    dir: PathBuf,
    api_key: Option<String>,
}

impl std::fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("kind", &self.kind)
            .field("dimension", &self.dim.name)
            .field("values", &self.values)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Checks a series command line (`args` after the subcommand's name) as
/// [`main`] would before anything is sent: the flags, every point's run, the
/// results directory.
pub fn check<'a>(front: &'a Front, kind: Kind, args: &[OsString]) -> Result<Plan<'a>, Failure> {
    let mut full: Vec<OsString> = vec![kind.name().into()];
    full.extend(args.iter().cloned());
    let m = command(front, kind)
        .try_get_matches_from(&full)
        .map_err(|e| Failure::bad_args(&e))?;
    plan(front, kind, &m, args)
}

fn run(
    front: &Front,
    kind: Kind,
    matches: &clap::ArgMatches,
    args: &[OsString],
    cancel: Option<CancellationToken>,
) -> Result<i32, Failure> {
    let p = plan(front, kind, matches, args)?;
    run_plan(p, cancel)
}

fn plan<'a>(
    front: &'a Front,
    kind: Kind,
    matches: &clap::ArgMatches,
    args: &[OsString],
) -> Result<Plan<'a>, Failure> {
    let (series, sweep, cap) = match kind {
        Kind::Sweep => {
            let s = SweepArgs::from_arg_matches(matches).map_err(|e| Failure::bad_args(&e))?;
            (s.series.clone(), Some(s), None)
        }
        Kind::Capacity => {
            let c = CapacityArgs::from_arg_matches(matches).map_err(|e| Failure::bad_args(&e))?;
            (c.series.clone(), None, Some(c))
        }
    };
    let dim = *front
        .dimensions
        .iter()
        .find(|d| d.name == series.over)
        .ok_or_else(|| {
            let names: Vec<&str> = front.dimensions.iter().map(|d| d.name).collect();
            Failure::bad(format!(
                "--over {}: not a load dimension of {}; one of {}",
                series.over,
                front.program,
                names.join(", ")
            ))
        })?;
    let given = flags::Given::new(matches.clone(), false);
    if given.explicit(&dim.id()) {
        return Err(Failure::bad(format!(
            "{} is what the {} varies (--over {}): drop it",
            dim.flag(),
            kind.name(),
            dim.name
        )));
    }
    for (id, flag) in [("dry_run", "--dry-run"), ("print_config", "--print-config")] {
        if given.explicit(id) {
            return Err(Failure::bad(format!(
                "{flag}: a {} runs its points; use it on one point's command line",
                kind.name()
            )));
        }
    }
    if given.explicit("requests_jsonl") {
        return Err(Failure::bad(format!(
            "--requests-jsonl: a {} writes each run's requests into its results directory (--output-dir)",
            kind.name()
        )));
    }
    let mut argv: Vec<OsString> = vec![front.program.into()];
    argv.extend(run_args(kind, args));

    // The first point's spec stands for them all: bad flags fail here, before
    // anything is sent.
    let (first, values) = match (&sweep, &cap) {
        (Some(s), _) => {
            let v = sweep_values(s, &dim)?;
            (v[0], v)
        }
        (_, Some(c)) => {
            if c.tolerance >= 1.0 {
                return Err(Failure::bad(format!(
                    "--tolerance {}: a share below 1 (0.05: 5%)",
                    c.tolerance
                )));
            }
            if !(0.0..1.0).contains(&c.near) {
                return Err(Failure::bad(format!(
                    "--near {}: a share from 0 to below 1 (0.05: 5%)",
                    c.near
                )));
            }
            let start = c.start.unwrap_or(1.0);
            if dim.whole && start.fract() != 0.0 {
                return Err(Failure::bad(format!(
                    "--start {start}: {} takes whole numbers",
                    dim.name
                )));
            }
            if dim.whole && c.max_load.is_some_and(|m| m.fract() != 0.0) {
                return Err(Failure::bad(format!(
                    "--max-load: {} takes whole numbers",
                    dim.name
                )));
            }
            if c.max_load.is_some_and(|m| m < start) {
                return Err(Failure::bad("--max-load is below --start"));
            }
            (start, vec![start])
        }
        _ => unreachable!("a series is a sweep or a capacity search"),
    };
    let probe = Series {
        front,
        dim,
        argv: argv.clone(),
        user_csv: None,
        user_summary: None,
        events: false,
        seed: 0,
        trials: series.trials,
        dir: PathBuf::new(),
        cancel: CancellationToken::new(),
        api_key: None,
        doc: SeriesDoc::default(),
        runs: 0,
        decide: (series.min_requests.is_some() || series.point_max_secs.is_some())
            .then_some((series.min_requests, series.point_max_secs)),
    };
    let base = probe.spec(first)?;
    for v in &values[1..] {
        probe.spec(*v)?;
    }
    if let Some(shard) = base.shard {
        return Err(Failure::bad(format!(
            "--shard {shard}: {} runs many runs and a shard is a part of one; shard a single run (and merge its shards) instead",
            kind.name()
        )));
    }
    if kind == Kind::Capacity && base.slo.is_empty() {
        return Err(Failure::bad(
            "capacity needs --slo: the bounds a load must meet (for example --slo 'ttft_p99<=500ms,e2e_p99<=20s')",
        ));
    }
    // --output-dir, a run's flag, names the series' directory; each run gets
    // a results directory inside it.
    let dir = base
        .output
        .output_dir
        .clone()
        .unwrap_or_else(|| default_dir(kind));
    if dir.is_file() {
        return Err(Failure::bad(format!(
            "--output-dir {}: is a file, not a directory",
            dir.display()
        )));
    }
    if dir.join("index.json").exists() {
        return Err(Failure::bad(format!(
            "--output-dir {}: already holds a series (index.json): choose another directory",
            dir.display()
        )));
    }
    Ok(Plan {
        front,
        kind,
        dim,
        argv,
        series,
        sweep,
        cap,
        values,
        base,
        dir,
        api_key: matches
            .try_get_one::<String>("api_key")
            .ok()
            .flatten()
            .cloned(),
    })
}

fn run_plan(p: Plan<'_>, cancel: Option<CancellationToken>) -> Result<i32, Failure> {
    let Plan {
        front,
        kind,
        dim,
        argv,
        series,
        sweep,
        cap,
        values,
        base,
        dir,
        api_key,
    } = p;
    if cancel.is_none() && api_key.is_some() {
        crate::flags::warn_api_key_flag(front.program, &base.target.api_key_env);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::bad(format!("--output-dir {}: {e}", dir.display())))?;
    let seed = base.seed.unwrap_or_else(assemble::fresh_seed);
    let cancel = cancel.unwrap_or_else(|| {
        // In place before the first point starts.
        exit::ctrl_c_token(Some(
            "\ninterrupted: cancelling the point's in-flight requests (Ctrl+C again to quit now)",
        ))
    });
    let judge = Judge {
        bounds: base.slo.clone(),
        // A point may fail requests only as far as the run itself may.
        max_failure_rate: base.max_failure_rate.unwrap_or(0.0),
        near: cap.as_ref().map_or(0.0, |c| c.near),
    };
    let mut s = Series {
        user_csv: base.output.results_csv.clone(),
        user_summary: base.output.summary_json.clone(),
        events: base.output.agent_events_jsonl.is_some(),
        seed,
        dir: dir.clone(),
        cancel,
        api_key,
        doc: SeriesDoc {
            version: SERIES_VERSION,
            kind: kind.name().into(),
            command: front.program.into(),
            dimension: dim.name.into(),
            unit: dim.unit.into(),
            slo: base.slo.iter().map(ToString::to_string).collect(),
            trials: series.trials,
            spec: Some(RunSpec {
                seed: Some(seed),
                ..base.clone()
            }),
            ..SeriesDoc::default()
        },
        front,
        dim,
        argv,
        trials: series.trials,
        runs: 0,
        decide: (series.min_requests.is_some() || series.point_max_secs.is_some())
            .then_some((series.min_requests, series.point_max_secs)),
    };
    s.write_index()?;
    eprintln!(
        "{} over {} ({}): results in {}",
        kind.name(),
        dim.name,
        dim.unit,
        dir.display()
    );
    match (sweep, cap) {
        (Some(sw), _) => run_sweep(&mut s, &values, &judge, !sw.no_early_stop)?,
        (_, Some(c)) => run_capacity(&mut s, &c, &judge)?,
        _ => {}
    }
    s.write_index()?;
    let heading = match kind {
        Kind::Sweep => format!(
            "sweep over {}: {} of {} points",
            dim.name,
            s.doc.points.len(),
            s.doc.points.len() + s.doc.skipped.len()
        ),
        Kind::Capacity => format!("capacity search over {}", dim.name),
    };
    println!("{heading}");
    print!("{}", table(&s.doc, &dim));
    if let Some(why) = &s.doc.stopped_early {
        println!("stopped early: {why}");
    }
    if let Some(c) = &s.doc.capacity {
        println!("{}", c.message);
    }
    println!("results: {}", dir.display());
    Ok(if s.doc.interrupted {
        exit::EXIT_INTERRUPTED
    } else {
        exit::EXIT_OK
    })
}

fn run_sweep(
    s: &mut Series<'_>,
    values: &[f64],
    judge: &Judge,
    early: bool,
) -> Result<(), Failure> {
    for (i, v) in values.iter().enumerate() {
        let spec = match s.spec(*v) {
            Ok(spec) => spec,
            Err(f) => return Err(s.abort(f)),
        };
        let mut p = match s.measure(*v, &spec, judge, false) {
            Ok(p) => p,
            Err(f) => return Err(s.abort(f)),
        };
        let stop = early && s.doc.points.last().is_some_and(|prev| saturated(prev, &p));
        p.saturated = stop;
        let interrupted = p.interrupted;
        s.record(p, Some(values.len()))?;
        if interrupted {
            s.doc.interrupted = true;
            s.doc.skipped = values[i + 1..].to_vec();
            break;
        }
        if stop {
            s.doc.skipped = values[i + 1..].to_vec();
            s.doc.stopped_early = Some(format!(
                "saturated at {} {}: throughput rose by less than a quarter of the load's rise while the median latency rose by more than 10% (--no-early-stop runs every point)",
                s.dim.arg(*v),
                s.dim.unit
            ));
            break;
        }
    }
    Ok(())
}

fn run_capacity(s: &mut Series<'_>, c: &CapacityArgs, judge: &Judge) -> Result<(), Failure> {
    let dim = s.dim;
    let snap = |v: f64| {
        if dim.whole {
            v.round().max(1.0)
        } else {
            round_sig(v)
        }
    };
    let start = snap(c.start.unwrap_or(1.0));
    let max = c.max_load.map(snap);
    let lowest = if dim.whole { 1.0 } else { start / 1024.0 };
    let mut lo: Option<f64> = None;
    let mut hi: Option<f64> = None;
    let mut missed: Option<f64> = None;
    let mut undecided: Vec<f64> = Vec::new();
    let mut short_of: Option<(String, u64)> = None;
    let mut verdict = "out_of_points";
    let mut limit: Option<String> = None;
    let mut next = Some(start);
    while let Some(v) = next.take() {
        if s.doc.points.len() as u64 >= c.max_points {
            break;
        }
        // A load the run cannot take (past a documented limit) ends the
        // search where it is, before anything of it is sent.
        let spec = match s.spec(v) {
            Ok(spec) => spec,
            Err(f) => {
                verdict = "at_limit";
                limit = Some(format!("{:#}", f.error));
                break;
            }
        };
        let p = match s.measure(v, &spec, judge, true) {
            Ok(p) => p,
            Err(f) => return Err(s.abort(f)),
        };
        let passed = p.passed == Some(true);
        let interrupted = p.interrupted;
        // Undecided for want of requests (not for a percentile near its
        // bound, nor for latencies that move together): a lower load has
        // fewer still, so the search cannot go on.
        let too_short = p
            .bounds
            .iter()
            .zip(&judge.bounds)
            .find(|(b, _)| p.undecided && b.undecided && b.too_few)
            .map(|(b, j)| (b.bound.clone(), min_requests(j.percentile.unwrap_or(50.0))));
        let undecided_point = p.undecided;
        s.record(p, None)?;
        if interrupted {
            s.doc.interrupted = true;
            verdict = "interrupted";
            break;
        }
        if undecided_point {
            undecided.push(v);
        } else if !passed {
            missed = Some(missed.map_or(v, |m: f64| m.min(v)));
        }
        // An undecided point counts as not met: the capacity reported is
        // one the SLO was seen to hold at.
        if passed {
            lo = Some(lo.map_or(v, |l: f64| l.max(v)));
        } else {
            hi = Some(hi.map_or(v, |h: f64| h.min(v)));
        }
        if let Some(short) = too_short {
            short_of = Some(short);
            verdict = "too_short";
            break;
        }
        next = match (lo, hi) {
            // Bracketing upwards, to --max-load at most.
            (Some(l), None) => {
                let up = snap(max.map_or(l * 2.0, |m| (l * 2.0).min(m)));
                if up <= l {
                    verdict = "at_max_load";
                    None
                } else {
                    Some(up)
                }
            }
            // Bracketing downwards.
            (None, Some(h)) => {
                let down = snap((h / 2.0).max(lowest));
                if down >= h {
                    verdict = "below_lowest";
                    None
                } else {
                    Some(down)
                }
            }
            (Some(l), Some(h)) => {
                let done = if dim.whole {
                    h - l <= 1.0
                } else {
                    (h - l) / l <= c.tolerance
                };
                let mid = snap(f64::midpoint(l, h));
                if done || mid <= l || mid >= h {
                    verdict = "found";
                    None
                } else {
                    Some(mid)
                }
            }
            (None, None) => None,
        };
    }
    let unit = dim.unit;
    let arg = |v: f64| dim.arg(v);
    let mut message = match (verdict, lo, hi) {
        ("interrupted", _, _) => "capacity: interrupted, so none is reported".to_owned(),
        ("too_short", l, h) => format!(
            "capacity: undecided: the point at {} {unit} had too few requests for any interval of {} (it needs {} at least), so whether it meets the SLO is unknown; give --min-requests with --point-max-secs, or a longer --duration-secs{}",
            h.map_or_else(|| "?".to_owned(), arg),
            short_of.as_ref().map_or("its percentile", |s| s.0.as_str()),
            short_of.as_ref().map_or(0, |s| s.1),
            l.map_or_else(String::new, |l| format!(
                "; at least {} {unit} met the SLO",
                arg(l)
            ))
        ),
        ("found", Some(l), Some(h)) => format!(
            "capacity: {} {unit} meets the SLO; {} {unit} does not (the capacity lies within {:.1}% above)",
            arg(l),
            arg(h),
            100.0 * (h - l) / l
        ),
        ("at_max_load", Some(l), _) => format!(
            "capacity: at least {} {unit}: --max-load met the SLO",
            arg(l)
        ),
        ("below_lowest", None, Some(h)) => format!(
            "capacity: none: even {} {unit}, the lowest load tried, misses the SLO",
            arg(h)
        ),
        ("at_limit", l, h) => format!(
            "capacity: the search stopped at a load the run cannot take ({}); {}",
            limit.as_deref().unwrap_or("?"),
            bracket(l, h, &arg, unit)
        ),
        (_, l, h) => format!(
            "capacity: the search ran out of points (--max-points {}); {}",
            c.max_points,
            bracket(l, h, &arg, unit)
        ),
    };
    if undecided.is_empty() && verdict == "found" {
        message +=
            ": every point was decided at the 95% level, so this is also the statistical bracket";
    }
    // The statistical bracket, where undecided points widen it (a search
    // that stopped on a point too short to decide has said so already).
    if !undecided.is_empty() && !matches!(verdict, "interrupted" | "too_short") {
        let list = undecided
            .iter()
            .map(|v| arg(*v))
            .collect::<Vec<_>>()
            .join(", ");
        message += &match (lo, missed) {
            (Some(l), Some(m)) => format!(
                ". Statistically the capacity lies between {} and {} {unit}: the SLO stayed undecided at {list} {unit}",
                arg(l),
                arg(m)
            ),
            (Some(l), None) => format!(
                ". Statistically the capacity is at least {} {unit}, and no load was seen to miss the SLO for sure: it stayed undecided at {list} {unit}",
                arg(l)
            ),
            (None, Some(m)) => format!(
                ". Statistically the capacity lies under {} {unit}: the SLO stayed undecided at {list} {unit}",
                arg(m)
            ),
            (None, None) => format!(". The SLO stayed undecided at {list} {unit}"),
        };
    }
    // The answer's point: the highest load that met the SLO, unless the
    // search was interrupted (then nothing is claimed).
    if verdict != "interrupted"
        && let Some(l) = lo
        && let Some(p) = s
            .doc
            .points
            .iter_mut()
            .find(|p| p.value == l && p.passed == Some(true))
    {
        p.capacity = true;
    }
    s.doc.capacity = Some(Capacity {
        load: lo.filter(|_| verdict != "interrupted"),
        unit: unit.into(),
        dimension: dim.name.into(),
        lowest_failing: hi,
        lowest_missed: missed,
        undecided,
        relative_width: lo.zip(hi).map(|(l, h)| (h - l) / l),
        tolerance: c.tolerance,
        verdict: verdict.into(),
        message,
    });
    Ok(())
}

/// The fewest independent samples with an interval of the `percentile`
/// (0 to 100) on both sides: 368 for a p99, 36 for a p90 (where the more
/// likely side's chance of holding every sample drops under 2.5%, as
/// [`quantile_ranks`](batchbench_engine::interval::quantile_ranks) asks).
fn min_requests(percentile: f64) -> u64 {
    let q = (percentile / 100.0).clamp(1e-9, 1.0 - 1e-9);
    let n = (0.025_f64.ln() / q.max(1.0 - q).ln()).floor() + 1.0;
    debug_assert!(batchbench_engine::interval::quantile_ranks(n as u64, q).is_some());
    n as u64
}

/// What a search that stopped short knows.
fn bracket(lo: Option<f64>, hi: Option<f64>, arg: &dyn Fn(f64) -> String, unit: &str) -> String {
    match (lo, hi) {
        (Some(l), Some(h)) => format!("{} {unit} met the SLO, {} {unit} did not", arg(l), arg(h)),
        (Some(l), None) => format!("at least {} {unit} met the SLO", arg(l)),
        (None, Some(h)) => format!("no load met it, down to {} {unit}", arg(h)),
        (None, None) => "nothing was measured".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Dimension = Dimension {
        name: "request-rate",
        unit: "req/s",
        whole: false,
    };
    const USERS: Dimension = Dimension {
        name: "users",
        unit: "users",
        whole: true,
    };

    fn values(v: &str, points: Option<u64>, dim: &Dimension) -> Result<Vec<f64>, String> {
        let s = SweepArgs {
            series: SeriesArgs {
                over: dim.name.into(),
                trials: 1,
                min_requests: None,
                point_max_secs: None,
            },
            values: v.into(),
            points,
            no_early_stop: false,
        };
        sweep_values(&s, dim).map_err(|f| f.error.to_string())
    }

    #[test]
    fn values_are_a_rising_list_or_a_geometric_range() {
        assert_eq!(values("1,2,4", None, &RATE), Ok(vec![1.0, 2.0, 4.0]));
        assert_eq!(
            values("1..20", None, &USERS),
            Ok(vec![1.0, 2.0, 4.0, 8.0, 16.0, 20.0])
        );
        assert_eq!(values("1..16", Some(3), &RATE), Ok(vec![1.0, 4.0, 16.0]));
        assert_eq!(values("1..3", Some(5), &USERS), Ok(vec![1.0, 2.0, 3.0]));
        for (v, points, needle) in [
            ("", None, "no values"),
            ("4,2", None, "must rise"),
            ("1,x", None, "'x' is not a number"),
            ("0,1", None, "not a positive load"),
            ("8..2", None, "must rise"),
            ("1..8", Some(1), "at least 2"),
            ("1.5,2", None, "whole numbers"),
        ] {
            let dim = if needle == "whole numbers" {
                &USERS
            } else {
                &RATE
            };
            let e = values(v, points, dim).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
        assert!(
            values("1,2", Some(3), &RATE)
                .unwrap_err()
                .contains("--points")
        );
    }

    #[test]
    fn the_series_flags_are_taken_out_of_the_run_arguments() {
        let args: Vec<OsString> = [
            "--host",
            "sim://",
            "--over",
            "users",
            "--values=1,2",
            "--no-early-stop",
            "--users-x",
            "--trials",
            "2",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let rest: Vec<String> = run_args(Kind::Sweep, &args)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(rest, ["--host", "sim://", "--users-x"]);
    }

    #[test]
    fn the_recorded_command_line_never_holds_the_api_key() {
        let argv: Vec<OsString> = [
            "batchbench",
            "--api-key",
            "sk-1",
            "--api-key=sk-2",
            "--users",
            "2",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            redacted(&argv),
            [
                "batchbench",
                "--api-key",
                "<redacted>",
                "--api-key=<redacted>",
                "--users",
                "2"
            ]
        );
    }

    #[test]
    fn an_interval_needs_two_runs_and_widens_with_spread() {
        let one = Estimate::of(vec![5.0]);
        assert_eq!((one.mean, one.ci95), (5.0, None));
        let e = Estimate::of(vec![9.0, 10.0, 11.0]);
        assert!((e.mean - 10.0).abs() < 1e-12);
        // s = 1, n = 3: 4.303 / sqrt(3).
        assert!(
            (e.ci95.unwrap_or(0.0) - 4.303 / 3f64.sqrt()).abs() < 1e-9,
            "{e:?}"
        );
        assert_eq!(Estimate::of_some([Some(1.0), None]), None);
    }

    fn point(value: f64, rps: f64, p50: f64) -> Point {
        Point {
            value,
            requests_per_second: Estimate::of(vec![rps]),
            e2e_p50_ms: Some(Estimate::of(vec![p50])),
            ..Point::default()
        }
    }

    #[test]
    fn the_fewest_requests_of_a_percentile_are_where_its_interval_starts() {
        for (p, n) in [(99.0, 368), (90.0, 36), (50.0, 6), (99.9, 3688)] {
            assert_eq!(min_requests(p), n, "p{p}");
            let q = p / 100.0;
            assert!(
                batchbench_engine::interval::quantile_ranks(n - 1, q).is_none(),
                "p{p}"
            );
            assert!(
                batchbench_engine::interval::quantile_ranks(n, q).is_some(),
                "p{p}"
            );
        }
    }

    #[test]
    fn a_bound_is_decided_by_its_run_or_by_the_runs_that_each_had_an_interval() {
        const BOUND: f64 = 100.0;
        let run = |observed: f64, interval: Option<[f64; 2]>, undecided: bool| {
            vec![SloResult {
                observed_ms: Some(observed),
                met: observed <= BOUND,
                interval_ms: interval,
                undecided,
                ..SloResult::default()
            }]
        };
        let est = |v: &[f64]| Some(Estimate::of(v.to_vec()));
        // One run: its own verdict.
        let one = [run(90.0, Some([80.0, 99.0]), false)];
        assert_eq!(
            decided_by(&est(&[90.0]), &one, 0, BOUND),
            (Some([80.0, 99.0]), true)
        );
        let one = [run(90.0, None, true)];
        assert_eq!(decided_by(&est(&[90.0]), &one, 0, BOUND), (None, false));
        // Several that each decided, alike: decided, though the t interval
        // over two runs (91 ± 12.7) reaches across the bound.
        let two = [
            run(90.0, Some([85.0, 95.0]), false),
            run(92.0, Some([87.0, 97.0]), false),
        ];
        let (ci, decided) = decided_by(&est(&[90.0, 92.0]), &two, 0, BOUND);
        assert!(
            decided && ci.is_some_and(|[lo, hi]| lo < 79.0 && hi > 103.0),
            "{ci:?}"
        );
        // Not alike (one undecided): the t interval, one side or not.
        let split = [
            run(90.0, Some([85.0, 95.0]), false),
            run(98.0, Some([93.0, 103.0]), true),
        ];
        assert!(!decided_by(&est(&[90.0, 98.0]), &split, 0, BOUND).1);
        let apart = [
            run(40.0, Some([35.0, 45.0]), false),
            run(41.0, Some([36.0, 46.0]), true),
        ];
        assert!(decided_by(&est(&[40.0, 41.0]), &apart, 0, BOUND).1);
        // Undecided, and one too short for an interval of its own: nothing.
        let short = [run(90.0, Some([85.0, 95.0]), true), run(91.0, None, true)];
        assert_eq!(
            decided_by(&est(&[90.0, 91.0]), &short, 0, BOUND),
            (None, false)
        );
    }

    #[test]
    fn saturation_is_throughput_that_stopped_rising_while_latency_rose() {
        // Below the knee: the load doubles and so, nearly, does throughput.
        assert!(!saturated(
            &point(2.0, 10.0, 100.0),
            &point(4.0, 18.0, 115.0)
        ));
        // At the knee: throughput flat, latency doubled.
        assert!(saturated(
            &point(4.0, 18.0, 115.0),
            &point(8.0, 19.0, 230.0)
        ));
        // Flat throughput but flat latency too: noise, not saturation.
        assert!(!saturated(
            &point(4.0, 18.0, 115.0),
            &point(8.0, 19.0, 118.0)
        ));
        // Nothing succeeded at the higher load.
        let mut dead = point(8.0, 0.0, 0.0);
        dead.e2e_p50_ms = None;
        assert!(saturated(&point(4.0, 18.0, 115.0), &dead));
    }

    #[test]
    fn values_print_as_their_flags_take_them() {
        assert_eq!(USERS.arg(3.0), "3");
        assert_eq!(RATE.arg(40.0), "40");
        assert_eq!(RATE.arg(41.253_333_333), "41.2533");
        assert_eq!(RATE.arg(0.001_234_567), "0.00123457");
    }
}
