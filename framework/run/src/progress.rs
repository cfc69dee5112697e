//! The progress bar and live view: a reporter like any other, on stderr.

use batchbench_contract::plugin::{LiveHistogram, LiveStats, PluginError, Reporter, RequestRecord};
use batchbench_contract::record::{RunInfo, Summary};
use batchbench_contract::results::ServerScrape;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::VecDeque;
use std::io::IsTerminal;

/// A progress bar on stderr, redrawn at most four times a second, hidden when
/// stderr is not a terminal or with `--quiet`. Under it, the live view: the
/// target and achieved rate, requests in flight, TTFT and e2e p50/p99 over
/// the last seconds, failures by kind, and the server's headline metrics when
/// they are scraped, refreshed about once a second.
pub struct Progress {
    bar: ProgressBar,
    /// What the bar fills towards.
    bound: Bound,
    /// Requests ended: the bar's position, set from the live view (four times
    /// a second) rather than on every request, which would cost the client.
    done: u64,
    /// Requests counted when their record was held, not yet handed over.
    held: u64,
    /// Whether the bar is drawn (a terminal, no `--quiet`): the live view
    /// costs nothing otherwise.
    drawn: bool,
    /// The live views of the last [`WINDOW_SECS`] seconds.
    window: VecDeque<LiveStats>,
    /// The last scrape's headline metrics.
    server: Option<String>,
    /// When the live lines were last written, seconds from the clock start.
    shown_at: f64,
}

/// What a run's bar fills towards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// Requests ended over the planned requests (unknown: a spinner).
    Requests(Option<u64>),
    /// Seconds elapsed over the run's duration (a `--duration-secs` run, or
    /// the stages of a workload drawn without end), with the requests ended
    /// beside it.
    Secs(f64),
}

impl Bound {
    /// The bound of a run: its duration when one bounds it, else its
    /// planned requests.
    pub fn of(load: &batchbench_contract::spec::LoadSpec, planned: Option<u64>) -> Self {
        match load.duration_secs {
            Some(d) => Self::Secs(d),
            None if planned.is_none() && !load.stages.is_empty() => {
                Self::Secs(load.stages.iter().map(|s| s.secs).sum())
            }
            None => Self::Requests(planned),
        }
    }
}

/// Bar steps per second of a time bound.
const STEPS_PER_SEC: f64 = 10.0;

/// The span of the rolling figures, seconds.
const WINDOW_SECS: f64 = 5.0;

