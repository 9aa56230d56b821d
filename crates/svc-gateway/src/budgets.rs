//! Budget admission (spec 4.1 rule 1, 8): per team and per key, a request's worst-case cost is reserved
//! before it goes upstream and replaced by its actual cost after, under one lock per budget, so concurrent
//! requests can never together pass a limit.
//!
//! 1. `admit`: for each budget that applies (the team's when it has `budget_limit`, the key's when it has
//!    `max_budget`), lock the accounts in a fixed order (team, then key), check every one, then hold the
//!    amount in every one. A refusal is 429 `Budget exceeded` with details and `Retry-After`.
//! 2. `Reservation::settle`: actual cost replaces the hold; thresholds crossed become `budget.alert`,
//!    reaching the limit `budget.exceeded`, each announced once per period (deduplicated in the store, so
//!    also across restarts).
//! 3. Dropping a `Reservation` unsettled releases it (a failed call costs nothing).
//!
//! Accounts are created on first use from the store: the current period's spend is the sum of the spend
//! records since the period began, so a restart (even across a reset) starts from the truth.

use crate::auth::Principal;
use crate::error::ApiError;
use crate::events::{EventSink, GatewayEvent};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use svc_budget::{Account, BudgetDuration, Money, Notice, Refusal};
use svc_config::Config;
use svc_store::{SpendFilter, Store};
use tokio::sync::OnceCell;

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

    fn label(&self) -> String {
        match self {
            Scope::Team(t) => format!("team:{t}"),
            Scope::Key(k) => format!("key:{k}"),
        }
    }
}

type Cell = Arc<OnceCell<Mutex<Account>>>;

/// All budget accounts of this process.
pub struct Budgets {
    accounts: RwLock<HashMap<Scope, Cell>>,
    team_anchors: HashMap<String, DateTime<Utc>>,
    thresholds: Vec<u32>,
    clock: Clock,
    store: Store,
    config: Arc<Config>,
    /// Notices go through one task, so they are announced in the order they happened.
    notices: tokio::sync::mpsc::UnboundedSender<(Scope, Notice, Who)>,
}

/// What an admitted request holds in each budget.
#[must_use]
pub struct Reservation {
    holds: Vec<(Scope, Cell, Money)>,
    budgets: Option<Arc<Budgets>>,
    who: Who,
}

