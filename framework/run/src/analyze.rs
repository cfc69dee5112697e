//! `batchbench analyze` and `batchbench-agent analyze`: a workload described
//! before it is run. The run's own flags select the workload (a manifest given
//! as SOURCE, `--workload`, the synthetic flags, `--config`), its routers and
//! overheads; nothing is sent.

use crate::assemble::{self, AnalyzeSettings};
use crate::exit::{self, Failure};
use crate::flags;
use crate::series::Front;
use batchbench_contract::analysis::{Analysis, CacheFigures, Dist};
use clap::{Args, FromArgMatches};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The flags of `analyze` beside a run's.
#[derive(Debug, Clone, Args)]
pub struct AnalyzeArgs {
    /// A replay manifest (JSONL, schema version 1 or 2) to analyse; without it,
    /// the workload the other flags select.
    #[arg(value_name = "SOURCE")]
    pub source: Option<PathBuf>,
    /// LRU cache capacities per rank, in tokens, comma-separated, with an
    /// optional k, M or G suffix (such as 1M,4M,16M): each row gives the hit
    /// rate of such a cache beside the ideal one.
    #[arg(long, value_name = "TOKENS,...", help_heading = "Analyze")]
    pub cache_tokens: Option<String>,
    /// Data-parallel ranks, or the endpoints of a fleet, each with its own
    /// cache [default: the run's hosts or router's ranks, else 1].
    #[arg(
        long,
        visible_alias = "endpoints",
        value_name = "N",
        help_heading = "Analyze"
    )]
    pub ranks: Option<u64>,
    /// How requests reach ranks: round-robin (each request to the next rank),
    /// affinity (every request of a session to one rank), run (the run's
    /// router or routing policy), or a routing policy by name
    /// (round_robin, random, least_outstanding, session_affinity,
    /// prefix_affinity), placing each request where a run's would [default:
    /// run when the run routes, else affinity].
    #[arg(long, value_name = "HOW", help_heading = "Analyze")]
    pub routing: Option<String>,
    /// The service time assumed per request, in milliseconds, to place
    /// requests in time (with think times and start offsets).
    #[arg(long, value_name = "MS", default_value_t = 1000.0, value_parser = non_negative_ms, help_heading = "Analyze")]
    pub assume_latency_ms: f64,
    /// How many of the longest shared prefixes to list.
    #[arg(long, value_name = "N", default_value_t = 10, help_heading = "Analyze")]
    pub top: usize,
    /// Reasoning tokens each reply is assumed to make before its answer (part
    /// of its output tokens, as on every API): the ideal caches' hit rates
    /// are then given for both choices of --reasoning-history, keep (the
    /// reply goes back whole, as the server cached it) and drop (the answer
    /// alone); the other figures follow the run's choice.
    #[arg(long, value_name = "N", help_heading = "Analyze")]
    pub assume_reasoning_tokens: Option<u32>,
    /// A run of several models (--model-mix): the LoRA adapter loads the run
    /// will cause on servers that hold at most so many adapters at once per
    /// rank (vLLM's --max-loras), comma separated, least recently used
    /// evicted, in the order the layout sends requests.
    #[arg(long, value_name = "N,...", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..), help_heading = "Analyze")]
    pub max_loras: Vec<u32>,
    /// Write the analysis as JSON to FILE (- for stdout, instead of the
    /// tables; with --quiet and a FILE, no tables).
    #[arg(long, value_name = "FILE", help_heading = "Analyze")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML page of the analysis to FILE: its tables, and
    /// charts of arrivals, prefix sharing and hit rates by capacity and rank.
    #[arg(long, value_name = "FILE", help_heading = "Analyze")]
    pub html: Option<PathBuf>,
}

/// The clap command of `analyze` for a front (for `--help` and parsing).
pub fn command(front: &Front) -> clap::Command {
    let base = (front.command)()
        .name("analyze")
        .bin_name(format!("{} analyze", front.program));
    AnalyzeArgs::augment_args(base)
        .about("Describe a workload before running it; nothing is sent")
        .long_about(
            "Read the workload the other flags select (a manifest given as SOURCE, --workload, the \
             synthetic flags, --config) and send nothing. Prints requests, sessions, turns per \
             session, prompt and output tokens, think times, when requests go out, how sessions \
             share prompt prefixes (blocks of --cache-block-tokens), the hit rate of one ideal \
             prefix cache shared by all requests, and per data-parallel rank the hit rates of an \
             ideal cache and of LRU caches of the --cache-tokens capacities.\n\n\
             Requests are placed in time as the run would send them, with --assume-latency-ms per \
             request: an open loop at its start offsets, a closed loop into its slots.\n\n\
             Exit codes: 0 done, 1 the analysis could not be written, 2 bad input (the message \
             names the file, line and field).",
        )
}

