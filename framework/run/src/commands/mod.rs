//! The two commands, as libraries: their flags, how the flags resolve into a
//! run spec, and what their reports promise (CSV columns, the flat
//! configuration view). The binaries under `bins/` and the Python package call
//! [`batchbench::run`] and [`agent::run`].
//!
//! A command is a [`Front`]: its own run flags, its report profile, the load
//! dimensions its series vary and how its flags resolve. Everything else is
//! written once, here, over that trait: the command line (clap dispatches
//! every subcommand, [`cli::Tool`]), `--print-config`, the hand-over of the
//! spec to [`assemble::execute`], and the entry points each command module
//! exports (the `front!` macro).

/// Makes the arguments type `$args` of a command module a [`Front`], from the
/// module's `ABOUT`, `LONG_ABOUT`, `PROFILE`, `DIMENSIONS` and `resolve`, and
/// exports the module's entry points: `run`, `run_embedded`, `resolve_args`,
/// `flags`, `series_flags`, `analyze_flags` and `FRONT`.
macro_rules! front {
    ($args:ident) => {
        impl $crate::commands::Front for $args {
            const ABOUT: &'static str = ABOUT;
            const LONG_ABOUT: &'static str = LONG_ABOUT;
            const PROFILE: &'static $crate::assemble::Profile = &PROFILE;
            const DIMENSIONS: &'static [$crate::series::Dimension] = DIMENSIONS;
            fn resolve(
                &self,
                target: &$crate::flags::TargetArgs,
                common: &$crate::flags::CommonArgs,
                g: &$crate::flags::Given,
            ) -> Result<batchbench_contract::spec::RunSpec, $crate::exit::Failure> {
                resolve(self, target, common, g)
            }
        }

        /// Runs the command with these arguments (the first is the program
        /// name) and returns the exit code.
        pub fn run<I, T>(args: I) -> i32
        where
            I: IntoIterator<Item = T>,
            T: Into<std::ffi::OsString> + Clone,
        {
            $crate::commands::run::<$args, _, _>(args, None)
        }

        /// [`run`] for a host that cancels the run through `cancel` (instead
        /// of Ctrl+C, whose handler is then not installed): the Python package.
        pub fn run_embedded<I, T>(args: I, cancel: tokio_util::sync::CancellationToken) -> i32
        where
            I: IntoIterator<Item = T>,
            T: Into<std::ffi::OsString> + Clone,
        {
            $crate::commands::run::<$args, _, _>(args, Some(cancel))
        }

        /// Resolves a command line (program name first) into the run spec it
        /// describes: what `--print-config` prints.
        pub fn resolve_args<I, T>(
            args: I,
        ) -> Result<batchbench_contract::spec::RunSpec, $crate::exit::Failure>
        where
            I: IntoIterator<Item = T>,
            T: Into<std::ffi::OsString> + Clone,
        {
            $crate::commands::resolve_args::<$args, _, _>(args)
        }

        /// Every long flag of a run and whether it takes a value: for hosts
        /// that build argument lists (the Python package checks option names
        /// against it).
        pub fn flags() -> Vec<(String, bool)> {
            $crate::flags::command_flags(&$crate::commands::run_command::<$args>())
        }

        /// Every long flag of the command's `sweep` or `capacity`.
        pub fn series_flags(kind: $crate::series::Kind) -> Vec<(String, bool)> {
            $crate::series::long_flags(&FRONT, kind)
        }

        /// Every long flag of the command's `analyze`.
        pub fn analyze_flags() -> Vec<(String, bool)> {
            $crate::analyze::long_flags(&FRONT)
        }

        /// The command as a series and an analysis see it.
        pub const FRONT: $crate::series::Front = $crate::commands::front::<$args>();
    };
}

pub mod agent;
pub mod batchbench;
pub mod cli;

use crate::assemble::{self, Outcome, Profile, RunHooks};
use crate::exit::{self, Failure};
use crate::flags::{CommonArgs, Given, TargetArgs};
use crate::series;
use batchbench_contract::spec::RunSpec;
use clap::{Args, FromArgMatches};
use std::ffi::OsString;
use tokio_util::sync::CancellationToken;

/// A command: its own run flags (beside the [`TargetArgs`] and [`CommonArgs`]
/// both take), what its runs report, and how its flags resolve.
pub trait Front: Args + FromArgMatches + Clone + std::fmt::Debug + 'static {
    /// The `--help` summary.
    const ABOUT: &'static str;
    /// The `--help` text.
    const LONG_ABOUT: &'static str;
    /// What the command promises about its reports; its `command` is the
    /// program name that messages start with.
    const PROFILE: &'static Profile;
    /// What `sweep` and `capacity` vary, the default first.
    const DIMENSIONS: &'static [series::Dimension];
    /// The run spec of these flags and the shared ones; `g` says which flags
    /// were given.
    fn resolve(
        &self,
        target: &TargetArgs,
        common: &CommonArgs,
        g: &Given,
    ) -> Result<RunSpec, Failure>;
}

