//! `svc serve`: load the config (or the built-in demo), open the store, build the gateway, listen, reload the
//! config on SIGHUP, and shut down gracefully on SIGTERM or Ctrl-C.

use super::{load_config, open_store, Exit};
use crate::cli::ServeArgs;
use anyhow::Context;
use std::path::Path;
use svc_config::ConfigSource;
use svc_gateway::AppState;
use svc_keys::generate_secret;

/// Runs the gateway until a shutdown signal.
pub async fn run(explicit: Option<&Path>, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = load_config(explicit)?;
    let mut overrides = svc_gateway::Overrides { host: args.host.clone(), port: args.port };
    if let Some(h) = args.host {
        config.server.host = h;
    }
    if let Some(p) = args.port {
        config.server.port = p;
    }
    let _logging = super::init_logging(config.server.log_format);
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let store = open_store(&config).await?;
    let demo = config.source == ConfigSource::Builtin;
    let master = match (&config.server.master_key, demo) {
        (Some(k), _) => k.expose().to_string(),
        // The demo must answer out of the box: generate a master key once and keep it in the store, so
        // it stays the same across restarts.
        (None, true) => store.meta_get_or_insert("demo_master_key", &generate_secret()).await?,
        (None, false) => {
            return Err(Exit {
                code: 1,
                message: "no master key: set SVC_MASTER_KEY or server.master_key in the config".into(),
            }
            .into())
        }
    };
    // The certificate before anything else: a gateway that cannot serve TLS starts nothing.
    let tls = config.server.tls.as_ref().map(svc_gateway::tls_acceptor).transpose()?;
    let addr = format!("{}:{}", config.server.host, config.server.port);
    let listener = tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    if config.server.port == 0 {
        // A free port was asked for: the one given is this run's, kept by reloads of a file that says 0.
        config.server.port = local.port();
        overrides.port = Some(local.port());
    }
    let models = config.aliases().join(", ");
    let source = match &config.source {
        ConfigSource::File(p) => p.display().to_string(),
        ConfigSource::Builtin => "<built-in demo>".into(),
    };
    let database = config.server.database_url.clone();
    let from_env = config.server.master_key.is_some();
    let config_tls = tls.is_some();
    let state = AppState::serving(config, store, Some(&master), local.port()).await?;
    state.keep_address(overrides);
    if demo {
        tracing::warn!("running the built-in demo configuration: its aliases (the spec's four, and claude-* and gpt-* for the agent CLIs) are served by the `mock` provider (no accounts, no network)");
        if from_env {
            tracing::info!("master key: the value of $SVC_MASTER_KEY");
        } else {
            // The demo's generated master key is printed on purpose (and only in demo mode): it is the
            // only way for a first-time user to learn it.
            eprintln!("svc: demo master key (generated once, stored in {database}): {master}");
        }
        eprintln!(
            "svc: try: curl http://{local}/v1/chat/completions -H \"Authorization: Bearer $KEY\" -H 'Content-Type: application/json' \
             -d '{{\"model\":\"openai/gpt-4.1-mini\",\"messages\":[{{\"role\":\"user\",\"content\":\"hello\"}}]}}'"
        );
    }
    let scheme = if config_tls { "https" } else { "http" };
    tracing::info!(config = %source, store = %database, %models, "svc listening on {scheme}://{local}");
    svc_gateway::serve(state.clone(), listener, tls, signals(state)).await?;
    tracing::info!("svc stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C; reloads the configuration on each SIGHUP meanwhile (the terminal of a
/// foreground gateway closing sends one too: it reloads, it does not stop).
async fn signals(state: AppState) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let mut ctrl_c = std::pin::pin!(ctrl_c);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (mut term, mut hup) = match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
            (Ok(term), Ok(hup)) => (term, hup),
            _ => {
                ctrl_c.await;
                tracing::info!("shutting down: finishing requests in flight");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = &mut ctrl_c => break,
                _ = term.recv() => break,
                _ = hup.recv() => match svc_gateway::reload_file(&state).await {
                    Ok(_) => {}
                    Err(e) => tracing::error!("SIGHUP: the configuration was not reloaded: {e}"),
                },
            }
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
    tracing::info!("shutting down: finishing requests in flight");
}
