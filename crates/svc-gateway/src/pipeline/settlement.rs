//! Settlement: after a call, its cost is computed from the usage the upstream reported and a spend record
//! is written through the group-commit [`SpendWriter`] before the response completes.
//!
//! Group commit: one writer task owns the store writes. It takes the first record waiting, then every
//! other record already queued (up to a batch limit), writes them all in one transaction and only then
//! answers each waiting request. Under load a batch forms by itself while the previous one commits; with
//! one request at a time, a batch is one record. No timer delays any request.

use crate::auth::Principal;
use crate::budgets::Reservation;
use crate::pipeline::admission::Ticket;
use crate::pipeline::routing::{InFlight, Route};
use crate::state::AppState;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Money, Usage};
use svc_events::RetryPolicy;
use svc_store::{SpendRecord, Store};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

const MAX_BATCH: usize = 512;
const QUEUE: usize = 8192;
/// Kept records are written again in chunks of this many, oldest first.
const KEPT_CHUNK: usize = 4096;
/// Once the gateway shuts down, kept records get this long (plus the attempt under way) before they are given up.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

type Job = (SpendRecord, oneshot::Sender<bool>);

/// What the writer does with records the store refused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepPolicy {
    /// The waits before writing them again.
    pub retry: RetryPolicy,
    /// Records kept at most; beyond this the oldest are dropped (100,000 records: about 25 MiB).
    pub max_kept: usize,
}

impl KeepPolicy {
    /// 100 ms doubling to 30 s, no jitter (one writer: nothing to spread out).
    const DEFAULT: KeepPolicy = KeepPolicy {
        retry: RetryPolicy {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            factor: 2.0,
            max_retry_after: Duration::from_secs(30),
            jitter: false,
        },
        max_kept: 100_000,
    };
}

/// Handle to the spend writer task.
#[derive(Clone, Debug)]
pub struct SpendWriter {
    tx: mpsc::Sender<Job>,
}

impl SpendWriter {
    /// Starts the writer on `tasks`; it ends when every handle is dropped and the queue is drained.
    ///
    /// A batch the store refuses (disk full, database down) is not forgotten: its requests are answered at once
    /// all the same, and its records are kept and written again, oldest first, after a backoff (100 ms doubling
    /// to 30 s), or as soon as a new batch gets through, until the store takes them.
    pub fn start(store: Store, tasks: &TaskTracker) -> SpendWriter {
        Self::start_with(store, tasks, KeepPolicy::DEFAULT)
    }

    pub(crate) fn start_with(store: Store, tasks: &TaskTracker, policy: KeepPolicy) -> SpendWriter {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        tasks.spawn(write_loop(store, rx, policy));
        SpendWriter { tx }
    }

    /// Queues a record and waits until it is committed. Returns false when it could not be written yet (the
    /// failure is logged, the writer keeps the record and tries again; the client still gets the answer it
    /// paid for).
    pub async fn record(&self, record: SpendRecord) -> bool {
        let (done, wait) = oneshot::channel();
        if self.tx.send((record, done)).await.is_err() {
            return false;
        }
        wait.await.unwrap_or(false)
    }
}

/// The writer task: group commit of new records, and the records of refused batches kept until the store
/// takes them. New records are always written on their own, so a backlog never slows a request down.
async fn write_loop(store: Store, mut rx: mpsc::Receiver<Job>, policy: KeepPolicy) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut kept = Kept { records: Vec::new(), max: policy.max_kept };
    let mut waits = policy.retry.delays();
    let mut retry_at = Instant::now();
    let mut give_up_at: Option<Instant> = None;
    loop {
        if kept.records.is_empty() {
            if give_up_at.is_some() || rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
                return;
            }
        } else {
            tokio::select! {
                n = rx.recv_many(&mut batch, MAX_BATCH), if give_up_at.is_none() => {
                    if n == 0 {
                        // Shutting down: the kept records get a short last chance.
                        give_up_at = Some(Instant::now() + SHUTDOWN_GRACE);
                        waits = policy.retry.with_delays(Duration::from_millis(100), Duration::from_secs(1)).delays();
                        retry_at = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(retry_at.into()) => {}
            }
        }
        if !batch.is_empty() {
            let (records, done): (Vec<SpendRecord>, Vec<_>) = batch.drain(..).unzip();
            let ok = match store.insert_spend_batch(&records).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, records = records.len(), "spend records could not be written; kept to try again");
                    if kept.records.is_empty() {
                        retry_at = Instant::now() + waits.next().unwrap_or(policy.retry.max_delay);
                    }
                    kept.add(records);
                    false
                }
            };
            for done in done {
                let _ = done.send(ok);
            }
            if ok && !kept.records.is_empty() {
                // The store takes writes again: no need to wait for the timer.
                retry_at = Instant::now();
            }
        }
        if !kept.records.is_empty() && Instant::now() >= retry_at {
            match kept.write(&store).await {
                Ok(n) => {
                    tracing::info!(records = n, "spend records kept after a failed write are now written");
                    waits = policy.retry.delays();
                }
                Err(e) => {
                    tracing::warn!(error = %e, records = kept.records.len(), "kept spend records still cannot be written");
                    retry_at = Instant::now() + waits.next().unwrap_or(policy.retry.max_delay);
                    if give_up_at.is_some_and(|at| Instant::now() >= at) {
                        tracing::error!(
                            records = kept.records.len(),
                            "spend records lost at shutdown: the store refused them"
                        );
                        kept.records.clear();
                    }
                }
            }
        }
    }
}

