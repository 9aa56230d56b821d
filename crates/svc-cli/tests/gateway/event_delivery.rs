//! How the gateway's outbox treats misbehaving webhook receivers: an endless answer body does not grow the
//! gateway's memory, a webhook gets exactly `1 + retry` attempts and then its row is dead, every attempt carries
//! the Standard Webhooks headers, and a webhook URL (often holding a token) never shows in logs or stored names,
//! while events queued under an old full-URL name are still delivered after the upgrade.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;
use svc_store::{NewEvent, OutboxStats, Store};
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::{signature, standard_signature, EndlessBody, WebhookReceiver};

fn with_webhook(base: String, url: &str, timeout: u64, retry: u32) -> String {
    format!(
        "{base}notifications:\n  webhooks:\n    - url: '{url}'\n      events: ['*']\n      secret: s3cret\n      timeout_seconds: {timeout}\n      retry: {retry}\n"
    )
}

/// Resident memory of a process, in bytes (`VmRSS` of `/proc/<pid>/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

async fn post_test_event(g: &Gateway) {
    let r = client().post(g.path("/events")).bearer_auth(MASTER).json(&json!({"event": "test"})).send().await.unwrap();
    assert_eq!(r.status(), 202);
}

async fn stats(g: &Gateway, destination: Option<&str>) -> OutboxStats {
    let store = Store::connect(&g.db_url()).await.unwrap();
    let s = store.outbox_stats(destination).await.unwrap();
    store.close().await;
    s
}

/// Polls the store until the one webhook row is dead (at most `secs`).
async fn wait_until_dead(g: &Gateway, secs: u64) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if stats(g, None).await.failed == 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A receiver that answers 500 with a body that never ends, as fast as the gateway reads: the gateway keeps at
/// most 64 KiB of each error body, so its memory stays bounded while it delivers (and retries) to it.
#[tokio::test]
async fn an_endless_error_body_does_not_grow_the_gateway() {
    let up = Upstream::start().await.unwrap();
    let hook = WebhookReceiver::start().await;
    hook.set_default_status(500);
    hook.set_endless_body(Some(EndlessBody { chunk: 64 * 1024, every: Duration::ZERO }));
    let g = Gateway::start(&with_webhook(config_for(&up.base_url, ""), &hook.url(), 3, 1)).await;
    let before = rss(g.pid());
    assert!(before > 0);
    post_test_event(&g).await;
    let mut peak = before;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        peak = peak.max(rss(g.pid()));
        if hook.received_count() >= 2 && stats(&g, None).await.failed == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak = peak.max(rss(g.pid()));
    assert!(peak < 100 << 20, "the gateway grew from {} MiB to {} MiB", before >> 20, peak >> 20);
    assert_eq!(hook.received_count(), 2, "retry: 1 is two attempts in all");
    assert_eq!(stats(&g, None).await.failed, 1, "then the row is dead");
    let log = g.log_text();
    assert!(log.contains("HTTP 500"), "{log}");
}

/// `retry: 0` is one attempt and a dead row; `retry: 2` is exactly three attempts (1 s and 2 s apart, jittered),
/// each with the same delivery id and body and a signature valid for its own timestamp.
#[tokio::test]
async fn a_webhook_gets_exactly_one_plus_retry_attempts() {
    let up = Upstream::start().await.unwrap();
    for retry in [0u32, 2] {
        let hook = WebhookReceiver::start().await;
        hook.set_default_status(503);
        let g = Gateway::start(&with_webhook(config_for(&up.base_url, ""), &hook.url(), 2, retry)).await;
        post_test_event(&g).await;
        assert!(wait_until_dead(&g, 30).await, "retry {retry}: the row is never dead\n{}", g.log_text());
        let got = hook.received();
        assert_eq!(got.len(), retry as usize + 1, "retry {retry}");
        let id = got[0].header("x-svc-delivery").unwrap();
        for r in &got {
            assert_eq!(r.header("x-svc-delivery"), Some(id));
            assert_eq!(r.header("webhook-id"), Some(id));
            assert_eq!(r.body, got[0].body);
            assert_eq!(r.header("x-svc-signature"), Some(signature(b"s3cret", &r.body).as_str()));
            let ts = r.header("webhook-timestamp").unwrap();
            let now = chrono::Utc::now().timestamp();
            assert!((now - ts.parse::<i64>().unwrap()).abs() < 60, "{ts}");
            assert_eq!(r.header("webhook-signature"), Some(standard_signature(b"s3cret", id, ts, &r.body).as_str()));
        }
    }
}

/// A Slack-style URL carries its token in the path and the query: logs and the outbox's destination names show
/// `http://host:port/hook/…?…`. An event queued by an older version under the full-URL name is renamed at start
/// and delivered, with its delivery id.
#[tokio::test]
async fn webhook_urls_never_leak_and_queued_events_survive_the_rename() {
    let up = Upstream::start().await.unwrap();
    let hook = WebhookReceiver::start().await;
    hook.respond_with(&[500]);
    let url = format!("{}/T0001/B0002/xoxb-secret-token?auth=hunter2", hook.url());
    let yaml = with_webhook(config_for(&up.base_url, ""), &url, 2, 3);
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    {
        let store = Store::connect(&format!("sqlite://{}", dir.path().join("svc.db").display())).await.unwrap();
        let envelope = json!({"event": "test", "version": "1", "timestamp": "2026-01-01T00:00:00.000Z",
            "fleet": "f", "node": "n", "agent": "a", "data": {"queued": true}})
        .to_string();
        let deliveries = vec![(format!("webhook:{url}"), "legacy-delivery-1".to_string())];
        store
            .outbox_enqueue(&NewEvent { kind: "test", envelope: &envelope, deliveries, ..Default::default() })
            .await
            .unwrap();
        store.close().await;
    }
    let g = Gateway::start_in(dir, &yaml).await;
    let got = hook.wait_for(2, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("x-svc-delivery"), Some("legacy-delivery-1"));
    assert_eq!(got[0].json()["data"]["queued"], true);
    assert_eq!((got[0].status, got[1].status), (500, 200));
    assert_eq!(got[1].path, "/hook/T0001/B0002/xoxb-secret-token?auth=hunter2", "the real URL is used on the wire");
    let shown = format!("webhook:{}/hook/…?…", hook.base_url());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stats(&g, Some(&shown)).await.delivered < 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stats(&g, Some(&shown)).await.delivered, 1);
    assert_eq!(
        stats(&g, Some(&format!("webhook:{url}"))).await,
        OutboxStats::default(),
        "nothing left under the old name"
    );
    let log = g.log_text();
    assert!(log.contains("HTTP 500"), "the failed attempt is logged\n{log}");
    assert!(!log.contains("xoxb-secret-token") && !log.contains("hunter2") && !log.contains("T0001"), "{log}");
}
