//! A series checked before anything is sent (its flags, every point's run,
//! its results directory), then run point by point.

use super::points::Series;
use super::search::{run_capacity, run_sweep};
use super::tables::{Judge, table};
use super::*;

/// The loads of `--values` (with `--points`).
pub(super) fn sweep_values(s: &SweepArgs, dim: &Dimension) -> Result<Vec<f64>, Failure> {
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
pub(super) fn default_dir(kind: Kind) -> PathBuf {
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

pub(super) fn plan<'a>(
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

pub(super) fn run_plan(p: Plan<'_>, cancel: Option<CancellationToken>) -> Result<i32, Failure> {
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
