//! `replay_jsonl`: trajectory replay from a JSONL manifest (schema versions 1 and 2,
//! mixed freely). Each non-empty line is one trajectory; file order is the FIFO
//! admission order (or, for open-loop admission, the order of start offsets with ties
//! in file order).
//!
//! The whole manifest is validated before anything is sent, and every broken line is
//! reported with the file, line, trajectory id, request index and field. The plan stays
//! compact: token counts and interned seeds, never text.

use batchbench_core::plan::{Block, BlockRole, PlannedRequest, Trajectory};
use batchbench_core::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_core::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

/// How many broken lines are listed before the rest are only counted.
const MAX_ERRORS: usize = 50;

/// Config of [`Replay`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// The manifest.
    pub path: PathBuf,
    /// Yield trajectories by start offset (open-loop admission) instead of file order.
    #[serde(default)]
    pub order_by_start: bool,
    /// Template tokens of a first or reset request (when a request gives no
    /// `overhead_tokens`): used to check v2 blocks against `prompt_tokens`.
    #[serde(default)]
    pub initial_overhead_tokens: u32,
    /// Template tokens of each appended turn (v1 environment growth check).
    #[serde(default)]
    pub turn_overhead_tokens: u32,
}

/// Every field of both versions, parsed in one pass with borrowed strings; the
/// version-1 exclusions are checked after. A line that fails here is parsed again
/// by the precise path, which names the request and field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastLine<'a> {
    schema_version: u32,
    #[serde(borrow)]
    trajectory_id: std::borrow::Cow<'a, str>,
    #[serde(default)]
    start_after_ms: Option<f64>,
    #[serde(borrow)]
    requests: Vec<FastRequest<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastRequest<'a> {
    prompt_tokens: Option<i64>,
    output_tokens: Option<i64>,
    #[serde(default)]
    overhead_tokens: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    delay_after_ms: Option<f64>,
    #[serde(default)]
    reset_before: bool,
    #[serde(default, borrow)]
    blocks: Option<Vec<FastBlock<'a>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastBlock<'a> {
    #[serde(borrow)]
    seed: std::borrow::Cow<'a, str>,
    tokens: i64,
    role: BlockRole,
    #[serde(default)]
    live: bool,
}

impl<'a> FastLine<'a> {
    /// Whether the typed fields form a valid line of its version; anything else goes
    /// to the precise path for its message.
    fn plausible(&self) -> bool {
        match self.schema_version {
            1 => {
                self.start_after_ms.is_none()
                    && self.requests.iter().all(|r| {
                        r.overhead_tokens.is_none()
                            && r.stream.is_none()
                            && r.max_tokens.is_none()
                            && r.blocks.is_none()
                    })
            }
            2 => true,
            _ => false,
        }
    }

    /// Converts to the common form (seeds stay borrowed from the line).
    fn into_parts(self) -> Parts<'a> {
        (
            self.schema_version,
            self.trajectory_id.into_owned(),
            self.start_after_ms,
            self.requests,
        )
    }
}

impl FastRequest<'_> {
    /// The same request, owning its seeds.
    fn into_owned(self) -> FastRequest<'static> {
        FastRequest {
            blocks: self.blocks.map(|bs| {
                bs.into_iter()
                    .map(|b| FastBlock {
                        seed: std::borrow::Cow::Owned(b.seed.into_owned()),
                        ..b
                    })
                    .collect()
            }),
            ..self
        }
    }
}

/// A parsed line: version, trajectory id, start offset, requests.
type Parts<'a> = (u32, String, Option<f64>, Vec<FastRequest<'a>>);

