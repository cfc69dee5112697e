//! Fleets: several endpoints, a routing policy picking one per request, and
//! results per endpoint. The simulated fleet (`sim://?replicas=N`) gives each
//! replica its own prefix cache and batch, so what a policy does to cache
//! hits and queueing shows in the server's own figures.

use batchbench_tests::{SimServer, cmd, qwen, run_agent, run_batchbench};
use serde_json::Value;

fn endpoints(r: &batchbench_tests::RunResult) -> Vec<Value> {
    r.summary("endpoints")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Fifteen agents, each a conversation of six turns that resends everything
/// before it, against four replicas: the flags of the run and of its
/// analysis, routed by `router` (with its config).
fn agents_on_four<'a>(tok: &'a str, router: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--host",
        "sim://?replicas=4",
        "--tokenizer-model",
        tok,
        "--agents",
        "15",
        "--tool-invocations",
        "6",
        "--input-tokens",
        "512",
        "--output-tokens",
        "32",
        "--environment-tokens",
        "128",
        "--seed",
        "11",
    ];
    args.extend(router);
    args
}

#[test]
fn affinity_keeps_each_conversation_on_its_cache_as_analyze_predicts() {
    let tok = qwen();
    let mut shares = Vec::new();
    for (router, tolerance) in [
        // Round robin's placement depends on the order replies come back in:
        // the analysis shuffles simultaneous sends as a run does, and
        // predicts it on average (1.3 and 6.5 points off in two runs, the
        // second with the whole test suite beside it; 11.6 once with a
        // capacity search streaming 200 requests/s beside it).
        (&["--router", "round_robin"][..], 0.15),
        (&["--router", "session_affinity"][..], 0.02),
        (
            &[
                "--router",
                "prefix_affinity",
                "--router-config",
                r#"{"load_bound": 0}"#,
            ][..],
            0.02,
        ),
    ] {
        let args = agents_on_four(&tok, router);
        let policy = router[1];
        let r = run_agent(&args);
        assert_eq!(r.code, 0, "{policy}");
        assert_eq!(r.summary("routing"), policy);
        let es = endpoints(&r);
        assert_eq!(es.len(), 4, "{policy}");
        // Per-endpoint counts add up to the run's.
        for (key, total) in [
            ("requests", "total_requests"),
            ("successful_requests", "successful_requests"),
            ("prompt_tokens", "total_prompt_tokens"),
            ("server_cached_tokens", "server_cached_tokens"),
        ] {
            let sum: u64 = es.iter().map(|e| u(&e[key])).sum();
            assert_eq!(sum, r.count(total), "{policy}: {key}");
        }
        let est: u64 = es.iter().map(|e| u(&e["estimated_cached_tokens"])).sum();
        assert_eq!(
            est,
            r.count("rank_estimated_cached_input_tokens"),
            "{policy}: each endpoint's perfect cache is the estimate per rank"
        );
        // The analysis of the same flags places requests as the run did and
        // predicts the tokens the replicas' caches serve. (Its prompt counts
        // leave out the server's chat-template framing: the shares are taken
        // of the server's count.)
        let (code, a) = crate::analyze::analyze("batchbench-agent", &args);
        assert_eq!(code, 0, "{policy}");
        let a = a.unwrap_or_default();
        assert_eq!(a["routing"], policy);
        let prompt = r.count("total_prompt_tokens") as f64;
        let measured = r.count("server_cached_tokens") as f64 / prompt;
        let predicted = u(&a["caches"][0]["total"]["cached_tokens"]) as f64 / prompt;
        assert!(
            (measured - predicted).abs() <= tolerance,
            "{policy}: served from cache {measured:.3} against the predicted {predicted:.3}"
        );
        if policy != "round_robin" {
            let per: Vec<u64> = es.iter().map(|e| u(&e["requests"])).collect();
            let predicted: Vec<u64> = a["caches"][0]["ranks"]
                .as_array()
                .map(|rs| rs.iter().map(|r| u(&r["requests"])).collect())
                .unwrap_or_default();
            assert_eq!(per, predicted, "{policy}: placed as predicted");
        }
        shares.push((policy, measured));
    }
    let (rr, session, prefix) = (shares[0].1, shares[1].1, shares[2].1);
    assert!(
        session >= rr + 0.10 && prefix >= rr + 0.10,
        "affinity keeps the conversation's cache: {shares:?}"
    );
}

