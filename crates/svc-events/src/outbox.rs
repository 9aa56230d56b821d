//! The durable outbox: events are stored before any delivery attempt and delivered by a background worker,
//! one task per destination, in emission order, at least once.
//!
//! 1. [`emit`] builds the envelope and calls [`OutboxStore::enqueue`] with one delivery row per destination
//!    that takes the kind (each with its own delivery id, reused on every retry). Nothing else happens on the
//!    caller's path: no network call.
//! 2. [`OutboxWorker`] runs one loop per configured destination. Each loop reads the oldest pending rows of
//!    its destination ([`OutboxStore::pending`]) and delivers them one by one, in id order.
//! 3. Each delivery is one attempt (the senders never retry on their own). Success marks the row delivered. A
//!    transient failure (push or webhook unreachable, 5xx, 429, a refused push token) records the attempt
//!    with a `next_attempt_at` from the destination's [`crate::RetryPolicy`] (a webhook's `Retry-After`
//!    honoured), and the loop waits for that time before trying the same row again, so a later event never
//!    overtakes an earlier one. A permanent failure (4xx other than 408/429, 410, a broken envelope) or the
//!    last allowed attempt marks the row dead, and the loop moves on. A webhook gets `1 + retry` attempts in
//!    all; push and hooks get [`WorkerOptions::max_attempts`].
//! 4. A crash between a successful delivery and `mark_delivered` sends that event again after the restart:
//!    delivery is at-least-once, and receivers de-duplicate by `X-SVC-Delivery`.
//!
//! The gateway implements [`OutboxStore`] over SQLite/PostgreSQL; [`MemoryOutbox`] is the in-memory one used
//! in tests.

mod memory;
mod worker;

pub use memory::{MemoryOutbox, RowState};
pub use worker::{Emitter, OutboxWorker, Waker, WorkerOptions};

use crate::deliver::Deliverer;
use crate::envelope::{Envelope, EnvelopeError, Source};
use crate::kinds::EventKind;
use crate::origin::Origin;
use crate::senders::ntfy::PushOverrides;
use chrono::{DateTime, Utc};
use std::future::Future;

/// An event to store: the envelope JSON and one delivery per destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxEvent {
    /// The exact envelope JSON (what webhooks receive and sign).
    pub envelope_json: String,
    /// The kind, for queries and logs.
    pub kind: String,
    /// Push title override (`title` of `POST /events`).
    pub title: Option<String>,
    /// Push priority override, as `min|low|default|high|urgent`.
    pub priority: Option<String>,
    /// Who posted it ([`Origin`] as text).
    pub origin: String,
    /// One row per destination.
    pub deliveries: Vec<NewDelivery>,
}

/// One destination of a new event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// `push`, `webhook:<url>` or `hooks` (see [`Deliverer::name`]).
    pub destination: String,
    /// A fresh UUID; sent as `X-SVC-Delivery` on every attempt.
    pub delivery_id: String,
}

