//! The one group-commit writer over the store, for spend records and outbox events alike: one task owns a kind
//! of write; it takes the first item waiting, then every other already queued (up to a batch), optionally
//! lingers for company, writes them in one transaction (one round trip) and only then answers whoever waits.
//!
//! What happens to a batch the store refuses is the caller's choice ([`Options::keep`]):
//! - answered (`None`, the outbox): each waiter hears the error and decides (the event sink tries again);
//! - kept (`Some`, spend records): each waiter hears the refusal, but the items stay in memory, oldest first, and
//!   are written again after a backoff (or as soon as a new batch gets through) until the store takes them; at
//!   shutdown they get a short last chance.
//!
//! A flush (an item-less job) returns once everything queued before it is written.

use crate::RetryPolicy;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_store::StoreError;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

/// Once the writer's handles are gone, kept items get this long (plus the attempt under way) before they are
/// given up.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// Kept items are written again in chunks of this many, oldest first.
const KEPT_CHUNK: usize = 4096;

/// One kind of write: what an item is, how a batch of them is written, and who hears that it was.
pub trait Batches: Send + Sync + 'static {
    /// What callers queue.
    type Item: Send + 'static;
    /// What travels beside an item to [`Batches::written`] (spend: the journal segment holding it).
    type Tag: Copy + Send + 'static;
    /// What a waiter hears of its item (outbox: its row id).
    type Answer: Send + 'static;
    /// Writes `items` in one transaction, with an answer for each, in order.
    fn write(&self, items: &[Self::Item]) -> impl Future<Output = Result<Vec<Self::Answer>, StoreError>> + Send;
    /// The items are in the store (called after every successful write, kept items included).
    fn written(&self, _items: &[Self::Item], _tags: &[Self::Tag]) {}
    /// Every handle is gone and everything is written or given up.
    fn closed(&self) {}
    /// A word for the logs: what an item is (`spend records`).
    const WHAT: &'static str;
}

/// Why an item was not written: the store's refusal, shared by the batch's waiters.
pub type Refusal = Arc<str>;

/// How a writer batches.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Items queued at most; a caller beyond waits for a place (slowing requests down instead of growing memory).
    pub queue: usize,
    /// Items in one batch at most.
    pub max_batch: usize,
    /// How long the first item of a batch waits for company (unless someone waits for it, or the batch is full).
    pub linger: Option<Duration>,
    /// Keep what the store refuses, and write it again (else answer the refusal).
    pub keep: Option<KeepPolicy>,
}

/// What a writer does with items the store refused.
#[derive(Debug, Clone, Copy)]
pub struct KeepPolicy {
    /// The waits before writing them again.
    pub retry: RetryPolicy,
    /// Items kept at most; beyond this the oldest are dropped (and logged).
    pub max_kept: usize,
}

/// One item on its way (none for a flush), its tag, and whoever waits for it.
struct Job<B: Batches> {
    item: Option<B::Item>,
    tag: B::Tag,
    done: Option<oneshot::Sender<Result<Option<B::Answer>, Refusal>>>,
}

/// A handle to a writer task; the task ends when every handle is dropped and its queue is drained.
pub struct GroupCommit<B: Batches> {
    tx: mpsc::Sender<Job<B>>,
}

impl<B: Batches> Clone for GroupCommit<B> {
    fn clone(&self) -> Self {
        GroupCommit { tx: self.tx.clone() }
    }
}

impl<B: Batches> std::fmt::Debug for GroupCommit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").field("what", &B::WHAT).finish()
    }
}

impl<B: Batches> GroupCommit<B> {
    /// Starts the writer of `batches` on `tasks`.
    pub fn start(batches: B, options: Options, tasks: &TaskTracker) -> GroupCommit<B> {
        let (tx, rx) = mpsc::channel::<Job<B>>(options.queue.max(1));
        tasks.spawn(async move {
            write_all(&batches, rx, options).await;
            batches.closed();
        });
        GroupCommit { tx }
    }

    /// Writes `item` and returns its answer once it is in the store (the store's refusal, or that the writer is
    /// gone, otherwise).
    pub async fn write(&self, item: B::Item, tag: B::Tag) -> Result<B::Answer, Refusal> {
        let (done, waiter) = oneshot::channel();
        if !self.queue(Job { item: Some(item), tag, done: Some(done) }).await {
            return Err(gone());
        }
        match waiter.await {
            Ok(Ok(Some(answer))) => Ok(answer),
            Ok(Ok(None)) => Err(Arc::from("the store gave no answer for the item")),
            Ok(Err(refusal)) => Err(refusal),
            Err(_) => Err(gone()),
        }
    }

