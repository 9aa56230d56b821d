//! Upstream calls through the proxy of the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`), as behind a
//! corporate network: a plain-HTTP upstream is asked through the proxy in absolute form with the proxy's
//! credentials, an `https` one through a CONNECT tunnel, and a host in `NO_PROXY` directly.

use crate::harness::*;
use svc_testkit::proxy::ForwardProxy;
use svc_testkit::upstream::Upstream;

/// `svc serve` with `yaml` and the proxy variables given (and no others from the test's own environment).
async fn start_with_proxies(yaml: &str, vars: &[(&str, &str)]) -> Gateway {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("svc.yaml");
    let db = dir.path().join("svc.db");
    let yaml = yaml.replacen("server:\n", &format!("server:\n  database_url: sqlite://{}\n", db.display()), 1);
    // No background probe: the proxy records the first request of each connection, which is then the call.
    let yaml = yaml.replacen("gateway_settings:\n", "gateway_settings:\n  health_check_interval_seconds: 0\n", 1);
    std::fs::write(&config, yaml).unwrap();
    let mut cmd = svc();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
        cmd.env_remove(name).env_remove(name.to_lowercase());
    }
    for (name, value) in vars {
        cmd.env(name, value);
    }
    cmd.arg("serve").arg("--config").arg(&config).current_dir(dir.path());
    Gateway::launch(cmd, dir, config).await
}

#[tokio::test]
async fn plain_http_upstreams_go_through_the_proxy_and_no_proxy_hosts_do_not() {
    let up = Upstream::start().await.unwrap();
    let proxy = ForwardProxy::start(up.addr).await.unwrap();
    let proxy_url = proxy.url.replace("http://", "http://fleet:s3cret@");
    // `models.internal` resolves nowhere: only the proxy can reach it. 127.0.0.1 is in NO_PROXY.
    let yaml = config_with("http://models.internal/v1", &up.base_url, "");
    let g = start_with_proxies(&yaml, &[("HTTP_PROXY", &proxy_url), ("NO_PROXY", "127.0.0.1,localhost")]).await;
    let key = g.key(serde_json::json!({"team_id": "executor"})).await;

    let (status, _, body) = post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["model"], "openai/gpt-4.1-mini");
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].line, "POST http://models.internal/v1/chat/completions HTTP/1.1");
    // base64("fleet:s3cret")
    assert_eq!(seen[0].auth.as_deref(), Some("Basic ZmxlZXQ6czNjcmV0"));
    assert_eq!(up.requests().len(), 1);

    let (status, _, body) = post_chat(&g, &key, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(proxy.seen().len(), 1, "a NO_PROXY host went through the proxy: {:?}", proxy.seen());
    assert_eq!(up.requests().len(), 2);
}

#[tokio::test]
async fn https_upstreams_are_asked_through_a_connect_tunnel() {
    let up = Upstream::start().await.unwrap();
    let proxy = ForwardProxy::start(up.addr).await.unwrap();
    let proxy_url = proxy.url.replace("http://", "http://fleet:s3cret@");
    let yaml = config_for("https://models.internal/v1", "");
    let g = start_with_proxies(&yaml, &[("HTTPS_PROXY", &proxy_url)]).await;
    let key = g.key(serde_json::json!({"team_id": "executor"})).await;

    // The test proxy refuses the tunnel (it has no certificate the gateway would trust), so the call fails as
    // an unreachable upstream does; what matters is how it was asked for.
    let (status, _, body) = post_chat(&g, &key, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(status, 502, "{body}");
    let seen = proxy.seen();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(s.line, "CONNECT models.internal:443 HTTP/1.1");
        assert_eq!(s.auth.as_deref(), Some("Basic ZmxlZXQ6czNjcmV0"));
    }
    assert!(up.requests().is_empty());
}
