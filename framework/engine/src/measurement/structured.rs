//! Structured outputs: the answer format each request asks for (any JSON
//! object, or JSON valid against one of the run's schemas), and every reply's
//! answer checked against it, so that a run reports the share of valid
//! outputs beside its latency.

use batchbench_contract::plugin::{InvalidOutput, Reply, StructuredCheck};
use batchbench_contract::spec::ResponseFormat;
use serde_json::Value;

/// A compiled JSON Schema (the `structured` feature's validator).
#[cfg(feature = "structured")]
type Validator = jsonschema::Validator;

/// Without the `structured` feature no schema compiles: there is no validator.
#[cfg(not(feature = "structured"))]
enum Validator {}

/// What a build without the `structured` feature says when a run asks for a
/// JSON Schema.
pub const NEEDS_STRUCTURED: &str = "checking answers against a JSON Schema needs the `structured` cargo feature, which this build of batchbench leaves out (it is on by default: cargo install --path bins/batchbench, or add --features structured)";

/// `schema` compiled, or why it is not a valid JSON Schema.
fn compile(schema: &Value) -> Result<Validator, String> {
    #[cfg(feature = "structured")]
    {
        jsonschema::validator_for(schema).map_err(|e| format!("not a valid JSON Schema: {e}"))
    }
    #[cfg(not(feature = "structured"))]
    {
        let _ = schema;
        Err(NEEDS_STRUCTURED.to_owned())
    }
}

/// Whether `value` is valid against `validator`.
fn is_valid(validator: &Validator, value: &Value) -> bool {
    #[cfg(feature = "structured")]
    {
        validator.is_valid(value)
    }
    #[cfg(not(feature = "structured"))]
    {
        let _ = value;
        match *validator {}
    }
}

/// One format of the run: the body fields that ask for it in the codec's
/// API, and its validator (`None` for any JSON object).
pub struct Format {
    /// Its name (a schema file's stem, or `json_object`).
    pub name: String,
    /// The codec's body fields for it.
    pub fields: Vec<(String, Value)>,
    validator: Option<Validator>,
}

impl std::fmt::Debug for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Format")
            .field("name", &self.name)
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

/// The run's formats, one per request in rotation.
#[derive(Debug)]
pub struct Structured {
    formats: Vec<Format>,
    /// `json_schema` or `json_object`.
    kind: &'static str,
}