    /// Queues `item` without waiting for the store (it is durable elsewhere: a journal); false when the writer is
    /// gone.
    pub async fn queue_item(&self, item: B::Item, tag: B::Tag) -> bool {
        self.queue(Job { item: Some(item), tag, done: None }).await
    }

    /// Queues `item` as [`GroupCommit::queue_item`] does when the queue has a place now (`Ok(false)`: the writer is
    /// gone); when it is full, gives `item` and `tag` back (`Err`) for the caller to wait with `queue_item`. A
    /// caller that seldom waits need not hold a future for the wait.
    pub fn try_queue_item(&self, item: B::Item, tag: B::Tag) -> Result<bool, (B::Item, B::Tag)> {
        match self.tx.try_send(Job { item: Some(item), tag, done: None }) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(job)) => job.item.map_or(Ok(false), |item| Err((item, job.tag))),
            Err(mpsc::error::TrySendError::Closed(_)) => Ok(false),
        }
    }

    /// Returns once every item queued before the call is in the store (or was refused by it: then false).
    pub async fn flush(&self, tag: B::Tag) -> bool {
        let (done, waiter) = oneshot::channel();
        if !self.queue(Job { item: None, tag, done: Some(done) }).await {
            return false;
        }
        matches!(waiter.await, Ok(Ok(_)))
    }

    /// Queues `job`, waiting for a place when the queue is full; false when the writer is gone. The wait is
    /// boxed: held inline, the channel's send future (the job and a semaphore's wait, about 1 KiB) would make
    /// every request's future that much larger, and each request's future is copied whole when it moves.
    async fn queue(&self, job: Job<B>) -> bool {
        match self.tx.try_send(job) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(job)) => Box::pin(self.tx.send(job)).await.is_ok(),
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

fn gone() -> Refusal {
    Arc::from("the writer stopped")
}

