//! The outbox worker: one loop per destination, delivering stored events in id order (module docs of
//! `outbox.rs`, steps 2–4), and the [`Emitter`] handle that stores events and wakes the loops.
//!
//! The worker owns the retries of the event path: each delivery is one attempt, and the waits come from one
//! [`RetryPolicy`] per destination (its `delay_before`), so a row makes at most its destination's number of
//! attempts in all. Times are read from a clock that follows tokio's (`Clock`), so tests can run the waits
//! under paused time.

use super::{emit, EmitError, OutboxItem, OutboxStore};
use crate::deliver::{Deliverer, Delivery, Destination};
use crate::envelope::{Envelope, Source};
use crate::kinds::EventKind;
use crate::observe::DeliveryOutcome;
use crate::origin::Origin;
use crate::retry::{RetryPolicy, Transient};
use crate::senders::ntfy::PushOverrides;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use svc_config::Priority;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Tuning of the worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// Rows read per query.
    pub batch: usize,
    /// How often an idle loop looks for rows written by someone else (another process on the same store).
    pub poll_interval: Duration,
    /// Waits between the attempts of a push or hooks row.
    pub policy: RetryPolicy,
    /// Attempts of a push or hooks row before it is marked dead.
    pub max_attempts: u32,
    /// Waits between the attempts of a webhook row, which gets `1 + retry` attempts (its configuration's).
    pub webhook_policy: RetryPolicy,
    /// The node this worker runs on, when several gateways share the store: then each shared destination
    /// (push, webhooks) is delivered by one node at a time, which claims it for `lease` and renews the claim
    /// while it works. `None`: no claims (one process owns the store).
    pub holder: Option<String>,
    /// How long a claim lasts without renewal.
    pub lease: Duration,
}

