//! Sub-millisecond send times at a CPU cost that follows the load.
//!
//! The runtime's timer wheel has a resolution of one millisecond, so a request
//! due at 12.3 ms is released at 13 ms or later. A [`Pacer`] keeps a heap of
//! due times and one timer task on the runtime, woken by a kernel timer
//! (`timerfd`, which has no timer slack) through the runtime's own event loop:
//! the thread that wakes is the thread that sends, with no hand-off between
//! threads. The timer is armed shortly before the earliest due time, by the
//! median of the task's own late wake-ups, and the task spins the few
//! microseconds that are left only when it woke early. It then wakes, in one
//! pass, every wait that has fallen due: a burst of arrivals costs one wake-up,
//! not one each. Only when the next due time is nearer than the timer's
//! measured error does the task spin instead of arming it. A waiting task does
//! not spin at all. With nothing to wait for the timer is disarmed, so an idle
//! pacer costs nothing.
//!
//! The spin is capped by the spacing of the waits (a tenth of it): at a high
//! rate the task never spins away the CPU that the sends need, and at a low
//! rate it buys precision with CPU that is spare. A due time already past
//! returns at once, so a schedule that fell behind catches up instead of
//! drifting. Where there is no `timerfd` (not Linux), [`Pacer::start`] fails
//! and the engine waits on the runtime's timer instead.

use futures_util::task::AtomicWaker;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A wait this close to its due time is done: the task releases every wait
/// due within it in the same pass, and a wait does not start for less.
const EARLY: Duration = Duration::from_micros(2);
/// The timer is armed early by the median of the task's late wake-ups, at
/// most a tenth of the spacing of the waits, within these bounds: past them a
/// late wake-up is the machine's doing, and spinning through it would take a
/// core from the senders.
const OVERSLEEP_CAP: (Duration, Duration) = (Duration::from_micros(5), Duration::from_micros(200));
/// The margin before the task has seen any wake-up of its own.
const START_MARGIN: Duration = Duration::from_micros(20);

/// A wait's side shared with the timer task: whether it has fired, and whom
/// to wake.
#[derive(Debug, Default)]
struct Slot {
    fired: AtomicBool,
    waker: AtomicWaker,
}

/// One wait in the heap, in due order.
#[derive(Debug)]
struct Timed {
    due: Instant,
    seq: u64,
    slot: Arc<Slot>,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// A quantile of a latency, tracked without storing samples (stochastic
/// approximation): each sample moves the estimate by a fixed step, up with
/// weight `q` when above it, down with weight `1 - q` when below, so that it
/// settles where a share `q` of the samples lies below. Clamped to `cap`.
#[derive(Debug)]
struct Margin {
    nanos: u64,
    q: f64,
    cap_nanos: u64,
}

/// The step of a [`Margin`]: small against the latencies it tracks, large
/// enough to follow a change within a few hundred samples.
const STEP_NANOS: f64 = 1_000.0;

impl Margin {
    fn new(q: f64, cap: Duration) -> Self {
        Self {
            nanos: START_MARGIN.min(cap).as_nanos() as u64,
            q,
            cap_nanos: cap.as_nanos() as u64,
        }
    }

    /// Sets the cap to `share` of the spacing `gap`, within `bounds`.
    fn cap_to(&mut self, gap: Duration, share: u32, bounds: (Duration, Duration)) {
        self.cap_nanos = (gap / share).clamp(bounds.0, bounds.1).as_nanos() as u64;
        self.nanos = self.nanos.min(self.cap_nanos);
    }

    fn get(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }

