//! Reading the event outbox for people (the dashboard and the admin API): recent events with the state of
//! each of their deliveries, counts per destination, and putting a dead delivery back in the queue.
//!
//! What this file does not do: deliver, retry or wake the worker (svc-events owns delivery; the gateway wakes
//! the worker after [`Store::outbox_redeliver`]).

use crate::{Store, StoreError};
use sqlx::Row;

/// Where one delivery of an event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    /// Not delivered yet and not given up: the worker will try (again).
    Pending,
    /// Delivered.
    Delivered,
    /// Given up (a permanent failure or out of attempts); kept until delivered again by hand.
    Dead,
}

impl DeliveryState {
    /// The name used on the wire and in filters: `pending`, `delivered`, `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    /// Parses a name of [`DeliveryState::as_str`].
    pub fn parse(text: &str) -> Option<DeliveryState> {
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Dead].into_iter().find(|s| s.as_str() == text)
    }

    fn of(delivered_ms: Option<i64>, failed_ms: Option<i64>) -> DeliveryState {
        match (delivered_ms, failed_ms) {
            (Some(_), _) => DeliveryState::Delivered,
            (None, Some(_)) => DeliveryState::Dead,
            (None, None) => DeliveryState::Pending,
        }
    }
}

/// One delivery of an event to one destination, as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// Destination name (`push`, `webhook:<redacted url>`, `hooks`).
    pub destination: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Failed attempts so far.
    pub attempts: i64,
    /// The last attempt's error (URLs redacted by the deliverer).
    pub last_error: Option<String>,
    /// Not before this time (Unix ms; 0 = at once); meaningful while pending.
    pub next_attempt_ms: i64,
    /// When it was delivered (Unix ms).
    pub delivered_ms: Option<i64>,
    /// When it was given up (Unix ms).
    pub failed_ms: Option<i64>,
}

/// A stored event with its deliveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// Outbox id.
    pub id: i64,
    /// When it was stored (Unix ms).
    pub created_ms: i64,
    /// The event kind.
    pub kind: String,
    /// The envelope JSON as emitted.
    pub envelope: String,
    /// Who posted it.
    pub origin: Option<String>,
    /// One per destination, by destination name.
    pub deliveries: Vec<DeliveryRow>,
}

/// Filters of [`Store::outbox_recent`].
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only events with at least one delivery in this state.
    pub state: Option<DeliveryState>,
}

/// The deliveries of one destination, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationStats {
    /// Destination name.
    pub destination: String,
    /// Waiting for delivery.
    pub pending: i64,
    /// Delivered.
    pub delivered: i64,
    /// Given up.
    pub dead: i64,
    /// When the oldest pending event was stored (Unix ms), if any is pending.
    pub oldest_pending_ms: Option<i64>,
}

