//! Where a configuration comes from: a file (`--config PATH`, `$SVC_CONFIG`, `./svc.yaml`) or the built-in
//! demo, whose text is compiled in.
//!
//! What this module does not do: read or check a file (the loader does).

use std::path::{Path, PathBuf};

/// The built-in demo configuration (four mock-served aliases).
pub const BUILTIN_YAML: &str = include_str!("builtin.yaml");

/// Where a configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file.
    File(PathBuf),
    /// The built-in demo configuration.
    Builtin,
}

/// Picks the configuration file: `explicit`, else `$SVC_CONFIG`, else `./svc.yaml` when it exists.
/// `None` means: use the built-in demo configuration.
pub fn find_config(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("SVC_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from("svc.yaml");
    local.exists().then_some(local)
}
