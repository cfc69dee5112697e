//! The plugin contract: every built-in is registered (a crate that is not linked
//! loses its registrations silently) and every example config parses and builds.

use batchbench_core::registry;
use batchbench_plugins as _;

#[test]
fn every_builtin_is_registered_in_sorted_order() {
    let listed: Vec<(String, String)> = registry::list()
        .into_iter()
        .map(|p| (p.kind.to_owned(), p.name.to_owned()))
        .collect();
    let mut expected: Vec<(String, String)> = batchbench_plugins::BUILTINS
        .iter()
        .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
        .collect();
    let order = |k: &str| {
        ["workload", "codec", "router", "reporter"]
            .iter()
            .position(|x| *x == k)
            .unwrap_or(9)
    };
    expected.sort_by(|a, b| (order(&a.0), &a.1).cmp(&(order(&b.0), &b.1)));
    assert_eq!(listed, expected);
}

#[test]
fn every_example_config_builds() {
    for (info, result) in registry::check_examples() {
        assert!(
            result.is_ok(),
            "{} {}: {:?}",
            info.kind,
            info.name,
            result.err()
        );
        assert!(!info.description.is_empty());
    }
}

#[test]
fn unknown_fields_and_names_are_rejected() {
    let ctx = registry::BuildContext::default();
    let e = registry::codec(
        "openai_chat",
        &serde_json::json!({"sglang": true, "bogus": 1}),
        &ctx,
    )
    .err()
    .map(|e| e.to_string());
    assert!(e.as_deref().is_some_and(|e| e.contains("bogus")), "{e:?}");
    let e = registry::codec("nope", &serde_json::json!({}), &ctx)
        .err()
        .map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("openai_chat")),
        "{e:?}"
    );
}
