//! What a prefix cache could reuse, estimated from the plan: a request's prompt as
//! segments of identified tokens, its full blocks as chained hashes, and caches of
//! those hashes (an ideal one that never forgets, and an LRU one of a capacity).
//!
//! A segment stands for `tokens` tokens whose content is a function of `id` alone:
//! a block seed, a shared-prefix key, a synthetic prompt, the reply of one request.
//! Token `i` of a segment is the same token wherever the segment appears, so two
//! prompts share a prefix exactly as far as their segment sequences agree (a
//! shared-prefix segment of 40 tokens agrees with one of 100 over 40 tokens). A
//! block is `block` consecutive tokens; its hash chains over every block before it,
//! so equal hashes mean equal prefixes, as in the paged KV caches of vLLM and
//! SGLang. Only full blocks are cached.
//!
//! The estimate sees what the plan says: content and the template tokens the run
//! accounts for. A server's own template tokens, and replies that happen to be
//! equal, are beyond it; a reply is its own content, never shared.

use batchbench_contract::plan::{BlockRole, PlannedRequest, PromptPlan};
use batchbench_contract::rng::{hash_str, mix64};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

pub use batchbench_contract::prefix::{DEFAULT_BLOCK_TOKENS, Estimate};

/// Tokens of the fixed default prompt (its words, roughly; no tokenizer is
/// loaded for it).
const DEFAULT_PROMPT_TOKENS: u32 = 10;

const TEMPLATE: u64 = 0x7465_6d70_6c61_7465;
const TURN: u64 = 0x7475_726e_0000_0001;
const REPLY: u64 = 0x7265_706c_7900_0002;
const PROMPT: u64 = 0x7072_6f6d_7074_0003;
const ENVIRONMENT: u64 = 0x656e_7600_0000_0004;
const SHARED: u64 = 0x7368_6172_6564_0005;
const BLOCK: u64 = 0x626c_6f63_6b00_0006;
const RAW: u64 = 0x7261_7700_0000_0007;
const DEFAULT_PROMPT: u64 = 0x6465_6661_756c_0008;

/// Tokens whose content is a function of `id` alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// What the tokens are.
    pub id: u64,
    /// How many.
    pub tokens: u32,
    /// Content of one trajectory alone (its own prompt, tool results, replies):
    /// no other trajectory can send it, so no block from it on is shared.
    pub private: bool,
}

impl Segment {
    /// Content any trajectory may send.
    pub fn shared(id: u64, tokens: u32) -> Self {
        Self {
            id,
            tokens,
            private: false,
        }
    }
}

/// A hasher for keys that are hashes already.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A map keyed by block hashes.
pub type HashMapById<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// The template overheads the run accounts for (see [`batchbench_contract::spec::TemplateSpec`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Overheads {
    /// Tokens of a first or reset request.
    pub initial: u32,
    /// Tokens of each appended turn.
    pub turn: u32,
}

/// What a trajectory's next request sends back of the reply before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentBack {
    /// Its tokens, as sent.
    pub tokens: u32,
    /// Sent as the server generated it (with its reasoning, or it had none):
    /// the server cached it after the prompt it answered, so the blocks
    /// through it are the server's already. A reply sent back without the
    /// reasoning that came first is new to it.
    pub whole: bool,
}

/// The prompt of one trajectory's current request, as segments and block hashes,
/// grown request by request like the conversation it mirrors.
#[derive(Debug)]
pub struct Shape {
    block: u32,
    segs: Vec<Segment>,
    tokens: u64,
    /// Hashes of the full blocks of `segs`.
    hashes: Vec<u64>,
    /// Within a trajectory a block seed sent once keeps its content (a live
    /// block's reply included).
    seeds: HashMap<Arc<str>, Segment>,
    /// Leading blocks known to be in each ideal cache this trajectory has
    /// used, by the cache's key: they were inserted, and an ideal cache never
    /// forgets.
    known: Vec<(u64, usize)>,
    /// The private blocks this trajectory stored in each ideal cache, by the
    /// cache's key: only this trajectory can send them again, so they live
    /// here, and end with it, rather than in the run's caches.
    private: Vec<(
        u64,
        std::collections::HashSet<u64, BuildHasherDefault<IdHasher>>,
    )>,
    /// Leading full blocks with no private token.
    shareable: usize,
    /// The ideal caches this request was looked up in, by key.
    looked_up: Vec<u64>,
    /// The previous prompt's segments, kept for their room.
    spare: Vec<Segment>,
}

