//! `synthetic_agents`: independent stateful agent loops with sampled shapes.
//!
//! Each agent makes `tool_invocations` model requests. One invocation is one model
//! request followed by one synthetic environment (tool) response of
//! `environment_tokens`, appended to the conversation after the sampled tool-call
//! latency; the next request resends the whole conversation. Every quantity of
//! every (agent, turn) has its own random stream, so the plan never depends on
//! scheduling order.

use batchbench_contract::dist::{LengthDist, MAX_TOKENS};
use batchbench_contract::plan::{PlannedRequest, Trajectory};
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::Stream;
use serde::{Deserialize, Serialize};

/// Config of [`SyntheticAgents`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticAgentsConfig {
    /// Number of agents.
    pub agents: u64,
    /// Initial prompt length.
    pub input: LengthDist,
    /// Output length of each model request (sent as min and max).
    pub output: LengthDist,
    /// Length of each environment (tool result) response.
    pub environment: LengthDist,
    /// Model requests per agent.
    pub tool_invocations: LengthDist,
    /// Tool-call latency after each successful response, in milliseconds.
    #[serde(default = "zero")]
    pub tool_call_latency_ms: LengthDist,
}

fn zero() -> LengthDist {
    LengthDist::fixed(0)
}

// One stream per quantity, so adding a quantity never shifts another.
const Q_INPUT: u64 = 1;
const Q_OUTPUT: u64 = 2;
const Q_ENV: u64 = 3;
const Q_INVOCATIONS: u64 = 4;
const Q_LATENCY: u64 = 5;

/// The synthetic agent workload.
#[derive(Debug)]
pub struct SyntheticAgents {
    cfg: SyntheticAgentsConfig,
    seed: u64,
    next: u64,
    /// New agents go on without end (a duration run).
    endless: bool,
}

impl SyntheticAgents {
    /// Validates the config.
    pub fn new(cfg: SyntheticAgentsConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        if cfg.agents == 0 {
            return Err(PluginError::Config {
                plugin: "synthetic_agents".into(),
                message: "agents must be at least 1".into(),
            });
        }
        for (name, d) in [
            ("input", &cfg.input),
            ("output", &cfg.output),
            ("environment", &cfg.environment),
        ] {
            if let Some(m) = d.beyond(MAX_TOKENS, name, &format!("{name}.max")) {
                return Err(PluginError::Config {
                    plugin: "synthetic_agents".into(),
                    message: m,
                });
            }
        }
        Ok(Self {
            cfg,
            seed: ctx.seed,
            next: 0,
            endless: ctx.endless,
        })
    }

    fn sample(&self, d: &LengthDist, q: u64, agent: u64, turn: u64, min: u64) -> u64 {
        d.sample(&mut Stream::at(self.seed, &[0xA6E7, q, agent, turn]), min)
    }

    /// The invocation count of `agent`.
    pub fn invocations(&self, agent: u64) -> u64 {
        self.sample(&self.cfg.tool_invocations, Q_INVOCATIONS, agent, 0, 1)
    }

    /// The planned request `turn` of `agent`: a pure function of (seed, agent, turn).
    pub fn request(&self, agent: u64, turn: u64) -> PlannedRequest {
        let c = &self.cfg;
        let clamp = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        PlannedRequest {
            prompt_tokens: (turn == 0).then(|| clamp(self.sample(&c.input, Q_INPUT, agent, 0, 1))),
            output_tokens: Some(clamp(self.sample(&c.output, Q_OUTPUT, agent, turn, 1))),
            overhead_tokens: (turn == 0).then_some(0),
            environment_tokens: (turn > 0)
                .then(|| clamp(self.sample(&c.environment, Q_ENV, agent, turn - 1, 0))),
            delay_after_ms: self.sample(&c.tool_call_latency_ms, Q_LATENCY, agent, turn, 0),
            ..PlannedRequest::default()
        }
    }
}

