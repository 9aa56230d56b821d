//! The verdict on a deployment: its [`State`] from the window's figures and the standing probe failure, and
//! the sentence that says why. Pure functions, so the thresholds are tested as a table.

use super::window::Figures;
use super::State;
use svc_config::HealthSettings;

/// Why a deployment is in its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The last probe failed and no call has been answered since.
    Probe,
    /// The window's error rate is at or above a threshold.
    ErrorRate,
    /// The window's p95 latency is at or above `degraded_p95_latency_ms`.
    Latency,
    /// Enough calls, and their figures are within the thresholds.
    Fine,
    /// Too few calls to judge, and no failed probe: nothing says it is unwell.
    Quiet,
}

/// The state the figures call for. A failed probe makes a deployment unavailable until a probe or a call
/// succeeds; otherwise the window decides, once it holds `health_min_requests` calls.
pub fn judge(f: &Figures, probe_failed: bool, s: &HealthSettings) -> (State, Cause) {
    if probe_failed {
        return (State::Unavailable, Cause::Probe);
    }
    if f.calls < s.min_requests.max(1) {
        return (State::Healthy, Cause::Quiet);
    }
    let rate = f.error_permille();
    let limit_ms = s.degraded_p95_latency.as_millis() as u64;
    if rate >= s.unavailable_error_permille {
        (State::Unavailable, Cause::ErrorRate)
    } else if rate >= s.degraded_error_permille {
        (State::Degraded, Cause::ErrorRate)
    } else if limit_ms > 0 && f.p95_ms.is_some_and(|p| p >= limit_ms) {
        (State::Degraded, Cause::Latency)
    } else {
        (State::Healthy, Cause::Fine)
    }
}

/// The reason given in events, reports and logs.
pub fn describe(cause: Cause, f: &Figures, probe_error: Option<&str>, s: &HealthSettings) -> String {
    let window = s.window.as_secs();
    match cause {
        Cause::Probe => format!("probe failed: {}", probe_error.unwrap_or("no answer")),
        Cause::ErrorRate => format!(
            "{} of {} calls failed in the last {window} s (error rate {:.3})",
            f.errors,
            f.calls,
            f.error_rate()
        ),
        Cause::Latency => format!(
            "p95 latency {} ms in the last {window} s is at or above {} ms",
            f.p95_ms.unwrap_or(0),
            s.degraded_p95_latency.as_millis()
        ),
        Cause::Fine => format!(
            "{} of {} calls failed in the last {window} s (error rate {:.3}), p95 latency {} ms",
            f.errors,
            f.calls,
            f.error_rate(),
            f.p95_ms.unwrap_or(0)
        ),
        Cause::Quiet => {
            format!("fewer than {} calls in the last {window} s and no failed probe", s.min_requests.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn thresholds_decide_in_order() {
        let s = HealthSettings {
            min_requests: 10,
            degraded_error_permille: 200,
            unavailable_error_permille: 500,
            degraded_p95_latency: Duration::from_millis(1000),
            ..HealthSettings::default()
        };
        let f = |calls, errors, p95_ms| Figures { calls, errors, p95_ms };
        let cases = [
            (f(0, 0, None), false, (State::Healthy, Cause::Quiet)),
            (f(9, 9, None), false, (State::Healthy, Cause::Quiet)),
            (f(9, 0, Some(10)), true, (State::Unavailable, Cause::Probe)),
            (f(100, 0, Some(10)), true, (State::Unavailable, Cause::Probe)),
            (f(10, 1, Some(999)), false, (State::Healthy, Cause::Fine)),
            (f(10, 2, Some(10)), false, (State::Degraded, Cause::ErrorRate)),
            (f(10, 1, Some(1000)), false, (State::Degraded, Cause::Latency)),
            (f(10, 4, Some(5000)), false, (State::Degraded, Cause::ErrorRate)),
            (f(10, 5, Some(10)), false, (State::Unavailable, Cause::ErrorRate)),
            (f(10, 10, None), false, (State::Unavailable, Cause::ErrorRate)),
        ];
        for (figures, probe_failed, expected) in cases {
            assert_eq!(judge(&figures, probe_failed, &s), expected, "{figures:?} probe_failed={probe_failed}");
        }
        let no_latency = HealthSettings { degraded_p95_latency: Duration::ZERO, ..s };
        assert_eq!(judge(&f(10, 0, Some(u64::MAX)), false, &no_latency), (State::Healthy, Cause::Fine));
    }

    #[test]
    fn reasons_name_the_figures() {
        let s = HealthSettings::default();
        let f = Figures { calls: 12, errors: 7, p95_ms: Some(223) };
        assert_eq!(
            describe(Cause::ErrorRate, &f, None, &s),
            "7 of 12 calls failed in the last 60 s (error rate 0.583)"
        );
        assert_eq!(
            describe(Cause::Probe, &f, Some("upstream `d` unreachable: connection refused"), &s),
            "probe failed: upstream `d` unreachable: connection refused"
        );
        assert_eq!(
            describe(Cause::Latency, &f, None, &s),
            "p95 latency 223 ms in the last 60 s is at or above 60000 ms"
        );
    }
}
