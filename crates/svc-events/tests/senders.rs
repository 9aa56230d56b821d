//! The push and webhook senders against the testkit servers: how every answer is classified, that the ntfy
//! test server accepts what the sender sends (RFC 2047 headers, the 4095-byte body), the subscription used by
//! `svc events tail`, and that a misbehaving server (an endless or silent answer) costs bounded memory and
//! time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::ops::ControlFlow;
use std::time::Duration;
use svc_config::{NtfyConfig, Priority, Secret, WebhookConfig};
use svc_events::retry::Transient;
use svc_events::senders::ntfy::{subscribe, subscribe_with, NtfySender, PushError, PushOverrides};
use svc_events::senders::webhook::{WebhookDelivery, WebhookError, WebhookSender};
use svc_events::{Envelope, EventKind, Meta, Source};
use svc_testkit::ntfy::{Access, NtfyServer};
use svc_testkit::webhook::{signature, standard_signature, EndlessBody, WebhookReceiver};

fn cfg(server: &str, token: Option<&str>) -> NtfyConfig {
    NtfyConfig {
        enabled: true,
        server: server.into(),
        topic: "svc-fleet-x".into(),
        priority: Priority::Default,
        token: token.map(Secret::new),
    }
}

fn envelope(kind: EventKind, data: serde_json::Value) -> Envelope {
    let s = Source { fleet: "f".into(), node: "nödé".into(), agent: "a".into(), meta: Meta::default() };
    Envelope::new(kind, data, &s).unwrap()
}

async fn publish(sender: &NtfySender, env: &Envelope) -> Result<(), PushError> {
    let msg = sender.message(env, &PushOverrides::default()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), sender.publish(&msg)).await.unwrap()
}

type Check = fn(&PushError) -> bool;

#[tokio::test]
async fn push_answers_are_classified_like_ntfy_means_them() {
    let ntfy = NtfyServer::start().await;
    let sender = NtfySender::new(svc_events::http::client(), cfg(&ntfy.url(), None));
    let env = envelope(EventKind::Test, serde_json::json!({}));
    let cases: [(u16, Check, bool); 7] = [
        (401, |e| matches!(e, PushError::AuthFailed { status: 401, .. }), false),
        (403, |e| matches!(e, PushError::AuthFailed { status: 403, .. }), false),
        (429, |e| matches!(e, PushError::RateLimited { .. }), true),
        (500, |e| matches!(e, PushError::ServerError { status: 500, .. }), true),
        (400, |e| matches!(e, PushError::Rejected { status: 400, .. }), false),
        (404, |e| matches!(e, PushError::Rejected { status: 404, .. }), false),
        (413, |e| matches!(e, PushError::Rejected { status: 413, .. }), false),
    ];
    for (status, check, transient) in cases {
        ntfy.fail_next(1, status);
        let err = publish(&sender, &env).await.unwrap_err();
        assert!(check(&err), "{status}: {err:?}");
        assert_eq!(err.is_transient(), transient, "{status}");
    }
    publish(&sender, &env).await.unwrap();
    ntfy.down();
    // The pooled connection dies with the server (reset), a new one is refused: both are "unreachable".
    for _ in 0..2 {
        let err = publish(&sender, &env).await.unwrap_err();
        assert!(matches!(err, PushError::Unreachable { .. }), "{err:?}");
        assert!(err.is_transient());
    }
    let err = publish(&sender, &env).await.unwrap_err();
    assert_eq!(err.to_string(), format!("push server {} unreachable: connection refused", ntfy.url()));
}

