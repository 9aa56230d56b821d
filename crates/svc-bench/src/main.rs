//! `svc-bench`: load generator for the gateway benchmark. See the library docs (`svc_bench`) for what
//! each measurement means, and `bench/run.sh` for the full benchmark.
//!
//! ```text
//! svc-bench run --url http://127.0.0.1:4000/v1/chat/completions --key sk-svc-… \
//!     --measure latency,open,peak [--stream] [--duration 5] [--rate 1000] [--concurrency 64]
//! svc-bench report results.jsonl [--rss-kib N]
//! svc-bench delay-proxy --listen 127.0.0.1:15432 --to 127.0.0.1:5432 --one-way-us 500
//! ```

use anyhow::Context;
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use std::time::Duration;
use svc_bench::bench::{self, Measure, Plan};
use svc_bench::client::Target;
use svc_bench::report;

/// A small but realistic chat-completions request.
const DEFAULT_BODY: &str = r#"{"model":"openai/gpt-4.1-mini","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Say hello in five words."}],"max_tokens":64}"#;

#[derive(Parser)]
#[command(name = "svc-bench", version, about = "Load generator for the svc gateway benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure one target; prints human text and one JSON line per measurement.
    Run(RunArgs),
    /// Markdown tables (direct vs gateway, added latency, targets) from the JSON lines of a run.
    Report(ReportArgs),
    /// A TCP forwarder adding a fixed delay each way (a remote database where the kernel has no `netem`).
    DelayProxy(DelayArgs),
}

#[derive(Args)]
struct DelayArgs {
    /// Where to listen.
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Where to forward.
    #[arg(long)]
    to: std::net::SocketAddr,
    /// The delay added each way, µs (500: a round trip 1 ms longer).
    #[arg(long, default_value_t = 500)]
    one_way_us: u64,
}

#[derive(Args)]
struct RunArgs {
    /// Full URL of the chat-completions endpoint (http:// only).
    #[arg(long)]
    url: String,
    /// Bearer key (empty: no Authorization header).
    #[arg(long, default_value = "", env = "SVC_BENCH_KEY", hide_env_values = true)]
    key: String,
    /// The JSON request body, or @FILE.
    #[arg(long, default_value = DEFAULT_BODY)]
    body: String,
    /// Streaming requests: sets "stream": true in the body, reports TTFB as well.
    #[arg(long)]
    stream: bool,
    /// What a complete stream contains (chat completions: `data: [DONE]`; Anthropic Messages:
    /// `message_stop`; OpenAI Responses: `response.completed`).
    #[arg(long, default_value = "data: [DONE]")]
    done: String,
    /// An extra request header, `Name: value` (repeatable; e.g. `anthropic-version: 2023-06-01`).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Name of the target in the output (e.g. direct, gw-off, gw-on).
    #[arg(long, default_value = "target")]
    label: String,
    /// Comma-separated measurements: latency, open, peak.
    #[arg(long, default_value = "latency,open,peak")]
    measure: String,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of the open-loop measurement (default: --duration).
    #[arg(long)]
    open_duration: Option<f64>,
    /// Closed loops (latency, peak): stop after this many requests in all if that comes before --duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Open loop: requests per second.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Peak: concurrent closed-loop workers (connections).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds of the same load, not recorded, before each measurement.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds after which one request counts as failed.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// PID of the target process: its CPU time during each measurement is reported.
    #[arg(long)]
    watch_pid: Option<u32>,
    /// PIDs of the benchmark's other processes (the upstream), so that their CPU time does not count as
    /// outside load.
    #[arg(long = "also-pid")]
    also_pids: Vec<u32>,
}

#[derive(Args)]
struct ReportArgs {
    /// Files of svc-bench output (non-JSON lines are ignored); `-` for stdin.
    #[arg(required = true)]
    files: Vec<String>,
    /// Label of the direct runs.
    #[arg(long, default_value = "direct")]
    baseline: String,
    /// Label of the gateway runs with key auth only.
    #[arg(long, default_value = "gw-off")]
    gateway: String,
    /// Label of the gateway runs with budgets and rate limits on.
    #[arg(long, default_value = "gw-on")]
    budgets: String,
    /// Label of the direct runs against an upstream on the gateway's core.
    #[arg(long, default_value = "direct-core0")]
    cross: String,
    /// Peak resident set of the gateway (VmHWM), KiB.
    #[arg(long)]
    rss_kib: Option<u64>,
    /// Label of the runs through a bare reverse proxy in the gateway's place.
    #[arg(long, default_value = "nginx")]
    proxy: String,
    /// Peak resident set of the proxy (VmHWM), KiB.
    #[arg(long)]
    proxy_rss_kib: Option<u64>,
    /// Label of the runs through the gateway's stack alone (svc-floor) in the gateway's place.
    #[arg(long, default_value = "floor")]
    floor: String,
    /// Peak resident set of the floor (VmHWM), KiB.
    #[arg(long)]
    floor_rss_kib: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Run(args) => run(args),
        Cmd::DelayProxy(a) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(svc_bench::delay::serve(a.listen, a.to, Duration::from_micros(a.one_way_us))),
        Cmd::Report(args) => {
            let mut input = String::new();
            for f in &args.files {
                if f == "-" {
                    input.push_str(&std::io::read_to_string(std::io::stdin())?);
                } else {
                    input.push_str(&std::fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?);
                }
                input.push('\n');
            }
            let opts = report::Options {
                baseline: args.baseline,
                gateway: args.gateway,
                budgets: args.budgets,
                cross: args.cross,
                rss_kib: args.rss_kib,
                proxy: args.proxy,
                proxy_rss_kib: args.proxy_rss_kib,
                floor: args.floor,
                floor_rss_kib: args.floor_rss_kib,
            };
            print!("{}", report::render(&input, &opts));
            Ok(())
        }
    }
}

fn seconds(name: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("--{name} must be a non-negative number of seconds"))
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let raw = match args.body.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read the body from {path}"))?,
        None => args.body.clone(),
    };
    let mut body: serde_json::Value = serde_json::from_str(&raw).context("the body is not valid JSON")?;
    if args.stream {
        let obj = body.as_object_mut().context("the body must be a JSON object")?;
        obj.insert("stream".into(), serde_json::Value::Bool(true));
    }
    let body = Bytes::from(serde_json::to_vec(&body)?);
    let measures =
        args.measure.split(',').filter(|s| !s.trim().is_empty()).map(Measure::parse).collect::<Result<Vec<_>, _>>()?;
    let duration = seconds("duration", args.duration)?;
    let open_duration = seconds("open-duration", args.open_duration.unwrap_or(args.duration))?;
    let warmup = seconds("warmup", args.warmup)?;
    let timeout = seconds("timeout", args.timeout)?;
    // One thread: the generator shares its core with the upstream, and a single-threaded runtime is the
    // cheapest way to drive many connections. The open-loop scheduler adds one sleeping thread.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let ends = args.stream.then(|| Bytes::from(args.done.clone().into_bytes()));
        let target = Target::new(&args.url, &args.key, body, ends, timeout)?.with_headers(&args.headers)?;
        for measure in measures {
            let plan = Plan {
                label: args.label.clone(),
                url: args.url.clone(),
                measure,
                stream: args.stream,
                duration: if measure == Measure::Open { open_duration } else { duration },
                requests: args.requests,
                rate: args.rate,
                concurrency: args.concurrency,
                warmup,
                watch_pid: args.watch_pid,
                also_pids: args.also_pids.clone(),
            };
            let (text, summary) = bench::execute(&target, &plan).await?;
            print!("{text}");
            println!("{summary}");
        }
        Ok(())
    })
}
