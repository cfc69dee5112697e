//! Sub-millisecond send times.
//!
//! The runtime's timer wheel has a resolution of one millisecond, so a request
//! due at 12.3 ms is released at 13 ms or later. A [`Pacer`] keeps a dedicated
//! thread that sleeps until shortly before each due time (with the thread's
//! timer slack at its minimum on Linux), spins the remaining microseconds, and
//! then wakes the waiting task. A due time already past returns at once, so a
//! schedule that fell behind catches up instead of drifting.

use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long before a due time the thread stops sleeping and spins: above the
/// usual wake-up latency of a sleeping thread, small enough to cost little CPU.
const SPIN: Duration = Duration::from_micros(60);

type Wait = (Instant, oneshot::Sender<()>);

/// A timer thread for precise release times.
#[derive(Debug)]
pub struct Pacer {
    tx: mpsc::Sender<Wait>,
}

impl Pacer {
    /// Starts the timer thread; it ends when the pacer is dropped.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Wait>();
        std::thread::Builder::new()
            .name("batchbench-pacer".into())
            .spawn(move || {
                fine_timer_slack();
                while let Ok((due, done)) = rx.recv() {
                    wait_until(due);
                    let _ = done.send(());
                }
            })?;
        Ok(Self { tx })
    }

    /// Waits until `due`, to within microseconds.
    pub async fn until(&self, due: Instant) {
        if due <= Instant::now() + Duration::from_micros(5) {
            return;
        }
        let (done, wait) = oneshot::channel();
        if self.tx.send((due, done)).is_err() {
            // The thread is gone: the runtime's timer is the fallback.
            tokio::time::sleep_until(due.into()).await;
            return;
        }
        let _ = wait.await;
    }
}

/// Blocks the calling thread until `due`: sleeps, then spins the last stretch.
fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Asks the kernel to wake this thread without the default 50 us of timer
/// slack.
#[allow(unsafe_code)]
fn fine_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only the
    // calling thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn releases_at_or_after_the_due_time_and_at_once_when_it_is_past() {
        let p = Pacer::start().unwrap_or_else(|e| panic!("{e}"));
        for micros in [200u64, 1500, 3300] {
            let due = Instant::now() + Duration::from_micros(micros);
            p.until(due).await;
            assert!(Instant::now() >= due);
        }
        let past = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        p.until(past).await;
    }
}
