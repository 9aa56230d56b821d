//! Running one hook script (spec 6.5; the README's "Shell hooks").
//!
//! 1. The script is exec'd directly (no shell, no arguments); event data reaches it only through the
//!    environment: `SVC_EVENT` (the envelope JSON, or empty when too large, see [`MAX_SVC_EVENT_BYTES`]),
//!    `SVC_EVENT_KIND`, `SVC_EVENT_ORIGIN` (who posted the event, when known), `SVC_EVENT_FILE` (a 0600
//!    temporary file holding the envelope, always set) and `SVC_HOOK_DEPTH` (the loop guard). stdin is
//!    `/dev/null`.
//! 2. It runs in its own process group. At the timeout the group gets SIGTERM, then SIGKILL two seconds later.
//! 3. When the script exits, whatever it left running in its group is killed, so a hook never leaves
//!    stragglers holding its output open; the script itself is always reaped.
//! 4. stdout and stderr are read as they come (so a chatty hook never blocks on a full pipe) and at most
//!    [`OUTPUT_CAP`] bytes of each are kept for the log.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Linux caps one `NAME=value` environment string at 131,072 bytes including the NUL (`MAX_ARG_STRLEN`); with
/// the name `SVC_EVENT` the longest value that fits is 131,061 bytes. A longer envelope is not put in
/// `SVC_EVENT` (the variable is set to the empty string) and the hook reads `SVC_EVENT_FILE` instead.
pub const MAX_SVC_EVENT_BYTES: usize = 131_061;

/// Bytes of stdout and of stderr kept per run; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 16 * 1024;

/// Between SIGTERM and SIGKILL at the timeout.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// What a hook is given.
#[derive(Debug, Clone)]
pub struct HookInput<'a> {
    /// The envelope JSON.
    pub json: &'a str,
    /// The kind.
    pub kind: &'a str,
    /// Who posted the event (`SVC_EVENT_ORIGIN`), when known.
    pub origin: Option<&'a str>,
    /// The temporary file holding `json`.
    pub file: &'a Path,
    /// `SVC_HOOK_DEPTH` for the child (the caller's depth + 1).
    pub depth: u32,
}

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookStatus {
    /// It exited with this code.
    Exited(i32),
    /// A signal (not ours) ended it.
    Signaled(i32),
    /// It ran past the timeout and its group was killed.
    TimedOut(Duration),
    /// It could not be started.
    FailedToStart(String),
}

/// One finished hook run.
#[derive(Debug, Clone)]
pub struct HookRun {
    /// The script.
    pub script: PathBuf,
    /// How it ended.
    pub status: HookStatus,
    /// Its stdout, at most [`OUTPUT_CAP`] bytes (lossy UTF-8).
    pub stdout: String,
    /// Its stderr, at most [`OUTPUT_CAP`] bytes (lossy UTF-8).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl HookRun {
    /// Whether it exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.status == HookStatus::Exited(0)
    }
}

impl std::fmt::Display for HookStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookStatus::Exited(code) => write!(f, "exit status {code}"),
            HookStatus::Signaled(sig) => write!(f, "killed by signal {sig}"),
            HookStatus::TimedOut(after) => write!(f, "timed out after {}s, process group killed", after.as_secs_f32()),
            HookStatus::FailedToStart(why) => write!(f, "failed to start: {why}"),
        }
    }
}

/// Runs `script` with `input`, killing its process group after `timeout`.
pub async fn run_hook(script: &Path, input: &HookInput<'_>, timeout: Duration) -> HookRun {
    let started = Instant::now();
    let finish = |status, stdout, stderr| HookRun {
        script: script.to_path_buf(),
        status,
        stdout,
        stderr,
        elapsed: started.elapsed(),
    };
    let event_var = if input.json.len() <= MAX_SVC_EVENT_BYTES { input.json } else { "" };
    let mut cmd = tokio::process::Command::new(script);
    cmd.env("SVC_EVENT", event_var)
        .env("SVC_EVENT_KIND", input.kind)
        .env("SVC_EVENT_FILE", input.file)
        .env("SVC_HOOK_DEPTH", input.depth.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(origin) = input.origin {
        cmd.env("SVC_EVENT_ORIGIN", origin);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return finish(HookStatus::FailedToStart(e.to_string()), String::new(), String::new()),
    };
    // The child leads its own group, so its pid is the group id.
    let group = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
    // Bare: the readers of the hook's pipes end with the hook (it is killed below) and are awaited before this
    // returns.
    #[allow(clippy::disallowed_methods)]
    let stdout = child.stdout.take().map(|s| tokio::spawn(read_capped(s)));
    #[allow(clippy::disallowed_methods)]
    let stderr = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));

    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(s)) => exit_status(s),
        Ok(Err(e)) => HookStatus::FailedToStart(e.to_string()),
        Err(_) => {
            signal_group(group, Signal::SIGTERM);
            if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
                signal_group(group, Signal::SIGKILL);
                let _ = child.wait().await;
            }
            HookStatus::TimedOut(timeout)
        }
    };
    // Step 3: nothing of the hook outlives it.
    signal_group(group, Signal::SIGKILL);
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    finish(status, stdout, stderr)
}

fn exit_status(s: std::process::ExitStatus) -> HookStatus {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(code), _) => HookStatus::Exited(code),
        (None, Some(sig)) => HookStatus::Signaled(sig),
        (None, None) => HookStatus::Exited(-1),
    }
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(g) = group {
        // ESRCH (no such group) is the normal case once everything has exited.
        let _ = killpg(g, signal);
    }
}

async fn read_capped(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// The output of a reader; a pipe still held open by a process that escaped the group (`setsid`) is given up on.
async fn collect(reader: Option<tokio::task::JoinHandle<Vec<u8>>>) -> String {
    let Some(mut handle) = reader else {
        return String::new();
    };
    match tokio::time::timeout(Duration::from_secs(1), &mut handle).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => {
            handle.abort();
            String::new()
        }
    }
}
