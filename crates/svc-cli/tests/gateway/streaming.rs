//! Streaming: chunk by chunk with no buffering, usage stripped unless asked, cancellation on disconnect.

use crate::harness::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use svc_testkit::upstream::Upstream;

fn stream_body(with_usage: bool) -> Value {
    let mut b = chat("openai/gpt-4.1-mini");
    b["stream"] = json!(true);
    if with_usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// Starts a streamed completion of the mini alias.
async fn open_stream(g: &Gateway, key: &str, with_usage: bool) -> reqwest::Response {
    client().post(g.path("/v1/chat/completions")).bearer_auth(key).json(&stream_body(with_usage)).send().await.unwrap()
}

/// The `data:` payloads of an SSE text.
fn events(text: &str) -> Vec<String> {
    text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).map(String::from).collect()
}

#[tokio::test]
async fn chunks_arrive_before_the_upstream_finishes() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.hold_stream = true);
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let r = open_stream(&g, MASTER, false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    for h in ["x-request-id", "x-svc-overhead-duration-ms", "x-svc-model-id"] {
        assert!(r.headers().contains_key(h), "{h}");
    }
    let mut body = r.bytes_stream();
    let mut seen = String::new();
    // The upstream holds after its first content chunk: the role and first content chunks must already be
    // here while it waits.
    while events(&seen).len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(5), body.next())
            .await
            .expect("a chunk before the upstream finished");
        seen.push_str(&String::from_utf8_lossy(&next.unwrap().unwrap()));
    }
    assert_eq!(up.shared.streams_completed.load(Ordering::SeqCst), 0, "upstream still held");
    up.release();
    while let Some(Ok(b)) = tokio::time::timeout(Duration::from_secs(5), body.next()).await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&b));
    }
    let evs = events(&seen);
    assert_eq!(evs.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = evs[..evs.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Hello from the test upstream.");
    for c in &chunks {
        assert_eq!(c["model"], "openai/gpt-4.1-mini", "alias restored in every chunk");
        assert!(c.get("usage").is_none(), "usage stripped when the client did not ask: {c}");
    }
    // The gateway asked the upstream for usage anyway.
    let sent = &up.requests()[0].body;
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(sent["model"], "up-mini");
}

#[tokio::test]
async fn usage_chunk_is_kept_when_asked_and_spend_is_recorded() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let r = open_stream(&g, &key, true).await;
    let evs = events(&r.text().await.unwrap());
    let usage: Value = serde_json::from_str(&evs[evs.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}));
    // The spend record was committed before [DONE]: it is in the store now.
    let store = g.store().await;
    let recs = store.query_spend(&Default::default(), 10, 0).await.unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!((recs[0].prompt_tokens, recs[0].completion_tokens, recs[0].status), (10, 5, 200));
    // 10 × 0.0000004 + 5 × 0.0000016 = 0.000012 → 12,000 nano-units.
    assert_eq!(recs[0].cost, 12_000);
    assert_eq!(recs[0].team_id.as_deref(), Some("executor"));
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.hold_stream = true);
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let r = open_stream(&g, MASTER, false).await;
    let mut body = r.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(5), body.next()).await.unwrap();
    assert!(first.is_some());
    drop(body);
    let shared = up.shared.clone();
    assert!(
        eventually(5, || shared.streams_cancelled.load(Ordering::SeqCst) == 1).await,
        "upstream stream was not cancelled"
    );
    assert_eq!(up.shared.streams_completed.load(Ordering::SeqCst), 0);
    // What was generated is still recorded, with status 499.
    let store = g.store().await;
    let mut recs = Vec::new();
    for _ in 0..50 {
        recs = store.query_spend(&Default::default(), 10, 0).await.unwrap();
        if !recs.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].status, 499);
}

#[tokio::test]
async fn a_stream_broken_mid_way_ends_with_an_error_event() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| {
        b.cut_stream_after = Some(3);
        b.chunk_delay = std::time::Duration::from_millis(100);
    });
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let r = open_stream(&g, MASTER, false).await;
    assert_eq!(r.status(), 200);
    let evs = events(&r.text().await.unwrap_or_default());
    let last: Value = serde_json::from_str(evs.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_unreachable", "{last}");
}

/// An upstream that reports no usage (some OpenAI-compatible servers): the call is charged the gateway's
/// estimate, and the client still gets a `usage` object with that estimate, in a reply and, when it asked for
/// usage, as the stream's last chunk.
#[tokio::test]
async fn an_upstream_without_usage_is_charged_the_estimate_the_client_sees() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| b.report_usage = false);
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let (s, _, b) = post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(s, 200, "{b}");
    let (p, c) = (b["usage"]["prompt_tokens"].as_i64().unwrap(), b["usage"]["completion_tokens"].as_i64().unwrap());
    assert!(p > 0 && c > 0, "{b}");
    assert_eq!(b["usage"]["total_tokens"].as_i64(), Some(p + c));

    let r = open_stream(&g, &key, true).await;
    let evs = events(&r.text().await.unwrap());
    assert_eq!(evs.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&evs[evs.len() - 2]).unwrap();
    assert_eq!((last["choices"].clone(), last["model"].clone()), (json!([]), json!("openai/gpt-4.1-mini")));
    assert_eq!(last["id"], "chatcmpl-test");
    let (sp, sc) =
        (last["usage"]["prompt_tokens"].as_i64().unwrap(), last["usage"]["completion_tokens"].as_i64().unwrap());
    assert!(sp > 0 && sc > 0, "{last}");
    // Without include_usage the client gets no usage chunk.
    let r = open_stream(&g, &key, false).await;
    let evs = events(&r.text().await.unwrap());
    assert!(evs.iter().all(|e| !e.contains("\"usage\"")), "{evs:?}");

    // The spend records hold exactly what the client was shown.
    let store = g.store().await;
    let mut recs = store.query_spend(&Default::default(), 10, 0).await.unwrap();
    recs.reverse();
    assert_eq!(recs.len(), 3);
    assert_eq!((recs[0].prompt_tokens, recs[0].completion_tokens), (p, c));
    assert_eq!((recs[1].prompt_tokens, recs[1].completion_tokens), (sp, sc));
}
