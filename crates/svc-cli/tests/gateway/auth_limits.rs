//! Isolation through the real binary: wrong keys from one client address are answered 429 with `Retry-After`
//! after their burst while a valid key from the same address is served on every call, with the counter and the
//! one log line that say so.

use crate::harness::*;
use serde_json::{json, Value};
use std::net::IpAddr;
use std::time::{Duration, Instant};
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
