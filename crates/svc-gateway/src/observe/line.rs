//! Writing the request line: formatted here into one reused buffer per thread, in the shape the rest of the
//! log has (tracing-subscriber's text or flattened JSON: `timestamp`, `level`, `message`, the fields,
//! `target`), and handed whole to the log's writer. tracing-subscriber's formatter visited every field
//! through `dyn Debug` and cost about 45,000 instructions a line, a sixth of a request; this costs about a
//! tenth of that.
//!
//! The writer is installed by the binary ([`install`]) with the log's format; without one (in-process tests)
//! the line goes through `tracing` as a message. Either way `RUST_LOG` decides whether target `svc::request`
//! is written at all.
//!
//! Lines are gathered in one buffer and written by a thread of their own every [`FLUSH_EVERY`], or as soon as
//! [`FLUSH_BYTES`] wait: handing each line to a writer thread was a thread wake-up per request at one request at
//! a time. The process's other log lines (the binary's tracing subscriber) go through the same buffer and thread
//! ([`write_soon`]), but wake it at once: they are few, and a warning should not wait. One thread writes every
//! line, so lines never cut into each other. A request line may reach stderr up to 100 ms late, and `kill -9`
//! loses the request lines of the last 100 ms (never spend: that is in the journal). A stderr that is slow or full
//! stalls only that thread: at most [`MAX_WAITING`] bytes wait, beyond that lines are dropped and counted.
//! [`flush`] at exit writes what waits.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often waiting lines are written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// ... or as soon as this much waits.
pub const FLUSH_BYTES: usize = 32 << 10;
/// The most that waits; lines beyond are dropped.
pub const MAX_WAITING: usize = 4 << 20;

/// Lines formatted and not yet written.
static WAITING: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Wakes the writing thread before its time when [`FLUSH_BYTES`] wait.
static FULL: Condvar = Condvar::new();
/// Lines dropped because [`MAX_WAITING`] bytes were waiting (reported by the next write).
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Set, under [`WAITING`]'s lock, when a line waits that is to be written at once ([`write_soon`]): the writing
/// thread checks it under the same lock before it sleeps, so no such line waits for [`FLUSH_EVERY`].
static URGENT: AtomicBool = AtomicBool::new(false);

/// Writes whole lines (to stderr, blocking: it runs on the request log's own thread, never a request's).
pub type WriteLines = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Where request lines go, and in which format.
pub struct LineWriter {
    /// JSON (`server.log_format: json`) or text.
    pub json: bool,
    /// Writes a run of whole lines, newlines included.
    pub write: WriteLines,
}

static WRITER: OnceLock<LineWriter> = OnceLock::new();

/// Sends request lines to `writer` from now on (the first call wins), from a thread of their own.
pub fn install(writer: LineWriter) {
    if WRITER.set(writer).is_err() {
        return;
    }
    let writer = std::thread::Builder::new().name("svc-request-log".into()).spawn(|| {
        let mut spare = Vec::new();
        loop {
            {
                let Ok(mut w) = WAITING.lock() else { return };
                if w.len() < FLUSH_BYTES && !URGENT.load(Ordering::Relaxed) {
                    w = match FULL.wait_timeout(w, FLUSH_EVERY) {
                        Ok((w, _)) => w,
                        Err(_) => return,
                    };
                }
                URGENT.store(false, Ordering::Relaxed);
                std::mem::swap(&mut *w, &mut spare);
            }
            write_out(&mut spare);
        }
    });
    if let Err(e) = writer {
        tracing::error!(error = %e, "cannot start the request log's thread: request lines are written at exit only");
    }
}

/// Writes the lines waiting (at exit).
pub fn flush() {
    let mut taken = match WAITING.lock() {
        Ok(mut w) => std::mem::take(&mut *w),
        Err(_) => return,
    };
    write_out(&mut taken);
}

/// Writes `lines` and empties them (keeping their buffer, up to twice [`FLUSH_BYTES`]); reports drops.
fn write_out(lines: &mut Vec<u8>) {
    let Some(writer) = WRITER.get() else { return };
    if !lines.is_empty() {
        (writer.write)(lines);
        lines.clear();
        lines.shrink_to(2 * FLUSH_BYTES);
    }
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(lines = dropped, "log lines dropped: more than 4 MiB of them waited for stderr");
    }
}

/// Adds whole log lines (other than request lines) to those waiting and wakes the writing thread for them.
/// Without a writer installed ([`install`]) they wait for [`flush`].
pub fn write_soon(lines: &[u8]) {
    push(lines, true);
}