impl Shape {
    /// An empty prompt of blocks of `block` tokens.
    pub fn new(block: u32) -> Self {
        Self {
            block: block.max(1),
            segs: Vec::new(),
            tokens: 0,
            hashes: Vec::new(),
            seeds: HashMap::new(),
            known: Vec::new(),
            private: Vec::new(),
            shareable: 0,
            looked_up: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// The prompt's tokens.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The hashes of the prompt's full blocks.
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Moves to request `index` of the trajectory keyed `trajectory` (unique in
    /// the run): `req` as its plan says, `prev` the request before it (whose
    /// conversation it continues unless it is `reset_before`), and
    /// `reply` what goes back of the previous reply (absent: its planned
    /// output, not known to be cached).
    pub fn advance(
        &mut self,
        trajectory: u64,
        index: u64,
        prev: Option<&PlannedRequest>,
        req: &PlannedRequest,
        reply: Option<SentBack>,
        overheads: Overheads,
    ) {
        let continues = prev.is_some() && !req.reset_before;
        let reply_tokens = reply
            .map(|r| r.tokens)
            .or_else(|| prev.and_then(|p| p.output_tokens))
            .unwrap_or(0);
        let reply_segment = || Segment {
            id: mix64(trajectory ^ mix64(index.wrapping_sub(1) ^ REPLY)),
            tokens: reply_tokens,
            private: true,
        };
        // A whole reply sent back right after the prompt it answered: the
        // server holds the blocks through it (the previous prompt's tokens).
        let mut generated_after: Option<u64> = None;
        let own = |purpose: u64, tokens: u32| Segment {
            id: mix64(trajectory ^ mix64(index ^ purpose)),
            tokens,
            private: true,
        };
        let template = |tokens: u32| Segment::shared(TEMPLATE, tokens);
        let mut segs = std::mem::take(&mut self.spare);
        segs.clear();
        let plan = req.prompt_plan(continues);
        // A fresh conversation opens with content of its own index: no private
        // block of an earlier one can come back, so they go.
        let fresh = match plan {
            PromptPlan::Continue { .. } => false,
            PromptPlan::Blocks(_) => !continues,
            _ => true,
        };
        if fresh {
            for (_, set) in &mut self.private {
                set.clear();
                set.shrink_to(64);
            }
        }
        match plan {
            PromptPlan::Raw(body) => {
                self.seeds.clear();
                segs = raw_segments(&body.0, req.prompt_tokens);
            }
            PromptPlan::Blocks(blocks) => {
                let fresh = !continues;
                if fresh {
                    self.seeds.clear();
                    segs.push(template(req.overhead_tokens.unwrap_or(overheads.initial)));
                } else if let Some(t) = self.segs.first().filter(|s| s.id == TEMPLATE) {
                    segs.push(*t);
                }
                let mut live_reply = (!fresh).then(reply_segment);
                for b in blocks.iter() {
                    let seg = match self.seeds.get(&b.seed) {
                        Some(s) => *s,
                        None => {
                            let s = match (b.live, live_reply.take()) {
                                (true, Some(r)) => r,
                                (_, r) => {
                                    live_reply = r;
                                    Segment::shared(block_id(&b.seed, b.tokens, b.role), b.tokens)
                                }
                            };
                            self.seeds.insert(b.seed.clone(), s);
                            s
                        }
                    };
                    segs.push(seg);
                }
            }
            PromptPlan::Exact {
                prompt_tokens,
                overhead_tokens,
                shared_prefix,
            } => {
                self.seeds.clear();
                let overhead = overhead_tokens.unwrap_or(overheads.initial);
                let content = prompt_tokens.saturating_sub(overhead);
                segs.push(template(overhead));
                let shared = shared_prefix.map_or(0, |p| p.tokens.min(content));
                if let Some(p) = shared_prefix {
                    segs.push(Segment::shared(mix64(p.key ^ SHARED), shared));
                }
                segs.push(own(PROMPT, content - shared));
            }
            PromptPlan::Continue { environment_tokens } => {
                segs = std::mem::take(&mut self.segs);
                let env = environment_tokens.unwrap_or_else(|| {
                    let p0 = prev.and_then(|p| p.prompt_tokens).unwrap_or(0);
                    let out = prev.and_then(|p| p.output_tokens).unwrap_or(0);
                    let p1 = req.prompt_tokens.unwrap_or(0);
                    p1.saturating_sub(p0)
                        .saturating_sub(out)
                        .saturating_sub(overheads.turn)
                });
                if reply.is_some_and(|r| r.whole) {
                    generated_after = Some(self.tokens);
                }
                segs.push(reply_segment());
                segs.push(Segment::shared(TURN, overheads.turn));
                segs.push(own(ENVIRONMENT, env));
            }
            PromptPlan::Default => {
                self.seeds.clear();
                segs.push(Segment::shared(DEFAULT_PROMPT, DEFAULT_PROMPT_TOKENS));
            }
        }
        segs.retain(|s| s.tokens > 0);
        self.set(segs);
        // The caches the previous request was looked up in.
        let answered_by = &self.looked_up;
        if let Some(prompt) = generated_after {
            // The caches the previous request went to hold its reply after
            // it: the blocks from the one its prompt ended in through the
            // reply's last whole one (private: they hold the reply's tokens).
            let block = u64::from(self.block);
            let from = ((prompt / block) as usize).min(self.hashes.len());
            let through = (((prompt + u64::from(reply_tokens)) / block) as usize)
                .clamp(from, self.hashes.len());
            for (key, set) in &mut self.private {
                if answered_by.contains(key) {
                    set.extend(self.hashes[from..through].iter().copied());
                }
            }
        }
        self.looked_up.clear();
    }

    /// Makes `segs` the prompt, rehashing only the blocks past the prefix it
    /// shares with the current one.
    fn set(&mut self, segs: Vec<Segment>) {
        let same = self
            .segs
            .iter()
            .zip(&segs)
            .take_while(|(a, b)| a == b)
            .count();
        // Tokens the two prompts agree on: whole equal segments, then the common
        // part of the first differing pair when it is the same content.
        let mut agreed: u64 = self.segs[..same].iter().map(|s| u64::from(s.tokens)).sum();
        if let (Some(a), Some(b)) = (self.segs.get(same), segs.get(same))
            && a.id == b.id
        {
            agreed += u64::from(a.tokens.min(b.tokens));
        }
        let keep = (agreed / u64::from(self.block)) as usize;
        self.hashes.truncate(keep);
        for (_, k) in &mut self.known {
            *k = (*k).min(keep);
        }
        self.spare = std::mem::replace(&mut self.segs, segs);
        self.tokens = self.segs.iter().map(|s| u64::from(s.tokens)).sum();
        let public: u64 = self
            .segs
            .iter()
            .take_while(|s| !s.private)
            .map(|s| u64::from(s.tokens))
            .sum();
        self.shareable = (public / u64::from(self.block)) as usize;
        self.rehash_from(keep);
    }

    /// Hashes the full blocks from block `from` on.
    fn rehash_from(&mut self, from: usize) {
        let block = u64::from(self.block);
        let full = (self.tokens / block) as usize;
        if from >= full {
            return;
        }
        // Find the segment holding token `from * block`.
        let mut pos = from as u64 * block;
        let (mut si, mut off) = (0usize, 0u64);
        let mut start = 0u64;
        for (i, s) in self.segs.iter().enumerate() {
            let end = start + u64::from(s.tokens);
            if end > pos {
                si = i;
                off = pos - start;
                break;
            }
            start = end;
        }
        let mut h = if from == 0 { 0 } else { self.hashes[from - 1] };
        for _ in from..full {
            let mut left = block;
            h = mix64(h ^ BLOCK);
            while left > 0 {
                let s = self.segs[si];
                let take = (u64::from(s.tokens) - off).min(left);
                h = mix64(h ^ mix64(s.id ^ (off << 32) ^ take));
                left -= take;
                off += take;
                if off == u64::from(s.tokens) {
                    si += 1;
                    off = 0;
                }
            }
            pos += block;
            self.hashes.push(h);
        }
        debug_assert_eq!(pos, full as u64 * block);
    }

    /// The leading blocks of the prompt that this trajectory's earlier requests
    /// stored in the ideal cache keyed `key`.
    pub fn known(&self, key: u64) -> usize {
        self.known
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |(_, n)| (*n).min(self.hashes.len()))
    }

    /// The leading blocks already stored in the ideal cache keyed `key` by
    /// this trajectory's earlier requests, and from now on all of them: the
    /// blocks past the returned count are new to it.
    fn take_new(&mut self, key: u64) -> usize {
        let n = self.hashes.len();
        match self.known.iter_mut().find(|(k, _)| *k == key) {
            Some((_, k)) => std::mem::replace(k, n).min(n),
            None => {
                self.known.push((key, n));
                0
            }
        }
    }

    /// Leading full blocks that other trajectories could send too: those
    /// before the first private token.
    pub fn shareable_blocks(&self) -> usize {
        self.shareable.min(self.hashes.len())
    }

    /// Looks the prompt up in `cache` (keyed `key` among the ideal caches this
    /// trajectory uses) and stores it there: its shareable blocks in `cache`,
    /// the rest with this trajectory. Returns the cached tokens.
    pub fn lookup_ideal(&mut self, cache: &mut IdealCache, key: u64) -> u64 {
        let (hits, _) = self.lookup_with(key, |_, h| !cache.seen.insert(h));
        hits as u64 * u64::from(self.block)
    }

    /// Looks the prompt up in the ideal cache keyed `key`: its leading blocks
    /// stored by this trajectory's earlier requests are hits; `shared(i, hash)`
    /// looks up and stores each later shareable block, saying whether it was
    /// there; later private blocks are looked up and stored with this
    /// trajectory. Returns the leading blocks found, and the private blocks new
    /// to this trajectory.
    pub fn lookup_with(
        &mut self,
        key: u64,
        mut shared: impl FnMut(usize, u64) -> bool,
    ) -> (usize, usize) {
        let from = self.take_new(key);
        if !self.looked_up.contains(&key) {
            self.looked_up.push(key);
        }
        let shareable = self.shareable_blocks();
        let private = match self.private.iter().position(|(k, _)| *k == key) {
            Some(i) => &mut self.private[i].1,
            None => {
                self.private.push((key, Default::default()));
                let last = self.private.len() - 1;
                &mut self.private[last].1
            }
        };
        let mut hits = from;
        let mut hit = true;
        let mut fresh_private = 0;
        for (i, &h) in self.hashes.iter().enumerate().skip(from) {
            let present = if i < shareable {
                shared(i, h)
            } else {
                let fresh = private.insert(h);
                fresh_private += usize::from(fresh);
                !fresh
            };
            if hit && present {
                hits += 1;
            } else {
                hit = false;
            }
        }
        (hits, fresh_private)
    }
}

fn block_id(seed: &str, tokens: u32, role: BlockRole) -> u64 {
    mix64(hash_str(seed) ^ mix64(u64::from(tokens) ^ (role as u64) << 40))
}

/// A verbatim body: its tools and messages, each identified by its JSON, with
/// the planned prompt split by their sizes (absent: four bytes a token).
fn raw_segments(
    body: &serde_json::Map<String, serde_json::Value>,
    prompt_tokens: Option<u32>,
) -> Vec<Segment> {
    let parts: Vec<String> = ["tools", "messages"]
        .iter()
        .filter_map(|k| body.get(*k).and_then(serde_json::Value::as_array))
        .flatten()
        .map(serde_json::Value::to_string)
        .collect();
    let bytes: u64 = parts.iter().map(|p| p.len() as u64).sum::<u64>().max(1);
    let total = prompt_tokens.map_or(bytes.div_ceil(4), u64::from);
    let mut given = 0u64;
    let mut seen = 0u64;
    parts
        .iter()
        .map(|p| {
            seen += p.len() as u64;
            let upto = total * seen / bytes;
            let tokens = (upto - given) as u32;
            given = upto;
            Segment::shared(mix64(hash_str(p) ^ RAW), tokens)
        })
        .collect()
}

/// A cache that keeps every block: the ideal a perfect prefix cache reaches.
#[derive(Debug, Default)]
pub struct IdealCache {
    seen: std::collections::HashSet<u64, BuildHasherDefault<IdHasher>>,
}

impl IdealCache {
    /// Distinct blocks stored.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// An LRU cache of blocks of a capacity: a prompt's blocks are looked up, then
/// all of them become the most recent, in order, and the least recent blocks
/// beyond the capacity go.
#[derive(Debug)]
pub struct LruCache {
    capacity: usize,
    index: HashMapById<u32>,
    nodes: Vec<Node>,
    /// Least recent, most recent (`NONE` when empty).
    head: u32,
    tail: u32,
    free: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    hash: u64,
    prev: u32,
    next: u32,
}

const NONE: u32 = u32::MAX;

impl LruCache {
    /// A cache of `capacity_blocks` blocks.
    pub fn new(capacity_blocks: usize) -> Self {
        Self {
            capacity: capacity_blocks.min(NONE as usize - 1),
            index: HashMapById::default(),
            nodes: Vec::new(),
            head: NONE,
            tail: NONE,
            free: Vec::new(),
        }
    }

    /// Looks up the prompt's blocks and stores them. Returns the cached blocks.
    pub fn lookup_and_insert(&mut self, hashes: &[u64]) -> usize {
        let mut hits = 0;
        let mut hit = true;
        for &h in hashes {
            match self.index.get(&h).copied() {
                Some(i) => {
                    if hit {
                        hits += 1;
                    }
                    self.unlink(i);
                    self.push_back(i);
                }
                None => {
                    hit = false;
                    if self.capacity == 0 {
                        continue;
                    }
                    let i = match self.free.pop() {
                        Some(i) => {
                            self.nodes[i as usize].hash = h;
                            i
                        }
                        None => {
                            self.nodes.push(Node {
                                hash: h,
                                prev: NONE,
                                next: NONE,
                            });
                            (self.nodes.len() - 1) as u32
                        }
                    };
                    self.index.insert(h, i);
                    self.push_back(i);
                }
            }
        }
        while self.index.len() > self.capacity {
            let i = self.head;
            self.unlink(i);
            self.index.remove(&self.nodes[i as usize].hash);
            self.free.push(i);
        }
        hits
    }

    /// Blocks stored.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        match prev {
            NONE => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NONE => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn push_back(&mut self, i: u32) {
        self.nodes[i as usize].prev = self.tail;
        self.nodes[i as usize].next = NONE;
        match self.tail {
            NONE => self.head = i,
            t => self.nodes[t as usize].next = i,
        }
        self.tail = i;
    }
}

/// The run's estimates, in send order: one ideal cache shared by every request,
/// one per data-parallel rank when the run routes to ranks, and in a run of
/// several models one per model (and rank), as caches do not cross models.
#[derive(Debug, Default)]
pub struct Estimator {
    global: IdealCache,
    ranks: HashMap<u64, IdealCache>,
    models: HashMap<(usize, Option<u64>), IdealCache>,
}

impl Estimator {
    /// Looks `shape` up and stores it, sent to `rank` for `model` (of a mix).
    pub fn observe(
        &mut self,
        shape: &mut Shape,
        rank: Option<u64>,
        model: Option<usize>,
    ) -> Estimate {
        let global = shape.lookup_ideal(&mut self.global, u64::MAX);
        let Some(m) = model else {
            let rank = rank.map(|r| shape.lookup_ideal(self.ranks.entry(r).or_default(), r));
            return Estimate {
                global,
                rank,
                model: None,
            };
        };
        // Keyed apart from the rank caches and the global one.
        let key = (1 << 62) | ((m as u64) << 32) | rank.map_or(0xFFFF_FFFF, |r| r & 0xFFFF_FFFF);
        let own = shape.lookup_ideal(self.models.entry((m, rank)).or_default(), key);
        Estimate {
            global,
            rank: rank.map(|_| own),
            model: Some(own),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::plan::{Block, Blocks, SharedPrefix};

    fn block(seed: &str, tokens: u32) -> Block {
        Block {
            seed: Arc::from(seed),
            tokens,
            role: BlockRole::User,
            live: false,
            text: None,
        }
    }

    fn blocks(bs: Vec<Block>) -> PlannedRequest {
        PlannedRequest {
            blocks: Some(Blocks::from(bs)),
            ..Default::default()
        }
    }

    fn shape_of(traj: u64, req: &PlannedRequest, block: u32) -> Shape {
        let mut s = Shape::new(block);
        s.advance(traj, 0, None, req, None, Overheads::default());
        s
    }

    #[test]
    fn shared_seeds_share_blocks_across_trajectories() {
        let a = shape_of(1, &blocks(vec![block("sys", 40), block("a", 30)]), 16);
        let b = shape_of(2, &blocks(vec![block("sys", 40), block("b", 30)]), 16);
        assert_eq!(a.tokens(), 70);
        assert_eq!(a.hashes().len(), 4);
        // 40 shared tokens: two whole blocks of 16 agree, the third mixes content.
        assert_eq!(a.hashes()[..2], b.hashes()[..2]);
        assert_ne!(a.hashes()[2], b.hashes()[2]);
        let mut cache = IdealCache::default();
        let (mut a, mut b) = (a, b);
        assert_eq!(a.lookup_ideal(&mut cache, 0), 0);
        assert_eq!(b.lookup_ideal(&mut cache, 0), 32);
        assert_eq!(a.lookup_ideal(&mut cache, 0), 64, "all of a's full blocks");
    }

    #[test]
    fn a_shorter_shared_prefix_agrees_over_its_length() {
        let req = |n: u32| PlannedRequest {
            prompt_tokens: Some(200),
            shared_prefix: Some(SharedPrefix { key: 9, tokens: n }),
            ..Default::default()
        };
        let long = shape_of(1, &req(100), 16);
        let short = shape_of(2, &req(50), 16);
        // 50 tokens agree: three full blocks.
        let same = long
            .hashes()
            .iter()
            .zip(short.hashes())
            .take_while(|(a, b)| a == b)
            .count();
        assert_eq!(same, 3);
    }

    /// A reply sent back as an answer alone (its reasoning dropped).
    fn answer(tokens: u32) -> SentBack {
        SentBack {
            tokens,
            whole: false,
        }
    }

    /// A first request of 100 prompt tokens and 20 planned output, a next
    /// one of 50 environment tokens, and the template overheads they take.
    fn two_turns() -> (PlannedRequest, PlannedRequest, Overheads) {
        let first = PlannedRequest {
            prompt_tokens: Some(100),
            output_tokens: Some(20),
            ..Default::default()
        };
        let next = PlannedRequest {
            environment_tokens: Some(50),
            ..Default::default()
        };
        let ov = Overheads {
            initial: 4,
            turn: 6,
        };
        (first, next, ov)
    }

    #[test]
    fn a_reply_sent_back_whole_was_cached_by_the_server_that_generated_it() {
        let (first, next, ov) = two_turns();
        let run = |reply: SentBack| {
            let mut e = Estimator::default();
            let mut u = Shape::new(16);
            u.advance(7, 0, None, &first, None, ov);
            e.observe(&mut u, Some(1), None);
            u.advance(7, 1, Some(&first), &next, Some(reply), ov);
            (e.observe(&mut u, Some(1), None), u.tokens())
        };
        // 100 prompt tokens and 25 of reply: 7 whole blocks of 16 (112 tokens).
        let (whole, tokens) = run(SentBack {
            tokens: 25,
            whole: true,
        });
        assert_eq!(tokens, 181);
        assert_eq!((whole.global, whole.rank), (112, Some(112)));
        // Without its reasoning the reply is new: the prompt's 6 blocks.
        let (answer_only, _) = run(answer(25));
        assert_eq!((answer_only.global, answer_only.rank), (96, Some(96)));
    }

    #[test]
    fn a_continuing_conversation_keeps_its_blocks_and_adds_reply_and_result() {
        let (first, next, ov) = two_turns();
        let mut s = Shape::new(16);
        s.advance(7, 0, None, &first, None, ov);
        assert_eq!(s.tokens(), 100);
        let before = s.hashes().to_vec();
        s.advance(7, 1, Some(&first), &next, Some(answer(25)), ov);
        assert_eq!(s.tokens(), 100 + 25 + 6 + 50);
        assert_eq!(&s.hashes()[..before.len()], &before[..]);
        // Without a measured reply the planned output stands in.
        let mut t = Shape::new(16);
        t.advance(7, 0, None, &first, None, ov);
        t.advance(7, 1, Some(&first), &next, None, ov);
        assert_eq!(t.tokens(), 100 + 20 + 6 + 50);
        // The estimator: the second request finds the first's blocks.
        let mut e = Estimator::default();
        let mut u = Shape::new(16);
        u.advance(7, 0, None, &first, None, ov);
        assert_eq!(e.observe(&mut u, Some(1), None).global, 0);
        u.advance(7, 1, Some(&first), &next, Some(answer(25)), ov);
        let est = e.observe(&mut u, Some(1), None);
        assert_eq!(est.global, 96);
        assert_eq!(est.rank, Some(96));
        // A synthetic prompt is one trajectory's own: its blocks stay with the
        // trajectory, and the run's caches do not grow with them.
        assert!(
            e.global.is_empty(),
            "{} blocks in the run's cache",
            e.global.len()
        );
        assert_eq!(u.shareable_blocks(), 0);
    }

    #[test]
    fn a_live_block_carries_the_reply_and_keeps_it_within_the_trajectory() {
        let live = Block {
            live: true,
            role: BlockRole::Assistant,
            ..block("r1", 32)
        };
        let r0 = blocks(vec![block("sys", 32)]);
        let r1 = blocks(vec![block("sys", 32), live.clone(), block("u1", 32)]);
        let r2 = blocks(vec![
            block("sys", 32),
            live,
            block("u1", 32),
            block("u2", 16),
        ]);
        let mut x = Shape::new(16);
        let mut y = Shape::new(16);
        let ov = Overheads::default();
        for (t, s) in [(1, &mut x), (2, &mut y)] {
            s.advance(t, 0, None, &r0, None, ov);
            s.advance(t, 1, Some(&r0), &r1, Some(answer(32)), ov);
            s.advance(t, 2, Some(&r1), &r2, Some(answer(8)), ov);
        }
        // Each trajectory's reply is its own: the prompts part after "sys".
        assert_eq!(x.tokens(), 32 * 3 + 16);
        assert_eq!(x.hashes()[..2], y.hashes()[..2]);
        assert_ne!(x.hashes()[2], y.hashes()[2]);
    }

    #[test]
    fn a_private_block_is_found_again_after_the_prompt_returns_to_it() {
        // The prompt grows, is cut back, then grows back to what it was: the
        // private blocks stored by the first request are hits again.
        let first = PlannedRequest {
            prompt_tokens: Some(64),
            output_tokens: Some(32),
            ..Default::default()
        };
        let mut s = Shape::new(16);
        let mut cache = IdealCache::default();
        s.advance(3, 0, None, &first, None, Overheads::default());
        assert_eq!(s.lookup_ideal(&mut cache, 0), 0);
        let segs = s.segs.clone();
        s.set(Vec::new());
        assert_eq!(s.known(0), 0, "cut back: nothing known to be a prefix");
        s.set(segs.clone());
        assert_eq!(s.lookup_ideal(&mut cache, 0), 64);
        assert!(cache.is_empty());
    }

    #[test]
    fn lru_evicts_the_least_recent_and_hits_only_a_leading_run() {
        let mut c = LruCache::new(4);
        assert_eq!(c.lookup_and_insert(&[1, 2, 3]), 0);
        assert_eq!(c.lookup_and_insert(&[1, 2, 9]), 2);
        assert_eq!(c.len(), 4);
        // 1 2 3 9 in use order 3,1,2,9: inserting 5 and 6 evicts 3 and 1.
        assert_eq!(c.lookup_and_insert(&[5, 6]), 0);
        assert_eq!(c.len(), 4);
        assert_eq!(c.lookup_and_insert(&[1, 2]), 0, "1 was evicted");
        assert_eq!(c.lookup_and_insert(&[9]), 0, "9 went for 1 and 2");
        let mut none = LruCache::new(0);
        assert_eq!(none.lookup_and_insert(&[1]), 0);
        assert_eq!(none.lookup_and_insert(&[1]), 0);
        assert!(none.is_empty());
    }

    #[test]
    fn raw_bodies_split_the_planned_prompt_by_size() {
        let body: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"messages":[{"role":"system","content":"aaaaaaaaaaaaaaaa"},{"role":"user","content":"b"}]}"#,
        )
        .unwrap_or_default();
        let segs = raw_segments(&body, Some(100));
        assert_eq!(segs.len(), 2);
        assert_eq!(segs.iter().map(|s| s.tokens).sum::<u32>(), 100);
        assert!(segs[0].tokens > segs[1].tokens);
    }
}
