//! Failed authentications counted by client address: a bounded table of GCRA buckets (`governor`), one per
//! address [`Slot`] (an IPv4 address, or the /64 of an IPv6 address, since one host or one customer's network
//! has a whole /64 to pick from). The gateway's authentication reads the address and answers; the rules are
//! here:
//!
//! 1. Every failure takes a token from its address's bucket: a burst, then a rate per minute. Past it the
//!    address is *limited* ([`Table::fail`] gives [`Limited`], with the whole seconds until a token is back). A
//!    refused failure takes nothing, so an address that keeps trying gets one more guess per token, never more.
//! 2. The table holds at most its capacity ([`MAX_ADDRESSES`] in the gateway). An address is stale once its
//!    bucket is certainly full again (its last failure is a whole refill, burst × interval, old) and it was not
//!    logged in the last minute. Stale addresses are dropped by [`Table::sweep`] (the gateway's upkeep, every
//!    minute), and when a new address comes and either the table is full (at most once a second) or the last
//!    sweep is a minute old. When the table is still full, new addresses share one overflow bucket: memory
//!    stays bounded whatever an attacker does.
//! 3. A limited address's refusal is to be logged when it starts, at most once a minute ([`Limited::log`]).

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Addresses the table holds at most; beyond them new addresses share one bucket.
pub const MAX_ADDRESSES: usize = 65_536;
/// An address is logged at most once per this.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Stale addresses are dropped when a new one comes and the last sweep is this old…
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// …or the table is full and the last sweep is this old (a sweep of a full table reads every entry).
const SWEEP_FULL_EVERY: Duration = Duration::from_secs(1);

/// What failed authentications are counted by: an IPv4 address, or the /64 of an IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// One IPv4 address.
    V4(Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl Slot {
    /// The slot of `ip` (an IPv4-mapped IPv6 address is its IPv4 address).
    pub fn of(ip: IpAddr) -> Slot {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Slot::V4(v4),
            IpAddr::V6(v6) => Slot::V6((u128::from(v6) >> 64) as u64),
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slot::V4(v4) => write!(f, "{v4}"),
            Slot::V6(net) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*net) << 64)),
        }
    }
}

/// A bucket of one address.
type Bucket<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One address's failures.
struct Entry<C: Clock> {
    bucket: Bucket<C>,
    /// Failed authentications since the entry was made.
    failures: u64,
    /// The last one.
    last: C::Instant,
    /// Refused until then (its bucket holds no token before).
    until: Option<C::Instant>,
    /// When it was last logged.
    warned: Option<C::Instant>,
}

/// A failure refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Limited {
    /// Whole seconds until a token is back (at least 1).
    pub retry_after: u64,
    /// The address's failures so far, when this refusal is to be logged.
    pub log: Option<u64>,
    /// Whether the address shares the overflow bucket.
    pub shared: bool,
}

/// The buckets of failed authentications by address, bounded (see the module docs). Generic over the clock so
/// that tests can move time.
pub struct Table<C: Clock> {
    quota: Quota,
    /// How long an empty bucket takes to be full again.
    refill: Duration,
    capacity: usize,
    clock: C,
    /// Whether any address is in the table: while none is, asking whether one is limited takes no lock.
    in_use: AtomicBool,
    inner: Mutex<Inner<C>>,
}

struct Inner<C: Clock> {
    /// std's SipHash with random keys rather than a faster hash: an attacker chooses these keys (an IPv6 /48
    /// holds 65,536 /64s).
    map: HashMap<Slot, Entry<C>>,
    overflow: Option<Entry<C>>,
    swept: C::Instant,
}

