//! Budget durations and periods on arbitrary input: the text before the first NUL byte is parsed as a
//! duration, the bytes after it give a duration of any size, an anchor and an instant. `period_at` never
//! panics and ends (whatever the duration and the instants, within chrono's range); the period contains the
//! instant (or is the first one, before the anchor); the next period starts where it ends; a parsed duration
//! survives `Display`.

#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use svc_budget::BudgetDuration;

fuzz_target!(|data: &[u8]| {
    let (text, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut u = Unstructured::new(rest);

    let parsed = BudgetDuration::parse(&text);
    if let Ok(d) = parsed {
        assert_eq!(BudgetDuration::parse(&d.to_string()), Ok(d), "`{text}` does not survive display");
    }
    let duration = match (parsed, u.arbitrary::<u8>().unwrap_or_default() % 3) {
        (Ok(d), _) => d,
        (Err(_), 0) => BudgetDuration::Seconds(u.arbitrary().unwrap_or_default()),
        (Err(_), _) => BudgetDuration::Months(u.arbitrary().unwrap_or_default()),
    };
    let mut instant = || {
        // Spread over chrono's whole range, with most draws near the present.
        let ms = u.arbitrary::<i64>().unwrap_or_default();
        let ms =
            if u.arbitrary::<bool>().unwrap_or_default() { ms } else { 1_780_000_000_000 + ms % 10_000_000_000_000 };
        DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
    };
    let (anchor, now) = (instant(), instant());

    let period = duration.period_at(anchor, now);
    if now < anchor {
        assert_eq!(period.start, anchor, "{duration:?}: before the anchor is the first period");
    } else {
        assert!(period.start <= now, "{duration:?} from {anchor}: {period:?} starts after {now}");
        assert!(now < period.end || period.end == DateTime::<Utc>::MAX_UTC, "{period:?} ends before {now}");
    }
    assert!(period.start < period.end || period.end == DateTime::<Utc>::MAX_UTC, "empty period {period:?}");
    if period.end < DateTime::<Utc>::MAX_UTC && period.end > anchor {
        let next = duration.period_at(anchor, period.end);
        assert_eq!(next.start, period.end, "{duration:?} from {anchor}: the period after {period:?}");
    }
});
