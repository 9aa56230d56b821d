//! The client against real upstreams on loopback: which connections calls go on, counted where they are
//! accepted.
#![allow(clippy::disallowed_methods)]

use super::{Call, UpstreamClient};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn client() -> UpstreamClient {
    UpstreamClient::new().unwrap_or_else(|e| panic!("{e}"))
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Answers `/long` with 256 KiB, `/sse` with a chunked event stream ending in `data: [DONE]`, and anything else
/// with `ok`.
async fn answer(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    use http_body_util::BodyExt;
    let body = match req.uri().path() {
        "/long" => Full::new(Bytes::from(vec![b'x'; 256 * 1024])).boxed(),
        "/sse" => {
            let events = ["data: {\"n\":1}\n\n", "data: [DONE]\n\n"]
                .map(|e| Ok::<_, Infallible>(hyper::body::Frame::data(Bytes::from_static(e.as_bytes()))));
            BodyExt::boxed(http_body_util::StreamBody::new(futures::stream::iter(events)))
        }
        _ => Full::new(Bytes::from("ok")).boxed(),
    };
    Ok(Response::new(body))
}

/// A server on loopback that runs `serve` on each connection it accepts: its address and how many it accepted.
async fn upstream<F, Fut>(serve: F) -> (std::net::SocketAddr, Arc<AtomicUsize>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(tcp));
        }
    });
    (addr, accepted)
}

/// An HTTP/1.1 upstream (keep-alive) on loopback: its base URL and how many connections it has accepted.
async fn http1_upstream() -> (String, Arc<AtomicUsize>) {
    let (addr, accepted) = upstream(|tcp| async move {
        let service = hyper::service::service_fn(answer);
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
    })
    .await;
    (format!("http://{addr}"), accepted)
}

async fn get(client: &UpstreamClient, url: &str) -> Bytes {
    let endpoint = client.endpoint(url).unwrap_or_else(|| panic!("{url}"));
    let answer = client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status(), 200);
    answer.bytes(usize::MAX).await.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_host_header_names_the_port_only_when_it_is_not_the_schemes_own() {
    let client = client();
    for (url, host) in [
        ("http://127.0.0.1:8080/v1/chat/completions", "127.0.0.1:8080"),
        ("https://api.openai.com/v1/models", "api.openai.com"),
        ("http://upstream:80/v1", "upstream"),
        ("https://upstream:443/v1", "upstream"),
        ("https://upstream:80/v1", "upstream:80"),
        ("http://[::1]:9000/v1", "[::1]:9000"),
    ] {
        let endpoint = client.endpoint(url).unwrap_or_else(|| panic!("{url}"));
        assert_eq!(endpoint.host, host, "{url}");
        assert_eq!(endpoint.uri, url);
    }
    assert!(client.endpoint("not a url").is_none());
    assert!(client.endpoint("/v1/no-host").is_none());
}

#[test]
fn endpoints_of_one_origin_share_its_connections_and_others_do_not() {
    let client = client();
    let a = client.endpoint("http://127.0.0.1:9/v1/chat/completions").unwrap_or_else(|| panic!("a"));
    let b = client.endpoint("http://127.0.0.1:9/v1/models").unwrap_or_else(|| panic!("b"));
    let c = client.endpoint("http://127.0.0.1:10/v1/models").unwrap_or_else(|| panic!("c"));
    let d = client.endpoint("https://127.0.0.1:9/v1/models").unwrap_or_else(|| panic!("d"));
    assert!(Arc::ptr_eq(&a.origin, &b.origin));
    assert!(!Arc::ptr_eq(&a.origin, &c.origin));
    assert!(!Arc::ptr_eq(&a.origin, &d.origin));
}

