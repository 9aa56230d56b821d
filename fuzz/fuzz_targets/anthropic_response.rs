//! Anthropic response → OpenAI `chat.completion` on arbitrary JSON, and Anthropic HTTP error bodies → the
//! OpenAI error kind and message: they never panic, a completion is well-formed JSON with one choice and a
//! consistent `usage`, and an error always has a kind.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use svc_providers::fuzzing::{anthropic_error, anthropic_response};

fuzz_target!(|data: &[u8]| {
    let status = 400 + u16::from(data.first().copied().unwrap_or(0)) % 200;
    let (kind, message) = anthropic_error(status, data);
    assert!(!kind.is_empty(), "error {status} without a kind");
    // A body that is not Anthropic's error shape is kept as text, cut to 500 characters.
    assert!(message.chars().count() <= 500 || svc_fuzz::json(data).is_some(), "raw error text not cut");

    let Some(message) = svc_fuzz::json(data) else { return };
    let Ok(completion) = anthropic_response(&message, "fuzz-model", 0) else { return };
    svc_fuzz::assert_json_round_trips(&completion);
    assert_eq!(completion.get("object").and_then(Value::as_str), Some("chat.completion"));
    let choices = completion.get("choices").and_then(Value::as_array).map(Vec::len);
    assert_eq!(choices, Some(1), "a completion has one choice: {completion:?}");
    svc_fuzz::assert_openai_usage(&completion["usage"]);
    for call in completion["choices"][0]["message"]["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or_else(|| panic!("arguments: {call}"));
        assert!(svc_fuzz::json(arguments.as_bytes()).is_some(), "tool arguments are not JSON: {arguments}");
    }
});