    fn observe(&mut self, sample: Duration) {
        let est = self.nanos as f64;
        let next = if sample.as_nanos() as f64 > est {
            est + STEP_NANOS * self.q
        } else {
            est - STEP_NANOS * (1.0 - self.q)
        };
        self.nanos = next.clamp(0.0, self.cap_nanos as f64) as u64;
    }
}

/// The waits, and what the timer is armed for (under one lock, so that a wait
/// earlier than the armed time always re-arms it).
#[derive(Debug)]
struct Queue {
    heap: BinaryHeap<Reverse<Timed>>,
    seq: u64,
    /// The due time the task is working toward (`None`: disarmed, idle).
    armed: Option<Instant>,
    /// When the timer was set to go off (for the oversleep).
    wake_at: Option<Instant>,
    /// How early the timer is armed.
    margin: Duration,
    /// The spacing of due times, a moving average in nanoseconds, and the
    /// last due time (nanoseconds from the epoch): they cap the spin.
    gap_nanos: f64,
    last_due: u64,
    epoch: Instant,
}

/// What the pacer and its timer task share.
#[derive(Debug)]
struct Inner {
    queue: Mutex<Queue>,
    timer: tokio::io::unix::AsyncFd<timerfd::TimerFd>,
}

/// Precise release times, shared by every task of a run.
#[derive(Debug)]
pub struct Pacer {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Pacer {
    /// Starts the timer task on the current runtime; it ends when the pacer is
    /// dropped. Fails where the kernel has no `timerfd`.
    pub fn start() -> std::io::Result<Self> {
        let fd = timerfd::TimerFd::new()?;
        // SAFETY: the timer owns its descriptor, and neither replaces nor
        // closes it while the runtime has it registered.
        #[allow(unsafe_code)]
        let timer = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)?
        };
        let inner = Arc::new(Inner {
            queue: Mutex::new(Queue {
                heap: BinaryHeap::new(),
                seq: 0,
                armed: None,
                wake_at: None,
                margin: START_MARGIN,
                gap_nanos: 0.0,
                last_due: 0,
                epoch: Instant::now(),
            }),
            timer,
        });
        let task = tokio::spawn(timer_task(inner.clone()));
        Ok(Self { inner, task })
    }

    /// Waits until `due`, to within microseconds.
    pub fn until(&self, due: Instant) -> Until<'_> {
        Until {
            pacer: self,
            due,
            slot: None,
        }
    }

    /// Puts a wait in the heap; re-arms the timer when it is due before what
    /// the timer is armed for.
    fn schedule(&self, due: Instant, slot: Arc<Slot>) {
        let mut q = self.inner.lock();
        q.note_spacing(due);
        let seq = q.seq;
        q.seq += 1;
        q.heap.push(Reverse(Timed { due, seq, slot }));
        if q.armed.is_none_or(|t| due < t) {
            let wake = due.checked_sub(q.margin).unwrap_or(due);
            q.armed = Some(due);
            q.wake_at = Some(wake);
            self.inner
                .timer
                .get_ref()
                .arm(wake.saturating_duration_since(Instant::now()));
        }
    }

    /// How many waits the timer holds (tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.inner.lock().heap.len()
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Queue {
    /// Folds the spacing from the previous due time into the average.
    fn note_spacing(&mut self, due: Instant) {
        let at = due.saturating_duration_since(self.epoch).as_nanos() as u64;
        let prev = std::mem::replace(&mut self.last_due, at);
        if prev == 0 || at <= prev {
            return;
        }
        let sample = (at - prev) as f64;
        self.gap_nanos = if self.gap_nanos == 0.0 {
            sample
        } else {
            self.gap_nanos + (sample - self.gap_nanos) / 64.0
        };
    }
}

/// The future of [`Pacer::until`]: registers with the timer on its first
/// poll, and is done when the timer task has fired it (or the time has
/// passed).
#[derive(Debug)]
#[must_use = "a wait does nothing unless awaited"]
pub struct Until<'a> {
    pacer: &'a Pacer,
    due: Instant,
    slot: Option<Arc<Slot>>,
}

impl Future for Until<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        match &this.slot {
            Some(slot) => {
                if slot.fired.load(Ordering::Acquire) {
                    return Poll::Ready(());
                }
                slot.waker.register(cx.waker());
                // Fired between the check and the registration: the wake went
                // to the old waker.
                if slot.fired.load(Ordering::Acquire) {
                    return Poll::Ready(());
                }
                Poll::Pending
            }
            None => {
                if this.due <= Instant::now() + EARLY {
                    return Poll::Ready(());
                }
                let slot = Arc::new(Slot::default());
                slot.waker.register(cx.waker());
                this.pacer.schedule(this.due, slot.clone());
                this.slot = Some(slot);
                Poll::Pending
            }
        }
    }
}

/// What one pass of the timer task found next.
enum Next {
    /// Nothing to wait for: the timer is disarmed.
    Idle,
    /// Waits were woken: let them run before looking again.
    Fired,
    /// The timer is armed.
    Armed,
    /// The next due time is nearer than the timer's error: spin to it.
    Spin(Instant),
}

