//! Budget durations (`30s`, `15m`, `12h`, `30d`, `1w`, `1mo`) and the period that contains an instant.
//!
//! Periods are computed from an anchor, never reset by a timer: `period_at(anchor, now)` is a pure function,
//! so a gateway that was down across a reset still starts the new period at the right moment.

use chrono::{DateTime, Months, Utc};
use std::fmt;

/// Length of a budget period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BudgetDuration {
    /// A fixed number of seconds (`s`, `m`, `h`, `d`, `w` units).
    Seconds(u64),
    /// Calendar months stepped from the anchor, clamped to month end (`mo` unit).
    Months(u32),
}

/// A duration text that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a duration; write a positive whole number and a unit: s, m, h, d, w or mo (e.g. `30d`)")]
    Invalid(String),
}

/// One budget period: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// Inclusive start.
    pub start: DateTime<Utc>,
    /// Exclusive end, the reset time.
    pub end: DateTime<Utc>,
}

impl BudgetDuration {
    /// Parses `<n>s`, `<n>m`, `<n>h`, `<n>d`, `<n>w` or `<n>mo` with `n` ≥ 1.
    pub fn parse(text: &str) -> Result<BudgetDuration, DurationError> {
        let t = text.trim();
        let bad = || DurationError::Invalid(t.to_string());
        let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (num, unit) = t.split_at(split);
        let n: u64 = num.parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        let secs = |mult: u64| n.checked_mul(mult).map(BudgetDuration::Seconds).ok_or_else(bad);
        match unit {
            "s" => secs(1),
            "m" => secs(60),
            "h" => secs(3_600),
            "d" => secs(86_400),
            "w" => secs(604_800),
            "mo" => u32::try_from(n).map(BudgetDuration::Months).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }

    /// The period that contains `now`, for periods repeating from `anchor`. Instants before the anchor belong
    /// to the first period. Total for every duration and instant: a period whose end would fall past the last
    /// instant chrono can represent ends there (it never resets), and `Months(0)` steps as `Months(1)`.
    pub fn period_at(self, anchor: DateTime<Utc>, now: DateTime<Utc>) -> Period {
        match self {
            BudgetDuration::Seconds(len) => {
                let len_ms = i64::try_from(len).unwrap_or(i64::MAX).saturating_mul(1000).max(1);
                let elapsed = (now - anchor).num_milliseconds().max(0);
                let k = elapsed / len_ms;
                let start = anchor + chrono::Duration::milliseconds(k * len_ms);
                let end = start.checked_add_signed(chrono::Duration::milliseconds(len_ms));
                Period { start, end: end.unwrap_or(DateTime::<Utc>::MAX_UTC) }
            }
            BudgetDuration::Months(n) => {
                let n = n.max(1);
                // The start of period `k`, or `None` past chrono's range. Every step is computed from the
                // anchor so month-end clamping never drifts (Jan 31 → Feb 28 → Mar 31, not Mar 28).
                let step = |k: u32| k.checked_mul(n).and_then(|m| anchor.checked_add_months(Months::new(m)));
                let mut k = 0u32;
                if now > anchor {
                    let months = (now.signed_duration_since(anchor).num_days() / 31) as u32 / n;
                    k = months.saturating_sub(1);
                }
                // The loop ends: `k` only grows while its next step exists and is not past `now`.
                while k.checked_add(1).and_then(step).is_some_and(|next| next <= now) {
                    k += 1;
                }
                let end = k.checked_add(1).and_then(step).unwrap_or(DateTime::<Utc>::MAX_UTC);
                Period { start: step(k).unwrap_or(anchor), end }
            }
        }
    }
}

impl fmt::Display for BudgetDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BudgetDuration::Months(n) => write!(f, "{n}mo"),
            BudgetDuration::Seconds(s) if s % 604_800 == 0 => write!(f, "{}w", s / 604_800),
            BudgetDuration::Seconds(s) if s % 86_400 == 0 => write!(f, "{}d", s / 86_400),
            BudgetDuration::Seconds(s) if s % 3_600 == 0 => write!(f, "{}h", s / 3_600),
            BudgetDuration::Seconds(s) if s % 60 == 0 => write!(f, "{}m", s / 60),
            BudgetDuration::Seconds(s) => write!(f, "{s}s"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, m: u32, d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, 0, 0).single().unwrap_or_default()
    }

    #[test]
    fn parses_every_unit() {
        let cases = [
            ("30s", BudgetDuration::Seconds(30)),
            ("15m", BudgetDuration::Seconds(900)),
            ("12h", BudgetDuration::Seconds(43_200)),
            ("30d", BudgetDuration::Seconds(2_592_000)),
            ("1w", BudgetDuration::Seconds(604_800)),
            ("1mo", BudgetDuration::Months(1)),
        ];
        for (text, want) in cases {
            assert_eq!(BudgetDuration::parse(text), Ok(want), "{text}");
            assert_eq!(want.to_string(), text);
        }
        for bad in ["", "d", "0d", "30", "30x", "1M", "-1d", "1.5d", "30 d"] {
            assert!(BudgetDuration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fixed_periods_repeat_from_the_anchor() {
        let anchor = at(2026, 11, 1, 0);
        let d = BudgetDuration::parse("1d").unwrap_or(BudgetDuration::Seconds(1));
        let p = d.period_at(anchor, at(2026, 11, 3, 5));
        assert_eq!(p, Period { start: at(2026, 11, 3, 0), end: at(2026, 11, 4, 0) });
        // Exactly at the boundary the new period has begun.
        let p = d.period_at(anchor, at(2026, 11, 4, 0));
        assert_eq!(p.start, at(2026, 11, 4, 0));
        // Before the anchor: the first period.
        assert_eq!(d.period_at(anchor, at(2026, 10, 1, 0)).start, anchor);
    }

    /// Durations too long for chrono's calendar give a last period that never ends, instead of a panic
    /// (`Seconds`: the end overflowed) or a loop that never ends (`Months`: the step fell back to the anchor).
    #[test]
    fn periods_past_the_end_of_time_never_reset() {
        let anchor = at(2026, 11, 1, 0);
        let now = at(2027, 3, 1, 0);
        let cases = [
            BudgetDuration::Seconds(u64::MAX),
            BudgetDuration::Seconds(10_000_000_000_000 * 604_800),
            BudgetDuration::Months(u32::MAX),
            BudgetDuration::Months(4_000_000_000),
        ];
        for d in cases {
            assert_eq!(d.period_at(anchor, now), Period { start: anchor, end: DateTime::<Utc>::MAX_UTC }, "{d:?}");
        }
        // Parsed text reaches them too.
        let d = BudgetDuration::parse("4000000000mo").unwrap_or(BudgetDuration::Seconds(1));
        assert_eq!(d.period_at(anchor, now).end, DateTime::<Utc>::MAX_UTC);
        // A period near the end of time ends there.
        let late = DateTime::<Utc>::MAX_UTC - chrono::Duration::days(10);
        let p = BudgetDuration::Months(1).period_at(late - chrono::Duration::days(100), late);
        assert!(p.start <= late && p.end == DateTime::<Utc>::MAX_UTC, "{p:?}");
        // `Months(0)` (which `parse` refuses) steps by one month.
        assert_eq!(BudgetDuration::Months(0).period_at(anchor, now), BudgetDuration::Months(1).period_at(anchor, now));
    }

    #[test]
    fn months_clamp_to_month_end_without_drift() {
        let anchor = at(2026, 1, 31, 0);
        let d = BudgetDuration::Months(1);
        let feb = d.period_at(anchor, at(2026, 2, 15, 0));
        assert_eq!(feb, Period { start: at(2026, 1, 31, 0), end: at(2026, 2, 28, 0) });
        let mar = d.period_at(anchor, at(2026, 3, 1, 0));
        assert_eq!(mar, Period { start: at(2026, 2, 28, 0), end: at(2026, 3, 31, 0) });
        let leap = d.period_at(anchor, at(2028, 2, 29, 12));
        assert_eq!(leap.start, at(2028, 2, 29, 0));
        let q = BudgetDuration::Months(3).period_at(at(2026, 11, 30, 0), at(2027, 3, 1, 0));
        assert_eq!(q, Period { start: at(2027, 2, 28, 0), end: at(2027, 5, 30, 0) });
    }
}
