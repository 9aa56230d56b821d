//! `svc_providers::usage::read` on arbitrary JSON, the check an upstream's `usage` object passes before the
//! gateway believes it: it never panics, and well-formed counts are exactly the object's own whole numbers,
//! while anything else (missing, negative, fractional, text, in the two counts or in a detail that is there) is
//! reported missing or malformed, never counts.
//! `read_text`, which reads the counts straight from the field's JSON text, says exactly what `read` says.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use svc_providers::usage::{read, read_text, Reported};

fuzz_target!(|data: &[u8]| {
    let Some(usage) = svc_fuzz::json(data) else { return };
    let reported = read(Some(&usage));
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(read_text(Some(text)), reported, "{text}");
    }
    match reported {
        Reported::Counts(u) => {
            assert_eq!(usage.get("prompt_tokens").and_then(Value::as_u64), Some(u.prompt_tokens), "{usage}");
            assert_eq!(usage.get("completion_tokens").and_then(Value::as_u64), Some(u.completion_tokens), "{usage}");
        }
        Reported::Missing => assert!(usage.is_null(), "{usage}"),
        Reported::Malformed(why) => {
            assert!(!why.is_empty());
            // Refused only when a count is not a whole number from 0: one of the two it needs, or one of the
            // optional details when it is there at all.
            let at = |path: &[&str]| path.iter().try_fold(&usage, |v, k| v.get(*k));
            let whole = |path: &[&str]| at(path).and_then(Value::as_u64).is_some();
            let absent_or_whole = |path: &[&str]| at(path).is_none_or(|v| v.is_null() || v.as_u64().is_some());
            let details = [
                &["prompt_tokens_details", "cached_tokens"][..],
                &["cache_creation_input_tokens"],
                &["cache_creation_1h_input_tokens"],
                &["server_tool_use", "web_search_requests"],
            ];
            let readable = whole(&["prompt_tokens"])
                && whole(&["completion_tokens"])
                && details.iter().all(|path| absent_or_whole(path));
            assert!(!readable, "{usage} refused: {why}");
        }
    }
});
