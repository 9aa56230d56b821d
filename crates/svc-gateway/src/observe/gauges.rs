//! The gauges of state (requests in flight, deployment health, budgets, the outbox's backlog, the fleet's
//! nodes): set from what the gateway holds when `/metrics` is read (`handlers::metrics`), not counted as
//! requests go.

use prometheus::core::Collector;
use prometheus::{GaugeVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The labels of a budget's gauges.
pub(super) const BUDGET: &[&str] = &["scope", "team", "key_alias"];

/// The gauges of state, registered in the gateway's registry.
#[derive(Debug)]
pub(crate) struct Gauges {
    pub(crate) in_flight: IntGauge,
    pub(crate) in_flight_limit: IntGauge,
    pub(crate) health: IntGaugeVec,
    pub(crate) cooling_down: IntGaugeVec,
    pub(crate) budget_limit: GaugeVec,
    pub(crate) budget_spent: GaugeVec,
    pub(crate) budget_reserved: GaugeVec,
    pub(crate) budget_reset: GaugeVec,
    pub(crate) outbox_pending: IntGaugeVec,
    pub(crate) outbox_dead: IntGaugeVec,
    pub(crate) outbox_oldest: GaugeVec,
    pub(crate) nodes: IntGaugeVec,
    pub(crate) heartbeat_age: GaugeVec,
}

impl Gauges {
    /// Every gauge, registered in `r`.
    pub(super) fn new(r: &Registry) -> Result<Gauges, prometheus::Error> {
        Ok(Gauges {
            in_flight: int_gauge(r, "svc_requests_in_flight", "Model requests in flight on this node.")?,
            in_flight_limit: int_gauge(r, "svc_requests_in_flight_limit", "server.max_in_flight.")?,
            health: int_gauges(
                r,
                "svc_deployment_health",
                "1 for a deployment's current health state (healthy, degraded, unavailable), 0 for the others.",
                &["alias", "deployment", "provider", "state"],
            )?,
            cooling_down: int_gauges(
                r,
                "svc_deployment_cooling_down",
                "1 while a deployment is out of rotation cooling down.",
                &["alias", "deployment"],
            )?,
            budget_limit: gauges(r, "svc_budget_limit", "A budget's cap, in the budget unit.", BUDGET)?,
            budget_spent: gauges(r, "svc_budget_spent", "Settled spend of a budget's current period.", BUDGET)?,
            budget_reserved: gauges(r, "svc_budget_reserved", "Spend held by a budget's requests in flight.", BUDGET)?,
            budget_reset: gauges(
                r,
                "svc_budget_reset_timestamp_seconds",
                "When a budget's current period ends (Unix seconds).",
                BUDGET,
            )?,
            outbox_pending: int_gauges(
                r,
                "svc_outbox_pending",
                "Event deliveries not yet made, by destination.",
                &["destination"],
            )?,
            outbox_dead: int_gauges(
                r,
                "svc_outbox_dead",
                "Event deliveries given up (dead letters), by destination.",
                &["destination"],
            )?,
            outbox_oldest: gauges(
                r,
                "svc_outbox_oldest_pending_age_seconds",
                "Age of the oldest delivery not yet made, by destination (0 when none is pending).",
                &["destination"],
            )?,
            nodes: int_gauges(
                r,
                "svc_fleet_nodes",
                "Nodes of this fleet by state (online, offline, stopped).",
                &["state"],
            )?,
            heartbeat_age: gauges(
                r,
                "svc_fleet_node_heartbeat_age_seconds",
                "Seconds since each node's last heartbeat.",
                &["node", "state"],
            )?,
        })
    }

    /// Every family, for the names of the registry.
    pub(super) fn families(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.in_flight.clone()),
            Box::new(self.in_flight_limit.clone()),
            Box::new(self.health.clone()),
            Box::new(self.cooling_down.clone()),
            Box::new(self.budget_limit.clone()),
            Box::new(self.budget_spent.clone()),
            Box::new(self.budget_reserved.clone()),
            Box::new(self.budget_reset.clone()),
            Box::new(self.outbox_pending.clone()),
            Box::new(self.outbox_dead.clone()),
            Box::new(self.outbox_oldest.clone()),
            Box::new(self.nodes.clone()),
            Box::new(self.heartbeat_age.clone()),
        ]
    }
}

fn gauges(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<GaugeVec, prometheus::Error> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn int_gauges(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn int_gauge(r: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    let g = IntGauge::new(name, help)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}
