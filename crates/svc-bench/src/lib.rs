//! `svc-bench`: the load generator of the gateway benchmark (`bench/run.sh`, results in `BENCHMARKS.md`).
//!
//! Against one target URL, with a bearer key and a JSON request body, it measures:
//!
//! 1. **latency**: closed loop at concurrency 1 — p50/p90/p99 of one request on an otherwise idle target;
//! 2. **open**: an open loop at a fixed rate (e.g. 1,000 req/s) — latency counted from each request's
//!    *scheduled* send time, so a slow target cannot slow the offered load down and hide its own stalls
//!    (no coordinated omission); p50/p99/p99.9, and how many requests were missed (failed or unanswered);
//! 3. **peak**: closed loop at high concurrency (64 by default) — requests per second, and, when the
//!    target's PID is given, the CPU the target process used for them.
//!
//! Each runs non-streaming or streaming (`--stream` sets `"stream": true` in the body); a streaming
//! request reports both the time to the first byte of the body (TTFB) and the time to its end. Every
//! measurement prints a human summary and then one JSON line (`{"svc_bench":1,…}`); `svc-bench report`
//! turns the JSON lines of a run into Markdown tables of direct vs gateway and the added latency.
//!
//! The client is hyper 1 (hyper-util's legacy client: HTTP/1.1, keep-alive pool, `TCP_NODELAY`) on a
//! single-threaded tokio runtime, so the generator stays cheap on the core it shares with the upstream.

// The load generator's workers and delays are spawned bare: they end with the measurement, not at a gateway's
// shutdown.
#![allow(clippy::disallowed_methods)]

pub mod bench;
pub mod client;
pub mod delay;
pub mod measure;
pub mod procstat;
pub mod proxy;
pub mod report;
pub mod stats;
