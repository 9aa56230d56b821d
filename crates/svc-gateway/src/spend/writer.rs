//! The spend writer: svc-events' group-commit writer ([`GroupCommit`]) over the spend log, with the node's journal
//! in front of it.
//!
//! - With a journal (a SQLite file, or a fleet on PostgreSQL): the record is appended to the node's local
//!   [`Journal`](svc_store::journal::Journal) on the request's thread, which makes it durable, and the request goes
//!   on. The writer gathers records for up to [`LINGER`] in a fleet, [`LINGER_SINGLE`] on a single node (or
//!   [`LINGER_BATCH`] records), and writes them in one transaction (one round trip), idempotently; in a fleet it
//!   charges each to its budgets' leases and reports the node's exposure in those budgets with them
//!   (`Budgets::write_spend`). A request waits for the store only when the journal refuses the append
//!   (disk full).
//! - Without one (an in-memory SQLite store): the request waits for the group commit (its record and every
//!   other already queued written in one transaction).
//!
//! Readers that must see every answered request (`/spend/logs`, the spend reports) call [`SpendWriter::flush`]
//! first: it returns once everything queued before it is in the store.
//!
//! A batch the store refuses (disk full, database down) is not forgotten: its requests are answered all the
//! same, and its records are kept and written again, oldest first, after a backoff (100 ms doubling to 30 s),
//! or as soon as a new batch gets through, until the store takes them.

use std::sync::Arc;
use std::time::Duration;
use svc_budget::Money;
use svc_events::group_commit::{Batches, GroupCommit, KeepPolicy, Options};
use svc_events::RetryPolicy;
use svc_limits::budgets::Budgets;
use svc_store::journal::Journal;
use svc_store::{ChargedRecord, Store, StoreError};
use tokio_util::task::TaskTracker;

const MAX_BATCH: usize = 512;
const QUEUE: usize = 8192;
/// Fleet mode: records wait this long for company before they are written (nobody waits for them; the leases
/// they are charged to are the fleet's shared view of the budgets, so they go soon).
pub const LINGER: Duration = Duration::from_millis(50);
/// A single node: records wait this long for company. Nobody reads the store without flushing the writer first
/// but `svc spend`, and every commit costs its WAL frames (a page of the table and of each index) whatever it
/// holds: at 10 requests a second, 50 ms made every record a commit of its own (LiteLLM batches its spend writes
/// every 10 s by default).
pub const LINGER_SINGLE: Duration = Duration::from_secs(1);
/// Journaled writers: ... or until this many are waiting; and a batch takes at most this many. A power of two, so
/// a full batch is one INSERT statement (the store's are of 2^k rows): a transaction of several statements makes
/// SQLite keep a statement journal for all but the first, spilled to a temporary file past 64 KiB (batches of
/// 257 to 280 records cost 6 µs of CPU a request at peak, measured).
pub const LINGER_BATCH: usize = 256;

/// Records the store refused are kept (100,000 at most: about 25 MiB) and written again after 100 ms doubling to
/// 30 s, no jitter (one writer: nothing to spread out).
pub(crate) const KEEP: KeepPolicy = KeepPolicy {
    retry: RetryPolicy {
        min_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(30),
        factor: 2.0,
        max_retry_after: Duration::from_secs(30),
        jitter: false,
    },
    max_kept: 100_000,
};

/// Where records go, and who hears that they are written.
struct Target {
    store: Store,
    /// The journal whose segments empty.
    journal: Option<Arc<Journal>>,
    /// Fleet mode: the budgets whose unwritten spend shrinks (records are charged to their leases).
    leases: Option<Arc<Budgets>>,
}

impl Batches for Target {
    type Item = ChargedRecord;
    /// The journal segment holding the record (none: not journaled).
    type Tag = Option<u64>;
    type Answer = ();
    const WHAT: &'static str = "spend records";

    async fn write(&self, records: &[ChargedRecord]) -> Result<Vec<()>, StoreError> {
        match &self.leases {
            None => self.store.insert_spend_batch(records).await?,
            Some(budgets) => budgets.write_spend(records).await.map(|_| ())?,
        }
        Ok(vec![(); records.len()])
    }