impl Structured {
    /// The formats of `asked`, each with the body fields its codec writes
    /// for it; an error names the schema that is not a valid JSON Schema.
    pub fn new(asked: Vec<(ResponseFormat, Vec<(String, Value)>)>) -> Result<Self, String> {
        let kind = match asked.first() {
            Some((f, _)) if f.schema.is_none() => "json_object",
            _ => "json_schema",
        };
        let formats = asked
            .into_iter()
            .map(|(f, fields)| {
                let validator = f
                    .schema
                    .as_ref()
                    .map(|s| compile(s).map_err(|e| format!("{}: {e}", f.name)))
                    .transpose()?;
                Ok(Format {
                    name: f.name,
                    fields,
                    validator,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if formats.is_empty() {
            return Err("no response format".into());
        }
        Ok(Self { formats, kind })
    }

    /// `json_schema` or `json_object`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The formats' names, by index.
    pub fn names(&self) -> Vec<String> {
        self.formats.iter().map(|f| f.name.clone()).collect()
    }

    /// The format of request `index` of trajectory `agent_id`: they rotate.
    pub fn pick(&self, agent_id: u64, index: u64) -> usize {
        (agent_id.wrapping_add(index) % self.formats.len() as u64) as usize
    }

    /// The body fields of format `k`.
    pub fn fields(&self, k: usize) -> &[(String, Value)] {
        &self.formats[k].fields
    }

    /// `reply`'s answer checked against format `k`: its content (the answer
    /// alone, the reasoning apart), parsed as JSON and validated.
    pub fn check(&self, k: usize, reply: &Reply) -> StructuredCheck {
        let invalid = check_answer(
            self.formats[k].validator.as_ref(),
            &reply.content,
            reply.finish_reason.as_deref(),
        );
        StructuredCheck {
            schema: u16::try_from(k).unwrap_or(u16::MAX),
            invalid,
        }
    }
}

/// Why `schema` is not a valid JSON Schema, if it is not.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    compile(schema).map(drop)
}

/// Why `answer` is not valid against `validator` (any JSON object without
/// one), or `None`.
fn check_answer(
    validator: Option<&Validator>,
    answer: &str,
    finish_reason: Option<&str>,
) -> Option<InvalidOutput> {
    let answer = answer.trim();
    if answer.is_empty() {
        return Some(InvalidOutput::Empty);
    }
    let value: Value = match serde_json::from_str(answer) {
        Ok(v) => v,
        Err(_) if matches!(finish_reason, Some("length" | "max_tokens")) => {
            return Some(InvalidOutput::Truncated);
        }
        Err(_) => return Some(InvalidOutput::NotJson),
    };
    match validator {
        None if !value.is_object() => Some(InvalidOutput::NotObject),
        None => None,
        Some(v) if is_valid(v, &value) => None,
        Some(_) => Some(InvalidOutput::Schema),
    }
}

/// What a run's structured answers add up to.
#[derive(Debug, Clone, Default)]
pub struct StructuredCounts {
    /// `json_schema` or `json_object` (empty: the run asked for none).
    pub format: String,
    /// The formats' names.
    pub names: Vec<String>,
    /// Answers checked.
    pub checked: u64,
    /// Of which valid.
    pub valid: u64,
    /// The invalid ones by reason.
    pub invalid: std::collections::BTreeMap<InvalidOutput, u64>,
    /// The formats whose first answer was seen.
    seen: Vec<bool>,
    /// Latency of each format's first answer.
    first: crate::measurement::latency::Latency,
    /// Latency of the rest.
    later: crate::measurement::latency::Latency,
}

impl StructuredCounts {
    /// Counts for the run's formats (`structured`), or none.
    pub fn of(structured: Option<&Structured>) -> Self {
        structured.map_or_else(Self::default, |s| Self {
            format: s.kind().to_owned(),
            names: s.names(),
            ..Self::default()
        })
    }

    /// Folds in one measured success's check, its latency `latency`.
    pub fn record(&mut self, check: StructuredCheck, latency: std::time::Duration) {
        self.checked += 1;
        match check.invalid {
            None => self.valid += 1,
            Some(r) => *self.invalid.entry(r).or_insert(0) += 1,
        }
        let k = usize::from(check.schema);
        if self.seen.len() <= k {
            self.seen.resize(k + 1, false);
        }
        if std::mem::replace(&mut self.seen[k], true) {
            self.later.record(latency);
        } else {
            self.first.record(latency);
        }
    }

    /// The summary's block (absent when the run asked for no format).
    pub fn summary(&self) -> Option<batchbench_contract::record::StructuredSummary> {
        if self.format.is_empty() {
            return None;
        }
        Some(batchbench_contract::record::StructuredSummary {
            format: self.format.clone(),
            schemas: if self.format == "json_schema" {
                self.names.clone()
            } else {
                Vec::new()
            },
            checked: self.checked,
            valid: self.valid,
            valid_share: if self.checked > 0 {
                self.valid as f64 / self.checked as f64
            } else {
                0.0
            },
            valid_share_ci: wilson(self.valid, self.checked),
            invalid: self
                .invalid
                .iter()
                .map(|(r, n)| (r.as_str().to_owned(), *n))
                .collect(),
            first_latency_mean_ms: self.first.stats().map(|s| s.mean_ms),
            later_latency_p50_ms: self.later.stats().map(|s| s.p50_ms),
        })
    }
}

/// The 95% Wilson interval of a share `k` of `n`.
pub fn wilson(k: u64, n: u64) -> Option<[f64; 2]> {
    if n == 0 {
        return None;
    }
    let (n, p, z) = (n as f64, k as f64 / n as f64, 1.959_964);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    // At either end the bound is the end itself (rounding aside).
    let lo = if k == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let hi = if k as f64 == n {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    Some([lo, hi])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pet() -> Structured {
        let schema = json!({
            "type": "object",
            "properties": {
                "kind": {"enum": ["cat", "dog"]},
                "name": {"type": "string", "maxLength": 8},
            },
            "required": ["kind", "name"],
            "additionalProperties": false,
        });
        Structured::new(vec![(
            ResponseFormat {
                name: "pet".into(),
                schema: Some(schema),
            },
            Vec::new(),
        )])
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn answers_are_checked_against_their_schema_and_each_failure_has_its_reason() {
        let s = pet();
        let check = |content: &str, finish: Option<&str>| {
            let reply = Reply {
                content: content.into(),
                finish_reason: finish.map(str::to_owned),
                ..Reply::default()
            };
            s.check(0, &reply).invalid
        };
        assert_eq!(
            check(r#" {"kind": "cat", "name": "Tom"} "#, Some("stop")),
            None
        );
        assert_eq!(
            check(r#"{"kind": "cow", "name": "Tom"}"#, Some("stop")),
            Some(InvalidOutput::Schema)
        );
        assert_eq!(
            check(r#"{"kind": "cat", "name": "Tomasz the Great"}"#, None),
            Some(InvalidOutput::Schema),
            "maxLength"
        );
        assert_eq!(
            check(r#"{"kind": "ca"#, Some("length")),
            Some(InvalidOutput::Truncated)
        );
        assert_eq!(
            check("```json\n{}\n```", Some("stop")),
            Some(InvalidOutput::NotJson)
        );
        assert_eq!(check("  ", Some("stop")), Some(InvalidOutput::Empty));
        let any = Structured::new(vec![(
            ResponseFormat {
                name: "json_object".into(),
                schema: None,
            },
            Vec::new(),
        )])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(any.kind(), "json_object");
        let reply = |c: &str| Reply {
            content: c.into(),
            ..Reply::default()
        };
        assert_eq!(
            any.check(0, &reply("[1, 2]")).invalid,
            Some(InvalidOutput::NotObject)
        );
        assert_eq!(any.check(0, &reply("{\"a\": 1}")).invalid, None);
    }

    #[test]
    fn a_schema_that_is_not_one_is_refused_and_formats_rotate() {
        let bad = Structured::new(vec![(
            ResponseFormat {
                name: "broken".into(),
                schema: Some(json!({"type": "no-such-type"})),
            },
            Vec::new(),
        )]);
        assert!(bad.is_err_and(|e| e.starts_with("broken: not a valid JSON Schema")));
        let two = Structured::new(
            ["a", "b"]
                .map(|n| {
                    (
                        ResponseFormat {
                            name: n.into(),
                            schema: Some(json!({"type": "object"})),
                        },
                        vec![("f".to_owned(), json!(n))],
                    )
                })
                .to_vec(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((two.pick(0, 0), two.pick(0, 1), two.pick(1, 0)), (0, 1, 1));
        assert_eq!(two.fields(1), &[("f".to_owned(), json!("b"))]);
        assert_eq!(two.names(), ["a", "b"]);
    }

    #[test]
    fn the_wilson_interval_holds_its_share() {
        let [lo, hi] = wilson(90, 100).unwrap_or_default();
        assert!(lo < 0.9 && hi > 0.9 && lo > 0.82 && hi < 0.95, "{lo} {hi}");
        assert_eq!(wilson(0, 0), None);
        let [lo, hi] = wilson(10, 10).unwrap_or_default();
        assert!(lo > 0.69 && hi == 1.0, "{lo} {hi}");
    }
}
