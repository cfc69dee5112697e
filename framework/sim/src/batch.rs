//! The continuous-batching model of one worker: a server that saturates.
//!
//! At most `max_running` sequences are in the batch; the rest wait in a FIFO
//! queue. Every step, each sequence in the batch whose prompt is prefilled
//! makes one output token, and sequences still prefilling take up to
//! `prefill_chunk_tokens` prompt tokens between them (first come, first
//! served); the step that finishes a prompt also makes its first token. A step
//! takes `step_base + step_per_seq x batch + prefill_per_token x prefilled`.
//! Each sequence holds KV for its prompt (reserved when it joins the batch) and
//! its output so far; when the next step would need more than
//! `kv_capacity_tokens`, the sequence that joined last is preempted: its KV is
//! freed and it goes back to the front of the queue, to prefill its prompt and
//! the output it had made again (vLLM's recompute preemption). Tokens already
//! sent are not sent twice.
//!
//! With a full batch, one worker completes at most
//! `1 / (O x (step_base / max_running + step_per_seq) + prefill_per_token x P)`
//! requests per second for requests of `O` output tokens and `P` uncached
//! prompt tokens (`P` at most the chunk, KV not binding): each request spends
//! `O` steps in the batch, sharing each step's base with the others.

use batchbench_engine::schedule::pacer::Pacer;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The parameters of the model (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchModel {
    pub max_running: usize,
    pub step_base: Duration,
    pub step_per_seq: Duration,
    pub prefill_per_token: Duration,
    pub prefill_chunk_tokens: u64,
    /// 0: no limit.
    pub kv_capacity_tokens: u64,
}

/// A request joining a worker's queue.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Prompt tokens found in the prefix cache (held, not computed).
    pub cached: u64,
    /// Prompt tokens to compute.
    pub uncached: u64,
    /// Output tokens to make.
    pub output: u32,
    /// One message per output token made; the request is dropped from the
    /// batch when the receiver goes (the client left).
    pub tokens: mpsc::UnboundedSender<()>,
}

/// What `/metrics` reports of one worker's scheduler.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Sequences in the batch.
    pub running: AtomicU64,
    /// Sequences in the queue.
    pub waiting: AtomicU64,
    /// KV tokens held or reserved by the batch.
    pub kv_tokens: AtomicU64,
    /// Preemptions so far.
    pub preemptions: AtomicU64,
}

#[derive(Debug)]
struct Seq {
    a: Admission,
    /// Prompt (and, after a preemption, output) tokens still to compute.
    prefill_left: u64,
    /// KV tokens held: the cached prefix, what was computed, the output.
    kv: u64,
    /// Output tokens made (and sent).
    made: u32,
}

impl Seq {
    /// The KV the sequence holds or has reserved.
    fn committed(&self) -> u64 {
        self.kv + self.prefill_left
    }
}

/// Starts one worker's scheduler; it ends when every sender is dropped.
pub(crate) fn start(
    model: BatchModel,
    gauges: Arc<Gauges>,
    pacer: Option<Arc<Pacer>>,
) -> mpsc::UnboundedSender<Admission> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(model, rx, gauges, pacer));
    tx
}

