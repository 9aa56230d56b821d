//! The socket of an accepted connection, as hyper sees it: reads tell the connection's [`Activity`] that a
//! request is arriving, and hyper's own bodiless error answers are replaced with OpenAI-shaped JSON ones.
//!
//! hyper answers by itself, before any handler runs, a request it cannot read: 400 (not HTTP), 414 (URI
//! too long), 431 (headers too large). It writes exactly (hyper 1.12, `proto/h1/role.rs`, `on_error`)
//!
//! ```text
//! HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: …\r\n\r\n
//! ```
//!
//! then closes the connection. Such a write is recognised by two facts together: no request is being
//! answered on the connection (so the bytes cannot belong to a response of the router), and the write is one
//! complete response head with only those three headers and no body (every answer of the router carries
//! `x-request-id` and more). It is swallowed, reported written, and the JSON answer goes out in its place
//! before the next write, flush or shutdown completes. Anything else passes through untouched.

use super::conn::Activity;
use super::wire;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An accepted stream (TCP, or TLS over it) with its connection's activity.
pub(super) struct Watched<S> {
    tcp: S,
    activity: Arc<Activity>,
    /// The answer standing in for hyper's own, and how much of it is written.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Watched<S> {
    pub(super) fn new(tcp: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { tcp, activity, replacement: None }
    }

    /// Writes what is left of a replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written >= bytes.len() {
                self.replacement = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// When `buf` is hyper's own error answer, takes the JSON one in its place and returns the length to
    /// report written.
    fn replace(&mut self, buf: &[u8]) -> Option<usize> {
        if !self.activity.awaiting_request() {
            return None;
        }
        let answer = wire::replace_hyper_error(buf)?;
        self.replacement = Some((answer, 0));
        Some(buf.len())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.bytes_read();
        }
        result
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        if let Some(n) = this.replace(buf) {
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        // hyper's error answer is a head alone: one non-empty buffer.
        let mut non_empty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (non_empty.next(), non_empty.next()) {
            if let Some(n) = this.replace(only) {
                return Poll::Ready(Ok(n));
            }
        }
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}
