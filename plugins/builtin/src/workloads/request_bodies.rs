//! `request_bodies`: users sending request bodies written by the caller, verbatim
//! (the Python `run_benchmark` workload). Request `m` of user `n` uses entry
//! `(m * users + n) mod len(requests)`, so a list as long as users x requests gives
//! every request its own entry, and a shorter one is recycled.
//!
//! Finite mode sends `requests_per_user` requests per user; long-running mode keeps
//! every user sending, recycling entries, until `duration_secs` have passed since
//! the first request was planned (requests in flight then complete).

use batchbench_contract::dist::LengthDist;
use batchbench_contract::plan::{PlannedRequest, RawBody, Trajectory};
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::rng::Stream;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One request body and what the caller knows of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestEntry {
    /// The body, a JSON object (`model`, `messages`, sampling fields, ...).
    pub body: RawBody,
    /// The entry's line in the caller's dataset (reported, not interpreted).
    #[serde(default)]
    pub line_idx: u64,
    /// The prompt's token count, when known (reported beside the server's count).
    #[serde(default)]
    pub input_tokens: u64,
}

/// Config of [`RequestBodies`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestBodiesConfig {
    /// Concurrent users.
    pub users: u64,
    /// Finite mode: requests each user sends, one after another.
    #[serde(default)]
    pub requests_per_user: Option<u64>,
    /// Long-running mode: keep sending for this many seconds.
    #[serde(default)]
    pub duration_secs: Option<f64>,
    /// The bodies (at least one).
    pub requests: Vec<RequestEntry>,
    /// Output length sampled per request and sent as min and max tokens; absent:
    /// each body's own fields stand.
    #[serde(default)]
    pub output: Option<LengthDist>,
}

const PURPOSE_OUTPUT: u64 = 0x424f_4459; // "BODY"

/// The verbatim-bodies workload.
#[derive(Debug)]
pub struct RequestBodies {
    cfg: Arc<RequestBodiesConfig>,
    seed: u64,
    next_user: u64,
    /// Long-running mode: when the first request was planned.
    started: Arc<OnceLock<Instant>>,
    /// The run's duration ends it: every user goes on without end.
    endless: bool,
}

impl RequestBodies {
    /// Validates the config.
    pub fn new(cfg: RequestBodiesConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        let bad = |m: &str| PluginError::Config {
            plugin: "request_bodies".into(),
            message: m.into(),
        };
        if cfg.users == 0 {
            return Err(bad("users must be at least 1"));
        }
        if cfg.requests.is_empty() {
            return Err(bad("requests must hold at least one body"));
        }
        match (cfg.requests_per_user, cfg.duration_secs) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "requests_per_user (finite mode) and duration_secs (long-running mode) are mutually exclusive",
                ));
            }
            (None, None) if !ctx.endless => {
                return Err(bad(
                    "one of requests_per_user or duration_secs is needed (or a run duration)",
                ));
            }
            (None, Some(d)) if !(d.is_finite() && d > 0.0) => {
                return Err(bad("duration_secs must be a positive number of seconds"));
            }
            _ => {}
        }
        for (i, e) in cfg.requests.iter().enumerate() {
            if !e.body.0.contains_key("messages") && !e.body.0.contains_key("prompt") {
                return Err(PluginError::Config {
                    plugin: "request_bodies".into(),
                    message: format!("requests[{i}].body has neither messages nor prompt"),
                });
            }
        }
        Ok(Self {
            cfg: Arc::new(cfg),
            seed: ctx.seed,
            next_user: 0,
            started: Arc::default(),
            endless: ctx.endless,
        })
    }

    /// Request `index` of `user`: a pure function of the config, seed and position.
    pub fn request(cfg: &RequestBodiesConfig, seed: u64, user: u64, index: u64) -> PlannedRequest {
        let n = cfg.requests.len() as u64;
        let entry = &cfg.requests[(index.wrapping_mul(cfg.users).wrapping_add(user) % n) as usize];
        let output = cfg.output.map(|d| {
            let mut rng = Stream::at(seed, &[PURPOSE_OUTPUT, user, index]);
            d.sample(&mut rng, 1).min(u64::from(u32::MAX)) as u32
        });
        PlannedRequest {
            prompt_tokens: (entry.input_tokens > 0)
                .then(|| entry.input_tokens.min(u64::from(u32::MAX)) as u32),
            output_tokens: output,
            stream: entry
                .body
                .0
                .get("stream")
                .and_then(serde_json::Value::as_bool),
            body: Some(entry.body.clone()),
            reset_before: index > 0,
            ..PlannedRequest::default()
        }
    }
}

