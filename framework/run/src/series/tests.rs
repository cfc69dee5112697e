//! The series' unit tests.

use super::plan::sweep_values;
use super::points::redacted;
use super::search::min_requests;
use super::tables::decided_by;
use super::*;

const RATE: Dimension = Dimension {
    name: "request-rate",
    unit: "req/s",
    whole: false,
};
const USERS: Dimension = Dimension {
    name: "users",
    unit: "users",
    whole: true,
};

fn values(v: &str, points: Option<u64>, dim: &Dimension) -> Result<Vec<f64>, String> {
    let s = SweepArgs {
        series: SeriesArgs {
            over: dim.name.into(),
            trials: 1,
            min_requests: None,
            point_max_secs: None,
        },
        values: v.into(),
        points,
        no_early_stop: false,
    };
    sweep_values(&s, dim).map_err(|f| f.error.to_string())
}

#[test]
fn values_are_a_rising_list_or_a_geometric_range() {
    assert_eq!(values("1,2,4", None, &RATE), Ok(vec![1.0, 2.0, 4.0]));
    assert_eq!(
        values("1..20", None, &USERS),
        Ok(vec![1.0, 2.0, 4.0, 8.0, 16.0, 20.0])
    );
    assert_eq!(values("1..16", Some(3), &RATE), Ok(vec![1.0, 4.0, 16.0]));
    assert_eq!(values("1..3", Some(5), &USERS), Ok(vec![1.0, 2.0, 3.0]));
    for (v, points, needle) in [
        ("", None, "no values"),
        ("4,2", None, "must rise"),
        ("1,x", None, "'x' is not a number"),
        ("0,1", None, "not a positive load"),
        ("8..2", None, "must rise"),
        ("1..8", Some(1), "at least 2"),
        ("1.5,2", None, "whole numbers"),
    ] {
        let dim = if needle == "whole numbers" {
            &USERS
        } else {
            &RATE
        };
        let e = values(v, points, dim).unwrap_err();
        assert!(e.contains(needle), "{v}: {e}");
    }
    assert!(
        values("1,2", Some(3), &RATE)
            .unwrap_err()
            .contains("--points")
    );
}

