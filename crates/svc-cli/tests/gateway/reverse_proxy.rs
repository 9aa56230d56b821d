//! The README's nginx example (`examples/nginx/svc-proxy.conf`) in front of the real gateway: Debian's nginx
//! with the example's location directives, a 60-event answer streamed through both, and every event arriving
//! as the upstream sent it (one by one, 50 ms apart), not gathered in nginx's buffers.

use crate::harness::*;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use svc_testkit::upstream::Upstream;

const NGINX: &str = "/usr/sbin/nginx";

/// nginx on `port` with the example's location, proxying to the gateway at `gateway` (host:port), in `dir`.
fn nginx_conf(dir: &std::path::Path, port: u16, gateway: &str) -> String {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nginx/svc-proxy.conf");
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\nevents {{}}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {d}/body;\nproxy_temp_path {d}/proxy;\nfastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi;\nscgi_temp_path {d}/scgi;\n\
         upstream svc_gateway {{ server {gateway}; keepalive 8; }}\n\
         server {{ listen 127.0.0.1:{port}; location / {{ include {}; }} }}\n}}\n",
        example.display()
    )
}

#[tokio::test]
async fn the_nginx_example_streams_every_event_as_sent() {
    assert!(std::path::Path::new(NGINX).exists(), "{NGINX} missing: scripts/test.sh installs Debian's nginx-light");
    let up = Upstream::start().await.unwrap();
    up.set(|b| {
        b.content = "abcdefghij".repeat(6);
        b.chunks = 60;
        b.chunk_delay = Duration::from_millis(50);
    });
    let g = Gateway::start(&config_for(&up.base_url, "")).await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(dir.path(), port, g.url.trim_start_matches("http://"))).unwrap();
    let mut nginx = tokio::process::Command::new(NGINX)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {:?}",
            std::fs::read_to_string(dir.path().join("error.log"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let body = json!({"model": "openai/gpt-4.1-mini", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = client()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .bearer_auth(MASTER)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut stream = r.bytes_stream();
    let mut pending = String::new();
    let mut arrivals: Vec<Instant> = Vec::new();
    let mut text = String::new();
    let mut done = false;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap() {
        pending.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else { continue };
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(data).unwrap();
            if let Some(piece) = v["choices"][0]["delta"]["content"].as_str().filter(|p| !p.is_empty()) {
                text.push_str(piece);
                arrivals.push(Instant::now());
            }
        }
    }
    assert!(done, "the stream ended with [DONE]");
    assert_eq!(text, "abcdefghij".repeat(6));
    assert_eq!(arrivals.len(), 60, "each content event arrived as one event");
    // Sent 50 ms apart: arriving one by one, most come 20 ms or more after the one before (buffering would bring
    // them in bursts), and the whole answer takes as long through nginx as the upstream took to send it.
    let spaced = arrivals.windows(2).filter(|w| w[1] - w[0] >= Duration::from_millis(20)).count();
    assert!(spaced >= 50, "only {spaced} of 59 events came apart from the one before: buffered");
    assert!(arrivals[59] - arrivals[0] >= Duration::from_millis(2_500), "{:?}", arrivals[59] - arrivals[0]);
    nginx.start_kill().unwrap();
    let _ = nginx.wait().await;
}
