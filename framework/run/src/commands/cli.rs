//! The subcommands both commands take, parsed and dispatched by clap: the
//! series and the analysis over the command's run flags, and the tools that
//! read or write results.

use crate::exit;
use crate::series::{self, Kind};
use batchbench_contract::registry;
use clap::{FromArgMatches, Subcommand};
use std::ffi::OsString;
use tokio_util::sync::CancellationToken;

/// Every subcommand. `sweep`, `analyze` and `capacity` carry their own flags
/// here; their commands also take the run's ([`with_subcommands`]).
#[derive(Debug, Subcommand)]
pub enum Tool {
    /// List every registered plugin (kind, name, description, example config).
    Plugins {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Load an external plugin first (.wasm or a native library), to list it
        /// beside the built-ins. Repeatable.
        #[arg(long = "plugin", value_name = "PATH")]
        plugins: Vec<std::path::PathBuf>,
    },
    /// Run the benchmark once per load value of one dimension.
    Sweep(series::SweepArgs),
    /// Describe a workload before running it; nothing is sent.
    Analyze(crate::analyze::AnalyzeArgs),
    /// Find the highest load that meets the SLO.
    Capacity(series::CapacityArgs),
    /// Write one self-contained HTML report of results directories (runs, sweeps)
    ///
    /// A run's directory (--output-dir), a sweep's or a capacity search's;
    /// several overlay.
    ///
    /// Latency CDFs, time series, latency against prompt length, cached tokens
    /// per turn, a series' throughput, goodput and latency against load with
    /// its SLO, and each run's summary and spec. Nothing is re-run. Exit codes:
    /// 0 written, 1 it could not be written, 2 a directory is missing, from a
    /// newer format, incomplete or malformed (the message names the file).
    Report(crate::report::ReportArgs),
    /// Write one run's results directory as the llm-d Benchmark Report (v0.2.1, YAML)
    ///
    /// Exit codes: 0 written, 1 it could not be written, 2 the directory cannot
    /// be read (the message names the file).
    Export(crate::report::ExportArgs),
    /// Join the results directories of a run's shards (--shard I/N) into the
    /// one run's, exactly
    #[command(long_about = crate::merge::LONG_ABOUT)]
    Merge(crate::merge::MergeArgs),
    /// Compare two runs' results directories; with --fail-if, a gate for CI
    ///
    /// Every figure's change, a significance test on the per-request latencies,
    /// and --fail-if thresholds. Exit codes: 0 no threshold breached, 1 one
    /// was, 2 bad input (a directory or a threshold; the message names it).
    Compare(crate::report::CompareArgs),
    /// Turn a window of ClickHouse prompt-chain records into a version-2 replay
    /// manifest (CLICKHOUSE_URL, or --rows-jsonl to re-export offline).
    ///
    /// Sessions are reconstructed from the chains: within a principal a request
    /// continues the latest earlier request (within --link-window-hours) whose chain
    /// is a strict prefix of its own. The manifest is written only once it validates
    /// as a replay manifest. Exit codes: 0 written, 1 export failed (no file), 2 bad
    /// flags.
    ExportPlans(Box<batchbench_clickhouse::ExportArgs>),
}

/// `cmd` with every subcommand; the series' and the analysis' commands are
/// [`series::command`] and [`crate::analyze::command`], which add the run's
/// flags of `front` to their own.
pub fn with_subcommands(cmd: clap::Command, front: &series::Front) -> clap::Command {
    let keep = |new: clap::Command, old: clap::Command| new.display_order(old.get_display_order());
    Tool::augment_subcommands(cmd)
        .mut_subcommand("sweep", |old| {
            keep(series::command(front, Kind::Sweep), old)
        })
        .mut_subcommand("capacity", |old| {
            keep(series::command(front, Kind::Capacity), old)
        })
        .mut_subcommand("analyze", |old| keep(crate::analyze::command(front), old))
}

/// The name messages start with: the program, and the subcommand when the
/// command line names one of `cmd`'s.
pub fn prog(cmd: &clap::Command, args: &[OsString]) -> String {
    let program = cmd.get_name();
    let sub = args
        .get(1)
        .and_then(|a| a.to_str())
        .and_then(|a| cmd.find_subcommand(a));
    match sub {
        Some(s) => format!("{program} {}", s.get_name()),
        None => program.to_owned(),
    }
}

