//! An in-memory [`OutboxStore`] for tests and for running without a database. Shared through an `Arc`, it
//! outlives a worker, which is how tests simulate a restart. Not durable across processes.

use super::{NewOutboxEvent, OutboxItem, OutboxStore};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::{ready, Future};
use std::sync::Mutex;

/// The in-memory outbox.
#[derive(Debug, Default)]
pub struct MemoryOutbox {
    inner: Mutex<Inner>,
}

/// The state of one (event, destination) row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowState {
    /// Not delivered yet.
    Pending,
    /// Delivered.
    Delivered,
    /// Given up, with the last error.
    Dead(String),
}

#[derive(Debug, Default)]
struct Inner {
    next_id: i64,
    events: BTreeMap<i64, NewOutboxEvent>,
    rows: BTreeMap<(String, i64), Row>,
}

#[derive(Debug, Clone)]
struct Row {
    delivery_id: String,
    attempts: u32,
    last_error: Option<String>,
    next_attempt_at: Option<DateTime<Utc>>,
    state: RowState,
}

impl MemoryOutbox {
    /// An empty outbox.
    pub fn new() -> MemoryOutbox {
        MemoryOutbox::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state of every row of `destination`, in id order: (id, state, attempts).
    pub fn rows(&self, destination: &str) -> Vec<(i64, RowState, u32)> {
        self.lock()
            .rows
            .iter()
            .filter(|((d, _), _)| d == destination)
            .map(|((_, id), r)| (*id, r.state.clone(), r.attempts))
            .collect()
    }

    /// How many rows of `destination` are still pending.
    pub fn pending_count(&self, destination: &str) -> usize {
        self.rows(destination).iter().filter(|(_, s, _)| *s == RowState::Pending).count()
    }

    /// The last recorded error of a row.
    pub fn last_error(&self, id: i64, destination: &str) -> Option<String> {
        self.lock().rows.get(&(destination.to_string(), id)).and_then(|r| r.last_error.clone())
    }

    fn update(&self, id: i64, destination: &str, f: impl FnOnce(&mut Row)) {
        if let Some(row) = self.lock().rows.get_mut(&(destination.to_string(), id)) {
            f(row);
        }
    }
}

impl OutboxStore for MemoryOutbox {
    type Error = Infallible;

    fn enqueue(&self, event: NewOutboxEvent) -> impl Future<Output = Result<i64, Infallible>> + Send {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        for d in &event.deliveries {
            let row = Row {
                delivery_id: d.delivery_id.clone(),
                attempts: 0,
                last_error: None,
                next_attempt_at: None,
                state: RowState::Pending,
            };
            inner.rows.insert((d.destination.clone(), id), row);
        }
        inner.events.insert(id, event);
        ready(Ok(id))
    }

    fn pending(
        &self,
        destination: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<OutboxItem>, Infallible>> + Send {
        let inner = self.lock();
        let items = inner
            .rows
            .range((destination.to_string(), i64::MIN)..=(destination.to_string(), i64::MAX))
            .filter(|(_, r)| r.state == RowState::Pending)
            .filter_map(|((_, id), r)| {
                let e = inner.events.get(id)?;
                Some(OutboxItem {
                    id: *id,
                    envelope_json: e.envelope_json.clone(),
                    kind: e.kind.clone(),
                    title: e.title.clone(),
                    priority: e.priority.clone(),
                    origin: Some(e.origin.clone()),
                    attempts: r.attempts,
                    delivery_id: r.delivery_id.clone(),
                    next_attempt_at: r.next_attempt_at,
                })
            })
            .take(limit)
            .collect();
        ready(Ok(items))
    }

    fn mark_delivered(&self, id: i64, destination: &str) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.update(id, destination, |r| r.state = RowState::Delivered);
        ready(Ok(()))
    }

    fn mark_attempt_failed(
        &self,
        id: i64,
        destination: &str,
        error: &str,
        next_attempt_at: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.update(id, destination, |r| {
            r.attempts += 1;
            r.last_error = Some(error.to_string());
            r.next_attempt_at = Some(next_attempt_at);
        });
        ready(Ok(()))
    }

    fn mark_dead(
        &self,
        id: i64,
        destination: &str,
        error: &str,
    ) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.update(id, destination, |r| {
            r.attempts += 1;
            r.last_error = Some(error.to_string());
            r.state = RowState::Dead(error.to_string());
        });
        ready(Ok(()))
    }
}
