//! Teams changed while the gateway serves (issue 30): LiteLLM's `/team/new`, `/team/update`, `/team/delete` and
//! `svc teams new|update|delete` make and change teams that hold at once on the node asked, fleet-wide within a
//! second on PostgreSQL, and across restarts; a team of the config file is refused (409 naming the file);
//! `svc keys revoke` is in force on the node it asks when it returns; each node reports the digest of its file,
//! and nodes running different files are flagged.

use crate::fleet::{node_config, Fleet};
use crate::harness::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use svc_testkit::upstream::Upstream;

async fn post(g: &Gateway, path: &str, key: &str, body: Value) -> (u16, Value) {
    let r = client().post(g.path(path)).bearer_auth(key).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn cli(g: &Gateway, args: &[&str]) -> (i32, String, String) {
    let out = svc().arg("--config").arg(&g.config).args(args).current_dir(g.dir_path()).output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn mini() -> Value {
    chat("openai/gpt-4.1-mini")
}

#[tokio::test]
async fn teams_made_and_changed_at_runtime_hold_at_once_and_across_restarts() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let config = g.config.display().to_string();
    let agent = g.key(json!({"team_id": "executor"})).await;
    assert_eq!(post(&g, "/team/new", &agent, json!({"team_id": "x"})).await.0, 403, "the master key's");

    // A team whose budget cannot pay for one call: refused; raised at runtime, it pays at once.
    let research = json!({"team_id": "research", "team_alias": "Research", "max_budget": 0.000001,
        "budget_duration": "1d", "models": ["openai/gpt-4.1-mini"], "metadata": {"owner": "ana"}});
    let (s, team) = post(&g, "/team/new", MASTER, research.clone()).await;
    assert_eq!(s, 200, "{team}");
    assert_eq!((team["defined_in"].as_str(), team["team_alias"].as_str()), (Some("api"), Some("Research")));
    assert_eq!((team["max_budget"].as_f64(), team["budget"]["limit"].as_f64()), (Some(0.000001), Some(0.000001)));
    let (s, again) = post(&g, "/team/new", MASTER, research).await;
    assert_eq!((s, again["error"]["message"].as_str()), (409, Some("team `research` exists already")));
    let key = g.key(json!({"team_id": "research"})).await;
    let (s, _, body) = post_chat(&g, &key, &mini()).await;
    assert_eq!((s, body["error"]["message"].as_str()), (429, Some("Budget exceeded")));
    let (s, _, body) = post_chat(&g, &key, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!(s, 403, "the team's models hold: {body}");
    let (s, team) = post(&g, "/team/update", MASTER, json!({"team_id": "research", "max_budget": 1})).await;
    assert_eq!((s, team["max_budget"].as_f64(), team["team_alias"].as_str()), (200, Some(1.0), Some("Research")));
    assert_eq!(post_chat(&g, &key, &mini()).await.0, 200, "the new limit holds from the next request");
    // `null` (LiteLLM's) takes a budget or limit away; an absent field stays.
    let (s, team) =
        post(&g, "/team/update", MASTER, json!({"team_id": "research", "max_budget": null, "rpm_limit": 60})).await;
    assert_eq!(
        (s, team["max_budget"].clone(), team["budget"].clone(), team["rpm_limit"].as_u64()),
        (200, Value::Null, Value::Null, Some(60)),
        "{team}"
    );
    let (s, team) = post(&g, "/team/update", MASTER, json!({"team_id": "research", "rpm_limit": null})).await;
    assert_eq!((s, team["rpm_limit"].clone(), team["team_alias"].as_str()), (200, Value::Null, Some("Research")));
    assert_eq!(post_chat(&g, &key, &mini()).await.0, 200);
    let (s, _) = post(&g, "/team/update", MASTER, json!({"team_id": "research", "max_budget": 1})).await;
    assert_eq!(s, 200);

    // The config file's teams are the file's.
    for (path, body) in [
        ("/team/new", json!({"team_id": "executor"})),
        ("/team/update", json!({"team_id": "executor", "max_budget": 1})),
        ("/team/delete", json!({"team_ids": ["research", "executor"]})),
    ] {
        let (s, e) = post(&g, path, MASTER, body).await;
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert_eq!((s, e["error"]["param"].as_str()), (409, Some("team_id")), "{path}: {e}");
        assert!(message.contains(&format!("defined in the config file {config}")), "{path}: {message}");
    }
    let (s, e) = post(&g, "/team/new", MASTER, json!({"team_id": "y", "max_budget_usd": 1})).await;
    assert_eq!(s, 400, "an unknown field: {e}");
    let (s, e) = post(&g, "/team/new", MASTER, json!({"team_id": "y", "models": ["gpt-9"]})).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("models")), "{e}");
    let (s, e) = post(&g, "/team/update", MASTER, json!({"team_id": "nobody", "max_budget": 1})).await;
    assert_eq!((s, e["error"]["type"].as_str()), (404, Some("team_not_found")));
    let list = admin_get(&g, "/team/list").await;
    let origin =
        |id: &str| list.as_array().unwrap().iter().find(|t| t["team_id"] == id).map(|t| t["defined_in"].clone());
    assert_eq!((origin("executor"), origin("research")), (Some(json!("file")), Some(json!("api"))), "{list}");

    // The CLI asks the gateway; without one answering, it writes the store and the gateway takes it within a
    // second.
    let url = g.url.clone();
    let (code, out, err) =
        cli(&g, &["teams", "new", "cli-team", "--max-budget", "5", "--models", "openai/gpt-4.1-mini", "--url", &url])
            .await;
    assert_eq!((code, out.as_str()), (0, "cli-team\n"), "{err}");
    assert!(err.contains("made team cli-team (budget 5.00 per "), "money as it is: {err}");
    assert_eq!(admin_get(&g, "/team/info?team_id=cli-team").await["team_info"]["max_budget"], 5.0);
    let (code, _, err) = cli(&g, &["teams", "update", "executor", "--max-budget", "1", "--url", &url]).await;
    assert_eq!(code, 1);
    assert!(err.contains("team `executor` is defined in the config file"), "{err}");
    let (code, _, err) =
        cli(&g, &["teams", "update", "cli-team", "--max-budget", "7", "--url", "http://127.0.0.1:1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no gateway answers at http://127.0.0.1:1"), "{err}");
    let mut applied = false;
    for _ in 0..40 {
        if admin_get(&g, "/team/info?team_id=cli-team").await["team_info"]["max_budget"] == 7.0 {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(applied, "the gateway applies a change written to the store within its poll");
    let (code, table, err) = cli(&g, &["teams", "list"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(table.lines().any(|l| l.starts_with("cli-team") && l.contains(" api ") && l.contains("7.00")), "{table}");
    let (code, _, err) = cli(&g, &["teams", "update", "cli-team", "--max-budget", "unlimited", "--url", &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("updated team cli-team (budget unlimited)"), "{err}");
    let (code, _, err) = cli(&g, &["teams", "update", "cli-team", "--rpm-limit", "many", "--url", &url]).await;
    assert_eq!(code, 1);
    assert!(err.contains("--rpm-limit: `many` is not a whole number"), "{err}");
    assert!(table.lines().any(|l| l.starts_with("executor") && l.contains(" file ")), "{table}");
    assert!(!err.contains("differs"), "runtime teams are no difference from the file: {err}");

    // A restart keeps the runtime teams (the file's and the store's run together again).
    let dir = g.kill().await;
    let g = Gateway::start_in(dir, &config_for(&up.base_url, "")).await;
    assert_eq!(post_chat(&g, &key, &mini()).await.0, 200, "research and its key are back");
    assert_eq!(admin_get(&g, "/team/info?team_id=research").await["team_info"]["max_budget"], 1.0);

    // Deleting a team deletes its keys, refused at once.
    let (s, gone) = post(&g, "/team/delete", MASTER, json!({"team_ids": ["research"]})).await;
    assert_eq!((s, gone["deleted_teams"].clone()), (200, json!(["research"])), "{gone}");
    assert_eq!(gone["deleted_keys"].as_array().map(Vec::len), Some(1));
    assert_eq!(post_chat(&g, &key, &mini()).await.0, 401);
    assert_eq!(admin_get(&g, "/team/info?team_id=research").await["error"]["type"], "team_not_found");
    // Made again under its name, it is a new team: its budget starts afresh (the old team's spend this period,
    // three calls, would leave no room for one under this budget).
    let (s, team) = post(&g, "/team/new", MASTER, json!({"team_id": "research", "max_budget": 0.00003})).await;
    assert_eq!((s, team["budget"]["spent"].as_f64()), (200, Some(0.0)), "{team}");
    let again = g.key(json!({"team_id": "research"})).await;
    let small =
        json!({"model": "openai/gpt-4.1-mini", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post_chat(&g, &again, &small).await.0, 200, "a fresh budget");
    let (code, _, err) = cli(&g, &["teams", "delete", "cli-team", "--url", &g.url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("deleted team cli-team and its 0 key(s)"), "{err}");
}

#[tokio::test]
async fn svc_keys_revoke_is_in_force_on_the_node_it_asks_when_it_returns() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let url = g.url.clone();
    // Several keys, each used at once after the command returns: a node that learnt of it by its one-second
    // poll would still answer most of them.
    for i in 0..5 {
        let alias = format!("agent-{i}");
        let key = g.key(json!({"team_id": "executor", "key_alias": alias})).await;
        assert_eq!(post_chat(&g, &key, &mini()).await.0, 200);
        let (code, _, err) = cli(&g, &["keys", "revoke", &alias, "--url", &url]).await;
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("svc: revoked key"), "{err}");
        let (s, _, body) = post_chat(&g, &key, &mini()).await;
        assert_eq!((s, body["error"]["message"].as_str()), (401, Some("This API key has been revoked.")), "key {i}");
        let (code, _, err) = cli(&g, &["keys", "restore", &alias, "--url", &url]).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(post_chat(&g, &key, &mini()).await.0, 200, "restored at once too");
    }
    let (code, _, err) = cli(&g, &["keys", "rotate", "agent-0", "--url", &url]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&g, &["keys", "revoke", "nobody", "--url", &url]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no such key"), "{err}");
}

/// Polls `f` every 20 ms until it holds; the time it took (panics after `within`).
async fn took<F, Fut>(within: Duration, what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < within {
        if f().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {within:?}");
}

#[tokio::test]
async fn a_team_changed_on_one_node_holds_on_the_others_within_a_second() {
    let up = Upstream::start().await.unwrap();
    let fleet = Fleet::start(&config_for(&up.base_url, ""), "").await;
    let (a, b, c) = (fleet.node(0), fleet.node(1), fleet.node(2));
    let (s, _) = post(a, "/team/new", MASTER, json!({"team_id": "fleet-team", "max_budget": 0.000001})).await;
    assert_eq!(s, 200);
    let key = a.key(json!({"team_id": "fleet-team"})).await;
    let second = Duration::from_secs(1);
    took(second, "the team on node 2", || async { post_chat(b, &key, &mini()).await.0 == 429 }).await;
    let (s, _) = post(a, "/team/update", MASTER, json!({"team_id": "fleet-team", "max_budget": 1})).await;
    assert_eq!(s, 200);
    took(second, "the raised budget on node 3", || async { post_chat(c, &key, &mini()).await.0 == 200 }).await;
    let (s, _) = post(b, "/team/delete", MASTER, json!({"team_ids": ["fleet-team"]})).await;
    assert_eq!(s, 200);
    took(second, "the deletion on node 1", || async { post_chat(a, &key, &mini()).await.0 == 401 }).await;
    took(second, "the deletion on node 3", || async {
        admin_get(c, "/team/info?team_id=fleet-team").await["error"]["type"] == "team_not_found"
    })
    .await;
}

/// Starts fleet node `node` of `yaml` (its name from `SVC_NODE`, so that every node can run the same file).
async fn start_node(yaml: &str, node: &str) -> Gateway {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("svc.yaml");
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = svc();
    cmd.env("SVC_NODE", node).arg("serve").arg("--config").arg(&config).current_dir(dir.path());
    Gateway::launch(cmd, dir, config).await
}

async fn digests(g: &Gateway) -> Vec<(String, String, bool)> {
    let nodes = admin_get(g, "/fleet/nodes").await;
    let mut out: Vec<(String, String, bool)> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let digest = n["config_digest"].as_str().unwrap_or_default().to_string();
            (n["node"].as_str().unwrap_or_default().to_string(), digest, n["config_file_differs"] == true)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn each_node_reports_the_digest_of_its_file_and_a_different_file_is_flagged() {
    use sha2::Digest;
    let up = Upstream::start().await.unwrap();
    let db = svc_testkit::postgres::fresh_database().await;
    let yaml = node_config(&config_for(&up.base_url, ""), &db, "os.environ/SVC_NODE", "");
    let digest = hex::encode(sha2::Sha256::digest(yaml.as_bytes()));
    let (a, b) = tokio::join!(start_node(&yaml, "d1"), start_node(&yaml, "d2"));
    let same = vec![("d1".to_string(), digest.clone(), false), ("d2".to_string(), digest.clone(), false)];
    took(Duration::from_secs(10), "both nodes online with the file's digest", || async { digests(&a).await == same })
        .await;
    // Node 2's file changes (a comment) and is reloaded: its next heartbeat reports it, both are flagged.
    let changed = format!("# tuned on d2\n{yaml}");
    std::fs::write(&b.config, &changed).unwrap();
    let out = svc().env("SVC_NODE", "d2").arg("--config").arg(&b.config).args(["reload", "--url", &b.url]).output();
    let out = out.await.unwrap();
    let (code, err) = (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(code, 0, "{err}");
    let other = hex::encode(sha2::Sha256::digest(changed.as_bytes()));
    assert!(err.contains(&format!("(config {})", &other[..12])), "{err}");
    let flagged = vec![("d1".to_string(), digest.clone(), true), ("d2".to_string(), other.clone(), true)];
    took(Duration::from_secs(5), "the new digest flagged", || async { digests(&a).await == flagged }).await;
    let out =
        svc().env("SVC_NODE", "d1").arg("--config").arg(&a.config).args(["fleet", "status"]).output().await.unwrap();
    let (table, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{err}");
    for (node, d) in [("d1", &digest), ("d2", &other)] {
        let line = table.lines().find(|l| l.starts_with(node)).unwrap_or_default();
        assert!(line.contains(&format!("{}!", &d[..12])), "{table}");
    }
    assert!(err.contains("run another configuration file"), "{err}");
}
