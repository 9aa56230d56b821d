//! Event pipeline throughput through the real outbox (the event benchmark of BENCHMARKS.md): events are
//! emitted into the SQLite store's outbox and delivered by the outbox worker to a local ntfy-compatible server
//! and a local webhook receiver, with HMAC signing on. Prints the emission cost (what a caller waits for: one
//! store transaction) and the delivery rate per destination of the worker draining the stored events.
//!
//! Run: `cargo run --release -p svc-gateway --example outbox_throughput [-- EVENTS [RATE]]` (default 5000 events,
//! emitted as fast as the callers can). With RATE, the events are emitted at that steady rate (events/s) and the
//! run also reports how far delivery lags behind: at a rate the pipeline sustains, the last event arrives a
//! few milliseconds after it was emitted.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_config::{NtfyConfig, Priority, Secret, WebhookConfig};
use svc_events::gateway_outbox::StoreOutbox;
use svc_events::senders::ntfy::{NtfySender, PushOverrides};
use svc_events::senders::webhook::WebhookSender;
use svc_events::{Deliverer, EventKind, Meta, Origin, OutboxWorker, Source, WorkerOptions};
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::webhook::WebhookReceiver;
use tokio_util::sync::CancellationToken;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(5000);
    let rate: Option<f64> = std::env::args().nth(2).map(|a| a.parse()).transpose()?;
    let dir = tempfile::tempdir()?;
    let store = svc_store::Store::connect(&format!("sqlite://{}", dir.path().join("bench.db").display())).await?;
    let ntfy = NtfyServer::start().await;
    let rx = WebhookReceiver::start().await;
    let client = svc_events::http::client();
    let push = NtfySender::new(
        client.clone(),
        NtfyConfig {
            enabled: true,
            server: ntfy.url(),
            topic: "svc-fleet-bench".into(),
            priority: Priority::Default,
            token: None,
        },
    );
    let hook = WebhookSender::new(
        client,
        WebhookConfig {
            url: rx.url(),
            events: vec!["*".into()],
            secret: Secret::new("bench-secret"),
            timeout: Duration::from_secs(5),
            retry: 3,
        },
    );
    let deliverer = Arc::new(Deliverer::new(Some(push), vec![hook], None));
    let worker = OutboxWorker::new(
        Arc::new(StoreOutbox::new(store, &tokio_util::task::TaskTracker::new())),
        deliverer,
        WorkerOptions { batch: 256, ..Default::default() },
    );
    let emitter = worker.emitter();
    let source = Source { fleet: "bench".into(), node: "n1".into(), agent: "bench".into(), meta: Meta::default() };

    // Emission by 32 concurrent callers (as concurrent requests of the gateway would) while the worker delivers:
    // the sustained rate is from the first emission to the last delivery at both destinations.
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    let callers = 32;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (emitter, source) = (emitter.clone(), source.clone());
        tasks.push(tokio::spawn(async move {
            let mut us = Vec::new();
            for i in (c..n).step_by(callers) {
                if let Some(rate) = rate {
                    tokio::time::sleep_until((started + Duration::from_secs_f64(i as f64 / rate)).into()).await;
                }
                let data = serde_json::json!({"task_title": format!("event {i}")});
                let t = Instant::now();
                emitter
                    .emit(&source, &Origin::Gateway, EventKind::TaskCreated, data, &PushOverrides::default())
                    .await?;
                us.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok::<_, anyhow::Error>(us)
        }));
    }
    let mut emit_us: Vec<f64> = Vec::with_capacity(n);
    for t in tasks {
        emit_us.extend(t.await??);
    }
    let emitted = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(300);
    while (ntfy.message_count() < n || rx.received_count() < n) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delivered = started.elapsed();
    let (pushed, hooked) = (ntfy.message_count(), rx.received_count());
    token.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    emit_us.sort_by(f64::total_cmp);
    let pct = |p: f64| emit_us[((emit_us.len() as f64 - 1.0) * p) as usize];
    println!("events: {n}; delivered: push {pushed}, webhook {hooked} (signed)");
    println!(
        "emit ({callers} concurrent callers, group-committed): p50 {:.0} µs, p99 {:.0} µs per call; {:.0} events/s",
        pct(0.5),
        pct(0.99),
        n as f64 / emitted.as_secs_f64()
    );
    println!(
        "sustained: {:.0} events/s per destination (first emission to last delivery, push and webhook concurrently)",
        n as f64 / delivered.as_secs_f64()
    );
    if let Some(rate) = rate {
        println!(
            "paced at {rate:.0} events/s: emission took {:.2} s; the last delivery came {:.0} ms after the last emission",
            emitted.as_secs_f64(),
            (delivered - emitted).as_secs_f64() * 1e3
        );
    }
    anyhow::ensure!(pushed >= n && hooked >= n, "not every event was delivered");
    Ok(())
}
