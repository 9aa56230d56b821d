//! Turns the JSON summary lines of one benchmark run into Markdown tables: each target next to the
//! baseline (the upstream called directly), with the latency the target adds (target − baseline), and the
//! acceptance targets of the gateway issues checked against them.

use serde_json::Value;
use std::fmt::Write as _;

/// What to compare.
#[derive(Debug, Clone)]
pub struct Options {
    /// The label of the direct runs (the upstream without the gateway).
    pub baseline: String,
    /// The label of the gateway runs with key auth only (no budgets, no rate limits).
    pub gateway: String,
    /// The label of the gateway runs with budgets and rate limits on.
    pub budgets: String,
    /// The label of the direct runs against an upstream on the gateway's core (the cost of crossing cores).
    pub cross: String,
    /// Peak resident set of the gateway over the whole run, KiB, if known.
    pub rss_kib: Option<u64>,
    /// The label of the runs through a bare reverse proxy in the gateway's place (nginx).
    pub proxy: String,
    /// Peak resident set of the proxy, KiB, if known.
    pub proxy_rss_kib: Option<u64>,
    /// The label of the runs through the gateway's stack alone (`svc-floor`) in the gateway's place.
    pub floor: String,
    /// Peak resident set of the floor, KiB, if known.
    pub floor_rss_kib: Option<u64>,
}

/// Issue 2 (a): p50 added at concurrency 1, µs.
const ADDED_C1_P50: f64 = 60.0;
/// Issue 2 (b) and issue 3: p50 added at 1,000 req/s open loop, µs.
const ADDED_OPEN_P50: f64 = 100.0;
/// Issue 2 (b) and issue 3: p99 added at 1,000 req/s open loop, µs.
const ADDED_OPEN_P99: f64 = 1_000.0;
/// Issue 2 (c): requests per second on one core.
const PEAK_RPS: f64 = 15_000.0;
/// Issue 2: peak resident set, MiB.
const RSS_MIB: f64 = 50.0;
/// Issue 3: peak throughput with budgets on, as a fraction of off.
const BUDGETS_PEAK_RATIO: f64 = 0.8;

/// Renders the report of the summary lines in `input` (other lines are ignored).
pub fn render(input: &str, opts: &Options) -> String {
    let lines: Vec<Value> = input
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("svc_bench").is_some())
        .collect();
    let mut labels: Vec<String> = Vec::new();
    for v in &lines {
        if let Some(l) = v["label"].as_str() {
            if !labels.iter().any(|x| x == l) {
                labels.push(l.to_string());
            }
        }
    }
    let others: Vec<&String> = labels.iter().filter(|l| **l != opts.baseline).collect();
    let find = |measure: &str, stream: bool, label: &str| -> Option<&Value> {
        lines.iter().find(|v| v["measure"] == measure && v["stream"] == stream && v["label"] == label)
    };
    let mut out = String::new();
    for (measure, title) in [
        ("latency", "Closed loop, concurrency 1"),
        ("open", "Open loop, fixed rate (latency from each request's due time)"),
        ("peak", "Peak throughput, closed loop at high concurrency"),
    ] {
        for stream in [false, true] {
            // Columns: the labels measured in this table.
            let targets: Vec<(&String, Option<&Value>)> =
                others.iter().map(|l| (*l, find(measure, stream, l))).filter(|(_, v)| v.is_some()).collect();
            let table = Table { measure, stream, base: find(measure, stream, &opts.baseline), targets };
            if table.base.is_some() || !table.targets.is_empty() {
                table.write(&mut out, title, &opts.baseline);
            }
        }
    }
    out.push_str(&targets(&find, opts));
    let against = crate::proxy::Against {
        direct: &opts.baseline,
        gateway: &opts.budgets,
        proxy: &opts.proxy,
        floor: &opts.floor,
        gateway_rss_kib: opts.rss_kib,
        proxy_rss_kib: opts.proxy_rss_kib,
        floor_rss_kib: opts.floor_rss_kib,
    };
    out.push_str(&crate::proxy::render(&lines, &against));
    out
}

/// One table: a measurement, plain or streaming, of the baseline and of each other label measured in it.
struct Table<'a> {
    measure: &'a str,
    stream: bool,
    base: Option<&'a Value>,
    targets: Vec<(&'a String, Option<&'a Value>)>,
}

