//! `metrics_listen`: the client's own metrics, served while the run goes on
//! (`--metrics-listen ADDR`): a Prometheus text exposition at `/metrics`,
//! updated from the run's live view ([`Reporter::on_live`]) about four times
//! a second, so that a soak can be watched in Grafana. The listener is bound
//! when the reporter is built (an address in use is bad input, before
//! anything is sent) and closed when the run ends, or `linger_secs` later so
//! that a scraper with a long interval still reads the run's final figures
//! (`batchbench_run_finished` is 1 then).

use batchbench_contract::plugin::{LiveHistogram, LiveStats, PluginError, Reporter};
use batchbench_contract::record::{RunInfo, Summary};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Config of [`MetricsListen`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsListenConfig {
    /// Where to listen: `host:port` (port 0 picks a free one).
    pub addr: String,
    /// Seconds to go on serving the final figures after the run ends.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub linger_secs: f64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Serves the run's live figures as a Prometheus exposition.
#[derive(Debug)]
pub struct MetricsListen {
    addr: SocketAddr,
    /// The last live view, kept to mark it final when the run ends.
    last: LiveStats,
    page: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    linger: std::time::Duration,
    /// When the run ended (the lingering counts from here).
    ended: Option<std::time::Instant>,
    server: Option<std::thread::JoinHandle<()>>,
}

fn bad(message: String) -> PluginError {
    PluginError::Config {
        plugin: "metrics_listen".into(),
        message,
    }
}

impl MetricsListen {
    /// Binds the listener and starts serving (an empty exposition until the
    /// run's first live view).
    pub fn new(cfg: MetricsListenConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if !(cfg.linger_secs.is_finite() && cfg.linger_secs >= 0.0) {
            return Err(bad(format!(
                "linger_secs must be a number of seconds, 0 or more, not {}",
                cfg.linger_secs
            )));
        }
        let listener = TcpListener::bind(&cfg.addr)
            .map_err(|e| bad(format!("cannot listen on {}: {e}", cfg.addr)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| bad(format!("{}: {e}", cfg.addr)))?;
        let page = Arc::new(Mutex::new(exposition(&LiveStats::default(), false)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (page.clone(), stop.clone());
        let server = std::thread::Builder::new()
            .name("metrics-listen".into())
            .spawn(move || serve(&listener, &p, &s))
            .map_err(|e| bad(format!("cannot start its thread: {e}")))?;
        Ok(Self {
            addr,
            last: LiveStats::default(),
            page,
            stop,
            linger: std::time::Duration::from_secs_f64(cfg.linger_secs),
            ended: None,
            server: Some(server),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn set(&self, live: &LiveStats, finished: bool) {
        let text = exposition(live, finished);
        *self
            .page
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text;
    }

    fn shut(&mut self) {
        if self.server.is_none() {
            return;
        }
        if let Some(end) = self.ended {
            std::thread::sleep(self.linger.saturating_sub(end.elapsed()));
        }
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.server.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsListen {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Answers each connection with the current page until `stop`.
fn serve(listener: &TcpListener, page: &Mutex<String>, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut s) = stream else { continue };
        // As real exporters do: the answer goes out at once.
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
        // The whole request head, so that closing leaves nothing unread (which
        // would reset the connection under the response).
        let mut req = Vec::new();
        let mut buf = [0u8; 2048];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&req);
        let path = head.split_whitespace().nth(1).unwrap_or("");
        let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
            (
                "200 OK",
                page.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone(),
            )
        } else {
            ("404 Not Found", "only /metrics is served\n".to_owned())
        };
        let _ = write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// One metric family's header.
fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram(o: &mut String, name: &str, help: &str, h: &LiveHistogram) {
    family(o, name, "histogram", help);
    for (le, n) in &h.buckets {
        let _ = writeln!(o, "{name}_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(o, "{name}_sum {}", h.sum);
    let _ = writeln!(o, "{name}_count {}", h.count);
}

/// The Prometheus text exposition of `live` (`finished`: the run has ended
/// and these are its final figures).
pub fn exposition(live: &LiveStats, finished: bool) -> String {
    let mut o = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        family(&mut o, name, "counter", help);
        let _ = writeln!(o, "{name} {v}");
    };
    counter(
        "batchbench_requests_sent_total",
        "Requests sent.",
        live.sent,
    );
    counter(
        "batchbench_requests_ok_total",
        "Measured requests that succeeded.",
        live.ok,
    );
    counter(
        "batchbench_retries_total",
        "Attempts beyond the first.",
        live.retries,
    );
    counter(
        "batchbench_reconnects_total",
        "Requests sent again on a new connection after the server closed one.",
        live.reconnects,
    );
    counter(
        "batchbench_prompt_tokens_total",
        "Prompt tokens of the measured successes.",
        live.prompt_tokens,
    );
    counter(
        "batchbench_completion_tokens_total",
        "Completion tokens of the measured successes.",
        live.completion_tokens,
    );
    family(
        &mut o,
        "batchbench_requests_failed_total",
        "counter",
        "Measured requests that failed, by kind.",
    );
    for (kind, n) in &live.failed_by_kind {
        let _ = writeln!(o, "batchbench_requests_failed_total{{kind=\"{kind}\"}} {n}");
    }
    let mut gauge = |name: &str, help: &str, v: f64| {
        family(&mut o, name, "gauge", help);
        let _ = writeln!(o, "{name} {v}");
    };
    gauge(
        "batchbench_run_finished",
        "1 once the run has ended and these are its final figures, else 0.",
        if finished { 1.0 } else { 0.0 },
    );
    gauge(
        "batchbench_requests_in_flight",
        "Requests sent and not yet ended.",
        live.in_flight as f64,
    );
    gauge(
        "batchbench_elapsed_seconds",
        "Seconds since the benchmark clock started.",
        live.elapsed_secs,
    );
    if let Some(r) = live.target_rate {
        gauge(
            "batchbench_target_rate",
            "The arrival rate the schedule asks for now, per second.",
            r,
        );
    }
    if let Some(s) = live.stage {
        gauge(
            "batchbench_stage",
            "The stage of the rate schedule now (from 0).",
            s as f64,
        );
    }
    if let Some(busy) = live.client_busy_secs {
        gauge(
            "batchbench_client_threads",
            "Worker threads of the client's runtime.",
            f64::from(live.client_threads),
        );
        family(
            &mut o,
            "batchbench_client_busy_seconds_total",
            "counter",
            "Seconds the client's runtime threads have spent busy, summed over them (its rate over the threads: their busy share).",
        );
        let _ = writeln!(o, "batchbench_client_busy_seconds_total {busy}");
    }
    histogram(
        &mut o,
        "batchbench_scheduling_delay_seconds",
        "How late the client's runtime ran a probe task that wakes every 50 ms.",
        &live.scheduling_delay,
    );
    histogram(
        &mut o,
        "batchbench_send_lag_seconds",
        "How late requests went out behind their schedule.",
        &live.send_lag,
    );
    histogram(
        &mut o,
        "batchbench_ttft_seconds",
        "Time to first token of the measured successes.",
        &live.ttft,
    );
    histogram(
        &mut o,
        "batchbench_ttfat_seconds",
        "Time to first answer token of the measured successes that reasoned first.",
        &live.ttfat,
    );
    histogram(
        &mut o,
        "batchbench_itl_seconds",
        "Inter-token latency, per token.",
        &live.itl,
    );
    histogram(
        &mut o,
        "batchbench_e2e_seconds",
        "Request latency of the measured successes, send to last byte.",
        &live.e2e,
    );
    o
}

impl Reporter for MetricsListen {
    fn on_live(&mut self, live: &LiveStats) -> Result<(), PluginError> {
        self.set(live, false);
        self.last.clone_from(live);
        Ok(())
    }

    fn on_finish(&mut self, _run: &RunInfo, _summary: &Summary) -> Result<(), PluginError> {
        // The run is over: so is its endpoint, now or after the lingering
        // (when the reporter is dropped, so that the summary is not held up).
        self.set(&self.last, true);
        self.ended = Some(std::time::Instant::now());
        if self.linger.is_zero() {
            self.shut();
        }
        Ok(())
    }
}

batchbench_contract::register_reporter! {
    name: "metrics_listen",
    description: "serves the client's own live metrics as a Prometheus exposition at /metrics during the run",
    example: r#"{"addr": "127.0.0.1:9464"}"#,
    config: MetricsListenConfig,
    build: MetricsListen::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(addr).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }

    #[test]
    fn it_serves_the_live_figures_and_closes_with_the_run() {
        let mut r = MetricsListen::new(
            MetricsListenConfig {
                addr: "127.0.0.1:0".into(),
                linger_secs: 0.0,
            },
            &BuildContext::default(),
        )
        .unwrap();
        let live = LiveStats {
            sent: 12,
            completed: 10,
            ok: 9,
            in_flight: 2,
            failed_by_kind: [("http_503".to_owned(), 1)].into_iter().collect(),
            target_rate: Some(40.0),
            e2e: LiveHistogram {
                buckets: vec![(0.1, 4), (1.0, 9)],
                count: 9,
                sum: 2.5,
            },
            ..LiveStats::default()
        };
        r.on_live(&live).unwrap();
        let page = get(r.addr(), "/metrics").unwrap_or_default();
        assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
        for line in [
            "batchbench_requests_sent_total 12",
            "batchbench_requests_ok_total 9",
            "batchbench_requests_failed_total{kind=\"http_503\"} 1",
            "batchbench_requests_in_flight 2",
            "batchbench_run_finished 0",
            "batchbench_target_rate 40",
            "batchbench_e2e_seconds_bucket{le=\"0.1\"} 4",
            "batchbench_e2e_seconds_bucket{le=\"+Inf\"} 9",
            "batchbench_e2e_seconds_count 9",
        ] {
            assert!(page.contains(line), "{line}: {page}");
        }
        assert!(get(r.addr(), "/").unwrap_or_default().contains("404"));
        let addr = r.addr();
        r.shut();
        assert!(TcpStream::connect(addr).is_err(), "closed with the run");
        // An address in use is bad input.
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = held.local_addr().unwrap().to_string();
        let e = MetricsListen::new(
            MetricsListenConfig {
                addr: taken,
                linger_secs: 0.0,
            },
            &BuildContext::default(),
        )
        .unwrap_err();
        assert!(matches!(e, PluginError::Config { .. }), "{e}");
    }
}
