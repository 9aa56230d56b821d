//! The dashboard in process (`svc_gateway::app` driven with `tower::ServiceExt::oneshot`): its files (content
//! types, CSP, ETag and 304), signing in and out (cookie attributes, `Secure` behind a TLS proxy, wrong keys,
//! the attempt limit), the CSRF rule for cookie-authenticated changes, and the endpoints its pages read:
//! recent events, destinations, redelivery of a dead row, and the request counters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use svc_gateway::{app, AppState};
use tower::ServiceExt;

const MASTER: &str = "sk-master-ui-test";

const CONFIG: &str = "
model_list:
  - model_name: m
    params: { model: mock/m, input_cost_per_token: 0.001, output_cost_per_token: 0.002 }
gateway_settings:
  health_check_interval_seconds: 0
  teams:
    - { team_id: t, models: [m], budget_limit: 10 }
    - { team_id: u, models: [m] }
";

async fn state(dir: &tempfile::TempDir) -> AppState {
    let url = format!("sqlite://{}", dir.path().join("svc.db").display());
    let store = svc_store::Store::connect(&url).await.unwrap();
    let config = svc_config::load_str(CONFIG, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
    AppState::new(config, store, Some(MASTER)).await.unwrap()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap().to_string())
    }
}

async fn send(s: &AppState, method: &str, uri: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some(v) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let resp = app(s.clone()).oneshot(req.body(body).unwrap()).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    Answer { status, headers, body: resp.into_body().collect().await.unwrap().to_bytes().to_vec() }
}

/// Signs in; returns the `Cookie` header value and the CSRF token.
async fn sign_in(s: &AppState) -> (String, String) {
    let a = send(s, "POST", "/ui/login", &[], Some(json!({"key": MASTER}))).await;
    assert_eq!(a.status, StatusCode::OK);
    let cookie = a.header("set-cookie").unwrap();
    let pair = cookie.split(';').next().unwrap().to_string();
    (pair, a.json()["csrf_token"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn the_files_are_served_with_types_csp_and_etags() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let index = send(&s, "GET", "/ui", &[], None).await;
    assert_eq!(index.status, StatusCode::OK);
    assert_eq!(index.header("content-type").as_deref(), Some("text/html; charset=utf-8"));
    let csp = index.header("content-security-policy").unwrap();
    assert!(csp.starts_with("default-src 'self'; script-src 'self';"), "{csp}");
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(index.header("cache-control").as_deref(), Some("no-cache"));
    let html = String::from_utf8(index.body.clone()).unwrap();
    assert!(!html.contains("<script>") && !html.contains("style="), "no inline script or style");
    assert_eq!(send(&s, "GET", "/ui/", &[], None).await.body, index.body);

    // Every file the page names is served, with its type.
    let mut named = 0;
    for part in html.split("\"/ui/").skip(1) {
        let path = part.split('"').next().unwrap();
        let a = send(&s, "GET", &format!("/ui/{path}"), &[], None).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        let ty = a.header("content-type").unwrap();
        let want = if path.ends_with(".js") {
            "text/javascript"
        } else if path.ends_with(".css") {
            "text/css"
        } else {
            "image/svg+xml"
        };
        assert!(ty.starts_with(want), "{path}: {ty}");
        named += 1;
    }
    assert!(named >= 10, "{named} files named");

    let etag = index.header("etag").unwrap();
    let again = send(&s, "GET", "/ui", &[("if-none-match", &etag)], None).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());
    assert_eq!(again.header("etag"), Some(etag.clone()));
    let other = send(&s, "GET", "/ui", &[("if-none-match", "\"other\"")], None).await;
    assert_eq!(other.status, StatusCode::OK);

    let missing = send(&s, "GET", "/ui/js/nope.js", &[], None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn signing_in_sets_a_strict_http_only_cookie_and_a_wrong_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let a = send(&s, "POST", "/ui/login", &[], Some(json!({"key": MASTER}))).await;
    assert_eq!(a.status, StatusCode::OK);
    let cookie = a.header("set-cookie").unwrap();
    assert!(cookie.starts_with("svc_session="), "{cookie}");
    assert!(cookie.ends_with("; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200"), "{cookie}");
    let body = a.json();
    assert_eq!(body["role"], "master");
    let csrf = body["csrf_token"].as_str().unwrap();
    assert_eq!(csrf.len(), 64);
    assert!(!String::from_utf8_lossy(&a.body).contains(MASTER), "the key is never echoed");

    // The session answers who is signed in, with the same CSRF token (a reloaded page keeps working).
    let pair = cookie.split(';').next().unwrap();
    let who = send(&s, "GET", "/ui/session", &[("cookie", pair)], None).await;
    assert_eq!((who.status, who.json()["csrf_token"].as_str()), (StatusCode::OK, Some(csrf)));
    assert_eq!(send(&s, "GET", "/ui/session", &[], None).await.status, StatusCode::UNAUTHORIZED);

    let tls = send(&s, "POST", "/ui/login", &[("x-forwarded-proto", "https")], Some(json!({"key": MASTER}))).await;
    assert!(tls.header("set-cookie").unwrap().ends_with("; Secure"));

    let wrong = send(&s, "POST", "/ui/login", &[], Some(json!({"key": "sk-guess"}))).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.json()["error"]["message"], "That is neither the master key nor a virtual key of this gateway.");
    assert!(wrong.header("set-cookie").is_none());
    let unknown = send(&s, "POST", "/ui/login", &[], Some(json!({"password": "x"}))).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);

    // Ten attempts in a burst, then one every six seconds: guessing through the form is refused.
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(send(&s, "POST", "/ui/login", &[], Some(json!({"key": "sk-guess"}))).await.status);
    }
    assert_eq!(statuses.last(), Some(&StatusCode::TOO_MANY_REQUESTS), "{statuses:?}");
    let limited = send(&s, "POST", "/ui/login", &[], Some(json!({"key": MASTER}))).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.header("retry-after").is_some());
}

