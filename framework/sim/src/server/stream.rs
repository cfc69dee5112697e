//! How a reply goes out: its time to first token and decode schedule, and
//! the bytes of a JSON body or an event stream, shaped by the faults asked
//! for (drips, truncation, stalls) and stamped for `--stamps`.

use super::*;
pub(super) fn ttft(st: &AppState, p: &Plan) -> Duration {
    let ms =
        st.cfg.ttft_base_ms + st.cfg.prefill_us_per_token * (p.prompt - p.cached) as f64 / 1000.0;
    Duration::from_secs_f64((ms * p.slowdown).max(0.0) / 1000.0) + encode(st, p)
}

/// The audio encoder's time for a request's clips (none without audio).
pub(super) fn encode(st: &AppState, p: &Plan) -> Duration {
    let ms = st.cfg.audio_ms_per_second * p.audio_seconds * p.slowdown;
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

pub(super) async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// How a response's tokens are timed.
pub(super) enum Pace {
    /// The per-request model.
    Timed(Schedule),
    /// The worker's batch makes the tokens: one message per token.
    Batched(mpsc::UnboundedReceiver<()>),
}

/// The per-request model: the TTFT, then a decode interval per token, on a
/// schedule from the request's arrival, kept by the pacer to within a
/// fraction of a millisecond.
pub(super) struct Schedule {
    /// When the next tokens are due.
    pub(super) due: std::time::Instant,
    pub(super) ttft: Duration,
    pub(super) decode: Duration,
    pub(super) pacer: Option<Arc<Pacer>>,
}

impl Schedule {
    /// Moves the schedule on by `by` and waits for it.
    async fn wait(&mut self, by: Duration) {
        self.due += by;
        match &self.pacer {
            Some(p) => p.until(self.due).await,
            None => tokio::time::sleep_until(self.due.into()).await,
        }
    }
}

impl Pace {
    /// Waits for the next `n` tokens (`first`: they start the reply).
    pub(super) async fn next(&mut self, first: bool, n: u32) {
        match self {
            Self::Timed(s) => {
                let by = if first { s.ttft } else { s.decode * n };
                s.wait(by).await;
            }
            Self::Batched(rx) => {
                for _ in 0..n {
                    if rx.recv().await.is_none() {
                        break;
                    }
                }
            }
        }
    }

    /// Waits for the whole reply of `n` tokens; returns when its first token
    /// was made (none for no token).
    pub(super) async fn all(&mut self, n: u32) -> Option<std::time::Instant> {
        match self {
            Self::Timed(s) => {
                // The TTFT, then a decode interval per output token; the
                // first token counts as made at the TTFT.
                let first = s.due + s.ttft;
                s.wait(s.ttft + s.decode * n).await;
                (n > 0).then_some(first)
            }
            Self::Batched(_) => {
                if n == 0 {
                    return None;
                }
                self.next(true, 1).await;
                let first = std::time::Instant::now();
                self.next(false, n - 1).await;
                Some(first)
            }
        }
    }
}

/// A request in flight in the per-request model, counted as running.
pub(super) struct InFlight(Option<Arc<Gauges>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            g.running.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The request joins its worker's batch, or (per-request model) is timed on
/// its own.
pub(super) async fn pace(st: &AppState, p: &Plan) -> (Pace, InFlight) {
    let w = p.worker as usize;
    if let Some(scheduler) = st.schedulers.get(w) {
        // The adapter loads, and the audio is encoded, before the request
        // joins the batch.
        let before = p.adapter_load + encode(st, p);
        if !before.is_zero() {
            let due = p.received + before;
            match &st.pacer {
                Some(pc) => pc.until(due).await,
                None => tokio::time::sleep_until(due.into()).await,
            }
        }
        let (tokens, rx) = mpsc::unbounded_channel();
        let _ = scheduler.send(Admission {
            cached: p.cached,
            uncached: p.prompt.saturating_sub(p.cached),
            output: p.completion,
            tokens,
        });
        return (Pace::Batched(rx), InFlight(None));
    }
    let g = st.gauges[w].clone();
    g.running.fetch_add(1, Ordering::Relaxed);
    let decode =
        Duration::from_secs_f64((st.cfg.decode_ms_per_token * p.slowdown).max(0.0) / 1000.0);
    (
        Pace::Timed(Schedule {
            due: std::time::Instant::now(),
            ttft: ttft(st, p) + p.adapter_load,
            decode,
            pacer: st.pacer.clone(),
        }),
        InFlight(Some(g)),
    )
}

pub(super) type Chunk = Result<Bytes, std::io::Error>;

pub(super) fn receiver_stream(
    rx: mpsc::Receiver<Chunk>,
) -> impl futures_util::Stream<Item = Chunk> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) })
}

