//! This gateway as a node of its fleet (spec 1: one gateway per node, reached by node name; spec 6.1:
//! `node.offline` from a fleet monitor).
//!
//! 1. [`FleetNode::register`]: at start, before anything else reaches the store, the node records itself as
//!    online (name, fleet, address, host name, a token of this run, version, start time, its teams'
//!    configuration) and logs how the store saw it before: back after an unclean stop (with how long it was
//!    down), back after being declared offline, or new. On a shared store a start is refused while another run
//!    of the node name is live elsewhere (README, "Fleet mode"): its heartbeat younger than
//!    `fleet.offline_after_seconds`, from another host or address.
//! 2. [`FleetNode::spawn`]: every `fleet.heartbeat_seconds` it sends a heartbeat (with its requests served and
//!    in flight) and, as the fleet monitor, declares offline every node of its fleet whose last heartbeat is
//!    older than `fleet.offline_after_seconds`. That is one conditional UPDATE in the store, so each outage is
//!    won by exactly one node, which emits the one `node.offline`. A heartbeat writes only while the row is this
//!    run's; when another run has taken the name, each heartbeat logs an error naming it.
//! 3. [`FleetNode::stop`]: a clean stop (SIGTERM) marks the node `stopped`; nothing is announced.
//!
//! Every node runs the monitor, so a fleet reports a dead node as long as one node lives. With a single node
//! (an SQLite store) nobody is left to report its death; it logs how long it was down when it starts again.
//!
//! What this file does not do: lease budgets (svc-limits) or outbox destinations (the outbox worker).

use serde::Serialize;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use svc_config::FleetConfig;
use svc_events::{EventSink, GatewayEvent};
use svc_store::{Backend, Beat, NodeRow, NodeState, Registration, Store};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// This node: its identity and the counters its heartbeats report.
#[derive(Debug)]
pub struct FleetNode {
    config: FleetConfig,
    store: Store,
    /// Answered chat requests since start.
    served: AtomicU64,
    /// The in-flight semaphore and its size, for the number of requests in flight.
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    /// What the node runs, as its heartbeats report it (a reload or a change of the teams replaces it).
    running: std::sync::Mutex<Running>,
    /// The teams last reported as configured differently on another node (logged when this changes).
    differs: std::sync::Mutex<Vec<String>>,
    /// The host name of this machine.
    host: String,
    /// A token of this run: its heartbeats write the node's row only while the row holds it.
    instance: String,
}

/// What a node runs, as its heartbeats report it, so that nodes that disagree are found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Running {
    /// Its teams (JSON text: id → settings).
    pub teams: String,
    /// The SHA-256 (hex) of its configuration file.
    pub config_digest: String,
}

/// The node cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Another run of the node name is live on another host or address.
    #[error(
        "node `{node}` is already running at {address} on host `{host}` (last heartbeat {last_heartbeat}, \
         {age_seconds} s ago): stop it, or if it is dead wait {wait_seconds} s until it counts as offline, or give \
         this node another `fleet.node`"
    )]
    Taken {
        /// The node name.
        node: String,
        /// The live run's address.
        address: String,
        /// The live run's host name.
        host: String,
        /// Its last heartbeat (RFC 3339).
        last_heartbeat: String,
        /// How long ago.
        age_seconds: i64,
        /// How long until its heartbeat is older than `fleet.offline_after_seconds`.
        wait_seconds: i64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] svc_store::StoreError),
}

fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

impl FleetNode {
    /// What it reports from its next heartbeat on (a reload or a change of the teams changed it).
    pub fn set_running(&self, running: Running) {
        if let Ok(mut r) = self.running.lock() {
            *r = running;
        }
    }

