//! The `gateway_settings` keys that bound what a misbehaving client or upstream can do: budget admission
//! (`budget_admission`, `budget_min_output_tokens`, and the bounds of web searches: `web_search_max_uses`,
//! `web_search_result_tokens`) and stream bounds (`stream_timeout_seconds`,
//! `stream_idle_timeout_seconds`, `stream_max_event_bytes`) and the bound of a whole answer
//! (`max_response_bytes`).
//!
//! What this file does not do: apply them (the gateway does).

use crate::reader::{Fields, Reader};
use crate::types::{AdmissionMode, AdmissionSettings, StreamSettings};
use std::time::Duration;

/// The smallest event limit accepted: a chunk of a real stream is rarely over a few KiB.
const MIN_EVENT_BYTES: usize = 64 * 1024;
/// The smallest answer limit accepted: a model list or a long completion is some hundred KiB.
const MIN_RESPONSE_BYTES: usize = 1024 * 1024;

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
    if let Some(v) = r.int::<u64>(f, "web_search_max_uses") {
        out.web_search_max_uses = v;
    }
    if let Some(v) = r.int::<u64>(f, "web_search_result_tokens") {
        out.web_search_result_tokens = v;
    }
    out
}

/// `stream_timeout_seconds`, `stream_idle_timeout_seconds` (each at least 1), `stream_max_event_bytes`
/// (at least 64 KiB) and `max_response_bytes` (at least 1 MiB).
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
    if let Some(v) = at_least(r, f, "stream_max_event_bytes", MIN_EVENT_BYTES) {
        out.max_event_bytes = v;
    }
    if let Some(v) = at_least(r, f, "max_response_bytes", MIN_RESPONSE_BYTES) {
        out.max_response_bytes = v;
    }
    out
}

/// Byte count `key`, when it is at least `min` (else the error says so).
fn at_least(r: &mut Reader, f: &Fields, key: &str, min: usize) -> Option<usize> {
    match r.int::<usize>(f, key) {
        Some(v) if v < min => {
            if let Some(n) = f.get(key) {
                r.error(n, format!("{}: must be at least {min}", f.child(key)));
            }
            None
        }
        other => other,
    }
}
