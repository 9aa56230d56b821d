//! [`Target`]: what a provider is told of the deployment it calls. A leaf: the providers take it rather than the
//! `Deployment`, which holds them (its `Upstream` names each provider).

use std::time::Duration;

/// The deployment a call goes to, as its provider sees it (made by `Deployment::target` for each call).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Deployment id (unique in the config), named in errors.
    pub id: &'a str,
    /// Upstream model id sent in `model`.
    pub upstream_model: &'a str,
    /// Time bound for one call (until the last byte of a non-streaming answer, or the first of a stream).
    pub timeout: Duration,
    /// The longest stream event (or unfinished line) read from the upstream; a longer one ends the stream.
    pub max_event_bytes: usize,
    /// The largest answer read whole (a completion, a model list); a longer one is a bad response.
    pub max_response_bytes: usize,
}