/// Every long flag of `analyze` for a front.
pub fn long_flags(front: &Front) -> Vec<(String, bool)> {
    flags::command_flags(&command(front))
}

/// Runs `PROGRAM analyze ARGS...`, parsed into `matches` (of [`command`]):
/// `args` are the arguments after `analyze`.
pub fn main(front: &Front, matches: &clap::ArgMatches, args: &[OsString]) -> i32 {
    let prog = format!("{} analyze", front.program);
    exit::exit_code(&prog, run(front, matches, args).map(|()| exit::EXIT_OK))
}

fn non_negative_ms(s: &str) -> Result<f64, String> {
    match flags::finite(s)? {
        v if v >= 0.0 => Ok(v),
        v => Err(format!("must be zero or more, got {v}")),
    }
}

fn own_flags() -> Vec<(String, bool)> {
    flags::command_flags(&AnalyzeArgs::augment_args(clap::Command::new("analyze")))
}

fn run(front: &Front, m: &clap::ArgMatches, args: &[OsString]) -> Result<(), Failure> {
    let a = AnalyzeArgs::from_arg_matches(m).map_err(|e| Failure::bad(e.to_string()))?;
    // The run's flags: ours out, SOURCE (the first positional) out.
    let mut rest = flags::without(&own_flags(), args);
    if let Some(src) = &a.source {
        let pos = rest.iter().position(|x| x.as_os_str() == src.as_os_str());
        if let Some(i) = pos {
            rest.remove(i);
        }
    }
    if a.source.is_some() {
        let named = rest.iter().find(|x| {
            let t = x.to_string_lossy();
            ["--workload", "--agent-plans-jsonl"]
                .iter()
                .any(|f| t == *f || t.starts_with(&format!("{f}=")))
        });
        if let Some(f) = named {
            return Err(Failure::bad(format!(
                "SOURCE and {} both name the workload: give one",
                f.to_string_lossy().split('=').next().unwrap_or_default()
            )));
        }
    }
    let mut run_args: Vec<OsString> = vec![front.program.into()];
    run_args.extend(rest);
    let mut spec = (front.resolve)(run_args)?;
    if let Some(src) = &a.source {
        spec.workload = replay_workload(&spec, src)?;
    }
    let settings = settings(&a)?;
    for (flag, p) in [("--json", &a.json), ("--html", &a.html)] {
        if let Some(p) = p.as_deref().filter(|p| p.as_os_str() != "-") {
            assemble::check_output(flag, p)?;
        }
    }
    let quiet = spec.output.quiet;
    let title = a
        .source
        .as_ref()
        .map_or_else(|| spec.workload.name.clone(), |p| p.display().to_string());
    let analysis = assemble::analyze(spec, &settings)?;
    if let Some(p) = &a.html {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let html = batchbench_results::analysis::render(
            &analysis,
            &title,
            &batchbench_contract::timefmt::rfc3339(now),
        );
        std::fs::write(p, html)
            .map_err(|e| Failure::failed(anyhow::anyhow!("cannot write {}: {e}", p.display())))?;
    }
    match a.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => {
            println!("{}", to_json(&analysis)?);
        }
        Some(p) => {
            std::fs::write(p, to_json(&analysis)? + "\n").map_err(|e| {
                Failure::failed(anyhow::anyhow!("cannot write {}: {e}", p.display()))
            })?;
            if !quiet {
                print!("{}", render(&analysis));
            }
        }
        None => print!("{}", render(&analysis)),
    }
    Ok(())
}

/// The analysis as pretty JSON.
pub fn to_json(a: &Analysis) -> Result<String, Failure> {
    serde_json::to_string_pretty(a).map_err(Failure::failed)
}

/// The replay workload of a manifest, with the spec's overheads and order.
pub fn replay_workload(
    spec: &batchbench_contract::spec::RunSpec,
    path: &std::path::Path,
) -> Result<batchbench_contract::spec::PluginSpec, Failure> {
    let cfg = batchbench_plugins::workloads::replay_jsonl::ReplayConfig {
        path: path.to_path_buf(),
        order_by_start: spec.admission.mode == batchbench_contract::spec::AdmissionMode::OpenLoop,
        initial_overhead_tokens: spec.template.initial_overhead_tokens,
        turn_overhead_tokens: spec.template.turn_overhead_tokens,
    };
    batchbench_contract::spec::PluginSpec::typed(REPLAY, &cfg).map_err(Failure::failed_msg)
}