/// A pending delivery of one event to one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// The event's id (emission order).
    pub id: i64,
    /// The envelope JSON as stored.
    pub envelope_json: String,
    /// The kind.
    pub kind: String,
    /// Push title override.
    pub title: Option<String>,
    /// Push priority override.
    pub priority: Option<String>,
    /// Who posted it; `None` for events stored before origins were recorded.
    pub origin: Option<String>,
    /// Failed attempts so far at this destination.
    pub attempts: u32,
    /// The delivery id of this event at this destination.
    pub delivery_id: String,
    /// Not before this time (set by the last failed attempt).
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Durable storage of events and their per-destination delivery state.
///
/// Rules an implementation must keep: `enqueue` is atomic (the event and all its deliveries, or nothing) and
/// ids increase in emission order; `pending` returns the rows of one destination that are neither delivered
/// nor dead, in ascending id order, *whatever* their `next_attempt_at` (the worker waits for the head itself,
/// so that order holds); the three `mark_*` calls update one (id, destination) row.
pub trait OutboxStore: Send + Sync + 'static {
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Stores an event and its deliveries; returns the event id.
    fn enqueue(&self, event: NewOutboxEvent) -> impl Future<Output = Result<i64, Self::Error>> + Send;

    /// The oldest `limit` undelivered, not dead rows of `destination`, in id order.
    fn pending(
        &self,
        destination: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<OutboxItem>, Self::Error>> + Send;

    /// The event reached the destination.
    fn mark_delivered(&self, id: i64, destination: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Several events reached the destination (the worker marks a run of deliveries at once). The default marks
    /// them one by one; a store should do it in one transaction.
    fn mark_delivered_many(
        &self,
        ids: &[i64],
        destination: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async move {
            for id in ids {
                self.mark_delivered(*id, destination).await?;
            }
            Ok(())
        }
    }

    /// An attempt failed and will be retried: `attempts += 1`, remember `error`, not before `next_attempt_at`.
    fn mark_attempt_failed(
        &self,
        id: i64,
        destination: &str,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Claims the shared `destination` for `holder` until `until`, or renews `holder`'s claim; true when
    /// `holder` holds it now. Several gateways on one store take turns this way: one node at a time delivers
    /// a destination, and the claim of a node that died lapses at `until`. A store only one process uses may
    /// always answer true (the default).
    fn claim(
        &self,
        destination: &str,
        holder: &str,
        until: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        let _ = (destination, holder, until);
        async { Ok(true) }
    }

    /// Gives `holder`'s claim on `destination` up (a clean stop), so another node takes over at once.
    fn release(&self, destination: &str, holder: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = (destination, holder);
        async { Ok(()) }
    }

    /// The delivery failed for good (permanent error or too many attempts); keep the row for inspection.
    fn mark_dead(
        &self,
        id: i64,
        destination: &str,
        error: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Why [`emit`] failed.
#[derive(Debug, thiserror::Error)]
pub enum EmitError<E: std::error::Error + 'static> {
    /// The event itself is invalid (bad kind or data): the caller's fault, e.g. 400 on `POST /events`.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The store failed: nothing was recorded.
    #[error("cannot store the event: {0}")]
    Store(#[source] E),
}

/// A store failure may pass (a full disk freed, a database back); an invalid event never does.
impl<E: std::error::Error + 'static> crate::Transient for EmitError<E> {
    fn is_transient(&self) -> bool {
        matches!(self, EmitError::Store(_))
    }
}

/// Builds the envelope of `kind` with `data` from `source` and stores it, with who posted it (`origin`), for
/// every destination of `deliverer` that takes the kind. Returns the envelope and its outbox id. Call [`OutboxWorker::wake`] (or
/// [`worker::Waker::wake`]) afterwards for prompt delivery; otherwise the worker finds it on its next poll.
pub async fn emit<S: OutboxStore>(
    store: &S,
    deliverer: &Deliverer,
    source: &Source,
    origin: &Origin,
    kind: EventKind,
    data: serde_json::Value,
    overrides: &PushOverrides,
) -> Result<(Envelope, i64), EmitError<S::Error>> {
    let env = Envelope::new(kind, data, source)?;
    let deliveries = deliverer
        .destinations_for(kind.as_str())
        .into_iter()
        .map(|d| NewDelivery { destination: deliverer.name(d), delivery_id: uuid::Uuid::new_v4().to_string() })
        .collect();
    let event = NewOutboxEvent {
        envelope_json: env.to_json(),
        kind: kind.as_str().to_string(),
        title: overrides.title.clone(),
        priority: overrides.priority.map(|p| p.as_str().to_string()),
        origin: origin.to_string(),
        deliveries,
    };
    let id = store.enqueue(event).await.map_err(EmitError::Store)?;
    if let Some(o) = deliverer.observer() {
        o.emitted(kind.as_str());
    }
    Ok((env, id))
}

#[cfg(test)]
mod tests;
