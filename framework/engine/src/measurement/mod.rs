//! Measurement: what a run's requests add up to. Counters and exact
//! histograms ([`metrics`]), a latency's batches over time, 95% intervals
//! ([`interval`]), the end of the transient (`steady`), runs that stop once
//! sure ([`converge`]), SLO verdicts ([`slo`]), the summary and its load
//! report, the figures per endpoint ([`endpoints`]), structured answers
//! checked against their schemas ([`structured`]), and audio's seconds and
//! real-time factor ([`audio`]).

pub mod audio;
pub mod client_bound;
pub mod converge;
pub mod endpoints;
pub mod interval;
pub mod itl;
pub(crate) mod latency;
pub(crate) mod load_report;
pub mod metrics;
pub mod slo;
pub(crate) mod steady;
pub mod structured;
pub(crate) mod summary;
