//! Shell-hook registrations (spec 6.5): which script runs on which kind, persisted in a JSON file on the node
//! (never in the shared fleet database) and re-read whenever the file changes, so a running `svc serve` picks
//! up `svc hooks add` without a restart.
//!
//! File location, first match wins: `$SVC_HOOKS_FILE`; `$XDG_STATE_HOME/svc/hooks.json`;
//! `~/.local/state/svc/hooks.json`. Format: `{"version":1,"hooks":[{"event":"task.done","script":"/abs/path"}]}`.
//! Writes go to a temporary file in the same directory, then a rename, so a reader never sees half a file.

use serde::{Deserialize, Serialize};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One registration: `script` runs on every kind `event` takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// An event pattern, as webhooks' `events` take: a kind of spec 6.1, `test`, `*`, or a prefix such as
    /// `task.*`.
    pub event: String,
    /// Absolute path of an executable file.
    pub script: PathBuf,
}

/// The registrations file on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFile {
    path: PathBuf,
}

/// The file's contents, cached until its size, modification time or inode changes.
#[derive(Debug)]
pub struct HookRegistry {
    file: HookFile,
    cache: Mutex<Cached>,
}

/// What went wrong with a registration or the file.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Neither `$SVC_HOOKS_FILE`, `$XDG_STATE_HOME` nor `$HOME` is set.
    #[error("cannot find the hooks file: set `SVC_HOOKS_FILE`, `XDG_STATE_HOME` or `HOME`")]
    NoLocation,
    /// Reading or writing the file failed.
    #[error("hooks file `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("hooks file `{path}` is not valid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The event is not an event pattern.
    #[error("{0} (use a kind such as `task.done`, `test`, a prefix such as `task.*`, or `*` for every kind)")]
    UnknownKind(String),
    /// The script does not exist.
    #[error("script `{0}` does not exist")]
    ScriptMissing(PathBuf),
    /// The script is not a regular file.
    #[error("script `{0}` is not a regular file")]
    NotAFile(PathBuf),
    /// The script has no execute permission.
    #[error("script `{0}` is not executable (try `chmod +x {0}`)")]
    NotExecutable(PathBuf),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileBody {
    #[serde(default = "one")]
    version: u32,
    #[serde(default)]
    hooks: Vec<Registration>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Default)]
struct Cached {
    stamp: Option<(i64, i64, u64, u64)>,
    hooks: Vec<Registration>,
}

impl HookFile {
    /// The file at an explicit path.
    pub fn at(path: impl Into<PathBuf>) -> HookFile {
        HookFile { path: path.into() }
    }

    /// The file of this node, located from the process environment (see the module documentation).
    pub fn locate() -> Result<HookFile, HookError> {
        HookFile::locate_with(&|name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from))
    }

    /// [`HookFile::locate`] with an explicit environment lookup.
    pub fn locate_with(env: &dyn Fn(&str) -> Option<PathBuf>) -> Result<HookFile, HookError> {
        if let Some(p) = env("SVC_HOOKS_FILE") {
            return Ok(HookFile::at(p));
        }
        if let Some(state) = env("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
            return Ok(HookFile::at(state.join("svc").join("hooks.json")));
        }
        let home = env("HOME").ok_or(HookError::NoLocation)?;
        Ok(HookFile::at(home.join(".local/state/svc/hooks.json")))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every registration, in file order; a missing file means none.
    pub fn load(&self) -> Result<Vec<Registration>, HookError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) if text.trim().is_empty() => Ok(Vec::new()),
            Ok(text) => serde_json::from_str::<FileBody>(&text)
                .map(|b| b.hooks)
                .map_err(|source| HookError::Parse { path: self.path.clone(), source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(HookError::Io { path: self.path.clone(), source }),
        }
    }

    /// Registers `script` for `event` after checking both; returns the stored registration (absolute path).
    /// Registering the same pair twice keeps one entry.
    pub fn add(&self, event: &str, script: &Path) -> Result<Registration, HookError> {
        let reg = Registration { event: check_event(event)?, script: check_script(script)? };
        let mut hooks = self.load()?;
        if !hooks.contains(&reg) {
            hooks.push(reg.clone());
            self.store(hooks)?;
        }
        Ok(reg)
    }

    /// Removes the registration of `script` for `event`; returns whether there was one. The script need not
    /// exist any more.
    pub fn remove(&self, event: &str, script: &Path) -> Result<bool, HookError> {
        let script =
            std::path::absolute(script).map_err(|source| HookError::Io { path: script.to_path_buf(), source })?;
        let mut hooks = self.load()?;
        let before = hooks.len();
        hooks.retain(|r| !(r.event == event && r.script == script));
        if hooks.len() == before {
            return Ok(false);
        }
        self.store(hooks)?;
        Ok(true)
    }

    fn store(&self, hooks: Vec<Registration>) -> Result<(), HookError> {
        let io = |source| HookError::Io { path: self.path.clone(), source };
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let text = serde_json::to_string_pretty(&FileBody { version: 1, hooks })
            .map_err(|source| HookError::Parse { path: self.path.clone(), source })?;
        let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        std::fs::write(tmp.path(), text + "\n").map_err(io)?;
        tmp.persist(&self.path).map_err(|e| io(e.error))?;
        Ok(())
    }

    fn stamp(&self) -> Option<(i64, i64, u64, u64)> {
        let m = std::fs::metadata(&self.path).ok()?;
        Some((m.mtime(), m.mtime_nsec(), m.size(), m.ino()))
    }
}

