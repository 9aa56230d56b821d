//! The gateway against a bare reverse proxy (nginx) placed exactly where the gateway is, in the same run
//! (issue 14): every figure absolute and as the ratio svc / proxy, with the targets checked. The
//! honest floor of a proxy hop on this machine is what the proxy pays for it, so the targets are ratios.

use serde_json::Value;
use std::fmt::Write as _;

/// Added p50 (concurrency 1, 1,000 req/s, streaming time to first byte), as a multiple of the proxy's.
const LATENCY_RATIO: f64 = 1.2;
/// CPU per request at peak, as a multiple of the proxy's.
const CPU_RATIO: f64 = 1.5;
/// The gateway's peak RSS, MiB.
const RSS_MIB: f64 = 32.0;

/// What to compare: the direct runs, the gateway runs (budgets, limits and spend on), the proxy runs and the
/// floor runs (the gateway's stack alone, `svc-floor`), by label; peak RSS of each process.
#[derive(Debug, Clone)]
pub struct Against<'a> {
    /// The upstream called directly.
    pub direct: &'a str,
    /// The gateway.
    pub gateway: &'a str,
    /// The proxy.
    pub proxy: &'a str,
    /// The gateway's stack alone; its columns are shown when the run has its measurements.
    pub floor: &'a str,
    /// Peak RSS of the gateway, KiB.
    pub gateway_rss_kib: Option<u64>,
    /// Peak RSS of the proxy, KiB.
    pub proxy_rss_kib: Option<u64>,
    /// Peak RSS of the floor, KiB.
    pub floor_rss_kib: Option<u64>,
}

/// The section, or an empty string when the run has no proxy measurements.
pub fn render(lines: &[Value], a: &Against<'_>) -> String {
    let find = |measure: &str, stream: bool, label: &str| -> Option<&Value> {
        lines.iter().find(|v| v["measure"] == measure && v["stream"] == stream && v["label"] == label)
    };
    if !lines.iter().any(|v| v["label"] == a.proxy) {
        return String::new();
    }
    let floor = lines.iter().any(|v| v["label"] == a.floor);
    let added = |measure: &str, stream: bool, label: &str, key: &str, p: &str| -> Option<f64> {
        let b = find(measure, stream, a.direct)?[key][p].as_f64()?;
        Some(find(measure, stream, label)?[key][p].as_f64()? - b)
    };
    let mut out = format!(
        "\n#### Against {proxy} in the gateway's place (same run)\n\n| | {gw} | {proxy} | {gw} / {proxy} | target |",
        gw = a.gateway,
        proxy = a.proxy
    );
    if floor {
        let _ = write!(out, " {f} | {f} / {proxy} |", f = a.floor, proxy = a.proxy);
    }
    out.push_str(if floor { "\n|---|---:|---:|---:|:---:|---:|---:|\n" } else { "\n|---|---:|---:|---:|:---:|\n" });
    let mut rows = Rows { out, a, floor };
    for (measure, name) in [("latency", "concurrency 1"), ("open", "1,000 req/s")] {
        for (stream, key, what) in [(false, "latency_us", "non-streaming"), (true, "ttfb_us", "streaming TTFB")] {
            for p in ["p50", "p99"] {
                let target = (p == "p50").then_some(LATENCY_RATIO);
                let value = |label: &str| added(measure, stream, label, key, p);
                rows.row(format!("{name}, {what}, {p} added"), &value, " µs", target);
            }
        }
    }
    let cpu = |measure: &str, stream: bool, label: &str, key: &str| -> Option<f64> {
        find(measure, stream, label)?["watch"][key].as_f64()
    };
    for (measure, name, target) in [("open", "1,000 req/s", None), ("peak", "peak", Some(CPU_RATIO))] {
        for (stream, what) in [(false, "non-streaming"), (true, "streaming")] {
            let t = if stream { None } else { target };
            let value = |label: &str| cpu(measure, stream, label, "cpu_us_per_req");
            rows.row(format!("CPU per request at {name}, {what}"), &value, " µs", t);
            // The split into user and system time is sound only where the core is busy (see `procstat`).
            if measure == "peak" {
                for (key, part) in [("user_us_per_req", "user"), ("system_us_per_req", "system")] {
                    let value = |label: &str| cpu(measure, stream, label, key);
                    rows.row(format!("… of which {part}"), &value, " µs", None);
                }
            }
        }
    }
    for (stream, what) in [(false, "non-streaming"), (true, "streaming")] {
        let rps = |label: &str| find("peak", stream, label).and_then(|v| v["rps"].as_f64());
        rows.row(format!("peak, {what} (req/s)"), &rps, "", None);
    }
    rows.rss()
}

/// The section's table being written.
struct Rows<'a, 'b> {
    out: String,
    a: &'b Against<'a>,
    /// Whether the floor's columns are shown.
    floor: bool,
}

impl Rows<'_, '_> {
    /// One row: what, then the gateway's, the proxy's and the floor's figures (by label), and the target ratio.
    fn row(&mut self, what: String, value: &dyn Fn(&str) -> Option<f64>, unit: &str, target: Option<f64>) {
        let a = self.a;
        let (svc, proxy) = (value(a.gateway), value(a.proxy));
        let r = ratio(svc, proxy);
        let met = match (r, target) {
            (Some(r), Some(t)) => format!("≤ {t}×: {}", if r <= t { "yes" } else { "**no**" }),
            (None, Some(t)) => format!("≤ {t}×: ?"),
            _ => String::new(),
        };
        let shown = |x: Option<f64>| x.map(|x| format!("{x:.1}{unit}")).unwrap_or_else(|| "–".into());
        let _ = write!(self.out, "| {what} | {} | {} | {} | {met} |", shown(svc), shown(proxy), shown_ratio(r));
        if self.floor {
            let f = value(a.floor);
            let _ = write!(self.out, " {} | {} |", shown(f), shown_ratio(ratio(f, proxy)));
        }
        self.out.push('\n');
    }

