//! Virtual keys in memory: generation and hashing of key secrets, the [`VirtualKey`] the pipeline reads,
//! and the [`KeyCache`] that answers authentication without touching the store.
//!
//! The cache is a whole map swapped atomically (`arc-swap`): lookups take no lock. It is rebuilt after
//! every change this process makes, and a poller notices changes made elsewhere (the `svc keys` CLI,
//! another node on the fleet store) through the store's key generation counter within a second. A key the
//! map does not know is looked up in the store before it is refused ([`KeyCache::resolve`]), at most
//! [`MISS_LOOKUPS_PER_SECOND`] times a second, so a key used right after `svc keys create` works at once
//! and unknown keys cannot hammer the store.

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use foldhash::{HashMap, HashMapExt};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use svc_budget::{BudgetDuration, Money};
use svc_store::{KeyRow, Store, StoreError};

/// The prefix of every virtual key (spec 2.1).
pub const KEY_PREFIX: &str = "sk-svc-";
/// Random base62 characters after the prefix (≈238 bits).
const KEY_RANDOM_LEN: usize = 40;

/// A SHA-256 digest of a key secret.
pub type KeyHash = [u8; 32];

/// A virtual key as the request path sees it.
#[derive(Debug, Clone)]
pub struct VirtualKey {
    /// Stable id (unchanged by rotation).
    pub id: String,
    /// `sk-svc-…abcd`.
    pub hint: String,
    /// Human name.
    pub alias: Option<String>,
    /// Owning team.
    pub team_id: String,
    /// Agent role.
    pub agent_role: Option<String>,
    /// Aliases of its own (empty: all of the team's).
    pub models: Vec<String>,
    /// Event patterns it may post on `POST /events` (empty: every kind a virtual key may post).
    pub events: Vec<String>,
    /// Key budget.
    pub max_budget: Option<Money>,
    /// Key budget period length, else the team's.
    pub budget_duration: Option<BudgetDuration>,
    /// Requests per minute.
    pub rpm_limit: Option<u32>,
    /// Tokens per minute.
    pub tpm_limit: Option<u64>,
    /// Expiry.
    pub expires: Option<DateTime<Utc>>,
    /// Revoked (blocked).
    pub revoked: bool,
    /// Anchor of its budget periods.
    pub anchor: DateTime<Utc>,
}

impl VirtualKey {
    /// Builds the in-memory key from its stored row.
    pub fn from_row(r: &KeyRow) -> VirtualKey {
        let ts = |ms: i64| DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
        VirtualKey {
            id: r.id.clone(),
            hint: r.key_hint.clone(),
            alias: r.key_alias.clone(),
            team_id: r.team_id.clone(),
            agent_role: r.agent_role.clone(),
            models: r.models.clone(),
            events: r.events.clone(),
            max_budget: r.max_budget.map(Money::from_nanos),
            budget_duration: r.budget_duration.as_deref().and_then(|d| BudgetDuration::parse(d).ok()),
            rpm_limit: r.rpm_limit.and_then(|v| u32::try_from(v).ok()),
            tpm_limit: r.tpm_limit.and_then(|v| u64::try_from(v).ok()),
            expires: r.expires_ms.map(ts),
            revoked: r.revoked_ms.is_some(),
            anchor: ts(r.anchor_ms),
        }
    }

    /// The length of its budget periods: its own, else its team's, else the gateway's.
    pub fn period(&self, config: &svc_config::Config) -> svc_budget::BudgetDuration {
        let team = config.team(&self.team_id).map(|t| t.budget_duration);
        self.budget_duration.or(team).unwrap_or(config.gateway.budget_duration)
    }

    /// The name events and logs use for the key's owner: its agent role, else its alias, else its hint.
    pub fn agent_name(&self) -> &str {
        self.agent_role.as_deref().or(self.alias.as_deref()).unwrap_or(&self.hint)
    }
}

