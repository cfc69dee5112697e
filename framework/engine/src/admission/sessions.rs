//! The sessions of the open loop, driven by lanes (`lanes`): one task per
//! runtime thread, each polling the sessions handed to it together, as the
//! request loop's lanes drive requests. A session is its trajectory's turn loop, a
//! future its lane polls: no task of its own, and the admission loop, which
//! hands sessions over in batches, is not woken as each one ends (only while
//! the concurrency cap holds it back).

use crate::options::EngineError;
use crate::state::Shared;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{Notify, mpsc};

/// One session: its trajectory's turns; its routing slot when it ends.
pub(super) type Session = Pin<Box<dyn Future<Output = Result<u64, EngineError>> + Send>>;

/// What the lanes tell the admission loop of the sessions that ended.
#[derive(Default)]
struct Ended {
    /// The routing slots they freed, not yet taken back.
    slots: Mutex<Vec<u64>>,
    count: AtomicU64,
    /// Told at each end, for an admission loop the cap holds back.
    notify: Notify,
}

/// The lanes of the open loop's sessions ([`super::lanes::Lanes`]), and
/// what they tell of the sessions that ended.
pub(super) struct SessionLanes {
    pub(super) lanes: super::lanes::Lanes<Session, Option<EngineError>>,
    handed: u64,
    ended: Arc<Ended>,
}

impl SessionLanes {
    pub(super) fn start(sh: &Arc<Shared>) -> Self {
        let ended = Arc::new(Ended::default());
        let lanes = super::lanes::Lanes::start(|rx| lane(sh.clone(), rx, ended.clone()));
        Self {
            lanes,
            handed: 0,
            ended,
        }
    }

    /// Adds a session to the next lane's batch: it runs once handed over.
    pub(super) fn push(&mut self, s: Session) {
        self.lanes.push(s);
        self.handed += 1;
    }

    /// Sessions admitted that have not ended.
    pub(super) fn active(&self) -> u64 {
        self.handed - self.ended.count.load(Ordering::Acquire)
    }

    /// Moves the routing slots that ended sessions freed into `free`.
    pub(super) fn take_freed(&self, free: &mut BTreeSet<u64>) {
        free.extend(
            self.ended
                .slots
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..),
        );
    }

    /// Waits until a session ends (or one ended since the last wait).
    pub(super) async fn one_ended(&mut self) {
        self.lanes.flush();
        self.ended.notify.notified().await;
    }

    /// Hands over the rest and waits for every session; the first fatal
    /// error.
    pub(super) async fn finish(self) -> Option<EngineError> {
        let mut fatal = None;
        for h in self.lanes.close() {
            let e = match h.await {
                Ok(e) => e,
                Err(e) => Some(EngineError::Internal(format!(
                    "a trajectory task failed: {e}"
                ))),
            };
            if let Some(e) = e {
                fatal.get_or_insert(e);
            }
        }
        fatal
    }
}

/// One lane: takes batches, drives their sessions, tells of each end; ends
/// when the admission loop is done and none is left.
async fn lane(
    sh: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<Session>>,
    ended: Arc<Ended>,
) -> Option<EngineError> {
    let mut sessions = FuturesUnordered::new();
    let mut open = true;
    let mut fatal = None;
    loop {
        tokio::select! {
            biased;
            Some(done) = sessions.next(), if !sessions.is_empty() => {
                match done {
                    Ok(slot) => ended
                        .slots
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(slot),
                    Err(e) => {
                        fatal.get_or_insert(e);
                        sh.cancel.cancel();
                    }
                }
                ended.count.fetch_add(1, Ordering::Release);
                ended.notify.notify_one();
            }
            batch = rx.recv(), if open => match batch {
                Some(batch) => sessions.extend(batch),
                None => open = false,
            },
            else => break,
        }
    }
    fatal
}