/// Records the store refused, oldest first.
struct Kept {
    records: Vec<SpendRecord>,
    max: usize,
}

impl Kept {
    fn add(&mut self, records: Vec<SpendRecord>) {
        self.records.extend(records);
        if self.records.len() > self.max {
            let lost = self.records.len() - self.max;
            tracing::error!(records = lost, "spend records dropped: too many are waiting for the store");
            self.records.drain(..lost);
        }
    }

    /// Writes the kept records in chunks, oldest first; returns how many were written, or the first error
    /// (the chunks written before it are no longer kept).
    async fn write(&mut self, store: &Store) -> Result<usize, svc_store::StoreError> {
        let total = self.records.len();
        while !self.records.is_empty() {
            let n = self.records.len().min(KEPT_CHUNK);
            store.insert_spend_batch(&self.records[..n]).await?;
            self.records.drain(..n);
        }
        Ok(total)
    }
}

/// Everything needed to settle one call, held from routing until settlement.
pub struct Settle {
    /// Shared state.
    pub state: AppState,
    /// Who called.
    pub principal: Principal,
    /// The deployment that served it.
    pub route: Arc<Route>,
    /// The request id.
    pub request_id: String,
    /// When the gateway received the request.
    pub started: Instant,
    /// The admission ticket (released when this is dropped).
    pub ticket: Ticket,
    /// Counts the call in flight on its deployment.
    pub in_flight: InFlight,
    /// The budget holds of the call.
    pub reservation: Reservation,
}

impl Settle {
    /// Records the call's spend at the cost of `usage` (never more than the budgets hold for it: the excess
    /// of an upstream's count over the reservation is logged, not charged) and settles its reservation.
    /// Returns what was charged.
    pub async fn finish(self, usage: Usage, status: u16) -> Money {
        let cost = usage.cost(self.route.input_price, self.route.output_price);
        let held = self.reservation.held();
        let charged = if self.reservation.is_budgeted() && cost > held {
            tracing::warn!(request_id = %self.request_id, deployment = %self.route.deployment.id, cost = %cost, reserved = %held,
                "the call cost more than its reservation: charged the reservation");
            held
        } else {
            cost
        };
        self.record(usage, charged, status).await
    }

    /// Records the call's spend at exactly what was reserved (a stream cut at its completion cap), showing
    /// `usage` in the record. Without a budget, the cost of `usage`.
    pub async fn finish_reserved(self, usage: Usage, status: u16) -> Money {
        let charged = if self.reservation.is_budgeted() {
            self.reservation.held()
        } else {
            usage.cost(self.route.input_price, self.route.output_price)
        };
        self.record(usage, charged, status).await
    }