#[test]
fn session_affinity_sends_every_turn_of_a_conversation_to_one_endpoint() {
    let tok = qwen();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("r.jsonl");
    let r = run_agent(&cmd(
        "--host sim://?replicas=3 --tokenizer-model {} --agents 12 --tool-invocations 4 --input-tokens 64 --output-tokens 8 --router session_affinity --requests-jsonl {}",
        &[&tok, jsonl.to_str().unwrap_or_default()],
    ));
    assert_eq!(r.code, 0);
    let text = std::fs::read_to_string(&jsonl).unwrap_or_default();
    let mut home = std::collections::HashMap::new();
    for line in text.lines() {
        let l: Value = serde_json::from_str(line).unwrap_or_default();
        let e = u(&l["endpoint"]);
        assert!(e < 3, "{l}");
        let t = l["trajectory_id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(*home.entry(t).or_insert(e), e, "{l}");
    }
    assert_eq!(home.len(), 12);
}

/// A closed loop of 24 users against four continuous-batching replicas (4
/// sequences a batch), the fourth three times slower, routed by `policy`.
fn unequal_fleet(policy: &str) -> batchbench_tests::RunResult {
    let tok = qwen();
    run_batchbench(&cmd(
        "--host sim://?replicas=4&replica-slowdown=1,1,1,3&max-running=4&step-base-ms=2&step-ms-per-seq=0.5 --tokenizer-model {} --users 24 --requests-per-user 12 --input-tokens 32 --output-tokens 16 --stream --seed 3 --router {}",
        &[&tok, policy],
    ))
}

#[test]
fn least_outstanding_sends_less_to_a_slow_replica_and_cuts_the_tail() {
    let rr = unequal_fleet("round_robin");
    let lo = unequal_fleet("least_outstanding");
    assert_eq!((rr.code, lo.code), (0, 0));
    let share_of_slow = |r: &batchbench_tests::RunResult| {
        let es = endpoints(r);
        u(&es[3]["requests"]) as f64 / r.count("total_requests") as f64
    };
    let p99 = |r: &batchbench_tests::RunResult| {
        r.summary("latency")["p99_ms"].as_f64().unwrap_or_default()
    };
    assert!(
        (share_of_slow(&rr) - 0.25).abs() < 0.02,
        "round robin: {}",
        share_of_slow(&rr)
    );
    assert!(
        share_of_slow(&lo) < 0.2,
        "least outstanding: {}",
        share_of_slow(&lo)
    );
    // Round robin strands users on the slow replica's queue (about 1.1 s
    // against 0.4 s when measured).
    assert!(
        p99(&lo) < 0.7 * p99(&rr),
        "e2e p99 {} (least outstanding) against {} (round robin)",
        p99(&lo),
        p99(&rr)
    );
}

#[test]
fn one_host_gives_todays_run_and_a_list_of_servers_is_a_fleet() {
    let (a, b) = (SimServer::recording("qwen"), SimServer::recording("qwen"));
    let tok = qwen();
    let base = |hosts: &[&str]| {
        let mut args: Vec<String> = Vec::new();
        for h in hosts {
            args.extend(cmd("--host {}", &[h]));
        }
        args.extend(cmd(
            "--tokenizer-model {} --users 4 --requests-per-user 5 --input-tokens 32 --output-tokens 4 --seed 5",
            &[&tok],
        ));
        run_batchbench(&args)
    };
    let one = base(&[&a.url()]);
    assert_eq!(one.code, 0);
    assert!(one.summary("endpoints").is_null(), "one host: no fleet");
    assert!(one.summary("routing").is_null());
    assert_eq!(one.csv[0]["host"], a.url());
    let before = a.stats().requests;
    let two = base(&[&a.url(), &b.url()]);
    assert_eq!(two.code, 0);
    // No policy named: round robin, said so.
    assert_eq!(two.summary("routing"), "round_robin");
    assert_eq!(a.stats().requests - before, 10);
    assert_eq!(b.stats().requests, 10);
    assert_eq!(two.csv[0]["host"], format!("{},{}", a.url(), b.url()));
    let es = endpoints(&two);
    assert_eq!(es[1]["url"], format!("{}/v1/chat/completions", b.url()));
    // The same bodies went to both: the fleet changes where, not what.
    let bodies = |s: &SimServer| {
        s.requests()
            .into_iter()
            .map(|r| r.prompt_tokens)
            .collect::<Vec<_>>()
    };
    let mut all = bodies(&a)[before as usize..].to_vec();
    all.extend(bodies(&b));
    all.sort_unstable();
    let mut once = bodies(&a)[..before as usize].to_vec();
    once.sort_unstable();
    assert_eq!(all, once);
}

#[test]
fn bad_fleets_exit_2_with_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let tok = qwen();
    let url = sim.url();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--tokenizer-model",
            &tok,
            "--users",
            "2",
            "--requests-per-user",
            "2",
            "--input-tokens",
            "16",
            "--output-tokens",
            "2",
        ];
        args.extend(extra);
        run_batchbench(&args)
    };
    for (extra, why) in [
        (
            vec!["--host", &url, "--host", "http//no-scheme"],
            "a malformed URL",
        ),
        (vec!["--host", &url, "--host", &url], "a host given twice"),
        (
            vec!["--host", &url, "--host", "sim://"],
            "the simulator in a list",
        ),
        (
            vec!["--host", &url, "--router", "no_such_policy"],
            "a policy that does not exist",
        ),
        (
            vec![
                "--host",
                &url,
                "--host",
                "http://127.0.0.1:9",
                "--router",
                "round_robin",
                "--router",
                "least_outstanding",
            ],
            "two policies",
        ),
        (
            vec!["--host", "sim://?replicas=2&replica-slowdown=1,1,1"],
            "more slowdowns than replicas",
        ),
    ] {
        assert_eq!(run(&extra).code, 2, "{why}");
    }
    assert_eq!(sim.stats().requests, 0);
}

