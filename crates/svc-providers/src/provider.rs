//! The provider interface: a [`Deployment`] is one configured upstream model, and [`Upstream`] dispatches
//! to the provider that speaks its API with exhaustive matches, so a new provider does not compile until
//! every operation is decided for it.

use crate::passthrough::{Forwarded, Raw, StoredOp, Wire};
use crate::{Anthropic, Bedrock, ChatRequest, ChunkStream, Gemini, Mock, OpenAi, ProviderError, Reply, Target};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

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
    /// An OpenAI-compatible server, or Azure OpenAI.
    OpenAi(Arc<OpenAi>),
    /// The Anthropic Messages API: Anthropic's, or Claude on Vertex AI or Bedrock.
    Anthropic(Arc<Anthropic>),
    /// Google's Gemini API, or Gemini on Vertex AI.
    Gemini(Arc<Gemini>),
    /// Bedrock's Converse API (every Bedrock model but Claude).
    Bedrock(Arc<Bedrock>),
    /// The built-in mock.
    Mock(Arc<Mock>),
}

/// The calls to an upstream (`chat`, `chat_stream`, `forward`) box the provider's future: held inline, it (the
/// HTTP exchange, its timeout and the reading of the answer, about 2 KiB) would make every future of the
/// gateway's request path that waits for it that much larger, and each is copied whole when it moves.
impl Deployment {
    /// What the provider is told of this deployment for a call.
    pub fn target(&self) -> Target<'_> {
        Target {
            id: &self.id,
            upstream_model: &self.upstream_model,
            timeout: self.timeout,
            max_event_bytes: self.max_event_bytes,
            max_response_bytes: self.max_response_bytes,
        }
    }

    /// The provider's name, as in `params.model`'s prefix.
    pub fn provider_name(&self) -> &'static str {
        match &self.upstream {
            Upstream::OpenAi(p) => p.name(),
            Upstream::Anthropic(p) => p.name(),
            Upstream::Gemini(p) => p.name(),
            Upstream::Bedrock(_) => "bedrock",
            Upstream::Mock(_) => "mock",
        }
    }

    /// A non-streaming completion.
    pub async fn chat(&self, req: ChatRequest) -> Result<Reply, ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => Box::pin(p.chat(&self.target(), req)).await,
            Upstream::Anthropic(p) => Box::pin(p.chat(&self.target(), req)).await,
            Upstream::Gemini(p) => Box::pin(p.chat(&self.target(), req)).await,
            Upstream::Bedrock(p) => Box::pin(p.chat(&self.target(), req)).await,
            Upstream::Mock(p) => p.chat(&self.target(), req).await,
        }
    }

    /// A streaming completion; resolves when the upstream has answered with its headers.
    pub async fn chat_stream(&self, req: ChatRequest) -> Result<ChunkStream, ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => Box::pin(p.chat_stream(&self.target(), req)).await,
            Upstream::Anthropic(p) => Box::pin(p.chat_stream(&self.target(), req)).await,
            Upstream::Gemini(p) => Box::pin(p.chat_stream(&self.target(), req)).await,
            Upstream::Bedrock(p) => Box::pin(p.chat_stream(&self.target(), req)).await,
            Upstream::Mock(p) => p.chat_stream(&self.target(), req).await,
        }
    }

    /// Whether a request in `wire` can be passed through to this deployment (its upstream speaks that API).
    pub fn speaks(&self, wire: Wire) -> bool {
        matches!(
            (&self.upstream, wire),
            (Upstream::OpenAi(_), Wire::Responses | Wire::Embeddings | Wire::InputTokens)
                | (Upstream::Anthropic(_), Wire::Messages)
                | (Upstream::Gemini(_), Wire::Gemini | Wire::GeminiCountTokens)
                | (Upstream::Mock(_), Wire::Embeddings)
        ) || match (&self.upstream, wire) {
            (Upstream::Anthropic(p), Wire::CountTokens) => p.counts_tokens(),
            (Upstream::Gemini(p), Wire::Embeddings) => p.embeds(),
            _ => false,
        }
    }

    /// A request passed through in the upstream's own API; resolves when the upstream has answered (a whole
    /// reply, or the headers of a stream). Only for a `wire` the deployment [`speaks`](Self::speaks).
    pub async fn forward(&self, wire: Wire, req: Forwarded) -> Result<Raw, ProviderError> {
        match (&self.upstream, wire) {
            (Upstream::OpenAi(p), Wire::Responses | Wire::Embeddings | Wire::InputTokens) => {
                Box::pin(p.forward(&self.target(), wire, req)).await
            }
            (Upstream::Anthropic(p), Wire::Messages | Wire::CountTokens) => {
                Box::pin(p.forward(&self.target(), wire, req)).await
            }
            (Upstream::Gemini(p), Wire::Gemini | Wire::GeminiCountTokens | Wire::Embeddings) => {
                Box::pin(p.forward(&self.target(), wire, req)).await
            }
            (Upstream::Mock(p), Wire::Embeddings) => p.embed(&self.target(), req).await,
            (
                Upstream::OpenAi(_)
                | Upstream::Anthropic(_)
                | Upstream::Gemini(_)
                | Upstream::Bedrock(_)
                | Upstream::Mock(_),
                _,
            ) => Err(ProviderError::Unsupported {
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
            Upstream::OpenAi(p) => Box::pin(p.stored(&self.target(), op, id, query)).await,
            Upstream::Anthropic(_) | Upstream::Gemini(_) | Upstream::Bedrock(_) | Upstream::Mock(_) => {
                Err(ProviderError::Unsupported {
                    message: format!("deployment `{}` stores no responses", self.id),
                    param: None,
                })
            }
        }
    }

    /// A cheap reachability check (no paid completion).
    pub async fn probe(&self) -> Result<(), ProviderError> {
        match &self.upstream {
            Upstream::OpenAi(p) => p.probe(&self.target()).await,
            Upstream::Anthropic(p) => p.probe(&self.target()).await,
            Upstream::Gemini(p) => p.probe(&self.target()).await,
            Upstream::Bedrock(p) => p.probe(&self.target()).await,
            Upstream::Mock(_) => Ok(()),
        }
    }

    /// Identity of the upstream endpoint for readiness reports (`api_base` or `mock`), never a secret.
    pub fn endpoint(&self) -> String {
        match &self.upstream {
            Upstream::OpenAi(p) => p.api_base().to_string(),
            Upstream::Anthropic(p) => p.api_base().to_string(),
            Upstream::Gemini(p) => p.api_base().to_string(),
            Upstream::Bedrock(p) => p.api_base().to_string(),
            Upstream::Mock(_) => "mock".to_string(),
        }
    }
}
