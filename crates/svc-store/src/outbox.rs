//! The event outbox: an event is stored with one delivery row per destination before any attempt, and a
//! destination's row is marked delivered only after it succeeded, so a crash or an outage loses nothing
//! (at-least-once). Destinations are names such as `push`, `webhook:<redacted url>`, `hooks`. Each event keeps
//! who posted it (`origin`) beside its envelope.

use crate::{now_ms, Store, StoreError};
use sqlx::Row;

/// One pending delivery of an event to a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// Outbox id (emission order).
    pub id: i64,
    /// The envelope JSON, byte for byte as emitted.
    pub envelope: String,
    /// The event kind.
    pub kind: String,
    /// Push title override.
    pub title: Option<String>,
    /// Push priority override.
    pub priority: Option<String>,
    /// Who posted it (`gateway`, `master`, `key:<id>`, `svc-notify`); `None` for events stored before it was
    /// recorded.
    pub origin: Option<String>,
    /// Stable id of this (event, destination) delivery, the same across retries.
    pub delivery_id: String,
    /// Failed attempts so far.
    pub attempts: i64,
    /// Not before this time (Unix ms; 0 = now).
    pub next_attempt_ms: i64,
}

/// A new event to store.
#[derive(Debug, Clone, Default)]
pub struct NewEvent<'a> {
    /// Kind.
    pub kind: &'a str,
    /// Envelope JSON.
    pub envelope: &'a str,
    /// Push title override.
    pub title: Option<&'a str>,
    /// Push priority override.
    pub priority: Option<&'a str>,
    /// Who posted it.
    pub origin: Option<&'a str>,
    /// (destination, delivery id) pairs.
    pub deliveries: Vec<(String, String)>,
}

/// Counts of outbox deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Not yet delivered nor given up.
    pub pending: i64,
    /// Delivered.
    pub delivered: i64,
    /// Given up (permanent failure).
    pub failed: i64,
}

impl Store {
    /// Stores an event and its deliveries atomically; returns its outbox id.
    pub async fn outbox_enqueue(&self, e: &NewEvent<'_>) -> Result<i64, StoreError> {
        Ok(self.outbox_enqueue_many(std::slice::from_ref(e)).await?.first().copied().unwrap_or_default())
    }

