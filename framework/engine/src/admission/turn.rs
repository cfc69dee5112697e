//! The turn driver: one trajectory's requests, turn after turn.
//!
//! Data flow of one turn: plan → token synthesis (prefetched while the previous
//! request is in flight; on the proven path plain text is made in place, anything
//! else on a bounded pool off the async threads) → routers
//! decorate (headers, body fields) → codec encodes the live conversation with
//! those fields → HTTP → codec decodes → metrics and reporters → think time →
//! next turn.

use crate::admission::load;
use crate::options::EngineError;
use crate::state::Shared;
use crate::synthesis::blocks::BlockState;
use crate::synthesis::synth::{NextPrep, Prepared, apply, first_job, job, prepare};
use crate::transport::Outcome;
use batchbench_contract::conversation::Conversation;
use batchbench_contract::plan::{PlannedRequest, Trajectory};
use batchbench_contract::plugin::{
    BodyWriter, EncodeRequest, FailureKind, Reply, RequestIds, RequestRecord, RouteContext,
    RouteExtras, SendTiming, TrajectoryRecord,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn sleep_scaled(sh: &Shared, ms: u64) -> Duration {
    if ms == 0 {
        return Duration::ZERO;
    }
    let d = Duration::from_secs_f64(ms as f64 / 1000.0 / sh.opts.time_scale.max(1e-9));
    tokio::select! {
        () = sh.cancel.cancelled() => Duration::ZERO,
        () = sh.deadline.cancelled() => Duration::ZERO,
        () = tokio::time::sleep(d) => d,
    }
}

/// Runs one trajectory; returns its routing slot when it ends.
pub(crate) async fn run_trajectory(
    sh: Arc<Shared>,
    agent_id: u64,
    slot: u64,
    traj: Trajectory,
    first: Option<PlannedRequest>,
    first_prepared: Option<Prepared>,
    scheduled: Option<(Duration, Duration)>,
) -> Result<u64, EngineError> {
    // When the trajectory was due, and how long the admission cap held it.
    let (scheduled, admission_wait) = match scheduled {
        Some((due, wait)) => (Some(due), wait),
        None => (None, Duration::ZERO),
    };
    let id = traj.id.clone();
    let mut reqs = traj.requests;
    let eligible = scheduled.unwrap_or_else(|| sh.start.elapsed());
    let mut completed = true;
    let mut run_started = None;
    if let Some(first) = first {
        let prepared = match first_prepared {
            Some(p) => p,
            None => prepare(&sh.synth, first_job(&sh.opts, &id, agent_id, &first)?).await?,
        };
        // Handed over ahead of its offset, it starts at the offset (the first
        // request waits for it) or, when held back, now.
        run_started = Some(sh.start.elapsed().max(eligible));
        sh.collector().metrics.trajectories_started += 1;
        let turn = Turn {
            agent_id,
            slot,
            id: &id,
            index: 0,
            intended: scheduled,
            admission_wait,
            on_release: None,
        };
        completed = drive(&sh, turn, first, prepared, &mut reqs).await?;
    }
    let admitted = run_started.unwrap_or(eligible);
    let finished = sh.start.elapsed();
    let rec = TrajectoryRecord {
        agent_id,
        trajectory_id: id.to_string(),
        routing_slot: slot,
        dp_rank: sh.routers.iter().find_map(|r| r.dp_rank(slot)),
        scheduled_at_seconds: eligible.as_secs_f64(),
        admitted_at_seconds: admitted.as_secs_f64(),
        queue_wait_seconds: admitted.saturating_sub(eligible).as_secs_f64(),
        finished_at_seconds: finished.as_secs_f64(),
        runtime_seconds: finished.saturating_sub(admitted).as_secs_f64(),
        completed: completed && !sh.cancel.is_cancelled(),
    };
    let mut c = sh.collector();
    c.metrics.record_trajectory(&rec);
    c.notify(|r| r.on_trajectory(&rec));
    Ok(slot)
}

/// Where a run of turns starts: who sends it, and when its first request is due.
pub(crate) struct Turn<'a> {
    pub(crate) agent_id: u64,
    pub(crate) slot: u64,
    pub(crate) id: &'a Arc<str>,
    /// The first request's index in its trajectory.
    pub(crate) index: u64,
    /// The first request's intended send time (absent: when it is ready).
    pub(crate) intended: Option<Duration>,
    /// How long the admission cap held the trajectory back before its first
    /// request (part of that request's queue wait).
    pub(crate) admission_wait: Duration,
    /// Told how late the first request's arrival was released, when it is
    /// (an arrival the run stops before is never released).
    pub(crate) on_release: Option<&'a (dyn Fn(Duration) + Sync)>,
}

