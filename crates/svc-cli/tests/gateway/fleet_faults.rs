//! Budgets under store faults and bursts (README, "Fleet mode"): a node cut off from PostgreSQL by a TCP
//! forwarder the test controls serves from its slices, then answers 503 worth retrying, never 429 "Budget
//! exceeded" while the budget has room, announces nothing the fleet's totals do not justify, and reconciles
//! when the store comes back; a burst announces `budget.alert` before `budget.exceeded`, once each.

use crate::fleet::{accepted_events, node_config, on_port_of, with_receivers, Fleet};
use crate::harness::*;
use futures::future::join_all;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use svc_testkit::forward::Forwarder;
use svc_testkit::ntfy::NtfyServer;
use svc_testkit::upstream::Upstream;
use svc_testkit::webhook::WebhookReceiver;

/// What one call costs at the mini's prices (10 prompt and 5 completion tokens), nano-units.
const COST: i64 = 12_000;
/// What one call reserves (its prompt estimate and `max_tokens`), nano-units.
const WORST: i64 = 17_200;
/// A budget where 10 calls fit (and their settled cost leaves room for a few more).
const TEN: i64 = 10 * WORST + 1_000;

fn capped() -> Value {
    json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
}

/// The harness's config with the executor team's budget at `limit` nano-units.
fn team_budget(up: &Upstream, limit: i64) -> String {
    config_for(&up.base_url, "")
        .replace("      budget_limit: 50\n", &format!("      budget_limit: {}\n", limit as f64 / 1e9))
}

fn budget_events(hook: &WebhookReceiver) -> Vec<String> {
    accepted_events(hook).into_iter().filter(|k| k.starts_with("budget.")).collect()
}

fn budget_pushes(ntfy: &NtfyServer) -> Vec<String> {
    ntfy.messages().into_iter().filter_map(|m| m.title).filter(|t| t.starts_with("budget.")).collect()
}

/// One answer: status, headers, body and how long it took.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
    took: Duration,
}

async fn call(g: &Gateway, key: &str) -> Answer {
    let started = Instant::now();
    let (status, headers, body) = post_chat(g, key, &capped()).await;
    Answer { status, headers, body, took: started.elapsed() }
}

/// What a node cut off from the store may answer: 200, or within 2 s a 503 that says to retry soon. Never a
/// budget refusal (the budget has room). Returns whether it was served.
fn served_or_unavailable(a: &Answer, log: &str) -> bool {
    assert!(a.took <= Duration::from_secs(2), "answered in {:?}: {}", a.took, a.body);
    match a.status {
        200 => true,
        503 => {
            assert_eq!(a.headers.get("x-should-retry").and_then(|v| v.to_str().ok()), Some("true"), "{}", a.body);
            let retry = a.headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
            assert!(retry.is_some_and(|s| (1..=5).contains(&s)), "Retry-After {retry:?}");
            assert_eq!(a.body["error"]["type"], "budget_unavailable", "{}", a.body);
            let code = a.body["error"]["code"].as_str().unwrap_or_default();
            let codes = ["budget_store_unreachable", "budget_room_moving", "budget_room_stranded"];
            assert!(codes.contains(&code), "{}", a.body);
            false
        }
        s => panic!("status {s} while the budget has room: {}\n{log}", a.body),
    }
}

/// `db` (a PostgreSQL URL) reached through 127.0.0.1:`port` instead.
fn through(db: &str, port: u16) -> String {
    let (scheme_user, rest) = db.split_once('@').expect("a URL with a user");
    let (_, path) = rest.split_once('/').expect("a URL with a database");
    format!("{scheme_user}@127.0.0.1:{port}/{path}")
}

/// The host:port of a PostgreSQL URL.
fn server_of(db: &str) -> String {
    let rest = db.split_once('@').map_or(db, |(_, r)| r);
    rest.split('/').next().unwrap_or_default().to_string()
}

/// (fleet spend of the team's period as the store's leases account it, held back for dead nodes), nano-units.
async fn period_spent(db: &str) -> (i64, i64) {
    let pool = sqlx::PgPool::connect(db).await.unwrap();
    sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(b.settled), 0) \
              - COALESCE((SELECT SUM(amount) FROM budget_holdbacks WHERE scope = 'team:executor'), 0) \
              + COALESCE((SELECT SUM(spent) FROM budget_leases WHERE scope = 'team:executor'), 0) AS BIGINT), \
         CAST(COALESCE((SELECT SUM(amount) FROM budget_holdbacks WHERE scope = 'team:executor'), 0) AS BIGINT) \
         FROM budget_periods b WHERE b.scope = 'team:executor'",
    )
    .fetch_one(&pool)
    .await
    .unwrap()
}