async fn run(
    m: BatchModel,
    mut rx: mpsc::UnboundedReceiver<Admission>,
    g: Arc<Gauges>,
    pacer: Option<Arc<Pacer>>,
) {
    let mut waiting: VecDeque<Seq> = VecDeque::new();
    let mut running: Vec<Seq> = Vec::new();
    // The model's clock: each step ends a step time after the last one, kept
    // by the pacer to within a fraction of a millisecond (without one, by the
    // runtime's timer: tests on its paused clock).
    let mut clock = Instant::now();
    loop {
        if running.is_empty() && waiting.is_empty() {
            publish(&g, &running, &waiting);
            let Some(a) = rx.recv().await else { return };
            waiting.push_back(Seq::new(a));
            clock = clock.max(Instant::now());
        }
        while let Ok(a) = rx.try_recv() {
            waiting.push_back(Seq::new(a));
        }
        running.retain(|s| !s.a.tokens.is_closed());
        waiting.retain(|s| !s.a.tokens.is_closed());
        admit(&m, &mut running, &mut waiting);
        preempt(&m, &mut running, &mut waiting, &g);
        publish(&g, &running, &waiting);
        if running.is_empty() {
            continue;
        }
        let (prefilled, makes) = plan_step(&m, &mut running);
        let step = m.step_base
            + m.step_per_seq * running.len() as u32
            + m.prefill_per_token.mul_f64(prefilled as f64);
        clock += step;
        match &pacer {
            Some(p) => p.until(clock.into_std()).await,
            None => tokio::time::sleep_until(clock).await,
        }
        for (s, make) in running.iter_mut().zip(makes) {
            if make {
                s.made += 1;
                s.kv += 1;
                let _ = s.a.tokens.send(());
            }
        }
        running.retain(|s| s.made < s.a.output);
    }
}

impl Seq {
    fn new(a: Admission) -> Self {
        Self {
            // A server computes at least the last prompt token.
            prefill_left: a.uncached.max(1),
            kv: a.cached.saturating_sub(u64::from(a.uncached == 0)),
            made: 0,
            a,
        }
    }
}

/// Moves sequences from the queue into the batch, first come first served,
/// while there is room and KV for their prompts (an empty batch takes the
/// front sequence whatever its size, so that nothing starves).
fn admit(m: &BatchModel, running: &mut Vec<Seq>, waiting: &mut VecDeque<Seq>) {
    let mut committed: u64 = running.iter().map(Seq::committed).sum();
    while running.len() < m.max_running {
        let Some(front) = waiting.front() else { break };
        let need = front.committed() + 1;
        if m.kv_capacity_tokens > 0
            && committed + need > m.kv_capacity_tokens
            && !running.is_empty()
        {
            break;
        }
        committed += front.committed();
        if let Some(s) = waiting.pop_front() {
            running.push(s);
        }
    }
}

/// Before a step: while the batch would need more KV than there is (each
/// sequence may grow by a token), the sequence that joined last goes back to
/// the front of the queue, its KV freed.
fn preempt(m: &BatchModel, running: &mut Vec<Seq>, waiting: &mut VecDeque<Seq>, g: &Gauges) {
    if m.kv_capacity_tokens == 0 {
        return;
    }
    while running.len() > 1 {
        let need: u64 = running.iter().map(|s| s.committed() + 1).sum();
        if need <= m.kv_capacity_tokens {
            break;
        }
        let Some(mut s) = running.pop() else { break };
        // Recompute: the prompt and the output made so far, from scratch.
        s.prefill_left = s.committed();
        s.kv = 0;
        g.preemptions.fetch_add(1, Ordering::Relaxed);
        waiting.push_front(s);
    }
}

/// Shares the step's prefill budget and says which sequences make a token:
/// those already prefilled, and those whose prompt this step finishes.
/// Returns the prompt tokens computed and, per sequence, whether it makes one.
fn plan_step(m: &BatchModel, running: &mut [Seq]) -> (u64, Vec<bool>) {
    let mut budget = m.prefill_chunk_tokens.max(1);
    let mut prefilled = 0;
    let makes = running
        .iter_mut()
        .map(|s| {
            if s.prefill_left == 0 {
                return true;
            }
            let n = s.prefill_left.min(budget);
            budget -= n;
            prefilled += n;
            s.prefill_left -= n;
            s.kv += n;
            s.prefill_left == 0 && n > 0
        })
        .collect();
    (prefilled, makes)
}

