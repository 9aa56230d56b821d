//! The sliding window of one deployment's live calls: how many, how many failed, and a latency histogram of
//! the answered ones, over the last `health_window_seconds`.
//!
//! The window is ten slots of a tenth of its length each; a call lands in the slot of its time, a slot older
//! than the window is subtracted from the running totals and cleared when time moves past it. Recording is a
//! few additions and a p95 is one pass over the totals' histogram, with no allocation: this runs on every
//! call, under the deployment's short health lock. Latencies are binned four bins per power of two (exact
//! below 8 ms, at most 25 % wide above), so a reported p95 is the upper bound of its bin.
//!
//! What it does not do: judge. The figures go to `health::judge`.

use std::time::Duration;

/// Slots of a window.
const SLOTS: usize = 10;
/// Latency bins: exact 0-7 ms, then four per power of two up to 2^23 ms (the last bin takes everything above).
const BINS: usize = 88;

/// Counts of one slot (or of the whole window).
#[derive(Debug, Clone)]
struct Counts {
    /// Slot number (time / slot length) the counts belong to.
    epoch: u64,
    calls: u32,
    errors: u32,
    latency: [u32; BINS],
}

impl Counts {
    const EMPTY: Counts = Counts { epoch: 0, calls: 0, errors: 0, latency: [0; BINS] };
}

/// What the window holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    /// Calls in the window.
    pub calls: u32,
    /// Of which failed.
    pub errors: u32,
    /// p95 latency of the answered calls, in milliseconds (the upper bound of its bin).
    pub p95_ms: Option<u64>,
}

impl Figures {
    /// Failed calls per thousand (0 when there were none).
    pub fn error_permille(&self) -> u32 {
        if self.calls == 0 {
            0
        } else {
            (u64::from(self.errors) * 1000 / u64::from(self.calls)) as u32
        }
    }

    /// The error rate as a fraction with three decimals, for reports and events.
    pub fn error_rate(&self) -> f64 {
        f64::from(self.error_permille()) / 1000.0
    }
}

/// A sliding window of call outcomes.
#[derive(Debug, Clone)]
pub struct Window {
    slot_ms: u64,
    newest: u64,
    slots: Box<[Counts; SLOTS]>,
    totals: Box<Counts>,
}

impl Window {
    /// A window of `length` (at least 10 ms).
    pub fn new(length: Duration) -> Window {
        let slot_ms = (length.as_millis() as u64 / SLOTS as u64).max(1);
        Window {
            slot_ms,
            newest: 0,
            slots: Box::new(std::array::from_fn(|_| Counts::EMPTY)),
            totals: Box::new(Counts::EMPTY),
        }
    }

    /// Records a call that ended at `at_ms` (milliseconds on the caller's monotonic clock).
    pub fn record(&mut self, at_ms: u64, failed: bool, latency: Duration) {
        // Calls recorded out of order by a few microseconds land in the newest slot.
        let epoch = (at_ms / self.slot_ms).max(self.newest);
        self.expire(epoch);
        let slot = &mut self.slots[(epoch % SLOTS as u64) as usize];
        slot.epoch = epoch;
        slot.calls += 1;
        self.totals.calls += 1;
        if failed {
            slot.errors += 1;
            self.totals.errors += 1;
        } else {
            let bin = bin(latency.as_millis() as u64);
            slot.latency[bin] += 1;
            self.totals.latency[bin] += 1;
        }
    }

    /// The figures of the window ending at `at_ms`.
    pub fn figures(&mut self, at_ms: u64) -> Figures {
        let epoch = (at_ms / self.slot_ms).max(self.newest);
        self.expire(epoch);
        let t = &self.totals;
        let answered = t.calls - t.errors;
        let p95_ms = (answered > 0).then(|| {
            // The smallest bin by which 95 % of the answered calls are counted.
            let rank = (u64::from(answered) * 95).div_ceil(100);
            let mut seen = 0u64;
            let idx = t.latency.iter().position(|n| {
                seen += u64::from(*n);
                seen >= rank
            });
            upper_bound(idx.unwrap_or(BINS - 1))
        });
        Figures { calls: t.calls, errors: t.errors, p95_ms }
    }