#[test]
fn a_sharded_fleet_run_merges_to_the_whole_run_per_endpoint() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = |name: &str| tmp.path().join(name).display().to_string();
    let run = |out: &str, shard: Option<&str>| {
        let mut args = agents_on_four(&tok, &["--router", "session_affinity"]);
        args.extend(["--output-dir", out]);
        if let Some(s) = shard {
            args.extend(["--shard", s]);
        }
        assert_eq!(run_agent(&args).code, 0, "{shard:?}");
    };
    let whole = dir("whole");
    // The whole run also scrapes each replica's metrics, for the report.
    let mut args = agents_on_four(&tok, &["--router", "session_affinity"]);
    args.extend(["--output-dir", &whole, "--server-metrics", "target"]);
    args.extend(["--metrics-interval", "0.1"]);
    assert_eq!(run_agent(&args).code, 0, "whole");
    let shards: Vec<std::path::PathBuf> = (0..3)
        .map(|i| {
            let d = dir(&format!("shard-{i}"));
            run(&d, Some(&format!("{i}/3")));
            d.into()
        })
        .collect();
    let merged = batchbench_run::merge::merge(
        &shards,
        batchbench_contract::spec::OutputSpec {
            output_dir: Some(tmp.path().join("merged")),
            ..Default::default()
        },
        batchbench_run::commands::agent::FRONT.profile,
        false,
    )
    .unwrap_or_else(|f| panic!("{f:?}"));
    let whole = batchbench_tests::read_json(&tmp.path().join("whole/run.json")).unwrap_or_default();
    let per =
        |es: &[batchbench_contract::record::EndpointSummary]| -> Vec<(u64, u64, Option<u64>)> {
            es.iter()
                .map(|e| {
                    (
                        e.requests,
                        e.estimated_cached_tokens,
                        e.server_cached_tokens,
                    )
                })
                .collect()
        };
    let whole_es: Vec<batchbench_contract::record::EndpointSummary> =
        serde_json::from_value(whole["summary"]["endpoints"].clone()).unwrap_or_default();
    assert_eq!(merged.summary.routing.as_deref(), Some("session_affinity"));
    // Session affinity picks by the conversation alone: every shard sends
    // each of its conversations where the whole run does.
    assert_eq!(per(&merged.summary.endpoints), per(&whole_es));
    assert_eq!(whole_es.len(), 4);
    // The report names the policy and draws a line per endpoint.
    let html = tmp.path().join("report.html");
    batchbench_run::report::write(&[tmp.path().join("whole")], &html)
        .unwrap_or_else(|f| panic!("{f:?}"));
    let page = std::fs::read_to_string(&html).unwrap_or_default();
    assert!(page.contains("(routed by session_affinity)"), "the title");
    assert!(page.contains("Completions per second by endpoint"));
    for i in 0..4 {
        assert!(
            page.contains(&format!("[{i}] http://127.0.0.1:")),
            "endpoint {i}"
        );
    }
    // The server's charts draw each replica in its endpoint's colour.
    let colours = batchbench_tests::chart_colours(&page, "server-requests");
    assert_eq!(colours.len(), 4, "{colours:?}");
}

