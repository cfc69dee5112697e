//! Trajectory manifests: the JSONL replay format (schema versions 1 and 2,
//! mixed freely). Each non-empty line is one trajectory; file order is the FIFO
//! admission order (or, for open-loop admission, the order of start offsets with ties
//! in file order).
//!
//! The whole manifest is validated before anything is sent, and every broken line is
//! reported with the file, line, trajectory id, request index and field. The plan stays
//! compact: token counts and interned seeds, never text.

use crate::plan::{Block, BlockRole, Blocks, PlannedRequest, Trajectory};
use crate::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use crate::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Read as _;
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
    /// Yield trajectories by start offset instead of file order (implied under
    /// open-loop admission).
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
    #[serde(default, borrow)]
    model: Option<std::borrow::Cow<'a, str>>,
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
                    && self.model.is_none()
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
            self.model.map(std::borrow::Cow::into_owned),
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

/// A parsed line: version, trajectory id, start offset, model, requests.
type Parts<'a> = (
    u32,
    String,
    Option<f64>,
    Option<String>,
    Vec<FastRequest<'a>>,
);

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
    #[serde(default)]
    model: Option<String>,
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
    /// The model it names (version 2), set on each request that opens a
    /// conversation.
    model: Option<Arc<str>>,
    requests: Vec<PlannedRequest>,
}