/// The `q`-quantile of the samples between two cumulative histograms (the
/// newer first), interpolated within its bucket; `None` without samples.
fn window_quantile(new: &LiveHistogram, old: &LiveHistogram, q: f64) -> Option<f64> {
    let n = new.count.saturating_sub(old.count);
    if n == 0 {
        return None;
    }
    let want = q * n as f64;
    let mut below = 0u64;
    let mut lower = 0.0;
    for (i, (le, c)) in new.buckets.iter().enumerate() {
        let c = c.saturating_sub(old.buckets.get(i).map_or(0, |b| b.1));
        if c as f64 >= want {
            let inside = (c - below) as f64;
            let f = if inside > 0.0 {
                (want - below as f64) / inside
            } else {
                1.0
            };
            return Some(lower + f * (le - lower));
        }
        below = c;
        lower = *le;
    }
    // Above the last bound.
    Some(lower)
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |s| format!("{:.0}", s * 1000.0))
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl Progress {
    /// A bar filling towards `bound`.
    pub fn new(bound: Bound, quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(4)
        };
        let drawn = !target.is_hidden();
        let (len, template) = match bound {
            Bound::Requests(total) => (
                total,
                "{elapsed_precise} [{bar:30}] {pos}/{len} requests ({per_sec})\n{msg}",
            ),
            Bound::Secs(secs) => (
                Some((secs * STEPS_PER_SEC).ceil() as u64),
                "{elapsed_precise} [{bar:30}] {prefix}\n{msg}",
            ),
        };
        let bar = ProgressBar::with_draw_target(len, target);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self {
            bar,
            bound,
            done: 0,
            held: 0,
            drawn,
            window: VecDeque::new(),
            server: None,
            shown_at: f64::NEG_INFINITY,
        }
    }

    /// The live lines of the window's newest view against its oldest.
    fn lines(&self) -> Option<String> {
        let new = self.window.back()?;
        let old = self.window.front()?;
        let secs = new.elapsed_secs - old.elapsed_secs;
        // Rates and percentiles over less than half a second say little.
        if secs < 0.5 {
            return None;
        }
        let achieved = new.sent.saturating_sub(old.sent) as f64 / secs;
        let target = new
            .target_rate
            .map_or_else(|| "closed loop".to_owned(), |r| format!("target {r:.1}/s"));
        let stage = new
            .stage
            .map_or_else(String::new, |s| format!(", stage {s}"));
        let mut out = format!(
            "  rate   {target}{stage}, sent {achieved:.1}/s  |  in flight {}  |  ok {}",
            new.in_flight, new.ok
        );
        out.push_str(&format!(
            "\n  last {:.0} s  TTFT p50 {} p99 {} ms  |  e2e p50 {} p99 {} ms",
            secs,
            ms(window_quantile(&new.ttft, &old.ttft, 0.5)),
            ms(window_quantile(&new.ttft, &old.ttft, 0.99)),
            ms(window_quantile(&new.e2e, &old.e2e, 0.5)),
            ms(window_quantile(&new.e2e, &old.e2e, 0.99)),
        ));
        // A reasoning model's users wait for the answer: its first token too.
        if new.ttfat.count > old.ttfat.count {
            out.push_str(&format!(
                "  |  TTFAT p50 {} p99 {} ms",
                ms(window_quantile(&new.ttfat, &old.ttfat, 0.5)),
                ms(window_quantile(&new.ttfat, &old.ttfat, 0.99)),
            ));
        }
        if !new.failed_by_kind.is_empty() {
            let kinds: Vec<String> = new
                .failed_by_kind
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push_str(&format!("\n  failed {}", kinds.join(", ")));
        }
        if let Some(s) = &self.server {
            out.push_str(&format!("\n  server {s}"));
        }
        if let Some(c) = client_line(new, old, secs) {
            out.push_str(&format!("\n  client {c}"));
        }
        Some(out)
    }
}

/// The client's own load over the window: its threads' busy share and its
/// scheduling delay, flagged when its threads were busy past the share at
/// which the summary calls the run client-bound.
fn client_line(new: &LiveStats, old: &LiveStats, secs: f64) -> Option<String> {
    let busy = new.client_busy_secs? - old.client_busy_secs?;
    let threads = f64::from(new.client_threads);
    if threads <= 0.0 || secs <= 0.0 {
        return None;
    }
    let share = (busy / (secs * threads)).max(0.0);
    let s = if new.client_threads == 1 { "" } else { "s" };
    let mut line = format!(
        "{} thread{s} busy {:.0}%  |  scheduling delay p99 {} ms",
        new.client_threads,
        share * 100.0,
        ms(window_quantile(
            &new.scheduling_delay,
            &old.scheduling_delay,
            0.99
        )),
    );
    if share > batchbench_contract::record::ClientBound::BUSY_SHARE {
        line.push_str("  |  CLIENT-BOUND: the client, not the server, is the limit now");
    }
    Some(line)
}

impl Progress {
    fn count(&mut self, _rec: &RequestRecord<'_>) {
        self.done += 1;
    }

    /// The bar's position `elapsed_secs` into the run, and its label where
    /// the position is not the requests ended.
    fn place(&self, elapsed_secs: f64) -> (u64, Option<String>) {
        match self.bound {
            Bound::Requests(_) => (self.done, None),
            Bound::Secs(secs) => {
                let at = elapsed_secs.clamp(0.0, secs);
                (
                    (at * STEPS_PER_SEC) as u64,
                    Some(format!("{at:.0}/{secs:.0} s, {} requests ended", self.done)),
                )
            }
        }
    }

    fn show(&self, elapsed_secs: f64) {
        let (pos, label) = self.place(elapsed_secs);
        self.bar.set_position(pos);
        if let Some(l) = label {
            self.bar.set_prefix(l);
        }
    }
}

impl Reporter for Progress {
    fn wants_live(&self) -> bool {
        self.drawn
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        // A held record was counted when it was held.
        if self.held > 0 {
            self.held -= 1;
        } else {
            self.count(rec);
        }
        Ok(())
    }

    fn on_held(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        self.held += 1;
        self.count(rec);
        Ok(())
    }

