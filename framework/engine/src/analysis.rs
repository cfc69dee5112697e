//! `analyze`: a workload described before it is run, sending nothing.
//!
//! The trajectories are laid out in time the way a run would send them, with an
//! assumed service time per request: an open loop at their start offsets, a
//! closed loop into its slots (a freed slot goes to the next trajectory), and
//! each request after the previous one's service time and think time. In that
//! order every prompt's shape (see [`crate::synthesis::prefix`]) goes through an ideal
//! prefix cache shared by everything, one per data-parallel rank, and LRU
//! caches of the given capacities per rank; and every block is counted by the
//! sessions that send it.
//!
//! Memory grows with the distinct blocks (a few tens of bytes each) and the
//! trajectories in flight, never with the requests.

mod content;
mod mix;
mod place;

pub use content::ContentPlan;

use crate::options::EngineError;
use crate::synthesis::prefix::{HashMapById, LruCache, Overheads, Shape};
use batchbench_contract::analysis::{
    Analysis, Arrivals, CacheFigures, CacheRow, Dist, HistoryChoices, Interval, SharedPrefix,
    Sharing, SharingBucket,
};
use batchbench_contract::plan::{PlannedRequest, RequestIter, Trajectory};
use batchbench_contract::plugin::WorkloadSource;
use batchbench_contract::spec::ReasoningHistory;
use hdrhistogram::Histogram;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// How requests are spread over data-parallel ranks.
pub enum Routing {
    /// Each request to the next rank in turn.
    RoundRobin,
    /// Every request of a session to one rank: the session's position in the
    /// workload, modulo the ranks.
    Affinity,
    /// The run's routers: the rank of the trajectory's routing slot.
    Slots(Box<dyn Fn(u64) -> Option<u64> + Send>),
    /// A routing policy of a fleet (a router that picks endpoints), named, in
    /// a run seeded with `seed`: each request goes where it would send it,
    /// with the requests in service on each endpoint (those sent within the
    /// assumed service time) as its in-flight counts.
    Policy {
        /// The policy's name.
        name: String,
        /// The router itself.
        router: std::sync::Arc<dyn batchbench_contract::plugin::Router>,
        /// The run seed.
        seed: u64,
        /// With a fleet's model map: an instance of the policy per pool of
        /// endpoints (see [`batchbench_contract::models::ModelMixSpec::distinct_pools`]),
        /// as the run has; empty: `router` picks in every pool.
        pools: Vec<std::sync::Arc<dyn batchbench_contract::plugin::Router>>,
    },
}

impl Routing {
    /// The name shown in reports.
    pub fn name(&self) -> &str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Affinity => "affinity",
            Self::Slots(_) => "run",
            Self::Policy { name, .. } => name,
        }
    }
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What to analyse and how.
#[derive(Debug)]
pub struct AnalyzeOptions {
    /// The cache block size, in tokens.
    pub block_tokens: u32,
    /// Template tokens the run accounts for.
    pub overheads: Overheads,
    /// LRU cache capacities, in tokens, per rank.
    pub capacities: Vec<u64>,
    /// Data-parallel ranks (1: one cache).
    pub ranks: u64,
    /// How requests reach ranks.
    pub routing: Routing,
    /// Closed loop: trajectories at once (absent: all). Ignored by an open loop.
    pub max_active: Option<u64>,
    /// Trajectories start at their offsets (open loop).
    pub open: bool,
    /// A rate-driven load: sessions start at this mean rate per second, evenly
    /// spaced (an open loop's offsets then give way).
    pub session_rate: Option<f64>,
    /// Divides think times and start offsets.
    pub time_scale: f64,
    /// The service time assumed per request, in milliseconds.
    pub latency_ms: f64,
    /// How many of the longest shared prefixes to list.
    pub top: usize,
    /// The run seed: it orders sends due at the same moment.
    pub seed: u64,
    /// Replies assumed to reason: their reasoning tokens (part of their
    /// output) and whether the run sends it back. The analysis is the run's
    /// choice, and the ideal per-rank caches are taken under the other too.
    pub reasoning: Option<(u32, ReasoningHistory)>,
    /// A run of several models: its mix, and the adapter capacities per rank
    /// to count LoRA adapter loads under.
    pub models: Option<(batchbench_contract::models::ModelMixSpec, Vec<u32>)>,
    /// What the run adds to its requests (inputs, attachments, formats).
    pub content: ContentPlan,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        Self {
            block_tokens: crate::synthesis::prefix::DEFAULT_BLOCK_TOKENS,
            overheads: Overheads::default(),
            capacities: Vec::new(),
            ranks: 1,
            routing: Routing::Affinity,
            max_active: None,
            open: false,
            session_rate: None,
            time_scale: 1.0,
            latency_ms: 1000.0,
            top: 10,
            seed: 0,
            reasoning: None,
            models: None,
            content: ContentPlan::default(),
        }
    }
}