    async fn record(self, usage: Usage, charged: Money, status: u16) -> Money {
        // Budgets first: the next request's admission must see the actual cost, not the reservation.
        self.reservation.settle(charged);
        self.state.node.served();
        self.state.rates.charge(&self.principal, &self.state.config, usage.completion_tokens);
        let key = self.principal.key();
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let record = SpendRecord {
            record_id: uuid::Uuid::now_v7().to_string(),
            node: Some(self.state.config.fleet.node.clone()),
            request_id: self.request_id.clone(),
            ts_ms: chrono::Utc::now().timestamp_millis(),
            key_id: key.map(|k| k.id.clone()),
            team_id: key.map(|k| k.team_id.clone()),
            agent_role: key.and_then(|k| k.agent_role.clone()),
            model_alias: self.route.alias.clone(),
            upstream_model: self.route.deployment.upstream_model.clone(),
            deployment: self.route.deployment.id.clone(),
            prompt_tokens: tokens(usage.prompt_tokens),
            completion_tokens: tokens(usage.completion_tokens),
            cost: charged.nanos(),
            status: i64::from(status),
            latency_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        };
        if !self.state.spend.record(record).await {
            tracing::error!(request_id = %self.request_id, "spend record of this request is not persisted yet");
        }
        drop(self.ticket);
        drop(self.in_flight);
        charged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;
    use svc_store::SpendFilter;

    fn record(id: &str) -> SpendRecord {
        SpendRecord {
            record_id: id.into(),
            node: None,
            request_id: id.into(),
            ts_ms: 1,
            key_id: Some("k".into()),
            team_id: Some("t".into()),
            agent_role: None,
            model_alias: "m".into(),
            upstream_model: "u".into(),
            deployment: "d".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cost: 7,
            status: 200,
            latency_ms: 1,
        }
    }

    async fn written(store: &Store) -> Vec<String> {
        let mut ids: Vec<String> = match store.query_spend(&SpendFilter::default(), 100, 0).await {
            Ok(rows) => rows.into_iter().map(|r| r.request_id).collect(),
            Err(e) => panic!("{e}"),
        };
        ids.sort();
        ids
    }

    /// A store on a temporary file, and a side connection that makes it refuse spend records (a trigger stands
    /// in for a full disk) and take them again.
    struct Harness {
        store: Store,
        side: sqlx::SqliteConnection,
        _dir: tempfile::TempDir,
    }

    impl Harness {
        async fn new() -> anyhow::Result<Harness> {
            let dir = tempfile::tempdir()?;
            let url = format!("sqlite://{}", dir.path().join("svc.db").display());
            let store = Store::connect(&url).await?;
            let side = sqlx::SqliteConnection::connect(&url).await?;
            Ok(Harness { store, side, _dir: dir })
        }

        async fn refuse(&mut self, refuse: bool) -> anyhow::Result<()> {
            let sql = if refuse {
                "CREATE TRIGGER full BEFORE INSERT ON spend_log BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            } else {
                "DROP TRIGGER full"
            };
            sqlx::query(sql).execute(&mut self.side).await?;
            Ok(())
        }

        /// Waits (at most `within`) until the store holds exactly `ids`.
        async fn holds(&self, ids: &[&str], within: Duration) -> Vec<String> {
            let deadline = Instant::now() + within;
            loop {
                let now = written(&self.store).await;
                if now == ids || Instant::now() >= deadline {
                    return now;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    fn policy(first_delay: Duration, max_kept: usize) -> KeepPolicy {
        KeepPolicy { retry: KeepPolicy::DEFAULT.retry.with_delays(first_delay, first_delay * 4), max_kept }
    }

    #[tokio::test]
    async fn refused_records_are_written_by_the_backoff_when_no_request_comes() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        h.refuse(true).await?;
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, policy(Duration::from_millis(20), 100));
        assert!(!writer.record(record("a")).await);
        assert!(!writer.record(record("b")).await);
        assert!(written(&h.store).await.is_empty());
        // Still refused for a few retries, then the store takes writes again; no new request comes.
        tokio::time::sleep(Duration::from_millis(150)).await;
        h.refuse(false).await?;
        assert_eq!(h.holds(&["a", "b"], Duration::from_secs(5)).await, ["a", "b"]);
        Ok(())
    }

    #[tokio::test]
    async fn a_batch_that_gets_through_brings_the_kept_records_in() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        // The backoff alone would wait a minute: only the successful batch can bring `c` in quickly.
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, policy(Duration::from_secs(60), 100));
        h.refuse(true).await?;
        assert!(!writer.record(record("c")).await);
        h.refuse(false).await?;
        assert!(writer.record(record("d")).await);
        assert_eq!(h.holds(&["c", "d"], Duration::from_secs(5)).await, ["c", "d"]);
        Ok(())
    }

    #[tokio::test]
    async fn kept_records_are_capped_oldest_first() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, policy(Duration::from_secs(60), 2));
        h.refuse(true).await?;
        for id in ["r1", "r2", "r3"] {
            assert!(!writer.record(record(id)).await);
        }
        h.refuse(false).await?;
        assert!(writer.record(record("r4")).await);
        assert_eq!(h.holds(&["r2", "r3", "r4"], Duration::from_secs(5)).await, ["r2", "r3", "r4"]);
        Ok(())
    }

    #[tokio::test]
    async fn shutdown_gives_kept_records_a_short_last_chance() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        // A minute of backoff must not hold the shutdown up.
        let slow = policy(Duration::from_secs(60), 100);

        // The store recovers as the gateway stops: the kept record is written.
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, slow);
        h.refuse(true).await?;
        assert!(!writer.record(record("e")).await);
        h.refuse(false).await?;
        drop(writer);
        tasks.close();
        assert!(tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await.is_ok());
        assert_eq!(written(&h.store).await, ["e"]);

        // It does not: the writer gives up after the grace period instead of hanging.
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, slow);
        h.refuse(true).await?;
        assert!(!writer.record(record("f")).await);
        drop(writer);
        tasks.close();
        let started = Instant::now();
        assert!(tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await.is_ok());
        assert!(started.elapsed() >= SHUTDOWN_GRACE);
        assert_eq!(written(&h.store).await, ["e"]);
        Ok(())
    }
}
