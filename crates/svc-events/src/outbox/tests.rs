//! Outbox worker tests with [`MemoryOutbox`] and the testkit servers: outage and restart lose nothing and keep
//! order, a dead webhook does not hold back push, permanent failures are dead-lettered, delivery ids are
//! stable across rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::deliver::Deliverer;
use crate::envelope::Meta;
use crate::retry::RetryPolicy;
use crate::sinks::ntfy::NtfySink;
use crate::sinks::webhook::WebhookSink;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use svc_config::{NtfyConfig, Priority, Secret, WebhookConfig};
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::WebhookReceiver;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

fn fast() -> WorkerOptions {
    WorkerOptions {
        batch: 16,
        poll_interval: Duration::from_millis(50),
        min_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        max_attempts: 1000,
    }
}

fn source() -> Source {
    Source { fleet: "f".into(), node: "n1".into(), agent: "gateway".into(), meta: Meta::default() }
}

fn push(url: &str) -> NtfySink {
    let cfg = NtfyConfig {
        enabled: true,
        server: url.into(),
        topic: "svc-fleet-t".into(),
        priority: Priority::Default,
        token: None,
    };
    NtfySink::new(crate::http::client(), cfg).with_timeout(Duration::from_secs(2))
}

fn webhook(url: &str, events: &[&str], retry: u32) -> WebhookSink {
    let cfg = WebhookConfig {
        url: url.into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        secret: Secret::new("k"),
        timeout: Duration::from_secs(2),
        retry,
    };
    let policy = RetryPolicy {
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        ..RetryPolicy::WEBHOOK
    };
    WebhookSink::new(crate::http::client(), cfg).with_policy(policy)
}

async fn emit_n(worker: &OutboxWorker<MemoryOutbox>, n: usize, from: usize) {
    let emitter = worker.emitter();
    for i in from..from + n {
        emitter
            .emit(&source(), EventKind::Test, json!({"message": format!("event {i}")}), &PushOverrides::default())
            .await
            .unwrap();
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel();
    tokio::time::timeout(WAIT, handle).await.unwrap().unwrap();
    assert_eq!(store.pending_count("push"), 100);
    assert!(store.rows("push")[0].2 >= 1, "the head was attempted");

    // Second "process" over the same store; the server comes back.
    let (token, handle) = start(&store, &deliverer);
    tokio::time::sleep(Duration::from_millis(200)).await;
    ntfy.up().await;
    let msgs = ntfy.wait_for_messages(100, WAIT).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
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
        vec![webhook(&dead.url(), &["*"], 1), webhook(&live.url(), &["*"], 1)],
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
    // Event 0: 500 on three rounds (retry 0), then 200. Event 1: 400, dead. Event 2: 200.
    rx.respond_with(&[500, 500, 500, 200, 400, 200]);
    let store = Arc::new(MemoryOutbox::new());
    let deliverer = Arc::new(Deliverer::new(None, vec![webhook(&rx.url(), &["test"], 0)], None));
    let worker = OutboxWorker::new(store.clone(), deliverer.clone(), fast());
    emit_n(&worker, 3, 0).await;
    let (token, handle) = start(&store, &deliverer);
    let got = rx.wait_for(6, WAIT).await;
    let ids: Vec<&str> = got.iter().map(|r| r.header("x-svc-delivery").unwrap()).collect();
    assert!(ids[..4].iter().all(|i| *i == ids[0]), "{ids:?}");
    assert_ne!(ids[4], ids[0]);
    assert_ne!(ids[5], ids[4]);
    let name = deliverer.name(crate::Destination::Webhook(0));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rows = store.rows(&name);
    assert_eq!(rows[0].1, memory::RowState::Delivered);
    assert_eq!(rows[0].2, 3, "three failed rounds recorded");
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
    let (env, id) = emit(&store, &deliverer, &source(), EventKind::TaskDone, data, &overrides).await.unwrap();
    assert_eq!(env.event, "task.done");
    assert_eq!(store.rows("push").len(), 1);
    assert_eq!(store.rows("webhook:http://127.0.0.1:9/a").len(), 1);
    assert!(store.rows("webhook:http://127.0.0.1:9/b").is_empty());
    let item = &store.pending("push", 10).await.unwrap()[0];
    assert_eq!((item.id, item.title.as_deref(), item.priority.as_deref()), (id, Some("T"), Some("high")));
    assert_eq!(serde_json::from_str::<Envelope>(&item.envelope_json).unwrap(), env);
    let err = emit(&store, &deliverer, &source(), EventKind::TaskDone, json!({}), &overrides).await.unwrap_err();
    assert!(matches!(err, EmitError::Envelope(_)));
}

#[test]
fn backoff_grows_is_capped_and_jittered() {
    let o = WorkerOptions {
        min_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(60),
        ..WorkerOptions::default()
    };
    for (attempts, full) in [(0u32, 1u64), (1, 2), (3, 8), (10, 60), (40, 60)] {
        for _ in 0..20 {
            let d = worker::backoff(&o, attempts);
            assert!(d >= Duration::from_millis(full * 500) && d <= Duration::from_secs(full), "{attempts}: {d:?}");
        }
    }
}