/// Adds whole lines to those waiting (dropped and counted past [`MAX_WAITING`]); wakes the writing thread when
/// they are `urgent` or [`FLUSH_BYTES`] now wait.
fn push(lines: &[u8], urgent: bool) {
    let Ok(mut w) = WAITING.lock() else { return };
    if w.len() + lines.len() > MAX_WAITING {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let before = w.len();
    w.extend_from_slice(lines);
    if urgent {
        URGENT.store(true, Ordering::Relaxed);
    }
    if urgent || (before < FLUSH_BYTES && w.len() >= FLUSH_BYTES) {
        FULL.notify_one();
    }
}

/// A field's value.
pub(crate) enum Field<'a> {
    Str(&'a str),
    Uint(u64),
    /// `value / 10^scale` written exactly, without trailing zeros (money in nanos, times in microseconds).
    Fixed {
        value: i64,
        scale: u32,
    },
    Bool(bool),
}

thread_local! {
    static BUF: RefCell<String> = RefCell::new(String::with_capacity(512));
}

/// Writes one line of target `svc::request` with `fields` (a `None` is left out), if that target is enabled.
pub(crate) fn emit(fields: &[(&str, Option<Field<'_>>)]) {
    if !tracing::enabled!(target: "svc::request", tracing::Level::INFO) {
        return;
    }
    let Some(writer) = WRITER.get() else {
        let mut text = String::new();
        fields_text(&mut text, fields);
        tracing::info!(target: "svc::request", "request{text}");
        return;
    };
    BUF.with(|buf| {
        let Ok(mut buf) = buf.try_borrow_mut() else { return };
        buf.clear();
        if writer.json {
            buf.push_str("{\"timestamp\":\"");
            timestamp(&mut buf, SystemTime::now());
            buf.push_str("\",\"level\":\"INFO\",\"message\":\"request\"");
            for (name, value) in fields {
                let Some(value) = value else { continue };
                buf.push_str(",\"");
                buf.push_str(name);
                buf.push_str("\":");
                match value {
                    Field::Str(s) => json_str(&mut buf, s),
                    other => scalar(&mut buf, other),
                }
            }
            buf.push_str(",\"target\":\"svc::request\"}\n");
        } else {
            timestamp(&mut buf, SystemTime::now());
            buf.push_str("  INFO request");
            fields_text(&mut buf, fields);
            buf.push('\n');
        }
        push(buf.as_bytes(), false);
        // A rare huge line (a long client-chosen session id) does not keep its buffer.
        if buf.capacity() > 8192 {
            *buf = String::with_capacity(512);
        }
    });
}

/// ` name=value` for each field, strings quoted and escaped as `Debug` does (as tracing-subscriber writes them).
fn fields_text(buf: &mut String, fields: &[(&str, Option<Field<'_>>)]) {
    for (name, value) in fields {
        let Some(value) = value else { continue };
        buf.push(' ');
        buf.push_str(name);
        buf.push('=');
        match value {
            // Printable ASCII without quotes or backslashes (nearly every value) needs no escaping: one test of
            // every byte, without a branch per byte (which cost about 1,500 instructions a line).
            Field::Str(s) if printable(s) => {
                buf.push('"');
                buf.push_str(s);
                buf.push('"');
            }
            Field::Str(s) => {
                let _ = write!(buf, "{s:?}");
            }
            other => scalar(buf, other),
        }
    }
}

/// Whether `s` is printable ASCII without a quote or a backslash.
fn printable(s: &str) -> bool {
    !s.bytes().fold(false, |bad, b| bad | !(b' '..=b'~').contains(&b) | (b == b'"') | (b == b'\\'))
}

/// A value that is not a string, written the same in text and JSON.
fn scalar(buf: &mut String, value: &Field<'_>) {
    match value {
        Field::Str(_) => {}
        Field::Uint(n) => uint(buf, *n),
        Field::Fixed { value, scale } => fixed(buf, *value, *scale),
        Field::Bool(b) => buf.push_str(if *b { "true" } else { "false" }),
    }
}

/// `value / 10^scale` as a decimal number: `0.000123`, `12.5`, `3`.
fn fixed(buf: &mut String, value: i64, scale: u32) {
    let scale = scale.min(18);
    if value < 0 {
        buf.push('-');
    }
    let v = value.unsigned_abs();
    let unit = 10u64.pow(scale);
    uint(buf, v / unit);
    let mut frac = v % unit;
    if frac == 0 {
        return;
    }
    let mut width = scale as usize;
    while frac.is_multiple_of(10) {
        frac /= 10;
        width -= 1;
    }
    buf.push('.');
    let mut out = [b'0'; 18];
    for slot in out[..width].iter_mut().rev() {
        *slot = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    for &b in &out[..width] {
        buf.push(char::from(b));
    }
}

/// A JSON string: quotes, backslashes and control characters escaped.
fn json_str(buf: &mut String, s: &str) {
    buf.push('"');
    svc_store::json_text::escape(s, |piece| buf.push_str(piece));
    buf.push('"');
}

/// `2026-11-24T12:27:48.123456Z` (UTC, microseconds), as tracing-subscriber writes its timestamps.
fn timestamp(buf: &mut String, now: SystemTime) {
    thread_local! {
        /// The second last written, and its text up to the fraction: made once a second.
        static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    SECOND.with(|second| match second.try_borrow_mut() {
        Ok(mut second) => {
            if second.0 != secs {
                second.1.clear();
                to_the_second(&mut second.1, secs);
                second.0 = secs;
            }
            buf.push_str(&second.1);
        }
        Err(_) => to_the_second(buf, secs),
    });
    digits(buf, u64::from(since.subsec_micros()), 6);
    buf.push('Z');
}

/// `2026-11-24T12:27:48.`: the date and time of `secs` (since the epoch, UTC) up to the fraction.
fn to_the_second(buf: &mut String, secs: u64) {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    let parts: [(u64, usize, char); 6] =
        [(y, 4, '-'), (m, 2, '-'), (d, 2, 'T'), (rem / 3600, 2, ':'), (rem % 3600 / 60, 2, ':'), (rem % 60, 2, '.')];
    for (value, width, after) in parts {
        digits(buf, value, width);
        buf.push(after);
    }
}

/// `n` in decimal (without `fmt`'s machinery: this is most of a line's numbers).
fn uint(buf: &mut String, n: u64) {
    buf.push_str(itoa::Buffer::new().format(n));
}

/// `value` in `width` decimal digits, zero-padded (its last `width` digits if it has more).
fn digits(buf: &mut String, mut value: u64, width: usize) {
    let mut out = [b'0'; 8];
    let width = width.min(out.len());
    for slot in out[..width].iter_mut().rev() {
        *slot = b'0' + (value % 10) as u8;
        value /= 10;
    }
    for &b in &out[..width] {
        buf.push(char::from(b));
    }
}

/// The (year, month, day) of a count of days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        for (secs, micros, want) in [
            (0u64, 0u32, "1970-01-01T00:00:00.000000Z"),
            (951_782_400, 5, "2000-02-29T00:00:00.000005Z"),
            (1_795_523_268, 123_456, "2026-11-24T12:27:48.123456Z"),
            // The same second again: its text is reused, the fraction is not.
            (1_795_523_268, 7, "2026-11-24T12:27:48.000007Z"),
            (4_107_542_399, 999_999, "2100-02-28T23:59:59.999999Z"),
        ] {
            let mut buf = String::new();
            timestamp(&mut buf, UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(u64::from(micros)));
            assert_eq!(buf, want);
            let parsed = chrono::DateTime::parse_from_rfc3339(&buf).map(|t| t.timestamp());
            assert_eq!(parsed, Ok(secs as i64));
        }
    }

    #[test]
    fn json_strings_round_trip() -> anyhow::Result<()> {
        for s in ["plain", "quote \" and \\ back", "line\nbreak\ttab\r", "bell \u{7} nul \u{0}", "ünïcödé ✓"] {
            let mut buf = String::new();
            json_str(&mut buf, s);
            assert_eq!(serde_json::from_str::<String>(&buf)?, s);
        }
        Ok(())
    }

    #[test]
    fn text_fields_quote_strings_and_skip_none() {
        let mut buf = String::new();
        let fields = [
            ("a", Some(Field::Str("x y"))),
            ("b", None),
            ("c", Some(Field::Uint(7))),
            ("c0", Some(Field::Uint(0))),
            ("cmax", Some(Field::Uint(u64::MAX))),
            ("d", Some(Field::Fixed { value: 25, scale: 2 })),
            ("e", Some(Field::Bool(true))),
            ("g", Some(Field::Fixed { value: 123, scale: 9 })),
            ("h", Some(Field::Fixed { value: 12_500, scale: 3 })),
            ("i", Some(Field::Fixed { value: 3_000_000, scale: 6 })),
            ("j", Some(Field::Fixed { value: -5, scale: 1 })),
        ];
        fields_text(&mut buf, &fields);
        assert_eq!(buf, " a=\"x y\" c=7 c0=0 cmax=18446744073709551615 d=0.25 e=true g=0.000000123 h=12.5 i=3 j=-0.5");
        // Anything but printable ASCII without quotes and backslashes is written as `Debug` writes it.
        for s in ["plain ~ text", "", "quote \"", "back\\slash", "tab\t", "del\u{7f}", "é", "nul\u{0}"] {
            let mut buf = String::new();
            fields_text(&mut buf, &[("s", Some(Field::Str(s)))]);
            assert_eq!(buf, format!(" s={s:?}"), "{s:?}");
        }
    }
}
