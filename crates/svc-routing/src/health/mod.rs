//! Model health (spec 6.1 "gateway health check"): every deployment is healthy, degraded or unavailable, and
//! a failing one is cooled down. One [`Health`] per deployment, shared by its route.
//!
//! 1. Live traffic: each upstream call's outcome ([`Health::record`]) lands in the deployment's sliding
//!    [`Window`]: answered (with its latency: the whole answer, or a stream's first chunk) or failed (connect
//!    error, timeout, 408, 429, 5xx, an invalid answer, a stream broken mid-way). A client error (400, 401…)
//!    says nothing about the deployment and is not recorded.
//! 2. Probe: [`probe::round`] asks every deployment its cheap `Deployment::probe` (`GET /models`, never a
//!    paid completion), every `health_check_interval_seconds` and on a readiness check. A failed probe stands
//!    until a probe or a call succeeds.
//! 3. [`judge`]: the state the figures and the probe call for. A change of state is a [`Transition`], made
//!    under the deployment's lock, so each one is seen exactly once.
//! 4. [`announce`]: healthy → degraded emits `model.degraded`, anything → unavailable `model.unavailable`;
//!    every other change (a recovery) is logged and visible in `GET /health/models`, with no event.
//! 5. Cooldown: `allowed_fails` failures in a row take a deployment out of rotation for `cooldown_seconds`
//!    (routing still uses it when nothing else is left); it comes back by itself when the time is up.
//!
//! Cost per call: the cooldown counters are atomics; the window is a few additions under a mutex that is never
//! held across an await; strings are only built when the state changes.
//!
//! What it does not do: choose deployments (`pipeline::routing`) or answer HTTP (`handlers::health`).

mod judge;
pub mod probe;
mod window;

pub use judge::{describe, judge, Cause};
pub use window::{Figures, Window};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use svc_config::{HealthSettings, RoutingSettings};
use svc_events::EventKind;
use svc_events::{EventSink, GatewayEvent};

/// The health of a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Within every threshold (or too few calls to say otherwise).
    Healthy,
    /// Error rate or p95 latency at or above the degraded thresholds: still in rotation.
    Degraded,
    /// Error rate at or above `unavailable_error_rate`, or the probe fails: out of rotation, readiness 503.
    Unavailable,
}

impl State {
    /// `healthy`, `degraded` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Degraded => "degraded",
            State::Unavailable => "unavailable",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            0 => State::Healthy,
            1 => State::Degraded,
            _ => State::Unavailable,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            State::Healthy => 0,
            State::Degraded => 1,
            State::Unavailable => 2,
        }
    }
}

/// How an upstream call ended, as far as the deployment's health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It answered, after this long (a stream: its first chunk).
    Answered(Duration),
    /// It failed in a way that is the deployment's (see the module documentation).
    Failed,
}

/// A change of state.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The state before.
    pub previous: State,
    /// The state now.
    pub state: State,
    /// Why.
    pub reason: String,
    /// The window's figures when it changed.
    pub figures: Figures,
}

/// What recording an outcome changed.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The state changed.
    pub transition: Option<Transition>,
    /// This failure started a cooldown.
    pub cooled_down: bool,
}

/// Who a transition is about (event data).
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The alias the deployment serves.
    pub alias: &'a str,
    /// The provider name (`openai`, `anthropic`, `mock`).
    pub provider: &'a str,
    /// The deployment id.
    pub deployment: &'a str,
}

/// The health of one deployment.
#[derive(Debug)]
pub struct Health {
    settings: HealthSettings,
    allowed_fails: u32,
    cooldown_ms: u64,
    origin: Instant,
    state: AtomicU8,
    consecutive: AtomicU32,
    /// Milliseconds since `origin` until which the deployment is cooled down (0: never was).
    cooldown_until: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    window: Window,
    cause: Cause,
    reason: String,
    since: DateTime<Utc>,
    /// The last probe's failure, until a probe or a call succeeds.
    probe_failure: Option<String>,
    last_probe: Option<ProbeView>,
}

