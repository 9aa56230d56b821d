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

/// A client that trusts the test CA `ca` (PEM).
fn client_trusting(ca: &str) -> reqwest::Client {
    let root = reqwest::Certificate::from_pem(ca.as_bytes()).unwrap();
    reqwest::Client::builder().add_root_certificate(root).timeout(std::time::Duration::from_secs(20)).build().unwrap()
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
    let trusting = client_trusting(&ca);
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

    // A new certificate (of another CA) in the same files, and SIGHUP: new connections get it.
    let (new_ca, new_cert, new_key) = issued();
    tls_server(files.path(), &new_cert, &new_key);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(g.pid() as i32), nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !g.log_text().contains("configuration reloaded") {
        assert!(std::time::Instant::now() < deadline, "{}", g.log_text());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let trusting_new = client_trusting(&new_ca);
    assert_eq!(trusting_new.get(g.path("/health")).send().await.unwrap().status(), 200, "the new certificate");
    let old_only = client_trusting(&ca);
    assert!(old_only.get(g.path("/health")).send().await.is_err(), "the old certificate is no longer served");
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

/// A TLS front of the test's own for `to` (the fake upstream), with `cert`/`key` (PEM): its port.
async fn tls_front(to: std::net::SocketAddr, cert: &str, key: &str) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut up)) = (acceptor.accept(tcp).await, tokio::net::TcpStream::connect(to).await)
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    port
}

/// Upstreams behind a private CA: a deployment with `ssl_ca_file` is reached over https; one without it is
/// refused by its certificate (502); `gateway_settings.ssl_ca_file` gives the CA to every deployment.
#[tokio::test]
async fn upstreams_behind_a_private_ca_are_trusted_with_ssl_ca_file() {
    let up = Upstream::start().await.unwrap();
    let (ca, cert, key) = issued();
    let port = tls_front(up.addr, &cert, &key).await;
    let files = tempfile::tempdir().unwrap();
    let ca_file = files.path().join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let https = format!("https://127.0.0.1:{port}/v1");
    let own = config_for(&https, "").replacen(
        "      api_key: upstream-secret\n",
        &format!("      api_key: upstream-secret\n      ssl_ca_file: {}\n", ca_file.display()),
        1,
    );
    let g = Gateway::start(&own).await;
    let (status, _, body) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-mini")).await;
    assert_eq!(status, 200, "the deployment with the CA: {body}");
    let (status, _, body) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!((status, body["error"]["type"].as_str()), (502, Some("upstream_unreachable")), "{body}");
    let global = config_for(&https, "").replacen(
        "gateway_settings:\n",
        &format!("gateway_settings:\n  ssl_ca_file: {}\n", ca_file.display()),
        1,
    );
    let g = Gateway::start(&global).await;
    let (status, _, body) = post_chat(&g, MASTER, &chat("openai/gpt-4.1-nano")).await;
    assert_eq!(status, 200, "the CA of gateway_settings: {body}");
}
