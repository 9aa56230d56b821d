//! The durable state of svc behind one [`Store`]: virtual keys, teams (mirrored from the config), spend
//! records, budget notices and the event outbox.
//!
//! One SQL dialect serves both backends: sqlx's `Any` driver with `$n` parameters, which SQLite and
//! PostgreSQL both accept, and one migration folder per backend (`migrations/sqlite`, `migrations/postgres`)
//! that differ only in how an auto-increment id is spelled. (One exception: the multi-row statements of the
//! steady writes give SQLite positional `?`, see `push_values`.) SQLite's WAL upkeep is in `wal.rs`. Times are
//! Unix milliseconds, money is integer nano-units ([`svc_budget::Money`]).
//!
//! What this crate does not do: hash or generate keys, decide who may do what, or compute budget periods.

mod file;
mod fleet;
pub mod journal;
pub mod json_text;
mod keys;
mod leases;
mod meta;
mod outbox;
mod outbox_admin;
mod spend;
mod standing;
mod teams;
mod wal;

pub use file::sqlite_path;
pub use fleet::{Beat, NodeRow, NodeState, Registration, Report};
pub use keys::{KeyChanges, KeyRow};
pub use leases::{BudgetNotice, BudgetNotices, Charge, ChargedRecord, Exposure, LeaseAsk, LeaseGrant, PeriodRow};
pub use outbox::{Backlog, NewEvent, OutboxItem, OutboxStats};
pub use outbox_admin::{DeliveryRow, DeliveryState, DestinationStats, EventFilter, EventRow};
pub use spend::{ResponseOwner, SpendFilter, SpendGroup, SpendRecord, SpendTotal, MAX_RECORD_COST, MAX_RECORD_TOKENS};
pub use standing::Standing;
pub use teams::TeamRow;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor};
use std::str::FromStr;
use std::time::Duration;

/// How long an SQLite connection waits for a lock another connection (or process) holds.
pub(crate) const BUSY_TIMEOUT_MS: u64 = 10_000;

/// The store: a pool of connections to SQLite (embedded) or PostgreSQL (fleet).
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    /// The steady writes (spend records, outbox events and their delivery marks). On SQLite a pool of its own
    /// with one connection: only one connection writes at a time anyway, and a connection that sees another
    /// connection's commit throws its whole page cache away at its next transaction, so a writer that shares
    /// a rotating pool re-reads its pages from the file on almost every commit (about 100 µs a commit at one
    /// request at a time). The same pool as `pool` on PostgreSQL.
    writer: AnyPool,
    backend: Backend,
    /// WAL upkeep (SQLite only).
    wal: Option<std::sync::Arc<wal::Wal>>,
    /// The URL, for the connections a pool cannot give (PostgreSQL `LISTEN`); `None` on SQLite.
    pg_url: Option<std::sync::Arc<str>>,
    /// The database file (SQLite on a file only).
    sqlite_file: Option<std::sync::Arc<std::path::Path>>,
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
    /// No answer within the time the caller gave the store (milliseconds): the call was abandoned.
    #[error("no answer from the store within {0} ms")]
    Timeout(u128),
    /// A fleet operation (budget leases, fleet rate buckets) on SQLite, which serves one node only.
    #[error("this needs a PostgreSQL store (fleet mode)")]
    FleetOnly,
    /// A stored value could not be decoded.
    #[error("corrupt stored value in {0}")]
    Corrupt(&'static str),
    /// The SQLite database file could not be created.
    #[error("cannot create the database file `{}`: {source}", path.display())]
    Create {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Store {
    /// Opens (creating when needed, readable by its owner only) the database at `url` and applies migrations.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_string()));
        };
        if backend == Backend::Sqlite {
            file::prepare(url).await?;
        }
        let sqlite_file = file::sqlite_path(url).map(std::sync::Arc::from);
        let url = match backend {
            Backend::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}mode=rwc")
            }
            _ => url.to_string(),
        };
        let options = AnyConnectOptions::from_str(&url)?;
        let pool_options = move |max: u32| {
            AnyPoolOptions::new()
                .max_connections(max)
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
                            // page_size=16384 (it only takes effect when the file is created; an existing file
                            // keeps its pages): spend records reach the store in batches (the spend writer gathers
                            // them for up to 1 s, 50 ms in a fleet), appended at the right edge of the table and of
                            // its indexes. Larger pages split less often and take fewer WAL frames (two writes each,
                            // and one more when checkpointed) for the same records: at c=64, 0.25 `pwrite`s and
                            // 0.025 `pread`s a request with 16 KiB pages against 0.50 and 0.10 with 4 KiB, and
                            // SQLite's instructions 2,000 a request fewer (1 KiB pages were dearer still:
                            // BENCHMARKS.md). 32 and 64 KiB saved little more (0.20, 0.17 `pwrite`s).
                            // cache_size=-1024: 1 MiB of page cache per connection (SQLite's default is 2), plenty
                            // for appends and the indexed spend queries, and 4 MiB less resident memory.
                            conn.execute(
                                format!(
                                    "PRAGMA page_size=16384; PRAGMA cache_size=-1024; PRAGMA journal_mode=WAL; \
                                     PRAGMA synchronous=NORMAL; PRAGMA busy_timeout={BUSY_TIMEOUT_MS}; \
                                     PRAGMA foreign_keys=ON; PRAGMA wal_autocheckpoint=0;"
                                )
                                .as_str(),
                            )
                            .await?;
                        }
                        Ok(())
                    })
                })
        };
        // On SQLite, two connections for reads, the checkpointer and rare writes, and the writer's own one
        // (see `writer`). Each is a thread with its own malloc arena (~3 MiB).
        let pool = pool_options(if backend == Backend::Sqlite { 2 } else { 16 }).connect_with(options.clone()).await?;
        let (writer, wal) = match backend {
            Backend::Sqlite => {
                migrate(sqlx::migrate!("./migrations/sqlite"), &pool).await?;
                let writer = pool_options(1).connect_with(options).await?;
                let wal = std::sync::Arc::new(wal::Wal::default());
                wal.spawn_checkpointer(pool.clone());
                (writer, Some(wal))
            }
            Backend::Postgres => {
                migrate(sqlx::migrate!("./migrations/postgres"), &pool).await?;
                (pool.clone(), None)
            }
        };
        let pg_url = (backend == Backend::Postgres).then(|| std::sync::Arc::from(url.as_str()));
        Ok(Store { pool, writer, backend, wal, pg_url, sqlite_file })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The SQLite database's file (`None` for PostgreSQL and an in-memory database).
    pub fn sqlite_file(&self) -> Option<&std::path::Path> {
        self.sqlite_file.as_deref()
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes the pools, waiting for connections to finish.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The PostgreSQL URL (`None` on SQLite).
    pub(crate) fn url(&self) -> Option<&str> {
        self.pg_url.as_deref()
    }

    /// The pool of the steady writes (see the field's docs).
    pub(crate) fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// Before a steady writer's batch: the WAL restart, when one is due (SQLite; see `wal.rs`).
    pub(crate) async fn restart_wal_if_due(&self) {
        if let Some(wal) = &self.wal {
            wal.restart_if_due(&self.writer).await;
        }
    }
}