    /// Forgets the slots that fell out of the window ending in slot `epoch`.
    fn expire(&mut self, epoch: u64) {
        self.newest = epoch;
        for slot in self.slots.iter_mut() {
            if slot.calls > 0 && slot.epoch + SLOTS as u64 <= epoch {
                self.totals.calls -= slot.calls;
                self.totals.errors -= slot.errors;
                for (t, n) in self.totals.latency.iter_mut().zip(slot.latency.iter()) {
                    *t -= n;
                }
                *slot = Counts::EMPTY;
            }
        }
    }
}

/// The histogram bin of a latency in milliseconds.
fn bin(ms: u64) -> usize {
    if ms < 8 {
        return ms as usize;
    }
    let octave = 63 - ms.leading_zeros() as usize;
    let sub = ((ms >> (octave - 2)) & 3) as usize;
    (4 * (octave - 1) + sub).min(BINS - 1)
}

/// The largest latency a bin holds.
fn upper_bound(idx: usize) -> u64 {
    if idx < 8 {
        return idx as u64;
    }
    let octave = idx / 4 + 1;
    let lower = (4 + (idx % 4) as u64) << (octave - 2);
    lower + (1u64 << (octave - 2)) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_every_latency_in_order() {
        let mut last = 0;
        for ms in [0u64, 1, 7, 8, 9, 10, 15, 16, 100, 999, 1000, 30_000, 60_000, 8_388_607] {
            let b = bin(ms);
            assert!(b >= last, "{ms}");
            assert!(upper_bound(b) >= ms, "{ms} above its bin {b}");
            assert!(b < 8 || upper_bound(b - 1) < ms, "{ms} belongs to an earlier bin");
            last = b;
        }
        assert_eq!(bin(u64::MAX), BINS - 1);
        assert_eq!((upper_bound(bin(1000)), upper_bound(bin(60_000))), (1023, 65_535));
    }

    #[test]
    fn figures_cover_the_window_and_forget_older_calls() {
        let mut w = Window::new(Duration::from_secs(10));
        for i in 0..19 {
            w.record(i * 100, false, Duration::from_millis(100));
        }
        w.record(1_950, false, Duration::from_millis(5_000));
        w.record(2_000, true, Duration::from_millis(1));
        let f = w.figures(2_000);
        assert_eq!((f.calls, f.errors, f.error_permille()), (21, 1, 47));
        // 20 answered: the 19th by rank is still 100 ms (bin 96-111).
        assert_eq!(f.p95_ms, Some(111));
        // 10.5 s later the first second's slot (calls 0-9) is gone, the rest is still there.
        assert_eq!(w.figures(10_500).calls, 11);
        // After a whole window without calls, nothing is left.
        assert_eq!(w.figures(12_500), Figures::default());
        w.record(12_600, true, Duration::ZERO);
        assert_eq!(w.figures(12_600), Figures { calls: 1, errors: 1, p95_ms: None });
    }

    #[test]
    fn a_slow_tail_moves_the_p95() {
        let mut w = Window::new(Duration::from_secs(60));
        for i in 0..90 {
            w.record(i, false, Duration::from_millis(200));
        }
        for i in 0..10 {
            w.record(100 + i, false, Duration::from_millis(20_000));
        }
        assert_eq!(w.figures(200).p95_ms, Some(20_479));
        let mut w = Window::new(Duration::from_secs(60));
        for i in 0..96 {
            w.record(i, false, Duration::from_millis(200));
        }
        for i in 0..4 {
            w.record(100 + i, false, Duration::from_millis(20_000));
        }
        assert_eq!(w.figures(200).p95_ms, Some(223));
    }
}
