//! A deployment's prices, in LiteLLM's names so that a LiteLLM price table works unchanged: input and output
//! per token, prompt-cache reads and writes (5-minute and 1-hour), the long-context tier past 200,000 input
//! tokens, server-side web searches per query, and the model's context window (`max_input_tokens`).
//!
//! Every price that cannot be read is an error naming it; a provider that bills a dimension the entry leaves
//! unpriced is warned about (the dimension is then priced as its nearest configured price, never as free).
//!
//! What this file does not do: compute a cost (`svc_budget::Prices` does).

use crate::node::{Node, Value};
use crate::reader::{Fields, Key, Reader};
use crate::types::ProviderKind;
use svc_budget::{LongContext, Money, Price, Prices};

/// The price fields of `params` (with the rest of `params`' keys in `load_models`).
pub(crate) const PRICE_KEYS: &[Key] = &[
    ("input_cost_per_token", &[]),
    ("output_cost_per_token", &[]),
    ("cache_creation_input_token_cost", &[]),
    ("cache_creation_input_token_cost_above_1hr", &[]),
    ("cache_read_input_token_cost", &[]),
    ("input_cost_per_token_above_200k_tokens", &[]),
    ("output_cost_per_token_above_200k_tokens", &[]),
    ("cache_creation_input_token_cost_above_200k_tokens", &[]),
    ("cache_read_input_token_cost_above_200k_tokens", &[]),
    ("search_context_cost_per_query", &[]),
    ("max_input_tokens", &[]),
];

/// Where the long-context tier starts (Anthropic's and Google's threshold, and LiteLLM's field names').
const LONG_CONTEXT_TOKENS: u64 = 200_000;

/// The prices of one entry and its context window.
pub(crate) struct Priced {
    pub prices: Prices,
    pub max_input_tokens: Option<u64>,
}

/// Reads the prices of `params` (`p`), warning about dimensions `provider` bills that are left unpriced.
pub(crate) fn prices(r: &mut Reader, node: &Node, p: &Fields, provider: Option<ProviderKind>) -> Priced {
    let optional = |r: &mut Reader, key: &str| p.get(key).is_some().then(|| price(r, p, key)).flatten();
    let input = optional(r, "input_cost_per_token").unwrap_or(Price::ZERO);
    let output = optional(r, "output_cost_per_token").unwrap_or(Price::ZERO);
    let cache_write = optional(r, "cache_creation_input_token_cost");
    let cache_write_1h = optional(r, "cache_creation_input_token_cost_above_1hr");
    let cache_read = optional(r, "cache_read_input_token_cost");
    let long_input = optional(r, "input_cost_per_token_above_200k_tokens");
    let long_output = optional(r, "output_cost_per_token_above_200k_tokens");
    let long_write = optional(r, "cache_creation_input_token_cost_above_200k_tokens");
    let long_read = optional(r, "cache_read_input_token_cost_above_200k_tokens");
    let long = match long_input {
        Some(input) => Some(LongContext {
            above_tokens: LONG_CONTEXT_TOKENS,
            input,
            output: long_output,
            cache_read: long_read,
            cache_write: long_write,
        }),
        None => {
            for key in [
                "output_cost_per_token_above_200k_tokens",
                "cache_creation_input_token_cost_above_200k_tokens",
                "cache_read_input_token_cost_above_200k_tokens",
            ] {
                if let Some(n) = p.get(key) {
                    let why = "is used only with `input_cost_per_token_above_200k_tokens`, which is not set";
                    r.error(n, format!("{}: {why}", p.child(key)));
                }
            }
            None
        }
    };
    let per_tool_use = search_price(r, p).unwrap_or(Money::ZERO);
    let max_input_tokens = r.int::<u64>(p, "max_input_tokens");
    if matches!(max_input_tokens, Some(0)) {
        if let Some(n) = p.get("max_input_tokens") {
            r.error(n, format!("{}: must be at least 1", p.child("max_input_tokens")));
        }
    }
    let prices = Prices { input, output, cache_read, cache_write, cache_write_1h, long, per_tool_use };
    warn_unpriced(r, node, p, provider, &prices);
    Priced { prices, max_input_tokens: max_input_tokens.filter(|m| *m > 0) }
}

/// A priced model (input or output not free) of a provider that bills prompt-cache tokens apart, without a
/// price for them: they are priced at the input price (a cache read then costs more than it is billed, a
/// 1-hour write less), which the operator should know.
fn warn_unpriced(r: &mut Reader, node: &Node, p: &Fields, provider: Option<ProviderKind>, prices: &Prices) {
    if prices.input.is_zero() && prices.output.is_zero() {
        return;
    }
    let mut missing = Vec::new();
    match provider {
        Some(ProviderKind::Anthropic) => {
            if prices.cache_read.is_none() {
                missing.push(("cache_read_input_token_cost", "cache reads are priced at the input price"));
            }
            if prices.cache_write.is_none() {
                missing.push(("cache_creation_input_token_cost", "cache writes are priced at the input price"));
            }
            if prices.cache_write_1h.is_none() {
                let why = "1-hour cache writes are priced as 5-minute ones";
                missing.push(("cache_creation_input_token_cost_above_1hr", why));
            }
        }
        Some(
            ProviderKind::OpenAi
            | ProviderKind::Gemini
            | ProviderKind::Azure
            | ProviderKind::Vertex
            | ProviderKind::Bedrock,
        ) => {
            if prices.cache_read.is_none() {
                missing.push(("cache_read_input_token_cost", "cached input is priced at the input price"));
            }
        }
        Some(ProviderKind::Mock) | None => {}
    }
    for (key, why) in missing {
        r.warn(node, format!("{}: no `{key}`: the provider bills it apart, and {why}", p.path));
    }
}

/// `search_context_cost_per_query`: a price per query, or LiteLLM's mapping of prices per search context
/// size, of which the `search_context_size_medium` one is used (the size OpenAI uses by default; Anthropic's
/// three are equal).
fn search_price(r: &mut Reader, p: &Fields) -> Option<Money> {
    const KEY: &str = "search_context_cost_per_query";
    let node = p.get(KEY)?;
    if let Value::Map(_) = &node.value {
        const SIZES: &[Key] =
            &[("search_context_size_low", &[]), ("search_context_size_medium", &[]), ("search_context_size_high", &[])];
        let sizes = r.fields(node, &p.child(KEY), SIZES)?;
        let mut chosen = None;
        for size in ["search_context_size_low", "search_context_size_high", "search_context_size_medium"] {
            if sizes.get(size).is_some() {
                chosen = money(r, &sizes, size).or(chosen);
            }
        }
        return chosen;
    }
    money(r, p, KEY)
}

fn money(r: &mut Reader, f: &Fields, key: &str) -> Option<Money> {
    r.parsed_decimal(f, key, Money::parse)
}

fn price(r: &mut Reader, f: &Fields, key: &str) -> Option<Price> {
    r.parsed_decimal(f, key, Price::parse)
}
