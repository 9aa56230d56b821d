//! Fleet mode: this node's slices of the budgets its fleet shares, leased from the store (see svc-store's
//! `leases` and migration 0007 for the store's side and its invariant).
//!
//! - A request that does not fit a slice asks the store for more ([`Leases::ask_for`]) before it is refused:
//!   at least what it lacks, up to [`TARGET`] times its worst case, but no more than a share of what is left
//!   (a quarter of the room divided by the live nodes), so slices shrink as a budget nears its end, down to
//!   one request's worst case. One grant at a time per budget; the requests short of room wait for it.
//! - A slice whose spare falls below [`LOW`] worst cases is topped up in the background after an admission.
//! - Every heartbeat: the node's leases are renewed in one call (and admission stops taking from slices whose
//!   lease may have lapsed), expired leases of dead nodes are reclaimed, leases of ended periods are ended,
//!   and slices idle since the last heartbeat give their spare back.
//! - A request still short while the fleet has room (it sits in other nodes' slices) tells the fleet it needs
//!   room (`NOTIFY`); the nodes holding spare of that budget give it back, and the request tries once more
//!   when room comes back (or after [`NEED_WAIT`]).
//! - At start (after the spend journal is written) the node returns whatever leases it held before; at a
//!   clean stop it returns them all.
//! - Exposure (issue 28): the store holds, for each lease, the most this node may have answered under it and not
//!   written (svc-budget's `Slice`, migration 0014), and a dead node's reclaimed lease holds back only that. The
//!   node reports it with its spend batches ([`Budgets::write_spend`], in the batch's transaction), its renewals
//!   and a grant that may create a lease; a request that would pass it asks the store first
//!   ([`Leases::raise_exposure`]). A report never lets admission past what the store holds: the node lowers its
//!   ceiling before it sends a lower one, and raises it once the store has taken a higher one (the newest wins).

use super::{Budgets, Cell, Entry, Scope};
use crate::refused::Refused;
use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_budget::Money;
use svc_config::{AdmissionMode, FleetConfig};
use svc_store::{BudgetNotice, Exposure, LeaseAsk, NodeState, PeriodRow, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A grant asks for up to this many worst cases of the request that asked.
const TARGET: i64 = 64;
/// A slice with less spare than this many worst cases is topped up in the background.
const LOW: i64 = 16;
/// A grant takes at most 1/(SHARE × live nodes) of the room left (at least what the request lacks).
const SHARE: i64 = 4;
/// How long a request short of room waits for other nodes to give theirs back.
const NEED_WAIT: Duration = Duration::from_millis(250);
/// The longest a store call on the admission path may take: a node cut off from the store answers within
/// about two of these (README, "Fleet mode").
pub(super) const STORE_WAIT: Duration = Duration::from_millis(750);
/// After a store call failed, admissions short of room do not ask the store again for this long (they would
/// only queue behind each other's timeouts).
const STORE_PAUSE: Duration = Duration::from_secs(1);

/// `call`, given at most `wait` ([`StoreError::Timeout`] then).
pub(super) async fn bounded<T>(
    wait: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(wait, call).await.unwrap_or(Err(StoreError::Timeout(wait.as_millis())))
}

/// Whether a request short of room could ask the store ([`Leases::ask_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// The store was asked (whatever it granted).
    Asked,
    /// The store could not be asked (it failed, did not answer in time, failed just before, or this node's
    /// leases may have lapsed): what the node holds is all it can judge by.
    Unreachable,
}

/// The lease state of this node.
pub struct Leases {
    store: Store,
    fleet: String,
    node: String,
    lease: Duration,
    heartbeat: Duration,
    /// Nodes online in the fleet, as last seen (at least 1).
    live: AtomicI64,
    /// Until when (ms after `epoch`) this node's leases are surely valid: the last renewal's send time plus
    /// the lease, less a margin.
    valid_until: AtomicU64,
    epoch: Instant,
    /// A renewal failed for so long that the slices lapsed: their leases are returned and started afresh once
    /// the store answers again.
    lapsed: AtomicBool,
    /// Until when (ms after `epoch`) admissions do not ask the store (a call failed just before).
    paused_until: AtomicU64,
    /// The sequence number of the next exposure report (from the clock at start: newer than the last run's).
    seq: AtomicI64,
}

