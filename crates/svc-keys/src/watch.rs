//! Keeping a key cache current while the gateway serves: a key created, revoked or rotated by another process
//! (the `svc keys` CLI, another node on the fleet store) takes effect here without a restart.

use std::future::Future;
use std::time::Duration;
use svc_store::Store;

/// Calls `refresh` whenever the keys may have changed, until dropped: on every change the store announces
/// (`LISTEN` on PostgreSQL), and every second (the poller, which covers what the channel misses and SQLite).
/// `waits` gives the pauses between attempts to listen again after the channel failed.
pub async fn watch<W, I, R, F>(store: &Store, waits: W, refresh: R)
where
    W: Fn() -> I,
    I: Iterator<Item = Duration>,
    R: Fn() -> F,
    F: Future<Output = ()>,
{
    // The poller never ends; the listener ends at once on SQLite (no channel).
    tokio::join!(listen(store, &waits, &refresh), poll(&refresh));
}

/// On a PostgreSQL store, hears of every key change in the fleet as it commits (`LISTEN`), so a change on any
/// node takes effect on this one within moments; the poller stays as the fallback. Returns only when the store
/// has no such channel (SQLite).
async fn listen<W, I, R, F>(store: &Store, waits: &W, refresh: &R)
where
    W: Fn() -> I,
    I: Iterator<Item = Duration>,
    R: Fn() -> F,
    F: Future<Output = ()>,
{
    let mut pauses = waits();
    loop {
        match store.key_changes().await {
            Ok(None) => return,
            Ok(Some(mut changes)) => {
                pauses = waits();
                // Changes made while this node was not listening.
                refresh().await;
                while changes.next().await.is_ok() {
                    refresh().await;
                }
                tracing::warn!("lost the key-change channel of the store; listening again");
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for key changes; the poller covers them meanwhile"),
        }
        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(10))).await;
    }
}

/// Notices key changes made by other processes within a second.
async fn poll<R: Fn() -> F, F: Future<Output = ()>>(refresh: &R) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        refresh().await;
    }
}
