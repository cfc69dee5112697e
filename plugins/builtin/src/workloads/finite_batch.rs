//! `finite_batch`: `users` concurrent users, each sending `requests_per_user`
//! independent requests one after another (the `batchbench` workload).

use batchbench_contract::dist::{LengthDist, MAX_TOKENS};
use batchbench_contract::plan::{
    Block, BlockRole, Blocks, PlannedRequest, SharedPrefix, Trajectory,
};
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::{self, Stream};
use serde::{Deserialize, Serialize};

/// Config of [`FiniteBatch`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FiniteBatchConfig {
    /// Concurrent users.
    pub users: u64,
    /// Requests each user sends, one after another.
    pub requests_per_user: u64,
    /// Prompt content length; absent: a short fixed prompt.
    #[serde(default)]
    pub input: Option<LengthDist>,
    /// Output length (sent as min and max); absent: unconstrained.
    #[serde(default)]
    pub output: Option<LengthDist>,
    /// Fraction of each prompt that is a prefix shared by all prompts.
    #[serde(default)]
    pub prefix_overlap: f64,
    /// Prompts per request, each of the input length (embeddings take a
    /// batch of inputs); 1: one prompt.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub batch_size: u32,
    /// Uniform +/- variation of the prompts per request, drawn per request
    /// (a reranker's documents: a request of `batch_size +- batch_vary`);
    /// below `batch_size`, so that every request has one at least.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch_vary: u32,
    /// A query of this many tokens before the batch's prompts, its own
    /// message (a reranker's query: the prompts are its documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_tokens: Option<u32>,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The most prompts one request carries.
pub const MAX_BATCH: u32 = 65_536;

const PURPOSE_SHAPE: u64 = 0x5348_4150; // "SHAP"
const PURPOSE_SHARED: u64 = 0x5348_5244; // "SHRD"
const PURPOSE_ITEM: u64 = 0x4954_454d; // "ITEM"
const PURPOSE_QUERY: u64 = 0x5155_4552; // "QUER"

/// The finite users x requests workload.
#[derive(Debug)]
pub struct FiniteBatch {
    cfg: FiniteBatchConfig,
    seed: u64,
    next_user: u64,
    /// Each user's requests go on without end (a duration run).
    endless: bool,
}

impl FiniteBatch {
    /// Validates the config.
    pub fn new(cfg: FiniteBatchConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        let bad = |m: String| PluginError::Config {
            plugin: "finite_batch".into(),
            message: m,
        };
        if cfg.users == 0 {
            return Err(bad("users must be at least 1".into()));
        }
        if !(0.0..=1.0).contains(&cfg.prefix_overlap) {
            return Err(bad(format!(
                "prefix_overlap must be between 0.0 and 1.0, got {}",
                cfg.prefix_overlap
            )));
        }
        if cfg.prefix_overlap > 0.0 && cfg.input.is_none() {
            return Err(bad("prefix_overlap needs an input length".into()));
        }
        if cfg.batch_size == 0 {
            return Err(bad("batch_size must be at least 1".into()));
        }
        if cfg.batch_vary >= cfg.batch_size {
            return Err(bad(format!(
                "batch_vary ({}) must be below batch_size ({}): every request has one prompt at least",
                cfg.batch_vary, cfg.batch_size
            )));
        }
        if cfg.batch_size.saturating_add(cfg.batch_vary) > MAX_BATCH {
            return Err(bad(format!(
                "batch_size + batch_vary must be at most {MAX_BATCH} prompts per request"
            )));
        }
        if cfg.query_tokens == Some(0) {
            return Err(bad("query_tokens must be at least 1".into()));
        }
        if (cfg.batch_size > 1 || cfg.query_tokens.is_some())
            && (cfg.input.is_none() || cfg.prefix_overlap > 0.0)
        {
            return Err(bad(
                "batch_size above 1 needs an input length and no prefix_overlap".into(),
            ));
        }
        for (name, d) in [("input", &cfg.input), ("output", &cfg.output)] {
            if let Some(m) = d.and_then(|d| d.beyond(MAX_TOKENS, name, &format!("{name}.max"))) {
                return Err(bad(m));
            }
        }
        Ok(Self {
            cfg,
            seed: ctx.seed,
            next_user: 0,
            endless: ctx.endless,
        })
    }

