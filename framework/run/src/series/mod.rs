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

use crate::assemble::{self, Outcome, Profile, RunHooks};
use crate::exit::{self, Failure};
use crate::flags;
use batchbench_contract::record::Summary;
use batchbench_contract::slo::SloResult;
use batchbench_contract::spec::RunSpec;
use clap::{Args, FromArgMatches};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

mod plan;
mod points;
mod search;
mod tables;
#[cfg(test)]
mod tests;

pub use plan::Plan;
use plan::{plan, run_plan};
pub use search::saturated;

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
