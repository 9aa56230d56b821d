//! A Google service account's access token (Vertex AI): a JWT naming the account, the cloud-platform scope and
//! the token endpoint, signed RS256 with the account's private key (the `jsonwebtoken` crate), exchanged at the
//! account's `token_uri` (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`), and kept until a minute
//! before it expires. One exchange at a time: the calls that find no token wait for the one under way.
//!
//! What this file does not do: read the key file (svc-config does) or retry a refused exchange (the gateway's
//! pipeline retries the call, which asks again).

use crate::client::{Call, UpstreamClient};
use crate::http::{self, ApiKey};
use crate::{ProviderError, Target};
use ::http::header::{HeaderValue, CONTENT_TYPE};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The scope asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// How long before its expiry a token is replaced.
const MARGIN: Duration = Duration::from_secs(60);
/// The longest a token is believed to live, whatever the endpoint says (Google's last an hour).
const MAX_LIFETIME: Duration = Duration::from_secs(3600);
/// The most of an exchange's answer that is read.
const MAX_ANSWER: usize = 64 * 1024;

/// The claims of the signed assertion.
#[derive(serde::Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// The access tokens of one service account.
pub struct GoogleToken {
    email: String,
    /// The account's key; `Err` says why it cannot sign (never the key).
    key: Result<jsonwebtoken::EncodingKey, String>,
    key_id: Option<String>,
    token_uri: String,
    /// The current token and when it is to be replaced.
    cached: Mutex<Option<(ApiKey, Instant)>>,
    /// Held during an exchange.
    exchange: tokio::sync::Mutex<()>,
}

impl GoogleToken {
    /// The tokens of the account `email` whose PEM private key is `private_key` (`key_id` its id), exchanged at
    /// `token_uri`.
    pub fn new(email: &str, private_key: &str, key_id: Option<&str>, token_uri: &str) -> GoogleToken {
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(private_key.as_bytes())
            .map_err(|e| format!("the service account's private_key is not an RSA key: {e}"));
        GoogleToken {
            email: email.to_string(),
            key,
            key_id: key_id.map(str::to_string),
            token_uri: token_uri.to_string(),
            cached: Mutex::new(None),
            exchange: tokio::sync::Mutex::new(()),
        }
    }

    /// A valid token, from the cache or a new exchange.
    pub(crate) async fn bearer(&self, client: &UpstreamClient, d: &Target<'_>) -> Result<ApiKey, ProviderError> {
        if let Some(key) = self.current() {
            return Ok(key);
        }
        let _one = self.exchange.lock().await;
        if let Some(key) = self.current() {
            return Ok(key);
        }
        let (key, lifetime) = self.exchange(client, d).await?;
        let renew = Instant::now() + lifetime.min(MAX_LIFETIME).saturating_sub(MARGIN);
        if let Ok(mut cached) = self.cached.lock() {
            *cached = Some((key.clone(), renew));
        }
        Ok(key)
    }

    /// The cached token while it is fresh.
    fn current(&self) -> Option<ApiKey> {
        let cached = self.cached.lock().ok()?;
        cached.as_ref().filter(|(_, renew)| Instant::now() < *renew).map(|(key, _)| key.clone())
    }

    /// The signed assertion for now.
    fn assertion(&self) -> Result<String, String> {
        let key = self.key.as_ref().map_err(Clone::clone)?;
        let iat = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_secs());
        let claims = Claims { iss: &self.email, scope: SCOPE, aud: &self.token_uri, iat, exp: iat + 3600 };
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = self.key_id.clone();
        jsonwebtoken::encode(&header, &claims, key).map_err(|e| format!("cannot sign the token request: {e}"))
    }

    /// One exchange: the token and how long it lives.
    async fn exchange(&self, client: &UpstreamClient, d: &Target<'_>) -> Result<(ApiKey, Duration), ProviderError> {
        let failed = |detail: String| ProviderError::Unreachable {
            deployment: d.id.to_string(),
            detail: format!("Google token exchange at `{}`: {detail}", self.token_uri),
        };
        let assertion = self.assertion().map_err(failed)?;
        let endpoint = client.endpoint(&self.token_uri).ok_or_else(|| failed("not a valid URL".into()))?;
        let form = format!("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}");
        let call = Call::new(::http::Method::POST, &endpoint, form.into())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
        let bounded = Target { max_response_bytes: MAX_ANSWER, ..*d };
        let bytes = http::fetch(client, &bounded, d.timeout, call, |answer| async move {
            let (status, _, body) = http::error_body(answer).await;
            let said: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let why = said.get("error_description").or_else(|| said.get("error")).and_then(|v| v.as_str());
            ProviderError::Status {
                deployment: d.id.to_string(),
                status,
                message: format!(
                    "Google token exchange refused the service account `{}`: {}",
                    self.email,
                    why.map_or_else(|| http::raw_message(status, &body), str::to_string)
                ),
                kind: Some("authentication_error".into()),
                param: None,
                retry_after: None,
            }
        })
        .await?;
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            #[serde(default)]
            expires_in: Option<u64>,
        }
        let answer: Answer =
            serde_json::from_slice(&bytes).map_err(|_| failed("the answer has no `access_token`".into()))?;
        let key =
            ApiKey::bearer(&answer.access_token).ok_or_else(|| failed("the token is not a header value".into()))?;
        Ok((key, Duration::from_secs(answer.expires_in.unwrap_or(3600))))
    }
}

impl std::fmt::Debug for GoogleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleToken")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}
