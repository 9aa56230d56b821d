//! The local spend journal of a node on a shared (PostgreSQL) store: what makes an answered request's spend
//! survive `kill -9` without a round trip to a remote database on the request path.
//!
//! Each spend record is appended as one JSON line to the current segment file on the request's own thread
//! (a `write` to the page cache, no `fsync`) before the answer; the spend writer moves records into the store
//! in batches, idempotently (records carry a unique id), and a segment is deleted once every record in it is
//! in the store. At start, the segments left by the last run are written to the store before the node admits
//! anything. An OS crash (not a process crash) may lose the records of the last seconds, as SQLite's WAL with
//! `synchronous=NORMAL` can. A lock file keeps two processes from using one node's journal.

use crate::ChargedRecord;
use foldhash::{HashMap, HashMapExt};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A segment is closed (and a new one begun) past this size.
const SEGMENT_BYTES: u64 = 8 << 20;

/// Writes `r` as one journal line: the record's own fields and its charges in one object (what
/// `ChargedRecord`'s flattened form reads back), by hand: serde's serializer escaped every key and went through
/// its map serializer (an append took 13,100 instructions with it, 3,200 without: BENCHMARKS.md).
fn write_line(line: &mut Vec<u8>, r: &ChargedRecord) {
    use crate::json_text::{push_int, push_str};
    let s = &r.record;
    let texts: [(&str, Option<&str>); 14] = [
        ("record_id", Some(&s.record_id)),
        ("node", s.node.as_deref()),
        ("request_id", Some(&s.request_id)),
        ("key_id", s.key_id.as_deref()),
        ("team_id", s.team_id.as_deref()),
        ("agent_role", s.agent_role.as_deref()),
        ("model_alias", Some(&s.model_alias)),
        ("upstream_model", Some(&s.upstream_model)),
        ("deployment", Some(&s.deployment)),
        ("api", s.api.as_deref()),
        ("client", s.client.as_deref()),
        ("session_id", s.session_id.as_deref()),
        ("response_id", s.response_id.as_deref()),
        ("basis", s.basis.as_deref()),
    ];
    let numbers = [
        ("ts_ms", s.ts_ms),
        ("prompt_tokens", s.prompt_tokens),
        ("completion_tokens", s.completion_tokens),
        ("cost", s.cost),
        ("status", s.status),
        ("latency_ms", s.latency_ms),
    ];
    // Fields a record reads as 0 when they are missing: written only when they are not.
    let parts = [
        ("cache_read_tokens", s.cache_read_tokens),
        ("cache_write_tokens", s.cache_write_tokens),
        ("tool_uses", s.tool_uses),
        ("input_cost", s.input_cost),
        ("output_cost", s.output_cost),
        ("cache_read_cost", s.cache_read_cost),
        ("cache_write_cost", s.cache_write_cost),
        ("tool_cost", s.tool_cost),
    ];
    let key = |line: &mut Vec<u8>, key: &str| {
        line.extend_from_slice(if line.last() == Some(&b'{') { b"\"" } else { b",\"" });
        line.extend_from_slice(key.as_bytes());
        line.extend_from_slice(b"\":");
    };
    line.push(b'{');
    // A text field left out reads as `None`.
    for (name, value) in texts {
        if let Some(v) = value {
            key(line, name);
            push_str(line, v);
        }
    }
    for (name, n) in numbers {
        key(line, name);
        push_int(line, n);
    }
    for (name, n) in parts.into_iter().filter(|(_, n)| *n != 0) {
        key(line, name);
        push_int(line, n);
    }
    line.extend_from_slice(b",\"charges\":[");
    for (i, c) in r.charges.iter().enumerate() {
        line.extend_from_slice(if i == 0 { b"{\"scope\":" } else { b",{\"scope\":" });
        push_str(line, &c.scope);
        line.extend_from_slice(b",\"period\":");
        push_int(line, c.period);
        line.extend_from_slice(b",\"limit\":");
        push_int(line, c.limit);
        line.push(b'}');
    }
    line.extend_from_slice(b"]}\n");
}

/// The journal of one node.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    stem: String,
    inner: Mutex<Active>,
    /// Held for the process's life: the lock against a second process with the same node name.
    _lock: File,
}

#[derive(Debug)]
struct Active {
    file: File,
    seq: u64,
    bytes: u64,
    /// Records appended per segment (the current one included).
    appended: HashMap<u64, u64>,
    /// Records in the store per segment.
    done: HashMap<u64, u64>,
}

/// Opening the journal failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Another process holds the node's journal.
    #[error(
        "another `svc serve` of node `{node}` uses the spend journal in {dir}: give each node its own `fleet.node`"
    )]
    Locked {
        /// The node.
        node: String,
        /// The folder.
        dir: String,
    },
    /// The file system refused.
    #[error("spend journal in {dir}: {source}")]
    Io {
        /// The folder.
        dir: String,
        /// What failed.
        source: std::io::Error,
    },
}