#[derive(Deserialize)]
struct Peek {
    schema_version: Option<serde_json::Value>,
    trajectory_id: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Line {
    #[allow(dead_code)]
    schema_version: u32,
    trajectory_id: String,
    requests: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V2Line {
    #[allow(dead_code)]
    schema_version: u32,
    trajectory_id: String,
    #[serde(default)]
    start_after_ms: Option<f64>,
    requests: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1Request {
    prompt_tokens: Option<i64>,
    output_tokens: Option<i64>,
    #[serde(default)]
    delay_after_ms: Option<f64>,
    #[serde(default)]
    reset_before: bool,
}

/// One parsed trajectory.
#[derive(Debug)]
struct Parsed {
    id: Arc<str>,
    start_after_ms: Option<u64>,
    requests: Vec<PlannedRequest>,
}

/// The outcome of loading a manifest.
#[derive(Debug)]
pub struct Manifest {
    trajectories: Vec<Parsed>,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// The highest schema version seen.
    pub schema_version: u32,
    /// Requests planned.
    pub requests: u64,
    /// Trajectories whose blocks disagree with `prompt_tokens - overhead`.
    pub mismatches: Vec<String>,
}

fn positive(v: Option<i64>, field: &str) -> Result<u32, String> {
    match v {
        None => Err(format!("field {field}: missing (required)")),
        Some(x) if x > 0 && x <= i64::from(u32::MAX) => Ok(x as u32),
        Some(x) => Err(format!(
            "field {field}: must be a positive integer, got {x}"
        )),
    }
}

fn millis(v: Option<f64>, field: &str) -> Result<u64, String> {
    match v {
        None => Ok(0),
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x.round() as u64),
        Some(x) => Err(format!("field {field}: must be a number >= 0, got {x}")),
    }
}

/// Loads and validates a manifest. `Err` lists every broken line.
pub fn load(cfg: &ReplayConfig) -> Result<Manifest, PluginError> {
    use sha2::Digest as _;
    let path = &cfg.path;
    let shown = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| PluginError::Plan(format!("{shown}: cannot read the manifest: {e}")))?;
    // The digest is computed on another thread while this one parses.
    let digest = {
        let path = path.clone();
        std::thread::spawn(move || -> std::io::Result<String> {
            use std::io::Read;
            let mut f = std::fs::File::open(path)?;
            let mut hasher = sha2::Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
            Ok(hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect())
        })
    };
    let mut errors = Vec::new();
    let mut error_count = 0usize;
    let mut trajectories = Vec::new();
    let mut ids: HashMap<Arc<str>, usize> = HashMap::new();
    let mut schema_version = 0;
    let mut requests = 0u64;
    let mut mismatches = Vec::new();
    let mut reader = std::io::BufReader::new(file);
    let mut buf = String::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_line(&mut buf)
            .map_err(|e| PluginError::Plan(format!("{shown}: cannot read the manifest: {e}")))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = buf.trim();
        if text.is_empty() {
            continue;
        }
        match parse_line(text, line_no, &mut ids, cfg) {
            Ok((p, version, mismatch)) => {
                schema_version = schema_version.max(version);
                requests += p.requests.len() as u64;
                if let Some(m) = mismatch {
                    mismatches.push(format!("{shown}:{line_no}: {m}"));
                }
                trajectories.push(p);
            }
            Err(e) => {
                error_count += 1;
                if errors.len() < MAX_ERRORS {
                    errors.push(format!("{shown}:{line_no}: {e}"));
                }
            }
        }
    }
    if error_count > errors.len() {
        errors.push(format!(
            "{shown}: ... and {} more broken lines",
            error_count - errors.len()
        ));
    }
    if !errors.is_empty() {
        return Err(PluginError::Plan(errors.join("\n")));
    }
    if trajectories.is_empty() {
        return Err(PluginError::Plan(format!(
            "{shown}: the manifest holds no trajectories"
        )));
    }
    let sha256 = digest
        .join()
        .map_err(|_| PluginError::Plan(format!("{shown}: the digest thread failed")))?
        .map_err(|e| PluginError::Plan(format!("{shown}: cannot read the manifest: {e}")))?;
    if cfg.order_by_start {
        // Stable: equal offsets keep file order.
        trajectories.sort_by_key(|t| t.start_after_ms.unwrap_or(0));
    }
    Ok(Manifest {
        trajectories,
        sha256,
        schema_version,
        requests,
        mismatches,
    })
}

type LineResult = (Parsed, u32, Option<String>);

