//! Every string a client chooses that the gateway keeps, through the real binary: at its bound it is stored
//! whole, one byte past it the request is refused naming it (README, "Limits"). And the attack of a huge model
//! name through a wildcard alias leaves the store as it was.

use crate::harness::*;
use serde_json::{json, Value};

const CONFIG: &str = "server:\n  host: 127.0.0.1\n  port: 0\n\
model_list:
  - model_name: 'claude-*'
    params: { model: 'mock/*' }
gateway_settings:
  teams:
    - team_id: t
      models: ['claude-*']
";

/// Posts a chat completion for `model` with `headers`; status and answer.
async fn chat_with(g: &Gateway, key: &str, model: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut r = client().post(g.path("/v1/chat/completions")).bearer_auth(key).json(&chat(model));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The newest spend record.
async fn last_record(g: &Gateway) -> Value {
    admin_get(g, "/spend/logs?limit=1").await["data"][0].clone()
}

#[tokio::test]
async fn request_strings_are_stored_whole_at_their_bound_and_refused_past_it() {
    let g = Gateway::start(CONFIG).await;
    let key = g.key(json!({"team_id": "t"})).await;
    // The model name, through the wildcard alias: 256 bytes.
    let at = format!("claude-{}", "m".repeat(256 - 7));
    assert_eq!(chat_with(&g, &key, &at, &[]).await.0, 200);
    let r = last_record(&g).await;
    assert_eq!((r["model"].as_str(), r["upstream_model"].as_str()), (Some(at.as_str()), Some(at.as_str())));
    let (status, answer) = chat_with(&g, &key, &format!("{at}m"), &[]).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (400, Some("model")));

    // The session id (128 bytes) and the client family (64).
    let session = "s".repeat(128);
    let agent = format!("{}/1.0 (linux)", "c".repeat(64));
    let headers = [("x-session-id", session.as_str()), ("user-agent", agent.as_str())];
    assert_eq!(chat_with(&g, &key, "claude-a", &headers).await.0, 200);
    let r = last_record(&g).await;
    assert_eq!(r["session_id"].as_str(), Some(session.as_str()));
    assert_eq!(r["client"].as_str(), Some("c".repeat(64).as_str()));
    let longer = format!("{session}s");
    let (status, answer) = chat_with(&g, &key, "claude-a", &[("x-session-id", &longer)]).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (400, Some("x-session-id")));
    let longer = format!("{}/1.0", "c".repeat(65));
    let (status, answer) = chat_with(&g, &key, "claude-a", &[("user-agent", &longer)]).await;
    assert_eq!((status, answer["error"]["param"].as_str()), (400, Some("user-agent")));

    // The request id (128 bytes) is kept; a longer one is replaced by the gateway's own.
    let id = "r".repeat(128);
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(&key).header("x-request-id", &id);
    let r = r.json(&chat("claude-a")).send().await.unwrap();
    assert_eq!(r.headers()["x-request-id"], id.as_str());
    assert_eq!(last_record(&g).await["request_id"].as_str(), Some(id.as_str()));
    let longer = format!("{id}r");
    let r = client().post(g.path("/v1/chat/completions")).bearer_auth(&key).header("x-request-id", &longer);
    let r = r.json(&chat("claude-a")).send().await.unwrap();
    let given = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(given.len(), 36, "a UUID of the gateway's: {given}");
    assert_eq!(last_record(&g).await["request_id"].as_str(), Some(given.as_str()));
}

