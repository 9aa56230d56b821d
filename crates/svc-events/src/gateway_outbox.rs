//! The durable outbox of svc-events over the store: [`StoreOutbox`] implements `OutboxStore` with the store's
//! outbox tables, [`OutboxSink`] turns the gateway's own events into outbox rows, and [`start`] starts the
//! worker that delivers them.

use crate::group_commit::{Batches, GroupCommit, Options};
use crate::{
    Deliverer, EmitError, Emitter, EventSink, GatewayEvent, HookFile, HookRunner, NewOutboxEvent, Observer, Origin,
    OutboxItem, OutboxStore, OutboxWorker, PushOverrides, RetryPolicy, Source, Stored, Transient, WorkerOptions,
};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use svc_config::{Config, FleetConfig};
use svc_store::{NewEvent, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The store as an outbox. Enqueues go through the store's group-commit writer ([`GroupCommit`]), which commits
/// the events of concurrent callers in one transaction: each caller still returns only once its event is
/// stored, and ids keep emission order.
#[derive(Debug, Clone)]
pub struct StoreOutbox {
    /// The store.
    pub store: Store,
    writer: GroupCommit<Enqueues>,
}

/// Outbox events into the store's outbox tables, each answered with its row id.
struct Enqueues(Store);

impl Batches for Enqueues {
    type Item = NewOutboxEvent;
    type Tag = ();
    type Answer = i64;
    const WHAT: &'static str = "outbox events";

    async fn write(&self, batch: &[NewOutboxEvent]) -> Result<Vec<i64>, StoreError> {
        let events: Vec<NewEvent<'_>> = batch
            .iter()
            .map(|e| NewEvent {
                kind: &e.kind,
                envelope: &e.envelope_json,
                title: e.title.as_deref(),
                priority: e.priority.as_deref(),
                origin: Some(e.origin.as_str()),
                deliveries: e.deliveries.iter().map(|d| (d.destination.clone(), d.delivery_id.clone())).collect(),
            })
            .collect();
        self.0.outbox_enqueue_many(&events).await
    }
}

impl StoreOutbox {
    /// The outbox over `store`; its writer task, on `tasks`, ends when every handle is dropped. 4,096 events
    /// queue at most, 256 go in one transaction; a refusal is answered (the event sink tries again).
    pub fn new(store: Store, tasks: &TaskTracker) -> StoreOutbox {
        let options = Options { queue: 4096, max_batch: 256, linger: None, keep: None };
        let writer = GroupCommit::start(Enqueues(store.clone()), options, tasks);
        StoreOutbox { store, writer }
    }
}

impl OutboxStore for StoreOutbox {
    type Error = StoreError;

    async fn claim(&self, destination: &str, holder: &str, until: DateTime<Utc>) -> Result<bool, StoreError> {
        self.store.outbox_claim(destination, holder, until.timestamp_millis(), svc_store::now_ms()).await
    }

    async fn release(&self, destination: &str, holder: &str) -> Result<(), StoreError> {
        self.store.outbox_release(destination, holder).await
    }

    async fn enqueue(&self, event: NewOutboxEvent) -> Result<i64, StoreError> {
        self.writer.write(event, ()).await.map_err(|refusal| StoreError::Batch(refusal.to_string()))
    }

    fn pending(
        &self,
        destination: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<OutboxItem>, StoreError>> + Send {
        let destination = destination.to_string();
        async move {
            let rows = self.store.outbox_pending(&destination, limit as i64).await?;
            Ok(rows
                .into_iter()
                .map(|r| OutboxItem {
                    id: r.id,
                    envelope_json: r.envelope,
                    kind: r.kind,
                    title: r.title,
                    priority: r.priority,
                    origin: r.origin,
                    attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
                    delivery_id: r.delivery_id,
                    next_attempt_at: (r.next_attempt_ms > 0)
                        .then(|| DateTime::<Utc>::from_timestamp_millis(r.next_attempt_ms))
                        .flatten(),
                })
                .collect())
        }
    }

    fn mark_delivered(&self, id: i64, destination: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        let destination = destination.to_string();
        async move { self.store.outbox_delivered(id, &destination).await }
    }

    async fn mark_delivered_many(&self, ids: &[i64], destination: &str) -> Result<(), StoreError> {
        self.store.outbox_delivered_many(ids, destination).await
    }

    fn mark_attempt_failed(
        &self,
        id: i64,
        destination: &str,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let (destination, error) = (destination.to_string(), error.to_string());
        async move { self.store.outbox_attempt_failed(id, &destination, &error, next_attempt_at.timestamp_millis()).await }
    }

    fn mark_dead(
        &self,
        id: i64,
        destination: &str,
        error: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let (destination, error) = (destination.to_string(), error.to_string());
        async move { self.store.outbox_dead(id, &destination, &error).await }
    }
}

/// Gateway events into the outbox: one store write each, in a tracked task (never on the request path). An event
/// the store refuses (disk full, database down) is tried again with backoff, until the gateway shuts down.
pub struct OutboxSink {
    /// Stores and wakes the worker.
    pub emitter: Emitter<StoreOutbox>,
    /// Fleet and node names.
    pub fleet: FleetConfig,
    /// Tasks shutdown waits for.
    pub tasks: TaskTracker,
    /// Waits between attempts to store an event the store refused.
    pub retry: RetryPolicy,
    /// Attempts after the first.
    pub retries: u32,
    /// Fleet mode: the store that decides which node announces a fleet's `model.*` transition.
    pub health: Option<Store>,
    /// Events are stored, and health judgements shared with the fleet, in the order they were emitted (each in
    /// a task of its own, so a store that refuses writes never blocks the caller): the next turn to give, and
    /// the turns done.
    turns: Arc<AtomicU64>,
    done: Arc<tokio::sync::watch::Sender<u64>>,
}

/// A stored event's turn: ends (letting the next event be stored) when dropped, whatever happened to it.
struct Turn {
    done: Arc<tokio::sync::watch::Sender<u64>>,
    next: u64,
}

impl Drop for Turn {
    fn drop(&mut self) {
        let next = self.next;
        self.done.send_modify(|d| *d = (*d).max(next));
    }
}

impl OutboxSink {
    /// Retries 200 ms doubling to 5 s, 12 of them, no jitter: about 40 s of a store refusing writes.
    pub fn new(emitter: Emitter<StoreOutbox>, fleet: FleetConfig, tasks: TaskTracker) -> OutboxSink {
        let retry = RetryPolicy {
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            factor: 2.0,
            max_retry_after: Duration::from_secs(5),
            jitter: false,
        };
        OutboxSink {
            emitter,
            fleet,
            tasks,
            retry,
            retries: 12,
            health: None,
            turns: Arc::default(),
            done: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

/// A failed attempt to store an event, and whether the gateway was shutting down (then it is the last one).
struct EmitFailure {
    error: EmitError<StoreError>,
    shutting_down: bool,
}

impl Transient for EmitFailure {
    fn is_transient(&self) -> bool {
        !self.shutting_down && self.error.is_transient()
    }
}

impl OutboxSink {
    /// Stores `event` in a tracked task, after the events emitted before it; with `judged` (a health transition
    /// in fleet mode: the deployment and this node's new state), only when the store says this node announces
    /// the fleet's transition, and without an event only records the judgement.
    fn store_later(&self, event: Option<GatewayEvent>, judged: Option<(String, &'static str)>) -> Stored {
        let kind = event.as_ref().map(|e| e.kind);
        let gate = judged.and_then(|j| self.health.clone().map(|store| (store, j)));
        if kind.is_none() && gate.is_none() {
            return Stored(None);
        }
        // Dropped when the task ends, which completes the caller's `Stored`.
        let (stored, answer) = tokio::sync::oneshot::channel::<()>();
        let (node, fleet_name) = (self.fleet.node.clone(), self.fleet.name.clone());
        let emitter = self.emitter.clone();
        let source = event.as_ref().map(|e| Source::from_config(&self.fleet, Some(&e.agent), "gateway"));
        let (retry, retries) = (self.retry, self.retries);
        let tasks = self.tasks.clone();
        let turn = self.turns.fetch_add(1, Ordering::Relaxed);
        let mut turns = self.done.subscribe();
        let done = self.done.clone();
        self.tasks.spawn(async move {
            // Wait for the events emitted before this one to be stored (or given up).
            let _ = turns.wait_for(|d| *d >= turn).await;
            let _turn = Turn { done, next: turn + 1 };
            let _stored = stored;
            if let Some((store, (deployment, state))) = gate {
                match store.health_judged(&fleet_name, &node, &deployment, state).await {
                    Ok(true) => {}
                    Ok(false) => {
                        if let Some(e) = &event {
                            tracing::debug!(kind = e.kind.as_str(), deployment, "the fleet already announced this state");
                        }
                        return;
                    }
                    Err(error) => tracing::warn!(%error, deployment, "cannot share a health judgement with the fleet; announcing on this node's own"),
                }
            }
            let (Some(event), Some(kind), Some(source)) = (event, kind, source) else { return };
            let attempt = || async {
                emitter
                    .emit(&source, &Origin::Gateway, kind, event.data.clone(), &PushOverrides::default())
                    .await
                    .map_err(|error| EmitFailure { error, shutting_down: tasks.is_closed() })
            };
            let on_retry = |f: &EmitFailure, wait: Duration| {
                tracing::warn!(error = %f.error, kind = event.kind.as_str(), ?wait, "event could not be stored in the outbox; trying again");
            };
            if let Err(f) = retry.run(retries, attempt, on_retry).await {
                tracing::error!(error = %f.error, kind = event.kind.as_str(), "event could not be stored in the outbox");
            }
        });
        Stored(Some(answer))
    }
}

impl EventSink for OutboxSink {
    fn emit(&self, event: GatewayEvent) {
        // Not awaited: `emit` hands over and returns.
        drop(self.store_later(Some(event), None));
    }

    fn emit_stored(&self, event: GatewayEvent) -> Stored {
        self.store_later(Some(event), None)
    }

    fn health_changed(&self, deployment: &str, state: &'static str, event: Option<GatewayEvent>) {
        drop(self.store_later(event, Some((deployment.to_string(), state))));
    }
}

/// Older versions stored a webhook's rows under `webhook:<full url>`; the name now shows the URL redacted.
/// Rows still pending under an old name move to the new one before the worker starts, so queued events are
/// delivered, not orphaned. An old name that is also a current name is left alone (its rows already belong to
/// a configured destination).
async fn rename_legacy_destinations(store: &Store, deliverer: &Deliverer) -> Result<(), StoreError> {
    let current: Vec<String> = deliverer.destinations().into_iter().map(|d| deliverer.name(d)).collect();
    for (old, new) in deliverer.legacy_names() {
        if current.contains(&old) {
            continue;
        }
        let moved = store.outbox_rename_destination(&old, &new).await?;
        if moved > 0 {
            tracing::info!(destination = %new, rows = moved, "queued deliveries moved to the destination's new name");
        }
    }
    Ok(())
}

/// The outbox worker, delivering events to the configured push server, webhooks and this node's hooks, started
/// on `tasks`; and the sink of the gateway's own events (`events`, or one into the outbox).
pub async fn start(
    config: &Arc<Config>,
    store: &Store,
    observer: Arc<dyn Observer>,
    events: Option<Arc<dyn EventSink>>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(Emitter<StoreOutbox>, Arc<dyn EventSink>), StoreError> {
    // Hooks run only when this node has a hooks file location; a missing file means no hooks yet.
    let hooks = HookFile::locate().ok().map(|f| HookRunner::new(f, config.notifications.hooks.clone()));
    let deliverer =
        Arc::new(Deliverer::from_config(&config.notifications, hooks).on_node(&config.fleet.node).observed(observer));
    rename_legacy_destinations(store, &deliverer).await?;
    // Shared destinations are claimed by one node at a time (several gateways on one store); hooks are this
    // node's own.
    let options = WorkerOptions {
        holder: Some(config.fleet.node.clone()),
        lease: config.fleet.lease,
        ..WorkerOptions::default()
    };
    let worker = OutboxWorker::new(Arc::new(StoreOutbox::new(store.clone(), tasks)), deliverer, options);
    let outbox = worker.emitter();
    worker.spawn(tasks, shutdown.clone());
    let events = events.unwrap_or_else(|| {
        let mut sink = OutboxSink::new(outbox.clone(), config.fleet.clone(), tasks.clone());
        if store.backend() == svc_store::Backend::Postgres {
            sink.health = Some(store.clone());
        }
        Arc::new(sink)
    });
    Ok((outbox, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Deliverer, OutboxWorker, WorkerOptions};
    use sqlx::Connection as _;
    use std::sync::Arc;

    async fn stored_kinds(side: &mut sqlx::SqliteConnection) -> anyhow::Result<Vec<String>> {
        Ok(sqlx::query_scalar("SELECT kind FROM outbox ORDER BY id").fetch_all(side).await?)
    }

    /// Events emitted one after another are stored in that order, on a multi-threaded runtime where each one's
    /// task may run on either worker (before, each raced the others: a `budget.exceeded` could be stored, and
    /// delivered, before the `budget.alert` announced just ahead of it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_are_stored_in_the_order_they_were_emitted() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        let store = Store::connect(&url).await?;
        let mut side = sqlx::SqliteConnection::connect(&url).await?;
        let deliverer = Arc::new(Deliverer::new(None, Vec::new(), None));
        // The writer on a tracker of its own: the test waits for the sink's tasks while the outbox is alive.
        let outbox = Arc::new(StoreOutbox::new(store.clone(), &TaskTracker::new()));
        let worker = OutboxWorker::new(outbox, deliverer, WorkerOptions::default());
        let tasks = TaskTracker::new();
        let sink = OutboxSink::new(worker.emitter(), FleetConfig::default(), tasks.clone());
        let kinds = [crate::EventKind::BudgetAlert, crate::EventKind::BudgetExceeded];
        for i in 0..200 {
            sink.emit(GatewayEvent {
                kind: kinds[i % 2],
                agent: "gateway".into(),
                data: serde_json::json!({ "i": i }),
            });
        }
        tasks.close();
        assert!(tokio::time::timeout(Duration::from_secs(30), tasks.wait()).await.is_ok());
        let stored: Vec<String> =
            sqlx::query_scalar("SELECT envelope FROM outbox ORDER BY id").fetch_all(&mut side).await?;
        let order: Vec<u64> = stored
            .iter()
            .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok()?["data"]["i"].as_u64())
            .collect();
        assert_eq!(order, (0..200).collect::<Vec<u64>>());
        Ok(())
    }

    /// An event the gateway emits while the store refuses writes (a trigger stands in for a full disk) is
    /// stored once the store takes writes again; an event emitted during shutdown is not retried.
    #[tokio::test]
    async fn a_refused_event_is_stored_once_the_store_takes_writes_again() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        let store = Store::connect(&url).await?;
        let mut side = sqlx::SqliteConnection::connect(&url).await?;
        let refuse =
            "CREATE TRIGGER full BEFORE INSERT ON outbox BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END";
        sqlx::query(refuse).execute(&mut side).await?;

        let deliverer = Arc::new(Deliverer::new(None, Vec::new(), None));
        // The writer on a tracker of its own: the test waits for the sink's tasks while the outbox is alive.
        let outbox = Arc::new(StoreOutbox::new(store.clone(), &TaskTracker::new()));
        let worker = OutboxWorker::new(outbox, deliverer, WorkerOptions::default());
        let tasks = TaskTracker::new();
        let mut sink = OutboxSink::new(worker.emitter(), FleetConfig::default(), tasks.clone());
        sink.retry = sink.retry.with_delays(Duration::from_millis(20), Duration::from_millis(50));
        let event = |model: &str| GatewayEvent {
            kind: crate::EventKind::ModelDegraded,
            agent: "gateway".into(),
            data: serde_json::json!({ "model": model }),
        };

        sink.emit(event("m1"));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(stored_kinds(&mut side).await?.is_empty());
        sqlx::query("DROP TRIGGER full").execute(&mut side).await?;
        for _ in 0..100 {
            if !stored_kinds(&mut side).await?.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(stored_kinds(&mut side).await?, ["model.degraded"]);

        // During shutdown the attempt under way is the last: the task ends instead of retrying.
        sqlx::query(refuse).execute(&mut side).await?;
        sink.retries = 1_000;
        tasks.close();
        sink.emit(event("m2"));
        assert!(tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await.is_ok());
        assert_eq!(stored_kinds(&mut side).await?, ["model.degraded"]);
        Ok(())
    }
}
