//! A JSON object read only as deep as its top-level fields: each value kept as its raw text, not parsed, so
//! the gateway can read the few fields it acts on (`model`, `usage`, `id`) and write the object back as the
//! upstream (or client) wrote it, with only the values it changes spliced in. [`Object::parse`] reads the top
//! level by serde_json; [`Object::read`] by jiter, for a reader that descends into some values in the same pass.

pub use jiter::{Jiter, Peek};
use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// An object's key, borrowed from the text unless it has escapes.
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(Visit)
    }
}

/// The top-level fields of a JSON object, each value as its raw text (not parsed), in the client's order; a key
/// is borrowed from the text unless it has escapes.
pub struct Fields<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    fields.push((key, value));
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Writes an object of `fields`, each value replaced by `replace(key)` (JSON text) when that says so, else as
/// written.
pub fn write_fields<'r>(
    fields: &[(Cow<'_, str>, &RawValue)],
    replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>,
) -> Vec<u8> {
    let size = fields.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>();
    write_text_fields(fields.iter().map(|(k, v)| (&**k, v.get().as_bytes())), size, replace)
}

/// [`write_fields`] of fields given as key and JSON text; `size` is about the size of the object written.
pub fn write_text_fields<'f, 'r>(
    fields: impl Iterator<Item = (&'f str, &'f [u8])>,
    size: usize,
    mut replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    out.push(b'{');
    for (i, (key, value)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_key(&mut out, key);
        out.push(b':');
        match replace(key) {
            Some(v) => out.extend_from_slice(&v),
            None => out.extend_from_slice(value),
        }
    }
    out.push(b'}');
    out
}

/// A JSON object kept as its bytes, with where each top-level field lies: read once, then looked up and written
/// back without being read again, as its own bytes with only the values changed spliced in (every other byte,
/// whitespace included, as it was). An upstream's answer is checked by the provider and finished by the gateway
/// through one reading.
#[derive(Debug, Clone)]
pub struct Object {
    /// The object's text (checked to be UTF-8 once, so a field's text needs no other check).
    text: Arc<str>,
    fields: Vec<Member>,
}

/// One field of an [`Object`]: its key, where the key's opening quote is, and where its value lies.
#[derive(Debug, Clone)]
struct Member {
    name: Name,
    key: usize,
    value: Range<usize>,
}

/// Reads an object's top-level fields as [`Object`] keeps them, in the text `.0` it is deserialized from: in one
/// pass, without a list of borrowed fields first.
struct Located<'t>(&'t str);

impl Located<'_> {
    /// Where `s`, borrowed from the text, lies in it.
    fn at(&self, s: &str) -> Range<usize> {
        within(self.0.as_bytes(), s.as_bytes())
    }
}

impl<'de> DeserializeSeed<'de> for Located<'_> {
    type Value = Vec<Member>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Located<'_> {
    type Value = Vec<Member>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some((Key(key), value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
            let value = self.at(value.get());
            let (name, opening) = match key {
                Cow::Borrowed(k) => {
                    let at = self.at(k);
                    (Name::At(at.clone()), at.start.checked_sub(1))
                }
                // A key with escapes was decoded: its place is found from its value's.
                Cow::Owned(k) => (Name::Decoded(k.into()), key_before(self.0.as_bytes(), value.start)),
            };
            let key = opening.ok_or_else(|| serde::de::Error::custom("a key of the object could not be located"))?;
            fields.push(Member { name, key, value });
        }
        Ok(fields)
    }
}

/// A field's key in an [`Object`].
#[derive(Debug, Clone)]
pub enum Name {
    /// Where the key lies in the text (it has no escapes): no string is made for it.
    At(Range<usize>),
    /// The key decoded (it has escapes).
    Decoded(Box<str>),
}

impl Name {
    /// The key whose text (between its quotes) lies at `at` in `text`; `None` when its escapes do not decode.
    pub fn of(text: &str, at: Range<usize>) -> Option<Name> {
        let raw = text.get(at.clone())?;
        // Keys are short: a plain loop costs less than setting up `memchr`.
        if !raw.bytes().any(|b| b == b'\\') {
            return Some(Name::At(at));
        }
        let quoted = text.get(at.start.checked_sub(1)?..at.end + 1)?;
        serde_json::from_str::<String>(quoted).ok().map(|k| Name::Decoded(k.into()))
    }

