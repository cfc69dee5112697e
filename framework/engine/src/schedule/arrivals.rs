//! Arrival times of an open-loop run, from a [`LoadSpec`].
//!
//! Gaps are drawn in units of the mean gap (exponential for Poisson, gamma of
//! shape `burstiness`, or exactly 1 for constant arrivals) and spread over the
//! rate schedule by time rescaling: arrival `i` is at the time `t` where the
//! integrated rate `Λ(t)` reaches the sum of the first `i` unit gaps. With a
//! fixed rate this is the textbook process; with a ramp or stages the process
//! follows the rate exactly (constant arrivals stay evenly spaced within a
//! stage). The times depend only on the seed and the spec.

use batchbench_contract::rng::Stream;
use batchbench_contract::spec::{Arrival, LoadSpec};
use std::time::Duration;

/// The stream purpose of arrival gaps (apart from prompts and environments).
const PURPOSE_ARRIVALS: u64 = 0x6172_7269_7661_6c73;

/// A piece of the rate schedule: from `start` seconds, for `secs` (infinite for
/// the last piece of a fixed rate), the rate goes linearly from `r0` to `r1`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: f64,
    secs: f64,
    r0: f64,
    r1: f64,
}

impl Piece {
    /// The integrated rate over the whole piece.
    fn area(&self) -> f64 {
        if self.secs.is_infinite() {
            f64::INFINITY
        } else {
            0.5 * (self.r0 + self.r1) * self.secs
        }
    }

    /// How far into the piece the integrated rate reaches `a`.
    fn time_for(&self, a: f64) -> f64 {
        let slope = if self.secs.is_infinite() {
            0.0
        } else {
            (self.r1 - self.r0) / self.secs
        };
        if slope.abs() < 1e-12 {
            return a / self.r0;
        }
        // r0 d + slope d^2 / 2 = a
        ((self.r0 * self.r0 + 2.0 * slope * a).max(0.0).sqrt() - self.r0) / slope
    }
}

/// The arrival times of a run, in order, as offsets from the clock start.
#[derive(Debug, Clone)]
pub struct Schedule {
    pieces: Vec<Piece>,
    piece: usize,
    /// Integrated rate consumed within the current piece.
    used: f64,
    arrival: Arrival,
    shape: f64,
    rng: Stream,
    end: Option<f64>,
    /// Sharded: arrivals of the global schedule to pass over before the next
    /// one this shard takes, and between the later ones.
    skip: u64,
    every: u64,
}

impl Schedule {
    /// The schedule of `load` (which must be open: a rate or stages) for `seed`.
    /// Arrivals end with the last stage, or at `duration_secs`.
    pub fn new(load: &LoadSpec, seed: u64) -> Self {
        let mut pieces = Vec::new();
        let mut t = 0.0;
        if let Some(rate) = load.rate {
            if let Some(ramp) = load.ramp_up_secs {
                pieces.push(Piece {
                    start: 0.0,
                    secs: ramp,
                    r0: 0.0,
                    r1: rate,
                });
                t = ramp;
            }
            pieces.push(Piece {
                start: t,
                secs: f64::INFINITY,
                r0: rate,
                r1: rate,
            });
        } else {
            for st in &load.stages {
                pieces.push(Piece {
                    start: t,
                    secs: st.secs,
                    r0: st.rate,
                    r1: st.rate,
                });
                t += st.secs;
            }
        }
        Self {
            pieces,
            piece: 0,
            used: 0.0,
            arrival: load.arrival,
            shape: load.burstiness.unwrap_or(1.0),
            rng: Stream::at(seed, &[PURPOSE_ARRIVALS]),
            end: load.duration_secs,
            skip: 0,
            every: 1,
        }
    }

    /// The arrivals of `load` that `shard` takes: arrivals `I, I + N, ...` of
    /// the one global schedule, so that the shards together release the
    /// unsharded run's arrivals at the very same times.
    pub fn sharded(load: &LoadSpec, seed: u64, shard: batchbench_contract::shard::Shard) -> Self {
        Self {
            skip: u64::from(shard.index),
            every: u64::from(shard.count.max(1)),
            ..Self::new(load, seed)
        }
    }