/// Now, in Unix milliseconds (from the system clock: a calendar date is not made for it; before 1970, 0).
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// Appends `rows` parenthesised groups of `cols` bind parameters, comma-separated, to `sql` (a VALUES list),
/// numbered from `$1` on PostgreSQL.
pub(crate) fn push_values(sql: &mut String, backend: Backend, rows: usize, cols: usize) {
    for i in 0..rows {
        sql.push_str(if i > 0 { ",(" } else { "(" });
        push_params(sql, backend, i * cols + 1, cols);
        sql.push(')');
    }
}

/// Appends `n` comma-separated bind parameters to `sql`, numbered from `$first` on PostgreSQL and positional
/// `?` on SQLite: SQLite looks a numbered parameter's name up by a linear scan, once per parameter, so
/// thousands of `$N` in one statement make its preparation quadratic.
pub(crate) fn push_params(sql: &mut String, backend: Backend, first: usize, n: usize) {
    use std::fmt::Write as _;
    for k in 0..n {
        if k > 0 {
            sql.push(',');
        }
        match backend {
            Backend::Sqlite => sql.push('?'),
            Backend::Postgres => {
                // Writing to a String cannot fail.
                let _ = write!(sql, "${}", first + k);
            }
        }
    }
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

/// Runs the migrations this binary knows that the store has not had yet (each in its own transaction, so a
/// failed one leaves the store as it was). Migrations only add (tables, columns with defaults, indexes), so a
/// store that a newer svc migrated further still serves this one: during a rolling upgrade an older node keeps
/// working, and says so once at start.
async fn migrate(mut migrator: sqlx::migrate::Migrator, pool: &sqlx::AnyPool) -> Result<(), StoreError> {
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success").fetch_one(pool).await?;
    if let Some(newest) = applied.filter(|v| *v > known) {
        tracing::warn!(
            store = newest,
            binary = known,
            "the store was migrated by a newer svc (its migration {newest}; this binary knows up to {known}): \
             it keeps working, as in a rolling upgrade; run the newer version on every node"
        );
    }
    Ok(())
}
