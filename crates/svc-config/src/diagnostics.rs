//! One problem found in a configuration file, printed as `file:line:column: message`.

use std::fmt;

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
