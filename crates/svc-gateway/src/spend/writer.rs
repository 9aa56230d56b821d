//! The spend writer: one task owns the store's spend writes.
//!
//! - With a journal (a SQLite file, or a fleet on PostgreSQL): the record is appended to the node's local
//!   [`Journal`](super::journal::Journal) on the request's thread, which makes it durable, and the request goes
//!   on. The writer gathers records for up to [`LINGER`] in a fleet, [`LINGER_SINGLE`] on a single node (or
//!   [`LINGER_BATCH`] records), and writes them in one transaction (one round trip), idempotently; in a fleet it
//!   charges each to its budgets' leases and reports the node's exposure in those budgets with them
//!   (`Budgets::write_spend`). A request waits for the store only when the journal refuses the append
//!   (disk full).
//! - Without one (an in-memory SQLite store): group commit. The writer takes the first record waiting, then
//!   every other record already queued (up to a batch limit), writes them in one transaction and only then
//!   answers each waiting request.
//!
//! Readers that must see every answered request (`/spend/logs`, the spend reports) call [`SpendWriter::flush`]
//! first: it returns once everything queued before it is in the store.
//!
//! A batch the store refuses (disk full, database down) is not forgotten: its requests are answered all the
//! same, and its records are kept and written again, oldest first, after a backoff (100 ms doubling to 30 s),
//! or as soon as a new batch gets through, until the store takes them.

use super::journal::Journal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::Money;
use svc_events::RetryPolicy;
use svc_limits::budgets::Budgets;
use svc_store::{ChargedRecord, Store, StoreError};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

const MAX_BATCH: usize = 512;
const QUEUE: usize = 8192;
/// Kept records are written again in chunks of this many, oldest first.
const KEPT_CHUNK: usize = 4096;
/// Once the gateway shuts down, kept records get this long (plus the attempt under way) before they are given up.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
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

/// One record on its way to the store (none for a flush), the journal segment it is in, and whoever waits for it.
struct Job {
    record: Option<ChargedRecord>,
    seq: Option<u64>,
    done: Option<oneshot::Sender<bool>>,
}

/// What the writer does with records the store refused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepPolicy {
    /// The waits before writing them again.
    pub retry: RetryPolicy,
    /// Records kept at most; beyond this the oldest are dropped (100,000 records: about 25 MiB).
    pub max_kept: usize,
}

impl KeepPolicy {
    /// 100 ms doubling to 30 s, no jitter (one writer: nothing to spread out).
    const DEFAULT: KeepPolicy = KeepPolicy {
        retry: RetryPolicy {
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(30),
            factor: 2.0,
            max_retry_after: Duration::from_secs(30),
            jitter: false,
        },
        max_kept: 100_000,
    };
}

/// Where records go, and who hears that they are written.
struct Target {
    store: Store,
    /// The journal whose segments empty.
    journal: Option<Arc<Journal>>,
    /// Fleet mode: the budgets whose unwritten spend shrinks (records are charged to their leases).
    leases: Option<Arc<Budgets>>,
}

impl Target {
    async fn write(&self, records: &[ChargedRecord]) -> Result<(), StoreError> {
        match &self.leases {
            None => self.store.insert_spend_batch(records).await,
            Some(budgets) => budgets.write_spend(records).await.map(|_| ()),
        }
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
}

/// Handle to the spend writer task.
#[derive(Clone, Debug)]
pub struct SpendWriter {
    tx: mpsc::Sender<Job>,
    journal: Option<Arc<Journal>>,
}

impl SpendWriter {
    /// Starts the group-commit writer of a store without a journal on `tasks`; it ends when every handle is
    /// dropped and the queue is drained.
    pub fn start(store: Store, tasks: &TaskTracker) -> SpendWriter {
        Self::start_with(store, tasks, KeepPolicy::DEFAULT)
    }

    pub(crate) fn start_with(store: Store, tasks: &TaskTracker, policy: KeepPolicy) -> SpendWriter {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        tasks.spawn(write_loop(Target { store, journal: None, leases: None }, rx, policy, None));
        SpendWriter { tx, journal: None }
    }

    /// Starts the journaled writer on `tasks`: a single node's (`leases` none) or a fleet node's.
    pub fn start_journaled(
        store: Store,
        tasks: &TaskTracker,
        journal: Arc<Journal>,
        leases: Option<Arc<Budgets>>,
    ) -> SpendWriter {
        Self::start_journaled_with(store, tasks, journal, leases, KeepPolicy::DEFAULT)
    }

    pub(crate) fn start_journaled_with(
        store: Store,
        tasks: &TaskTracker,
        journal: Arc<Journal>,
        leases: Option<Arc<Budgets>>,
        policy: KeepPolicy,
    ) -> SpendWriter {
        let (tx, rx) = mpsc::channel::<Job>(QUEUE);
        let linger = if leases.is_some() { LINGER } else { LINGER_SINGLE };
        let target = Target { store, journal: Some(journal.clone()), leases };
        tasks.spawn(write_loop(target, rx, policy, Some(linger)));
        SpendWriter { tx, journal: Some(journal) }
    }

