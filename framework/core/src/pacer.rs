//! Sub-millisecond send times.
//!
//! The runtime's timer wheel has a resolution of one millisecond, so a request
//! due at 12.3 ms is released at 13 ms or later. A [`Pacer`] keeps a dedicated
//! thread with a heap of due times: it sleeps until shortly before the earliest
//! (with the thread's timer slack at its minimum on Linux), spins the rest, and
//! wakes the waiting task. Waking a task on the runtime's thread takes time of
//! its own, so the thread wakes it a little early, by the median of the
//! hand-offs so far, and the task spins the last microseconds itself. Both
//! margins adapt to the machine and are capped: on a quiet one they are a few
//! microseconds, so the spinning costs little CPU. A due time
//! already past returns at once, so a schedule that fell behind catches up
//! instead of drifting.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The margins start here.
const START_MARGIN: Duration = Duration::from_micros(30);
/// The task is woken early by the median hand-off, at most this: the task
/// spins the difference on the runtime's thread, which then runs nothing else,
/// so a busy runtime (whose hand-offs are long) must not make it spin long.
const HANDOFF_CAP: Duration = Duration::from_micros(30);
/// The thread stops sleeping early by the 90th percentile of its own late
/// wake-ups, at most this: past it a late wake-up is the machine's doing, and
/// spinning through it at high rates would take a core from the senders.
const OVERSLEEP_CAP: Duration = Duration::from_micros(50);

/// One wait: when the thread wakes the task, in due order, and how.
struct Wait {
    fire: Instant,
    seq: u64,
    done: oneshot::Sender<Instant>,
}

impl PartialEq for Wait {
    fn eq(&self, other: &Self) -> bool {
        (self.fire, self.seq) == (other.fire, other.seq)
    }
}
impl Eq for Wait {}
impl PartialOrd for Wait {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Wait {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.fire, self.seq).cmp(&(other.fire, other.seq))
    }
}

/// A quantile of a latency, tracked without storing samples (stochastic
/// approximation): each sample moves the estimate by a fixed step, up with
/// weight `q` when above it, down with weight `1 - q` when below, so that it
/// settles where a share `q` of the samples lies below. Clamped to `cap`.
#[derive(Debug)]
struct Margin {
    nanos: AtomicU64,
    q: f64,
    cap: Duration,
}

/// The step of a [`Margin`]: small against the latencies it tracks, large
/// enough to follow a change within a few hundred samples.
const STEP_NANOS: f64 = 1_000.0;

impl Margin {
    fn new(q: f64, cap: Duration) -> Self {
        Self {
            nanos: AtomicU64::new(START_MARGIN.min(cap).as_nanos() as u64),
            q,
            cap,
        }
    }

    fn get(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    fn observe(&self, sample: Duration) {
        let est = self.nanos.load(Ordering::Relaxed) as f64;
        let next = if sample.as_nanos() as f64 > est {
            est + STEP_NANOS * self.q
        } else {
            est - STEP_NANOS * (1.0 - self.q)
        };
        let next = next.clamp(0.0, self.cap.as_nanos() as f64);
        self.nanos.store(next as u64, Ordering::Relaxed);
    }
}

/// A timer thread for precise release times, shared by every task of a run.
#[derive(Debug)]
pub struct Pacer {
    tx: mpsc::Sender<Wait>,
    seq: AtomicU64,
    /// How long the runtime takes from the thread's wake-up call to the task
    /// running: the thread wakes the task this much early.
    handoff: Margin,
}

impl Pacer {
    /// Starts the timer thread; it ends when the pacer is dropped.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Wait>();
        std::thread::Builder::new()
            .name("batchbench-pacer".into())
            .spawn(move || {
                fine_timer_slack();
                set_this_thread_nice(-10);
                timer_thread(&rx);
            })?;
        Ok(Self {
            tx,
            seq: AtomicU64::new(0),
            handoff: Margin::new(0.5, HANDOFF_CAP),
        })
    }

    /// Waits until `due`, to within microseconds.
    pub async fn until(&self, due: Instant) {
        if due <= Instant::now() + Duration::from_micros(2) {
            return;
        }
        let (done, wait) = oneshot::channel();
        let fire = due.checked_sub(self.handoff.get()).unwrap_or(due);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Wait { fire, seq, done }).is_err() {
            // The thread is gone: the runtime's timer is the fallback.
            tokio::time::sleep_until(due.into()).await;
            return;
        }
        if let Ok(fired) = wait.await {
            self.handoff.observe(fired.elapsed());
        }
        spin_until(due);
    }
}