/// The last probe, for reports.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeView {
    /// Whether it answered.
    pub ok: bool,
    /// When (RFC 3339).
    pub at: String,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A deployment's health as `GET /health/models` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct View {
    /// The state.
    pub state: State,
    /// Why.
    pub reason: String,
    /// Since when (RFC 3339; the start of the process for a deployment that never changed).
    pub since: String,
    /// Failed calls / calls in the window (null without calls).
    pub error_rate: Option<f64>,
    /// p95 latency of the answered calls in the window.
    pub p95_latency_ms: Option<u64>,
    /// Calls in the window.
    pub calls: u32,
    /// Failed calls in the window.
    pub errors: u32,
    /// Failures in a row (towards `allowed_fails`).
    pub consecutive_failures: u32,
    /// Whether it is cooled down now.
    pub cooling_down: bool,
    /// Milliseconds of cooldown left.
    pub cooldown_remaining_ms: u64,
    /// The last probe.
    pub last_probe: Option<ProbeView>,
}

/// Locks, ignoring poisoning: the window is plain counters, valid whatever a panicking holder did.
fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Health {
    /// A healthy deployment with no history. `origin` is the shared clock's zero.
    pub fn new(settings: HealthSettings, routing: RoutingSettings, origin: Instant) -> Health {
        Health {
            settings,
            allowed_fails: routing.allowed_fails.max(1),
            cooldown_ms: routing.cooldown.as_millis() as u64,
            origin,
            state: AtomicU8::new(State::Healthy.as_u8()),
            consecutive: AtomicU32::new(0),
            cooldown_until: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                window: Window::new(settings.window),
                cause: Cause::Quiet,
                reason: describe(Cause::Quiet, &Figures::default(), None, &settings),
                since: Utc::now(),
                probe_failure: None,
                last_probe: None,
            }),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// The state now.
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Whether it is cooled down now.
    pub fn cooling_down(&self) -> bool {
        self.cooldown_until.load(Ordering::Relaxed) > self.now_ms()
    }

    /// In rotation: not unavailable and not cooled down.
    pub fn available(&self) -> bool {
        self.state() != State::Unavailable && !self.cooling_down()
    }

    /// Records a call's outcome; returns the transition it caused, if any.
    pub fn record(&self, outcome: Outcome) -> Recorded {
        let now = self.now_ms();
        let (failed, latency, cooled_down) = match outcome {
            Outcome::Answered(latency) => {
                if self.consecutive.load(Ordering::Relaxed) != 0 {
                    self.consecutive.store(0, Ordering::Relaxed);
                }
                (false, latency, false)
            }
            Outcome::Failed => (true, Duration::ZERO, self.count_failure(now)),
        };
        let mut g = lock(&self.inner);
        g.window.record(now, failed, latency);
        if !failed {
            g.probe_failure = None;
        }
        let transition = self.rejudge(&mut g, now);
        Recorded { transition, cooled_down }
    }

    /// Records a probe's result; returns the transition it caused, if any.
    pub fn probed(&self, result: Result<(), String>) -> Option<Transition> {
        let now = self.now_ms();
        let mut g = lock(&self.inner);
        let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        g.last_probe = Some(ProbeView { ok: result.is_ok(), at, error: result.as_ref().err().cloned() });
        g.probe_failure = result.err();
        if g.cause == Cause::Probe && g.probe_failure.is_some() {
            // Still failing: the reason follows the latest error.
            g.reason = describe(Cause::Probe, &Figures::default(), g.probe_failure.as_deref(), &self.settings);
        }
        self.rejudge(&mut g, now)
    }

    /// Judges an unavailable deployment again on the figures of now. Out of rotation, it gets no calls to be
    /// judged by, so routing asks this: once its failures have left the window (and no probe failure stands),
    /// it comes back. Any transition out of unavailable emits no event.
    pub fn refresh(&self) -> Option<Transition> {
        if self.state() != State::Unavailable {
            return None;
        }
        let now = self.now_ms();
        let mut g = lock(&self.inner);
        self.rejudge(&mut g, now)
    }

    /// Counts a failure in a row; starts a cooldown at `allowed_fails`.
    fn count_failure(&self, now: u64) -> bool {
        let n = self.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
        if self.cooldown_ms == 0 || n < self.allowed_fails {
            return false;
        }
        self.consecutive.store(0, Ordering::Relaxed);
        self.cooldown_until.store(now + self.cooldown_ms, Ordering::Relaxed);
        true
    }

    /// Judges again under the lock; a new state is stored and returned as a transition.
    fn rejudge(&self, g: &mut Inner, now: u64) -> Option<Transition> {
        let figures = g.window.figures(now);
        let (state, cause) = judge(&figures, g.probe_failure.is_some(), &self.settings);
        let previous = self.state();
        if state == previous && cause == g.cause {
            return None;
        }
        g.reason = describe(cause, &figures, g.probe_failure.as_deref(), &self.settings);
        g.cause = cause;
        if state == previous {
            return None;
        }
        g.since = Utc::now();
        self.state.store(state.as_u8(), Ordering::Relaxed);
        Some(Transition { previous, state, reason: g.reason.clone(), figures })
    }

    /// The figures and state for a report.
    pub fn view(&self) -> View {
        let now = self.now_ms();
        let until = self.cooldown_until.load(Ordering::Relaxed);
        let mut g = lock(&self.inner);
        let f = g.window.figures(now);
        View {
            state: self.state(),
            reason: g.reason.clone(),
            since: g.since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            error_rate: (f.calls > 0).then(|| f.error_rate()),
            p95_latency_ms: f.p95_ms,
            calls: f.calls,
            errors: f.errors,
            consecutive_failures: self.consecutive.load(Ordering::Relaxed),
            cooling_down: until > now,
            cooldown_remaining_ms: until.saturating_sub(now),
            last_probe: g.last_probe.clone(),
        }
    }
}

