//! The rows the export works on: one per `prompt_chains` row, with its analytics
//! columns (null where the join found nothing). The same shape is dumped by
//! `--dump-rows-jsonl` and read back by `--rows-jsonl`.

use batchbench_contract::timefmt;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One fetched row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Capture time, Unix milliseconds (RFC 3339 in files).
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub ts: i64,
    /// Gateway instance (UUID text).
    pub instance_id: String,
    /// Request id within the instance.
    pub correlation_id: i64,
    /// Whose request it was (UUID text).
    pub principal_id: String,
    /// Model alias.
    pub model: String,
    /// Cumulative hash after each prompt block, lower-case hex.
    pub chain: Vec<String>,
    /// Role per block.
    pub block_roles: Vec<String>,
    /// Untemplated tokens per block (may be empty).
    #[serde(default)]
    pub block_tokens: Vec<u32>,
    /// `usage.prompt_tokens`.
    #[serde(default)]
    pub prompt_tokens: Option<i64>,
    /// `usage.completion_tokens`.
    #[serde(default)]
    pub completion_tokens: Option<i64>,
    /// Whether the request streamed.
    #[serde(default, deserialize_with = "de_flag")]
    pub stream: Option<bool>,
    /// Requested output cap.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Finish reason.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Backend that served it.
    #[serde(default)]
    pub served_by: Option<String>,
    /// Request origin.
    #[serde(default)]
    pub request_origin: Option<String>,
    /// User id.
    #[serde(default)]
    pub user_id: Option<String>,
    /// API key id.
    #[serde(default)]
    pub api_key_id: Option<String>,
    /// Request duration.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// Time to first byte.
    #[serde(default)]
    pub duration_to_first_byte_ms: Option<i64>,
}

fn ser_ts<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&timefmt::rfc3339_ms(*ms))
}

fn de_ts<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let text = String::deserialize(d)?;
    timefmt::parse_ms(&text).map_err(serde::de::Error::custom)
}

/// `stream` is `Bool` or `UInt8` in the warehouse.
fn de_flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Bool(b)) => Some(b),
        Some(serde_json::Value::Number(n)) => Some(n.as_i64().unwrap_or(0) != 0),
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "stream: expected a bool or 0/1, got {other}"
            )));
        }
    })
}

/// One row from its JSON line.
pub fn parse_row(line: &str) -> Result<Row, String> {
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// Reads a rows file one row at a time; errors name the line.
pub fn for_each_jsonl(path: &std::path::Path, mut f: impl FnMut(Row)) -> Result<(), String> {
    use std::io::BufRead;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = String::new();
    let mut n = 0usize;
    loop {
        line.clear();
        n += 1;
        if reader
            .read_line(&mut line)
            .map_err(|e| format!("{shown}:{n}: {e}"))?
            == 0
        {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        f(parse_row(&line).map_err(|e| format!("{shown}:{n}: {e}"))?);
    }
}

/// Writes one row as a JSON line.
pub fn write_line(row: &Row, out: &mut impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, row)?;
    out.write_all(b"\n")
}
