//! `svc-bench delay-proxy`: a TCP forwarder that holds every chunk for a fixed one-way delay in each
//! direction, in order: a database "1 ms away" (0.5 ms each way) on a machine whose kernel has no `netem`
//! queueing discipline. Bandwidth is not limited; only time in flight is added. Every second it prints how many
//! chunks clients have sent so far (`delay-proxy: sent N`): for a database protocol, its round trips.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Listens on `listen` and forwards every connection to `to`, each chunk delayed by `one_way`.
pub async fn serve(listen: SocketAddr, to: SocketAddr, one_way: Duration) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    eprintln!("delay-proxy listening on {} to {to}, {} µs each way", listener.local_addr()?, one_way.as_micros());
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            eprintln!("delay-proxy: sent {}", counted.load(Ordering::Relaxed));
        }
    });
    loop {
        let (client, _) = listener.accept().await?;
        let sent = sent.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(to).await else { return };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::join!(pipe(cr, sw, one_way, Some(sent)), pipe(sr, cw, one_way, None));
        });
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read (reading goes on meanwhile), counting
/// chunks in `count`.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration, count: Option<Arc<AtomicU64>>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if let Some(c) = &count {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::join!(reader, writer);
}