/// Emits the event of a transition, if it has one, and logs it either way.
pub fn announce(subject: Subject<'_>, t: &Transition, sink: &dyn EventSink) {
    let kind = match (t.previous, t.state) {
        (_, State::Unavailable) => EventKind::ModelUnavailable,
        (State::Healthy, State::Degraded) => EventKind::ModelDegraded,
        _ => {
            tracing::info!(
                alias = subject.alias,
                deployment = subject.deployment,
                state = t.state.as_str(),
                previous_state = t.previous.as_str(),
                reason = %t.reason,
                "model recovered"
            );
            sink.health_changed(subject.deployment, t.state.as_str(), None);
            return;
        }
    };
    tracing::warn!(
        alias = subject.alias,
        deployment = subject.deployment,
        state = t.state.as_str(),
        previous_state = t.previous.as_str(),
        reason = %t.reason,
        "{}",
        kind.as_str()
    );
    let f = &t.figures;
    let data = json!({
        "model": subject.alias,
        "alias": subject.alias,
        "provider": subject.provider,
        "deployment": subject.deployment,
        "state": t.state.as_str(),
        "previous_state": t.previous.as_str(),
        "reason": t.reason,
        "error_rate": (f.calls > 0).then(|| f.error_rate()),
        "p95_latency_ms": f.p95_ms,
    });
    let event = GatewayEvent { kind, agent: "gateway".into(), data };
    sink.health_changed(subject.deployment, t.state.as_str(), Some(event));
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_events::MemorySink;

    fn settings() -> (HealthSettings, RoutingSettings) {
        let h = HealthSettings {
            window: Duration::from_secs(60),
            min_requests: 4,
            degraded_error_permille: 250,
            unavailable_error_permille: 500,
            ..HealthSettings::default()
        };
        (h, RoutingSettings { num_retries: 2, allowed_fails: 2, cooldown: Duration::from_secs(60) })
    }

    fn run(h: &Health, sink: &MemorySink, outcomes: &[Outcome]) {
        let subject = Subject { alias: "a", provider: "openai", deployment: "a#1" };
        for o in outcomes {
            if let Some(t) = h.record(*o).transition {
                announce(subject, &t, sink);
            }
        }
    }

    #[test]
    fn getting_worse_announces_each_transition_once_and_recovery_is_silent() {
        let (s, r) = settings();
        let h = Health::new(s, r, Instant::now());
        let sink = MemorySink::default();
        let ok = Outcome::Answered(Duration::from_millis(20));
        run(&h, &sink, &[ok; 6]);
        assert_eq!(h.state(), State::Healthy);
        run(&h, &sink, &[Outcome::Failed; 2]);
        assert_eq!(h.state(), State::Degraded);
        run(&h, &sink, &[Outcome::Failed; 10]);
        assert_eq!(h.state(), State::Unavailable);
        assert!(!h.available());
        run(&h, &sink, &[ok; 40]);
        assert_eq!(h.state(), State::Healthy);
        let events = sink.events();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, vec!["model.degraded", "model.unavailable"]);
        assert_eq!(events[0].data["previous_state"], "healthy");
        assert_eq!(events[0].data["state"], "degraded");
        assert_eq!(events[0].data["error_rate"], 0.25);
        assert_eq!(events[0].data["p95_latency_ms"], 23);
        assert_eq!(events[1].data["previous_state"], "degraded");
        assert_eq!(events[1].data["reason"], "6 of 12 calls failed in the last 60 s (error rate 0.500)");
    }

    #[test]
    fn a_failed_probe_stands_until_a_call_or_probe_succeeds() {
        let (s, r) = settings();
        let h = Health::new(s, r, Instant::now());
        let t = h.probed(Err("upstream `a#1` unreachable".into()));
        assert_eq!(t.map(|t| (t.previous, t.state)), Some((State::Healthy, State::Unavailable)));
        assert_eq!(h.probed(Err("again".into())), None, "no second transition");
        assert_eq!(h.view().reason, "probe failed: again");
        let t = h.probed(Ok(()));
        assert_eq!(t.map(|t| t.state), Some(State::Healthy));
        h.probed(Err("down".into()));
        let t = h.record(Outcome::Answered(Duration::from_millis(5))).transition;
        assert_eq!(t.map(|t| t.state), Some(State::Healthy));
        assert_eq!(h.view().last_probe.map(|p| p.ok), Some(false));
    }

    #[test]
    fn an_unavailable_deployment_comes_back_when_its_failures_leave_the_window() {
        let (s, r) = settings();
        let s = HealthSettings { window: Duration::from_millis(100), ..s };
        let h = Health::new(s, r, Instant::now());
        for _ in 0..4 {
            h.record(Outcome::Failed);
        }
        assert_eq!(h.state(), State::Unavailable);
        assert_eq!(h.refresh(), None, "still in the window");
        std::thread::sleep(Duration::from_millis(150));
        let t = h.refresh().map(|t| (t.previous, t.state));
        assert_eq!(t, Some((State::Unavailable, State::Healthy)));
        assert_eq!(h.refresh(), None);
    }

    #[test]
    fn failures_in_a_row_start_a_cooldown() {
        let (s, r) = settings();
        let h = Health::new(s, r, Instant::now());
        assert!(!h.record(Outcome::Failed).cooled_down);
        assert!(!h.record(Outcome::Answered(Duration::ZERO)).cooled_down, "a success breaks the row");
        assert!(!h.record(Outcome::Failed).cooled_down);
        assert!(h.cooldown_until.load(Ordering::Relaxed) == 0 && h.available());
        assert!(h.record(Outcome::Failed).cooled_down);
        assert!(h.cooling_down() && !h.available());
        let v = h.view();
        assert!(v.cooling_down && v.cooldown_remaining_ms > 59_000, "{v:?}");
        let off = RoutingSettings { cooldown: Duration::ZERO, ..r };
        let h = Health::new(s, off, Instant::now());
        for _ in 0..5 {
            assert!(!h.record(Outcome::Failed).cooled_down);
        }
        assert_eq!(h.view().consecutive_failures, 5);
    }
}
