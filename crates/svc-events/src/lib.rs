//! Fleet events (spec 2.6, 2.7, 6): the envelope, its kinds and severities, the three senders (ntfy push,
//! signed webhooks, shell hooks), the per-destination delivery both front ends use, and the durable outbox
//! worker the gateway runs.
//!
//! This crate never imports the gateway and never opens a database: the gateway hands it its store, which
//! [`gateway_outbox::StoreOutbox`] makes an [`OutboxStore`], and `svc-notify` calls the senders directly through
//! [`Deliverer`].

pub mod deliver;
pub mod envelope;
pub mod gateway_outbox;
pub mod group_commit;
pub mod http;
pub mod kinds;
pub mod observe;
pub mod origin;
pub mod outbox;
pub mod retry;
pub mod senders;
pub mod source;

pub use deliver::{Deliverer, Destination};
pub use envelope::{Envelope, EnvelopeError, Meta, Source};
pub use kinds::{EventKind, Severity, UnknownKind};
pub use observe::{DeliveryOutcome, HookOutcome, Observer};
pub use origin::Origin;
pub use outbox::{
    emit, EmitError, Emitter, MemoryOutbox, NewDelivery, NewOutboxEvent, OutboxItem, OutboxStore, OutboxWorker,
    WorkerOptions,
};
pub use retry::{RetryPolicy, Transient};
pub use senders::hooks::{HookFile, HookRunner};
pub use senders::ntfy::{NtfySender, PushError, PushOverrides};
pub use senders::webhook::{WebhookError, WebhookSender};
pub use source::{EventSink, GatewayEvent, LogSink, MemorySink, Stored, SwappableSink};