/// A gateway's pool per model: endpoint 1 serves `small` alone (it answers
/// any other model 404, as vLLM does), endpoint 0 every model. With the map,
/// every request goes to an endpoint that serves its model, the policy
/// picking among those, and `analyze` places them as the run does.
#[test]
fn an_endpoint_map_sends_each_model_where_it_is_served() {
    let tok = qwen();
    let strict = |served: &[&str]| {
        SimServer::start(
            batchbench_simulator::SimConfig {
                served_models: served.iter().map(|m| (*m).to_owned()).collect(),
                strict_models: true,
                record_requests: true,
                ..batchbench_simulator::SimConfig::default()
            },
            "qwen",
        )
    };
    let (all, small) = (strict(&["big", "small"]), strict(&["small"]));
    let (all_url, small_url) = (all.url(), small.url());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("requests.jsonl").display().to_string();
    let mut args = cmd(
        "--host {} --host {} --tokenizer-model {} --users 8 --requests-per-user 5 --input-tokens 32 --output-tokens 4 --seed 5 --model-mix big=1,small=1 --router random --check-models",
        &[&all_url, &small_url, &tok],
    );
    // Without the map, endpoint 1 is found not to list `big` before
    // anything is sent.
    let r = run_batchbench(&args);
    assert_eq!(r.code, 2, "endpoint 1 does not serve big");
    assert_eq!(all.stats().requests + small.stats().requests, 0);

    args.extend(cmd("--endpoint-models 1=small", &[]));
    let (code, a) = crate::analyze::analyze("batchbench", &args);
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    args.extend(cmd("--requests-jsonl {}", &[&jsonl]));
    let r = run_batchbench(&args);
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 40, "no request met a 404");
    assert!(
        small
            .requests()
            .iter()
            .all(|q| q.model.as_deref() == Some("small")),
        "endpoint 1 was sent its own model alone"
    );
    let lines = batchbench_tests::read_jsonl(std::path::Path::new(&jsonl));
    let on = |model: &str, endpoint: u64| {
        lines
            .iter()
            .filter(|l| l["model"] == model && l["endpoint"] == endpoint)
            .count()
    };
    assert_eq!(on("big", 1), 0);
    assert!(
        on("big", 0) > 5 && on("small", 0) > 2 && on("small", 1) > 2,
        "both pools used"
    );
    let per: Vec<u64> = endpoints(&r).iter().map(|e| u(&e["requests"])).collect();
    assert_eq!(
        per,
        [all.stats().requests, small.stats().requests],
        "the summary's endpoints are the servers' counts"
    );
    let predicted: Vec<u64> = a["caches"][0]["ranks"]
        .as_array()
        .map(|rs| rs.iter().map(|r| u(&r["requests"])).collect())
        .unwrap_or_default();
    assert_eq!(per, predicted, "analyze places each request as the run did");

    // A map that cannot be served: exit 2, nothing sent.
    let before = all.stats().requests + small.stats().requests;
    for (map, says) in [
        ("2=small", "the run has 2 endpoint(s)"),
        ("1=nope", "'nope' is not a model of the mix"),
        ("x=small", "not an index"),
    ] {
        let mut bad = args[..args.len() - 4].to_vec();
        bad.extend(cmd("--endpoint-models {}", &[map]));
        let e = batchbench_tests::refused_batchbench(&bad);
        assert!(e.contains(says), "{map}: {e}");
    }
    let mut bad = args[..args.len() - 4].to_vec();
    bad.extend(cmd(
        "--endpoint-models 0=small --endpoint-models 1=small",
        &[],
    ));
    let e = batchbench_tests::refused_batchbench(&bad);
    assert!(e.contains("model 'big' is served by no endpoint"), "{e}");
    assert_eq!(all.stats().requests + small.stats().requests, before);
}

/// Each pool of a model map has a routing policy of its own, as a gateway's
/// balancer per model: two models in turn, each on two of four replicas,
/// round robin in each pool, spread every pool evenly (one counter for the
/// whole fleet would send each model to one replica of its two). Each
/// endpoint's perfect cache is one per model, and `analyze` places and caches
/// every request as the run does.
#[test]
fn each_pool_of_a_model_map_is_balanced_on_its_own() {
    let tok = qwen();
    let args = cmd(
        "--host sim://?replicas=4 --tokenizer-model {} --users 1 --requests-per-user 40 --input-tokens 64 --input-prefix-overlap 0.5 --output-tokens 2 --seed 3 --model-mix a=1,b=1 --model-selection round_robin --router round_robin --endpoint-models 0=a --endpoint-models 1=a --endpoint-models 2=b --endpoint-models 3=b",
        &[&tok],
    );
    let r = run_batchbench(&args);
    assert_eq!(r.code, 0);
    let es = endpoints(&r);
    let per: Vec<u64> = es.iter().map(|e| u(&e["requests"])).collect();
    assert_eq!(per, [10, 10, 10, 10], "each pool's replicas in turn");
    let cached: Vec<u64> = es
        .iter()
        .map(|e| u(&e["estimated_cached_tokens"]))
        .collect();
    // 32 shared tokens (two blocks): every request but each endpoint's
    // first finds them on its own model's cache there.
    assert_eq!(cached, [9 * 32; 4]);
    let (code, a) = crate::analyze::analyze("batchbench", &args);
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    let ranks = a["caches"][0]["ranks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let placed: Vec<u64> = ranks.iter().map(|x| u(&x["requests"])).collect();
    let predicted: Vec<u64> = ranks.iter().map(|x| u(&x["cached_tokens"])).collect();
    assert_eq!(placed, per);
    assert_eq!(predicted, cached, "analyze's caches per endpoint and model");
}
