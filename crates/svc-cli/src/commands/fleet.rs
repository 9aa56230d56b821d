//! `svc fleet status`: the nodes of the fleet as the store knows them, read directly (no server needed).
//! `svc fleet forget`: releases what a dead node holds of the fleet's budgets.

use super::{load_config, open_store};
use crate::cli::FleetCommand;
use std::io::Write;
use std::path::Path;

/// Runs a `svc fleet` command.
pub async fn run(explicit: Option<&Path>, cmd: FleetCommand) -> anyhow::Result<()> {
    let json = match cmd {
        FleetCommand::Status { json } => json,
        FleetCommand::Forget { node } => return forget(explicit, &node).await,
    };
    let config = load_config(explicit)?;
    let store = open_store(&config).await?;
    let nodes = svc_routing::node::status(&store, &config.fleet.name).await?;
    store.close().await;
    let mut out = super::stdout();
    if json {
        writeln!(out, "{}", serde_json::json!({ "fleet": config.fleet.name, "nodes": nodes }))?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<20}  {:<8}  {:>9}  {:<28}  {:<8}  {:>9}  {:>9}  {:>12}  {:<14}  TEAMS DIFFER",
        "NODE", "STATE", "HEARTBEAT", "ADDRESS", "VERSION", "SERVED", "IN FLIGHT", "SPEND TODAY", "CONFIG"
    )?;
    let mut differ = false;
    for n in &nodes {
        // The file's digest, short, and `!` when another online node runs another file.
        let digest = n.config_digest.get(..12).filter(|_| !n.config_digest.is_empty()).unwrap_or("-");
        let mark = if n.config_file_differs { "!" } else { "" };
        differ |= n.config_file_differs;
        writeln!(
            out,
            "{:<20}  {:<8}  {:>8}s  {:<28}  {:<8}  {:>9}  {:>9}  {:>12.6}  {:<14}  {}",
            n.node,
            n.state,
            n.heartbeat_age_seconds,
            n.address,
            n.version,
            n.requests_served,
            n.in_flight,
            n.spend_today,
            format!("{digest}{mark}"),
            n.config_differs.join(",")
        )?;
    }
    if differ {
        eprintln!(
            "svc: the nodes marked ! run another configuration file than other online nodes (CONFIG is its SHA-256)"
        );
    }
    if nodes.is_empty() {
        writeln!(out, "(no node of fleet `{}` has registered in this store)", config.fleet.name)?;
    }
    Ok(())
}

/// Releases the leases and holdbacks of `node`, which must not be online.
async fn forget(explicit: Option<&Path>, node: &str) -> anyhow::Result<()> {
    let config = load_config(explicit)?;
    let store = open_store(&config).await?;
    let nodes = store.list_nodes(&config.fleet.name).await?;
    let Some(row) = nodes.iter().find(|n| n.node == node) else {
        anyhow::bail!("no node `{node}` in fleet `{}`", config.fleet.name);
    };
    if row.state == svc_store::NodeState::Online {
        anyhow::bail!(
            "node `{node}` is online (last heartbeat {} s ago): stop it, or wait until the fleet declares it offline",
            (chrono::Utc::now().timestamp_millis() - row.heartbeat_ms) / 1000
        );
    }
    let leases = store.lease_return_all(node).await?;
    let holdbacks = store.lease_release_holdbacks(node).await?;
    store.close().await;
    eprintln!(
        "svc: released {leases} lease(s) and {holdbacks} holdback(s) of node `{node}`; if it starts again with its old \
         journal, that spend is still recorded (it was answered) and may take its budgets past their limit"
    );
    Ok(())
}