    fn running(&self) -> Running {
        self.running.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The node of `config`, counting requests in flight on `in_flight` (of `max_in_flight` places).
    pub fn new(
        config: FleetConfig,
        store: Store,
        in_flight: Arc<Semaphore>,
        max_in_flight: usize,
        running: Running,
    ) -> FleetNode {
        let differs = std::sync::Mutex::new(Vec::new());
        // gethostname(2): no IO.
        let host = hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
        let instance = uuid::Uuid::new_v4().simple().to_string();
        let running = std::sync::Mutex::new(running);
        FleetNode {
            config,
            store,
            served: AtomicU64::new(0),
            in_flight,
            max_in_flight,
            running,
            differs,
            host,
            instance,
        }
    }

    /// The node's name.
    pub fn node_name(&self) -> &str {
        &self.config.node
    }

    /// One more answered request.
    pub fn served(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    fn in_flight_now(&self) -> i64 {
        let used = self.max_in_flight.saturating_sub(self.in_flight.available_permits());
        i64::try_from(used).unwrap_or(i64::MAX)
    }

    fn offline_after_ms(&self) -> i64 {
        i64::try_from(self.config.offline_after.as_millis()).unwrap_or(i64::MAX)
    }

    /// Records the node as online at `address` (used when `fleet.address` is not set) and logs how it was seen
    /// before; refused ([`RegisterError::Taken`]) while another run of the node name is live elsewhere.
    pub async fn register(&self, address: &str) -> Result<(), RegisterError> {
        let now = svc_store::now_ms();
        let running = self.running();
        let row = NodeRow {
            node: self.config.node.clone(),
            fleet: self.config.name.clone(),
            address: self.config.address.clone().unwrap_or_else(|| address.to_string()),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: now,
            heartbeat_ms: now,
            state: NodeState::Online,
            state_since_ms: now,
            requests_served: 0,
            in_flight: 0,
            teams: running.teams,
            config_digest: running.config_digest,
            host: self.host.clone(),
            instance: self.instance.clone(),
        };
        let live_after = match self.store.backend() {
            Backend::Postgres => now.saturating_sub(self.offline_after_ms()),
            // An SQLite file is one machine's, and the lock on the spend journal beside it already keeps a second
            // process of this node away (taken before this): a restart after a crash on another port is this
            // node, whatever its row says.
            Backend::Sqlite => i64::MAX,
        };
        let before = match self.store.register_node(&row, live_after).await? {
            Registration::Registered(before) => before,
            Registration::Refused(live) => {
                let age = now.saturating_sub(live.heartbeat_ms);
                return Err(RegisterError::Taken {
                    node: live.node,
                    address: live.address,
                    host: live.host,
                    last_heartbeat: rfc3339_ms(live.heartbeat_ms),
                    age_seconds: age / 1000,
                    wait_seconds: (self.offline_after_ms().saturating_sub(age).max(0) + 999) / 1000,
                });
            }
        };
        let down_for = |since: i64| Duration::from_millis(u64::try_from(now - since).unwrap_or(0)).as_secs();
        match before {
            None => tracing::info!(node = %row.node, fleet = %row.fleet, address = %row.address, "node registered"),
            Some(b) if b.state == NodeState::Online => tracing::warn!(
                node = %row.node,
                last_heartbeat = %rfc3339_ms(b.heartbeat_ms),
                down_seconds = down_for(b.heartbeat_ms),
                "node started again after an unclean stop (its last heartbeat is the last sign of the previous run)"
            ),
            Some(b) if b.state == NodeState::Offline => tracing::info!(
                node = %row.node,
                offline_since = %rfc3339_ms(b.state_since_ms),
                down_seconds = down_for(b.heartbeat_ms),
                "node back online after it was declared offline"
            ),
            Some(_) => tracing::info!(node = %row.node, "node started again after a clean stop"),
        }
        Ok(())
    }

    /// Starts the heartbeat and the fleet monitor on `tasks`, until `shutdown`.
    pub fn spawn(self: &Arc<Self>, events: Arc<dyn EventSink>, tasks: &TaskTracker, shutdown: CancellationToken) {
        let node = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(node.config.heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => node.beat(events.as_ref()).await,
                }
            }
        });
    }

    /// One heartbeat, then one look for nodes whose heartbeats stopped.
    async fn beat(&self, events: &dyn EventSink) {
        let now = svc_store::now_ms();
        let served = i64::try_from(self.served.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let running = self.running();
        let report = svc_store::Report {
            now_ms: now,
            requests_served: served,
            in_flight: self.in_flight_now(),
            teams: &running.teams,
            config_digest: &running.config_digest,
        };
        match self.store.heartbeat(&self.config.node, &self.instance, &report).await {
            Ok(Beat::Back) => {
                tracing::info!(node = %self.config.node, "node online again (its heartbeats had stopped)")
            }
            Ok(Beat::Sent) => {}
            Ok(Beat::Displaced) => self.displaced().await,
            Err(e) => tracing::warn!(error = %e, "cannot send the node's heartbeat to the store"),
        }
        self.check_config().await;
        let offline_after = self.offline_after_ms();
        let gone = match self.store.declare_offline(&self.config.name, now - offline_after, now).await {
            Ok(gone) => gone,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for nodes whose heartbeats stopped");
                return;
            }
        };
        for n in gone {
            let silent = Duration::from_millis(u64::try_from(now - n.heartbeat_ms).unwrap_or(0));
            tracing::warn!(node = %n.node, address = %n.address, last_seen = %rfc3339_ms(n.heartbeat_ms),
                "node offline: its heartbeats stopped");
            events.emit(GatewayEvent {
                kind: svc_events::EventKind::NodeOffline,
                agent: "gateway".into(),
                data: json!({
                    "node": n.node,
                    "address": n.address,
                    "last_seen": rfc3339_ms(n.heartbeat_ms),
                    "offline_for_seconds": silent.as_secs(),
                }),
            });
        }
    }

    /// Another run of this node name registered after this one (it started while this one's heartbeat was older
    /// than `offline_after`): its row is not written over; the operator is told which run holds it.
    async fn displaced(&self) {
        let other = match self.store.node(&self.config.node).await {
            Ok(Some(row)) => format!("{} on host `{}`", row.address, row.host),
            Ok(None) => "unknown".to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        tracing::error!(node = %self.config.node, other = %other,
            "another process runs with this node name and holds its row in the store: this one's heartbeats are not \
             recorded (the fleet may declare it offline); stop one of them, or give one another `fleet.node`");
    }

    /// Logs, when it changes, which teams this node configures differently from another online node.
    async fn check_config(&self) {
        let Ok(nodes) = self.store.list_nodes(&self.config.name).await else { return };
        let mut now: Vec<String> =
            disagreements(&nodes).into_iter().filter(|(n, _)| *n == self.config.node).map(|(_, t)| t).collect();
        now.sort();
        let Ok(mut before) = self.differs.lock() else { return };
        if *before != now {
            if now.is_empty() {
                tracing::info!("every online node now configures the teams the same way");
            } else {
                tracing::warn!(teams = %now.join(", "),
                    "teams configured differently on another online node: the budget in the store (written by the node that started last) is the one enforced; see `svc fleet status`");
            }
            *before = now;
        }
    }

    /// A clean stop: the node is `stopped`, and no `node.offline` is announced for it.
    pub async fn stop(&self) {
        if let Err(e) = self.store.stop_node(&self.config.node, &self.instance, svc_store::now_ms()).await {
            tracing::warn!(error = %e, "cannot record the node's clean stop");
        }
    }
}

