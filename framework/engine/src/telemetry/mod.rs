//! Telemetry: what the run reads besides its own requests. The server's
//! Prometheus metrics ([`server_metrics`], read by the run's scrape task),
//! the GPUs beside the client ([`gpu`]), the client's own CPU ([`cpu`]) and
//! its runtime's scheduling delay and busy threads ([`probe`]).

pub mod cpu;
pub mod gpu;
pub mod probe;
pub mod server_metrics;