/// The outcome of loading a manifest.
#[derive(Debug)]
pub struct Manifest {
    trajectories: Vec<Parsed>,
    /// The highest schema version seen.
    pub schema_version: u32,
    /// Requests planned.
    pub requests: u64,
    /// Trajectories whose blocks disagree with `prompt_tokens - overhead`.
    pub mismatches: Vec<String>,
    /// The models its trajectories name, once each, in file order.
    pub models: Vec<String>,
    /// Where each of `models` is first named (`FILE:LINE: trajectory ID`).
    pub models_at: Vec<String>,
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

/// Bytes handed to a parse worker at a time (whole lines; a longer line grows it).
const CHUNK_BYTES: usize = 1 << 20;

/// Chunks queued per worker: bounds the raw text in memory.
const QUEUED_CHUNKS: usize = 4;

/// A run of whole lines and the number of the first.
struct Chunk {
    index: usize,
    first_line: usize,
    bytes: Vec<u8>,
}

/// Verdicts on the non-empty lines of a chunk, with their line numbers.
type Verdicts = Vec<(usize, Result<LineResult, String>)>;

/// A worker's verdicts on one chunk, with the chunk's index.
type ChunkResult = (usize, Verdicts);

/// Loads and validates a manifest. `Err` lists every broken line.
///
/// Lines are parsed on every core (the reading thread hands out chunks of whole
/// lines); the duplicate-id check runs after, in file order. The SHA-256 digest is
/// not computed here: the source reads it for the final report, after the run.
pub fn load(cfg: &ReplayConfig) -> Result<Manifest, PluginError> {
    load_reporting(cfg, &crate::registry::Preparation::default())
}

/// [`load`], reporting the bytes read to `progress` as it goes.
pub fn load_reporting(
    cfg: &ReplayConfig,
    progress: &crate::registry::Preparation,
) -> Result<Manifest, PluginError> {
    load_in_chunks(cfg, CHUNK_BYTES, progress)
}

fn load_in_chunks(
    cfg: &ReplayConfig,
    chunk_bytes: usize,
    progress: &crate::registry::Preparation,
) -> Result<Manifest, PluginError> {
    let shown = cfg.path.display().to_string();
    let read_error =
        |e: std::io::Error| PluginError::Plan(format!("{shown}: cannot read the manifest: {e}"));
    let mut file = std::fs::File::open(&cfg.path).map_err(read_error)?;
    let size = file.metadata().map_or(0, |m| m.len());
    let what = format!(
        "reading {}",
        cfg.path
            .file_name()
            .map_or_else(|| shown.clone(), |n| n.to_string_lossy().into_owned())
    );
    let mut read = 0u64;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let mut done: Vec<Option<Verdicts>> = Vec::new();
    std::thread::scope(|scope| -> Result<(), PluginError> {
        let (results_tx, results_rx) = std::sync::mpsc::channel::<ChunkResult>();
        // Parsed chunks' buffers go back to the reader: no fresh pages per chunk.
        let (spare_tx, spare_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let mut inboxes = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(QUEUED_CHUNKS);
            let results = results_tx.clone();
            let spare = spare_tx.clone();
            inboxes.push(tx);
            scope.spawn(move || {
                for chunk in rx {
                    let verdicts = parse_chunk(&chunk, cfg);
                    let _ = spare.send(chunk.bytes);
                    if results.send((chunk.index, verdicts)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(results_tx);
        drop(spare_tx);
        let buffer = || {
            let mut b = spare_rx.try_recv().unwrap_or_default();
            b.clear();
            b
        };
        let sent = read_chunks(&mut file, chunk_bytes, buffer, |chunk| {
            read += chunk.bytes.len() as u64;
            progress.report(&what, read, size);
            let worker = chunk.index % workers;
            // A worker only stops when its inbox closes, so this cannot fail.
            let _ = inboxes[worker].send(chunk);
        });
        drop(inboxes);
        let chunks = sent.map_err(read_error)?;
        done.resize_with(chunks, || None);
        for (index, verdicts) in results_rx {
            done[index] = Some(verdicts);
        }
        Ok(())
    })?;

    let mut errors = Vec::new();
    let mut error_count = 0usize;
    let mut trajectories = Vec::new();
    let mut ids: HashMap<Arc<str>, usize> = HashMap::new();
    let mut schema_version = 0;
    let mut requests = 0u64;
    let mut mismatches = Vec::new();
    let (mut models, mut models_at): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut fail = |message: String| {
        error_count += 1;
        if errors.len() < MAX_ERRORS {
            errors.push(message);
        }
    };
    for (line_no, verdict) in done.into_iter().flatten().flatten() {
        match verdict {
            Ok((p, version, mismatch)) => match ids.entry(p.id.clone()) {
                std::collections::hash_map::Entry::Occupied(first) => fail(format!(
                    "{shown}:{line_no}: trajectory {}: field trajectory_id: duplicate (first on line {})",
                    p.id,
                    first.get()
                )),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(line_no);
                    schema_version = schema_version.max(version);
                    requests += p.requests.len() as u64;
                    if let Some(m) = mismatch {
                        mismatches.push(format!("{shown}:{line_no}: {m}"));
                    }
                    if let Some(m) = p.model.as_deref()
                        && !models.iter().any(|x| x == m)
                    {
                        models.push(m.to_owned());
                        models_at.push(format!("{shown}:{line_no}: trajectory {}", p.id));
                    }
                    trajectories.push(p);
                }
            },
            Err(e) => fail(format!("{shown}:{line_no}: {e}")),
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
    if cfg.order_by_start {
        // Stable: equal offsets keep file order.
        trajectories.sort_by_key(|t| t.start_after_ms.unwrap_or(0));
    }
    Ok(Manifest {
        trajectories,
        schema_version,
        requests,
        mismatches,
        models,
        models_at,
    })
}

/// Reads `file` in chunks of whole lines, numbering each chunk's first line; returns
/// how many chunks were handed to `send`.
fn read_chunks(
    file: &mut std::fs::File,
    chunk_bytes: usize,
    buffer: impl Fn() -> Vec<u8>,
    mut send: impl FnMut(Chunk),
) -> std::io::Result<usize> {
    let mut index = 0;
    let mut first_line = 1;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut bytes = buffer();
        bytes.append(&mut carry);
        let kept = bytes.len();
        let want = chunk_bytes.max(kept).max(1);
        bytes.reserve(want);
        let got = (&mut *file).take(want as u64).read_to_end(&mut bytes)?;
        let eof = got < want;
        let cut = if eof {
            bytes.len()
        } else {
            match memchr::memrchr(b'\n', &bytes) {
                Some(p) => p + 1,
                // One line longer than the chunk: read more of it.
                None => {
                    carry = bytes;
                    continue;
                }
            }
        };
        carry.extend_from_slice(&bytes[cut..]);
        bytes.truncate(cut);
        if !bytes.is_empty() {
            let lines = memchr::memchr_iter(b'\n', &bytes).count();
            send(Chunk {
                index,
                first_line,
                bytes,
            });
            index += 1;
            first_line += lines;
        }
        if eof {
            return Ok(index);
        }
    }
}

/// Parses the non-empty lines of a chunk.
fn parse_chunk(chunk: &Chunk, cfg: &ReplayConfig) -> Verdicts {
    let mut out = Vec::new();
    let bytes = &chunk.bytes[..];
    let ends = memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len()));
    let mut from = 0;
    for (i, end) in ends.enumerate() {
        let raw = &bytes[from..end];
        from = (end + 1).min(bytes.len());
        let line_no = chunk.first_line + i;
        let verdict = match std::str::from_utf8(raw) {
            Ok(text) => {
                let text = text.trim();
                if text.is_empty() {
                    continue;
                }
                parse_line(text, cfg)
            }
            Err(e) => Err(format!("not UTF-8 text: {e}")),
        };
        out.push((line_no, verdict));
    }
    out
}

/// The SHA-256 of a file, hex.
pub fn digest(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest as _;
    use std::io::Read as _;
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
    let (id, start, model, raw) = if version == 1 {
        let l: V1Line = serde_json::from_str(text)
            .map_err(|e| at(format!("{} (schema version 1)", field_error(&e))))?;
        (l.trajectory_id, None, None, l.requests)
    } else {
        let l: V2Line = serde_json::from_str(text).map_err(|e| at(field_error(&e)))?;
        (l.trajectory_id, l.start_after_ms, l.model, l.requests)
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
    Ok((version, id, start, model, reqs))
}

/// Validates one manifest line as [`load`] does (for tests and fuzzing): the
/// line's error, or `Ok`.
pub fn check_line(text: &str, cfg: &ReplayConfig) -> Result<(), String> {
    parse_line(text, cfg).map(drop)
}

fn parse_line(text: &str, cfg: &ReplayConfig) -> Result<LineResult, String> {
    let (version, id, start, model, raw) = match serde_json::from_str::<FastLine<'_>>(text) {
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
    if model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(format!(
            "trajectory {id}: field model: must not be empty (omit it instead)"
        ));
    }
    let model: Option<Arc<str>> = model.map(Arc::from);
    let id: Arc<str> = Arc::from(id);
    if raw.is_empty() {
        return Err(format!(
            "trajectory {id}: field requests: must not be empty"
        ));
    }
    let mut out: Vec<PlannedRequest> = Vec::with_capacity(raw.len());
    let mut seen: HashMap<Arc<str>, (u32, BlockRole), ahash::RandomState> = HashMap::default();
    let mut mismatch = None;
    // Requests whose blocks extend the previous request's share one sequence: `seg`
    // is the sequence being built, `users` the requests (and lengths) pointing into it.
    let mut seg: Vec<Block> = Vec::new();
    let mut users: Vec<(usize, usize)> = Vec::new();
    let mut prev_has_blocks = false;
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
        let req = PlannedRequest {
            prompt_tokens: Some(positive(r.prompt_tokens, "prompt_tokens").map_err(at)?),
            output_tokens: Some(positive(r.output_tokens, "output_tokens").map_err(at)?),
            overhead_tokens: overhead,
            stream: r.stream,
            max_tokens: match r.max_tokens {
                None => None,
                Some(x) => Some(positive(Some(x), "max_tokens").map_err(at)?),
            },
            delay_after_ms: millis(r.delay_after_ms, "delay_after_ms").map_err(at)?,
            reset_before: r.reset_before,
            // The conversations it opens go to the trajectory's model.
            model: model.clone().filter(|_| i == 0 || r.reset_before),
            ..PlannedRequest::default()
        };
        let has_blocks = r.blocks.is_some();
        let mut content = 0u64;
        if let Some(bs) = r.blocks {
            if bs.is_empty() {
                return Err(at(
                    "field blocks: must not be empty (omit it instead)".into()
                ));
            }
            // Blocks equal to `seg` so far are shared; a difference starts `own`.
            let mut own: Option<Vec<Block>> = None;
            let count = bs.len();
            for (j, b) in bs.into_iter().enumerate() {
                let at = |m: String| format!("trajectory {id}, request {i}, block {j}: {m}");
                if b.seed.is_empty() {
                    return Err(at("field seed: must not be empty".into()));
                }
                let tokens = positive(Some(b.tokens), "tokens").map_err(at)?;
                // The common case: the same block as the previous request's at this
                // position, already validated and interned.
                if own.is_none()
                    && seg.get(j).is_some_and(|s| {
                        *s.seed == *b.seed
                            && s.tokens == tokens
                            && s.role == b.role
                            && s.live == b.live
                    })
                {
                    content += u64::from(tokens);
                    continue;
                }
                if b.live && b.role != BlockRole::Assistant {
                    return Err(at(format!(
                        "field live: only assistant blocks can be live, not {}",
                        b.role
                    )));
                }
                content += u64::from(tokens);
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
                let block = Block {
                    seed,
                    tokens,
                    role: b.role,
                    live: b.live,
                    text: None,
                };
                match &mut own {
                    Some(v) => v.push(block),
                    None if j == seg.len() => seg.push(block),
                    None if same_block(&seg[j], &block) => {}
                    None => {
                        let mut v = Vec::with_capacity(count);
                        v.extend_from_slice(&seg[..j]);
                        v.push(block);
                        own = Some(v);
                    }
                }
            }
            if let Some(v) = own {
                share(&mut out, std::mem::replace(&mut seg, v), &mut users);
            }
            users.push((i, count));
        }
        // Version-1 style growth (no blocks) must not be negative without a reset.
        if let (Some(prev), false, false, false) =
            (out.last(), req.reset_before, has_blocks, prev_has_blocks)
        {
            let prev: &PlannedRequest = prev;
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
        if mismatch.is_none() && has_blocks {
            let overhead = u64::from(req.overhead_tokens.unwrap_or(cfg.initial_overhead_tokens));
            let prompt = u64::from(req.prompt_tokens.unwrap_or(0));
            if content + overhead != prompt {
                mismatch = Some(format!(
                    "trajectory {id}, request {i}: prompt_tokens {prompt} != sum(blocks.tokens) {content} + overhead {overhead}; the blocks are replayed as written"
                ));
            }
        }
        prev_has_blocks = has_blocks;
        out.push(req);
    }
    share(&mut out, seg, &mut users);
    Ok((
        Parsed {
            id,
            start_after_ms: start,
            model,
            requests: out,
        },
        version,
        mismatch,
    ))
}

/// Equal blocks of one trajectory (seeds are interned per trajectory).
fn same_block(a: &Block, b: &Block) -> bool {
    Arc::ptr_eq(&a.seed, &b.seed) && a.tokens == b.tokens && a.role == b.role && a.live == b.live
}

/// Freezes `seg` and points each of `users` (request index, block count) into it.
fn share(out: &mut [PlannedRequest], seg: Vec<Block>, users: &mut Vec<(usize, usize)>) {
    if users.is_empty() {
        return;
    }
    let all: Arc<[Block]> = Arc::from(seg);
    for (i, len) in users.drain(..) {
        out[i].blocks = Some(Blocks::prefix(all.clone(), len));
    }
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
    /// The manifest, digested for the final report (see [`load`]).
    path: PathBuf,
}

impl Replay {
    /// Loads and validates the manifest; logs blocks/prompt mismatches once per trajectory.
    pub fn new(mut cfg: ReplayConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        cfg.order_by_start |= ctx.order_by_start;
        Ok(Self::from_manifest(
            load_reporting(&cfg, &ctx.progress)?,
            cfg.path,
        ))
    }

    /// A replay of a manifest already loaded (and validated) from `path`.
    pub fn from_manifest(m: Manifest, path: PathBuf) -> Self {
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
            manifest_path: Some(path.display().to_string()),
            manifest_sha256: None,
            schema_version: Some(m.schema_version),
            endless: false,
            models: m.models.clone(),
            models_at: m.models_at.clone(),
        };
        Self {
            info,
            trajectories: m.trajectories.into_iter(),
            path,
        }
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

    /// Adds the manifest's SHA-256, read after the clock stopped: hashing a large
    /// manifest takes seconds of CPU that must delay neither the first request nor
    /// the client during the run.
    fn final_info(&mut self) -> WorkloadInfo {
        if self.info.manifest_sha256.is_none() {
            match digest(&self.path) {
                Ok(hex) => self.info.manifest_sha256 = Some(hex),
                Err(e) => eprintln!(
                    "warning: {}: cannot compute the manifest digest: {e}",
                    self.path.display()
                ),
            }
        }
        self.info.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn manifest(lines: &[String]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        f
    }

    fn config(path: &std::path::Path) -> ReplayConfig {
        ReplayConfig {
            path: path.to_owned(),
            order_by_start: false,
            initial_overhead_tokens: 0,
            turn_overhead_tokens: 0,
        }
    }

    fn block(seed: &str, tokens: u32, role: &str) -> String {
        format!(r#"{{"seed":"{seed}","tokens":{tokens},"role":"{role}"}}"#)
    }

    /// A v2 line whose requests list the given blocks.
    fn line(id: &str, requests: &[Vec<String>]) -> String {
        let reqs: Vec<String> = requests
            .iter()
            .map(|bs| {
                format!(
                    r#"{{"prompt_tokens":100,"output_tokens":5,"blocks":[{}]}}"#,
                    bs.join(",")
                )
            })
            .collect();
        format!(
            r#"{{"schema_version":2,"trajectory_id":"{id}","requests":[{}]}}"#,
            reqs.join(",")
        )
    }

    fn seeds(r: &PlannedRequest) -> Vec<String> {
        r.blocks
            .as_ref()
            .unwrap()
            .iter()
            .map(|b| format!("{}:{}:{}", b.seed, b.tokens, b.role))
            .collect()
    }

    #[test]
    fn a_trajectory_names_its_model_for_each_conversation_it_opens() {
        let req = r#"{"prompt_tokens":10,"output_tokens":2}"#;
        let next = r#"{"prompt_tokens":20,"output_tokens":2}"#;
        let reset = r#"{"prompt_tokens":10,"output_tokens":2,"reset_before":true}"#;
        let lines = [
            format!(
                r#"{{"schema_version":2,"trajectory_id":"a","model":"sql","requests":[{req},{next},{reset}]}}"#
            ),
            format!(r#"{{"schema_version":2,"trajectory_id":"b","requests":[{req}]}}"#),
            format!(
                r#"{{"schema_version":2,"trajectory_id":"c","model":"sql","requests":[{req}]}}"#
            ),
        ];
        let f = manifest(&lines);
        let m = load(&config(f.path())).unwrap();
        assert_eq!(m.models, ["sql"]);
        assert!(
            m.models_at[0].ends_with(":1: trajectory a"),
            "{:?}",
            m.models_at
        );
        let named: Vec<Option<&str>> = m.trajectories[0]
            .requests
            .iter()
            .map(|r| r.model.as_deref())
            .collect();
        assert_eq!(named, [Some("sql"), None, Some("sql")]);
        assert_eq!(m.trajectories[1].requests[0].model, None);
        // Not in version 1; not empty.
        for (text, says) in [
            (
                format!(
                    r#"{{"schema_version":1,"trajectory_id":"v","model":"x","requests":[{req}]}}"#
                ),
                "unknown field `model`",
            ),
            (
                format!(
                    r#"{{"schema_version":2,"trajectory_id":"e","model":"","requests":[{req}]}}"#
                ),
                "trajectory e: field model: must not be empty",
            ),
        ] {
            let e = check_line(&text, &config(f.path())).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn chunking_keeps_lines_numbers_and_order() {
        // Blank lines and lines longer than a chunk, read with chunks of 1 to 4096 bytes.
        let mut lines = Vec::new();
        for i in 0..40 {
            let n = 1 + i % 7;
            let reqs: Vec<Vec<String>> = (0..n)
                .map(|k| {
                    (0..=k)
                        .map(|j| block(&format!("s{i}-{j}"), 3, "user"))
                        .collect()
                })
                .collect();
            lines.push(line(&format!("t{i}"), &reqs));
            if i % 5 == 0 {
                lines.push(String::new());
            }
        }
        // A duplicate id on the last line: its number proves the line count.
        lines.push(line("t3", &[vec![block("x", 1, "user")]]));
        let f = manifest(&lines);
        let cfg = config(f.path());
        let expected_line = lines.len();
        for chunk in [1, 7, 100, 4096] {
            let err = load_in_chunks(&cfg, chunk, &Default::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(":{expected_line}: trajectory t3: field trajectory_id: duplicate (first on line 5)")),
                "chunk {chunk}: {err}"
            );
        }
        let ok = manifest(&lines[..lines.len() - 1]);
        let reference = load_in_chunks(&config(ok.path()), 1 << 20, &Default::default()).unwrap();
        // Progress: the bytes read, rising to the file's size.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let hook = crate::registry::Preparation::new(move |what, done, total| {
            sink.lock().unwrap().push((what.to_owned(), done, total));
        });
        load_in_chunks(&config(ok.path()), 100, &hook).unwrap();
        let seen = seen.lock().unwrap();
        let size = std::fs::metadata(ok.path()).unwrap().len();
        assert!(seen.len() > 2, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0].1 < w[1].1));
        assert!(
            seen.iter()
                .all(|(w, _, t)| w.starts_with("reading ") && *t == size)
        );
        assert_eq!(seen.last().map(|s| s.1), Some(size));
        for chunk in [1, 7, 100, 4096] {
            let m = load_in_chunks(&config(ok.path()), chunk, &Default::default()).unwrap();
            assert_eq!(m.requests, reference.requests);
            let ids: Vec<&str> = m.trajectories.iter().map(|t| &*t.id).collect();
            let want: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
            assert_eq!(ids, want, "chunk {chunk}");
            for (a, b) in m.trajectories.iter().zip(&reference.trajectories) {
                assert_eq!(a.requests, b.requests);
            }
        }
    }

    #[test]
    fn shared_block_sequences_keep_each_request_exact() {
        let a = block("a", 4, "system");
        let b = block("b", 5, "user");
        let c = block("c", 6, "assistant");
        let d = block("d", 7, "user");
        // Grow, shrink to a prefix, grow again, diverge in the middle, start over.
        let reqs = vec![
            vec![a.clone()],
            vec![a.clone(), b.clone()],
            vec![a.clone(), b.clone(), c.clone()],
            vec![a.clone()],
            vec![a.clone(), b.clone(), c.clone(), d.clone()],
            vec![a.clone(), d.clone(), b.clone()],
            vec![c.clone()],
            vec![c.clone(), a.clone()],
        ];
        let f = manifest(&[line("t", &reqs)]);
        let m = load(&config(f.path())).unwrap();
        let got: Vec<Vec<String>> = m.trajectories[0].requests.iter().map(seeds).collect();
        let name = |s: &str| -> String {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            format!(
                "{}:{}:{}",
                v["seed"].as_str().unwrap(),
                v["tokens"],
                v["role"].as_str().unwrap()
            )
        };
        let want: Vec<Vec<String>> = reqs
            .iter()
            .map(|bs| bs.iter().map(|b| name(b)).collect())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_changed_seed_is_reported_even_when_shared() {
        let reqs = vec![vec![block("a", 4, "system")], vec![block("a", 5, "system")]];
        let f = manifest(&[line("t", &reqs)]);
        let err = load(&config(f.path())).unwrap_err().to_string();
        assert!(
            err.contains(
                "trajectory t, request 1, block 0: field seed: seed a was 4 tokens as system"
            ),
            "{err}"
        );
    }
}