/// The address a node is reached at when `fleet.address` is not set: `http://<host>:<port>` when it listens on
/// one address, `http://<node name>:<port>` when it listens on all (a fleet's overlay network reaches nodes by
/// name: README, "Fleet mode").
pub fn advertised_address(host: &str, node: &str, port: u16) -> String {
    let unspecified = host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_unspecified());
    let host = if unspecified || host.is_empty() { node } else { host };
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// A node as `GET /fleet/nodes` and `svc fleet status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// Node name.
    pub node: String,
    /// `online`, `offline` or `stopped`.
    pub state: &'static str,
    /// Since when it is in that state (RFC 3339).
    pub state_since: String,
    /// Its address.
    pub address: String,
    /// Its version.
    pub version: String,
    /// When it last started (RFC 3339).
    pub started_at: String,
    /// Its last heartbeat (RFC 3339), and how long ago.
    pub last_heartbeat: String,
    /// Seconds since its last heartbeat.
    pub heartbeat_age_seconds: i64,
    /// Requests it answered since it started, at its last heartbeat.
    pub requests_served: i64,
    /// Requests in flight at its last heartbeat.
    pub in_flight: i64,
    /// Its spend since the start of the current UTC day, in the budget unit.
    pub spend_today: f64,
    /// Teams whose configuration on this node differs from another online node's.
    pub config_differs: Vec<String>,
    /// The SHA-256 (hex) of the configuration file it runs (empty: a node of a version that does not say).
    pub config_digest: String,
    /// Whether it runs another configuration file than some other online node.
    pub config_file_differs: bool,
}

