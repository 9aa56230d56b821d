//! Upstream model providers behind one interface. A request arrives here as an OpenAI chat-completions
//! body (already validated, `model` already the upstream id); a reply leaves as an OpenAI-shaped response
//! or a stream of OpenAI-shaped chunks, whatever the upstream speaks.
//!
//! What this crate does not know: virtual keys, teams, prices, aliases, HTTP statuses of the gateway.

mod anthropic;
mod error;
mod mock;
mod openai;
mod provider;
mod request;
pub mod sse;

pub use anthropic::Anthropic;
pub use error::ProviderError;
pub use mock::{count_tokens, Mock};
pub use openai::OpenAi;
pub use provider::{ChunkStream, Deployment, Reply, Upstream};
pub use request::{ChatRequest, RequestError};