#[tokio::test]
async fn key_fields_are_stored_whole_at_their_bound_and_refused_past_it() {
    let g = Gateway::start(CONFIG).await;
    let generate = |body: Value| {
        let r = client().post(g.path("/key/generate")).bearer_auth(MASTER).json(&body);
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // `{"k":"…"}` is 8 bytes of JSON around the value.
    let metadata = json!({"k": "v".repeat(16 * 1024 - 8)});
    let at = json!({"team_id": "t", "key_alias": "a".repeat(128), "agent_role": "r".repeat(128), "metadata": metadata});
    let (status, made) = generate(at).await;
    assert_eq!(status, 200, "{made}");
    let info = admin_get(&g, &format!("/key/info?key={}", made["key_id"].as_str().unwrap())).await;
    let info = if info["info"].is_object() { info["info"].clone() } else { info };
    assert_eq!(info["key_alias"].as_str(), Some("a".repeat(128).as_str()));
    assert_eq!(info["agent_role"].as_str(), Some("r".repeat(128).as_str()));
    assert_eq!(info["metadata"], metadata);
    let (status, with_user) = generate(json!({"team_id": "t", "user_id": "u".repeat(256)})).await;
    assert_eq!(status, 200, "{with_user}");
    let info = admin_get(&g, &format!("/key/info?key={}", with_user["key_id"].as_str().unwrap())).await;
    let info = if info["info"].is_object() { info["info"].clone() } else { info };
    assert_eq!(info["metadata"]["user_id"].as_str(), Some("u".repeat(256).as_str()));
    for (field, longer) in [
        ("key_alias", json!("a".repeat(129))),
        ("agent_role", json!("r".repeat(129))),
        ("user_id", json!("u".repeat(257))),
        ("metadata", json!({"k": "v".repeat(16 * 1024 - 7)})),
        ("models", json!(vec!["claude-*"; 257])),
        ("events", json!(vec!["task.*"; 65])),
    ] {
        let mut body = json!({"team_id": "t"});
        body[field] = longer.clone();
        let (status, answer) = generate(body).await;
        assert_eq!((status, answer["error"]["param"].as_str()), (400, Some(field)), "{field}: {answer}");
        let update = json!({"key": made["key_id"], field: longer});
        if field != "user_id" {
            let r = client().post(g.path("/key/update")).bearer_auth(MASTER).json(&update).send().await.unwrap();
            assert_eq!(r.status(), 400, "update of {field}");
        }
    }
}

#[tokio::test]
async fn posted_events_are_stored_whole_at_their_bound_and_refused_past_it() {
    let g = Gateway::start(CONFIG).await;
    let post = |body: Value| {
        let r = client().post(g.path("/events")).bearer_auth(MASTER).json(&body);
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    // `{"x":"…"}` is 8 bytes of JSON around the value.
    let at = json!({"event": "task.created", "agent": "a".repeat(128), "title": "t".repeat(256),
        "meta": {"swarm": "s".repeat(128), "build": "b".repeat(128)}, "data": {"x": "d".repeat(16 * 1024 - 8)}});
    let (status, envelope) = post(at.clone()).await;
    assert_eq!(status, 202, "{envelope}");
    assert_eq!(envelope["agent"].as_str().map(str::len), Some(128));
    assert_eq!(envelope["data"]["x"].as_str().map(str::len), Some(16 * 1024 - 8));
    for (param, path, longer) in [
        ("agent", vec!["agent"], json!("a".repeat(129))),
        ("title", vec!["title"], json!("t".repeat(257))),
        ("meta.swarm", vec!["meta", "swarm"], json!("s".repeat(129))),
        ("meta.build", vec!["meta", "build"], json!("b".repeat(129))),
        ("data", vec!["data", "x"], json!("d".repeat(16 * 1024 - 7))),
    ] {
        let mut body = at.clone();
        match path[..] {
            [one] => body[one] = longer,
            [a, b] => body[a][b] = longer,
            _ => unreachable!(),
        }
        let (status, answer) = post(body).await;
        assert_eq!((status, answer["error"]["param"].as_str()), (400, Some(param)), "{param}: {answer}");
    }
}

#[tokio::test]
async fn a_huge_model_name_through_a_wildcard_alias_does_not_grow_the_store() {
    let g = Gateway::start(CONFIG).await;
    let key = g.key(json!({"team_id": "t"})).await;
    let size = |g: &Gateway| {
        ["svc.db", "svc.db-wal"]
            .iter()
            .map(|f| std::fs::metadata(g.dir_path().join(f)).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    assert_eq!(chat_with(&g, &key, "claude-a", &[]).await.0, 200);
    g.store().await;
    let before = size(&g);
    let huge = format!("claude-{}", "x".repeat(5 << 20));
    for _ in 0..20 {
        let (status, answer) = chat_with(&g, &key, &huge, &[]).await;
        assert_eq!((status, answer["error"]["param"].as_str()), (400, Some("model")));
        assert!(answer.to_string().len() < 1024, "the name is not echoed back");
    }
    g.store().await;
    let after = size(&g);
    assert!(after < before + (1 << 20), "the store grew from {before} to {after} bytes");
    assert!(g.log_text().len() < 1 << 20, "the log holds no name");
}