#[tokio::test]
async fn a_cookie_needs_the_csrf_token_to_change_anything_and_a_key_needs_none() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let (cookie, csrf) = sign_in(&s).await;
    let read = send(&s, "GET", "/key/list", &[("cookie", &cookie)], None).await;
    assert_eq!((read.status, read.json()["total_count"].as_u64()), (StatusCode::OK, Some(0)));

    let new_key = json!({"team_id": "t", "key_alias": "a"});
    let refused = send(&s, "POST", "/key/generate", &[("cookie", &cookie)], Some(new_key.clone())).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["error"]["message"], "missing or wrong CSRF token");
    let wrong = [("cookie", cookie.as_str()), ("x-csrf-token", "0000")];
    assert_eq!(send(&s, "POST", "/key/generate", &wrong, Some(new_key.clone())).await.status, StatusCode::FORBIDDEN);

    let ok = [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];
    let made = send(&s, "POST", "/key/generate", &ok, Some(new_key)).await;
    assert_eq!(made.status, StatusCode::OK);
    assert!(made.json()["key"].as_str().unwrap().starts_with("sk-"), "the secret is shown once, on creation");

    let bearer = format!("Bearer {MASTER}");
    let by_key = send(&s, "POST", "/key/generate", &[("authorization", &bearer)], Some(json!({"team_id": "t"}))).await;
    assert_eq!(by_key.status, StatusCode::OK, "a key needs no CSRF token");
    // A key present decides by itself, even beside a session cookie.
    let bad_key = [("cookie", cookie.as_str()), ("authorization", "Bearer sk-wrong")];
    assert_eq!(send(&s, "GET", "/key/list", &bad_key, None).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn signing_out_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let (cookie, csrf) = sign_in(&s).await;
    assert_eq!(send(&s, "POST", "/ui/logout", &[("cookie", &cookie)], None).await.status, StatusCode::FORBIDDEN);
    let out = send(&s, "POST", "/ui/logout", &[("cookie", &cookie), ("x-csrf-token", &csrf)], None).await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = send(&s, "GET", "/key/list", &[("cookie", &cookie)], None).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert_eq!(after.json()["error"]["message"], "Your dashboard session has ended; sign in again.");
    assert_eq!(send(&s, "GET", "/ui/session", &[("cookie", &cookie)], None).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn recent_events_destinations_and_redelivery_of_a_dead_row() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let envelope =
        json!({"event": "task.blocked", "version": "1", "data": {"title": "build", "message": "tests failed"}});
    let id = s
        .store()
        .outbox_enqueue(&svc_store::NewEvent {
            kind: "task.blocked",
            envelope: &envelope.to_string(),
            origin: Some("master"),
            deliveries: vec![("webhook:http://127.0.0.1:9/".into(), "d1".into())],
            ..Default::default()
        })
        .await
        .unwrap();
    s.store().outbox_dead(id, "webhook:http://127.0.0.1:9/", "connection refused").await.unwrap();
    let (cookie, csrf) = sign_in(&s).await;
    let auth = [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];

    let recent = send(&s, "GET", "/events/recent?state=dead", &auth, None).await;
    assert_eq!(recent.status, StatusCode::OK);
    let event = &recent.json()["data"][0];
    assert_eq!((event["id"].as_i64(), event["kind"].as_str()), (Some(id), Some("task.blocked")));
    assert_eq!((event["title"].as_str(), event["message"].as_str()), (Some("build"), Some("tests failed")));
    assert_eq!(event["deliveries"][0]["state"], "dead");
    assert_eq!(event["deliveries"][0]["last_error"], "connection refused");
    assert_eq!(event["deliveries"][0]["attempts"], 1);
    let none = send(&s, "GET", "/events/recent?state=pending", &auth, None).await;
    assert_eq!(none.json()["data"], json!([]));
    let bad = send(&s, "GET", "/events/recent?state=lost", &auth, None).await;
    assert_eq!((bad.status, bad.json()["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("state")));
    let big = send(&s, "GET", "/events/recent?limit=501", &auth, None).await;
    assert_eq!(big.status, StatusCode::BAD_REQUEST);

    let dests = send(&s, "GET", "/events/destinations", &auth, None).await.json();
    assert_eq!(dests["data"][0]["dead"], 1);
    assert_eq!(dests["data"][0]["pending"], 0);

    let again = send(&s, "POST", "/events/redeliver", &auth, Some(json!({"id": id}))).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json(), json!({"id": id, "redelivered": ["webhook:http://127.0.0.1:9/"]}));
    let dests = send(&s, "GET", "/events/destinations", &auth, None).await.json();
    assert_eq!((dests["data"][0]["dead"].as_i64(), dests["data"][0]["pending"].as_i64()), (Some(0), Some(1)));
    let twice = send(&s, "POST", "/events/redeliver", &auth, Some(json!({"id": id}))).await;
    assert_eq!(twice.status, StatusCode::NOT_FOUND);
    assert_eq!(twice.json()["error"]["message"], format!("event {id} has no dead delivery"));
    let no_token = send(&s, "POST", "/events/redeliver", &[("cookie", &cookie)], Some(json!({"id": id}))).await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_stats_count_model_requests_and_their_server_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let bearer = format!("Bearer {MASTER}");
    let auth = [("authorization", bearer.as_str())];
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(send(&s, "POST", "/v1/chat/completions", &auth, Some(chat)).await.status, StatusCode::OK);
    let unknown = json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]});
    assert!(send(&s, "POST", "/chat/completions", &auth, Some(unknown)).await.status.is_client_error());
    send(&s, "GET", "/v1/models", &auth, None).await;
    let stats = send(&s, "GET", "/gateway/stats", &auth, None).await;
    assert_eq!(stats.status, StatusCode::OK);
    let v = stats.json();
    assert_eq!((v["requests"].as_u64(), v["errors"].as_u64(), v["in_flight"].as_u64()), (Some(2), Some(0), Some(0)));
    assert!(v["started"].as_i64().unwrap() > 0);
    assert!(v["node"].is_string());
}

