//! Webhook delivery through `svc-notify`: the signature checked by an independent HMAC implementation, the
//! headers, retries with a stable delivery id, permanent failures, redirects, timeouts, and event filters.

use crate::util::*;
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::{signature, WebhookReceiver};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn signed_envelope_with_headers() {
    let rx = WebhookReceiver::start().await;
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook { secret: "It's a Secret to Everybody", ..Hook::new(&url, &["task.done"]) }], "");
    ws.notify(&["--event", "task.done", "--data", &task_done_data("Ship it"), "--agent", "executor"])
        .env("SVC_SWARM", "swarm-1")
        .run()
        .await
        .code(0);
    let r = &rx.wait_for(1, WAIT).await[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-svc-event"), Some("task.done"));
    let sig = r.header("x-svc-signature").unwrap();
    assert_eq!(sig, signature(b"It's a Secret to Everybody", &r.body));
    assert_ne!(sig, signature(b"another secret", &r.body));
    assert_eq!(r.header("x-svc-delivery").unwrap().len(), 36);
    assert_eq!(r.header("x-svc-origin"), Some("svc-notify"));
    assert_eq!(r.header("webhook-id"), r.header("x-svc-delivery"));
    let ts = r.header("webhook-timestamp").unwrap();
    let standard = svc_testkit::webhook::standard_signature(
        b"It's a Secret to Everybody",
        r.header("webhook-id").unwrap(),
        ts,
        &r.body,
    );
    assert_eq!(r.header("webhook-signature"), Some(standard.as_str()));
    let env = r.json();
    assert_eq!(env["event"], "task.done");
    assert_eq!(env["version"], "1");
    assert_eq!(env["fleet"], "alpha");
    assert_eq!(env["node"], "n1");
    assert_eq!(env["agent"], "executor");
    assert_eq!(env["meta"], serde_json::json!({"swarm": "swarm-1"}));
    assert_eq!(env["data"]["task_id"], 42);
    let ts = env["timestamp"].as_str().unwrap();
    assert_eq!(ts.len(), 24, "{ts}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[19] == b'.', "{ts}");
    let keys: Vec<&String> = env.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 8, "{keys:?}");
}

#[tokio::test]
async fn retry_then_success_with_a_stable_delivery_id() {
    let rx = WebhookReceiver::start().await;
    rx.respond_with(&[500, 503]);
    rx.respond_once_with_headers(429, &[("Retry-After", "1")]);
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook { retry: 3, ..Hook::new(&url, &["*"]) }], "");
    ws.notify(&[]).run().await.code(0);
    let got = rx.wait_for(4, WAIT).await;
    assert_eq!(got.iter().map(|r| r.status).collect::<Vec<_>>(), vec![500, 503, 429, 200]);
    let id = got[0].header("x-svc-delivery").unwrap();
    for r in &got {
        assert_eq!(r.header("x-svc-delivery"), Some(id));
        assert_eq!(r.body, got[0].body, "the body is byte-identical on every attempt");
        assert_eq!(r.header("x-svc-signature"), got[0].header("x-svc-signature"));
    }
    // A second event gets a new id.
    ws.notify(&[]).run().await.code(0);
    let got = rx.wait_for(5, WAIT).await;
    assert_ne!(got[4].header("x-svc-delivery"), Some(id));
}

#[tokio::test]
async fn retries_are_bounded_by_retry() {
    let rx = WebhookReceiver::start().await;
    rx.set_default_status(502);
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook { retry: 2, ..Hook::new(&url, &["*"]) }], "");
    ws.notify(&[]).run().await.code(2).one_error_line("HTTP 502");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.received().len(), 3, "first attempt + 2 retries");
}

#[tokio::test]
async fn permanent_4xx_redirects_and_410_are_not_retried() {
    for (status, needle) in [(400, "HTTP 400"), (404, "HTTP 404"), (410, "gone (HTTP 410)"), (302, "HTTP 302")] {
        let rx = WebhookReceiver::start().await;
        if status == 302 {
            let to = format!("{}/elsewhere", rx.base_url());
            rx.respond_once_with_headers(302, &[("Location", &to)]);
        } else {
            rx.respond_with(&[status]);
        }
        let ws = Workspace::new();
        let url = rx.url();
        ws.config(None, None, &[Hook { retry: 3, ..Hook::new(&url, &["*"]) }], "");
        ws.notify(&[]).run().await.code(2).one_error_line(needle);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = rx.received();
        assert_eq!(got.len(), 1, "{status} must not be retried or followed: {got:?}");
    }
}

#[tokio::test]
async fn each_attempt_is_bounded_by_timeout_seconds() {
    let rx = WebhookReceiver::start().await;
    rx.set_delay(Duration::from_secs(5));
    let ws = Workspace::new();
    let url = rx.url();
    ws.config(None, None, &[Hook { retry: 1, timeout: 1, ..Hook::new(&url, &["*"]) }], "");
    let out = ws.notify(&[]).run().await;
    out.code(2).one_error_line("timed out");
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
    assert_eq!(rx.received().len(), 2);
}

#[tokio::test]
async fn event_filters_exact_star_and_prefix() {
    let (a, b, c, d) = (
        WebhookReceiver::start().await,
        WebhookReceiver::start().await,
        WebhookReceiver::start().await,
        WebhookReceiver::start().await,
    );
    let ws = Workspace::new();
    let (ua, ub, uc, ud) = (a.url(), b.url(), c.url(), d.url());
    ws.config(
        None,
        None,
        &[
            Hook::new(&ua, &["task.*"]),
            Hook::new(&ub, &["*"]),
            Hook::new(&uc, &["budget.exceeded"]),
            Hook::new(&ud, &["agent.crashed", "model.*"]),
        ],
        "",
    );
    for kind in ["task.done", "task.blocked", "budget.exceeded", "budget.alert", "model.degraded", "test"] {
        let data = if kind == "task.done" { task_done_data("t") } else { "{}".into() };
        ws.notify(&["--event", kind, "--data", &data]).run().await.code(0);
    }
    let kinds = |rx: &WebhookReceiver| {
        rx.received().iter().map(|r| r.header("x-svc-event").unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(kinds(&a), vec!["task.done", "task.blocked"]);
    assert_eq!(
        kinds(&b),
        vec!["task.done", "task.blocked", "budget.exceeded", "budget.alert", "model.degraded", "test"]
    );
    assert_eq!(kinds(&c), vec!["budget.exceeded"]);
    assert_eq!(kinds(&d), vec!["model.degraded"]);
}

#[tokio::test]
async fn push_then_webhooks_and_a_failure_elsewhere_does_not_stop_them() {
    let ntfy = NtfyServer::start().await;
    ntfy.down();
    let rx = WebhookReceiver::start().await;
    let slow = WebhookReceiver::start().await;
    slow.set_delay(Duration::from_millis(1500));
    let ws = Workspace::new();
    let (u1, u2) = (rx.url(), slow.url());
    ws.config(Some(&ntfy.url()), None, &[Hook::new(&u2, &["*"]), Hook::new(&u1, &["*"])], "");
    let out = ws.notify(&[]).run().await;
    // Push unreachable decides the exit code; the webhooks still got the event.
    out.code(2).one_error_line("push server");
    assert_eq!(rx.wait_for(1, WAIT).await.len(), 1);
    assert_eq!(slow.wait_for(1, WAIT).await.len(), 1);
}