    /// The peak RSS row, the gateway's RSS target below the table, and the section.
    fn rss(mut self) -> String {
        let a = self.a;
        let mib = |k: Option<u64>| k.map(|k| k as f64 / 1024.0);
        let rss = |label: &str| {
            let kib = [(a.gateway, a.gateway_rss_kib), (a.proxy, a.proxy_rss_kib), (a.floor, a.floor_rss_kib)];
            mib(kib.into_iter().find(|(l, _)| *l == label).and_then(|(_, k)| k))
        };
        self.row("peak RSS".into(), &rss, " MiB", None);
        if let Some(rss) = mib(a.gateway_rss_kib) {
            let met = if rss <= RSS_MIB { "yes" } else { "**no**" };
            let _ = writeln!(self.out, "\n{} peak RSS {rss:.1} MiB (target ≤ {RSS_MIB} MiB): {met}", a.gateway);
        }
        self.out
    }
}

/// `x` as a multiple of the proxy's figure.
fn ratio(x: Option<f64>, proxy: Option<f64>) -> Option<f64> {
    x.zip(proxy).filter(|(_, p)| *p > 0.0).map(|(x, p)| x / p)
}

fn shown_ratio(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}")).unwrap_or_else(|| "–".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(label: &str, measure: &str, stream: bool, p50: f64, cpu: f64, rps: f64) -> Value {
        json!({
            "svc_bench": 1, "label": label, "measure": measure, "stream": stream, "rps": rps,
            "latency_us": {"p50": p50, "p99": p50 * 2.0}, "ttfb_us": {"p50": p50 / 2.0, "p99": p50},
            "watch": {"cpu_us_per_req": cpu},
        })
    }

    /// The labels of bench/run.sh; the gateway's peak RSS 30 MiB, the proxy's `proxy_mib`, the floor's 5.
    fn against(proxy_mib: u64) -> Against<'static> {
        Against {
            direct: "direct",
            gateway: "gw-on",
            proxy: "nginx",
            floor: "floor",
            gateway_rss_kib: Some(30 * 1024),
            proxy_rss_kib: Some(proxy_mib * 1024),
            floor_rss_kib: Some(5 * 1024),
        }
    }

    #[test]
    fn ratios_against_the_proxy_with_targets() {
        let lines = vec![
            line("direct", "latency", false, 100.0, 0.0, 9000.0),
            line("gw-on", "latency", false, 160.0, 90.0, 6000.0),
            line("nginx", "latency", false, 150.0, 40.0, 6000.0),
            line("direct", "peak", false, 1000.0, 0.0, 30000.0),
            line("gw-on", "peak", false, 3000.0, 60.0, 10000.0),
            line("nginx", "peak", false, 2000.0, 50.0, 12000.0),
        ];
        let a = against(13);
        let r = render(&lines, &a);
        assert!(
            r.contains("| concurrency 1, non-streaming, p50 added | 60.0 µs | 50.0 µs | 1.20 | ≤ 1.2×: yes |"),
            "{r}"
        );
        assert!(
            r.contains("| CPU per request at peak, non-streaming | 60.0 µs | 50.0 µs | 1.20 | ≤ 1.5×: yes |"),
            "{r}"
        );
        assert!(r.contains("| peak, non-streaming (req/s) | 10000.0 | 12000.0 | 0.83 |  |"), "{r}");
        assert!(r.contains("gw-on peak RSS 30.0 MiB (target ≤ 32 MiB): yes"), "{r}");
        assert!(render(&lines[..2], &a).is_empty());
        assert!(!r.contains("| floor |"), "no floor columns without its runs: {r}");
    }

    #[test]
    fn the_floor_beside_the_proxy_with_the_split_of_cpu() {
        let mut lines = vec![
            line("direct", "peak", false, 1000.0, 0.0, 30000.0),
            line("gw-on", "peak", false, 3000.0, 60.0, 10000.0),
            line("nginx", "peak", false, 2000.0, 50.0, 12000.0),
            line("floor", "peak", false, 2500.0, 55.0, 11000.0),
        ];
        lines[1]["watch"]["user_us_per_req"] = json!(45.0);
        lines[1]["watch"]["system_us_per_req"] = json!(15.0);
        lines[2]["watch"]["user_us_per_req"] = json!(10.0);
        lines[2]["watch"]["system_us_per_req"] = json!(40.0);
        lines[3]["watch"]["user_us_per_req"] = json!(20.0);
        lines[3]["watch"]["system_us_per_req"] = json!(35.0);
        let a = against(10);
        let r = render(&lines, &a);
        assert!(r.contains("| | gw-on | nginx | gw-on / nginx | target | floor | floor / nginx |"), "{r}");
        assert!(
            r.contains(
                "| CPU per request at peak, non-streaming | 60.0 µs | 50.0 µs | 1.20 | ≤ 1.5×: yes | 55.0 µs | 1.10 |"
            ),
            "{r}"
        );
        assert!(r.contains("| … of which user | 45.0 µs | 10.0 µs | 4.50 |  | 20.0 µs | 2.00 |"), "{r}");
        assert!(r.contains("| … of which system | 15.0 µs | 40.0 µs | 0.38 |  | 35.0 µs | 0.88 |"), "{r}");
        assert!(r.contains("| peak RSS | 30.0 MiB | 10.0 MiB | 3.00 |  | 5.0 MiB | 0.50 |"), "{r}");
    }
}
