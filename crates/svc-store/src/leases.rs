//! Fleet mode on PostgreSQL: budget leases, fleet-wide rate buckets and spend records charged to leases.
//!
//! Each operation is one call of a function defined by migration 0007 (see the SQL for the rules): one round
//! trip, one transaction. The invariant the grants keep under the period row's lock: a period's settled spend
//! plus what its leases were granted never passes its limit; a node admits only from its own lease.
//!
//! What this file does not do: decide how much to ask for or when (the gateway does). On SQLite (one node)
//! these calls are refused with [`StoreError::FleetOnly`].

use crate::{Backend, SpendRecord, Store, StoreError};
use serde::{Deserialize, Serialize};
use sqlx::Row;

/// A budget a spend record is charged to: its scope (`team:ID`, `key:ID`), the start of the period it counts
/// in, and the limit the node knew (used only if the store knows no limit for the scope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// `team:ID` or `key:ID`.
    pub scope: String,
    /// Period start, Unix ms.
    pub period: i64,
    /// The node's limit, nano-units.
    pub limit: i64,
}

/// A spend record with the budgets it is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargedRecord {
    /// The record.
    #[serde(flatten)]
    pub record: SpendRecord,
    /// Its budgets.
    #[serde(default)]
    pub charges: Vec<Charge>,
}

impl std::borrow::Borrow<SpendRecord> for ChargedRecord {
    fn borrow(&self) -> &SpendRecord {
        &self.record
    }
}

/// What a node asks of a budget period.
#[derive(Debug, Clone)]
pub struct LeaseAsk<'a> {
    /// `team:ID` or `key:ID`.
    pub scope: &'a str,
    /// Period start, Unix ms.
    pub period: i64,
    /// The node's idea of the limit (the store's team row or key wins when it has one).
    pub limit: i64,
    /// The asking node.
    pub node: &'a str,
    /// Less than this is no use: grant nothing then.
    pub least: i64,
    /// As much as this ...
    pub want: i64,
    /// ... but no more than this fraction of the room left (1/`share`), unless that is less than `least`.
    pub share: i64,
    /// How long the lease lasts without renewal, ms.
    pub lease_ms: i64,
}

/// What a grant returned: the amount granted now and the period as it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Granted now (0: nothing, there was less than `least`).
    pub granted: i64,
    /// The period's limit.
    pub limit: i64,
    /// The node's lease after the grant (every grant of the period not given back).
    pub lease: i64,
    /// The fleet's spend in the period outside this node's lease.
    pub others_spent: i64,
}

/// A node's report of its exposure in one of its leases: the most it may have answered under the lease and not
/// yet written (see migration 0014). A reclaimed lease holds back this much (at most its unspent part).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposure {
    /// `team:ID` or `key:ID`.
    pub scope: String,
    /// Period start, Unix ms.
    pub period: i64,
    /// Nano-units.
    pub exposure: i64,
    /// The node's sequence number of the report: the store keeps the newest report of each lease.
    pub seq: i64,
}

fn exposures_json(exposures: &[Exposure]) -> Result<String, StoreError> {
    serde_json::to_string(exposures).map_err(|e| StoreError::Batch(e.to_string()))
}

/// A budget period as the store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeriodRow {
    /// The limit.
    pub limit: i64,
    /// Held by live leases.
    pub granted: i64,
    /// Spent under ended leases, plus holdbacks.
    pub settled: i64,
    /// Held back from reclaimed leases of dead nodes.
    pub held_back: i64,
    /// Spent under live leases.
    pub leased_spent: i64,
}

impl PeriodRow {
    /// What the fleet spent in the period (as written so far).
    pub fn spent(&self) -> i64 {
        self.settled.saturating_sub(self.held_back).saturating_add(self.leased_spent)
    }
}

impl Store {
    pub(crate) fn fleet_only(&self) -> Result<(), StoreError> {
        match self.backend() {
            Backend::Postgres => Ok(()),
            Backend::Sqlite => Err(StoreError::FleetOnly),
        }
    }

    /// Grants part of a period's room to a node's lease (creating the period and the lease as needed).
    pub async fn lease_grant(&self, ask: &LeaseAsk<'_>) -> Result<LeaseGrant, StoreError> {
        self.lease_grant_exposed(ask, &[]).await
    }

    /// [`Store::lease_grant`], then (in the same transaction) the node's exposure reports: a lease the grant
    /// creates takes its first report at once.
    pub async fn lease_grant_exposed(
        &self,
        ask: &LeaseAsk<'_>,
        exposures: &[Exposure],
    ) -> Result<LeaseGrant, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query(
            "SELECT g_granted, g_limit, g_lease, g_others_spent, CAST(svc_budget_expose($4, CAST($9 AS JSONB)) AS BIGINT) \
             FROM svc_budget_grant($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(ask.scope)
        .bind(ask.period)
        .bind(ask.limit)
        .bind(ask.node)
        .bind(ask.least)
        .bind(ask.want)
        .bind(ask.share)
        .bind(ask.lease_ms)
        .bind(exposures_json(exposures)?)
        .fetch_one(self.pool())
        .await?;
        Ok(LeaseGrant {
            granted: row.try_get(0)?,
            limit: row.try_get(1)?,
            lease: row.try_get(2)?,
            others_spent: row.try_get(3)?,
        })
    }

