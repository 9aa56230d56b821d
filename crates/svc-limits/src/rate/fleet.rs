//! Fleet mode: `rpm_limit` / `tpm_limit` held by the whole fleet. Each limit is one token bucket in the store
//! (capacity the limit, refilled at the limit per minute: `svc_rate_take` in migration 0007); a node takes
//! tokens from it in small chunks into a local allowance and admits from that in memory.
//!
//! - A request the allowance cannot hold asks the store for what it lacks and a chunk more (one ask at a time
//!   per bucket); a chunk is a quarter of the limit divided by the live nodes, so the allowances of all nodes
//!   together hold at most a quarter of a limit.
//! - An allowance running low (under half a chunk) is topped up in the background.
//! - Every heartbeat, allowances unused since the last one give their tokens back to the bucket.
//!
//! Since every admitted token came out of the one bucket, the fleet admits no more than one node with the
//! same limit would (a burst of the limit, then the limit per minute), except that tokens taken into an
//! allowance may be spent up to one heartbeat after they were taken: at most the allowances held, a quarter of
//! the limit, on top. When the store does not answer, each node falls back to its own limiter of the whole
//! limit (logged).

use super::Who;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use svc_store::{NodeState, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The longest a take from the store's bucket may keep a request (or the top-up it waits for): a node cut off
/// from the store falls back to limiting on its own at once instead of after the pool's acquire timeout.
const STORE_WAIT: Duration = Duration::from_millis(750);

/// `call`, given at most [`STORE_WAIT`].
async fn bounded<T>(call: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    tokio::time::timeout(STORE_WAIT, call).await.unwrap_or(Err(StoreError::Timeout(STORE_WAIT.as_millis())))
}

/// A chunk is at most 1/(SHARE × live nodes) of a limit.
const SHARE: i64 = 4;

/// Which fleet-wide bucket: a key's or a team's, of requests or of tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Whose limit.
    pub who: Who,
    /// Requests (`rpm_limit`) or tokens (`tpm_limit`).
    pub tokens: bool,
}

impl Bucket {
    fn index(self) -> usize {
        usize::from(self.tokens) * 2 + usize::from(self.who == Who::Team)
    }

    /// The bucket's name in the store: `rpm:key:<id>`, `tpm:team:<id>`.
    fn label(self, id: &str) -> String {
        format!("{}:{}:{id}", if self.tokens { "tpm" } else { "rpm" }, self.who.as_str())
    }
}

/// One bucket's local allowance.
struct Allowance {
    /// The bucket's name in the store.
    scope: String,
    per_minute: i64,
    tokens: Mutex<i64>,
    /// One ask to the store at a time.
    asking: tokio::sync::Mutex<()>,
    busy: AtomicBool,
    topping: AtomicBool,
}

impl Allowance {
    /// Takes `n` tokens if the allowance holds them; returns what is left.
    fn take(&self, n: i64) -> Option<i64> {
        let mut t = self.tokens.lock().ok()?;
        (*t >= n).then(|| {
            *t -= n;
            *t
        })
    }

    /// Takes up to `n` tokens; returns how many it could not.
    fn drain(&self, n: i64) -> i64 {
        let Ok(mut t) = self.tokens.lock() else { return n };
        let taken = (*t).min(n).max(0);
        *t -= taken;
        n - taken
    }

    fn add(&self, n: i64) {
        if let Ok(mut t) = self.tokens.lock() {
            *t = t.saturating_add(n);
        }
    }

    fn held(&self) -> i64 {
        self.tokens.lock().map(|t| *t).unwrap_or(0)
    }

    /// Takes every token held.
    fn take_all(&self) -> i64 {
        self.tokens.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or(0)
    }
}

/// The allowances of this node.
pub struct FleetRates {
    store: Store,
    fleet: String,
    live: AtomicI64,
    /// Allowances by key or team id, one map per [`Bucket`] kind (found without building a name).
    buckets: [RwLock<HashMap<String, Arc<Allowance>>>; 4],
    tasks: TaskTracker,
}

/// What a refused take should wait before retrying: the bucket's refill of `n` tokens.
pub fn refill_secs(n: i64, per_minute: i64) -> u64 {
    let secs = (n.max(1) as f64) * 60.0 / (per_minute.max(1) as f64);
    (secs.ceil() as u64).clamp(1, 60)
}

impl FleetRates {
    /// The allowances of a node of `fleet` on `store`; background top-ups run on `tasks`.
    pub fn new(store: Store, fleet: &str, tasks: TaskTracker) -> FleetRates {
        FleetRates { store, fleet: fleet.to_string(), live: AtomicI64::new(1), buckets: Default::default(), tasks }
    }

    fn chunk(&self, per_minute: i64) -> i64 {
        (per_minute / SHARE.saturating_mul(self.live.load(Ordering::Relaxed).max(1))).max(1)
    }

    fn allowance(&self, bucket: Bucket, id: &str, per_minute: i64) -> Option<Arc<Allowance>> {
        let map = &self.buckets[bucket.index()];
        if let Some(a) = map.read().ok()?.get(id) {
            if a.per_minute == per_minute {
                return Some(a.clone());
            }
        }
        let mut m = map.write().ok()?;
        let fresh = || Arc::new(new_allowance(bucket.label(id), per_minute));
        let a = m.entry(id.to_string()).or_insert_with(fresh);
        if a.per_minute != per_minute {
            // The limit changed: a fresh allowance (what the old one held stays taken until its bucket refills).
            *a = fresh();
        }
        Some(a.clone())
    }

