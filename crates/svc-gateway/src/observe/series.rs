//! The series one request counts in, resolved once per thread: [`Cached`] keeps, for each gateway and label
//! set a thread has seen, the handles of its series ([`Series`]), so counting a request is atomic adds on them,
//! with no registry lookup (the registry's vectors sit behind a read-write lock) and no allocation.

use super::metrics::Metrics;
use super::RequestLine;
use prometheus::{Counter, Histogram, IntCounter};
use svc_front::Api;

/// The labels that pick a request's series.
#[derive(Debug, Hash)]
pub(super) struct Labels<'a> {
    pub(super) api: Api,
    pub(super) status: &'static str,
    pub(super) alias: &'a str,
    pub(super) deployment: &'a str,
    pub(super) provider: &'a str,
    pub(super) team: &'a str,
    pub(super) key: &'a str,
}

impl Labels<'_> {
    fn owned(&self) -> OwnedLabels {
        OwnedLabels {
            api: self.api,
            status: self.status,
            text: [self.alias, self.deployment, self.provider, self.team, self.key].map(str::to_string),
        }
    }
}

/// [`Labels`] kept by the cache, to tell two label sets with one hash apart.
#[derive(Debug)]
struct OwnedLabels {
    api: Api,
    status: &'static str,
    text: [String; 5],
}

impl OwnedLabels {
    fn is(&self, l: &Labels<'_>) -> bool {
        self.api == l.api && self.status == l.status && self.text == [l.alias, l.deployment, l.provider, l.team, l.key]
    }
}

/// The series one request of a label set counts in.
#[derive(Debug)]
pub(super) struct Series {
    pub(super) requests: IntCounter,
    /// Those of a request that reached a deployment.
    pub(super) called: Option<Called>,
}

/// The series of a request that reached a deployment.
#[derive(Debug)]
pub(super) struct Called {
    pub(super) duration: Histogram,
    pub(super) ttft: Histogram,
    pub(super) tpot: Histogram,
    pub(super) input: Histogram,
    pub(super) output: Histogram,
    pub(super) overhead: Histogram,
    pub(super) retries: IntCounter,
    pub(super) fallbacks: IntCounter,
    pub(super) spend: Counter,
}

impl Series {
    pub(super) fn count(&self, line: &RequestLine<'_>) {
        self.requests.inc();
        let Some(c) = &self.called else { return };
        c.duration.observe(line.latency.as_secs_f64());
        if let Some(first) = line.first_byte {
            c.ttft.observe(first.as_secs_f64());
            if line.usage.completion_tokens > 1 {
                let after = line.latency.saturating_sub(first).as_secs_f64();
                c.tpot.observe(after / (line.usage.completion_tokens - 1) as f64);
            }
        }
        if line.status < 400 {
            c.input.observe(line.usage.prompt_tokens as f64);
            c.output.observe(line.usage.completion_tokens as f64);
        }
        c.overhead.observe(line.overhead().as_secs_f64());
        if line.attempts.count > 1 {
            c.retries.inc_by(u64::from(line.attempts.count - 1));
        }
        if line.attempts.fallback {
            c.fallbacks.inc();
        }
        let cost = line.cost.as_f64();
        if cost > 0.0 {
            c.spend.inc_by(cost);
        }
    }
}

/// Each thread's resolved series, by gateway ([`Metrics::id`]) and label set: the registry's vectors sit behind
/// a read-write lock that every lookup would take; a request finds its series here instead, without a lock or an
/// allocation (its labels are hashed and compared in place). Bounded by the configuration's label sets times
/// the runtime's threads.
pub(super) struct Cached;

type Shelf = std::collections::HashMap<u64, Vec<(OwnedLabels, Series)>, BuildNoHash>;

thread_local! {
    static SHELF: std::cell::RefCell<Shelf> = std::cell::RefCell::new(Shelf::default());
}

/// Keys already hashed.
#[derive(Default, Clone, Copy)]
struct BuildNoHash;

#[derive(Default)]
struct NoHash(u64);

impl std::hash::Hasher for NoHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl std::hash::BuildHasher for BuildNoHash {
    type Hasher = NoHash;
    fn build_hasher(&self) -> NoHash {
        NoHash::default()
    }
}

impl Cached {
    pub(super) fn with(metrics: &Metrics, labels: &Labels<'_>, f: impl FnOnce(&Series)) {
        use std::hash::BuildHasher;
        let hash = foldhash::fast::FixedState::with_seed(metrics.id()).hash_one(labels);
        SHELF.with(|shelf| {
            let mut shelf = shelf.borrow_mut();
            let bucket = shelf.entry(hash).or_default();
            // Entries of a dropped gateway with the same id cannot exist: ids are never reused.
            let series = match bucket.iter().position(|(l, _)| l.is(labels)) {
                Some(i) => &bucket[i].1,
                None => {
                    bucket.push((labels.owned(), metrics.series(labels)));
                    &bucket[bucket.len() - 1].1
                }
            };
            f(series);
        });
    }
}