    /// The key, in `text` (the text it was read from).
    pub fn in_text<'a>(&'a self, text: &'a str) -> &'a str {
        match self {
            Name::At(range) => text.get(range.clone()).unwrap_or_default(),
            Name::Decoded(k) => k,
        }
    }

    /// Whether the key, in `text`, is `key` (compared as bytes: no character boundaries to check).
    pub fn is(&self, text: &str, key: &str) -> bool {
        match self {
            Name::At(range) => text.as_bytes().get(range.clone()) == Some(key.as_bytes()),
            Name::Decoded(k) => **k == *key,
        }
    }
}

impl Object {
    /// Reads `bytes` as a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Object, serde_json::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Object::parse_str(text),
            // The parse words what is wrong.
            Err(_) => Err(serde_json::from_slice::<Fields>(bytes).err().unwrap_or_else(not_utf8)),
        }
    }

    /// Reads `text` as a JSON object, its top-level fields only, by serde_json (`RawValue`): where nothing below
    /// the top level is read, cheaper than [`Object::read`]'s jiter (about 5,700 instructions against 7,000 for
    /// the benchmark's upstream answer, measured with callgrind), and it skips a lone surrogate escape
    /// (`"\ud800"`), which jiter refuses and an upstream may write.
    pub fn parse_str(text: &str) -> Result<Object, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        let fields = Located(text).deserialize(&mut de)?;
        de.end()?;
        Ok(Object { text: Arc::from(text), fields })
    }

    /// Reads the JSON object `text` field by field, in one pass, by jiter: `value` is given each field's key, and
    /// the reader at the start of its value, which it reads whole (or skips: `json.known_skip(peek)`); `None` when
    /// it says so, or when `text` is not one JSON object. Every value skipped is checked (syntax, escapes, control
    /// characters; not UTF-8, which `text` is already) without being built. For a reader that descends into
    /// some values (a client's `messages`) in the same pass; [`Object::parse_str`] reads only the top level.
    pub fn read<'j>(text: &'j str, mut value: impl FnMut(&Name, &mut Jiter<'j>, Peek) -> Option<()>) -> Option<Object> {
        let bytes = text.as_bytes();
        let mut json = Jiter::new(bytes);
        let mut fields = Vec::with_capacity(8);
        let mut key = json.next_object_bytes().ok()?.map(|k| within(bytes, k));
        while let Some(at) = key {
            let opening = at.start.checked_sub(1)?;
            let name = Name::of(text, at)?;
            let peek = json.peek().ok()?;
            let start = json.current_index();
            value(&name, &mut json, peek)?;
            fields.push(Member { name, key: opening, value: start..json.current_index() });
            key = json.next_key_bytes().ok()?.map(|k| within(bytes, k));
        }
        json.finish().ok()?;
        Some(Object { text: Arc::from(text), fields })
    }

    fn name<'a>(&'a self, name: &'a Name) -> &'a str {
        name.in_text(&self.text)
    }

    fn is(&self, name: &Name, key: &str) -> bool {
        name.is(&self.text, key)
    }

    /// The whole object as it was read.
    pub fn bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// The JSON text of field `key` (its last occurrence, as a parsed map keeps it).
    pub fn get(&self, key: &str) -> Option<&str> {
        let field = self.fields.iter().rev().find(|f| self.is(&f.name, key))?;
        self.text.get(field.value.clone())
    }

    /// Field `key` parsed.
    pub fn value(&self, key: &str) -> Option<serde_json::Value> {
        self.get(key).and_then(|t| serde_json::from_str(t).ok())
    }

    /// The object written again, each value replaced by `replace(key)` (JSON text) when that says so.
    pub fn write<'r>(&self, replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>) -> Vec<u8> {
        self.edit(replace, None, &[])
    }

    /// The object written again with each of `set` (key, JSON text) in place of that key's value, or added at
    /// the end when the object has no such key.
    pub fn write_with(&self, set: &[(&str, &[u8])]) -> Vec<u8> {
        self.write_edited(set, None)
    }

    /// [`Object::write_with`], with every occurrence of field `drop` left out.
    pub fn write_edited(&self, set: &[(&str, &[u8])], drop: Option<&str>) -> Vec<u8> {
        let value = |k: &str| set.iter().find(|(s, _)| *s == k).map(|(_, v)| Cow::Borrowed(*v));
        let missing: Vec<(&str, &[u8])> =
            set.iter().filter(|(k, _)| !self.fields.iter().any(|f| self.is(&f.name, k))).copied().collect();
        self.edit(value, drop, &missing)
    }

    /// The object's text with the values `replace` gives spliced in, every field `drop` cut out (with one comma),
    /// and `add` (keys it does not have) written before its closing brace.
    fn edit<'r>(
        &self,
        mut replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>,
        drop: Option<&str>,
        add: &[(&str, &[u8])],
    ) -> Vec<u8> {
        let text = self.text.as_bytes();
        let piece = |range: Range<usize>| text.get(range).unwrap_or_default();
        let extra = add.iter().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>();
        let mut out = Vec::with_capacity(text.len() + extra + 64);
        // `text[..copied]` is written (or cut); `kept`: a field is in `out`.
        let (mut copied, mut kept) = (0, false);
        for (i, f) in self.fields.iter().enumerate() {
            if drop.is_some_and(|d| self.is(&f.name, d)) {
                // The field and the comma before it, or, before the first field kept, the one after it.
                let (from, to) = match (kept, i.checked_sub(1).and_then(|p| self.fields.get(p))) {
                    (true, Some(before)) => (before.value.end, f.value.end),
                    _ => (f.key, self.fields.get(i + 1).map_or(f.value.end, |next| next.key)),
                };
                out.extend_from_slice(piece(copied..from));
                copied = to;
                continue;
            }
            kept = true;
            if let Some(v) = replace(self.name(&f.name)) {
                out.extend_from_slice(piece(copied..f.value.start));
                out.extend_from_slice(&v);
                copied = f.value.end;
            }
        }
        let close = text.iter().rposition(|&b| b == b'}').unwrap_or(text.len());
        out.extend_from_slice(piece(copied..close));
        for (key, value) in add {
            if kept {
                out.push(b',');
            }
            kept = true;
            write_key(&mut out, key);
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.extend_from_slice(piece(close..text.len()));
        out
    }
}

