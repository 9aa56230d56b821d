//! Readings of JSON text for the client's chat body: [`Valid`], the full parse's checks with nothing kept (and
//! [`plain`], which says when the raw reading's own checks are as strict, so that `Valid` can be skipped), and
//! [`json_tokens`], the estimate's count of a JSON text as serde_json would write it again, counted off the text
//! itself when writing it again could change nothing but whitespace (no escapes, whole numbers only), and by
//! transcoding otherwise. The fuzz target `chat_request` checks that the raw reading and the full parse accept,
//! refuse and count alike.

use serde::Deserialize;

/// Nesting deeper than this is left to [`Valid`] (the full parse's limit is 128).
const PLAIN_DEPTH: usize = 100;
/// A number longer than this, or with an exponent of three digits or more, is left to [`Valid`] (it could be
/// outside `f64`'s range, which the full parse refuses).
const PLAIN_NUMBER: usize = 200;

/// Whether reading `bytes` raw (`raw::Object::read`, jiter's, which checks syntax, escapes and control characters
/// but skips what it does not convert; UTF-8 is checked whole) refuses everything the full parse refuses: true when the text has no
/// escapes (which the full parse decodes and checks: surrogates), nests at most [`PLAIN_DEPTH`] deep, and has no
/// number near `f64`'s limits. One pass over the bytes, most of them skipped inside strings by `memchr`;
/// it does not check syntax (the raw reading does).
pub(super) fn plain(bytes: &[u8]) -> bool {
    if memchr::memchr(b'\\', bytes).is_some() {
        return false;
    }
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match c {
            // Without escapes, the next quote ends the string.
            b'"' => match memchr::memchr(b'"', bytes.get(i + 1..).unwrap_or_default()) {
                Some(len) => i += len + 2,
                None => return false,
            },
            b'{' | b'[' => {
                depth += 1;
                if depth > PLAIN_DEPTH {
                    return false;
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let rest = &bytes[i..];
                let len = number_len(rest);
                let number = &rest[..len];
                let exponent = number.iter().position(|c| matches!(c, b'e' | b'E')).map(|e| &number[e + 1..]);
                let exponent_digits = exponent.map_or(0, |e| e.iter().filter(|c| c.is_ascii_digit()).count());
                if len > PLAIN_NUMBER || exponent_digits > 2 {
                    return false;
                }
                i += len;
            }
            _ => i += 1,
        }
    }
    true
}

/// A JSON text read as the full parse reads it (every number converted, every string unescaped, the same
/// depth limit), with nothing kept.
pub(super) struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Valid, D::Error> {
        d.deserialize_any(ValidVisitor)
    }
}

struct ValidVisitor;

impl<'de> serde::de::Visitor<'de> for ValidVisitor {
    type Value = Valid;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_str<E>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_unit<E>(self) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_entry::<Valid, Valid>()?.is_some() {}
        Ok(Valid)
    }
}

/// [`crate::estimate::text_tokens`] of the JSON text `raw` (read as JSON already) as serde_json writes it
/// (compact, its escapes): the same count as of the parsed value written again.
pub(super) fn json_tokens(raw: &str) -> u64 {
    plain_tokens(raw).unwrap_or_else(|| transcoded_tokens(raw))
}

/// The count off the text itself, when writing it again would only drop whitespace: no escapes (so every quote
/// opens or closes a string, and strings are written as they are), and every number a whole one of at most 18
/// digits other than `-0` (written again as it is; serde_json writes other numbers its own way: `1e2` as
/// `100.0`).
///
/// Its scan of strings and numbers is [`plain`]'s written again, on purpose: one iterator of pieces shared by
/// both cost about 1,500 instructions a request more (a call per piece, measured with callgrind).
fn plain_tokens(raw: &str) -> Option<u64> {
    let b = raw.as_bytes();
    if memchr::memchr(b'\\', b).is_some() {
        return None;
    }
    // The text is counted whole, in one pass, less the whitespace between tokens (all of it ASCII), which
    // writing it again drops: counting it piece by piece cost a call per punctuation mark.
    let mut space = 0u64;
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        i += match c {
            b'"' => memchr::memchr(b'"', b.get(i + 1..).unwrap_or_default())? + 2,
            b' ' | b'\n' | b'\r' | b'\t' => {
                space += 1;
                1
            }
            b'-' | b'0'..=b'9' => {
                let rest = &b[i..];
                let number = &rest[..number_len(rest)];
                let digits = number.strip_prefix(b"-").unwrap_or(number);
                let whole = matches!(digits, [b'0'] | [b'1'..=b'9', ..])
                    && digits.len() <= 18
                    && digits.iter().all(u8::is_ascii_digit)
                    && number != b"-0";
                if !whole {
                    return None;
                }
                number.len()
            }
            // Punctuation and the letters of `true`, `false` and `null`.
            _ => 1,
        };
    }
    let mut counter = crate::tokens::Counter::default();
    counter.count(b);
    counter.uncount_ascii(space);
    Some(counter.tokens())
}

/// The length of the number at the start of `text`: the run of the characters numbers are written with.
fn number_len(text: &[u8]) -> usize {
    text.iter().position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')).unwrap_or(text.len())
}

/// The count of the text written again by serde_json, made by transcoding, without building the value.
fn transcoded_tokens(raw: &str) -> u64 {
    let mut counter = crate::tokens::Counter::default();
    let mut from = serde_json::Deserializer::from_str(raw);
    let mut to = serde_json::Serializer::new(&mut counter);
    // Writing to a counter cannot fail, and `raw` was read as JSON already.
    let _ = serde_transcode::transcode(&mut from, &mut to);
    counter.tokens()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    #[test]
    fn plain_texts_need_no_full_parse_and_the_rest_get_one() {
        let deep = format!("{}{}", "[".repeat(PLAIN_DEPTH + 1), "]".repeat(PLAIN_DEPTH + 1));
        let long = format!("[1{}]", "0".repeat(PLAIN_NUMBER));
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi [{ 1e999 ünï"}],"max_tokens":64,"t":-0.5e-12}"#,
            "[1, -2, 0.25, 1E+99, true, false, null, {}, []]",
        ] {
            assert!(plain(text.as_bytes()), "{text}");
        }
        for text in [r#"{"a":"\u00e9"}"#, r#"["\ud800"]"#, "[1e400]", "[1e100]", &deep, &long, "[\"open]"] {
            assert!(!plain(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn plain_counts_equal_transcoded_counts() {
        for text in [
            r#"{ "role" : "user", "content" : [ {"type":"text","text":"hi  there ✓"} ], "n": [0, -3, 42] }"#,
            r#"{"a":true,"b":null,"c":"é"}"#,
        ] {
            assert_eq!(plain_tokens(text), Some(transcoded_tokens(text)), "{text}");
        }
        // Written again differently: left to the transcoding.
        for text in
            [r#"{"a":"\u00e9"}"#, r#"{"a":1e2}"#, r#"{"a":1.50}"#, r#"{"a":-0}"#, r#"{"a":1234567890123456789}"#]
        {
            assert_eq!(plain_tokens(text), None, "{text}");
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(".*", inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn written_json_is_counted_alike(value in json_value()) {
            for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap_or_default()] {
                prop_assert_eq!(json_tokens(&text), transcoded_tokens(&text));
            }
        }
    }
}