/// A benchmark run's parsed flags.
#[derive(Debug, Clone)]
pub struct Run<F> {
    /// Target and protocol.
    pub target: TargetArgs,
    /// The command's own.
    pub own: F,
    /// The ones both commands take.
    pub common: CommonArgs,
}

impl<F: Front> Run<F> {
    fn from_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Self {
            target: TargetArgs::from_arg_matches(m)?,
            own: F::from_arg_matches(m)?,
            common: CommonArgs::from_arg_matches(m)?,
        })
    }

    /// The run spec; `m` are the matches the flags came from.
    fn spec(&self, m: clap::ArgMatches) -> Result<RunSpec, Failure> {
        let g = Given::new(m, self.common.config.config.is_some());
        self.own.resolve(&self.target, &self.common, &g)
    }
}

/// The run flags of a command as a clap command: the target's, the command's
/// own, then the shared ones.
pub fn run_command<F: Front>() -> clap::Command {
    let cmd = clap::Command::new(F::PROFILE.command).allow_negative_numbers(true);
    CommonArgs::augment_args(F::augment_args(TargetArgs::augment_args(cmd)))
}

/// The whole command line of a command: a benchmark run, or a subcommand.
pub fn command<F: Front>() -> clap::Command {
    let cmd = run_command::<F>()
        .version(env!("CARGO_PKG_VERSION"))
        .args_conflicts_with_subcommands(true);
    // After the subcommands, whose derive would set its own.
    cli::with_subcommands(cmd, &front::<F>())
        .about(F::ABOUT)
        .long_about(F::LONG_ABOUT)
}

/// The command as a series and an analysis see it.
pub const fn front<F: Front>() -> series::Front {
    series::Front {
        program: F::PROFILE.command,
        command: run_command::<F>,
        resolve: resolve_args::<F, Vec<OsString>, OsString>,
        profile: F::PROFILE,
        dimensions: F::DIMENSIONS,
    }
}

/// Runs a command line (program name first) and returns the exit code; with
/// `cancel`, a host cancels the run through it instead of Ctrl+C.
pub fn run<F: Front, I, T>(args: I, cancel: Option<CancellationToken>) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let program = F::PROFILE.command;
    let cmd = command::<F>();
    let m = match cmd.clone().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => return exit::clap_exit(&cli::prog(&cmd, &args), &e),
    };
    if m.subcommand().is_some() {
        return cli::dispatch(&front::<F>(), &m, &args, cancel);
    }
    match Run::<F>::from_matches(&m) {
        Ok(run) => exit::exit_code(program, launch(&run, m, cancel)),
        Err(e) => exit::clap_exit(program, &e),
    }
}

/// Resolves a command line (program name first) into the run spec it
/// describes: what `--print-config` prints.
pub fn resolve_args<F: Front, I, T>(args: I) -> Result<RunSpec, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let m = run_command::<F>()
        .try_get_matches_from(args)
        .map_err(|e| Failure::bad_args(&e))?;
    Run::<F>::from_matches(&m)
        .map_err(|e| Failure::bad_args(&e))?
        .spec(m)
}

/// Resolves the flags and prints the spec (`--print-config`) or runs it.
fn launch<F: Front>(
    run: &Run<F>,
    matches: clap::ArgMatches,
    cancel: Option<CancellationToken>,
) -> Result<i32, Failure> {
    let spec = run.spec(matches)?;
    if run.common.config.print_config {
        print!("{}", crate::config::to_toml(&spec)?);
        return Ok(exit::EXIT_OK);
    }
    if cancel.is_none() && run.target.api_key.is_some() {
        crate::flags::warn_api_key_flag(F::PROFILE.command, &spec.target.api_key_env);
    }
    let hooks = RunHooks {
        cancel,
        api_key: run.target.api_key.clone(),
        ..RunHooks::default()
    };
    Ok(match assemble::execute(spec, F::PROFILE, hooks)? {
        Outcome::Ran(out) if out.summary.interrupted => exit::EXIT_INTERRUPTED,
        Outcome::Ran(out) if out.summary.run_failed.is_some() => {
            let why = out.summary.run_failed.as_deref().unwrap_or_default();
            eprintln!("{}: the run failed: {why}", F::PROFILE.command);
            exit::EXIT_FAILED
        }
        Outcome::Ran(_) | Outcome::DryRun { .. } => exit::EXIT_OK,
    })
}