impl WorkloadSource for SyntheticAgents {
    fn info(&self) -> WorkloadInfo {
        if self.endless {
            return WorkloadInfo {
                mode: "synthetic".into(),
                endless: true,
                ..WorkloadInfo::default()
            };
        }
        let planned: u64 = (0..self.cfg.agents).map(|a| self.invocations(a)).sum();
        WorkloadInfo {
            mode: "synthetic".into(),
            planned_trajectories: Some(self.cfg.agents),
            planned_requests: Some(planned),
            ..WorkloadInfo::default()
        }
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        if self.next >= self.cfg.agents && !self.endless {
            return None;
        }
        let agent = self.next;
        self.next += 1;
        let n = self.invocations(agent);
        let me = Self {
            cfg: self.cfg.clone(),
            seed: self.seed,
            next: 0,
            endless: false,
        };
        Some(Ok(Trajectory {
            id: format!("agent-{agent}").into(),
            start_after_ms: None,
            planned_requests: Some(n),
            requests: Box::new((0..n).map(move |t| me.request(agent, t))),
        }))
    }
}

batchbench_contract::register_workload! {
    name: "synthetic_agents",
    description: "stateful agent loops: each turn resends the growing conversation plus a synthetic tool result",
    example: r#"{"agents": 4, "input": {"kind": "fixed", "value": 256}, "output": {"kind": "fixed", "value": 64}, "environment": {"kind": "log_normal", "mu": 4.85, "sigma": 0.6, "max": 1024}, "tool_invocations": {"kind": "fixed", "value": 8}, "tool_call_latency_ms": {"kind": "fixed", "value": 250}}"#,
    config: SyntheticAgentsConfig,
    build: SyntheticAgents::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SyntheticAgentsConfig {
        SyntheticAgentsConfig {
            agents: 3,
            input: LengthDist::fixed(256),
            output: LengthDist::LogNormal {
                mu: 4.0,
                sigma: 0.5,
                max: Some(200),
            },
            environment: LengthDist::fixed(128),
            tool_invocations: LengthDist::LogNormal {
                mu: 2.0,
                sigma: 0.4,
                max: Some(20),
            },
            tool_call_latency_ms: LengthDist::fixed(25),
        }
    }

    #[test]
    fn turns_are_shaped_and_independent_of_order() {
        let w = SyntheticAgents::new(
            cfg(),
            &BuildContext {
                seed: 5,
                ..Default::default()
            },
        )
        .unwrap();
        let r0 = w.request(1, 0);
        assert_eq!(r0.prompt_tokens, Some(256));
        assert_eq!(r0.environment_tokens, None);
        let r3 = w.request(1, 3);
        assert_eq!(r3.prompt_tokens, None);
        assert_eq!(r3.environment_tokens, Some(128));
        assert_eq!(r3.delay_after_ms, 25);
        // Same coordinates, same sample, whatever was asked before.
        let later = SyntheticAgents::new(
            cfg(),
            &BuildContext {
                seed: 5,
                ..Default::default()
            },
        )
        .unwrap();
        let _ = later.request(2, 7);
        assert_eq!(later.request(1, 3), r3);
        let outs: std::collections::BTreeSet<_> =
            (0..10).map(|t| w.request(0, t).output_tokens).collect();
        assert!(outs.len() > 3, "outputs vary per turn: {outs:?}");
        let other = SyntheticAgents::new(
            cfg(),
            &BuildContext {
                seed: 6,
                ..Default::default()
            },
        )
        .unwrap();
        assert_ne!(
            (0..10).map(|t| w.request(0, t)).collect::<Vec<_>>(),
            (0..10).map(|t| other.request(0, t)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn agents_get_their_invocation_count() {
        let mut w = SyntheticAgents::new(
            cfg(),
            &BuildContext {
                seed: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let planned = w.info().planned_requests.unwrap_or(0);
        let mut total = 0;
        while let Some(t) = w.next_trajectory() {
            let t = t.unwrap();
            let n = t.requests.count() as u64;
            assert!((1..=20).contains(&n));
            total += n;
        }
        assert_eq!(total, planned);
    }
}
