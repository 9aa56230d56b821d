//! The outbox worker: one loop per destination, delivering stored events in id order (module docs of
//! `outbox.rs`, steps 2–4), and the [`Emitter`] handle that stores events and wakes the loops.

use super::{emit, EmitError, OutboxItem, OutboxStore};
use crate::deliver::{Deliverer, Delivery, Destination};
use crate::envelope::{Envelope, Source};
use crate::kinds::EventKind;
use crate::sinks::ntfy::PushOverrides;
use rand::Rng as _;
use std::sync::Arc;
use std::time::Duration;
use svc_config::Priority;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Tuning of the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    /// Rows read per query.
    pub batch: usize,
    /// How often an idle loop looks for rows written by someone else (another process on the same store).
    pub poll_interval: Duration,
    /// Wait after the first failed round.
    pub min_backoff: Duration,
    /// Longest wait between rounds.
    pub max_backoff: Duration,
    /// After this many failed rounds a row is marked dead.
    pub max_attempts: u32,
}

impl Default for WorkerOptions {
    /// 64 rows, 1 s poll, backoff 1 s doubling to 5 min, 200 rounds (about 16 hours of outage).
    fn default() -> Self {
        WorkerOptions {
            batch: 64,
            poll_interval: Duration::from_secs(1),
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            max_attempts: 200,
        }
    }
}

/// Delivers an outbox's events to every destination of a [`Deliverer`].
#[derive(Debug)]
pub struct OutboxWorker<S> {
    store: Arc<S>,
    deliverer: Arc<Deliverer>,
    options: WorkerOptions,
    waker: Waker,
}

/// Wakes the worker's idle loops (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Waker {
    loops: Arc<Vec<Arc<Notify>>>,
}

/// Stores events for an [`OutboxWorker`] and wakes it (cheap to clone; hand one to request handlers).
#[derive(Debug)]
pub struct Emitter<S> {
    store: Arc<S>,
    deliverer: Arc<Deliverer>,
    waker: Waker,
}

impl<S> Clone for Emitter<S> {
    fn clone(&self) -> Self {
        Emitter { store: self.store.clone(), deliverer: self.deliverer.clone(), waker: self.waker.clone() }
    }
}

impl Waker {
    /// Wakes every loop (a loop that is busy finds the new rows on its next read).
    pub fn wake(&self) {
        for n in self.loops.iter() {
            n.notify_one();
        }
    }
}

impl<S: OutboxStore> Emitter<S> {
    /// [`emit`], then wakes the worker. One store write; no network call.
    pub async fn emit(
        &self,
        source: &Source,
        kind: EventKind,
        data: serde_json::Value,
        overrides: &PushOverrides,
    ) -> Result<(Envelope, i64), EmitError<S::Error>> {
        let out = emit(self.store.as_ref(), &self.deliverer, source, kind, data, overrides).await?;
        self.waker.wake();
        Ok(out)
    }
}

impl<S: OutboxStore> OutboxWorker<S> {
    /// A worker over `store` delivering to every destination of `deliverer`.
    pub fn new(store: Arc<S>, deliverer: Arc<Deliverer>, options: WorkerOptions) -> OutboxWorker<S> {
        let loops = deliverer.destinations().iter().map(|_| Arc::new(Notify::new())).collect();
        OutboxWorker { store, deliverer, options, waker: Waker { loops: Arc::new(loops) } }
    }

    /// A handle that wakes the loops.
    pub fn waker(&self) -> Waker {
        self.waker.clone()
    }

    /// A handle that stores events and wakes the loops.
    pub fn emitter(&self) -> Emitter<S> {
        Emitter { store: self.store.clone(), deliverer: self.deliverer.clone(), waker: self.waker.clone() }
    }

    /// Wakes the loops.
    pub fn wake(&self) {
        self.waker.wake();
    }

    /// Spawns one task per destination on `tracker`; they stop when `shutdown` is cancelled (an interrupted
    /// delivery is simply retried after the next start).
    pub fn spawn(self, tracker: &TaskTracker, shutdown: CancellationToken) {
        for (dest, wake) in self.deliverer.destinations().into_iter().zip(self.waker.loops.iter()) {
            let job = DestinationLoop {
                store: self.store.clone(),
                deliverer: self.deliverer.clone(),
                dest,
                name: self.deliverer.name(dest),
                options: self.options.clone(),
                wake: wake.clone(),
            };
            tracker.spawn(job.run(shutdown.clone()));
        }
    }

    /// Runs every destination loop in the current task until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) {
        let tracker = TaskTracker::new();
        self.spawn(&tracker, shutdown);
        tracker.close();
        tracker.wait().await;
    }
}

struct DestinationLoop<S> {
    store: Arc<S>,
    deliverer: Arc<Deliverer>,
    dest: Destination,
    name: String,
    options: WorkerOptions,
    wake: Arc<Notify>,
}

/// Delivered rows are marked in runs of at most this many, in one store write: a crash between a delivery and
/// its mark sends at most this many events again (at-least-once, same delivery ids).
const MARK_RUN: usize = 64;

