//! The plugin contract: every built-in is registered (a crate that is not linked
//! loses its registrations silently) and every example config parses and builds.

use batchbench_contract::registry;
use batchbench_plugins as _;

// A plugin registered from a crate that is not part of batchbench, exactly as the
// book shows a plugin author doing it.
mod external {
    use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
    use batchbench_contract::registry::BuildContext;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct TeamHeaderConfig {
        team: String,
    }

    pub struct TeamHeader(String);

    impl Router for TeamHeader {
        fn decorate(
            &self,
            _ctx: &RouteContext<'_>,
            out: &mut RouteExtras,
        ) -> Result<(), PluginError> {
            out.headers.push(("X-Team".into(), self.0.clone()));
            Ok(())
        }
    }

    batchbench_contract::register_router! {
        name: "team_header",
        description: "adds an X-Team header to every request",
        example: r#"{"team": "inference"}"#,
        config: TeamHeaderConfig,
        build: |c: TeamHeaderConfig, _ctx: &BuildContext| Ok::<_, PluginError>(TeamHeader(c.team)),
    }
}

#[test]
fn an_external_crate_registers_like_a_builtin() {
    let ctx = registry::BuildContext::default();
    let r = registry::router("team_header", &serde_json::json!({"team": "x"}), &ctx)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut extras = batchbench_contract::plugin::RouteExtras::default();
    let route = batchbench_contract::plugin::RouteContext {
        seed: 0,
        agent_id: 0,
        routing_slot: 0,
        trajectory_id: "t",
        request_index: 0,
    };
    r.decorate(&route, &mut extras)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(extras.headers, vec![("X-Team".to_owned(), "x".to_owned())]);
    assert!(
        registry::list()
            .iter()
            .any(|p| p.kind == "router" && p.name == "team_header")
    );
}

#[test]
fn every_builtin_is_registered_in_sorted_order() {
    let listed: Vec<(String, String)> = registry::list()
        .into_iter()
        // Test plugins registered by this test binary's own modules.
        .filter(|p| !["team_header", "unplanned_sessions"].contains(&p.name.as_str()))
        .map(|p| (p.kind.to_owned(), p.name.to_owned()))
        .collect();
    let mut expected: Vec<(String, String)> = batchbench_plugins::BUILTINS
        .iter()
        .chain(batchbench_clickhouse::PLUGINS)
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
    // Examples name repository files (the replay manifests) relative to its root.
    std::env::set_current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .unwrap_or_else(|e| panic!("{e}"));
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
