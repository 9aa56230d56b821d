//! The three destinations of an event: the push server ([`ntfy`]), HTTP webhooks ([`webhook`]) and the node's
//! shell hooks ([`hooks`]). Each sender delivers one event; ordering and durability are the outbox's job.

pub mod hooks;
pub mod ntfy;
pub mod webhook;
