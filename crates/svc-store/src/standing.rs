//! Fleet mode on PostgreSQL: how a budget period stands for one node, in one read, so that a refusal can say
//! what the fleet holds and whether the fleet's totals (not one node's view) justify it.
//!
//! What this file does not do: change anything (grants and give-backs are in `leases`).

use crate::{Store, StoreError};
use sqlx::Row;

/// A budget period as one node sees it through the store (all nano-units).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    /// The limit.
    pub limit: i64,
    /// What the fleet spent in the period, as written so far.
    pub spent: i64,
    /// What no lease holds: room the store can still grant (`limit - settled - granted`, at least zero).
    pub free: i64,
    /// What the other nodes' leases hold and have not spent (as written): their requests in flight, their
    /// answers not written yet, and their spare; and what is held back for dead nodes' unwritten spend.
    pub held_by_others: i64,
    /// Of that, what is held by leases that were not renewed lately (see [`Store::budget_standing`]): their
    /// nodes are cut off from the store or dead, and cannot give it back until the lease expires.
    pub held_by_silent: i64,
    /// Of what the other leases hold, the spare of those renewed lately: unspent, and beyond the exposure their
    /// node last reported (its requests in flight and answers not written, with its headroom; a lease that
    /// never reported has none). Neither spent nor reserved: live nodes give it back when the fleet needs room.
    pub spare_of_live: i64,
}

impl Store {
    /// How the period of `scope` starting at `period` stands for `node` (`None` before anyone leased from it). A
    /// lease that expires within `silent_within_ms` from now is silent (it was not renewed lately: with leases
    /// of `lease` ms renewed every `heartbeat`, `lease - 2 × heartbeat` says "no renewal for two heartbeats").
    pub async fn budget_standing(
        &self,
        scope: &str,
        period: i64,
        node: &str,
        silent_within_ms: i64,
    ) -> Result<Option<Standing>, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query(
            "SELECT b.limit_nanos, \
             CAST(b.settled - COALESCE((SELECT SUM(h.amount) FROM budget_holdbacks h \
                  WHERE h.scope = b.scope AND h.period_start_ms = b.period_start_ms), 0) \
                + COALESCE((SELECT SUM(l.spent) FROM budget_leases l \
                  WHERE l.scope = b.scope AND l.period_start_ms = b.period_start_ms), 0) AS BIGINT), \
             CAST(GREATEST(b.limit_nanos - b.settled - b.granted, 0) AS BIGINT), \
             CAST(COALESCE((SELECT SUM(GREATEST(l.amount - l.spent, 0)) FROM budget_leases l \
                  WHERE l.scope = b.scope AND l.period_start_ms = b.period_start_ms AND l.node <> $3), 0) \
                + COALESCE((SELECT SUM(h.amount) FROM budget_holdbacks h \
                  WHERE h.scope = b.scope AND h.period_start_ms = b.period_start_ms), 0) AS BIGINT), \
             CAST(COALESCE((SELECT SUM(GREATEST(l.amount - l.spent, 0)) FROM budget_leases l \
                  WHERE l.scope = b.scope AND l.period_start_ms = b.period_start_ms AND l.node <> $3 \
                    AND l.expires_ms < svc_now_ms() + $4), 0) AS BIGINT), \
             CAST(COALESCE((SELECT SUM(GREATEST(l.amount - l.spent - COALESCE(l.exposure, l.amount - l.spent), 0)) \
                  FROM budget_leases l \
                  WHERE l.scope = b.scope AND l.period_start_ms = b.period_start_ms AND l.node <> $3 \
                    AND l.expires_ms >= svc_now_ms() + $4), 0) AS BIGINT) \
             FROM budget_periods b WHERE b.scope = $1 AND b.period_start_ms = $2",
        )
        .bind(scope)
        .bind(period)
        .bind(node)
        .bind(silent_within_ms)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(Standing {
                limit: r.try_get(0)?,
                spent: r.try_get(1)?,
                free: r.try_get(2)?,
                held_by_others: r.try_get(3)?,
                held_by_silent: r.try_get(4)?,
                spare_of_live: r.try_get(5)?,
            })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::tests::postgres;
    use crate::{LeaseAsk, Standing};

    #[tokio::test]
    async fn a_period_stands_apart_for_each_node() {
        let db = postgres().await;
        let s = &db.store;
        assert_eq!(s.budget_standing("team:t", 1_000, "a", 0).await.unwrap(), None);
        let ask = |node, want| LeaseAsk {
            scope: "team:t",
            period: 1_000,
            limit: 1_000,
            node,
            least: 1,
            want,
            share: 1,
            lease_ms: 60_000,
        };
        s.lease_grant(&ask("a", 300)).await.unwrap();
        s.lease_grant(&ask("b", 200)).await.unwrap();
        s.lease_grant(&ask("c", 100)).await.unwrap();
        let a = s.budget_standing("team:t", 1_000, "a", 30_000).await.unwrap();
        // Leases that never reported an exposure have no spare to give.
        let held =
            Standing { limit: 1_000, spent: 0, free: 400, held_by_others: 300, held_by_silent: 0, spare_of_live: 0 };
        assert_eq!(a, Some(held));
        // Leases of 60 s that expire within 61 s: every one is silent.
        let a = s.budget_standing("team:t", 1_000, "a", 61_000).await.unwrap();
        assert_eq!(a, Some(Standing { held_by_silent: 300, ..held }));
        // A live lease's spare is what it holds beyond the exposure its node reported.
        sqlx::query("UPDATE budget_leases SET exposure = 50 WHERE node = 'b'").execute(s.pool()).await.unwrap();
        let a = s.budget_standing("team:t", 1_000, "a", 30_000).await.unwrap();
        assert_eq!(a, Some(Standing { spare_of_live: 150, ..held }));
        sqlx::query("UPDATE budget_leases SET exposure = NULL WHERE node = 'b'").execute(s.pool()).await.unwrap();
        s.lease_end("team:t", 1_000, "c").await.unwrap();
        let b = s.budget_standing("team:t", 1_000, "b", 30_000).await.unwrap();
        let held =
            Standing { limit: 1_000, spent: 0, free: 500, held_by_others: 300, held_by_silent: 0, spare_of_live: 0 };
        assert_eq!(b, Some(held));
        // A dead node's lease, reclaimed: what is held back for it is held by others too (so a refusal adds up).
        s.lease_grant(&LeaseAsk { lease_ms: -1, ..ask("d", 100) }).await.unwrap();
        s.lease_reclaim().await.unwrap();
        let back: i64 = sqlx::query_scalar("SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM budget_holdbacks")
            .fetch_one(s.pool())
            .await
            .unwrap();
        let b = s.budget_standing("team:t", 1_000, "b", 30_000).await.unwrap().unwrap();
        assert_eq!((b.held_by_others, b.free + b.held_by_others + 200), (300 + back, 1_000));
    }
}
