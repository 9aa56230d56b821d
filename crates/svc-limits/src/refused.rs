//! [`Refused`]: why a limit refused a request. This crate never answers HTTP: the gateway maps each case to its
//! status, body and headers in one place (its `error.rs`).

use serde_json::{Map, Value};
use svc_store::StoreError;

/// Why budgets or rate limits refused a request, with what the answer needs. Its large parts are boxed: refusals
/// are rare, and the `Result`s of every admission on the request path stay small.
#[derive(Debug)]
pub enum Refused {
    /// Over a budget (spec 4.1 rule 1): what the budget holds (`budget`, `limit`, `spent`, `reserved`,
    /// `requested`, `remaining`, `reset_at`, and in fleet mode `held_by_other_nodes`), and the seconds until it
    /// resets.
    Budget {
        /// The budget's figures, as the answer shows them.
        details: Box<Map<String, Value>>,
        /// Seconds until the period resets.
        retry_after_secs: u64,
    },
    /// Fleet mode: the budget cannot be judged now, and what this node holds does not pay for the request. Not a
    /// refusal by the budget: a retry shortly may well pass.
    Unjudged(Unjudged),
    /// Over a rate limit (`what`: which one), with the seconds until it has room.
    Rate {
        /// Which limit: `key requests per minute`, `team tokens per minute`, ….
        what: Box<str>,
        /// Seconds until the limit has room.
        retry_after_secs: u64,
    },
    /// The store failed while a limit read it.
    Store(Box<StoreError>),
    /// The limits' own state is broken (a poisoned lock, an account missing after it was made): a bug.
    Internal(&'static str),
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Refused {
        Refused::Store(Box::new(e))
    }
}

/// Why a fleet budget cannot be judged now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unjudged {
    /// The store cannot be asked (or this node's leases may have lapsed while it was cut off).
    StoreUnreachable,
    /// The room is there, given back by other nodes just now.
    RoomMoving,
    /// The room is held by a node that stopped renewing its lease; it returns when that lease expires.
    RoomStranded,
}

impl Unjudged {
    /// `Retry-After` while a budget cannot be judged: about a heartbeat.
    pub const RETRY_SECS: u64 = 1;

    /// The answer's `code`.
    pub fn code(self) -> &'static str {
        match self {
            Unjudged::StoreUnreachable => "budget_store_unreachable",
            Unjudged::RoomMoving => "budget_room_moving",
            Unjudged::RoomStranded => "budget_room_stranded",
        }
    }

    /// The answer's message.
    pub fn message(self) -> &'static str {
        match self {
            Unjudged::StoreUnreachable => {
                "The budget store cannot be reached and this node's share of the budget does not pay for this \
                 request; retry shortly"
            }
            Unjudged::RoomMoving => {
                "The budget has room for this request, given back by other nodes just now; retry shortly"
            }
            Unjudged::RoomStranded => {
                "The budget has room for this request, held by a node that stopped renewing its lease; it returns \
                 when that lease expires: retry shortly"
            }
        }
    }
}

impl Refused {
    /// A budget refusal's figures (`None` for any other refusal).
    pub fn budget_details(&self) -> Option<&Map<String, Value>> {
        match self {
            Refused::Budget { details, .. } => Some(details.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_is_small() {
        // Every admission's `Result` carries one; the figures of a budget refusal are boxed.
        assert!(std::mem::size_of::<super::Refused>() <= 32, "{}", std::mem::size_of::<super::Refused>());
    }
}
