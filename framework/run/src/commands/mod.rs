//! The two commands, as libraries: their flags, how the flags resolve into a
//! run spec, and what their reports promise (CSV columns, the flat
//! configuration view). The binaries under `bins/` and the Python package call
//! [`batchbench::run`] and [`agent::run`].
//!
//! What the commands share once their flags are parsed (resolve into a spec,
//! `--print-config`, hand the spec to [`assemble::execute`]) is written once,
//! here, over the private `Front` trait.

pub mod agent;
pub mod batchbench;

use crate::assemble::{self, Host, Outcome, Profile};
use crate::exit::{self, Failure};
use crate::flags::{ConfigArgs, Given, TargetArgs};
use batchbench_contract::spec::RunSpec;
use clap::FromArgMatches;
use std::ffi::OsString;
use tokio_util::sync::CancellationToken;

/// The parsed flags of a command's benchmark run.
trait Front {
    /// What the command promises about its reports.
    const PROFILE: Profile;
    /// `--config` and `--print-config`.
    fn config(&self) -> &ConfigArgs;
    /// Target flags (the API key travels beside the spec, never in it).
    fn target(&self) -> &TargetArgs;
    /// The run spec these flags describe; `g` says which flags were given.
    fn resolve(&self, g: &Given) -> Result<RunSpec, Failure>;
}

/// Parses a command line (program name first) into `C` and its matches.
fn parse<C, I, T>(args: I) -> Result<(C, clap::ArgMatches), clap::Error>
where
    C: clap::CommandFactory + FromArgMatches,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let m = C::command().try_get_matches_from(args)?;
    C::from_arg_matches(&m).map(|c| (c, m))
}

/// A parse error as bad input: its first line.
fn bad_args(e: &clap::Error) -> Failure {
    Failure::bad(e.to_string().lines().next().unwrap_or("invalid arguments"))
}

/// The run spec of parsed flags.
fn spec_of<F: Front>(f: &F, matches: clap::ArgMatches) -> Result<RunSpec, Failure> {
    f.resolve(&Given::new(matches, f.config().config.is_some()))
}

/// Resolves the flags and prints the spec (`--print-config`) or runs it.
fn launch<F: Front>(
    f: &F,
    matches: clap::ArgMatches,
    cancel: Option<CancellationToken>,
) -> Result<i32, Failure> {
    let spec = spec_of(f, matches)?;
    if f.config().print_config {
        print!("{}", crate::config::to_toml(&spec)?);
        return Ok(exit::EXIT_OK);
    }
    if cancel.is_none() && f.target().api_key.is_some() {
        crate::flags::warn_api_key_flag(F::PROFILE.command, &spec.target.api_key_env);
    }
    let host = Host {
        cancel,
        api_key: f.target().api_key.clone(),
        ..Host::default()
    };
    Ok(match assemble::execute(spec, &F::PROFILE, host)? {
        Outcome::Ran(out) if out.summary.interrupted => exit::EXIT_INTERRUPTED,
        Outcome::Ran(out) if out.summary.run_failed.is_some() => {
            let why = out.summary.run_failed.as_deref().unwrap_or_default();
            eprintln!("{}: the run failed: {why}", F::PROFILE.command);
            exit::EXIT_FAILED
        }
        Outcome::Ran(_) | Outcome::DryRun { .. } => exit::EXIT_OK,
    })
}
