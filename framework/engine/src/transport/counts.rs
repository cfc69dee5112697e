//! What the server did with the connections of a run's plain wire: the
//! counters the origin keeps as it goes, and the counts it reports.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the connections' life, kept by the plain wire's origin.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) opened: AtomicU64,
    pub(super) responses: AtomicU64,
    pub(super) reused: AtomicU64,
    pub(super) closed_after_response: AtomicU64,
    pub(super) closed_when_idle: AtomicU64,
}

impl Counts {
    /// The counts so far.
    pub(super) fn read(&self) -> ConnectionCounts {
        ConnectionCounts {
            opened: self.opened.load(Ordering::Relaxed),
            responses: self.responses.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            closed_after_response: self.closed_after_response.load(Ordering::Relaxed),
            closed_when_idle: self.closed_when_idle.load(Ordering::Relaxed),
        }
    }
}

/// What the server did with the run's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections opened.
    pub opened: u64,
    /// Responses read to their end.
    pub responses: u64,
    /// Of those, responses on a connection that had carried one before.
    pub reused: u64,
    /// Connections the server closed right after a response (`Connection:
    /// close`, or a close found within a second of the response when the
    /// connection was next taken or used).
    pub closed_after_response: u64,
    /// Connections the server closed later while they were idle (its
    /// keep-alive timeout).
    pub closed_when_idle: u64,
}

impl ConnectionCounts {
    /// The server closed every connection after its first response: every
    /// request after a connection's first paid a new connection.
    pub fn closes_after_every_response(&self) -> bool {
        self.closed_after_response > 0 && self.reused == 0
    }
}
