//! Sub-millisecond send times.
//!
//! The runtime's timer wheel has a resolution of one millisecond, so a request
//! due at 12.3 ms is released at 13 ms or later. A [`Pacer`] keeps a dedicated
//! thread with a heap of due times: it sleeps until shortly before the earliest
//! (with the thread's timer slack at its minimum on Linux), spins the rest, and
//! wakes the waiting task. Waking a task on the runtime's thread takes time of
//! its own (a parked runtime thread must be woken first), so the thread wakes
//! it early, by the 99th percentile of the hand-offs so far, and the task waits
//! out the rest itself, yielding to the runtime until the last microseconds.
//! Both margins adapt to the machine and are capped, and the caps grow with
//! the spacing of the waits: the time spent waiting early stays a small share
//! of the time between them, so a high rate does not spin away the CPU its
//! sends need, and a low rate buys precision with spare CPU. A due time
//! already past returns at once, so a schedule that fell behind catches up
//! instead of drifting.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The margins start here.
const START_MARGIN: Duration = Duration::from_micros(30);
/// The task is woken early by the 99th percentile of the hand-offs, at most
/// a fifth of the spacing of the waits, within these bounds: the task waits
/// the difference on the runtime's thread, so a busy runtime (whose hand-offs
/// are long) must not make it wait long at high rates.
const HANDOFF_CAP: (Duration, Duration) = (Duration::from_micros(15), Duration::from_micros(200));
/// The thread stops sleeping early by the 99th percentile of its own late
/// wake-ups, at most a tenth of the spacing of the waits, within these
/// bounds: past them a late wake-up is the machine's doing, and spinning
/// through it would take a core from the senders.
const OVERSLEEP_CAP: (Duration, Duration) = (Duration::from_micros(25), Duration::from_micros(200));
/// The last stretch of a task's wait that it spins without yielding.
const SPIN_LAST: Duration = Duration::from_micros(20);

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
    cap_nanos: AtomicU64,
}

/// The step of a [`Margin`]: small against the latencies it tracks, large
/// enough to follow a change within a few hundred samples.
const STEP_NANOS: f64 = 1_000.0;

impl Margin {
    fn new(q: f64, cap: Duration) -> Self {
        Self {
            nanos: AtomicU64::new(START_MARGIN.min(cap).as_nanos() as u64),
            q,
            cap_nanos: AtomicU64::new(cap.as_nanos() as u64),
        }
    }

