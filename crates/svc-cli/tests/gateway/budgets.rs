//! Budgets and rate limits under concurrency and crashes (issue 3).

use crate::harness::*;
use futures::future::join_all;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::upstream::Upstream;

/// Each call costs 10 × 0.0000004 + 5 × 0.0000016 = 0.000012 (12,000 nano-units) at the mini's prices.
const COST: i64 = 12_000;

fn capped() -> Value {
    json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
}

/// Fires `n` requests at once; returns (status, body) of each.
async fn burst(g: &Gateway, key: &str, n: usize) -> Vec<(u16, Value)> {
    let c = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(60)).build().unwrap();
    let url = g.path("/v1/chat/completions");
    let calls = (0..n).map(|_| {
        let c = c.clone();
        let url = url.clone();
        async move {
            let r = c.post(url).bearer_auth(key).json(&capped()).send().await.unwrap();
            let s = r.status().as_u16();
            let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(String::from);
            let mut body: Value = r.json().await.unwrap();
            if let Some(retry) = retry {
                body["retry_after_header"] = json!(retry);
            }
            (s, body)
        }
    });
    join_all(calls).await
}

async fn recorded_spend(g: &Gateway, filter: svc_store::SpendFilter) -> (i64, usize) {
    let store = g.store().await;
    let recs = store.query_spend(&filter, 10_000, 0).await.unwrap();
    let ok: Vec<_> = recs.iter().filter(|r| r.status == 200).collect();
    (recs.iter().map(|r| r.cost).sum(), ok.len())
}

fn with_team_budget(up: &Upstream, limit: &str) -> String {
    config_for(&up.base_url, "").replace("      budget_limit: 50\n", &format!("      budget_limit: {limit}\n"))
}

#[tokio::test]
async fn a_burst_never_passes_the_team_budget() {
    let up = Upstream::start().await.unwrap();
    // Room for 50 calls at their actual cost; each reserves more (its prompt estimate and max_tokens).
    let g = Gateway::start(&with_team_budget(&up, "0.0006")).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "burst"})).await;
    let results = burst(&g, &key, 200).await;
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    for (s, b) in results.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*s, 429, "{b}");
        assert_eq!(b["error"]["message"], "Budget exceeded");
        assert_eq!(b["error"]["type"], "budget_exceeded");
        assert_eq!(b["error"]["budget"], "team");
        assert_eq!(b["error"]["limit"], 0.0006);
        assert!(b["error"]["reset_at"].is_string() && b["retry_after_header"].is_string(), "{b}");
    }
    let (spent, recorded_ok) =
        recorded_spend(&g, svc_store::SpendFilter { team_id: Some("executor".into()), ..Default::default() }).await;
    assert!(spent <= 600_000, "spent {spent} over the limit");
    assert_eq!(recorded_ok, ok, "one spend record per answered request");
    assert_eq!(spent, ok as i64 * COST);
    assert!(ok >= 25, "the budget should admit a good share of 50 requests, admitted {ok}");
    // Sequential requests use up what reservations kept free, never more.
    loop {
        let (s, _, _) = post_chat(&g, &key, &capped()).await;
        if s != 200 {
            assert_eq!(s, 429);
            break;
        }
    }
    let (spent, _) =
        recorded_spend(&g, svc_store::SpendFilter { team_id: Some("executor".into()), ..Default::default() }).await;
    assert!(spent <= 600_000 && spent > 600_000 - 2 * 16_800, "spent {spent}");
    // The team's view shows it.
    let info: Value = admin_get(&g, "/team/info?team_id=executor").await;
    assert_eq!(info["budget"]["spent"], json!(spent as f64 / 1e9));
    assert_eq!(info["budget"]["reserved"], json!(0.0));
    let list: Value = admin_get(&g, "/team/list").await;
    let listed = list.as_array().and_then(|teams| teams.iter().find(|t| t["team_id"] == "executor")).cloned();
    assert_eq!(
        listed.map(|t| t["budget"].clone()),
        Some(info["budget"].clone()),
        "the list shows the same budget view"
    );
    // The master key is never refused, and its spend is recorded.
    assert_eq!(post_chat(&g, MASTER, &capped()).await.0, 200);
    let (all, _) = recorded_spend(&g, Default::default()).await;
    assert_eq!(all, spent + COST);
}

#[tokio::test]
async fn a_burst_never_passes_a_key_budget() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g
        .key(json!({"team_id": "executor", "key_alias": "small", "max_budget": 0.0006, "budget_duration": "1d"}))
        .await;
    let results = burst(&g, &key, 200).await;
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    for (s, b) in results.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(
            (*s, b["error"]["message"].as_str(), b["error"]["budget"].as_str()),
            (429, Some("Budget exceeded"), Some("key"))
        );
    }
    let (spent, _) = recorded_spend(&g, Default::default()).await;
    assert!(spent <= 600_000 && ok >= 25, "spent {spent}, ok {ok}");
    let info: Value = admin_get(&g, "/key/info?key=small").await;
    assert_eq!(info["budget"]["budget_duration"], "1d");
    assert_eq!(info["total_spend"], json!(spent as f64 / 1e9));
    // Spend logs, filtered by key.
    let logs: Value = admin_get(&g, "/spend/logs?key=small&limit=5").await;
    assert_eq!(logs["data"].as_array().unwrap().len(), 5.min(ok));
    assert_eq!(logs["total_spend"], json!(spent as f64 / 1e9));
}

#[tokio::test]
async fn rpm_limits_hold_under_a_burst() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor", "rpm_limit": 50})).await;
    let results = burst(&g, &key, 200).await;
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    assert!((50..=51).contains(&ok), "admitted {ok}");
    for (s, b) in results.iter().filter(|(s, _)| *s != 200) {
        assert_eq!((*s, b["error"]["type"].as_str()), (429, Some("rate_limit_exceeded")), "{b}");
        assert!(b["retry_after_header"].as_str().unwrap().parse::<u64>().unwrap() >= 1);
    }
}

#[tokio::test]
async fn kill_9_loses_no_answered_spend() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "crash"})).await;
    let url = g.path("/v1/chat/completions");
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let c = client();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (c, url, key, answered) = (c.clone(), url.clone(), key.clone(), answered.clone());
            tokio::spawn(async move {
                for _ in 0..1000 {
                    match c.post(&url).bearer_auth(&key).json(&capped()).send().await {
                        Ok(r) if r.status() == 200 => {
                            let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
                            // The client "received its answer" once the body is complete.
                            if r.bytes().await.is_ok() {
                                answered.lock().unwrap().push(id);
                            }
                        }
                        _ => break,
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let dir = g.kill().await;
    for w in workers {
        let _ = w.await;
    }
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() > 20, "load ran: {}", answered.len());
    // Restart on the same store: every answered request has its record, and period spend is their sum.
    let g = Gateway::start_in(dir, &config_for(&up.base_url, "")).await;
    let store = g.store().await;
    let recs = store.query_spend(&Default::default(), 100_000, 0).await.unwrap();
    let ids: std::collections::HashSet<&str> = recs.iter().map(|r| r.request_id.as_str()).collect();
    let missing: Vec<&String> = answered.iter().filter(|id| !ids.contains(id.as_str())).collect();
    assert!(missing.is_empty(), "{} answered requests lost their spend record", missing.len());
    let sum: i64 = recs.iter().filter(|r| r.team_id.as_deref() == Some("executor")).map(|r| r.cost).sum();
    let info: Value = admin_get(&g, "/team/info?team_id=executor").await;
    assert_eq!(info["budget"]["spent"], json!(sum as f64 / 1e9));
}