/// With `--stamps`: when the connection took each chunk of a stream, and
/// which of them carried tokens (`tokens` of them from the `first`, less the
/// `between` events: `(after so many token chunks, how many)`, that end the
/// reasoning and open the answer).
pub(super) struct WriteStamps {
    pub(super) st: Arc<AppState>,
    pub(super) seq: u64,
    pub(super) first: usize,
    pub(super) tokens: usize,
    pub(super) between: Option<(usize, usize)>,
    pub(super) taken: Vec<std::time::Instant>,
}

impl WriteStamps {
    /// Notes a chunk taken now; the last token chunk's logs them all.
    fn take(&mut self) {
        self.taken.push(std::time::Instant::now());
        let (after, gap) = self.between.unwrap_or((0, 0));
        if self.taken.len() == self.first + self.tokens + gap {
            let chunks = &self.taken[self.first..];
            let tokens: Vec<_> = chunks[..after]
                .iter()
                .chain(&chunks[after + gap..])
                .copied()
                .collect();
            self.st.log_chunks(self.seq, &tokens);
        }
    }
}

/// `rx` as a response body, each chunk stamped as the connection takes it.
pub(super) fn stamped_stream(
    rx: mpsc::Receiver<Chunk>,
    stamps: Option<WriteStamps>,
) -> impl futures_util::Stream<Item = Chunk> + Send + 'static {
    futures_util::stream::unfold((rx, stamps), |(mut rx, mut stamps)| async move {
        let item = rx.recv().await?;
        if let Some(s) = stamps.as_mut() {
            s.take();
        }
        Some((item, (rx, stamps)))
    })
}

/// The pause between bytes of a `drip` fault.
pub(super) fn drip(st: &AppState, fault: Option<FaultKind>) -> Option<Duration> {
    (fault == Some(FaultKind::Drip)).then(|| Duration::from_secs_f64(st.cfg.drip_ms / 1000.0))
}

/// Sends `bytes` one byte per chunk, `pause` apart; false once the client left.
pub(super) async fn bytewise(
    bytes: Bytes,
    tx: mpsc::Sender<Chunk>,
    pause: Option<Duration>,
) -> bool {
    for i in 0..bytes.len() {
        if let Some(d) = pause {
            sleep(d).await;
        }
        if tx.send(Ok(bytes.slice(i..=i))).await.is_err() {
            return false;
        }
    }
    true
}

/// Passes a stream's events on as a stream fault has them: split at every
/// byte, dripped, with comments, keep-alives and CRLF line ends, or after an
/// oversized comment.
pub(super) async fn shape(
    mut raw: mpsc::Receiver<Chunk>,
    out: mpsc::Sender<Chunk>,
    fault: Option<FaultKind>,
    pause: Option<Duration>,
    oversize: u64,
) {
    let mut first = true;
    while let Some(item) = raw.recv().await {
        let bytes = match item {
            Ok(b) => b,
            Err(e) => {
                let _ = out.send(Err(e)).await;
                return;
            }
        };
        let sent = match fault {
            Some(FaultKind::Split | FaultKind::Drip) => bytewise(bytes, out.clone(), pause).await,
            Some(FaultKind::Comments) => {
                let crlf = String::from_utf8_lossy(&bytes).replace('\n', "\r\n");
                out.send(Ok(Bytes::from(format!(": keep-alive\r\n\r\n:\r\n{crlf}"))))
                    .await
                    .is_ok()
            }
            Some(FaultKind::Oversized) if first => {
                let pad = usize::try_from(oversize).unwrap_or(usize::MAX);
                let comment = format!(": {}\n\n", "x".repeat(pad));
                out.send(Ok(Bytes::from(comment))).await.is_ok()
                    && out.send(Ok(bytes)).await.is_ok()
            }
            _ => out.send(Ok(bytes)).await.is_ok(),
        };
        first = false;
        if !sent {
            return;
        }
    }
}
