//! Reloading the configuration while the gateway serves (issue 30): SIGHUP and `svc reload` change a team's
//! budget, a model's price and a webhook while 50 requests stream (none fails; the new values hold at once); a
//! configuration that does not check is refused whole, with its problems, and the running one keeps serving;
//! a setting only a restart changes is named.

use crate::harness::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::WebhookReceiver;

/// The harness's config with `budget` for executor, `price` per input and output token of the mini model, and
/// a webhook for `task.*` at `hook`.
fn yaml(up: &str, budget: &str, price: &str, hook: &str) -> String {
    config_for(up, "")
        .replacen("budget_limit: 50", &format!("budget_limit: {budget}"), 1)
        .replacen("input_cost_per_token: 0.0000004", &format!("input_cost_per_token: {price}"), 1)
        .replacen("output_cost_per_token: 0.0000016", &format!("output_cost_per_token: {price}"), 1)
        + &format!("notifications:\n  webhooks:\n    - url: '{hook}'\n      events: ['task.*']\n      secret: s3cret\n")
}

async fn svc_reload(g: &Gateway) -> (i32, String) {
    let out = svc().arg("--config").arg(&g.config).args(["reload", "--url", &g.url]).output().await.unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The newest spend record's cost of `key`'s plain (non-streamed) requests.
async fn last_cost(g: &Gateway, key: &str) -> f64 {
    let r: Value =
        client().get(g.path("/spend/logs?limit=1")).bearer_auth(key).send().await.unwrap().json().await.unwrap();
    r["data"][0]["spend"].as_f64().unwrap_or(-1.0)
}

async fn team_limit(g: &Gateway) -> Value {
    let r: Value = client()
        .get(g.path("/team/info?team_id=executor"))
        .bearer_auth(MASTER)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["budget"]["limit"].clone()
}

async fn post_task(g: &Gateway) {
    let event = json!({"event": "task.created", "data": {"task_id": "t-1"}});
    let r = client().post(g.path("/events")).bearer_auth(MASTER).json(&event).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

#[tokio::test]
async fn sighup_and_svc_reload_apply_a_new_configuration_while_streams_run() {
    let up = Upstream::start().await.unwrap();
    up.set(|b| {
        b.chunks = 20;
        b.chunk_delay = Duration::from_millis(40);
    });
    let (first_hook, second_hook) = (WebhookReceiver::start().await, WebhookReceiver::start().await);
    let g = Gateway::start(&yaml(&up.base_url, "50", "0.0000004", &first_hook.url())).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 200);
    let old_cost = last_cost(&g, &key).await;
    post_task(&g).await;
    assert!(eventually(10, || first_hook.received_count() == 1).await, "the first webhook gets events");

    // 50 streams under way while the file changes and SIGHUP comes.
    let streams: Vec<_> = (0..50)
        .map(|_| {
            let (url, key) = (g.path("/v1/chat/completions"), key.clone());
            tokio::spawn(async move {
                let body = json!({"model": "openai/gpt-4.1-mini", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
                let r = client().post(url).bearer_auth(key).json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                let mut text = String::new();
                let mut chunks = r.bytes_stream();
                while let Some(c) = chunks.next().await {
                    text.push_str(&String::from_utf8_lossy(&c.unwrap()));
                }
                (status, text.trim_end().ends_with("data: [DONE]"))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&g.config, yaml(&up.base_url, "40", "0.000004", &second_hook.url())).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(g.pid() as i32), nix::sys::signal::Signal::SIGHUP).unwrap();
    assert!(eventually(10, || g.log_text().contains("configuration reloaded")).await, "{}", g.log_text());
    for s in streams {
        assert_eq!(s.await.unwrap(), (200, true), "a stream under way finishes as it started");
    }
    // The new values hold at once: the price (ten times), the team's budget, the webhook.
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 200);
    let new_cost = last_cost(&g, &key).await;
    assert!((new_cost / old_cost - 10.0).abs() < 0.01, "{old_cost} then {new_cost}");
    assert_eq!(team_limit(&g).await, json!(40.0));
    post_task(&g).await;
    assert!(eventually(10, || second_hook.received_count() == 1).await, "the new webhook gets the next event");
    assert_eq!(first_hook.received_count(), 1, "the old one gets no more");

    // A file that does not check: refused whole with its problems, the running configuration stays.
    let broken = yaml(&up.base_url, "lots", "0.000001", &first_hook.url());
    std::fs::write(&g.config, &broken).unwrap();
    let (code, stderr) = svc_reload(&g).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("budget_limit") && stderr.contains("svc.yaml:"), "{stderr}");
    assert_eq!(team_limit(&g).await, json!(40.0));
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 200);
    assert!((last_cost(&g, &key).await - new_cost).abs() < 1e-12, "the old price still holds");
    // The same through the API, for the server's own answer.
    let r = client().post(g.path("/config/reload")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_config", "{body}");
    assert!(body["error"]["diagnostics"].as_array().is_some_and(|d| !d.is_empty()), "{body}");

    // A setting only a restart changes is named, and nothing changes.
    let moved = yaml(&up.base_url, "30", "0.0000004", &first_hook.url()).replacen(
        "  host: 127.0.0.1\n",
        "  host: 127.0.0.2\n",
        1,
    );
    std::fs::write(&g.config, moved).unwrap();
    let r = client().post(g.path("/config/reload")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["settings"], json!(["server.host"]), "{body}");
    assert_eq!(team_limit(&g).await, json!(40.0));

    // `svc reload` applies a good one; a virtual key may not ask.
    std::fs::write(&g.config, yaml(&up.base_url, "30", "0.0000004", &first_hook.url())).unwrap();
    let (code, stderr) = svc_reload(&g).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("svc: reloaded") && stderr.contains("3 models, 2 teams, "), "{stderr}");
    assert_eq!(team_limit(&g).await, json!(30.0));
    let r = client().post(g.path("/config/reload")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(r.status(), 403);
}
