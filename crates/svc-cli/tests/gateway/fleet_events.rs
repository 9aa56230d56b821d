//! Fleet mode (issue 11), events and nodes: a dead node is reported once, each event reaches each destination
//! once from any node, key changes reach every node at once, and a deployment's health transition is
//! announced once by the fleet.

use super::fleet::*;
use crate::harness::*;
use futures::future::join_all;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::WebhookReceiver;

#[tokio::test]
async fn a_dead_node_is_reported_once_and_a_clean_stop_never() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    let mut f = Fleet::start(&with_receivers(config_for(&up.base_url, ""), &ntfy, &hook), "").await;
    let offline = |kind: &str| kind == "node.offline";
    f.kill(2).await;
    // Offline after 4 s without heartbeats, noticed at the next heartbeat (1 s), delivered within moments.
    if !eventually(25, || hook.received_count() > 0).await {
        panic!("no node.offline; logs:\n{}\n---\n{}", f.node(0).log_text(), f.node(1).log_text());
    }
    let got = hook.wait_for(1, Duration::from_secs(1)).await;
    let events: Vec<Value> =
        got.iter().map(|r| r.json()).filter(|e| offline(e["event"].as_str().unwrap_or(""))).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["node"], "n3");
    assert!(events[0]["data"]["offline_for_seconds"].as_u64().is_some_and(|s| s >= 4), "{}", events[0]);
    assert!(events[0]["data"]["address"].as_str().is_some_and(|a| a.starts_with("http://127.0.0.1:")));
    // SIGTERM of another node: nothing.
    let mut n2 = f.nodes[1].take().unwrap();
    n2.terminate();
    assert_eq!(n2.exit_code(Duration::from_secs(20)).await, Some(0), "{}", n2.log_text());
    // The dead node restarted: no further event, and it shows online.
    f.restart(2).await;
    tokio::time::sleep(Duration::from_secs(7)).await; // longer than offline_after plus a heartbeat: nothing more may come
    let all: Vec<Value> =
        hook.received().iter().map(|r| r.json()).filter(|e| offline(e["event"].as_str().unwrap_or(""))).collect();
    assert_eq!(all.len(), 1, "exactly one node.offline at the webhook: {all:?}");
    let pushed: Vec<_> = ntfy.messages().into_iter().filter(|m| m.title.as_deref() == Some("node.offline")).collect();
    assert_eq!(pushed.len(), 1, "exactly one node.offline at the push server");
    let status = svc().args(["fleet", "status", "--json", "--config"]).arg(&f.node(0).config).output().await.unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let nodes: Value = serde_json::from_slice(&status.stdout).unwrap();
    let state = |name: &str| {
        let list = nodes.get("nodes").unwrap_or(&nodes);
        list.as_array().and_then(|a| a.iter().find(|n| n["node"] == name)).map(|n| n["state"].clone())
    };
    assert_eq!(
        (state("n1"), state("n2"), state("n3")),
        (Some(json!("online")), Some(json!("stopped")), Some(json!("online")))
    );
}

