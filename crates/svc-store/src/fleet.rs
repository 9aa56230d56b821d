//! The fleet's nodes: every gateway registers itself, sends heartbeats, and is declared offline by whichever
//! node first sees its heartbeats stop ([`Store::declare_offline`] is one conditional UPDATE, so exactly one
//! caller gets each outage back). A clean stop marks the node `stopped`.
//!
//! What this file does not do: decide when to send a heartbeat or what to announce (the gateway does).

use crate::{Store, StoreError};
use sqlx::any::AnyRow;
use sqlx::Row;

/// A node's state in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Sending heartbeats.
    Online,
    /// Its heartbeats stopped; announced as `node.offline`.
    Offline,
    /// Stopped cleanly.
    Stopped,
}

impl NodeState {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Online => "online",
            NodeState::Offline => "offline",
            NodeState::Stopped => "stopped",
        }
    }

    fn parse(text: &str) -> Result<NodeState, StoreError> {
        match text {
            "online" => Ok(NodeState::Online),
            "offline" => Ok(NodeState::Offline),
            "stopped" => Ok(NodeState::Stopped),
            _ => Err(StoreError::Corrupt("fleet_nodes.state")),
        }
    }
}

/// One node of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Node name (unique in the store).
    pub node: String,
    /// Fleet name.
    pub fleet: String,
    /// The address other nodes and operators reach it at.
    pub address: String,
    /// The gateway's version.
    pub version: String,
    /// When it last started.
    pub started_ms: i64,
    /// Its last heartbeat.
    pub heartbeat_ms: i64,
    /// Its state.
    pub state: NodeState,
    /// Since when it is in that state.
    pub state_since_ms: i64,
    /// Requests it answered since it started.
    pub requests_served: i64,
    /// Requests in flight at its last heartbeat.
    pub in_flight: i64,
    /// Its configuration of the teams (JSON text), to find nodes that disagree.
    pub teams: String,
}

const COLUMNS: &str =
    "node, fleet, address, version, started_ms, heartbeat_ms, state, state_since_ms, requests_served, \
     in_flight, teams";

fn from_row(r: &AnyRow) -> Result<NodeRow, StoreError> {
    let state: String = r.try_get("state")?;
    Ok(NodeRow {
        node: r.try_get("node")?,
        fleet: r.try_get("fleet")?,
        address: r.try_get("address")?,
        version: r.try_get("version")?,
        started_ms: r.try_get("started_ms")?,
        heartbeat_ms: r.try_get("heartbeat_ms")?,
        state: NodeState::parse(&state)?,
        state_since_ms: r.try_get("state_since_ms")?,
        requests_served: r.try_get("requests_served")?,
        in_flight: r.try_get("in_flight")?,
        teams: r.try_get("teams")?,
    })
}