fn file_part(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

impl Journal {
    /// Opens (creating) the journal of `node` of `fleet` in `dir`; returns it with the records the last run
    /// left (to be written to the store, then [`Journal::forget_replayed`]).
    pub fn open(dir: &Path, fleet: &str, node: &str) -> Result<(Journal, Replay), JournalError> {
        let io = |source| JournalError::Io { dir: dir.display().to_string(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let stem = format!("spend-{}-{}", file_part(fleet), file_part(node));
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{stem}.lock")))
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(JournalError::Locked { node: node.to_string(), dir: dir.display().to_string() })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut segments: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?;
                let seq = name.strip_prefix(&format!("{stem}."))?.strip_suffix(".jsonl")?.parse().ok()?;
                Some((seq, p))
            })
            .collect();
        segments.sort();
        let mut records = Vec::new();
        let mut torn = 0usize;
        for (_, path) in &segments {
            let file = File::open(path).map_err(io)?;
            for line in BufReader::new(file).split(b'\n') {
                let line = line.map_err(io)?;
                if line.is_empty() {
                    continue;
                }
                // A torn last line (the process died mid-write) was never answered: skip it.
                match serde_json::from_slice::<ChargedRecord>(&line) {
                    Ok(r) => records.push(r),
                    Err(_) => torn += 1,
                }
            }
        }
        if torn > 0 {
            tracing::warn!(
                lines = torn,
                "spend journal lines that do not parse were skipped (a write cut off by a crash)"
            );
        }
        let seq = segments.last().map(|(s, _)| s + 1).unwrap_or(0);
        let file = Self::create_segment(dir, &stem, seq).map_err(io)?;
        let active = Active { file, seq, bytes: 0, appended: [(seq, 0)].into_iter().collect(), done: HashMap::new() };
        let journal = Journal { dir: dir.to_path_buf(), stem, inner: Mutex::new(active), _lock: lock };
        Ok((journal, Replay { records, segments: segments.into_iter().map(|(_, p)| p).collect() }))
    }

    fn create_segment(dir: &Path, stem: &str, seq: u64) -> std::io::Result<File> {
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(dir.join(format!("{stem}.{seq}.jsonl")))
    }

    fn segment_path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{}.{seq}.jsonl", self.stem))
    }

    /// Appends a record; returns the segment it is in (to report with [`Journal::written`]).
    pub fn append(&self, record: &ChargedRecord) -> std::io::Result<u64> {
        let mut line = Vec::with_capacity(512);
        write_line(&mut line, record);
        let mut a = self.inner.lock().map_err(|_| std::io::Error::other("spend journal lock poisoned"))?;
        if a.bytes >= SEGMENT_BYTES {
            let seq = a.seq + 1;
            a.file = Self::create_segment(&self.dir, &self.stem, seq)?;
            a.seq = seq;
            a.bytes = 0;
            a.appended.insert(seq, 0);
            let old = seq - 1;
            self.drop_if_done(&mut a, old);
        }
        a.file.write_all(&line)?;
        a.bytes += line.len() as u64;
        let seq = a.seq;
        *a.appended.entry(seq).or_default() += 1;
        Ok(seq)
    }

    /// `n` records of segment `seq` are in the store.
    pub fn written(&self, seq: u64, n: u64) {
        let Ok(mut a) = self.inner.lock() else { return };
        *a.done.entry(seq).or_default() += n;
        self.drop_if_done(&mut a, seq);
    }

    /// Deletes a closed segment whose records are all in the store.
    fn drop_if_done(&self, a: &mut Active, seq: u64) {
        if seq == a.seq {
            return;
        }
        let appended = a.appended.get(&seq).copied().unwrap_or(0);
        if a.done.get(&seq).copied().unwrap_or(0) >= appended {
            a.appended.remove(&seq);
            a.done.remove(&seq);
            if let Err(e) = std::fs::remove_file(self.segment_path(seq)) {
                tracing::warn!(error = %e, "cannot delete a written spend journal segment");
            }
        }
    }

    /// At a clean stop: deletes the current segment when every record in it is in the store (what is left is
    /// written again at the next start).
    pub fn close(&self) {
        let Ok(a) = self.inner.lock() else { return };
        let seq = a.seq;
        if a.done.get(&seq).copied().unwrap_or(0) >= a.appended.get(&seq).copied().unwrap_or(0) {
            if let Err(e) = std::fs::remove_file(self.segment_path(seq)) {
                tracing::warn!(error = %e, "cannot delete a written spend journal segment");
            }
        }
    }

    /// The segments of the last run, once their records are in the store.
    pub fn forget_replayed(&self, replay: &Replay) {
        for p in &replay.segments {
            if let Err(e) = std::fs::remove_file(p) {
                tracing::warn!(error = %e, path = %p.display(), "cannot delete a replayed spend journal segment");
            }
        }
    }
}

