//! The flags both commands share, and how they resolve into a [`RunSpec`].
//!
//! Resolution runs once, before anything else sees the flags: a command starts
//! from its default spec (or the `--config` file's), and every flag the user gave
//! overrides the spec field it names. Without a file, every flag applies, its
//! default included; the defaults are the spec's own
//! ([`defaults`](batchbench_contract::spec::defaults)).
//!
//! The flags are grouped as `--help` shows them, a file each: `target`
//! (Target), `load` (Load), `output` (Output, Server metrics), `plugins`
//! (Plugins), `shard` (Distributed) and `lognormal` (the log-normal lengths).
//! Here: the value parsers they share, `--config`, and the run flags both
//! commands take ([`CommonArgs`]).

mod audio;
mod load;
mod lognormal;
mod output;
mod plugins;
mod shard;
mod target;

pub use audio::AudioArgs;
pub use load::{LoadArgs, SloBounds, Stages, load_flag_names, stages};
pub use lognormal::{InputLogNormal, OutputLogNormal, first_lognorm};
pub use output::OutputArgs;
pub use plugins::{PluginArgs, PluginsView, chat_options, set_codec_option};
pub use shard::{JOB_INDEX_ENV, ShardArgs};
pub use target::TargetArgs;

use crate::exit::Failure;
use batchbench_contract::dist::{LengthDist, LogNormalFlags, lognormal_from_flags};
use batchbench_contract::spec::RunSpec;
use clap::parser::ValueSource;
use std::ffi::OsString;
use std::path::PathBuf;

/// Which flags the user gave: with a `--config` file only those override it;
/// without one, every flag (its default included) sets its field.
#[derive(Debug)]
pub struct Given {
    matches: clap::ArgMatches,
    over_file: bool,
}

impl Given {
    /// The flags of `matches`; `over_file` when a `--config` file is the base.
    pub fn new(matches: clap::ArgMatches, over_file: bool) -> Self {
        Self { matches, over_file }
    }

    /// Whether the flag with this id (the field name) sets its spec field.
    pub fn has(&self, id: &str) -> bool {
        !self.over_file || self.explicit(id)
    }

    /// Whether a `--config` file is the base.
    pub fn over_file(&self) -> bool {
        self.over_file
    }

    /// Whether the user typed the flag with this id.
    pub fn explicit(&self, id: &str) -> bool {
        matches!(
            self.matches
                .try_get_raw(id)
                .map(|_| self.matches.value_source(id)),
            Ok(Some(ValueSource::CommandLine | ValueSource::EnvVariable))
        )
    }
}

/// Every long flag of a clap command, aliases included (`--endpoints` is
/// `analyze --ranks`), and whether it takes a value.
pub fn command_flags(cmd: &clap::Command) -> Vec<(String, bool)> {
    cmd.get_arguments()
        .flat_map(|a| {
            let takes = a.get_action().takes_values();
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().unwrap_or_default())
                .map(move |l| (l.to_owned(), takes))
        })
        .collect()
}

/// Parses a count that must be >= 0, with a message naming the value.
pub fn non_negative(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v as u64),
        Ok(v) => Err(format!("must be >= 0, got {v}")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// Parses a count that must be >= 1.
pub fn positive(s: &str) -> Result<u64, String> {
    match non_negative(s)? {
        0 => Err("must be at least 1".into()),
        v => Ok(v),
    }
}

/// `args` without the flags of `own` (long name, whether it takes a value)
/// and their values: the arguments a subcommand passes on to a run.
pub fn without(own: &[(String, bool)], args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        let name = text
            .strip_prefix("--")
            .map(|r| r.split_once('=').map_or(r, |(n, _)| n));
        match name.and_then(|n| own.iter().find(|(l, _)| l == n)) {
            Some((_, takes)) => {
                if *takes && !text.contains('=') {
                    it.next();
                }
            }
            None => out.push(a.clone()),
        }
    }
    out
}

/// Parses a finite float.
pub fn finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a finite number")),
    }
}

/// Parses a finite number that must be >= 0 (a number of seconds).
pub fn non_negative_number(s: &str) -> Result<f64, String> {
    match finite(s)? {
        v if v >= 0.0 => Ok(v),
        v => Err(format!("must be 0 or more, got {v}")),
    }
}

fn retries(s: &str) -> Result<u32, String> {
    let v = non_negative(s)?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= 100)
        .ok_or_else(|| format!("at most 100, got {v}"))
}