    /// Takes `n` tokens of the fleet's `bucket` of key or team `id` (a limit of `per_minute`): `Ok(true)` when
    /// taken.
    pub async fn take(self: &Arc<Self>, bucket: Bucket, id: &str, per_minute: i64, n: i64) -> Result<bool, StoreError> {
        let Some(a) = self.allowance(bucket, id, per_minute) else { return Ok(false) };
        a.busy.store(true, Ordering::Relaxed);
        if let Some(left) = a.take(n) {
            if left < self.chunk(per_minute) / 2 {
                self.top_up(&a);
            }
            return Ok(true);
        }
        let _one = a.asking.lock().await;
        if a.take(n).is_some() {
            return Ok(true); // the ask under way brought enough
        }
        let lacks = n - a.held().max(0);
        let want = self.chunk(per_minute).max(lacks);
        let got = bounded(self.store.rate_take(&a.scope, per_minute, per_minute, lacks, want)).await?;
        a.add(got);
        Ok(a.take(n).is_some())
    }

    /// Counts `n` more tokens of `bucket` of `id` after the fact: from the allowance, and what it lacks from
    /// the store's bucket (in the background, as many as it holds).
    pub fn charge(self: &Arc<Self>, bucket: Bucket, id: &str, per_minute: i64, n: i64) {
        let Some(a) = self.allowance(bucket, id, per_minute) else { return };
        a.busy.store(true, Ordering::Relaxed);
        let owed = a.drain(n);
        if owed <= 0 {
            return;
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = me.store.rate_take(&a.scope, per_minute, per_minute, 0, owed).await {
                tracing::warn!(error = %e, bucket = %a.scope, "cannot count tokens against a fleet-wide limit");
            }
        });
    }

    fn top_up(self: &Arc<Self>, a: &Arc<Allowance>) {
        if a.topping.swap(true, Ordering::AcqRel) {
            return;
        }
        let (me, a) = (self.clone(), a.clone());
        self.tasks.spawn(async move {
            let _one = a.asking.lock().await;
            let chunk = me.chunk(a.per_minute);
            match bounded(me.store.rate_take(&a.scope, a.per_minute, a.per_minute, 1, chunk)).await {
                Ok(got) => a.add(got),
                Err(e) => tracing::warn!(error = %e, bucket = %a.scope, "cannot top up a fleet-wide rate allowance"),
            }
            a.topping.store(false, Ordering::Release);
        });
    }

    /// Starts the upkeep on `tasks`: every `heartbeat`, the live nodes are counted and idle allowances give
    /// their tokens back; at `shutdown`, all of them.
    pub fn spawn(self: Arc<Self>, heartbeat: Duration, tasks: &TaskTracker, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => {
                        self.give_back(true).await;
                        return;
                    }
                    _ = tick.tick() => {
                        if let Ok(nodes) = self.store.list_nodes(&self.fleet).await {
                            let live = nodes.iter().filter(|n| n.state == NodeState::Online).count().max(1);
                            self.live.store(i64::try_from(live).unwrap_or(1), Ordering::Relaxed);
                        }
                        self.give_back(false).await;
                    }
                }
            }
        });
    }

    /// Gives back the tokens of allowances idle since the last call (or of all of them).
    async fn give_back(&self, all: bool) {
        let mut idle: Vec<Arc<Allowance>> = Vec::new();
        for map in &self.buckets {
            let Ok(m) = map.read() else { continue };
            idle.extend(
                m.values()
                    .filter(|a| !a.busy.swap(false, Ordering::Relaxed) || all)
                    .filter(|a| !a.topping.load(Ordering::Acquire))
                    .cloned(),
            );
        }
        for a in idle {
            let n = a.take_all();
            if n <= 0 {
                continue;
            }
            if let Err(e) = self.store.rate_give_back(&a.scope, a.per_minute, n).await {
                tracing::debug!(error = %e, bucket = %a.scope, "cannot give rate tokens back; the bucket refills anyway");
            }
        }
    }
}

fn new_allowance(scope: String, per_minute: i64) -> Allowance {
    Allowance {
        scope,
        per_minute,
        tokens: Mutex::new(0),
        asking: tokio::sync::Mutex::new(()),
        busy: AtomicBool::new(false),
        topping: AtomicBool::new(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_takes_what_it_holds_and_drains_the_rest() {
        let a = new_allowance("rpm:key:k".into(), 10);
        a.add(5);
        assert_eq!(a.take(6), None);
        assert_eq!(a.take(3), Some(2));
        assert_eq!(a.drain(7), 5, "two taken, five owed");
        assert_eq!(a.held(), 0);
    }

    #[test]
    fn each_bucket_has_its_own_map_and_name() {
        let all = [(Who::Key, false), (Who::Team, false), (Who::Key, true), (Who::Team, true)];
        let indexes: Vec<usize> = all.iter().map(|&(who, tokens)| Bucket { who, tokens }.index()).collect();
        assert_eq!(indexes, [0, 1, 2, 3]);
        assert_eq!(Bucket { who: Who::Team, tokens: true }.label("t"), "tpm:team:t");
    }

    #[test]
    fn a_refused_take_waits_for_the_refill_of_what_it_asked() {
        assert_eq!(refill_secs(1, 60), 1);
        assert_eq!(refill_secs(1, 30), 2);
        assert_eq!(refill_secs(1_000, 100), 60, "never more than a minute");
    }
}
