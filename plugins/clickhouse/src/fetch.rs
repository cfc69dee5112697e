//! Reading the window from ClickHouse with the official `clickhouse` crate: both
//! sides of the join bounded before joining, filters as server-side parameters,
//! table and column names checked as identifiers, rows streamed.

use crate::rows::Row;
use batchbench_contract::timefmt;
use serde::Deserialize;

/// Where and how to read.
#[derive(Debug, Clone)]
pub struct Source {
    /// Chains table (or view).
    pub chains_table: String,
    /// Read the chains table with FINAL.
    pub chains_final: bool,
    /// Analytics table.
    pub analytics_table: String,
    /// The analytics column that bounds its side of the join.
    pub analytics_ts_column: String,
}

/// The connection: `CLICKHOUSE_URL` (credentials may sit in it), or
/// `CLICKHOUSE_USER` / `CLICKHOUSE_PASSWORD` beside it.
#[derive(Clone)]
pub struct Connection {
    url: String,
    user: Option<String>,
    password: Option<String>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({})", redact_url(&self.url))
    }
}

impl Connection {
    /// From the environment.
    pub fn from_env() -> Result<Self, String> {
        let raw = std::env::var("CLICKHOUSE_URL")
            .map_err(|_| "CLICKHOUSE_URL is not set (for example https://user:password@host:8443), or pass --rows-jsonl".to_owned())?;
        Self::parse(
            &raw,
            std::env::var("CLICKHOUSE_USER").ok(),
            std::env::var("CLICKHOUSE_PASSWORD").ok(),
        )
    }

    /// From a URL and optional separate credentials (which win over the URL's).
    pub fn parse(
        raw: &str,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Self, String> {
        // The text itself is never repeated: it may hold a password.
        let mut url =
            reqwest::Url::parse(raw).map_err(|e| format!("CLICKHOUSE_URL is not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "CLICKHOUSE_URL must be http:// or https://, not {}:",
                url.scheme()
            ));
        }
        // An unescaped `/` in a password moves the rest into the path: refuse it
        // rather than repeat any of it.
        if url.path().contains('@') || url.query().is_some_and(|q| q.contains('@')) {
            return Err(
                "CLICKHOUSE_URL: percent-encode the user and password (a '/' in them must be %2F)"
                    .into(),
            );
        }
        let decode = percent_decode;
        let url_user = (!url.username().is_empty()).then(|| decode(url.username()));
        let url_password = url.password().map(decode);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Ok(Self {
            url: url.as_str().trim_end_matches('/').to_owned(),
            user: user.or(url_user),
            password: password.or(url_password),
        })
    }

    /// The URL without credentials.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Removes every credential from a message (the client's own errors included).
    pub fn redact(&self, message: &str) -> String {
        let mut m = redact_url(message);
        for secret in [&self.password, &self.user].into_iter().flatten() {
            if secret.len() >= 2 {
                m = m.replace(secret.as_str(), "***");
                let encoded: String = secret
                    .bytes()
                    .map(|b| {
                        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                            (b as char).to_string()
                        } else {
                            format!("%{b:02X}")
                        }
                    })
                    .collect();
                m = m.replace(&encoded, "***");
            }
        }
        m
    }

    fn client(&self) -> clickhouse::Client {
        let mut c = clickhouse::Client::default().with_url(&self.url);
        if let Some(u) = &self.user {
            c = c.with_user(u);
        }
        if let Some(p) = &self.password {
            c = c.with_password(p);
        }
        c
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `scheme://user:password@host` becomes `scheme://***@host` anywhere in `text`.
pub fn redact_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&tail[at..end]);
            }
            None => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// A table or column name: letters, digits and `_`, with at most one `.`.
pub fn identifier(what: &str, name: &str) -> Result<String, String> {
    let parts: Vec<&str> = name.split('.').collect();
    let ok = parts.len() <= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
    if !ok {
        return Err(format!(
            "{what} {name:?} is not a plain name (letters, digits, _ and at most one .)"
        ));
    }
    Ok(parts
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join("."))
}