#[tokio::test]
async fn events_reach_each_destination_once_from_any_node() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    ntfy.down();
    hook.set_default_status(503);
    let mut f = Fleet::start(&with_receivers(config_for(&up.base_url, ""), &ntfy, &hook), "").await;
    let key = f.node(0).key(json!({"team_id": "executor", "agent_role": "planner"})).await;
    let c = client();
    let posts = (0..300).map(|i| {
        let (c, url, key) = (c.clone(), f.node(i % 3).path("/events"), key.clone());
        async move {
            let r =
                c.post(url).bearer_auth(key).json(&json!({"event": "test", "data": {"n": i}})).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        }
    });
    for (s, body) in join_all(posts).await {
        assert_eq!(s, 202, "{body}");
    }
    // Kill the node that holds the push server's claim while it is failing to deliver: its rows must be
    // delivered by another node once the claim's lease expires.
    let pool = sqlx::PgPool::connect(&f.db).await.unwrap();
    let mut holder = None;
    for _ in 0..200 {
        holder = sqlx::query_scalar::<_, String>("SELECT node FROM outbox_leases WHERE destination = 'push'")
            .fetch_optional(&pool)
            .await
            .unwrap();
        if holder.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let holder = holder.expect("a node claims the push server");
    let index = ["n1", "n2", "n3"].iter().position(|n| *n == holder).expect("a node of the fleet");
    f.kill(index).await;
    ntfy.up().await;
    hook.set_default_status(200);
    let msgs = ntfy.wait_for_messages(301, Duration::from_secs(40)).await;
    // Deliveries the receiver refused (503) while it was down do not count.
    let accepted = || hook.received().into_iter().filter(|r| r.status == 200).collect::<Vec<_>>();
    assert!(eventually(40, || accepted().len() >= 301).await, "{} deliveries accepted", accepted().len());
    let got = accepted();
    tokio::time::sleep(Duration::from_secs(2)).await; // nothing more may come
                                                      // Killing node 1 also brings one node.offline: only the posted events are counted here.
    let posted = |e: &Value| e["event"] == "test";
    let pushed = |m: &svc_testkit::ntfy::Message| m.title.as_deref() != Some("node.offline");
    let titles: Vec<_> = msgs.iter().filter(|m| pushed(m)).map(|m| (m.title.clone(), m.message.clone())).collect();
    assert_eq!(
        titles.len(),
        300,
        "{:?}",
        titles.iter().filter(|(t, _)| t.as_deref() != Some("test")).collect::<Vec<_>>()
    );
    assert_eq!(got.iter().filter(|r| posted(&r.json())).count(), 300);
    assert_eq!(ntfy.messages().iter().filter(|m| pushed(m)).count(), 300, "each event once at the push server");
    let mut ids: Vec<i64> =
        accepted().iter().map(|r| r.json()).filter(posted).filter_map(|e| e["data"]["n"].as_i64()).collect();
    assert_eq!(ids.len(), 300);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 300, "each event once at the webhook");
}

#[tokio::test]
async fn a_key_revoked_on_one_node_is_refused_by_another_within_a_second() {
    let up = Upstream::start().await.unwrap();
    let f = Fleet::start(&config_for(&up.base_url, ""), "").await;
    let key = f.node(0).key(json!({"team_id": "executor", "key_alias": "short-lived"})).await;
    // Created on A, used on B at once.
    assert_eq!(post_chat(f.node(1), &key, &chat("openai/gpt-4.1-mini")).await.0, 200);
    let r = client()
        .post(f.node(0).path("/key/delete"))
        .bearer_auth(MASTER)
        .json(&json!({"key_aliases": ["short-lived"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let revoked = std::time::Instant::now();
    loop {
        let (s, _, _) = post_chat(f.node(1), &key, &chat("openai/gpt-4.1-mini")).await;
        if s == 401 {
            break;
        }
        assert!(revoked.elapsed() < Duration::from_secs(1), "node B still accepts the revoked key");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(revoked.elapsed() < Duration::from_secs(1));
}

/// The health of alias `flaky` as `g` judges it.
async fn flaky_state(g: &Gateway) -> String {
    let v = admin_get(g, "/health/models").await;
    v["data"][0]["state"].as_str().unwrap_or("").to_string()
}

/// Waits until every node judges `flaky` `state`.
async fn all_judge(f: &Fleet, state: &str) {
    for _ in 0..200 {
        let mut all = true;
        for g in f.live() {
            all &= flaky_state(g).await == state;
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the nodes never all judged `flaky` {state}");
}

#[tokio::test]
async fn a_deployment_every_node_judges_unavailable_is_announced_once_per_fleet_transition() {
    let up = Upstream::start().await.unwrap();
    let hook = WebhookReceiver::start().await;
    // The probe runs every second on every node.
    let base = super::health::flaky_config(&up.base_url, &hook, 1);
    let f = Fleet::start(&base, "").await;
    all_judge(&f, "healthy").await;
    let announced = || accepted_events(&hook);
    // Every node's probe fails: three judgements, one fleet transition, one event.
    up.set(|b| b.models_status = 503);
    all_judge(&f, "unavailable").await;
    assert!(eventually(10, || !announced().is_empty()).await);
    tokio::time::sleep(Duration::from_secs(2)).await; // two more probe rounds: a duplicate would show now
    assert_eq!(announced(), ["model.unavailable"]);
    // Recovered everywhere (silently), then down again: a new fleet transition, announced once more.
    up.set(|b| b.models_status = 200);
    all_judge(&f, "healthy").await;
    up.set(|b| b.models_status = 503);
    all_judge(&f, "unavailable").await;
    assert!(eventually(10, || announced().len() >= 2).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(announced(), ["model.unavailable", "model.unavailable"]);
}