    /// Stores several events in one transaction (group commit); returns their ids, in order. Two multi-row
    /// INSERTs per chunk of events (the events, then all their deliveries), not one statement per row: each
    /// statement is a round trip to the database (for SQLite, to its connection's thread).
    pub async fn outbox_enqueue_many(&self, events: &[NewEvent<'_>]) -> Result<Vec<i64>, StoreError> {
        // 6 parameters an event (1,536 a statement) and 3 a delivery row (8,192 rows, 24,576 a statement): under
        // SQLite's 32,766 and PostgreSQL's 65,535 bind parameters.
        const EVENTS: usize = 256;
        const DELIVERIES: usize = 8192;
        self.restart_wal_if_due().await;
        let now = now_ms();
        let mut tx = self.writer().begin().await?;
        let mut ids = Vec::with_capacity(events.len());
        for chunk in events.chunks(EVENTS) {
            let mut sql =
                String::from("INSERT INTO outbox (created_ms, kind, envelope, title, priority, origin) VALUES ");
            crate::push_values(&mut sql, self.backend(), chunk.len(), 6);
            sql.push_str(" RETURNING id");
            let mut q = sqlx::query(&sql);
            for e in chunk {
                q = q.bind(now).bind(e.kind).bind(e.envelope).bind(e.title).bind(e.priority).bind(e.origin);
            }
            let mut chunk_ids =
                q.fetch_all(&mut *tx).await?.iter().map(|r| r.try_get::<i64, _>(0)).collect::<Result<Vec<_>, _>>()?;
            // RETURNING gives no row order, but ids are assigned in VALUES order (SQLite's single writer takes
            // max+1 row by row; a PostgreSQL sequence only grows), so the sorted ids are the events' in order.
            chunk_ids.sort_unstable();
            if chunk_ids.len() != chunk.len() {
                return Err(StoreError::Batch(format!(
                    "{} events stored, {} ids returned",
                    chunk.len(),
                    chunk_ids.len()
                )));
            }
            let deliveries: Vec<(i64, &str, &str)> = chunk
                .iter()
                .zip(&chunk_ids)
                .flat_map(|(e, id)| e.deliveries.iter().map(move |(d, did)| (*id, d.as_str(), did.as_str())))
                .collect();
            for part in deliveries.chunks(DELIVERIES) {
                let mut sql = String::from("INSERT INTO outbox_delivery (outbox_id, destination, delivery_id) VALUES ");
                crate::push_values(&mut sql, self.backend(), part.len(), 3);
                let mut q = sqlx::query(&sql);
                for (id, dest, did) in part {
                    q = q.bind(*id).bind(*dest).bind(*did);
                }
                q.execute(&mut *tx).await?;
            }
            ids.extend(chunk_ids);
        }
        tx.commit().await?;
        Ok(ids)
    }

    /// The oldest undelivered, not given-up items of a destination, in emission order (whatever their next
    /// attempt time: the worker waits for the head itself, so order per destination holds).
    pub async fn outbox_pending(&self, destination: &str, limit: i64) -> Result<Vec<OutboxItem>, StoreError> {
        let rows = sqlx::query(
            "SELECT o.id, o.envelope, o.kind, o.title, o.priority, o.origin, d.delivery_id, d.attempts, d.next_attempt_ms \
             FROM outbox_delivery d JOIN outbox o ON o.id = d.outbox_id \
             WHERE d.destination = $1 AND d.delivered_ms IS NULL AND d.failed_ms IS NULL ORDER BY o.id LIMIT $2",
        )
        .bind(destination)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(OutboxItem {
                    id: r.try_get(0)?,
                    envelope: r.try_get(1)?,
                    kind: r.try_get(2)?,
                    title: r.try_get(3)?,
                    priority: r.try_get(4)?,
                    origin: r.try_get(5)?,
                    delivery_id: r.try_get(6)?,
                    attempts: r.try_get(7)?,
                    next_attempt_ms: r.try_get(8)?,
                })
            })
            .collect()
    }

    /// Moves the undelivered, not given-up rows of destination `from` to destination `to` (a destination was
    /// renamed); returns how many moved. Rows already delivered or dead keep their old name, as history.
    pub async fn outbox_rename_destination(&self, from: &str, to: &str) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE outbox_delivery SET destination = $2 \
             WHERE destination = $1 AND delivered_ms IS NULL AND failed_ms IS NULL",
        )
        .bind(from)
        .bind(to)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected())
    }

    /// Marks a delivery done.
    pub async fn outbox_delivered(&self, id: i64, destination: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox_delivery SET delivered_ms = $3 WHERE outbox_id = $1 AND destination = $2")
            .bind(id)
            .bind(destination)
            .bind(now_ms())
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// Marks several deliveries of a destination done, in one statement.
    pub async fn outbox_delivered_many(&self, ids: &[i64], destination: &str) -> Result<(), StoreError> {
        let now = now_ms();
        for chunk in ids.chunks(4096) {
            let mut sql = String::from("UPDATE outbox_delivery SET delivered_ms = ");
            crate::push_params(&mut sql, self.backend(), 1, 1);
            sql.push_str(" WHERE destination = ");
            crate::push_params(&mut sql, self.backend(), 2, 1);
            sql.push_str(" AND outbox_id IN (");
            crate::push_params(&mut sql, self.backend(), 3, chunk.len());
            sql.push(')');
            let mut q = sqlx::query(&sql).bind(now).bind(destination);
            for id in chunk {
                q = q.bind(*id);
            }
            q.execute(self.writer()).await?;
        }
        Ok(())
    }

    /// Records a failed attempt to retry not before `next_attempt_ms`.
    pub async fn outbox_attempt_failed(
        &self,
        id: i64,
        destination: &str,
        error: &str,
        next_attempt_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_delivery SET attempts = attempts + 1, last_error = $3, next_attempt_ms = $4 \
             WHERE outbox_id = $1 AND destination = $2",
        )
        .bind(id)
        .bind(destination)
        .bind(error)
        .bind(next_attempt_ms)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// Gives up on a delivery (permanent failure); the row stays for inspection.
    pub async fn outbox_dead(&self, id: i64, destination: &str, error: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_delivery SET attempts = attempts + 1, last_error = $3, failed_ms = $4 \
             WHERE outbox_id = $1 AND destination = $2",
        )
        .bind(id)
        .bind(destination)
        .bind(error)
        .bind(now_ms())
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// Delivery counts for a destination (all destinations when `None`): the sums of
    /// [`Store::outbox_destinations`].
    pub async fn outbox_stats(&self, destination: Option<&str>) -> Result<OutboxStats, StoreError> {
        let mut stats = OutboxStats::default();
        for d in self.outbox_destinations().await? {
            if destination.is_none_or(|name| name == d.destination) {
                stats.pending += d.pending;
                stats.delivered += d.delivered;
                stats.failed += d.dead;
            }
        }
        Ok(stats)
    }

    /// Per destination with deliveries not made: how many are pending, how many dead, and when the oldest
    /// pending event was stored (Unix ms). Reads only undelivered rows (the pending index's prefix).
    pub async fn outbox_backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        let rows = sqlx::query(
            "SELECT d.destination, \
             CAST(SUM(CASE WHEN d.failed_ms IS NULL THEN 1 ELSE 0 END) AS BIGINT), \
             CAST(SUM(CASE WHEN d.failed_ms IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT), \
             MIN(CASE WHEN d.failed_ms IS NULL THEN o.created_ms END) \
             FROM outbox_delivery d JOIN outbox o ON o.id = d.outbox_id \
             WHERE d.delivered_ms IS NULL GROUP BY d.destination ORDER BY d.destination",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Backlog {
                    destination: r.try_get(0)?,
                    pending: r.try_get(1)?,
                    dead: r.try_get(2)?,
                    oldest_pending_ms: r.try_get(3)?,
                })
            })
            .collect()
    }
}

/// The undelivered rows of one destination ([`Store::outbox_backlog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    /// The destination.
    pub destination: String,
    /// Deliveries still to be made.
    pub pending: i64,
    /// Deliveries given up.
    pub dead: i64,
    /// When the oldest pending event was stored (Unix ms); `None` when none is pending.
    pub oldest_pending_ms: Option<i64>,
}

impl Store {
    /// Claims the shared outbox `destination` for `holder` until `until_ms`, or renews `holder`'s claim; true
    /// when `holder` holds it. A claim another holder let lapse (`expires_ms` before `now_ms`) is taken over.
    pub async fn outbox_claim(
        &self,
        destination: &str,
        holder: &str,
        until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "INSERT INTO outbox_leases (destination, node, expires_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (destination) DO UPDATE SET node = $2, expires_ms = $3 \
             WHERE outbox_leases.node = $2 OR outbox_leases.expires_ms < $4 RETURNING node",
        )
        .bind(destination)
        .bind(holder)
        .bind(until_ms)
        .bind(now_ms)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.is_some())
    }

    /// Gives `holder`'s claim on `destination` up.
    pub async fn outbox_release(&self, destination: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox_leases WHERE destination = $1 AND node = $2")
            .bind(destination)
            .bind(holder)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}
