//! Session reconstruction: prompt-chain rows into version-2 trajectories, by the
//! rules existing users depend on (see the book's ClickHouse page).

use crate::rows::Row;
use batchbench_contract::plan::BlockRole;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// What to export.
#[derive(Debug, Clone)]
pub struct Options {
    /// Window start, Unix milliseconds (inclusive).
    pub start_ms: i64,
    /// Window end, Unix milliseconds (exclusive).
    pub end_ms: i64,
    /// How far back a parent may lie.
    pub link_window_ms: i64,
    /// Divides start offsets and delays.
    pub time_scale: f64,
    /// Keep only this model.
    pub model: Option<String>,
    /// Keep only this principal.
    pub principal_id: Option<String>,
    /// Keep only this backend.
    pub served_by: Option<String>,
    /// Fraction of trajectories kept.
    pub sample: f64,
    /// Sampling seed.
    pub seed: u64,
    /// Sample within power-of-two session-length buckets.
    pub stratify: bool,
}

/// What the export did, for the summary on stderr.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Stats {
    /// Rows read (fetched or from the rows file).
    pub rows_fetched: u64,
    /// Rows outside the model / principal / served-by filters.
    pub rows_filtered_out: u64,
    /// Rows dropped as unusable, by reason.
    pub rows_dropped: BTreeMap<&'static str, u64>,
    /// Trajectories written.
    pub trajectories: u64,
    /// Requests written.
    pub requests: u64,
    /// Written trajectories whose session began before the window.
    pub pre_window_sessions: u64,
    /// Blocks whose token count (or role) differed from the seed's first sighting
    /// in its trajectory, and were normalised to it.
    pub normalised_seeds: u64,
    /// Trajectories left out by sampling.
    pub sampled_out: u64,
    /// Written trajectories whose requests name more than one model: each is
    /// written with its first request's model.
    pub across_models: u64,
}

impl Stats {
    /// The summary lines.
    pub fn report(&self) -> String {
        let dropped: u64 = self.rows_dropped.values().sum();
        let reasons: Vec<String> = self
            .rows_dropped
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "rows fetched: {}\nrows outside the filters: {}\nrows dropped: {dropped}{}\ntrajectories: {}\nrequests: {}\npre-window sessions: {}\nnormalised seeds: {}\nsampled out: {}",
            self.rows_fetched,
            self.rows_filtered_out,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            },
            self.trajectories,
            self.requests,
            self.pre_window_sessions,
            self.normalised_seeds,
            self.sampled_out,
        ) + &if self.across_models > 0 {
            format!(
                "\ntrajectories across models: {} (each written with its first request's model)",
                self.across_models
            )
        } else {
            String::new()
        }
    }
}

/// A usable row, compact: interned strings, resolved counts, only what the
/// reconstruction and the manifest need.
struct Usable {
    ts: i64,
    principal: u32,
    instance: u32,
    /// The model alias (`None`: the row has none).
    model: Option<u32>,
    correlation_id: i64,
    chain: Box<[u32]>,
    roles: Box<[BlockRole]>,
    tokens: Box<[u32]>,
    prompt: u32,
    completion: u32,
    stream: Option<bool>,
    max_tokens: Option<i64>,
    duration_ms: i64,
}

/// Strings kept once: chain hashes, principals, instances.
#[derive(Default)]
struct Interner {
    ids: HashMap<std::sync::Arc<str>, u32>,
    names: Vec<std::sync::Arc<str>>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        let a: std::sync::Arc<str> = std::sync::Arc::from(s);
        self.names.push(a.clone());
        self.ids.insert(a, i);
        i
    }

    fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }
}

fn role(s: &str) -> Option<BlockRole> {
    BlockRole::ALL.into_iter().find(|r| r.as_str() == s)
}

