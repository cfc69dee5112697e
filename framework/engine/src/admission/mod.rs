//! Admission: which trajectory runs when, in which routing slot.
//!
//! The closed loop keeps a fixed number of trajectories active; the open loop
//! admits each at its start offset or session arrival, up to a cap; the
//! request-level open loop (`requests`) releases every request at its own
//! arrival time. Each admitted trajectory runs in the turn driver.
//!
//! Beside the loops: the turn driver they run each trajectory in (`turn`),
//! and the load model's rules every request passes (`load`: release, send,
//! the concurrency cap, warmup and the deadline).

mod lanes;
pub(crate) mod load;
mod requests;
mod sessions;
pub(crate) mod turn;

use crate::admission::turn::run_trajectory;
use crate::options::EngineError;
use crate::state::Shared;
use crate::synthesis::synth::{NextPrep, Prepared, Synth, first_job};
use batchbench_contract::plan::{PlannedRequest, Trajectory};
use batchbench_contract::plugin::WorkloadSource;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The session loop hands every session due within this window of the next
/// one's release to its task at once: it wakes about once per window, not
/// once per session.
const RELEASE_WINDOW: Duration = Duration::from_millis(2);

pub(crate) use requests::request_loop;

/// What admission observed.
#[derive(Debug, Default)]
pub(crate) struct AdmissionStats {
    pub(crate) max_observed: u64,
    pub(crate) fatal: Option<EngineError>,
    pub(crate) late: u64,
    pub(crate) lag: crate::measurement::metrics::Latency,
    /// Arrivals released by a rate schedule.
    pub(crate) arrivals: u64,
}

/// Records a finished trajectory task; returns its freed slot.
fn reap(
    done: Result<Result<u64, EngineError>, tokio::task::JoinError>,
    fatal: &mut Option<EngineError>,
    cancel: &CancellationToken,
) -> Option<u64> {
    match done {
        Ok(Ok(slot)) => Some(slot),
        Ok(Err(e)) => {
            fatal.get_or_insert(e);
            cancel.cancel();
            None
        }
        Err(e) => {
            fatal.get_or_insert(EngineError::Internal(format!(
                "a trajectory task failed: {e}"
            )));
            cancel.cancel();
            None
        }
    }
}

pub(crate) type Ready = (Trajectory, (Option<PlannedRequest>, Option<Prepared>));

/// A first prompt made before the clock, or being made on the pool.
enum Prep {
    Done(Option<Prepared>),
    /// Made by a task, or in place when needed if that costs less.
    Next(NextPrep),
}

impl Prep {
    /// The prompt, once made; `None` when making it failed, which is then the
    /// run's fatal error and stops the run.
    async fn ready(
        self,
        synth: &Arc<Synth>,
        fatal: &mut Option<EngineError>,
        cancel: &CancellationToken,
    ) -> Option<Option<Prepared>> {
        let failed = match self {
            Self::Done(p) => return Some(p),
            Self::Next(p) => match p.finish(synth).await {
                Ok(p) => return Some(Some(p)),
                Err(e) => e,
            },
        };
        fatal.get_or_insert(failed);
        cancel.cancel();
        None
    }
}

