//! Telemetry: what the run reads besides its own requests. The server's
//! Prometheus metrics ([`server_metrics`], read by the run's scrape task),
//! the GPUs beside the client ([`gpu`]) and the client's own CPU ([`cpu`]).

pub mod cpu;
pub mod gpu;
pub mod server_metrics;
