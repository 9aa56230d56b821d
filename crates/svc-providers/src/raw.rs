//! A JSON object read only as deep as its top-level fields: each value kept as its raw text, not parsed, so
//! the gateway can read the few fields it acts on (`model`, `usage`, `id`) and write the rest back as the
//! upstream (or client) wrote it.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The top-level fields of a JSON object, each value as its raw text (not parsed), in the client's order.
pub struct Fields<'a>(pub Vec<(String, &'a RawValue)>);

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
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    fields.push(entry);
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Writes an object of `fields`, each value replaced by `replace(key)` (JSON text) when that says so, else as
/// written.
pub fn write_fields<'r>(fields: &[(String, &RawValue)], replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>) -> Vec<u8> {
    let size = fields.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>();
    write_text_fields(fields.iter().map(|(k, v)| (k.as_str(), v.get())), size, replace)
}

/// [`write_fields`] of fields given as key and JSON text; `size` is about the size of the object written.
pub fn write_text_fields<'f, 'r>(
    fields: impl Iterator<Item = (&'f str, &'f str)>,
    size: usize,
    mut replace: impl FnMut(&str) -> Option<Cow<'r, [u8]>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    out.push(b'{');
    for (i, (key, value)) in fields.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // A key is a string; writing one cannot fail.
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        match replace(key) {
            Some(v) => out.extend_from_slice(&v),
            None => out.extend_from_slice(value.as_bytes()),
        }
    }
    out.push(b'}');
    out
}

impl<'a> Fields<'a> {
    /// The raw value of `key`, if the object has it.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// Writes an object of `fields` with each of `set` (key, JSON text) in place of the value of that key, or
/// added at the end when the object has no such key.
pub fn write_with(fields: &[(String, &RawValue)], set: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = write_fields(fields, |k| set.iter().find(|(s, _)| *s == k).map(|(_, v)| Cow::Borrowed(*v)));
    for (key, value) in set {
        if !fields.iter().any(|(k, _)| k == key) {
            append(&mut out, key, value);
        }
    }
    out
}

/// Adds `key` with the JSON text `value` at the end of the object written in `out` (`{…}` → `{…,"key":value}`,
/// or `{"key":value}` for an empty object).
pub fn append(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.pop();
    if out.len() > 1 {
        out.push(b',');
    }
    // A key is a string; writing one cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    out.extend_from_slice(value);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_replaced_in_place_or_added() -> Result<(), serde_json::Error> {
        let body = r#"{"id":"x","model":"up","choices":[{"a":1}]}"#;
        let f: Fields = serde_json::from_str(body)?;
        assert_eq!(f.get("choices").map(|v| v.get()), Some(r#"[{"a":1}]"#));
        let out = write_with(&f.0, &[("model", b"\"alias\""), ("usage", b"{\"n\":1}")]);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"id":"x","model":"alias","choices":[{"a":1}],"usage":{"n":1}}"#);
        let empty: Fields = serde_json::from_str("{}")?;
        assert_eq!(write_with(&empty.0, &[("model", b"\"m\"")]), br#"{"model":"m"}"#.to_vec());
        Ok(())
    }
}
