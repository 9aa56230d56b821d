//! Routing (spec 3, 4.3, 4.4): the table of model aliases and their deployments built from the config, the
//! [`Plan`] of a request (which deployments it tries, in which order, with retries and fallbacks), each
//! deployment's [`health`] (cooldowns, the probe) and the gateway's [`readiness`], and the [`homes`] of stored
//! responses (which deployment holds each, and whose it is); and this gateway as a [`node`] of its fleet
//! (registration, heartbeat, the `node.offline` monitor).
//!
//! Boundary: no HTTP edge and no virtual keys here. A caller is an [`Owner`] (ids only); a health transition
//! leaves only through the `EventSink` it is given; the gateway's Prometheus series are reached through
//! [`DeploymentSeries`].

pub mod health;
pub mod homes;
pub mod node;
pub mod readiness;
mod table;
mod upstream;

pub use homes::{Home, Owner, ResponseHomes};
pub use table::{
    backoff, classify, matches, AliasInfo, Attempt, Failure, InFlight, ModelTable, Plan, Route,
    DEFAULT_MAX_OUTPUT_TOKENS,
};

/// The series the gateway keeps of each deployment (its Prometheus registry), made when the table is built.
pub trait DeploymentSeries {
    /// The counter of `deployment`'s cooldowns.
    fn cooldowns(&self, deployment: &str) -> prometheus::IntCounter;
    /// Makes `deployment`'s other series exist from the start (a scrape shows zeros, not gaps).
    fn flag_series(&self, deployment: &str);
}

/// No series (tests).
#[cfg(test)]
pub(crate) struct NoSeries;

#[cfg(test)]
impl DeploymentSeries for NoSeries {
    fn cooldowns(&self, deployment: &str) -> prometheus::IntCounter {
        prometheus::IntCounter::new("cooldowns", deployment).unwrap_or_else(|e| panic!("{e}"))
    }

    fn flag_series(&self, _deployment: &str) {}
}
