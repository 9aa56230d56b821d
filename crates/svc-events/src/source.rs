//! The gateway as an event source: the events it raises itself ([`GatewayEvent`]: budget, model health, node)
//! go to an [`EventSink`]. In `svc serve` the sink is the durable outbox; emitting never waits on the network.

use crate::EventKind;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// An event raised by the gateway (budget, model health, node).
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayEvent {
    /// Event kind (spec 6.1).
    pub kind: EventKind,
    /// Envelope `agent`: the key's agent role or alias, else `gateway`.
    pub agent: String,
    /// Envelope `data`.
    pub data: Value,
}

/// Where gateway events go.
pub trait EventSink: Send + Sync + 'static {
    /// Hands an event over; must not block.
    fn emit(&self, event: GatewayEvent);

    /// Hands an event over, as [`EventSink::emit`]; the answer completes once the event is where it goes (the
    /// outbox: stored, or given up), so a caller can order what it does next after it. A sink that keeps events
    /// at once completes at once.
    fn emit_stored(&self, event: GatewayEvent) -> Stored {
        self.emit(event);
        Stored(None)
    }

    /// A deployment's health changed on this node to `state` (every transition, recoveries too), with the
    /// event it calls for, if any. In fleet mode the gateway's sink lets the fleet announce each of its own
    /// transitions once; elsewhere the event is emitted as it is.
    fn health_changed(&self, _deployment: &str, _state: &'static str, event: Option<GatewayEvent>) {
        if let Some(e) = event {
            self.emit(e);
        }
    }
}

/// Completes once an event handed to [`EventSink::emit_stored`] is where it goes.
#[must_use = "awaiting it is the point"]
pub struct Stored(pub(crate) Option<tokio::sync::oneshot::Receiver<()>>);

impl std::future::Future for Stored {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self.0.as_mut() {
            None => std::task::Poll::Ready(()),
            // The sender is dropped when the event's task ends, whatever happened to the event.
            Some(done) => std::pin::Pin::new(done).poll(cx).map(|_| ()),
        }
    }
}

/// The gateway's sink behind a handle a configuration reload points elsewhere: whoever holds it (the budgets'
/// announcer, the probe, this node's heartbeat, the pipeline) sends to the sink of the configuration that runs.
pub struct SwappableSink {
    current: arc_swap::ArcSwap<Arc<dyn EventSink>>,
}

impl SwappableSink {
    /// A handle sending to `sink`.
    pub fn new(sink: Arc<dyn EventSink>) -> SwappableSink {
        SwappableSink { current: arc_swap::ArcSwap::from_pointee(sink) }
    }

    /// Events from now on go to `sink` (events already handed over stay where they went).
    pub fn replace(&self, sink: Arc<dyn EventSink>) {
        self.current.store(Arc::new(sink));
    }
}

impl EventSink for SwappableSink {
    fn emit(&self, event: GatewayEvent) {
        self.current.load().emit(event);
    }

    fn emit_stored(&self, event: GatewayEvent) -> Stored {
        self.current.load().emit_stored(event)
    }

    fn health_changed(&self, deployment: &str, state: &'static str, event: Option<GatewayEvent>) {
        self.current.load().health_changed(deployment, state, event);
    }
}

/// Logs events only (used when no pipeline is configured).
#[derive(Debug, Default)]
pub struct LogSink;

impl EventSink for LogSink {
    fn emit(&self, event: GatewayEvent) {
        tracing::info!(kind = event.kind.as_str(), agent = %event.agent, data = %event.data, "event");
    }
}

/// Keeps events in memory (tests).
#[derive(Debug, Default, Clone)]
pub struct MemorySink(pub Arc<Mutex<Vec<GatewayEvent>>>);

impl EventSink for MemorySink {
    fn emit(&self, event: GatewayEvent) {
        if let Ok(mut v) = self.0.lock() {
            v.push(event);
        }
    }
}

impl MemorySink {
    /// Events so far.
    pub fn events(&self) -> Vec<GatewayEvent> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