/// Two nodes on a fresh database with the executor team's budget at `limit`: n1 reaches the store through the
/// returned forwarder, n2 directly; with a key of the team that n1 has served once.
async fn cut_fleet(limit: i64, up: &Upstream, ntfy: &NtfyServer, hook: &WebhookReceiver) -> (Fleet, Forwarder, String) {
    let db = svc_testkit::postgres::fresh_database().await;
    let forwarder = Forwarder::start(&server_of(&db)).await;
    let base = with_receivers(team_budget(up, limit), ntfy, hook);
    let configs = [node_config(&base, &through(&db, forwarder.port()), "n1", ""), node_config(&base, &db, "n2", "")];
    let dirs: Vec<Arc<tempfile::TempDir>> = (0..2).map(|_| Arc::new(tempfile::tempdir().unwrap())).collect();
    let nodes = join_all(dirs.iter().zip(&configs).map(|(d, c)| Gateway::start_in(d.clone(), c))).await;
    let configs = configs.iter().zip(&nodes).map(|(c, g)| on_port_of(c, g)).collect();
    let f = Fleet { nodes: nodes.into_iter().map(Some).collect(), dirs, configs, db };
    f.wait_online(2).await;
    let key = f.node(1).key(json!({"team_id": "executor", "key_alias": "cut"})).await;
    // n1 learns of the key and leases a slice.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let a = call(f.node(0), &key).await;
        if a.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "n1 never served the key: {}", a.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (f, forwarder, key)
}

/// (recorded spend, answered records) once at least `answered` records are in the store (a cut-off node's
/// kept records are written at its spend writer's next retry: its backoff grew while it was cut off).
async fn recorded(f: &Fleet, answered: usize) -> (i64, usize) {
    let team = svc_store::SpendFilter { team_id: Some("executor".into()), ..Default::default() };
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let (spent, recorded) = f.spent(team.clone()).await;
        if recorded >= answered || Instant::now() > deadline {
            return (spent, recorded);
        }
    }
}