    /// Gives up to `amount` of a node's lease back to its period; returns what was given back.
    pub async fn lease_give_back(&self, scope: &str, period: i64, node: &str, amount: i64) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_budget_give_back($1, $2, $3, $4) AS BIGINT)")
            .bind(scope)
            .bind(period)
            .bind(node)
            .bind(amount)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Ends a node's lease of a period: its spend is settled, the rest returns to the period.
    pub async fn lease_end(&self, scope: &str, period: i64, node: &str) -> Result<(), StoreError> {
        self.fleet_only()?;
        sqlx::query("SELECT CAST(1 AS BIGINT) FROM svc_budget_end_lease($1, $2, $3, FALSE)")
            .bind(scope)
            .bind(period)
            .bind(node)
            .fetch_one(self.pool())
            .await?;
        Ok(())
    }

    /// Ends every lease of a node; returns how many.
    pub async fn lease_return_all(&self, node: &str) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row =
            sqlx::query("SELECT CAST(svc_budget_return_all($1) AS BIGINT)").bind(node).fetch_one(self.pool()).await?;
        Ok(row.try_get(0)?)
    }

    /// Ends every expired lease (its node stopped renewing), holding back what its node may not have written.
    pub async fn lease_reclaim(&self) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_budget_reclaim() AS BIGINT)").fetch_one(self.pool()).await?;
        Ok(row.try_get(0)?)
    }

    /// Keeps every lease of a node for another `lease_ms` and takes its exposure reports (newer than the
    /// leases hold), in one transaction; returns how many leases were renewed.
    pub async fn lease_renew(&self, node: &str, lease_ms: i64, exposures: &[Exposure]) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query(
            "SELECT CAST(svc_budget_renew($1, $2) AS BIGINT), CAST(svc_budget_expose($1, CAST($3 AS JSONB)) AS BIGINT)",
        )
        .bind(node)
        .bind(lease_ms)
        .bind(exposures_json(exposures)?)
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get(0)?)
    }

    /// Takes a node's exposure reports (those newer than its leases hold); returns how many leases took one.
    pub async fn lease_expose(&self, node: &str, exposures: &[Exposure]) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_budget_expose($1, CAST($2 AS JSONB)) AS BIGINT)")
            .bind(node)
            .bind(exposures_json(exposures)?)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Releases what was held back from a node's reclaimed leases (once its journal is written).
    pub async fn lease_release_holdbacks(&self, node: &str) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_budget_release_holdbacks($1) AS BIGINT)")
            .bind(node)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// A budget period as the store sees it (`None` before anyone leased from it).
    pub async fn budget_period(&self, scope: &str, period: i64) -> Result<Option<PeriodRow>, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query(
            "SELECT b.limit_nanos, b.granted, b.settled, \
             CAST(COALESCE((SELECT SUM(h.amount) FROM budget_holdbacks h \
                            WHERE h.scope = b.scope AND h.period_start_ms = b.period_start_ms), 0) AS BIGINT), \
             CAST(COALESCE((SELECT SUM(l.spent) FROM budget_leases l \
                            WHERE l.scope = b.scope AND l.period_start_ms = b.period_start_ms), 0) AS BIGINT) \
             FROM budget_periods b WHERE b.scope = $1 AND b.period_start_ms = $2",
        )
        .bind(scope)
        .bind(period)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(PeriodRow {
                limit: r.try_get(0)?,
                granted: r.try_get(1)?,
                settled: r.try_get(2)?,
                held_back: r.try_get(3)?,
                leased_spent: r.try_get(4)?,
            })
        })
        .transpose()
    }

    /// Writes spend records and charges each new one to its budgets, in one round trip. A record already in
    /// the store is skipped (not charged again). Returns how many were new.
    pub async fn write_charged_spend(&self, batch: &[ChargedRecord]) -> Result<i64, StoreError> {
        self.write_charged_spend_exposed(batch, "", &[]).await
    }

    /// [`Store::write_charged_spend`], and in the same transaction `node`'s exposure reports (which count the
    /// batch as written: they take effect only with it).
    pub async fn write_charged_spend_exposed(
        &self,
        batch: &[ChargedRecord],
        node: &str,
        exposures: &[Exposure],
    ) -> Result<i64, StoreError> {
        self.fleet_only()?;
        if batch.is_empty() {
            if !exposures.is_empty() {
                self.lease_expose(node, exposures).await?;
            }
            return Ok(0);
        }
        let sane: Vec<ChargedRecord> = batch
            .iter()
            .map(|c| {
                let mut c = c.clone();
                if c.record.clamp() {
                    tracing::error!(request_id = %c.record.request_id, "a spend record out of range was clamped before it was stored");
                }
                c
            })
            .collect();
        let json = serde_json::to_string(&sane).map_err(|e| StoreError::Batch(e.to_string()))?;
        if exposures.is_empty() {
            let row = sqlx::query("SELECT CAST(svc_spend_write(CAST($1 AS JSONB)) AS BIGINT)")
                .bind(json)
                .fetch_one(self.writer())
                .await?;
            return Ok(row.try_get(0)?);
        }
        // One statement: one transaction, so the reports count the batch as written only if it is.
        let row = sqlx::query(
            "SELECT CAST(svc_spend_write(CAST($1 AS JSONB)) AS BIGINT), \
             CAST(svc_budget_expose($2, CAST($3 AS JSONB)) AS BIGINT)",
        )
        .bind(json)
        .bind(node)
        .bind(exposures_json(exposures)?)
        .fetch_one(self.writer())
        .await?;
        Ok(row.try_get(0)?)
    }

    /// Takes up to `want` tokens (at least `least`, else none) from a fleet-wide bucket of `capacity` tokens
    /// refilled at `per_minute`; returns how many were taken.
    pub async fn rate_take(
        &self,
        scope: &str,
        capacity: i64,
        per_minute: i64,
        least: i64,
        want: i64,
    ) -> Result<i64, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_rate_take($1, $2, $3, $4, $5) AS BIGINT)")
            .bind(scope)
            .bind(capacity)
            .bind(per_minute)
            .bind(least)
            .bind(want)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Puts unused tokens back into a fleet-wide bucket (never above its capacity).
    pub async fn rate_give_back(&self, scope: &str, capacity: i64, tokens: i64) -> Result<(), StoreError> {
        self.fleet_only()?;
        sqlx::query("SELECT CAST(1 AS BIGINT) FROM svc_rate_give_back($1, $2, $3)")
            .bind(scope)
            .bind(capacity)
            .bind(tokens)
            .fetch_one(self.pool())
            .await?;
        Ok(())
    }
}