/// What the last run left in the journal.
#[derive(Debug)]
pub struct Replay {
    /// Its records, in order.
    pub records: Vec<ChargedRecord>,
    segments: Vec<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample record, charged to a team budget (the journal keeps the charges too).
    fn record(id: &str) -> ChargedRecord {
        let record = crate::SpendRecord {
            record_id: id.into(),
            request_id: id.into(),
            ts_ms: 1,
            key_id: Some("k".into()),
            team_id: Some("t".into()),
            model_alias: "m".into(),
            upstream_model: "u".into(),
            deployment: "d".into(),
            prompt_tokens: 10,
            completion_tokens: 5,
            cost: 7,
            status: 200,
            latency_ms: 1,
            ..Default::default()
        };
        ChargedRecord { record, charges: vec![crate::Charge { scope: "team:t".into(), period: 1, limit: 10 }] }
    }

    /// The line written by hand reads back as the record, and is what serde writes for it (as a value): a field
    /// added to the record and not to the line fails here.
    #[test]
    fn the_line_is_what_serde_reads_and_writes() -> anyhow::Result<()> {
        let mut full = record("id \"quoted\" \\ ünï\n\u{1}");
        full.record.node = Some("node/1".into());
        full.record.key_id = Some("k".into());
        full.record.team_id = Some("t\tab".into());
        full.record.agent_role = Some("reviewer".into());
        full.record.api = Some("messages".into());
        full.record.client = Some("claude-cli".into());
        full.record.session_id = Some("s-😀".into());
        full.record.response_id = Some("resp_\u{7f}".into());
        full.record.basis = Some("over_reservation".into());
        (full.record.cache_read_tokens, full.record.tool_cost, full.record.input_cost) = (9, i64::MAX, -3);
        (full.record.ts_ms, full.record.cost, full.record.status) = (i64::MAX, i64::MIN, -1);
        full.charges.push(crate::Charge { scope: "key:k".into(), period: -5, limit: 0 });
        let mut bare = record("b");
        (bare.record.node, bare.record.key_id, bare.record.team_id, bare.record.agent_role) = (None, None, None, None);
        (bare.record.api, bare.record.client, bare.record.session_id) = (None, None, None);
        bare.charges.clear();
        for r in [full, bare] {
            let mut line = Vec::new();
            write_line(&mut line, &r);
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
            assert_eq!(serde_json::from_slice::<ChargedRecord>(&line)?, r);
            // What serde writes, less the fields that read back as `None` or 0 when left out.
            let mut by_serde = serde_json::to_value(&r.record)?;
            if let serde_json::Value::Object(map) = &mut by_serde {
                let required = ["ts_ms", "prompt_tokens", "completion_tokens", "cost", "status", "latency_ms"];
                map.retain(|k, v| !v.is_null() && (*v != serde_json::json!(0) || required.contains(&k.as_str())));
                map.insert("charges".into(), serde_json::to_value(&r.charges)?);
            }
            assert_eq!(serde_json::from_slice::<serde_json::Value>(&line)?, by_serde);
        }
        Ok(())
    }

    #[test]
    fn records_survive_a_restart_until_written() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (j, replay) = Journal::open(dir.path(), "f", "n/1")?;
        assert!(replay.records.is_empty());
        let seq = j.append(&record("a"))?;
        j.append(&record("b"))?;
        assert!(matches!(Journal::open(dir.path(), "f", "n/1"), Err(JournalError::Locked { .. })));
        drop(j);
        // A torn last line is skipped.
        let path = dir.path().join(format!("spend-f-n_1.{seq}.jsonl"));
        std::fs::OpenOptions::new().append(true).open(&path)?.write_all(b"{\"record_id\":")?;
        let (j, replay) = Journal::open(dir.path(), "f", "n/1")?;
        let ids: Vec<&str> = replay.records.iter().map(|r| r.record.record_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(replay.records[0], record("a"));
        j.forget_replayed(&replay);
        assert!(!path.exists());
        drop(j);
        let (_j, replay) = Journal::open(dir.path(), "f", "n/1")?;
        assert!(replay.records.is_empty());
        Ok(())
    }

    #[test]
    fn a_closed_segment_is_deleted_once_written() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (j, _) = Journal::open(dir.path(), "f", "n")?;
        let first = j.append(&record("a"))?;
        j.inner.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.bytes = SEGMENT_BYTES;
        let second = j.append(&record("b"))?;
        assert_eq!(second, first + 1);
        assert!(j.segment_path(first).exists(), "not written yet");
        j.written(first, 1);
        assert!(!j.segment_path(first).exists());
        j.written(second, 1);
        assert!(j.segment_path(second).exists(), "the current segment stays");
        j.close();
        assert!(!j.segment_path(second).exists(), "written to the end: nothing to replay");
        Ok(())
    }
}
