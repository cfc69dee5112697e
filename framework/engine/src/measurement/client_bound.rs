//! Whether the client, not the server, limited a run: the client's own load
//! (its runtime's busy threads and scheduling delay) beside the load report's
//! schedule figures, and the verdict drawn from them.
//!
//! Calibrated with `bench/client-bound.sh`: an instant simulator in its own
//! process, one client thread, open loops at 50% and 150% of that thread's
//! measured ceiling.

use crate::measurement::metrics::{Metrics, Summary};
use batchbench_contract::record::{ClientBound, ClientLoad};

use super::load_report::{LAG_SHARE, LATE_SHARE_DENOMINATOR};

/// A run's sends were late by a material share of what was measured when
/// more than one send in [`LATE_SHARE_DENOMINATOR`] was over 1 ms late and
/// their lag's p99 was over [`LAG_SHARE`] of the served latency's median,
/// and over this: a client past its ceiling falls behind without bound
/// (seconds, in a run without a deadline), while a machine busy with other
/// work makes sends late by a few milliseconds, which the load note reports.
const LAG_FLOOR_MS: f64 = 10.0;
/// The runtime's own load ran its tasks late by a material share when the
/// probe's p99 was over this share of the first-token time's median (the
/// response time's without streaming), and over [`SCHEDULING_FLOOR_MS`]...
const SCHEDULING_SHARE: f64 = 0.25;
const SCHEDULING_FLOOR_MS: f64 = 5.0;
/// Late sends and a scheduling delay are the client's own when its threads
/// were busy more than this share of the time: with them mostly idle, they
/// were the machine's other work (on a 2-core machine with a busy loop per
/// core and the test suite beside it, 100 of 691 sends at 48 requests/s went
/// out over 1 ms late, p99 11.6 ms, from a client whose one thread had
/// little to do).
const OWN_BUSY: f64 = 0.5;
/// The threads' busy share and the scheduling delay judge runs this long at
/// least: over a few milliseconds, starting up is all a thread did.
const MIN_SECS: f64 = 1.0;

/// What the verdict found: its reasons with their sentences, and the notes
/// on other work of the machine that ran the client late.
#[derive(Default)]
struct Findings {
    reasons: Vec<&'static str>,
    says: Vec<String>,
    notes: Vec<String>,
}

impl Findings {
    fn bound(&mut self, reason: &'static str, says: String) {
        self.reasons.push(reason);
        self.says.push(says);
    }

    /// Lateness (`late`, in figures): the client's limit where it was its
    /// `own` (`[what it says then, what the note says otherwise]`), else a
    /// note on the machine's other work.
    fn late(&mut self, own: bool, reason: &'static str, words: [&str; 2], late: &str) {
        if own {
            self.bound(reason, format!("{} ({late})", words[0]));
        } else {
            self.notes.push(format!("{} ({late})", words[1]));
        }
    }
}

/// The client's own figures over a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientFigures {
    /// Its runtime's worker threads (0: unknown, as in merged shards).
    pub threads: u32,
    /// Their busy share of the run.
    pub busy_share: Option<f64>,
    /// The process's CPU time over the threads' time.
    pub cpu_share: Option<f64>,
    /// The run's length, seconds.
    pub secs: f64,
}

