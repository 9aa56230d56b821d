//! Exact money: amounts in integer nano-units (1e-9 of the configured currency, USD in the examples) and
//! per-token prices in integer pico-units (1e-12), parsed from decimal text without going through floats.
//!
//! Every operation saturates instead of wrapping: a product or sum that does not fit is computed in `i128`
//! and clamped, so an absurd token count from an upstream can make a cost large, never negative or wrapped.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An amount of money in nano-units (1e-9 of the configured unit). Sums and comparisons are exact; every
/// operation saturates at the bounds of `i64` (about ±9.2 billion units).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(i64);

/// A price per token in pico-units (1e-12 of the configured unit), never negative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(i64);

/// Token counts reported by an upstream (or counted by the gateway).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Of the input tokens, those written to the upstream's prompt cache (priced on their own when the model
    /// says so).
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Of the input tokens, those read from the upstream's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Of the cache-creation tokens, those written for an hour (Anthropic's `ephemeral_1h_input_tokens`).
    #[serde(default)]
    pub cache_creation_1h_tokens: u64,
    /// Server-side tool uses the provider bills per use (web searches).
    #[serde(default)]
    pub tool_uses: u64,
}

/// A decimal text that cannot be an amount or a price.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("`{0}` is not a decimal number")]
    NotANumber(String),
    #[error("`{0}` is negative; amounts and prices must be zero or more")]
    Negative(String),
    #[error("`{0}` has more than {1} decimal places")]
    TooPrecise(String, u32),
    #[error("`{0}` is too large")]
    TooLarge(String),
}

const MONEY_SCALE: u32 = 9;
const PRICE_SCALE: u32 = 12;
/// Pico-units per nano-unit.
const PICOS_PER_NANO: i128 = 1_000;

/// Clamps an `i128` into `i64`.
fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl Money {
    /// Zero.
    pub const ZERO: Money = Money(0);
    /// The largest amount.
    pub const MAX: Money = Money(i64::MAX);

    /// An amount of `nanos` nano-units.
    pub const fn from_nanos(nanos: i64) -> Money {
        Money(nanos)
    }

    /// An amount of `nanos` nano-units given as `i128` (a sum), clamped to what `Money` holds.
    pub fn from_nanos_i128(nanos: i128) -> Money {
        Money(saturate(nanos))
    }

    /// The amount in nano-units.
    pub const fn nanos(self) -> i64 {
        self.0
    }

    /// Parses a non-negative decimal such as `50`, `50.0` or `0.25`.
    pub fn parse(text: &str) -> Result<Money, MoneyError> {
        parse_fixed(text, MONEY_SCALE).map(Money)
    }

    /// Saturating sum.
    pub fn plus(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }

    /// Saturating difference.
    pub fn minus(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }

    /// The amount, or zero when it is negative.
    pub fn at_least_zero(self) -> Money {
        Money(self.0.max(0))
    }

    /// The sum of many amounts, exact in `i128` and clamped once at the end.
    pub fn sum(amounts: impl IntoIterator<Item = Money>) -> Money {
        Money::from_nanos_i128(amounts.into_iter().fold(0i128, |acc, m| acc.saturating_add(i128::from(m.0))))
    }

    /// The fraction `permille / 1000` of this amount, rounded down.
    pub fn permille(self, permille: u32) -> Money {
        Money::from_nanos_i128(i128::from(self.0) * i128::from(permille) / 1000)
    }

    /// The amount as a float, for display and JSON only (never for arithmetic).
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 10f64.powi(MONEY_SCALE as i32)
    }
}

impl fmt::Display for Money {
    /// Shows the exact amount with at least two decimals: `50.00`, `0.000123`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let scale = 10u64.pow(MONEY_SCALE);
        let whole = abs / scale;
        let frac = format!("{:09}", abs % scale);
        let trimmed = frac.trim_end_matches('0');
        let frac = if trimmed.len() < 2 { &frac[..2] } else { trimmed };
        write!(f, "{sign}{whole}.{frac}")
    }
}

