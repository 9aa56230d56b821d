//! The durable state of svc behind one [`Store`]: virtual keys, teams (mirrored from the config), spend
//! records, budget notices and the event outbox.
//!
//! One SQL dialect serves both backends: sqlx's `Any` driver with `$n` parameters, which SQLite and
//! PostgreSQL both accept, and one migration folder per backend (`migrations/sqlite`, `migrations/postgres`)
//! that differ only in how an auto-increment id is spelled. Times are Unix milliseconds, money is integer
//! nano-units ([`svc_budget::Money`]).
//!
//! What this crate does not do: hash or generate keys, decide who may do what, or compute budget periods.

mod keys;
mod meta;
mod outbox;
mod spend;
mod teams;

pub use keys::KeyRow;
pub use outbox::{NewEvent, OutboxItem, OutboxStats};
pub use spend::{SpendFilter, SpendRecord, SpendTotal};
pub use teams::TeamRow;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};
use std::str::FromStr;
use std::time::Duration;

/// The store: a pool of connections to SQLite (embedded) or PostgreSQL (fleet).
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
}

/// Which database a [`Store`] talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// An SQLite file in WAL mode.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// A store operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL is neither `sqlite:` nor `postgres:`.
    #[error("unsupported database url `{0}`: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// The database refused or failed.
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    /// Migrations could not be applied.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A unique value (such as a key alias) is already taken.
    #[error("{0} already exists")]
    Conflict(String),
    /// A write batched with others failed (the batch's error, as text).
    #[error("batched write failed: {0}")]
    Batch(String),
    /// A stored value could not be decoded.
    #[error("corrupt stored value in {0}")]
    Corrupt(&'static str),
}

impl Store {
    /// Opens (creating when needed) the database at `url` and applies migrations.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        };
        let url = match backend {
            Backend::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_string(),
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 4 } else { 16 })
            .acquire_timeout(Duration::from_secs(10))
            // A pinged connection on every acquire is a round trip per transaction; SQLite is in-process and a
            // broken PostgreSQL connection fails its query anyway.
            .test_before_acquire(false)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        // WAL lets readers run beside the single writer; synchronous=NORMAL in WAL mode keeps
                        // every committed transaction across a process crash (kill -9), losing at most the
                        // last ones on power loss. busy_timeout makes the CLI and a running server share the
                        // file instead of failing with SQLITE_BUSY.
                        // wal_autocheckpoint=0: a commit never runs the checkpoint (and its fsync) itself; the
                        // checkpointer task below does it in the background.
                        conn.execute(
                            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000; \
                             PRAGMA foreign_keys=ON; PRAGMA wal_autocheckpoint=0;",
                        )
                        .await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        match backend {
            Backend::Sqlite => {
                sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
                spawn_checkpointer(pool.clone());
            }
            Backend::Postgres => sqlx::migrate!("./migrations/postgres").run(&pool).await?,
        }
        Ok(Store { pool, backend })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes the pool, waiting for connections to finish.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }
}

/// A WAL longer than this many pages (4 KiB each: 32 MiB) after a passive checkpoint is reset by a TRUNCATE one.
const WAL_RESET_FRAMES: i64 = 8192;

/// Checkpoints the SQLite WAL once a second in the background, so request commits do not pay for it; ends when
/// the pool is closed.
///
/// A PASSIVE checkpoint never blocks writers, but it cannot reset the WAL while they keep appending: under
/// sustained load the WAL would grow without bound (over a GiB a minute at peak), and every lookup in it gets
/// slower. So when the WAL is still longer than [`WAL_RESET_FRAMES`] after the passive pass (which has already
/// copied almost everything), a TRUNCATE checkpoint copies the rest and empties the file, holding writers back
/// for that short moment (they wait through `busy_timeout`).
fn spawn_checkpointer(pool: AnyPool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if pool.is_closed() {
                return;
            }
            if let Err(e) = checkpoint_round(&pool, WAL_RESET_FRAMES).await {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(error = %e, "WAL checkpoint failed");
            }
        }
    });
}

/// One round of the checkpointer: PASSIVE, then TRUNCATE when the WAL is still longer than `reset_frames`.
pub(crate) async fn checkpoint_round(pool: &AnyPool, reset_frames: i64) -> Result<(), sqlx::Error> {
    if checkpoint(pool, "PASSIVE").await? > reset_frames {
        checkpoint(pool, "TRUNCATE").await?;
    }
    Ok(())
}

/// Runs one checkpoint of `mode`; returns the WAL's length in pages.
async fn checkpoint(pool: &AnyPool, mode: &str) -> Result<i64, sqlx::Error> {
    let (_busy, log, _done): (i64, i64, i64) =
        sqlx::query_as(&format!("PRAGMA wal_checkpoint({mode})")).fetch_one(pool).await?;
    Ok(log)
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Maps a unique-constraint violation to [`StoreError::Conflict`].
pub(crate) fn conflict(e: sqlx::Error, what: &str) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(what.to_string()),
        _ => StoreError::Db(e),
    }
}

#[cfg(test)]
mod tests;
