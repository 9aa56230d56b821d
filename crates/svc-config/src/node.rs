//! A YAML document as a tree of values that remember where they were written, so every later check can
//! report `file:line:column`. serde-saphyr parses; this module only keeps the spans.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// A value and the place it was written (1-based line and column; 0 when unknown).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub value: Value,
    pub line: u64,
    pub col: u64,
    /// For a boolean or a number: the scalar exactly as written (`on`, `1.10`, `007`), so that a field that
    /// wants a string gets that text and not `true`, `1.1` or `7`.
    pub raw: Option<String>,
    /// Byte range of the scalar's definition in the source, used to fill `raw` once the source is at hand.
    span: Option<(usize, usize)>,
}

impl Node {
    /// A node made by the program rather than read from a file.
    pub fn synthetic(value: Value, line: u64, col: u64) -> Self {
        Node { value, line, col, raw: None, span: None }
    }

    /// A scalar as text: a string itself, a boolean or number as written (`team_id: on` is the team "on", not
    /// "true"); `None` for null, lists and mappings.
    pub fn scalar_text(&self) -> Option<String> {
        if let Some(raw) = &self.raw {
            return Some(raw.clone());
        }
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(x) => Some(x.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Null | Value::Seq(_) | Value::Map(_) => None,
        }
    }

    /// Fills `raw` of every boolean and number in the tree from the source text.
    fn fill_raw(&mut self, text: &str) {
        match &mut self.value {
            Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                // A tagged quoted or block scalar (`!!int "7"`) spans its quotes or indicator: not text as written.
                let raw = self.span.and_then(|(at, len)| text.get(at..at + len)).map(str::trim);
                self.raw = raw.filter(|t| !t.starts_with(['"', '\'', '|', '>'])).map(str::to_string);
            }
            Value::Seq(items) => items.iter_mut().for_each(|n| n.fill_raw(text)),
            Value::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
                k.fill_raw(text);
                v.fill_raw(text);
            }),
            Value::Null | Value::Str(_) => {}
        }
    }
}

/// A YAML value whose children are [`Node`]s.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What kind of value this is, for messages (`expected a string, found a list`).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Value>::deserialize(d)?;
        let span = spanned.defined.span();
        let span = match (span.byte_offset(), span.byte_len()) {
            (Some(at), Some(len)) => usize::try_from(at).ok().zip(usize::try_from(len).ok()),
            _ => None,
        };
        Ok(Node {
            value: spanned.value,
            line: spanned.referenced.line(),
            col: spanned.referenced.column(),
            raw: None,
            span,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(Value::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

/// Parses YAML text into a [`Node`] tree, or returns the syntax error with its position.
pub(crate) fn parse(text: &str) -> Result<Node, (u64, u64, String)> {
    if text.trim().is_empty() {
        return Ok(Node::synthetic(Value::Map(Vec::new()), 1, 1));
    }
    let mut root = serde_saphyr::from_str::<Node>(text).map_err(|e| {
        let (line, col) = e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0));
        let message = e.without_snippet().to_string();
        // The rendered message may repeat the position; keep the first line only.
        let first = message.lines().next().unwrap_or("invalid YAML").to_string();
        (line, col, first)
    })?;
    root.fill_raw(text);
    Ok(root)
}
