//! The provider a configured deployment is served by, made from its `model_list` entry (the prefix of
//! `params.model`, `api_base`, `api_key` and a cloud's own settings), each provider's public endpoint when no
//! `api_base` is given. Vertex AI and Bedrock serve Claude through the Anthropic provider (its Messages body)
//! and their other models through their own API (Gemini's; Bedrock's Converse).

use std::sync::Arc;
use svc_config::{AwsAuth, Cloud, ModelEntry, ProviderKind};
use svc_config::{Bedrock as BedrockSettings, Vertex};
use svc_providers::auth::{Auth, AwsSigner, GoogleToken};
use svc_providers::{bedrock, Anthropic, Bedrock, Gemini, Mock, OpenAi, Upstream, UpstreamClient};

/// OpenAI's public `api_base`.
const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// The provider of the deployment `m`, calling through `client`; an Anthropic deployment without
/// `max_output_tokens` sends `default_max_tokens` (the Messages API requires a cap). A cloud entry without its
/// cloud's settings is an error.
pub(crate) fn of(m: &ModelEntry, client: &UpstreamClient, default_max_tokens: u32) -> Result<Upstream, String> {
    let key = m.api_key.as_ref().map(|k| k.expose());
    let base = |default: &'static str| m.api_base.as_deref().unwrap_or(default);
    let max_tokens = m.max_output_tokens.unwrap_or(default_max_tokens);
    let client = client.clone();
    Ok(match (m.provider, &m.cloud) {
        (ProviderKind::OpenAi, _) => Upstream::OpenAi(Arc::new(OpenAi::new(client, base(OPENAI_BASE), key))),
        (ProviderKind::Mock, _) => Upstream::Mock(Arc::new(Mock)),
        (ProviderKind::Anthropic, _) => {
            Upstream::Anthropic(Arc::new(Anthropic::new(client, base(Anthropic::DEFAULT_API_BASE), key, max_tokens)))
        }
        (ProviderKind::Gemini, _) => {
            Upstream::Gemini(Arc::new(Gemini::new(client, base(Gemini::DEFAULT_API_BASE), key)))
        }
        (ProviderKind::Azure, Cloud::Azure(azure)) => Upstream::OpenAi(Arc::new(OpenAi::azure(
            client,
            m.api_base.as_deref().unwrap_or_default(),
            &m.upstream_model,
            &azure.api_version,
            key,
            azure.ad_token.as_ref().map(|t| t.expose()),
        ))),
        (ProviderKind::Vertex, Cloud::Vertex(v)) => vertex(m, v, client, max_tokens),
        (ProviderKind::Bedrock, Cloud::Bedrock(b)) => bedrock(m, b, client, max_tokens),
        // The loader gives every cloud entry its settings; one made otherwise is refused.
        (kind @ (ProviderKind::Azure | ProviderKind::Vertex | ProviderKind::Bedrock), _) => {
            return Err(format!("deployment `{}`: a {} entry without its settings", m.deployment_id, kind.as_str()))
        }
    })
}

/// A Vertex AI deployment: Claude through the Messages API at Vertex's `rawPredict`, any other model as Gemini.
fn vertex(m: &ModelEntry, v: &Vertex, client: UpstreamClient, max_tokens: u32) -> Upstream {
    let a = &v.account;
    let token =
        Arc::new(GoogleToken::new(&a.client_email, a.private_key.expose(), a.private_key_id.as_deref(), &a.token_uri));
    if m.upstream_model.starts_with("claude") {
        let api_base = svc_providers::vertex_base(m.api_base.as_deref(), &v.location);
        let models =
            format!("{api_base}/v1/projects/{}/locations/{}/publishers/anthropic/models", v.project, v.location);
        let cloud = svc_providers::Cloud::Vertex { models };
        Upstream::Anthropic(Arc::new(Anthropic::on_cloud(client, &api_base, cloud, Auth::Google(token), max_tokens)))
    } else {
        Upstream::Gemini(Arc::new(Gemini::vertex(client, m.api_base.as_deref(), &v.project, &v.location, token)))
    }
}

/// A Bedrock deployment: Claude through InvokeModel's Messages body, any other model through Converse; signed with
/// SigV4, or with a Bedrock API key as a bearer token.
fn bedrock(m: &ModelEntry, b: &BedrockSettings, client: UpstreamClient, max_tokens: u32) -> Upstream {
    let api_base = bedrock::runtime_endpoint(b.runtime_endpoint.as_deref().or(m.api_base.as_deref()), &b.region);
    let auth = match &b.auth {
        AwsAuth::ApiKey(key) => Auth::bearer(Some(key.expose())),
        AwsAuth::SigV4 { access_key_id, secret_access_key, session_token } => Auth::SigV4(Arc::new(AwsSigner::new(
            access_key_id,
            secret_access_key.expose(),
            session_token.as_ref().map(|t| t.expose()),
            &b.region,
            "bedrock",
        ))),
    };
    if bedrock::is_claude(&m.upstream_model) {
        let cloud = svc_providers::Cloud::Bedrock;
        Upstream::Anthropic(Arc::new(Anthropic::on_cloud(client, &api_base, cloud, auth, max_tokens)))
    } else {
        Upstream::Bedrock(Arc::new(Bedrock::new(client, &api_base, auth, max_tokens)))
    }
}
