//! What a chat call answers, whichever provider made it: a [`Reply`] or a [`ChunkStream`]. A leaf: the providers
//! build these without naming the `Deployment` that dispatches to them.

use crate::ProviderError;
use futures::Stream;
use serde_json::{Map, Value};
use std::pin::Pin;

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
