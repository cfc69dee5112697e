//! The built-in batchbench plugins. Each registers itself exactly as an external
//! plugin crate would, through the `register_*!` macros of `batchbench-core`.
//!
//! | kind | name | what |
//! |---|---|---|
//! | workload | `finite_batch` | users x requests-per-user independent requests |
//! | codec | `openai_chat` | OpenAI chat completions, JSON and SSE, `--sglang` fields |
//! | reporter | `console_summary` | the human-readable summary on stdout |
//! | reporter | `csv` | one CSV row per run, appended |
//! | reporter | `json_summary` | the whole summary as one JSON document |
//!
//! A binary that uses these must name the crate (`use batchbench_plugins as _;`),
//! or the linker drops the registrations.

pub mod batch;
pub mod csv_report;
pub mod json_summary;
pub mod openai;
pub mod summary;
pub mod timefmt;

/// Names of every built-in plugin, by kind: the contract the registry test checks.
pub const BUILTINS: &[(&str, &str)] = &[
    ("workload", "finite_batch"),
    ("codec", "openai_chat"),
    ("reporter", "console_summary"),
    ("reporter", "csv"),
    ("reporter", "json_summary"),
];