impl Table<'_> {
    fn write(&self, out: &mut String, title: &str, baseline: &str) {
        let detail = self.base.or(self.targets.iter().find_map(|(_, v)| *v));
        let extra = match (self.measure, detail) {
            ("open", Some(v)) => format!(", {} req/s", v["rate"]),
            ("peak", Some(v)) => format!(", concurrency {}", v["concurrency"]),
            _ => String::new(),
        };
        let kind = if self.stream { "streaming" } else { "non-streaming" };
        let _ = writeln!(out, "\n#### {title} — {kind}{extra}\n");
        let mut header = format!("| | {baseline} |");
        let mut rule = "|---|---:|".to_string();
        for (l, _) in &self.targets {
            header.push_str(&format!(" {l} | added |"));
            rule.push_str("---:|---:|");
        }
        let _ = writeln!(out, "{header}\n{rule}");
        self.percentiles(out);
        self.counts(out);
        self.load(out, "outside load (cores)", "outside_load_cores");
        self.load(out, "steal (cores)", "steal_cores");
    }

    /// The latency percentiles (time to first byte too, streaming), each target's with what it adds.
    fn percentiles(&self, out: &mut String) {
        let series: &[(&str, &str)] =
            if self.stream { &[("ttfb_us", "TTFB "), ("latency_us", "full ")] } else { &[("latency_us", "")] };
        let pcts: &[(&str, &str)] = match self.measure {
            "open" => &[("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9")],
            _ => &[("p50", "p50"), ("p90", "p90"), ("p99", "p99")],
        };
        for (key, prefix) in series {
            for (p, name) in pcts {
                let b = self.base.and_then(|v| v[*key][*p].as_f64());
                let mut line = format!("| {prefix}{name} (µs) | {} |", fmt(b));
                for (_, v) in &self.targets {
                    let x = v.and_then(|v| v[*key][*p].as_f64());
                    line.push_str(&format!(" {} | {} |", fmt(x), fmt_added(x, b)));
                }
                let _ = writeln!(out, "{line}");
            }
        }
    }

    /// Throughput, failures, the open loop's misses and the peak's CPU cost.
    fn counts(&self, out: &mut String) {
        self.count(out, "requests/s", &|v| v["rps"].as_f64(), self.measure == "peak");
        if self.measure == "open" {
            self.count(out, "missed", &|v| v["missed"].as_f64(), false);
            self.count(out, "dispatched > 1 ms late", &|v| v["late"].as_f64(), false);
        }
        self.count(out, "failed", &|v| v["failed"].as_f64(), false);
        if self.measure == "peak" {
            let util = |v: &Value| v["watch"]["cpu_util"].as_f64().map(|u| u * 100.0);
            self.count(out, "watched process CPU (% of a core)", &util, false);
            self.count(out, "watched process CPU µs / request", &|v| v["watch"]["cpu_us_per_req"].as_f64(), false);
            let capacity = |v: &Value| v["watch"]["cpu_us_per_req"].as_f64().filter(|c| *c > 0.0).map(|c| 1e6 / c);
            self.count(out, "one-core capacity at that cost (req/s)", &capacity, false);
        }
    }

    /// A row of whole numbers; with `ratio`, each target's as a share of the baseline's.
    fn count(&self, out: &mut String, name: &str, f: &dyn Fn(&Value) -> Option<f64>, ratio: bool) {
        let b = self.base.and_then(f);
        let mut line = format!("| {name} | {} |", fmt0(b));
        for (_, v) in &self.targets {
            let x = v.and_then(f);
            let rel = match (x, b) {
                (Some(x), Some(b)) if ratio && b > 0.0 => format!("{:.0}%", 100.0 * x / b),
                _ => String::new(),
            };
            line.push_str(&format!(" {} | {rel} |", fmt0(x)));
        }
        let _ = writeln!(out, "{line}");
    }

    /// A row of the machine's load during the runs, in cores.
    fn load(&self, out: &mut String, name: &str, key: &str) {
        let f = |v: Option<&Value>| v.and_then(|v| v[key].as_f64()).map(|x| format!("{x:.2}"));
        let mut line = format!("| {name} | {} |", f(self.base).unwrap_or_else(|| "–".into()));
        for (_, v) in &self.targets {
            line.push_str(&format!(" {} | |", f(*v).unwrap_or_else(|| "–".into())));
        }
        let _ = writeln!(out, "{line}");
    }
}

/// Finds the summary line of a measurement, plain or streaming, of a label.
type Find<'a, 'f> = &'f dyn Fn(&str, bool, &str) -> Option<&'a Value>;