    /// The planned request `index` of `user`: a pure function of (seed, user, index).
    pub fn request(cfg: &FiniteBatchConfig, seed: u64, user: u64, index: u64) -> PlannedRequest {
        let mut rng = Stream::at(seed, &[PURPOSE_SHAPE, user, index]);
        let prompt = cfg
            .input
            .map(|d| d.sample(&mut rng, 1).min(u64::from(u32::MAX)) as u32);
        let output = cfg
            .output
            .map(|d| d.sample(&mut rng, 1).min(u64::from(u32::MAX)) as u32);
        // Drawn after the lengths, and only when it varies: the plans of a
        // fixed batch are the same as before the draw existed.
        let batch = if cfg.batch_vary > 0 {
            LengthDist::Fixed {
                value: u64::from(cfg.batch_size),
                vary: u64::from(cfg.batch_vary),
            }
            .sample(&mut rng, 1) as u32
        } else {
            cfg.batch_size
        };
        let shared_prefix = match prompt {
            Some(p) if cfg.prefix_overlap > 0.0 => Some(SharedPrefix {
                key: rng::derive(seed, &[PURPOSE_SHARED]),
                tokens: (cfg.prefix_overlap * f64::from(p)).round() as u32,
            }),
            _ => None,
        };
        // A batch: that many prompts, each a user message of its own seed,
        // after the query where there is one.
        let message = |purpose: u64, k: u64, tokens: u32| Block {
            seed: format!("{:016x}", rng::derive(seed, &[purpose, user, index, k])).into(),
            tokens,
            role: BlockRole::User,
            live: false,
            text: None,
        };
        let blocks = match prompt {
            Some(p) if batch > 1 || cfg.batch_vary > 0 || cfg.query_tokens.is_some() => {
                Some(Blocks::from(
                    cfg.query_tokens
                        .map(|q| message(PURPOSE_QUERY, 0, q))
                        .into_iter()
                        .chain((0..u64::from(batch)).map(|k| message(PURPOSE_ITEM, k, p)))
                        .collect::<Vec<_>>(),
                ))
            }
            _ => None,
        };
        PlannedRequest {
            prompt_tokens: prompt.map(|p| {
                p.saturating_mul(batch)
                    .saturating_add(cfg.query_tokens.unwrap_or(0))
            }),
            output_tokens: output,
            overhead_tokens: Some(0),
            shared_prefix,
            blocks,
            reset_before: index > 0,
            ..PlannedRequest::default()
        }
    }
}

impl WorkloadSource for FiniteBatch {
    fn needs_tokenizer(&self) -> bool {
        self.cfg.input.is_some()
    }

    fn info(&self) -> WorkloadInfo {
        WorkloadInfo {
            mode: "finite_batch".into(),
            planned_trajectories: Some(self.cfg.users),
            planned_requests: (!self.endless)
                .then(|| self.cfg.users.saturating_mul(self.cfg.requests_per_user)),
            endless: self.endless,
            ..WorkloadInfo::default()
        }
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        if self.next_user >= self.cfg.users {
            return None;
        }
        let user = self.next_user;
        self.next_user += 1;
        let cfg = self.cfg.clone();
        let seed = self.seed;
        let n = if self.endless {
            u64::MAX
        } else {
            cfg.requests_per_user
        };
        Some(Ok(Trajectory {
            id: format!("user-{user}").into(),
            start_after_ms: None,
            planned_requests: (!self.endless).then_some(n),
            requests: Box::new((0..n).map(move |i| Self::request(&cfg, seed, user, i))),
        }))
    }
}