#[tokio::test]
async fn the_ntfy_server_accepts_what_the_sink_sends() {
    let ntfy = NtfyServer::start().await;
    let sender = NtfySender::new(svc_events::http::client(), cfg(&ntfy.url(), None));
    let data = serde_json::json!({"task_id": 1, "task_title": "€".repeat(2000), "epic_id": 1, "duration_seconds": 1});
    publish(&sender, &envelope(EventKind::TaskDone, data)).await.unwrap();
    let m = &ntfy.messages()[0];
    // 4095 is a multiple of 3, so 1365 three-byte characters fit exactly.
    assert_eq!(m.message.len(), 4095);
    assert_eq!(m.tags, vec!["nödé", "a"]);
    // A body of 4096 bytes sent as is would be refused, like a real ntfy does.
    let client = reqwest::Client::new();
    let url = format!("{}/svc-fleet-x", ntfy.url());
    let raw = client.post(&url).body("x".repeat(4096)).send().await.unwrap();
    assert_eq!(raw.status(), 400);
    assert_eq!(
        raw.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({"code": 40014, "http": 400, "error": "invalid request: attachments not allowed"})
    );
    let bad = client.post(&url).header("X-Priority", "loud").body("x").send().await.unwrap();
    assert_eq!(bad.json::<serde_json::Value>().await.unwrap()["code"], 40007);
    let reserved = client.post(format!("{}/v1", ntfy.url())).body("x").send().await.unwrap();
    assert_eq!(reserved.json::<serde_json::Value>().await.unwrap()["code"], 40010);
    let health = client.get(format!("{}/v1/health", ntfy.url())).send().await.unwrap();
    assert_eq!(health.json::<serde_json::Value>().await.unwrap(), serde_json::json!({"healthy": true}));
}

#[tokio::test]
async fn subscribe_reads_the_topic_with_the_token() {
    let access = Access { write_tokens: vec!["tk_w".into()], read_tokens: vec!["tk_r".into()] };
    let ntfy = NtfyServer::with_auth(access).await;
    let sender = NtfySender::new(svc_events::http::client(), cfg(&ntfy.url(), Some("tk_w")));
    for i in 0..3 {
        publish(&sender, &envelope(EventKind::Test, serde_json::json!({"message": format!("m{i}")}))).await.unwrap();
    }
    let client = svc_events::http::client();
    let reader = cfg(&ntfy.url(), Some("tk_r"));
    let mut lines = Vec::new();
    let read = subscribe(&client, &reader, Some("all"), true, |l| {
        lines.push(l.to_string());
        ControlFlow::Continue(())
    });
    tokio::time::timeout(Duration::from_secs(10), read).await.unwrap().unwrap();
    let messages: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["message"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(messages, vec!["test: m0", "test: m1", "test: m2"]);
    // Live stream: the `open` event first; stop after it.
    let mut first = None;
    let live = subscribe(&client, &reader, None, false, |l| {
        first = Some(l.to_string());
        ControlFlow::Break(())
    });
    tokio::time::timeout(Duration::from_secs(10), live).await.unwrap().unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&first.unwrap()).unwrap()["event"], "open");
    // A wrong token is refused.
    let nope = cfg(&ntfy.url(), Some("tk_nope"));
    let err = subscribe(&client, &nope, None, true, |_| ControlFlow::Continue(())).await.unwrap_err();
    assert!(matches!(err, PushError::AuthFailed { status: 401, .. }), "{err:?}");
}

fn webhook_sink(url: &str, secret: &str, timeout: Duration) -> WebhookSender {
    let wcfg = WebhookConfig {
        url: url.to_string(),
        events: vec!["*".into()],
        secret: Secret::new(secret),
        timeout,
        retry: 0,
    };
    WebhookSender::new(svc_events::http::client(), wcfg)
}

const DELIVERY: WebhookDelivery<'static> = WebhookDelivery { kind: "test", delivery_id: "d-1", origin: Some("master") };

#[tokio::test]
async fn webhook_answers_are_classified() {
    let rx = WebhookReceiver::start().await;
    let sender = webhook_sink(&rx.url(), "k", Duration::from_secs(5));
    let body = bytes::Bytes::from_static(b"{}");
    let cases: [(u16, bool); 8] =
        [(408, true), (429, true), (500, true), (503, true), (410, false), (400, false), (401, false), (301, false)];
    for (status, transient) in cases {
        rx.respond_with(&[status]);
        let err = sender.attempt(body.clone(), &DELIVERY).await.unwrap_err();
        assert_eq!(err.is_transient(), transient, "{status}: {err}");
        if status == 410 {
            assert!(matches!(err, WebhookError::Gone { .. }));
        }
    }
    rx.respond_once_with_headers(429, &[("Retry-After", "7")]);
    let err = sender.attempt(body.clone(), &DELIVERY).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    sender.attempt(body.clone(), &DELIVERY).await.unwrap();
}

