//! Exact money: amounts in integer nano-units (1e-9 of the configured currency, USD in the examples) and
//! per-token prices in integer pico-units (1e-12), parsed from decimal text without going through floats.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An amount of money in nano-units (1e-9 of the configured unit). Sums and comparisons are exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(pub i64);

/// A price per token in pico-units (1e-12 of the configured unit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price(pub i64);

/// Token counts reported by an upstream (or counted by the gateway).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
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

impl Money {
    /// Zero.
    pub const ZERO: Money = Money(0);

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

/// Cost of `usage` at the given prices, rounded up to the next nano-unit (never under-charges).
pub fn cost(usage: Usage, input: Price, output: Price) -> Money {
    let picos = usage.prompt_tokens as i128 * input.0 as i128 + usage.completion_tokens as i128 * output.0 as i128;
    let scale = 10i128.pow(PRICE_SCALE - MONEY_SCALE);
    let nanos = (picos + scale - 1) / scale;
    Money(i64::try_from(nanos).unwrap_or(i64::MAX))
}

impl Usage {
    /// Cost of this usage at the given input and output prices.
    pub fn cost(self, input: Price, output: Price) -> Money {
        cost(self, input, output)
    }

    /// prompt + completion.
    pub fn total_tokens(self) -> u64 {
        self.prompt_tokens + self.completion_tokens
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
    let shift = exp - frac_part.len() as i32 + scale as i32;
    if digits.is_empty() {
        return Ok(0);
    }
    if shift < 0 {
        let cut = (-shift) as usize;
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
    10i64.checked_pow(shift as u32).and_then(|m| base.checked_mul(m)).ok_or_else(|| MoneyError::TooLarge(t.to_string()))
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
        assert!(matches!(Money::parse(""), Err(MoneyError::NotANumber(_))));
    }

    #[test]
    fn cost_is_exact_and_rounds_up() {
        let usage = Usage { prompt_tokens: 1000, completion_tokens: 500 };
        let c =
            usage.cost(Price::parse("0.0000004").unwrap_or_default(), Price::parse("0.0000016").unwrap_or_default());
        assert_eq!(c, Money(400_000 + 800_000));
        let tiny = Usage { prompt_tokens: 1, completion_tokens: 0 }.cost(Price(1), Price(0));
        assert_eq!(tiny, Money(1));
        assert_eq!(Usage::default().cost(Price(5), Price(5)), Money(0));
    }

    #[test]
    fn displays_exactly() {
        assert_eq!(Money(50_000_000_000).to_string(), "50.00");
        assert_eq!(Money(50_020_000_000).to_string(), "50.02");
        assert_eq!(Money(123_000).to_string(), "0.000123");
        assert_eq!(Money(0).to_string(), "0.00");
    }
}
