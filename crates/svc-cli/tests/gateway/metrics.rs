//! Observability (issue 13): `GET /metrics` scraped by the real Prometheus server (Debian's `prometheus`,
//! started here on 127.0.0.1 with a config written here) on both ways in (no key on `server.metrics_address`,
//! `server.metrics_key` on the main port), series checked against known traffic; `promtool check metrics`
//! finds no problem; the example alert rules pass `promtool check rules` and their unit tests; one JSON request
//! line per request, no secret. (That the examples name only exported series is a unit test of `observe`.)

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

const METRICS_KEY: &str = "scrape-secret-0123456789";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Debian tool of the `prometheus` package; its absence is an error (scripts/test.sh installs it).
fn tool(name: &str) -> PathBuf {
    let p = PathBuf::from("/usr/bin").join(name);
    assert!(p.exists(), "{name} not found: apt-get install prometheus (scripts/test.sh does)");
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn config() -> String {
    config_with_webhook("http://127.0.0.1:9/unused")
}

/// The test config with a webhook for `budget.*` events at `hook`.
fn config_with_webhook(hook: &str) -> String {
    format!(
        "server:
  host: 127.0.0.1
  port: 0
  log_format: json
  metrics_key: {METRICS_KEY}
  metrics_address: 127.0.0.1:0
  metrics_key_labels: true
model_list:
  - model_name: gpt
    params: {{model: mock/gpt, input_cost_per_token: 0.000001, output_cost_per_token: 0.000002}}
  - model_name: claude-*
    params: {{model: mock/*}}
gateway_settings:
  teams:
    - team_id: executor
      budget_limit: 50
    - team_id: poor
      budget_limit: 0.000001
notifications:
  webhooks:
    - url: {hook}
      secret: whsec-metrics-test-secret
      events: ['budget.*']
"
    )
}

/// The address of the keyless metrics listener, from the gateway's log.
async fn metrics_address(g: &Gateway) -> String {
    let mut found = None;
    eventually(10, || {
        found = g.log_text().lines().find_map(|l| {
            let i = l.find("metrics (no key) on http://")?;
            let rest = &l[i + "metrics (no key) on ".len()..];
            Some(rest.split(['"', ' ']).next()?.trim_end_matches("/metrics").to_string())
        });
        found.is_some()
    })
    .await;
    found.expect("no metrics listener in the log")
}

/// Starts the real Prometheus server with `dir`'s `prometheus.yml`, once it answers ready (60 s at most); its
/// address. A port taken between choosing it and Prometheus binding it (the server then exits) is chosen again,
/// three times at most; a server that does not start says why (its log).
async fn start_prometheus(dir: &Path) -> (tokio::process::Child, String) {
    let log = dir.join("prometheus.log");
    for _ in 0..3 {
        let port = free_port();
        let mut child = tokio::process::Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            let ready = client().get(format!("{url}/-/ready")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return (child, url);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill().await;
    }
    panic!("prometheus did not start: {}", std::fs::read_to_string(&log).unwrap_or_default());
}

/// The value of an instant query (the first series), if it has one.
async fn query(prom: &str, expr: &str) -> Option<f64> {
    let r = client().get(format!("{prom}/api/v1/query")).query(&[("query", expr)]).send().await.ok()?;
    let v: Value = r.json().await.ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Polls `expr` until it equals `want` (to 1e-9), up to 60 s (Prometheus scrapes every second; a loaded machine
/// delays its first scrapes).
async fn settles_at(prom: &str, expr: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        last = query(prom, expr).await;
        if last.is_some_and(|v| (v - want).abs() < 1e-9) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("`{expr}` = {last:?}, expected {want}");
}

#[tokio::test]
async fn prometheus_scrapes_known_traffic_on_both_listeners() {
    let hook = svc_testkit::webhook::WebhookReceiver::start().await;
    let g = Gateway::start(&config_with_webhook(&hook.url())).await;
    let open = metrics_address(&g).await;
    let rich = g.key(json!({"team_id": "executor", "key_alias": "bot-a"})).await;
    let poor = g.key(json!({"team_id": "poor", "key_alias": "bot-poor"})).await;

    // /metrics on the main port: the master key or the metrics key, nothing else.
    let get = |auth: Option<&str>| {
        let mut r = client().get(g.path("/metrics"));
        if let Some(a) = auth {
            r = r.bearer_auth(a);
        }
        r.send()
    };
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(get(Some(&rich)).await.unwrap().status(), 401);
    assert_eq!(get(Some(MASTER)).await.unwrap().status(), 200);
    let keyed = get(Some(METRICS_KEY)).await.unwrap();
    assert_eq!(keyed.status(), 200);
    assert!(keyed.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));

    // Known traffic: 3 answers, 1 streamed answer, 2 unknown models, 1 budget refusal.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, headers, _) = post_chat(&g, &rich, &chat("gpt")).await;
        assert_eq!(status, 200);
        ids.push(headers["x-request-id"].to_str().unwrap().to_string());
    }
    let streamed = client()
        .post(g.path("/v1/chat/completions"))
        .bearer_auth(&rich)
        .json(&json!({"model": "gpt", "stream": true, "messages": [{"role": "user", "content": "one two three four"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 200);
    assert!(streamed.text().await.unwrap().contains("[DONE]"));
    for _ in 0..2 {
        assert_eq!(post_chat(&g, &rich, &chat("no-such-model")).await.0, 404);
    }
    // Names a wildcard alias matches: counted under the alias as configured, never as the client wrote them
    // (a client's model names are unbounded; the config's aliases are not).
    for name in ["claude-one", "claude-two"] {
        assert_eq!(post_chat(&g, &rich, &chat(name)).await.0, 200);
    }
    assert_eq!(post_chat(&g, &poor, &chat("gpt")).await.0, 429);
    let spent = admin_get(&g, "/spend/logs?team_id=executor").await["total_spend"].as_f64().unwrap();
    assert!(spent > 0.0);

    // The real Prometheus server scrapes both ways in every second.
    let dir = tempfile::tempdir().unwrap();
    let main = g.url.trim_start_matches("http://").to_string();
    let open_target = open.trim_start_matches("http://").to_string();
    let prom_config = format!(
        "global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: svc-open
    static_configs: [{{targets: ['{open_target}']}}]
  - job_name: svc-keyed
    authorization: {{credentials: '{METRICS_KEY}'}}
    static_configs: [{{targets: ['{main}']}}]
"
    );
    std::fs::write(dir.path().join("prometheus.yml"), prom_config).unwrap();
    let (_prom, prom) = start_prometheus(dir.path()).await;

    for job in ["svc-open", "svc-keyed"] {
        let j = format!("job=\"{job}\"");
        settles_at(&prom, &format!("up{{{j}}}"), 1.0).await;
        settles_at(&prom, &format!("sum(svc_requests_total{{{j},status_class=\"2xx\",alias=\"gpt\"}})"), 4.0).await;
        settles_at(&prom, &format!("sum(svc_requests_total{{{j},status_class=\"2xx\",alias=\"claude-*\"}})"), 2.0)
            .await;
        settles_at(&prom, &format!("sum(svc_requests_total{{{j},status_class=\"4xx\",alias=\"\"}})"), 2.0).await;
        settles_at(&prom, &format!("count({{{j},alias=~\"no-such-model|claude-one|claude-two\"}}) or vector(0)"), 0.0)
            .await;
        settles_at(&prom, &format!("sum(svc_refusals_total{{{j},reason=\"budget\",team=\"poor\"}})"), 1.0).await;
        settles_at(&prom, &format!("sum(gen_ai_server_time_to_first_token_seconds_count{{{j}}})"), 1.0).await;
        settles_at(&prom, &format!("sum(gen_ai_server_request_duration_seconds_count{{{j}}})"), 6.0).await;
        settles_at(&prom, &format!("svc_budget_limit{{{j},scope=\"team\",team=\"executor\"}}"), 50.0).await;
        settles_at(&prom, &format!("svc_deployment_health{{{j},deployment=\"gpt\",state=\"healthy\"}}"), 1.0).await;
        // The refusal's `budget.exceeded` event, stored and delivered to the webhook (and this node's hooks).
        settles_at(&prom, &format!("sum(svc_events_emitted_total{{{j},kind=\"budget.exceeded\"}})"), 1.0).await;
        let (delivered, emitted) = (
            format!("sum(svc_event_deliveries_total{{{j},destination=~\"webhook:.*\",outcome=\"delivered\"}})"),
            format!("sum(svc_events_emitted_total{{{j}}})"),
        );
        settles_at(&prom, &format!("{delivered} - {emitted}"), 0.0).await;
        let emitted = query(&prom, &emitted).await.unwrap_or_default();
        assert!(
            emitted >= 1.0 && hook.received_count() as f64 >= emitted,
            "{emitted} events, {} received",
            hook.received_count()
        );
        settles_at(&prom, &format!("sum(svc_outbox_pending{{{j}}})"), 0.0).await;
        let spend =
            query(&prom, &format!("sum(svc_spend_total{{{j},team=\"executor\",key_alias=\"bot-a\",alias=\"gpt\"}})"))
                .await;
        assert!(spend.is_some_and(|s| (s - spent).abs() < 1e-9), "spend {spend:?}, store {spent}");
        let budget = query(&prom, &format!("svc_budget_spent{{{j},scope=\"team\",team=\"executor\"}}")).await;
        assert!(budget.is_some_and(|s| (s - spent).abs() < 1e-9), "budget spent {budget:?}, store {spent}");
    }

    // promtool finds no problem in the exposition.
    let body = client().get(format!("{open}/metrics")).send().await.unwrap().bytes().await.unwrap();
    let mut check = std::process::Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut check.stdin.take().unwrap(), &body).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");

    // One JSON request line per model request, with what an operator greps for, and never a key.
    let log = g.log_text();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "svc::request")
        .collect();
    for id in &ids {
        let line: Vec<&Value> = lines.iter().filter(|v| v["request_id"] == id.as_str()).collect();
        assert_eq!(line.len(), 1, "{id}: {line:?}");
        let l = line[0];
        assert_eq!(
            (l["api"].as_str(), l["key_alias"].as_str(), l["team"].as_str()),
            (Some("chat"), Some("bot-a"), Some("executor"))
        );
        assert_eq!(
            (l["model"].as_str(), l["deployment"].as_str(), l["status"].as_u64()),
            (Some("gpt"), Some("gpt"), Some(200))
        );
        assert!(l["prompt_tokens"].as_u64().unwrap() > 0 && l["completion_tokens"].as_u64().unwrap() > 0);
        assert!(
            l["cost"].as_f64().unwrap() > 0.0
                && l["latency_ms"].as_f64().is_some()
                && l["overhead_ms"].as_f64().is_some()
        );
        assert_eq!(l["retries"].as_u64(), Some(0));
    }
    let refused: Vec<&Value> = lines.iter().filter(|v| v["status"] == 429).collect();
    assert_eq!(refused.len(), 1);
    assert_eq!((refused[0]["refused"].as_str(), refused[0]["key_alias"].as_str()), (Some("budget"), Some("bot-poor")));
    let admin_lines = lines.iter().filter(|v| v["path"] == "/spend/logs").count();
    assert_eq!(admin_lines, 1, "admin requests get a line too");
    for secret in [rich.as_str(), poor.as_str(), MASTER, METRICS_KEY] {
        assert!(!log.contains(secret), "a secret reached the log");
    }
}

#[tokio::test]
async fn example_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = repo().join("examples/prometheus");
    for args in [["check", "rules", "svc-alerts.yml"], ["test", "rules", "svc-alerts.test.yml"]] {
        let out = std::process::Command::new(tool("promtool")).args(args).current_dir(&dir).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool {args:?}: {said}");
    }
}

/// "Who spent what today" without joins: `/spend/logs` rows and key totals name the key's alias, `svc teams
/// list` shows each team's spend this period against its budget with the reset time, `svc spend --since
/// today` counts from local midnight (and a bad `--since` says what it takes).
#[tokio::test]
async fn spend_is_named_and_counted_for_today() {
    let g = Gateway::start(&config()).await;
    let key = g.key(json!({"team_id": "executor", "key_alias": "night-shift"})).await;
    for _ in 0..2 {
        assert_eq!(post_chat(&g, &key, &chat("gpt")).await.0, 200);
    }
    let logs = admin_get(&g, "/spend/logs?team_id=executor").await;
    let spent = logs["total_spend"].as_f64().unwrap();
    let rows = logs["data"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["key_alias"] == "night-shift"), "{rows:?}");
    let by_key = admin_get(&g, "/spend/logs?group_by=key").await;
    assert_eq!(by_key["data"][0]["key_alias"], "night-shift", "{by_key}");

    let out = svc().arg("--config").arg(&g.config).args(["teams", "list"]).output().await.unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().next().unwrap();
    for column in ["TEAM", "BUDGET", "PERIOD", "SPENT", "USED", "RESETS", "MODELS"] {
        assert!(header.contains(column), "{header}");
    }
    let executor = text.lines().find(|l| l.starts_with("executor")).unwrap();
    let shown = svc_budget::Money::from_nanos((spent * 1e9).round() as i64).to_string();
    assert!(executor.contains(&shown) && executor.contains("0%") && executor.contains("UTC"), "{executor} ({shown})");

    for since in ["today", "1d"] {
        let out = svc().arg("--config").arg(&g.config).args(["spend", "--since", since]).output().await.unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.lines().any(|l| l.starts_with("executor") && l.contains(&shown)), "--since {since}: {text}");
        assert!(text.contains("night-shift"), "{text}");
    }
    let out = svc().arg("--config").arg(&g.config).args(["spend", "--since", "last tuesday"]).output().await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`today`"));
}
