//! Exact percentiles over recorded latencies.
//!
//! Every sample is kept (a few hundred thousand `u64` at most for a run of seconds), sorted once, and read
//! with the nearest-rank method: the p-th percentile of n sorted values is the value at rank ⌈p·n⌉. No
//! histogram bucketing, so small differences between two targets are not rounded away.

use serde_json::{json, Value};
use std::time::Duration;

/// The outcome of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// From the start (or, open loop, the scheduled start) to the first non-empty body frame.
    pub ttfb: Duration,
    /// From the start (or scheduled start) to the end of the body.
    pub total: Duration,
    /// 2xx status and, for a stream, a body that ended with `data: [DONE]`.
    pub ok: bool,
}

/// Percentiles of one latency series, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    /// Number of values.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Percentiles {
    /// Computes the percentiles of `values` (nanoseconds); sorts them in place.
    pub fn of(values: &mut [u64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_unstable();
        let n = values.len();
        let rank = |q: f64| -> f64 {
            // Nearest rank: ceil(q * n), 1-based, clamped to [1, n].
            let r = (q * n as f64).ceil() as usize;
            let i = r.clamp(1, n) - 1;
            values[i] as f64 / 1_000.0
        };
        let sum: u128 = values.iter().map(|&v| u128::from(v)).sum();
        Percentiles {
            count: n,
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            p999: rank(0.999),
            max: values[n - 1] as f64 / 1_000.0,
            mean: sum as f64 / n as f64 / 1_000.0,
        }
    }

    /// The JSON form used in the summary line (µs, one decimal).
    pub fn to_json(&self) -> Value {
        let r = |x: f64| (x * 10.0).round() / 10.0;
        json!({
            "count": self.count,
            "p50": r(self.p50), "p90": r(self.p90), "p99": r(self.p99), "p999": r(self.p999),
            "max": r(self.max), "mean": r(self.mean),
        })
    }

    /// One human-readable line.
    pub fn line(&self) -> String {
        format!(
            "p50 {:>9.1} µs  p90 {:>9.1} µs  p99 {:>9.1} µs  p99.9 {:>9.1} µs  max {:>9.1} µs  mean {:>9.1} µs",
            self.p50, self.p90, self.p99, self.p999, self.max, self.mean
        )
    }
}

/// Percentiles of the successful samples: (full time, time to first byte).
pub fn summarize(samples: &[Sample]) -> (Percentiles, Percentiles) {
    let ok = samples.iter().filter(|s| s.ok);
    let mut total: Vec<u64> = ok.clone().map(|s| nanos(s.total)).collect();
    let mut ttfb: Vec<u64> = ok.map(|s| nanos(s.ttfb)).collect();
    (Percentiles::of(&mut total), Percentiles::of(&mut ttfb))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=1000).map(|i| i * 1_000).collect();
        v.reverse();
        let p = Percentiles::of(&mut v);
        assert_eq!(p.count, 1000);
        assert_eq!(p.p50, 500.0);
        assert_eq!(p.p90, 900.0);
        assert_eq!(p.p99, 990.0);
        assert_eq!(p.p999, 999.0);
        assert_eq!(p.max, 1000.0);
        assert_eq!(p.mean, 500.5);
    }

    #[test]
    fn small_and_empty_series() {
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
        let p = Percentiles::of(&mut [7_000]);
        assert_eq!((p.p50, p.p999, p.max), (7.0, 7.0, 7.0));
    }

    #[test]
    fn failed_samples_are_left_out() {
        let s = |us: u64, ok| Sample { ttfb: Duration::from_micros(us / 2), total: Duration::from_micros(us), ok };
        let (total, ttfb) = summarize(&[s(100, true), s(1_000_000, false), s(300, true)]);
        assert_eq!(total.count, 2);
        assert_eq!(total.max, 300.0);
        assert_eq!(ttfb.p50, 50.0);
    }
}
