//! The provider interface: a [`Deployment`] is one configured upstream model, and [`Upstream`] dispatches
//! to the provider that speaks its API with exhaustive matches, so a new provider does not compile until
//! every operation is decided for it.

use crate::passthrough::{Forwarded, Raw, StoredOp, Wire};
use crate::{Anthropic, ChatRequest, Mock, OpenAi, ProviderError};
use futures::Stream;
use serde_json::{Map, Value};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A stream of OpenAI `chat.completion.chunk` objects ([`crate::Chunk`]: as an OpenAI-compatible upstream wrote
/// them, or built by a translation). A chunk carrying a non-null `usage` reports the token counts; the stream
/// ends after the last chunk (the `[DONE]` marker is not an item).
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<crate::Chunk, ProviderError>> + Send>>;

/// A non-streaming reply: an OpenAI `chat.completion` object (its `usage` holds the token counts).
#[derive(Debug, Clone)]
pub enum Reply {
    /// Made by the gateway: translated from another provider's answer, or the mock's.
    Object(Map<String, Value>),
    /// An OpenAI-compatible upstream's answer as it sent it, checked to be a completion (an object with
    /// `choices`, an array of objects, and no `error`) through its top-level fields, not parsed further.
    Json(crate::raw::Object),
}

impl Reply {
    /// The reply as an object (parsing an upstream's bytes).
    pub fn into_object(self) -> Result<Map<String, Value>, serde_json::Error> {
        match self {
            Reply::Object(m) => Ok(m),
            Reply::Json(object) => serde_json::from_slice(object.bytes()),
        }
    }
}

/// One configured upstream model.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// Deployment id (unique in the config).
    pub id: String,
    /// Upstream model id sent in `model`.
    pub upstream_model: String,
    /// Time bound for one call (until the last byte of a non-streaming answer, or the first of a stream).
    pub timeout: Duration,
    /// The longest stream event (or unfinished line) read from the upstream; a longer one ends the stream.
    pub max_event_bytes: usize,
    /// The largest answer read whole (a completion, a model list); a longer one is a bad response.
    pub max_response_bytes: usize,
    /// The provider that speaks to it.
    pub upstream: Upstream,
}

/// The providers.
#[derive(Debug, Clone)]
pub enum Upstream {
    /// An OpenAI-compatible server.
    OpenAi(Arc<OpenAi>),
    /// The Anthropic Messages API.
    Anthropic(Arc<Anthropic>),
    /// The built-in mock.
    Mock(Arc<Mock>),
}

/// The calls to an upstream (`chat`, `chat_stream`, `forward`) box the provider's future: held inline, it (the
/// HTTP exchange, its timeout and the reading of the answer, about 2 KiB) would make every future of the
/// gateway's request path that waits for it that much larger, and each is copied whole when it moves.
impl Deployment {
    /// The provider's name, as in `params.model`'s prefix.
    pub fn provider_name(&self) -> &'static str {
        match &self.upstream {
            Upstream::OpenAi(_) => "openai",
            Upstream::Anthropic(_) => "anthropic",
            Upstream::Mock(_) => "mock",
        }
    }

    /// A non-streaming completion.
    pub async fn chat(&self, req: ChatRequest) -> Result<Reply, ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => Box::pin(p.chat(self, req)).await,
            Upstream::Anthropic(p) => Box::pin(p.chat(self, req)).await,
            Upstream::Mock(p) => p.chat(self, req).await,
        }
    }

    /// A streaming completion; resolves when the upstream has answered with its headers.
    pub async fn chat_stream(&self, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => Box::pin(p.chat_stream(self, req)).await,
            Upstream::Anthropic(p) => Box::pin(p.chat_stream(self, req)).await,
            Upstream::Mock(p) => p.chat_stream(self, req).await,
        }
    }

    /// Whether a request in `wire` can be passed through to this deployment (its upstream speaks that API).
    pub fn speaks(&self, wire: Wire) -> bool {
        matches!(
            (&self.upstream, wire),
            (Upstream::OpenAi(_), Wire::Responses | Wire::Embeddings | Wire::InputTokens)
                | (Upstream::Anthropic(_), Wire::Messages | Wire::CountTokens)
                | (Upstream::Mock(_), Wire::Embeddings)
        )
    }

    /// A request passed through in the upstream's own API; resolves when the upstream has answered (a whole
    /// reply, or the headers of a stream). Only for a `wire` the deployment [`speaks`](Self::speaks).
    pub async fn forward(&self, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        match (&self.upstream, wire) {
            (Upstream::OpenAi(p), Wire::Responses | Wire::Embeddings | Wire::InputTokens) => {
                Box::pin(p.forward(self, wire, req)).await
            }
            (Upstream::Anthropic(p), Wire::Messages | Wire::CountTokens) => Box::pin(p.forward(self, wire, req)).await,
            (Upstream::Mock(p), Wire::Embeddings) => p.embed(self, req).await,
            (Upstream::OpenAi(_) | Upstream::Anthropic(_) | Upstream::Mock(_), _) => Err(ProviderError::Unsupported {
                message: format!("deployment `{}` does not speak this API", self.id),
                param: None,
            }),
        }
    }

    /// `op` on a stored Responses answer (`{api_base}/responses/{id}`…), at an OpenAI deployment; `query` is
    /// the client's query string, passed on.
    pub async fn stored_response(
        &self,
        op: StoredOp,
        id: &str,
        query: Option<&str>,
    ) -> Result<Map<String, Value>, ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => Box::pin(p.stored(self, op, id, query)).await,
            Upstream::Anthropic(_) | Upstream::Mock(_) => Err(ProviderError::Unsupported {
                message: format!("deployment `{}` stores no responses", self.id),
                param: None,
            }),
        }
    }

    /// A cheap reachability check (no paid completion).
    pub async fn probe(&self) -> Result<(), ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => p.probe(self).await,
            Upstream::Anthropic(p) => p.probe(self).await,
            Upstream::Mock(_) => Ok(()),
        }
    }

    /// Identity of the upstream endpoint for readiness reports (`api_base` or `mock`), never a secret.
    pub fn endpoint(&self) -> String {
        match &self.upstream {
            Upstream::OpenAi(p) => p.api_base().to_string(),
            Upstream::Anthropic(p) => p.api_base().to_string(),
            Upstream::Mock(_) => "mock".to_string(),
        }
    }
}
