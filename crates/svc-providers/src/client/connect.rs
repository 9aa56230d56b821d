//! Opening a connection to an upstream: straight to it, through a CONNECT tunnel of the proxy that intercepts
//! it (`https`), or to a plain-HTTP proxy that is sent the whole URL (`http`).

use super::TransportError;
use ::http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;
use tower::Service;

/// Opens the TCP connection for a destination: to it, or through the proxy that intercepts it.
#[derive(Clone)]
pub struct Connector {
    pub(super) http: HttpConnector,
    pub(super) proxies: Arc<Matcher>,
}

impl Service<Uri> for Connector {
    type Response = Conn;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, TransportError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut http = self.http.clone();
        let proxy = self.proxies.intercept(&dst);
        Box::pin(async move {
            let tunnel = dst.scheme() == Some(&::http::uri::Scheme::HTTPS);
            match proxy {
                None => Ok(Conn { io: http.call(dst).await?, via_proxy: false }),
                Some(proxy) if tunnel => {
                    let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                    if let Some(auth) = proxy.basic_auth() {
                        tunnel = tunnel.with_auth(auth.clone());
                    }
                    // The TLS layer above speaks through the tunnel to the destination itself.
                    Ok(Conn { io: tunnel.call(dst).await?, via_proxy: false })
                }
                Some(proxy) => Ok(Conn { io: http.call(proxy.uri().clone()).await?, via_proxy: true }),
            }
        })
    }
}

/// A TCP connection, marked when it goes to a plain-HTTP proxy (requests on it then name the whole URL).
pub struct Conn {
    io: TokioIo<TcpStream>,
    via_proxy: bool,
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.via_proxy)
    }
}

impl Read for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: ReadBufCursor<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}