batchbench_contract::register_workload! {
    name: "finite_batch",
    description: "users x requests-per-user independent requests with fixed, varied or log-normal lengths",
    example: r#"{"users": 2, "requests_per_user": 3, "input": {"kind": "fixed", "value": 128, "vary": 16}, "output": {"kind": "log_normal", "mu": 4.0, "sigma": 0.5, "max": 256}, "prefix_overlap": 0.25}"#,
    config: FiniteBatchConfig,
    build: FiniteBatch::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FiniteBatchConfig {
        FiniteBatchConfig {
            users: 3,
            requests_per_user: 4,
            input: Some(LengthDist::Fixed {
                value: 100,
                vary: 20,
            }),
            output: Some(LengthDist::fixed(8)),
            prefix_overlap: 0.5,
            batch_size: 1,
            batch_vary: 0,
            query_tokens: None,
        }
    }

    #[test]
    fn a_batch_is_that_many_distinct_prompts_of_the_input_length() {
        let c = FiniteBatchConfig {
            prefix_overlap: 0.0,
            batch_size: 3,
            ..cfg()
        };
        let r = FiniteBatch::request(&c, 9, 1, 2);
        let blocks = r.blocks.clone().unwrap_or_else(|| panic!("blocks"));
        assert_eq!(blocks.len(), 3);
        assert!(
            blocks
                .iter()
                .all(|b| b.role == BlockRole::User && Some(b.tokens * 3) == r.prompt_tokens)
        );
        assert!(blocks[0].seed != blocks[1].seed && blocks[1].seed != blocks[2].seed);
        assert_eq!(
            r,
            FiniteBatch::request(&c, 9, 1, 2),
            "a pure function of its inputs"
        );
        let ctx = BuildContext::default();
        assert!(
            FiniteBatch::new(
                FiniteBatchConfig {
                    batch_size: 2,
                    ..cfg()
                },
                &ctx
            )
            .is_err(),
            "with a shared prefix"
        );
        // A query first, then the batch (a reranker's documents).
        let q = FiniteBatchConfig {
            query_tokens: Some(12),
            ..c.clone()
        };
        let r = FiniteBatch::request(&q, 9, 1, 2);
        let qb = r.blocks.clone().unwrap_or_else(|| panic!("blocks"));
        assert_eq!(qb.len(), 4);
        assert_eq!(qb[0].tokens, 12);
        assert_eq!(qb[1].seed, blocks[0].seed, "the documents are the batch's");
        assert_eq!(r.prompt_tokens, Some(12 + 3 * qb[1].tokens));
        assert!(
            FiniteBatch::new(
                FiniteBatchConfig {
                    query_tokens: Some(0),
                    prefix_overlap: 0.0,
                    ..cfg()
                },
                &ctx
            )
            .is_err()
        );
        assert!(
            FiniteBatch::new(
                FiniteBatchConfig {
                    batch_size: 0,
                    prefix_overlap: 0.0,
                    ..cfg()
                },
                &ctx
            )
            .is_err()
        );
    }

    #[test]
    fn a_drawn_batch_spans_its_range_and_counts_every_prompt() {
        let c = FiniteBatchConfig {
            prefix_overlap: 0.0,
            batch_size: 5,
            batch_vary: 3,
            query_tokens: Some(7),
            ..cfg()
        };
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..400 {
            let r = FiniteBatch::request(&c, 3, 0, i);
            let blocks = r.blocks.clone().unwrap_or_else(|| panic!("blocks"));
            let docs = blocks.len() - 1;
            assert!((2..=8).contains(&docs), "{docs} documents");
            assert_eq!(
                r.prompt_tokens,
                Some(7 + blocks[1].tokens * docs as u32),
                "the query and every document"
            );
            seen.insert(docs);
        }
        assert_eq!(seen.len(), 7, "every count from 2 to 8 drawn: {seen:?}");
        // A fixed batch draws nothing: its plans are those of before.
        let fixed = FiniteBatchConfig {
            batch_vary: 0,
            ..c.clone()
        };
        let drawn = FiniteBatch::request(&c, 3, 0, 1);
        let plain = FiniteBatch::request(&fixed, 3, 0, 1);
        assert_eq!(drawn.output_tokens, plain.output_tokens);
        assert_eq!(plain.blocks.map(|b| b.len()), Some(6));
        let ctx = BuildContext::default();
        for (size, vary) in [(5, 5), (1, 1), (65_000, 1_000)] {
            let e = FiniteBatch::new(
                FiniteBatchConfig {
                    batch_size: size,
                    batch_vary: vary,
                    ..c.clone()
                },
                &ctx,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("batch_vary"), "{e}");
        }
    }

    #[test]
    fn plans_are_deterministic_and_shaped() {
        let ctx = BuildContext {
            seed: 9,
            ..Default::default()
        };
        let plan = |ctx: &BuildContext| -> Vec<(String, Vec<PlannedRequest>)> {
            let mut w = FiniteBatch::new(cfg(), ctx).unwrap_or_else(|e| panic!("{e}"));
            std::iter::from_fn(|| w.next_trajectory())
                .map(|t| {
                    t.map(|t| (t.id.to_string(), t.requests.collect()))
                        .unwrap_or_else(|e| panic!("{e}"))
                })
                .collect()
        };
        let a = plan(&ctx);
        assert_eq!(a, plan(&ctx));
        assert_ne!(
            a,
            plan(&BuildContext {
                seed: 10,
                ..Default::default()
            })
        );
        assert_eq!(a.len(), 3);
        for (_, reqs) in &a {
            assert_eq!(reqs.len(), 4);
            assert!(!reqs[0].reset_before && reqs[1..].iter().all(|r| r.reset_before));
            for r in reqs {
                let p = r.prompt_tokens.unwrap_or(0);
                assert!((80..=120).contains(&p));
                assert_eq!(
                    r.shared_prefix.map(|s| s.tokens),
                    Some((f64::from(p) * 0.5).round() as u32)
                );
                assert_eq!(r.output_bounds(), Some((8, 8)));
            }
        }
    }

    #[test]
    fn bad_configs_name_the_field() {
        let ctx = BuildContext::default();
        let e = FiniteBatch::new(
            FiniteBatchConfig {
                prefix_overlap: 1.5,
                ..cfg()
            },
            &ctx,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("prefix_overlap"), "{e}");
        let e = FiniteBatch::new(FiniteBatchConfig { users: 0, ..cfg() }, &ctx)
            .unwrap_err()
            .to_string();
        assert!(e.contains("users"), "{e}");
    }
}