/// Who a reservation is for, for event data.
#[derive(Debug, Clone, Default)]
struct Who {
    team_id: Option<String>,
    key_alias: Option<String>,
    agent_role: Option<String>,
    agent: String,
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
    /// Budgets over `store`, with the teams' anchors as stored.
    pub async fn new(
        store: Store,
        config: Arc<Config>,
        events: Arc<dyn EventSink>,
        clock: Clock,
    ) -> Result<Budgets, svc_store::StoreError> {
        let team_anchors = store
            .list_teams()
            .await?
            .into_iter()
            .map(|t| (t.team_id, DateTime::<Utc>::from_timestamp_millis(t.anchor_ms).unwrap_or_default()))
            .collect();
        let (notices, mut queue) = tokio::sync::mpsc::unbounded_channel::<(Scope, Notice, Who)>();
        let announcer_store = store.clone();
        tokio::spawn(async move {
            while let Some((scope, notice, who)) = queue.recv().await {
                announce(&announcer_store, events.as_ref(), scope, notice, who).await;
            }
        });
        Ok(Budgets {
            accounts: RwLock::new(HashMap::new()),
            team_anchors,
            thresholds: config.gateway.budget_alert_thresholds_permille.clone(),
            clock,
            store,
            config,
            notices,
        })
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

    /// The budgets that apply to a key: (scope, limit, duration, anchor).
    fn applicable(&self, principal: &Principal) -> Vec<(Scope, Money, BudgetDuration, DateTime<Utc>)> {
        let Some(key) = principal.key() else { return Vec::new() };
        let mut out = Vec::new();
        let team = self.config.team(&key.team_id);
        let team_duration = team.map(|t| t.budget_duration).unwrap_or(self.config.gateway.budget_duration);
        if let Some(limit) = team.and_then(|t| t.budget_limit) {
            let anchor = team
                .and_then(|t| t.budget_start)
                .or_else(|| self.team_anchors.get(&key.team_id).copied())
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
    ) -> Result<Cell, ApiError> {
        let cell = self.cell(scope);
        cell.get_or_try_init(|| async {
            let now = self.now();
            let period = duration.period_at(anchor, now);
            let mut filter = SpendFilter { start_ms: Some(period.start.timestamp_millis()), ..Default::default() };
            match scope {
                Scope::Team(t) => filter.team_id = Some(t.clone()),
                Scope::Key(k) => filter.key_id = Some(k.clone()),
            }
            let spent = Money(self.store.sum_spend(&filter).await?);
            let mut account = Account::new(limit, duration, anchor, spent, now);
            let notices = self.store.notices(&scope.label(), period.start.timestamp_millis()).await?;
            let alerted: Vec<u32> = notices.iter().filter_map(|n| n.strip_prefix("alert:")?.parse().ok()).collect();
            account.restore_notices(&alerted, notices.iter().any(|n| n == "exceeded"));
            Ok::<_, ApiError>(Mutex::new(account))
        })
        .await?;
        Ok(cell)
    }

    /// Reserves `amount` in every budget of the caller, or refuses with 429 `Budget exceeded`.
    pub async fn admit(self: &Arc<Self>, principal: &Principal, amount: Money) -> Result<Reservation, ApiError> {
        let who = who(principal);
        let applicable = self.applicable(principal);
        if applicable.is_empty() {
            return Ok(Reservation { holds: Vec::new(), budgets: None, who });
        }
        let mut cells = Vec::with_capacity(applicable.len());
        for (scope, limit, duration, anchor) in &applicable {
            cells.push((scope.clone(), self.account(scope, *limit, *duration, *anchor).await?));
        }
        let now = self.now();
        // Lock every account (team before key, always), check all, then hold in all.
        let mut guards = Vec::with_capacity(cells.len());
        for (_, cell) in &cells {
            let Some(m) = cell.get() else { return Err(ApiError::internal("budget account missing")) };
            guards.push(m.lock().map_err(|_| ApiError::internal("budget account poisoned"))?);
        }
        for (i, g) in guards.iter_mut().enumerate() {
            if let Err(refusal) = g.check(amount, now) {
                drop(guards);
                let scope = cells[i].0.clone();
                if refusal.first_of_period {
                    self.announce_refusal(&scope, &refusal, &who, now);
                }
                return Err(refused(&scope, &refusal, &who, now));
            }
        }
        for g in guards.iter_mut() {
            g.hold(amount);
        }
        drop(guards);
        Ok(Reservation {
            holds: cells.into_iter().map(|(s, c)| (s, c, amount)).collect(),
            budgets: Some(self.clone()),
            who,
        })
    }

    fn announce_refusal(&self, scope: &Scope, r: &Refusal, who: &Who, now: DateTime<Utc>) {
        let period_start = self
            .accounts
            .read()
            .ok()
            .and_then(|m| m.get(scope).cloned())
            .and_then(|c| c.get().and_then(|m| m.lock().ok().map(|a| a.period.start)))
            .unwrap_or(now);
        let notice = Notice::Exceeded {
            spent: r.spent.plus(r.reserved),
            limit: r.limit,
            period: svc_budget::Period { start: period_start, end: r.reset },
            requested: Some(r.requested),
        };
        self.announce(scope.clone(), notice, who.clone());
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
    ) -> Result<BudgetView, ApiError> {
        let cell = self.account(&scope, limit, duration, anchor).await?;
        let now = self.now();
        let m = cell.get().ok_or_else(|| ApiError::internal("budget account missing"))?;
        let mut a = m.lock().map_err(|_| ApiError::internal("budget account poisoned"))?;
        a.roll(now);
        Ok(BudgetView {
            limit: a.limit.as_f64(),
            spent: a.spent.as_f64(),
            reserved: a.reserved.as_f64(),
            period_start: rfc3339(a.period.start),
            reset_at: rfc3339(a.period.end),
            budget_duration: a.duration.to_string(),
        })
    }

    /// The team's budget view, when it has a limit.
    pub async fn team_view(&self, team_id: &str) -> Result<Option<BudgetView>, ApiError> {
        let Some(team) = self.config.team(team_id) else { return Ok(None) };
        let Some(limit) = team.budget_limit else { return Ok(None) };
        let anchor = team.budget_start.or_else(|| self.team_anchors.get(team_id).copied()).unwrap_or_default();
        self.view(Scope::Team(team_id.to_string()), limit, team.budget_duration, anchor).await.map(Some)
    }
}

/// Announces a notice once per period: the store decides who is first, then the event is emitted.
async fn announce(store: &Store, events: &dyn EventSink, scope: Scope, notice: Notice, who: Who) {
    let (label, kind, period, spent, limit, threshold) = match &notice {
        Notice::Alert { threshold_permille, spent, limit, period } => {
            (format!("alert:{threshold_permille}"), "budget.alert", *period, *spent, *limit, Some(*threshold_permille))
        }
        Notice::Exceeded { spent, limit, period, .. } => {
            ("exceeded".to_string(), "budget.exceeded", *period, *spent, *limit, None)
        }
    };
    match store.notice_once(&scope.label(), period.start.timestamp_millis(), &label).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => tracing::warn!(error = %e, "cannot record a budget notice; announcing anyway"),
    }
    let mut data = budget_fields(&scope, &who);
    data.insert("agent_role".into(), json!(who.agent_role));
    data.insert("spent".into(), json!(spent.as_f64()));
    data.insert("limit".into(), json!(limit.as_f64()));
    data.insert("period_start".into(), json!(rfc3339(period.start)));
    data.insert("period_end".into(), json!(rfc3339(period.end)));
    data.insert("threshold".into(), json!(threshold.map(|t| t as f64 / 1000.0)));
    if let Notice::Exceeded { requested, .. } = notice {
        data.insert("requested".into(), json!(requested.map(Money::as_f64)));
    }
    events.emit(GatewayEvent { kind, agent: who.agent.clone(), data: Value::Object(data) });
}

fn who(principal: &Principal) -> Who {
    match principal.key() {
        Some(k) => Who {
            team_id: Some(k.team_id.clone()),
            key_alias: k.alias.clone(),
            agent_role: k.agent_role.clone(),
            agent: k.agent_name().to_string(),
        },
        None => Who { agent: "gateway".into(), ..Default::default() },
    }
}

/// Which budget, whose: the first fields of a budget event's data and of a refusal's details.
fn budget_fields(scope: &Scope, who: &Who) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("budget".into(), json!(scope.kind()));
    m.insert("team_id".into(), json!(who.team_id));
    m.insert("key_alias".into(), json!(who.key_alias));
    m
}