/// Runs the subcommand of `m` (the matches of `args`, program name first).
pub fn dispatch(
    front: &series::Front,
    m: &clap::ArgMatches,
    args: &[OsString],
    cancel: Option<CancellationToken>,
) -> i32 {
    let Some((name, sm)) = m.subcommand() else {
        return exit::EXIT_BAD_INPUT;
    };
    let prog = format!("{} {name}", front.program);
    let tool = match Tool::from_arg_matches(m) {
        Ok(t) => t,
        Err(e) => return exit::clap_exit(&prog, &e),
    };
    // A subcommand comes first, before any run flag: its arguments are the rest.
    let rest = args.get(2..).unwrap_or_default();
    match tool {
        Tool::Sweep(_) => series::main(front, Kind::Sweep, sm, rest, cancel),
        Tool::Capacity(_) => series::main(front, Kind::Capacity, sm, rest, cancel),
        Tool::Analyze(_) => crate::analyze::main(front, sm, rest),
        Tool::Plugins { json, plugins: p } => match crate::plugins::load_plugins(&p) {
            Ok(()) => plugins(json),
            Err(f) => exit::exit_code(&prog, Err(f)),
        },
        Tool::Report(a) => exit::exit_code(&prog, crate::report::main(&a)),
        Tool::Export(a) => exit::exit_code(&prog, crate::report::export(&a)),
        Tool::Merge(a) => crate::merge::main(front.profile, &a),
        Tool::Compare(a) => exit::exit_code(&prog, crate::report::compare(&a)),
        Tool::ExportPlans(a) => export_plans(&prog, &a, cancel),
    }
}

fn export_plans(
    prog: &str,
    a: &batchbench_clickhouse::ExportArgs,
    cancel: Option<CancellationToken>,
) -> i32 {
    use batchbench_clickhouse::ExportError;
    let Some(output) = a.output.as_deref() else {
        eprintln!("{prog}: --output PATH is required");
        return crate::exit::EXIT_BAD_INPUT;
    };
    // Ctrl+C (or the host's cancellation) removes the temporary files and exits
    // 130: an export has no partial result, and nothing may be left half-written.
    // The export starts only once the SIGINT handler is registered, so a
    // Ctrl+C at any moment of it is an interruption, never a kill.
    let cancel = cancel.unwrap_or_else(|| exit::ctrl_c_token(None));
    let done = CancellationToken::new();
    let watcher = {
        let (done, temps) = (done.clone(), batchbench_clickhouse::temp_files(a, output));
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let interrupted = rt.block_on(async {
                tokio::select! {
                    () = cancel.cancelled() => true,
                    () = done.cancelled() => false,
                }
            });
            if interrupted {
                for t in temps {
                    let _ = std::fs::remove_file(t);
                }
                eprintln!("\ninterrupted: the export was stopped; nothing was written");
                std::process::exit(crate::exit::EXIT_INTERRUPTED);
            }
        })
    };
    let result = batchbench_clickhouse::export(a, output);
    done.cancel();
    let _ = watcher.join();
    match result {
        Ok(stats) => {
            eprintln!("{}", stats.report());
            eprintln!(
                "wrote {} trajectories ({} requests) to {}",
                stats.trajectories,
                stats.requests,
                output.display()
            );
            crate::exit::EXIT_OK
        }
        Err(ExportError::BadInput(m)) => {
            eprintln!("{prog}: {m}");
            crate::exit::EXIT_BAD_INPUT
        }
        Err(ExportError::Failed(m)) => {
            eprintln!("{prog}: {m}");
            crate::exit::EXIT_FAILED
        }
    }
}

fn plugins(as_json: bool) -> i32 {
    let list = registry::list();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for p in list {
            println!(
                "{:<9} {:<18} {}\n{:<28} example: {}",
                p.kind, p.name, p.description, "", p.example
            );
            if p.origin != "built-in" {
                println!("{:<28} from: {}", "", p.origin);
            }
        }
    }
    crate::exit::EXIT_OK
}