/// Checks a row; `Err` is the drop reason.
fn usable(row: Row, names: &mut Interner) -> Result<Usable, &'static str> {
    let n = row.chain.len();
    if row.block_roles.len() != n || (!row.block_tokens.is_empty() && row.block_tokens.len() != n) {
        return Err("unequal_block_arrays");
    }
    if n == 0 {
        return Err("empty_chain");
    }
    if row.chain.iter().any(String::is_empty) {
        return Err("empty_chain_hash");
    }
    if row.block_tokens.contains(&0) {
        return Err("zero_block_tokens");
    }
    let roles: Box<[BlockRole]> = match row.block_roles.iter().map(|r| role(r)).collect() {
        Some(r) => r,
        None => return Err("unknown_block_role"),
    };
    let sum: u64 = row.block_tokens.iter().map(|&t| u64::from(t)).sum();
    let prompt = match row.prompt_tokens {
        Some(p) if p > 0 => p as u64,
        _ => sum,
    };
    if prompt == 0 {
        return Err("no_prompt_tokens");
    }
    let completion = match row.completion_tokens {
        Some(c) if c > 0 => c as u64,
        _ => return Err("no_completion_tokens"),
    };
    Ok(Usable {
        ts: row.ts,
        principal: names.id(&row.principal_id),
        model: (!row.model.is_empty()).then(|| names.id(&row.model)),
        instance: names.id(&row.instance_id),
        correlation_id: row.correlation_id,
        chain: row.chain.iter().map(|h| names.id(h)).collect(),
        roles,
        tokens: row.block_tokens.into_boxed_slice(),
        prompt: u32::try_from(prompt).unwrap_or(u32::MAX),
        completion: u32::try_from(completion).unwrap_or(u32::MAX),
        stream: row.stream,
        max_tokens: row.max_tokens,
        // Bounded: a corrupt duration must not overflow the delay arithmetic.
        duration_ms: row.duration_ms.unwrap_or(0).clamp(0, 366 * 86_400_000),
    })
}

fn scaled(ms: i64, time_scale: f64) -> u64 {
    (ms.max(0) as f64 / time_scale).round() as u64
}

fn strictly_extends(prev: &[u32], cur: &[u32]) -> bool {
    prev.len() < cur.len() && cur[..prev.len()] == *prev
}

/// One trajectory to write: its id, offset and in-window requests.
struct Out {
    id: String,
    start_after_ms: u64,
    pre_window: bool,
    members: Vec<usize>,
}

/// Collects rows one at a time (keeping only the compact form of usable ones),
/// then reconstructs.
pub struct Builder {
    o: Options,
    names: Interner,
    kept: Vec<Usable>,
    stats: Stats,
}

