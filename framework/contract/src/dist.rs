//! Token-count distributions: fixed with uniform variation, or log-normal.

use crate::rng::Stream;
use serde::{Deserialize, Serialize};

/// How a token count (or a duration in milliseconds) is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthDist {
    /// `value`, plus a uniform integer in `[-vary, +vary]`.
    Fixed {
        /// The centre value.
        value: u64,
        /// The half-width of the uniform variation.
        #[serde(default)]
        vary: u64,
    },
    /// `exp(mu + sigma * z)` rounded, truncated to `max` when given.
    LogNormal {
        /// Mean of the underlying normal (`ln(median)`).
        mu: f64,
        /// Standard deviation of the underlying normal.
        sigma: f64,
        /// Optional upper bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u64>,
    },
}

/// The most tokens one prompt, tool result or reply may have: above any
/// context served today (10 Mi tokens), and still made in about a second.
pub const MAX_TOKENS: u64 = 10 * 1024 * 1024;

impl LengthDist {
    /// Why this length can draw more than `limit`, as a sentence about the
    /// length `what` names (`--input-tokens`, `input`); `None` when it cannot.
    /// A log-normal without a `max` counts as reaching `exp(mu + 6 sigma)`,
    /// beyond which one draw in a billion falls.
    pub fn beyond(&self, limit: u64, what: &str, max_name: &str) -> Option<String> {
        match *self {
            Self::Fixed { value, vary } if value.saturating_add(vary) > limit => Some(format!(
                "{what} {}: above the limit of {limit} tokens per request",
                if vary > 0 {
                    format!("{value} (+/- {vary})")
                } else {
                    value.to_string()
                }
            )),
            Self::LogNormal { max: Some(m), .. } if m > limit => Some(format!(
                "{max_name} {m}: above the limit of {limit} tokens per request"
            )),
            Self::LogNormal {
                mu,
                sigma,
                max: None,
            } if (mu + 6.0 * sigma).exp() > limit as f64 => Some(format!(
                "{what}: the log-normal can draw beyond the limit of {limit} tokens per request: give {max_name}"
            )),
            _ => None,
        }
    }
}

/// A user-facing description of a log-normal family, as the CLI flags give it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogNormalFlags {
    /// `*-lognorm-mu`.
    pub mu: Option<f64>,
    /// `*-lognorm-median` (preferred over mu).
    pub median: Option<f64>,
    /// `*-lognorm-sigma` (required when the family is used).
    pub sigma: Option<f64>,
    /// `*-lognorm-max`.
    pub max: Option<f64>,
}

/// Why a log-normal family's flags do not describe a distribution. The message names
/// the flag, given the family's flag prefix (for example `--input-lognorm`).
pub fn lognormal_from_flags(
    prefix: &str,
    median_suffix: &str,
    max_suffix: &str,
    f: LogNormalFlags,
) -> Result<Option<LengthDist>, String> {
    let any = f.mu.is_some() || f.median.is_some() || f.sigma.is_some() || f.max.is_some();
    if !any {
        return Ok(None);
    }
    let Some(sigma) = f.sigma else {
        return Err(format!(
            "{prefix}-sigma is required when any {prefix}-* flag is given"
        ));
    };
    if !sigma.is_finite() || sigma < 0.0 {
        return Err(format!(
            "{prefix}-sigma must be a finite number >= 0, got {sigma}"
        ));
    }
    let mu = match (f.median, f.mu) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "give either {prefix}-{median_suffix} or {prefix}-mu, not both"
            ));
        }
        (Some(median), None) => {
            if !median.is_finite() || median <= 0.0 {
                return Err(format!(
                    "{prefix}-{median_suffix} must be a positive number, got {median}"
                ));
            }
            median.ln()
        }
        (None, Some(mu)) => {
            if !mu.is_finite() {
                return Err(format!("{prefix}-mu must be a finite number, got {mu}"));
            }
            mu
        }
        (None, None) => {
            return Err(format!(
                "{prefix}-sigma needs {prefix}-{median_suffix} or {prefix}-mu"
            ));
        }
    };
    let max = match f.max {
        None => None,
        Some(m) if m.is_finite() && m >= 1.0 => Some(m.floor() as u64),
        Some(m) => {
            return Err(format!(
                "{prefix}-{max_suffix} must be a number >= 1, got {m}"
            ));
        }
    };
    Ok(Some(LengthDist::LogNormal { mu, sigma, max }))
}

impl LengthDist {
    /// A fixed value with no variation.
    pub fn fixed(value: u64) -> Self {
        Self::Fixed { value, vary: 0 }
    }