/// The timer task: fires every wait that is due, then arms the timer toward
/// the next.
async fn timer_task(inner: Arc<Inner>) {
    // How late the task wakes from the timer (its median).
    let mut oversleep = Margin::new(0.5, OVERSLEEP_CAP.1);
    let mut due_now: Vec<Arc<Slot>> = Vec::new();
    loop {
        let next = {
            let mut q = inner.lock();
            let now = Instant::now();
            while q.heap.peek().is_some_and(|Reverse(t)| t.due <= now + EARLY) {
                if let Some(Reverse(t)) = q.heap.pop() {
                    due_now.push(t.slot);
                }
            }
            if q.gap_nanos > 0.0 {
                oversleep.cap_to(Duration::from_nanos(q.gap_nanos as u64), 10, OVERSLEEP_CAP);
            }
            q.margin = oversleep.get();
            match q.heap.peek().map(|Reverse(t)| t.due) {
                None => {
                    q.armed = None;
                    q.wake_at = None;
                    Next::Idle
                }
                // Far enough to sleep: the timer is armed now, and the waits
                // just woken run while the task sleeps (a pass of its own
                // first would cost the runtime a look at its events).
                Some(next) if next > now + q.margin + EARLY => {
                    let wake = next - q.margin;
                    q.armed = Some(next);
                    q.wake_at = Some(wake);
                    inner.timer.get_ref().arm(wake - now);
                    Next::Armed
                }
                // Near: the waits just woken send before the task spins.
                Some(_) if !due_now.is_empty() => Next::Fired,
                Some(next) => {
                    q.armed = Some(next);
                    q.wake_at = None;
                    Next::Spin(next)
                }
            }
        };
        for slot in due_now.drain(..) {
            slot.fired.store(true, Ordering::Release);
            slot.waker.wake();
        }
        match next {
            Next::Fired => tokio::task::yield_now().await,
            Next::Spin(next) => {
                while Instant::now() + EARLY < next {
                    std::hint::spin_loop();
                }
            }
            Next::Idle | Next::Armed => {
                // Until the timer goes off: a wait that comes in earlier
                // re-arms it itself, so a stale readiness (nothing expired)
                // needs no new pass.
                //
                // The expiration is not read: arming the timer again resets
                // its count, and the runtime hears of each expiration as an
                // event of its own (edge-triggered), so a wake-up costs no
                // read, and none that finds nothing. A readiness left from
                // before (the timer re-armed since it went off) makes one
                // pass that finds nothing due and sleeps again.
                let Ok(mut ready) = inner.timer.readable().await else {
                    return;
                };
                ready.clear_ready();
                let woke = Instant::now();
                let wake_at = inner.lock().wake_at;
                if let Some(at) = wake_at
                    && woke >= at
                {
                    oversleep.observe(woke - at);
                }
            }
        }
    }
}

/// The kernel timer the task waits on.
#[cfg(target_os = "linux")]
mod timerfd {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::time::Duration;

    /// A one-shot `CLOCK_MONOTONIC` timerfd, non-blocking.
    #[derive(Debug)]
    pub(super) struct TimerFd(OwnedFd);

    #[allow(unsafe_code)]
    impl TimerFd {
        pub(super) fn new() -> std::io::Result<Self> {
            // SAFETY: timerfd_create takes no pointers; a negative return is an
            // error, anything else a new descriptor that we alone own.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor owned by nothing else.
            Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        /// Goes off once, `after` from now (at once for zero).
        pub(super) fn arm(&self, after: Duration) {
            // Zero would disarm it: a nanosecond is "now".
            let after = after.max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs() as libc::time_t,
                    tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
                },
            };
            // SAFETY: the descriptor is ours and open; `spec` outlives the
            // call; a null old value is allowed. It fails only for a bad
            // descriptor or value, neither of which this can pass.
            unsafe {
                libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut());
            }
        }
    }

    impl AsRawFd for TimerFd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }
    }
}

/// Elsewhere there is no timerfd: [`Pacer::start`] fails, and the engine
/// waits on the runtime's timer.
#[cfg(not(target_os = "linux"))]
mod timerfd {
    use std::os::fd::{AsRawFd, RawFd};
    use std::time::Duration;

