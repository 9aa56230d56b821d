//! What can go wrong talking to an upstream.

use std::time::Duration;

/// A failed upstream call.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// Connection refused, DNS failure, reset before an answer.
    #[error("upstream `{deployment}` unreachable: {detail}")]
    Unreachable { deployment: String, detail: String },
    /// No answer within the deployment's timeout.
    #[error("upstream `{deployment}` timed out after {after:?}")]
    Timeout { deployment: String, after: Duration },
    /// The upstream answered with an HTTP error.
    #[error("upstream `{deployment}` returned {status}: {message}")]
    Status {
        deployment: String,
        status: u16,
        message: String,
        /// The upstream's error `type`, when it gave one.
        kind: Option<String>,
        /// The upstream's error `param`, when it gave one.
        param: Option<String>,
        /// Seconds from the upstream's `Retry-After`.
        retry_after: Option<u64>,
    },
    /// The upstream answered something that is not the protocol.
    #[error("upstream `{deployment}` sent an invalid response: {detail}")]
    BadResponse { deployment: String, detail: String },
    /// The request cannot be expressed for this upstream.
    #[error("{message}")]
    Unsupported { message: String, param: Option<String> },
}
