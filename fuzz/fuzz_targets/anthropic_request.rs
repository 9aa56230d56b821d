//! OpenAI chat request → Anthropic Messages API request on arbitrary bodies: it never panics, and a
//! translation is a well-formed Messages body (the model, a `max_tokens`, a `messages` array of turns whose
//! roles alternate, `stream` as asked) or an `Unsupported` error naming the field.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use svc_providers::{fuzzing::anthropic_request, ProviderError};

fuzz_target!(|data: &[u8]| {
    for stream in [false, true] {
        let Some(result) = anthropic_request(data, 1024, stream) else { return };
        match result {
            Ok(body) => {
                svc_fuzz::assert_json_round_trips(&body);
                assert!(body.get("model").is_some_and(Value::is_string));
                assert!(body.get("max_tokens").is_some_and(Value::is_u64));
                assert_eq!(body.get("stream").and_then(Value::as_bool).unwrap_or(false), stream);
                let turns = body.get("messages").and_then(Value::as_array);
                let turns = turns.unwrap_or_else(|| panic!("no `messages` array: {body:?}"));
                let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap_or("?")).collect();
                assert!(roles.iter().all(|r| *r == "user" || *r == "assistant"), "roles {roles:?}");
                assert!(roles.windows(2).all(|w| w[0] != w[1]), "roles do not alternate: {roles:?}");
                assert!(turns.iter().all(|t| t["content"].as_array().is_some_and(|c| !c.is_empty())));
            }
            Err(ProviderError::Unsupported { message, param }) => {
                assert!(!message.is_empty());
                assert!(param.is_some_and(|p| !p.is_empty()), "a refusal that names no field: {message}");
            }
            Err(e) => panic!("a translation error that is not `Unsupported`: {e:?}"),
        }
    }
});
