//! `svc-notify`'s failures and their exit codes (spec 6.3): 1 configuration or usage, 2 push server
//! unreachable (also: a webhook could not be delivered), 3 authentication failed.

use std::process::ExitCode;

/// Why `svc-notify` did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// Usage, configuration, event, data or priority problem. May span several lines (config diagnostics).
    #[error("{0}")]
    Config(String),
    /// The push server could not be reached (after the short retry), or a webhook failed.
    #[error("{0}")]
    Unreachable(String),
    /// The push server refused the token.
    #[error("{0}")]
    Auth(String),
}

impl NotifyError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            NotifyError::Config(_) => 1,
            NotifyError::Unreachable(_) => 2,
            NotifyError::Auth(_) => 3,
        }
    }

    /// Prints the error on stderr, every line prefixed with `svc-notify: `, and returns the exit code.
    pub fn report(&self) -> ExitCode {
        for line in self.to_string().lines() {
            eprintln!("svc-notify: {line}");
        }
        ExitCode::from(self.exit_code())
    }
}