impl WorkloadSource for RequestBodies {
    fn needs_tokenizer(&self) -> bool {
        false
    }

    fn info(&self) -> WorkloadInfo {
        WorkloadInfo {
            endless: self.endless && self.cfg.requests_per_user.is_none(),
            mode: if self.cfg.duration_secs.is_some() || self.endless {
                "long_running".into()
            } else {
                "finite".into()
            },
            planned_trajectories: Some(self.cfg.users),
            planned_requests: self
                .cfg
                .requests_per_user
                .map(|n| n.saturating_mul(self.cfg.users)),
            ..WorkloadInfo::default()
        }
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        if self.next_user >= self.cfg.users {
            return None;
        }
        let user = self.next_user;
        self.next_user += 1;
        let (cfg, seed) = (self.cfg.clone(), self.seed);
        let requests: Box<dyn Iterator<Item = PlannedRequest> + Send> =
            match (cfg.requests_per_user, cfg.duration_secs) {
                (Some(n), _) => Box::new((0..n).map(move |i| Self::request(&cfg, seed, user, i))),
                (None, None) => Box::new((0..).map(move |i| Self::request(&cfg, seed, user, i))),
                (None, secs) => {
                    let started = self.started.clone();
                    let limit = Duration::from_secs_f64(secs.unwrap_or(0.0));
                    Box::new((0..).map_while(move |i| {
                        let t0 = *started.get_or_init(Instant::now);
                        (t0.elapsed() < limit).then(|| Self::request(&cfg, seed, user, i))
                    }))
                }
            };
        Some(Ok(Trajectory {
            id: format!("user-{user}").into(),
            start_after_ms: None,
            planned_requests: self.cfg.requests_per_user,
            requests,
        }))
    }
}

batchbench_contract::register_workload! {
    name: "request_bodies",
    description: "users sending caller-written request bodies verbatim, finite or for a duration (the Python run_benchmark workload)",
    example: r#"{"users": 2, "requests_per_user": 3, "requests": [{"body": {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}, "line_idx": 0, "input_tokens": 1}]}"#,
    config: RequestBodiesConfig,
    build: RequestBodies::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> RequestEntry {
        serde_json::from_value(serde_json::json!({
            "body": {"messages": [{"role": "user", "content": format!("m{i}")}]},
            "line_idx": i,
            "input_tokens": 10 + i,
        }))
        .unwrap()
    }

    fn content(r: &PlannedRequest) -> String {
        r.body.as_ref().unwrap().0["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn request_m_of_user_n_uses_entry_m_times_users_plus_n() {
        let cfg = RequestBodiesConfig {
            users: 3,
            requests_per_user: Some(2),
            duration_secs: None,
            requests: (0..6).map(entry).collect(),
            output: None,
        };
        let mut src = RequestBodies::new(
            cfg,
            &BuildContext {
                seed: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let mut seen = Vec::new();
        while let Some(t) = src.next_trajectory() {
            let reqs: Vec<PlannedRequest> = t.unwrap().requests.collect();
            assert_eq!(reqs.len(), 2);
            assert!(!reqs[0].reset_before && reqs[1].reset_before);
            seen.push(reqs.iter().map(content).collect::<Vec<_>>());
        }
        assert_eq!(seen, [["m0", "m3"], ["m1", "m4"], ["m2", "m5"]]);
    }

    #[test]
    fn long_running_mode_stops_after_the_duration() {
        let cfg = RequestBodiesConfig {
            users: 1,
            requests_per_user: None,
            duration_secs: Some(0.05),
            requests: vec![entry(0)],
            output: Some(LengthDist::fixed(7)),
        };
        let mut src = RequestBodies::new(
            cfg,
            &BuildContext {
                seed: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let t = src.next_trajectory().unwrap().unwrap();
        let mut n = 0;
        for r in t.requests {
            assert_eq!(r.output_tokens, Some(7));
            assert_eq!(r.prompt_tokens, Some(10));
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(n >= 2, "recycled the one entry: {n}");
        assert!(src.next_trajectory().is_none());
    }

    #[test]
    fn bad_configs_name_the_problem() {
        let base = RequestBodiesConfig {
            users: 1,
            requests_per_user: Some(1),
            duration_secs: Some(1.0),
            requests: vec![entry(0)],
            output: None,
        };
        let e = RequestBodies::new(
            base.clone(),
            &BuildContext {
                seed: 1,
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mutually exclusive"), "{e}");
        let e = RequestBodies::new(
            RequestBodiesConfig {
                requests: Vec::new(),
                duration_secs: None,
                ..base
            },
            &BuildContext {
                seed: 1,
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("at least one body"), "{e}");
    }
}