impl Builder {
    /// Checks the options.
    pub fn new(o: &Options) -> Result<Self, String> {
        if !(o.sample.is_finite() && (0.0..=1.0).contains(&o.sample)) {
            return Err(format!(
                "--sample must be a fraction between 0 and 1, got {}",
                o.sample
            ));
        }
        if !(o.time_scale.is_finite() && o.time_scale > 0.0) {
            return Err(format!(
                "--time-scale must be a positive number, got {}",
                o.time_scale
            ));
        }
        Ok(Self {
            o: o.clone(),
            names: Interner::default(),
            kept: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// Takes one fetched row.
    pub fn push(&mut self, row: Row) {
        let o = &self.o;
        self.stats.rows_fetched += 1;
        let outside = o.model.as_ref().is_some_and(|m| &row.model != m)
            || o.principal_id
                .as_ref()
                .is_some_and(|p| &row.principal_id != p)
            || o.served_by
                .as_ref()
                .is_some_and(|s| row.served_by.as_ref() != Some(s));
        if outside {
            self.stats.rows_filtered_out += 1;
            return;
        }
        match usable(row, &mut self.names) {
            Ok(u) => self.kept.push(u),
            Err(reason) => *self.stats.rows_dropped.entry(reason).or_default() += 1,
        }
    }

    /// Links, names, samples and orders the trajectories.
    pub fn finish(self) -> Reconstruction {
        link(self)
    }
}

/// Reconstructs, samples and orders the trajectories of `rows`.
pub fn reconstruct(rows: Vec<Row>, o: &Options) -> Result<Reconstruction, String> {
    let mut b = Builder::new(o)?;
    for r in rows {
        b.push(r);
    }
    Ok(b.finish())
}

fn link(b: Builder) -> Reconstruction {
    let Builder {
        o,
        names,
        kept,
        mut stats,
    } = b;
    let o = &o;
    // Link, per principal, in (ts, instance_id, correlation_id) order.
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&kept[a], &kept[b]);
        (
            names.name(x.principal),
            x.ts,
            names.name(x.instance),
            x.correlation_id,
        )
            .cmp(&(
                names.name(y.principal),
                y.ts,
                names.name(y.instance),
                y.correlation_id,
            ))
    });
    let mut parent: Vec<Option<usize>> = vec![None; kept.len()];
    let mut root: Vec<usize> = (0..kept.len()).collect();
    let mut position: Vec<usize> = vec![0; kept.len()];
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut last: HashMap<u32, usize> = HashMap::new();
    let mut principal: Option<u32> = None;
    for (pos, &b) in order.iter().enumerate() {
        position[b] = pos;
        let row = &kept[b];
        if principal != Some(row.principal) {
            // Nothing links across principals.
            last.clear();
            principal = Some(row.principal);
        }
        let (head, tail) = row.chain.split_at(row.chain.len() - 1);
        let tail = tail[0];
        // An identical chain starts a new trajectory; otherwise the latest earlier
        // row, within the link window, whose last hash is a strict prefix of ours.
        let p = if last.contains_key(&tail) {
            None
        } else {
            head.iter()
                .filter_map(|h| last.get(h).copied())
                .filter(|&a| row.ts.saturating_sub(kept[a].ts) <= o.link_window_ms)
                .max_by_key(|&a| position[a])
        };
        parent[b] = p;
        root[b] = p.map_or(b, |a| root[a]);
        members.entry(root[b]).or_default().push(b);
        last.insert(tail, b);
    }

    // Trajectory ids: the root's last hash, `-k` by root order.
    let mut roots: Vec<usize> = members.keys().copied().collect();
    roots.sort_by_key(|&r| position[r]);
    let mut stems: HashMap<&str, u64> = HashMap::new();
    let mut out: Vec<Out> = Vec::new();
    for r in roots {
        let in_window: Vec<usize> = members[&r]
            .iter()
            .copied()
            .filter(|&m| (o.start_ms..o.end_ms).contains(&kept[m].ts))
            .collect();
        if in_window.is_empty() {
            continue;
        }
        let stem = kept[r].chain.last().map_or("", |&h| names.name(h));
        let k = stems.entry(stem).or_insert(0);
        let id = format!("{stem}-{k}");
        *k += 1;
        let first = in_window[0];
        out.push(Out {
            id,
            start_after_ms: scaled(kept[first].ts.saturating_sub(o.start_ms), o.time_scale),
            // The session began before the window: its first written request resets.
            pre_window: parent[first].is_some(),
            members: in_window,
        });
    }

    let total = out.len();
    let mut out = sample(out, o);
    stats.sampled_out = (total - out.len()) as u64;
    out.sort_by(|a, b| (a.start_after_ms, &a.id).cmp(&(b.start_after_ms, &b.id)));
    stats.trajectories = out.len() as u64;
    stats.requests = out.iter().map(|t| t.members.len() as u64).sum();
    stats.pre_window_sessions = out.iter().filter(|t| t.pre_window).count() as u64;
    stats.across_models = out
        .iter()
        .filter(|t| {
            let first = kept[t.members[0]].model;
            t.members.iter().any(|&m| kept[m].model != first)
        })
        .count() as u64;
    drop(stems);
    Reconstruction {
        kept,
        names,
        trajectories: out,
        time_scale: o.time_scale,
        stats,
    }
}

/// The reconstructed trajectories, written on demand (the rows stay the only
/// copy of the data until each line is serialised).
pub struct Reconstruction {
    kept: Vec<Usable>,
    names: Interner,
    trajectories: Vec<Out>,
    time_scale: f64,
    /// What the reconstruction did (normalised seeds are counted by [`Self::write`]).
    pub stats: Stats,
}

