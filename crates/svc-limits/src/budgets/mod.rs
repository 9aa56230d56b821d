//! Budget admission (spec 4.1 rule 1, 8): per team and per key, a request's worst-case cost is reserved
//! before it goes upstream and replaced by its actual cost after, under one lock per budget, so concurrent
//! requests can never together pass a limit.
//!
//! 1. `admit`: for each budget that applies (the team's when it has `budget_limit`, the key's when it has
//!    `max_budget`), lock the accounts in a fixed order (team, then key) and take the smallest room left.
//!    When the request's worst case (its prompt estimate and completion cap, on the dearest deployment it
//!    may try) fits, hold it in every account. When it does not and `budget_admission` is `cap` (the
//!    default), lower the completion cap to what the room still pays for, if that is at least
//!    `budget_min_output_tokens`, and hold that. Otherwise refuse: 429 `Budget exceeded` with details and
//!    `Retry-After`, and `budget.exceeded` once per period (`refusal`).
//! 2. `Reservation::settle`: the actual cost (never more than was held) replaces the hold; thresholds
//!    crossed become `budget.alert`, reaching the limit `budget.exceeded`, each announced once per period
//!    (deduplicated in the store, so also across restarts). "Exceeded" announces the alerts not announced yet
//!    before it (a burst refused before its spend settles), so every alert comes before it and none after.
//! 3. Dropping a `Reservation` unsettled releases it (a failed call costs nothing).
//!
//! Accounts are created on first use from the store: the current period's spend is the sum of the spend
//! records since the period began, so a restart (even across a reset) starts from the truth.
//!
//! On a shared (PostgreSQL) store the fleet holds one budget: each account admits only from this node's
//! *slice*, leased from the store (`lease`). When a request does not fit its slice, it asks the store for more
//! before it is refused; a slice running low is topped up in the background. A node that cannot ask the store
//! admits from what it holds and answers 503 when that is not enough: only the store's totals justify a
//! refusal, and its `budget.exceeded` (`refusal`).

use crate::refused::Refused;
use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex, RwLock};
use svc_budget::{
    affordable_completion_tokens, Account, BudgetDuration, Money, Notice, NoticeKind, Price, Refusal, Usage,
};
use svc_config::{AdmissionMode, Config};
use svc_events::EventSink;
use svc_keys::Principal;
use svc_keys::VirtualKey;
use svc_store::{Charge, SpendFilter, Store};
use tokio::sync::OnceCell;
use tokio_util::task::TaskTracker;

mod announce;
mod lease;
mod refusal;
mod reload;
mod reservation;

pub use lease::Leases;
pub use reservation::Reservation;

/// A clock, injectable for tests.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Which budget.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// A team's budget.
    Team(String),
    /// A key's own budget (by key id).
    Key(String),
}

impl Scope {
    /// `team` or `key`, as event data and error details name it.
    fn kind(&self) -> &'static str {
        match self {
            Scope::Team(_) => "team",
            Scope::Key(_) => "key",
        }
    }

    /// `team:ID`, `key:ID`: the scope's name in the store.
    pub fn label(&self) -> String {
        match self {
            Scope::Team(t) => format!("team:{t}"),
            Scope::Key(k) => format!("key:{k}"),
        }
    }

    /// The scope of a label made by [`Scope::label`].
    pub fn from_label(label: &str) -> Option<Scope> {
        if let Some(t) = label.strip_prefix("team:") {
            return Some(Scope::Team(t.to_string()));
        }
        label.strip_prefix("key:").map(|k| Scope::Key(k.to_string()))
    }
}

/// One budget's account and, in fleet mode, the state of its slice's lease.
struct Entry {
    account: Mutex<Account>,
    /// One grant at a time per budget: requests short of room wait for the grant under way.
    granting: tokio::sync::Mutex<()>,
    /// Admitted a request since the last heartbeat (an idle slice is given back).
    busy: AtomicBool,
    /// A background top-up is under way.
    topping: AtomicBool,
    /// Fleet mode: woken when the store says room of this budget was given back.
    room: tokio::sync::Notify,
    /// Fleet mode: the sequence number of the newest report of this node's exposure in the budget (`lease`).
    exposed: AtomicI64,
}

