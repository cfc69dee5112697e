//! Structured outputs: an answer that is a JSON instance of the request's
//! schema (or any JSON object), as a grammar-constrained decoder makes one,
//! with its strings of words from the table and everything else drawn from
//! the request's seed; and, at the configured rate, one that is not JSON.

use batchbench_contract::rng::Stream;
use batchbench_engine::tokens::TokenizerHandle;
use serde_json::{Map, Value, json};

/// How deep an instance nests before it gives up (a recursive schema).
const DEPTH: usize = 8;

/// A JSON answer for `schema` (`None`: any JSON object), compact.
pub(super) fn answer(schema: Option<&Value>, tok: &TokenizerHandle, rng: &mut Stream) -> String {
    let any = json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 48}},
        "required": ["answer"],
    });
    instance(schema.unwrap_or(&any), tok, rng, 0).to_string()
}

/// An instance of `schema`: its `const`, one of its `enum`, the first of its
/// `anyOf`/`oneOf`/`allOf`, else one of its type (the first that is not
/// null): an object with every property, an array of its fewest items (one
/// at least), a string of words within its length bounds, a number within
/// its bounds, a boolean.
fn instance(schema: &Value, tok: &TokenizerHandle, rng: &mut Stream, depth: usize) -> Value {
    if depth > DEPTH {
        return Value::Null;
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(options)) = schema.get("enum") {
        if !options.is_empty() {
            return options[rng.below(options.len() as u64) as usize].clone();
        }
    }
    for k in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema
            .get(k)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return instance(first, tok, rng, depth + 1);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ if schema.get("items").is_some() => "array",
        _ => "object",
    };
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    match kind {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    out.insert(name.clone(), instance(sub, tok, rng, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let least = bound("minItems").unwrap_or(1.0).max(1.0) as usize;
            let most = bound("maxItems").map_or(least.max(2), |m| m as usize);
            let n = least.min(most.max(least));
            let items = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            Value::Array(
                (0..n)
                    .map(|_| instance(&items, tok, rng, depth + 1))
                    .collect(),
            )
        }
        "string" => {
            let most = bound("maxLength").map_or(40, |m| m as usize);
            let least = bound("minLength").map_or(0, |m| m as usize);
            let mut s = String::new();
            let words = 1 + rng.below(4) as usize;
            tok.push_words(rng, words, &mut s);
            let mut s: String = s.trim().chars().take(most).collect();
            while s.chars().count() < least {
                s.push('a');
            }
            Value::String(s)
        }
        "integer" | "number" => {
            let lo = bound("minimum").unwrap_or(0.0).ceil() as i64;
            let hi = bound("maximum")
                .map_or(lo + 100, |h| h.floor() as i64)
                .max(lo);
            json!(rng.range_inclusive(lo, hi))
        }
        "boolean" => Value::Bool(rng.below(2) == 1),
        _ => Value::Null,
    }
}

/// `answer` cut to `keep` of its `tokens` (by characters: the tokens are
/// about as long as each other), as an output cap cuts a reply.
pub(super) fn cut(answer: &str, tokens: usize, keep: usize) -> String {
    if keep >= tokens {
        return answer.to_owned();
    }
    let chars = answer.chars().count() * keep / tokens.max(1);
    answer.chars().take(chars).collect()
}

/// An answer that is not JSON: its last character gone (an object never
/// closed).
pub(super) fn broken(answer: &str) -> String {
    let mut s = answer.to_owned();
    s.pop();
    s
}
