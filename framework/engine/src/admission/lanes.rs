//! Lanes: one task per runtime thread, each driving together what the open
//! loop hands it (requests of a request rate, sessions of a session rate), so
//! that nothing it drives needs a task of its own. The loop hands work over
//! in batches, round-robin, and a lane wakes once per batch, not per item.

use std::future::Future;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The most items held for the lanes before they are handed over, when the
/// loop is behind its schedule and does not sleep.
pub(super) const HAND_OVER_MOST: usize = 256;

/// The lanes of one loop: items of type `T` in, each lane's result `O` out.
pub(super) struct Lanes<T, O> {
    senders: Vec<mpsc::UnboundedSender<Vec<T>>>,
    batches: Vec<Vec<T>>,
    /// Items in the batches, not yet handed over.
    pub(super) pending: usize,
    next: usize,
    handles: Vec<JoinHandle<O>>,
}

impl<T: Send + 'static, O: Send + 'static> Lanes<T, O> {
    /// Starts one lane per runtime thread, each the future `lane` makes of
    /// its receiver.
    pub(super) fn start<F>(mut lane: impl FnMut(mpsc::UnboundedReceiver<Vec<T>>) -> F) -> Self
    where
        F: Future<Output = O> + Send + 'static,
    {
        let n = tokio::runtime::Handle::current()
            .metrics()
            .num_workers()
            .max(1);
        let (mut senders, mut handles) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            handles.push(tokio::spawn(lane(rx)));
        }
        Self {
            senders,
            batches: (0..n).map(|_| Vec::new()).collect(),
            pending: 0,
            next: 0,
            handles,
        }
    }

    /// Adds an item to the next lane's batch.
    pub(super) fn push(&mut self, item: T) {
        self.batches[self.next].push(item);
        self.pending += 1;
        self.next = (self.next + 1) % self.batches.len();
    }

    /// Sends every lane its batch.
    pub(super) fn flush(&mut self) {
        self.pending = 0;
        for (tx, batch) in self.senders.iter().zip(&mut self.batches) {
            if !batch.is_empty() {
                // A lane ends only when its sender is dropped; a batch it no
                // longer takes (its task failed) is not driven, and the
                // lane's failure is the run's.
                let _ = tx.send(std::mem::take(batch));
            }
        }
    }

    /// Hands over the rest and closes the lanes: each ends once it has
    /// driven what it holds. Their tasks, to wait for.
    pub(super) fn close(mut self) -> Vec<JoinHandle<O>> {
        self.flush();
        self.handles
    }
}
