//! The limits a request must pass before it goes upstream: budgets per team and per key (spec 4.1 rule 1, 8),
//! with their fleet leases and notices, and rate limits per key and team (spec 4.1 rule 2), on one node or
//! across a fleet sharing PostgreSQL; and the bounded table of failed authentications by client address
//! (`rate::addresses`).
//!
//! Boundary: no HTTP here. A request a limit turns away gets a [`Refused`] (budget, rate, or a budget that cannot
//! be judged now), which the gateway maps to its status in one place. The master key passes every limit
//! untouched: no account, no bucket.

pub mod budgets;
pub mod rate;
mod refused;

pub use refused::{Refused, Unjudged};