/// The precise (slow) path: names the request and field of whatever is wrong.
fn parse_precise(text: &str) -> Result<Parts<'static>, String> {
    let peek: Peek = serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let tid = peek
        .trajectory_id
        .as_ref()
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let at = |m: String| match &tid {
        Some(id) => format!("trajectory {id}: {m}"),
        None => m,
    };
    let version = match peek
        .schema_version
        .as_ref()
        .and_then(serde_json::Value::as_u64)
    {
        Some(v @ (1 | 2)) => v as u32,
        Some(v) => {
            return Err(at(format!(
                "field schema_version: unsupported version {v} (known: 1, 2)"
            )));
        }
        None => return Err(at("field schema_version: missing or not an integer".into())),
    };
    let (id, start, raw) = if version == 1 {
        let l: V1Line = serde_json::from_str(text)
            .map_err(|e| at(format!("{} (schema version 1)", field_error(&e))))?;
        (l.trajectory_id, None, l.requests)
    } else {
        let l: V2Line = serde_json::from_str(text).map_err(|e| at(field_error(&e)))?;
        (l.trajectory_id, l.start_after_ms, l.requests)
    };
    let mut reqs = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let at = |m: String| format!("trajectory {id}, request {i}: {m}");
        reqs.push(if version == 1 {
            let r: V1Request = serde_json::from_value(r)
                .map_err(|e| at(format!("{} (schema version 1)", field_error(&e))))?;
            FastRequest {
                prompt_tokens: r.prompt_tokens,
                output_tokens: r.output_tokens,
                overhead_tokens: None,
                stream: None,
                max_tokens: None,
                delay_after_ms: r.delay_after_ms,
                reset_before: r.reset_before,
                blocks: None,
            }
        } else {
            // Borrowing from the value, then owning: the value ends with this loop.
            FastRequest::deserialize(&r)
                .map_err(|e| at(field_error(&e)))?
                .into_owned()
        });
    }
    Ok((version, id, start, reqs))
}

fn parse_line(
    text: &str,
    line: usize,
    ids: &mut HashMap<Arc<str>, usize>,
    cfg: &ReplayConfig,
) -> Result<LineResult, String> {
    let (version, id, start, raw) = match serde_json::from_str::<FastLine<'_>>(text) {
        Ok(l) if l.plausible() => l.into_parts(),
        _ => parse_precise(text)?,
    };
    if id.is_empty() {
        return Err("field trajectory_id: must not be empty".into());
    }
    let start = match start {
        None => None,
        Some(s) => {
            Some(millis(Some(s), "start_after_ms").map_err(|e| format!("trajectory {id}: {e}"))?)
        }
    };
    let id: Arc<str> = Arc::from(id);
    if let Some(first) = ids.get(&id) {
        return Err(format!(
            "trajectory {id}: field trajectory_id: duplicate (first on line {first})"
        ));
    }
    if raw.is_empty() {
        return Err(format!(
            "trajectory {id}: field requests: must not be empty"
        ));
    }
    let mut out: Vec<PlannedRequest> = Vec::with_capacity(raw.len());
    let mut seen: HashMap<Arc<str>, (u32, BlockRole)> = HashMap::new();
    let mut mismatch = None;
    for (i, r) in raw.into_iter().enumerate() {
        let at = |m: String| format!("trajectory {id}, request {i}: {m}");
        if version == 1 && r.reset_before && i == 0 {
            return Err(at(
                "field reset_before: not allowed on the first request in schema version 1".into(),
            ));
        }
        let overhead = match r.overhead_tokens {
            None => None,
            Some(x) if (0..=i64::from(u32::MAX)).contains(&x) => Some(x as u32),
            Some(x) => return Err(at(format!("field overhead_tokens: must be >= 0, got {x}"))),
        };
        let blocks = match r.blocks {
            None => None,
            Some(bs) if bs.is_empty() => {
                return Err(at(
                    "field blocks: must not be empty (omit it instead)".into()
                ));
            }
            Some(bs) => {
                let mut v = Vec::with_capacity(bs.len());
                for (j, b) in bs.into_iter().enumerate() {
                    let at = |m: String| format!("trajectory {id}, request {i}, block {j}: {m}");
                    if b.seed.is_empty() {
                        return Err(at("field seed: must not be empty".into()));
                    }
                    let tokens = positive(Some(b.tokens), "tokens").map_err(at)?;
                    if b.live && b.role != BlockRole::Assistant {
                        return Err(at(format!(
                            "field live: only assistant blocks can be live, not {}",
                            b.role
                        )));
                    }
                    // Interned per trajectory: its blocks repeat turn after turn.
                    let seed = match seen.get_key_value(b.seed.as_ref()) {
                        Some((s, &(t, role))) => {
                            if t != tokens || role != b.role {
                                return Err(at(format!(
                                    "field seed: seed {s} was {t} tokens as {role} earlier in this trajectory, now {tokens} as {}; a seed keeps one token count and one role",
                                    b.role
                                )));
                            }
                            s.clone()
                        }
                        None => {
                            let s: Arc<str> = Arc::from(b.seed.as_ref());
                            seen.insert(s.clone(), (tokens, b.role));
                            s
                        }
                    };
                    v.push(Block {
                        seed,
                        tokens,
                        role: b.role,
                        live: b.live,
                    });
                }
                Some(Arc::from(v))
            }
        };
        let req = PlannedRequest {
            prompt_tokens: Some(positive(r.prompt_tokens, "prompt_tokens").map_err(at)?),
            output_tokens: Some(positive(r.output_tokens, "output_tokens").map_err(at)?),
            overhead_tokens: overhead,
            blocks,
            stream: r.stream,
            max_tokens: match r.max_tokens {
                None => None,
                Some(x) => Some(positive(Some(x), "max_tokens").map_err(at)?),
            },
            delay_after_ms: millis(r.delay_after_ms, "delay_after_ms").map_err(at)?,
            reset_before: r.reset_before,
            ..PlannedRequest::default()
        };
        // Version-1 style growth (no blocks) must not be negative without a reset.
        if let (Some(prev), false, None) = (out.last(), req.reset_before, &req.blocks) {
            let prev: &PlannedRequest = prev;
            if prev.blocks.is_none() {
                let (p0, p1) = (
                    i64::from(prev.prompt_tokens.unwrap_or(0)),
                    i64::from(req.prompt_tokens.unwrap_or(0)),
                );
                let growth = p1
                    - p0
                    - i64::from(prev.output_tokens.unwrap_or(0))
                    - i64::from(cfg.turn_overhead_tokens);
                if growth < 0 {
                    return Err(at(format!(
                        "field prompt_tokens: environment growth {p1} - {p0} - {} - {} = {growth} is negative; mark this request \"reset_before\": true",
                        prev.output_tokens.unwrap_or(0),
                        cfg.turn_overhead_tokens
                    )));
                }
            }
        }
        if mismatch.is_none() {
            if let Some(bs) = &req.blocks {
                let content: u64 = bs.iter().map(|b| u64::from(b.tokens)).sum();
                let overhead =
                    u64::from(req.overhead_tokens.unwrap_or(cfg.initial_overhead_tokens));
                let prompt = u64::from(req.prompt_tokens.unwrap_or(0));
                if content + overhead != prompt {
                    mismatch = Some(format!(
                        "trajectory {id}, request {i}: prompt_tokens {prompt} != sum(blocks.tokens) {content} + overhead {overhead}; the blocks are replayed as written"
                    ));
                }
            }
        }
        out.push(req);
    }
    ids.insert(id.clone(), line);
    Ok((
        Parsed {
            id,
            start_after_ms: start,
            requests: out,
        },
        version,
        mismatch,
    ))
}