    fn on_live(&mut self, live: &LiveStats) -> Result<(), PluginError> {
        if !self.drawn {
            return Ok(());
        }
        self.show(live.elapsed_secs);
        self.window.push_back(live.clone());
        while self
            .window
            .front()
            .is_some_and(|f| live.elapsed_secs - f.elapsed_secs > WINDOW_SECS)
        {
            self.window.pop_front();
        }
        // About once a second.
        if live.elapsed_secs - self.shown_at >= 1.0
            && let Some(lines) = self.lines()
        {
            self.shown_at = live.elapsed_secs;
            self.bar.set_message(lines);
        }
        Ok(())
    }

    fn on_server_metrics(&mut self, scrape: &ServerScrape) -> Result<(), PluginError> {
        if !self.drawn || scrape.error.is_some() {
            return Ok(());
        }
        let c = &scrape.common;
        let mut parts = Vec::new();
        for (key, label, scale, unit) in [
            ("requests_running", "running", 1.0, ""),
            ("requests_waiting", "waiting", 1.0, ""),
            ("kv_cache_usage", "KV", 100.0, "%"),
            ("gpu_power_watts", "GPU", 1.0, " W"),
        ] {
            if let Some(v) = c.get(key) {
                parts.push(format!("{label} {:.0}{unit}", v * scale));
            }
        }
        if !parts.is_empty() {
            self.server = Some(format!("{} ({})", parts.join(", "), scrape.url));
        }
        Ok(())
    }

    fn on_finish(&mut self, _run: &RunInfo, _s: &Summary) -> Result<(), PluginError> {
        self.show(f64::INFINITY);
        self.bar.finish_and_clear();
        Ok(())
    }
}

/// Shows a plugin's long preparation (reading a large manifest) as a bar on
/// stderr: drawn only on a terminal, without `--quiet`, and only once the
/// preparation has lasted half a second, so that quick ones show nothing.
#[derive(Clone)]
pub struct PrepBar {
    state: std::sync::Arc<std::sync::Mutex<PrepState>>,
}

struct PrepState {
    started: std::time::Instant,
    shown: bool,
    bar: Option<ProgressBar>,
}

impl std::fmt::Debug for PrepBar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrepBar")
    }
}

/// How long preparation goes before it is shown.
const PREP_SHOWN_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

