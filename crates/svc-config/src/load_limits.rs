//! The `gateway_settings` keys that bound what a misbehaving client or upstream can do: budget admission
//! (`budget_admission`, `budget_min_output_tokens`) and stream bounds (`stream_timeout_seconds`,
//! `stream_idle_timeout_seconds`, `stream_max_event_bytes`).
//!
//! What this file does not do: apply them (the gateway does).

use crate::reader::{Fields, Reader};
use crate::types::{AdmissionMode, AdmissionSettings, StreamSettings};
use std::time::Duration;

/// The smallest event limit accepted: a chunk of a real stream is rarely over a few KiB.
const MIN_EVENT_BYTES: usize = 64 * 1024;

/// `budget_admission` (`cap` or `refuse`) and `budget_min_output_tokens` (at least 1).
pub(crate) fn admission(r: &mut Reader, f: &Fields) -> AdmissionSettings {
    let mut out = AdmissionSettings::default();
    if let Some(text) = r.string(f, "budget_admission") {
        match text.trim() {
            "cap" => out.mode = AdmissionMode::Cap,
            "refuse" => out.mode = AdmissionMode::Refuse,
            other => {
                if let Some(n) = f.get("budget_admission") {
                    let path = f.child("budget_admission");
                    r.error(n, format!("{path}: `{other}` is not `cap` or `refuse`"));
                }
            }
        }
    }
    match r.int::<u64>(f, "budget_min_output_tokens") {
        Some(0) => {
            if let Some(n) = f.get("budget_min_output_tokens") {
                let path = f.child("budget_min_output_tokens");
                r.error(n, format!("{path}: must be at least 1"));
            }
        }
        Some(v) => out.min_output_tokens = v,
        None => {}
    }
    out
}

/// `stream_timeout_seconds`, `stream_idle_timeout_seconds` (each at least 1) and `stream_max_event_bytes`
/// (at least 64 KiB).
pub(crate) fn streams(r: &mut Reader, f: &Fields) -> StreamSettings {
    let mut out = StreamSettings::default();
    let seconds = |r: &mut Reader, key: &str| match r.int::<u64>(f, key) {
        Some(0) => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: must be at least 1", f.child(key)));
            }
            None
        }
        other => other.map(Duration::from_secs),
    };
    if let Some(d) = seconds(r, "stream_timeout_seconds") {
        out.total = d;
    }
    if let Some(d) = seconds(r, "stream_idle_timeout_seconds") {
        out.idle = d;
    }
    match r.int::<usize>(f, "stream_max_event_bytes") {
        Some(v) if v < MIN_EVENT_BYTES => {
            if let Some(n) = f.get("stream_max_event_bytes") {
                let path = f.child("stream_max_event_bytes");
                r.error(n, format!("{path}: must be at least {MIN_EVENT_BYTES}"));
            }
        }
        Some(v) => out.max_event_bytes = v,
        None => {}
    }
    out
}