/// The turn loop. Returns whether every request succeeded.
pub(crate) async fn drive(
    sh: &Arc<Shared>,
    turn: Turn<'_>,
    first: PlannedRequest,
    first_prepared: Prepared,
    reqs: &mut batchbench_contract::plan::RequestIter,
) -> Result<bool, EngineError> {
    let Turn {
        agent_id,
        slot,
        id,
        mut index,
        mut intended,
        mut admission_wait,
        mut on_release,
    } = turn;
    let mut conv = Conversation::default();
    let mut cur = first;
    let mut prepared = first_prepared;
    let mut last_reply: Option<Box<Reply>> = None;
    // What of the previous reply this request sends back.
    let mut sent_back: Option<crate::synthesis::prefix::SentBack> = None;
    // The tokens of this trajectory a server holds after its previous
    // request: its prompt, and its reply where it goes back whole.
    let mut prev_held: Option<u64> = None;
    let mut all_ok = true;
    let mut state = BlockState::default();
    let mut shape = crate::synthesis::prefix::Shape::new(sh.opts.cache_block_tokens);
    let mut prev: Option<PlannedRequest> = None;
    let overheads = crate::synthesis::prefix::Overheads {
        initial: sh.opts.initial_overhead_tokens,
        turn: sh.opts.turn_overhead_tokens,
    };
    let rank = sh.routers.iter().find_map(|r| r.dp_rank(slot));
    loop {
        if sh.cancel.is_cancelled() || sh.past_deadline() {
            return Ok(false);
        }
        // Due now unless the schedule said when (then it is an arrival).
        let scheduled = intended.take();
        let arrival = scheduled.is_some();
        let eligible = scheduled.unwrap_or_else(|| sh.start.elapsed());
        let fresh = matches!(
            prepared,
            Prepared::Fresh(..) | Prepared::Raw(_) | Prepared::Blocks { fresh: true, .. }
        );
        let raw = match &prepared {
            Prepared::Raw(b) => Some(b.clone()),
            _ => None,
        };
        if fresh {
            prev_held = None;
        }
        shape.advance(
            agent_id,
            index,
            prev.as_ref(),
            &cur,
            sent_back.take(),
            overheads,
        );
        let fallbacks = apply(
            &mut conv,
            prepared,
            last_reply.take().map(|r| *r),
            agent_id,
            index,
            &mut state,
        );
        // A run of several models: a conversation goes to the model picked
        // when it opened (see `job`, which made its text with that model's
        // tokenizer).
        let model = match sh.opts.models.as_deref() {
            Some(m) => {
                if fresh {
                    state.model = m
                        .pick(sh.opts.seed, (agent_id, id), index, cur.model.as_deref())
                        .map_err(EngineError::Plan)?;
                }
                Some((m, state.model))
            }
            None => None,
        };
        // The images this request carries (the conversation's, resent each turn).
        let (images, image_bytes) = if sh.opts.images.is_some() {
            conv.messages
                .iter()
                .flat_map(|m| &m.images)
                .fold((0, 0), |(n, b), i| (n + 1, b + i.bytes as u64))
        } else {
            (0, 0)
        };
        let audio_seconds: f64 = if sh.opts.audio.is_some() {
            conv.messages
                .iter()
                .flat_map(|m| &m.audio)
                .map(|a| a.seconds)
                .sum()
        } else {
            0.0
        };
        let ctx = RouteContext {
            seed: sh.opts.seed,
            agent_id,
            routing_slot: slot,
            trajectory_id: id,
            request_index: index,
        };
        let mut extras = RouteExtras::default();
        for r in &sh.routers {
            r.decorate(&ctx, &mut extras)?;
        }
        // The answer format this request asks for, where the run asks for one.
        let format = sh.opts.structured.as_ref().map(|s| {
            let k = s.pick(agent_id, index);
            extras.body_fields.extend(s.fields(k).iter().cloned());
            k
        });
        let stream = cur.stream.unwrap_or(sh.opts.stream);
        let model_field = match model {
            Some((m, k)) => {
                let (name, fields) = m.wire(k);
                extras.body_fields.extend(fields.iter().cloned());
                // A verbatim body keeps its own `model` over the run's: the
                // mix's pick replaces it, as the run asked for the mix.
                if raw.as_ref().is_some_and(|b| b.0.contains_key("model")) {
                    extras
                        .body_fields
                        .push(("model".to_owned(), serde_json::Value::from(name)));
                }
                name
            }
            None => &sh.opts.model,
        };
        let mut body = BodyWriter::default();
        sh.codec
            .encode(
                &EncodeRequest {
                    model: model_field,
                    conversation: &conv,
                    // A structured answer ends where its JSON does: the
                    // output count is its cap alone.
                    output: match (&sh.opts.structured, cur.output_bounds()) {
                        (Some(_), Some((_, max))) => Some((0, max)),
                        (_, bounds) => bounds,
                    },
                    stream,
                    extra_fields: &extras.body_fields,
                    raw_body: raw.as_ref().map(|b| &*b.0),
                },
                &mut body,
            )
            .map_err(|e| {
                EngineError::Internal(format!(
                    "trajectory {id}, request {index}: cannot encode: {e}"
                ))
            })?;
        let payload = body.finish();

        // Prepare the next turn's text while this request is in flight.
        let next = reqs.next();
        let next_prep = match &next {
            Some(n) => {
                let next_job = job(&sh.opts, id, agent_id, index + 1, Some(&cur), n, &state)?;
                Some(NextPrep::start(&sh.synth, next_job))
            }
            None => None,
        };

        // An arrival is handed over shortly before it is due: wait for its
        // exact time here, with the body made, so that only the send follows.
        if arrival && !load::until_due(sh, eligible).await {
            if let Some(h) = next_prep {
                h.cancel();
            }
            return Ok(false);
        }
        if let Some(released) = on_release.take() {
            released(sh.start.elapsed().saturating_sub(eligible));
        }
        let (permit, queue_wait) = match load::slot(sh, arrival).await {
            Some((p, wait)) => (p, wait + std::mem::take(&mut admission_wait)),
            None => {
                if let Some(h) = next_prep {
                    h.cancel();
                }
                return Ok(false);
            }
        };
        let warmup = load::is_warmup(sh, eligible);
        // Against a fleet, the routing policy picks the endpoint now, from
        // the load as it stands when the request goes out; each endpoint's
        // prefix-cache estimate is its own.
        let endpoint = sh.choose_endpoint(ctx, shape.hashes(), model.map(|(_, k)| k))?;
        let rank = endpoint.map_or(rank, |e| Some(e as u64));
        let cache_estimate = sh
            .estimator
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .observe(&mut shape, rank, model.map(|(_, k)| k));
        let transport = &sh.transports[endpoint.unwrap_or(0)];
        let in_flight = endpoint.map(|e| &sh.in_flight[e]);
        if let Some(n) = in_flight {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let Outcome {
            mut result,
            retries,
            reconnects,
            first_sent_at,
            sent_at,
            first_byte_at,
            done_at,
            server_request_id,
        } = transport
            .send(
                &payload,
                &extras.headers,
                stream,
                &*sh.codec,
                &sh.cancel,
                sh.deadline_at,
            )
            .await;
        if let Some(n) = in_flight {
            n.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        drop(permit);
        let latency = done_at.saturating_duration_since(sent_at);
        let since_start = |t: Instant| t.saturating_duration_since(sh.start);
        let timing = SendTiming {
            intended: eligible,
            sent: since_start(first_sent_at),
            last_attempt: since_start(sent_at),
            first_byte: first_byte_at.map(since_start),
            queue_wait,
            warmup,
            arrival,
        };
        if load::cut_at_deadline(sh, &result) {
            if let Some(h) = next_prep {
                h.cancel();
            }
            return Ok(false);
        }
        if let Err((kind, msg)) = &mut result {
            explain_refused_history(sh.reasoning_history, &conv, *kind, msg);
        }
        let ok = result.is_ok();
        let ids = RequestIds {
            server_request_id,
            response_id: result
                .as_mut()
                .ok()
                .and_then(|r| r.id.take().or_else(|| r.response_id.clone())),
            ..sent_ids(
                &extras.headers,
                transport.config().request_id_header.as_ref(),
            )
        };
        // Reasoning tokens from the usage, else counted (on the blocking
        // pool unless short), before the collector's lock is taken.
        let reasoning = match &result {
            Ok(r) => reasoning_tokens(&sh.synth, r, model.map_or(usize::MAX, |(_, k)| k)).await,
            Err(_) => None,
        };
        // A structured answer parsed and validated, before the lock too.
        let structured = match (&sh.opts.structured, format, &result) {
            (Some(s), Some(k), Ok(reply)) => Some(s.check(k, reply)),
            _ => None,
        };
        {
            let mut c = sh.collector();
            let c = &mut *c;
            // With `warmup = "auto"`: a held record's stream is added to the
            // figures when it is replayed, and a request due before a cut
            // already decided is warmup.
            let held = c.steady.as_ref().is_some_and(|s| s.holding());
            let warmup = warmup
                || c.steady
                    .as_ref()
                    .is_some_and(|s| s.cut_covers(timing.intended));
            let timing = SendTiming { warmup, ..timing };
            let mut stream_figures = (None, None);
            let (usage, ttft, failure, estimated) = match &result {
                Ok(reply) => {
                    let est = crate::measurement::metrics::estimated_cached_tokens(
                        prev_held,
                        reply.usage,
                    );
                    if let Some(u) = reply.usage {
                        stream_figures = c.metrics.record_stream(
                            reply,
                            u.completion_tokens,
                            reasoning.map(|(n, _)| n),
                            !warmup && !held,
                            sent_at.saturating_duration_since(sh.start),
                            model.map(|(m, k)| m.names[k].as_str()),
                        );
                    }
                    (
                        reply.usage,
                        reply
                            .first_token_at
                            .map(|t| t.saturating_duration_since(sent_at)),
                        None,
                        est,
                    )
                }
                Err((kind, msg)) => (None, None, Some((*kind, msg.as_str())), 0),
            };
            let ttfrt = result.as_ref().ok().and_then(|r| {
                r.first_reasoning_at
                    .map(|t| t.saturating_duration_since(sent_at))
            });
            let ttfat = result
                .as_ref()
                .ok()
                .and_then(|r| first_answer_at(r).map(|t| t.saturating_duration_since(sent_at)));
            let rec = RequestRecord {
                agent_id,
                trajectory_id: id,
                request_index: index,
                planned_prompt_tokens: cur.prompt_tokens,
                retries,
                reconnects,
                latency,
                server_timing: result.as_ref().ok().and_then(|r| r.server_timing),
                usage,
                estimated_cached_tokens: estimated,
                cache_estimate: if ok {
                    cache_estimate
                } else {
                    crate::synthesis::prefix::Estimate::default()
                },
                live_block_fallbacks: fallbacks,
                ttft,
                ttfrt,
                ttfat,
                reasoning_tokens: reasoning.map(|(n, _)| n),
                reasoning_counted: reasoning.is_some_and(|(_, counted)| counted),
                images,
                image_bytes,
                audio_seconds,
                structured,
                tpot: stream_figures.0,
                itl_max: stream_figures.1,
                token_times: match &result {
                    Ok(reply) if sh.opts.token_times => reply
                        .chunks
                        .iter()
                        .map(|(t, _)| t.saturating_duration_since(sent_at))
                        .collect(),
                    _ => Vec::new(),
                },
                slo_met: None,
                failure,
                timing,
                endpoint: endpoint.map(|e| u32::try_from(e).unwrap_or(u32::MAX)),
                model: model.map(|(m, k)| m.names[k].as_str()),
                ids,
            };
            let itl = || match &result {
                Ok(reply) => reply.usage.map_or_else(Default::default, |u| {
                    crate::measurement::metrics::StreamGaps::of(
                        reply,
                        u.completion_tokens,
                        reasoning.map(|(n, _)| n),
                    )
                }),
                Err(_) => Default::default(),
            };
            c.request(rec, itl, &sh.opts.load, &sh.opts.slo, sh.start.elapsed());
        }
        match result {
            Ok(mut reply) => {
                let back = send_back(sh.reasoning_history, &mut reply, reasoning);
                prev_held = reply
                    .usage
                    .map(|u| u.prompt_tokens + if back.whole { u.completion_tokens } else { 0 });
                sent_back = reply.usage.map(|_| back);
                last_reply = Some(reply);
                // Tool / think time follows a successful response, the last one
                // included: an agent's end-to-end time runs through its final delay.
                let slept = sleep_scaled(sh, cur.delay_after_ms).await;
                if !slept.is_zero() {
                    sh.collector().metrics.delay_total += slept;
                }
            }
            Err(_) => {
                all_ok = false;
                prev_held = None;
            }
        }
        let Some(n) = next else { return Ok(all_ok) };
        let Some(handle) = next_prep else {
            return Ok(all_ok);
        };
        if !ok && !n.reset_before {
            // The conversation cannot continue without the reply.
            handle.cancel();
            return Ok(false);
        }
        prepared = handle.finish(&sh.synth).await?;
        prev = Some(std::mem::replace(&mut cur, n));
        index += 1;
    }
}

/// A request refused as bad (HTTP 400) after it sent earlier reasoning back:
/// the failure's message says so, and how to send the answers alone. A
/// server that takes no reasoning in a conversation's history (a gateway in
/// front of a model without thinking, a server whose Anthropic endpoint
/// reads no thinking blocks) refuses every turn after the first under the
/// `keep` default of chat completions and Anthropic's messages.
fn explain_refused_history(
    history: batchbench_contract::spec::ReasoningHistory,
    conv: &Conversation,
    kind: FailureKind,
    msg: &mut String,
) {
    let sent_reasoning = conv
        .messages
        .iter()
        .any(|m| m.reasoning.is_some() || !m.redacted_reasoning.is_empty());
    if kind == FailureKind::Http(400)
        && history == batchbench_contract::spec::ReasoningHistory::Keep
        && sent_reasoning
    {
        msg.push_str(
            " [this request sent earlier reasoning back (--reasoning-history keep); if the server takes none in a conversation's history, --reasoning-history drop sends the answers alone]",
        );
    }
}

/// When the reply's answer began: the codec's first answer token, else (a
/// codec that does not tell) the first token of a reply without reasoning.
fn first_answer_at(r: &Reply) -> Option<Instant> {
    match r.first_reasoning_at {
        None => r.first_answer_at.or(r.first_token_at),
        Some(_) => r.first_answer_at,
    }
}

/// What the next turn sends back of `reply` under `history`, leaving in it
/// only what goes back: all of it when it had no reasoning or keeps it (a
/// whole reply, cached by the server that generated it), else its answer
/// alone. A reasoning the server counted but never showed (`reasoning`
/// tokens without text) cannot go back either.
fn send_back(
    history: batchbench_contract::spec::ReasoningHistory,
    reply: &mut Reply,
    reasoning: Option<(u64, bool)>,
) -> crate::synthesis::prefix::SentBack {
    let completion = reply.usage.map_or(0, |u| u.completion_tokens);
    let thought = reasoning.map_or(0, |(n, _)| n);
    // Encrypted reasoning goes back too, unread (its tokens are uncounted).
    let shown = reply.reasoning.is_some() || !reply.redacted_reasoning.is_empty();
    let keep = history == batchbench_contract::spec::ReasoningHistory::Keep;
    if !keep {
        reply.drop_reasoning();
    }
    let whole = (thought == 0 && !shown) || (keep && shown);
    let tokens = if whole {
        completion
    } else {
        completion.saturating_sub(thought)
    };
    crate::synthesis::prefix::SentBack {
        tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        whole,
    }
}

/// A reply's reasoning tokens and whether the client counted them: the
/// usage's count where the API reports one, else the reasoning text counted
/// with the tokenizer of the request's `model` (of a mix; else the run's;
/// none without a tokenizer or reasoning).
async fn reasoning_tokens(
    synth: &crate::synthesis::synth::Synth,
    r: &Reply,
    model: usize,
) -> Option<(u64, bool)> {
    if let Some(n) = r.usage.and_then(|u| u.reasoning_tokens) {
        return Some((n, false));
    }
    let text = r.reasoning.as_deref().filter(|t| !t.is_empty())?;
    Some((synth.count_reasoning(text, model).await?, true))
}

/// The ids this client sent with a request: the value of its request-id
/// header and the trace and parent span ids of its `traceparent`, whichever
/// router added them, an external one too (most runs send neither, and the
/// scan is over no headers).
fn sent_ids(
    headers: &[(String, String)],
    id_header: Option<&reqwest::header::HeaderName>,
) -> RequestIds {
    let mut ids = RequestIds::default();
    for (k, v) in headers {
        if id_header.is_some_and(|h| k.eq_ignore_ascii_case(h.as_str())) {
            ids.request_id = Some(v.clone());
        } else if k.eq_ignore_ascii_case("traceparent") {
            let mut parts = v.split('-').skip(1);
            ids.trace_id = parts.next().map(str::to_owned);
            ids.span_id = parts.next().map(str::to_owned);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Message, Role};
    use batchbench_contract::spec::ReasoningHistory;

    #[test]
    fn a_refused_turn_that_sent_reasoning_back_says_how_to_drop_it() {
        let mut conv = Conversation::default();
        conv.messages.push(Message::new(Role::User, "q"));
        let reply = Reply {
            content: "a".into(),
            reasoning: Some("because".into()),
            ..Reply::default()
        };
        conv.messages.push(reply.into_message());
        conv.messages.push(Message::new(Role::User, "more"));
        let explained = |history, kind, conv: &Conversation| {
            let mut msg = String::from("HTTP 400: thinking blocks are not supported");
            explain_refused_history(history, conv, kind, &mut msg);
            msg.contains("--reasoning-history drop")
        };
        let bad = FailureKind::Http(400);
        assert!(explained(ReasoningHistory::Keep, bad, &conv));
        // Not when nothing of the kind was sent, or the failure is another.
        assert!(!explained(ReasoningHistory::Drop, bad, &conv));
        assert!(!explained(
            ReasoningHistory::Keep,
            FailureKind::Http(503),
            &conv
        ));
        conv.messages[1].reasoning = None;
        assert!(!explained(ReasoningHistory::Keep, bad, &conv));
        conv.messages[1].redacted_reasoning = vec!["Zm9v".into()];
        assert!(
            explained(ReasoningHistory::Keep, bad, &conv),
            "encrypted too"
        );
    }
}
