//! `batchbench`, and the multi-call form of the whole tool: installed (or linked)
//! as `batchbench-agent` or `batchbench-sim`, this one executable runs that
//! command, so one build gives all three.

use std::ffi::OsString;
use std::path::Path;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `batchbench-agent`, `batchbench-agent.exe`, `batchbench-agent-0.8`, ...
    let code = if name.starts_with("batchbench-agent") {
        batchbench_run::commands::agent::run(args)
    } else if name.starts_with("batchbench-sim") {
        batchbench_simulator::cli::run(args)
    } else {
        batchbench_run::commands::batchbench::run(args)
    };
    std::process::exit(code);
}
