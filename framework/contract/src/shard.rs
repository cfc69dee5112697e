//! Deterministic shards: one run split over N processes (or Kubernetes pods)
//! so that together they send exactly the requests of the unsharded run with
//! the same seed.
//!
//! Shard `I` of `N` owns the trajectories whose position in the workload (its
//! ordinal, from 0) is `I` modulo `N`. Everything a request's body is made from
//! (its trajectory's identity, the agent id, the request index and the seed)
//! is the unsharded run's: local agent `j` of shard `I` is global agent
//! `j * N + I`, and so is local routing slot `s`, so data-parallel routing sees
//! the unsharded run's slots. An arrival process is shared the same way: shard
//! `I` takes arrivals `I, I + N, I + 2N, ...` of the one global schedule, so
//! the shards' arrivals together are the unsharded run's, time for time (for a
//! Poisson process, superposed streams of rate `R / N` each; for a constant
//! rate, interleaved offsets). Recorded start offsets of a replay are kept.
//! Caps (active trajectories, concurrency, warmup requests) are split the same
//! way: shard `I` gets the share of `0..cap` it owns.

use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (`0 <= index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u32,
    /// How many shards the run is split into.
    pub count: u32,
}

/// The most shards one run may be split into.
pub const MAX_SHARDS: u32 = 100_000;

impl Default for Shard {
    fn default() -> Self {
        Self::WHOLE
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The whole run: shard 0 of 1.
    pub const WHOLE: Self = Self { index: 0, count: 1 };

    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Self, String> {
        let s = Self { index, count };
        s.check()?;
        Ok(s)
    }

    /// Parses `I/N` (`--shard`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("expected INDEX/COUNT such as 0/4, got {s:?}"))?;
        let num = |v: &str, what: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("{what} {v:?} in {s:?} is not a whole number"))
        };
        Self::new(num(i, "index")?, num(n, "count")?)
    }

    /// Checks `index < count <= MAX_SHARDS`.
    pub fn check(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("the shard count must be at least 1".into());
        }
        if self.count > MAX_SHARDS {
            return Err(format!(
                "{} shards is more than the limit of {MAX_SHARDS}",
                self.count
            ));
        }
        if self.index >= self.count {
            return Err(format!(
                "shard index {} is not below the shard count {} (shards are numbered 0 to {})",
                self.index,
                self.count,
                self.count - 1
            ));
        }
        Ok(())
    }

    /// Whether this is the whole run (one shard).
    pub fn is_whole(&self) -> bool {
        self.count <= 1
    }

    /// Whether this shard owns the trajectory (or arrival) at `ordinal`.
    pub fn owns(&self, ordinal: u64) -> bool {
        ordinal % u64::from(self.count.max(1)) == u64::from(self.index)
    }

    /// The global ordinal of this shard's `local`-th trajectory, agent or slot.
    pub fn global(&self, local: u64) -> u64 {
        local
            .saturating_mul(u64::from(self.count.max(1)))
            .saturating_add(u64::from(self.index))
    }

    /// How many of `0..total` this shard owns: its share of a cap or a count.
    pub fn share(&self, total: u64) -> u64 {
        let (i, n) = (u64::from(self.index), u64::from(self.count.max(1)));
        if total > i {
            (total - i - 1) / n + 1
        } else {
            0
        }
    }

    /// The shard of an Indexed Job: `count` from `--shards`, the index from
    /// the `JOB_COMPLETION_INDEX` value `index` (absent: an error naming it).
    pub fn from_job_index(count: u32, index: Option<&str>) -> Result<Self, String> {
        let raw = index.ok_or_else(|| {
            "--shards needs the shard index in JOB_COMPLETION_INDEX (set by a Kubernetes Indexed Job), which is not set; pass --shard INDEX/COUNT instead".to_owned()
        })?;
        let index = raw.trim().parse::<u32>().map_err(|_| {
            format!("JOB_COMPLETION_INDEX {raw:?} is not a whole number (with --shards {count})")
        })?;
        Self::new(index, count).map_err(|e| format!("JOB_COMPLETION_INDEX with --shards: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_ordinals_and_caps() {
        for n in 1..=7u32 {
            for total in 0..40u64 {
                let mut seen = vec![0u32; total as usize];
                let mut shares = 0;
                for i in 0..n {
                    let s = Shard::new(i, n).unwrap();
                    shares += s.share(total);
                    let mut local = 0;
                    while s.global(local) < total {
                        assert!(s.owns(s.global(local)));
                        seen[s.global(local) as usize] += 1;
                        local += 1;
                    }
                    assert_eq!(local, s.share(total), "{s} of {total}");
                }
                assert_eq!(shares, total);
                assert!(seen.iter().all(|&c| c == 1), "{n} {total} {seen:?}");
            }
        }
    }

    #[test]
    fn bad_shards_say_which_flag_or_variable() {
        assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
        assert!(Shard::parse("4/4").unwrap_err().contains("not below"));
        assert!(Shard::parse("0/0").unwrap_err().contains("at least 1"));
        assert!(Shard::parse("a/4").unwrap_err().contains("index"));
        assert!(Shard::parse("3").unwrap_err().contains("INDEX/COUNT"));
        let e = Shard::from_job_index(4, None).unwrap_err();
        assert!(e.contains("JOB_COMPLETION_INDEX"), "{e}");
        let e = Shard::from_job_index(4, Some("4")).unwrap_err();
        assert!(
            e.contains("JOB_COMPLETION_INDEX") && e.contains("not below"),
            "{e}"
        );
        assert_eq!(
            Shard::from_job_index(4, Some("2")).unwrap(),
            Shard { index: 2, count: 4 }
        );
    }
}