impl std::fmt::Debug for Reconstruction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconstruction")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct LineOut<'a> {
    schema_version: u32,
    trajectory_id: &'a str,
    start_after_ms: u64,
    /// The model alias of its first request, where the records have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    requests: Vec<RequestOut<'a>>,
}

#[derive(Serialize)]
struct RequestOut<'a> {
    prompt_tokens: u32,
    output_tokens: u32,
    overhead_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    reset_before: bool,
    blocks: Vec<BlockOut<'a>>,
}

#[derive(Serialize)]
struct BlockOut<'a> {
    seed: &'a str,
    tokens: u32,
    role: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    live: bool,
}

impl Reconstruction {
    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.trajectories.is_empty()
    }

    /// Writes the manifest, one line per trajectory; sets `stats.normalised_seeds`.
    pub fn write(&mut self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut normalised = 0;
        for t in &self.trajectories {
            let line = self.line(t, &mut normalised);
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        self.stats.normalised_seeds = normalised;
        Ok(())
    }

    fn line<'a>(&'a self, t: &'a Out, normalised: &mut u64) -> LineOut<'a> {
        let kept = &self.kept;
        let mut seen: HashMap<&str, (u32, BlockRole)> = HashMap::new();
        let mut requests = Vec::with_capacity(t.members.len());
        let names = &self.names;
        let mut prev: Option<&[u32]> = None;
        for (j, &m) in t.members.iter().enumerate() {
            let u = &kept[m];
            let reset = match prev {
                None => t.pre_window,
                Some(p) => !strictly_extends(p, &u.chain),
            };
            let mut blocks: Vec<(&str, u32, BlockRole)> = if u.tokens.is_empty() {
                vec![(
                    u.chain.last().map_or("", |&h| names.name(h)),
                    u.prompt,
                    BlockRole::User,
                )]
            } else {
                u.chain
                    .iter()
                    .zip(u.tokens.iter())
                    .zip(u.roles.iter())
                    .map(|((&h, &tk), &r)| (names.name(h), tk, r))
                    .collect()
            };
            for b in &mut blocks {
                match seen.get(b.0) {
                    Some(&(tk, r)) if (tk, r) != (b.1, b.2) => {
                        *normalised += 1;
                        (b.1, b.2) = (tk, r);
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(b.0, (b.1, b.2));
                    }
                }
            }
            let live_at = match (prev, reset) {
                (Some(p), false) => Some(p.len()),
                _ => None,
            };
            let sum: u64 = blocks.iter().map(|b| u64::from(b.1)).sum();
            let delay_after_ms = t.members.get(j + 1).map(|&next| {
                let end = u.ts.saturating_add(u.duration_ms);
                scaled(kept[next].ts.saturating_sub(end), self.time_scale)
            });
            requests.push(RequestOut {
                prompt_tokens: u.prompt,
                output_tokens: u.completion,
                overhead_tokens: u64::from(u.prompt).saturating_sub(sum),
                stream: u.stream,
                max_tokens: u
                    .max_tokens
                    .filter(|&x| x > 0)
                    .map(|x| x.min(i64::from(u32::MAX))),
                delay_after_ms,
                reset_before: reset,
                blocks: blocks
                    .iter()
                    .enumerate()
                    .map(|(i, &(seed, tokens, role))| BlockOut {
                        seed,
                        tokens,
                        role: role.as_str(),
                        live: live_at == Some(i) && role == BlockRole::Assistant,
                    })
                    .collect(),
            });
            prev = Some(&u.chain);
        }
        LineOut {
            schema_version: 2,
            trajectory_id: &t.id,
            start_after_ms: t.start_after_ms,
            model: t
                .members
                .first()
                .and_then(|&m| kept[m].model)
                .map(|i| names.name(i)),
            requests,
        }
    }
}

