//! The gateway terminating TLS itself (`server.tls`), with a certificate the test makes and signs by a CA of
//! its own: answers and streams over https to a client that trusts that CA; plain HTTP and clients that do not
//! trust it get no answer; a key that is not the certificate's stops `svc serve` before it listens.

use crate::harness::*;
use futures::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use svc_testkit::upstream::Upstream;

/// A CA and a certificate it signed for `localhost` and 127.0.0.1, as PEM: (ca, cert, key).
fn issued() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

fn tls_server(dir: &std::path::Path, cert: &str, key: &str) -> String {
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    format!(
        "  tls:\n    cert_file: {}\n    key_file: {}\n",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    )
}

#[tokio::test]
async fn the_gateway_serves_https_with_its_own_certificate() {
    let up = Upstream::start().await.unwrap();
    let files = tempfile::tempdir().unwrap();
    let (ca, cert, key) = issued();
    let g = Gateway::start(&config_for(&up.base_url, &tls_server(files.path(), &cert, &key))).await;
    assert!(g.url.starts_with("https://127.0.0.1:"), "{}", g.url);
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap();
    let r = trusting.post(g.path("/v1/chat/completions")).bearer_auth(MASTER).json(&chat("openai/gpt-4.1-mini"));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion", "{body}");
    // A stream, over HTTP/2 when the client offers it.
    let mut stream_body = chat("openai/gpt-4.1-mini");
    stream_body["stream"] = serde_json::json!(true);
    let r = trusting.post(g.path("/v1/chat/completions")).bearer_auth(MASTER).json(&stream_body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut text = String::new();
    let mut chunks = r.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Plain HTTP on the TLS port, and a client that does not trust the CA: no answer.
    let plain = g.url.replace("https://", "http://");
    assert!(client().get(format!("{plain}/health")).send().await.is_err(), "plain HTTP got an answer");
    assert!(client().get(g.path("/health")).send().await.is_err(), "an untrusting client got an answer");
    assert_eq!(trusting.get(g.path("/health")).send().await.unwrap().status(), 200);
    // The dashboard's session cookie is `Secure` over the gateway's own TLS.
    let login = trusting.post(g.path("/ui/login")).json(&serde_json::json!({"key": MASTER})).send().await.unwrap();
    assert_eq!(login.status(), 200);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");
}

#[tokio::test]
async fn a_key_that_is_not_the_certificates_stops_the_start() {
    let files = tempfile::tempdir().unwrap();
    let (_, cert, _) = issued();
    let (_, _, other_key) = issued();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("svc.yaml");
    let yaml = config_for("http://127.0.0.1:9/v1", &tls_server(files.path(), &cert, &other_key));
    std::fs::write(
        &config,
        yaml.replacen(
            "server:\n",
            &format!("server:\n  database_url: sqlite://{}\n", dir.path().join("svc.db").display()),
            1,
        ),
    )
    .unwrap();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        svc().arg("serve").arg("--config").arg(&config).current_dir(dir.path()).output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("server.tls: the certificate and the key do not go together"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}