#[tokio::test]
async fn a_node_cut_off_from_the_store_serves_its_slice_then_answers_503_and_reconciles() {
    const LIMIT: i64 = 400 * COST;
    let up = Upstream::start().await.unwrap();
    let (ntfy, hook) = (NtfyServer::start().await, WebhookReceiver::start().await);
    let (f, forwarder, key) = cut_fleet(LIMIT, &up, &ntfy, &hook).await;
    let (n1, n2, db) = (f.node(0), f.node(1), f.db.clone());
    let mut answered = 1;
    for _ in 0..2 {
        assert_eq!(call(n1, &key).await.status, 200);
        answered += 1;
    }

    // Cut off for 6 s (twice the lease), a call to each node every 200 ms: what n1 holds serves, then 503s
    // within 2 s; n2 serves on.
    forwarder.cut().await;
    let (mut cut_served, mut unavailable) = (0, 0);
    let cut_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < cut_until {
        if served_or_unavailable(&call(n1, &key).await, &n1.log_text()) {
            cut_served += 1;
        } else {
            unavailable += 1;
        }
        let a = call(n2, &key).await;
        assert_eq!(a.status, 200, "the node that reaches the store serves: {}", a.body);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(200)).await; // a pace, not a wait for anything
    }
    answered += cut_served;
    assert!(cut_served >= 1, "n1 served nothing from its slice while cut off\n{}", n1.log_text());
    assert!(unavailable >= 1, "n1 never ran out while cut off\n{}", n1.log_text());
    // The Messages API says it in Anthropic's shape: overloaded, retry.
    let messages =
        json!({"model": "openai/gpt-4.1-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let r = client().post(n1.path("/v1/messages")).header("x-api-key", &key).json(&messages).send().await.unwrap();
    let (status, retry) = (r.status().as_u16(), r.headers().get("x-should-retry").cloned());
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (status, body["type"].as_str(), body["error"]["type"].as_str()),
        (503, Some("error"), Some("overloaded_error"))
    );
    assert_eq!(retry.as_ref().and_then(|v| v.to_str().ok()), Some("true"));

    // Back: n1 serves again (503s until its leases start afresh, never a refusal).
    forwarder.restore().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = call(n1, &key).await;
        if served_or_unavailable(&a, &n1.log_text()) {
            answered += 1;
            break;
        }
        assert!(Instant::now() < deadline, "n1 never served again after the store came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for g in [n1, n2, n1, n2] {
        assert_eq!(call(g, &key).await.status, 200);
        answered += 1;
    }

    // Counted apart from budget refusals (`/metrics` reads the store: asked once it is back).
    let metrics = client().get(n1.path("/metrics")).bearer_auth(MASTER).send().await.unwrap().text().await.unwrap();
    let counted = |l: &&str| l.starts_with("svc_refusals_total{") && l.contains("reason=\"budget_unavailable\"");
    assert!(metrics.lines().any(|l| counted(&l)), "{metrics}");
    assert!(!metrics.lines().any(|l| l.starts_with("svc_refusals_total{") && l.contains("reason=\"budget\"")));
    // Reconciled: every answer recorded once, at its cost, and charged once to the budget's period.
    let (spent, recorded) = recorded(&f, answered).await;
    assert_eq!((recorded, spent), (answered, answered as i64 * COST), "{}", n1.log_text());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (charged, held_back) = period_spent(&db).await;
        if charged == spent {
            break;
        }
        assert!(Instant::now() < deadline, "the period is charged {charged} (held back {held_back}), spent {spent}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Less than a quarter of the budget was spent: nothing to announce, from either node.
    assert!(spent < LIMIT / 4, "spent {spent}");
    assert!(budget_events(&hook).is_empty(), "{:?}", budget_events(&hook));
    assert!(budget_pushes(&ntfy).is_empty(), "{:?}", budget_pushes(&ntfy));
}

/// `n` requests at once, spread round-robin over `nodes`; their statuses.
async fn burst(nodes: &[&Gateway], key: &str, n: usize) -> Vec<(u16, Value)> {
    let calls = (0..n).map(|i| async move {
        let (s, _, b) = post_chat(nodes[i % nodes.len()], key, &capped()).await;
        (s, b)
    });
    join_all(calls).await
}

/// Waits until the webhook and ntfy both received `budget.exceeded`, then a quiet second more (a late duplicate
/// or a late alert would show); asserts the alert came first, each once.
async fn assert_alert_then_exceeded(hook: &WebhookReceiver, ntfy: &NtfyServer) {
    let has_exceeded = |kinds: Vec<String>| kinds.iter().any(|k| k == "budget.exceeded");
    assert!(eventually(20, || has_exceeded(budget_events(hook)) && has_exceeded(budget_pushes(ntfy))).await);
    let settled = eventually(2, || budget_events(hook).len() > 2 || budget_pushes(ntfy).len() > 2).await;
    assert!(!settled, "webhook {:?}, ntfy {:?}", budget_events(hook), budget_pushes(ntfy));
    assert_eq!(budget_events(hook), ["budget.alert", "budget.exceeded"]);
    assert_eq!(budget_pushes(ntfy), ["budget.alert", "budget.exceeded"]);
}

/// A burst of 60 against a budget where 10 fit (on one node, with the SQLite store).
#[tokio::test]
async fn a_burst_announces_the_alert_before_exceeded_once_each() {
    let up = Upstream::start().await.unwrap();
    let (ntfy, hook) = (NtfyServer::start().await, WebhookReceiver::start().await);
    let g = Gateway::start(&with_receivers(team_budget(&up, TEN), &ntfy, &hook)).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "burst"})).await;
    let results = burst(&[&g], &key, 60).await;
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    assert!((10..=14).contains(&ok), "admitted {ok}");
    for (s, b) in results.iter().filter(|(s, _)| *s != 200) {
        assert_eq!((*s, b["error"]["message"].as_str()), (429, Some("Budget exceeded")), "{b}");
    }
    assert_alert_then_exceeded(&hook, &ntfy).await;
}

/// The same burst over a fleet of three: the refusal that announces "exceeded" (justified by the store's
/// totals) announces the alert first; the other nodes announce neither again.
#[tokio::test]
async fn a_burst_over_a_fleet_announces_the_alert_before_exceeded_once_each() {
    let up = Upstream::start().await.unwrap();
    let (ntfy, hook) = (NtfyServer::start().await, WebhookReceiver::start().await);
    let f = Fleet::start(&with_receivers(team_budget(&up, TEN), &ntfy, &hook), "").await;
    let key = f.node(0).key(json!({"team_id": "executor", "key_alias": "burst"})).await;
    let results = burst(&f.live(), &key, 60).await;
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    assert!((1..=14).contains(&ok), "admitted {ok}");
    for (s, b) in results.iter().filter(|(s, _)| *s != 200) {
        // A node whose share moved to another node just then says so (503, retry); otherwise it is refused.
        assert!(
            (*s == 429 && b["error"]["message"] == "Budget exceeded")
                || (*s == 503 && b["error"]["code"] == "budget_room_moving"),
            "{s}: {b}"
        );
        if *s == 429 {
            let e = &b["error"];
            let parts = ["spent", "reserved", "held_by_other_nodes", "remaining"].map(|k| e[k].as_f64().unwrap());
            let sum: f64 = parts.iter().sum();
            assert!((sum - e["limit"].as_f64().unwrap()).abs() < 1e-9, "the refusal adds up to its limit: {e}");
        }
    }
    assert_alert_then_exceeded(&hook, &ntfy).await;
    let team = svc_store::SpendFilter { team_id: Some("executor".into()), ..Default::default() };
    let (spent, recorded) = f.spent(team).await;
    assert!(spent <= TEN, "spent {spent}");
    assert_eq!(recorded, ok);
}

