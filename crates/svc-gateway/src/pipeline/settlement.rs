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
use backon::{BackoffBuilder as _, ExponentialBuilder};
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::{Money, Usage};
use svc_store::{SpendRecord, Store};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

const MAX_BATCH: usize = 512;
const QUEUE: usize = 8192;
/// Records kept for another attempt while the store cannot be written; beyond this the oldest are dropped
/// (about 25 MiB of records).
const MAX_UNSAVED: usize = 100_000;
/// Attempts to write kept records once the gateway is shutting down.
const SHUTDOWN_ATTEMPTS: u32 = 5;

type Job = (SpendRecord, oneshot::Sender<bool>);

/// Handle to the spend writer task.
#[derive(Clone, Debug)]
pub struct SpendWriter {
    tx: mpsc::Sender<Job>,
}

impl SpendWriter {
    /// Starts the writer on `tasks`; it ends when every handle is dropped and the queue is drained.
    ///
    /// A batch the store refuses (disk full, database down) is not forgotten: its records are kept and written
    /// again with the next batch, or after a backoff (100 ms doubling to 30 s) when no batch comes, until the
    /// store takes them. Their requests are answered at once all the same.
    pub fn start(store: Store, tasks: &TaskTracker) -> SpendWriter {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        tasks.spawn(write_loop(store, rx));
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

/// The writer task: group commit, and the records of failed batches kept until the store takes them.
async fn write_loop(store: Store, mut rx: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut unsaved: Vec<SpendRecord> = Vec::new();
    let mut delays = retry_delays();
    let mut closed = false;
    let mut attempts_at_shutdown = 0;
    while !closed || !unsaved.is_empty() {
        if unsaved.is_empty() {
            closed = rx.recv_many(&mut batch, MAX_BATCH).await == 0;
        } else {
            // Records are waiting for another attempt: new records, or the next delay, whichever comes first.
            let delay = delays.next().unwrap_or(Duration::from_secs(30));
            tokio::select! {
                n = rx.recv_many(&mut batch, MAX_BATCH), if !closed => closed = n == 0,
                () = tokio::time::sleep(delay) => {}
            }
        }
        if batch.is_empty() && unsaved.is_empty() {
            continue;
        }
        let fresh = batch.len();
        let mut records = std::mem::take(&mut unsaved);
        records.extend(batch.iter().map(|(r, _)| r.clone()));
        let ok = match store.insert_spend_batch(&records).await {
            Ok(()) => {
                if records.len() > fresh {
                    tracing::info!(
                        records = records.len() - fresh,
                        "spend records kept after a failed write are now written"
                    );
                    delays = retry_delays();
                }
                true
            }
            Err(e) => {
                tracing::error!(error = %e, records = records.len(), "spend records could not be written; kept to try again");
                if records.len() > MAX_UNSAVED {
                    let lost = records.len() - MAX_UNSAVED;
                    tracing::error!(records = lost, "spend records dropped: too many are waiting for the store");
                    records.drain(..lost);
                }
                unsaved = records;
                if closed {
                    // Shutting down and the store still refuses: a few more attempts (about 3 s), then give up,
                    // loudly.
                    attempts_at_shutdown += 1;
                    if attempts_at_shutdown >= SHUTDOWN_ATTEMPTS {
                        tracing::error!(
                            records = unsaved.len(),
                            "spend records lost at shutdown: the store refused them"
                        );
                        unsaved.clear();
                    }
                }
                false
            }
        };
        for (_, done) in batch.drain(..) {
            let _ = done.send(ok);
        }
    }
}

/// The waits between attempts to write kept records.
fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .with_max_times(usize::MAX)
        .build()
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
    /// Records the call's spend (and, later, settles its budget reservation). Returns the cost.
    pub async fn finish(self, usage: Usage, status: u16) -> Money {
        let cost = usage.cost(self.route.input_price, self.route.output_price);
        // Budgets first: the next request's admission must see the actual cost, not the reservation.
        self.reservation.settle(cost);
        self.state.rates.charge(&self.principal, &self.state.config, usage.completion_tokens);
        let key = self.principal.key();
        let record = SpendRecord {
            request_id: self.request_id.clone(),
            ts_ms: chrono::Utc::now().timestamp_millis(),
            key_id: key.map(|k| k.id.clone()),
            team_id: key.map(|k| k.team_id.clone()),
            agent_role: key.and_then(|k| k.agent_role.clone()),
            model_alias: self.route.alias.clone(),
            upstream_model: self.route.deployment.upstream_model.clone(),
            deployment: self.route.deployment.id.clone(),
            prompt_tokens: usage.prompt_tokens as i64,
            completion_tokens: usage.completion_tokens as i64,
            cost: cost.0,
            status: i64::from(status),
            latency_ms: self.started.elapsed().as_millis() as i64,
        };
        if !self.state.spend.record(record).await {
            tracing::error!(request_id = %self.request_id, "spend record of this request is not persisted");
        }
        drop(self.ticket);
        drop(self.in_flight);
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;
    use svc_store::SpendFilter;

    fn record(id: &str) -> SpendRecord {
        SpendRecord {
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

    /// A store that refuses writes for a while (a trigger stands in for a full disk): the records of the
    /// refused batches are written once it takes them again, with or without new traffic.
    #[tokio::test]
    async fn refused_records_are_written_once_the_store_takes_them() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("svc.db").display());
        let store = Store::connect(&url).await?;
        let mut side = sqlx::SqliteConnection::connect(&url).await?;
        let fail =
            "CREATE TRIGGER full BEFORE INSERT ON spend_log BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END";
        sqlx::query(fail).execute(&mut side).await?;
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start(store.clone(), &tasks);

        assert!(!writer.record(record("a")).await);
        assert!(!writer.record(record("b")).await);
        assert!(written(&store).await.is_empty());

        // The store recovers; no new request comes: the backoff brings the kept records in.
        sqlx::query("DROP TRIGGER full").execute(&mut side).await?;
        for _ in 0..100 {
            if written(&store).await.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(written(&store).await, ["a", "b"]);

        // Refused again; this time the next request's batch carries the kept record along.
        sqlx::query(fail).execute(&mut side).await?;
        assert!(!writer.record(record("c")).await);
        sqlx::query("DROP TRIGGER full").execute(&mut side).await?;
        assert!(writer.record(record("d")).await);
        assert_eq!(written(&store).await, ["a", "b", "c", "d"]);

        // Shutting down while the store refuses ends after a few attempts instead of hanging.
        sqlx::query(fail).execute(&mut side).await?;
        assert!(!writer.record(record("e")).await);
        drop(writer);
        tasks.close();
        assert!(tokio::time::timeout(Duration::from_secs(15), tasks.wait()).await.is_ok());
        assert_eq!(written(&store).await, ["a", "b", "c", "d"]);
        Ok(())
    }
}
