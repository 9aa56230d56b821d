//! Who posted an event. The envelope's shape is fixed by spec 2.6 and says nothing about it, so the origin is
//! recorded beside the envelope (an outbox column) and delivered beside it: the `X-SVC-Origin` header of a
//! webhook delivery and the `SVC_EVENT_ORIGIN` variable of a hook.

use std::fmt;

/// Who posted an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The gateway's own checks (budgets, model health): `gateway`.
    Gateway,
    /// `POST /events` with the master key: `master`.
    Master,
    /// `POST /events` with a virtual key: `key:<key id>`.
    Key(String),
    /// The `svc-notify` command: `svc-notify`.
    Notify,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Gateway => f.write_str("gateway"),
            Origin::Master => f.write_str("master"),
            Origin::Key(id) => write!(f, "key:{id}"),
            Origin::Notify => f.write_str("svc-notify"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        let shown: Vec<String> = [Origin::Gateway, Origin::Master, Origin::Key("k-1".into()), Origin::Notify]
            .iter()
            .map(|o| o.to_string())
            .collect();
        assert_eq!(shown, ["gateway", "master", "key:k-1", "svc-notify"]);
    }
}
