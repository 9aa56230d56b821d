//! RFC 2047 encoded words in header values (`=?UTF-8?B?…?=`, `=?UTF-8?Q?…?=`), decoded the way ntfy's Go
//! `mime.WordDecoder` does, so the test server sees what a real ntfy would store.

use base64::Engine as _;

/// Decodes RFC 2047 encoded words (`=?UTF-8?B?…?=` and `=?UTF-8?Q?…?=`) like Go's `mime.WordDecoder`.
pub fn decode_rfc2047(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value.trim();
    while let Some(start) = rest.find("=?") {
        let after = &rest[start + 2..];
        let parts: Vec<&str> = after.splitn(3, '?').collect();
        let decoded = if parts.len() == 3 {
            parts[2].find("?=").and_then(|end| {
                let text = &parts[2][..end];
                let bytes = match parts[1].to_ascii_uppercase().as_str() {
                    "B" => base64::engine::general_purpose::STANDARD.decode(text).ok()?,
                    "Q" => decode_q(text),
                    _ => return None,
                };
                let consumed = 2 + parts[0].len() + 1 + parts[1].len() + 1 + end + 2;
                Some((String::from_utf8_lossy(&bytes).to_string(), consumed))
            })
        } else {
            None
        };
        match decoded {
            Some((text, consumed)) => {
                let before = &rest[..start];
                // White space between two encoded words is dropped.
                if !before.trim().is_empty() || out.is_empty() {
                    out.push_str(before);
                }
                out.push_str(&text);
                rest = &rest[start + consumed..];
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = &rest[start + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn decode_q(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'_' => out.push(b' '),
            b'=' if i + 2 < b.len() => {
                if let Ok(v) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                    out.push(v);
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2047_decoding() {
        assert_eq!(decode_rfc2047("plain"), "plain");
        assert_eq!(decode_rfc2047("=?UTF-8?B?R3LDvMOfZQ==?="), "Grüße");
        assert_eq!(decode_rfc2047("=?utf-8?q?caf=C3=A9_au_lait?="), "café au lait");
        assert_eq!(decode_rfc2047("a =?UTF-8?B?w6k=?= =?UTF-8?B?w6k=?= b"), "a éé b");
    }
}
