//! The three ways of loading a target.
//!
//! - [`closed`]: `concurrency` workers, each sending its next request when the previous one has ended. At
//!   concurrency 1 this is the latency of one request on an idle target; at high concurrency it finds the
//!   peak throughput (its latencies then only describe saturation).
//! - [`open`]: requests due at a fixed rate, whatever happened to the previous ones. A dedicated thread
//!   (timer slack 1 ns, so its sleeps end within microseconds) wakes at each due time and hands the request
//!   to the runtime; latency counts from the *due* time, so a stalled target, or a late generator, shows up
//!   in the numbers instead of silently lowering the offered load (no coordinated omission). Requests never
//!   wait for one another: the connection pool opens a new connection when all are busy.

use crate::client::Target;
use crate::stats::Sample;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a measurement produced.
#[derive(Debug, Default)]
pub struct Run {
    /// One sample per request that was sent.
    pub samples: Vec<Sample>,
    /// Wall time of the measurement: first send (or due time) to last completion.
    pub elapsed: Duration,
    /// Open loop only: how late the generator handed each request over, in nanoseconds.
    pub dispatch_lag_ns: Vec<u64>,
    /// Open loop only: requests that were due.
    pub due: u64,
}

/// Closed loop: `concurrency` workers send back-to-back requests until `duration` has passed or, when
/// given, `max_requests` have been started.
pub async fn closed(target: &Target, concurrency: usize, duration: Duration, max_requests: Option<u64>) -> Run {
    let started = Arc::new(AtomicU64::new(0));
    let limit = max_requests.unwrap_or(u64::MAX);
    let begin = Instant::now();
    let deadline = begin + duration;
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.max(1) {
        let target = target.clone();
        let started = started.clone();
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(4096);
            while Instant::now() < deadline && started.fetch_add(1, Ordering::Relaxed) < limit {
                samples.push(target.send(Instant::now()).await);
            }
            samples
        }));
    }
    let mut run = Run::default();
    for w in workers {
        // A worker cannot panic (send never fails); a join error would only drop that worker's samples.
        if let Ok(samples) = w.await {
            run.samples.extend(samples);
        }
    }
    run.elapsed = begin.elapsed();
    run
}

/// Open loop: `rate` requests per second for `duration`, latency from each request's due time.
pub async fn open(target: &Target, rate: f64, duration: Duration) -> anyhow::Result<Run> {
    anyhow::ensure!(rate > 0.0 && rate.is_finite(), "the rate must be a positive number");
    let due = (rate * duration.as_secs_f64()).round() as u64;
    let runtime = tokio::runtime::Handle::current();
    let sender = target.clone();
    let scheduler = tokio::task::spawn_blocking(move || {
        // Best effort: without it a sleep may end up to 50 µs late (the default slack), which would be
        // counted as latency of both targets alike.
        let _ = nix::sys::prctl::set_timerslack(1);
        let start = Instant::now() + Duration::from_millis(5);
        let mut handles = Vec::with_capacity(usize::try_from(due).unwrap_or(0));
        let mut lags = Vec::with_capacity(handles.capacity());
        for i in 0..due {
            let at = start + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            lags.push(u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX));
            let t = sender.clone();
            handles.push(runtime.spawn(async move { t.send(at).await }));
        }
        (start, handles, lags)
    });
    let (start, handles, lags) = scheduler.await?;
    let mut run = Run { due, dispatch_lag_ns: lags, ..Run::default() };
    for h in handles {
        if let Ok(sample) = h.await {
            run.samples.push(sample);
        }
    }
    run.elapsed = start.elapsed();
    Ok(run)
}