impl HookRegistry {
    /// A registry over `file`; nothing is read until the first lookup.
    pub fn new(file: HookFile) -> HookRegistry {
        HookRegistry { file, cache: Mutex::new(Cached::default()) }
    }

    /// The file.
    pub fn file(&self) -> &HookFile {
        &self.file
    }

    /// The registrations now, re-read when the file changed since the last call. A file that cannot be read
    /// keeps the last good registrations and returns the error.
    pub fn current(&self) -> Result<Vec<Registration>, HookError> {
        let stamp = self.file.stamp();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.stamp != stamp || stamp.is_none() {
            let hooks = self.file.load()?;
            cache.hooks = hooks;
            cache.stamp = stamp;
        }
        Ok(cache.hooks.clone())
    }

    /// The scripts registered with a pattern that takes `kind`, each once, in file order.
    pub fn scripts_for(&self, kind: &str) -> Result<Vec<PathBuf>, HookError> {
        let mut out: Vec<PathBuf> = Vec::new();
        for r in self.current()? {
            if svc_config::event_pattern_matches(&r.event, kind) && !out.contains(&r.script) {
                out.push(r.script);
            }
        }
        Ok(out)
    }
}

fn check_event(event: &str) -> Result<String, HookError> {
    match svc_config::event_pattern_error(event) {
        None => Ok(event.to_string()),
        Some(why) => Err(HookError::UnknownKind(why)),
    }
}

/// The absolute path of an existing, executable regular file.
pub fn check_script(script: &Path) -> Result<PathBuf, HookError> {
    let abs = std::path::absolute(script).map_err(|source| HookError::Io { path: script.to_path_buf(), source })?;
    let meta = match std::fs::metadata(&abs) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(HookError::ScriptMissing(abs)),
        Err(source) => return Err(HookError::Io { path: abs, source }),
    };
    if !meta.is_file() {
        return Err(HookError::NotAFile(abs));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(HookError::NotExecutable(abs));
    }
    Ok(abs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn script(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn location_rules() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| PathBuf::from(v))
        };
        let f = HookFile::locate_with(&env(&[("SVC_HOOKS_FILE", "/x/h.json"), ("HOME", "/home/u")])).unwrap();
        assert_eq!(f.path(), Path::new("/x/h.json"));
        let f = HookFile::locate_with(&env(&[("XDG_STATE_HOME", "/st"), ("HOME", "/home/u")])).unwrap();
        assert_eq!(f.path(), Path::new("/st/svc/hooks.json"));
        let f = HookFile::locate_with(&env(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(f.path(), Path::new("/home/u/.local/state/svc/hooks.json"));
        assert!(matches!(HookFile::locate_with(&env(&[])), Err(HookError::NoLocation)));
    }

    #[test]
    fn add_list_remove_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let file = HookFile::at(dir.path().join("state/hooks.json"));
        let registry = HookRegistry::new(file.clone());
        assert!(registry.scripts_for("task.done").unwrap().is_empty());
        let a = script(dir.path(), "a.sh", 0o755);
        let b = script(dir.path(), "b.sh", 0o755);
        file.add("task.done", &a).unwrap();
        file.add("task.done", &a).unwrap();
        file.add("*", &b).unwrap();
        assert_eq!(file.load().unwrap().len(), 2);
        let c = script(dir.path(), "c.sh", 0o755);
        file.add("budget.*", &c).unwrap();
        assert_eq!(registry.scripts_for("budget.exceeded").unwrap(), vec![b.clone(), c.clone()]);
        assert!(file.remove("budget.*", &c).unwrap());
        assert_eq!(registry.scripts_for("task.done").unwrap(), vec![a.clone(), b.clone()]);
        assert_eq!(registry.scripts_for("test").unwrap(), vec![b.clone()]);
        assert!(file.remove("*", &b).unwrap());
        assert!(!file.remove("*", &b).unwrap());
        assert_eq!(registry.scripts_for("test").unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn bad_scripts_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let file = HookFile::at(dir.path().join("hooks.json"));
        let plain = script(dir.path(), "plain.sh", 0o644);
        assert!(matches!(file.add("task.done", &plain), Err(HookError::NotExecutable(_))));
        assert!(matches!(file.add("task.done", &dir.path().join("nope")), Err(HookError::ScriptMissing(_))));
        assert!(matches!(file.add("task.done", dir.path()), Err(HookError::NotAFile(_))));
        let ok = script(dir.path(), "ok.sh", 0o700);
        assert!(matches!(file.add("task.finished", &ok), Err(HookError::UnknownKind(_))));
        assert!(matches!(file.add("nope.*", &ok), Err(HookError::UnknownKind(_))));
        assert!(matches!(file.add("task*", &ok), Err(HookError::UnknownKind(_))));
        assert!(!file.path().exists());
    }
}