/// n1 is cut off holding a slice while n2 uses the rest of the budget: what n1 holds is not a refusal's room
/// (n2 answers 503 `budget_room_stranded` while n1's lease runs) and no `budget.exceeded` goes out for it; once
/// the lease expires the store's totals decide, and after n1 comes back the spend adds up.
#[tokio::test]
async fn room_held_by_a_cut_off_node_is_stranded_not_refused() {
    const LIMIT: i64 = 40 * COST;
    let up = Upstream::start().await.unwrap();
    let (ntfy, hook) = (NtfyServer::start().await, WebhookReceiver::start().await);
    let (f, forwarder, key) = cut_fleet(LIMIT, &up, &ntfy, &hook).await;
    let (n1, n2) = (f.node(0), f.node(1));
    // Cut at once, before n1 is idle for a heartbeat and gives its spare back.
    forwarder.cut().await;
    let pool = sqlx::PgPool::connect(&f.db).await.unwrap();
    let lease = "SELECT CAST(COALESCE(MIN(expires_ms - svc_now_ms()), -1000000) AS BIGINT) FROM budget_leases \
                 WHERE node = 'n1' AND amount > spent";
    let left = || async { sqlx::query_scalar::<_, i64>(lease).fetch_one(&pool).await.unwrap() };
    assert!(left().await > 0, "n1 holds an unspent slice");
    // Silent: not renewed for two heartbeats (its 3 s lease expires within 1 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    while left().await >= 1_000 {
        assert!(Instant::now() < deadline, "n1's lease is still renewed while it is cut off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut answered, mut stranded) = (1, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let refusal = loop {
        let a = call(n2, &key).await;
        assert!(a.took <= Duration::from_secs(2), "answered in {:?}", a.took);
        match (a.status, a.body["error"]["code"].as_str()) {
            (200, _) => answered += 1,
            (503, Some("budget_room_stranded")) => {
                assert_eq!(a.headers.get("x-should-retry").and_then(|v| v.to_str().ok()), Some("true"));
                assert!(!budget_events(&hook).contains(&"budget.exceeded".to_string()), "{:?}", budget_events(&hook));
                stranded += 1;
                tokio::time::sleep(Duration::from_millis(50)).await; // a pace, not a wait for anything
            }
            (503, Some("budget_room_moving")) => tokio::time::sleep(Duration::from_millis(50)).await,
            (429, _) => break a.body,
            (s, _) => panic!("{s}: {}", a.body),
        }
        assert!(Instant::now() < deadline, "n2 was never refused");
    };
    assert!(stranded >= 1, "n2 used the budget up without meeting n1's slice");
    // Refused only once n1's lease expired: what the store holds back for it is named, and the body adds up.
    assert!(left().await < 0, "refused while n1's lease still ran: {refusal}");
    let e = &refusal["error"];
    let parts: f64 =
        ["spent", "reserved", "held_by_other_nodes", "remaining"].map(|k| e[k].as_f64().unwrap()).iter().sum();
    assert!((parts - e["limit"].as_f64().unwrap()).abs() < 1e-9, "{refusal}");
    assert!(e["held_by_other_nodes"].as_f64().unwrap() > 0.0, "{refusal}");
    // n1 comes back: its answer is recorded once, nothing is over the limit.
    forwarder.restore().await;
    let (spent, recorded) = recorded(&f, answered).await;
    assert_eq!(recorded, answered, "{}", n1.log_text());
    assert!(spent <= LIMIT, "spent {spent} of {LIMIT}");
    // The alert (spend passed 80 %) and "exceeded", once each and in order.
    assert!(eventually(20, || budget_events(&hook).contains(&"budget.exceeded".to_string())).await);
    assert!(!eventually(2, || budget_events(&hook).len() > 2).await, "{:?}", budget_events(&hook));
    assert_eq!(budget_events(&hook), ["budget.alert", "budget.exceeded"]);
}
