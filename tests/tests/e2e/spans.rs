//! `--otlp-endpoint`: one OpenTelemetry span per request, received by a
//! collector built on the OpenTelemetry project's protobuf definitions.

use batchbench_tests::otlp::OtlpReceiver;
use batchbench_tests::{SimServer, read_jsonl};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

/// A reasoning model streamed with `--trace-context`: the collector gets
/// exactly one span per request, under the trace id the request's
/// `traceparent` carried and with its parent id as the span's own (so the
/// server's span is its child), its events in order at the record's times,
/// and the summary counts every span delivered.
#[test]
fn every_request_is_one_span_whose_child_is_the_servers() {
    let sim = SimServer::start(
        batchbench_simulator::SimConfig {
            record_requests: true,
            reasoning_tokens: 2,
            // Tokens apart, so that the answer's first comes after the
            // reasoning's in time, not in the same read.
            decode_ms_per_token: 2.0,
            ..batchbench_simulator::SimConfig::default()
        },
        "qwen",
    );
    let collector = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("r.jsonl");
    let r = sim.batchbench(
        "--users 3 --requests-per-user 4 --output-tokens 6 --stream --seed 5 --trace-context --otlp-endpoint {} --requests-jsonl {}",
        &[&collector.url, &jsonl.display().to_string()],
    );
    assert_eq!(r.code, 0);
    let spans = collector.spans();
    assert_eq!(spans.len(), 12, "one span per request");
    assert!(collector.exports() >= 1);
    assert!(
        collector
            .service_names()
            .iter()
            .all(|n| n.contains("batchbench")),
        "{:?}",
        collector.service_names()
    );
    let server = sim.requests();
    for rec in read_jsonl(&jsonl) {
        let trace = rec["trace_id"].as_str().unwrap_or_default();
        let span = spans
            .iter()
            .find(|s| hex(&s.trace_id) == trace)
            .unwrap_or_else(|| panic!("no span under trace {trace}: {rec}"));
        // The server saw our span's id as the parent of its own.
        let parent = server
            .iter()
            .filter_map(|l| l.traceparent.as_deref())
            .find(|t| t.contains(trace))
            .unwrap_or_else(|| panic!("the server never saw trace {trace}"));
        assert_eq!(parent, format!("00-{trace}-{}-01", hex(&span.span_id)));
        assert_eq!(span.kind, SpanKind::Client as i32);
        assert!(span.parent_span_id.is_empty(), "a root span");

        let names: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "send",
                "response head",
                "first token",
                "first answer token",
                "end"
            ],
            "{rec}"
        );
        let times: Vec<u64> = span.events.iter().map(|e| e.time_unix_nano).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert_eq!(span.start_time_unix_nano, times[0]);
        assert_eq!(span.end_time_unix_nano, times[4]);
        // At the record's wall-clock times, to the microsecond it rounds to.
        let ms = |ns: u64| ns as f64 / 1e6;
        let (sent, end) = (
            rec["sent_unix_ms"].as_f64().unwrap_or_default(),
            rec["end_unix_ms"].as_f64().unwrap_or_default(),
        );
        assert!((ms(times[0]) - sent).abs() < 0.01, "{rec}");
        assert!((ms(times[4]) - end).abs() < 0.01, "{rec}");
        let ttft = rec["ttft_ms"].as_f64().unwrap_or_default();
        let ttfat = rec["ttfat_ms"].as_f64().unwrap_or_default();
        assert!(ttfat > ttft, "the reasoning comes first: {rec}");
        assert!(
            (ms(times[3] - times[2]) - (ttfat - ttft)).abs() < 0.01,
            "{rec}"
        );

        assert!(
            matches!(attr(span, "gen_ai.request.model"), Some(Any::StringValue(m)) if !m.is_empty()),
            "{span:?}"
        );
        assert!(span.name.starts_with("chat "), "{}", span.name);
        assert_eq!(
            attr(span, "gen_ai.usage.output_tokens"),
            Some(&Any::IntValue(6)),
            "{rec}"
        );
        assert_eq!(
            attr(span, "batchbench.trajectory_id"),
            Some(&Any::StringValue(
                rec["trajectory_id"].as_str().unwrap_or_default().to_owned()
            ))
        );
        assert!(span.status.is_none(), "a success leaves the status unset");
    }
    let d = &r.summary("deliveries")[0];
    assert_eq!(d["reporter"], "otlp_spans");
    assert_eq!(d["items"], "spans");
    assert_eq!(d["delivered"], 12);
    assert_eq!(d["dropped"], 0);
    assert_eq!(d["destination"], format!("{}/v1/traces", collector.url));
}