/// The thread: the earliest wait first; new waits arrive while it sleeps.
fn timer_thread(rx: &mpsc::Receiver<Wait>) {
    let mut heap: BinaryHeap<Reverse<Wait>> = BinaryHeap::new();
    // How late the thread itself wakes from a timed sleep.
    let oversleep = Margin::new(0.9, OVERSLEEP_CAP);
    loop {
        let Some(Reverse(next)) = heap.peek() else {
            match rx.recv() {
                Ok(w) => heap.push(Reverse(w)),
                Err(_) => return,
            }
            continue;
        };
        let fire = next.fire;
        let now = Instant::now();
        let spin = oversleep.get() + Duration::from_micros(5);
        if fire > now + spin {
            let want = fire - spin;
            match rx.recv_timeout(want - now) {
                Ok(w) => heap.push(Reverse(w)),
                Err(RecvTimeoutError::Timeout) => {
                    oversleep.observe(Instant::now().saturating_duration_since(want));
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            continue;
        }
        // The last stretch: spin, taking new waits (an earlier one may come).
        while Instant::now() < fire {
            match rx.try_recv() {
                Ok(w) => heap.push(Reverse(w)),
                Err(_) => std::hint::spin_loop(),
            }
            if heap.peek().is_some_and(|Reverse(w)| w.fire < fire) {
                break;
            }
        }
        if heap
            .peek()
            .is_some_and(|Reverse(w)| w.fire <= Instant::now())
        {
            if let Some(Reverse(w)) = heap.pop() {
                let _ = w.done.send(Instant::now());
            }
        }
    }
}

/// Spins until `due` (a few microseconds at most, after an early wake-up).
fn spin_until(due: Instant) {
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// Runs the calling thread at background priority (nice 10), once per thread:
/// for prompt preparation on the blocking pool, so that on a busy machine the
/// threads that send and time requests are scheduled before it.
pub fn background_priority() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    DONE.with(|d| {
        if !d.replace(true) {
            set_this_thread_nice(10);
        }
    });
}

/// Sets the calling thread's nice value; a value the process may not take
/// (raising priority needs a capability) leaves it as it was.
#[allow(unsafe_code)]
fn set_this_thread_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid has no preconditions; setpriority with PRIO_PROCESS and a
    // thread id changes only that thread's nice value, and a refusal is an
    // error return, not undefined behaviour.
    unsafe {
        let tid = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
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

    #[test]
    fn the_thread_fires_waits_in_due_order_whatever_order_they_came_in() {
        // The thread alone, without the task's final spin (which would hide a
        // wait fired early): a queue taken in arrival order fires the first
        // registered (the latest) wait first and the earlier ones after it.
        let (tx, rx) = mpsc::channel::<Wait>();
        let thread = std::thread::spawn(move || timer_thread(&rx));
        let base = Instant::now() + Duration::from_millis(5);
        let mut waits = Vec::new();
        for (seq, k) in [7u64, 1, 4, 0, 9, 3].into_iter().enumerate() {
            let fire = base + Duration::from_micros(500 * k);
            let (done, fired) = oneshot::channel();
            tx.send(Wait {
                fire,
                seq: seq as u64,
                done,
            })
            .unwrap_or_else(|e| panic!("{e}"));
            waits.push((fire, fired));
        }
        let mut got: Vec<(Instant, Instant)> = waits
            .into_iter()
            .map(|(fire, fired)| {
                (
                    fire,
                    fired.blocking_recv().unwrap_or_else(|e| panic!("{e}")),
                )
            })
            .collect();
        drop(tx);
        thread
            .join()
            .unwrap_or_else(|_| panic!("the timer thread panicked"));
        got.sort_by_key(|&(fire, _)| fire);
        for (fire, fired) in &got {
            assert!(fired >= fire, "fired before its time");
        }
        for pair in got.windows(2) {
            assert!(pair[0].1 <= pair[1].1, "fired out of due order: {got:?}");
        }
    }

    #[test]
    fn the_margin_settles_on_its_quantile_and_stays_bounded() {
        let cap = Duration::from_micros(100);
        let m = Margin::new(0.9, cap);
        // Samples of 1 to 100 us, over and over: the 90th percentile is 90 us.
        for _ in 0..200 {
            for k in 0..100u64 {
                // 1..=100 in a scrambled order (37 is prime to 100).
                m.observe(Duration::from_micros(k * 37 % 100 + 1));
            }
        }
        let est = m.get().as_secs_f64() * 1e6;
        assert!((est - 90.0).abs() < 5.0, "{est}");
        for _ in 0..1000 {
            m.observe(Duration::from_secs(1));
        }
        assert_eq!(m.get(), cap);
        for _ in 0..10_000 {
            m.observe(Duration::ZERO);
        }
        assert_eq!(m.get(), Duration::ZERO);
    }
}
