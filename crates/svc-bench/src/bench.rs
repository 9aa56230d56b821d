//! One measurement end to end: warm up, measure, watch the target process, and describe the result as
//! human text and as one JSON summary line.

use crate::client::Target;
use crate::measure::{self, Run};
use crate::procstat;
use crate::stats::{summarize, Percentiles};
use serde_json::{json, Value};
use std::time::Duration;

/// An open-loop request handed over later than this counts as `late` (the generator fell behind).
const LATE: Duration = Duration::from_millis(1);

/// Which measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Closed loop at concurrency 1.
    Latency,
    /// Open loop at a fixed rate.
    Open,
    /// Closed loop at high concurrency.
    Peak,
}

impl Measure {
    /// The name used on the command line and in the JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Measure::Latency => "latency",
            Measure::Open => "open",
            Measure::Peak => "peak",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> anyhow::Result<Measure> {
        match s.trim() {
            "latency" => Ok(Measure::Latency),
            "open" => Ok(Measure::Open),
            "peak" => Ok(Measure::Peak),
            other => anyhow::bail!("unknown measurement `{other}` (latency, open, peak)"),
        }
    }
}

/// The parameters of one measurement.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Free-form name of the target (`direct`, `gw-off`, …), copied to the JSON line.
    pub label: String,
    /// The target URL, copied to the JSON line.
    pub url: String,
    /// Which measurement.
    pub measure: Measure,
    /// Streaming requests (TTFB reported).
    pub stream: bool,
    /// How long to measure.
    pub duration: Duration,
    /// Closed loops (latency, peak): stop after this many requests in all (if earlier than `duration`).
    pub requests: Option<u64>,
    /// Open loop: requests per second.
    pub rate: f64,
    /// Peak: concurrent workers.
    pub concurrency: usize,
    /// The same load, unrecorded, before measuring (connections, caches, allocator).
    pub warmup: Duration,
    /// A process whose CPU time is read around the measurement (the target, pinned to its core).
    pub watch_pid: Option<u32>,
    /// Other processes of the benchmark (the upstream): their CPU time is not counted as outside load.
    pub also_pids: Vec<u32>,
}

/// CPU times read around a measurement.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    /// The watched process.
    target: Option<procstat::Cpu>,
    /// Every process but the benchmark's own (watched, `also_pids`, and this one).
    others: f64,
    /// The machine's steal time.
    steal: f64,
}

impl Snapshot {
    fn take(plan: &Plan) -> anyhow::Result<Snapshot> {
        let target = plan.watch_pid.map(procstat::cpu_seconds).transpose()?;
        let mut ours = vec![std::process::id()];
        ours.extend(plan.watch_pid);
        ours.extend(&plan.also_pids);
        Ok(Snapshot { target, others: procstat::others_seconds(&ours)?, steal: procstat::steal_seconds()? })
    }
}

/// What the machine did during a measurement, in CPU seconds.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// The watched process.
    target: Option<procstat::Cpu>,
    /// Everything outside the benchmark's processes.
    outside: f64,
    /// Taken by the hypervisor.
    steal: f64,
}

fn usage(before: Snapshot, after: Snapshot) -> Usage {
    Usage {
        target: before.target.zip(after.target).map(|(b, a)| b.until(a)),
        outside: (after.others - before.others).max(0.0),
        steal: (after.steal - before.steal).max(0.0),
    }
}

/// Runs `plan` against `target`; returns the human report and the JSON summary.
pub async fn execute(target: &Target, plan: &Plan) -> anyhow::Result<(String, Value)> {
    if !plan.warmup.is_zero() {
        let _ = load(target, plan, plan.warmup, None).await?;
    }
    let before = Snapshot::take(plan)?;
    let run = load(target, plan, plan.duration, plan.requests).await?;
    let after = Snapshot::take(plan)?;
    Ok(describe(plan, &run, usage(before, after)))
}

async fn load(target: &Target, plan: &Plan, duration: Duration, requests: Option<u64>) -> anyhow::Result<Run> {
    Ok(match plan.measure {
        Measure::Latency => measure::closed(target, 1, duration, requests).await,
        Measure::Open => measure::open(target, plan.rate, duration).await?,
        Measure::Peak => measure::closed(target, plan.concurrency, duration, requests).await,
    })
}