/// The PostgreSQL channel of budget notices: `room:<scope>` when a lease gives room back, `need:<node>|<scope>`
/// when a node lacks room that other nodes' slices may hold.
const BUDGET_CHANNEL: &str = "svc_budget";

/// What the fleet says about a budget's room (see [`Store::budget_notices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetNotice {
    /// Room was given back to the budget with this scope.
    Room(String),
    /// `node` lacks room of the budget with this scope: nodes holding spare of it should give it back.
    Need {
        /// The node that lacks room.
        node: String,
        /// The budget.
        scope: String,
    },
}

impl BudgetNotice {
    fn parse(payload: &str) -> Option<BudgetNotice> {
        if let Some(scope) = payload.strip_prefix("room:") {
            return Some(BudgetNotice::Room(scope.to_string()));
        }
        let (node, scope) = payload.strip_prefix("need:")?.split_once('|')?;
        Some(BudgetNotice::Need { node: node.to_string(), scope: scope.to_string() })
    }
}

/// Budget notices from the store (PostgreSQL `LISTEN`).
pub struct BudgetNotices(sqlx::postgres::PgListener);

impl BudgetNotices {
    /// The next notice (unknown payloads are skipped). An error means the connection broke (listen again).
    pub async fn next(&mut self) -> Result<BudgetNotice, StoreError> {
        loop {
            let n = self.0.recv().await?;
            if let Some(notice) = BudgetNotice::parse(n.payload()) {
                return Ok(notice);
            }
        }
    }
}

impl std::fmt::Debug for BudgetNotices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetNotices")
    }
}

impl Store {
    /// Listens for budget notices of the fleet; `None` on SQLite.
    pub async fn budget_notices(&self) -> Result<Option<BudgetNotices>, StoreError> {
        let Some(url) = self.url() else { return Ok(None) };
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        let mut listener = sqlx::postgres::PgListener::connect(url).await?;
        listener.listen(BUDGET_CHANNEL).await?;
        Ok(Some(BudgetNotices(listener)))
    }

    /// Tells the fleet that `node` lacks room of `scope` (nodes holding spare of it give it back).
    pub async fn budget_need(&self, scope: &str, node: &str) -> Result<(), StoreError> {
        self.fleet_only()?;
        sqlx::query("SELECT CAST(1 AS BIGINT) FROM pg_notify($1, $2)")
            .bind(BUDGET_CHANNEL)
            .bind(format!("need:{node}|{scope}"))
            .fetch_one(self.pool())
            .await?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "leases_tests.rs"]
mod tests;
