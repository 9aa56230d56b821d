//! Outbox worker tests with [`MemoryOutbox`] and the testkit servers: outage and restart lose nothing and keep
//! order, a dead webhook does not hold back push, permanent failures are dead-lettered, delivery ids are
//! stable across attempts, a webhook gets exactly `1 + retry` attempts (waits checked under paused time),
//! destination names never show a URL's token.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_methods)]

use super::*;
use crate::deliver::Deliverer;
use crate::envelope::Meta;
use crate::origin::Origin;
use crate::retry::RetryPolicy;
use crate::senders::ntfy::NtfySender;
use crate::senders::webhook::WebhookSender;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use svc_config::{NtfyConfig, Priority, Secret, WebhookConfig};
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::WebhookReceiver;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// Short waits: 20 ms doubling to 200 ms for push and hooks, 10 ms doubling to 50 ms for webhooks.
fn fast() -> WorkerOptions {
    let quick = |min, max| RetryPolicy {
        min_delay: Duration::from_millis(min),
        max_delay: Duration::from_millis(max),
        ..RetryPolicy::OUTBOX
    };
    WorkerOptions {
        batch: 16,
        poll_interval: Duration::from_millis(50),
        policy: quick(20, 200),
        max_attempts: 1000,
        webhook_policy: quick(10, 50),
        ..WorkerOptions::default()
    }
}

fn source() -> Source {
    Source { fleet: "f".into(), node: "n1".into(), agent: "gateway".into(), meta: Meta::default() }
}

fn push(url: &str) -> NtfySender {
    let cfg = NtfyConfig {
        enabled: true,
        server: url.into(),
        topic: "svc-fleet-t".into(),
        priority: Priority::Default,
        token: None,
    };
    NtfySender::new(crate::http::client(), cfg).with_timeout(Duration::from_secs(2))
}

fn webhook(url: &str, events: &[&str], retry: u32) -> WebhookSender {
    let cfg = WebhookConfig {
        url: url.into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        secret: Secret::new("k"),
        timeout: Duration::from_secs(2),
        retry,
    };
    WebhookSender::new(crate::http::client(), cfg)
}

async fn emit_n(worker: &OutboxWorker<MemoryOutbox>, n: usize, from: usize) {
    let emitter = worker.emitter();
    for i in from..from + n {
        emitter
            .emit(
                &source(),
                &Origin::Gateway,
                EventKind::Test,
                json!({"message": format!("event {i}")}),
                &PushOverrides::default(),
            )
            .await
            .unwrap();
    }
}

