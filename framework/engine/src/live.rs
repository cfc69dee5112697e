//! The run as it stands, handed to the reporters about four times a second
//! ([`Reporter::on_live`](batchbench_contract::plugin::Reporter::on_live)):
//! what live views and the client's own metrics endpoint show.

use crate::state::Shared;
use batchbench_contract::plugin::LiveStats;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the reporters hear of the run.
const EVERY: Duration = Duration::from_millis(250);

/// The run as it stands now.
pub(crate) fn stats(shared: &Shared) -> LiveStats {
    let elapsed = shared.start.elapsed();
    let sent = shared.sent.load(Ordering::Relaxed);
    let load = &shared.opts.load;
    let stage = (!load.stages.is_empty())
        .then(|| crate::schedule::arrivals::Schedule::stage_of(load, elapsed));
    let target_rate = match stage {
        Some(i) => load.stages.get(i).map(|s| s.rate),
        None => load.rate,
    };
    let c = shared.collector();
    let m = &c.metrics;
    let completed = m.requests + m.warmup_requests;
    LiveStats {
        elapsed_secs: elapsed.as_secs_f64(),
        sent,
        completed,
        ok: m.successes,
        failed_by_kind: m
            .failures
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        in_flight: sent.saturating_sub(completed),
        retries: m.retries,
        reconnects: m.reconnects,
        prompt_tokens: m.prompt_tokens,
        completion_tokens: m.completion_tokens,
        target_rate,
        stage,
        send_lag: m.send_lag.live(),
        ttft: m.ttft.live(),
        ttfat: m.ttfat.live(),
        itl: m.itl.live(),
        e2e: m.latency.live(),
        scheduling_delay: m.scheduling_delay.live(),
        client_threads: shared.busy_at_start.map_or(0, |(t, _)| t as u32),
        client_busy_secs: shared.busy_at_start.and_then(|(_, before)| {
            let (_, now) = crate::telemetry::probe::runtime_busy()?;
            Some(now.saturating_sub(before).as_secs_f64())
        }),
    }
}

/// Hands the reporters the run as it stands every [`EVERY`] until `stop`.
pub(crate) async fn live_loop(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        let live = stats(&shared);
        shared.collector().notify(|r| r.on_live(&live));
    }
}
