//! Key lifecycle through the admin API and the CLI: create, use, rotate, revoke, expire.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use svc_testkit::upstream::Upstream;

async fn admin(g: &Gateway, path: &str, body: Value) -> (u16, Value) {
    let r = client().post(g.path(path)).bearer_auth(MASTER).json(&body).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn lifecycle_through_the_admin_api() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let (s, created) = admin(
        &g,
        "/key/generate",
        json!({"team_id": "executor", "agent_role": "coder", "key_alias": "coder-1", "metadata": {"owner": "ci"}}),
    )
    .await;
    assert_eq!(s, 200, "{created}");
    let key = created["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("sk-svc-") && key.len() >= 7 + 32, "{key}");
    assert_eq!((created["team_id"].as_str(), created["key_alias"].as_str()), (Some("executor"), Some("coder-1")));
    let id = created["key_id"].as_str().unwrap().to_string();
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 200);

    // Info and list never show the secret.
    let info: Value = admin_get(&g, "/key/info?key=coder-1").await;
    assert_eq!(info["info"]["key_id"], id.as_str());
    assert!(!info.to_string().contains(&key));
    let list: Value = admin_get(&g, "/key/list").await;
    assert_eq!(list["total_count"], 1);
    assert!(!list.to_string().contains(&key));

    // Rotation: new secret, same identity; the old secret stops working at once.
    let (s, rotated) = admin(&g, "/key/regenerate", json!({"key": key})).await;
    assert_eq!(s, 200);
    let new_key = rotated["key"].as_str().unwrap().to_string();
    assert_ne!(new_key, key);
    assert_eq!(rotated["key_id"], id.as_str());
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 401);
    assert_eq!(post_chat(&g, &new_key, &chat("openai/gpt-4.1-mini")).await.0, 200);

    // Update and block.
    let (s, updated) = admin(&g, "/key/update", json!({"key": "coder-1", "models": ["openai/gpt-4.1-nano"]})).await;
    assert_eq!((s, updated["models"].clone()), (200, json!(["openai/gpt-4.1-nano"])));
    let (s, body) = admin(&g, "/key/update", json!({"key": "coder-1", "models": ["anthropic/claude-opus-4-1"]})).await;
    assert_eq!(s, 400, "a key may only name its team's models: {body}");
    // The fields of creation and change are one list: the team may be repeated, never changed; `user_id` lands
    // in the metadata as at creation.
    let team = updated["team_id"].as_str().unwrap().to_string();
    let (s, body) = admin(&g, "/key/update", json!({"key": "coder-1", "team_id": team, "user_id": "u-7"})).await;
    assert_eq!((s, body["metadata"]["user_id"].as_str()), (200, Some("u-7")), "{body}");
    let (s, body) = admin(&g, "/key/update", json!({"key": "coder-1", "team_id": "zzz"})).await;
    assert_eq!((s, body["error"]["param"].as_str()), (400, Some("team_id")), "{body}");
    let (s, _) = admin(&g, "/key/block", json!({"key": "coder-1"})).await;
    assert_eq!(s, 200);
    let (s, _, b) = post_chat(&g, &new_key, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!((s, b["error"]["message"].as_str()), (401, Some("This API key has been revoked.")));
    admin(&g, "/key/unblock", json!({"key": "coder-1"})).await;
    assert_eq!(post_chat(&g, &new_key, &chat("openai/gpt-4.1-nano")).await.0, 200);

    // Delete.
    let (s, del) = admin(&g, "/key/delete", json!({"keys": [new_key.clone()]})).await;
    assert_eq!((s, del), (200, json!({"deleted_keys": [id]})));
    assert_eq!(post_chat(&g, &new_key, &chat("openai/gpt-4.1-nano")).await.0, 401);

    // Bad requests.
    let (s, b) = admin(&g, "/key/generate", json!({"team_id": "nobody"})).await;
    assert_eq!((s, b["error"]["param"].as_str()), (400, Some("team_id")));
    let (s, b) =
        admin(&g, "/key/generate", json!({"team_id": "executor", "models": ["anthropic/claude-opus-4-1"]})).await;
    assert_eq!((s, b["error"]["param"].as_str()), (400, Some("models")));
    let (s, b) = admin(&g, "/key/generate", json!({"team_id": "executor", "soft_budget": 3})).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = admin(&g, "/key/generate", json!({"team_id": "executor", "key": "sk-svc-mine"})).await;
    assert_eq!((s, b["error"]["param"].as_str()), (400, Some("key")), "svc makes every secret: {b}");
    let (s, b) = admin(&g, "/key/generate", json!({"team_id": "executor", "blocked": true})).await;
    assert_eq!((s, b["blocked"].as_bool()), (200, Some(true)), "{b}");
    let blocked = b["key"].as_str().unwrap_or_default().to_string();
    assert_eq!(post_chat(&g, &blocked, &chat("openai/gpt-4.1-nano")).await.0, 401, "made blocked");
    let (s, _) = admin(&g, "/key/generate", json!({"team_id": "executor", "key_alias": "dup"})).await;
    assert_eq!(s, 200);
    let (s, b) = admin(&g, "/key/generate", json!({"team_id": "executor", "key_alias": "dup"})).await;
    assert_eq!(s, 400, "{b}");

    // Teams.
    let teams: Value = admin_get(&g, "/team/list").await;
    assert_eq!(teams.as_array().unwrap().len(), 2);
    let r = client().get(g.path("/team/info?team_id=executor")).bearer_auth(MASTER).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(client().get(g.path("/team/info?team_id=zzz")).bearer_auth(MASTER).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn keys_expire() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let key = g.key(json!({"team_id": "executor", "expires": "1s"})).await;
    assert_eq!(post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await.0, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (s, _, b) = post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!((s, b["error"]["message"].as_str()), (401, Some("Expired key.")));
}

async fn cli(g: &Gateway, args: &[&str]) -> (i32, String, String) {
    let out = svc().arg("--config").arg(&g.config).args(args).current_dir(g.dir_path()).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn cli_changes_reach_a_running_server() {
    let up = Upstream::start().await.unwrap();
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let (code, stdout, stderr) = cli(
        &g,
        &["keys", "create", "--team", "executor", "--role", "tester", "--alias", "cli-key", "--expires", "30d"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let key = stdout.trim().to_string();
    assert_eq!(stdout, format!("{key}\n"), "the key alone on stdout");
    // The server picks the new key up within its one-second poll.
    assert_eq!(status_within(&g, &key, 200).await, 200);
    let (code, list, _) = cli(&g, &["keys", "list"]).await;
    assert_eq!(code, 0);
    assert!(list.contains("cli-key") && list.contains("tester") && list.contains("active"), "{list}");
    assert!(!list.contains(&key));
    let (code, rotated, _) = cli(&g, &["keys", "rotate", "cli-key"]).await;
    assert_eq!(code, 0);
    let rotated = rotated.trim().to_string();
    let (code, _, stderr) = cli(&g, &["keys", "revoke", "cli-key"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(status_within(&g, &rotated, 401).await, 401);
    // A revoked key is not rotated: its new secret could never work.
    let (code, stdout, stderr) = cli(&g, &["keys", "rotate", "cli-key"]).await;
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    assert!(stderr.contains("this key is revoked"), "{stderr}");
    // `restore` lifts the revocation; `update` changes what it names; `delete` removes the key.
    let (code, _, stderr) = cli(&g, &["keys", "restore", "cli-key"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(status_within(&g, &rotated, 200).await, 200, "restored");
    let (code, _, stderr) = cli(&g, &["keys", "update", "cli-key", "--rpm-limit", "7", "--role", "reviewer"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = cli(&g, &["keys", "list", "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let updated = listed.as_array().unwrap().iter().find(|k| k["key_alias"] == "cli-key").unwrap();
    assert_eq!((updated["rpm_limit"].as_i64(), updated["agent_role"].as_str()), (Some(7), Some("reviewer")));
    assert!(updated["expires"].is_string(), "what update does not name stays (its 30d expiry): {updated}");
    let (code, _, stderr) = cli(&g, &["keys", "update", "cli-key", "--models", "anthropic/claude-opus-4-1"]).await;
    assert_eq!(code, 1, "the team's models bound the key's: {stderr}");
    let (code, _, stderr) = cli(&g, &["keys", "delete", "cli-key"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (_, table, _) = cli(&g, &["keys", "list"]).await;
    assert!(!table.contains("cli-key"), "{table}");
    // `--events` narrows what a key may post on POST /events; `keys list` shows it.
    let (code, _, stderr) =
        cli(&g, &["keys", "create", "--team", "executor", "--alias", "tasks", "--events", "task.*,agent.*"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = cli(&g, &["keys", "list", "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let narrow = listed.as_array().unwrap().iter().find(|k| k["key_alias"] == "tasks").unwrap();
    assert_eq!(narrow["events"], serde_json::json!(["task.*", "agent.*"]));
    let (_, table, _) = cli(&g, &["keys", "list"]).await;
    assert!(table.lines().any(|l| l.contains("tasks") && l.ends_with("task.*,agent.*")), "{table}");
    let (code, _, stderr) = cli(&g, &["keys", "create", "--team", "executor", "--events", "budget.*"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("`budget.*` takes only kinds the gateway emits itself"), "{stderr}");
    let (code, _, stderr) = cli(&g, &["keys", "create", "--team", "ghosts"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("unknown team `ghosts`"), "{stderr}");
    let (code, teams, stderr) = cli(&g, &["teams", "list"]).await;
    assert_eq!(code, 0);
    assert!(teams.contains("executor") && teams.contains("50.00"), "{teams}");
    assert!(!stderr.contains("differs"), "{stderr}");
    // The file edited while the gateway runs: `teams list` shows what runs and names the difference; the CLI
    // does not apply the file (keys are still checked against the running teams).
    let yaml = std::fs::read_to_string(&g.config).unwrap();
    std::fs::write(&g.config, yaml.replacen("budget_limit: 50", "budget_limit: 60", 1).replace("    - team_id: orchestrator\n      budget_limit: 200\n      models: [anthropic/claude-opus-4-1]\n", "    - team_id: orchestrator\n      budget_limit: 200\n      models: [anthropic/claude-opus-4-1]\n    - team_id: newcomers\n      models: [openai/gpt-4.1-nano]\n")).unwrap();
    let (code, teams, stderr) = cli(&g, &["teams", "list"]).await;
    assert_eq!(code, 0);
    let executor = teams.lines().find(|l| l.starts_with("executor")).unwrap_or_default();
    assert!(executor.contains("50.00") && !executor.contains("60.00"), "{teams}");
    assert!(stderr.contains("the config file differs from what runs"), "{stderr}");
    assert!(stderr.contains("team executor: budget_limit 60.00 in the file, 50.00 running"), "{stderr}");
    assert!(stderr.contains("team newcomers: in the file, not running"), "{stderr}");
    let (code, _, stderr) = cli(&g, &["keys", "create", "--team", "newcomers"]).await;
    assert_eq!(code, 1, "a team that does not run yet: {stderr}");
    assert!(stderr.contains("unknown team `newcomers`"), "{stderr}");
}

/// The status of a chat request with `key`, asked every 100 ms until it is `want` (4 s at most): a running
/// server hears of a key changed by the CLI within its one-second poll.
async fn status_within(g: &Gateway, key: &str, want: u16) -> u16 {
    let mut status = 0;
    for _ in 0..40 {
        status = post_chat(g, key, &chat("openai/gpt-4.1-mini")).await.0;
        if status == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    status
}