    fn written(&self, records: &[ChargedRecord], seqs: &[Option<u64>]) {
        if let Some(budgets) = &self.leases {
            for r in records {
                budgets.written(&r.charges, Money::from_nanos(r.record.cost));
            }
        }
        if let Some(journal) = &self.journal {
            // Consecutive records of one segment are reported together.
            let mut run: Option<(u64, u64)> = None;
            for seq in seqs.iter().flatten() {
                match &mut run {
                    Some((s, n)) if s == seq => *n += 1,
                    _ => {
                        if let Some((s, n)) = run {
                            journal.written(s, n);
                        }
                        run = Some((*seq, 1));
                    }
                }
            }
            if let Some((s, n)) = run {
                journal.written(s, n);
            }
        }
    }

    /// An emptied journal is deleted.
    fn closed(&self) {
        if let Some(journal) = &self.journal {
            journal.close();
        }
    }
}

/// How far [`SpendWriter::try_record`] went.
#[derive(Debug)]
pub enum Recorded {
    /// Journaled and queued (true), or journaled with the writer gone (false: logged; the journal holds the
    /// record for the next start to write).
    Done(bool),
    /// The record waits: for a place in the queue, or for the store ([`SpendWriter::wait`]). Boxed: seldom made.
    Wait(Box<Wait>),
}

/// A record [`SpendWriter::try_record`] could not finish without waiting.
#[derive(Debug)]
pub struct Wait {
    record: ChargedRecord,
    /// Its journal segment, when it was journaled.
    seq: Option<u64>,
}

/// Handle to the spend writer task.
#[derive(Clone, Debug)]
pub struct SpendWriter {
    commit: GroupCommit<Target>,
    journal: Option<Arc<Journal>>,
}

impl SpendWriter {
    /// Starts the group-commit writer of a store without a journal on `tasks`; it ends when every handle is
    /// dropped and the queue is drained.
    pub fn start(store: Store, tasks: &TaskTracker) -> SpendWriter {
        Self::start_with(store, tasks, KEEP)
    }

    pub(crate) fn start_with(store: Store, tasks: &TaskTracker, keep: KeepPolicy) -> SpendWriter {
        let options = Options { queue: QUEUE, max_batch: MAX_BATCH, linger: None, keep: Some(keep) };
        let commit = GroupCommit::start(Target { store, journal: None, leases: None }, options, tasks);
        SpendWriter { commit, journal: None }
    }

    /// Starts the journaled writer on `tasks`: a single node's (`leases` none) or a fleet node's.
    pub fn start_journaled(
        store: Store,
        tasks: &TaskTracker,
        journal: Arc<Journal>,
        leases: Option<Arc<Budgets>>,
    ) -> SpendWriter {
        let linger = if leases.is_some() { LINGER } else { LINGER_SINGLE };
        // A journaled batch is at most one full statement.
        let options = Options { queue: QUEUE, max_batch: LINGER_BATCH, linger: Some(linger), keep: Some(KEEP) };
        let target = Target { store, journal: Some(journal.clone()), leases };
        SpendWriter { commit: GroupCommit::start(target, options, tasks), journal: Some(journal) }
    }

    /// Returns once every record queued before the call is in the store (or was refused by it: then false).
    pub async fn flush(&self) -> bool {
        self.commit.flush(None).await
    }

    /// Makes a record durable: without a journal, queues it and waits until it is committed; with one, appends
    /// it to the journal and queues it (waiting for the store only when the journal refuses it).
    /// Returns false when it could not be made durable yet (the failure is logged, the writer keeps the record
    /// and tries again; the client still gets the answer it paid for).
    pub async fn record(&self, record: ChargedRecord) -> bool {
        match self.try_record(record) {
            Recorded::Done(durable) => durable,
            Recorded::Wait(wait) => self.wait(wait).await,
        }
    }