/// A fresh key secret: `sk-svc-` and 40 random base62 characters from the OS-seeded CSPRNG.
pub fn generate_secret() -> String {
    const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    let mut s = String::with_capacity(KEY_PREFIX.len() + KEY_RANDOM_LEN);
    s.push_str(KEY_PREFIX);
    for _ in 0..KEY_RANDOM_LEN {
        s.push(BASE62[rng.random_range(0..BASE62.len())] as char);
    }
    s
}

/// SHA-256 of a key secret (once a request). By ring's SHA-256 rather than the sha2 crate's: both use the CPU's SHA
/// instructions where it has them, but without them (Intel server CPUs before Ice Lake) sha2 0.10 computes in
/// portable code and ring in its SSSE3/AVX assembly, about half the instructions for a key (BENCHMARKS.md).
pub fn hash_secret(secret: &str) -> KeyHash {
    ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()).as_ref().try_into().unwrap_or_default()
}

/// The hint shown instead of a key: prefix and last four characters.
pub fn hint_of(secret: &str) -> String {
    let tail: String = secret.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{KEY_PREFIX}…{tail}")
}

/// Whether text has the shape of a virtual key (prefix and at least 32 base62 characters).
pub fn looks_like_key(text: &str) -> bool {
    text.strip_prefix(KEY_PREFIX)
        .is_some_and(|rest| rest.len() >= 32 && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Store lookups of keys the cache does not know, per second at most (the whole process).
pub const MISS_LOOKUPS_PER_SECOND: u32 = 20;

/// A store lookup under way, shared by every request that presents the same unknown key meanwhile.
type Lookup = Arc<tokio::sync::OnceCell<Option<Arc<VirtualKey>>>>;

/// All virtual keys by hash, swapped whole on change.
pub struct KeyCache {
    map: ArcSwap<HashMap<KeyHash, Arc<VirtualKey>>>,
    generation: AtomicI64,
    misses: DefaultDirectRateLimiter,
    /// Lookups under way, by hash: a burst of requests with a key this node has not heard of yet (created on
    /// another node a moment ago) makes one lookup, not one per request (which the rate would refuse).
    lookups: std::sync::Mutex<HashMap<KeyHash, Lookup>>,
}

impl Default for KeyCache {
    fn default() -> Self {
        let per_second = std::num::NonZeroU32::new(MISS_LOOKUPS_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
        KeyCache {
            map: ArcSwap::default(),
            generation: AtomicI64::new(0),
            misses: RateLimiter::direct(Quota::per_second(per_second)),
            lookups: std::sync::Mutex::default(),
        }
    }
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache").field("keys", &self.len()).finish_non_exhaustive()
    }
}

impl KeyCache {
    /// The key with this hash, from the map.
    pub fn get(&self, hash: &KeyHash) -> Option<Arc<VirtualKey>> {
        self.map.load().get(hash).cloned()
    }

    /// The key with this hash: from the map, else (within the rate of [`MISS_LOOKUPS_PER_SECOND`] distinct
    /// lookups) from the store, adding it to the map. Concurrent requests with the same unknown key share one
    /// lookup. A store failure counts as not found (and is logged).
    pub async fn resolve(&self, hash: &KeyHash, store: &Store) -> Option<Arc<VirtualKey>> {
        if let Some(k) = self.get(hash) {
            return Some(k);
        }
        let lookup: Lookup = match self.lookups.lock() {
            Ok(mut under_way) => under_way.entry(*hash).or_default().clone(),
            Err(_) => return None,
        };
        let found = lookup.get_or_init(|| self.look_up(hash, store)).await.clone();
        if let Ok(mut under_way) = self.lookups.lock() {
            if under_way.get(hash).is_some_and(|l| Arc::ptr_eq(l, &lookup)) {
                under_way.remove(hash);
            }
        }
        found
    }

    /// One store lookup of a key the map does not hold, within the rate of misses.
    async fn look_up(&self, hash: &KeyHash, store: &Store) -> Option<Arc<VirtualKey>> {
        if let Some(k) = self.get(hash) {
            return Some(k);
        }
        self.misses.check().ok()?;
        let row = match store.find_key_by_hash(&hex::encode(hash)).await {
            Ok(row) => row?,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look a key up in the store");
                return None;
            }
        };
        let key = Arc::new(VirtualKey::from_row(&row));
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(*hash, key.clone());
            m
        });
        Some(key)
    }

    /// The ids of every cached key.
    pub fn ids(&self) -> std::collections::HashSet<String> {
        self.map.load().values().map(|k| k.id.clone()).collect()
    }

    /// Every key known to this node.
    pub fn all(&self) -> Vec<Arc<VirtualKey>> {
        self.map.load().values().cloned().collect()
    }

    /// Reloads every key from the store when its generation moved (or `force`); returns whether it did.
    pub async fn refresh(&self, store: &Store, force: bool) -> Result<bool, StoreError> {
        let generation = store.keys_generation().await?;
        if !force && generation == self.generation.load(Ordering::Acquire) {
            return Ok(false);
        }
        let rows = store.list_keys().await?;
        let mut map = HashMap::with_capacity(rows.len());
        for r in &rows {
            let mut hash = [0u8; 32];
            if hex::decode_to_slice(&r.key_hash, &mut hash).is_ok() {
                map.insert(hash, Arc::new(VirtualKey::from_row(r)));
            } else {
                tracing::error!(key_id = %r.id, "a stored key hash is not 64 hex digits: the key cannot be used");
            }
        }
        self.map.store(Arc::new(map));
        self.generation.store(generation, Ordering::Release);
        Ok(true)
    }

    /// Number of keys cached.
    pub fn len(&self) -> usize {
        self.map.load().len()
    }

    /// Whether no key is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// The hash is SHA-256 (FIPS 180-2's test vectors), as every store written before holds it.
    #[test]
    fn the_hash_is_sha_256() {
        let hex = |s: &str| hex::encode(hash_secret(s));
        assert_eq!(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }

    /// A burst of requests with a key the node has not heard of yet (made on another node a moment ago) is
    /// answered from one store lookup: none of them is refused by the rate of misses.
    #[tokio::test]
    async fn a_burst_with_a_new_key_shares_one_lookup() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let store = Store::connect(&format!("sqlite://{}", dir.path().join("k.db").display())).await?;
        let secret = generate_secret();
        let hash = hash_secret(&secret);
        let row = svc_store::KeyRow {
            key_hash: hex::encode(hash),
            key_hint: hint_of(&secret),
            id: "k-new".into(),
            team_id: "t".into(),
            ..Default::default()
        };
        store.insert_key(&row).await?;
        let cache = Arc::new(KeyCache::default());
        let burst = (0..200).map(|_| {
            let (cache, store) = (cache.clone(), store.clone());
            tokio::spawn(async move { cache.resolve(&hash, &store).await.map(|k| k.id.clone()) })
        });
        let found = futures::future::join_all(burst).await;
        let known = found.iter().filter(|r| matches!(r, Ok(Some(id)) if id == "k-new")).count();
        anyhow::ensure!(known == 200, "{known} of 200 requests found the key");
        // A burst with a key nobody made shares its lookup too, and finds nothing.
        let nobody = hash_secret("sk-svc-nobody");
        let burst = (0..50).map(|_| {
            let (cache, store) = (cache.clone(), store.clone());
            tokio::spawn(async move { cache.resolve(&nobody, &store).await.is_none() })
        });
        let unknown = futures::future::join_all(burst).await.into_iter().filter(|r| matches!(r, Ok(true))).count();
        anyhow::ensure!(unknown == 50, "{unknown} of 50 requests with an unknown key were refused");
        Ok(())
    }

    #[test]
    fn secrets_have_the_documented_shape() {
        let a = generate_secret();
        let b = generate_secret();
        assert_ne!(a, b);
        assert!(looks_like_key(&a), "{a}");
        assert_eq!(a.len(), KEY_PREFIX.len() + KEY_RANDOM_LEN);
        assert!(!looks_like_key("sk-svc-short"));
        assert!(!looks_like_key("sk-other-0123456789012345678901234567890123"));
        assert_eq!(hint_of("sk-svc-abcdefgh"), "sk-svc-…efgh");
        assert_eq!(hex::encode(hash_secret("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
