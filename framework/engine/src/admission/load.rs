//! The load model's rules for each request: when an arrival is handed to its
//! task and when it is sent, the concurrency cap, warmup, the deadline, and
//! the early end of a run whose figures converged.

use crate::state::Shared;
use batchbench_contract::plugin::{FailureKind, Reply};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::SemaphorePermit;
use tokio::task::JoinHandle;

/// How far ahead of its due time an arrival is handed to its task: enough for
/// the runtime timer's millisecond steps and for making the request's body,
/// so that the task is waiting, body made, when the time comes.
const RELEASE_AHEAD: Duration = Duration::from_millis(2);

/// When the release loops hand an arrival due at `offset` to its task.
pub(crate) fn release_time(sh: &Shared, offset: Duration) -> Instant {
    let due = sh.start + offset;
    due.checked_sub(RELEASE_AHEAD)
        .map_or(sh.start, |t| t.max(sh.start))
}

/// Waits until the arrival due at `offset` (from the clock start) may be
/// sent: on the pacer, to within microseconds, or on the runtime's timer
/// without one. `false` when the run stops first.
pub(crate) async fn until_due(sh: &Shared, offset: Duration) -> bool {
    let due = sh.start + offset;
    let wait = async {
        match &sh.pacer {
            Some(p) => p.until(due).await,
            None => tokio::time::sleep_until(due.into()).await,
        }
    };
    let waited = tokio::select! {
        biased;
        () = sh.cancel.cancelled() => false,
        () = sh.deadline.cancelled() => false,
        () = wait => true,
    };
    // Its time may have come long after the deadline on a client that fell
    // behind: then it is not sent.
    waited && !sh.past_deadline()
}

/// Starts the deadline of a duration run: at it nothing new is sent, and with
/// `at_deadline = cancel` requests in flight are cancelled.
pub(crate) fn deadline_timer(sh: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let secs = sh.opts.load.duration_secs?;
    let sh = sh.clone();
    Some(tokio::spawn(async move {
        let due = sh.start + Duration::from_secs_f64(secs);
        tokio::select! {
            () = sh.cancel.cancelled() => {}
            () = tokio::time::sleep_until(due.into()) => sh.end_at_deadline(),
        }
    }))
}

/// How often a converging run looks at its figures.
const CONVERGENCE_EVERY: Duration = Duration::from_millis(200);

/// Starts the watch of a converging run: every [`CONVERGENCE_EVERY`] it looks at the
/// figures, and once they are sure enough it ends the run as its deadline
/// would (nothing new is sent; requests in flight finish or are cut, as
/// `at_deadline` says).
pub(crate) fn convergence_watch(sh: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let load = &sh.opts.load;
    if load.target_ci.is_none() && !load.until_decided {
        return None;
    }
    let sh = sh.clone();
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(CONVERGENCE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = sh.cancel.cancelled() => return,
                () = sh.deadline.cancelled() => return,
                _ = tick.tick() => {}
            }
            let converged = {
                let c = sh.collector();
                let s =
                    crate::measurement::converge::standing(&c.metrics, &sh.opts.load, &sh.opts.slo);
                if s.pending.is_some() {
                    continue;
                }
                crate::measurement::converge::Converged {
                    requests: c.metrics.requests,
                    at: sh.start.elapsed(),
                    figures: s.figures,
                }
            };
            let _ = sh.converged.set(converged);
            sh.end_at_deadline();
            return;
        }
    }))
}

/// A concurrency slot and how long it took to get; `None` when the run stops
/// while waiting (a request the deadline caught in the queue is counted as
/// cut), or when an `arrival` waited longer than `max_queue_wait_secs` (it is
/// dropped, counted as `dropped_waiting`).
pub(crate) async fn slot(
    sh: &Shared,
    arrival: bool,
) -> Option<(Option<SemaphorePermit<'_>>, Duration)> {
    let Some(sem) = &sh.inflight else {
        return Some((None, Duration::ZERO));
    };
    let t0 = Instant::now();
    // Only an arrival of the schedule is dropped: a later turn of a session
    // belongs to one that was admitted, and waits as long as it takes.
    let bound = sh
        .opts
        .load
        .max_queue_wait_secs
        .filter(|_| arrival)
        .map(Duration::from_secs_f64);
    let too_long = async {
        match bound {
            Some(b) => tokio::time::sleep(b).await,
            None => std::future::pending().await,
        }
    };
    let got = tokio::select! {
        () = sh.cancel.cancelled() => None,
        () = sh.deadline.cancelled() => None,
        p = sem.acquire() => p.ok().map(|p| (Some(p), t0.elapsed())),
        () = too_long => {
            sh.collector().metrics.dropped_waiting += 1;
            return None;
        }
    };
    if got.is_none() && sh.deadline.is_cancelled() && !sh.interrupt.is_cancelled() {
        sh.collector().metrics.cut_at_deadline += 1;
    }
    got
}

/// Whether the request about to be sent, due at `intended`, is warmup.
pub(crate) fn is_warmup(sh: &Shared, intended: Duration) -> bool {
    let load = &sh.opts.load;
    let n = sh.sent.fetch_add(1, Ordering::Relaxed);
    load.warmup_requests.is_some_and(|w| n < w)
        || load
            .warmup_secs
            .is_some_and(|w| intended < Duration::from_secs_f64(w))
}

/// A request cancelled by the deadline (not by the host): counted apart, not
/// as a failure. Returns whether `result` is one.
pub(crate) fn cut_at_deadline(
    sh: &Shared,
    result: &Result<Box<Reply>, (FailureKind, String)>,
) -> bool {
    let cut = matches!(result, Err((FailureKind::Cancelled, _)))
        && sh.deadline.is_cancelled()
        && !sh.interrupt.is_cancelled();
    if cut {
        sh.collector().metrics.cut_at_deadline += 1;
    }
    cut
}