/// Closed-loop admission: the initial trajectories take slots `0..n`; when one
/// ends, the next trajectory of the source (FIFO, in source order) prepares its
/// first prompt and inherits the freed slot. Start offsets are ignored.
pub(crate) async fn closed_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
) -> AdmissionStats {
    let mut stats = AdmissionStats::default();
    let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
    let mut next_agent = 0u64;
    let shard = sh.opts.shard;
    for (t, (first, prep)) in ready {
        tasks.spawn(run_trajectory(
            sh.clone(),
            shard.global(next_agent),
            shard.global(next_agent),
            t,
            first,
            prep,
            None,
        ));
        next_agent += 1;
    }
    stats.max_observed = tasks.len() as u64;
    while let Some(done) = tasks.join_next().await {
        let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) else {
            continue;
        };
        if exhausted || sh.cancel.is_cancelled() || sh.past_deadline() {
            continue;
        }
        match source.next_trajectory() {
            Some(Ok(mut t)) => {
                let first = t.requests.next();
                tasks.spawn(run_trajectory(
                    sh.clone(),
                    shard.global(next_agent),
                    slot,
                    t,
                    first,
                    None,
                    None,
                ));
                next_agent += 1;
                stats.max_observed = stats.max_observed.max(tasks.len() as u64);
            }
            Some(Err(e)) => {
                stats.fatal.get_or_insert(e.into());
                sh.cancel.cancel();
            }
            None => exhausted = true,
        }
    }
    stats
}

