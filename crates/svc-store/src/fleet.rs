//! The fleet's nodes: every gateway registers itself, sends heartbeats, and is declared offline by whichever
//! node first sees its heartbeats stop ([`Store::declare_offline`] is one conditional UPDATE, so exactly one
//! caller gets each outage back). A clean stop marks the node `stopped`.
//!
//! A node name belongs to one run at a time. [`Store::register_node`] is one conditional upsert: a row that is
//! online with a heartbeat newer than the caller's cutoff, from another host or address, is a live twin and stays
//! as it is (of two runs registering at once, exactly one gets the row). Each run writes its own `instance`
//! token, and its heartbeats and clean stop touch the row only while the token is still its own.
//!
//! What this file does not do: decide when to send a heartbeat, how old a live heartbeat may be, or what to
//! announce (the gateway does).

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
    /// The SHA-256 (hex) of the configuration file it runs, to find nodes that run different files.
    pub config_digest: String,
    /// The host name of the machine it runs on (with `address`, what makes a start the same node coming back).
    pub host: String,
    /// A token of its current run: heartbeats and the clean stop of another run leave the row alone.
    pub instance: String,
}

/// What [`Store::register_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// The row is the caller's now; how the store saw the node before, when it was known.
    Registered(Option<NodeRow>),
    /// Another run of the node name is live (online, heartbeat newer than the cutoff, another host or
    /// address): its row, untouched.
    Refused(NodeRow),
}

/// What a heartbeat reports of its node (a reload changes the last two).
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// Now.
    pub now_ms: i64,
    /// Requests answered since the node started.
    pub requests_served: i64,
    /// Requests in flight.
    pub in_flight: i64,
    /// Its configuration of the teams (JSON text).
    pub teams: &'a str,
    /// The SHA-256 (hex) of its configuration file.
    pub config_digest: &'a str,
}

/// What [`Store::heartbeat`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The heartbeat is recorded.
    Sent,
    /// Recorded, and the node, declared offline (or stopped) meanwhile, is online again.
    Back,
    /// Nothing written: the row belongs to another run of the node name now.
    Displaced,
}

const COLUMNS: &str =
    "node, fleet, address, version, started_ms, heartbeat_ms, state, state_since_ms, requests_served, \
     in_flight, teams, host, instance, config_digest";

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
        config_digest: r.try_get("config_digest")?,
        host: r.try_get("host")?,
        instance: r.try_get("instance")?,
    })
}

/// Whether `row` is a live run of its node other than `new`: what refuses `new`'s registration (the negation of
/// the upsert's `WHERE`).
fn live_twin(row: &NodeRow, new: &NodeRow, live_after_ms: i64) -> bool {
    row.state == NodeState::Online
        && row.heartbeat_ms >= live_after_ms
        && !(row.address == new.address && row.host == new.host)
}

impl Store {
    /// Registers `node` (a run that just started) as online, unless another run of its name is live: a row
    /// online with a heartbeat at or after `live_after_ms` from another host or address. A row of the same host
    /// and address is the same node started again (after a crash its row still looks live) and is taken over.
    /// The decision is the upsert's `WHERE`, one statement, so of two runs registering at once exactly one gets
    /// the row. `Registered` carries the row as it was read just before (for the caller's log only).
    pub async fn register_node(&self, node: &NodeRow, live_after_ms: i64) -> Result<Registration, StoreError> {
        let before = self.node(&node.node).await?;
        let mut attempts = 0;
        loop {
            let won = sqlx::query(
                "INSERT INTO fleet_nodes (node, fleet, address, version, started_ms, heartbeat_ms, state, \
                 state_since_ms, requests_served, in_flight, teams, host, instance, config_digest) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'online', $7, 0, 0, $8, $9, $10, $12) \
                 ON CONFLICT (node) DO UPDATE SET fleet = $2, address = $3, version = $4, started_ms = $5, \
                 heartbeat_ms = $6, state = 'online', state_since_ms = $7, requests_served = 0, in_flight = 0, \
                 teams = $8, host = $9, instance = $10, config_digest = $12 \
                 WHERE fleet_nodes.state <> 'online' OR fleet_nodes.heartbeat_ms < $11 \
                 OR (fleet_nodes.address = $3 AND fleet_nodes.host = $9) \
                 RETURNING node",
            )
            .bind(&node.node)
            .bind(&node.fleet)
            .bind(&node.address)
            .bind(&node.version)
            .bind(node.started_ms)
            .bind(node.heartbeat_ms)
            .bind(node.state_since_ms)
            .bind(&node.teams)
            .bind(&node.host)
            .bind(&node.instance)
            .bind(live_after_ms)
            .bind(&node.config_digest)
            .fetch_optional(self.pool())
            .await?;
            if won.is_some() {
                return Ok(Registration::Registered(before));
            }
            // The row that refused it, to name in the refusal. It may have changed since (its run stopped just
            // then): then the upsert decides again, a few times at most.
            attempts += 1;
            match self.node(&node.node).await? {
                Some(row) if attempts >= 3 || live_twin(&row, node, live_after_ms) => {
                    return Ok(Registration::Refused(row))
                }
                _ => {}
            }
        }
    }

    /// The row of `node`, when it ever registered.
    pub async fn node(&self, node: &str) -> Result<Option<NodeRow>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM fleet_nodes WHERE node = $1");
        let row = sqlx::query(&sql).bind(node).fetch_optional(self.pool()).await?;
        row.as_ref().map(from_row).transpose()
    }

    /// A heartbeat of the run `instance` of `node`: it is alive at `now_ms` with these figures. A node declared
    /// offline meanwhile comes back online. Nothing is written when the row belongs to another run.
    pub async fn heartbeat(&self, node: &str, instance: &str, report: &Report<'_>) -> Result<Beat, StoreError> {
        let now_ms = report.now_ms;
        let back = sqlx::query(
            "UPDATE fleet_nodes SET state = 'online', state_since_ms = $2 \
             WHERE node = $1 AND instance = $3 AND state <> 'online'",
        )
        .bind(node)
        .bind(now_ms)
        .bind(instance)
        .execute(self.pool())
        .await?;
        let sent = sqlx::query(
            "UPDATE fleet_nodes SET heartbeat_ms = $2, requests_served = $3, in_flight = $4, teams = $6, \
             config_digest = $7 WHERE node = $1 AND instance = $5",
        )
        .bind(node)
        .bind(now_ms)
        .bind(report.requests_served)
        .bind(report.in_flight)
        .bind(instance)
        .bind(report.teams)
        .bind(report.config_digest)
        .execute(self.pool())
        .await?;
        Ok(match (sent.rows_affected(), back.rows_affected()) {
            (0, _) => Beat::Displaced,
            (_, 0) => Beat::Sent,
            _ => Beat::Back,
        })
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

    /// The run `instance` of `node` stopped cleanly (nothing is written when the row belongs to another run).
    pub async fn stop_node(&self, node: &str, instance: &str, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE fleet_nodes SET state = 'stopped', state_since_ms = $2, heartbeat_ms = $2, in_flight = 0 \
             WHERE node = $1 AND instance = $3",
        )
        .bind(node)
        .bind(now_ms)
        .bind(instance)
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