/// The sampling key of a trajectory: the first 16 hex digits of
/// SHA-256(`"{seed}:{trajectory_id}"`).
pub fn sample_key(seed: u64, id: &str) -> u64 {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(format!("{seed}:{id}").as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

fn sample(out: Vec<Out>, o: &Options) -> Vec<Out> {
    if o.sample >= 1.0 {
        return out;
    }
    let keyed = |v: Vec<Out>| {
        let mut v: Vec<(u64, Out)> = v
            .into_iter()
            .map(|t| (sample_key(o.seed, &t.id), t))
            .collect();
        v.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        v
    };
    if !o.stratify {
        let keep = (o.sample * out.len() as f64).round() as usize;
        return keyed(out).into_iter().take(keep).map(|(_, t)| t).collect();
    }
    let mut buckets: BTreeMap<u32, Vec<Out>> = BTreeMap::new();
    for t in out {
        buckets
            .entry(usize::BITS - 1 - t.members.len().max(1).leading_zeros())
            .or_default()
            .push(t);
    }
    let mut kept = Vec::new();
    for (_, b) in buckets {
        let keep = (o.sample * b.len() as f64).ceil() as usize;
        kept.extend(keyed(b).into_iter().take(keep).map(|(_, t)| t));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const T0: i64 = 1_788_220_800_000; // 2026-09-01T00:00:00Z

    fn opts() -> Options {
        Options {
            start_ms: T0,
            end_ms: T0 + 3_600_000,
            link_window_ms: 24 * 3_600_000,
            time_scale: 1.0,
            model: None,
            principal_id: None,
            served_by: None,
            sample: 1.0,
            seed: 0,
            stratify: false,
        }
    }

    /// A row at `T0 + secs`, blocks given as `(hash, role, tokens)`.
    fn row(principal: &str, secs: i64, corr: i64, blocks: &[(&str, &str, u32)]) -> Row {
        Row {
            ts: T0 + secs * 1000,
            instance_id: "00000000-0000-0000-0000-000000000001".into(),
            correlation_id: corr,
            principal_id: principal.into(),
            model: "m".into(),
            chain: blocks.iter().map(|b| b.0.to_owned()).collect(),
            block_roles: blocks.iter().map(|b| b.1.to_owned()).collect(),
            block_tokens: blocks.iter().map(|b| b.2).collect(),
            prompt_tokens: Some(blocks.iter().map(|b| i64::from(b.2)).sum::<i64>() + 5),
            completion_tokens: Some(7),
            stream: None,
            max_tokens: None,
            finish_reason: None,
            served_by: Some("b1".into()),
            request_origin: None,
            user_id: None,
            api_key_id: None,
            duration_ms: Some(1000),
            duration_to_first_byte_ms: None,
        }
    }

    fn run(rows: Vec<Row>) -> (Vec<Value>, Stats) {
        lines(rows, &opts()).unwrap()
    }

    /// The written lines, parsed, and the stats.
    fn lines(rows: Vec<Row>, o: &Options) -> Result<(Vec<Value>, Stats), String> {
        let mut r = reconstruct(rows, o)?;
        let mut buf = Vec::new();
        r.write(&mut buf).unwrap();
        let v = String::from_utf8(buf)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        Ok((v, r.stats))
    }

    const S: (&str, &str, u32) = ("s", "system", 10);
    const U1: (&str, &str, u32) = ("u1", "user", 4);
    const A1: (&str, &str, u32) = ("a1", "assistant", 7);
    const T1: (&str, &str, u32) = ("t1", "tool", 3);
    const U2: (&str, &str, u32) = ("u2", "user", 2);

    #[test]
    fn unusable_rows_are_dropped_and_counted_by_reason() {
        let mut unequal = row("p", 1, 1, &[S, U1]);
        unequal.block_roles.pop();
        let mut no_prompt = row("p", 2, 2, &[S]);
        no_prompt.prompt_tokens = None;
        no_prompt.block_tokens.clear();
        let mut fallback = row("p", 3, 3, &[S, U1]);
        fallback.prompt_tokens = Some(0);
        let mut no_completion = row("p", 4, 4, &[("x", "user", 3)]);
        no_completion.completion_tokens = None;
        let zero = row("p", 5, 5, &[("z", "user", 0), ("z2", "user", 3)]);
        let mut overflow = row("p", 6, 6, &[("o", "user", 3)]);
        overflow.duration_ms = Some(i64::MAX);
        let (lines, stats) = run(vec![
            unequal,
            no_prompt,
            fallback,
            no_completion,
            zero,
            overflow,
        ]);
        assert_eq!(stats.rows_fetched, 6);
        assert_eq!(
            stats.rows_dropped,
            BTreeMap::from([
                ("no_completion_tokens", 1),
                ("no_prompt_tokens", 1),
                ("unequal_block_arrays", 1),
                ("zero_block_tokens", 1)
            ])
        );
        // A missing prompt count falls back to the sum of the block counts; a
        // corrupt duration neither panics nor overflows.
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["requests"][0]["prompt_tokens"], 14);
        assert_eq!(lines[0]["requests"][0]["overhead_tokens"], 0);
    }

    #[test]
    fn each_trajectory_carries_its_first_requests_model() {
        let a = row("p", 10, 1, &[S, U1]);
        let mut b = row("p", 20, 2, &[S, U1, A1, T1]);
        b.model = "other".into();
        let mut c = row("q", 30, 3, &[S, U1]);
        c.model = String::new();
        let (lines, stats) = run(vec![a, b, c]);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["model"], "m");
        assert!(lines[1].get("model").is_none(), "a row without a model");
        assert_eq!(stats.across_models, 1);
        assert!(stats.report().ends_with(
            "trajectories across models: 1 (each written with its first request's model)"
        ));
        // The manifest line is one the replay reads, its model with it.
        let text = serde_json::to_string(&lines[0]).unwrap();
        let cfg = batchbench_contract::manifest::ReplayConfig {
            path: "plans.jsonl".into(),
            order_by_start: false,
            initial_overhead_tokens: 0,
            turn_overhead_tokens: 0,
        };
        batchbench_contract::manifest::check_line(&text, &cfg).unwrap();
    }

    #[test]
    fn a_continuation_links_marks_the_reply_live_and_carries_the_gap() {
        let a = row("p", 10, 1, &[S, U1]);
        let mut b = row("p", 20, 2, &[S, U1, A1, T1]);
        b.stream = Some(true);
        b.max_tokens = Some(64);
        let (lines, _) = run(vec![b, a]);
        assert_eq!(lines.len(), 1);
        let t = &lines[0];
        assert_eq!(t["trajectory_id"], "u1-0");
        assert_eq!(t["start_after_ms"], 10_000);
        let r = t["requests"].as_array().unwrap();
        assert_eq!(r.len(), 2);
        // 20 s - (10 s + 1 s duration).
        assert_eq!(r[0]["delay_after_ms"], 9_000);
        assert!(r[1].get("delay_after_ms").is_none());
        assert!(r[0].get("reset_before").is_none() && r[1].get("reset_before").is_none());
        // The block at index len(previous chain) = 2 is the assistant reply: live.
        assert_eq!(r[1]["blocks"][2]["live"], true);
        assert!(r[1]["blocks"][3].get("live").is_none());
        assert_eq!(r[1]["overhead_tokens"], 5);
        assert_eq!(r[1]["stream"], true);
        assert_eq!(r[1]["max_tokens"], 64);
        assert_eq!(r[1]["blocks"][0]["seed"], "s");
    }

    #[test]
    fn an_identical_chain_starts_a_new_trajectory_with_the_next_suffix() {
        let (lines, _) = run(vec![row("p", 1, 1, &[S, U1]), row("p", 2, 2, &[S, U1])]);
        let ids: Vec<&str> = lines
            .iter()
            .map(|l| l["trajectory_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["u1-0", "u1-1"]);
    }

    #[test]
    fn the_latest_matching_parent_wins() {
        let rows = vec![
            row("p", 1, 1, &[S, U1]),
            row("p", 2, 2, &[S, U1]),
            row("p", 3, 3, &[S, U1, A1]),
        ];
        let (lines, _) = run(rows);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["requests"].as_array().unwrap().len(), 1);
        assert_eq!(lines[1]["trajectory_id"], "u1-1");
        assert_eq!(lines[1]["requests"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_branch_or_compaction_resets_and_carries_no_live_block() {
        let rows = vec![
            row("p", 1, 1, &[S, U1]),
            row("p", 2, 2, &[S, U1, A1, U2]),
            // A child of the first request, not of the second: a branch.
            row(
                "p",
                3,
                3,
                &[S, U1, ("a1b", "assistant", 7), ("u3", "user", 2)],
            ),
        ];
        let (lines, _) = run(rows);
        assert_eq!(lines.len(), 1);
        let r = lines[0]["requests"].as_array().unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[2]["reset_before"], true);
        assert!(
            r[2]["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|b| b.get("live").is_none())
        );
        assert_eq!(r[1]["blocks"][2]["live"], true);
    }

    #[test]
    fn parents_beyond_the_link_window_do_not_link() {
        let mut o = opts();
        o.link_window_ms = 5_000;
        let rows = vec![row("p", 1, 1, &[S, U1]), row("p", 10, 2, &[S, U1, A1])];
        let (lines, _) = lines(rows, &o).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["trajectory_id"], "a1-0");
    }

    #[test]
    fn a_session_begun_before_the_window_starts_with_reset_before() {
        let rows = vec![
            row("p", -600, 1, &[S, U1]),
            row("p", 30, 2, &[S, U1, A1, T1]),
        ];
        let (lines, stats) = run(rows);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            lines[0]["trajectory_id"], "u1-0",
            "named after its pre-window root"
        );
        let r = lines[0]["requests"].as_array().unwrap();
        assert_eq!(r.len(), 1, "only in-window requests are written");
        assert_eq!(r[0]["reset_before"], true);
        assert!(
            r[0]["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|b| b.get("live").is_none())
        );
        assert_eq!(stats.pre_window_sessions, 1);
        // After the window: not written either.
        let (lines, _) = run(vec![row("p", 3_600, 1, &[S, U1])]);
        assert!(lines.is_empty());
    }

    #[test]
    fn nothing_links_across_principals() {
        let rows = vec![row("p", 1, 1, &[S, U1]), row("q", 2, 2, &[S, U1, A1])];
        let (lines, _) = run(rows);
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn missing_block_counts_become_one_user_block_of_the_prompt() {
        let mut r = row("p", 1, 1, &[S, U1]);
        r.block_tokens.clear();
        r.prompt_tokens = Some(99);
        let (lines, _) = run(vec![r]);
        let b = &lines[0]["requests"][0]["blocks"];
        assert_eq!(b.as_array().unwrap().len(), 1);
        assert_eq!(b[0]["seed"], "u1");
        assert_eq!(b[0]["role"], "user");
        assert_eq!(b[0]["tokens"], 99);
        assert_eq!(lines[0]["requests"][0]["overhead_tokens"], 0);
    }

    #[test]
    fn a_seed_keeps_its_first_count_within_a_trajectory() {
        let rows = vec![
            row("p", 1, 1, &[S, U1]),
            row("p", 2, 2, &[("s", "system", 12), U1, A1]),
        ];
        let (lines, stats) = run(rows);
        assert_eq!(lines[0]["requests"][1]["blocks"][0]["tokens"], 10);
        assert_eq!(stats.normalised_seeds, 1);
    }

    #[test]
    fn time_scale_divides_offsets_and_delays_and_output_is_ordered() {
        let mut o = opts();
        o.time_scale = 4.0;
        let rows = vec![
            row("p", 100, 1, &[("z", "user", 3)]),
            row("p", 40, 2, &[S, U1]),
            row("p", 50, 3, &[S, U1, A1]),
            row("q", 40, 4, &[("b", "user", 3)]),
        ];
        let (lines, _) = lines(rows, &o).unwrap();
        let got: Vec<(u64, &str)> = lines
            .iter()
            .map(|l| {
                (
                    l["start_after_ms"].as_u64().unwrap(),
                    l["trajectory_id"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, [(10_000, "b-0"), (10_000, "u1-0"), (25_000, "z-0")]);
        assert_eq!(lines[1]["requests"][0]["delay_after_ms"], 2_250);
    }

    #[test]
    fn filters_keep_only_matching_rows() {
        let mut other_model = row("p", 1, 1, &[("x", "user", 3)]);
        other_model.model = "other".into();
        let mut other_backend = row("p", 2, 2, &[("y", "user", 3)]);
        other_backend.served_by = Some("b2".into());
        let rows = vec![
            other_model,
            other_backend,
            row("q", 3, 3, &[("z", "user", 3)]),
        ];
        let mut o = opts();
        o.model = Some("m".into());
        o.served_by = Some("b1".into());
        o.principal_id = Some("q".into());
        let (lines, stats) = lines(rows, &o).unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(stats.rows_filtered_out, 2);
    }

    #[test]
    fn sampling_is_a_pure_function_of_seed_and_id() {
        let rows: Vec<Row> = (0..40)
            .map(|i| {
                let h = format!("h{i}");
                row("p", i, i, &[(h.as_str(), "user", 3)])
            })
            .collect();
        let mut o = opts();
        o.sample = 0.25;
        o.seed = 7;
        let (a, stats) = lines(rows.clone(), &o).unwrap();
        assert_eq!(a.len(), 10);
        assert_eq!(stats.sampled_out, 30);
        // The kept ids are the 10 lowest keys.
        let mut keys: Vec<(u64, String)> = (0..40)
            .map(|i| (sample_key(7, &format!("h{i}-0")), format!("h{i}-0")))
            .collect();
        keys.sort();
        let mut want: Vec<String> = keys[..10].iter().map(|k| k.1.clone()).collect();
        want.sort();
        let mut got: Vec<String> = a
            .iter()
            .map(|l| l["trajectory_id"].as_str().unwrap().to_owned())
            .collect();
        got.sort();
        assert_eq!(got, want);
        let (b, _) = lines(rows.clone(), &o).unwrap();
        assert_eq!(a, b);
        o.sample = 0.0;
        assert!(lines(rows.clone(), &o).unwrap().0.is_empty());
        for bad in [-0.1, 1.5, f64::NAN] {
            o.sample = bad;
            assert!(lines(rows.clone(), &o).is_err());
        }
    }

    #[test]
    fn stratified_sampling_keeps_the_ceiling_of_each_length_bucket() {
        // 6 one-request trajectories and 2 of three requests (buckets 0 and 1).
        let mut rows: Vec<Row> = (0..6)
            .map(|i| {
                row(
                    "p",
                    i,
                    i,
                    &[(["a", "b", "c", "d", "e", "f"][i as usize], "user", 3)],
                )
            })
            .collect();
        for (k, root) in [("x", 100i64), ("y", 200)] {
            let h1 = if k == "x" { "x1" } else { "y1" };
            let h2 = if k == "x" { "x2" } else { "y2" };
            let h3 = if k == "x" { "x3" } else { "y3" };
            rows.push(row("p", root, root, &[(h1, "user", 3)]));
            rows.push(row(
                "p",
                root + 1,
                root + 1,
                &[(h1, "user", 3), (h2, "assistant", 3)],
            ));
            rows.push(row(
                "p",
                root + 2,
                root + 2,
                &[(h1, "user", 3), (h2, "assistant", 3), (h3, "user", 3)],
            ));
        }
        let mut o = opts();
        o.sample = 0.2;
        o.stratify = true;
        let (lines, _) = lines(rows, &o).unwrap();
        let long = lines
            .iter()
            .filter(|l| l["requests"].as_array().unwrap().len() == 3)
            .count();
        // ceil(0.2 x 6) = 2 short ones, ceil(0.2 x 2) = 1 long one.
        assert_eq!((lines.len() - long, long), (2, 1));
    }
}
