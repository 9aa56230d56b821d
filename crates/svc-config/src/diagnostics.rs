//! One problem found in a configuration file, printed as `file:line:column: message`; [`ConfigError`], what a
//! configuration that cannot be used is; and the two steps that turn problems into one: a YAML syntax error,
//! and the walk's findings once it is done.

use crate::node::{self, Node};
use std::fmt;
use std::path::PathBuf;

/// How bad a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The configuration cannot be used.
    Error,
    /// The configuration works but probably not as meant.
    Warning,
}

/// A problem at a place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name as given (or `<built-in>`).
    pub file: String,
    /// 1-based line, 0 when unknown.
    pub line: u64,
    /// 1-based column, 0 when unknown.
    pub col: u64,
    /// Error or warning.
    pub severity: Severity,
    /// Lower-case sentence naming the key and the value.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(f, "{}:{}:{}: {level}{}", self.file, self.line, self.col, self.message)
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file `{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file has problems; every one is listed (warnings too).
    #[error("{}", render(.diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
    /// The built-in demo has nowhere to keep its store.
    #[error(
        "no place for the demo store: neither XDG_DATA_HOME nor HOME is set (set one, or give a config file \
         with `server.database_url`)"
    )]
    NoDataDir,
}

fn render(diags: &[Diagnostic]) -> String {
    diags.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
}

/// The YAML tree of `text`; a syntax error is the one diagnostic.
pub(crate) fn parse_root(text: &str, file: &str) -> Result<Node, ConfigError> {
    node::parse(text).map_err(|(line, col, message)| {
        let d = Diagnostic { file: file.to_string(), line, col, severity: Severity::Error, message };
        ConfigError::Invalid { diagnostics: vec![d] }
    })
}

/// A walk's diagnostics sorted by position: the warnings, or every diagnostic when one is an error.
pub(crate) fn checked(mut diags: Vec<Diagnostic>) -> Result<Vec<Diagnostic>, ConfigError> {
    diags.sort_by_key(|d| (d.line, d.col));
    if diags.iter().any(|d| d.severity == Severity::Error) {
        return Err(ConfigError::Invalid { diagnostics: diags });
    }
    Ok(diags)
}