impl PrepBar {
    /// A bar that stays hidden with `quiet` or when stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        Self {
            state: std::sync::Arc::new(std::sync::Mutex::new(PrepState {
                started: std::time::Instant::now(),
                shown: !quiet && std::io::stderr().is_terminal(),
                bar: None,
            })),
        }
    }

    /// The hook plugins report to.
    pub fn hook(&self) -> batchbench_contract::registry::Preparation {
        let state = self.state.clone();
        batchbench_contract::registry::Preparation::new(move |what, done, total| {
            let Ok(mut s) = state.lock() else {
                return;
            };
            if !s.shown || s.started.elapsed() < PREP_SHOWN_AFTER {
                return;
            }
            let bar = s.bar.get_or_insert_with(|| {
                let bar = ProgressBar::with_draw_target(
                    Some(total),
                    ProgressDrawTarget::stderr_with_hz(4),
                );
                if let Ok(style) = ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar
            });
            bar.set_message(what.to_owned());
            bar.set_length(total.max(done));
            bar.set_position(done);
        })
    }

    /// Clears the bar once preparation is over.
    pub fn finish(&self) {
        if let Ok(mut s) = self.state.lock()
            && let Some(bar) = s.bar.take()
        {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_record_counts_once_when_held_not_again_when_handed_over() {
        let mut p = Progress::new(Bound::Requests(Some(10)), true);
        let rec = RequestRecord::default();
        for _ in 0..3 {
            p.on_held(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(p.done, 3);
        // The three held records come through, then two that were not held.
        for _ in 0..5 {
            p.on_request(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(p.done, 5);
    }

    #[test]
    fn a_run_bounded_by_its_duration_fills_with_time_not_with_requests() {
        use batchbench_contract::spec::{LoadSpec, Stage};
        let timed = LoadSpec {
            duration_secs: Some(10.0),
            ..LoadSpec::default()
        };
        assert_eq!(Bound::of(&timed, None), Bound::Secs(10.0));
        let staged = LoadSpec {
            stages: vec![
                Stage {
                    secs: 2.0,
                    rate: 5.0,
                },
                Stage {
                    secs: 3.0,
                    rate: 9.0,
                },
            ],
            ..LoadSpec::default()
        };
        assert_eq!(Bound::of(&staged, None), Bound::Secs(5.0));
        assert_eq!(
            Bound::of(&LoadSpec::default(), Some(7)),
            Bound::Requests(Some(7))
        );
        let mut p = Progress::new(Bound::Secs(10.0), true);
        assert_eq!(p.bar.length(), Some(100));
        let rec = RequestRecord::default();
        for _ in 0..115 {
            p.on_request(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        // Halfway through the duration, whatever the requests ended.
        let (pos, label) = p.place(5.0);
        assert_eq!(pos, 50);
        assert_eq!(label.as_deref(), Some("5/10 s, 115 requests ended"));
        // Past the deadline (requests in flight finishing) it stays full.
        assert_eq!(p.place(12.5).0, 100);
        // A bar of requests is at the requests ended.
        let mut q = Progress::new(Bound::Requests(Some(200)), true);
        q.on_request(&rec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(q.place(5.0), (1, None));
    }

    fn hist(counts: &[(f64, u64)]) -> LiveHistogram {
        LiveHistogram {
            buckets: counts.to_vec(),
            count: counts.last().map_or(0, |c| c.1),
            sum: 0.0,
        }
    }

    #[test]
    fn rolling_percentiles_come_from_the_window_alone() {
        let old = hist(&[(0.1, 40), (1.0, 40)]);
        let new = hist(&[(0.1, 90), (1.0, 140)]);
        // The window holds 50 samples under 0.1 s and 50 between 0.1 and 1 s.
        let p50 = window_quantile(&new, &old, 0.5).unwrap_or_default();
        assert!((p50 - 0.1).abs() < 1e-9, "{p50}");
        let p99 = window_quantile(&new, &old, 0.99).unwrap_or_default();
        assert!((p99 - (0.1 + 0.98 * 0.9)).abs() < 1e-9, "{p99}");
        assert_eq!(window_quantile(&old, &old, 0.5), None);
    }

    #[test]
    fn the_live_lines_show_the_rate_in_flight_percentiles_failures_and_server() {
        let mut p = Progress {
            bar: ProgressBar::hidden(),
            bound: Bound::Requests(None),
            done: 0,
            held: 0,
            drawn: true,
            window: VecDeque::new(),
            server: None,
            shown_at: f64::NEG_INFINITY,
        };
        let at = |t: f64, sent: u64, e2e: LiveHistogram| LiveStats {
            elapsed_secs: t,
            sent,
            in_flight: 3,
            target_rate: Some(20.0),
            failed_by_kind: [("timeout".to_owned(), 2)].into_iter().collect(),
            e2e,
            ..LiveStats::default()
        };
        p.on_live(&at(1.0, 10, hist(&[(0.1, 0), (1.0, 0)])))
            .unwrap();
        p.on_server_metrics(&ServerScrape {
            url: "target".into(),
            common: [
                ("requests_running".to_owned(), 7.0),
                ("kv_cache_usage".to_owned(), 0.5),
            ]
            .into_iter()
            .collect(),
            ..ServerScrape::default()
        })
        .unwrap();
        p.on_live(&at(3.0, 50, hist(&[(0.1, 20), (1.0, 40)])))
            .unwrap();
        let lines = p.lines().unwrap_or_default();
        for part in [
            "target 20.0/s",
            "sent 20.0/s",
            "in flight 3",
            "e2e p50 100 p99",
            "failed timeout 2",
            "server running 7, KV 50% (target)",
        ] {
            assert!(lines.contains(part), "{part}: {lines}");
        }
        assert!(!lines.contains("TTFAT"), "no reasoning, no TTFAT: {lines}");
        // A reasoning model's replies: the first answer token too.
        let mut later = at(5.0, 90, hist(&[(0.1, 30), (1.0, 60)]));
        later.ttfat = hist(&[(0.1, 0), (1.0, 10)]);
        p.on_live(&later).unwrap();
        let lines = p.lines().unwrap_or_default();
        assert!(lines.contains("TTFAT p50 "), "{lines}");
    }
}
