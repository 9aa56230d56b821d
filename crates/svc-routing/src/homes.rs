//! Stored responses: OpenAI keeps a Responses answer (unless `store: false`) under its `resp_…` id. A later
//! `previous_response_id`, `GET` or `DELETE /responses/{id}`, `GET /responses/{id}/input_items` or
//! `POST /responses/{id}/cancel` must reach the deployment that holds it, and only for whoever may read it.
//!
//! Who created a response and where it is kept is in its spend record (`response_id`), in the store: every
//! node of a fleet, and a node after a restart, finds it there. This node also remembers the responses it
//! served lately (the last [`CAPACITY`]), so a continuation on the same node reads no store, and a streamed
//! response is known from its first event, before its spend record is written.
//!
//! Who may reach a response ([`Home::reachable_by`]): its creator, the master key, and, with
//! `gateway_settings.responses_shared_within_team`, every key of the creator's team. To anyone else it is
//! unknown ([`reach`] finds nothing), as an id the gateway never served, so that its existence is not revealed.
//!
//! What it does not do: call the upstream (the handlers and the attempts do), or answer HTTP (the gateway says
//! what an unknown response reads as).

use crate::table::{ModelTable, Route};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use svc_store::{Store, StoreError};

/// Response ids remembered per node.
pub const CAPACITY: usize = 100_000;

/// The longest response id the gateway keeps or looks up (OpenAI's are about 50 bytes).
pub const MAX_ID_BYTES: usize = 256;

/// Who created a stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The master key.
    Master,
    /// A virtual key.
    Key {
        /// The key's id.
        id: String,
        /// Its team.
        team: String,
    },
}

/// Where a stored response is kept, and whose it is.
#[derive(Debug, Clone)]
pub struct Home {
    /// The deployment that answered it.
    pub route: Arc<Route>,
    /// The name it was answered under (an alias, a fallback's, or a name a wildcard alias matched): its `model`.
    pub alias: String,
    /// Who created it.
    pub owner: Owner,
    /// Its input and output tokens as billed, once its call settled: what a continuation of it carries on as
    /// input (the provider bills a chain's whole history on every call). `None` while it streams.
    pub tokens: Option<u64>,
}

impl Home {
    /// Whether `caller` may read, continue, delete or cancel the response.
    pub fn reachable_by(&self, caller: &Owner, shared_within_team: bool) -> bool {
        match (caller, &self.owner) {
            (Owner::Master, _) => true,
            (Owner::Key { .. }, Owner::Master) => false,
            (Owner::Key { id: key, team: key_team }, Owner::Key { id, team }) => {
                id == key || (shared_within_team && team == key_team)
            }
        }
    }
}

/// Response id → its home, for the responses this node served lately.
#[derive(Debug, Default)]
pub struct ResponseHomes {
    inner: Mutex<Homes>,
}

#[derive(Debug, Default)]
struct Homes {
    by_id: HashMap<String, Home>,
    order: VecDeque<String>,
}

impl ResponseHomes {
    /// Remembers `id`'s home. The first creator stays the owner: an id given twice (by an upstream that
    /// repeats ids) keeps the home it was first recorded with, as the store's record does.
    pub fn record(&self, id: &str, home: Home) {
        if !is_id(id) {
            return;
        }
        let Ok(mut h) = self.inner.lock() else { return };
        if h.by_id.contains_key(id) {
            return;
        }
        h.by_id.insert(id.to_string(), home);
        h.order.push_back(id.to_string());
        while h.order.len() > CAPACITY {
            if let Some(old) = h.order.pop_front() {
                h.by_id.remove(&old);
            }
        }
    }

    /// The call that created `id` settled with `tokens` of input and output.
    pub fn settled(&self, id: &str, tokens: u64) {
        if let Ok(mut h) = self.inner.lock() {
            if let Some(home) = h.by_id.get_mut(id) {
                home.tokens = Some(tokens);
            }
        }
    }

    /// The home of `id`, if this node remembers it.
    pub fn get(&self, id: &str) -> Option<Home> {
        self.inner.lock().ok().and_then(|h| h.by_id.get(id).cloned())
    }
}

/// Whether `id` can be a response id the gateway kept: not empty, at most [`MAX_ID_BYTES`].
pub fn is_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_BYTES
}

/// The home of response `id` when `caller` may reach it: this node's memory first, else the spend record in
/// the store. Anything else (unknown, another key's, a deployment no longer configured) is `None`.
pub async fn reach(
    models: &ModelTable,
    store: &Store,
    shared_within_team: bool,
    caller: &Owner,
    id: &str,
) -> Result<Option<Home>, StoreError> {
    if !is_id(id) {
        return Ok(None);
    }
    let home = match models.homes.get(id) {
        Some(home) => Some(home),
        None => store.response_owner(id).await?.and_then(|row| {
            let route = models.deployment(&row.deployment)?.clone();
            let owner = match (row.key_id, row.team_id) {
                (Some(id), Some(team)) => Owner::Key { id, team },
                _ => Owner::Master,
            };
            Some(Home { route, alias: row.model_alias, owner, tokens: u64::try_from(row.tokens).ok() })
        }),
    };
    Ok(home.filter(|home| home.reachable_by(caller, shared_within_team)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(id: &str, team: &str) -> Owner {
        Owner::Key { id: id.into(), team: team.into() }
    }

    fn home(owner: Owner) -> Home {
        let yaml = "model_list:\n  - model_name: m\n    params: { model: mock/m }\n";
        let config = svc_config::load_str(yaml, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
        let client = svc_providers::UpstreamClient::new().unwrap();
        let table = ModelTable::build(&config, &client, &crate::NoSeries).unwrap();
        let route = table.all().next().unwrap().clone();
        Home { alias: route.alias.clone(), route, owner, tokens: None }
    }

    #[test]
    fn only_the_creator_the_master_key_and_a_shared_team_reach_a_response() {
        let mine = home(Owner::Key { id: "k1".into(), team: "a".into() });
        assert!(mine.reachable_by(&key("k1", "a"), false));
        assert!(mine.reachable_by(&Owner::Master, false));
        assert!(!mine.reachable_by(&key("k2", "a"), false), "a teammate, not shared");
        assert!(mine.reachable_by(&key("k2", "a"), true), "a teammate, shared within the team");
        assert!(!mine.reachable_by(&key("k3", "b"), true), "another team, even when shared");
        let masters = home(Owner::Master);
        assert!(masters.reachable_by(&Owner::Master, false));
        assert!(!masters.reachable_by(&key("k1", "a"), true));
    }

    #[test]
    fn the_first_creator_stays_the_owner_and_bad_ids_are_not_kept() {
        let homes = ResponseHomes::default();
        homes.record("resp_1", home(Owner::Key { id: "k1".into(), team: "a".into() }));
        homes.record("resp_1", home(Owner::Key { id: "k2".into(), team: "b".into() }));
        assert_eq!(homes.get("resp_1").map(|h| h.owner), Some(Owner::Key { id: "k1".into(), team: "a".into() }));
        homes.record("", home(Owner::Master));
        homes.record(&"r".repeat(MAX_ID_BYTES + 1), home(Owner::Master));
        assert!(homes.get("").is_none() && homes.get(&"r".repeat(MAX_ID_BYTES + 1)).is_none());
        homes.record(&"r".repeat(MAX_ID_BYTES), home(Owner::Master));
        assert!(homes.get(&"r".repeat(MAX_ID_BYTES)).is_some());
    }
}