/// Where the opening quote of the key is, whose value starts at `value` in `text` (JSON text: `"key" : value`).
fn key_before(text: &[u8], value: usize) -> Option<usize> {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let before = text.get(..value)?;
    let colon = before.iter().rposition(|b| !space(b)).filter(|&i| before[i] == b':')?;
    let closing = before[..colon].iter().rposition(|b| !space(b)).filter(|&i| before[i] == b'"')?;
    // The opening quote: the last one before the closing quote that no backslash escapes.
    let mut end = closing;
    loop {
        let quote = before[..end].iter().rposition(|&b| b == b'"')?;
        let backslashes = before[..quote].iter().rev().take_while(|&&b| b == b'\\').count();
        if backslashes % 2 == 0 {
            return Some(quote);
        }
        end = quote;
    }
}

/// The error of bytes that are not UTF-8 where serde_json found nothing else wrong (it checks only strings).
fn not_utf8() -> serde_json::Error {
    serde::de::Error::custom("the text is not UTF-8")
}

/// The next key of the object at `json` (reading `text`); `first` for its first. `None` when the JSON is bad or
/// a key's escapes do not decode; `Some(None)` at the object's end.
pub fn next_key<'j>(text: &'j str, json: &mut Jiter<'j>, first: bool) -> Option<Option<Name>> {
    let key = if first { json.next_object_bytes() } else { json.next_key_bytes() };
    match key.ok()? {
        Some(k) => Name::of(text, within(text.as_bytes(), k)).map(Some),
        None => Some(None),
    }
}

