//! Shared test helpers: an Anthropic deployment pointed at a fake server, bounded waits, a JSON view of
//! [`ProviderError`] for comparisons, and the golden-file check (`GOLDEN_BLESS=1` rewrites expected files).
//!
//! What it does not do: assert anything by itself beyond the golden comparison.

use futures::StreamExt;
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use svc_providers::{Anthropic, ChatRequest, ChunkStream, Deployment, ProviderError, Upstream};
use svc_testkit::anthropic::FakeAnthropic;

/// The API key the fake server expects.
pub const KEY: &str = "sk-ant-test-0123456789";
/// The upstream model id of the test deployment.
pub const MODEL: &str = "claude-test";
/// The `default_max_tokens` of the test deployment.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
/// The bound on every wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test after [`WAIT`].
pub async fn within<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(WAIT, fut).await.expect("test wait timed out")
}

/// A fake Anthropic server that checks [`KEY`].
pub async fn fake() -> FakeAnthropic {
    within(FakeAnthropic::start(Some(KEY))).await.expect("fake anthropic starts")
}

/// An Anthropic deployment at `base_url` with `key` and `timeout`.
pub fn deployment_with(base_url: &str, key: Option<&str>, timeout: Duration) -> Deployment {
    let provider =
        Anthropic::new(svc_providers::UpstreamClient::new().expect("client"), base_url, key, DEFAULT_MAX_TOKENS);
    Deployment {
        id: "anthropic-test".into(),
        upstream_model: MODEL.into(),
        timeout,
        max_event_bytes: 1 << 20,
        max_response_bytes: 64 << 20,
        upstream: Upstream::Anthropic(Arc::new(provider)),
    }
}

/// The usual test deployment for `fake`.
pub fn deployment(fake: &FakeAnthropic) -> Deployment {
    deployment_with(fake.base_url(), Some(KEY), WAIT)
}

/// A chat request from a JSON body.
pub fn request(body: &Value) -> ChatRequest {
    ChatRequest::parse(&serde_json::to_vec(body).unwrap()).expect("a valid chat request")
}

/// Drains a chunk stream: the chunks (a count-only chunk as `{"count_only": <tokens>}`), then the error that
/// ended it, if any. Nothing may follow an error.
pub async fn collect(stream: ChunkStream) -> (Vec<Value>, Option<ProviderError>) {
    let items: Vec<_> = within(stream.collect::<Vec<_>>()).await;
    let mut chunks = Vec::new();
    let mut error = None;
    for item in items {
        assert!(error.is_none(), "an item followed the stream's error");
        match item {
            Ok(chunk) if chunk.is_count_only() => chunks.push(json!({ "count_only": chunk.generated_tokens() })),
            Ok(chunk) => chunks.push(Value::Object(chunk.into_map())),
            Err(e) => error = Some(e),
        }
    }
    (chunks, error)
}

/// A JSON view of an error, for comparisons (the deployment id left out).
pub fn error_json(e: &ProviderError) -> Value {
    match e {
        ProviderError::Status { status, message, kind, param, retry_after, .. } => json!({
            "variant": "status", "status": status, "message": message, "kind": kind, "param": param,
            "retry_after": retry_after,
        }),
        ProviderError::Unsupported { message, param } => {
            json!({ "variant": "unsupported", "message": message, "param": param })
        }
        ProviderError::BadResponse { detail, .. } => {
            json!({ "variant": "bad_response", "detail": detail })
        }
        ProviderError::Unreachable { detail, .. } => {
            json!({ "variant": "unreachable", "detail": detail })
        }
        ProviderError::Timeout { after, .. } => {
            json!({ "variant": "timeout", "after_ms": after.as_millis() as u64 })
        }
    }
}

/// Sets `created` (a timestamp) to 0 in a completion or chunk.
pub fn redact(mut v: Value) -> Value {
    if let Some(created) = v.get_mut("created") {
        assert!(created.as_i64().is_some_and(|t| t > 1_600_000_000), "`created` is a current timestamp");
        *created = json!(0);
    }
    v
}

/// The golden cases of a direction: every `<case>.json` under `tests/golden/<direction>/` but the
/// `<case>.expected.json` files, sorted.
pub fn golden_cases(direction: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(direction);
    let mut cases: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().ends_with(".expected.json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let input =
                serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, input)
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!cases.is_empty(), "no golden cases in {}", dir.display());
    cases
}

fn expected_path(direction: &str, case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(direction).join(format!("{case}.expected.json"))
}

/// Compares `actual` with `<case>.expected.json` as parsed JSON; returns a description of the difference.
/// With `GOLDEN_BLESS=1` the expected file is (re)written instead.
pub fn check_golden(direction: &str, case: &str, actual: &Value) -> Option<String> {
    let path = expected_path(direction, case);
    if std::env::var_os("GOLDEN_BLESS").is_some() {
        let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return None;
    }
    let expected: Value = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        Err(e) => return Some(format!("{direction}/{case}: cannot read {}: {e}", path.display())),
    };
    (&expected != actual).then(|| {
        format!(
            "{direction}/{case}: differs from {}\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            serde_json::to_string_pretty(&expected).unwrap(),
            serde_json::to_string_pretty(actual).unwrap()
        )
    })
}
