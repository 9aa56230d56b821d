//! Per-destination delivery, shared by both front ends: `svc-notify` calls these directly, the gateway's
//! [`crate::OutboxWorker`] calls [`Deliverer::deliver`] once per attempt of an outbox row at a destination.
//! Every call here is one attempt; retrying is the caller's (`svc-notify` through [`RetryPolicy::run`], the
//! outbox worker through the row's schedule).
//!
//! A destination is the push server (`push`), one webhook (`webhook:<redacted url>`, see
//! [`crate::senders::webhook::redact_url`], with `#2`, `#3` … appended when two webhooks look the same once
//! redacted) or this node's shell hooks (`hooks`). These names are what the outbox stores, so they stay the
//! same across restarts as long as the configuration does, and never show a token a URL carries. Older
//! versions named a webhook `webhook:<url>`; [`Deliverer::legacy_names`] lists those names so the gateway can
//! move rows still queued under them.

use crate::envelope::Envelope;
use crate::observe::{HookOutcome, Observer};
use crate::retry::{RetryPolicy, Transient};
use crate::senders::hooks::{HookRun, HookRunError, HookRunner};
use crate::senders::ntfy::{NtfySender, PushError, PushOverrides};
use crate::senders::webhook::{WebhookDelivery, WebhookError, WebhookSender};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use svc_config::{NotificationsConfig, Priority};

/// Where an event goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Destination {
    /// The push server.
    Push,
    /// The webhook at this index of [`Deliverer::webhooks`].
    Webhook(usize),
    /// This node's shell hooks.
    Hooks,
}

/// Every sender of one configuration.
#[derive(Debug, Clone)]
pub struct Deliverer {
    push: Option<NtfySender>,
    webhooks: Vec<(String, WebhookSender)>,
    hooks: Option<HookRunner>,
    /// The node of a fleet this runs on (names its hooks' rows).
    node: Option<String>,
    /// Who counts emissions, deliveries and hook runs.
    observer: Option<Arc<dyn Observer>>,
}