impl Entry {
    fn new(account: Account) -> Entry {
        Entry {
            account: Mutex::new(account),
            granting: tokio::sync::Mutex::new(()),
            busy: AtomicBool::new(false),
            topping: AtomicBool::new(false),
            room: tokio::sync::Notify::new(),
            exposed: AtomicI64::new(0),
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Account>, Refused> {
        self.account.lock().map_err(|_| Refused::Internal("budget account poisoned"))
    }
}

type Cell = Arc<OnceCell<Entry>>;

/// All budget accounts of this process.
pub struct Budgets {
    accounts: RwLock<HashMap<Scope, Cell>>,
    /// The teams' anchors as stored, and the config: both replaced by a reload ([`Budgets::reconfigure`]).
    team_anchors: ArcSwap<HashMap<String, DateTime<Utc>>>,
    clock: Clock,
    store: Store,
    config: Arc<ArcSwap<Config>>,
    /// Notices go through one task, so they are announced in the order they happened.
    notices: tokio::sync::mpsc::UnboundedSender<(Scope, Notice, Who)>,
    /// Fleet mode (a PostgreSQL store): the leases of this node's slices.
    leases: Option<Leases>,
    /// Where background grants run (shutdown waits for them).
    tasks: TaskTracker,
}

/// What a request asks of its budgets: its worst case is `prompt_tokens` at `input` plus `choices` ×
/// `completion_tokens` at `output` (the dearest prices of the deployments it may try).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// The conservative prompt estimate.
    pub prompt_tokens: u64,
    /// The completion cap per choice.
    pub completion_tokens: u64,
    /// How many choices (`n`).
    pub choices: u64,
    /// Price of a prompt token.
    pub input: Price,
    /// Price of a completion token.
    pub output: Price,
    /// What it costs whatever its tokens: its server-side tool uses.
    pub fixed: Money,
}

impl Ask {
    /// The worst-case cost with a completion cap of `completion_tokens` per choice.
    pub fn cost_with(&self, completion_tokens: u64) -> Money {
        let usage = Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: completion_tokens.saturating_mul(self.choices.max(1)),
            ..Usage::default()
        };
        usage.cost(self.input, self.output).plus(self.fixed)
    }

    /// The worst-case cost as asked.
    pub fn worst_case(&self) -> Money {
        self.cost_with(self.completion_tokens)
    }
}

/// One admission try's outcome, under the accounts' locks.
enum Tried {
    /// `amount` is held in every account, for this completion cap; (fleet mode) which slices now run low.
    Admitted { amount: Money, completion_tokens: u64, low: Vec<bool> },
    /// Not the last try: these accounts are short of the whole worst case.
    Short(Vec<usize>),
    /// The last try: it does not fit account `index`.
    Refused { index: usize, refusal: Refusal, period_start: DateTime<Utc> },
}

/// An admitted request: what it holds, and the completion cap per choice it was admitted with (lower than it
/// asked when the budget could not pay for more).
#[must_use]
pub struct Grant {
    /// The holds in the budgets.
    pub reservation: Reservation,
    /// The completion cap per choice the holds pay for.
    pub completion_tokens: u64,
    /// Whether that cap is lower than the request's own.
    pub capped: bool,
}

/// Who a reservation is for, for event data: the caller's key (none: the master key), read only when an event
/// or a refusal names it (an `Arc` clone a request, not four strings).
#[derive(Debug, Clone, Default)]
struct Who(Option<Arc<VirtualKey>>);

impl Who {
    fn team_id(&self) -> Option<&str> {
        self.0.as_ref().map(|k| k.team_id.as_str())
    }

