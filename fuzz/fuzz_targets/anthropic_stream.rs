//! The Anthropic stream state machine over arbitrary SSE bodies cut into arbitrary chunks (see
//! `svc_fuzz::chunks`), with and without the usage chunk: it never panics, ends by itself, yields
//! well-formed `chat.completion.chunk` objects, at most one error and only as the last item, and, when asked,
//! one usage chunk (with consistent counts) before that error or the end, unless the upstream never reported
//! its counts (the gateway then writes the usage chunk of its estimate).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use svc_providers::fuzzing::anthropic_stream;

fuzz_target!(|data: &[u8]| {
    for include_usage in [false, true] {
        let body = futures::stream::iter(svc_fuzz::chunks(data));
        // Every event yields at most a few chunks, and an event takes at least a few bytes.
        let items = svc_fuzz::drain(anthropic_stream(body, include_usage, 4096), 2 * data.len() + 4);
        assert!(!items.is_empty(), "a stream ends with `message_stop` or an error, never silently");
        if let Some(first_error) = items.iter().position(Result::is_err) {
            assert_eq!(first_error + 1, items.len(), "items after an error");
        }
        // Count-only chunks (output with no chat form) are counted by the gateway, never sent.
        let chunks: Vec<_> =
            items.iter().flatten().filter(|c| !c.is_count_only()).map(svc_providers::Chunk::map).collect();
        for chunk in &chunks {
            svc_fuzz::assert_json_round_trips(chunk);
            assert_eq!(chunk.get("object").and_then(Value::as_str), Some("chat.completion.chunk"));
        }
        let usage: Vec<_> = chunks.iter().filter_map(|c| c.get("usage").filter(|u| !u.is_null())).collect();
        if include_usage {
            assert!(usage.len() <= 1, "at most one usage chunk when asked");
            if let Some(u) = usage.first() {
                assert!(
                    chunks.last().is_some_and(|c| c.get("usage").is_some_and(|u| !u.is_null())),
                    "usage comes last"
                );
                svc_fuzz::assert_openai_usage(u);
            }
        } else {
            assert!(usage.is_empty() && chunks.iter().all(|c| !c.contains_key("usage")), "usage not asked for");
        }
    }
});