    /// Sets the cap to `share` of the spacing `gap`, within `bounds`.
    fn cap_to(&self, gap: Duration, share: u32, bounds: (Duration, Duration)) {
        let cap = (gap / share).clamp(bounds.0, bounds.1);
        self.cap_nanos
            .store(cap.as_nanos() as u64, Ordering::Relaxed);
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
        let next = next.clamp(0.0, self.cap_nanos.load(Ordering::Relaxed) as f64);
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
    /// The spacing of due times, a moving average in nanoseconds, and the
    /// last due time (nanoseconds from `epoch`): they set the margins' caps.
    gap: Arc<AtomicU64>,
    last_due: AtomicU64,
    epoch: Instant,
}

impl Pacer {
    /// Starts the timer thread; it ends when the pacer is dropped.
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Wait>();
        let gap = Arc::new(AtomicU64::new(0));
        let thread_gap = gap.clone();
        std::thread::Builder::new()
            .name("batchbench-pacer".into())
            .spawn(move || {
                fine_timer_slack();
                set_this_thread_nice(-10);
                timer_thread(&rx, &thread_gap);
            })?;
        Ok(Self {
            tx,
            seq: AtomicU64::new(0),
            handoff: Margin::new(0.99, HANDOFF_CAP.0),
            gap,
            last_due: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// Waits until `due`, to within microseconds.
    pub async fn until(&self, due: Instant) {
        if due <= Instant::now() + Duration::from_micros(2) {
            return;
        }
        self.note_spacing(due);
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
        // Woken early: let the runtime run other tasks until the last stretch.
        while due.saturating_duration_since(Instant::now()) > SPIN_LAST {
            tokio::task::yield_now().await;
        }
        spin_until(due);
    }

    /// Folds the spacing from the previous due time into the average, and
    /// caps the hand-off margin by it.
    fn note_spacing(&self, due: Instant) {
        let at = due.saturating_duration_since(self.epoch).as_nanos() as u64;
        let prev = self.last_due.swap(at, Ordering::Relaxed);
        if prev == 0 || at <= prev {
            return;
        }
        let sample = (at - prev) as f64;
        let old = self.gap.load(Ordering::Relaxed) as f64;
        let avg = if old == 0.0 {
            sample
        } else {
            old + (sample - old) / 64.0
        };
        self.gap.store(avg as u64, Ordering::Relaxed);
        self.handoff
            .cap_to(Duration::from_nanos(avg as u64), 5, HANDOFF_CAP);
    }
}

/// The thread: the earliest wait first; new waits arrive while it sleeps.
fn timer_thread(rx: &mpsc::Receiver<Wait>, gap: &AtomicU64) {
    let mut heap: BinaryHeap<Reverse<Wait>> = BinaryHeap::new();
    // How late the thread itself wakes from a timed sleep.
    let oversleep = Margin::new(0.99, OVERSLEEP_CAP.0);
    loop {
        let spacing = gap.load(Ordering::Relaxed);
        if spacing > 0 {
            oversleep.cap_to(Duration::from_nanos(spacing), 10, OVERSLEEP_CAP);
        }
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
    use futures_util::FutureExt;

    #[tokio::test]
    async fn releases_at_or_after_the_due_time_and_at_once_when_it_is_past() {
        let p = Pacer::start().unwrap_or_else(|e| panic!("{e}"));
        for micros in [200u64, 1500, 3300] {
            let due = Instant::now() + Duration::from_micros(micros);
            p.until(due).await;
            assert!(Instant::now() >= due);
        }
        // A due time already past: done on the first poll, with no wait handed
        // to the thread (a schedule that fell behind catches up at once).
        let past = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        let waits = p.seq.load(Ordering::Relaxed);
        assert!(
            p.until(past).now_or_never().is_some(),
            "a due time already past must not wait"
        );
        assert_eq!(
            p.seq.load(Ordering::Relaxed),
            waits,
            "a due time already past must not go to the thread"
        );
    }

    #[test]
    fn the_thread_fires_waits_in_due_order_whatever_order_they_came_in() {
        // The thread alone, without the task's final spin (which would hide a
        // wait fired early). The six waits are queued before the thread starts,
        // in an order unlike their deadlines, so it holds all of them before the
        // first is due however long queueing took: a queue taken in arrival
        // order would fire the first queued (the latest) first. A round in
        // which the thread itself started too close to the first deadline to
        // take them all in (a loaded machine) says nothing about order: it is
        // run again, further ahead.
        let mut lead = Duration::from_millis(5);
        for _ in 0..8 {
            let (tx, rx) = mpsc::channel::<Wait>();
            let base = Instant::now() + lead;
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
            let thread = std::thread::spawn(move || {
                let started = Instant::now();
                timer_thread(&rx, &AtomicU64::new(0));
                started
            });
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
            let started = thread
                .join()
                .unwrap_or_else(|_| panic!("the timer thread panicked"));
            for (fire, fired) in &got {
                assert!(fired >= fire, "fired before its time");
            }
            if started + Duration::from_millis(1) > base {
                lead *= 2;
                continue;
            }
            got.sort_by_key(|&(fire, _)| fire);
            for pair in got.windows(2) {
                assert!(pair[0].1 <= pair[1].1, "fired out of due order: {got:?}");
            }
            return;
        }
        panic!("the timer thread never started ahead of its first deadline (last lead {lead:?})");
    }

    #[test]
    fn the_caps_follow_the_spacing_of_the_waits_within_their_bounds() {
        let m = Margin::new(0.99, HANDOFF_CAP.0);
        m.cap_to(Duration::from_millis(1), 5, HANDOFF_CAP);
        for _ in 0..1_000 {
            m.observe(Duration::from_millis(1));
        }
        assert_eq!(m.get(), Duration::from_micros(200), "a fifth of 1 ms");
        m.cap_to(Duration::from_micros(100), 5, HANDOFF_CAP);
        m.observe(Duration::from_millis(1));
        assert_eq!(m.get(), Duration::from_micros(20), "a fifth of 100 us");
        m.cap_to(Duration::from_micros(10), 5, HANDOFF_CAP);
        m.observe(Duration::from_millis(1));
        assert_eq!(m.get(), HANDOFF_CAP.0, "never below the floor");
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
