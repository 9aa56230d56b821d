//! `svc fleet status`: the nodes of the fleet as the store knows them, read directly (no server needed).

use super::{load_config, open_store};
use crate::cli::FleetCommand;
use std::io::Write;
use std::path::Path;

/// Runs a `svc fleet` command.
pub async fn run(explicit: Option<&Path>, cmd: FleetCommand) -> anyhow::Result<()> {
    let FleetCommand::Status { json } = cmd;
    let config = load_config(explicit)?;
    let store = open_store(&config).await?;
    let nodes = svc_gateway::fleet::status(&store, &config.fleet.name).await?;
    store.close().await;
    let mut out = super::stdout();
    if json {
        writeln!(out, "{}", serde_json::json!({ "fleet": config.fleet.name, "nodes": nodes }))?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<20}  {:<8}  {:>9}  {:<28}  {:<8}  {:>9}  {:>9}  {:>12}  CONFIG DIFFERS",
        "NODE", "STATE", "HEARTBEAT", "ADDRESS", "VERSION", "SERVED", "IN FLIGHT", "SPEND TODAY"
    )?;
    for n in &nodes {
        writeln!(
            out,
            "{:<20}  {:<8}  {:>8}s  {:<28}  {:<8}  {:>9}  {:>9}  {:>12.6}  {}",
            n.node,
            n.state,
            n.heartbeat_age_seconds,
            n.address,
            n.version,
            n.requests_served,
            n.in_flight,
            n.spend_today,
            n.config_differs.join(",")
        )?;
    }
    if nodes.is_empty() {
        writeln!(out, "(no node of fleet `{}` has registered in this store)", config.fleet.name)?;
    }
    Ok(())
}