fn describe(plan: &Plan, run: &Run, used: Usage) -> (String, Value) {
    let (total, ttfb) = summarize(&run.samples);
    let sent = run.samples.len() as u64;
    let ok = run.samples.iter().filter(|s| s.ok).count() as u64;
    let elapsed = run.elapsed.as_secs_f64().max(1e-9);
    let rps = ok as f64 / elapsed;
    let mut text = format!(
        "[{}] {} {}{}: {} sent, {} ok, {} failed in {:.2} s → {:.0} req/s\n",
        plan.label,
        plan.measure.name(),
        if plan.stream { "streaming" } else { "non-streaming" },
        match plan.measure {
            Measure::Latency => " (closed loop, concurrency 1)".to_string(),
            Measure::Open => format!(" (open loop, {} req/s)", plan.rate),
            Measure::Peak => format!(" (closed loop, concurrency {})", plan.concurrency),
        },
        sent,
        ok,
        sent - ok,
        elapsed,
        rps,
    );
    text.push_str(&format!("  full  {}\n", total.line()));
    if plan.stream {
        text.push_str(&format!("  ttfb  {}\n", ttfb.line()));
    }
    let mut summary = json!({
        "svc_bench": 1,
        "label": plan.label,
        "url": plan.url,
        "measure": plan.measure.name(),
        "stream": plan.stream,
        "duration_s": plan.duration.as_secs_f64(),
        "elapsed_s": (elapsed * 1000.0).round() / 1000.0,
        "sent": sent,
        "ok": ok,
        "failed": sent - ok,
        "rps": rps.round(),
        "latency_us": total.to_json(),
        "ttfb_us": if plan.stream { ttfb.to_json() } else { Value::Null },
    });
    match plan.measure {
        Measure::Latency => summary["concurrency"] = json!(1),
        Measure::Peak => summary["concurrency"] = json!(plan.concurrency),
        Measure::Open => {
            summary["rate"] = json!(plan.rate);
            open_loop(run, ok, &mut text, &mut summary);
        }
    }
    let outside = used.outside / elapsed;
    let steal = used.steal / elapsed;
    text.push_str(&format!(
        "  outside load (CPU not used by the benchmark's processes): {outside:.2} cores; steal {steal:.2} cores\n"
    ));
    summary["outside_load_cores"] = json!((outside * 100.0).round() / 100.0);
    summary["steal_cores"] = json!((steal * 100.0).round() / 100.0);
    if let (Some(pid), Some(used)) = (plan.watch_pid, used.target) {
        summary["watch"] = watched(pid, used, elapsed, ok, &mut text);
    }
    (text, summary)
}

/// The open loop's own figures: requests due and missed, and how late the generator handed them over.
fn open_loop(run: &Run, ok: u64, text: &mut String, summary: &mut Value) {
    let mut lags = run.dispatch_lag_ns.clone();
    let late = lags.iter().filter(|&&l| u128::from(l) > LATE.as_nanos()).count();
    let lag = Percentiles::of(&mut lags);
    // Missed: due but not answered successfully (failed, timed out, or never sent).
    let missed = run.due.saturating_sub(ok);
    text.push_str(&format!(
        "  due {}, missed {}, dispatched late (> 1 ms) {}; generator lag p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs\n",
        run.due, missed, late, lag.p50, lag.p99, lag.max
    ));
    summary["due"] = json!(run.due);
    summary["missed"] = json!(missed);
    summary["late"] = json!(late);
    summary["dispatch_lag_us"] = lag.to_json();
}

/// The watched process's CPU time over `elapsed` seconds and `ok` requests, as a line of `text` and as JSON.
fn watched(pid: u32, used: procstat::Cpu, elapsed: f64, ok: u64, text: &mut String) -> Value {
    let cpu = used.total();
    let util = cpu / elapsed;
    let per_req = |s: f64| if ok > 0 { s * 1e6 / ok as f64 } else { 0.0 };
    text.push_str(&format!(
        "  watched pid {pid}: {cpu:.2} CPU s, {:.0}% of one core, {:.1} CPU µs per request ({:.1} user, {:.1} system)\n",
        util * 100.0,
        per_req(cpu),
        per_req(used.user),
        per_req(used.system),
    ));
    let tenth = |x: f64| (x * 10.0).round() / 10.0;
    json!({
        "pid": pid,
        "cpu_s": (cpu * 100.0).round() / 100.0,
        "cpu_util": (util * 1000.0).round() / 1000.0,
        "cpu_us_per_req": tenth(per_req(cpu)),
        "user_us_per_req": tenth(per_req(used.user)),
        "system_us_per_req": tenth(per_req(used.system)),
    })
}
