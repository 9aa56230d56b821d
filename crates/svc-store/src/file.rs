//! The SQLite file of a `sqlite:` URL: where it is (read as sqlx reads it), and its creation readable by its
//! owner only. The database holds key hashes and, for the demo, the master key itself; SQLite gives the `-wal`
//! and `-shm` files it creates beside the database the database file's own permissions, so creating the
//! database file with mode 0600 before sqlx opens it keeps all three private. An existing file is left as it is.

use crate::StoreError;
use std::path::{Path, PathBuf};

/// The file a `sqlite:` URL names, as sqlx reads it (the text after `sqlite://` or `sqlite:`, up to `?`,
/// percent-decoded); `None` for other URLs and for in-memory databases.
pub fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, params) = match rest.split_once('?') {
        Some((path, params)) => (path, params),
        None => (rest, ""),
    };
    let in_memory = params.split('&').any(|p| p == "mode=memory");
    if path.is_empty() || path == ":memory:" || in_memory {
        return None;
    }
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8().ok()?;
    Some(PathBuf::from(decoded.as_ref()))
}

/// Before sqlx opens `url`: its SQLite file is created private unless the URL opens it read-only.
pub(crate) async fn prepare(url: &str) -> Result<(), StoreError> {
    let read_only = url.split_once('?').is_some_and(|(_, params)| params.split('&').any(|p| p == "mode=ro"));
    match sqlite_path(url) {
        Some(path) if !read_only => create_private(&path).await,
        _ => Ok(()),
    }
}

/// Creates the database file with mode 0600 when it does not exist yet; an existing file keeps its mode, and a
/// missing folder is left for SQLite to report.
pub(crate) async fn create_private(path: &Path) -> Result<(), StoreError> {
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    match options.open(path).await {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound) => Ok(()),
        Err(source) => Err(StoreError::Create { path: path.to_path_buf(), source }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_the_path_as_sqlx_does() {
        let cases = [
            ("sqlite://svc.db", Some("svc.db")),
            ("sqlite:svc.db?mode=rwc", Some("svc.db")),
            ("sqlite:///var/lib/svc/svc.db", Some("/var/lib/svc/svc.db")),
            ("sqlite:///tmp/a%25b%3Fc%23d/svc.db", Some("/tmp/a%b?c#d/svc.db")),
            ("sqlite::memory:", None),
            ("sqlite://?mode=memory", None),
            ("sqlite://x.db?mode=memory", None),
            ("postgres://u@h/db", None),
        ];
        for (url, want) in cases {
            assert_eq!(sqlite_path(url), want.map(PathBuf::from), "{url}");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn creates_the_file_private_and_leaves_an_existing_one_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.db");
        create_private(&new).await.unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().permissions().mode() & 0o777, 0o600);
        let old = dir.path().join("old.db");
        std::fs::write(&old, b"").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
        create_private(&old).await.unwrap();
        assert_eq!(std::fs::metadata(&old).unwrap().permissions().mode() & 0o777, 0o640);
        // A missing folder is SQLite's to report, with its usual message.
        create_private(&dir.path().join("missing/x.db")).await.unwrap();
    }

    /// SQLite gives its `-wal` and `-shm` files the database file's mode.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_new_store_and_its_journal_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("svc.db");
        let store = crate::Store::connect(&format!("sqlite://{}", db.display())).await.unwrap();
        store.meta_get_or_insert("probe", "x").await.unwrap();
        for name in ["svc.db", "svc.db-wal", "svc.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
        store.close().await;
    }
}