/// Sets `summary.client` and, where the client was the limit,
/// `summary.client_bound`. Other work on the machine that ran the client late
/// while its own threads were mostly idle is not the client's limit: the
/// client's report notes it.
pub(super) fn report(summary: &mut Summary, m: &Metrics, f: ClientFigures) {
    // Its percentiles, without intervals: the probe's samples are the
    // machine's, not a figure of the server to be sure of.
    let delay = m
        .scheduling_delay
        .stats()
        .map(|d| batchbench_contract::record::LatencyStats { ci: None, ..d });
    if f.threads == 0 && delay.is_none() {
        return;
    }
    let mut found = Findings::default();
    let served_p50 = summary.latency.map_or(0.0, |l| l.p50_ms);
    let judged = f.secs >= MIN_SECS;
    // Whether the client's own threads were busy enough for its lateness to
    // be its own. Where that is unknown (merged shards) or cannot be told (a
    // run too short for its busy share to be more than its start), it is
    // taken as its own.
    let own = !judged || f.busy_share.is_none_or(|b| b > OWN_BUSY);
    // The first reply byte is the earliest figure a late task would corrupt.
    let first_p50 = summary.ttft.or(summary.latency).map_or(0.0, |l| l.p50_ms);
    if let Some(l) = &summary.load {
        if l.dropped_arrivals > 0 {
            found.bound(
                "dropped",
                format!(
                    "it dropped {} arrivals it could not send by the deadline",
                    l.dropped_arrivals
                ),
            );
        }
        let measured = m.requests;
        if let Some(lag) = l.send_lag
            && measured > 0
            && l.late_sends * LATE_SHARE_DENOMINATOR > measured
            && lag.p99_ms > LAG_FLOOR_MS.max(LAG_SHARE * served_p50)
        {
            let late = format!(
                "send lag p99 {:.2} ms against a served latency p50 of {served_p50:.2} ms; {} of {measured} over 1 ms late",
                lag.p99_ms, l.late_sends
            );
            found.late(
                own,
                "schedule",
                ["its sends ran late", "made its sends late"],
                &late,
            );
        }
    }
    let busy = f.busy_share.unwrap_or(0.0);
    if judged && busy > ClientBound::BUSY_SHARE {
        let (threads, were) = if f.threads == 1 {
            ("thread", "was")
        } else {
            ("threads", "were")
        };
        found.bound(
            "busy",
            format!(
                "its {} runtime {threads} {were} busy {:.0}% of the time (an in-process server such as sim:// runs on them too)",
                f.threads,
                busy * 100.0
            ),
        );
    }
    if let Some(d) = delay
        && judged
        && d.p99_ms > SCHEDULING_FLOOR_MS.max(SCHEDULING_SHARE * first_p50)
    {
        let late = format!(
            "scheduling delay p99 {:.2} ms, max {:.2} ms, against a first-byte time p50 of {first_p50:.2} ms",
            d.p99_ms, d.max_ms
        );
        found.late(
            own,
            "scheduling",
            ["its own work ran its tasks late", "ran its tasks late"],
            &late,
        );
    }
    let Findings {
        reasons,
        says,
        notes,
    } = found;
    let note = (!notes.is_empty()).then(|| {
        format!(
            "other work on this machine {}, while the client's own threads were busy {:.0}% of the time: the figures hold that delay as well as the server's",
            notes.join(" and "),
            busy * 100.0
        )
    });
    summary.client = Some(ClientLoad {
        threads: f.threads,
        busy_share: f.busy_share,
        cpu_share: f.cpu_share,
        scheduling_delay: delay,
        note,
    });
    if !reasons.is_empty() {
        summary.client_bound = Some(ClientBound {
            reasons: reasons.into_iter().map(str::to_owned).collect(),
            message: format!(
                "the client, not the server, limited this run: {}; its figures measure the client as much as the server (more --client-threads, or shards, raise its ceiling)",
                says.join("; ")
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::record::{LatencyStats, LoadReport};
    use std::time::Duration;

    fn stats(p50: f64, p99: f64) -> LatencyStats {
        LatencyStats {
            count: 100,
            p50_ms: p50,
            p90_ms: p99,
            p99_ms: p99,
            mean_ms: p50,
            max_ms: p99,
            ci: None,
        }
    }

    fn run(busy: f64, delay_ms: u64, lag: Option<(u64, f64)>, dropped: u64) -> Summary {
        let mut m = Metrics {
            requests: 1000,
            ..Metrics::default()
        };
        for _ in 0..100 {
            m.scheduling_delay.record(Duration::from_millis(delay_ms));
        }
        let mut s = Summary {
            latency: Some(stats(100.0, 200.0)),
            ttft: Some(stats(20.0, 40.0)),
            load: Some(LoadReport {
                send_lag: lag.map(|(_, p99)| stats(0.1, p99)),
                late_sends: lag.map_or(0, |l| l.0),
                dropped_arrivals: dropped,
                ..LoadReport::default()
            }),
            ..Summary::default()
        };
        let f = ClientFigures {
            threads: 2,
            busy_share: Some(busy),
            cpu_share: Some(busy),
            secs: 10.0,
        };
        report(&mut s, &m, f);
        s
    }

    fn reasons(s: &Summary) -> Vec<String> {
        s.client_bound
            .as_ref()
            .map(|b| b.reasons.clone())
            .unwrap_or_default()
    }

    #[test]
    fn a_client_with_spare_threads_and_no_material_lag_is_not_the_limit() {
        let s = run(0.5, 1, Some((10, 3.0)), 0);
        assert!(s.client_bound.is_none());
        let c = s.client.unwrap();
        assert!(c.note.is_none());
        assert_eq!((c.threads, c.busy_share), (2, Some(0.5)));
        assert!(c.scheduling_delay.is_some_and(|d| d.p99_ms >= 1.0));
    }

    #[test]
    fn each_reason_is_named_with_its_figures() {
        assert_eq!(reasons(&run(0.95, 1, None, 0)), ["busy"]);
        assert_eq!(reasons(&run(0.5, 1, None, 7)), ["dropped"]);
        // 60 of 1000 late, p99 12 ms: over 10 ms and 5% of the 100 ms
        // served median, from threads busy 70% of the time.
        let s = run(0.7, 1, Some((60, 12.0)), 0);
        assert_eq!(reasons(&s), ["schedule"]);
        assert!(
            s.client_bound
                .unwrap()
                .message
                .contains("send lag p99 12.00 ms")
        );
        // Late sends whose lag is a few milliseconds are not.
        assert!(run(0.7, 1, Some((60, 6.0)), 0).client_bound.is_none());
        // Nor are a few sends late by much.
        assert!(run(0.7, 1, Some((20, 50.0)), 0).client_bound.is_none());
        // Scheduling delay over a quarter of the TTFT median, threads busy.
        assert_eq!(reasons(&run(0.7, 8, None, 0)), ["scheduling"]);
        assert_eq!(
            reasons(&run(0.95, 1, Some((60, 12.0)), 3)),
            ["dropped", "schedule", "busy"]
        );
    }

    #[test]
    fn a_delay_the_clients_idle_threads_did_not_cause_is_a_note_not_the_limit() {
        let s = run(0.2, 30, None, 0);
        assert!(s.client_bound.is_none());
        let note = s.client.and_then(|c| c.note).unwrap_or_default();
        assert!(
            note.contains("other work on this machine ran its tasks late"),
            "{note}"
        );
        // Late sends from a mostly idle client: the machine's, as in a busy
        // CI run (100 of 691 late, p99 11.6 ms, at 48 requests/s).
        let s = run(0.1, 1, Some((100, 11.6)), 0);
        assert!(s.client_bound.is_none());
        let note = s.client.and_then(|c| c.note).unwrap_or_default();
        assert!(
            note.contains("made its sends late (send lag p99 11.60 ms"),
            "{note}"
        );
    }

    #[test]
    fn a_run_under_a_second_is_judged_by_what_it_sent_not_by_its_threads() {
        let mut s = Summary::default();
        let mut m = Metrics::default();
        m.scheduling_delay.record(Duration::from_millis(50));
        let f = ClientFigures {
            threads: 1,
            busy_share: Some(1.0),
            cpu_share: Some(1.0),
            secs: 0.2,
        };
        report(&mut s, &m, f);
        assert!(s.client_bound.is_none());
        assert!(s.client.is_some_and(|c| c.note.is_none()));
        // Its sends ran late: its threads' share over 0.2 s cannot say the
        // lateness was the machine's, so it is the client's.
        let mut s = Summary {
            latency: Some(stats(20.0, 40.0)),
            load: Some(LoadReport {
                send_lag: Some(stats(2.0, 19.0)),
                late_sends: 64,
                ..LoadReport::default()
            }),
            ..Summary::default()
        };
        let m = Metrics {
            requests: 100,
            ..Metrics::default()
        };
        let f = ClientFigures {
            busy_share: Some(0.3),
            ..f
        };
        report(&mut s, &m, f);
        assert_eq!(reasons(&s), ["schedule"]);
    }
}