/// The 429 of a refused reservation: `Budget exceeded` plus machine-readable detail (spec 4.1 rule 1).
fn refused(scope: &Scope, r: &Refusal, who: &Who, now: DateTime<Utc>) -> ApiError {
    let mut e = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_exceeded", "Budget exceeded");
    let mut extra = budget_fields(scope, who);
    extra.insert("limit".into(), json!(r.limit.as_f64()));
    extra.insert("spent".into(), json!(r.spent.as_f64()));
    extra.insert("reserved".into(), json!(r.reserved.as_f64()));
    extra.insert("requested".into(), json!(r.requested.as_f64()));
    extra.insert("reset_at".into(), json!(rfc3339(r.reset)));
    e.extra = Some(extra);
    e.retry_after = Some((r.reset - now).num_seconds().max(1) as u64);
    e
}

impl Reservation {
    /// No budget applies.
    pub fn none() -> Reservation {
        Reservation { holds: Vec::new(), budgets: None, who: Who::default() }
    }

    /// Replaces the holds by the actual cost and announces crossed thresholds.
    pub fn settle(mut self, actual: Money) {
        let Some(budgets) = self.budgets.take() else { return };
        let now = budgets.now();
        for (scope, cell, held) in std::mem::take(&mut self.holds) {
            let notices = match cell.get().map(|m| m.lock()) {
                Some(Ok(mut a)) => a.settle(held, actual, &budgets.thresholds, now),
                _ => Vec::new(),
            };
            for n in notices {
                budgets.announce(scope.clone(), n, self.who.clone());
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        for (_, cell, held) in self.holds.drain(..) {
            if let Some(Ok(mut a)) = cell.get().map(|m| m.lock()) {
                a.release(held);
            }
        }
    }
}

#[cfg(test)]
#[path = "budgets_tests.rs"]
mod tests;
