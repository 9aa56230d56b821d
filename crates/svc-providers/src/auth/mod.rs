//! How a call proves who sends it: a key in a header (OpenAI's bearer, Anthropic's `x-api-key`, Azure's
//! `api-key`, Gemini's `x-goog-api-key`), a Google access token exchanged for a service account's signed JWT
//! (`google.rs`, Vertex AI), or an AWS SigV4 signature of the request (`sigv4.rs`, Bedrock).
//!
//! What this file does not do: choose the scheme (each provider is built with its own).

mod google;
mod sigv4;

pub use google::GoogleToken;
pub use sigv4::AwsSigner;

use crate::client::{Call, UpstreamClient};
use crate::http::{self, ApiKey};
use crate::{ProviderError, Target};
use ::http::header::HeaderName;
use std::sync::Arc;

/// The authentication of one deployment's calls.
#[derive(Debug, Clone)]
pub enum Auth {
    /// No credential (a local server).
    None,
    /// A key in header `name`; `Err` when the configured key is not a valid header value.
    Header(HeaderName, Result<ApiKey, ()>),
    /// `Authorization: Bearer` with a service account's access token.
    Google(Arc<GoogleToken>),
    /// An AWS SigV4 signature.
    SigV4(Arc<AwsSigner>),
}

impl Auth {
    /// `key` (when one is configured) in header `name`, as given.
    pub fn header(name: HeaderName, key: Option<&str>) -> Auth {
        match key {
            Some(k) => Auth::Header(name, ApiKey::raw(k).ok_or(())),
            None => Auth::None,
        }
    }

    /// `key` (when one is configured) as `Authorization: Bearer`.
    pub fn bearer(key: Option<&str>) -> Auth {
        match key {
            Some(k) => Auth::Header(::http::header::AUTHORIZATION, ApiKey::bearer(k).ok_or(())),
            None => Auth::None,
        }
    }

    /// `call` (whose body is `body`) with its credential: a header added, or its signature. A Google token is
    /// exchanged first when none is cached (through `client`, bounded by the deployment's timeout).
    pub(crate) async fn apply(
        &self,
        client: &UpstreamClient,
        d: &Target<'_>,
        call: Call,
        body: &[u8],
    ) -> Result<Call, ProviderError> {
        match self {
            Auth::None => Ok(call),
            Auth::Header(name, key) => http::with_key(call, name.clone(), Some(key), d.id),
            Auth::Google(token) => {
                let key = token.bearer(client, d).await?;
                Ok(call.header(::http::header::AUTHORIZATION, key.header()))
            }
            Auth::SigV4(signer) => signer.sign(call, body, d.id),
        }
    }
}