    /// Returns once every record queued before the call is in the store (or was refused by it: then false).
    pub async fn flush(&self) -> bool {
        let (done, waiter) = oneshot::channel();
        if self.tx.send(Job { record: None, seq: None, done: Some(done) }).await.is_err() {
            return false;
        }
        waiter.await.unwrap_or(false)
    }

    /// Makes a record durable: on a single node, queues it and waits until it is committed; in a fleet, appends
    /// it to the journal and queues it (waiting for the store only when the journal refuses it).
    /// Returns false when it could not be made durable yet (the failure is logged, the writer keeps the record
    /// and tries again; the client still gets the answer it paid for).
    pub async fn record(&self, record: ChargedRecord) -> bool {
        let mut seq = None;
        if let Some(journal) = &self.journal {
            match journal.append(&record) {
                Ok(s) => seq = Some(s),
                Err(e) => {
                    tracing::error!(error = %e, "cannot append to the spend journal; this request waits for the store")
                }
            }
        }
        if seq.is_some() {
            let job = Job { record: Some(record), seq, done: None };
            // The queue is full only when the store is far behind: then wait for a place, which slows requests
            // down instead of growing memory.
            return self.queue(job).await;
        }
        let (done, waiter) = oneshot::channel();
        if !self.queue(Job { record: Some(record), seq, done: Some(done) }).await {
            return false;
        }
        waiter.await.unwrap_or(false)
    }

