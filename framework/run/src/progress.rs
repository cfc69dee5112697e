//! The progress bar: a reporter like any other, on stderr.

use batchbench_core::plugin::{PluginError, Reporter, RequestRecord};
use batchbench_core::record::{RunInfo, Summary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar on stderr, redrawn at most four times a second, hidden when
/// stderr is not a terminal or with `--quiet`.
pub struct Progress {
    bar: ProgressBar,
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
        Self { bar }
    }
}

impl Reporter for Progress {
    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        self.bar.inc(1);
        if rec.failure.is_some() {
            self.bar.set_message("(failures: see summary)");
        }
        Ok(())
    }

    fn on_finish(&mut self, _run: &RunInfo, _s: &Summary) -> Result<(), PluginError> {
        self.bar.finish_and_clear();
        Ok(())
    }
}
