//! Quick readings of JSON text for the client's chat body, each with the full reading behind it for what it is not
//! sure of:
//!
//! - [`surely_valid`]: whether serde_json's full parse certainly accepts a text, in one pass over its bytes. When
//!   it is not sure (a number near the edge of `f64`, an escaped surrogate, deep nesting, any syntax error), the
//!   full parse ([`Valid`]) decides, and words the refusal.
//! - [`json_tokens`]: the estimate's count of a JSON text as serde_json would write it again; counted off the
//!   text itself when writing it again could change nothing but whitespace (no escapes, whole numbers only), by
//!   transcoding otherwise.
//!
//! Both were a third of the cost of reading a small body through serde's visitors (BENCHMARKS.md); the fuzz target
//! `chat_request` checks that the raw reading and the full parse still accept, refuse and count alike.

use serde::Deserialize;

/// Nesting deeper than this is left to the full parse (serde_json's own limit is 128).
const QUICK_DEPTH: usize = 100;
/// A number with more digits than this before its exponent, or any exponent of three digits or more, is left to
/// the full parse (it could be out of `f64`'s range, which the full parse refuses).
const QUICK_DIGITS: usize = 200;

/// Whether `bytes` is one JSON value (surrounded by whitespace at most) that serde_json's full parse certainly
/// accepts. `false` means "not sure", not "invalid".
pub(super) fn surely_valid(bytes: &[u8]) -> bool {
    if std::str::from_utf8(bytes).is_err() {
        return false;
    }
    let mut q = Quick { b: bytes, i: 0 };
    q.ws();
    let ok = q.value(0);
    q.ws();
    ok && q.i == bytes.len()
}

struct Quick<'a> {
    b: &'a [u8],
    i: usize,
}

impl Quick<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        let end = self.i + lit.len();
        if self.b.get(self.i..end) == Some(lit) {
            self.i = end;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'{') => depth < QUICK_DEPTH && self.object(depth + 1),
            Some(b'[') => depth < QUICK_DEPTH && self.array(depth + 1),
            Some(b'"') => self.string(),
            Some(b't') => self.eat(b"true"),
            Some(b'f') => self.eat(b"false"),
            Some(b'n') => self.eat(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => false,
        }
    }

    fn object(&mut self, depth: usize) -> bool {
        self.i += 1;
        self.ws();
        if self.eat(b"}") {
            return true;
        }
        loop {
            if self.peek() != Some(b'"') || !self.string() {
                return false;
            }
            self.ws();
            if !self.eat(b":") {
                return false;
            }
            self.ws();
            if !self.value(depth) {
                return false;
            }
            self.ws();
            if self.eat(b"}") {
                return true;
            }
            if !self.eat(b",") {
                return false;
            }
            self.ws();
        }
    }

    fn array(&mut self, depth: usize) -> bool {
        self.i += 1;
        self.ws();
        if self.eat(b"]") {
            return true;
        }
        loop {
            if !self.value(depth) {
                return false;
            }
            self.ws();
            if self.eat(b"]") {
                return true;
            }
            if !self.eat(b",") {
                return false;
            }
            self.ws();
        }
    }

    /// A string from its opening quote (the text is UTF-8 already).
    fn string(&mut self) -> bool {
        self.i += 1;
        loop {
            let Some(rest) = self.b.get(self.i..) else { return false };
            // The run to the next byte that is not plain text.
            let run = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
            let Some(run) = run else { return false };
            self.i += run;
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex =
                                self.b.get(self.i + 1..self.i + 5).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                            let unit = hex.and_then(|h| std::str::from_utf8(h).ok());
                            match unit.and_then(|h| u16::from_str_radix(h, 16).ok()) {
                                // A surrogate must pair up: the full parse checks that.
                                Some(u) if !(0xD800..=0xDFFF).contains(&u) => self.i += 5,
                                _ => return false,
                            }
                        }
                        _ => return false,
                    }
                }
                // A control character: refused by the full parse.
                _ => return false,
            }
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, within the bounds the full parse surely reads.
    fn number(&mut self) -> bool {
        self.eat(b"-");
        let digits = |q: &mut Self| {
            let start = q.i;
            while matches!(q.peek(), Some(b'0'..=b'9')) {
                q.i += 1;
            }
            q.i - start
        };
        let int = match self.peek() {
            Some(b'0') => {
                self.i += 1;
                1
            }
            Some(b'1'..=b'9') => digits(self),
            _ => return false,
        };
        let mut frac = 0;
        if self.eat(b".") {
            frac = digits(self);
            if frac == 0 {
                return false;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if !self.eat(b"+") {
                self.eat(b"-");
            }
            let exp = digits(self);
            if exp == 0 || exp > 2 {
                return false;
            }
        }
        int + frac <= QUICK_DIGITS
    }
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
fn plain_tokens(raw: &str) -> Option<u64> {
    let b = raw.as_bytes();
    if b.contains(&b'\\') {
        return None;
    }
    let mut counter = crate::estimate::Counter::default();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        match b[i] {
            b'"' => {
                let len = b[i + 1..].iter().position(|&c| c == b'"')?;
                i += len + 2;
            }
            b' ' | b'\n' | b'\r' | b'\t' => {
                i += 1;
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let len = b[i..].iter().position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'));
                i += len.unwrap_or(b.len() - i);
                let number = &b[start..i];
                let digits = number.strip_prefix(b"-").unwrap_or(number);
                let whole = matches!(digits, [b'0'] | [b'1'..=b'9', ..])
                    && digits.len() <= 18
                    && digits.iter().all(u8::is_ascii_digit)
                    && number != b"-0";
                if !whole {
                    return None;
                }
            }
            _ => {
                // Everything else outside strings is ASCII punctuation or a literal: one byte at a time.
                i += 1;
            }
        }
        std::io::Write::write_all(&mut counter, &b[start..i]).ok()?;
    }
    Some(counter.tokens())
}

