//! The gauges of state (requests in flight, deployment health, budgets, the outbox's backlog, the fleet's
//! nodes): set from what the gateway holds when `/metrics` is read (`handlers::metrics`), not counted as
//! requests go.

use super::register::Registrar;
use prometheus::{GaugeVec, IntGauge, IntGaugeVec};

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
    pub(super) fn new(r: &mut Registrar) -> Result<Gauges, prometheus::Error> {
        Ok(Gauges {
            in_flight: r.int_gauge("svc_requests_in_flight", "Model requests in flight on this node.")?,
            in_flight_limit: r.int_gauge("svc_requests_in_flight_limit", "server.max_in_flight.")?,
            health: r.int_gauges(
                "svc_deployment_health",
                "1 for a deployment's current health state (healthy, degraded, unavailable), 0 for the others.",
                &["alias", "deployment", "provider", "state"],
            )?,
            cooling_down: r.int_gauges(
                "svc_deployment_cooling_down",
                "1 while a deployment is out of rotation cooling down.",
                &["alias", "deployment"],
            )?,
            budget_limit: r.gauges("svc_budget_limit", "A budget's cap, in the budget unit.", BUDGET)?,
            budget_spent: r.gauges("svc_budget_spent", "Settled spend of a budget's current period.", BUDGET)?,
            budget_reserved: r.gauges("svc_budget_reserved", "Spend held by a budget's requests in flight.", BUDGET)?,
            budget_reset: r.gauges(
                "svc_budget_reset_timestamp_seconds",
                "When a budget's current period ends (Unix seconds).",
                BUDGET,
            )?,
            outbox_pending: r.int_gauges(
                "svc_outbox_pending",
                "Event deliveries not yet made, by destination.",
                &["destination"],
            )?,
            outbox_dead: r.int_gauges(
                "svc_outbox_dead",
                "Event deliveries given up (dead letters), by destination.",
                &["destination"],
            )?,
            outbox_oldest: r.gauges(
                "svc_outbox_oldest_pending_age_seconds",
                "Age of the oldest delivery not yet made, by destination (0 when none is pending).",
                &["destination"],
            )?,
            nodes: r.int_gauges(
                "svc_fleet_nodes",
                "Nodes of this fleet by state (online, offline, stopped).",
                &["state"],
            )?,
            heartbeat_age: r.gauges(
                "svc_fleet_node_heartbeat_age_seconds",
                "Seconds since each node's last heartbeat.",
                &["node", "state"],
            )?,
        })
    }
}
