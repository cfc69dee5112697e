//! The request-level open loop: every request released at its own arrival
//! time, round-robin over the trajectories.

use super::{AdmissionStats, Prep, Ready, reap};
use crate::arrivals::Schedule;
use crate::blocks::BlockState;
use crate::load::release_time;
use crate::options::EngineError;
use crate::state::Shared;
use crate::synth::{Prepared, job, prepare};
use crate::turn::{Turn, drive};
use batchbench_contract::plan::{PlannedRequest, RequestIter, Trajectory};
use batchbench_contract::plugin::WorkloadSource;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// A trajectory whose requests are released one by one.
struct User {
    agent_id: u64,
    id: Arc<str>,
    requests: RequestIter,
    next_index: u64,
}

/// One request on its way out: who, which, when, and its prompt.
struct Release {
    agent_id: u64,
    id: Arc<str>,
    index: u64,
    request: PlannedRequest,
    due: Duration,
    prep: Prep,
}

/// Request-level open loop: every request is due at its own arrival time,
/// whatever is in flight. Requests go out round-robin over the trajectories
/// (users) in source order, each with its own index, identity and body, exactly
/// as the closed loop would send them. A trajectory's requests must be
/// independent: a request that continues a conversation needs its reply.
pub(crate) async fn request_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
) -> AdmissionStats {
    let mut stats = AdmissionStats::default();
    let mut schedule = Schedule::sharded(&sh.opts.load, sh.opts.seed, sh.opts.shard);
    let lookahead = sh.opts.lookahead.max(1);
    // The first round: trajectories prepared before the clock, then the source.
    let mut fresh: VecDeque<Ready> = ready.into();
    let mut rotation: VecDeque<User> = VecDeque::new();
    let mut next_agent = 0u64;
    let mut pipeline: VecDeque<Release> = VecDeque::new();
    let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
    let mut schedule_ended = false;
    loop {
        // Keep the pipeline full: the next requests, their due times, their prompts.
        while pipeline.len() < lookahead && !schedule_ended && stats.fatal.is_none() {
            let next = match fresh.pop_front() {
                Some((t, (first, prepared))) => Some(first_round(
                    &mut rotation,
                    &mut next_agent,
                    sh.opts.shard,
                    t,
                    first,
                    prepared,
                )),
                None if !exhausted => match source.next_trajectory() {
                    Some(Ok(mut t)) => {
                        let first = t.requests.next();
                        Some(first_round(
                            &mut rotation,
                            &mut next_agent,
                            sh.opts.shard,
                            t,
                            first,
                            None,
                        ))
                    }
                    Some(Err(e)) => {
                        stats.fatal.get_or_insert(e.into());
                        sh.cancel.cancel();
                        None
                    }
                    None => {
                        exhausted = true;
                        continue;
                    }
                },
                None => next_in_rotation(&mut rotation),
            };
            let Some(next) = next else { break };
            let Some((agent_id, id, index, request, prepared)) = next else {
                continue; // a trajectory without requests
            };
            if index > 0 && !request.reset_before {
                stats.fatal.get_or_insert(EngineError::Plan(format!(
                    "trajectory {id}, request {index}: continues a conversation, so it cannot be released at a request rate; use a session rate"
                )));
                sh.cancel.cancel();
                break;
            }
            let Some(due) = schedule.next_due() else {
                schedule_ended = true;
                break;
            };
            let prep = match prepared {
                Some(p) => Prep::Done(Some(p)),
                None => {
                    match job(
                        &sh.opts,
                        &id,
                        agent_id,
                        index,
                        None,
                        &request,
                        &BlockState::default(),
                    ) {
                        Ok(j) => {
                            let synth = sh.synth.clone();
                            Prep::Pending(tokio::spawn(async move {
                                prepare(&synth, j).await.map(Some)
                            }))
                        }
                        Err(e) => {
                            stats.fatal.get_or_insert(e);
                            sh.cancel.cancel();
                            break;
                        }
                    }
                }
            };
            pipeline.push_back(Release {
                agent_id,
                id,
                index,
                request,
                due,
                prep,
            });
        }
        let Some(r) = pipeline.pop_front() else {
            break;
        };
        tokio::select! {
            biased;
            () = sh.cancel.cancelled() => {}
            () = sh.deadline.cancelled() => {}
            () = tokio::time::sleep_until(release_time(sh, r.due).into()) => {}
        }
        if sh.cancel.is_cancelled() || sh.deadline.is_cancelled() {
            pipeline.push_front(r);
            break;
        }
        let Some(prepared) = r.prep.ready(&mut stats.fatal, &sh.cancel).await else {
            break;
        };
        let Some(prepared) = prepared else { continue };
        let now = sh.start.elapsed();
        stats.lag.record(now.saturating_sub(r.due));
        stats.arrivals += 1;
        if r.index == 0 {
            sh.collector().metrics.trajectories_started += 1;
        }
        let sh2 = sh.clone();
        tasks.spawn(async move {
            let mut none: RequestIter = Box::new(std::iter::empty());
            let turn = Turn {
                agent_id: r.agent_id,
                slot: r.agent_id,
                id: &r.id,
                index: r.index,
                intended: Some(r.due),
                admission_wait: Duration::ZERO,
            };
            drive(&sh2, turn, r.request, prepared, &mut none).await?;
            Ok(r.agent_id)
        });
        stats.max_observed = stats.max_observed.max(tasks.len() as u64);
        while let Some(done) = tasks.try_join_next() {
            reap(done, &mut stats.fatal, &sh.cancel);
        }
    }
    for r in pipeline {
        if let Prep::Pending(h) = r.prep {
            h.abort();
        }
    }
    while let Some(done) = tasks.join_next().await {
        reap(done, &mut stats.fatal, &sh.cancel);
    }
    stats
}

type Next = Option<(u64, Arc<str>, u64, PlannedRequest, Option<Prepared>)>;

/// A trajectory's first request, in the first round; the trajectory joins the
/// rotation for its later requests.
fn first_round(
    rotation: &mut VecDeque<User>,
    next_agent: &mut u64,
    shard: batchbench_contract::shard::Shard,
    t: Trajectory,
    first: Option<PlannedRequest>,
    prepared: Option<Prepared>,
) -> Next {
    let agent_id = shard.global(*next_agent);
    *next_agent += 1;
    let first = first?;
    rotation.push_back(User {
        agent_id,
        id: t.id.clone(),
        requests: t.requests,
        next_index: 1,
    });
    Some((agent_id, t.id, 0, first, prepared))
}

/// The next request in the rotation (a trajectory leaves it when it runs out).
fn next_in_rotation(rotation: &mut VecDeque<User>) -> Option<Next> {
    while let Some(mut u) = rotation.pop_front() {
        if let Some(r) = u.requests.next() {
            let next = (u.agent_id, u.id.clone(), u.next_index, r, None);
            u.next_index += 1;
            rotation.push_back(u);
            return Some(Some(next));
        }
    }
    None
}