impl Price {
    /// Free.
    pub const ZERO: Price = Price(0);

    /// A price of `picos` pico-units per token (a negative value counts as free).
    pub const fn from_picos(picos: i64) -> Price {
        Price(if picos < 0 { 0 } else { picos })
    }

    /// The price in pico-units per token.
    pub const fn picos(self) -> i64 {
        self.0
    }

    /// Parses a non-negative decimal per-token price such as `0.0000004`.
    pub fn parse(text: &str) -> Result<Price, MoneyError> {
        parse_fixed(text, PRICE_SCALE).map(Price)
    }

    /// Whether this price is zero.
    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The price as a float, for display and JSON only.
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 10f64.powi(PRICE_SCALE as i32)
    }
}

/// Cost of `usage` at the given prices, rounded up to the next nano-unit (never under-charges), saturating.
pub fn cost(usage: Usage, input: Price, output: Price) -> Money {
    let picos = i128::from(usage.prompt_tokens)
        .saturating_mul(i128::from(input.0))
        .saturating_add(i128::from(usage.completion_tokens).saturating_mul(i128::from(output.0)))
        .max(0);
    // `picos` is never negative (a negative price, which `Price::parse` never makes, costs nothing), so
    // rounding up is a ceiling division.
    let nanos = picos / PICOS_PER_NANO + i128::from(picos % PICOS_PER_NANO != 0);
    Money::from_nanos_i128(nanos)
}

/// The most completion tokens a request with `prompt_tokens` of input can be given, per choice, when `choices`
/// completions must together cost no more than `room`: the largest `k` with
/// `cost(prompt_tokens, choices × k) ≤ room`. `None` when output is free (any number fits once the prompt
/// does); `Some(0)` when not even the prompt fits.
pub fn affordable_completion_tokens(
    room: Money,
    prompt_tokens: u64,
    input: Price,
    output: Price,
    choices: u64,
) -> Option<u64> {
    let prompt = i128::from(prompt_tokens).saturating_mul(i128::from(input.0));
    let available = i128::from(room.0).saturating_mul(PICOS_PER_NANO).saturating_sub(prompt);
    if output.is_zero() {
        return if available >= 0 { None } else { Some(0) };
    }
    if available <= 0 {
        return Some(0);
    }
    let per_token = i128::from(output.0).saturating_mul(i128::from(choices.max(1)));
    Some(u64::try_from(available / per_token).unwrap_or(u64::MAX))
}

impl Usage {
    /// Cost of this usage at the given input and output prices.
    pub fn cost(self, input: Price, output: Price) -> Money {
        cost(self, input, output)
    }