/// The nodes of `fleet`, as an operator wants to see them.
pub async fn status(store: &Store, fleet: &str) -> Result<Vec<NodeStatus>, svc_store::StoreError> {
    let now = svc_store::now_ms();
    let today = chrono::Utc::now().date_naive().and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp_millis());
    let spend = store.spend_by_node(today.unwrap_or(now)).await?;
    let nodes = store.list_nodes(fleet).await?;
    let differs = disagreements(&nodes);
    let files: Vec<String> = file_disagreements(&nodes).into_iter().map(String::from).collect();
    Ok(nodes
        .into_iter()
        .map(|n| NodeStatus {
            spend_today: spend
                .iter()
                .find(|(node, _)| *node == n.node)
                .map(|(_, nanos)| svc_budget::Money::from_nanos(*nanos).as_f64())
                .unwrap_or(0.0),
            config_differs: differs.iter().filter(|(node, _)| *node == n.node).map(|(_, t)| t.clone()).collect(),
            config_file_differs: files.contains(&n.node),
            config_digest: n.config_digest,
            state: n.state.as_str(),
            state_since: rfc3339_ms(n.state_since_ms),
            started_at: rfc3339_ms(n.started_ms),
            last_heartbeat: rfc3339_ms(n.heartbeat_ms),
            heartbeat_age_seconds: (now - n.heartbeat_ms) / 1000,
            requests_served: n.requests_served,
            in_flight: n.in_flight,
            node: n.node,
            address: n.address,
            version: n.version,
        })
        .collect())
}

/// The online nodes that run another configuration file than some other online node (a node that reports no
/// digest, of an older version, is not compared).
fn file_disagreements(nodes: &[NodeRow]) -> Vec<&str> {
    let online: Vec<&NodeRow> =
        nodes.iter().filter(|n| n.state == NodeState::Online && !n.config_digest.is_empty()).collect();
    online
        .iter()
        .filter(|n| online.iter().any(|o| o.config_digest != n.config_digest))
        .map(|n| n.node.as_str())
        .collect()
}

/// (node, team) for every team whose configuration on an online node differs from that on another online
/// node (a team one node has and another lacks counts too).
fn disagreements(nodes: &[NodeRow]) -> Vec<(String, String)> {
    let online: Vec<(&str, Map<String, Value>)> = nodes
        .iter()
        .filter(|n| n.state == NodeState::Online)
        .map(|n| {
            let teams = match serde_json::from_str::<Value>(&n.teams) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            };
            (n.node.as_str(), teams)
        })
        .collect();
    let mut out = Vec::new();
    for (node, teams) in &online {
        let mut names: Vec<&String> = online.iter().flat_map(|(_, t)| t.keys()).collect();
        names.sort();
        names.dedup();
        for team in names {
            let mine = teams.get(team);
            if online.iter().any(|(other, theirs)| other != node && theirs.get(team) != mine) {
                out.push((node.to_string(), team.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: NodeState, teams: &str) -> NodeRow {
        NodeRow {
            node: name.into(),
            fleet: "f".into(),
            address: String::new(),
            version: String::new(),
            started_ms: 0,
            heartbeat_ms: 0,
            state,
            state_since_ms: 0,
            requests_served: 0,
            in_flight: 0,
            teams: teams.into(),
            host: String::new(),
            instance: String::new(),
            config_digest: String::new(),
        }
    }

    #[test]
    fn nodes_running_another_file_are_found_among_online_nodes() {
        let with = |name: &str, state: NodeState, digest: &str| NodeRow {
            config_digest: digest.into(),
            ..node(name, state, "{}")
        };
        let nodes = [
            with("n1", NodeState::Online, "aa"),
            with("n2", NodeState::Online, "aa"),
            with("n3", NodeState::Online, "bb"),
            with("n4", NodeState::Online, ""),
            with("n5", NodeState::Offline, "cc"),
        ];
        assert_eq!(file_disagreements(&nodes), ["n1", "n2", "n3"], "an old node and an offline one are not compared");
        assert!(file_disagreements(&nodes[..2]).is_empty());
    }

    #[test]
    fn teams_configured_differently_are_found_among_online_nodes() {
        let a = r#"{"t":{"budget_limit":"1.00"},"u":{"budget_limit":null}}"#;
        let b = r#"{"t":{"budget_limit":"2.00"},"u":{"budget_limit":null}}"#;
        let nodes = [
            node("n1", NodeState::Online, a),
            node("n2", NodeState::Online, b),
            node("n3", NodeState::Online, a),
            node("n4", NodeState::Stopped, r#"{"x":{}}"#),
        ];
        let mut got = disagreements(&nodes);
        got.sort();
        let want: Vec<(String, String)> =
            [("n1", "t"), ("n2", "t"), ("n3", "t")].iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
        assert_eq!(got, want, "a stopped node is not compared");
        assert!(disagreements(&nodes[..1]).is_empty());
    }
}