impl<C: Clock + Clone> Table<C> {
    /// A table of at most `capacity` addresses, each allowed `burst` failures at once and `per_minute` after.
    pub fn new(burst: NonZeroU32, per_minute: NonZeroU32, capacity: usize, clock: C) -> Table<C> {
        let period = Duration::from_secs(60) / per_minute.get();
        let quota = Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX)).allow_burst(burst);
        let inner = Inner { map: HashMap::new(), overflow: None, swept: clock.now() };
        Table {
            quota,
            refill: period.checked_mul(burst.get()).unwrap_or(Duration::MAX),
            capacity,
            clock,
            in_use: AtomicBool::new(false),
            inner: Mutex::new(inner),
        }
    }

    /// Whether any address is in the table.
    pub fn in_use(&self) -> bool {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Seconds until `slot` gets a token back when it is limited now; `None` when it is not.
    pub fn limited(&self, slot: Slot) -> Option<u64> {
        let now = self.clock.now();
        let inner = self.lock();
        let entry = match inner.map.get(&slot) {
            Some(e) => e,
            None if inner.map.len() >= self.capacity => inner.overflow.as_ref()?,
            None => return None,
        };
        entry.until.filter(|u| *u > now).map(|u| whole_seconds(u.duration_since(now).into()))
    }

    /// Counts a failed authentication from `slot`: `Ok` while it is within the limit.
    pub fn fail(&self, slot: Slot) -> Result<(), Limited> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let (entry, shared) = self.place(&mut inner, slot, now);
        self.in_use.store(true, Ordering::Relaxed);
        entry.failures += 1;
        entry.last = now;
        let Err(not_until) = entry.bucket.check() else { return Ok(()) };
        let until = not_until.earliest_possible();
        let starts = entry.until.is_none_or(|u| u <= now);
        entry.until = Some(until);
        let due = entry.warned.is_none_or(|w| Duration::from(now.duration_since(w)) >= WARN_EVERY);
        let log = (starts && due).then(|| {
            entry.warned = Some(now);
            entry.failures
        });
        Err(Limited { retry_after: whole_seconds(until.duration_since(now).into()), log, shared })
    }

    /// Addresses in the table (the overflow bucket not counted).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// The entry of `slot`, made when it has none (in the overflow bucket when the table is full); and whether
    /// it is the overflow bucket.
    fn place<'a>(&self, inner: &'a mut Inner<C>, slot: Slot, now: C::Instant) -> (&'a mut Entry<C>, bool) {
        if !inner.map.contains_key(&slot) {
            self.sweep_if_due(inner, now);
            if inner.map.len() >= self.capacity {
                return (inner.overflow.get_or_insert_with(|| self.entry(now)), true);
            }
        }
        (inner.map.entry(slot).or_insert_with(|| self.entry(now)), false)
    }

    fn entry(&self, now: C::Instant) -> Entry<C> {
        Entry {
            bucket: RateLimiter::direct_with_clock(self.quota, self.clock.clone()),
            failures: 0,
            last: now,
            until: None,
            warned: None,
        }
    }

    /// Drops the stale addresses now (the gateway's upkeep calls this every minute, so that a table an attack
    /// filled empties once it is over).
    pub fn sweep(&self) {
        if !self.in_use() {
            return;
        }
        let now = self.clock.now();
        self.sweep_now(&mut self.lock(), now);
    }

    /// Drops the stale addresses when a sweep is due (see the module docs).
    fn sweep_if_due(&self, inner: &mut Inner<C>, now: C::Instant) {
        let since = Duration::from(now.duration_since(inner.swept));
        let full = inner.map.len() >= self.capacity;
        if since >= SWEEP_EVERY || (full && since >= SWEEP_FULL_EVERY) {
            self.sweep_now(inner, now);
        }
    }

    fn sweep_now(&self, inner: &mut Inner<C>, now: C::Instant) {
        inner.swept = now;
        let stale = |e: &Entry<C>| {
            let quiet = |t: C::Instant, d: Duration| Duration::from(now.duration_since(t)) >= d;
            quiet(e.last, self.refill) && e.warned.is_none_or(|w| quiet(w, WARN_EVERY))
        };
        inner.map.retain(|_, e| !stale(e));
        if inner.overflow.as_ref().is_some_and(stale) {
            inner.overflow = None;
        }
        if inner.map.len() <= inner.map.capacity() / 4 {
            inner.map.shrink_to_fit();
        }
        if inner.map.is_empty() && inner.overflow.is_none() {
            self.in_use.store(false, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<C>> {
        // Every change under the lock is one call that leaves the table whole, so a poisoned lock is still a
        // usable table.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `d` in whole seconds, rounded up, at least 1.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use std::net::IpAddr;

    fn slot(text: &str) -> Slot {
        Slot::of(text.parse::<IpAddr>().unwrap_or_else(|e| panic!("{text}: {e}")))
    }

    fn n(v: u32) -> NonZeroU32 {
        NonZeroU32::new(v).unwrap_or(NonZeroU32::MIN)
    }

    /// The default limit: 20 at once, then 20 a minute (one every 3 s).
    fn table(capacity: usize) -> (Table<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (Table::new(n(20), n(20), capacity, clock.clone()), clock)
    }

    #[test]
    fn a_burst_then_refusals_then_one_more_per_token() {
        let (t, clock) = table(16);
        let a = slot("203.0.113.9");
        assert!(!t.in_use());
        for i in 0..20 {
            assert_eq!(t.fail(a), Ok(()), "failure {i} is within the burst");
            assert_eq!(t.limited(a), None);
        }
        // The 21st is refused and logged, with the seconds until a token is back.
        assert_eq!(t.fail(a), Err(Limited { retry_after: 3, log: Some(21), shared: false }));
        assert_eq!(t.limited(a), Some(3));
        // Refused again, not logged again; a refusal takes nothing.
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(t.fail(a), Err(Limited { retry_after: 2, log: None, shared: false }));
        assert_eq!(t.limited(a), Some(2));
        // A token is back after 3 s: one more failure is a 401, the next is refused, not logged within the minute.
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(t.limited(a), None);
        assert_eq!(t.fail(a), Ok(()));
        assert_eq!(t.fail(a), Err(Limited { retry_after: 3, log: None, shared: false }));
        // Other addresses are not touched.
        assert_eq!(t.limited(slot("203.0.113.10")), None);
        assert_eq!(t.fail(slot("203.0.113.10")), Ok(()));
        // A minute on, a limited spell that starts is logged again.
        clock.advance(Duration::from_secs(60));
        for _ in 0..20 {
            assert_eq!(t.fail(a), Ok(()));
        }
        assert_eq!(t.fail(a).map_err(|l| l.log), Err(Some(45)));
    }

    #[test]
    fn a_full_bucket_refills_at_the_rate() {
        let (t, clock) = table(16);
        let a = slot("2001:db8:1:2::1");
        for _ in 0..20 {
            assert_eq!(t.fail(a), Ok(()));
        }
        assert!(t.fail(slot("2001:db8:1:2::ffff")).is_err(), "the same /64");
        assert_eq!(t.fail(slot("2001:db8:1:3::1")), Ok(()), "another /64");
        // A minute later 20 tokens are back, and no more.
        clock.advance(Duration::from_secs(60));
        for i in 0..20 {
            assert_eq!(t.fail(a), Ok(()), "failure {i}");
        }
        assert!(t.fail(a).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_full_tables_share_an_overflow_bucket() {
        let (t, clock) = table(4);
        for i in 0..4 {
            assert_eq!(t.fail(slot(&format!("198.51.100.{i}"))), Ok(()));
        }
        assert_eq!(t.len(), 4);
        // A fifth address: the table is full of fresh addresses, so it shares the overflow bucket with every
        // address after it.
        for i in 4..24 {
            assert_eq!(t.fail(slot(&format!("198.51.100.{i}"))), Ok(()), "address {i}");
        }
        assert_eq!(t.len(), 4);
        let refused = t.fail(slot("198.51.100.200"));
        assert_eq!(refused, Err(Limited { retry_after: 3, log: Some(21), shared: true }));
        assert_eq!(t.limited(slot("198.51.100.201")), Some(3), "an address the table does not hold");
        assert_eq!(t.limited(slot("198.51.100.0")), None, "an address it holds keeps its own bucket");
        // Once the tracked addresses' buckets are full again, a new address sweeps them out and gets its own.
        clock.advance(Duration::from_secs(61));
        assert_eq!(t.fail(slot("192.0.2.1")), Ok(()));
        assert_eq!(t.len(), 1);
        assert!(t.in_use());
    }

    #[test]
    fn stale_addresses_are_dropped_and_an_emptied_table_is_not_in_use() {
        let (t, clock) = table(16);
        let a = slot("203.0.113.9");
        for _ in 0..21 {
            let _ = t.fail(a);
        }
        // Still limited, and logged a moment ago: a sweep keeps it.
        t.sweep();
        assert_eq!(t.len(), 1);
        // A minute on its bucket is full again and its log line a minute old: a new address sweeps it out.
        clock.advance(Duration::from_secs(60));
        assert_eq!(t.fail(slot("192.0.2.1")), Ok(()));
        assert_eq!(t.len(), 1, "the old address is gone");
        // The upkeep's sweep empties the table once the last address is stale.
        clock.advance(Duration::from_secs(30));
        t.sweep();
        assert_eq!((t.len(), t.in_use()), (1, true), "its failure is less than a refill (20 × 3 s) old");
        clock.advance(Duration::from_secs(30));
        t.sweep();
        assert_eq!((t.len(), t.in_use()), (0, false));
        assert_eq!(t.limited(a), None);
    }

    #[test]
    fn ipv6_addresses_are_counted_by_their_64() {
        let a = Slot::of(addr("2001:db8:1:2:aaaa::1"));
        assert_eq!(a, Slot::of(addr("2001:db8:1:2:ffff:ffff:ffff:ffff")), "one /64");
        assert_ne!(a, Slot::of(addr("2001:db8:1:3::1")), "the next /64");
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(Slot::of(addr("203.0.113.9")).to_string(), "203.0.113.9");
        assert_ne!(Slot::of(addr("203.0.113.9")), Slot::of(addr("203.0.113.10")), "IPv4: one address");
        assert_eq!(Slot::of(addr("::ffff:203.0.113.9")), Slot::of(addr("203.0.113.9")), "a dual-stack listener's view");
    }

    fn addr(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }
}
