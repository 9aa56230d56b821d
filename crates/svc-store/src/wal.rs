//! SQLite WAL upkeep: checkpoints run in the background, so request commits never pay for them, and the WAL is
//! started over before it grows large.
//!
//! SQLite writes the WAL from its beginning again only when a write transaction begins while every frame in it
//! has been copied back to the database. A PASSIVE checkpoint never blocks writers, but under steady load a
//! commit always lands while it runs, so the WAL would never start over: it would grow without bound (over a
//! GiB a minute at peak) and every page lookup in it would get slower. A RESTART checkpoint starts it over but
//! holds writers back while it finishes, and a writer held back by another connection sleeps in SQLite's busy
//! handler (1, 2, 5 ms…), far longer than the checkpoint itself. So:
//!
//! 1. the checkpointer task runs a PASSIVE checkpoint once a second (it copies almost everything, off the
//!    request path) and, when the WAL is longer than [`RESET_BYTES`], marks a restart as due;
//! 2. the steady writers, the spend writer and the outbox writer, run the due RESTART themselves just before
//!    their next batch ([`crate::Store::insert_spend_batch`], [`crate::Store::outbox_enqueue_many`]): their
//!    own write is not running then, so they rarely wait (at most 5 ms, then the next batch tries again), and
//!    only the frames committed since the passive pass are left to copy.
//!
//! A lock keeps the two checkpoints from running at once (a restart that finds the passive pass running
//! simply waits for the next batch).

use crate::BUSY_TIMEOUT_MS;
use sqlx::{AnyPool, Executor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A WAL longer than this is started over (counted in frames of the file's page size: 4,096 frames of 16 KiB,
/// 16,384 of 4 KiB, 65,536 of 1 KiB on files made by older versions).
const RESET_BYTES: i64 = 64 << 20;

/// How often the passive checkpoint runs (200 ms measured no better at 1,000 requests/s).
const INTERVAL: Duration = Duration::from_secs(1);

/// The WAL's length in frames past which it is started over, for pages of `page_size` bytes (SQLite's default,
/// 4 KiB, when the size read is not one SQLite allows).
fn reset_frames(page_size: i64) -> i64 {
    let page = if (512..=65536).contains(&page_size) { page_size } else { 4096 };
    RESET_BYTES / page
}

/// Checkpoint state of one SQLite store.
#[derive(Debug, Default)]
pub(crate) struct Wal {
    running: tokio::sync::Mutex<()>,
    restart_due: AtomicBool,
}

impl Wal {
    /// Starts the passive checkpointer; it ends when the pool is closed (bare: the store has no task tracker,
    /// and closing the store is what ends it).
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn spawn_checkpointer(self: &Arc<Self>, pool: AnyPool) {
        let wal = self.clone();
        tokio::spawn(async move {
            let page_size = sqlx::query_scalar::<_, i64>("PRAGMA page_size").fetch_one(&pool).await;
            let reset_frames = reset_frames(page_size.unwrap_or(0));
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if pool.is_closed() {
                    return;
                }
                if let Err(e) = wal.passive(&pool, reset_frames).await {
                    if pool.is_closed() {
                        return;
                    }
                    tracing::warn!(error = %e, "WAL checkpoint failed");
                }
            }
        });
    }

    /// One passive checkpoint; marks a restart as due when the WAL is longer than `reset_frames`.
    pub(crate) async fn passive(&self, pool: &AnyPool, reset_frames: i64) -> Result<(), sqlx::Error> {
        let _running = self.running.lock().await;
        let (_busy, frames, _copied) = checkpoint(pool, "PASSIVE").await?;
        if frames > reset_frames {
            self.restart_due.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Runs a due restart (called by the writer before it writes). A RESTART also waits for readers still
    /// using the WAL (another process's long query, say): it gets 5 ms of busy timeout, not the store's [`BUSY_TIMEOUT_MS`], so
    /// it can never hold the writer up for long. Whatever the outcome the mark is cleared; the next passive pass
    /// marks it again while the WAL is still long. Failures are logged.
    pub(crate) async fn restart_if_due(&self, pool: &AnyPool) {
        if !self.restart_due.swap(false, Ordering::Relaxed) {
            return;
        }
        let Ok(_running) = self.running.try_lock() else {
            self.restart_due.store(true, Ordering::Relaxed);
            return;
        };
        let result = async {
            let mut conn = pool.acquire().await?;
            conn.execute("PRAGMA busy_timeout=5").await?;
            let restart: Result<(i64, i64, i64), sqlx::Error> =
                sqlx::query_as("PRAGMA wal_checkpoint(RESTART)").fetch_one(&mut *conn).await;
            if conn.execute(format!("PRAGMA busy_timeout={BUSY_TIMEOUT_MS}").as_str()).await.is_err() {
                // A connection left with 5 ms of patience would fail ordinary writes: it is not handed back.
                conn.close_on_drop();
            }
            restart
        }
        .await;
        match result {
            Ok((0, _, _)) => {}
            Ok(_) => tracing::debug!("WAL restart deferred: a reader or writer still uses the WAL"),
            Err(e) => tracing::warn!(error = %e, "WAL restart failed"),
        }
    }
}

/// Runs one checkpoint of `mode`: (busy, pages in the WAL, pages copied back).
async fn checkpoint(pool: &AnyPool, mode: &str) -> Result<(i64, i64, i64), sqlx::Error> {
    sqlx::query_as(&format!("PRAGMA wal_checkpoint({mode})")).fetch_one(pool).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wal_is_bounded_at_64_mib_whatever_the_page_size() {
        assert_eq!(reset_frames(16384), 4096);
        assert_eq!(reset_frames(4096), 16384);
        assert_eq!(reset_frames(1024), 65536);
        for odd in [0, -1, 100, 1 << 20] {
            assert_eq!(reset_frames(odd), 16384, "{odd}: SQLite's default page size is assumed");
        }
    }
}