    #[derive(Debug)]
    pub(super) struct TimerFd;

    impl TimerFd {
        pub(super) fn new() -> std::io::Result<Self> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "precise timers need Linux's timerfd",
            ))
        }
        pub(super) fn arm(&self, _: Duration) {}
    }

    impl AsRawFd for TimerFd {
        fn as_raw_fd(&self) -> RawFd {
            -1
        }
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
            assert!(Instant::now() + EARLY >= due);
        }
        // A due time already past: done on the first poll, with no wait handed
        // to the thread (a schedule that fell behind catches up at once).
        let past = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        assert!(
            p.until(past).now_or_never().is_some(),
            "a due time already past must not wait"
        );
        assert_eq!(
            p.queued(),
            0,
            "a due time already past must not go to the thread"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fires_waits_in_due_order_whatever_order_they_came_in() {
        // Six waits registered in an order unlike their due times, all well
        // ahead of the first: each records when it was released.
        let p = Arc::new(Pacer::start().unwrap_or_else(|e| panic!("{e}")));
        let base = Instant::now() + Duration::from_millis(20);
        let mut tasks = Vec::new();
        for k in [7u64, 1, 4, 0, 9, 3] {
            let p = p.clone();
            let due = base + Duration::from_micros(700 * k);
            tasks.push(tokio::spawn(async move {
                p.until(due).await;
                (due, Instant::now())
            }));
        }
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap_or_else(|e| panic!("{e}")));
        }
        for (due, at) in &got {
            assert!(*at + EARLY >= *due, "released before its time");
        }
        got.sort_by_key(|&(due, _)| due);
        // Each release came after the previous one's due time: none was fired
        // ahead of an earlier wait.
        for pair in got.windows(2) {
            assert!(pair[1].1 + EARLY >= pair[0].0, "out of due order: {got:?}");
        }
    }

    #[tokio::test]
    async fn an_earlier_wait_wakes_a_thread_that_sleeps_toward_a_later_one() {
        let p = Pacer::start().unwrap_or_else(|e| panic!("{e}"));
        // The thread sleeps toward a wait ten seconds away.
        let far = p.until(Instant::now() + Duration::from_secs(10));
        let mut far = Box::pin(far);
        assert!((&mut far).now_or_never().is_none());
        // A wait 2 ms away must not wait for it: it is done long before.
        let t0 = Instant::now();
        p.until(t0 + Duration::from_millis(2)).await;
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(p.queued(), 1, "the far wait is still held");
    }

    #[tokio::test]
    async fn an_idle_pacer_is_disarmed() {
        // Once its waits are done, the timer is disarmed and the task waits
        // on it without a timeout: nothing is armed, nothing is held.
        let p = Pacer::start().unwrap_or_else(|e| panic!("{e}"));
        p.until(Instant::now() + Duration::from_millis(1)).await;
        // The timer task disarms on its next pass, once it runs: wait for
        // that, not for a time.
        let give_up = Instant::now() + Duration::from_secs(10);
        while p.inner.lock().armed.is_some() && Instant::now() < give_up {
            tokio::task::yield_now().await;
        }
        let q = p.inner.lock();
        assert_eq!(q.heap.len(), 0);
        assert_eq!(q.armed, None, "an idle pacer must not be armed");
    }

    #[test]
    fn the_cap_follows_the_spacing_of_the_waits_within_its_bounds() {
        let mut m = Margin::new(0.5, OVERSLEEP_CAP.1);
        m.cap_to(Duration::from_millis(1), 10, OVERSLEEP_CAP);
        for _ in 0..1_000 {
            m.observe(Duration::from_millis(1));
        }
        assert_eq!(m.get(), Duration::from_micros(100), "a tenth of 1 ms");
        m.cap_to(Duration::from_micros(100), 10, OVERSLEEP_CAP);
        assert_eq!(m.get(), Duration::from_micros(10), "a tenth of 100 us");
        m.cap_to(Duration::from_micros(10), 10, OVERSLEEP_CAP);
        assert_eq!(m.get(), OVERSLEEP_CAP.0, "never below the floor");
    }

    #[test]
    fn the_margin_settles_on_its_quantile_and_stays_bounded() {
        let cap = Duration::from_micros(100);
        let mut m = Margin::new(0.9, cap);
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