/// A length from a fixed flag (with variation) or a log-normal family; the two are
/// mutually exclusive. `family` is the flag stem (`input`, `output`, ...).
pub fn length(
    family: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: LogNormalFlags,
) -> Result<Option<LengthDist>, Failure> {
    let d = length_with(family, "-tokens", "median", "max", fixed, vary, flags)?;
    let (what, max) = match d {
        Some(LengthDist::Fixed { .. }) => (format!("--{family}-tokens"), String::new()),
        _ => (
            format!("--{family}-lognorm-*"),
            format!("--{family}-lognorm-max"),
        ),
    };
    match d.and_then(|d| d.beyond(batchbench_contract::dist::MAX_TOKENS, &what, &max)) {
        Some(m) => Err(Failure::bad(m)),
        None => Ok(d),
    }
}

/// [`length`] with the family's own flag suffixes (`-ms`, `median-ms`, `max-ms`).
pub fn length_with(
    family: &str,
    fixed_suffix: &str,
    median: &str,
    max: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: LogNormalFlags,
) -> Result<Option<LengthDist>, Failure> {
    let ln = lognormal_from_flags(&format!("--{family}-lognorm"), median, max, flags)
        .map_err(Failure::bad)?;
    match (fixed, ln) {
        (Some(_), Some(_)) => Err(Failure::bad(format!(
            "--{family}{fixed_suffix} and the --{family}-lognorm-* family are mutually exclusive"
        ))),
        (Some(v), None) => Ok(Some(LengthDist::Fixed { value: v, vary })),
        (None, ln) => {
            if vary > 0 {
                return Err(Failure::bad(format!(
                    "--{family}-vary needs --{family}{fixed_suffix}"
                )));
            }
            Ok(ln)
        }
    }
}

/// Parses a `--*-config` flag: a JSON object (absent: `{}`).
pub fn json_config(flag: &str, text: Option<&str>) -> Result<serde_json::Value, Failure> {
    let v: serde_json::Value = serde_json::from_str(text.unwrap_or("{}"))
        .map_err(|e| Failure::bad(format!("{flag} is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Failure::bad(format!(
            "{flag} must be a JSON object, got {v}"
        )));
    }
    Ok(v)
}

/// Parses a positive finite number.
pub fn positive_number(s: &str) -> Result<f64, String> {
    match finite(s)? {
        v if v > 0.0 => Ok(v),
        v => Err(format!("must be a positive number, got {v}")),
    }
}

/// Parses a duration: seconds, or a number with `ms`, `s`, `m` or `h`.
fn secs(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (ms, s, m or h)")),
    };
    positive_number(num)
        .map(|v| v * scale)
        .map_err(|e| format!("'{s}': {e}"))
}

/// `--config` and `--print-config`, on both commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Start from this run spec (TOML, or the JSON a run records as
    /// `run.spec`); the flags given override it.
    #[arg(long, value_name = "FILE", help_heading = "Config")]
    pub config: Option<PathBuf>,
    /// Print the effective run spec as TOML and exit (nothing is sent).
    #[arg(long, help_heading = "Config")]
    pub print_config: bool,
}

/// One line on stderr when the API key came on the command line, where other
/// users of the machine can read it (the process list, shell history). Hosts
/// that run the command in process (the Python package) pass no command line
/// to anyone and get no warning.
pub fn warn_api_key_flag(program: &str, env: &str) {
    eprintln!(
        "{program}: warning: --api-key on the command line can be read by other users of this machine (process list, shell history); set {env} instead (--api-key-env names another variable)"
    );
}

/// The run flags both commands take beside the target's and their own.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Seed for reproducible workloads, text and user tags (random when absent; reported).
    #[arg(long, help_heading = "Workload")]
    pub seed: Option<u64>,
    /// Arrival process, concurrency cap, warmup and duration.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Shards and a coordinated start.
    #[command(flatten)]
    pub shard: ShardArgs,
    /// External plugins.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// `--config` and `--print-config`.
    #[command(flatten)]
    pub config: ConfigArgs,
}

impl CommonArgs {
    /// The spec a command's own flags start from: the `--config` file's (else
    /// `default`), with the target, output, seed and shard flags applied.
    pub fn base(
        &self,
        target: &TargetArgs,
        default: impl FnOnce() -> Result<RunSpec, Failure>,
        g: &Given,
    ) -> Result<RunSpec, Failure> {
        let mut spec = match &self.config.config {
            Some(path) => crate::config::load(path)?,
            None => default()?,
        };
        target.apply(&mut spec, g)?;
        self.output.apply(&mut spec);
        if let Some(seed) = self.seed {
            spec.seed = Some(seed);
        }
        self.shard.apply(&mut spec)?;
        Ok(spec)
    }
}