/// Where `part`, a slice of `whole`, lies in it.
pub fn within(whole: &[u8], part: &[u8]) -> Range<usize> {
    let start = (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize);
    start..start + part.len()
}

/// Adds `key` with the JSON text `value` at the end of the object written in `out` (`{…}` → `{…,"key":value}`,
/// or `{"key":value}` for an empty object).
pub fn append(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.pop();
    if out.len() > 1 {
        out.push(b',');
    }
    write_key(out, key);
    out.push(b':');
    out.extend_from_slice(value);
    out.push(b'}');
}

/// Whether `s` is written in a JSON string as it is: it has no quote, backslash or control character (nearly
/// every key and value the gateway writes). One test of every byte, without a branch per byte.
#[inline]
pub fn needs_no_escape(s: &str) -> bool {
    !s.bytes().fold(false, |any, b| any | (b < 0x20) | (b == b'"') | (b == b'\\'))
}

/// Writes `key` as a JSON string: as it is when it needs no escape, else as serde_json escapes it.
fn write_key(out: &mut Vec<u8>, key: &str) {
    if needs_no_escape(key) {
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.push(b'"');
    } else {
        // A key is a string; writing one cannot fail.
        let _ = serde_json::to_writer(&mut *out, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_replaced_in_place_or_added() -> Result<(), serde_json::Error> {
        let body = r#"{"id":"x","model":"up","choices":[{"a":1}]}"#;
        let f = Object::parse(body.as_bytes())?;
        assert_eq!(f.get("choices"), Some(r#"[{"a":1}]"#));
        let out = f.write_with(&[("model", b"\"alias\""), ("usage", b"{\"n\":1}")]);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"id":"x","model":"alias","choices":[{"a":1}],"usage":{"n":1}}"#);
        let o = Object::parse(br#"{"id":"x","model":"up","model":"up2","n":1}"#)?;
        assert_eq!((o.get("model"), o.get("n"), o.get("nope")), (Some("\"up2\""), Some("1"), None));
        let out = o.write_with(&[("model", b"\"alias\""), ("usage", b"{}")]);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"id":"x","model":"alias","model":"alias","n":1,"usage":{}}"#);
        // Keys with escapes are read decoded and written as they were.
        let o = Object::parse(br#"{"mo\u0064el":"up","a\"b":1,"\u00e9":2}"#)?;
        assert_eq!((o.get("model"), o.get("a\"b"), o.get("é")), (Some("\"up\""), Some("1"), Some("2")));
        let out = o.write_with(&[("model", b"\"alias\"")]);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"mo\u0064el":"alias","a\"b":1,"\u00e9":2}"#);
        // Every byte but the values changed is written as it was, whitespace included; a field left out takes
        // one comma with it.
        let o = Object::parse(b" { \"a\" : 1 ,\n \"usage\": {\"n\": 2}, \"b\":[ 3 ] } ")?;
        assert_eq!(o.write_with(&[("a", b"9")]), b" { \"a\" : 9 ,\n \"usage\": {\"n\": 2}, \"b\":[ 3 ] } ".to_vec());
        assert_eq!(o.write_edited(&[], Some("usage")), b" { \"a\" : 1, \"b\":[ 3 ] } ".to_vec());
        assert_eq!(o.write_edited(&[], Some("a")), b" { \"usage\": {\"n\": 2}, \"b\":[ 3 ] } ".to_vec());
        assert_eq!(
            o.write_edited(&[("m", b"1")], Some("b")),
            b" { \"a\" : 1 ,\n \"usage\": {\"n\": 2} ,\"m\":1} ".to_vec()
        );
        let twice = Object::parse(br#"{"u":1,"u":2,"a":3,"u":4}"#)?;
        assert_eq!(twice.write_edited(&[], Some("u")), br#"{"a":3}"#.to_vec());
        let only = Object::parse(br#"{"u":1}"#)?;
        assert_eq!(only.write_edited(&[("m", b"2")], Some("u")), br#"{"m":2}"#.to_vec());
        // Read by serde_json (a lone surrogate), a key with escapes is found in the text too.
        let lone = Object::parse(br#"{"x":"\ud800", "u\u0073age" :1,"y":2}"#)?;
        assert_eq!(lone.write_edited(&[], Some("usage")), br#"{"x":"\ud800","y":2}"#.to_vec());
        assert!(Object::parse(b"[1]").is_err());
        // A lone surrogate escape, which jiter refuses, is read as serde_json reads it: skipped.
        let lone = Object::parse(br#"{"a":"\ud800","b":[1]}"#)?;
        assert_eq!((lone.get("a"), lone.get("b")), (Some(r#""\ud800""#), Some("[1]")));
        let empty = Object::parse(b"{}")?;
        assert_eq!(empty.write_with(&[("model", b"\"m\"")]), br#"{"model":"m"}"#.to_vec());
        Ok(())
    }

    /// The fields as serde_json reads them (`Object::parse`'s reading): keys decoded, values' texts.
    fn by_serde(text: &str) -> Option<Vec<(String, String)>> {
        let Fields(fields) = serde_json::from_str(text).ok()?;
        Some(fields.into_iter().map(|(k, v)| (k.into_owned(), v.get().to_string())).collect())
    }

    fn by_jiter(text: &str) -> Option<Vec<(String, String)>> {
        let o = Object::read(text, |_, json, value| json.known_skip(value).ok())?;
        Some(o.fields.iter().map(|f| (o.name(&f.name).to_string(), text[f.value.clone()].to_string())).collect())
    }

    fn json_object() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            "[a-z\"\\\\\u{1}é\u{10000}]{0,6}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"\\\\]{0,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        proptest::collection::btree_map("[a-z\"é]{0,3}", value, 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    use proptest::test_runner::TestCaseError;

    proptest::proptest! {
        /// jiter's reading (`Object::read`, a client's body's) reads what serde_json's (`Object::parse`'s) reads,
        /// field by field, and refuses what it refuses, on JSON objects and on them with one byte removed or a piece
        /// of JSON put in; `Object::parse` finds every key it reads.
        #[test]
        fn jiter_reads_as_serde_json_reads(
            object in json_object(),
            pretty in proptest::bool::ANY,
            at in proptest::num::usize::ANY,
            edit in proptest::sample::select(vec!["", "-", "{", "}", "[", "]", ":", ",", "\"", "\\", "01", "1.", "nul", "\u{1}"]),
        ) {
            let text = if pretty { serde_json::to_string_pretty(&object) } else { serde_json::to_string(&object) };
            let text = text.unwrap_or_default();
            proptest::prop_assert_eq!(by_jiter(&text), by_serde(&text), "{}", text);
            let mut edited = text.clone();
            let at = at % edited.len().max(1);
            if edited.is_char_boundary(at) && !edited.is_empty() {
                if edit.is_empty() {
                    edited.remove(at);
                } else {
                    edited.insert_str(at, edit);
                }
            }
            proptest::prop_assert_eq!(by_jiter(&edited), by_serde(&edited), "{}", edited);
            proptest::prop_assert_eq!(Object::parse_str(&edited).is_ok(), by_serde(&edited).is_some());
        }

        /// An object written again with values set, a field left out and fields added reads as the map edited so.
        #[test]
        fn an_edited_object_reads_as_the_edited_map(
            object in json_object(),
            pretty in proptest::bool::ANY,
            keys in proptest::collection::vec("[a-z\"é]{0,3}", 0..4),
            drop in "[a-z\"é]{0,3}",
        ) {
            let serde_json::Value::Object(mut map) = object else { return Ok(()) };
            let text = if pretty { serde_json::to_string_pretty(&map) } else { serde_json::to_string(&map) };
            let o = Object::parse_str(&text.unwrap_or_default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let set: Vec<(&str, &[u8])> = keys.iter().filter(|k| **k != drop).map(|k| (k.as_str(), &b"[true]"[..])).collect();
            let out = o.write_edited(&set, Some(&drop));
            map.remove(&drop);
            for (k, _) in &set {
                map.insert(k.to_string(), serde_json::json!([true]));
            }
            let back: serde_json::Value = serde_json::from_slice(&out).map_err(|e| TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(back, serde_json::Value::Object(map));
        }
    }
}
