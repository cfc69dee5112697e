//! Scraping the server's Prometheus metrics during a run.

use crate::state::Shared;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Scrapes the server's metrics every `metrics_interval` from the clock start
/// until `stop`, then once more; each scrape goes to the reporters as it comes.
pub(crate) async fn scrape_loop(
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> crate::telemetry::server_metrics::Tally {
    use crate::telemetry::server_metrics::{Mapper, Tally};
    let urls = shared.opts.server_metrics.clone();
    // What is recorded and printed: never the credentials of a URL.
    let mut shown: Vec<String> = urls
        .iter()
        .map(|u| batchbench_contract::record::redact_url(u))
        .collect();
    if shared.gpu.is_some() {
        shown.push(GPU_URL.to_owned());
    }
    let mut gpu_mapper = Mapper::default();
    let interval = shared.opts.metrics_interval.max(Duration::from_millis(10));
    let mut tally = Tally::new(&shown, interval);
    let timeout = interval.clamp(Duration::from_secs(1), Duration::from_secs(5));
    let client = shared.transport().side_client(timeout);
    let mut mappers: Vec<Mapper> = urls.iter().map(|_| Mapper::default()).collect();
    let mut next = tokio::time::Instant::now();
    loop {
        for ((url, name), mapper) in urls.iter().zip(&shown).zip(&mut mappers) {
            let body = match &client {
                Ok(c) => fetch_metrics(c, url).await,
                Err(e) => Err(format!("no HTTP client: {e}")),
            };
            let t = shared.start.elapsed().as_secs_f64();
            let scrape = match body {
                Ok(text) => mapper.scrape(name, t, &text),
                Err(error) => batchbench_contract::results::ServerScrape {
                    t,
                    url: name.clone(),
                    error: Some(error),
                    ..Default::default()
                },
            };
            tally.add(&scrape);
            shared.collector().notify(|r| r.on_server_metrics(&scrape));
        }
        if shared.gpu.is_some() {
            // NVML's calls block (a driver round trip per GPU and field):
            // on the blocking pool, not the runtime's threads.
            let s = shared.clone();
            let sampled = tokio::task::spawn_blocking(move || {
                let samples = s.gpu.as_ref().map(crate::telemetry::gpu::Nvml::samples);
                (s.start.elapsed().as_secs_f64(), samples.unwrap_or_default())
            })
            .await;
            let (t, samples) =
                sampled.unwrap_or_else(|_| (shared.start.elapsed().as_secs_f64(), Vec::new()));
            let scrape = gpu_mapper.scrape_samples(GPU_URL, t, &samples, 0);
            tally.add(&scrape);
            shared.collector().notify(|r| r.on_server_metrics(&scrape));
        }
        if stop.is_cancelled() {
            return tally;
        }
        next += interval;
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

/// The name the GPUs beside the client are recorded under, as a URL scraped.
const GPU_URL: &str = "nvml";

/// The most a metrics response may hold.
const MAX_METRICS_BYTES: usize = 32 << 20;

async fn fetch_metrics(client: &reqwest::Client, url: &str) -> Result<String, String> {
    let resp = client.get(url).send().await.map_err(|e| {
        if e.is_timeout() {
            "timed out".to_owned()
        } else if e.is_connect() {
            "cannot connect".to_owned()
        } else {
            e.to_string()
        }
    })?;
    if !resp.status().is_success() {
        return Err(format!("HTTP {}", resp.status().as_u16()));
    }
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if body.len() > MAX_METRICS_BYTES {
        return Err(format!(
            "the response is over {} MiB",
            MAX_METRICS_BYTES >> 20
        ));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}
