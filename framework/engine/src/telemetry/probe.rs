//! How much the client's own runtime had to do: a probe task's lateness (the
//! scheduling delay any task of the client could see) and how busy the
//! runtime's worker threads were, to tell when the client rather than the
//! server limits a run.

use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the probe asks to wake: 20 samples a second, at a cost of one
/// timer and one lock each, nothing beside a run's requests.
pub const PERIOD: Duration = Duration::from_millis(50);

/// Hands `record` how long the probe waited from its creation to its first
/// run, then wakes every [`PERIOD`] until `stop` and hands it how late each
/// wake-up ran past its due time. The runtime's timer rounds a due time up to
/// its next millisecond, so an idle runtime's delay is under 1 ms; a thread
/// busy with other tasks (or a machine busy with other processes) runs the
/// probe later, by as much as it would run a task reading a reply. Every
/// run that polls the probe once has a sample, however short it is.
pub fn probe(
    stop: CancellationToken,
    mut record: impl FnMut(Duration) + Send,
) -> impl std::future::Future<Output = ()> + Send {
    let created = Instant::now();
    async move {
        record(created.elapsed());
        loop {
            let due = Instant::now() + PERIOD;
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(due) => {}
            }
            record(Instant::now().saturating_duration_since(due));
        }
    }
}

/// The runtime's worker threads, and the time they have spent busy so far,
/// summed (a thread is busy from when it wakes to run tasks until it parks
/// for want of any). `None` outside a runtime.
pub fn runtime_busy() -> Option<(usize, Duration)> {
    let m = tokio::runtime::Handle::try_current().ok()?.metrics();
    let workers = m.num_workers();
    let busy = (0..workers).map(|w| m.worker_total_busy_duration(w)).sum();
    Some((workers, busy))
}

/// The share of `threads` threads' time over `wall` that `busy` was (1.0:
/// every thread busy throughout).
pub fn busy_share(busy: Duration, threads: usize, wall: Duration) -> Option<f64> {
    let total = wall.as_secs_f64() * threads as f64;
    (total > 0.0).then(|| busy.as_secs_f64() / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Holds the thread for `d` without yielding.
    fn spin(d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_thread_held_by_another_task_runs_the_probe_late_by_the_hold() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let s = seen.clone();
        let task = tokio::spawn(probe(stop.clone(), move |d| s.lock().unwrap().push(d)));
        // Idle: the probe runs within its timer's millisecond (and whatever
        // a busy test machine adds, which this test does not bound).
        tokio::time::sleep(PERIOD * 3).await;
        let idle = seen.lock().unwrap().len();
        assert!(idle >= 1, "the probe woke {idle} times in three periods");
        // One task holds the only worker for 120 ms without yielding: the
        // probe, due within it, runs once it ends, that much late at least
        // less one period.
        let hold = Duration::from_millis(120);
        tokio::spawn(async move { spin(hold) }).await.unwrap();
        tokio::time::sleep(PERIOD * 2).await;
        stop.cancel();
        task.await.unwrap();
        let worst = seen.lock().unwrap().iter().copied().max().unwrap();
        assert!(
            worst >= hold - PERIOD,
            "worst delay {worst:?} under a {hold:?} hold"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_runtime_reports_its_threads_and_their_busy_time() {
        let (threads, before) = runtime_busy().unwrap();
        assert_eq!(threads, 2);
        let spun = Duration::from_millis(50);
        tokio::spawn(async move { spin(spun) }).await.unwrap();
        // A worker hands over its busy time when it parks.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (_, after) = runtime_busy().unwrap();
        assert!(
            after - before >= spun,
            "busy {:?} over a {spun:?} spin",
            after - before
        );
        assert_eq!(
            busy_share(Duration::from_secs(1), 2, Duration::from_secs(1)),
            Some(0.5)
        );
        assert_eq!(busy_share(Duration::ZERO, 2, Duration::ZERO), None);
    }
}
