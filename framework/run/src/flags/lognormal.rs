//! The log-normal length flags: `--input-lognorm-*` and `--output-lognorm-*`.

use super::finite;
use batchbench_contract::dist::LogNormalFlags;

/// `--input-lognorm-{median,mu,sigma,max}`: a log-normal prompt length.
#[derive(Debug, Clone, clap::Args)]
pub struct InputLogNormal {
    /// Log-normal prompt length: median (preferred over mu).
    #[arg(long, value_parser = finite)]
    pub input_lognorm_median: Option<f64>,
    /// Log-normal prompt length: mu of the underlying normal.
    #[arg(long, value_parser = finite)]
    pub input_lognorm_mu: Option<f64>,
    /// Log-normal prompt length: sigma (required with mu or median).
    #[arg(long, value_parser = finite)]
    pub input_lognorm_sigma: Option<f64>,
    /// Log-normal prompt length: upper bound.
    #[arg(long, value_parser = finite)]
    pub input_lognorm_max: Option<f64>,
}

impl InputLogNormal {
    /// The family's flags.
    pub fn flags(&self) -> LogNormalFlags {
        LogNormalFlags {
            mu: self.input_lognorm_mu,
            median: self.input_lognorm_median,
            sigma: self.input_lognorm_sigma,
            max: self.input_lognorm_max,
        }
    }
}

/// `--output-lognorm-{median,mu,sigma,max}`: a log-normal output length.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputLogNormal {
    /// Log-normal output length: median.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_median: Option<f64>,
    /// Log-normal output length: mu.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_mu: Option<f64>,
    /// Log-normal output length: sigma.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_sigma: Option<f64>,
    /// Log-normal output length: upper bound.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_max: Option<f64>,
}

impl OutputLogNormal {
    /// The family's flags.
    pub fn flags(&self) -> LogNormalFlags {
        LogNormalFlags {
            mu: self.output_lognorm_mu,
            median: self.output_lognorm_median,
            sigma: self.output_lognorm_sigma,
            max: self.output_lognorm_max,
        }
    }
}

/// The first flag of a log-normal family given (median, mu, sigma, max), if any.
pub fn first_lognorm(family: &str, f: &LogNormalFlags) -> Option<String> {
    [
        ("median", f.median),
        ("mu", f.mu),
        ("sigma", f.sigma),
        ("max", f.max),
    ]
    .into_iter()
    .find_map(|(k, v)| v.map(|_| format!("--{family}-lognorm-{k}")))
}
