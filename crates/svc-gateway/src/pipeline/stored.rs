//! Stored responses: OpenAI keeps a Responses answer (unless `store: false`) under its `resp_…` id, and a later
//! `previous_response_id` or `GET /v1/responses/{id}` must reach the deployment that holds it. This table
//! remembers, per node, which deployment answered each passed-through response id: the most recent
//! [`CAPACITY`] of them, the oldest forgotten first.
//!
//! What it does not do: share the table across a fleet (a follow-up call that reaches another node is routed
//! like any other request), or keep it across restarts.

use crate::pipeline::routing::Route;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Response ids remembered per node.
pub const CAPACITY: usize = 100_000;

/// Response id → the deployment that answered it.
#[derive(Debug, Default)]
pub struct ResponseHomes {
    inner: Mutex<Homes>,
}

#[derive(Debug, Default)]
struct Homes {
    by_id: HashMap<String, Arc<Route>>,
    order: VecDeque<String>,
}

impl ResponseHomes {
    /// Remembers that `route` answered `id` (an id longer than 256 bytes is not an id OpenAI gives).
    pub fn record(&self, id: &str, route: &Arc<Route>) {
        if id.is_empty() || id.len() > 256 {
            return;
        }
        let Ok(mut h) = self.inner.lock() else { return };
        if h.by_id.insert(id.to_string(), route.clone()).is_none() {
            h.order.push_back(id.to_string());
        }
        while h.order.len() > CAPACITY {
            if let Some(old) = h.order.pop_front() {
                h.by_id.remove(&old);
            }
        }
    }

    /// The deployment that answered `id`, if this node remembers it.
    pub fn home(&self, id: &str) -> Option<Arc<Route>> {
        self.inner.lock().ok().and_then(|h| h.by_id.get(id).cloned())
    }
}
