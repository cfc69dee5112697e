//! `body_fields`: fixed fields added to every request body, for a server's own
//! parameters that no flag carries (llama.cpp's `grammar` or `logit_bias`,
//! vLLM's `top_k` or `repetition_penalty`, SGLang's `regex`).

use batchbench_contract::plugin::{PluginError, RouteContext, RouteExtras, Router};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Config of [`BodyFields`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyFieldsConfig {
    /// The fields, as a JSON object: each is added to every request body
    /// as it is.
    pub fields: Map<String, Value>,
}

/// Fields the codecs write from the run's own flags and workload: one given
/// here too would be written twice, or change what the run says it sent.
const OWNED: [(&str, &str); 17] = [
    ("model", "--model"),
    ("messages", "the workload"),
    ("prompt", "the workload"),
    ("input", "the workload"),
    ("text", "the workload"),
    ("system", "the workload"),
    ("tools", "the workload"),
    ("stream", "--stream"),
    ("stream_options", "--stream"),
    ("max_tokens", "--output-tokens"),
    ("max_completion_tokens", "--output-tokens"),
    ("max_output_tokens", "--output-tokens"),
    ("min_tokens", "--output-tokens with --ignore-eos"),
    ("ignore_eos", "--ignore-eos"),
    ("sampling_params", "--output-tokens (SGLang's /generate)"),
    ("reasoning_effort", "--reasoning-effort"),
    ("thinking", "--thinking-budget or --no-thinking"),
];

/// Adds the same fields to every request body.
#[derive(Debug, Clone)]
pub struct BodyFields {
    fields: Vec<(String, Value)>,
}

impl BodyFields {
    /// Validates the config: at least one field, none the run writes itself.
    pub fn new(cfg: BodyFieldsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let bad = |message: String| PluginError::Config {
            plugin: "body_fields".into(),
            message,
        };
        if cfg.fields.is_empty() {
            return Err(bad(
                "fields: give at least one, such as {\"fields\": {\"top_k\": 20}}".into(),
            ));
        }
        if let Some((name, by)) = OWNED.iter().find(|(k, _)| cfg.fields.contains_key(*k)) {
            return Err(bad(format!(
                "fields.{name}: the run writes it itself (from {by}); set it there"
            )));
        }
        Ok(Self {
            fields: cfg.fields.into_iter().collect(),
        })
    }

    /// Fields the run itself writes from its flags, in its codec's own
    /// words (the reasoning knobs): not checked against the run's fields,
    /// since they are some of them.
    pub fn of_run(fields: Vec<(String, Value)>) -> Self {
        Self { fields }
    }
}

impl Router for BodyFields {
    fn decorate(&self, _ctx: &RouteContext<'_>, out: &mut RouteExtras) -> Result<(), PluginError> {
        out.body_fields.extend(self.fields.iter().cloned());
        Ok(())
    }
}

batchbench_contract::register_router! {
    name: "body_fields",
    description: "fixed fields in every request body, for a server's own parameters (grammar, logit_bias, top_k)",
    example: r#"{"fields": {"top_k": 20}}"#,
    config: BodyFieldsConfig,
    build: BodyFields::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(v: Value) -> BodyFieldsConfig {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_request_gets_the_fields_and_the_runs_own_are_refused() {
        let r = BodyFields::new(
            config(serde_json::json!({"fields": {"grammar": "root ::= \"a\"", "top_k": 20}})),
            &BuildContext::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let ctx = RouteContext {
            seed: 1,
            agent_id: 0,
            routing_slot: 0,
            trajectory_id: "t",
            request_index: 0,
        };
        let mut out = RouteExtras::default();
        r.decorate(&ctx, &mut out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out.body_fields,
            vec![
                ("grammar".to_owned(), Value::from("root ::= \"a\"")),
                ("top_k".to_owned(), Value::from(20)),
            ]
        );
        let refused = |v: Value| {
            BodyFields::new(config(v), &BuildContext::default())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            refused(serde_json::json!({"fields": {"max_tokens": 5}})).contains("--output-tokens"),
            "the run's own field"
        );
        assert!(refused(serde_json::json!({"fields": {}})).contains("at least one"));
        assert!(
            serde_json::from_value::<BodyFieldsConfig>(serde_json::json!({"field": {}})).is_err()
        );
    }
}