impl Store {
    /// The newest events (at most `limit`), newest first, each with all its deliveries.
    pub async fn outbox_recent(&self, filter: &EventFilter, limit: i64) -> Result<Vec<EventRow>, StoreError> {
        let state = filter.state.map(DeliveryState::as_str);
        let rows = sqlx::query(
            "SELECT o.id, o.created_ms, o.kind, o.envelope, o.origin FROM outbox o \
             WHERE ($1 IS NULL OR o.kind = $1) AND ($2 IS NULL OR EXISTS (SELECT 1 FROM outbox_delivery d \
               WHERE d.outbox_id = o.id AND ( \
                 ($2 = 'pending' AND d.delivered_ms IS NULL AND d.failed_ms IS NULL) \
                 OR ($2 = 'delivered' AND d.delivered_ms IS NOT NULL) \
                 OR ($2 = 'dead' AND d.delivered_ms IS NULL AND d.failed_ms IS NOT NULL)))) \
             ORDER BY o.id DESC LIMIT $3",
        )
        .bind(filter.kind.as_deref())
        .bind(state)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let mut events = rows
            .iter()
            .map(|r| {
                Ok(EventRow {
                    id: r.try_get(0)?,
                    created_ms: r.try_get(1)?,
                    kind: r.try_get(2)?,
                    envelope: r.try_get(3)?,
                    origin: r.try_get(4)?,
                    deliveries: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        if events.is_empty() {
            return Ok(events);
        }
        let mut sql = String::from(
            "SELECT outbox_id, destination, attempts, next_attempt_ms, delivered_ms, failed_ms, last_error \
             FROM outbox_delivery WHERE outbox_id IN (",
        );
        crate::push_params(&mut sql, self.backend(), 1, events.len());
        sql.push_str(") ORDER BY outbox_id, destination");
        let mut q = sqlx::query(&sql);
        for e in &events {
            q = q.bind(e.id);
        }
        for r in q.fetch_all(self.pool()).await? {
            let id: i64 = r.try_get(0)?;
            let (delivered_ms, failed_ms) = (r.try_get(4)?, r.try_get(5)?);
            let row = DeliveryRow {
                destination: r.try_get(1)?,
                attempts: r.try_get(2)?,
                next_attempt_ms: r.try_get(3)?,
                delivered_ms,
                failed_ms,
                state: DeliveryState::of(delivered_ms, failed_ms),
                last_error: r.try_get(6)?,
            };
            if let Some(e) = events.iter_mut().find(|e| e.id == id) {
                e.deliveries.push(row);
            }
        }
        Ok(events)
    }

    /// Counts per destination, by destination name: the backlog ([`Store::outbox_backlog`]) with the number
    /// delivered beside it.
    pub async fn outbox_destinations(&self) -> Result<Vec<DestinationStats>, StoreError> {
        let delivered = sqlx::query(
            "SELECT destination, CAST(COUNT(*) AS BIGINT) FROM outbox_delivery \
             WHERE delivered_ms IS NOT NULL GROUP BY destination",
        )
        .fetch_all(self.pool())
        .await?;
        let mut out: std::collections::BTreeMap<String, DestinationStats> = std::collections::BTreeMap::new();
        for r in &delivered {
            let destination: String = r.try_get(0)?;
            let stats =
                DestinationStats { destination: destination.clone(), delivered: r.try_get(1)?, ..Default::default() };
            out.insert(destination, stats);
        }
        for b in self.outbox_backlog().await? {
            let entry = out
                .entry(b.destination.clone())
                .or_insert_with(|| DestinationStats { destination: b.destination.clone(), ..Default::default() });
            entry.pending = b.pending;
            entry.dead = b.dead;
            entry.oldest_pending_ms = b.oldest_pending_ms;
        }
        Ok(out.into_values().collect())
    }

    /// Puts the dead deliveries of event `id` (only the one to `destination` when given) back in the queue:
    /// attempts from zero, due at once, error and give-up time cleared. Returns the destinations so
    /// revived (empty when nothing dead matched).
    pub async fn outbox_redeliver(&self, id: i64, destination: Option<&str>) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "UPDATE outbox_delivery SET attempts = 0, next_attempt_ms = 0, failed_ms = NULL, last_error = NULL \
             WHERE outbox_id = $1 AND delivered_ms IS NULL AND failed_ms IS NOT NULL \
             AND ($2 IS NULL OR destination = $2) RETURNING destination",
        )
        .bind(id)
        .bind(destination)
        .fetch_all(self.writer())
        .await?;
        rows.iter().map(|r| Ok(r.try_get::<String, _>(0)?)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::NewEvent;

    fn event<'a>(kind: &'a str, envelope: &'a str) -> NewEvent<'a> {
        NewEvent {
            kind,
            envelope,
            origin: Some("master"),
            deliveries: vec![("push".into(), "d-push".into()), ("webhook:http://x/".into(), "d-hook".into())],
            ..NewEvent::default()
        }
    }

    async fn round_trip(s: &Store) {
        let a = s.outbox_enqueue(&event("task.done", r#"{"title":"a"}"#)).await.unwrap();
        let b = s.outbox_enqueue(&event("budget.exceeded", r#"{"title":"b"}"#)).await.unwrap();
        s.outbox_delivered(a, "push").await.unwrap();
        s.outbox_dead(a, "webhook:http://x/", "connection refused").await.unwrap();
        s.outbox_attempt_failed(b, "push", "timed out", 5).await.unwrap();

        let all = s.outbox_recent(&EventFilter::default(), 10).await.unwrap();
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), vec![b, a]);
        let first = &all[1];
        assert_eq!((first.kind.as_str(), first.origin.as_deref()), ("task.done", Some("master")));
        let states: Vec<_> = first.deliveries.iter().map(|d| (d.destination.as_str(), d.state)).collect();
        assert_eq!(states, vec![("push", DeliveryState::Delivered), ("webhook:http://x/", DeliveryState::Dead)]);
        assert_eq!(first.deliveries[1].last_error.as_deref(), Some("connection refused"));
        assert_eq!(all[0].deliveries[0].attempts, 1);

        let dead = EventFilter { state: Some(DeliveryState::Dead), ..Default::default() };
        assert_eq!(s.outbox_recent(&dead, 10).await.unwrap().iter().map(|e| e.id).collect::<Vec<_>>(), vec![a]);
        let kind = EventFilter { kind: Some("budget.exceeded".into()), ..Default::default() };
        assert_eq!(s.outbox_recent(&kind, 10).await.unwrap().iter().map(|e| e.id).collect::<Vec<_>>(), vec![b]);
        assert_eq!(s.outbox_recent(&EventFilter::default(), 1).await.unwrap().len(), 1);

        let dests = s.outbox_destinations().await.unwrap();
        assert_eq!(dests.len(), 2);
        assert_eq!((dests[0].destination.as_str(), dests[0].pending, dests[0].delivered), ("push", 1, 1));
        assert!(dests[0].oldest_pending_ms.is_some());
        assert_eq!((dests[1].pending, dests[1].dead, dests[1].delivered), (1, 1, 0));

        assert!(s.outbox_redeliver(a, Some("push")).await.unwrap().is_empty(), "a delivered row stays delivered");
        assert!(s.outbox_redeliver(b, None).await.unwrap().is_empty(), "a pending row is not dead");
        assert_eq!(s.outbox_redeliver(a, None).await.unwrap(), vec!["webhook:http://x/".to_string()]);
        let pending = s.outbox_pending("webhook:http://x/", 10).await.unwrap();
        assert_eq!(
            pending.iter().map(|p| (p.id, p.attempts, p.next_attempt_ms)).collect::<Vec<_>>(),
            vec![(a, 0, 0), (b, 0, 0)]
        );
        assert!(s.outbox_redeliver(a, None).await.unwrap().is_empty(), "revived once");
        assert_eq!(DeliveryState::parse("dead"), Some(DeliveryState::Dead));
        assert_eq!(DeliveryState::parse("gone"), None);
    }

    #[tokio::test]
    async fn recent_events_destinations_and_redelivery_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        round_trip(&Store::connect(&url).await.unwrap()).await;
    }

    #[tokio::test]
    async fn recent_events_destinations_and_redelivery_on_postgres() {
        round_trip(&crate::tests::postgres().await.store).await;
    }
}