#[test]
fn the_series_flags_are_taken_out_of_the_run_arguments() {
    let args: Vec<OsString> = [
        "--host",
        "sim://",
        "--over",
        "users",
        "--values=1,2",
        "--no-early-stop",
        "--users-x",
        "--trials",
        "2",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let rest: Vec<String> = run_args(Kind::Sweep, &args)
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(rest, ["--host", "sim://", "--users-x"]);
}

#[test]
fn the_recorded_command_line_never_holds_the_api_key() {
    let argv: Vec<OsString> = [
        "batchbench",
        "--api-key",
        "sk-1",
        "--api-key=sk-2",
        "--users",
        "2",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    assert_eq!(
        redacted(&argv),
        [
            "batchbench",
            "--api-key",
            "<redacted>",
            "--api-key=<redacted>",
            "--users",
            "2"
        ]
    );
}

#[test]
fn an_interval_needs_two_runs_and_widens_with_spread() {
    let one = Estimate::of(vec![5.0]);
    assert_eq!((one.mean, one.ci95), (5.0, None));
    let e = Estimate::of(vec![9.0, 10.0, 11.0]);
    assert!((e.mean - 10.0).abs() < 1e-12);
    // s = 1, n = 3: 4.303 / sqrt(3).
    assert!(
        (e.ci95.unwrap_or(0.0) - 4.303 / 3f64.sqrt()).abs() < 1e-9,
        "{e:?}"
    );
    assert_eq!(Estimate::of_some([Some(1.0), None]), None);
}

fn point(value: f64, rps: f64, p50: f64) -> Point {
    Point {
        value,
        requests_per_second: Estimate::of(vec![rps]),
        e2e_p50_ms: Some(Estimate::of(vec![p50])),
        ..Point::default()
    }
}

#[test]
fn the_fewest_requests_of_a_percentile_are_where_its_interval_starts() {
    for (p, n) in [(99.0, 368), (90.0, 36), (50.0, 6), (99.9, 3688)] {
        assert_eq!(min_requests(p), n, "p{p}");
        let q = p / 100.0;
        assert!(
            batchbench_engine::measurement::interval::quantile_ranks(n - 1, q).is_none(),
            "p{p}"
        );
        assert!(
            batchbench_engine::measurement::interval::quantile_ranks(n, q).is_some(),
            "p{p}"
        );
    }
}

#[test]
fn a_bound_is_decided_by_its_run_or_by_the_runs_that_each_had_an_interval() {
    const BOUND: f64 = 100.0;
    let run = |observed: f64, interval: Option<[f64; 2]>, undecided: bool| {
        vec![SloResult {
            observed_ms: Some(observed),
            met: observed <= BOUND,
            interval_ms: interval,
            undecided,
            ..SloResult::default()
        }]
    };
    let est = |v: &[f64]| Some(Estimate::of(v.to_vec()));
    // One run: its own verdict.
    let one = [run(90.0, Some([80.0, 99.0]), false)];
    assert_eq!(
        decided_by(&est(&[90.0]), &one, 0, BOUND),
        (Some([80.0, 99.0]), true)
    );
    let one = [run(90.0, None, true)];
    assert_eq!(decided_by(&est(&[90.0]), &one, 0, BOUND), (None, false));
    // Several that each decided, alike: decided, though the t interval
    // over two runs (91 ± 12.7) reaches across the bound.
    let two = [
        run(90.0, Some([85.0, 95.0]), false),
        run(92.0, Some([87.0, 97.0]), false),
    ];
    let (ci, decided) = decided_by(&est(&[90.0, 92.0]), &two, 0, BOUND);
    assert!(
        decided && ci.is_some_and(|[lo, hi]| lo < 79.0 && hi > 103.0),
        "{ci:?}"
    );
    // Not alike (one undecided): the t interval, one side or not.
    let split = [
        run(90.0, Some([85.0, 95.0]), false),
        run(98.0, Some([93.0, 103.0]), true),
    ];
    assert!(!decided_by(&est(&[90.0, 98.0]), &split, 0, BOUND).1);
    let apart = [
        run(40.0, Some([35.0, 45.0]), false),
        run(41.0, Some([36.0, 46.0]), true),
    ];
    assert!(decided_by(&est(&[40.0, 41.0]), &apart, 0, BOUND).1);
    // Undecided, and one too short for an interval of its own: nothing.
    let short = [run(90.0, Some([85.0, 95.0]), true), run(91.0, None, true)];
    assert_eq!(
        decided_by(&est(&[90.0, 91.0]), &short, 0, BOUND),
        (None, false)
    );
}

#[test]
fn saturation_is_throughput_that_stopped_rising_while_latency_rose() {
    // Below the knee: the load doubles and so, nearly, does throughput.
    assert!(!saturated(
        &point(2.0, 10.0, 100.0),
        &point(4.0, 18.0, 115.0)
    ));
    // At the knee: throughput flat, latency doubled.
    assert!(saturated(
        &point(4.0, 18.0, 115.0),
        &point(8.0, 19.0, 230.0)
    ));
    // Flat throughput but flat latency too: noise, not saturation.
    assert!(!saturated(
        &point(4.0, 18.0, 115.0),
        &point(8.0, 19.0, 118.0)
    ));
    // Nothing succeeded at the higher load.
    let mut dead = point(8.0, 0.0, 0.0);
    dead.e2e_p50_ms = None;
    assert!(saturated(&point(4.0, 18.0, 115.0), &dead));
}

#[test]
fn values_print_as_their_flags_take_them() {
    assert_eq!(USERS.arg(3.0), "3");
    assert_eq!(RATE.arg(40.0), "40");
    assert_eq!(RATE.arg(41.253_333_333), "41.2533");
    assert_eq!(RATE.arg(0.001_234_567), "0.00123457");
}

#[test]
fn a_point_whose_client_was_the_limit_is_neither_met_nor_missed() {
    use super::tables::{Judge, figures, point_line};
    let judge = Judge {
        bounds: vec!["e2e_p99<=10s".parse().unwrap_or_else(|e| panic!("{e}"))],
        max_failure_rate: 0.0,
        near: 0.1,
    };
    let bound = Summary {
        total_requests: 100,
        successful_requests: 100,
        client_bound: Some(batchbench_contract::record::ClientBound {
            reasons: vec!["dropped".into()],
            message: "the client, not the server, limited this run: it dropped 7 arrivals".into(),
        }),
        ..Summary::default()
    };
    let f = figures(8.0, std::slice::from_ref(&bound), &judge);
    let p = f.point;
    assert_eq!((p.passed, p.undecided, f.near), (None, false, false));
    assert!(
        p.client_bound
            .as_deref()
            .is_some_and(|m| m.contains("dropped 7"))
    );
    assert!(point_line(&RATE, &p).contains("CLIENT-BOUND (the client, not the server"));
    // The same run without the verdict is judged by its SLO.
    let free = Summary {
        client_bound: None,
        ..bound
    };
    assert!(figures(8.0, &[free], &judge).point.client_bound.is_none());
}
