//! The gateway's event side: `POST /events`, the durable outbox across a push outage and a restart,
//! and budget events reaching a signed webhook.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::{signature, WebhookReceiver};

fn with_notifications(base: String, ntfy: &NtfyServer, hook: &WebhookReceiver) -> String {
    format!(
        "{base}notifications:\n  ntfy:\n    server: {}\n    topic: svc-fleet-test\n  webhooks:\n    - url: {}\n      events: ['task.*', 'budget.*']\n      secret: s3cret\n      timeout_seconds: 2\n      retry: 2\nfleet:\n  name: ci-fleet\n  node: node-1\n",
        ntfy.url(),
        hook.url()
    )
}

#[tokio::test]
async fn posted_events_are_validated_and_delivered() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    let g = Gateway::start(&with_notifications(config_for(&up.base_url, ""), &ntfy, &hook)).await;
    let key = g.key(json!({"team_id": "executor", "agent_role": "planner"})).await;
    let post = |body: Value| {
        let (url, key) = (g.path("/events"), key.clone());
        async move {
            let r = client().post(url).bearer_auth(key).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (s, env) = post(json!({"event": "task.done", "data": {"task_id": 7, "task_title": "Ship it", "epic_id": 2, "duration_seconds": 30}})).await;
    assert_eq!(s, 202, "{env}");
    assert_eq!(
        (env["event"].as_str(), env["version"].as_str(), env["fleet"].as_str()),
        (Some("task.done"), Some("1"), Some("ci-fleet"))
    );
    assert_eq!((env["node"].as_str(), env["agent"].as_str()), (Some("node-1"), Some("planner")));
    let (s, b) = post(json!({"event": "task.finished", "data": {}})).await;
    assert_eq!((s, b["error"]["param"].as_str()), (400, Some("event")));
    let (s, b) = post(json!({"event": "task.done", "data": {"task_id": 7}})).await;
    assert_eq!((s, b["error"]["param"].as_str()), (400, Some("data")), "{b}");
    let (s, _) = post(json!({"event": "test", "priority": "loud"})).await;
    assert_eq!(s, 400);
    let msgs = ntfy.wait_for_messages(1, Duration::from_secs(10)).await;
    assert_eq!(
        (msgs[0].title.as_deref(), msgs[0].message.as_str(), msgs[0].priority),
        (Some("task.done"), "Ship it", Some(2))
    );
    assert_eq!(msgs[0].tags, vec!["node-1", "planner"]);
    let got = hook.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].header("x-svc-signature"), Some(signature(b"s3cret", &got[0].body).as_str()));
    assert_eq!(got[0].json()["data"]["task_title"], "Ship it");
    assert_eq!(got[0].json(), env, "the webhook receives the envelope answered by POST /events");
}

#[tokio::test]
async fn a_push_outage_and_a_restart_lose_no_event() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    let yaml = with_notifications(config_for(&up.base_url, ""), &ntfy, &hook);
    ntfy.down();
    let g = Gateway::start(&yaml).await;
    for i in 0..100 {
        let body = json!({"event": "task.created", "data": {"task_title": format!("task {i:03}")}});
        let r = client().post(g.path("/events")).bearer_auth(MASTER).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 202);
    }
    // The webhook is up: it gets all 100 while push is down.
    let got = hook.wait_for(100, Duration::from_secs(30)).await;
    let titles: Vec<String> =
        got.iter().map(|r| r.json()["data"]["task_title"].as_str().unwrap().to_string()).collect();
    let expected: Vec<String> = (0..100).map(|i| format!("task {i:03}")).collect();
    assert_eq!(titles, expected, "webhook order follows emission order");
    let ids: std::collections::HashSet<_> =
        got.iter().map(|r| r.header("x-svc-delivery").unwrap().to_string()).collect();
    assert_eq!(ids.len(), 100);
    // kill -9 during the push outage, restart, bring push back: all 100 arrive, in order, once.
    let dir = g.kill().await;
    let _g = Gateway::start_in(dir, &yaml).await;
    ntfy.up().await;
    let msgs = ntfy.wait_for_messages(100, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bodies: Vec<String> = ntfy.messages().iter().map(|m| m.message.clone()).collect();
    assert_eq!(bodies, expected, "push order follows emission order, none twice");
    assert_eq!(msgs.len(), 100);
    // At-least-once: a webhook delivery that succeeded just before the kill, but was not yet marked, is sent
    // again after the restart with the same X-SVC-Delivery; de-duplicated by it, the webhook saw each once.
    let mut seen = std::collections::HashSet::new();
    let deduped: Vec<String> = hook
        .received()
        .iter()
        .filter(|r| seen.insert(r.header("x-svc-delivery").unwrap().to_string()))
        .map(|r| r.json()["data"]["task_title"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(deduped, expected);
    assert!(hook.received().len() <= 100 + 64, "at most one run of unmarked deliveries (64) is repeated");
}

#[tokio::test]
async fn budget_events_reach_the_webhook() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    let base = config_for(&up.base_url, "").replace("      budget_limit: 50\n", "      budget_limit: 0.00003\n");
    let g = Gateway::start(&with_notifications(base, &ntfy, &hook)).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "spender", "agent_role": "coder"})).await;
    let body =
        json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5});
    // 30,000 nano-units: two calls of 12,000 pass (0.8 crossed), the third is refused.
    assert_eq!(post_chat(&g, &key, &body).await.0, 200);
    assert_eq!(post_chat(&g, &key, &body).await.0, 200);
    let (status, _, refusal) = post_chat(&g, &key, &body).await;
    assert_eq!(status, 429);
    let requested = refusal["error"]["requested"].as_f64().unwrap_or_default();
    assert!(requested > 0.0, "the refusal names the request's worst-case cost: {refusal}");
    assert_eq!(post_chat(&g, &key, &body).await.0, 429);
    let got = hook.wait_for(2, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A retried delivery (slow machine) keeps its X-SVC-Delivery id: receivers de-duplicate on it.
    let mut seen = std::collections::HashSet::new();
    let got_all: Vec<_> =
        hook.received().into_iter().filter(|r| seen.insert(r.header("x-svc-delivery").unwrap().to_string())).collect();
    let kinds: Vec<String> = got_all.iter().map(|r| r.json()["event"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, vec!["budget.alert", "budget.exceeded"], "{got:?}");
    let alert = got_all[0].json();
    assert_eq!(alert["agent"], "coder");
    assert_eq!(alert["data"]["team_id"], "executor");
    assert_eq!(alert["data"]["threshold"], 0.8);
    assert_eq!(alert["data"]["spent"], 0.000024);
    let push = ntfy.wait_for_messages(2, Duration::from_secs(10)).await;
    let exceeded = push.iter().find(|m| m.title.as_deref() == Some("budget.exceeded")).unwrap();
    assert_eq!(exceeded.priority, Some(5));
    assert!(
        exceeded.message.starts_with("budget.exceeded: team executor refused a request of up to"),
        "{}",
        exceeded.message
    );
    // The event carries what was refused, the same figure as the 429.
    assert_eq!(got_all[1].json()["data"]["requested"].as_f64(), Some(requested));
}