/// Open-loop admission: each trajectory at `start_after_ms / time_scale` from the
/// clock start, whatever is active; `cap` active at most (a trajectory that waits
/// for a slot is a late admission). First prompts are prepared ahead through a
/// bounded lookahead; the earliest were prepared before the clock started. Routing
/// slots are the lowest free ones, so equal start times are admitted, and slotted,
/// in manifest order.
pub(crate) async fn open_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
    cap: usize,
) -> AdmissionStats {
    let scale = sh.opts.time_scale.max(1e-9);
    // A session rate replaces recorded start offsets with arrivals.
    let mut schedule = sh.opts.load.is_open().then(|| {
        crate::schedule::arrivals::Schedule::sharded(&sh.opts.load, sh.opts.seed, sh.opts.shard)
    });
    // Session arrivals the schedule made due (each with its trajectory):
    // those not admitted are dropped.
    let mut due_count = 0u64;
    let mut stopped_by_deadline = false;
    let mut due_of = |t: &Trajectory| match schedule.as_mut() {
        Some(s) => {
            let due = s.next_due();
            due_count += u64::from(due.is_some());
            due
        }
        None => Some(Duration::from_secs_f64(
            t.start_after_ms.unwrap_or(0) as f64 / 1000.0 / scale,
        )),
    };
    let mut queue: std::collections::VecDeque<(
        Trajectory,
        Option<PlannedRequest>,
        Prep,
        Duration,
    )> = std::collections::VecDeque::new();
    for (t, (first, p)) in ready {
        match due_of(&t) {
            Some(d) => queue.push_back((t, first, Prep::Done(p), d)),
            None => exhausted = true,
        }
    }
    let mut stats = AdmissionStats::default();
    let mut lanes = sessions::SessionLanes::start(sh);
    let mut free: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut next_slot = 0u64;
    let mut next_agent = 0u64;
    let lookahead = sh.opts.lookahead.max(1);
    let mut horizon = sh.start;
    let cap = u64::try_from(cap).unwrap_or(u64::MAX);
    loop {
        // Keep the lookahead full: prepare upcoming first prompts on the pool.
        while !exhausted && queue.len() < lookahead && stats.fatal.is_none() {
            match source.next_trajectory() {
                Some(Ok(mut t)) => {
                    let Some(due) = due_of(&t) else {
                        exhausted = true;
                        break;
                    };
                    let first = t.requests.next();
                    let job = first.as_ref().map(|r| {
                        let agent = sh.opts.shard.global(next_agent + queue.len() as u64);
                        first_job(&sh.opts, &t.id, agent, r)
                    });
                    let prep = match job {
                        Some(Ok(j)) => Prep::Next(NextPrep::start(&sh.synth, j)),
                        Some(Err(e)) => {
                            stats.fatal.get_or_insert(e);
                            sh.cancel.cancel();
                            break;
                        }
                        None => Prep::Done(None),
                    };
                    queue.push_back((t, first, prep, due));
                }
                Some(Err(e)) => {
                    stats.fatal.get_or_insert(e.into());
                    sh.cancel.cancel();
                }
                None => exhausted = true,
            }
        }
        let Some((t, first, prep, scheduled)) = queue.pop_front() else {
            break;
        };
        if sh.cancel.is_cancelled() || sh.past_deadline() {
            stopped_by_deadline = sh.past_deadline();
            break;
        }
        // Wait until shortly before the offset, the sessions made so far
        // handed to the lanes: the first request waits for its exact time
        // itself, with its body made, just before it is sent.
        let release = load::release_time(sh, scheduled);
        if release > horizon {
            lanes.lanes.flush();
            tokio::select! {
                biased;
                () = sh.cancel.cancelled() => {}
                () = sh.deadline.cancelled() => {}
                () = tokio::time::sleep_until(release.into()) => {
                    // Every session due within the window goes now: the loop
                    // wakes about once per window, whatever the rate.
                    horizon = release.max(std::time::Instant::now()) + RELEASE_WINDOW;
                }
            }
        } else if lanes.lanes.pending >= lanes::HAND_OVER_MOST {
            // Behind its schedule the loop never sleeps: it hands over what
            // it has and lets the lanes run.
            lanes.lanes.flush();
            tokio::task::yield_now().await;
        }
        if sh.past_deadline() {
            stopped_by_deadline = true;
            break;
        }
        // The cap delays admission; the wait is the session's queue, not lag.
        // Released early, a trajectory is late only if the cap held it past its
        // offset.
        let mut held = false;
        while lanes.active() >= cap && !sh.cancel.is_cancelled() && !sh.deadline.is_cancelled() {
            held = true;
            tokio::select! {
                () = sh.cancel.cancelled() => {}
                () = sh.deadline.cancelled() => {}
                () = lanes.one_ended() => {}
            }
        }
        // Held by the cap: everything since it was due was the cap's queue (a
        // session behind another held one waits its turn behind it too).
        let cap_wait = if held {
            sh.start.elapsed().saturating_sub(scheduled)
        } else {
            Duration::ZERO
        };
        let late = !cap_wait.is_zero();
        if sh.cancel.is_cancelled() || sh.past_deadline() {
            stopped_by_deadline = sh.past_deadline();
            break;
        }
        // A prompt still being made on the pool (images, audio, a long
        // text) may keep the loop a while: the sessions due before it go
        // first.
        if matches!(&prep, Prep::Next(p) if p.still_running()) {
            lanes.lanes.flush();
        }
        let Some(prepared) = prep.ready(&sh.synth, &mut stats.fatal, &sh.cancel).await else {
            break;
        };
        let now = sh.start.elapsed();
        stats.lag.record(now.saturating_sub(scheduled));
        stats.late += u64::from(late);
        stats.arrivals += 1;
        lanes.take_freed(&mut free);
        let slot = free.pop_first().unwrap_or_else(|| {
            next_slot += 1;
            sh.opts.shard.global(next_slot - 1)
        });
        lanes.push(Box::pin(run_trajectory(
            sh.clone(),
            sh.opts.shard.global(next_agent),
            slot,
            t,
            first,
            prepared,
            Some((scheduled, cap_wait)),
        )));
        next_agent += 1;
        stats.max_observed = stats.max_observed.max(lanes.active());
    }
    // Abandon what was never admitted (after Ctrl+C, a fatal error or the deadline).
    for (_, _, p, _) in queue {
        if let Prep::Next(p) = p {
            p.cancel();
        }
    }
    if let Some(e) = lanes.finish().await {
        stats.fatal.get_or_insert(e);
    }
    // Every session due before the deadline and not admitted by it is
    // dropped: those made and not admitted, and, where the deadline stopped
    // the loop, the rest of the schedule.
    if let Some(s) = schedule.as_mut()
        && reached_deadline(sh)
    {
        while stopped_by_deadline && s.next_due().is_some() {
            due_count += 1;
        }
        sh.collector().metrics.dropped_arrivals += due_count.saturating_sub(stats.arrivals);
    }
    stats
}

