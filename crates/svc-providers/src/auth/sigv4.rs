//! AWS Signature Version 4 of a Bedrock call, by the `aws-sigv4` crate (AWS's own signer): the method, path,
//! query, the `host` and `content-type` headers and the body's SHA-256 signed with the day's key derived from
//! the secret, for service `bedrock` in the deployment's region; `x-amz-date` (and `x-amz-security-token` for
//! temporary credentials) and `authorization` added.

use crate::client::Call;
use crate::ProviderError;
use ::http::header::{HeaderName, HeaderValue};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// The signer of one deployment's calls.
pub struct AwsSigner {
    identity: Identity,
    region: String,
    service: &'static str,
}

impl AwsSigner {
    /// A signer with these credentials, for `service` in `region`.
    pub fn new(
        access_key_id: &str,
        secret_access_key: &str,
        session_token: Option<&str>,
        region: &str,
        service: &'static str,
    ) -> AwsSigner {
        let credentials =
            Credentials::new(access_key_id, secret_access_key, session_token.map(str::to_string), None, "svc-config");
        AwsSigner { identity: credentials.into(), region: region.to_string(), service }
    }

    /// `call`, whose body is `body`, signed.
    pub(crate) fn sign(&self, call: Call, body: &[u8], deployment: &str) -> Result<Call, ProviderError> {
        let failed = |detail: String| ProviderError::Unreachable {
            deployment: deployment.to_string(),
            detail: format!("cannot sign the request (SigV4): {detail}"),
        };
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name(self.service)
            .time(std::time::SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(e.to_string()))?
            .into();
        let uri = call.uri().to_string();
        let headers = call.headers().iter().filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)));
        let request = SignableRequest::new(call.method().as_str(), uri, headers, SignableBody::Bytes(body))
            .map_err(|e| failed(e.to_string()))?;
        let (instructions, _) = sign(request, &params).map_err(|e| failed(e.to_string()))?.into_parts();
        let (headers, _) = instructions.into_parts();
        let mut call = call;
        for h in headers {
            let name = HeaderName::from_static(h.name());
            let mut value = HeaderValue::from_str(h.value()).map_err(|e| failed(e.to_string()))?;
            value.set_sensitive(h.sensitive());
            call = call.header(name, value);
        }
        Ok(call)
    }
}

impl std::fmt::Debug for AwsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSigner").field("region", &self.region).finish_non_exhaustive()
    }
}