#[tokio::test]
async fn calls_one_after_another_go_on_one_connection() {
    let (base, accepted) = http1_upstream().await;
    let client = client();
    for _ in 0..5 {
        assert_eq!(get(&client, &format!("{base}/v1/models")).await, "ok");
    }
    // Read piece by piece to the end, a streamed answer gives its connection back too.
    let endpoint = client.endpoint(&format!("{base}/long")).unwrap_or_else(|| panic!("endpoint"));
    let answer = client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}"));
    let mut pieces = Box::pin(answer.into_stream());
    let mut read = 0;
    while let Some(piece) = pieces.next().await {
        read += piece.unwrap_or_else(|e| panic!("{e}")).len();
    }
    assert_eq!(read, 256 * 1024);
    assert_eq!(get(&client, &format!("{base}/v1/models")).await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_answer_dropped_before_its_end_takes_its_connection_with_it() {
    let (base, accepted) = http1_upstream().await;
    let client = client();
    let endpoint = client.endpoint(&format!("{base}/long")).unwrap_or_else(|| panic!("endpoint"));
    let mut answer = client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(answer.chunk().await.unwrap_or_else(|e| panic!("{e}")).is_some());
    drop(answer);
    // The rest of that body was never read: the next call must not be answered with it.
    assert_eq!(get(&client, &format!("{base}/v1/models")).await, "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// Waits until `endpoint`'s origin keeps `n` idle HTTP/1.1 connections.
async fn until_idle(endpoint: &super::Endpoint, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while endpoint.origin.idle_http1() != n {
        assert!(tokio::time::Instant::now() < deadline, "{} idle connections, not {n}", endpoint.origin.idle_http1());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_stream_read_up_to_its_done_event_gives_its_connection_back() {
    let (base, accepted) = http1_upstream().await;
    let client = client();
    let endpoint = client.endpoint(&format!("{base}/sse")).unwrap_or_else(|| panic!("endpoint"));
    for _ in 0..3 {
        let mut answer = client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.headers().get("transfer-encoding").map(|v| v.as_bytes()), Some(&b"chunked"[..]));
        let mut seen = Vec::new();
        while !seen.ends_with(b"data: [DONE]\n\n") {
            seen.extend_from_slice(
                &answer.chunk().await.unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|| panic!("ended early")),
            );
        }
        // Dropped as a stream's reader drops it: after `[DONE]`, before the body's last chunk was asked for.
        drop(answer);
        until_idle(&endpoint, 1).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_calls_open_a_connection_each_and_keep_them_for_the_next() {
    let (base, accepted) = http1_upstream().await;
    let client = client();
    let url = format!("{base}/v1/models");
    let endpoint = client.endpoint(&url).unwrap_or_else(|| panic!("endpoint"));
    // Four answers held at once (headers in, bodies unread) need four connections.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}")));
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
    for answer in held {
        assert_eq!(answer.bytes(usize::MAX).await.unwrap_or_else(|e| panic!("{e}")), "ok");
    }
    let calls = (0..4).map(|_| get(&client, &url));
    futures::future::join_all(calls).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
}

/// An upstream that answers one request on each connection with a keep-alive answer, then closes it without
/// a word, as an upstream's idle timeout does: how many connections it has accepted.
async fn closing_upstream() -> (String, Arc<AtomicUsize>) {
    let (addr, accepted) = upstream(|mut tcp| async move {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    })
    .await;
    (format!("http://{addr}"), accepted)
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let (base, accepted) = closing_upstream().await;
    let client = client();
    for n in 1..=3 {
        assert_eq!(get(&client, &format!("{base}/v1/models")).await, "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), n);
    }
}

#[tokio::test]
async fn an_idle_connection_is_not_used_after_the_idle_timeout() {
    let (base, accepted) = http1_upstream().await;
    let client = client();
    let url = format!("{base}/v1/models");
    get(&client, &url).await;
    get(&client, &url).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    tokio::time::pause();
    tokio::time::advance(super::pool::IDLE_TIMEOUT + Duration::from_secs(1)).await;
    tokio::time::resume();
    get(&client, &url).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// An HTTP/2 upstream over TLS, offering `h2` and `http/1.1` by ALPN, with a certificate for `localhost` of
/// its own: its base URL, the client that trusts it, and how many connections it has accepted.
async fn http2_upstream() -> (String, UpstreamClient, Arc<AtomicUsize>) {
    let issued = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let cert = issued.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(issued.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(vec![cert.clone()], key))
        .unwrap_or_else(|e| panic!("{e}"));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (addr, accepted) = upstream(move |tcp| {
        let acceptor = acceptor.clone();
        async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = hyper::service::service_fn(answer);
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        }
    })
    .await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap_or_else(|e| panic!("{e}"));
    (format!("https://localhost:{}", addr.port()), UpstreamClient::with_roots(roots), accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_chooses_http2_gets_every_call_on_one_connection() {
    let (base, client, accepted) = http2_upstream().await;
    let url = format!("{base}/v1/models");
    assert_eq!(get(&client, &url).await, "ok");
    // Held at once, bodies unread: still one connection, one stream each.
    let endpoint = client.endpoint(&url).unwrap_or_else(|| panic!("endpoint"));
    let mut held = Vec::new();
    for _ in 0..4 {
        let answer = client.send(Call::get(&endpoint)).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.head.version, hyper::Version::HTTP_2);
        held.push(answer);
    }
    for answer in held {
        assert_eq!(answer.bytes(usize::MAX).await.unwrap_or_else(|e| panic!("{e}")), "ok");
    }
    let calls = (0..8).map(|_| get(&client, &url));
    futures::future::join_all(calls).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