/// Whether the run ended at its deadline's time (not interrupted, not ended
/// early by its figures): then the arrivals due before it that were not sent
/// by it are dropped, and counted.
pub(crate) fn reached_deadline(sh: &Shared) -> bool {
    sh.deadline_at
        .is_some_and(|d| std::time::Instant::now() >= d)
        && !sh.interrupt.is_cancelled()
        && sh.converged.get().is_none()
}

#[cfg(test)]
mod tests {
    //! Admission against a loopback server that answers every request after a
    //! fixed delay: which trajectory gets which slot, when, and what is counted.

    use super::*;
    use crate::measurement::metrics::Summary;
    use crate::run::{Admission, Engine, EngineOptions};
    use crate::transport::{TargetConfig, Transport};
    use batchbench_contract::plugin::{
        BodyWriter, CodecError, EncodeRequest, PluginError, Reply, Reporter, RequestCodec,
        StreamDecoder, TrajectoryRecord, Usage,
    };
    use std::sync::Mutex;
    use tokio::io::AsyncWriteExt;

    /// Serves `HTTP/1.1 200` with an empty JSON object after `delay`, on
    /// keep-alive connections; returns the URL.
    async fn server(delay: Duration) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let url = format!(
            "http://{}/",
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = l.accept().await {
                let _ = sock.set_nodelay(true);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        if crate::test_http::read_request(&mut sock, &mut buf)
                            .await
                            .is_none()
                        {
                            return;
                        }
                        tokio::time::sleep(delay).await;
                        let body = b"{}";
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if sock.write_all(head.as_bytes()).await.is_err()
                            || sock.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    /// Writes `{}` and reads every response as one token of usage.
    struct Echo;

    impl RequestCodec for Echo {
        fn encode(&self, _: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
            out.write(b"{}");
            Ok(())
        }
        fn decode(&self, _: &[u8]) -> Result<Reply, CodecError> {
            Ok(Reply {
                usage: Some(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 1,
                    cached_tokens: None,
                    reasoning_tokens: None,
                    items: None,
                }),
                ..Reply::default()
            })
        }
        fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
            unreachable!("these tests do not stream")
        }
    }

    /// Trajectories of one fixed-prompt request each, at the given offsets.
    struct Source(std::vec::IntoIter<Option<u64>>, u64);

