//! The points of a series: each one an ordinary run of its command line,
//! judged, recorded in the index and printed as it ends.

use super::tables::{Judge, figures, point_line};
use super::*;

/// What every point of a series shares.
pub(super) struct Series<'a> {
    pub(super) front: &'a Front,
    pub(super) dim: Dimension,
    /// The run's arguments (program name first), without the series' flags.
    pub(super) argv: Vec<OsString>,
    /// The base spec's result files, where the user wants them.
    pub(super) user_csv: Option<PathBuf>,
    pub(super) user_summary: Option<PathBuf>,
    pub(super) events: bool,
    pub(super) seed: u64,
    pub(super) trials: u64,
    pub(super) dir: PathBuf,
    pub(super) cancel: CancellationToken,
    pub(super) api_key: Option<String>,
    pub(super) doc: SeriesDoc,
    pub(super) runs: usize,
    /// Points run until their SLO is decided: the least requests, and the cap.
    pub(super) decide: Option<(Option<u64>, Option<f64>)>,
}

pub(super) fn io_failure(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure::failed_msg(format!("{}: {e}", path.display()))
}

impl Series<'_> {
    /// A point's command line.
    pub(super) fn point_argv(&self, value: f64) -> Vec<OsString> {
        let mut argv = self.argv.clone();
        argv.push(self.dim.flag().into());
        argv.push(self.dim.arg(value).into());
        argv
    }

    /// A point's spec, its result files not yet pointed anywhere.
    pub(super) fn spec(&self, value: f64) -> Result<RunSpec, Failure> {
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
    pub(super) fn run_once(
        &mut self,
        spec: &RunSpec,
        trial: u64,
    ) -> Result<(String, u64, Summary), Failure> {
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
        let hooks = RunHooks {
            cancel: Some(self.cancel.clone()),
            api_key: self.api_key.clone(),
            quiet_summary: true,
            ..RunHooks::default()
        };
        match assemble::execute(spec, self.front.profile, hooks)? {
            Outcome::Ran(out) => Ok((name, seed, out.summary)),
            Outcome::DryRun { .. } => Err(Failure::failed_msg("a series point made a dry run")),
        }
    }

    /// Measures the point `value` of the resolved `spec`: `trials` runs, and
    /// one more when `remeasure_near` and a percentile landed near its bound.
    pub(super) fn measure(
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
    pub(super) fn record(&mut self, point: Point, of: Option<usize>) -> Result<(), Failure> {
        let n = self.doc.points.len() + 1;
        let count = of.map_or_else(|| format!("{n}"), |of| format!("{n}/{of}"));
        eprintln!("[{count}] {}", point_line(&self.dim, &point));
        self.doc.points.push(point);
        self.write_index()
    }

    /// Writes the index (and the `--summary-json` copy) whole: a temporary
    /// file renamed over the old one, so a reader never sees half of it.
    pub(super) fn write_index(&self) -> Result<(), Failure> {
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
    pub(super) fn abort(&mut self, f: Failure) -> Failure {
        let message = format!("{:#}", f.error);
        self.doc.error = Some(message.clone());
        let _ = self.write_index();
        Failure::failed_msg(message)
    }
}

/// A command line as the index records it: an API key given with `--api-key`
/// is never written.
pub(super) fn redacted(argv: &[OsString]) -> Vec<String> {
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
