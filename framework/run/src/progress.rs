//! The progress bar: a reporter like any other, on stderr.

use batchbench_contract::plugin::{PluginError, Reporter, RequestRecord};
use batchbench_contract::record::{RunInfo, Summary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar on stderr, redrawn at most four times a second, hidden when
/// stderr is not a terminal or with `--quiet`.
pub struct Progress {
    bar: ProgressBar,
    /// Requests counted when their record was held, not yet handed over.
    held: u64,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl Progress {
    /// A bar for `total` requests (unknown: a spinner).
    pub fn new(total: Option<u64>, quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(4)
        };
        let bar = ProgressBar::with_draw_target(total, target);
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} requests ({per_sec}) {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self { bar, held: 0 }
    }
}

impl Progress {
    fn count(&mut self, rec: &RequestRecord<'_>) {
        self.bar.inc(1);
        if rec.failure.is_some() {
            self.bar.set_message("(failures: see summary)");
        }
    }
}

impl Reporter for Progress {
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

    fn on_finish(&mut self, _run: &RunInfo, _s: &Summary) -> Result<(), PluginError> {
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
        let mut p = Progress::new(Some(10), true);
        let rec = RequestRecord::default();
        for _ in 0..3 {
            p.on_held(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(p.bar.position(), 3);
        // The three held records come through, then two that were not held.
        for _ in 0..5 {
            p.on_request(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(p.bar.position(), 5);
    }
}
