//! Who is calling: the master key or a virtual key, as authentication resolved it. A leaf: every stage and
//! handler names the caller, and nothing here reaches back into them.

use crate::key::VirtualKey;
use std::sync::Arc;

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Principal {
    /// The master key: admin operations, no budget or rate limits (spec 5.3, 8.2).
    Master,
    /// A virtual key.
    Key(Arc<VirtualKey>),
}

impl Principal {
    /// The virtual key, if any.
    pub fn key(&self) -> Option<&VirtualKey> {
        match self {
            Principal::Master => None,
            Principal::Key(k) => Some(k),
        }
    }

    /// Requires the master key or a key of `team_id`: reading a team's own data.
    pub fn require_team(&self, team_id: &str) -> Result<(), Forbidden> {
        match self {
            Principal::Master => Ok(()),
            Principal::Key(k) if k.team_id == team_id => Ok(()),
            Principal::Key(_) => Err(Forbidden::OtherTeam),
        }
    }

    /// Requires the master key.
    pub fn require_master(&self) -> Result<(), Forbidden> {
        match self {
            Principal::Master => Ok(()),
            Principal::Key(_) => Err(Forbidden::MasterOnly),
        }
    }
}

/// What a caller may not do (the gateway answers it with a 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    /// A virtual key asked for another team's data.
    #[error("a virtual key sees only its own team")]
    OtherTeam,
    /// A virtual key asked for what only the master key may do.
    #[error("this operation requires the master key")]
    MasterOnly,
}