    /// A gap in units of the mean gap.
    fn unit_gap(&mut self) -> f64 {
        match self.arrival {
            Arrival::Constant => 1.0,
            Arrival::Poisson => -(1.0 - self.rng.next_f64()).ln(),
            Arrival::Gamma => gamma(&mut self.rng, self.shape) / self.shape,
        }
    }

    /// The next arrival, or `None` once the schedule has ended.
    pub fn next_due(&mut self) -> Option<Duration> {
        for _ in 0..self.skip {
            self.next_global()?;
        }
        self.skip = self.every - 1;
        self.next_global()
    }

    /// The next arrival of the global (unsharded) schedule.
    fn next_global(&mut self) -> Option<Duration> {
        let mut need = self.unit_gap();
        loop {
            let p = *self.pieces.get(self.piece)?;
            let left = p.area() - self.used;
            if need <= left {
                self.used += need;
                let at = p.start + p.time_for(self.used);
                if self.end.is_some_and(|e| at >= e) {
                    self.piece = self.pieces.len();
                    return None;
                }
                return Some(Duration::from_secs_f64(at));
            }
            need -= left;
            self.piece += 1;
            self.used = 0.0;
        }
    }

    /// The stage (0-based) an arrival at `at` belongs to: 0 without stages.
    pub fn stage_of(load: &LoadSpec, at: Duration) -> usize {
        let at = at.as_secs_f64();
        let mut end = 0.0;
        for (i, st) in load.stages.iter().enumerate() {
            end += st.secs;
            if at < end {
                return i;
            }
        }
        load.stages.len().saturating_sub(1)
    }
}

