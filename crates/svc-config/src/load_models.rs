//! The `model_list:` section: one deployment per entry. Every field of an entry is checked even when another
//! one is wrong (a bad provider does not hide a bad price), and the alias of an entry with errors stays a
//! known name, so a team or a fallback that names it is not told the model does not exist.

use crate::diagnostics::Severity;
use crate::node::{Node, Value};
use crate::reader::{Fields, Key, Reader};
use crate::types::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The valid entries of `model_list`, and the aliases of the entries that have errors.
pub(crate) struct Models {
    /// Valid entries, in file order.
    pub entries: Vec<ModelEntry>,
    /// Aliases of entries that could not be built (their own errors were reported).
    pub broken: Vec<String>,
}

impl Models {
    /// Whether `alias` is the `model_name` of any entry, valid or not.
    pub fn knows(&self, alias: &str) -> bool {
        self.entries.iter().any(|m| m.alias == alias) || self.broken.iter().any(|b| b == alias)
    }

    /// Every alias, valid entries first, for "did you mean" hints.
    pub fn aliases(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|m| m.alias.as_str()).chain(self.broken.iter().map(String::as_str))
    }
}

/// What one entry gave: its alias when it has one, the deployment when every required part is valid, and the
/// aliases its `fallbacks` names (checked once every alias is known).
struct Parsed {
    alias: Option<String>,
    entry: Option<ModelEntry>,
    fallbacks: Vec<(String, Node)>,
}

pub(crate) fn models(r: &mut Reader, node: Option<&Node>, base: Option<&Path>) -> Models {
    let mut out = Models { entries: Vec::new(), broken: Vec::new() };
    let Some(node) = node else { return out };
    let root = Fields::single("model_list", node);
    let mut parsed: Vec<(String, Parsed)> = Vec::new();
    for (i, item) in r.list(&root, "").into_iter().enumerate() {
        if let Some(p) = model(r, item, &format!("model_list[{i}]"), base) {
            parsed.push((format!("model_list[{i}].fallbacks"), p));
        }
    }
    for (_, p) in &parsed {
        match (&p.entry, &p.alias) {
            (Some(entry), _) => out.entries.push(entry.clone()),
            (None, Some(alias)) => out.broken.push(alias.clone()),
            (None, None) => {}
        }
    }
    // Fallbacks name other aliases: checked once every alias is known.
    let mut valid = 0;
    for (path, p) in parsed {
        let Some(alias) = &p.alias else { continue };
        let mut names = Vec::new();
        for (name, n) in p.fallbacks {
            if &name == alias {
                r.error(&n, format!("{path}: `{name}` is this entry's own alias; name other aliases to fall back to"));
            } else if !out.knows(&name) {
                let hint = did_you_mean(&name, out.aliases());
                r.error(&n, format!("{path}: unknown model `{name}`; it is not a `model_name` in model_list{hint}"));
            } else if !names.contains(&name) {
                names.push(name);
            }
        }
        if p.entry.is_some() {
            out.entries[valid].fallbacks = names;
            valid += 1;
        }
    }
    deployment_ids(r, &mut out.entries);
    out
}

/// Deployment ids: explicit ids must be unique; implicit ones get `#n` when an alias repeats.
fn deployment_ids(r: &mut Reader, entries: &mut [ModelEntry]) {
    let mut seen: Vec<String> = Vec::new();
    for i in 0..entries.len() {
        if entries[i].deployment_id.is_empty() {
            let alias = entries[i].alias.clone();
            let count = entries.iter().filter(|m| m.alias == alias).count();
            let nth = entries[..i].iter().filter(|m| m.alias == alias).count();
            entries[i].deployment_id = if count > 1 { format!("{alias}#{}", nth + 1) } else { alias };
        }
        if seen.contains(&entries[i].deployment_id) {
            let msg = format!("model_list[{i}]: deployment id `{}` is used twice", entries[i].deployment_id);
            r.push(entries[i].line, 1, Severity::Error, msg);
        }
        seen.push(entries[i].deployment_id.clone());
    }
}

/// The `params` of an entry: every field is read (and its problems recorded) whatever the others hold.
struct Params {
    upstream: Option<(ProviderKind, String)>,
    api_base: Option<String>,
    api_key: Option<Secret>,
    timeout: u64,
    priced: crate::load_prices::Priced,
    max_output_tokens: Option<u32>,
    ssl_ca_file: Option<PathBuf>,
    cloud: crate::cloud::Cloud,
}

