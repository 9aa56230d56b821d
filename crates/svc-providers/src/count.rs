//! The exact input count of a request, asked of the provider where it offers one for free (Anthropic's
//! `POST /v1/messages/count_tokens`, OpenAI's `POST /responses/input_tokens`, Gemini's `:countTokens` of a chat
//! request), or counted by the provider's own
//! rule (the mock). The gateway asks only for the last part of a budget, where a loose bound would refuse a call
//! the budget still pays for.
//!
//! Only the fields that make the input are sent (the counting endpoints refuse others, such as `max_tokens` or
//! `stream`). An answer that is not a whole number of tokens is an error, never a count.

use crate::passthrough::{Forwarded, Raw, Wire};
use crate::{ChatRequest, Deployment, ProviderError, Upstream};
use ::http::header::{HeaderName, HeaderValue};
use bytes::Bytes;
use serde_json::{Map, Value};

/// What Anthropic's `count_tokens` takes of a Messages body.
const MESSAGES_INPUT: [&str; 7] = ["model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"];

/// What OpenAI's `responses/input_tokens` takes of a Responses body.
const RESPONSES_INPUT: [&str; 11] = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "previous_response_id",
    "conversation",
    "reasoning",
    "text",
    "truncation",
    "parallel_tool_calls",
];

impl Deployment {
    /// The input tokens `body` bills, as the provider counts them: `body` is a request in `wire` (Messages or
    /// Responses), the upstream's own API, as it would be sent (its `model` the upstream's id). `None` when the
    /// deployment offers no free count for it.
    pub async fn count_native(
        &self,
        wire: Wire,
        body: &[u8],
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Option<u64>, ProviderError> {
        let (counter, fields): (Wire, &[&str]) = match (&self.upstream, wire) {
            (Upstream::Anthropic(p), Wire::Messages) if p.counts_tokens() => (Wire::CountTokens, &MESSAGES_INPUT),
            (Upstream::OpenAi(_), Wire::Responses) => (Wire::InputTokens, &RESPONSES_INPUT),
            _ => return Ok(None),
        };
        let body: Map<String, Value> = serde_json::from_slice(body).map_err(|e| self.unsupported(e))?;
        self.ask_count(counter, only(body, fields), headers).await.map(Some)
    }

    /// The input tokens a chat-completions request bills on this deployment: the mock's own count, or
    /// Anthropic's count of the Messages body the request becomes, as model `model` (the upstream's id). `None`
    /// for an OpenAI-compatible upstream (no free count of a chat body).
    pub async fn count_chat(&self, req: &ChatRequest, model: &str) -> Result<Option<u64>, ProviderError> {
        match &self.upstream {
            Upstream::Mock(_) => Ok(Some(crate::mock::prompt_tokens(req))),
            Upstream::Anthropic(p) if p.counts_tokens() => {
                let mut body = p.messages_body(req)?;
                body.insert("model".into(), Value::String(model.to_string()));
                self.ask_count(Wire::CountTokens, only(body, &MESSAGES_INPUT), Vec::new()).await.map(Some)
            }
            // Vertex AI counts the request's own fields; the Gemini API wants them as a `generateContentRequest`.
            Upstream::Gemini(p) if p.on_vertex() => {
                self.ask_count(Wire::GeminiCountTokens, crate::gemini::count_body(req)?, Vec::new()).await.map(Some)
            }
            Upstream::Gemini(_) => {
                let mut request = crate::gemini::count_body(req)?;
                request.insert("model".into(), Value::String(format!("models/{model}")));
                let mut body = Map::new();
                body.insert("generateContentRequest".into(), Value::Object(request));
                self.ask_count(Wire::GeminiCountTokens, body, Vec::new()).await.map(Some)
            }
            Upstream::OpenAi(_) | Upstream::Anthropic(_) | Upstream::Bedrock(_) => Ok(None),
        }
    }

    /// Sends `body` to the counting endpoint `counter` and reads its `input_tokens`.
    async fn ask_count(
        &self,
        counter: Wire,
        body: Map<String, Value>,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<u64, ProviderError> {
        let body = Bytes::from(serde_json::to_vec(&body).map_err(|e| self.unsupported(e))?);
        let answer = self.forward(counter, Forwarded { body, stream: false, headers }).await?;
        let Raw::Reply(answer) = answer else {
            return Err(self.bad("the token count answered with a stream"));
        };
        let key = if counter == Wire::GeminiCountTokens { "totalTokens" } else { "input_tokens" };
        answer
            .get(key)
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| self.bad(&format!("the token count has no whole `{key}`")))
    }

    fn unsupported(&self, e: serde_json::Error) -> ProviderError {
        ProviderError::Unsupported {
            message: format!("cannot count the input of deployment `{}`: {e}", self.id),
            param: None,
        }
    }

    fn bad(&self, detail: &str) -> ProviderError {
        ProviderError::BadResponse { deployment: self.id.clone(), detail: detail.to_string() }
    }
}

/// `body` with only the fields `keep`.
fn only(mut body: Map<String, Value>, keep: &[&str]) -> Map<String, Value> {
    body.retain(|k, _| keep.contains(&k.as_str()));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_input_fields_are_counted() {
        let body = serde_json::json!({"model": "m", "messages": [], "max_tokens": 32000, "stream": true,
            "system": "s", "metadata": {"user_id": "u"}, "tools": []});
        let Value::Object(body) = body else { panic!("an object") };
        let mut kept: Vec<String> = only(body, &MESSAGES_INPUT).keys().cloned().collect();
        kept.sort_unstable();
        assert_eq!(kept, ["messages", "model", "system", "tools"]);
    }
}