/// A gamma sample of shape `k` and scale 1 (Marsaglia and Tsang; for `k < 1`,
/// boosted from `k + 1`).
pub fn gamma(rng: &mut Stream, k: f64) -> f64 {
    if k < 1.0 {
        let u = 1.0 - rng.next_f64();
        return gamma(rng, k + 1.0) * u.powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = rng.normal();
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - rng.next_f64();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::spec::Stage;

    fn times(load: &LoadSpec, n: usize) -> Vec<f64> {
        let mut s = Schedule::new(load, 42);
        (0..n)
            .map_while(|_| s.next_due())
            .map(|d| d.as_secs_f64())
            .collect()
    }

    fn gaps(t: &[f64]) -> Vec<f64> {
        let mut prev = 0.0;
        t.iter()
            .map(|&x| {
                let g = x - prev;
                prev = x;
                g
            })
            .collect()
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced() {
        let load = LoadSpec {
            rate: Some(4.0),
            arrival: Arrival::Constant,
            ..LoadSpec::default()
        };
        for (i, t) in times(&load, 100).iter().enumerate() {
            assert!((t - (i + 1) as f64 * 0.25).abs() < 1e-9, "{i}: {t}");
        }
    }

    /// Kolmogorov-Smirnov statistic of `xs` against the exponential of `rate`.
    fn ks_exponential(xs: &[f64], rate: f64) -> f64 {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        v.iter()
            .enumerate()
            .map(|(i, x)| {
                let f = 1.0 - (-rate * x).exp();
                (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() {
        let load = LoadSpec {
            rate: Some(100.0),
            ..LoadSpec::default()
        };
        let g = gaps(&times(&load, 5000));
        let d = ks_exponential(&g, 100.0);
        // p > 0.01 for n = 5000: D < 1.628 / sqrt(n).
        let critical = 1.628 / (g.len() as f64).sqrt();
        assert!(d < critical, "D = {d}, critical {critical}");
        // And the test can fail: the same gaps against twice the rate.
        assert!(ks_exponential(&g, 200.0) > critical);
    }

    #[test]
    fn four_shards_at_a_quarter_rate_superpose_to_the_one_stream() {
        let load = LoadSpec {
            rate: Some(100.0),
            ..LoadSpec::default()
        };
        let whole = times(&load, 8000);
        let mut union = Vec::new();
        for i in 0..4 {
            let mut s = Schedule::sharded(
                &load,
                42,
                batchbench_contract::shard::Shard::new(i, 4).unwrap(),
            );
            let mine: Vec<f64> = (0..2000)
                .map_while(|_| s.next_due())
                .map(|d| d.as_secs_f64())
                .collect();
            // Each shard runs at R / 4.
            let rate = (mine.len() - 1) as f64 / (mine[mine.len() - 1] - mine[0]);
            assert!((rate - 25.0).abs() < 2.0, "shard {i}: {rate}/s");
            union.extend(mine);
        }
        union.sort_by(f64::total_cmp);
        // The union is the unsharded schedule itself, time for time...
        assert_eq!(union, whole);
        // ...so its gaps pass the one stream's test.
        let g = gaps(&union);
        let critical = 1.628 / (g.len() as f64).sqrt();
        assert!(ks_exponential(&g, 100.0) < critical);
        assert!(ks_exponential(&g, 25.0) > critical);
    }

    fn cv(xs: &[f64]) -> f64 {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        var.sqrt() / mean
    }

    #[test]
    fn gamma_burstiness_sets_the_coefficient_of_variation() {
        for k in [0.25, 4.0] {
            let load = LoadSpec {
                rate: Some(50.0),
                arrival: Arrival::Gamma,
                burstiness: Some(k),
                ..LoadSpec::default()
            };
            let g = gaps(&times(&load, 20_000));
            let want = 1.0 / k.sqrt();
            let got = cv(&g);
            assert!(
                (got - want).abs() / want < 0.10,
                "k {k}: CV {got}, want {want}"
            );
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            assert!((mean - 0.02).abs() / 0.02 < 0.05, "k {k}: mean gap {mean}");
        }
    }

    #[test]
    fn stages_change_the_rate_when_they_should_and_end_the_schedule() {
        let load = LoadSpec {
            stages: vec![
                Stage {
                    secs: 2.0,
                    rate: 10.0,
                },
                Stage {
                    secs: 1.0,
                    rate: 40.0,
                },
            ],
            arrival: Arrival::Constant,
            ..LoadSpec::default()
        };
        let t = times(&load, 1000);
        // Λ reaches 20 at the end of the first stage and 60 at the end of the
        // second: the 60th arrival falls on the schedule's last instant.
        assert_eq!(t.len(), 20 + 40);
        assert!(t.iter().take(20).all(|&x| x <= 2.0 + 1e-9));
        let g = gaps(&t);
        assert!((g[5] - 0.1).abs() < 1e-9 && (g[30] - 0.025).abs() < 1e-9);
        assert_eq!(Schedule::stage_of(&load, Duration::from_secs_f64(2.5)), 1);
    }

    #[test]
    fn a_ramp_rises_linearly_and_a_duration_ends_arrivals() {
        let load = LoadSpec {
            rate: Some(100.0),
            ramp_up_secs: Some(2.0),
            arrival: Arrival::Constant,
            duration_secs: Some(3.0),
            ..LoadSpec::default()
        };
        let t = times(&load, 10_000);
        // Λ(2) = 100, Λ(3) = 200: 199 arrivals before the deadline.
        assert_eq!(t.len(), 199);
        let in_first = t.iter().filter(|&&x| x <= 1.0 + 1e-9).count();
        // Λ(1) = 25: a quarter of the ramp's arrivals come in its first half.
        assert_eq!(in_first, 25);
    }

    #[test]
    fn the_same_seed_gives_the_same_times() {
        let load = LoadSpec {
            rate: Some(10.0),
            ..LoadSpec::default()
        };
        assert_eq!(times(&load, 50), times(&load, 50));
        assert_ne!(
            Schedule::new(&load, 1).next_due(),
            Schedule::new(&load, 2).next_due()
        );
    }
}