impl Store {
    /// Registers `node` as online (it just started), returning how the store saw it before, if it was known.
    pub async fn register_node(&self, node: &NodeRow) -> Result<Option<NodeRow>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let sql = format!("SELECT {COLUMNS} FROM fleet_nodes WHERE node = $1");
        let before = sqlx::query(&sql).bind(&node.node).fetch_optional(&mut *tx).await?;
        let before = before.as_ref().map(from_row).transpose()?;
        sqlx::query(
            "INSERT INTO fleet_nodes (node, fleet, address, version, started_ms, heartbeat_ms, state, state_since_ms, \
             requests_served, in_flight, teams) VALUES ($1, $2, $3, $4, $5, $6, 'online', $7, 0, 0, $8) \
             ON CONFLICT (node) DO UPDATE SET fleet = $2, address = $3, version = $4, started_ms = $5, \
             heartbeat_ms = $6, state = 'online', state_since_ms = $7, requests_served = 0, in_flight = 0, teams = $8",
        )
        .bind(&node.node)
        .bind(&node.fleet)
        .bind(&node.address)
        .bind(&node.version)
        .bind(node.started_ms)
        .bind(node.heartbeat_ms)
        .bind(node.state_since_ms)
        .bind(&node.teams)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(before)
    }

    /// A heartbeat: the node is alive at `now_ms` with these figures. A node declared offline meanwhile comes
    /// back online (returns true then).
    pub async fn heartbeat(
        &self,
        node: &str,
        now_ms: i64,
        requests_served: i64,
        in_flight: i64,
    ) -> Result<bool, StoreError> {
        let back = sqlx::query(
            "UPDATE fleet_nodes SET state = 'online', state_since_ms = $2 WHERE node = $1 AND state <> 'online'",
        )
        .bind(node)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        sqlx::query("UPDATE fleet_nodes SET heartbeat_ms = $2, requests_served = $3, in_flight = $4 WHERE node = $1")
            .bind(node)
            .bind(now_ms)
            .bind(requests_served)
            .bind(in_flight)
            .execute(self.pool())
            .await?;
        Ok(back.rows_affected() > 0)
    }

    /// Declares offline every online node of `fleet` whose last heartbeat is older than `cutoff_ms`, and
    /// returns them as they were (heartbeat included). One conditional UPDATE: of several nodes calling this
    /// at once, each outage goes to exactly one.
    pub async fn declare_offline(&self, fleet: &str, cutoff_ms: i64, now_ms: i64) -> Result<Vec<NodeRow>, StoreError> {
        let sql = format!(
            "UPDATE fleet_nodes SET state = 'offline', state_since_ms = $3 \
             WHERE fleet = $1 AND state = 'online' AND heartbeat_ms < $2 RETURNING {COLUMNS}"
        );
        let rows = sqlx::query(&sql).bind(fleet).bind(cutoff_ms).bind(now_ms).fetch_all(self.pool()).await?;
        rows.iter().map(from_row).collect()
    }

    /// The node stopped cleanly.
    pub async fn stop_node(&self, node: &str, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE fleet_nodes SET state = 'stopped', state_since_ms = $2, heartbeat_ms = $2, in_flight = 0 \
             WHERE node = $1",
        )
        .bind(node)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records `node`'s judgement (`healthy`, `degraded`, `unavailable`) of `deployment`; true when this node
    /// is the one to announce the fleet's transition (its judgement made the fleet's worst state worse).
    /// Fleet mode only (PostgreSQL).
    pub async fn health_judged(
        &self,
        fleet: &str,
        node: &str,
        deployment: &str,
        state: &str,
    ) -> Result<bool, StoreError> {
        self.fleet_only()?;
        let row = sqlx::query("SELECT CAST(svc_health_judged($1, $2, $3, $4) AS INTEGER)")
            .bind(fleet)
            .bind(node)
            .bind(deployment)
            .bind(state)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get::<i32, _>(0)? != 0)
    }

    /// Every node of `fleet`, by name.
    pub async fn list_nodes(&self, fleet: &str) -> Result<Vec<NodeRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM fleet_nodes WHERE fleet = $1 ORDER BY node");
        let rows = sqlx::query(&sql).bind(fleet).fetch_all(self.pool()).await?;
        rows.iter().map(from_row).collect()
    }

    /// Spend of each node since `since_ms`, in nano-units (exact, clamped to `i64`).
    pub async fn spend_by_node(&self, since_ms: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, CAST(COALESCE(SUM(cost / 1000000000), 0) AS BIGINT) AS su, \
             CAST(COALESCE(SUM(cost % 1000000000), 0) AS BIGINT) AS sr FROM spend_log \
             WHERE ts_ms >= $1 AND node IS NOT NULL GROUP BY node",
        )
        .bind(since_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let (units, rest): (i64, i64) = (r.try_get("su")?, r.try_get("sr")?);
                let nanos = i128::from(units) * 1_000_000_000 + i128::from(rest);
                Ok((r.try_get("node")?, i64::try_from(nanos).unwrap_or(i64::MAX)))
            })
            .collect()
    }
}
