//! What the event pipeline reports to whoever counts it (the gateway's Prometheus metrics): an event stored,
//! a delivery attempt's outcome, a hook run's outcome. The pipeline itself neither counts nor knows a metrics
//! library; a [`Deliverer`](crate::Deliverer) without an observer reports nothing.

use crate::senders::hooks::HookStatus;

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Delivered.
    Delivered,
    /// Failed; it will be tried again.
    Retry,
    /// Failed for good (a dead letter).
    Dead,
}

impl DeliveryOutcome {
    /// `delivered`, `retry` or `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retry => "retry",
            DeliveryOutcome::Dead => "dead",
        }
    }
}

/// How one hook run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookOutcome {
    /// Exit status 0.
    Succeeded,
    /// Another exit status, or a signal.
    Failed,
    /// Killed at its timeout.
    TimedOut,
    /// Could not be started.
    NotStarted,
}

impl HookOutcome {
    /// `succeeded`, `failed`, `timed_out` or `not_started`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookOutcome::Succeeded => "succeeded",
            HookOutcome::Failed => "failed",
            HookOutcome::TimedOut => "timed_out",
            HookOutcome::NotStarted => "not_started",
        }
    }

    /// The outcome of a run that ended with `status`.
    pub fn of(status: &HookStatus) -> HookOutcome {
        match status {
            HookStatus::Exited(0) => HookOutcome::Succeeded,
            HookStatus::Exited(_) | HookStatus::Signaled(_) => HookOutcome::Failed,
            HookStatus::TimedOut(_) => HookOutcome::TimedOut,
            HookStatus::FailedToStart(_) => HookOutcome::NotStarted,
        }
    }
}

/// Receives the event pipeline's reports. Calls are made on the pipeline's tasks and must not block.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// An event of `kind` was stored for delivery.
    fn emitted(&self, kind: &str);
    /// An attempt to deliver to `destination` ended so.
    fn delivery(&self, destination: &str, outcome: DeliveryOutcome);
    /// A hook ran and ended so.
    fn hook_ran(&self, outcome: HookOutcome);
}