/// Every attempt carries both signatures; the Standard Webhooks key of a `whsec_` secret is its base64-decoded
/// rest, of any other secret its raw bytes. Checked against the testkit's independent HMAC.
#[tokio::test]
async fn webhook_attempts_carry_both_signatures_and_the_origin() {
    use base64::Engine as _;
    let rx = WebhookReceiver::start().await;
    let body = bytes::Bytes::from_static(br#"{"event":"test"}"#);
    let key = b"0123456789abcdef0123456789abcdef";
    let whsec = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key));
    for (secret, standard_key) in [(whsec.as_str(), &key[..]), ("plain-secret", &b"plain-secret"[..])] {
        webhook_sink(&rx.url(), secret, Duration::from_secs(5)).attempt(body.clone(), &DELIVERY).await.unwrap();
        let r = rx.received().pop().unwrap();
        assert_eq!(r.header("x-svc-signature"), Some(signature(secret.as_bytes(), &r.body).as_str()));
        assert_eq!((r.header("webhook-id"), r.header("x-svc-delivery")), (Some("d-1"), Some("d-1")));
        assert_eq!(r.header("x-svc-origin"), Some("master"));
        let ts = r.header("webhook-timestamp").unwrap();
        assert!((chrono::Utc::now().timestamp() - ts.parse::<i64>().unwrap()).abs() < 60);
        let expected = standard_signature(standard_key, "d-1", ts, &r.body);
        assert_eq!(r.header("webhook-signature"), Some(expected.as_str()), "{secret}");
    }
}

/// A receiver answering 500 with a body that never ends: the attempt reads at most 64 KiB of it and returns
/// long before its timeout (the body arrives at 1 MiB/s here, so reading it to the timeout would take 20 s).
#[tokio::test]
async fn an_endless_error_body_is_cut_at_64_kib() {
    let rx = WebhookReceiver::start().await;
    rx.set_default_status(500);
    rx.set_endless_body(Some(EndlessBody { chunk: 1024, every: Duration::from_millis(1) }));
    let sender = webhook_sink(&rx.url(), "k", Duration::from_secs(20));
    let started = std::time::Instant::now();
    let err = sender.attempt(bytes::Bytes::from_static(b"{}"), &DELIVERY).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(matches!(err, WebhookError::Unavailable { status: 500, .. }), "{err}");
    assert!(err.to_string().len() < 400, "the reason is one short line: {err}");
    // The push sender reads error answers the same way.
    let push =
        NtfySender::new(svc_events::http::client(), cfg(&rx.base_url(), None)).with_timeout(Duration::from_secs(20));
    let started = std::time::Instant::now();
    let err = publish(&push, &envelope(EventKind::Test, serde_json::json!({}))).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(matches!(err, PushError::ServerError { status: 500, .. }), "{err}");
}

/// A push server that sends one endless line, or nothing at all: the subscription ends with an error instead
/// of keeping everything or waiting forever.
#[tokio::test]
async fn a_subscription_bounds_its_lines_and_its_silences() {
    let rx = WebhookReceiver::start().await;
    rx.set_endless_body(Some(EndlessBody { chunk: 1024, every: Duration::from_millis(1) }));
    let client = svc_events::http::client();
    let reader = cfg(&rx.base_url(), None);
    let read = subscribe(&client, &reader, None, false, |_| ControlFlow::Continue(()));
    let err = tokio::time::timeout(Duration::from_secs(10), read).await.unwrap().unwrap_err();
    assert!(matches!(err, PushError::Protocol { .. }), "{err}");
    assert!(err.to_string().contains("longer than 256 KiB"), "{err}");
    // One chunk every 10 s is silence past an idle timeout of 300 ms.
    rx.set_endless_body(Some(EndlessBody { chunk: 10, every: Duration::from_secs(10) }));
    let read = subscribe_with(&client, &reader, None, false, Duration::from_millis(300), |_| ControlFlow::Continue(()));
    let err = tokio::time::timeout(Duration::from_secs(5), read).await.unwrap().unwrap_err();
    assert!(matches!(err, PushError::Unreachable { .. }) && err.to_string().contains("silent"), "{err}");
}
