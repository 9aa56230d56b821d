//! The shell-hook sender (spec 6.5): run every script registered for an event's kind on this node.
//!
//! 1. Registrations come from the node's hooks file (`registry.rs`), re-read when it changes; each names an
//!    event pattern (an exact kind, `*`, or a prefix such as `task.*`), as webhooks' `events` do.
//! 2. Loop guard: hooks receive `SVC_HOOK_DEPTH` = the caller's depth + 1. A caller whose own depth is
//!    [`MAX_HOOK_DEPTH`] or more runs no hooks ([`HookRunError::DepthExceeded`]), so a hook that calls
//!    `svc-notify`, whose hooks call `svc-notify` … stops after three levels of hooks.
//! 3. The envelope is written once to a temporary file (`SVC_EVENT_FILE`), shared by the event's hooks and
//!    removed when they are done; the hooks of one event run concurrently, at most `max_concurrent` hooks
//!    at once across the whole runner (a semaphore).
//! 4. Each run is logged with its status and (capped) output. A failing hook is logged, never retried.

mod registry;
mod run;

pub use registry::{check_script, HookError, HookFile, HookRegistry, Registration};
pub use run::{run_hook, HookInput, HookRun, HookStatus, MAX_SVC_EVENT_BYTES, OUTPUT_CAP};

use crate::envelope::Envelope;
use std::sync::Arc;
use svc_config::HookSettings;
use tokio::sync::Semaphore;

/// Hooks run by a process whose `SVC_HOOK_DEPTH` is this or more are refused.
pub const MAX_HOOK_DEPTH: u32 = 3;

/// Runs the registered hooks of this node.
#[derive(Debug, Clone)]
pub struct HookRunner {
    registry: Arc<HookRegistry>,
    settings: HookSettings,
    permits: Arc<Semaphore>,
    depth: u32,
}

/// Why hooks were not run.
#[derive(Debug, thiserror::Error)]
pub enum HookRunError {
    /// The loop guard.
    #[error("hook depth {depth} reached the limit of {max}: not running hooks (a hook chain is looping?)")]
    DepthExceeded {
        /// This process's `SVC_HOOK_DEPTH`.
        depth: u32,
        /// [`MAX_HOOK_DEPTH`].
        max: u32,
    },
    /// The registrations could not be read.
    #[error(transparent)]
    Registry(#[from] HookError),
    /// The temporary envelope file could not be written.
    #[error("cannot write the envelope file for hooks: {0}")]
    TempFile(#[source] std::io::Error),
}

/// This process's hook depth: `$SVC_HOOK_DEPTH`, 0 when unset; a value that is not a number counts as the limit.
pub fn current_depth() -> u32 {
    match std::env::var("SVC_HOOK_DEPTH") {
        Ok(v) if v.trim().is_empty() => 0,
        Ok(v) => v.trim().parse().unwrap_or(MAX_HOOK_DEPTH),
        Err(_) => 0,
    }
}

impl HookRunner {
    /// A runner over `file` with `settings`, at this process's depth ([`current_depth`]).
    pub fn new(file: HookFile, settings: HookSettings) -> HookRunner {
        let permits = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        HookRunner { registry: Arc::new(HookRegistry::new(file)), settings, permits, depth: current_depth() }
    }

    /// The same runner at another depth.
    pub fn with_depth(mut self, depth: u32) -> HookRunner {
        self.depth = depth;
        self
    }

    /// The registrations.
    pub fn registry(&self) -> &HookRegistry {
        &self.registry
    }

    /// Whether the loop guard allows running hooks.
    pub fn allowed(&self) -> Result<(), HookRunError> {
        if self.depth >= MAX_HOOK_DEPTH {
            return Err(HookRunError::DepthExceeded { depth: self.depth, max: MAX_HOOK_DEPTH });
        }
        Ok(())
    }

    /// Runs every hook registered for the envelope's kind and waits for all of them; returns their runs in
    /// registration order (empty when none is registered). `origin` (who posted the event) is handed over as
    /// `SVC_EVENT_ORIGIN` when known.
    pub async fn run(&self, env: &Envelope, origin: Option<&str>) -> Result<Vec<HookRun>, HookRunError> {
        self.allowed()?;
        let scripts = self.registry.scripts_for(&env.event)?;
        self.run_scripts(env, origin, &scripts).await
    }

    /// Runs `scripts` (normally the hooks registered for the envelope's kind) with the envelope.
    pub async fn run_scripts(
        &self,
        env: &Envelope,
        origin: Option<&str>,
        scripts: &[std::path::PathBuf],
    ) -> Result<Vec<HookRun>, HookRunError> {
        self.allowed()?;
        if scripts.is_empty() {
            return Ok(Vec::new());
        }
        let json = env.to_json();
        let file = write_envelope_file(&json).map_err(HookRunError::TempFile)?;
        let input = HookInput { json: &json, kind: &env.event, origin, file: file.path(), depth: self.depth + 1 };
        let runs = futures::future::join_all(scripts.iter().map(|script| async {
            // A closed semaphore cannot happen (it is never closed); run anyway if it did.
            let _permit = self.permits.acquire().await.ok();
            let run = run_hook(script, &input, self.settings.timeout).await;
            log_run(&run, &env.event);
            run
        }))
        .await;
        drop(file);
        Ok(runs)
    }
}

fn write_envelope_file(json: &str) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write as _;
    let mut file = tempfile::Builder::new().prefix("svc-event-").suffix(".json").tempfile()?;
    file.write_all(json.as_bytes())?;
    file.flush()?;
    Ok(file)
}

fn log_run(run: &HookRun, kind: &str) {
    let script = run.script.display();
    if run.succeeded() {
        tracing::info!(%script, event = kind, status = %run.status, elapsed = ?run.elapsed, stdout = %run.stdout, stderr = %run.stderr, "hook finished");
    } else {
        tracing::warn!(%script, event = kind, status = %run.status, elapsed = ?run.elapsed, stdout = %run.stdout, stderr = %run.stderr, "hook failed");
    }
}

#[cfg(test)]
mod tests;