/// serde's message, which names the field (`unknown field `x``, `missing field `y``,
/// `invalid type ...`), without the line/column of the single-line document.
fn field_error(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// The replay workload.
#[derive(Debug)]
pub struct Replay {
    info: WorkloadInfo,
    trajectories: std::vec::IntoIter<Parsed>,
}

impl Replay {
    /// Loads and validates the manifest; logs blocks/prompt mismatches once per trajectory.
    pub fn new(cfg: ReplayConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let m = load(&cfg)?;
        const SHOWN: usize = 10;
        for w in m.mismatches.iter().take(SHOWN) {
            eprintln!("warning: {w}");
        }
        if m.mismatches.len() > SHOWN {
            eprintln!(
                "warning: ... and {} more trajectories whose blocks disagree with prompt_tokens",
                m.mismatches.len() - SHOWN
            );
        }
        let info = WorkloadInfo {
            mode: "trajectory_replay".into(),
            planned_trajectories: Some(m.trajectories.len() as u64),
            planned_requests: Some(m.requests),
            manifest_path: Some(cfg.path.display().to_string()),
            manifest_sha256: Some(m.sha256.clone()),
            schema_version: Some(m.schema_version),
        };
        Ok(Self {
            info,
            trajectories: m.trajectories.into_iter(),
        })
    }
}

impl WorkloadSource for Replay {
    fn info(&self) -> WorkloadInfo {
        self.info.clone()
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        let p = self.trajectories.next()?;
        let mut t = Trajectory::from_vec(p.id, p.requests);
        t.start_after_ms = p.start_after_ms;
        Some(Ok(t))
    }
}

batchbench_core::register_workload! {
    name: "replay_jsonl",
    description: "trajectory replay from a JSONL manifest (schema versions 1 and 2: token shapes, shared-prefix blocks, think times, start offsets)",
    example: r#"{"path": "examples/trajectory-replay/plans-v2.jsonl", "order_by_start": true}"#,
    config: ReplayConfig,
    build: Replay::new,
}