    /// [`SpendWriter::record`] as far as it goes without waiting: journaled and queued ([`Recorded::Done`]), or
    /// what is left to wait for ([`Recorded::Wait`], given to [`SpendWriter::wait`]). A request settles without a
    /// future for the wait it seldom has (the record and the queue's send held in it would make each request's
    /// future kilobytes larger, copied whole when it moves).
    pub fn try_record(&self, record: ChargedRecord) -> Recorded {
        if let Some(journal) = &self.journal {
            match journal.append(&record) {
                Ok(seq) => {
                    return match self.commit.try_queue_item(record, Some(seq)) {
                        Ok(queued) => Recorded::Done(queued),
                        Err((record, seq)) => Recorded::Wait(Box::new(Wait { record, seq })),
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot append to the spend journal; this request waits for the store")
                }
            }
        }
        Recorded::Wait(Box::new(Wait { record, seq: None }))
    }

    /// The rest of [`SpendWriter::record`]: journaled, waits for a place in the queue (it is full only when the
    /// store is far behind: requests slow down instead of memory growing); not journaled, waits for the commit.
    pub async fn wait(&self, wait: Box<Wait>) -> bool {
        let Wait { record, seq } = *wait;
        match seq {
            Some(seq) => self.commit.queue_item(record, Some(seq)).await,
            None => self.commit.write(record, None).await.is_ok(),
        }
    }

    /// Writes what a journal of an earlier run held, in chunks, before anything else is admitted (a fleet's
    /// records charged to their leases).
    pub async fn replay(store: &Store, records: &[ChargedRecord]) -> Result<(), StoreError> {
        for chunk in records.chunks(4096) {
            match store.backend() {
                svc_store::Backend::Postgres => store.write_charged_spend(chunk).await.map(|_| ())?,
                svc_store::Backend::Sqlite => store.insert_spend_batch(chunk).await?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
pub(crate) mod tests {
    use super::*;
    use sqlx::Connection as _;
    use std::time::Instant;
    use svc_store::SpendFilter;

    /// A sample record.
    pub(crate) fn record(id: &str) -> ChargedRecord {
        ChargedRecord { record: spend(id), charges: Vec::new() }
    }

    fn spend(id: &str) -> svc_store::SpendRecord {
        svc_store::SpendRecord {
            record_id: id.into(),
            request_id: id.into(),
            ts_ms: 1,
            key_id: Some("k".into()),
            team_id: Some("t".into()),
            model_alias: "m".into(),
            upstream_model: "u".into(),
            deployment: "d".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cost: 7,
            status: 200,
            latency_ms: 1,
            ..Default::default()
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
        KeepPolicy { retry: KEEP.retry.with_delays(first_delay, first_delay * 4), max_kept }
    }

    #[tokio::test]
    async fn refused_records_are_written_by_the_backoff_when_no_request_comes() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        h.refuse(true).await?;
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, policy(Duration::from_millis(20), 100));
        assert!(!writer.record(record("a")).await);
        // Without a journal a record is durable only once the store has it: the request waits for the commit.
        let Recorded::Wait(wait) = writer.try_record(record("b")) else { anyhow::bail!("no wait without a journal") };
        assert!(!writer.wait(wait).await);
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
        assert!(started.elapsed() >= svc_events::group_commit::SHUTDOWN_GRACE);
        assert_eq!(written(&h.store).await, ["e"]);
        Ok(())
    }

    #[tokio::test]
    async fn a_journaled_single_node_flushes_on_demand_and_leaves_no_journal_after_a_clean_stop() -> anyhow::Result<()>
    {
        let h = Harness::new().await?;
        let journal_dir = tempfile::tempdir()?;
        let (journal, _) = Journal::open(journal_dir.path(), "svc.db", "n")?;
        let journal = Arc::new(journal);
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_journaled(h.store.clone(), &tasks, journal.clone(), None);
        for id in ["a", "b"] {
            assert!(writer.record(record(id)).await, "durable once journaled");
        }
        let at_once = writer.try_record(record("c"));
        assert!(matches!(at_once, Recorded::Done(true)), "journaled and queued without a wait: {at_once:?}");
        let journaled = std::fs::read_dir(journal_dir.path())?.filter_map(Result::ok).count();
        assert_eq!(journaled, 2, "a lock file and the segment holding the records");
        // Records wait up to LINGER_SINGLE for company; a flush writes them at once.
        assert!(writer.flush().await);
        assert_eq!(written(&h.store).await, ["a", "b", "c"]);
        // A clean stop deletes the written segment: nothing is replayed at the next start.
        drop(writer);
        tasks.close();
        assert!(tokio::time::timeout(Duration::from_secs(10), tasks.wait()).await.is_ok());
        drop(journal);
        let (_again, replay) = Journal::open(journal_dir.path(), "svc.db", "n")?;
        assert!(replay.records.is_empty());
        Ok(())
    }
}