impl Default for WorkerOptions {
    /// 64 rows, 1 s poll; push and hooks: [`RetryPolicy::OUTBOX`] (1 s doubling to 5 min, jittered), 200
    /// attempts (about a day of outage); webhooks: [`RetryPolicy::WEBHOOK`] (1 s doubling to 60 s, jittered,
    /// `Retry-After` up to 5 min).
    fn default() -> Self {
        WorkerOptions {
            batch: 64,
            poll_interval: Duration::from_secs(1),
            policy: RetryPolicy::OUTBOX,
            max_attempts: 200,
            webhook_policy: RetryPolicy::WEBHOOK,
            holder: None,
            lease: Duration::from_secs(30),
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

impl<S> Emitter<S> {
    /// The name of every destination its events go to, as the outbox stores them.
    pub fn destination_names(&self) -> Vec<String> {
        self.deliverer.destinations().into_iter().map(|d| self.deliverer.name(d)).collect()
    }

    /// Wakes the worker, for rows made due by other means (a dead delivery queued again by hand).
    pub fn wake(&self) {
        self.waker.wake();
    }
}

impl<S: OutboxStore> Emitter<S> {
    /// [`emit`], then wakes the worker. One store write; no network call.
    pub async fn emit(
        &self,
        source: &Source,
        origin: &Origin,
        kind: EventKind,
        data: serde_json::Value,
        overrides: &PushOverrides,
    ) -> Result<(Envelope, i64), EmitError<S::Error>> {
        let out = emit(self.store.as_ref(), &self.deliverer, source, origin, kind, data, overrides).await?;
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
        let clock = Clock::new();
        for (dest, wake) in self.deliverer.destinations().into_iter().zip(self.waker.loops.iter()) {
            let (policy, max_attempts) = match self.deliverer.retries(dest) {
                Some(retry) => (self.options.webhook_policy, retry.saturating_add(1)),
                None => (self.options.policy, self.options.max_attempts.max(1)),
            };
            let job = DestinationLoop {
                store: self.store.clone(),
                deliverer: self.deliverer.clone(),
                dest,
                name: self.deliverer.name(dest),
                options: self.options.clone(),
                policy,
                max_attempts,
                clock,
                wake: wake.clone(),
                claimed_at: None,
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
    /// Waits between this destination's attempts.
    policy: RetryPolicy,
    /// Attempts of a row here before it is dead.
    max_attempts: u32,
    clock: Clock,
    wake: Arc<Notify>,
    /// When this loop's claim on its destination was last taken or renewed (`None`: not held).
    claimed_at: Option<tokio::time::Instant>,
}

/// Wall-clock time that moves with tokio's clock: the wall time at start plus tokio's elapsed time. Stored
/// times (`next_attempt_at`) stay wall-clock times across restarts, and under paused time (tests) the worker's
/// waits and its idea of "now" advance together.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall: DateTime<Utc>,
    at: tokio::time::Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock { wall: Utc::now(), at: tokio::time::Instant::now() }
    }

    fn now(&self) -> DateTime<Utc> {
        self.wall + chrono::Duration::from_std(self.at.elapsed()).unwrap_or(chrono::Duration::MAX)
    }
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
    async fn run(mut self, shutdown: CancellationToken) {
        tracing::debug!(destination = %self.name, "outbox loop started");
        self.deliver_while_running(&shutdown).await;
        self.release().await;
    }

    /// Whether this loop may deliver now: a node-local destination always; a shared one while this node holds
    /// its claim, which is taken (or renewed) when it is a third of the lease old.
    async fn holds_claim(&mut self) -> bool {
        let Some(holder) = self.options.holder.clone() else { return true };
        if self.dest == Destination::Hooks {
            return true;
        }
        let lease = self.options.lease;
        if self.claimed_at.is_some_and(|at| at.elapsed() < lease / 3) {
            return true;
        }
        let until = self.clock.now() + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
        match self.store.claim(&self.name, &holder, until).await {
            Ok(true) => {
                if self.claimed_at.is_none() {
                    tracing::info!(destination = %self.name, node = %holder, "this node delivers the destination");
                }
                self.claimed_at = Some(tokio::time::Instant::now());
                true
            }
            Ok(false) => {
                if self.claimed_at.take().is_some() {
                    tracing::warn!(destination = %self.name, "another node took over the destination");
                }
                false
            }
            Err(e) => {
                tracing::warn!(destination = %self.name, error = %e, "cannot claim the destination");
                self.claimed_at = None;
                false
            }
        }
    }

    /// At a clean stop, gives the claim up so another node takes over at once.
    async fn release(&mut self) {
        if let (Some(holder), Some(_)) = (&self.options.holder, self.claimed_at.take()) {
            if let Err(e) = self.store.release(&self.name, holder).await {
                tracing::warn!(destination = %self.name, error = %e, "cannot give up the destination's claim");
            }
        }
    }

    async fn deliver_while_running(&mut self, shutdown: &CancellationToken) {
        let shutdown = shutdown.clone();
        loop {
            if !self.holds_claim().await {
                if !self.idle(&shutdown, self.options.poll_interval).await {
                    return;
                }
                continue;
            }
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
                if !self.holds_claim().await {
                    break;
                }
                if let Some(at) = item.next_attempt_at {
                    let wait = (at - self.clock.now()).to_std().unwrap_or(Duration::ZERO);
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
            origin: item.origin.as_deref(),
        };
        let (id, name) = (item.id, self.name.as_str());
        // This is attempt number `attempt`; the row has `max_attempts` in all.
        let attempt = item.attempts.saturating_add(1);
        let result = self.deliverer.deliver(self.dest, &d).await;
        let outcome = match &result {
            Ok(()) => DeliveryOutcome::Delivered,
            Err(e) if e.is_transient() && attempt < self.max_attempts => DeliveryOutcome::Retry,
            Err(_) => DeliveryOutcome::Dead,
        };
        if let Some(o) = self.deliverer.observer() {
            o.delivery(name, outcome);
        }
        match (result, outcome) {
            (Ok(()), _) => Next::Delivered,
            (Err(e), DeliveryOutcome::Retry) => {
                let wait = self.policy.delay_before(attempt + 1, e.retry_after());
                tracing::warn!(destination = name, id, attempt, max_attempts = self.max_attempts, ?wait, error = %e, "delivery failed, will retry");
                let at = self.clock.now() + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
                match self.store.mark_attempt_failed(id, name, &e.to_string(), at).await {
                    Ok(()) => Next::Reread,
                    Err(se) => {
                        tracing::warn!(destination = name, id, error = %se, "cannot record the failed attempt");
                        Next::Pause
                    }
                }
            }
            (Err(e), _) => {
                tracing::error!(destination = name, id, attempt, max_attempts = self.max_attempts, error = %e, "delivery failed for good");
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

async fn sleep_or_cancel(shutdown: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}
