//! The provider a configured deployment is served by, made from its `model_list` entry (the prefix of
//! `params.model`, `api_base`, `api_key`), each provider's public endpoint when no `api_base` is given.

use std::sync::Arc;
use svc_config::{ModelEntry, ProviderKind};
use svc_providers::{Anthropic, Gemini, Mock, OpenAi, Upstream, UpstreamClient};

/// OpenAI's public `api_base`.
const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// The provider of the deployment `m`, calling through `client`; an Anthropic deployment without
/// `max_output_tokens` sends `default_max_tokens` (the Messages API requires a cap).
pub(crate) fn of(m: &ModelEntry, client: &UpstreamClient, default_max_tokens: u32) -> Upstream {
    let key = m.api_key.as_ref().map(|k| k.expose());
    let base = |default: &'static str| m.api_base.as_deref().unwrap_or(default);
    match m.provider {
        ProviderKind::OpenAi => Upstream::OpenAi(Arc::new(OpenAi::new(client.clone(), base(OPENAI_BASE), key))),
        ProviderKind::Mock => Upstream::Mock(Arc::new(Mock)),
        ProviderKind::Anthropic => Upstream::Anthropic(Arc::new(Anthropic::new(
            client.clone(),
            base(Anthropic::DEFAULT_API_BASE),
            key,
            m.max_output_tokens.unwrap_or(default_max_tokens),
        ))),
        ProviderKind::Gemini => {
            Upstream::Gemini(Arc::new(Gemini::new(client.clone(), base(Gemini::DEFAULT_API_BASE), key)))
        }
    }
}