/// The built-in replay workload.
const REPLAY: &str = "replay_jsonl";

/// The settings of the analyze flags.
pub fn settings(a: &AnalyzeArgs) -> Result<AnalyzeSettings, Failure> {
    let capacities = match a.cache_tokens.as_deref() {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|t| {
                token_count(t).map_err(|e| Failure::bad(format!("--cache-tokens {list}: {e}")))
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(AnalyzeSettings {
        capacities,
        ranks: a.ranks,
        routing: a.routing.clone(),
        latency_ms: a.assume_latency_ms,
        top: a.top,
        reasoning_tokens: a.assume_reasoning_tokens,
        max_loras: a.max_loras.clone(),
    })
}

/// A token count with an optional k, M or G suffix (powers of 1000 or, with
/// `Ki`, `Mi`, `Gi`, of 1024).
pub fn token_count(t: &str) -> Result<u64, String> {
    let t = t.trim();
    let (num, mult) = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1_000),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ]
    .iter()
    .find_map(|(s, m)| t.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((t, 1));
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{t}' is not a token count"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("'{t}' is not a positive token count"));
    }
    Ok((v * mult as f64).round() as u64)
}

fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn dist_line(o: &mut String, name: &str, d: Option<&Dist>) {
    match d {
        None => {
            let _ = writeln!(o, "  {name:<20} -");
        }
        Some(d) => {
            let _ = writeln!(
                o,
                "  {name:<20} mean {:<10.1} p50 {:<8} p90 {:<8} p99 {:<8} max {:<8} total {}",
                d.mean,
                d.p50,
                d.p90,
                d.p99,
                d.max,
                thousands(d.total)
            );
        }
    }
}

/// What the requests carry besides their text, and the answers they ask for.
fn content_lines(o: &mut String, c: &batchbench_contract::analysis::Content) {
    if c.inputs_per_request.is_some() {
        dist_line(o, "inputs per request", c.inputs_per_request.as_ref());
    }
    if c.images > 0 {
        let _ = writeln!(o, "  {:<20} {}", "images", thousands(c.images));
    }
    if let Some(au) = &c.audio {
        let _ = writeln!(
            o,
            "  {:<20} {} clips on {} requests, {:.1} s in all",
            "audio",
            thousands(au.clips),
            thousands(au.requests),
            au.seconds
        );
        dist_line(o, "audio clip (ms)", Some(&au.clip_ms));
    }
    if !c.response_formats.is_empty() {
        let formats: Vec<String> = c
            .response_formats
            .iter()
            .map(|f| format!("{} {}", f.name, thousands(f.requests)))
            .collect();
        let _ = writeln!(
            o,
            "  {:<20} requests by format: {}",
            "response format",
            formats.join(", ")
        );
    }
}

fn cache_cells(c: &CacheFigures) -> String {
    format!(
        "{:>7.2}%  {:>15}",
        100.0 * c.hit_rate,
        thousands(c.cached_tokens)
    )
}

