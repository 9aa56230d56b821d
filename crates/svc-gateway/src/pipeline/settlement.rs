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
use std::time::Instant;
use svc_budget::{Money, Usage};
use svc_store::{SpendRecord, Store};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

const MAX_BATCH: usize = 512;
const QUEUE: usize = 8192;

type Job = (SpendRecord, oneshot::Sender<bool>);

/// Handle to the spend writer task.
#[derive(Clone, Debug)]
pub struct SpendWriter {
    tx: mpsc::Sender<Job>,
}

impl SpendWriter {
    /// Starts the writer on `tasks`; it ends when every handle is dropped and the queue is drained.
    pub fn start(store: Store, tasks: &TaskTracker) -> SpendWriter {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
        tasks.spawn(async move {
            let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let records: Vec<SpendRecord> = batch.iter().map(|(r, _)| r.clone()).collect();
                let ok = match store.insert_spend_batch(&records).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(error = %e, records = records.len(), "spend records could not be written");
                        false
                    }
                };
                for (_, done) in batch.drain(..) {
                    let _ = done.send(ok);
                }
            }
        });
        SpendWriter { tx }
    }

    /// Queues a record and waits until it is committed. Returns false when it could not be written (the
    /// failure is logged; the client still gets the answer it paid for).
    pub async fn record(&self, record: SpendRecord) -> bool {
        let (done, wait) = oneshot::channel();
        if self.tx.send((record, done)).await.is_err() {
            return false;
        }
        wait.await.unwrap_or(false)
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