/// The acceptance targets of the gateway issues, each measured and judged, and the cost of crossing cores.
fn targets<'a>(find: Find<'a, '_>, opts: &Options) -> String {
    let mut checks = Checks { out: String::from("\n#### Targets\n\n| target | measured | met |\n|---|---:|:---:|\n") };
    let added = Added { find, baseline: &opts.baseline };
    let gw = opts.gateway.as_str();
    for (stream, key, what) in [(false, "latency_us", "non-streaming"), (true, "ttfb_us", "streaming TTFB")] {
        checks.check(
            format!("issue 2 (a): concurrency 1, {what}, p50 added ≤ {ADDED_C1_P50} µs"),
            added.p("latency", stream, gw, key, "p50"),
            "µs",
            &|v| v <= ADDED_C1_P50,
        );
    }
    let info = cross_core(&added, gw, &opts.cross);
    for (label, issue) in [(gw, "issue 2 (b)"), (opts.budgets.as_str(), "issue 3, budgets + limits on")] {
        for (stream, key, what) in [(false, "latency_us", "non-streaming"), (true, "ttfb_us", "streaming TTFB")] {
            checks.check(
                format!("{issue}: open loop, {what}, p50 added ≤ {ADDED_OPEN_P50} µs"),
                added.p("open", stream, label, key, "p50"),
                "µs",
                &|v| v <= ADDED_OPEN_P50,
            );
            checks.check(
                format!("{issue}: open loop, {what}, p99 added ≤ {ADDED_OPEN_P99} µs"),
                added.p("open", stream, label, key, "p99"),
                "µs",
                &|v| v <= ADDED_OPEN_P99,
            );
        }
    }
    peak_targets(&mut checks, find, opts);
    let mut out = checks.out;
    if !info.is_empty() {
        out.push_str("\n| cross-core cost (information, not a target) | | |\n|---|---:|---|\n");
        out.push_str(&info);
    }
    out
}

/// Issue 2 (c) and issue 3: peak throughput, measured and from the CPU cost, peak RSS, and budgets' cost.
fn peak_targets<'a>(checks: &mut Checks, find: Find<'a, '_>, opts: &Options) {
    let gw = opts.gateway.as_str();
    checks.check(
        format!("issue 2 (c): peak, non-streaming, ≥ {PEAK_RPS} req/s on one core (measured)"),
        find("peak", false, gw).and_then(|v| v["rps"].as_f64()),
        "req/s",
        &|v| v >= PEAK_RPS,
    );
    checks.check(
        "issue 2 (c): peak, non-streaming, one-core capacity from the gateway's CPU µs per request".to_string(),
        find("peak", false, gw)
            .and_then(|v| v["watch"]["cpu_us_per_req"].as_f64())
            .filter(|c| *c > 0.0)
            .map(|c| 1e6 / c),
        "req/s",
        &|v| v >= PEAK_RPS,
    );
    checks.check(
        format!("issue 2: gateway peak RSS ≤ {RSS_MIB} MiB"),
        opts.rss_kib.map(|k| k as f64 / 1024.0),
        "MiB",
        &|v| v <= RSS_MIB,
    );
    for (stream, what) in [(false, "non-streaming"), (true, "streaming")] {
        let ratio = find("peak", stream, &opts.budgets)
            .and_then(|v| v["rps"].as_f64())
            .zip(find("peak", stream, gw).and_then(|v| v["rps"].as_f64()))
            .filter(|(_, off)| *off > 0.0)
            .map(|(on, off)| 100.0 * on / off);
        checks.check(
            format!("issue 3: peak {what} with budgets + limits on ≥ {:.0}% of off", BUDGETS_PEAK_RATIO * 100.0),
            ratio,
            "%",
            &|v| v >= BUDGETS_PEAK_RATIO * 100.0,
        );
    }
}

/// The path through the gateway crosses between the cores four times, the direct path not at all; the
/// upstream served from the gateway's core (two crossings, label `cross`) measures what crossing costs on this
/// machine. Rows of information, not targets.
fn cross_core(added: &Added<'_, '_, '_>, gw: &str, cross: &str) -> String {
    let mut info = String::new();
    for measure in ["latency", "open"] {
        for (stream, key, what) in [(false, "latency_us", "non-streaming"), (true, "ttfb_us", "streaming TTFB")] {
            let crossing = added.p(measure, stream, cross, key, "p50");
            let own = added.p(measure, stream, gw, key, "p50").zip(crossing).map(|(a, c)| a - 2.0 * c);
            if let (Some(c), Some(o)) = (crossing, own) {
                let _ = writeln!(
                    info,
                    "| {measure}, {what}, p50: floor of 4 core crossings (2 × {c:.1}) | {:.1} µs | gateway's own share ≈ {o:.1} µs |",
                    2.0 * c
                );
            }
        }
    }
    info
}

/// The targets' table being written.
struct Checks {
    out: String,
}