/// The console tables.
pub fn render(a: &Analysis) -> String {
    let mut o = String::new();
    let w = &a.workload;
    let source = w
        .manifest_path
        .as_deref()
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let _ = writeln!(o, "workload: {}{source}", w.mode);
    let _ = writeln!(
        o,
        "  {:<20} {} in {} sessions",
        "requests",
        thousands(a.requests),
        thousands(a.sessions)
    );
    dist_line(&mut o, "turns per session", a.turns_per_session.as_ref());
    dist_line(&mut o, "prompt tokens", a.prompt_tokens.as_ref());
    dist_line(&mut o, "output tokens", a.output_tokens.as_ref());
    dist_line(&mut o, "think time (ms)", a.think_time_ms.as_ref());
    if let Some(c) = &a.content {
        content_lines(&mut o, c);
    }
    let r = &a.arrivals;
    let _ = writeln!(
        o,
        "\narrivals (assuming {} ms per request): {:.0} s, mean {:.2} req/s, busiest minute {:.2} req/s",
        a.assumed_latency_ms, r.span_secs, r.mean_rate, r.peak_rate
    );
    if r.intervals.len() > 1 {
        let peak = r.intervals.iter().map(|i| i.rate).fold(0.0, f64::max);
        for i in &r.intervals {
            let bar = if peak > 0.0 {
                "#".repeat((40.0 * i.rate / peak).round() as usize)
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "  {:>9.0} s  {:>10.2} req/s  {bar}",
                i.start_secs, i.rate
            );
        }
    }
    let s = &a.sharing;
    let _ = writeln!(
        o,
        "\nprefix sharing (blocks of {} tokens): {} distinct blocks, {} sent",
        a.block_tokens,
        thousands(s.distinct_blocks),
        thousands(s.block_references)
    );
    let _ = writeln!(o, "  {:<12} {:>14} {:>9}", "sessions", "blocks", "share");
    for b in &s.sessions_per_block {
        let _ = writeln!(
            o,
            "  {:<12} {:>14} {:>8.2}%",
            b.sessions,
            thousands(b.blocks),
            100.0 * b.share
        );
    }
    if s.longest_shared_prefixes.is_empty() {
        let _ = writeln!(o, "  no prefix is shared by two sessions");
    } else {
        let _ = writeln!(o, "  longest shared prefixes");
        let _ = writeln!(o, "  {:>12} {:>10}  first sent by", "tokens", "sessions");
        for p in &s.longest_shared_prefixes {
            let _ = writeln!(
                o,
                "  {:>12} {:>10}  {} (session {})",
                thousands(p.tokens),
                thousands(p.sessions),
                p.first_trajectory_id,
                p.first_session
            );
        }
    }
    let _ = writeln!(
        o,
        "\nprefix cache hit rate (cached / {} prompt tokens)",
        thousands(a.global.prompt_tokens)
    );
    let _ = writeln!(
        o,
        "  {:<34} {:>8}  {:>15}",
        "cache", "hit rate", "cached tokens"
    );
    let _ = writeln!(
        o,
        "  {:<34} {}",
        "one ideal cache, all requests",
        cache_cells(&a.global)
    );
    let _ = writeln!(o, "  per rank: {} rank(s), routing {}", a.ranks, a.routing);
    for row in &a.caches {
        let name = match row.capacity_tokens {
            None => "ideal (never evicts)".to_owned(),
            Some(c) => format!("LRU {} tokens", thousands(c)),
        };
        let _ = writeln!(o, "  {name:<34} {}", cache_cells(&row.total));
        for r in &row.ranks {
            let _ = writeln!(
                o,
                "    {:<32} {}",
                format!(
                    "rank {} ({} requests)",
                    r.rank.unwrap_or(0),
                    thousands(r.requests)
                ),
                cache_cells(r)
            );
        }
    }
    if !a.models.is_empty() {
        let _ = writeln!(
            o,
            "\nmodels: each one's requests, and an ideal per-rank cache of its own (caches do not cross models)"
        );
        for m in &a.models {
            let name = match &m.base {
                Some(b) => format!("{} (adapter of {b})", m.model),
                None => m.model.clone(),
            };
            let _ = writeln!(
                o,
                "  {:<34} {:>10} requests ({:.1}%)  {}",
                name,
                thousands(m.requests),
                100.0 * m.share,
                cache_cells(&m.cache)
            );
        }
    }
    for l in &a.adapter_loads {
        let _ = writeln!(
            o,
            "  {:<34} {:>10} loads of {} adapter requests ({:.1}% of all requests)",
            format!("max-loras {}", l.max_loras),
            thousands(l.loads),
            thousands(l.adapter_requests),
            100.0 * l.share
        );
    }
    if let Some(h) = &a.reasoning_history {
        let _ = writeln!(
            o,
            "\nreasoning sent back: {} reasoning tokens per reply, ideal per-rank caches (this run: {})",
            thousands(u64::from(h.reasoning_tokens)),
            h.run
        );
        for (name, figures) in [
            ("keep (whole replies)", &h.keep),
            ("drop (answers alone)", &h.drop),
        ] {
            let _ = writeln!(
                o,
                "  {:<34} {}  of {} prompt tokens",
                name,
                cache_cells(figures),
                thousands(figures.prompt_tokens)
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::token_count;

    #[test]
    fn token_counts_take_suffixes() {
        assert_eq!(token_count("1M"), Ok(1_000_000));
        assert_eq!(token_count("4k"), Ok(4_000));
        assert_eq!(token_count("2Mi"), Ok(2 * 1024 * 1024));
        assert_eq!(token_count(" 1.5G "), Ok(1_500_000_000));
        assert_eq!(token_count("512"), Ok(512));
        assert!(token_count("0").is_err());
        assert!(token_count("lots").is_err());
    }
}
