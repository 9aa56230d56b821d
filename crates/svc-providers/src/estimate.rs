//! The gateway's one token estimator, used wherever a count is needed before or without the upstream's own:
//! budget reservations, a reply or stream that reports no (or no believable) usage, and the point where a
//! stream that ignores its completion cap is cut. A text is counted by the rule of `tokens.rs` ([`text_tokens`],
//! [`conservative`]); which strings of a reply count is `generated.rs`'s ([`is_not_generated`]).
//!
//! A media part (an image, audio or file given by reference) cannot be counted from its bytes; each one is
//! allowed [`MEDIA_PART_TOKENS`] in an estimate.
//!
//! What this file does not do: tokenize for real, or decide what a count is used for.

pub use crate::generated::is_not_generated;
pub use crate::tokens::{conservative, text_tokens};
use crate::{ChatRequest, PromptParts};
use serde_json::Value;

/// Tokens an estimate allows for one media part (about the most a high-detail image costs).
pub const MEDIA_PART_TOKENS: u64 = 1_600;
/// Framing tokens of a chat request, and of each message in it.
const FRAMING: u64 = 3;
const PER_MESSAGE: u64 = 4;

/// The conservative estimate of a chat request's prompt: the JSON of its messages and of its tools (and
/// functions and response format), framing, and [`MEDIA_PART_TOKENS`] per media part.
pub fn prompt_tokens(req: &ChatRequest) -> u64 {
    prompt_by(req, 2)
}

/// The plain estimate of a chat request's prompt ([`text_tokens`] in place of [`conservative`]): what
/// `count_tokens` answers for a deployment that cannot count.
pub fn prompt_tokens_plain(req: &ChatRequest) -> u64 {
    prompt_by(req, 1)
}

/// The conservative estimate of a prompt read as `parts` (a chat request's, or a request read in its own API).
pub fn prompt_tokens_of(parts: PromptParts) -> u64 {
    prompt_of(parts, 2)
}

/// [`text_tokens`] of the JSON text `raw` (valid JSON) as serde_json writes it again: compact, its escapes.
pub fn json_text_tokens(raw: &str) -> u64 {
    crate::request::json_text_tokens(raw)
}

fn prompt_by(req: &ChatRequest, factor: u64) -> u64 {
    prompt_of(req.prompt_parts(), factor)
}

fn prompt_of(parts: PromptParts, factor: u64) -> u64 {
    FRAMING
        .saturating_add(PER_MESSAGE.saturating_mul(parts.messages))
        .saturating_add(parts.json_tokens.saturating_mul(factor))
        .saturating_add(MEDIA_PART_TOKENS.saturating_mul(parts.media))
}

/// The conservative estimate of the completion tokens of a reply's generated content (chat `choices`,
/// Messages `content`, Responses `output`: the text, refusals, reasoning and tool-call arguments in it, by
/// [`crate::generated::Rule::Choices`]).
pub fn completion_tokens(choices: &Value) -> u64 {
    crate::generated::value_tokens(choices, crate::generated::Rule::Choices).saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn prompts_count_messages_tools_and_media() {
        let plain = req(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
        let text = json!({"role": "user", "content": "hi"}).to_string();
        assert_eq!(prompt_tokens(&plain), 3 + 4 + conservative(&text));
        let image = req(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
        ]}]}));
        assert!(prompt_tokens(&image) > MEDIA_PART_TOKENS);
    }

    #[test]
    fn completions_count_generated_text_only() {
        let choices = json!([{"index": 0, "message": {"role": "assistant", "content": "abcd",
            "tool_calls": [{"id": "call_0123456789", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "finish_reason": "stop"}]);
        // "abcd" (2), "f" (2), "{}" (2); ids, roles, types and the finish reason do not count.
        assert_eq!(completion_tokens(&choices), 6);
    }
}