impl Checks {
    /// One target's row: what, the value measured (or not), and whether `ok` judges it met.
    fn check(&mut self, what: String, value: Option<f64>, unit: &str, ok: &dyn Fn(f64) -> bool) {
        let (shown, met) = match value {
            Some(v) => (format!("{v:.1} {unit}"), if ok(v) { "yes" } else { "**no**" }),
            None => ("not measured".to_string(), "?"),
        };
        let _ = writeln!(self.out, "| {what} | {shown} | {met} |");
    }
}

/// What a label's runs add to the baseline's.
struct Added<'a, 'f, 'b> {
    find: Find<'a, 'f>,
    baseline: &'b str,
}

impl Added<'_, '_, '_> {
    /// The percentile `p` of series `key` of `label`'s run less the baseline's.
    fn p(&self, measure: &str, stream: bool, label: &str, key: &str, p: &str) -> Option<f64> {
        let b = (self.find)(measure, stream, self.baseline)?[key][p].as_f64()?;
        let x = (self.find)(measure, stream, label)?[key][p].as_f64()?;
        Some(x - b)
    }
}

fn fmt(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.1}")).unwrap_or_else(|| "–".to_string())
}

fn fmt0(x: Option<f64>) -> String {
    x.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".to_string())
}

fn fmt_added(x: Option<f64>, base: Option<f64>) -> String {
    match (x, base) {
        (Some(x), Some(b)) => format!("{:+.1}", x - b),
        _ => "–".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(label: &str, measure: &str, stream: bool, p50: f64, p99: f64, rps: f64) -> String {
        serde_json::json!({
            "svc_bench": 1, "label": label, "measure": measure, "stream": stream, "rps": rps,
            "rate": 1000.0, "concurrency": 64, "missed": 0, "late": 0, "failed": 0,
            "latency_us": {"p50": p50, "p90": p50, "p99": p99, "p999": p99},
            "ttfb_us": if stream { serde_json::json!({"p50": p50 / 2.0, "p90": p50, "p99": p99 / 2.0, "p999": p99}) } else { Value::Null },
            "watch": {"cpu_util": 0.5, "cpu_us_per_req": 40.0},
        })
        .to_string()
    }

    #[test]
    fn added_latency_and_targets() {
        let input = [
            "some human text",
            &line("direct", "latency", false, 100.0, 200.0, 9000.0),
            &line("gw-off", "latency", false, 150.0, 260.0, 6000.0),
            &line("direct-core0", "latency", false, 110.0, 210.0, 8000.0),
            &line("direct", "open", false, 120.0, 300.0, 1000.0),
            &line("gw-off", "open", false, 200.0, 2000.0, 1000.0),
            &line("gw-on", "open", false, 210.0, 400.0, 1000.0),
            &line("direct", "peak", false, 1000.0, 3000.0, 30000.0),
            &line("gw-off", "peak", false, 3000.0, 9000.0, 20000.0),
            &line("gw-on", "peak", false, 3500.0, 9000.0, 15000.0),
        ]
        .join("\n");
        let opts = Options {
            baseline: "direct".into(),
            gateway: "gw-off".into(),
            budgets: "gw-on".into(),
            cross: "direct-core0".into(),
            rss_kib: Some(30 * 1024),
            proxy: "nginx".into(),
            proxy_rss_kib: None,
            floor: "floor".into(),
            floor_rss_kib: None,
        };
        let r = render(&input, &opts);
        assert!(r.contains("| p50 (µs) | 100.0 | 150.0 | +50.0 |"), "{r}");
        assert!(r.contains("concurrency 1, non-streaming, p50 added ≤ 60 µs | 50.0 µs | yes |"), "{r}");
        assert!(r.contains("issue 2 (b): open loop, non-streaming, p99 added ≤ 1000 µs | 1700.0 µs | **no** |"), "{r}");
        assert!(r.contains("budgets + limits on: open loop, non-streaming, p99 added ≤ 1000 µs | 100.0 µs | yes |"));
        assert!(r.contains("peak non-streaming with budgets + limits on ≥ 80% of off | 75.0 % | **no** |"), "{r}");
        assert!(r.contains("one-core capacity from the gateway's CPU µs per request | 25000.0 req/s | yes |"));
        assert!(r.contains("peak RSS ≤ 50 MiB | 30.0 MiB | yes |"));
        assert!(r.contains("| requests/s | 30000 | 20000 | 67% | 15000 | 50% |"), "{r}");
        assert!(r.contains("streaming TTFB, p50 added ≤ 60 µs | not measured | ? |"));
        assert!(r.contains("| latency, non-streaming, p50: floor of 4 core crossings (2 × 10.0) | 20.0 µs | gateway's own share ≈ 30.0 µs |"), "{r}");
        assert!(!r.contains("| direct-core0 | added | gw-on"), "{r}");
    }
}