    fn key_alias(&self) -> Option<&str> {
        self.0.as_ref().and_then(|k| k.alias.as_deref())
    }

    fn agent_role(&self) -> Option<&str> {
        self.0.as_ref().and_then(|k| k.agent_role.as_deref())
    }

    /// The name events use for the caller: its key's agent name, `gateway` for the master key.
    fn agent(&self) -> &str {
        self.0.as_ref().map_or("gateway", |k| k.agent_name())
    }
}

/// The state of a budget for `/team/info` and `/key/info`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BudgetView {
    /// The cap.
    pub limit: f64,
    /// Settled spend this period.
    pub spent: f64,
    /// Held by requests in flight.
    pub reserved: f64,
    /// Period start (RFC 3339).
    pub period_start: String,
    /// Reset time (RFC 3339).
    pub reset_at: String,
    /// Period length.
    pub budget_duration: String,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Budgets {
    /// Budgets over `store`, with the teams' anchors as stored. The announcer of budget events runs on `tasks`
    /// (shutdown waits for it: it ends once every notice queued before the budgets were dropped is announced).
    pub async fn new(
        store: Store,
        config: Arc<Config>,
        events: Arc<dyn EventSink>,
        clock: Clock,
        tasks: &TaskTracker,
    ) -> Result<Budgets, svc_store::StoreError> {
        let team_anchors = ArcSwap::from_pointee(reload::anchors(&store).await?);
        let (notices, queue) = tokio::sync::mpsc::unbounded_channel::<(Scope, Notice, Who)>();
        let config = Arc::new(ArcSwap::new(config));
        tasks.spawn(announce::announcer(store.clone(), events, queue, config.clone()));
        let leases = match store.backend() {
            svc_store::Backend::Postgres => Some(Leases::new(store.clone(), &config.load().fleet)),
            svc_store::Backend::Sqlite => None,
        };
        Ok(Budgets {
            leases,
            tasks: tasks.clone(),
            accounts: RwLock::new(HashMap::new()),
            team_anchors,
            clock,
            store,
            config,
            notices,
        })
    }

    /// Fleet mode: the lease state of this node (`None` on a single node).
    pub fn leases(&self) -> Option<&Leases> {
        self.leases.as_ref()
    }

    /// Starts the fleet's lease upkeep (nothing on a single node).
    pub fn spawn_upkeep(self: &Arc<Self>, tasks: &TaskTracker, shutdown: tokio_util::sync::CancellationToken) {
        Leases::spawn(self.clone(), tasks, shutdown);
    }

    /// Fleet mode: `cost` of a spend record charged to `charges` is now written to the store.
    pub fn written(&self, charges: &[Charge], cost: Money) {
        for c in charges {
            let Some(scope) = Scope::from_label(&c.scope) else { continue };
            let Some(cell) = self.accounts.read().ok().and_then(|m| m.get(&scope).cloned()) else { continue };
            if let Some(e) = cell.get() {
                if let Ok(mut a) = e.account.lock() {
                    a.written(cost);
                }
            }
        }
    }

    fn scoped_entries(&self) -> Vec<(Scope, Cell)> {
        let cells: Vec<(Scope, Cell)> = match self.accounts.read() {
            Ok(m) => m.iter().map(|(s, c)| (s.clone(), c.clone())).collect(),
            Err(_) => Vec::new(),
        };
        cells.into_iter().filter(|(_, c)| c.get().is_some()).collect()
    }

    fn entries(&self) -> Vec<Cell> {
        self.scoped_entries().into_iter().map(|(_, c)| c).collect()
    }

    /// Now, by the injected clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    fn cell(&self, scope: &Scope) -> Cell {
        if let Some(c) = self.accounts.read().ok().and_then(|m| m.get(scope).cloned()) {
            return c;
        }
        match self.accounts.write() {
            Ok(mut m) => m.entry(scope.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        }
    }

    /// Whether any budget applies to `principal`.
    pub fn apply_to(&self, principal: &Principal) -> bool {
        !self.applicable(principal).is_empty()
    }

    /// The budgets that apply to a key: (scope, limit, duration, anchor).
    fn applicable(&self, principal: &Principal) -> Vec<(Scope, Money, BudgetDuration, DateTime<Utc>)> {
        let Some(key) = principal.key() else { return Vec::new() };
        let mut out = Vec::new();
        let config = self.config.load();
        let team = config.team(&key.team_id);
        let team_duration = team.map(|t| t.budget_duration).unwrap_or(config.gateway.budget_duration);
        if let Some(limit) = team.and_then(|t| t.budget_limit) {
            let anchor = team
                .and_then(|t| t.budget_start)
                .or_else(|| self.team_anchors.load().get(&key.team_id).copied())
                .unwrap_or_default();
            out.push((Scope::Team(key.team_id.clone()), limit, team_duration, anchor));
        }
        if let Some(limit) = key.max_budget {
            out.push((Scope::Key(key.id.clone()), limit, key.budget_duration.unwrap_or(team_duration), key.anchor));
        }
        out
    }

    async fn account(
        &self,
        scope: &Scope,
        limit: Money,
        duration: BudgetDuration,
        anchor: DateTime<Utc>,
    ) -> Result<Cell, Refused> {
        let cell = self.cell(scope);
        // Boxed: the first use's store reads, a large future every admission would carry.
        cell.get_or_try_init(|| {
            Box::pin(async {
                let now = self.now();
                let period = duration.period_at(anchor, now);
                if self.leases.is_some() {
                    // Fleet mode: the fleet's spend is learned from the store with the first grant.
                    let mut account = Account::leased(limit, duration, anchor, now);
                    let label = scope.label();
                    let asked = self.store.notices(&label, period.start.timestamp_millis());
                    let notices =
                        lease::bounded(lease::STORE_WAIT, asked).await.map_err(|e| refusal::unreachable(&e))?;
                    let announced: Vec<NoticeKind> = notices.iter().filter_map(|n| NoticeKind::parse(n)).collect();
                    account.restore_notices(&announced);
                    return Ok::<_, Refused>(Entry::new(account));
                }
                let mut filter = SpendFilter { start_ms: Some(period.start.timestamp_millis()), ..Default::default() };
                match scope {
                    Scope::Team(t) => filter.team_id = Some(t.clone()),
                    Scope::Key(k) => filter.key_id = Some(k.clone()),
                }
                let spent = Money::from_nanos_i128(self.store.sum_spend(&filter).await?);
                let mut account = Account::new(limit, duration, anchor, spent, now);
                let notices = self.store.notices(&scope.label(), period.start.timestamp_millis()).await?;
                let announced: Vec<NoticeKind> = notices.iter().filter_map(|n| NoticeKind::parse(n)).collect();
                account.restore_notices(&announced);
                Ok::<_, Refused>(Entry::new(account))
            })
        })
        .await?;
        if self.leases.is_none() {
            // A limit changed since the account was made holds now (in a fleet, leases bring the store's).
            if let Some(e) = cell.get() {
                let mut a = e.lock()?;
                if a.limit != limit {
                    a.set_limit(limit);
                }
            }
        }
        Ok(cell)
    }

    /// Reserves the worst case of `ask` in every budget of the caller — or, when it does not fit and
    /// `budget_admission` is `cap`, a lower completion cap that does (at least `budget_min_output_tokens`) —
    /// or refuses with 429 `Budget exceeded`. In fleet mode a request that does not fit this node's slice asks
    /// the store for more first.
    pub async fn admit(self: &Arc<Self>, principal: &Principal, ask: &Ask) -> Result<Grant, Refused> {
        match self.admit_as(principal, ask, true).await? {
            Some(grant) => Ok(grant),
            None => Err(Refused::Internal("a budget admission that may cap or refuse did neither")),
        }
    }

    /// Reserves the whole worst case of `ask` in every budget of the caller, or nothing (`None`: it does not
    /// fit; nothing is capped, refused or announced). The first try of a request whose bound may still be made
    /// tighter.
    pub async fn admit_whole(self: &Arc<Self>, principal: &Principal, ask: &Ask) -> Result<Option<Grant>, Refused> {
        self.admit_as(principal, ask, false).await
    }

    /// [`Budgets::admit`] (`settle`: cap or refuse what does not fit) or [`Budgets::admit_whole`].
    async fn admit_as(
        self: &Arc<Self>,
        principal: &Principal,
        ask: &Ask,
        settle: bool,
    ) -> Result<Option<Grant>, Refused> {
        let who = who(principal);
        let applicable = self.applicable(principal);
        if applicable.is_empty() {
            let reservation = Reservation { holds: Vec::new(), budgets: None, who };
            return Ok(Some(Grant { reservation, completion_tokens: ask.completion_tokens, capped: false }));
        }
        let mut cells = Vec::with_capacity(applicable.len());
        for (scope, limit, duration, anchor) in applicable {
            let cell = self.account(&scope, limit, duration, anchor).await?;
            cells.push((scope, cell));
        }
        let mut last_try = self.leases.is_none();
        let mut asked = lease::Asked::Asked;
        let mut rounds = 0;
        loop {
            match self.try_admit(&cells, ask, last_try && settle)? {
                Tried::Admitted { amount, completion_tokens, low } => {
                    if let Some(leases) = &self.leases {
                        leases.admitted(self, &cells, &low, ask.worst_case());
                    }
                    let reservation = Reservation {
                        holds: cells.into_iter().map(|(s, c)| (s, c, amount)).collect(),
                        budgets: Some(self.clone()),
                        who,
                    };
                    let capped = completion_tokens < ask.completion_tokens;
                    return Ok(Some(Grant { reservation, completion_tokens, capped }));
                }
                Tried::Short(_) if last_try => return Ok(None),
                Tried::Short(short) => {
                    if let Some(leases) = &self.leases {
                        for i in short {
                            // Boxed: store calls of fleet mode, a large future every admission would carry.
                            let asking = Box::pin(leases.ask_for(self, &cells[i].0, &cells[i].1, ask));
                            if asking.await == lease::Asked::Unreachable {
                                asked = lease::Asked::Unreachable;
                            }
                        }
                    }
                    // Short only of the exposure the store holds (issue 28): ask again, a few times at most.
                    rounds += 1;
                    last_try = rounds >= 3 || !Leases::exposure_binds(&cells, ask.worst_case());
                }
                Tried::Refused { index, refusal, period_start } => {
                    // Boxed: a refusal reads the store in fleet mode, a large future every admission would carry.
                    return Err(Box::pin(self.refuse(&cells, index, refusal, period_start, ask, &who, asked)).await);
                }
            }
        }
    }

    /// One try under the accounts' locks: the holds, the completion cap and (fleet mode) which slices now run
    /// low, or (unless `last_try`) which accounts are short of the whole worst case. On the last try, what does
    /// not fit is capped or described as refused (nothing recorded: `refuse` decides).
    fn try_admit(&self, cells: &[(Scope, Cell)], ask: &Ask, last_try: bool) -> Result<Tried, Refused> {
        let now = self.now();
        let full = ask.worst_case();
        // Lock every account (team before key, always), find the tightest room, then hold in all.
        let mut guards = Vec::with_capacity(cells.len());
        for (_, cell) in cells {
            let Some(e) = cell.get() else { return Err(Refused::Internal("budget account missing")) };
            guards.push(e.lock()?);
        }
        if self.leases.as_ref().is_some_and(|l| l.lapsed()) {
            for g in guards.iter_mut() {
                g.lapse();
            }
        }
        let mut tightest = 0;
        let mut room = Money::MAX;
        let mut short = Vec::new();
        for (i, g) in guards.iter_mut().enumerate() {
            let r = g.room(now);
            if r < full {
                short.push(i);
            }
            if r < room {
                (tightest, room) = (i, r);
            }
        }
        let (amount, completion_tokens) = if full <= room {
            (full, ask.completion_tokens)
        } else if !last_try {
            return Ok(Tried::Short(short));
        } else {
            match self.capped(ask, room) {
                Some(k) => (ask.cost_with(k), k),
                None => {
                    let refusal = guards[tightest].describe_refusal(full);
                    let period_start = guards[tightest].period.start;
                    return Ok(Tried::Refused { index: tightest, refusal, period_start });
                }
            }
        };
        for g in guards.iter_mut() {
            g.hold(amount);
        }
        let low = match self.leases {
            Some(_) => guards.iter().map(|g| Leases::low(g.spare(), full)).collect(),
            None => Vec::new(),
        };
        Ok(Tried::Admitted { amount, completion_tokens, low })
    }

    /// The lower completion cap `room` pays for, when `budget_admission` is `cap` and it is a useful one.
    fn capped(&self, ask: &Ask, room: Money) -> Option<u64> {
        let settings = self.config.load().gateway.admission;
        if settings.mode != AdmissionMode::Cap {
            return None;
        }
        let for_tokens = room.minus(ask.fixed);
        let affordable =
            affordable_completion_tokens(for_tokens, ask.prompt_tokens, ask.input, ask.output, ask.choices)?;
        let k = affordable.min(ask.completion_tokens);
        (k >= settings.min_output_tokens.max(1) && ask.cost_with(k) <= room).then_some(k)
    }

    /// Queues a notice for the announcer task (in order; each announced once per period).
    fn announce(&self, scope: Scope, notice: Notice, who: Who) {
        if self.notices.send((scope, notice, who)).is_err() {
            tracing::warn!("the budget announcer has stopped; a budget notice is not announced");
        }
    }

    /// The state of a scope's budget, when it has one (creating the account if needed).
    pub async fn view(
        &self,
        scope: Scope,
        limit: Money,
        duration: BudgetDuration,
        anchor: DateTime<Utc>,
    ) -> Result<BudgetView, Refused> {
        let cell = self.account(&scope, limit, duration, anchor).await?;
        let now = self.now();
        let e = cell.get().ok_or_else(|| Refused::Internal("budget account missing"))?;
        let (period_start, mut spent) = {
            let mut a = e.lock()?;
            a.roll(now);
            (a.period.start, a.spent)
        };
        if let Some(leases) = &self.leases {
            // The fleet's spend as written, and what this node answered but has not written yet.
            if let Some(row) = leases.period(&scope, period_start).await? {
                let unwritten = e.lock()?.slice().map(|s| s.unwritten).unwrap_or(Money::ZERO);
                spent = Money::from_nanos(row.spent()).plus(unwritten);
            }
        }
        let a = e.lock()?;
        Ok(BudgetView {
            limit: a.limit.as_f64(),
            spent: spent.as_f64(),
            reserved: a.reserved.as_f64(),
            period_start: rfc3339(a.period.start),
            reset_at: rfc3339(a.period.end),
            budget_duration: a.duration.to_string(),
        })
    }

    /// The team's budget view, when it has a limit.
    pub async fn team_view(&self, team_id: &str) -> Result<Option<BudgetView>, Refused> {
        let config = self.config.load_full();
        let Some(team) = config.team(team_id) else { return Ok(None) };
        let Some(limit) = team.budget_limit else { return Ok(None) };
        let anchor = team.budget_start.or_else(|| self.team_anchors.load().get(team_id).copied()).unwrap_or_default();
        self.view(Scope::Team(team_id.to_string()), limit, team.budget_duration, anchor).await.map(Some)
    }
}

fn who(principal: &Principal) -> Who {
    match principal {
        Principal::Key(k) => Who(Some(k.clone())),
        Principal::Master => Who(None),
    }
}

#[cfg(test)]
mod tests;
