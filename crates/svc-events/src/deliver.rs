//! Per-destination delivery, shared by both front ends: `svc-notify` calls these directly, the gateway's
//! [`crate::OutboxWorker`] calls [`Deliverer::deliver`] once per outbox row and destination.
//!
//! A destination is the push server (`push`), one webhook (`webhook:<url>`, `#2`, `#3` … appended when a URL is
//! configured twice) or this node's shell hooks (`hooks`). These names are what the outbox stores, so they
//! stay the same across restarts as long as the configuration does.

use crate::envelope::Envelope;
use crate::retry::Transient;
use crate::sinks::hooks::{HookRun, HookRunError, HookRunner};
use crate::sinks::ntfy::{NtfySink, PushError, PushOverrides};
use crate::sinks::webhook::{WebhookError, WebhookSink};
use bytes::Bytes;
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

/// Every sink of one configuration.
#[derive(Debug, Clone)]
pub struct Deliverer {
    push: Option<NtfySink>,
    webhooks: Vec<(String, WebhookSink)>,
    hooks: Option<HookRunner>,
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
    /// Stable id of this event at this destination (`X-SVC-Delivery`).
    pub delivery_id: &'a str,
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

impl DeliveryError {
    /// Whether the outbox should try again later. A refused push token is retried too: fixing the token or
    /// the server's access list makes the queued events go out.
    pub fn is_transient(&self) -> bool {
        match self {
            DeliveryError::Push(e) => e.is_transient() || e.is_auth(),
            DeliveryError::Webhook(e) => e.is_transient(),
            DeliveryError::Hooks(HookRunError::DepthExceeded { .. }) => false,
            DeliveryError::Hooks(_) => true,
            DeliveryError::BadEnvelope(_) | DeliveryError::NotConfigured(_) => false,
        }
    }
}

impl Deliverer {
    /// The sinks of `notifications`: the push block when present and enabled, every webhook, and `hooks` when
    /// given (pass `None` where hooks must not run).
    pub fn from_config(notifications: &NotificationsConfig, hooks: Option<HookRunner>) -> Deliverer {
        let client = crate::http::client();
        let push = notifications.ntfy.as_ref().filter(|n| n.enabled).map(|n| NtfySink::new(client.clone(), n.clone()));
        let webhooks = notifications.webhooks.iter().map(|w| WebhookSink::new(client.clone(), w.clone())).collect();
        Deliverer::new(push, webhooks, hooks)
    }

    /// A deliverer from explicit sinks (tests, custom policies).
    pub fn new(push: Option<NtfySink>, webhooks: Vec<WebhookSink>, hooks: Option<HookRunner>) -> Deliverer {
        // `webhook:<url>`, then `#2`, `#3` … for the same URL configured again.
        let mut named: Vec<(String, WebhookSink)> = Vec::new();
        for w in webhooks {
            let base = format!("webhook:{}", w.config().url);
            let same = named.iter().filter(|(n, _)| n.split('#').next() == Some(base.as_str())).count();
            let name = if same == 0 { base } else { format!("{base}#{}", same + 1) };
            named.push((name, w));
        }
        Deliverer { push, webhooks: named, hooks }
    }

    /// The same deliverer with another backoff policy for every webhook (e.g. shorter waits for a command).
    pub fn with_webhook_policy(mut self, policy: crate::retry::RetryPolicy) -> Deliverer {
        self.webhooks = self.webhooks.into_iter().map(|(n, w)| (n, w.with_policy(policy))).collect();
        self
    }

    /// The push sink, when the push block is present and enabled.
    pub fn push(&self) -> Option<&NtfySink> {
        self.push.as_ref()
    }

    /// The webhook sinks, with their destination names.
    pub fn webhooks(&self) -> &[(String, WebhookSink)] {
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
            Destination::Hooks => "hooks".to_string(),
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

    /// Delivers to one webhook: the first attempt and its configured `retry` retries.
    pub async fn deliver_webhook(
        &self,
        index: usize,
        body: Bytes,
        kind: &str,
        delivery_id: &str,
    ) -> Result<(), DeliveryError> {
        let (_, sink) =
            self.webhooks.get(index).ok_or_else(|| DeliveryError::NotConfigured(format!("webhook #{index}")))?;
        Ok(sink.deliver(body, kind, delivery_id).await?)
    }

    /// Delivers `envelope_json` to every webhook that takes `kind`, concurrently (a slow endpoint holds back no
    /// other), each with a fresh delivery id and its own retries. Returns (destination name, result) in
    /// configuration order.
    pub async fn deliver_to_webhooks(
        &self,
        kind: &str,
        envelope_json: &str,
    ) -> Vec<(String, Result<(), DeliveryError>)> {
        let body = Bytes::copy_from_slice(envelope_json.as_bytes());
        let jobs = self.webhooks.iter().enumerate().filter(|(_, (_, w))| w.accepts(kind)).map(|(i, (name, _))| {
            let body = body.clone();
            async move { (name.clone(), self.deliver_webhook(i, body, kind, &new_delivery_id()).await) }
        });
        futures::future::join_all(jobs).await
    }

    /// Runs this node's hooks for an envelope.
    pub async fn run_hooks(&self, env: &Envelope) -> Result<Vec<HookRun>, DeliveryError> {
        let hooks = self.hooks.as_ref().ok_or_else(|| DeliveryError::NotConfigured("hooks".into()))?;
        Ok(hooks.run(env).await?)
    }

    /// One delivery round of a stored event to one destination (the outbox worker's unit of work).
    pub async fn deliver(&self, dest: Destination, d: &Delivery<'_>) -> Result<(), DeliveryError> {
        match dest {
            Destination::Webhook(i) => {
                self.deliver_webhook(i, Bytes::copy_from_slice(d.envelope_json.as_bytes()), d.kind, d.delivery_id).await
            }
            Destination::Push => {
                let env = parse(d.envelope_json)?;
                let overrides = PushOverrides { title: d.title.map(str::to_string), priority: d.priority };
                self.deliver_push(&env, &overrides).await
            }
            Destination::Hooks => self.run_hooks(&parse(d.envelope_json)?).await.map(|_| ()),
        }
    }
}

/// A fresh delivery id (a UUID v4), for `X-SVC-Delivery`.
pub fn new_delivery_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn parse(json: &str) -> Result<Envelope, DeliveryError> {
    serde_json::from_str(json).map_err(|e| DeliveryError::BadEnvelope(e.to_string()))
}