fn nanos(m: Money) -> i64 {
    m.nanos()
}

impl Leases {
    /// The leases of `fleet`'s node on `store`.
    pub fn new(store: Store, fleet: &FleetConfig) -> Leases {
        let leases = Leases {
            store,
            fleet: fleet.name.clone(),
            node: fleet.node.clone(),
            lease: fleet.lease,
            heartbeat: fleet.heartbeat,
            live: AtomicI64::new(1),
            valid_until: AtomicU64::new(0),
            epoch: Instant::now(),
            lapsed: AtomicBool::new(false),
            paused_until: AtomicU64::new(0),
            seq: AtomicI64::new(Utc::now().timestamp_micros()),
        };
        leases.renewed(Instant::now());
        leases
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    fn renewed(&self, sent: Instant) {
        let margin = (self.lease / 10).min(Duration::from_secs(1));
        let until = sent.saturating_duration_since(self.epoch) + self.lease.saturating_sub(margin);
        self.valid_until.store(u64::try_from(until.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Whether this node's leases may have lapsed (no renewal got through in time).
    pub fn lapsed(&self) -> bool {
        self.elapsed_ms() > self.valid_until.load(Ordering::Relaxed)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A store call on the admission path failed: admissions stop asking for [`STORE_PAUSE`].
    fn pause(&self) {
        let until = self.elapsed_ms().saturating_add(u64::try_from(STORE_PAUSE.as_millis()).unwrap_or(u64::MAX));
        self.paused_until.store(until, Ordering::Relaxed);
    }

    /// Whether admissions may ask the store now (none failed just before, and the leases have not lapsed).
    pub(super) fn reachable(&self) -> bool {
        self.elapsed_ms() >= self.paused_until.load(Ordering::Relaxed) && !self.lapsed()
    }

    /// How the period of `scope` starting at `start` stands for this node, asked within [`STORE_WAIT`].
    pub(super) async fn standing(
        &self,
        scope: &Scope,
        start: DateTime<Utc>,
    ) -> Result<Option<svc_store::Standing>, StoreError> {
        // A lease not renewed for two heartbeats is silent.
        let silent = self.lease.saturating_sub(self.heartbeat.saturating_mul(2));
        let silent = i64::try_from(silent.as_millis()).unwrap_or(i64::MAX);
        let label = scope.label();
        let asked =
            bounded(STORE_WAIT, self.store.budget_standing(&label, start.timestamp_millis(), &self.node, silent)).await;
        if asked.is_err() {
            self.pause();
        }
        asked
    }

    /// At start, once this node's spend journal is written: the leases and holdbacks it left behind return to
    /// their budgets.
    pub async fn start(&self) -> Result<(), svc_store::StoreError> {
        let returned = self.store.lease_return_all(&self.node).await?;
        let released = self.store.lease_release_holdbacks(&self.node).await?;
        if returned > 0 || released > 0 {
            tracing::info!(leases = returned, holdbacks = released, "budget slices of this node's last run returned");
        }
        Ok(())
    }

    /// At a clean stop, once every spend record is written: every slice returns to its budget.
    pub async fn stop(store: &Store, node: &str) {
        match store.lease_return_all(node).await {
            Ok(n) => tracing::debug!(leases = n, "budget slices returned"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot return this node's budget slices; they return when their leases expire")
            }
        }
    }

    /// The period as the store sees it.
    pub async fn period(&self, scope: &Scope, start: DateTime<Utc>) -> Result<Option<PeriodRow>, Refused> {
        Ok(self.store.budget_period(&scope.label(), start.timestamp_millis()).await?)
    }

    /// Whether a slice with `spare` left after admitting a request of worst case `worst` is running low.
    pub(super) fn low(spare: Money, worst: Money) -> bool {
        nanos(spare) < nanos(worst).saturating_mul(LOW)
    }

    /// After an admission: marks the slices busy and tops up in the background those running low (`low`, as
    /// [`Leases::low`] found them under the admission's locks).
    pub(super) fn admitted(&self, budgets: &Arc<Budgets>, cells: &[(Scope, Cell)], low: &[bool], worst: Money) {
        for ((scope, cell), low) in cells.iter().zip(low) {
            let Some(e) = cell.get() else { continue };
            e.busy.store(true, Ordering::Relaxed);
            // Not while the store cannot be asked: the next admission short of room says so.
            if !low || !self.reachable() || e.topping.swap(true, Ordering::AcqRel) {
                continue;
            }
            let (budgets, scope, cell) = (budgets.clone(), scope.clone(), cell.clone());
            budgets.clone().tasks.spawn(async move {
                let Some(leases) = &budgets.leases else { return };
                let Some(e) = cell.get() else { return };
                let want = nanos(worst).saturating_mul(TARGET);
                let _one = e.granting.lock().await;
                if let Err(err) = leases.grant(&budgets, &scope, e, nanos(worst).max(1), want, true).await {
                    tracing::warn!(error = %err, budget = %scope.label(), "cannot top up this node's budget slice");
                }
                e.topping.store(false, Ordering::Release);
            });
        }
    }

    /// A request of `ask` does not fit this node's slice of `scope`: asks the store for what it lacks (and a
    /// share more), once the grant under way, if any, is done. A failure is logged and said: the request is then
    /// judged by what this node holds, and not refused for want of room it could not ask for.
    pub(super) async fn ask_for(&self, budgets: &Budgets, scope: &Scope, cell: &Cell, ask: &super::Ask) -> Asked {
        let Some(e) = cell.get() else { return Asked::Asked };
        let full = ask.worst_case();
        let _one = e.granting.lock().await;
        self.raise_exposure(budgets, scope, e, full).await;
        let room = match e.account.lock() {
            Ok(mut a) => a.room(budgets.now()),
            Err(_) => return Asked::Asked,
        };
        if full <= room {
            return Asked::Asked; // the grant under way brought enough
        }
        if !self.reachable() {
            return Asked::Unreachable;
        }
        let lacks = nanos(full.minus(room));
        let want = nanos(full).saturating_mul(TARGET).max(lacks);
        let result = match self.grant(budgets, scope, e, lacks, want, true).await {
            Ok(granted) if granted == 0 && budgets.config.load().gateway.admission.mode == AdmissionMode::Cap => {
                // Not enough for the whole worst case: enough for the smallest useful capped one?
                let least = ask.cost_with(budgets.config.load().gateway.admission.min_output_tokens.max(1));
                let least = nanos(least.minus(room));
                if least > 0 && least < lacks {
                    self.grant(budgets, scope, e, least, lacks, false).await.map(|_| ())
                } else {
                    Ok(())
                }
            }
            other => other.map(|_| ()),
        };
        if let Err(err) = result {
            tracing::warn!(error = %err, budget = %scope.label(), "cannot lease more of a budget from the store");
            return Asked::Unreachable;
        }
        self.ask_the_fleet(budgets, scope, e, full).await
    }

    /// Still short of `full` while the fleet has room for it: the room sits in other nodes' slices. Asks them
    /// to give it back, waits for room to come back (at most [`NEED_WAIT`]) and asks the store once more.
    async fn ask_the_fleet(&self, budgets: &Budgets, scope: &Scope, e: &Entry, full: Money) -> Asked {
        let now = budgets.now();
        let (room, fleet_room) = match e.account.lock() {
            Ok(mut a) => (a.room(now), a.fleet_room(now)),
            Err(_) => return Asked::Asked,
        };
        if full <= room || fleet_room < full {
            return Asked::Asked;
        }
        let label = scope.label();
        let woken = e.room.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if let Err(err) = bounded(STORE_WAIT, self.store.budget_need(&label, &self.node)).await {
            tracing::warn!(error = %err, budget = %label, "cannot ask the fleet for budget room");
            self.pause();
            return Asked::Unreachable;
        }
        let _ = tokio::time::timeout(NEED_WAIT, woken).await;
        let room = match e.account.lock() {
            Ok(mut a) => a.room(budgets.now()),
            Err(_) => return Asked::Asked,
        };
        if full <= room {
            return Asked::Asked;
        }
        let lacks = nanos(full.minus(room));
        if let Err(err) = self.grant(budgets, scope, e, lacks, lacks, true).await {
            tracing::warn!(error = %err, budget = %label, "cannot lease more of a budget from the store");
            return Asked::Unreachable;
        }
        Asked::Asked
    }

    /// Listens for the fleet's budget notices on `tasks` until `shutdown`: room given back wakes the requests
    /// waiting for it; another node's need makes this node give back its spare of that budget.
    fn listen(budgets: Arc<Budgets>, tasks: &TaskTracker, shutdown: CancellationToken) {
        tasks.spawn(async move {
            let mut waits = svc_events::RetryPolicy::OUTBOX
                .with_delays(Duration::from_millis(200), Duration::from_secs(10))
                .delays();
            loop {
                let Some(leases) = &budgets.leases else { return };
                let listening = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    l = leases.store.budget_notices() => l,
                };
                match listening {
                    Ok(None) => return,
                    Ok(Some(mut notices)) => loop {
                        let notice = tokio::select! {
                            _ = shutdown.cancelled() => return,
                            n = notices.next() => n,
                        };
                        match notice {
                            Ok(n) => leases.notice(&budgets, n).await,
                            Err(e) => {
                                tracing::warn!(error = %e, "lost the budget channel of the store; listening again");
                                break;
                            }
                        }
                    },
                    Err(e) => tracing::warn!(error = %e, "cannot listen for the fleet's budget notices"),
                }
                let wait = waits.next().unwrap_or(Duration::from_secs(10));
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        });
    }

    async fn notice(&self, budgets: &Budgets, notice: BudgetNotice) {
        let (label, need) = match notice {
            BudgetNotice::Room(scope) => (scope, false),
            BudgetNotice::Need { node, .. } if node == self.node => return,
            BudgetNotice::Need { scope, .. } => (scope, true),
        };
        let Some(scope) = Scope::from_label(&label) else { return };
        let Some(cell) = budgets.accounts.read().ok().and_then(|m| m.get(&scope).cloned()) else { return };
        let Some(e) = cell.get() else { return };
        if !need {
            e.room.notify_waiters();
            return;
        }
        let give = match e.account.lock() {
            Ok(mut a) => {
                a.roll(budgets.now());
                let spare = a.spare();
                (a.period.start, a.shed(spare))
            }
            Err(_) => return,
        };
        if give.1 > Money::ZERO {
            if let Err(err) =
                self.store.lease_give_back(&label, give.0.timestamp_millis(), &self.node, nanos(give.1)).await
            {
                tracing::warn!(error = %err, budget = %label, "cannot give spare budget back to a node that needs it");
            }
        }
    }

    /// One grant of at least `least`, up to `want` (and, when `shared`, no more than this node's share of the
    /// room left) to `scope`'s slice; returns what was granted. The caller holds `e.granting`. The store is given
    /// [`STORE_WAIT`]; a failure pauses the admissions' asking ([`Leases::reachable`]).
    async fn grant(
        &self,
        budgets: &Budgets,
        scope: &Scope,
        e: &Entry,
        least: i64,
        want: i64,
        shared: bool,
    ) -> Result<i64, StoreError> {
        let per_request = Money::from_nanos(least.max(want / TARGET));
        let (period, limit, exposure) = match e.account.lock() {
            Ok(mut a) => {
                a.roll(budgets.now());
                // A lease this grant creates holds back no more than what this node may answer (see `report`).
                let exposure = a.exposure_at_grant(per_request).map(|x| {
                    let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                    e.exposed.store(seq, Ordering::Relaxed);
                    Exposure {
                        scope: scope.label(),
                        period: a.period.start.timestamp_millis(),
                        exposure: nanos(x),
                        seq,
                    }
                });
                (a.period.start, a.limit, exposure)
            }
            Err(_) => return Ok(0),
        };
        let label = scope.label();
        let ask = LeaseAsk {
            scope: &label,
            period: period.timestamp_millis(),
            limit: nanos(limit),
            node: &self.node,
            least,
            want,
            share: if shared { SHARE.saturating_mul(self.live.load(Ordering::Relaxed).max(1)) } else { 1 },
            lease_ms: self.lease_ms(),
        };
        let g = bounded(STORE_WAIT, self.store.lease_grant_exposed(&ask, exposure.as_slice()))
            .await
            .inspect_err(|_| self.pause())?;
        if let Some(x) = &exposure {
            Leases::taken(e, x);
        }
        // Not idle: a request is waiting for this grant (the upkeep must not give it back before it is used).
        e.busy.store(true, Ordering::Relaxed);
        if let Ok(mut a) = e.account.lock() {
            let granted = Money::from_nanos(g.granted);
            if !a.granted(period, granted, Money::from_nanos(g.limit), Money::from_nanos(g.others_spent))
                && g.granted > 0
            {
                // The period ended meanwhile: the grant is left to the old lease, ended at the next heartbeat.
                tracing::debug!(budget = %label, "a grant arrived after its period ended");
            }
        }
        Ok(g.granted)
    }

    /// Starts the lease upkeep on `tasks`, every heartbeat until `shutdown`: the renewal in a loop of its own,
    /// so that the rest of the upkeep (its store calls slow under load) never delays it into a lapse.
    pub fn spawn(budgets: Arc<Budgets>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let Some(leases) = budgets.leases.as_ref() else { return };
        let heartbeat = leases.heartbeat;
        Leases::listen(budgets.clone(), tasks, shutdown.clone());
        for renewal in [true, false] {
            let (budgets, shutdown) = (budgets.clone(), shutdown.clone());
            let mut tick = tokio::time::interval(heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tasks.spawn(async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tick.tick() => {
                            let Some(leases) = &budgets.leases else { return };
                            if renewal {
                                leases.renew(&budgets).await;
                            } else {
                                leases.upkeep(&budgets).await;
                            }
                        }
                    }
                }
            });
        }
    }

    /// One heartbeat's renewal of this node's leases with the reports of its exposures (starting the slices
    /// afresh when they had lapsed).
    async fn renew(&self, budgets: &Budgets) {
        let sent = Instant::now();
        let now = budgets.now();
        let (cells, reports): (Vec<Cell>, Vec<Exposure>) = budgets
            .scoped_entries()
            .into_iter()
            .filter_map(|(scope, cell)| {
                let x = self.report(&scope, cell.get()?, Money::ZERO, now)?;
                Some((cell, x))
            })
            .unzip();
        // Bounded, so that the first renewal after the store comes back is not one stuck since it went away.
        let renewal = self.store.lease_renew(&self.node, self.lease_ms(), &reports);
        match bounded(self.heartbeat.max(STORE_WAIT), renewal).await {
            Ok(_) => {
                for (cell, x) in cells.iter().zip(&reports) {
                    if let Some(e) = cell.get() {
                        Leases::taken(e, x);
                    }
                }
                // Lapsed: a renewal failed for too long, or this one came after the leases' validity ran out
                // (admission stopped taking from the slices meanwhile).
                if self.lapsed.swap(false, Ordering::AcqRel) || self.lapsed() {
                    // Local first, so nothing is admitted from a slice the store takes back.
                    for cell in budgets.entries() {
                        if let Some(Ok(mut a)) = cell.get().map(|e| e.account.lock()) {
                            a.reset_slice();
                        }
                    }
                    if let Err(e) = self.store.lease_return_all(&self.node).await {
                        tracing::warn!(error = %e, "cannot return lapsed budget slices");
                        self.lapsed.store(true, Ordering::Release);
                        return;
                    }
                    tracing::info!("budget leases had lapsed: slices start afresh");
                }
                self.renewed(sent);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot renew this node's budget leases");
                if self.lapsed() && !self.lapsed.swap(true, Ordering::AcqRel) {
                    tracing::error!(
                        "budget leases may have lapsed: this node admits nothing more until the store answers"
                    );
                }
            }
        }
    }

    /// One heartbeat's upkeep besides the renewal (see the module's documentation).
    async fn upkeep(&self, budgets: &Budgets) {
        if let Err(e) = self.store.lease_reclaim().await {
            tracing::warn!(error = %e, "cannot reclaim the budget leases of dead nodes");
        }
        if let Ok(nodes) = self.store.list_nodes(&self.fleet).await {
            let live = nodes.iter().filter(|n| n.state == NodeState::Online).count().max(1);
            self.live.store(i64::try_from(live).unwrap_or(1), Ordering::Relaxed);
        }
        for (scope, cell) in budgets.scoped_entries() {
            let Some(e) = cell.get() else { continue };
            let (ended, give) = match e.account.lock() {
                Ok(mut a) => {
                    a.roll(budgets.now());
                    let ended = a.take_ended();
                    let idle = !e.busy.swap(false, Ordering::Relaxed);
                    let give = if idle && !e.topping.load(Ordering::Acquire) {
                        let spare = a.spare();
                        a.shed(spare)
                    } else {
                        Money::ZERO
                    };
                    (ended.map(|p| p.start), (give > Money::ZERO).then_some((a.period.start, give)))
                }
                Err(_) => continue,
            };
            let label = scope.label();
            if let Some(start) = ended {
                if let Err(err) = self.store.lease_end(&label, start.timestamp_millis(), &self.node).await {
                    tracing::warn!(error = %err, budget = %label, "cannot end the lease of an ended period; it expires");
                }
            }
            if let Some((start, amount)) = give {
                if let Err(err) =
                    self.store.lease_give_back(&label, start.timestamp_millis(), &self.node, nanos(amount)).await
                {
                    tracing::warn!(error = %err, budget = %label, "cannot give an idle budget slice back; it returns at the period's end or at stop");
                }
            }
        }
    }
}

mod exposure;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_store_call_that_does_not_answer_is_abandoned_in_time() {
        let started = tokio::time::Instant::now();
        let hung = bounded(STORE_WAIT, std::future::pending::<Result<(), StoreError>>()).await;
        assert!(matches!(hung, Err(StoreError::Timeout(750))), "{hung:?}");
        assert_eq!(started.elapsed(), STORE_WAIT);
        assert_eq!(bounded(STORE_WAIT, async { Ok::<_, StoreError>(7) }).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn after_a_failed_call_admissions_stop_asking_for_a_while() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::connect(&format!("sqlite://{}", dir.path().join("l.db").display())).await.unwrap();
        let fleet = FleetConfig { lease: Duration::from_secs(30), ..FleetConfig::default() };
        let leases = Leases::new(store, &fleet);
        assert!(leases.reachable());
        leases.pause();
        assert!(!leases.reachable(), "paused after a failure");
        leases.paused_until.store(0, Ordering::Relaxed);
        assert!(leases.reachable());
        leases.valid_until.store(0, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        assert!(leases.lapsed() && !leases.reachable(), "a lapsed lease is not asked from");
    }
}