    /// Draws one sample. Token counts are at least `min`.
    pub fn sample(&self, rng: &mut Stream, min: u64) -> u64 {
        let v = match *self {
            Self::Fixed { value, vary } => {
                if vary == 0 {
                    value
                } else {
                    let lo = value as i64 - vary as i64;
                    rng.range_inclusive(lo, value as i64 + vary as i64).max(0) as u64
                }
            }
            Self::LogNormal { mu, sigma, max } => {
                let x = (mu + sigma * rng.normal()).exp().round();
                let x = if x.is_finite() { x as u64 } else { u64::MAX };
                max.map_or(x, |m| x.min(m))
            }
        };
        v.max(min)
    }

    /// The distribution's nominal centre (the value or the median), for reports.
    pub fn nominal(&self) -> f64 {
        match *self {
            Self::Fixed { value, .. } => value as f64,
            Self::LogNormal { mu, .. } => mu.exp(),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_length_beyond_the_token_limit_says_which_and_what_to_change() {
        let fixed = |value, vary| LengthDist::Fixed { value, vary };
        assert_eq!(
            fixed(MAX_TOKENS, 0).beyond(MAX_TOKENS, "--input-tokens", ""),
            None
        );
        let m = fixed(MAX_TOKENS, 1).beyond(MAX_TOKENS, "--input-tokens", "");
        assert_eq!(
            m.as_deref(),
            Some("--input-tokens 10485760 (+/- 1): above the limit of 10485760 tokens per request")
        );
        let ln = |mu: f64, max| LengthDist::LogNormal {
            mu,
            sigma: 1.0,
            max,
        };
        assert_eq!(ln(7.0, None).beyond(MAX_TOKENS, "input", "input.max"), None);
        let tail = ln(12.0, None).beyond(MAX_TOKENS, "input", "input.max");
        assert!(tail.is_some_and(|m| m.ends_with("give input.max")));
        assert_eq!(
            ln(12.0, Some(4096)).beyond(MAX_TOKENS, "input", "input.max"),
            None
        );
        let over = ln(7.0, Some(MAX_TOKENS + 1)).beyond(MAX_TOKENS, "input", "input.max");
        assert!(over.is_some_and(|m| m.starts_with("input.max 10485761: above")));
    }

    use super::*;

    fn flags(mu: Option<f64>, median: Option<f64>, sigma: Option<f64>) -> LogNormalFlags {
        LogNormalFlags {
            mu,
            median,
            sigma,
            max: None,
        }
    }

    #[test]
    fn lognormal_flag_rules() {
        let p = "--input-lognorm";
        assert_eq!(
            lognormal_from_flags(p, "median", "max", LogNormalFlags::default()),
            Ok(None)
        );
        let e =
            lognormal_from_flags(p, "median", "max", flags(None, Some(10.0), None)).unwrap_err();
        assert!(e.contains("--input-lognorm-sigma is required"), "{e}");
        let e = lognormal_from_flags(p, "median", "max", flags(None, None, Some(0.5))).unwrap_err();
        assert!(
            e.contains("--input-lognorm-median or --input-lognorm-mu"),
            "{e}"
        );
        let e = lognormal_from_flags(p, "median", "max", flags(Some(1.0), Some(10.0), Some(0.5)))
            .unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let d = lognormal_from_flags(p, "median", "max", flags(None, Some(256.0), Some(0.5)))
            .unwrap()
            .unwrap();
        assert!((d.nominal() - 256.0).abs() < 1e-9);
    }

    #[test]
    fn lognormal_median_and_max_hold() {
        let d = LengthDist::LogNormal {
            mu: 256f64.ln(),
            sigma: 0.5,
            max: Some(600),
        };
        let mut rng = Stream::new(1);
        let mut v: Vec<u64> = (0..10_001).map(|_| d.sample(&mut rng, 1)).collect();
        v.sort_unstable();
        let median = v[5000] as f64;
        assert!((median / 256.0 - 1.0).abs() < 0.05, "median {median}");
        assert!(*v.last().unwrap_or(&0) <= 600);
        assert!(v[0] >= 1);
    }

    #[test]
    fn fixed_vary_stays_in_range() {
        let d = LengthDist::Fixed {
            value: 100,
            vary: 10,
        };
        let mut rng = Stream::new(3);
        let v: Vec<u64> = (0..2000).map(|_| d.sample(&mut rng, 1)).collect();
        assert!(v.iter().all(|x| (90..=110).contains(x)));
        assert!(v.contains(&90) && v.contains(&110));
    }
}