    /// Queues `job`, waiting for a place when the queue is full; false when the writer is gone. The wait is
    /// boxed: held inline, the channel's send future (the job and a semaphore's wait, about 1 KiB) would make
    /// every request's future that much larger, and each request's future is copied whole when it moves.
    async fn queue(&self, job: Job) -> bool {
        match self.tx.try_send(job) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(job)) => Box::pin(self.tx.send(job)).await.is_ok(),
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Writes what a journal of an earlier run held, in chunks, before anything else is admitted (a fleet's
    /// records charged to their leases).
    pub async fn replay(store: &Store, records: &[ChargedRecord]) -> Result<(), StoreError> {
        for chunk in records.chunks(KEPT_CHUNK) {
            match store.backend() {
                svc_store::Backend::Postgres => store.write_charged_spend(chunk).await.map(|_| ())?,
                svc_store::Backend::Sqlite => store.insert_spend_batch(chunk).await?,
            }
        }
        Ok(())
    }
}

/// Gathers more jobs until `linger` passed since the first or the batch is big enough (or someone waits).
async fn gather(rx: &mut mpsc::Receiver<Job>, batch: &mut Vec<Job>, linger: Duration) {
    let deadline = tokio::time::Instant::now() + linger;
    while batch.len() < LINGER_BATCH && batch.iter().all(|j| j.done.is_none()) {
        match tokio::time::timeout_at(deadline, rx.recv_many(batch, LINGER_BATCH - batch.len())).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The writer task: new records written in batches, and the records of refused batches kept until the store
/// takes them. New records are always written on their own, so a backlog never slows a request down.
/// When it ends (every handle dropped, everything written or given up), an emptied journal is deleted.
async fn write_loop(target: Target, rx: mpsc::Receiver<Job>, policy: KeepPolicy, linger: Option<Duration>) {
    write_all(&target, rx, policy, linger).await;
    if let Some(journal) = &target.journal {
        journal.close();
    }
}

async fn write_all(target: &Target, mut rx: mpsc::Receiver<Job>, policy: KeepPolicy, linger: Option<Duration>) {
    // What one batch takes: a journaled writer's is at most one full statement.
    let most = if linger.is_some() { LINGER_BATCH } else { MAX_BATCH };
    let mut batch: Vec<Job> = Vec::with_capacity(most);
    let mut kept = Kept { records: Vec::new(), seqs: Vec::new(), max: policy.max_kept };
    let mut waits = policy.retry.delays();
    let mut retry_at = Instant::now();
    let mut give_up_at: Option<Instant> = None;
    loop {
        if kept.records.is_empty() {
            if give_up_at.is_some() || rx.recv_many(&mut batch, most).await == 0 {
                return;
            }
        } else {
            tokio::select! {
                n = rx.recv_many(&mut batch, most), if give_up_at.is_none() => {
                    if n == 0 {
                        // Shutting down: the kept records get a short last chance.
                        give_up_at = Some(Instant::now() + SHUTDOWN_GRACE);
                        waits = policy.retry.with_delays(Duration::from_millis(100), Duration::from_secs(1)).delays();
                        retry_at = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(retry_at.into()) => {}
            }
        }
        if let (Some(linger), false) = (linger, batch.is_empty()) {
            gather(&mut rx, &mut batch, linger).await;
        }
        if !batch.is_empty() {
            let none_kept = kept.records.is_empty();
            let ok = write_batch(target, &mut batch, &mut kept).await;
            if !ok && none_kept {
                retry_at = Instant::now() + waits.next().unwrap_or(policy.retry.max_delay);
            }
            if ok && !kept.records.is_empty() {
                // The store takes writes again: no need to wait for the timer.
                retry_at = Instant::now();
            }
        }
        if !kept.records.is_empty() && Instant::now() >= retry_at {
            match kept.write(target).await {
                Ok(n) => {
                    tracing::info!(records = n, "spend records kept after a failed write are now written");
                    waits = policy.retry.delays();
                }
                Err(e) => {
                    tracing::warn!(error = %e, records = kept.records.len(), "kept spend records still cannot be written");
                    retry_at = Instant::now() + waits.next().unwrap_or(policy.retry.max_delay);
                    if give_up_at.is_some_and(|at| Instant::now() >= at) {
                        tracing::error!(
                            records = kept.records.len(),
                            "spend records not written at shutdown: the store refused them (a fleet node writes them from its journal at its next start)"
                        );
                        kept.records.clear();
                        kept.seqs.clear();
                    }
                }
            }
        }
    }
}

/// Writes the records of `batch` (emptied) and tells each job whether the store took them; records it refused
/// join `kept`. Whether it took them.
async fn write_batch(target: &Target, batch: &mut Vec<Job>, kept: &mut Kept) -> bool {
    let mut records = Vec::with_capacity(batch.len());
    let mut seqs = Vec::with_capacity(batch.len());
    let mut done = Vec::with_capacity(batch.len());
    for job in batch.drain(..) {
        if let Some(record) = job.record {
            records.push(record);
            seqs.push(job.seq);
        }
        done.extend(job.done);
    }
    let ok = match target.write(&records).await {
        Ok(()) => {
            target.written(&records, &seqs);
            true
        }
        Err(e) => {
            tracing::error!(error = %e, records = records.len(), "spend records could not be written; kept to try again");
            kept.add(records, seqs);
            false
        }
    };
    for done in done {
        let _ = done.send(ok);
    }
    ok
}

/// Records the store refused, oldest first.
struct Kept {
    records: Vec<ChargedRecord>,
    seqs: Vec<Option<u64>>,
    max: usize,
}

impl Kept {
    fn add(&mut self, records: Vec<ChargedRecord>, seqs: Vec<Option<u64>>) {
        self.records.extend(records);
        self.seqs.extend(seqs);
        if self.records.len() > self.max {
            let lost = self.records.len() - self.max;
            tracing::error!(records = lost, "spend records dropped from memory: too many are waiting for the store");
            self.records.drain(..lost);
            self.seqs.drain(..lost);
        }
    }

    /// Writes the kept records in chunks, oldest first; returns how many were written, or the first error
    /// (the chunks written before it are no longer kept).
    async fn write(&mut self, target: &Target) -> Result<usize, StoreError> {
        let total = self.records.len();
        while !self.records.is_empty() {
            let n = self.records.len().min(KEPT_CHUNK);
            target.write(&self.records[..n]).await?;
            target.written(&self.records[..n], &self.seqs[..n]);
            self.records.drain(..n);
            self.seqs.drain(..n);
        }
        Ok(total)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
pub(crate) mod tests {
    use super::*;
    use sqlx::Connection as _;
    use svc_store::SpendFilter;

    /// A sample record (also the journal's tests').
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

    /// A full queue makes the request wait for a place (it is not dropped); a writer that is gone refuses.
    #[tokio::test]
    async fn a_full_queue_waits_for_a_place_and_a_closed_one_refuses() {
        let (tx, mut rx) = mpsc::channel::<Job>(1);
        let writer = SpendWriter { tx, journal: None };
        let job = |id: &str| Job { record: Some(record(id)), seq: None, done: None };
        assert!(writer.queue(job("a")).await);
        let waiting = tokio::spawn({
            let writer = writer.clone();
            async move { writer.queue(job("b")).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a full queue does not take the job at once");
        let first = rx.recv().await.and_then(|j| j.record).map(|r| r.record.request_id);
        assert_eq!(first.as_deref(), Some("a"));
        assert!(waiting.await.unwrap_or(false));
        let second = rx.recv().await.and_then(|j| j.record).map(|r| r.record.request_id);
        assert_eq!(second.as_deref(), Some("b"));
        drop(rx);
        assert!(!writer.queue(job("c")).await);
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
        KeepPolicy { retry: KeepPolicy::DEFAULT.retry.with_delays(first_delay, first_delay * 4), max_kept }
    }

    #[tokio::test]
    async fn refused_records_are_written_by_the_backoff_when_no_request_comes() -> anyhow::Result<()> {
        let mut h = Harness::new().await?;
        h.refuse(true).await?;
        let tasks = TaskTracker::new();
        let writer = SpendWriter::start_with(h.store.clone(), &tasks, policy(Duration::from_millis(20), 100));
        assert!(!writer.record(record("a")).await);
        assert!(!writer.record(record("b")).await);
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
        assert!(started.elapsed() >= SHUTDOWN_GRACE);
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
        for id in ["a", "b", "c"] {
            assert!(writer.record(record(id)).await, "durable once journaled");
        }
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