    impl WorkloadSource for Source {
        fn info(&self) -> batchbench_contract::plugin::WorkloadInfo {
            batchbench_contract::plugin::WorkloadInfo::default()
        }
        fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
            let at = self.0.next()?;
            self.1 += 1;
            let mut t =
                Trajectory::from_vec(format!("t{}", self.1 - 1), vec![PlannedRequest::default()]);
            t.start_after_ms = at;
            Some(Ok(t))
        }
        fn needs_tokenizer(&self) -> bool {
            false
        }
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<TrajectoryRecord>>>);

    impl Reporter for Seen {
        fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(rec.clone());
            Ok(())
        }
    }

    /// A transport to the test server at `url`, without retries.
    fn transport(url: String) -> Transport {
        Transport::new(TargetConfig {
            content_type: "application/json".into(),
            url,
            api_key: None,
            api_key_header: None,
            timeout: Duration::from_secs(10),
            max_retries: 0,
            retry_delay: Duration::ZERO,
            headers: Vec::new(),
            pool_size: 8,
            verbose: false,
            tls: Default::default(),
            max_response_bytes: crate::transport::MAX_RESPONSE_BYTES,
            request_id_header: None,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Counts the live views it is handed; `.1`: whether it wants them.
    #[derive(Clone, Default)]
    struct Views(Arc<Mutex<u32>>, bool);

    impl Reporter for Views {
        fn wants_live(&self) -> bool {
            self.1
        }
        fn on_live(
            &mut self,
            _: &batchbench_contract::plugin::LiveStats,
        ) -> Result<(), PluginError> {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn live_views_are_made_only_for_a_reporter_that_wants_them() {
        let url = server(Duration::ZERO).await;
        for wants in [false, true] {
            let transport = transport(url.clone());
            let views = Views(Arc::default(), wants);
            let opts = EngineOptions {
                admission: Admission::OpenLoop,
                max_active: usize::MAX,
                ..EngineOptions::default()
            };
            // Two requests 800 ms apart: a run of three live views' periods.
            Engine::new(opts, transport, Arc::new(Echo))
                .reporter(Box::new(views.clone()))
                .run(Box::new(Source(vec![Some(0), Some(800)].into_iter(), 0)))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let n = *views
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if wants {
                assert!(n >= 2, "views while the run went, and the last: {n}");
            } else {
                assert_eq!(n, 1, "only the last view, at the end");
            }
        }
    }

    async fn run(
        offsets: Vec<Option<u64>>,
        admission: Admission,
        max_active: usize,
        delay_ms: u64,
    ) -> (Summary, Vec<TrajectoryRecord>) {
        let url = server(Duration::from_millis(delay_ms)).await;
        let transport = transport(url);
        let seen = Seen::default();
        let opts = EngineOptions {
            max_active,
            admission,
            ..EngineOptions::default()
        };
        let out = Engine::new(opts, transport, Arc::new(Echo))
            .reporter(Box::new(seen.clone()))
            .run(Box::new(Source(offsets.into_iter(), 0)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut recs = seen
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        recs.sort_by_key(|r| r.agent_id);
        (out.summary, recs)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_loop_fills_slots_in_source_order_and_reuses_freed_ones() {
        let (s, recs) = run(vec![None; 5], Admission::ClosedLoop, 2, 30).await;
        assert_eq!(s.successful_requests, 5);
        assert_eq!(s.max_active_observed, 2);
        assert_eq!(
            s.late_admissions, 0,
            "closed loop has no schedule to be late for"
        );
        // Agent ids follow source order; the first two take slots 0 and 1 and
        // every later one inherits a freed slot.
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.agent_id, i as u64);
            assert_eq!(r.trajectory_id, format!("t{i}"));
            assert!(r.routing_slot < 2, "{r:?}");
            assert!(r.completed);
        }
        assert_eq!((recs[0].routing_slot, recs[1].routing_slot), (0, 1));
        assert!(
            recs[2].admitted_at_seconds
                >= recs[0].finished_at_seconds.min(recs[1].finished_at_seconds) - 1e-3
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_admits_on_schedule_and_counts_what_the_cap_delays() {
        // Uncapped: each trajectory at its offset, whatever is active.
        let (s, recs) = run(
            vec![Some(0), Some(40), Some(80)],
            Admission::OpenLoop,
            usize::MAX,
            200,
        )
        .await;
        assert_eq!(s.successful_requests, 3);
        assert_eq!(s.late_admissions, 0);
        assert_eq!(
            s.max_active_observed, 3,
            "all three overlap: each request takes 200 ms"
        );
        for (r, at) in recs.iter().zip([0.0, 0.04, 0.08]) {
            assert!((r.scheduled_at_seconds - at).abs() < 1e-9, "{r:?}");
            assert!(
                r.admitted_at_seconds >= at,
                "never before its offset: {r:?}"
            );
        }
        // Capped at one: the later two wait for the slot and are counted late.
        let (s, recs) = run(
            vec![Some(0), Some(40), Some(80)],
            Admission::OpenLoop,
            1,
            200,
        )
        .await;
        assert_eq!(s.successful_requests, 3);
        assert_eq!(s.late_admissions, 2);
        assert_eq!(s.max_active_observed, 1);
        assert!(recs[1].queue_wait_seconds > 0.1, "{:?}", recs[1]);
        assert!(recs.iter().all(|r| r.routing_slot == 0), "one slot, reused");
    }
}