fn params(r: &mut Reader, node: &Node, p: &Fields, base: Option<&Path>) -> Params {
    let upstream = match (p.get("model"), r.string(p, "model")) {
        (Some(n), Some(m)) => match m.split_once('/') {
            Some(("openai", id)) if !id.is_empty() => Some((ProviderKind::OpenAi, id.to_string())),
            Some(("anthropic", id)) if !id.is_empty() => Some((ProviderKind::Anthropic, id.to_string())),
            Some(("gemini", id)) if !id.is_empty() => Some((ProviderKind::Gemini, id.to_string())),
            Some(("azure", id)) if !id.is_empty() => Some((ProviderKind::Azure, id.to_string())),
            Some(("vertex_ai", id)) if !id.is_empty() => Some((ProviderKind::Vertex, id.to_string())),
            Some(("bedrock", id)) if !id.is_empty() => Some((ProviderKind::Bedrock, id.to_string())),
            Some(("mock", id)) if !id.is_empty() => Some((ProviderKind::Mock, id.to_string())),
            _ => {
                let msg = format!(
                    "{}: `{m}` must be `<provider>/<model id>` with provider openai, anthropic, gemini, azure, vertex_ai, bedrock or mock",
                    p.child("model")
                );
                r.error(n, msg);
                None
            }
        },
        (None, _) => {
            r.error(node, format!("{}: missing `model`", p.path));
            None
        }
        (Some(_), None) => None,
    };
    let mut api_base = r.string(p, "api_base").map(|s| s.trim_end_matches('/').to_string());
    if let (Some(b), Some(n)) = (&api_base, p.get("api_base")) {
        if !(b.starts_with("http://") || b.starts_with("https://")) {
            r.error(n, format!("{}: `{b}` must be an http:// or https:// URL", p.child("api_base")));
        }
    }
    let mut api_key = r.string(p, "api_key").map(Secret::new);
    let cloud = crate::cloud::cloud(r, node, p, upstream.as_ref().map(|(kind, _)| *kind), &mut api_key, base);
    if matches!(upstream, Some((ProviderKind::Azure, _))) && api_base.is_none() {
        api_base = r.env_var("AZURE_API_BASE").map(|b| b.trim_end_matches('/').to_string());
        if api_base.is_none() {
            r.error(node, format!("{}: an azure/ deployment needs `api_base` (or AZURE_API_BASE): https://<resource>.openai.azure.com", p.path));
        }
    }
    Params {
        upstream: upstream.clone(),
        api_base,
        api_key,
        cloud,
        timeout: r.int::<u64>(p, "timeout_seconds").unwrap_or(600),
        priced: crate::load_prices::prices(r, node, p, upstream.as_ref().map(|(kind, _)| *kind)),
        max_output_tokens: r.int(p, "max_output_tokens"),
        ssl_ca_file: crate::load_server::existing_file(r, p, "ssl_ca_file", base),
    }
}

/// One entry: every problem of it is recorded; `None` only when it is not even a mapping.
fn model(r: &mut Reader, node: &Node, path: &str, base: Option<&Path>) -> Option<Parsed> {
    const KEYS: &[Key] = &[
        ("model_name", &[]),
        ("params", &["litellm_params"]),
        ("owned_by", &[]),
        ("model_info", &[]),
        ("fallbacks", &[]),
    ];
    const PARAMS: &[Key] = &[
        ("model", &[]),
        ("api_base", &["base_url"]),
        ("api_key", &[]),
        ("timeout_seconds", &["timeout"]),
        ("max_output_tokens", &["max_tokens"]),
        ("ssl_ca_file", &[]),
    ];
    const INFO: &[Key] = &[("id", &[])];
    let f = r.fields(node, path, KEYS)?;
    let alias = r.string(&f, "model_name");
    if alias.is_none() && f.get("model_name").is_none() {
        r.error(node, format!("{path}: missing `model_name`"));
    }
    let params = match f.get("params") {
        Some(n) => match r.fields(
            n,
            &f.child("params"),
            &[PARAMS, crate::load_prices::PRICE_KEYS, crate::cloud::CLOUD_KEYS].concat(),
        ) {
            Some(p) => Some(params(r, n, &p, base)),
            None => {
                if matches!(n.value, Value::Null) {
                    r.error(n, format!("{}: missing `model`", f.child("params")));
                }
                None
            }
        },
        None => {
            r.error(node, format!("{path}: missing `params` (the upstream `model` and its settings)"));
            None
        }
    };
    let mut deployment_id = String::new();
    if let Some(info) = f.get("model_info").and_then(|n| r.fields(n, &f.child("model_info"), INFO)) {
        deployment_id = r.string(&info, "id").unwrap_or_default();
    }
    let fallbacks = r.strings(&f, "fallbacks").unwrap_or_default();
    let owned_by = r.string(&f, "owned_by");
    let entry = match (&alias, params) {
        (Some(alias), Some(p)) => p.upstream.map(|(provider, upstream_model)| ModelEntry {
            alias: alias.clone(),
            deployment_id,
            provider,
            upstream_model,
            api_base: p.api_base,
            api_key: p.api_key,
            timeout: Duration::from_secs(p.timeout.max(1)),
            prices: p.priced.prices,
            max_input_tokens: p.priced.max_input_tokens,
            max_output_tokens: p.max_output_tokens,
            owned_by: owned_by.unwrap_or_else(|| match alias.split_once('/') {
                Some((prefix, _)) => prefix.to_string(),
                None => provider.as_str().to_string(),
            }),
            fallbacks: Vec::new(),
            ssl_ca_file: p.ssl_ca_file,
            cloud: p.cloud,
            line: node.line,
        }),
        _ => None,
    };
    Some(Parsed { alias, entry, fallbacks })
}

/// ` (did you mean `x`?)` when one of `known` is close to `name`, else nothing.
pub(crate) fn did_you_mean<'k>(name: &str, known: impl Iterator<Item = &'k str>) -> String {
    known
        .map(|k| (k, strsim::jaro_winkler(name, k)))
        .filter(|(_, s)| *s > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}
