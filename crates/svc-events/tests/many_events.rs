//! Many events through the outbox worker with the in-memory store: 2,000 events delivered to a local ntfy test
//! server and a local webhook receiver with signing on all arrive, in emission order. (Throughput is measured
//! by `cargo run --release -p svc-gateway --example outbox_throughput`, over the real store, not here.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;
use svc_config::{NtfyConfig, Priority, Secret, WebhookConfig};
use svc_events::senders::ntfy::{NtfySender, PushOverrides};
use svc_events::senders::webhook::WebhookSender;
use svc_events::{Deliverer, EventKind, MemoryOutbox, Meta, Origin, OutboxWorker, Source, WorkerOptions};
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::WebhookReceiver;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_events_arrive_in_order_at_both_destinations() {
    const N: usize = 2000;
    let ntfy = NtfyServer::start().await;
    let rx = WebhookReceiver::start().await;
    let client = svc_events::http::client();
    let push = NtfySender::new(
        client.clone(),
        NtfyConfig {
            enabled: true,
            server: ntfy.url(),
            topic: "svc-fleet-b".into(),
            priority: Priority::Default,
            token: None,
        },
    );
    let hook = WebhookSender::new(
        client,
        WebhookConfig {
            url: rx.url(),
            events: vec!["*".into()],
            secret: Secret::new("k"),
            timeout: Duration::from_secs(5),
            retry: 3,
        },
    );
    let deliverer = Arc::new(Deliverer::new(Some(push), vec![hook], None));
    let store = Arc::new(MemoryOutbox::new());
    let worker = OutboxWorker::new(store.clone(), deliverer, WorkerOptions { batch: 256, ..WorkerOptions::default() });
    let emitter = worker.emitter();
    let source = Source { fleet: "f".into(), node: "n".into(), agent: "a".into(), meta: Meta::default() };
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    for i in 0..N {
        let data = serde_json::json!({"message": format!("event {i}")});
        emitter.emit(&source, &Origin::Gateway, EventKind::Test, data, &PushOverrides::default()).await.unwrap();
    }
    ntfy.wait_for_messages(N, Duration::from_secs(120)).await;
    rx.wait_for(N, Duration::from_secs(120)).await;
    let got: Vec<String> =
        rx.received().iter().map(|r| r.json()["data"]["message"].as_str().unwrap().to_string()).collect();
    assert_eq!(got, (0..N).map(|i| format!("event {i}")).collect::<Vec<_>>());
    token.cancel();
    tokio::time::timeout(Duration::from_secs(10), handle).await.unwrap().unwrap();
}
