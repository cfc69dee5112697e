//! A JSON value written as block-style YAML (for the llm-d Benchmark Report,
//! whose tools read YAML). Strings are always double-quoted with JSON escapes,
//! which YAML reads the same; numbers are written in plain decimal, since a
//! YAML 1.1 reader takes `1e-5` for a string.

use serde_json::Value;
use std::fmt::Write as _;

/// `v` as a YAML document, the top-level keys named in `first` first, in that
/// order (the rest sorted).
pub fn to_yaml_ordered(v: &Value, first: &[&str]) -> String {
    let Value::Object(m) = v else {
        return to_yaml(v);
    };
    let mut out = String::new();
    let keys = first
        .iter()
        .filter(|k| m.contains_key(**k))
        .map(|k| (*k).to_owned())
        .chain(m.keys().filter(|k| !first.contains(&k.as_str())).cloned());
    for k in keys {
        let mut one = serde_json::Map::new();
        one.insert(k.clone(), m[&k].clone());
        out.push_str(&to_yaml(&Value::Object(one)));
    }
    out
}

/// `v` as a YAML document.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => block(&mut out, v, 0),
        Value::Array(a) if !a.is_empty() => block(&mut out, v, 0),
        _ => {
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            // Rust writes f64 in plain decimal, never with an exponent.
            (_, _, Some(f)) if f.is_finite() => {
                let s = f.to_string();
                if s.contains('.') { s } else { format!("{s}.0") }
            }
            _ => "null".into(),
        },
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        // Only called with scalars and empty collections.
        _ => "{}".into(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

fn block(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                let key = Value::String(k.clone()).to_string();
                if is_block(val) {
                    let _ = writeln!(out, "{pad}{key}:");
                    block(out, val, indent + 2);
                } else {
                    let _ = writeln!(out, "{pad}{key}: {}", scalar(val));
                }
            }
        }
        Value::Array(a) => {
            for val in a {
                if is_block(val) {
                    let _ = writeln!(out, "{pad}-");
                    block(out, val, indent + 2);
                } else {
                    let _ = writeln!(out, "{pad}- {}", scalar(val));
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", scalar(other));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_values_are_blocks_and_scalars_are_safe() {
        let v = json!({
            "version": "0.2.1",
            "n": 3,
            "f": 0.00001,
            "g": 2.0,
            "list": [1, {"a": "x: y"}, []],
            "empty": {},
            "none": null,
            "quote": "say \"hi\"\n",
        });
        let y = to_yaml(&v);
        let want = "\"empty\": {}\n\"f\": 0.00001\n\"g\": 2.0\n\"list\":\n  - 1\n  -\n    \"a\": \"x: y\"\n  - []\n\"n\": 3\n\"none\": null\n\"quote\": \"say \\\"hi\\\"\\n\"\n\"version\": \"0.2.1\"\n";
        assert_eq!(y, want);
        let o = to_yaml_ordered(&json!({"b": 1, "a": {"c": 2}, "z": 0}), &["z", "a"]);
        assert_eq!(o, "\"z\": 0\n\"a\":\n  \"c\": 2\n\"b\": 1\n");
    }
}