/// What goes back of a reply of `output` tokens, `reasoning` of them first:
/// the whole reply (`keep`, or nothing to drop), which the server cached as
/// it generated it, or the answer alone, new to the server.
fn sent_back(output: u32, reasoning: u32, keep: bool) -> crate::synthesis::prefix::SentBack {
    if keep || reasoning == 0 {
        crate::synthesis::prefix::SentBack {
            tokens: output,
            whole: true,
        }
    } else {
        crate::synthesis::prefix::SentBack {
            tokens: output.saturating_sub(reasoning),
            whole: false,
        }
    }
}

/// A distribution being recorded: an HDR histogram for the percentiles (3
/// significant figures), and the count, sum, smallest and largest exactly.
struct DistBuilder {
    /// Auto-resizing: it grows to the largest value recorded, so no value is
    /// clamped (a histogram of fixed bounds would clamp what lies above them).
    h: Histogram<u64>,
    total: u64,
    min: u64,
    max: u64,
}

impl DistBuilder {
    fn new() -> Self {
        Self {
            h: Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant figures")),
            total: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    fn record(&mut self, v: u64) {
        // Growing to hold `v` fails only where a usize cannot index the counts
        // (not on a 64-bit target); clamping is then the best left.
        if self.h.record(v).is_err() {
            self.h.saturating_record(v);
        }
        self.total = self.total.saturating_add(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    fn finish(&self) -> Option<Dist> {
        let h = &self.h;
        // A percentile is the highest value of its bucket: within the range seen.
        let at = |q: f64| h.value_at_quantile(q).clamp(self.min, self.max);
        (!h.is_empty()).then(|| Dist {
            count: h.len(),
            total: self.total,
            mean: self.total as f64 / h.len() as f64,
            min: self.min,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: self.max,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct BlockInfo {
    depth: u32,
    sessions: u32,
    last_session: u32,
    first_session: u32,
    parent: u64,
}

struct Active {
    ord: u64,
    slot: u64,
    /// The trajectory's id (a routing policy may place by it).
    id: std::sync::Arc<str>,
    reqs: RequestIter,
    next: Option<PlannedRequest>,
    prev: Option<PlannedRequest>,
    shape: Shape,
    /// The same prompts under the other choice of what goes back of a
    /// reasoning reply (with `AnalyzeOptions::reasoning`).
    other: Option<Shape>,
    turns: u64,
    /// The model of its conversation (of a mix).
    model: usize,
}

#[derive(Default)]
struct RankCounts {
    requests: u64,
    prompt: u64,
    cached: u64,
}

/// Lays `source` out in time and analyses it (see the module documentation).
/// `progress` hears the requests analysed so far, now and then.
pub fn analyze(
    source: &mut dyn WorkloadSource,
    opts: &AnalyzeOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Analysis, EngineError> {
    let block = opts.block_tokens.max(1);
    let ranks = opts.ranks.max(1);
    let scale = if opts.time_scale > 0.0 {
        opts.time_scale
    } else {
        1.0
    };
    let cap = if opts.open || opts.session_rate.is_some() {
        u64::MAX
    } else {
        opts.max_active.unwrap_or(u64::MAX).max(1)
    };
    let latency_us = (opts.latency_ms.max(0.0) * 1000.0) as u64;

    let mut blocks: HashMapById<BlockInfo> = HashMapById::default();
    // Per rank (and model, of a mix: caches do not cross models).
    let mut rank_ideal: HashMap<(usize, u64), crate::synthesis::prefix::IdealCache> =
        HashMap::new();
    let mut lrus: Vec<HashMap<u64, LruCache>> =
        opts.capacities.iter().map(|_| HashMap::new()).collect();
    let mut ideal_rank_counts: HashMap<u64, RankCounts> = HashMap::new();
    // The ideal per-rank caches under the other choice of what goes back.
    let mut other_rank_ideal: HashMap<(usize, u64), crate::synthesis::prefix::IdealCache> =
        HashMap::new();
    let mut other_counts = RankCounts::default();
    let mut lru_counts: Vec<HashMap<u64, RankCounts>> =
        opts.capacities.iter().map(|_| HashMap::new()).collect();
    let (mut global_cached, mut shape_tokens) = (0u64, 0u64);
    let mut references = 0u64;
    let mut private_blocks = 0u64;
    let mut turns = DistBuilder::new();
    let mut prompts = DistBuilder::new();
    let mut outputs = DistBuilder::new();
    let mut thinks = DistBuilder::new();
    let mut sends: Vec<u64> = Vec::new(); // requests per second of the layout
    let mut ids = IdArena::default();

    // Under a fleet's routing policy, later turns due at the same moment go
    // out in a seeded random order, as a run's replies come back in no set
    // order (a policy that counts sends, round robin, sees them shuffled as a
    // run would); first requests go in admission order, as a run admits them.
    // Otherwise in session order: (time, tie, index, ord).
    let mut heap: BinaryHeap<Reverse<(u64, u64, u64, u64)>> = BinaryHeap::new();
    let shuffle = matches!(opts.routing, Routing::Policy { .. });
    let tie = |ord: u64, index: u64| match index {
        0 => 0,
        _ if !shuffle => 0,
        _ => batchbench_contract::rng::derive(opts.seed, &[0x7E1E, ord, index]),
    };
    let mut active: HashMap<u64, Active> = HashMap::new();
    let mut free_slots: VecDeque<u64> = VecDeque::new();
    let mut next_slot = 0u64;
    let mut pending: Option<(Trajectory, u64)> = None;
    let mut exhausted = false;
    let mut sessions_seen = 0u64;
    let mut ord = 0u64;
    let mut now = 0u64;
    let (mut requests, mut sessions, mut rr) = (0u64, 0u64, 0u64);
    // Per endpoint of a policy's fleet: when its requests in service end.
    let mut in_service: Vec<BinaryHeap<Reverse<u64>>> =
        (0..ranks).map(|_| BinaryHeap::new()).collect();
    let mut mix = opts
        .models
        .as_ref()
        .map(|(spec, slots)| mix::Mix::new(spec, slots));
    // A policy's fleet whose map gives a model to some endpoints alone: the
    // policy picks among those, as in the run.
    if let (Some(m), Routing::Policy { .. }) = (mix.as_mut(), &opts.routing) {
        m.pool_endpoints(ranks).map_err(EngineError::Plan)?;
    }
    let mut content = content::Tally::new(&opts.content, opts.seed);

    loop {
        if pending.is_none() && !exhausted {
            match source.next_trajectory() {
                Some(t) => {
                    let t = t?;
                    let start = if let Some(r) = opts.session_rate.filter(|r| *r > 0.0) {
                        (sessions_seen as f64 * 1e6 / r) as u64
                    } else if opts.open {
                        (t.start_after_ms.unwrap_or(0) as f64 * 1000.0 / scale) as u64
                    } else {
                        0
                    };
                    sessions_seen += 1;
                    pending = Some((t, start));
                }
                None => exhausted = true,
            }
        }
        let head = heap.peek().map(|Reverse(e)| e.0);
        let admit = match &pending {
            Some((_, start)) => {
                (active.len() as u64) < cap && head.is_none_or(|h| (*start).max(now) <= h)
            }
            None => false,
        };
        if admit {
            let Some((mut t, start)) = pending.take() else {
                unreachable!("admit needs a pending trajectory")
            };
            let at = start.max(now);
            let slot = free_slots.pop_front().unwrap_or_else(|| {
                next_slot += 1;
                next_slot - 1
            });
            let first = t.requests.next();
            sessions += 1;
            ids.push(&t.id);
            if first.is_none() {
                free_slots.push_back(slot);
                turns.record(0);
                ord += 1;
                continue;
            }
            active.insert(
                ord,
                Active {
                    ord,
                    slot,
                    id: t.id.clone(),
                    reqs: t.requests,
                    next: first,
                    prev: None,
                    shape: Shape::new(block),
                    other: opts.reasoning.map(|_| Shape::new(block)),
                    turns: 0,
                    model: 0,
                },
            );
            heap.push(Reverse((at, tie(ord, 0), 0, ord)));
            ord += 1;
            continue;
        }
        let Some(Reverse((t, _, index, o))) = heap.pop() else {
            break;
        };
        now = t;
        let Some(a) = active.get_mut(&o) else {
            continue;
        };
        let Some(req) = a.next.take() else { continue };
        // A planned reply goes back as the server made it (a plan knows
        // of no reasoning): the server's cache holds it after its prompt.
        // Assumed to reason, it goes back as the run's choice says, and
        // under the other choice in the other shape.
        let out = a.prev.as_ref().and_then(|p| p.output_tokens);
        let (run_keeps, thought) = match opts.reasoning {
            Some((tokens, history)) => (history == ReasoningHistory::Keep, tokens),
            None => (true, 0),
        };
        a.shape.advance(
            a.ord,
            index,
            a.prev.as_ref(),
            &req,
            out.map(|t| sent_back(t, thought, run_keeps)),
            opts.overheads,
        );
        if let Some(other) = a.other.as_mut() {
            other.advance(
                a.ord,
                index,
                a.prev.as_ref(),
                &req,
                out.map(|t| sent_back(t, thought, !run_keeps)),
                opts.overheads,
            );
        }
        a.turns += 1;
        requests += 1;
        if requests % 65_536 == 0 {
            progress(requests);
        }
        let tokens = a.shape.tokens();
        shape_tokens += tokens;
        prompts.record(req.prompt_tokens.map_or(tokens, u64::from));
        if let Some(out) = req.output_tokens {
            outputs.record(u64::from(out));
        }
        let sec = (t / 1_000_000) as usize;
        if sec < 50_000_000 {
            if sends.len() <= sec {
                sends.resize(sec + 1, 0);
            }
            sends[sec] += 1;
        }

        // The global ideal cache and the sharing structure: one map, of the
        // shareable blocks (a private block has one session by construction).
        let session = (a.ord.min(u64::from(u32::MAX - 1))) as u32;
        references += a.shape.hashes().len() as u64;
        let from = a.shape.known(u64::MAX);
        let mut parent = match from {
            0 => 0,
            n => a.shape.hashes().get(n - 1).copied().unwrap_or(0),
        };
        let (hits, fresh_private) = a.shape.lookup_with(u64::MAX, |i, h| {
            let e = blocks.entry(h);
            let existed = matches!(e, std::collections::hash_map::Entry::Occupied(_));
            let info = e.or_insert(BlockInfo {
                depth: (i + 1) as u32,
                sessions: 0,
                last_session: u32::MAX,
                first_session: session,
                parent,
            });
            if info.last_session != session {
                info.last_session = session;
                info.sessions += 1;
            }
            parent = h;
            existed
        });
        private_blocks += fresh_private as u64;
        global_cached += hits as u64 * u64::from(block);
        // A conversation stays on the model its opening request picked (the
        // routing of a fleet with a model map needs it).
        let opens = index == 0 || req.reset_before;
        if let Some(m) = mix.as_ref()
            && opens
        {
            a.model = m.open(&req, opts.seed, a.ord, index, &a.id)?;
        }

        let rank = match &opts.routing {
            Routing::RoundRobin => {
                rr += 1;
                (rr - 1) % ranks
            }
            Routing::Affinity => a.ord % ranks,
            Routing::Slots(f) => f(a.slot).unwrap_or(0),
            Routing::Policy {
                router,
                seed,
                name,
                pools,
            } => {
                let pool = mix.as_ref().and_then(|m| m.pool(a.model));
                let router = pool.and_then(|(p, _)| pools.get(p)).unwrap_or(router);
                let ctx = batchbench_contract::plugin::RouteContext {
                    seed: *seed,
                    agent_id: a.ord,
                    routing_slot: a.slot,
                    trajectory_id: &a.id,
                    request_index: index,
                };
                let placed = place::Placed {
                    router: router.as_ref(),
                    name,
                    pool: pool.map(|(_, endpoints)| endpoints),
                    at: t,
                    ends_at: t + latency_us,
                };
                placed.place(ctx, a.shape.hashes(), block, &mut in_service)?
            }
        };
        // What this session stored on a rank before is known to be there
        // still (an ideal cache forgets nothing), whichever rank it used since.
        // Of a mix, each rank holds a cache per model (keyed apart from the
        // mix's own per-model caches).
        let (model, key) = match mix {
            Some(_) => (
                a.model,
                (1 << 61) | ((a.model as u64) << 32) | (rank & 0xFFFF_FFFF),
            ),
            None => (0, rank),
        };
        let ideal = rank_ideal.entry((model, rank)).or_default();
        let cached = a.shape.lookup_ideal(ideal, key);
        content.record(a.ord, index, &req, opens)?;
        if let Some(m) = mix.as_mut() {
            m.record(a.model, rank, &mut a.shape, tokens);
        }
        let c = ideal_rank_counts.entry(rank).or_default();
        c.requests += 1;
        c.prompt += tokens;
        c.cached += cached;
        if let Some(other) = a.other.as_mut() {
            let ideal = other_rank_ideal.entry((model, rank)).or_default();
            other_counts.cached += other.lookup_ideal(ideal, key);
            other_counts.prompt += other.tokens();
            other_counts.requests += 1;
        }
        for (i, cap_tokens) in opts.capacities.iter().enumerate() {
            let lru = lrus[i]
                .entry(rank)
                .or_insert_with(|| LruCache::new((cap_tokens / u64::from(block)) as usize));
            let hit = match mix {
                Some(_) => lru.lookup_and_insert(&mix::own_blocks(a.shape.hashes(), model)),
                None => lru.lookup_and_insert(a.shape.hashes()),
            } as u64
                * u64::from(block);
            let c = lru_counts[i].entry(rank).or_default();
            c.requests += 1;
            c.prompt += tokens;
            c.cached += hit;
        }

        // The next request of the trajectory, or its end.
        if req.delay_after_ms > 0 {
            thinks.record(req.delay_after_ms);
        }
        a.next = a.reqs.next();
        let think_us = (req.delay_after_ms as f64 * 1000.0 / scale) as u64;
        a.prev = Some(req);
        if a.next.is_some() {
            heap.push(Reverse((
                t + latency_us + think_us,
                tie(o, index + 1),
                index + 1,
                o,
            )));
        } else if let Some(done) = active.remove(&o) {
            turns.record(done.turns);
            free_slots.push_back(done.slot);
            // Its id stays only when it is the first sender of a shared block.
        }
    }
    progress(requests);

    let sharing = sharing(&blocks, private_blocks, block, opts.top, &ids, references);
    let rows = |counts: &HashMap<u64, RankCounts>| -> (CacheFigures, Vec<CacheFigures>) {
        let mut rs: Vec<(&u64, &RankCounts)> = counts.iter().collect();
        rs.sort_by_key(|(r, _)| **r);
        let total = CacheFigures::new(
            None,
            rs.iter().map(|(_, c)| c.requests).sum(),
            rs.iter().map(|(_, c)| c.prompt).sum(),
            rs.iter().map(|(_, c)| c.cached).sum(),
        );
        let per = if ranks > 1 || matches!(opts.routing, Routing::Slots(_) | Routing::Policy { .. })
        {
            rs.iter()
                .map(|(r, c)| CacheFigures::new(Some(**r), c.requests, c.prompt, c.cached))
                .collect()
        } else {
            Vec::new()
        };
        (total, per)
    };
    let mut caches = Vec::new();
    let (total, per) = rows(&ideal_rank_counts);
    let reasoning_history = opts.reasoning.map(|(tokens, history)| {
        let other = CacheFigures::new(
            None,
            other_counts.requests,
            other_counts.prompt,
            other_counts.cached,
        );
        let (keep, drop) = match history {
            ReasoningHistory::Keep => (total.clone(), other),
            ReasoningHistory::Drop => (other, total.clone()),
        };
        HistoryChoices {
            reasoning_tokens: tokens,
            run: history.as_str().to_owned(),
            keep,
            drop,
        }
    });
    caches.push(CacheRow {
        capacity_tokens: None,
        total,
        ranks: per,
    });
    for (i, cap_tokens) in opts.capacities.iter().enumerate() {
        let (total, per) = rows(&lru_counts[i]);
        caches.push(CacheRow {
            capacity_tokens: Some(*cap_tokens),
            total,
            ranks: per,
        });
    }
    Ok(Analysis {
        workload: source.final_info(),
        requests,
        sessions,
        turns_per_session: turns.finish(),
        prompt_tokens: prompts.finish(),
        output_tokens: outputs.finish(),
        think_time_ms: thinks.finish(),
        arrivals: arrivals(&sends, requests),
        block_tokens: block,
        assumed_latency_ms: opts.latency_ms,
        ranks: match opts.routing {
            Routing::Slots(_) => ideal_rank_counts.len() as u64,
            _ => ranks,
        },
        routing: opts.routing.name().to_owned(),
        sharing,
        global: CacheFigures::new(None, requests, shape_tokens, global_cached),
        caches,
        reasoning_history,
        models: mix.as_ref().map_or_else(Vec::new, |m| m.figures(requests)),
        adapter_loads: mix.as_ref().map_or_else(Vec::new, |m| m.loads(requests)),
        content: content.finish(),
    })
}

/// Every session's trajectory id, packed: the longest shared prefixes name the
/// session that sent them first.
#[derive(Default)]
struct IdArena {
    text: String,
    ends: Vec<usize>,
}

impl IdArena {
    fn push(&mut self, id: &str) {
        self.text.push_str(id);
        self.ends.push(self.text.len());
    }

    fn get(&self, i: u32) -> &str {
        let i = i as usize;
        let start = if i == 0 {
            0
        } else {
            self.ends.get(i - 1).copied().unwrap_or(0)
        };
        let end = self.ends.get(i).copied().unwrap_or(start);
        self.text.get(start..end).unwrap_or("")
    }
}

fn arrivals(sends: &[u64], requests: u64) -> Arrivals {
    let first = sends.iter().position(|&c| c > 0).unwrap_or(0);
    let last = sends.iter().rposition(|&c| c > 0).unwrap_or(0);
    let span = (last + 1 - first.min(last + 1)) as f64;
    let window = 60usize.min(last + 1 - first.min(last));
    let mut peak = 0u64;
    let mut sum = 0u64;
    let live = sends.get(first..=last).unwrap_or(&[]);
    for (i, c) in live.iter().enumerate() {
        sum += c;
        if i >= window {
            sum -= live[i - window];
        }
        peak = peak.max(sum);
    }
    let n = live.len().clamp(1, 24);
    let width = live.len().div_ceil(n).max(1);
    let intervals = live
        .chunks(width)
        .enumerate()
        .map(|(i, c)| {
            let requests: u64 = c.iter().sum();
            Interval {
                start_secs: (i * width) as f64,
                secs: c.len() as f64,
                requests,
                rate: requests as f64 / c.len() as f64,
            }
        })
        .collect();
    Arrivals {
        span_secs: span,
        mean_rate: if span > 0.0 {
            requests as f64 / span
        } else {
            0.0
        },
        peak_rate: peak as f64 / window.max(1) as f64,
        intervals,
    }
}

const BUCKETS: [(u32, u32, &str); 7] = [
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 8, "5-8"),
    (9, 16, "9-16"),
    (17, 64, "17-64"),
    (65, u32::MAX, "65+"),
];

fn sharing(
    blocks: &HashMapById<BlockInfo>,
    private_blocks: u64,
    block: u32,
    top: usize,
    ids: &IdArena,
    references: u64,
) -> Sharing {
    let distinct = blocks.len() as u64 + private_blocks;
    let mut counts = [0u64; BUCKETS.len()];
    counts[0] = private_blocks;
    for b in blocks.values() {
        if let Some(i) = BUCKETS
            .iter()
            .position(|(lo, hi, _)| (*lo..=*hi).contains(&b.sessions))
        {
            counts[i] += 1;
        }
    }
    let sessions_per_block = BUCKETS
        .iter()
        .zip(counts)
        .map(|((_, _, name), blocks)| SharingBucket {
            sessions: (*name).to_owned(),
            blocks,
            share: if distinct > 0 {
                blocks as f64 / distinct as f64
            } else {
                0.0
            },
        })
        .collect();
    // A shared block is the end of a longest prefix unless a child is shared
    // by as many sessions.
    let mut covered: HashMapById<()> = HashMapById::default();
    for b in blocks.values().filter(|b| b.sessions >= 2 && b.depth > 1) {
        if blocks
            .get(&b.parent)
            .is_some_and(|p| p.sessions == b.sessions)
        {
            covered.insert(b.parent, ());
        }
    }
    let mut ends: Vec<(u64, &BlockInfo)> = blocks
        .iter()
        .filter(|(h, b)| b.sessions >= 2 && !covered.contains_key(h))
        .map(|(h, b)| (*h, b))
        .collect();
    ends.sort_by(|a, b| {
        (b.1.depth, b.1.sessions, Reverse(b.1.first_session), b.0).cmp(&(
            a.1.depth,
            a.1.sessions,
            Reverse(a.1.first_session),
            a.0,
        ))
    });
    let longest_shared_prefixes = ends
        .iter()
        .take(top)
        .map(|(_, b)| SharedPrefix {
            tokens: u64::from(b.depth) * u64::from(block),
            sessions: u64::from(b.sessions),
            first_session: u64::from(b.first_session),
            first_trajectory_id: ids.get(b.first_session).to_owned(),
        })
        .collect();
    Sharing {
        distinct_blocks: distinct,
        block_references: references,
        sessions_per_block,
        longest_shared_prefixes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::plugin::{PluginError, WorkloadInfo};

    /// A workload of materialised trajectories.
    struct Trajectories(VecDeque<Trajectory>);

    impl WorkloadSource for Trajectories {
        fn info(&self) -> WorkloadInfo {
            WorkloadInfo {
                mode: "test".into(),
                ..WorkloadInfo::default()
            }
        }

        fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
            self.0.pop_front().map(Ok)
        }
    }

    /// The nearest-rank percentile of sorted values, as HDR histograms define it.
    fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    /// Checks `d` against the values it summarises: count, total, mean, min and
    /// max exactly, the percentiles to 3 significant figures (never below the
    /// exact value, at most 0.1% above it).
    fn assert_dist(what: &str, d: Option<Dist>, values: &[u64]) {
        let d = d.unwrap_or_else(|| panic!("{what}: no distribution"));
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let total: u64 = values.iter().sum();
        assert_eq!(d.count, values.len() as u64, "{what}: count");
        assert_eq!(d.total, total, "{what}: total");
        assert_eq!(d.mean, total as f64 / values.len() as f64, "{what}: mean");
        assert_eq!(d.min, sorted[0], "{what}: min");
        assert_eq!(d.max, sorted[sorted.len() - 1], "{what}: max");
        for (name, q, got) in [
            ("p50", 0.5, d.p50),
            ("p90", 0.9, d.p90),
            ("p99", 0.99, d.p99),
        ] {
            let want = nearest_rank(&sorted, q);
            assert!(
                got >= want && (got - want) as f64 <= want as f64 * 0.001,
                "{what}: {name} {got}, exact {want}"
            );
        }
    }

    #[test]
    fn token_distributions_hold_prompts_far_beyond_two_thousand_tokens() {
        // 300 requests in 120 sessions (1 to 4 turns, the last the rest); prompts
        // from 1 to over 126,000 tokens (growing within a session), outputs to
        // 40,000, drawn from a fixed linear congruential sequence.
        let (mut prompts, mut outputs) = (Vec::new(), Vec::new());
        let mut x = 12_345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m
        };
        let mut trajectories = VecDeque::new();
        let mut left = 300u64;
        for s in 0..120u64 {
            let turns = if s == 119 {
                left
            } else {
                (1 + next(4)).min(left - (119 - s))
            };
            left -= turns;
            let mut lens: Vec<u64> = (0..turns).map(|_| 1 + next(126_195)).collect();
            lens.sort_unstable();
            let requests = lens
                .iter()
                .map(|&p| {
                    let out = 1 + next(40_000);
                    prompts.push(p);
                    outputs.push(out);
                    PlannedRequest {
                        prompt_tokens: Some(p as u32),
                        output_tokens: Some(out as u32),
                        ..PlannedRequest::default()
                    }
                })
                .collect();
            trajectories.push_back(Trajectory::from_vec(format!("s{s}"), requests));
        }
        // Most prompts lie beyond what a histogram sized for short ones holds.
        prompts.sort_unstable();
        assert_eq!(prompts.len(), 300);
        assert!(*prompts.last().unwrap_or(&0) > 100_000, "{prompts:?}");
        assert!(prompts.iter().filter(|&&p| p > 2_047).count() > 250);

        let mut source = Trajectories(trajectories);
        let a = analyze(&mut source, &AnalyzeOptions::default(), &mut |_| {})
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.requests, 300);
        assert_eq!(a.sessions, 120);
        assert_dist("prompt tokens", a.prompt_tokens, &prompts);
        assert_dist("output tokens", a.output_tokens, &outputs);
    }

    #[test]
    fn a_distribution_grows_to_any_value() {
        let mut d = DistBuilder::new();
        let values = [0, 1, 2_047, 2_048, 1 << 20, u64::from(u32::MAX), 1 << 50];
        for v in values {
            d.record(v);
        }
        assert_dist("wide", d.finish(), &values);
        assert_eq!(DistBuilder::new().finish(), None);
    }
}