/// A failed request is a span with an error status and the failure's kind.
#[test]
fn a_failed_request_is_a_span_with_its_failure_kind() {
    let sim = SimServer::start(
        batchbench_simulator::SimConfig {
            fault_rate: 1.0,
            ..batchbench_simulator::SimConfig::default()
        },
        "qwen",
    );
    let collector = OtlpReceiver::start();
    let r = sim.batchbench(
        "--users 1 --requests-per-user 2 --output-tokens 2 --max-retries 0 --otlp-endpoint {}",
        &[&collector.url],
    );
    assert_ne!(r.code, 2);
    let spans = collector.spans();
    assert_eq!(spans.len(), 2);
    for s in &spans {
        let status = s.status.as_ref().unwrap_or_else(|| panic!("{s:?}"));
        assert_eq!(status.code, StatusCode::Error as i32);
        assert!(
            matches!(attr(s, "error.type"), Some(Any::StringValue(k)) if !k.is_empty()),
            "{s:?}"
        );
    }
}

/// With nothing listening where the spans go, the run's figures are those of
/// a run without spans, and its summary counts every span dropped and why.
#[test]
fn a_collector_that_is_down_costs_the_run_a_count_of_dropped_spans() {
    let sim = SimServer::start(batchbench_simulator::SimConfig::default(), "qwen");
    let down = format!("http://{}", batchbench_tests::http::free_addr());
    let run = |extra: &str| {
        let line = format!("--users 2 --requests-per-user 5 --output-tokens 3 --seed 9 {extra}");
        let r = sim.batchbench(&line, &[]);
        assert_eq!(r.code, 0);
        r.json.unwrap_or_default()["summary"].clone()
    };
    let plain = run("");
    let lost = run(&format!("--otlp-endpoint {down}"));
    for key in [
        "successful_requests",
        "failed_requests",
        "total_prompt_tokens",
        "total_completion_tokens",
    ] {
        assert_eq!(plain[key], lost[key], "{key}");
    }
    assert!(plain.get("deliveries").is_none(), "{plain}");
    let d = &lost["deliveries"][0];
    assert_eq!(
        (d["delivered"].as_u64(), d["dropped"].as_u64()),
        (Some(0), Some(10))
    );
    let why = d["error"].as_str().unwrap_or_default();
    assert!(why.contains(&down), "{why}");
}

/// A URL that is not a plain-HTTP collector's is refused before anything is
/// sent, naming the flag.
#[test]
fn a_malformed_otlp_url_is_bad_input_and_nothing_is_sent() {
    let sim = SimServer::start(
        batchbench_simulator::SimConfig {
            record_requests: true,
            ..batchbench_simulator::SimConfig::default()
        },
        "qwen",
    );
    for bad in [
        "localhost:4318",
        "https://collector:4318",
        "http://:4318",
        "http://c:0",
    ] {
        let args = sim.args("--users 1 --requests-per-user 1 --otlp-endpoint {}", &[bad]);
        let e = batchbench_tests::refused_batchbench(&args);
        assert!(e.contains("--otlp-endpoint"), "{bad}: {e}");
    }
    assert!(sim.requests().is_empty(), "nothing sent");
}
