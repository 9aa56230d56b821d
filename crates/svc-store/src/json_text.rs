//! JSON text written by hand where serde's general serializer costs too much for what is written on every
//! request: the spend journal's line ([`crate::journal`]) and the gateway's request line.
//! What is written is valid JSON that serde_json reads back to the same values (tested here and where it is
//! used).

use std::fmt::Write as _;

/// Whether `s` goes inside a JSON string as it is (no quote, backslash or control character).
fn needs_no_escape(s: &str) -> bool {
    !s.bytes().fold(false, |any, b| any | (b < 0x20) | (b == b'"') | (b == b'\\'))
}

/// Hands `s` as the inside of a JSON string to `out`, in pieces: runs of `s` that need no escape, and escapes
/// (`\"`, `\\`, `\n`, `\r`, `\t`, `\u00XX` for the other control characters). Everything else, non-ASCII
/// included, is written as it is.
pub fn escape(s: &str, mut out: impl FnMut(&str)) {
    if needs_no_escape(s) {
        out(s);
        return;
    }
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        // `i` is at an ASCII byte, so both slices end on character boundaries.
        out(s.get(start..i).unwrap_or_default());
        if short.is_empty() {
            let mut u = String::with_capacity(6);
            let _ = write!(u, "\\u{b:04x}");
            out(&u);
        } else {
            out(short);
        }
        start = i + 1;
    }
    out(s.get(start..).unwrap_or_default());
}

/// Appends `s` as a JSON string, quotes included.
pub fn push_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    escape(s, |piece| buf.extend_from_slice(piece.as_bytes()));
    buf.push(b'"');
}

/// Appends `n` in decimal.
pub fn push_int(buf: &mut Vec<u8>, n: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_read_back_as_written() -> anyhow::Result<()> {
        for s in
            ["", "plain", "quote \" and \\ back", "line\nbreak\ttab\r", "bell \u{7} nul \u{0} \u{1f}", "ünïcödé ✓ 😀"]
        {
            let mut buf = Vec::new();
            push_str(&mut buf, s);
            assert_eq!(serde_json::from_slice::<String>(&buf)?, s);
        }
        Ok(())
    }

    #[test]
    fn integers_read_back_as_written() -> anyhow::Result<()> {
        for n in [0, 7, -7, i64::MIN, i64::MAX] {
            let mut buf = Vec::new();
            push_int(&mut buf, n);
            assert_eq!(serde_json::from_slice::<i64>(&buf)?, n);
        }
        Ok(())
    }
}