    /// prompt + completion, saturating at `u64::MAX` (counts come from upstreams and are not trusted).
    pub fn total_tokens(self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// Parses decimal text (optionally in exponent form, as YAML floats may print) into an integer scaled by
/// 10^scale, exactly.
fn parse_fixed(text: &str, scale: u32) -> Result<i64, MoneyError> {
    let t = text.trim();
    let err = || MoneyError::NotANumber(t.to_string());
    if t.starts_with('-') {
        return Err(MoneyError::Negative(t.to_string()));
    }
    let t2 = t.strip_prefix('+').unwrap_or(t);
    let (mantissa, exp) = match t2.find(['e', 'E']) {
        Some(i) => (&t2[..i], t2[i + 1..].parse::<i32>().map_err(|_| err())?),
        None => (t2, 0),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((a, b)) => (a, b),
        None => (mantissa, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err());
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    // digits * 10^(exp - frac_len) * 10^scale
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    // In i64: an exponent near the ends of i32 (`1e2147483647`) must not overflow.
    let shift = i64::from(exp) - frac_part.len() as i64 + i64::from(scale);
    if digits.is_empty() {
        return Ok(0);
    }
    if shift < 0 {
        let cut = usize::try_from(-shift).unwrap_or(usize::MAX);
        let (keep, dropped) = if cut >= digits.len() { ("", digits) } else { digits.split_at(digits.len() - cut) };
        if dropped.bytes().any(|b| b != b'0') {
            return Err(MoneyError::TooPrecise(t.to_string(), scale));
        }
        if keep.is_empty() {
            return Ok(0);
        }
        return keep.parse::<i64>().map_err(|_| MoneyError::TooLarge(t.to_string()));
    }
    let base: i64 = digits.parse().map_err(|_| MoneyError::TooLarge(t.to_string()))?;
    u32::try_from(shift)
        .ok()
        .and_then(|shift| 10i64.checked_pow(shift))
        .and_then(|m| base.checked_mul(m))
        .ok_or_else(|| MoneyError::TooLarge(t.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimals_exactly() {
        let cases = [
            ("50", 50_000_000_000),
            ("50.0", 50_000_000_000),
            ("0.25", 250_000_000),
            ("1e-9", 1),
            ("2.5E1", 25_000_000_000),
            ("0", 0),
            (".5", 500_000_000),
        ];
        for (text, nanos) in cases {
            assert_eq!(Money::parse(text), Ok(Money(nanos)), "{text}");
        }
        assert_eq!(Price::parse("0.0000004"), Ok(Price(400_000)));
        assert_eq!(Price::parse("4e-7"), Ok(Price(400_000)));
        assert_eq!(Price::parse("0.000000075"), Ok(Price(75_000)));
    }

    #[test]
    fn rejects_bad_text() {
        assert!(matches!(Money::parse("-1"), Err(MoneyError::Negative(_))));
        assert!(matches!(Money::parse("abc"), Err(MoneyError::NotANumber(_))));
        assert!(matches!(Money::parse("1.2.3"), Err(MoneyError::NotANumber(_))));
        assert!(matches!(Money::parse("0.0000000001"), Err(MoneyError::TooPrecise(..))));
        assert!(matches!(Money::parse("1e30"), Err(MoneyError::TooLarge(_))));
        assert!(matches!(Money::parse("1e2147483647"), Err(MoneyError::TooLarge(_))));
        assert!(matches!(Money::parse("1e-2147483648"), Err(MoneyError::TooPrecise(..))));
        assert!(matches!(Money::parse(""), Err(MoneyError::NotANumber(_))));
    }

    #[test]
    fn cost_is_exact_and_rounds_up() {
        let usage = Usage { prompt_tokens: 1000, completion_tokens: 500, ..Usage::default() };
        let c =
            usage.cost(Price::parse("0.0000004").unwrap_or_default(), Price::parse("0.0000016").unwrap_or_default());
        assert_eq!(c, Money(400_000 + 800_000));
        let tiny = Usage { prompt_tokens: 1, completion_tokens: 0, ..Usage::default() }.cost(Price(1), Price(0));
        assert_eq!(tiny, Money(1));
        assert_eq!(Usage::default().cost(Price(5), Price(5)), Money(0));
    }

    /// Exponents at the ends of `i32` are refused or read as zero, never overflowed (the shift used to be
    /// computed in `i32`).
    #[test]
    fn extreme_exponents_do_not_overflow() {
        assert!(matches!(Money::parse("1e2147483647"), Err(MoneyError::TooLarge(_))));
        assert!(matches!(Money::parse("1.5e-2147483648"), Err(MoneyError::TooPrecise(..))));
        assert_eq!(Money::parse("0e2147483647"), Ok(Money::ZERO));
        assert_eq!(Money::parse("0.0e-2147483648"), Ok(Money::ZERO));
        assert!(matches!(Price::parse("1e-2147483648"), Err(MoneyError::TooPrecise(..))));
    }

    /// A cost saturates at the largest amount instead of wrapping (the sum of the two products used to
    /// overflow an i128), is never negative, and token totals saturate too.
    #[test]
    fn cost_saturates_and_is_never_negative() {
        let most = Usage { prompt_tokens: u64::MAX, completion_tokens: u64::MAX, ..Usage::default() };
        assert_eq!(most.cost(Price(i64::MAX), Price(i64::MAX)), Money(i64::MAX));
        assert_eq!(most.cost(Price(1_000_000), Price(0)), Money(i64::MAX));
        assert_eq!(most.cost(Price(1), Price(0)), Money(u64::MAX.div_ceil(1000) as i64));
        assert_eq!(most.total_tokens(), u64::MAX);
        let one = Usage { prompt_tokens: 1, completion_tokens: 1, ..Usage::default() };
        assert_eq!(one.cost(Price(-5_000), Price(1_000)), Money::ZERO);
        assert_eq!(one.cost(Price(i64::MIN), Price(i64::MIN)), Money::ZERO);
        // The rounding up is exact at the edge of a nano-unit.
        assert_eq!(one.cost(Price(1_000), Price(1_000)), Money(2));
        assert_eq!(one.cost(Price(1_000), Price(1_001)), Money(3));
    }

    #[test]
    fn absurd_numbers_saturate_instead_of_wrapping() {
        let absurd = Usage { prompt_tokens: u64::MAX, completion_tokens: u64::MAX, ..Usage::default() };
        assert_eq!(absurd.cost(Price(i64::MAX), Price(i64::MAX)), Money::MAX);
        assert_eq!(absurd.total_tokens(), u64::MAX);
        assert_eq!(Money::MAX.plus(Money(1)), Money::MAX);
        assert_eq!(Money(i64::MIN).minus(Money(1)), Money(i64::MIN));
        assert_eq!(Money::sum([Money::MAX, Money::MAX, Money(-5)]), Money::MAX);
        assert_eq!(Money::sum([Money(3), Money(4)]), Money(7));
        assert_eq!(Price::from_picos(-3), Price::ZERO);
        assert_eq!(Money(-7).at_least_zero(), Money::ZERO);
        assert_eq!(Money(1_000).permille(800), Money(800));
        assert_eq!(Money::MAX.permille(1000), Money::MAX);
    }

    #[test]
    fn affordable_tokens_never_overspend() {
        let (input, output) = (Price(2_000), Price(3_000));
        for room in [0i64, 1, 7, 1_000, 123_457] {
            for prompt in [0u64, 1, 10, 500] {
                for choices in [1u64, 3] {
                    let room = Money(room);
                    match affordable_completion_tokens(room, prompt, input, output, choices) {
                        Some(k) => {
                            let spent =
                                Usage { prompt_tokens: prompt, completion_tokens: k * choices, ..Usage::default() };
                            if k > 0 {
                                assert!(spent.cost(input, output) <= room, "{room} {prompt} {choices} {k}");
                                let more = Usage {
                                    prompt_tokens: prompt,
                                    completion_tokens: (k + 1) * choices,
                                    ..Usage::default()
                                };
                                assert!(more.cost(input, output) > room, "{room} {prompt} {choices} {k}+1");
                            }
                        }
                        None => panic!("output is not free"),
                    }
                }
            }
        }
        assert_eq!(affordable_completion_tokens(Money(10), 1, Price(1), Price::ZERO, 1), None);
        assert_eq!(affordable_completion_tokens(Money(0), 10_000, Price(1_000), Price::ZERO, 1), Some(0));
        assert_eq!(affordable_completion_tokens(Money::MAX, 0, Price(0), Price(1), 1), Some(u64::MAX));
    }

    #[test]
    fn displays_exactly() {
        assert_eq!(Money(50_000_000_000).to_string(), "50.00");
        assert_eq!(Money(50_020_000_000).to_string(), "50.02");
        assert_eq!(Money(123_000).to_string(), "0.000123");
        assert_eq!(Money(0).to_string(), "0.00");
        assert_eq!(Money::MAX.to_string(), "9223372036.854775807");
    }
}
