//! Upstream model providers behind one interface. A request arrives here as an OpenAI chat-completions
//! body (already validated, `model` already the upstream id); a reply leaves as an OpenAI-shaped response
//! or a stream of OpenAI-shaped chunks, whatever the upstream speaks.
//!
//! What this crate does not know: virtual keys, teams, prices, aliases, HTTP statuses of the gateway.

mod anthropic;
pub mod auth;
pub mod bedrock;
mod chat_parts;
pub mod chunk;
pub mod client;
mod count;
mod error;
pub mod estimate;
mod gemini;
pub mod generated;
pub mod http;
mod mock;
mod openai;
pub mod passthrough;
mod provider;
pub mod raw;
mod reply;
mod request;
pub mod sse;
mod target;
mod tokens;
pub mod usage;

/// The translations without HTTP, for the fuzz targets in `fuzz/`. Not a stable API.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub use anthropic::fuzzing;
pub use anthropic::{type_for_status as anthropic_error_type, Anthropic, Cloud};
pub use bedrock::Bedrock;
pub use chunk::{Chunk, UsageEdit};
pub use client::UpstreamClient;
pub use error::ProviderError;
pub use gemini::{vertex_base, Gemini};
pub use mock::Mock;
pub use openai::OpenAi;
pub use provider::{Deployment, Upstream};
pub use reply::{ChunkStream, Reply};
pub use request::{
    json_parses, model_name, model_text, ChatRequest, Media, PromptParts, RequestError, MAX_CHOICES,
    MAX_COMPLETION_TOKENS, MAX_MODEL_BYTES,
};
pub use target::Target;