/// What to do after one row.
enum Next {
    /// Delivered: mark it (with the run) and go on.
    Delivered,
    /// Go on with the next row of the batch.
    Continue,
    /// Read the pending rows again (the head changed state or failed).
    Reread,
    /// Wait, then read again (the store failed).
    Pause,
}

impl<S: OutboxStore> DestinationLoop<S> {
    async fn run(self, shutdown: CancellationToken) {
        tracing::debug!(destination = %self.name, "outbox loop started");
        loop {
            let items = match self.store.pending(&self.name, self.options.batch).await {
                Ok(items) => items,
                Err(e) => {
                    tracing::warn!(destination = %self.name, error = %e, "outbox read failed");
                    if !self.idle(&shutdown, self.options.poll_interval).await {
                        return;
                    }
                    continue;
                }
            };
            if items.is_empty() {
                if !self.idle(&shutdown, self.options.poll_interval).await {
                    return;
                }
                continue;
            }
            let mut delivered: Vec<i64> = Vec::new();
            let mut pause = false;
            for item in items {
                if let Some(at) = item.next_attempt_at {
                    let wait = (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO);
                    if !wait.is_zero() {
                        pause |= !self.mark(&mut delivered).await;
                        if pause || !sleep_or_cancel(&shutdown, wait).await {
                            break;
                        }
                    }
                }
                let next = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    next = self.deliver_one(&item) => next,
                };
                match next {
                    Next::Delivered => {
                        delivered.push(item.id);
                        if delivered.len() >= MARK_RUN && !self.mark(&mut delivered).await {
                            pause = true;
                            break;
                        }
                    }
                    Next::Continue => {}
                    Next::Reread => break,
                    Next::Pause => {
                        pause = true;
                        break;
                    }
                }
            }
            // Marked before the rows are read again, so a delivered row is never sent twice by a running loop.
            pause |= !self.mark(&mut delivered).await;
            if shutdown.is_cancelled() {
                return;
            }
            if pause && !sleep_or_cancel(&shutdown, self.options.poll_interval).await {
                return;
            }
        }
    }

    /// Marks a run of delivered rows in one store write; false when the store failed (they may be sent again).
    async fn mark(&self, delivered: &mut Vec<i64>) -> bool {
        if delivered.is_empty() {
            return true;
        }
        let ok = match self.store.mark_delivered_many(delivered, &self.name).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(destination = %self.name, rows = delivered.len(), error = %e, "cannot mark delivered (they may be sent again)");
                false
            }
        };
        delivered.clear();
        ok
    }

    /// Waits for a wake-up, the poll interval or shutdown; false on shutdown.
    async fn idle(&self, shutdown: &CancellationToken, poll: Duration) -> bool {
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = self.wake.notified() => true,
            _ = tokio::time::sleep(poll) => true,
        }
    }

    async fn deliver_one(&self, item: &OutboxItem) -> Next {
        let d = Delivery {
            envelope_json: &item.envelope_json,
            kind: &item.kind,
            title: item.title.as_deref(),
            priority: item.priority.as_deref().and_then(Priority::parse),
            delivery_id: &item.delivery_id,
        };
        let (id, name) = (item.id, self.name.as_str());
        match self.deliverer.deliver(self.dest, &d).await {
            Ok(()) => Next::Delivered,
            Err(e) if e.is_transient() && item.attempts + 1 < self.options.max_attempts => {
                let wait = backoff(&self.options, item.attempts);
                tracing::warn!(destination = name, id, attempts = item.attempts + 1, ?wait, error = %e, "delivery failed, will retry");
                let at = chrono::Utc::now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
                match self.store.mark_attempt_failed(id, name, &e.to_string(), at).await {
                    Ok(()) => Next::Reread,
                    Err(se) => {
                        tracing::warn!(destination = name, id, error = %se, "cannot record the failed attempt");
                        Next::Pause
                    }
                }
            }
            Err(e) => {
                tracing::error!(destination = name, id, attempts = item.attempts + 1, error = %e, "delivery failed for good");
                match self.store.mark_dead(id, name, &e.to_string()).await {
                    Ok(()) => Next::Continue,
                    Err(se) => {
                        tracing::warn!(destination = name, id, error = %se, "cannot mark the delivery dead");
                        Next::Pause
                    }
                }
            }
        }
    }
}

/// `min_backoff · 2^attempts`, at most `max_backoff`, with jitter: a uniformly random wait in [d/2, d].
pub fn backoff(options: &WorkerOptions, attempts: u32) -> Duration {
    let full = options.min_backoff.saturating_mul(2u32.saturating_pow(attempts.min(30))).min(options.max_backoff);
    let half = full / 2;
    let extra = rand::rng().random_range(0..=half.as_millis().min(u128::from(u64::MAX)) as u64);
    half + Duration::from_millis(extra)
}

async fn sleep_or_cancel(shutdown: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}