/// One event as a destination receives it.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    /// The exact envelope JSON (signed and sent as is to webhooks).
    pub envelope_json: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Push title override.
    pub title: Option<&'a str>,
    /// Push priority override.
    pub priority: Option<Priority>,
    /// Stable id of this event at this destination (`X-SVC-Delivery`, `webhook-id`).
    pub delivery_id: &'a str,
    /// Who posted the event (`X-SVC-Origin`, `SVC_EVENT_ORIGIN`), when known.
    pub origin: Option<&'a str>,
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The push server.
    #[error(transparent)]
    Push(#[from] PushError),
    /// A webhook.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The shell hooks.
    #[error(transparent)]
    Hooks(#[from] HookRunError),
    /// The stored envelope does not parse (it will never deliver).
    #[error("stored envelope is not valid: {0}")]
    BadEnvelope(String),
    /// The destination is not (or no longer) configured.
    #[error("destination `{0}` is not configured")]
    NotConfigured(String),
}

/// Whether the outbox should try again later. A refused push token is retried too: fixing the token or the
/// server's access list makes the queued events go out. A webhook's `Retry-After` is passed on.
impl Transient for DeliveryError {
    fn is_transient(&self) -> bool {
        match self {
            DeliveryError::Push(e) => e.is_transient() || e.is_auth(),
            DeliveryError::Webhook(e) => e.is_transient(),
            DeliveryError::Hooks(HookRunError::DepthExceeded { .. }) => false,
            DeliveryError::Hooks(_) => true,
            DeliveryError::BadEnvelope(_) | DeliveryError::NotConfigured(_) => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            DeliveryError::Webhook(e) => e.retry_after(),
            _ => None,
        }
    }
}

impl Deliverer {
    /// The senders of `notifications`: the push block when present and enabled, every webhook, and `hooks` when
    /// given (pass `None` where hooks must not run).
    pub fn from_config(notifications: &NotificationsConfig, hooks: Option<HookRunner>) -> Deliverer {
        let client = crate::http::client();
        let push =
            notifications.ntfy.as_ref().filter(|n| n.enabled).map(|n| NtfySender::new(client.clone(), n.clone()));
        let webhooks = notifications.webhooks.iter().map(|w| WebhookSender::new(client.clone(), w.clone())).collect();
        Deliverer::new(push, webhooks, hooks)
    }

    /// A deliverer from explicit senders (tests, custom policies).
    pub fn new(push: Option<NtfySender>, webhooks: Vec<WebhookSender>, hooks: Option<HookRunner>) -> Deliverer {
        let names = unique(webhooks.iter().map(|w| format!("webhook:{}", w.shown_url())));
        Deliverer { push, webhooks: names.into_iter().zip(webhooks).collect(), hooks, node: None, observer: None }
    }

    /// The same deliverer on a node of a fleet: its hooks' rows are named `hooks@<node>`, so that only the
    /// node that emitted (or received) an event runs the hooks for it (hooks are node-local; push and webhooks
    /// are shared by the fleet).
    pub fn on_node(mut self, node: &str) -> Deliverer {
        self.node = Some(node.to_string());
        self
    }

    /// The same deliverer reporting to `observer` (events stored, delivery attempts, hook runs).
    pub fn observed(mut self, observer: Arc<dyn Observer>) -> Deliverer {
        self.observer = Some(observer);
        self
    }

    /// Who is told of emissions, deliveries and hook runs, if anyone.
    pub fn observer(&self) -> Option<&dyn Observer> {
        self.observer.as_deref()
    }

    /// The names older versions stored for the webhooks (`webhook:<url>`, with `#2`, `#3` … for a URL
    /// configured again), each with the name used now, in configuration order; only those that differ.
    /// On a node of a fleet, the hooks' rows stored as `hooks` before move to `hooks@<node>` too.
    pub fn legacy_names(&self) -> Vec<(String, String)> {
        let old = unique(self.webhooks.iter().map(|(_, w)| format!("webhook:{}", w.config().url)));
        let mut out: Vec<(String, String)> =
            old.into_iter().zip(self.webhooks.iter().map(|(n, _)| n.clone())).filter(|(old, new)| old != new).collect();
        if self.hooks.is_some() && self.node.is_some() {
            out.push(("hooks".to_string(), self.name(Destination::Hooks)));
        }
        out
    }

    /// The push sender, when the push block is present and enabled.
    pub fn push(&self) -> Option<&NtfySender> {
        self.push.as_ref()
    }

    /// The webhook senders, with their destination names.
    pub fn webhooks(&self) -> &[(String, WebhookSender)] {
        &self.webhooks
    }

    /// The hook runner, when hooks run here.
    pub fn hooks(&self) -> Option<&HookRunner> {
        self.hooks.as_ref()
    }

    /// Every configured destination.
    pub fn destinations(&self) -> Vec<Destination> {
        let mut out = Vec::new();
        if self.push.is_some() {
            out.push(Destination::Push);
        }
        out.extend((0..self.webhooks.len()).map(Destination::Webhook));
        if self.hooks.is_some() {
            out.push(Destination::Hooks);
        }
        out
    }

    /// The destinations that take `kind`: push, the webhooks whose filter matches, hooks (which pick their
    /// scripts at run time, so registrations added later still apply).
    pub fn destinations_for(&self, kind: &str) -> Vec<Destination> {
        self.destinations()
            .into_iter()
            .filter(|d| match d {
                Destination::Webhook(i) => self.webhooks.get(*i).is_some_and(|(_, w)| w.accepts(kind)),
                Destination::Push | Destination::Hooks => true,
            })
            .collect()
    }

    /// The stored name of a destination.
    pub fn name(&self, d: Destination) -> String {
        match d {
            Destination::Push => "push".to_string(),
            Destination::Webhook(i) => {
                self.webhooks.get(i).map(|(n, _)| n.clone()).unwrap_or_else(|| format!("webhook:#{i}"))
            }
            Destination::Hooks => match &self.node {
                Some(node) => format!("hooks@{node}"),
                None => "hooks".to_string(),
            },
        }
    }

    /// The destination of a stored name.
    pub fn find(&self, name: &str) -> Option<Destination> {
        self.destinations().into_iter().find(|d| self.name(*d) == name)
    }

    /// One publish of an envelope to the push server.
    pub async fn deliver_push(&self, env: &Envelope, overrides: &PushOverrides) -> Result<(), DeliveryError> {
        let push = self.push.as_ref().ok_or_else(|| DeliveryError::NotConfigured("push".into()))?;
        let msg = push.message(env, overrides).map_err(|e| DeliveryError::BadEnvelope(e.to_string()))?;
        Ok(push.publish(&msg).await?)
    }

    /// The retries after the first attempt a webhook is configured with (`retry`); `None` for the other
    /// destinations.
    pub fn retries(&self, dest: Destination) -> Option<u32> {
        match dest {
            Destination::Webhook(i) => self.webhooks.get(i).map(|(_, w)| w.config().retry),
            Destination::Push | Destination::Hooks => None,
        }
    }

    /// One attempt to deliver to one webhook.
    pub async fn deliver_webhook(
        &self,
        index: usize,
        body: Bytes,
        d: &WebhookDelivery<'_>,
    ) -> Result<(), DeliveryError> {
        let (_, sender) =
            self.webhooks.get(index).ok_or_else(|| DeliveryError::NotConfigured(format!("webhook #{index}")))?;
        Ok(sender.attempt(body, d).await?)
    }

    /// Delivers `envelope_json` to every webhook that takes `kind`, concurrently (a slow endpoint holds back no
    /// other), each with a fresh delivery id: one attempt, then up to its configured `retry` more on transient
    /// failures, waiting per `policy` (`svc-notify`'s way). Returns (destination name, result) in
    /// configuration order.
    pub async fn deliver_to_webhooks(
        &self,
        kind: &str,
        envelope_json: &str,
        origin: Option<&str>,
        policy: &RetryPolicy,
    ) -> Vec<(String, Result<(), DeliveryError>)> {
        let body = Bytes::copy_from_slice(envelope_json.as_bytes());
        let jobs = self.webhooks.iter().enumerate().filter(|(_, (_, w))| w.accepts(kind)).map(|(i, (name, w))| {
            let body = body.clone();
            async move {
                let id = new_delivery_id();
                let d = WebhookDelivery { kind, delivery_id: &id, origin };
                let attempt = || self.deliver_webhook(i, body.clone(), &d);
                let on_retry = |e: &DeliveryError, wait: Duration| {
                    tracing::warn!(error = %e, delivery = %id, ?wait, "webhook delivery failed, retrying");
                };
                (name.clone(), policy.run(w.config().retry, attempt, on_retry).await)
            }
        });
        futures::future::join_all(jobs).await
    }

    /// Runs this node's hooks for an envelope; `origin` becomes `SVC_EVENT_ORIGIN`.
    pub async fn run_hooks(&self, env: &Envelope, origin: Option<&str>) -> Result<Vec<HookRun>, DeliveryError> {
        let hooks = self.hooks.as_ref().ok_or_else(|| DeliveryError::NotConfigured("hooks".into()))?;
        let runs = hooks.run(env, origin).await?;
        if let Some(o) = &self.observer {
            for run in &runs {
                o.hook_ran(HookOutcome::of(&run.status));
            }
        }
        Ok(runs)
    }

    /// One attempt to deliver a stored event to one destination (the outbox worker's unit of work).
    pub async fn deliver(&self, dest: Destination, d: &Delivery<'_>) -> Result<(), DeliveryError> {
        match dest {
            Destination::Webhook(i) => {
                let w = WebhookDelivery { kind: d.kind, delivery_id: d.delivery_id, origin: d.origin };
                self.deliver_webhook(i, Bytes::copy_from_slice(d.envelope_json.as_bytes()), &w).await
            }
            Destination::Push => {
                let env = parse(d.envelope_json)?;
                let overrides = PushOverrides { title: d.title.map(str::to_string), priority: d.priority };
                self.deliver_push(&env, &overrides).await
            }
            Destination::Hooks => self.run_hooks(&parse(d.envelope_json)?, d.origin).await.map(|_| ()),
        }
    }
}

/// A fresh delivery id (a UUID v4), for `X-SVC-Delivery`.
pub fn new_delivery_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `names` made unique in order: the second of a name gets `#2`, the third `#3` …
fn unique(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for base in names {
        let mut name = base.clone();
        let mut n = 1;
        while out.contains(&name) {
            n += 1;
            name = format!("{base}#{n}");
        }
        out.push(name);
    }
    out
}

fn parse(json: &str) -> Result<Envelope, DeliveryError> {
    serde_json::from_str(json).map_err(|e| DeliveryError::BadEnvelope(e.to_string()))
}
