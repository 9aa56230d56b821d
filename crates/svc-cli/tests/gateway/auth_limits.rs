//! Isolation through the real binary: wrong keys from one client address are answered 429 with `Retry-After`
//! after their burst while a valid key from the same address is served on every call, with the counter and the
//! one log line that say so; and `POST /messages/count_tokens` counted against the key's `rpm_limit` and
//! refused for a blocked or revoked key, with only the admitted calls reaching the upstream.

use crate::harness::*;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use svc_testkit::anthropic::{FakeAnthropic, COUNTED_TOKENS};
use svc_testkit::upstream::Upstream;

/// The warning written when an address starts being limited.
const LIMITED_LINE: &str = "failed authentications from this address are limited";

/// A client whose connections come from `local` (any 127.x.y.z reaches the gateway on 127.0.0.1).
fn client_from(local: &str) -> reqwest::Client {
    let local: IpAddr = local.parse().unwrap();
    reqwest::Client::builder().timeout(Duration::from_secs(20)).local_address(local).build().unwrap()
}

/// The value of `svc_auth_failures_total{outcome="…"}` in a scrape.
fn failures(scrape: &str, outcome: &str) -> u64 {
    let series = format!("svc_auth_failures_total{{outcome=\"{outcome}\"}} ");
    let line = scrape.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("no {series}in\n{scrape}"));
    line[series.len()..].trim().parse().unwrap()
}

#[tokio::test]
async fn wrong_keys_from_one_address_are_limited_and_a_valid_key_never_is() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor"})).await;
    let here = client_from("127.0.0.1");
    let url = g.path("/v1/chat/completions");
    let body = chat("openai/gpt-4.1-mini");
    let started = Instant::now();
    let (mut rejected, mut limited, mut served) = (Vec::new(), 0u64, 0);
    for i in 0..300 {
        let wrong = format!("sk-svc-wrong{i:032}");
        let r = here.post(&url).bearer_auth(&wrong).json(&body).send().await.unwrap();
        match r.status().as_u16() {
            401 => rejected.push(i),
            429 => {
                let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
                assert!(retry.is_some_and(|s| (1..=3).contains(&s)), "wrong key {i}: Retry-After {retry:?}");
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["error"]["type"], "rate_limit_exceeded", "{v}");
                assert_eq!(
                    v["error"]["message"],
                    "Rate limit exceeded: too many failed authentications from this address"
                );
                limited += 1;
            }
            other => panic!("wrong key {i}: {other}"),
        }
        // The valid key, from the same address, meanwhile.
        if i % 10 == 9 {
            let r = here.post(&url).bearer_auth(&key).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200, "valid key after wrong key {i}: {}", r.text().await.unwrap());
            served += 1;
        }
    }
    // The burst of 20, then one more for each 3 s that passed.
    assert_eq!(rejected[..20], (0..20).collect::<Vec<_>>()[..], "{rejected:?}");
    let refills = started.elapsed().as_secs() / 3 + 1;
    assert!(rejected.len() as u64 <= 20 + refills, "{} answered 401 in {:?}", rejected.len(), started.elapsed());
    assert!(limited >= 300 - 20 - refills, "{limited} answered 429");
    assert_eq!(served, 30);
    // The master key is refused from the limited address (it can be guessed), and served from another one.
    let r = here.get(g.path("/key/list")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let elsewhere = client_from("127.0.0.2");
    let r = elsewhere.get(g.path("/key/list")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let scrape = elsewhere.get(g.path("/metrics")).bearer_auth(MASTER).send().await.unwrap().text().await.unwrap();
    assert_eq!(failures(&scrape, "rejected"), rejected.len() as u64, "{scrape}");
    assert_eq!(failures(&scrape, "limited"), limited + 1, "the master key's refusal counts too");
    // One warning when the address started being limited, not one per refusal.
    assert!(eventually(10, || g.log_text().contains(LIMITED_LINE)).await, "{}", g.log_text());
    let log = g.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(LIMITED_LINE)).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("127.0.0.1") && lines[0].contains("failures=21"), "{}", lines[0]);
}

/// One alias on the fake Anthropic API (which counts tokens), no probes.
fn anthropic_config(base: &str) -> String {
    format!(
        "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: claude-counted
    params:
      model: anthropic/claude-up
      api_base: {base}
      api_key: ant-secret
      input_cost_per_token: 0.000003
      output_cost_per_token: 0.000015
gateway_settings:
  health_check_interval_seconds: 0
  teams:
    - team_id: coders
      budget_limit: 50
      models: [claude-counted]
"
    )
}

/// `POST /v1/messages/count_tokens` with `key` in `x-api-key`; the status, `Retry-After` and the JSON body.
async fn count(g: &Gateway, key: &str) -> (u16, Option<String>, Value) {
    let body = json!({"model": "claude-counted", "messages": [{"role": "user", "content": "how many tokens?"}]});
    let r = client()
        .post(g.path("/v1/messages/count_tokens"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    (status, retry, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn count_tokens_is_rate_limited_and_refused_for_blocked_and_revoked_keys() {
    let ant = FakeAnthropic::start(Some("ant-secret")).await.unwrap();
    let g = Gateway::start(&anthropic_config(ant.base_url())).await;
    let mut admitted = 0;
    // `rpm_limit: 3`: the fourth call in the minute is refused as a model call would be.
    let limited = g.key(json!({"team_id": "coders", "rpm_limit": 3})).await;
    for i in 0..3 {
        let (status, _, body) = count(&g, &limited).await;
        assert_eq!((status, body["input_tokens"].as_u64()), (200, Some(COUNTED_TOKENS)), "call {i}: {body}");
        admitted += 1;
    }
    let (status, retry, body) = count(&g, &limited).await;
    assert_eq!(status, 429, "{body}");
    assert!(retry.is_some_and(|s| s.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))), "Retry-After");
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error", "Anthropic's shape: {body}");
    assert_eq!(body["error"]["message"], "Rate limit exceeded: key requests per minute");
    // A blocked key: 401 from the next call.
    let blocked = g.key(json!({"team_id": "coders"})).await;
    assert_eq!(count(&g, &blocked).await.0, 200);
    admitted += 1;
    let r =
        client().post(g.path("/key/block")).bearer_auth(MASTER).json(&json!({"key": blocked})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let (status, _, body) = count(&g, &blocked).await;
    assert_eq!((status, body["error"]["type"].as_str()), (401, Some("authentication_error")), "{body}");
    // A key revoked by another process (`svc keys revoke`): 401 once the server has heard of it.
    let revoked = g.key(json!({"team_id": "coders", "key_alias": "to-revoke"})).await;
    assert_eq!(count(&g, &revoked).await.0, 200);
    admitted += 1;
    let out = svc().arg("--config").arg(&g.config).args(["keys", "revoke", "to-revoke"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = count(&g, &revoked).await;
        if status == 401 {
            assert_eq!(body["error"]["message"], "This API key has been revoked.");
            break;
        }
        assert_eq!(status, 200, "{body}");
        admitted += 1;
        assert!(Instant::now() < deadline, "the revocation did not reach the server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The upstream saw the admitted calls and nothing else; counting cost nothing.
    let counted = ant.requests().iter().filter(|r| r.path == "/v1/messages/count_tokens").count();
    assert_eq!(counted, admitted);
    let store = g.store().await;
    assert!(store.query_spend(&Default::default(), 10, 0).await.unwrap().is_empty(), "counting is not charged");
    store.close().await;
}
