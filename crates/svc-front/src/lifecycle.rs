//! The events of a passed-through stream that hold the message or response whole (Messages `message_start`,
//! the Responses `response.*` lifecycle events), read in one pass: the fields the gateway acts on in the
//! inner object (`model`, `id`, `usage`, `output`) are located in the event's text, every other value is only
//! checked and skipped, and the client's name is spliced in place of each inner `model`, every other byte
//! copied as the upstream wrote it.
//!
//! A key given twice: the first `id`, `usage` and `output` of the inner object are read, and every `model` is
//! renamed, in every object the outer field holds when it too is given twice (a client's parser may keep the
//! last of them: none may show the upstream's name).

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::ops::Range;
use svc_providers::raw::{within, Key};

/// What an event's inner object holds, as text borrowed from the event.
#[derive(Debug, Default)]
pub(crate) struct Inner<'a> {
    /// Where each `model` value lies in the event's text.
    models: Vec<Range<usize>>,
    id: Option<&'a RawValue>,
    usage: Option<&'a RawValue>,
    output: Option<&'a RawValue>,
}

impl<'a> Inner<'a> {
    /// The inner object of field `outer` of the event `data`; `None` when `data` is not a JSON object whose
    /// `outer` is an object.
    pub(crate) fn read(data: &'a str, outer: &str) -> Option<Inner<'a>> {
        let mut de = serde_json::Deserializer::from_str(data);
        let inner = Outer { text: data, outer }.deserialize(&mut de).ok()??;
        de.end().ok()?;
        Some(inner)
    }

    /// The inner `id`, when it is a string.
    pub(crate) fn id(&self) -> Option<String> {
        self.id.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
    }

    /// The inner `usage`, as its JSON text.
    pub(crate) fn usage(&self) -> Option<&'a str> {
        self.usage.map(RawValue::get)
    }

    /// The inner `output`, as its JSON text.
    pub(crate) fn output(&self) -> Option<&'a str> {
        self.output.map(RawValue::get)
    }

    /// `data` (the event read) with `alias` (JSON text) as every inner `model`.
    pub(crate) fn renamed(&self, data: &str, alias: &[u8]) -> Vec<u8> {
        let text = data.as_bytes();
        let mut out = Vec::with_capacity(text.len() + alias.len());
        let mut copied = 0;
        for at in &self.models {
            out.extend_from_slice(text.get(copied..at.start).unwrap_or_default());
            out.extend_from_slice(alias);
            copied = at.end;
        }
        out.extend_from_slice(text.get(copied..).unwrap_or_default());
        out
    }
}

/// Reads the event's object, descending into the first field `outer` only.
struct Outer<'t> {
    text: &'t str,
    outer: &'t str,
}

impl<'de> DeserializeSeed<'de> for Outer<'_> {
    type Value = Option<Inner<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Outer<'_> {
    type Value = Option<Inner<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut inner: Option<Inner<'de>> = None;
        while let Some(Key(key)) = map.next_key()? {
            if key != self.outer {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let Some(first) = inner.as_mut() else {
                inner = Some(map.next_value_seed(Fields { text: self.text })?);
                continue;
            };
            // Given again: only its models are read, and only when it is an object.
            let raw: &'de RawValue = map.next_value()?;
            let mut again = serde_json::Deserializer::from_str(raw.get());
            if let Ok(more) = (Fields { text: self.text }).deserialize(&mut again) {
                first.models.extend(more.models);
            }
        }
        Ok(inner)
    }
}

/// Reads the inner object's fields.
struct Fields<'t> {
    text: &'t str,
}

impl<'de> DeserializeSeed<'de> for Fields<'_> {
    type Value = Inner<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = Inner<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut inner = Inner::default();
        while let Some(Key(key)) = map.next_key()? {
            let slot = match &*key {
                "model" => {
                    let raw: &'de RawValue = map.next_value()?;
                    inner.models.push(within(self.text.as_bytes(), raw.get().as_bytes()));
                    continue;
                }
                "id" => &mut inner.id,
                "usage" => &mut inner.usage,
                "output" => &mut inner.output,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let raw: &'de RawValue = map.next_value()?;
            slot.get_or_insert(raw);
        }
        Ok(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(data: &str, outer: &str) -> Option<String> {
        let inner = Inner::read(data, outer)?;
        Some(String::from_utf8_lossy(&inner.renamed(data, b"\"alias\"")).into_owned())
    }

    #[test]
    fn every_inner_model_is_renamed_and_every_other_byte_kept() {
        let data = r#"{"type" : "response.created","response":{ "id":"r1","model" :"up", "x":{"model":"deep"},"model":"again"}, "seq":1}"#;
        let want = r#"{"type" : "response.created","response":{ "id":"r1","model" :"alias", "x":{"model":"deep"},"model":"alias"}, "seq":1}"#;
        assert_eq!(renamed(data, "response").as_deref(), Some(want));
        let inner = Inner::read(data, "response").unwrap_or_default();
        assert_eq!(inner.id().as_deref(), Some("r1"));
        assert_eq!(inner.usage(), None);
    }

    #[test]
    fn the_first_fields_are_read_and_every_model_renamed() {
        let data =
            r#"{"response":{"usage":{"a":1},"usage":{"a":2},"output":[1]},"response":{"model":"m","usage":{"a":3}}}"#;
        let inner = Inner::read(data, "response").unwrap_or_default();
        assert_eq!(inner.usage(), Some(r#"{"a":1}"#));
        assert_eq!(inner.output(), Some("[1]"));
        let want = r#"{"response":{"usage":{"a":1},"usage":{"a":2},"output":[1]},"response":{"model":"alias","usage":{"a":3}}}"#;
        assert_eq!(renamed(data, "response").as_deref(), Some(want), "a second `response` is renamed too");
        let other = r#"{"response":{"model":"m"},"response":null}"#;
        assert_eq!(renamed(other, "response").as_deref(), Some(r#"{"response":{"model":"alias"},"response":null}"#));
    }

    #[test]
    fn events_that_do_not_read_are_left_alone() {
        for data in [r#"{"response":null}"#, r#"{"response":{"model":"m"}"#, "[1]", "", r#"{"response":{}} x"#] {
            assert_eq!(renamed(data, "response"), None, "{data}");
        }
        assert_eq!(renamed(r#"{"other":{"model":"m"}}"#, "response"), None, "no inner object");
        let escaped = r#"{"mess\u0061ge":{"model":"m"}}"#;
        assert_eq!(renamed(escaped, "message").as_deref(), Some(r#"{"mess\u0061ge":{"model":"alias"}}"#));
    }
}
