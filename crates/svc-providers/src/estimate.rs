//! The gateway's one token estimator, used wherever a count is needed before or without the upstream's own:
//! budget reservations, a reply or stream that reports no (or no believable) usage, and the point where a
//! stream that ignores its completion cap is cut.
//!
//! The rule: **about four ASCII bytes make a token, and every other character is a token of its own**
//! ([`text_tokens`]). Real tokenizers average three to five ASCII characters a token on prose and code, and
//! rarely split a character into more than two. Where the gateway must not under-count (a reservation, a
//! charge in place of a missing count), it counts twice that ([`conservative`]); where it must not cut a
//! well-behaved stream short, it counts once and leaves a margin (see the gateway's stream stage).
//!
//! A media part (an image, audio or file given by reference) cannot be counted from its bytes; each one is
//! allowed [`MEDIA_PART_TOKENS`] in an estimate.
//!
//! What this file does not do: tokenize for real, or decide what a count is used for.

use crate::ChatRequest;
use serde_json::Value;

/// Tokens an estimate allows for one media part (about the most a high-detail image costs).
pub const MEDIA_PART_TOKENS: u64 = 1_600;
/// Framing tokens of a chat request, and of each message in it.
const FRAMING: u64 = 3;
const PER_MESSAGE: u64 = 4;

/// The estimate of `text`'s tokens: ⌈ASCII bytes / 4⌉ plus one per other character.
pub fn text_tokens(text: &str) -> u64 {
    let mut c = Counter::default();
    c.count(text.as_bytes());
    c.tokens()
}

/// Twice [`text_tokens`]: a count that real tokenizers stay under, for reservations and charges.
pub fn conservative(text: &str) -> u64 {
    text_tokens(text).saturating_mul(2)
}

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

fn prompt_by(req: &ChatRequest, factor: u64) -> u64 {
    let parts = req.prompt_parts();
    FRAMING
        .saturating_add(PER_MESSAGE.saturating_mul(parts.messages))
        .saturating_add(parts.json_tokens.saturating_mul(factor))
        .saturating_add(MEDIA_PART_TOKENS.saturating_mul(parts.media))
}

/// Counts the bytes [`text_tokens`] counts, as JSON is written into it.
#[derive(Default)]
pub(crate) struct Counter {
    ascii: u64,
    other: u64,
}

impl Counter {
    /// Counts the characters of UTF-8 `bytes`, in one pass: a character that is not ASCII starts with a byte of
    /// the form 11xxxxxx and goes on with bytes of the form 10xxxxxx. Counted in byte-wide sums of at most 255
    /// bytes, which the compiler turns into vector instructions (16 bytes a step, where `u64` sums took one).
    #[inline]
    pub(crate) fn count(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(255) {
            let (mut high, mut lead) = (0u8, 0u8);
            for &b in chunk {
                high = high.wrapping_add(b >> 7);
                lead = lead.wrapping_add(u8::from(b >= 0xC0));
            }
            self.ascii += (chunk.len() - usize::from(high)) as u64;
            self.other += u64::from(lead);
        }
    }

    /// Takes back `n` ASCII characters counted (whitespace that is not written again).
    pub(crate) fn uncount_ascii(&mut self, n: u64) {
        self.ascii = self.ascii.saturating_sub(n);
    }

    /// [`text_tokens`] of what was counted.
    pub(crate) fn tokens(&self) -> u64 {
        self.ascii.div_ceil(4).saturating_add(self.other)
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`text_tokens`] of `v`'s JSON text, counted as it is written (no string is made).
pub(crate) fn json_value_tokens(v: &Value) -> u64 {
    let mut c = Counter::default();
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.tokens()
}

/// The conservative estimate of the completion tokens of a reply's generated content (chat `choices`,
/// Messages `content`, Responses `output`: the text, refusals, reasoning and tool-call arguments in it, by
/// [`crate::generated::Rule::Choices`]).
pub fn completion_tokens(choices: &Value) -> u64 {
    crate::generated::value_tokens(choices, crate::generated::Rule::Choices).saturating_mul(2)
}

/// Whether the value of key `key` in `choices` is not generated text: ids, roles, types, finish reasons,
/// indexes and log probabilities.
pub fn is_not_generated(key: &str) -> bool {
    matches!(key, "id" | "role" | "type" | "finish_reason" | "index" | "logprobs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        ChatRequest::parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn counts_by_the_documented_rule() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("abcd"), 1);
        assert_eq!(text_tokens("abcde"), 2);
        assert_eq!(text_tokens("héllo"), 2, "four ASCII bytes and one other character");
        assert_eq!(text_tokens("日本語"), 3);
        assert_eq!(conservative("abcde"), 4);
        // Past the 255 bytes of one byte-wide sum, and characters of two, three and four bytes.
        let long = "aé日😀".repeat(200);
        let chars =
            long.chars().filter(char::is_ascii).count().div_ceil(4) + long.chars().filter(|c| !c.is_ascii()).count();
        assert_eq!(text_tokens(&long), chars as u64);
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
