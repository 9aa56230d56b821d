//! Who may post which event on `POST /events`: the kinds only the gateway emits (`budget.*`, `model.*`,
//! `node.*`) are refused to virtual keys and nothing of them is stored or delivered; a key's `events` list
//! narrows what it may post; the master key may post anything. Who posted travels beside the envelope, never
//! inside it: `X-SVC-Origin` on webhooks, `SVC_EVENT_ORIGIN` for hooks.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::WebhookReceiver;

const WAIT: Duration = Duration::from_secs(20);

fn config(base: String, ntfy: &NtfyServer, hook: &WebhookReceiver) -> String {
    format!(
        "{base}notifications:\n  ntfy:\n    server: {}\n    topic: svc-fleet-test\n  webhooks:\n    - url: {}\n      events: ['*']\n      secret: s3cret\n      timeout_seconds: 2\n      retry: 2\n",
        ntfy.url(),
        hook.url()
    )
}

/// Creates a key through the admin API; returns (secret, key id, the whole answer).
async fn key(g: &Gateway, body: Value) -> (String, String, Value) {
    let r = client().post(g.path("/key/generate")).bearer_auth(MASTER).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let info: Value = r.json().await.unwrap();
    (info["key"].as_str().unwrap().to_string(), info["key_id"].as_str().unwrap().to_string(), info)
}

async fn post(g: &Gateway, key: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client().post(g.path("/v1/events")).bearer_auth(key).json(&body).send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.json().await.unwrap())
}

#[tokio::test]
async fn a_virtual_key_cannot_forge_gateway_alarms() {
    let up = Upstream::start().await.unwrap();
    let ntfy = NtfyServer::start().await;
    let hook = WebhookReceiver::start().await;
    let g = Gateway::start(&config(config_for(&up.base_url, ""), &ntfy, &hook)).await;
    let origins = g.dir_path().join("origins.log");
    let script = g.dir_path().join("origin.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$SVC_EVENT_KIND $SVC_EVENT_ORIGIN\" >> {}\n", origins.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    svc_events::senders::hooks::HookFile::at(g.dir_path().join("hooks.json")).add("*", &script).unwrap();

    // A key of another team posts alarms about the executor team and the fleet: refused, OpenAI-shaped.
    let (other, _, _) = key(&g, json!({"team_id": "orchestrator"})).await;
    let forged = [
        json!({"event": "budget.exceeded", "priority": "urgent",
               "data": {"budget": "team", "team_id": "executor", "spent": 50.02, "limit": 50}}),
        json!({"event": "node.offline", "priority": "urgent", "data": {"node": "n7"}}),
        json!({"event": "model.unavailable", "data": {"alias": "openai/gpt-4.1-mini"}}),
        json!({"event": "budget.alert", "data": {}}),
    ];
    for body in forged {
        let (status, _, answer) = post(&g, &other, body.clone()).await;
        assert_eq!(status, 403, "{body} → {answer}");
        assert_eq!(answer["error"]["param"], "event", "{answer}");
        assert_eq!(answer["error"]["type"], "permission_error", "{answer}");
        assert_eq!(answer["error"]["code"], "403", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(body["event"].as_str().unwrap()), "{message}");
    }

    // A key narrowed to `task.*` may post `task.created` but not `agent.started`.
    let (narrow, narrow_id, info) = key(&g, json!({"team_id": "executor", "events": ["task.*"]})).await;
    assert_eq!(info["events"], json!(["task.*"]));
    let listed = admin_get(&g, &format!("/key/info?key={narrow_id}")).await;
    assert_eq!(listed["info"]["events"], json!(["task.*"]), "{listed}");
    let (status, _, answer) = post(&g, &narrow, json!({"event": "agent.started"})).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (403, Some("event")), "{answer}");
    let (status, headers, envelope) =
        post(&g, &narrow, json!({"event": "task.created", "data": {"task_title": "t1"}})).await;
    assert_eq!(status, 202, "{envelope}");
    // The answer is exactly the envelope (spec 2.6); the outbox id is a header.
    let keys: Vec<&String> = envelope.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["event", "version", "timestamp", "fleet", "node", "agent", "data"], "{envelope}");
    let outbox_id = headers.get("x-svc-outbox-id").unwrap().to_str().unwrap().to_string();
    assert!(outbox_id.parse::<i64>().unwrap() > 0);
    // A key's `events` can be changed and cleared again with /key/update.
    let r = client()
        .post(g.path("/key/update"))
        .bearer_auth(MASTER)
        .json(&json!({"key": narrow_id, "events": ["agent.*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["events"], json!(["agent.*"]));
    let bad = client()
        .post(g.path("/key/update"))
        .bearer_auth(MASTER)
        .json(&json!({"key": narrow_id, "events": ["nope.*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<Value>().await.unwrap()["error"]["param"], "events");

    // The master key (a fleet monitor script) may post `node.offline`.
    let (status, _, offline) = post(&g, MASTER, json!({"event": "node.offline", "data": {"node": "n7"}})).await;
    assert_eq!(status, 202, "{offline}");

    // Only the two accepted events were delivered, in order, each with its origin.
    let got = hook.wait_for(2, WAIT).await;
    let seen: Vec<(String, String)> = got
        .iter()
        .map(|r| (r.json()["event"].as_str().unwrap().to_string(), r.header("x-svc-origin").unwrap_or("").to_string()))
        .collect();
    assert_eq!(
        seen,
        [("task.created".to_string(), format!("key:{narrow_id}")), ("node.offline".to_string(), "master".to_string())]
    );
    assert_eq!(got[0].json(), envelope, "the webhook receives the envelope POST /events answered");
    let pushed = ntfy.wait_for_messages(2, WAIT).await;
    let titles: Vec<Option<&str>> = pushed.iter().map(|m| m.title.as_deref()).collect();
    assert_eq!(titles, [Some("task.created"), Some("node.offline")]);
    let ok = eventually(20, || std::fs::read_to_string(&origins).unwrap_or_default().lines().count() >= 2).await;
    assert!(ok, "the hook did not run twice: {:?}", std::fs::read_to_string(&origins));
    assert_eq!(
        std::fs::read_to_string(&origins).unwrap(),
        format!("task.created key:{narrow_id}\nnode.offline master\n")
    );
    // None of the forged events was ever stored: the outbox delivers in order, so they would have come first.
    assert_eq!(hook.received_count(), 2);
    assert_eq!(ntfy.message_count(), 2);
}
