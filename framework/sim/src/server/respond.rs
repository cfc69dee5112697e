//! Answering one request: the reply planned, the batch slot taken, the
//! prefix cache consulted, and the body or stream written.

use super::metrics::error;
use super::prompt::marker;
use super::stream::{
    WriteStamps, bytewise, drip, pace, receiver_stream, shape, sleep, stamped_stream,
};
use super::*;
pub(super) async fn respond(st: Arc<AppState>, p: Plan, mut rng: Stream) -> Response {
    match p.fault {
        Some(FaultKind::Status) => {
            return error(
                StatusCode::from_u16(p.fault_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "injected fault",
            );
        }
        Some(FaultKind::Stall) => {
            sleep(Duration::from_secs_f64(st.cfg.stall_secs)).await;
            return error(StatusCode::GATEWAY_TIMEOUT, "injected stall");
        }
        Some(FaultKind::Close) => {
            // Unwinding out of the handler ends the connection's task before
            // hyper writes a byte, so the socket closes with no status line.
            // `resume_unwind` skips the panic hook: nothing is printed, and the
            // server's other connections go on.
            std::panic::resume_unwind(Box::new("injected close before the headers"));
        }
        Some(FaultKind::Html) => {
            return (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                "<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
                .into_response();
        }
        Some(FaultKind::Error200) if !p.stream => {
            return (
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"error": {"message": "injected error in a 200 response", "type": "server_error", "code": 500}}"#,
            )
                .into_response();
        }
        Some(FaultKind::Reset) => {
            // Headers go out, then the body errors: hyper drops the connection.
            let s = futures_util::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::other("injected reset"))
            });
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(s))
                .unwrap_or_default();
        }
        _ => {}
    }
    let (mut pace, in_flight) = pace(&st, &p).await;
    if !p.stream {
        let first = pace.all(p.completion).await;
        let done = std::time::Instant::now();
        drop(in_flight);
        let mut think = String::new();
        p.tok.push_words(&mut rng, p.reasoning as usize, &mut think);
        let text = match &p.answer {
            Some(a) => a.clone(),
            None => {
                let mut text = String::new();
                p.tok
                    .push_words(&mut rng, (p.completion - p.reasoning) as usize, &mut text);
                text
            }
        };
        if p.fault.is_none() {
            store(&st, &p, &text);
            hold_reply(&st, &p, &think, &text);
        }
        let timings = st.timings(&p, first.unwrap_or(done), done);
        let body = apis::body(p.api, &facts(&p), &think, &text, timings).to_string();
        let body = match p.fault {
            Some(FaultKind::Truncate) => body[..body.len() / 2].to_owned(),
            Some(FaultKind::Malformed) => format!("{{\"choices\": [ {}", &body[..body.len() / 3]),
            Some(FaultKind::Oversized) => {
                // A correct response, padded to the size asked for.
                let pad = usize::try_from(st.cfg.oversize_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(body.len());
                format!("{{\"padding\": \"{}\", {}", "x".repeat(pad), &body[1..])
            }
            _ => body,
        };
        let content_type = [(header::CONTENT_TYPE, "application/json")];
        return match p.fault {
            Some(FaultKind::Split | FaultKind::Drip) => {
                let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
                tokio::spawn(bytewise(Bytes::from(body), tx, drip(&st, p.fault)));
                (content_type, Body::from_stream(receiver_stream(rx))).into_response()
            }
            _ => {
                if st.cfg.stamps && p.logged && p.fault.is_none() {
                    st.log_chunks(p.seq, &[std::time::Instant::now()]);
                }
                (content_type, body).into_response()
            }
        };
    }
    // For the stream faults the events go through `shape`, which splits, drips,
    // pads or decorates them on their way out.
    let (tx, raw) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let rx = match p.fault {
        Some(FaultKind::Split | FaultKind::Drip | FaultKind::Comments | FaultKind::Oversized) => {
            let (out, shaped) = mpsc::channel(16);
            tokio::spawn(shape(
                raw,
                out,
                p.fault,
                drip(&st, p.fault),
                st.cfg.oversize_bytes,
            ));
            shaped
        }
        _ => raw,
    };
    // With --stamps, a token chunk is stamped when the connection takes it to
    // write it, not when it is queued: the channel and the connection's task
    // stand between the two. The token chunks follow the stream's opening
    // events, one per chunk of tokens.
    let stamps = (st.cfg.stamps && p.logged && p.fault.is_none()).then(|| {
        let per = st.cfg.tokens_per_chunk.max(1);
        let reasoning = p.reasoning.div_ceil(per) as usize;
        let f = facts(&p);
        WriteStamps {
            st: st.clone(),
            seq: p.seq,
            first: apis::stream_start(p.api, &f).len(),
            tokens: reasoning + (p.completion - p.reasoning).div_ceil(per) as usize,
            // The events between the reasoning and the answer carry no token.
            between: (p.reasoning > 0)
                .then(|| (reasoning, apis::stream_answer_start(p.api, &f, "").len())),
            taken: Vec::new(),
        }
    });
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let f = facts(&p);
        let send = |events: Vec<String>| {
            let tx = tx.clone();
            async move {
                for e in events {
                    if tx.send(Ok(Bytes::from(e))).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        if !send(apis::stream_start(p.api, &f)).await {
            return;
        }
        if p.fault == Some(FaultKind::Error200) {
            let _ = tx
                .send(Ok(Bytes::from_static(
                    b"data: {\"error\": {\"message\": \"injected error in a 200 response\", \"type\": \"server_error\", \"code\": 500}}\n\n",
                )))
                .await;
            return;
        }
        if p.fault == Some(FaultKind::Malformed) {
            let _ = tx
                .send(Ok(Bytes::from_static(
                    b"data: {\"choices\": [{\"delta\": \n\n",
                )))
                .await;
            return;
        }
        if p.completion == 0 {
            pace.all(0).await;
        }
        let per = st.cfg.tokens_per_chunk.max(1);
        // In completions and `/generate` reasoning is text between tags.
        let tags = matches!(p.api, Api::Completions | Api::Generate);
        let mut sent = 0u32;
        // The whole output so far (tags and all), the reasoning, the answer.
        let (mut so_far, mut think, mut answer) = (String::new(), String::new(), String::new());
        let mut written = Vec::new();
        while sent < p.completion {
            // A chunk is reasoning or answer, never both.
            let reasoning = sent < p.reasoning;
            let left = if reasoning {
                p.reasoning - sent
            } else {
                p.completion - sent
            };
            let n = per.min(left);
            pace.next(sent == 0, n).await;
            let mut text = String::new();
            if tags && reasoning && sent == 0 {
                text.push_str(apis::THINK_OPEN);
            }
            if tags && !reasoning && sent == p.reasoning && p.reasoning > 0 {
                text.push_str(apis::THINK_CLOSE);
            }
            let from = text.len();
            match (&p.answer, reasoning) {
                // A structured answer's text, in even shares per token.
                (Some(a), false) => text.push_str(&answer_piece(a, &p, sent, n)),
                _ => p.tok.push_words(&mut rng, n as usize, &mut text),
            }
            if reasoning {
                think.push_str(&text[from..]);
            } else {
                answer.push_str(&text[from..]);
            }
            so_far.push_str(&text);
            sent += n;
            let e = if reasoning {
                apis::stream_reasoning(p.api, &f, &text, &so_far, sent)
            } else {
                apis::stream_delta(p.api, &f, &text, &so_far, sent)
            };
            if st.cfg.stamps {
                written.push(std::time::Instant::now());
            }
            if tx.send(Ok(Bytes::from(e))).await.is_err() {
                return;
            }
            if p.fault == Some(FaultKind::Truncate) && sent * 2 >= p.completion {
                return; // ends without its closing events
            }
            // The reasoning is over: its item or block closes, the answer's
            // opens (even for an answer of nothing: the cap was spent).
            if reasoning
                && sent == p.reasoning
                && !send(apis::stream_answer_start(p.api, &f, &think)).await
            {
                return;
            }
        }
        if tags && p.reasoning > 0 && p.reasoning == p.completion {
            // The cap was spent on reasoning: the tags are closed all the same.
            so_far.push_str(apis::THINK_CLOSE);
        }
        if p.fault.is_none() {
            store(&st, &p, &answer);
            hold_reply(&st, &p, &think, &answer);
        }
        let now = std::time::Instant::now();
        let timings = st.timings(
            &p,
            written.first().copied().unwrap_or(now),
            written.last().copied().unwrap_or(now),
        );
        let text = if p.api == Api::Generate {
            &so_far
        } else {
            &answer
        };
        send(apis::stream_end(
            p.api,
            &f,
            &think,
            text,
            p.usage_in_stream,
            timings,
        ))
        .await;
    });
    let body = stamped_stream(rx, stamps);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

/// What the reply formatters need of a plan.
pub(super) fn facts(p: &Plan) -> apis::ReplyFacts<'_> {
    apis::ReplyFacts {
        id: &p.id,
        model: &p.model,
        prompt: p.prompt,
        cached: p.cached,
        completion: p.completion,
        reasoning: p.reasoning,
        reasoning_usage: p.reasoning_usage,
        length: p.completion >= p.max,
        items: p.items,
        audio_seconds: p.audio_seconds,
    }
}

/// Responses API: keeps the conversation through the reply `text` under the
/// response's id, for a request that continues it.
pub(super) fn store(st: &AppState, p: &Plan, text: &str) {
    let Some((parent, ids, count)) = &p.store else {
        return;
    };
    let Ok(out) = st.ids_by(&p.tok, p.salt, text) else {
        return;
    };
    let mut own = Vec::with_capacity(ids.len() + 1 + out.len());
    own.extend_from_slice(ids);
    own.push(marker("assistant"));
    own.extend_from_slice(&out);
    let stored = Stored {
        parent: parent.clone(),
        ids: own.into(),
        count: count + u64::from(st.cfg.message_overhead_tokens) + out.len() as u64,
    };
    lock(&st.stored).insert(p.id.clone(), stored);
}

/// Caches the reply after its prompt on the worker that generated it: the
/// assistant's turn as a client sends it back (its reasoning, then its
/// answer), so that a turn that keeps both finds the blocks through them and
/// one that drops the reasoning finds the prompt's alone.
pub(super) fn hold_reply(st: &AppState, p: &Plan, think: &str, answer: &str) {
    let Some(prompt) = &p.held else {
        return;
    };
    let (Ok(think), Ok(answer)) = (
        st.ids_by(&p.tok, p.salt, think),
        st.ids_by(&p.tok, p.salt, answer),
    ) else {
        return;
    };
    let mut ids = Vec::with_capacity(prompt.len() + 1 + think.len() + answer.len());
    ids.extend_from_slice(prompt);
    ids.push(marker("assistant"));
    ids.extend_from_slice(&think);
    ids.extend_from_slice(&answer);
    lock(&st.workers[p.worker as usize])
        .0
        .lookup_and_insert_for(&ids, p.cache_salt);
}

/// The part of a structured answer `a` that tokens `sent..sent + n` of the
/// output carry (the answer's share of its characters: its tokens are about
/// as long as each other).
fn answer_piece(a: &str, p: &Plan, sent: u32, n: u32) -> String {
    let tokens = (p.completion - p.reasoning).max(1) as usize;
    let chars = a.chars().count();
    let from = (sent - p.reasoning) as usize;
    let (lo, hi) = (chars * from / tokens, chars * (from + n as usize) / tokens);
    a.chars().skip(lo).take(hi - lo).collect()
}