#[tokio::test]
async fn a_virtual_key_signs_in_to_a_read_only_view_of_its_own_team() {
    let dir = tempfile::tempdir().unwrap();
    let s = state(&dir).await;
    let bearer = format!("Bearer {MASTER}");
    let master = [("authorization", bearer.as_str())];
    let mut secrets = Vec::new();
    for (team, alias) in [("t", "t-key"), ("u", "u-key")] {
        let made = send(&s, "POST", "/key/generate", &master, Some(json!({"team_id": team, "key_alias": alias}))).await;
        let secret = made.json()["key"].as_str().unwrap().to_string();
        let auth = format!("Bearer {secret}");
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(
            send(&s, "POST", "/chat/completions", &[("authorization", &auth)], Some(chat)).await.status,
            StatusCode::OK
        );
        secrets.push(secret);
    }
    // Spend records are group-committed: wait for both.
    for _ in 0..100 {
        if send(&s, "GET", "/spend/logs", &master, None).await.json()["data"].as_array().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let login = send(&s, "POST", "/ui/login", &[], Some(json!({"key": secrets[0]}))).await;
    assert_eq!(login.status, StatusCode::OK);
    assert_eq!((login.json()["role"].as_str(), login.json()["team_id"].as_str()), (Some("team"), Some("t")));
    let cookie = login.header("set-cookie").unwrap().split(';').next().unwrap().to_string();
    let csrf = login.json()["csrf_token"].as_str().unwrap().to_string();
    let view = [("cookie", cookie.as_str())];

    assert_eq!(send(&s, "GET", "/team/info?team_id=t", &view, None).await.status, StatusCode::OK);
    let other = send(&s, "GET", "/team/info?team_id=u", &view, None).await;
    assert_eq!(
        (other.status, other.json()["error"]["message"].as_str()),
        (StatusCode::FORBIDDEN, Some("a virtual key sees only its own team"))
    );
    let rows = send(&s, "GET", "/spend/logs", &view, None).await.json();
    let teams: Vec<&str> = rows["data"].as_array().unwrap().iter().map(|r| r["team_id"].as_str().unwrap()).collect();
    assert_eq!(teams, vec!["t"], "only its own team's records");
    assert_eq!(send(&s, "GET", "/spend/logs?team_id=u", &view, None).await.status, StatusCode::FORBIDDEN);
    assert_eq!(send(&s, "GET", "/spend/logs?key=u-key", &view, None).await.status, StatusCode::NOT_FOUND);
    for path in ["/key/list", "/team/list", "/gateway/stats", "/events/recent", "/health/models"] {
        assert_eq!(send(&s, "GET", path, &view, None).await.status, StatusCode::FORBIDDEN, "{path}");
    }
    let write = [("cookie", cookie.as_str()), ("x-csrf-token", csrf.as_str())];
    let refused = send(&s, "POST", "/key/generate", &write, Some(json!({"team_id": "t"}))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["error"]["message"], "the team view of the dashboard is read-only");

    // Revoking the key ends its sessions.
    assert_eq!(send(&s, "POST", "/key/block", &master, Some(json!({"key": "t-key"}))).await.status, StatusCode::OK);
    assert_eq!(send(&s, "GET", "/team/info?team_id=t", &view, None).await.status, StatusCode::UNAUTHORIZED);
    let wrong = send(&s, "POST", "/ui/login", &[], Some(json!({"key": "sk-svc-nobody"}))).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
}