/// Gathers more jobs until `linger` passed since the first or the batch is full (or someone waits).
async fn gather<B: Batches>(rx: &mut mpsc::Receiver<Job<B>>, batch: &mut Vec<Job<B>>, linger: Duration, most: usize) {
    let deadline = tokio::time::Instant::now() + linger;
    while batch.len() < most && batch.iter().all(|j| j.done.is_none()) {
        match tokio::time::timeout_at(deadline, rx.recv_many(batch, most - batch.len())).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The writer task.
async fn write_all<B: Batches>(batches: &B, mut rx: mpsc::Receiver<Job<B>>, options: Options) {
    let most = options.max_batch.max(1);
    let mut batch: Vec<Job<B>> = Vec::with_capacity(most);
    let Some(keep) = options.keep else {
        // Refusals are answered: nothing to remember between batches.
        while rx.recv_many(&mut batch, most).await > 0 {
            if let Some(linger) = options.linger {
                gather(&mut rx, &mut batch, linger, most).await;
            }
            write_batch(batches, &mut batch, None).await;
        }
        return;
    };
    keep_writing(batches, rx, batch, options, keep).await;
}

/// The writer task that keeps refused items: new items written in batches, and the items of refused batches
/// kept until the store takes them. New items are always written on their own, so a backlog never slows a
/// caller down.
async fn keep_writing<B: Batches>(
    batches: &B,
    mut rx: mpsc::Receiver<Job<B>>,
    mut batch: Vec<Job<B>>,
    options: Options,
    keep: KeepPolicy,
) {
    let most = options.max_batch.max(1);
    let mut kept = Kept::<B> { items: Vec::new(), tags: Vec::new(), max: keep.max_kept };
    let retry = keep.retry;
    let mut waits = retry.delays();
    let mut retry_at = Instant::now();
    let mut give_up_at: Option<Instant> = None;
    loop {
        if kept.items.is_empty() {
            if give_up_at.is_some() || rx.recv_many(&mut batch, most).await == 0 {
                return;
            }
        } else {
            tokio::select! {
                n = rx.recv_many(&mut batch, most), if give_up_at.is_none() => {
                    if n == 0 {
                        // Shutting down: the kept items get a short last chance.
                        give_up_at = Some(Instant::now() + SHUTDOWN_GRACE);
                        waits = retry.with_delays(Duration::from_millis(100), Duration::from_secs(1)).delays();
                        retry_at = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(retry_at.into()) => {}
            }
        }
        if let (Some(linger), false) = (options.linger, batch.is_empty()) {
            gather(&mut rx, &mut batch, linger, most).await;
        }
        if !batch.is_empty() {
            let none_kept = kept.items.is_empty();
            let ok = write_batch(batches, &mut batch, Some(&mut kept)).await;
            if !ok && none_kept {
                retry_at = Instant::now() + waits.next().unwrap_or(retry.max_delay);
            }
            if ok && !kept.items.is_empty() {
                // The store takes writes again: no need to wait for the timer.
                retry_at = Instant::now();
            }
        }
        if !kept.items.is_empty() && Instant::now() >= retry_at {
            match kept.write(batches).await {
                Ok(n) => {
                    tracing::info!(items = n, what = B::WHAT, "items kept after a failed write are now written");
                    waits = retry.delays();
                }
                Err(e) => {
                    tracing::warn!(error = %e, items = kept.items.len(), what = B::WHAT, "kept items still cannot be written");
                    retry_at = Instant::now() + waits.next().unwrap_or(retry.max_delay);
                    if give_up_at.is_some_and(|at| Instant::now() >= at) {
                        tracing::error!(
                            items = kept.items.len(),
                            what = B::WHAT,
                            "items not written at shutdown: the store refused them (a journaled writer writes them from its journal at its next start)"
                        );
                        kept.items.clear();
                        kept.tags.clear();
                    }
                }
            }
        }
    }
}

/// Writes the items of `batch` (emptied) and answers each job; a refused batch's items join `kept` when there
/// is one. Whether the store took them.
async fn write_batch<B: Batches>(batches: &B, batch: &mut Vec<Job<B>>, kept: Option<&mut Kept<B>>) -> bool {
    let mut items = Vec::with_capacity(batch.len());
    let mut tags = Vec::with_capacity(batch.len());
    // Each waiter, and the index of its item (none for a flush).
    let mut waiters = Vec::with_capacity(batch.len());
    for job in batch.drain(..) {
        let index = job.item.is_some().then_some(items.len());
        if let Some(item) = job.item {
            items.push(item);
            tags.push(job.tag);
        }
        if let Some(done) = job.done {
            waiters.push((index, done));
        }
    }
    let result = if items.is_empty() { Ok(Vec::new()) } else { batches.write(&items).await };
    match result {
        Ok(answers) => {
            batches.written(&items, &tags);
            let mut answers: Vec<Option<B::Answer>> = answers.into_iter().map(Some).collect();
            for (index, done) in waiters {
                let answer = index.and_then(|i| answers.get_mut(i)).and_then(Option::take);
                let _ = done.send(Ok(answer));
            }
            true
        }
        Err(e) => {
            let refusal: Refusal = Arc::from(e.to_string());
            match kept {
                Some(kept) => {
                    tracing::error!(error = %e, items = items.len(), what = B::WHAT, "items could not be written; kept to try again");
                    kept.add(items, tags);
                }
                None => tracing::warn!(error = %e, items = items.len(), what = B::WHAT, "items could not be written"),
            }
            for (_, done) in waiters {
                let _ = done.send(Err(refusal.clone()));
            }
            false
        }
    }
}

/// Items the store refused, oldest first.
struct Kept<B: Batches> {
    items: Vec<B::Item>,
    tags: Vec<B::Tag>,
    max: usize,
}

impl<B: Batches> Kept<B> {
    fn add(&mut self, items: Vec<B::Item>, tags: Vec<B::Tag>) {
        self.items.extend(items);
        self.tags.extend(tags);
        if self.items.len() > self.max {
            let lost = self.items.len() - self.max;
            tracing::error!(
                items = lost,
                what = B::WHAT,
                "items dropped from memory: too many are waiting for the store"
            );
            self.items.drain(..lost);
            self.tags.drain(..lost);
        }
    }

    /// Writes the kept items in chunks, oldest first; returns how many were written, or the first error (the
    /// chunks written before it are no longer kept).
    async fn write(&mut self, batches: &B) -> Result<usize, StoreError> {
        let total = self.items.len();
        while !self.items.is_empty() {
            let n = self.items.len().min(KEPT_CHUNK);
            batches.write(&self.items[..n]).await?;
            batches.written(&self.items[..n], &self.tags[..n]);
            self.items.drain(..n);
            self.tags.drain(..n);
        }
        Ok(total)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    /// Numbers into memory, each answered with its place; refuses every write while `refuse` is set.
    #[derive(Default)]
    struct Numbers {
        stored: Mutex<Vec<u32>>,
        batches: Mutex<Vec<usize>>,
        refuse: AtomicBool,
    }

    impl Batches for Arc<Numbers> {
        type Item = u32;
        type Tag = ();
        type Answer = usize;
        const WHAT: &'static str = "numbers";

        async fn write(&self, items: &[u32]) -> Result<Vec<usize>, StoreError> {
            if self.refuse.load(Ordering::SeqCst) {
                return Err(StoreError::Batch("database or disk is full".into()));
            }
            let mut stored = self.stored.lock().map_err(|_| StoreError::Batch("poisoned".into()))?;
            let first = stored.len();
            stored.extend_from_slice(items);
            if let Ok(mut b) = self.batches.lock() {
                b.push(items.len());
            }
            Ok((first..first + items.len()).collect())
        }
    }

    fn options(keep: Option<KeepPolicy>) -> Options {
        Options { queue: 64, max_batch: 8, linger: None, keep }
    }

    fn stored(n: &Numbers) -> Vec<u32> {
        n.stored.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Callers that queue together are written in one batch, and each hears its own item's answer.
    #[tokio::test]
    async fn concurrent_items_share_a_batch_and_each_hears_its_answer() {
        let numbers = Arc::new(Numbers::default());
        let tasks = TaskTracker::new();
        let options = Options { linger: Some(Duration::from_millis(50)), ..options(None) };
        let writer = GroupCommit::start(numbers.clone(), options, &tasks);
        let (a, b, c) = tokio::join!(writer.write(7, ()), writer.write(8, ()), writer.write(9, ()));
        let mut answers = [a.unwrap_or(99), b.unwrap_or(99), c.unwrap_or(99)];
        answers.sort_unstable();
        assert_eq!(answers, [0, 1, 2]);
        assert_eq!(stored(&numbers).len(), 3);
        assert!(writer.flush(()).await);
        drop(writer);
        tasks.close();
        tasks.wait().await;
        assert_eq!(numbers.batches.lock().map(|b| b.iter().sum::<usize>()).unwrap_or(0), 3);
    }

    /// Without a keep policy a refusal is answered to every waiter of the batch, and nothing is written later.
    #[tokio::test]
    async fn a_refusal_is_answered_when_nothing_is_kept() {
        let numbers = Arc::new(Numbers::default());
        numbers.refuse.store(true, Ordering::SeqCst);
        let tasks = TaskTracker::new();
        let writer = GroupCommit::start(numbers.clone(), options(None), &tasks);
        let refusal = writer.write(1, ()).await.err().unwrap_or_default();
        assert!(refusal.contains("disk is full"), "{refusal}");
        numbers.refuse.store(false, Ordering::SeqCst);
        assert_eq!(writer.write(2, ()).await.ok(), Some(0));
        drop(writer);
        tasks.close();
        tasks.wait().await;
        assert_eq!(stored(&numbers), [2], "the refused item is not written behind its caller's back");
    }

    /// With a keep policy the refused items are written before the next batch's, oldest first.
    #[tokio::test]
    async fn kept_items_go_in_first_once_the_store_takes_writes() {
        let numbers = Arc::new(Numbers::default());
        numbers.refuse.store(true, Ordering::SeqCst);
        let tasks = TaskTracker::new();
        let keep = KeepPolicy {
            retry: RetryPolicy::OUTBOX.with_delays(Duration::from_secs(60), Duration::from_secs(60)),
            max_kept: 10,
        };
        let writer = GroupCommit::start(numbers.clone(), options(Some(keep)), &tasks);
        assert!(writer.write(1, ()).await.is_err());
        assert!(writer.write(2, ()).await.is_err());
        numbers.refuse.store(false, Ordering::SeqCst);
        assert!(writer.write(3, ()).await.is_ok());
        assert!(writer.flush(()).await);
        assert_eq!(stored(&numbers), [3, 1, 2]);
    }

    /// A full queue makes the caller wait for a place (nothing is dropped); a writer that is gone refuses.
    #[tokio::test]
    async fn a_full_queue_waits_for_a_place_and_a_closed_one_refuses() {
        let (tx, mut rx) = mpsc::channel::<Job<Arc<Numbers>>>(1);
        let writer = GroupCommit { tx };
        assert!(writer.queue_item(1, ()).await);
        assert_eq!(writer.try_queue_item(2, ()), Err((2, ())), "a full queue gives the item back");
        let waiting = tokio::spawn({
            let writer = writer.clone();
            async move { writer.queue_item(2, ()).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "a full queue does not take the job at once");
        assert_eq!(rx.recv().await.and_then(|j| j.item), Some(1));
        assert!(waiting.await.unwrap_or(false));
        assert_eq!(rx.recv().await.and_then(|j| j.item), Some(2));
        assert_eq!(writer.try_queue_item(5, ()), Ok(true), "a place: queued at once");
        assert_eq!(rx.recv().await.and_then(|j| j.item), Some(5));
        drop(rx);
        assert_eq!(writer.try_queue_item(6, ()), Ok(false), "the writer is gone");
        assert!(!writer.queue_item(3, ()).await);
        assert!(writer.write(4, ()).await.is_err());
    }
}