/// Waits until `done` holds, polling to the [`WAIT`] deadline (then fails, naming `what`).
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn start(store: &Arc<MemoryOutbox>, deliverer: &Arc<Deliverer>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    (token, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_and_restart_lose_nothing_and_keep_order() {
    let ntfy = NtfyServer::start().await;
    ntfy.down();
    let store = Arc::new(MemoryOutbox::new());
    let deliverer = Arc::new(Deliverer::new(Some(push(&ntfy.url())), vec![], None));

    // First "process": emits 100 events while the push server is down, then stops.
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
    emit_n(&worker, 100, 0).await;
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    until("the head is attempted", || store.rows("push").first().is_some_and(|r| r.2 >= 1)).await;
    token.cancel();
    tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
    assert_eq!(store.pending_count("push"), 100);

    // Second "process" over the same store; the server comes back.
    let (token, handle) = start(&store, &deliverer);
    tokio::time::sleep(Duration::from_millis(200)).await;
    ntfy.up().await;
    let msgs = ntfy.wait_for_messages(100, WAIT).await;
    // Every row delivered and marked so: nothing more can be sent.
    until("every row is delivered", || store.pending_count("push") == 0).await;
    let msgs_after = ntfy.messages();
    assert_eq!(msgs_after.len(), 100, "none twice");
    let texts: Vec<String> = msgs.iter().map(|m| m.message.clone()).collect();
    let want: Vec<String> = (0..100).map(|i| format!("test: event {i}")).collect();
    assert_eq!(texts, want);
    assert_eq!(store.pending_count("push"), 0);
    token.cancel();
    tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_webhook_does_not_hold_back_push_or_other_webhooks() {
    let ntfy = NtfyServer::start().await;
    let dead = WebhookReceiver::start().await;
    dead.down();
    let live = WebhookReceiver::start().await;
    let store = Arc::new(MemoryOutbox::new());
    let deliverer = Arc::new(Deliverer::new(
        Some(push(&ntfy.url())),
        // A webhook with many retries, so its rows wait out the outage instead of dying.
        vec![webhook(&dead.url(), &["*"], 1000), webhook(&live.url(), &["*"], 1)],
        None,
    ));
    let (token, handle) = start(&store, &deliverer);
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
    emit_n(&worker, 20, 0).await;
    assert_eq!(ntfy.wait_for_messages(20, WAIT).await.len(), 20);
    assert_eq!(live.wait_for(20, WAIT).await.len(), 20);
    let dead_name = deliverer.name(crate::Destination::Webhook(0));
    assert_eq!(store.pending_count(&dead_name), 20);
    // The dead endpoint comes back: its queue drains in order, with the same delivery id per event.
    dead.up().await;
    let got = dead.wait_for(20, WAIT).await;
    let seq: Vec<String> = got.iter().map(|r| r.json()["data"]["message"].as_str().unwrap().to_string()).collect();
    assert_eq!(seq, (0..20).map(|i| format!("event {i}")).collect::<Vec<_>>());
    token.cancel();
    tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_ids_are_stable_across_rounds_and_permanent_failures_are_dead() {
    let rx = WebhookReceiver::start().await;
    // Event 0: 500 on three attempts (retry 3), then 200. Event 1: 400, dead. Event 2: 200.
    rx.respond_with(&[500, 500, 500, 200, 400, 200]);
    let store = Arc::new(MemoryOutbox::new());
    let deliverer = Arc::new(Deliverer::new(None, vec![webhook(&rx.url(), &["test"], 3)], None));
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
    emit_n(&worker, 3, 0).await;
    let (token, handle) = start(&store, &deliverer);
    let got = rx.wait_for(6, WAIT).await;
    let ids: Vec<&str> = got.iter().map(|r| r.header("x-svc-delivery").unwrap()).collect();
    assert!(ids[..4].iter().all(|i| *i == ids[0]), "{ids:?}");
    assert_ne!(ids[4], ids[0]);
    assert_ne!(ids[5], ids[4]);
    let name = deliverer.name(crate::Destination::Webhook(0));
    // The last delivery is recorded after the receiver got it.
    until("every row is settled", || store.pending_count(&name) == 0).await;
    let rows = store.rows(&name);
    assert_eq!(rows[0].1, memory::RowState::Delivered);
    assert_eq!(rows[0].2, 3, "three failed attempts recorded");
    assert!(matches!(&rows[1].1, memory::RowState::Dead(e) if e.contains("HTTP 400")), "{rows:?}");
    assert_eq!(rows[2].1, memory::RowState::Delivered);
    token.cancel();
    tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
}

#[tokio::test]
async fn emit_stores_one_row_per_matching_destination() {
    let store = MemoryOutbox::new();
    let deliverer = Deliverer::new(
        Some(push("http://127.0.0.1:9")),
        vec![webhook("http://127.0.0.1:9/a", &["task.*"], 0), webhook("http://127.0.0.1:9/b", &["budget.exceeded"], 0)],
        None,
    );
    let data = json!({"task_id": 1, "task_title": "t", "epic_id": 2, "duration_seconds": 3});
    let overrides = PushOverrides { title: Some("T".into()), priority: Some(Priority::High) };
    let origin = Origin::Key("k-7".into());
    let (env, id) = emit(&store, &deliverer, &source(), &origin, EventKind::TaskDone, data, &overrides).await.unwrap();
    assert_eq!(env.event, "task.done");
    assert_eq!(store.rows("push").len(), 1);
    assert_eq!(store.rows("webhook:http://127.0.0.1:9/a").len(), 1);
    assert!(store.rows("webhook:http://127.0.0.1:9/b").is_empty());
    let item = &store.pending("push", 10).await.unwrap()[0];
    assert_eq!((item.id, item.title.as_deref(), item.priority.as_deref()), (id, Some("T"), Some("high")));
    assert_eq!(item.origin.as_deref(), Some("key:k-7"));
    assert_eq!(serde_json::from_str::<Envelope>(&item.envelope_json).unwrap(), env);
    let err =
        emit(&store, &deliverer, &source(), &origin, EventKind::TaskDone, json!({}), &overrides).await.unwrap_err();
    assert!(matches!(err, EmitError::Envelope(_)));
}

/// Waits (20 s at most) until the only row of `destination` is dead.
async fn wait_dead(store: &MemoryOutbox, destination: &str) -> Vec<(i64, memory::RowState, u32)> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = store.rows(destination);
        if matches!(rows.first(), Some((_, memory::RowState::Dead(_), _))) {
            return rows;
        }
        assert!(tokio::time::Instant::now() < deadline, "never dead: {rows:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The sender makes one attempt and the worker owns the retries: `retry: 0` is one request and a dead row,
/// `retry: 2` is exactly three requests. The stored error names the URL redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_row_gets_exactly_one_plus_retry_attempts() {
    for retry in [0u32, 2] {
        let rx = WebhookReceiver::start().await;
        rx.set_default_status(503);
        let url = format!("{}/T0/secret-token?key=hunter2", rx.url());
        let store = Arc::new(MemoryOutbox::new());
        let deliverer = Arc::new(Deliverer::new(None, vec![webhook(&url, &["*"], retry)], None));
        let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
        emit_n(&worker, 1, 0).await;
        let (token, handle) = start(&store, &deliverer);
        let name = deliverer.name(crate::Destination::Webhook(0));
        assert_eq!(name, format!("webhook:{}/…?…", rx.url()));
        let rows = wait_dead(&store, &name).await;
        assert_eq!(rows[0].2, retry + 1, "retry {retry}: attempts recorded");
        assert_eq!(rx.received_count(), retry as usize + 1, "retry {retry}: requests received");
        let error = store.last_error(rows[0].0, &name).unwrap();
        assert!(error.contains("HTTP 503") && error.contains(&format!("{}/…?…", rx.url())), "{error}");
        assert!(!error.contains("secret-token") && !error.contains("hunter2"), "{error}");
        token.cancel();
        tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
    }
}

/// A URL on a port nobody listens on: an attempt fails at once (connection refused), so under paused time the
/// clock moves only with the worker's waits.
fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/hook")
}

/// The waits between a webhook row's attempts are `RetryPolicy::WEBHOOK`'s (jitter off here): 1 s, 2 s, 4 s,
/// then the row is dead after `1 + retry` attempts. A push row keeps trying past that.
#[tokio::test(start_paused = true)]
async fn attempt_waits_follow_the_policy_under_paused_time() {
    let store = Arc::new(MemoryOutbox::new());
    let deliverer =
        Arc::new(Deliverer::new(Some(push(&refused_url())), vec![webhook(&refused_url(), &["*"], 3)], None));
    let steady = |p: RetryPolicy| RetryPolicy { jitter: false, ..p };
    let options = WorkerOptions {
        policy: steady(RetryPolicy::OUTBOX),
        webhook_policy: steady(RetryPolicy::WEBHOOK),
        ..WorkerOptions::default()
    };
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), options);
    emit_n(&worker, 1, 0).await;
    let started = tokio::time::Instant::now();
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    let name = deliverer.name(crate::Destination::Webhook(0));
    let mut failed_at: Vec<u64> = Vec::new();
    while started.elapsed() < Duration::from_secs(60) {
        let attempts = store.rows(&name)[0].2 as usize;
        while failed_at.len() < attempts {
            failed_at.push(started.elapsed().as_millis() as u64);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let expected = [0u64, 1000, 3000, 7000];
    assert_eq!(failed_at.len(), expected.len(), "{failed_at:?}");
    for (got, want) in failed_at.iter().zip(expected) {
        assert!(got.abs_diff(want) <= 100, "attempts failed at {failed_at:?} ms, expected about {expected:?}");
    }
    assert!(matches!(store.rows(&name)[0].1, memory::RowState::Dead(_)));
    // Push: 1 s, 2 s, 4 s, 8 s, 16 s, 32 s within the minute, and still pending.
    let push_rows = store.rows("push");
    assert_eq!((push_rows[0].1.clone(), push_rows[0].2), (memory::RowState::Pending, 6), "{push_rows:?}");
    token.cancel();
    handle.await.unwrap();
}

/// Destination names show webhook URLs redacted, stay unique (`#2`, `#3`) and map the names older versions
/// stored (the full URL) to the new ones.
#[test]
fn destination_names_are_redacted_unique_and_map_the_legacy_ones() {
    let slack1 = "https://hooks.slack.com/services/T1/B1/xoxb-1";
    let slack2 = "https://hooks.slack.com/services/T2/B2/xoxb-2";
    let plain = "https://example.com/hook";
    let d = Deliverer::new(
        None,
        vec![
            webhook(slack1, &["*"], 0),
            webhook(slack2, &["*"], 0),
            webhook(plain, &["*"], 0),
            webhook(slack1, &["*"], 0),
        ],
        None,
    );
    let names: Vec<String> = (0..4).map(|i| d.name(crate::Destination::Webhook(i))).collect();
    assert_eq!(
        names,
        [
            "webhook:https://hooks.slack.com/services/…",
            "webhook:https://hooks.slack.com/services/…#2",
            "webhook:https://example.com/hook",
            "webhook:https://hooks.slack.com/services/…#3",
        ]
    );
    assert_eq!(
        d.legacy_names(),
        [
            (format!("webhook:{slack1}"), names[0].clone()),
            (format!("webhook:{slack2}"), names[1].clone()),
            (format!("webhook:{slack1}#2"), names[3].clone()),
        ]
    );
    assert_eq!(d.find(&names[3]), Some(crate::Destination::Webhook(3)));
}