/// The row as the query returns it.
#[derive(Debug, clickhouse::Row, Deserialize)]
struct Wire {
    ts_ms: i64,
    instance_id: String,
    correlation_id: i64,
    principal_id: String,
    model: String,
    chain: Vec<String>,
    block_roles: Vec<String>,
    block_tokens: Vec<u32>,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    stream: Option<u8>,
    max_tokens: Option<i64>,
    finish_reason: Option<String>,
    served_by: Option<String>,
    request_origin: Option<String>,
    user_id: Option<String>,
    api_key_id: Option<String>,
    duration_ms: Option<i64>,
    duration_to_first_byte_ms: Option<i64>,
}

/// Filters sent as parameters.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    /// Model alias.
    pub model: Option<String>,
    /// Principal (UUID text).
    pub principal_id: Option<String>,
    /// Backend.
    pub served_by: Option<String>,
}

const DAY_MS: i64 = 86_400_000;

fn ch_time(ms: i64) -> String {
    // ClickHouse's text form, UTC.
    timefmt::rfc3339_ms(ms)
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

/// The query text (names already validated).
pub fn query(src: &Source, f: &Filters) -> Result<String, String> {
    let chains = identifier("--chains-table", &src.chains_table)?;
    let analytics = identifier("--analytics-table", &src.analytics_table)?;
    let ts_col = identifier("--analytics-ts-column", &src.analytics_ts_column)?;
    let fin = if src.chains_final { " FINAL" } else { "" };
    let mut chain_filters = String::new();
    if f.model.is_some() {
        chain_filters.push_str(" AND model = {model:String}");
    }
    if f.principal_id.is_some() {
        chain_filters.push_str(" AND principal_id = {principal_id:UUID}");
    }
    let analytics_filter = if f.served_by.is_some() {
        " AND served_by = {served_by:String}"
    } else {
        ""
    };
    Ok(format!(
        "SELECT toUnixTimestamp64Milli(c.ts) AS ts_ms, toString(c.instance_id) AS instance_id, \
         c.correlation_id AS correlation_id, toString(c.principal_id) AS principal_id, \
         c.model AS model, arrayMap(h -> lower(hex(h)), c.chain) AS chain, \
         c.block_roles AS block_roles, c.block_tokens AS block_tokens, \
         CAST(a.prompt_tokens, 'Nullable(Int64)') AS prompt_tokens, \
         CAST(a.completion_tokens, 'Nullable(Int64)') AS completion_tokens, \
         CAST(a.stream, 'Nullable(UInt8)') AS stream, \
         CAST(a.max_tokens, 'Nullable(Int64)') AS max_tokens, \
         CAST(a.finish_reason, 'Nullable(String)') AS finish_reason, \
         CAST(a.served_by, 'Nullable(String)') AS served_by, \
         CAST(a.request_origin, 'Nullable(String)') AS request_origin, \
         CAST(a.user_id, 'Nullable(String)') AS user_id, \
         CAST(a.api_key_id, 'Nullable(String)') AS api_key_id, \
         CAST(a.duration_ms, 'Nullable(Int64)') AS duration_ms, \
         CAST(a.duration_to_first_byte_ms, 'Nullable(Int64)') AS duration_to_first_byte_ms \
         FROM (SELECT ts, instance_id, correlation_id, principal_id, model, chain, block_roles, block_tokens \
               FROM {chains}{fin} \
               WHERE ts >= {{lo:DateTime64(3, 'UTC')}} AND ts < {{hi:DateTime64(3, 'UTC')}}{chain_filters}) AS c \
         LEFT ANY JOIN (SELECT instance_id, correlation_id, prompt_tokens, completion_tokens, stream, max_tokens, \
                    finish_reason, served_by, request_origin, user_id, api_key_id, duration_ms, duration_to_first_byte_ms \
                    FROM {analytics} \
                    WHERE {ts_col} >= {{alo:DateTime64(3, 'UTC')}} AND {ts_col} < {{ahi:DateTime64(3, 'UTC')}}{analytics_filter}) AS a \
         ON c.instance_id = a.instance_id AND c.correlation_id = a.correlation_id \
         ORDER BY c.principal_id, c.ts, c.instance_id, c.correlation_id \
         SETTINGS join_use_nulls = 1"
    ))
}

/// Streams the window's rows (from one link window before `start`) to `on_row`.
pub async fn fetch(
    conn: &Connection,
    src: &Source,
    f: &Filters,
    (start_ms, end_ms, link_window_ms): (i64, i64, i64),
    mut on_row: impl FnMut(Row) -> Result<(), String>,
) -> Result<(), String> {
    let sql = query(src, f)?;
    let lo = start_ms - link_window_ms;
    let mut q = conn
        .client()
        .query(&sql)
        .param("lo", ch_time(lo))
        .param("hi", ch_time(end_ms))
        .param("alo", ch_time(lo - DAY_MS))
        .param("ahi", ch_time(end_ms + DAY_MS));
    if let Some(m) = &f.model {
        q = q.param("model", m);
    }
    if let Some(p) = &f.principal_id {
        q = q.param("principal_id", p);
    }
    if let Some(s) = &f.served_by {
        q = q.param("served_by", s);
    }
    let fail =
        |e: clickhouse::error::Error| conn.redact(&format!("ClickHouse at {}: {e}", conn.url()));
    let mut cursor = q.fetch::<Wire>().map_err(fail)?;
    while let Some(w) = cursor.next().await.map_err(fail)? {
        on_row(Row {
            ts: w.ts_ms,
            instance_id: w.instance_id,
            correlation_id: w.correlation_id,
            principal_id: w.principal_id,
            model: w.model,
            chain: w.chain,
            block_roles: w.block_roles,
            block_tokens: w.block_tokens,
            prompt_tokens: w.prompt_tokens,
            completion_tokens: w.completion_tokens,
            stream: w.stream.map(|s| s != 0),
            max_tokens: w.max_tokens,
            finish_reason: w.finish_reason,
            served_by: w.served_by,
            request_origin: w.request_origin,
            user_id: w.user_id,
            api_key_id: w.api_key_id,
            duration_ms: w.duration_ms,
            duration_to_first_byte_ms: w.duration_to_first_byte_ms,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_plain_names() {
        assert_eq!(
            identifier("t", "clay.prompt_chains").unwrap(),
            "`clay`.`prompt_chains`"
        );
        assert_eq!(identifier("t", "ts_2").unwrap(), "`ts_2`");
        for bad in [
            "a.b.c",
            "x; DROP TABLE y",
            "a-b",
            "",
            ".a",
            "a.",
            "a`b",
            "a b",
        ] {
            assert!(identifier("--chains-table", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_never_survive_redaction() {
        let c =
            Connection::parse("https://alice:s3cr%2Ft@db.example.com:8443", None, None).unwrap();
        assert_eq!(c.url(), "https://db.example.com:8443");
        let m = c.redact(
            "error for https://alice:s3cr%2Ft@db.example.com:8443/?x=1: password s3cr/t rejected",
        );
        assert!(!m.contains("s3cr"), "{m}");
        assert!(m.contains("db.example.com"), "{m}");
        let c = Connection::parse(
            "http://host:8123",
            Some("bob".into()),
            Some("hunter22".into()),
        )
        .unwrap();
        assert!(
            !c.redact("auth failed for bob with hunter22")
                .contains("hunter22")
        );
        assert!(!format!("{c:?}").contains("hunter22"));
        assert!(Connection::parse("ftp://x", None, None).is_err());
        for bad in [
            "not a url with pw:secret@",
            "user:secret@host:8123",
            "https://u:se/cret@host:8443",
            "htps://u:p/secret@h",
        ] {
            let e = Connection::parse(bad, None, None).unwrap_err();
            assert!(!e.contains("secret") && !e.contains("cret@"), "{bad}: {e}");
        }
    }
}