fn publish(g: &Gauges, running: &[Seq], waiting: &VecDeque<Seq>) {
    g.running.store(running.len() as u64, Ordering::Relaxed);
    g.waiting.store(waiting.len() as u64, Ordering::Relaxed);
    g.kv_tokens
        .store(running.iter().map(Seq::committed).sum(), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(max_running: usize) -> BatchModel {
        BatchModel {
            max_running,
            step_base: Duration::from_millis(4),
            step_per_seq: Duration::from_micros(250),
            prefill_per_token: Duration::from_micros(10),
            prefill_chunk_tokens: 512,
            kv_capacity_tokens: 0,
        }
    }

    fn request(
        tx: &mpsc::UnboundedSender<Admission>,
        uncached: u64,
        output: u32,
    ) -> mpsc::UnboundedReceiver<()> {
        let (tokens, rx) = mpsc::unbounded_channel();
        let _ = tx.send(Admission {
            cached: 0,
            uncached,
            output,
            tokens,
        });
        rx
    }

    async fn drain(mut rx: mpsc::UnboundedReceiver<()>) -> u32 {
        let mut n = 0;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_worker_completes_at_the_documented_rate() {
        let m = model(8);
        let g = Arc::new(Gauges::default());
        let tx = start(m, g.clone(), None);
        let (n, output, prompt) = (1_000u32, 20u32, 100u64);
        let t0 = tokio::time::Instant::now();
        let rxs: Vec<_> = (0..n).map(|_| request(&tx, prompt, output)).collect();
        drop(tx);
        for rx in rxs {
            assert_eq!(drain(rx).await, output);
        }
        let secs = t0.elapsed().as_secs_f64();
        let per_request = f64::from(output)
            * (m.step_base.as_secs_f64() / m.max_running as f64 + m.step_per_seq.as_secs_f64())
            + m.prefill_per_token.as_secs_f64() * prompt as f64;
        let rate = f64::from(n) / secs;
        let expected = 1.0 / per_request;
        assert!(
            (rate / expected - 1.0).abs() < 0.02,
            "{rate:.1}/s against {expected:.1}/s"
        );
        assert_eq!(g.preemptions.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_batch_is_capped_and_the_rest_waits_in_order() {
        let g = Arc::new(Gauges::default());
        let tx = start(model(2), g.clone(), None);
        let a = request(&tx, 10, 5);
        let b = request(&tx, 10, 5);
        let mut c = request(&tx, 10, 5);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(g.running.load(Ordering::Relaxed), 2);
        assert_eq!(g.waiting.load(Ordering::Relaxed), 1);
        assert!(c.try_recv().is_err(), "the third waits");
        assert_eq!(drain(a).await + drain(b).await, 10);
        assert_eq!(drain(c).await, 5, "the third runs after");
    }

    #[tokio::test(start_paused = true)]
    async fn kv_pressure_preempts_the_newest_and_it_still_completes() {
        let mut m = model(4);
        m.kv_capacity_tokens = 120;
        let g = Arc::new(Gauges::default());
        let tx = start(m, g.clone(), None);
        // Both prompts fit at first (2 x 41 = 82); their outputs do not (2 x 90).
        let a = request(&tx, 40, 50);
        let b = request(&tx, 40, 50);
        drop(tx);
        assert_eq!(drain(a).await, 50);
        assert_eq!(
            drain(b).await,
            50,
            "a preempted sequence sends each token once"
        );
        assert!(g.preemptions.load(Ordering::Relaxed) >= 1);
        assert_eq!(g.kv_tokens.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_leaves_frees_its_place() {
        let g = Arc::new(Gauges::default());
        let tx = start(model(1), g.clone(), None);
        let gone = request(&tx, 10, 1_000_000);
        let next = request(&tx, 10, 3);
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(gone);
        assert_eq!(drain(next).await, 3);
    }

    #[test]
    fn a_long_prompt_is_prefilled_in_chunks_within_the_budget() {
        let m = model(4);
        let (tokens, _rx) = mpsc::unbounded_channel();
        let mut batch = vec![Seq::new(Admission {
            cached: 0,
            uncached: 1_200,
            output: 1,
            tokens,
        })];
        let steps: Vec<(u64, Vec<bool>)> = (0..3).map(|_| plan_step(&m, &mut batch)).collect();
        assert_eq!(
            steps,
            vec![(512, vec![false]), (512, vec![false]), (176, vec![true])]
        );
    }
}
