//! `AppState`: everything a request needs, built once by [`AppState::serving`] (a gateway about to serve: the
//! node is registered first) or [`AppState::new`] (no registration: tests that drive the router), in the parts
//! its readers take.

use crate::auth::AuthState;
use crate::pipeline::Pipeline;
use crate::spend::writer::SpendWriter;
use arc_swap::ArcSwap;
use axum::extract::FromRef;
use std::sync::Arc;
use svc_config::Config;
use svc_events::gateway_outbox::StoreOutbox;
use svc_events::Emitter;
use svc_events::{EventSink, SwappableSink};
use svc_keys::{hash_secret, KeyCache};
use svc_limits::budgets::{Budgets, Clock};
use svc_limits::rate::RateLimits;
use svc_routing::readiness::Readiness;
use svc_routing::ModelTable;
use svc_store::journal::{Journal, JournalError, Replay};
use svc_store::Store;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Shared state of the gateway, in three parts (each one `Arc`, so a handler's state costs a reference count):
/// what the pipeline's stages read, what authentication reads, and what only the HTTP edge reads. A handler that
/// needs only the first or the second takes it by `FromRef` (the model endpoints, the dashboard's sign-in); no
/// module below the handlers sees the state whole.
#[derive(Clone)]
pub struct AppState {
    /// What a model request's stages read: swapped whole by a reload (`reload.rs`).
    pub(crate) pipeline: Arc<ArcSwap<Pipeline>>,
    /// What authentication reads: the keys, the master key, the failed-authentication limit, the dashboard's
    /// sessions.
    pub(crate) auth: Arc<AuthState>,
    /// What only the handlers and the server read.
    pub(crate) edge: Arc<Edge>,
}

/// What only the handlers and the server read.
pub(crate) struct Edge {
    /// Provider readiness, cached.
    pub(crate) readiness: Readiness,
    /// Unix seconds of start (the `created` of `GET /models`).
    pub(crate) started: i64,
    /// Stores events in the outbox and wakes its worker (`POST /events`, the outbox's admin routes); a reload
    /// replaces it with the emitter of the new notifications.
    pub(crate) outbox: ArcSwap<Emitter<StoreOutbox>>,
    /// Cancelled at shutdown: stops the background work (pending outbox rows stay for the next start).
    pub(crate) shutdown: CancellationToken,
    /// Model requests and errors since start (`GET /gateway/stats` and the dashboard).
    pub(crate) requests: crate::ui::stats::RequestCounters,
    /// What a reload replaces beside the pipeline (`reload.rs`).
    pub(crate) live: Live,
}

/// What a reload replaces beside the pipeline, and what it needs to.
pub(crate) struct Live {
    /// The upstream client new model tables share (its pool stays warm across reloads).
    pub(crate) client: svc_providers::UpstreamClient,
    /// The gateway's own events, whoever holds them (budgets, probe, heartbeat): pointed at the new outbox.
    pub(crate) events: Arc<SwappableSink>,
    /// A sink given in place of the outbox's (tests): kept across reloads.
    pub(crate) injected: Option<Arc<dyn EventSink>>,
    /// Stops the outbox worker of the notifications that run (a reload starts the next one first).
    pub(crate) outbox_stop: std::sync::Mutex<CancellationToken>,
    /// One reload (or change of the teams) at a time.
    pub(crate) one_at_a_time: tokio::sync::Mutex<()>,
    /// The teams generation of the store this node last applied (`reload/teams.rs`).
    pub(crate) teams_seen: std::sync::atomic::AtomicI64,
    /// The address given on the command line, kept over the file's.
    pub(crate) overrides: std::sync::Mutex<crate::reload::refusal::Overrides>,
    /// The TLS acceptor new connections take (none: plain HTTP); a reload reads the certificate again.
    pub(crate) tls: Arc<arc_swap::ArcSwapOption<tokio_rustls::TlsAcceptor>>,
}

impl Live {
    fn new(
        client: svc_providers::UpstreamClient,
        events: Arc<SwappableSink>,
        injected: Option<Arc<dyn EventSink>>,
        outbox_stop: CancellationToken,
        teams_seen: i64,
    ) -> Live {
        Live {
            client,
            events,
            injected,
            outbox_stop: std::sync::Mutex::new(outbox_stop),
            one_at_a_time: tokio::sync::Mutex::new(()),
            teams_seen: std::sync::atomic::AtomicI64::new(teams_seen),
            overrides: std::sync::Mutex::new(crate::reload::refusal::Overrides::default()),
            tls: Arc::new(arc_swap::ArcSwapOption::empty()),
        }
    }
}

/// What a node running `config` reports in its heartbeats.
pub(crate) fn running(config: &Config) -> svc_routing::node::Running {
    svc_routing::node::Running {
        teams: svc_keys::admin::teams_fingerprint(config),
        config_digest: config.digest.clone(),
    }
}

/// The outbox worker of `config`'s notifications (push, webhooks, hooks) on `tasks`, stopped by its own token
/// (a child of `shutdown`), with the emitter and the sink of the gateway's own events it feeds (`injected` in
/// place of the latter when given).
pub(crate) async fn outbox_generation(
    config: &Arc<Config>,
    store: &Store,
    metrics: &Arc<crate::observe::Metrics>,
    injected: Option<Arc<dyn EventSink>>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<(Emitter<StoreOutbox>, Arc<dyn EventSink>, CancellationToken), svc_store::StoreError> {
    let stop = shutdown.child_token();
    let (outbox, events) =
        svc_events::gateway_outbox::start(config, store, metrics.clone(), injected, tasks, &stop).await?;
    Ok((outbox, events, stop))
}

impl FromRef<AppState> for Arc<Pipeline> {
    fn from_ref(state: &AppState) -> Arc<Pipeline> {
        state.pipeline()
    }
}

impl FromRef<AppState> for Arc<AuthState> {
    fn from_ref(state: &AppState) -> Arc<AuthState> {
        state.auth.clone()
    }
}

/// Building the state failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A model entry cannot be served.
    #[error("{0}")]
    Model(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] svc_store::StoreError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    /// A fleet node's spend journal cannot be used.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The metrics registry refused a series (a bug: names are fixed).
    #[error("cannot register the metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// A fleet node has no place for its spend journal.
    #[error("no folder for the spend journal: set `fleet.journal_dir` (or $XDG_DATA_HOME or $HOME)")]
    NoJournalDir,
    /// The node could not register: its name is live elsewhere, or the store failed.
    #[error(transparent)]
    Register(#[from] svc_routing::node::RegisterError),
}

/// The spend journal, opened (locked) with the last run's records read ([`replay_journal`] writes them). A fleet
/// node's is in `fleet.journal_dir` (or beside the demo store); a single node's beside its SQLite file, named
/// after it. `None` for an in-memory SQLite store (nothing to survive a crash).
fn open_journal(config: &Config, store: &Store) -> Result<Option<(Journal, Replay)>, StateError> {
    let (dir, name) = match store.backend() {
        svc_store::Backend::Postgres => {
            let dir = match &config.fleet.journal_dir {
                Some(d) => d.clone(),
                None => svc_config::demo_store_path(&|k| std::env::var(k).ok())
                    .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
                    .ok_or(StateError::NoJournalDir)?,
            };
            (dir, config.fleet.name.clone())
        }
        svc_store::Backend::Sqlite => {
            // The file of the store in use (not the config's URL: a caller may hand over another store).
            let Some(file) = store.sqlite_file() else { return Ok(None) };
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let dir = match file.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            (dir, name)
        }
    };
    Ok(Some(Journal::open(&dir, &name, &config.fleet.node)?))
}

/// Writes the last run's records of the journal to the store (its slices charged on a fleet node).
async fn replay_journal(store: &Store, (journal, replay): (Journal, Replay)) -> Result<Arc<Journal>, StateError> {
    if !replay.records.is_empty() {
        SpendWriter::replay(store, &replay.records).await?;
        tracing::info!(records = replay.records.len(), "spend records of the last run written from the journal");
    }
    journal.forget_replayed(&replay);
    Ok(Arc::new(journal))
}

/// The spend writer on `tasks`: journaled when there is a journal, charging the budgets' leases on a fleet node
/// (whose leases start first).
async fn start_spend(
    store: &Store,
    tasks: &TaskTracker,
    journal: Option<Arc<Journal>>,
    budgets: &Arc<Budgets>,
) -> Result<SpendWriter, StateError> {
    Ok(match (journal, budgets.leases()) {
        (Some(journal), Some(leases)) => {
            leases.start().await?;
            SpendWriter::start_journaled(store.clone(), tasks, journal, Some(budgets.clone()))
        }
        (Some(journal), None) => SpendWriter::start_journaled(store.clone(), tasks, journal, None),
        (None, _) => SpendWriter::start(store.clone(), tasks),
    })
}

impl AppState {
    /// The store this gateway serves from (for the CLI and tests that write what another process would).
    pub fn store(&self) -> Store {
        self.pipeline().store.clone()
    }

    /// The address given on the command line (`svc serve --host/--port`): a reload keeps it over the file's.
    pub fn keep_address(&self, overrides: crate::reload::refusal::Overrides) {
        if let Ok(mut o) = self.edge.live.overrides.lock() {
            *o = overrides;
        }
    }

    /// What model requests read now: a request takes it once and keeps it to its end, so a reload never
    /// changes a request under way.
    pub(crate) fn pipeline(&self) -> Arc<Pipeline> {
        self.pipeline.load_full()
    }

    /// Builds the state: upstream clients, key cache (loaded), team mirror, budgets, spend writer, and the
    /// outbox worker delivering events to the configured push server, webhooks and this node's hooks. The node
    /// is not registered in the store (see [`AppState::serving`]).
    pub async fn new(config: Config, store: Store, master_key: Option<&str>) -> Result<AppState, StateError> {
        AppState::with_clock(config, store, master_key, None, Arc::new(chrono::Utc::now)).await
    }

    /// The state of a gateway about to serve on `port`: as [`AppState::new`], with the node registered in the
    /// store at its address first. A node name live elsewhere ([`svc_routing::node::RegisterError::Taken`]) stops the
    /// build before it writes anything else: the live node's budget slices, outbox claims and teams stay as
    /// they are.
    pub async fn serving(
        config: Config,
        store: Store,
        master_key: Option<&str>,
        port: u16,
    ) -> Result<AppState, StateError> {
        let address = svc_routing::node::advertised_address(&config.server.host, &config.fleet.node, port);
        AppState::build(config, store, master_key, None, Arc::new(chrono::Utc::now), Some(&address)).await
    }

    /// Like [`AppState::new`] with an injected clock for budget periods and, optionally, another sink for the
    /// gateway's own events (tests).
    pub async fn with_clock(
        config: Config,
        store: Store,
        master_key: Option<&str>,
        events: Option<Arc<dyn EventSink>>,
        clock: Clock,
    ) -> Result<AppState, StateError> {
        AppState::build(config, store, master_key, events, clock, None).await
    }

    /// The state; the node registered at `address` when given.
    async fn build(
        mut config: Config,
        store: Store,
        master_key: Option<&str>,
        events: Option<Arc<dyn EventSink>>,
        clock: Clock,
        address: Option<&str>,
    ) -> Result<AppState, StateError> {
        let client = svc_providers::UpstreamClient::new().map_err(|e| StateError::Client(e.to_string()))?;
        let metrics = Arc::new(crate::observe::Metrics::new(config.server.metrics_key_labels)?);
        let models = Arc::new(ModelTable::build(&config, &client, metrics.as_ref()).map_err(StateError::Model)?);
        // The journal's lock before the registration: on one machine a second process of this node stops here.
        let journal = open_journal(&config, &store)?;
        let answering = Arc::new(Semaphore::new(config.server.max_in_flight));
        let node = Arc::new(svc_routing::node::FleetNode::new(
            config.fleet.clone(),
            store.clone(),
            answering.clone(),
            config.server.max_in_flight,
            running(&config),
        ));
        // The registration before any other write: a second run of a live node's name must not write its
        // teams, charge or return its budget slices, or claim its outbox destinations.
        if let Some(address) = address {
            node.register(address).await?;
        }
        let teams_seen = svc_keys::teams::mirror(&store, &mut config).await?;
        node.set_running(running(&config));
        let keys = Arc::new(KeyCache::default());
        keys.refresh(&store, true).await?;
        let tasks = TaskTracker::new();
        let journal = match journal {
            Some(j) => Some(replay_journal(&store, j).await?),
            None => None,
        };
        let readiness = Readiness::new(config.gateway.readiness_cache);
        let config = Arc::new(config);
        let shutdown = CancellationToken::new();
        let injected = events;
        let (outbox, sink, outbox_stop) =
            outbox_generation(&config, &store, &metrics, injected.clone(), &tasks, &shutdown).await?;
        let live_events = Arc::new(SwappableSink::new(sink));
        let events: Arc<dyn EventSink> = live_events.clone();
        let budgets = Arc::new(Budgets::new(store.clone(), config.clone(), events.clone(), clock, &tasks).await?);
        let spend = start_spend(&store, &tasks, journal, &budgets).await?;
        let rates =
            match store.backend() {
                svc_store::Backend::Postgres => RateLimits::for_fleet(Arc::new(
                    svc_limits::rate::fleet::FleetRates::new(store.clone(), &config.fleet.name, tasks.clone()),
                )),
                svc_store::Backend::Sqlite => RateLimits::default(),
            };
        let rates = Arc::new(rates);
        let auth = Arc::new(AuthState {
            keys,
            master_hash: master_key.map(hash_secret),
            store: store.clone(),
            failures: svc_limits::rate::AuthFailures::new(
                &config.server,
                metrics.auth_failures("rejected"),
                metrics.auth_failures("limited"),
            ),
            trusted: config.server.trusted_proxies.clone(),
            sessions: crate::ui::session::Sessions::default(),
        });
        let probe = config.gateway.health.probe_interval;
        svc_routing::health::probe::spawn(&models, &events, probe, &tasks, shutdown.clone());
        let pipeline =
            Pipeline { config, store, models, answering, budgets, rates, events, spend, metrics, node, tasks };
        let live = Live::new(client, live_events, injected, outbox_stop, teams_seen);
        let requests = crate::ui::stats::RequestCounters::default();
        let started = chrono::Utc::now().timestamp();
        let edge = Edge { readiness, started, outbox: ArcSwap::from_pointee(outbox), shutdown, requests, live };
        let state = AppState { pipeline: Arc::new(ArcSwap::from_pointee(pipeline)), auth, edge: Arc::new(edge) };
        Ok(state)
    }
}
