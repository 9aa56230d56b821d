//! Walking a [`Node`] tree while collecting every problem: typed getters that record a [`Diagnostic`] and
//! carry on, unknown-key detection with the nearest valid key suggested, and `os.environ/NAME` resolution.

use crate::diagnostics::{Diagnostic, Severity};
use crate::node::{Node, Value};

/// Looks up environment variables (injectable for tests).
pub(crate) type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The walk's context: file name, environment and the problems found so far.
pub(crate) struct Reader<'a> {
    pub file: String,
    pub env: EnvLookup<'a>,
    pub diags: Vec<Diagnostic>,
}

/// The fields of one mapping after unknown keys were reported.
pub(crate) struct Fields<'n> {
    pub path: String,
    entries: Vec<(&'static str, &'n Node)>,
}

/// A field name and the other spellings accepted for it (LiteLLM's names).
pub(crate) type Key = (&'static str, &'static [&'static str]);

impl<'a> Reader<'a> {
    pub fn new(file: impl Into<String>, env: EnvLookup<'a>) -> Self {
        Reader { file: file.into(), env, diags: Vec::new() }
    }

    pub fn error(&mut self, node: &Node, message: impl Into<String>) {
        self.push(node.line, node.col, Severity::Error, message.into());
    }

    pub fn warn(&mut self, node: &Node, message: impl Into<String>) {
        self.push(node.line, node.col, Severity::Warning, message.into());
    }

    pub fn push(&mut self, line: u64, col: u64, severity: Severity, message: String) {
        self.diags.push(Diagnostic { file: self.file.clone(), line, col, severity, message });
    }

    /// Reads a mapping whose keys must be among `keys`; reports every other key with a suggestion.
    pub fn fields<'n>(&mut self, node: &'n Node, path: &str, keys: &[Key]) -> Option<Fields<'n>> {
        let Value::Map(entries) = &node.value else {
            if !matches!(node.value, Value::Null) {
                self.error(node, format!("{}: expected a mapping, found {}", show(path), node.value.kind()));
            }
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in entries {
            let Value::Str(name) = &k.value else {
                self.error(k, format!("{}: keys must be strings", show(path)));
                continue;
            };
            match keys.iter().find(|(canon, aliases)| canon == name || aliases.contains(&name.as_str())) {
                Some((canon, _)) => {
                    if out.iter().any(|(c, _)| c == canon) {
                        self.error(k, format!("{}: `{name}` is given twice", show(path)));
                    }
                    out.push((*canon, v));
                }
                None => {
                    let hint = nearest(name, keys).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
                    let at = if path.is_empty() { String::new() } else { format!("{path}: ") };
                    self.error(k, format!("{at}unknown field `{name}`{hint}"));
                }
            }
        }
        Some(Fields { path: path.to_string(), entries: out })
    }

    /// An environment variable, through the loader's lookup (tests inject their own).
    pub fn env_var(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// A string field, with `os.environ/NAME` resolved.
    pub fn string(&mut self, f: &Fields, key: &str) -> Option<String> {
        let node = f.get(key)?;
        self.string_node(node, &f.child(key))
    }

    pub fn string_node(&mut self, node: &Node, path: &str) -> Option<String> {
        let text = match node.scalar_text() {
            Some(text) => text,
            None if matches!(node.value, Value::Null) => return None,
            None => {
                self.error(node, format!("{path}: expected a string, found {}", node.value.kind()));
                return None;
            }
        };
        match text.strip_prefix("os.environ/") {
            Some(name) => match (self.env)(name) {
                Some(v) => Some(v),
                None => {
                    self.error(node, format!("{path}: environment variable `{name}` is not set"));
                    None
                }
            },
            None => Some(text),
        }
    }

    /// A non-negative integer field that fits `T`.
    pub fn int<T: TryFrom<i128>>(&mut self, f: &Fields, key: &str) -> Option<T> {
        let node = f.get(key)?;
        let path = f.child(key);
        let value = match &node.value {
            Value::Int(i) => Some(*i),
            Value::Str(_) => self.string_node(node, &path).and_then(|s| s.trim().parse::<i128>().ok()),
            Value::Null => return None,
            _ => None,
        };
        match value.filter(|v| *v >= 0).and_then(|v| T::try_from(v).ok()) {
            Some(v) => Some(v),
            None => {
                self.error(
                    node,
                    format!("{path}: expected a whole number of the right size, found {}", describe(node)),
                );
                None
            }
        }
    }

    /// A boolean field.
    pub fn boolean(&mut self, f: &Fields, key: &str) -> Option<bool> {
        let node = f.get(key)?;
        match &node.value {
            Value::Bool(b) => Some(*b),
            _ => {
                let path = f.child(key);
                self.error(node, format!("{path}: expected true or false, found {}", describe(node)));
                None
            }
        }
    }

    /// A decimal field as text (exact: the YAML number's shortest form or the string as written).
    pub fn decimal(&mut self, f: &Fields, key: &str) -> Option<(String, &'static str)> {
        let node = f.get(key)?;
        match &node.value {
            Value::Int(i) => Some((i.to_string(), "")),
            Value::Float(x) if x.is_finite() => Some((format!("{x}"), "")),
            Value::Str(_) => self.string_node(node, &f.child(key)).map(|s| (s, "")),
            Value::Null => None,
            _ => {
                let path = f.child(key);
                self.error(node, format!("{path}: expected a number, found {}", describe(node)));
                None
            }
        }
    }

    /// A decimal field read by `parse` (a money amount, a price); a value `parse` refuses is recorded with its
    /// reason.
    pub fn parsed_decimal<T, E: std::fmt::Display>(
        &mut self,
        f: &Fields,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Option<T> {
        let (text, _) = self.decimal(f, key)?;
        match parse(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                if let Some(n) = f.get(key) {
                    self.error(n, format!("{}: {e}", f.child(key)));
                }
                None
            }
        }
    }

    /// A list of strings.
    pub fn strings(&mut self, f: &Fields, key: &str) -> Option<Vec<(String, Node)>> {
        let node = f.get(key)?;
        let path = f.child(key);
        let Value::Seq(items) = &node.value else {
            if !matches!(node.value, Value::Null) {
                self.error(node, format!("{path}: expected a list, found {}", node.value.kind()));
            }
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(s) = self.string_node(item, &format!("{path}[{i}]")) {
                out.push((s, item.clone()));
            }
        }
        Some(out)
    }

    /// A list of mappings (or other nodes) to walk one by one.
    pub fn list<'n>(&mut self, f: &Fields<'n>, key: &str) -> Vec<&'n Node> {
        let Some(node) = f.get(key) else {
            return Vec::new();
        };
        match &node.value {
            Value::Seq(items) => items.iter().collect(),
            Value::Null => Vec::new(),
            other => {
                let path = f.child(key);
                self.error(node, format!("{path}: expected a list, found {}", other.kind()));
                Vec::new()
            }
        }
    }
}

impl<'n> Fields<'n> {
    pub fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// A stand-in mapping holding one node under the empty key, so the typed getters work on list items.
    pub fn single(path: &str, node: &'n Node) -> Fields<'n> {
        Fields { path: path.to_string(), entries: vec![("", node)] }
    }

    pub fn child(&self, key: &str) -> String {
        if key.is_empty() {
            self.path.clone()
        } else if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

fn show(path: &str) -> &str {
    if path.is_empty() {
        "the file"
    } else {
        path
    }
}

/// A short rendering of a scalar for messages.
pub(crate) fn describe(node: &Node) -> String {
    match node.scalar_text() {
        Some(text) => format!("`{text}`"),
        None => node.value.kind().to_string(),
    }
}

/// The valid key closest to a misspelt one, if any is close enough.
fn nearest(name: &str, keys: &[Key]) -> Option<&'static str> {
    keys.iter()
        .map(|(k, _)| (*k, strsim::jaro_winkler(name, k)))
        .filter(|(_, score)| *score > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
}