/// The count of the text written again by serde_json, made by transcoding, without building the value.
fn transcoded_tokens(raw: &str) -> u64 {
    let mut counter = crate::estimate::Counter::default();
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

    fn full_parse_accepts(text: &str) -> bool {
        serde_json::from_str::<Valid>(text).is_ok()
    }

    #[test]
    fn plain_json_is_surely_valid() {
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi ünï 😀"}],"max_tokens":64}"#,
            " [1, -2, 0, 0.5, -0.25e-3, 1E+10, 12345678901234567890123, true, false, null, {}, [], \"\"] ",
            r#"{"esc":"\" \\ \/ \b \f \n \r \t \u00e9 \uABCD"}"#,
        ] {
            assert!(surely_valid(text.as_bytes()), "{text}");
            assert!(full_parse_accepts(text), "{text}");
        }
    }

    #[test]
    fn what_it_is_not_sure_of_is_left_to_the_full_parse() {
        let deep = format!("{}{}", "[".repeat(QUICK_DEPTH + 1), "]".repeat(QUICK_DEPTH + 1));
        let long = format!("1{}", "0".repeat(QUICK_DIGITS));
        let cases: &[(&str, bool)] = &[
            // Valid, but near a limit: the full parse decides (and accepts).
            (&deep, true),
            (&long, true),
            ("1e100", true),
            (r#""\ud83d\ude00""#, true),
            // Refused by the full parse.
            ("1e400", false),
            (r#""\ud800""#, false),
            ("\"a\u{1}b\"", false),
            ("[1,]", false),
            ("01", false),
            ("-", false),
            ("1.", false),
            ("tru", false),
            (r#""\x""#, false),
            (r#""\u12G4""#, false),
            (r#""\u+123""#, false),
            ("{\"a\" 1}", false),
            ("{} {}", false),
            ("", false),
        ];
        for (text, accepted) in cases {
            assert!(!surely_valid(text.as_bytes()), "{text}");
            assert_eq!(full_parse_accepts(text), *accepted, "{text}");
        }
        assert!(!surely_valid(b"\"\xff\""));
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

    fn json_text() -> impl Strategy<Value = String> {
        // Texts from JSON's own alphabet, with the characters that matter to the scans made likely.
        proptest::collection::vec(
            prop_oneof![
                Just("{"),
                Just("}"),
                Just("["),
                Just("]"),
                Just(","),
                Just(":"),
                Just("\""),
                Just("\\"),
                Just(" "),
                Just("\n"),
                Just("-"),
                Just("+"),
                Just("."),
                Just("e"),
                Just("0"),
                Just("1"),
                Just("9"),
                Just("u"),
                Just("d8"),
                Just("a"),
                Just("true"),
                Just("null"),
                Just("é"),
                Just("\u{1}"),
                Just("/"),
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
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
        fn surely_valid_texts_are_accepted_by_the_full_parse(text in json_text()) {
            if surely_valid(text.as_bytes()) {
                prop_assert!(full_parse_accepts(&text), "{}", text);
            }
        }

        #[test]
        fn written_json_is_surely_valid_and_counted_alike(value in json_value()) {
            for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap_or_default()] {
                prop_assert!(surely_valid(text.as_bytes()), "{}", text);
                prop_assert_eq!(json_tokens(&text), transcoded_tokens(&text));
            }
        }
    }
}
